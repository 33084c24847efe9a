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
    var aliases: [ObjectReference] { Self.aliases(entity, explicitID, values) }

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
