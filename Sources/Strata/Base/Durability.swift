/// When a save counts as done.
public enum Durability: String, Sendable {
    /// A save returns after its transaction is on disk (fsync). The default.
    case durable
    /// Commits skip fsync; the writer asks for a flush on a background queue at most
    /// ``StoreConfiguration/relaxedSyncIntervalMs`` after a commit and commits on meanwhile (a
    /// request made while a flush runs is served by one more flush after it). A process crash
    /// loses nothing (the OS has the pages); an OS crash or power loss can lose the transactions
    /// of about the last interval plus one or two flushes' time; LMDB keeps the store intact then
    /// only if the file system preserves the order of writes (see the README's Durability section).
    case relaxed
}
