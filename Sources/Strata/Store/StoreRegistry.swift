import Foundation
import Glibc
import Synchronization

/// The stores open in this process, by canonical path. LMDB forbids opening one environment twice
/// in a process (its locks are per process), so a second `open` returns the store already open,
/// or a clear error when it was asked for with different options.
final class StoreRegistry: Sendable {
    static let shared = StoreRegistry()
    private struct WeakStore: Sendable { weak var store: Store? }
    private let stores = Mutex<[String: WeakStore]>([:])
    /// Paths of stores whose close was handed to another thread (a close on the writer's queue)
    /// and has not finished: their environment is still open, so they cannot be opened again yet.
    private let closing = Mutex<[String: Int]>([:])

    /// Marks `path` as closing in the background (until ``endClosing(path:)``).
    func beginClosing(path: String) { closing.withLock { $0[path, default: 0] += 1 } }

    /// The background close of a store at `path` has finished.
    func endClosing(path: String) {
        closing.withLock { c in
            c[path, default: 1] -= 1
            if c[path] == 0 { c[path] = nil }
        }
    }

    static func canonical(_ path: String) -> String {
        URL(fileURLWithPath: path).standardizedFileURL.resolvingSymlinksInPath().path
    }

    func open(path: String, configuration: StoreConfiguration, schema: Schema?, deleteOnClose: Bool) throws -> Store {
        let key = Self.canonical(path)
        // The lock is held across the open so two tasks opening the same path cannot both succeed.
        if closing.withLock({ $0[key] != nil }) {
            throw StrataError.alreadyOpen(path: key, reason: "it is still closing (closed from its writer's queue); try again when that ends")
        }
        return try stores.withLock { stores in
            // An instance inherited through fork() belongs to the parent: the child opens its own.
            if let existing = stores[key]?.store, !existing.isClosed, existing.processID == getpid() {
                if existing.configuration.readOnly != configuration.readOnly {
                    throw StrataError.alreadyOpen(path: key, reason: "it is open \(existing.configuration.readOnly ? "read-only" : "read-write"); close it first")
                }
                if let schema, schema.canonicalJSON != existing.schema.canonicalJSON {
                    throw StrataError.alreadyOpen(path: key, reason: "it is open with a different schema (\(existing.schema.model) v\(existing.schema.version))")
                }
                return existing
            }
            let store = try Store.make(path: key, schema: schema, configuration: configuration, deleteOnClose: deleteOnClose)
            stores[key] = WeakStore(store: store)
            return store
        }
    }

    /// The store open in this process at `path`, if any.
    func existing(path: String) -> Store? {
        stores.withLock { $0[Self.canonical(path)]?.store }.flatMap { $0.isClosed ? nil : $0 }
    }

    /// Forgets the store with `storeID` at `path` (or a released one), not a newer store there.
    func remove(path: String, storeID: ObjectIdentifier) {
        stores.withLock { stores in
            if let current = stores[path], current.store.map(ObjectIdentifier.init) ?? storeID == storeID { stores[path] = nil }
        }
    }
}
