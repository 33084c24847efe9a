/// Test hooks of ``Store/verify(rebuild:progress:)``, keyed by store path (tests run side by side
/// in one process). Not API.
enum VerifyTestHooks {
    /// Run on the calling thread before the in-memory check folds the log, after its reading
    /// thread started: a test makes the map move there, which must wait for the fold.
    static let beforeFold = Locked<[String: @Sendable () -> Void]>([:])
}
