/// A read transaction held open by its owner (a pinned snapshot), each read of which holds the
/// map lock shared for as long as it runs and no longer.
package protocol PinnedRead: Sendable {
    func readPinned<R>(_ body: (LMDBTransaction) throws -> R) throws -> R
}
