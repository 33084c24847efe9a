/// Limits on schemas, enforced by the loader.
public enum SchemaLimits {
    /// Entity tags are one byte inside link and index tags.
    public static let maxEntities = 255
    /// The most attributes an entity may have.
    public static let maxAttributesPerEntity = 1000
    /// Relationship, index and unique positions are one byte inside their tags.
    public static let maxRelationshipsPerEntity = 255
    /// The most unique constraints an entity may have, and the most indexes (each list on its own).
    public static let maxIndexesPerEntity = 255
    /// The most attributes one index or unique constraint may span.
    public static let maxAttributesPerIndex = 4
    /// The highest schema version: a cluster keeps it in a PostgreSQL `integer` (32 bits, signed).
    public static let maxVersion = Int(Int32.max)
    /// The longest name of an entity, attribute or relationship, in bytes (names are ASCII identifiers).
    public static let maxNameBytes = 64
    /// The largest schema file read, in bytes: above the largest schema the other limits allow
    /// written out (about 10 MB: 255 entities of 1,000 attributes and 255 indexes and uniques
    /// each), so that a file given by mistake (a log, a disk image) is refused, not read whole
    /// into memory. The file is parsed whole before its keys are checked, and the memory grows
    /// with it (64 MiB of tiny JSON arrays took 1.6 GB to parse).
    public static let maxFileBytes = 16 << 20
}
