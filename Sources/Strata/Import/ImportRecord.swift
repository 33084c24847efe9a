/// One input record, validated against the schema and ready to become change-set operations.
struct ImportRecord {
    let entity: EntityDescription
    let explicitID: ObjectID?
    let values: [Value]
    /// One relationship edit: targets to link, or nil to clear a to-one.
    typealias Link = (relationship: RelationshipDescription, targets: [ObjectReference]?)
    /// Relationship edits, in the order of the input's fields.
    let links: [Link]
    /// How the record itself is found again: its id, or its first unique constraint's values.
    let reference: ObjectReference
    let line: Int
    /// Every way another record may refer to this one: its explicit id and each unique key
    /// whose values are all set.
    let aliases: [ObjectReference]
    /// The ``digest(_:)`` of each of ``aliases``, in order.
    let aliasDigests: [UInt64]
    /// The ``digest(_:)`` of every target of ``links``, in order (a link's targets one after the
    /// other; a cleared to-one has none). Worked out once, where the record is parsed (on the
    /// reading thread), not at each of the import's looks at a target.
    let targetDigests: [UInt64]

    init(entity: EntityDescription, explicitID: ObjectID?, values: [Value], links: [Link],
         reference: ObjectReference, line: Int) {
        self.entity = entity
        self.explicitID = explicitID
        self.values = values
        self.links = links
        self.reference = reference
        self.line = line
        aliases = Self.aliases(entity, explicitID, values)
        aliasDigests = aliases.map(Self.digest)
        var digests: [UInt64] = []
        for (_, targets) in links {
            for t in targets ?? [] { digests.append(Self.digest(t)) }
        }
        targetDigests = digests
    }

    /// The keys an object of `entity` with this explicit id and these values (one per attribute,
    /// null where there is none) goes by: its id, and each unique constraint all of whose values
    /// it has.
    static func aliases(_ entity: EntityDescription, _ explicitID: ObjectID?, _ values: [Value]) -> [ObjectReference] {
        var refs: [ObjectReference] = explicitID.map { [.id($0)] } ?? []
        for (i, u) in entity.uniques.enumerated() {
            let key = u.attributes.map { values[$0] }
            if !key.contains(where: \.isNull) {
                refs.append(.unique(entityTag: entity.tag, constraint: i, values: key))
            }
        }
        return refs
    }

    /// A 64-bit digest of a reference, for presence and duplicate checks with bounded memory.
    static func digest(_ ref: ObjectReference) -> UInt64 {
        var h = Hasher()
        switch ref {
        case .id(let id):
            h.combine(0)
            h.combine(id)
        case .unique(let tag, let c, let values):
            h.combine(1)
            h.combine(tag)
            h.combine(c)
            for v in values { h.combine(v) }
        }
        return UInt64(bitPattern: Int64(h.finalize()))
    }
}
