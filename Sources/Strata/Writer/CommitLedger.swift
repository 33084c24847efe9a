import Foundation

/// The ids of the transactions this process's writer commits with one metadata value (for
/// example `importID` = an import's id), recorded as they are published, before the saves that
/// made them return.
///
/// A save that changes nothing returns the store's last transaction id without writing, and
/// that id may be another process's transaction (or another save's of this process): the saver
/// asks ``take(_:)`` whether the id it got is one of its own commits. Two savers of this process
/// using the same metadata value at the same time would see each other's commits; no two
/// savers of different processes ever do.
final class CommitLedger: LocalCommitRecorder {
    let key: String
    let value: String
    private let recorded = Locked<Set<TransactionID>>([])

    init(key: String, value: String) {
        self.key = key
        self.value = value
    }

    func record(_ entry: LogEntry) {
        guard entry.metadata[key] == value else { return }
        _ = recorded.withLock { $0.insert(entry.transactionID) }
    }

    /// Whether `id` was committed with this ledger's metadata value since the last call that
    /// took it; forgets it.
    func take(_ id: TransactionID) -> Bool {
        recorded.withLock { $0.remove(id) != nil }
    }
}

/// What ``ChangeHub/register(_:)`` takes: a recorder of this process's commits, called by the
/// writer before the saves that made them return. Held weakly.
protocol LocalCommitRecorder: AnyObject, Sendable {
    func record(_ entry: LogEntry)
}

/// The log entries this process commits under one author while it is registered, so a saver
/// gets the entry its save wrote as the writer wrote it, without reading it back from the log
/// (a compaction may have squashed it meanwhile). Registered around one save: other saves with
/// the same author in that window are recorded too, and the saver takes its own by id.
final class CommitCatcher: LocalCommitRecorder {
    let author: String
    private let caught = Locked<[TransactionID: LogEntry]>([:])

    init(author: String) { self.author = author }

    func record(_ entry: LogEntry) {
        guard entry.author == author else { return }
        caught.withLock { $0[entry.transactionID] = entry }
    }

    /// The entry committed as `id` under this author while registered, if any (none when the
    /// save changed nothing and `id` is an earlier transaction).
    func take(_ id: TransactionID) -> LogEntry? {
        caught.withLock { $0.removeValue(forKey: id) }
    }
}
