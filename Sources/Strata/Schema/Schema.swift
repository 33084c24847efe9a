/// One version of a model's schema: the entities a store holds.
///
/// Loaded from `Schemas/<model>/v<N>.json` (see README, "Schema files"):
/// ```swift
/// let schema = try Schema.load(directory: URL(fileURLWithPath: "Schemas/library"))
/// schema.entity(named: "Track")?.attribute(named: "title")?.type   // .string
/// ```
public struct Schema: Sendable {
    /// The values behind a schema, shared by its copies: a schema is copied into every read
    /// view and resolver, so a copy is one reference count, not one per field.
    private final class Storage: Sendable {
        let model: String
        let version: Int
        let entities: [EntityDescription]
        let canonicalJSON: String
        let migrationSteps: [MigrationStep]
        let byName: [String: EntityDescription]
        /// Indexed by entity tag (tags are 1...``Schema/maxEntities``): no hashing per record.
        let byTag: [EntityDescription?]
        /// Every relationship's ``LinkRule``, by entity tag and then position: what a save checks
        /// of each link, found by two array reads and copied without a reference count.
        let linkRules: [[LinkRule]]
        let typeChecks = TypeCheckCache()

        init(model: String, version: Int, entities: [EntityDescription], canonicalJSON: String,
             migrationSteps: [MigrationStep]) {
            self.model = model
            self.version = version
            self.entities = entities
            self.canonicalJSON = canonicalJSON
            self.migrationSteps = migrationSteps
            byName = Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) })
            var tags = [EntityDescription?](repeating: nil, count: Int(entities.map(\.tag).max() ?? 0) + 1)
            for e in entities { tags[Int(e.tag)] = e }
            byTag = tags
            var rules = [[LinkRule]](repeating: [], count: tags.count)
            let named = byName
            for e in entities {
                rules[Int(e.tag)] = e.relationships.map { r in
                    let destination = named[r.destination]
                    let inverse = destination?.relationship(named: r.inverseName)
                    return LinkRule(tag: r.tag, inverseTag: inverse?.tag ?? 0, sourceTag: e.tag,
                                    destinationTag: destination?.tag ?? 0, isToMany: r.isToMany,
                                    inverseIsToMany: inverse?.isToMany ?? true)
                }
            }
            linkRules = rules
        }
    }
    private let storage: Storage

    /// The model name (`"library"`).
    public var model: String { storage.model }
    /// The version (the N of `vN.json`).
    public var version: Int { storage.version }
    /// The entities, in the order of the schema file.
    public var entities: [EntityDescription] { storage.entities }
    /// The schema as canonical JSON; stored in the store so tools can read it without the files.
    public var canonicalJSON: String { storage.canonicalJSON }
    /// Steps from version `version - 1` (empty for version 1).
    public var migrationSteps: [MigrationStep] { storage.migrationSteps }
    private var byName: [String: EntityDescription] { storage.byName }
    var typeChecks: TypeCheckCache { storage.typeChecks }

    init(model: String, version: Int, entities: [EntityDescription], canonicalJSON: String,
         migrationSteps: [MigrationStep] = []) {
        storage = Storage(model: model, version: version, entities: entities, canonicalJSON: canonicalJSON,
                          migrationSteps: migrationSteps)
    }

    /// The entity named `name`, if the schema has one.
    public func entity(named name: String) -> EntityDescription? { byName[name] }
    /// The entity with tag `tag` (the tag stored in its objects' ids), if the schema has one.
    public func entity(tag: UInt16) -> EntityDescription? {
        let byTag = storage.byTag
        return Int(tag) < byTag.count ? byTag[Int(tag)] : nil
    }

    /// The relationship with link tag `tag`.
    func relationship(tag: UInt16) -> RelationshipDescription? {
        guard let e = entity(tag: tag >> 8), (tag & 0xff) >= 1,
              Int(tag & 0xff) <= e.relationships.count else { return nil }
        return e.relationships[Int(tag & 0xff) - 1]
    }

    /// What a save checks of the relationship with link tag `tag` (nil for an unknown tag).
    func linkRule(tag: UInt16) -> LinkRule? {
        let rules = storage.linkRules, entity = Int(tag >> 8), position = Int(tag & 0xff)
        guard entity < rules.count, position >= 1, position <= rules[entity].count else { return nil }
        return rules[entity][position - 1]
    }

    /// The tag of the inverse of the relationship with tag `tag` (nil for an unknown tag).
    func inverseTag(of tag: UInt16) -> UInt16? {
        guard let inverse = linkRule(tag: tag)?.inverseTag, inverse != 0 else { return nil }
        return inverse
    }

    /// The inverse of `relationship`.
    func inverse(of relationship: RelationshipDescription) -> RelationshipDescription {
        // The loader proved every inverse exists and points back. Found by tag: every link a
        // save writes asks for its inverse, and two lookups by name (the destination entity,
        // then its relationship) were a tenth of the writer's link step.
        self.relationship(tag: inverseTag(of: relationship.tag)!)!
    }
}

extension Schema {
    /// Refuses a `string` or `bytes` default longer than `maxValueBytes`
    /// (``StoreConfiguration/maxValueBytes``): every object given it would be refused.
    ///
    /// - Throws: ``SchemaError`` naming the entity and attribute.
    func checkDefaults(maxValueBytes: Int) throws {
        for e in entities {
            for a in e.attributes {
                let size: Int
                switch a.defaultValue {
                case .string(let s)?: size = s.utf8.count
                case .bytes(let b)?: size = b.count
                default: continue
                }
                guard size <= maxValueBytes else {
                    throw SchemaError(file: "\(model) v\(version)", entity: e.name, field: "attribute '\(a.name)'",
                                      reason: "its default of \(size) bytes exceeds maxValueBytes (\(maxValueBytes)): " +
                                              "every object given it would be refused")
                }
            }
        }
    }
}
