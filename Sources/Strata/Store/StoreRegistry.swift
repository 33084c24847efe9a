import Foundation
import Glibc

/// The stores open in this process, by canonical path. LMDB forbids opening one environment twice
/// in a process (its locks are per process), so a second `open` returns the store already open,
/// or a clear error when it was asked for with different options.
final class StoreRegistry: Sendable {
    static let shared = StoreRegistry()
    private struct WeakStore: Sendable {
        weak var store: Store?
        /// The process that opened it: in a child made by fork() the entry is the parent's, and
        /// the child's own deinit and close never remove it.
        var processID: pid_t = getpid()
    }
    /// The open stores, and the paths of stores whose close was handed to another thread (a
    /// close on the writer's queue) and has not finished: their environment is still open, so
    /// they cannot be opened again yet. One lock for both, so `open` checks both at once.
    private struct Entries {
        var stores: [String: WeakStore] = [:]
        /// Background closes in flight, by path, with the process that started them (a child of
        /// fork() inherits the parent's counts, which its threads, gone, never lower).
        var closing: [String: (processID: pid_t, count: Int)] = [:]

        /// The entry of `path` made by this process, if any.
        func store(_ path: String) -> WeakStore? {
            stores[path].flatMap { $0.processID == getpid() ? $0 : nil }
        }

        /// Whether a background close of `path` started by this process has not finished.
        func isClosing(_ path: String) -> Bool {
            closing[path].map { $0.processID == getpid() && $0.count > 0 } ?? false
        }
    }
    private let entries = Locked(Entries())

    /// Marks `path` as closing in the background (until ``endClosing(path:)``).
    func beginClosing(path: String) {
        entries.withLock { e in
            let pid = getpid()
            let count = e.closing[path].map { $0.processID == pid ? $0.count : 0 } ?? 0
            e.closing[path] = (pid, count + 1)
        }
    }

    /// The background close of a store at `path` has finished.
    func endClosing(path: String) {
        entries.withLock { e in
            guard let c = e.closing[path], c.processID == getpid() else { return }
            e.closing[path] = c.count > 1 ? (c.processID, c.count - 1) : nil
        }
    }

    /// The path a store is known by: absolute, with every symbolic link of its existing part
    /// resolved by the kernel (`realpath`), so that `a/link/../s` is where the kernel goes (the
    /// directory holding the link's target), not `a/s` as a textual clean-up makes it. The part
    /// that does not exist yet (a store to create) is cleaned up textually after it.
    static func canonical(_ path: String) -> String {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        var head = absolute
        var tail: [String] = []
        while true {
            if let resolved = realpath(head, nil) {
                let base = String(cString: resolved)
                free(resolved)
                guard !tail.isEmpty else { return base }
                let joined = (base == "/" ? "" : base) + "/" + tail.reversed().joined(separator: "/")
                return URL(fileURLWithPath: joined).standardizedFileURL.path
            }
            let url = URL(fileURLWithPath: head)
            let parent = url.deletingLastPathComponent().path
            guard parent != head, !parent.isEmpty else { break }
            tail.append(url.lastPathComponent)
            head = parent
        }
        return URL(fileURLWithPath: absolute).standardizedFileURL.path
    }

    /// With `sameOptions` (``Store/open(at:schema:configuration:)``), an instance open with other
    /// options is refused; the tools' opens (`openExisting`, `openReadOnly`, a migration's) take it
    /// as it is, read-only or not aside.
    func open(path: String, configuration: StoreConfiguration, schema: Schema?, deleteOnClose: Bool,
              sameOptions: Bool = false) throws -> Store {
        let key = Self.canonical(path)
        // The lock is held across the open so two tasks opening the same path cannot both succeed.
        // Declared out here so that, if this is the last reference, the store is released (and
        // its deinit, which takes this lock, runs) after the lock.
        var existing: Store?
        defer { existing = nil }
        return try entries.withLock { e in
            // An entry made by the parent before a fork() is not this process's (the child opens
            // its own instance).
            let entry = e.store(key)
            existing = entry?.store
            // Still closing, its environment still open: its close was handed to another thread,
            // or it is closed or released (in its deinit) and its entry not yet removed, which
            // the close does last.
            let closing = e.isClosing(key) || entry != nil && existing.map { $0.isClosed } ?? true
            if closing {
                throw StrataError.alreadyOpen(path: key,
                                              reason: "it is still closing; try again when close() has returned")
            }
            // An instance inherited through fork() belongs to the parent: the child opens its own.
            if let existing, !existing.isClosed, existing.processID == getpid() {
                if existing.configuration.readOnly != configuration.readOnly {
                    throw StrataError.alreadyOpen(
                        path: key,
                        reason: "it is open \(existing.configuration.readOnly ? "read-only" : "read-write"); close " +
                                "it first")
                }
                if let schema, !schema.canonicalJSON.utf8.elementsEqual(existing.schema.canonicalJSON.utf8) {
                    throw StrataError.alreadyOpen(path: key,
                                                  reason: "it is open with a different schema " +
                                                          "(\(existing.schema.model) v\(existing.schema.version))")
                }
                // Any other option too: the caller would get the instance's (a store it asked to
                // be durable, relaxed) without knowing.
                let differing = sameOptions ? existing.configuration.differences(from: configuration) : []
                if !differing.isEmpty {
                    throw StrataError.alreadyOpen(path: key,
                                                  reason: "it is open with other options (\(differing.joined(separator: ", "))); " +
                                                          "open it with the same ones, or close it first")
                }
                return existing
            }
            let store = try Store.make(path: key, schema: schema, configuration: configuration,
                                       deleteOnClose: deleteOnClose)
            e.stores[key] = WeakStore(store: store)
            return store
        }
    }

    /// The store open in this process at `path`, if any.
    func existing(path: String) -> Store? {
        entries.withLock { $0.store(Self.canonical(path))?.store }.flatMap { $0.isClosed ? nil : $0 }
    }

    /// Forgets the store with `storeID` at `path` (or a released one), not a newer store there.
    func remove(path: String, storeID: ObjectIdentifier) {
        entries.withLock { e in
            if let current = e.store(path), (current.store.map(ObjectIdentifier.init) ?? storeID) == storeID {
                e.stores[path] = nil
            }
        }
    }
}
