/// A unique key an object of a change set could not take when it was written, because another
/// object held it then.
struct DeferredUniqueKey {
    let key: [UInt8]
    let unique: IndexDescription
    let entity: EntityDescription
    let id: ObjectID
}
