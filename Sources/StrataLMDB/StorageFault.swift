/// The layer's own errors for the conditions of ``EnvironmentPolicy``.
package enum StorageFault: Error, Sendable, Equatable, CustomStringConvertible {
    case closed(path: String)
    case notAStore(path: String, reason: String)
    case busy(path: String)
    case damaged(path: String, reason: String)
    case unsafeFile(path: String, reason: String)
    case corruptKey(database: String, reason: String)

    package var description: String {
        switch self {
        case .closed(let p): "\(p): the environment is closed"
        case .notAStore(let p, let r): "\(p): not an LMDB environment: \(r)"
        case .busy(let p): "\(p): busy: other processes keep writing"
        case .damaged(let p, let r): "\(p): damaged: \(r)"
        case .unsafeFile(let p, let r): "\(p): \(r)"
        case .corruptKey(let d, let r): "database '\(d)': \(r)"
        }
    }
}
