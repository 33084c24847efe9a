/// What deleting the source object does to the objects a relationship points at.
public enum DeleteRule: String, Sendable, CaseIterable {
    /// Unlink the targets (their inverse is cleared).
    case nullify
    /// Delete the targets too.
    case cascade
    /// Refuse the delete while any target is linked.
    case deny
}
