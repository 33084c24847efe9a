/// The state a save is resolved against: the LMDB state inside the writer's transaction
/// (``StateApplier``), or a child context's in-memory overlay over its parents (``OverlayApplier``).
/// ``SaveResolver`` works on either, so a child applies exactly the rules the writer applies.
protocol StateStore {
    var schema: Schema { get }
    func record(_ id: ObjectID) throws -> Record?
    func exists(_ id: ObjectID) throws -> Bool
    /// Targets linked from `from` through relationship `tag`, in id order.
    func targets(_ tag: UInt16, from: ObjectID) throws -> [ObjectID]
    /// Whether the edge `from` → `to` exists.
    func linked(_ tag: UInt16, from: ObjectID, to: ObjectID) throws -> Bool
    /// The object holding unique key `key`, if any.
    func uniqueOwner(_ key: [UInt8]) throws -> ObjectID?
    /// Applies one resolved change.
    mutating func apply(_ change: LoggedChange) throws
    /// Writes pending per-entity counts (a no-op where counts are derived).
    mutating func flushCounts() throws
    /// Whether a unique key another object holds is refused at once (false) or taken again when
    /// the change set ends (true; ``takeDeferredUniqueKeys()``), so that a set is judged on its
    /// result: two objects may swap unique values within it.
    var defersUniqueClashes: Bool { get set }
    /// Takes the unique keys put off while ``defersUniqueClashes`` was on; throws the first clash
    /// that is left.
    mutating func takeDeferredUniqueKeys() throws
}

extension StateStore {
    /// The values of `d`'s object when it still holds `d`'s key at the end of the set (a later
    /// change of the set may have moved it on, or deleted it); nil otherwise.
    func valuesStillHolding(_ d: DeferredUniqueKey) throws -> [Value]? {
        guard let r = try record(d.id),
              try Layout.uniqueKey(d.unique, record: r.values, entity: d.entity, id: d.id) == d.key else { return nil }
        return r.values
    }

    /// The keys of `deferred` their objects still hold at the end of the set, each with its
    /// object's values (putting a key changes no record, so this is the same before and after
    /// the others are put).
    func stillHeld(_ deferred: [DeferredUniqueKey]) throws -> [(DeferredUniqueKey, [Value])] {
        try deferred.compactMap { d in try valuesStillHolding(d).map { (d, $0) } }
    }
}
