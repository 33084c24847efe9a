/// What deleting the source object does to the objects a relationship points at.
public enum DeleteRule: String, Sendable, CaseIterable {
    /// Unlink the targets (their inverse is cleared).
    case nullify
    /// Delete the targets too.
    case cascade
    /// Refuse the delete while any target is linked that the same delete does not remove (a
    /// target that a cascade of the delete removes does not refuse it, whatever order the
    /// relationships are declared in).
    case deny
}
