/// Why a save was refused. The save is all-or-nothing: none of its changes were written.
public struct ValidationFailure: Error, Sendable, CustomStringConvertible, Equatable {
    /// What rule was broken.
    public enum Kind: String, Sendable {
        /// An id or reference names an entity the schema does not have.
        case unknownEntity
        /// An update, delete, link or reference names an object that does not exist.
        case objectNotFound
        /// An insert uses an id that another object already has.
        case duplicateID
        /// A value does not have the attribute's type (or is a double that is not finite).
        case wrongType
        /// A required attribute has no value (or an upsert lacks a value of its unique key).
        case requiredAttribute
        /// A required to-one relationship is unset when the changes reach the store.
        case requiredRelationship
        /// Another object already holds the values of a unique constraint.
        case uniqueConstraint
        /// A delete is refused by a relationship whose delete rule is ``DeleteRule/deny``.
        case deleteDenied
        /// A link's source or target is not of the entity the relationship belongs to or points at.
        case wrongDestination
        /// A value is larger than ``StoreConfiguration/maxValueBytes``, or a unique constraint's values make a key
        /// longer than LMDB accepts.
        case valueTooLarge
        /// An attribute position, a number of values or a unique constraint that the entity does not have.
        case unknownAttribute
        /// A relationship tag the schema does not have, or an unlink of a to-many without a target.
        case unknownRelationship

        /// The rule in words, as messages name it (`unique constraint`).
        public var words: String {
            switch self {
            case .unknownEntity: "unknown entity"
            case .objectNotFound: "object not found"
            case .duplicateID: "duplicate id"
            case .wrongType: "wrong type"
            case .requiredAttribute: "required attribute"
            case .requiredRelationship: "required relationship"
            case .uniqueConstraint: "unique constraint"
            case .deleteDenied: "delete denied"
            case .wrongDestination: "wrong destination"
            case .valueTooLarge: "value too large"
            case .unknownAttribute: "unknown attribute"
            case .unknownRelationship: "unknown relationship"
            }
        }
    }
    /// The rule that was broken.
    public let kind: Kind
    /// The entity concerned.
    public let entity: String
    /// The object concerned, when there is one.
    public let objectID: ObjectID?
    /// The attribute(s) or relationship concerned.
    public let field: String?
    /// What was wrong, naming the values involved.
    public let reason: String

    /// The failure as `rule: Entity id, field: reason`, the rule in words (``Kind/words``).
    public var description: String {
        var s = "\(kind.words): \(entity)"
        if let objectID { s += " \(objectID)" }
        if let field { s += ", \(field)" }
        return s + ": " + reason
    }
}
