/// The databases an environment opens at start-up, in one transaction, and keeps open for its
/// lifetime: named databases (created when missing, unless read-only), then one more handle,
/// chosen from what the environment holds.
package struct DatabaseSet: Sendable {
    /// The named databases, in the order of their handles.
    package let names: [String]
    /// The handle after the named ones, decided inside the opening transaction (which can read
    /// the named databases: a format probe): nil for LMDB's main (unnamed) database, or the
    /// position in ``names`` of a named database whose handle serves again.
    package let lastHandle: @Sendable (LMDBTransaction, [LMDBDatabase]) throws -> Int?

    package init(names: [String], lastHandle: @escaping @Sendable (LMDBTransaction, [LMDBDatabase]) throws -> Int?) {
        self.names = names
        self.lastHandle = lastHandle
    }
}
