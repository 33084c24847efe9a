extension Schema {
    /// Checks a Swift entity type against this schema (cached per type).
    /// - Throws: ``StrataError/entityMismatch(type:reason:)`` naming the first difference.
    public func check<E: Entity>(_ type: E.Type) throws {
        let key = ObjectIdentifier(type)
        if typeChecks.contains(key) { return }
        let typeName = String(describing: type)
        func mismatch(_ reason: String) -> StrataError { .entityMismatch(type: typeName, reason: reason) }
        guard let e = entity(named: E.entityName) else {
            throw mismatch("schema \(model) v\(version) has no entity '\(E.entityName)'")
        }
        guard e.tag == E.entityTag else { throw mismatch("entity tag is \(E.entityTag), the schema's is \(e.tag)") }
        let declared = E.attributeDeclarations
        guard declared.count == e.attributes.count else {
            throw mismatch("declares \(declared.count) attributes, the schema has \(e.attributes.count) " +
                           "(\(e.attributes.map(\.name).joined(separator: ", ")))")
        }
        for (d, a) in zip(declared, e.attributes) {
            guard d.name == a.name else {
                throw mismatch("attribute #\(a.index) is '\(d.name)', the schema's is '\(a.name)'")
            }
            guard d.type == a.type else {
                throw mismatch("attribute '\(a.name)' is \(d.type.rawValue), the schema's is \(a.type.rawValue)")
            }
            guard d.isOptional == a.isOptional else {
                throw mismatch("attribute '\(a.name)' is \(d.isOptional ? "optional" : "required"), the schema's is " +
                               "\(a.isOptional ? "optional" : "required")")
            }
        }
        let rels = E.relationshipDeclarations
        guard rels.count == e.relationships.count else {
            throw mismatch("declares \(rels.count) relationships, the schema has \(e.relationships.count)")
        }
        for (d, r) in zip(rels, e.relationships) {
            guard d.name == r.name, d.destination == r.destination, d.isToMany == r.isToMany else {
                throw mismatch(
                    "relationship #\(r.index) is '\(d.name)' → \(d.destination)\(d.isToMany ? " (to-many)" : ""), " +
                    "the schema's is '\(r.name)' → \(r.destination)\(r.isToMany ? " (to-many)" : "")")
            }
        }
        typeChecks.insert(key)
    }
}
