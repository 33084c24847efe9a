/// One input record, validated against the schema and ready to become change-set operations.
///
/// A class: a record goes from the reading thread to the import through a `Result` and is
/// copied out of it several times there, and each copy of a structure holding four references
/// was four reference counts. Every property is a constant of a `Sendable` type.
final class ImportRecord: Sendable {
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

    init(entity: EntityDescription, explicitID: ObjectID?, values: [Value], links: [Link],
         reference: ObjectReference, line: Int) {
        self.entity = entity
        self.explicitID = explicitID
        self.values = values
        self.links = links
        self.reference = reference
        self.line = line
    }

    /// Every way another record may refer to this one: its explicit id and each unique key
    /// whose values are all set.
    var aliases: [ObjectReference] { Self.aliases(entity, explicitID, values) }

    /// The digests (``digest(_:)``) the import looks a record's keys and targets up by, worked
    /// out once for each record it writes (each is looked up three or four times), by the import
    /// itself: the reading thread, the busier one on most inputs, parses and nothing more.
    struct Digests {
        /// Of each of ``ImportRecord/aliases``, in order.
        let aliases: [UInt64]
        /// Of every target of ``ImportRecord/links``, in order (a link's targets one after the
        /// other; a cleared to-one has none).
        let targets: [UInt64]

        /// The digests of `record`, whose ``ImportRecord/aliases`` are `aliases`.
        init(_ record: ImportRecord, aliases: [ObjectReference]) {
            self.aliases = aliases.map(ImportRecord.digest)
            // Through the buffers, by field: each link's targets and each target read where
            // they are, with no copy of the link (its relationship description) or of a target.
            var targets: [UInt64] = []
            record.links.withUnsafeBufferPointer { links in
                for i in links.indices {
                    links[i].targets?.withUnsafeBufferPointer { list in
                        for j in list.indices { targets.append(ImportRecord.digest(list[j])) }
                    }
                }
            }
            self.targets = targets
        }
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
            // Through the buffer: each value hashed where it is, not copied out first.
            values.withUnsafeBufferPointer { for i in $0.indices { h.combine($0[i]) } }
        }
        return UInt64(bitPattern: Int64(h.finalize()))
    }
}
