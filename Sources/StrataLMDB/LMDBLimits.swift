/// Limits imposed by liblmdb 0.9.24 as built by Debian.
public enum LMDBLimits {
    /// `mdb_env_get_maxkeysize` for the default build: keys longer than this are rejected.
    public static let maxKeyBytes = 511
}
