import Glibc

/// The reads of a store the calling thread is inside, in a thread-specific value
/// (`pthread_getspecific`, a few nanoseconds) pointing to the innermost of a chain of frames on
/// the thread's stack. User code runs inside reads (a compaction's, a migration's or a verify's
/// `progress` callback, a custom merge closure of a child's `apply`, an export's `emit`), and
/// from there:
/// - a ``Store/close()`` of that store must not wait for the read it is part of (closing waits
///   for every read under way), so it closes in the background (``isInside(store:)``);
/// - a read of the same snapshot must not take its lock again, and uses the outer read's
///   transaction (``transaction(of:)``); a close of that snapshot is noted and done when the
///   outer read ends.
///
/// A store is named by its ``SnapshotRegistry`` (one per store, held by every snapshot).
enum ThreadReads {
    /// One read under way: the store's registry, the snapshot and its transaction (nil for a
    /// store's short read), and the frame outside it.
    private struct Frame {
        let store: ObjectIdentifier
        let snapshot: ObjectIdentifier?
        let transaction: OpaquePointer?
        let outer: UnsafeRawPointer?
    }

    /// The key; nil if the process is out of keys (then no read is marked: a close from inside
    /// one waits for itself, and a nested read locks its snapshot again, as before the marks).
    private static let key: pthread_key_t? = {
        var key = pthread_key_t()
        return pthread_key_create(&key, nil) == 0 ? key : nil
    }()

    /// The innermost frame on this thread for which `matches` holds.
    private static func frame(where matches: (Frame) -> Bool) -> Frame? {
        guard let key else { return nil }
        var next = pthread_getspecific(key).map { UnsafeRawPointer($0) }
        while let pointer = next {
            let frame = pointer.load(as: Frame.self)
            if matches(frame) { return frame }
            next = frame.outer
        }
        return nil
    }

    /// Whether the calling thread is inside a read of the store whose registry is `store`.
    static func isInside(store: SnapshotRegistry) -> Bool {
        let id = ObjectIdentifier(store)
        return frame { $0.store == id } != nil
    }

    /// The transaction of the read of `snapshot` the calling thread is inside, if any.
    static func transaction(of snapshot: Snapshot) -> OpaquePointer? {
        let id = ObjectIdentifier(snapshot)
        return frame { $0.snapshot == id }?.transaction
    }

    /// Runs `body` marked as inside a read of `store` (of `snapshot`, through `transaction`,
    /// when given); the frame lives on this stack for the call.
    static func marked<R>(store: SnapshotRegistry, snapshot: Snapshot? = nil, transaction: OpaquePointer? = nil,
                          _ body: () throws -> R) rethrows -> R {
        guard let key else { return try body() }
        let outer = pthread_getspecific(key)
        var frame = Frame(store: ObjectIdentifier(store), snapshot: snapshot.map(ObjectIdentifier.init),
                          transaction: transaction, outer: outer.map { UnsafeRawPointer($0) })
        return try withUnsafeMutablePointer(to: &frame) { pointer in
            // Refused only for want of memory (a thread's first value of a key past glibc's
            // first 32): then this read is not marked, as when the key could not be made.
            _ = pthread_setspecific(key, UnsafeRawPointer(pointer))
            // Back to the value it had, which this thread could already hold.
            defer { _ = pthread_setspecific(key, outer) }
            return try body()
        }
    }
}
