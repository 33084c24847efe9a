import Synchronization

/// Set when one side of a migration's build failed, so the other stops early.
final class MigrationCancellation: Sendable {
    private let flag = Atomic<Bool>(false)
    func cancel() { flag.store(true, ordering: .relaxed) }
    var isCancelled: Bool { flag.load(ordering: .relaxed) }
}

/// What a side of the build throws when the other side failed (never reported: the other
/// side's error is).
struct MigrationCancelled: Error {}
