/// Why a migration cannot run or failed; nothing was changed.
public struct MigrationError: Error, Sendable, CustomStringConvertible {
    /// What is wrong.
    public let reason: String
    /// The error as `migration: reason`.
    public var description: String { "migration: \(reason)" }
}
