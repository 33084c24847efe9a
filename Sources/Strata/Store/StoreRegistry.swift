import Foundation
import Glibc

/// The stores open in this process, by canonical path. LMDB forbids opening one environment twice
/// in a process (its locks are per process), so a second `open` returns the store already open,
/// or a clear error when it was asked for with different options.
final class StoreRegistry: Sendable {
    static let shared = StoreRegistry()
    private struct WeakStore: Sendable { weak var store: Store? }
    /// The open stores, and the paths of stores whose close was handed to another thread (a
    /// close on the writer's queue) and has not finished: their environment is still open, so
    /// they cannot be opened again yet. One lock for both, so `open` checks both at once.
    private struct Entries {
        var stores: [String: WeakStore] = [:]
        var closing: [String: Int] = [:]
    }
    private let entries = Locked(Entries())

    /// Marks `path` as closing in the background (until ``endClosing(path:)``).
    func beginClosing(path: String) { entries.withLock { $0.closing[path, default: 0] += 1 } }

    /// The background close of a store at `path` has finished.
    func endClosing(path: String) {
        entries.withLock { e in
            e.closing[path, default: 1] -= 1
            if e.closing[path] == 0 { e.closing[path] = nil }
        }
    }

    static func canonical(_ path: String) -> String {
        URL(fileURLWithPath: path).standardizedFileURL.resolvingSymlinksInPath().path
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
            let entry = e.stores[key]
            existing = entry?.store
            // Still closing, its environment still open: its close was handed to another thread,
            // or it is closed or released (in its deinit) and its entry not yet removed, which
            // the close does last. An instance inherited through fork() belongs to the parent.
            let closing = e.closing[key] != nil
                || entry != nil && existing.map { $0.isClosed && $0.processID == getpid() } ?? true
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
                if let schema, schema.canonicalJSON != existing.schema.canonicalJSON {
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
        entries.withLock { $0.stores[Self.canonical(path)]?.store }.flatMap { $0.isClosed ? nil : $0 }
    }

    /// Forgets the store with `storeID` at `path` (or a released one), not a newer store there.
    func remove(path: String, storeID: ObjectIdentifier) {
        entries.withLock { e in
            if let current = e.stores[path], (current.store.map(ObjectIdentifier.init) ?? storeID) == storeID {
                e.stores[path] = nil
            }
        }
    }
}
