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

    static func canonical(_ path: String) -> String {
        URL(fileURLWithPath: path).standardizedFileURL.resolvingSymlinksInPath().path
    }

    func open(path: String, configuration: StoreConfiguration, schema: Schema?, deleteOnClose: Bool) throws -> Store {
        let key = Self.canonical(path)
        // The lock is held across the open so two tasks opening the same path cannot both succeed.
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

    func remove(path: String, store: Store) {
        stores.withLock { stores in
            if let current = stores[path], current.store == nil || current.store === store { stores[path] = nil }
        }
    }
}
