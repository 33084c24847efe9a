/// Reads of one state: a base with some layers merged over it.
protocol LayeredState {
    func record(_ id: ObjectID) throws -> Record?
    func exists(_ id: ObjectID) throws -> Bool
    func targets(_ tag: UInt16, from: ObjectID) throws -> [ObjectID]
    func linked(_ tag: UInt16, from: ObjectID, to: ObjectID) throws -> Bool
    /// The object that holds unique key `key` in this state, passing over the owners in
    /// `excluding` (and looking further down for another).
    func uniqueOwner(_ key: ByteKey, excluding: Set<ObjectID>) throws -> ObjectID?
    func objectCount(_ entity: EntityDescription) throws -> Int
    /// What the state is: the base's LMDB transaction and the revisions of its layers.
    var basis: Overlay.CountBasis { get }
}
