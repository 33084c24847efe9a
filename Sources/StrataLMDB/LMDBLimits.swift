/// Limits imposed by liblmdb 0.9.24 as built by Debian.
public enum LMDBLimits {
    /// `mdb_env_get_maxkeysize` for the default build: keys longer than this are rejected.
    public static let maxKeyBytes = 511
    /// The longest value `mdb_put` stores (its `MAXDATASIZE`, 4 GiB − 1): longer is refused as
    /// `MDB_BAD_VALSIZE`, which the puts here report with the value's size and this limit. (Not
    /// `StoreConfiguration.maxValueBytes`, the longest string or bytes value of an attribute.)
    public static let maxDataBytes = Int(UInt32.max)
}
