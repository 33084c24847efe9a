/// Where a store stands against the app's schema versions.
public enum MigrationStatus: Sendable, Equatable {
    /// The store is at the app's last version.
    case upToDate(version: Int)
    /// The store is at `from`; the app's schemas reach `to`, through these steps.
    case needsMigration(from: Int, to: Int, steps: [String])
    /// The store was written by a newer version than the app knows.
    case tooNew(store: Int, app: Int)
}
