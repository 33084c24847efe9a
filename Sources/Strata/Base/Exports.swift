// The LMDB layer's public types (``LMDBError``, ``LMDBLimits``) are part of Strata's API: a
// ``StrataError/lmdb(_:)`` carries one.
@_exported import StrataLMDB
