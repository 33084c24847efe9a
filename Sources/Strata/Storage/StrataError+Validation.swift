extension StrataError {
    /// A unique key of `values` that `owner` already holds.
    static func uniqueClash(_ unique: IndexDescription, _ e: EntityDescription, _ values: [Value], id: ObjectID,
                            owner: ObjectID) -> StrataError {
        let shown = unique.attributes.map { "\(e.attributes[$0].name)=\(values[$0].shown)" }.joined(separator: ", ")
        return .validation(
            ValidationFailure(kind: .uniqueConstraint, entity: e.name, objectID: id,
                              field: Layout.uniqueFieldName(unique, e), reason: "\(shown) is already used by \(owner)"))
    }

    /// An insert whose id is taken.
    static func duplicateID(_ e: EntityDescription, _ id: ObjectID) -> StrataError {
        .validation(ValidationFailure(kind: .duplicateID, entity: e.name, objectID: id, field: nil,
                                      reason: "an object with this id already exists"))
    }
}
