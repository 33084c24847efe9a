import Dispatch
import Glibc
import Logging
import StrataLMDB

/// The state of a bulk load, held in memory while the load's saves are resolved against it
/// (``BulkMemoryApplier``, through the writer's own ``SaveResolver``), then written into the
/// load's new generation once, every database in key order (``write(into:)``). A load from a
/// store with objects starts from its state, loaded entry by entry (``loadObject(key:record:)``,
/// ``loadLinkEntry(key:)``, ``loadUnique(key:owner:)``) where a copy would have copied it.
///
/// Resolving a save against the B-trees puts every unique and link key at a random place of its
/// tree, page copies and cache misses included; here a save costs hash-table lookups, and the
/// trees are built with appends at the end. The state is what ``StateApplier`` would have left
/// in the B-trees, change for change (the same resolution, the same rules for duplicate ids and
/// unique keys), so the generation is byte for byte what the saves would have written.
///
/// Memory: each object's encoded record (in chunks of ``ByteArena/chunkBytes``), its id, its
/// place and 8 bytes in a table of ids (about 40 bytes an object); each unique key's bytes and
/// about 24 bytes more; 4 bytes a head (relationship of an object) and 8 a link entry, and 16
/// more for an entry of a many-to-many head of ``defaultBigHeadLength`` entries or more. No
/// object or key has an allocation of its own. A bulk load uses it only for an input below
/// ``ImportOptions/bulkInMemoryMaxInputBytes``; larger ones save through the B-trees.
///
/// Thread safety (why `@unchecked Sendable` is sound): ``Store/beginBulkLoad(inMemory:storeInMemoryAtMost:expectedObjects:bigHeadLength:)``
/// creates one, loads the store's state into it on one queue and waits for that to end (the
/// continuation it resumes orders the loading before everything after), then hands it to the
/// ``BulkLoad``, whose saves run on its serial queue, one after another, and which reads it in
/// ``write(into:)`` on that queue after the last of them; nothing else holds it. The queue
/// orders every access, except that ``write(into:)`` lets a second thread of its own read the
/// records while the queue reads them too, with no change to any table until both are done (see there).
///
/// Its tables are `@exclusivity(unchecked)`: Swift does not check at run time that two accesses
/// to one of them do not overlap (the checks were a twentieth of the catalog import's CPU, in
/// the state's hash probes and list walks). They are private, and only this class's methods
/// touch them; the closures those methods pass while one table is being changed (a slot table
/// growing, which hashes its entries again) read other tables only, and a record's bytes are
/// read, never changed, while a closure decodes them. The compiler's checks of each function
/// still hold.
final class BulkMemoryState: @unchecked Sendable {
    let schema: Schema
    /// Every object ever inserted, by number (insertion order).
    @exclusivity(unchecked) private var ids: [ObjectID] = []
    /// Each id's number, found by hashing the id (``KeyedHash``) and comparing
    /// `ids[number]`: 4 bytes a slot (a `[ObjectID: Int32]` would take 20 a bucket).
    @exclusivity(unchecked) private var numberSlots: HashSlots
    /// Where each object's encoded record is in ``arena``; a count of 0 for a deleted object.
    @exclusivity(unchecked) private var locations: [ByteArena.Location] = []
    @exclusivity(unchecked) private var arena = ByteArena()
    /// Unique keys, each an entry: its bytes in ``uniqueKeyBytes`` and the number of the object
    /// holding it (-1: nobody since a delete or a change freed it; the entry stays and is taken
    /// again by the next holder). Found through ``uniqueSlots`` by the bytes' hash (`Hasher`'s,
    /// seeded per process; a dictionary of `[UInt8]` keys would allocate each on the heap).
    @exclusivity(unchecked) private var uniqueSlots: HashSlots
    @exclusivity(unchecked) private var uniqueOwners: [Int32] = []
    @exclusivity(unchecked) private var uniqueKeys: [ByteArena.Location] = []
    @exclusivity(unchecked) private var uniqueKeyBytes = ByteArena()
    /// Link heads: each object's relationships, in the entity's order, have consecutive slots
    /// from `headBase[number]` in `headFirst` (the head's most recent entry in ``edges``, -1 for
    /// none).
    @exclusivity(unchecked) private var headBase: [UInt32] = []
    @exclusivity(unchecked) private var headFirst: [Int32] = []
    /// Link entries: the target's number with the entry's depth (``packedTarget(_:depth:)``) and
    /// the entry before it from the same head (-1 for none).
    @exclusivity(unchecked) private var edges: [(to: Int32, next: Int32)] = []
    /// The bits of an entry's `to` that hold the target's number; all set once it is unlinked
    /// (a number is below ``maxObjects``, which is all of them set).
    private static let targetMask: Int32 = 0xFF_FFFF
    /// The most an entry's depth counts: its list's entries from the first to it, itself included,
    /// unlinked ones too (seven bits above the target's 24).
    private static let maxDepth: Int32 = 127

    /// An entry's `to`: the target's number in the low 24 bits, the depth above them. The depth of
    /// a head's newest entry is its list's length (up to ``maxDepth``), read without a walk of the
    /// list, each step of which was a miss of the cache on a large import.
    @inline(__always)
    private static func packedTarget(_ target: Int32, depth: Int32) -> Int32 { min(depth, maxDepth) << 24 | target }
    /// How a link of each relationship tag is looked up: a relationship or inverse that is to-one
    /// has one live entry a head (unlinked ones aside), so that end's list is walked; a
    /// many-to-many link is looked up from its source's head, walked while short, and in
    /// ``bigEdges`` once long. With each tag's inverse (both indexed by tag).
    private enum LinkSide: UInt8 { case unknown, ownToOne, inverseToOne, manyToMany }
    private let sides: [LinkSide]
    private let inverseTags: [UInt16]
    /// A many-to-many head whose list reached ``bigHeadLength`` entries (unlinked ones included)
    /// is long (``isLong(_:)``, its newest entry's depth) and looked up here instead of walked (a
    /// playlist's tracks can be thousands): every live entry of a long head, as tag (16 bits) ·
    /// source number (24) · target number (24).
    @exclusivity(unchecked) private var bigEdges: Set<UInt64> = []
    /// The list length from which a many-to-many head's entries go to ``bigEdges`` (1 to
    /// ``maxDepth``).
    let bigHeadLength: Int32
    static let defaultBigHeadLength: Int32 = 64
    /// Objects a state can number (the 24 bits of ``bigEdges``): 16,777,215. An input within
    /// ``ImportOptions/bulkInMemoryMaxInputBytes`` can hold more (a record's line is at least 14
    /// bytes, `{"entity":"A"}`): an importer counts the records first
    /// (``ImportOptions/bulkInMemoryMaxRecords``, at most this) and takes such an input through
    /// the B-trees; past it, the insert is refused (``StrataError/invalidConfiguration(field:value:reason:)``).
    static let maxObjects = (1 << 24) - 1
    /// Live objects per entity tag (tags are 1...``SchemaLimits/maxEntities``): an array, not a
    /// dictionary hashing the tag at every insert.
    @exclusivity(unchecked) private var counts = [Int](repeating: 0, count: SchemaLimits.maxEntities + 1)
    /// Entities whose count a save changed (by its net inserts and deletes): a save through the
    /// B-trees writes their count entries, zero included, and no others.
    @exclusivity(unchecked) private var countsWritten: Set<UInt16> = []

    /// A state for about `expectedObjects` objects (0: unknown): its tables are sized for them
    /// up front, not rehashed or copied as they grow (with links estimated at four entries an
    /// object and heads at three). `bigHeadLength` (taken into 1...127) is for tests, which make
    /// every head long.
    init(schema: Schema, expectedObjects: Int = 0, bigHeadLength: Int32 = defaultBigHeadLength) {
        self.schema = schema
        self.bigHeadLength = min(max(1, bigHeadLength), Self.maxDepth)
        var sides = [LinkSide](repeating: .unknown, count: 1 << 16)
        var inverseTags = [UInt16](repeating: 0, count: 1 << 16)
        for e in schema.entities {
            for r in e.relationships {
                let inverse = schema.inverse(of: r)
                inverseTags[Int(r.tag)] = inverse.tag
                sides[Int(r.tag)] = !r.isToMany ? .ownToOne : !inverse.isToMany ? .inverseToOne : .manyToMany
            }
        }
        self.sides = sides
        self.inverseTags = inverseTags
        numberSlots = HashSlots(expected: expectedObjects)
        uniqueSlots = HashSlots(expected: expectedObjects)
        guard expectedObjects > 0 else { return }
        // The arrays get a quarter more: an array takes memory only as it fills, but one that
        // outgrows its room is copied whole into one twice its size, both held meanwhile.
        let room = expectedObjects + expectedObjects / 4
        ids.reserveCapacity(room)
        locations.reserveCapacity(room)
        uniqueOwners.reserveCapacity(room)
        uniqueKeys.reserveCapacity(room)
        headBase.reserveCapacity(room)
        headFirst.reserveCapacity(room * 3)
        edges.reserveCapacity(room * 4)
    }

    private static func hash(_ id: ObjectID) -> Int { KeyedHash.hash(id.high, id.low, seed: 0) }

    /// The last two ids ``anyNumber(_:)`` found and their numbers (-1: none): a link's
    /// resolution asks for each end's number several times (the check of its ends, whether it
    /// is there, its two entries), and each probe of the table is a miss of the cache on a large
    /// import. An id's number never changes, so they are only forgotten with the table.
    private var recentIDs = (ObjectID(high: 0, low: 0), ObjectID(high: 0, low: 0))
    private var recentNumbers: (Int32, Int32) = (-1, -1)

    /// The number `id` was given, deleted or not.
    private func anyNumber(_ id: ObjectID) -> Int32? {
        if recentNumbers.0 >= 0, recentIDs.0 == id { return recentNumbers.0 }
        if recentNumbers.1 >= 0, recentIDs.1 == id { return recentNumbers.1 }
        guard let n = numberSlots.find(hash: Self.hash(id), { ids[Int($0)] == id }).entry else { return nil }
        recentIDs = (id, recentIDs.0)
        recentNumbers = (n, recentNumbers.0)
        return n
    }

    fileprivate func number(_ id: ObjectID) -> Int32? {
        guard let n = anyNumber(id), locations[Int(n)].count > 0 else { return nil }
        return n
    }

    fileprivate func existingNumber(_ id: ObjectID, _ what: String) throws -> Int32 {
        guard let n = number(id) else { throw StrataError.corruptRecord(id: id, reason: "\(what) of a missing object") }
        return n
    }

    fileprivate func record(number n: Int32) throws -> Record {
        let id = ids[Int(n)]
        return try arena.withBytes(locations[Int(n)]) { try RecordCodec.decode($0, id: id, schema: schema) }
    }

    fileprivate func store(_ record: Record, number n: Int32) {
        locations[Int(n)] = arena.append(RecordCodec.encode(record))
    }

    /// Adds an object (or gives a deleted one its number back); false when the id is live.
    fileprivate func insert(_ record: Record) throws -> Bool {
        guard let n = try freeNumber(record.id, relationships: record.entity.relationships.count) else { return false }
        store(record, number: n)
        counts[Int(record.entity.tag)] += 1
        return true
    }

    /// The number a new object `id` (of an entity with `relationships` relationships) takes: its
    /// own again when it was deleted, else the next one, with its link heads; nil when `id` is live.
    private func freeNumber(_ id: ObjectID, relationships: Int) throws -> Int32? {
        let found = numberSlots.find(hash: Self.hash(id)) { ids[Int($0)] == id }
        if let old = found.entry {
            return locations[Int(old)].count == 0 ? old : nil
        }
        let n = Int32(ids.count)
        guard ids.count < Self.maxObjects else {
            throw StrataError.invalidConfiguration(
                field: "bulkInMemoryMaxInputBytes", value: "an input of more than \(Self.maxObjects) records",
                reason: "a bulk import resolves at most \(Self.maxObjects) records in memory: lower it (or 0)")
        }
        guard headFirst.count + relationships <= Int(UInt32.max) else {
            throw StrataError.invalidConfiguration(
                field: "bulkInMemoryMaxInputBytes", value: "an input of more than \(UInt32.max) link heads",
                reason: "a bulk import resolves at most \(UInt32.max) link heads in memory: lower it (or 0)")
        }
        ids.append(id)
        locations.append(.deleted)
        headBase.append(UInt32(headFirst.count))
        headFirst.append(contentsOf: repeatElement(-1, count: relationships))
        numberSlots.insert(n, at: found.slot) { Self.hash(ids[Int($0)]) }
        return n
    }

    // MARK: Loading a store's state

    /// Adds an object of the store the load starts from: an entry of its `objects` (a 16-byte id
    /// and its encoded record, checked by ``StateCheck/object(key:value:)`` before), its record
    /// kept as it is stored. Objects are loaded before the links and unique keys that name them.
    func loadObject(key: UnsafeRawBufferPointer, record: UnsafeRawBufferPointer) throws {
        let id = ObjectID(keyBytes: key)
        guard let entity = schema.entity(tag: id.entityTag) else {
            throw StrataError.corruptRecord(id: id, reason: "entity tag \(id.entityTag) is not the schema's")
        }
        // A stored record is never empty (an empty place is a deleted object's).
        guard !record.isEmpty else { throw StrataError.corruptRecord(id: id, reason: "objects: an empty record") }
        guard let n = try freeNumber(id, relationships: entity.relationships.count) else {
            throw StrataError.corruptRecord(id: id, reason: "objects: the store being loaded holds the object twice")
        }
        locations[Int(n)] = arena.append(record)
        counts[Int(entity.tag)] += 1
    }

    /// Adds an entry of the `links` of the store the load starts from (34 bytes: relationship
    /// tag, from id, to id; checked by ``StateCheck/link(key:)`` before), its two objects loaded.
    /// Each direction of an edge is an entry of its own there, and here.
    func loadLinkEntry(key: UnsafeRawBufferPointer) throws {
        let tag = UInt16(key[0]) << 8 | UInt16(key[1])
        let from = ObjectID(keyBytes: UnsafeRawBufferPointer(rebasing: key[2..<18]))
        let to = ObjectID(keyBytes: UnsafeRawBufferPointer(rebasing: key[18..<34]))
        guard let a = number(from), let b = number(to), let h = head(tag, a) else {
            throw StrataError.corruptRecord(id: from, reason: "links: an entry under tag \(tag) to \(to) names an object " +
                                                              "the store does not have, or a relationship its entity does not")
        }
        guard edges.count < Self.maxEdges - 1 else {
            throw StrataError.invalidConfiguration(
                field: "bulkInMemoryMaxInputBytes", value: "a store of more than \(Self.maxEdges) link entries",
                reason: "a bulk import resolves at most \(Self.maxEdges) link entries in memory: lower it (or 0)")
        }
        addEntry(h, tag, a, b)
    }

    /// Adds an entry of the `uniques` of the store the load starts from: its key and the id of
    /// the object holding it (loaded).
    func loadUnique(key: UnsafeRawBufferPointer, owner: UnsafeRawBufferPointer) throws {
        guard owner.count == 16 else {
            throw StrataError.corruptRecord(id: ObjectID(high: 0, low: 0),
                                            reason: "uniques: an owner of \(owner.count) bytes (16 expected)")
        }
        let id = ObjectID(keyBytes: owner)
        guard let n = number(id) else {
            throw StrataError.corruptRecord(id: id, reason: "uniques: a key held by an object the store does not have")
        }
        let bytes = Array(key)
        guard uniqueOwner(bytes) == nil else {
            throw StrataError.corruptRecord(id: id, reason: "uniques: the store being loaded holds a key twice")
        }
        try setUnique(bytes, n)
    }

    fileprivate func countWritten(_ entity: UInt16) { countsWritten.insert(entity) }

    fileprivate func remove(number n: Int32, entity: UInt16) {
        locations[Int(n)] = .deleted
        counts[Int(entity)] -= 1
    }

    private static func hash(_ key: UnsafeRawBufferPointer) -> Int {
        var h = Hasher()
        h.combine(bytes: key)
        return h.finalize()
    }

    /// The entry of unique key `key` (its slot either way).
    private func uniqueEntry(_ key: UnsafeRawBufferPointer, hash h: Int) -> (slot: Int, entry: Int32?) {
        uniqueSlots.find(hash: h) { e in
            uniqueKeyBytes.withBytes(uniqueKeys[Int(e)]) {
                $0.count == key.count && memcmp($0.baseAddress!, key.baseAddress!, key.count) == 0
            }
        }
    }

    fileprivate func uniqueOwner(_ key: [UInt8]) -> Int32? {
        let found = key.withUnsafeBytes { uniqueEntry($0, hash: Self.hash($0)) }
        guard let e = found.entry else { return nil }
        let n = uniqueOwners[Int(e)]
        guard n >= 0, locations[Int(n)].count > 0 else { return nil }
        return n
    }

    /// Unique key entries a state can hold (their places are ``Int32``s): 2,147,483,647; the one
    /// past it is refused, as a link entry past ``maxEdges`` is.
    static let maxUniqueKeys = Int(Int32.max)

    fileprivate func setUnique(_ key: [UInt8], _ owner: Int32?) throws {
        try key.withUnsafeBytes { raw in
            let h = Self.hash(raw)
            let found = uniqueEntry(raw, hash: h)
            if let e = found.entry {
                uniqueOwners[Int(e)] = owner ?? -1
                return
            }
            guard let owner else { return }
            guard uniqueKeys.count < Self.maxUniqueKeys else {
                throw StrataError.invalidConfiguration(
                    field: "bulkInMemoryMaxInputBytes", value: "an input of more than \(Self.maxUniqueKeys) unique keys",
                    reason: "a bulk import resolves at most \(Self.maxUniqueKeys) unique keys in memory: lower it (or 0)")
            }
            uniqueOwners.append(owner)
            uniqueKeys.append(uniqueKeyBytes.append(raw))
            uniqueSlots.insert(Int32(uniqueKeys.count - 1), at: found.slot) {
                uniqueKeyBytes.withBytes(uniqueKeys[Int($0)]) { Self.hash($0) }
            }
        }
    }

    /// The slot of `from`'s head under relationship `tag`; nil when `tag` is not a relationship
    /// of `from`'s entity (the resolver checks both ends of a link first: never for a link).
    private func head(_ tag: UInt16, _ from: Int32) -> Int? {
        // `sides` knows every relationship tag of the schema (an entity's tag and a position
        // within its relationships), so no entity is looked up.
        guard sides[Int(tag)] != .unknown, tag >> 8 == ids[Int(from)].entityTag else { return nil }
        return Int(headBase[Int(from)]) + Int(tag & 0xff) - 1
    }

    /// The live targets' numbers of `from`'s link entries under `tag`, newest first.
    fileprivate func targetNumbers(_ tag: UInt16, from: Int32) -> [Int32] {
        var out: [Int32] = []
        guard let h = head(tag, from) else { return out }
        var e = headFirst[h]
        while e >= 0 {
            let edge = edges[Int(e)]
            let target = edge.to & Self.targetMask
            if target != Self.targetMask { out.append(target) }
            e = edge.next
        }
        return out
    }

    private static func edgeKey(_ tag: UInt16, _ from: Int32, _ to: Int32) -> UInt64 {
        UInt64(tag) << 48 | UInt64(UInt32(from)) << 24 | UInt64(UInt32(to))
    }

    /// The entries of head `h`'s list, unlinked ones included, counted up to ``maxDepth``: the
    /// depth of its newest entry.
    private func listLength(_ h: Int) -> Int32 {
        let e = headFirst[h]
        return e < 0 ? 0 : edges[Int(e)].to >> 24
    }

    /// Whether many-to-many head `h` is long: its live entries are in ``bigEdges``.
    private func isLong(_ h: Int) -> Bool { listLength(h) >= bigHeadLength }

    /// The place in ``edges`` of the live entry `to` of head `h`, walking its list.
    private func walk(_ h: Int, to: Int32) -> Int32? {
        var e = headFirst[h]
        while e >= 0 {
            let edge = edges[Int(e)]
            if edge.to & Self.targetMask == to { return e }
            e = edge.next
        }
        return nil
    }

    /// Whether the link `from` → `to` of relationship `tag` is there (its two entries are).
    fileprivate func linked(_ tag: UInt16, _ from: Int32, _ to: Int32) -> Bool {
        switch sides[Int(tag)] {
        case .unknown:
            return false
        case .ownToOne:
            guard let h = head(tag, from) else { return false }
            return walk(h, to: to) != nil
        case .inverseToOne:
            guard let h = head(inverseTags[Int(tag)], to) else { return false }
            return walk(h, to: from) != nil
        case .manyToMany:
            guard let h = head(tag, from) else { return false }
            return isLong(h) ? bigEdges.contains(Self.edgeKey(tag, from, to)) : walk(h, to: to) != nil
        }
    }

    /// Link entries a state can hold (their places are ``Int32``s): 2,147,483,647, far past what
    /// the default ``ImportOptions/bulkInMemoryMaxInputBytes`` can give (a link in the input takes
    /// at least a few bytes); a larger setting can reach it, and the link past it is refused.
    static let maxEdges = Int(Int32.max)

    /// Adds the link `from` → `to` of relationship `tag`, its entry and its inverse's, unless it
    /// is there (a put of existing keys).
    fileprivate func addLink(_ tag: UInt16, _ from: Int32, _ to: Int32) throws {
        guard edges.count < Self.maxEdges - 1 else {
            throw StrataError.invalidConfiguration(
                field: "bulkInMemoryMaxInputBytes", value: "an input of more than \(Self.maxEdges) link entries",
                reason: "a bulk import resolves at most \(Self.maxEdges) link entries in memory: lower it (or 0)")
        }
        let inverse = inverseTags[Int(tag)]
        guard sides[Int(tag)] != .unknown, let a = head(tag, from), let b = head(inverse, to) else {
            throw StrataError.corruptRecord(id: ids[Int(from)], reason: "a link under tag \(tag), not a relationship of its entity")
        }
        guard !linked(tag, from, to) else { return }
        addEntry(a, tag, from, to)
        addEntry(b, inverse, to, from)
    }

    private func addEntry(_ h: Int, _ tag: UInt16, _ from: Int32, _ to: Int32) {
        let length = listLength(h)
        edges.append((to: Self.packedTarget(to, depth: length + 1), next: headFirst[h]))
        headFirst[h] = Int32(edges.count - 1)
        guard sides[Int(tag)] == .manyToMany else { return }
        if length >= bigHeadLength {
            bigEdges.insert(Self.edgeKey(tag, from, to))
        } else if length + 1 >= bigHeadLength {
            // The head turns long: its live entries, this one included, go to the set.
            for t in targetNumbers(tag, from: from) { bigEdges.insert(Self.edgeKey(tag, from, t)) }
        }
    }

    /// Removes the link `from` → `to` of relationship `tag`, each of its two entries that is there
    /// (a delete of a missing key does nothing).
    fileprivate func removeLink(_ tag: UInt16, _ from: Int32, _ to: Int32) {
        let inverse = inverseTags[Int(tag)]
        guard sides[Int(tag)] != .unknown else { return }
        removeEntry(tag, from, to)
        removeEntry(inverse, to, from)
    }

    private func removeEntry(_ tag: UInt16, _ from: Int32, _ to: Int32) {
        guard let h = head(tag, from), let e = walk(h, to: to) else { return }
        edges[Int(e)].to |= Self.targetMask
        if sides[Int(tag)] == .manyToMany, isLong(h) {
            let removed = bigEdges.remove(Self.edgeKey(tag, from, to))
            assert(removed != nil, "a long head's live entry is in the set")
        }
    }

    fileprivate func id(_ n: Int32) -> ObjectID { ids[Int(n)] }

    /// Writes the state into `env`, whose objects, links, indexes and uniques must be empty,
    /// every database in key order with appends: the records in id order, the links, then the
    /// index and unique keys through two ``ExternalKeySort``s that share `sortBudgetBytes` (past
    /// it, the one holding more writes a run file in the generation's directory), and the count
    /// of every entity an insert touched. The index and unique keys are derived from the records
    /// again and sorted on a second thread (``gatherKeys(of:into:_:budgetBytes:stop:)``) while
    /// this one appends the records and the links; then this one appends them. What the write
    /// does not need is freed first (the unique keys, the ids' table, the long lists' set of
    /// entries), and the links once they are written, so that the sorts' buffers take the place
    /// of the tables.
    /// `checkUsable` is called between batches, and while this thread waits for the other (a
    /// closed store ends the write); `progress` gets the work done, counted in objects out of the
    /// objects in all: the records and links written are the first half, the index and unique
    /// keys written the second; once at the end with both equal.
    ///
    /// Thread safety of the second thread: while it runs, neither thread changes the state (both
    /// only read `ids`, `locations` and `arena`; this one also reads the heads, `edges` and
    /// `counts`, and frees the heads and `edges` once the links are written); the
    /// sorts it fills are its own until it hands them back, and this one waits for it before it
    /// returns or throws. A failure on either side stops the other at its next batch.
    func write(into env: LMDBEnvironment, sortBudgetBytes: Int, permissions: StorePermissions, logger: Logger,
               checkUsable: () throws -> Void, progress: ((Int, Int) -> Void)? = nil) throws {
        try env.read { txn in
            for name in DatabaseName.state where try txn.entryCount(env[name]) != 0 {
                throw StrataError.corruptRecord(
                    id: ObjectID(high: 0, low: 0),
                    reason: "a bulk load in memory found \(name.rawValue) not empty in its generation")
            }
        }
        numberSlots = HashSlots(expected: 0)
        recentNumbers = (-1, -1)
        uniqueSlots = HashSlots(expected: 0)
        uniqueOwners = []
        uniqueKeys = []
        uniqueKeyBytes = ByteArena()
        bigEdges = []
        let live = ids.indices.filter { locations[$0].count > 0 }.sorted { ids[$0] < ids[$1] }
        var rank = [UInt32](repeating: .max, count: ids.count)
        for (r, i) in live.enumerated() { rank[i] = UInt32(r) }

        let directory = env.path
        // The second thread hands back its two sorts (index, unique), and the error that ended
        // it, if one did; either side's failure stops the other at its next batch.
        let gathered = Locked<(sorts: [ExternalKeySort], error: Error?)?>(nil)
        let stop = Locked(false), keysFailed = Locked(false)
        let done = startOnOwnThread(name: "strata.bulk-keys") { [self] in
            // Each may take the whole budget, and ``gatherKeys`` holds the two together to it. The
            // files are read in chunks as when each had half (a merge's buffers stay bounded so).
            let budget = max(4_096, sortBudgetBytes)
            let chunk = ExternalKeySort.chunkBytes(budgetBytes: budget / 2)
            var indexSort = ExternalKeySort(budgetBytes: budget, directory: directory, permissions: permissions,
                                            ioChunkBytes: chunk, filePrefix: "sort-run-index-")
            var uniqueSort = ExternalKeySort(budgetBytes: budget, directory: directory, permissions: permissions,
                                             ioChunkBytes: chunk, filePrefix: "sort-run-unique-")
            var failure: Error?
            do { try gatherKeys(of: live, into: &indexSort, &uniqueSort, budgetBytes: budget, stop: stop) } catch {
                failure = error
                keysFailed.withLock { $0 = true }
            }
            gathered.withLock { $0 = ([indexSort, uniqueSort], failure) }
        }
        // Its run files are removed however this ends.
        var sorts: [ExternalKeySort] = []
        defer {
            for var sort in sorts {
                sort.discard()
                for path in sort.unremovedFiles {
                    logger.warning("could not remove \(path), a temporary file of a bulk import: remove it by hand")
                }
            }
        }
        // Progress: the records and links are the first half of the work, the keys the second.
        let half = live.count / 2
        func checkBoth() throws {
            try checkUsable()
            if keysFailed.withLock({ $0 }) { throw KeysFailed() }
        }
        let here = Result {
            try writeRecordsAndLinks(live, rank: rank, into: env, checkUsable: checkBoth,
                                     progress: progress.map { report in { done, all in report(done / 2, all) } })
        }
        var waiting: Error?
        if case .failure = here { stop.withLock { $0 = true } }
        // The other thread is waited for, checking meanwhile that the store is still usable (a
        // close stops the other thread too).
        while done.wait(timeout: .now() + .milliseconds(50)) == .timedOut {
            guard waiting == nil else { continue }
            do { try checkUsable() } catch {
                waiting = error
                stop.withLock { $0 = true }
            }
        }
        // Taken out, so that only `sorts` holds them (their memory goes as they drain).
        let there = gathered.withLock { g -> (sorts: [ExternalKeySort], error: Error?)? in
            defer { g = nil }
            return g
        }
        sorts = there?.sorts ?? []
        // The error that came first: the other thread's when it stopped this one, else this
        // one's; then a close noticed while waiting; then the other's.
        switch here {
        case .failure(let error as KeysFailed): throw there?.error ?? error
        case .failure(let error): throw error
        case .success: break
        }
        if let waiting { throw waiting }
        if let error = there?.error { throw error }
        guard sorts.count == 2 else {
            throw StrataError.corruptRecord(id: ObjectID(high: 0, low: 0),
                                            reason: "a bulk load in memory lost its index and unique keys")
        }
        let keys = max(1, sorts[0].added + sorts[1].added)
        var appended = 0
        let reportKeys = { (n: Int) in
            appended += n
            progress?(half + Int(Double(live.count - half) * Double(min(appended, keys)) / Double(keys)), live.count)
        }
        try sorts[0].drain(batchBytes: BulkStateBuilder.batchBytes) {
            try Self.append($0, into: .indexes, of: env, checkUsable: checkUsable)
            reportKeys($0.entries.count)
        }
        var previous: [UInt8]?
        try sorts[1].drain(batchBytes: BulkStateBuilder.batchBytes) { run in
            // The table held each key once: two equal keys here mean the state lost track.
            guard let last = run.entries.indices.last else { return }
            for i in run.entries.indices where i == 0 ? run.key(0) == previous : run.sameKey(i - 1, i) {
                throw StrataError.corruptRecord(id: run.value(i),
                                                reason: "a bulk load in memory holds a unique key twice")
            }
            previous = run.key(last)
            try Self.append(run, into: .uniques, of: env, checkUsable: checkUsable)
            reportKeys(run.entries.count)
        }
        try env.writeGrowing { txn in
            for tag in countsWritten {
                try txn.put(env[.counts], key: MetaKey.count(tag), value: MetaKey.countValue(counts[Int(tag)]))
            }
        }
        progress?(live.count, live.count)
    }

    /// This thread's work for ``write(into:sortBudgetBytes:permissions:logger:checkUsable:progress:)``
    /// was stopped because the second thread failed.
    private struct KeysFailed: Error {}

    /// The second thread's work for ``write(into:sortBudgetBytes:permissions:logger:checkUsable:progress:)``
    /// was stopped because the first thread failed.
    private struct GatheringStopped: Error {}

    /// Decodes the `live` objects' records (in id order) and adds their index and unique keys to
    /// the two sorts, then sorts what each holds in memory. The two hold at most `budgetBytes`
    /// together: past it, the one holding more writes its entries to a run file (a library's
    /// unique keys are about a third of its index keys, so halves would spill the index keys of
    /// a store the whole budget holds). Checks `stop` every 4,096 records.
    private func gatherKeys(of live: [Int], into indexSort: inout ExternalKeySort, _ uniqueSort: inout ExternalKeySort,
                            budgetBytes: Int, stop: Locked<Bool>) throws {
        for (done, i) in live.enumerated() {
            if done & 4095 == 0, stop.withLock({ $0 }) { throw GatheringStopped() }
            if indexSort.memoryBytes + uniqueSort.memoryBytes >= budgetBytes {
                if indexSort.memoryBytes >= uniqueSort.memoryBytes { try indexSort.writeRun() } else { try uniqueSort.writeRun() }
            }
            let id = ids[i]
            try arena.withBytes(locations[i]) { bytes in
                let r = try RecordCodec.decode(bytes, id: id, schema: schema)
                for index in r.entity.indexes {
                    try indexSort.addKey { Layout.appendIndexKey(index, record: r.values, id: id, to: &$0) }
                }
                guard !r.entity.uniques.isEmpty else { return }
                try id.withKeyBytes { key in
                    for unique in r.entity.uniques {
                        if let k = try Layout.uniqueKey(unique, record: r.values, entity: r.entity, id: id) {
                            try k.withUnsafeBytes { try uniqueSort.add(key: $0, value: key) }
                        }
                    }
                }
            }
        }
        indexSort.sortInMemory()
        uniqueSort.sortInMemory()
    }

    /// Appends the `live` objects' records in id order (checking the count of each entity), then
    /// the links.
    private func writeRecordsAndLinks(_ live: [Int], rank: [UInt32], into env: LMDBEnvironment,
                                      checkUsable: () throws -> Void, progress: ((Int, Int) -> Void)?) throws {
        var written = [Int](repeating: 0, count: counts.count)
        var done = 0
        var batch = KeyRun()
        for i in live {
            let id = ids[i]
            arena.withBytes(locations[i]) { bytes in
                id.withKeyBytes { key in batch.add(key: key, value: bytes, sorted: true) }
            }
            written[Int(id.entityTag)] += 1
            done += 1
            if batch.byteCount >= BulkStateBuilder.batchBytes {
                try Self.append(batch, into: .objects, of: env, checkUsable: checkUsable)
                batch.removeAll()
                progress?(done, live.count)
            }
        }
        try Self.append(batch, into: .objects, of: env, checkUsable: checkUsable)
        progress?(live.count, live.count)
        for tag in counts.indices where written[tag] != counts[tag] {
            throw StrataError.corruptRecord(
                id: ObjectID(high: UInt64(tag) << 48, low: 0),
                reason: "a bulk load in memory counted \(counts[tag]) objects of entity tag \(tag) and wrote \(written[tag])")
        }
        try writeLinks(live, into: env, rank: rank, checkUsable: checkUsable)
    }

    /// Every live link entry, appended in key order (relationship tag, source id, target id),
    /// about ``BulkStateBuilder/batchBytes`` per write transaction; then the heads and entries are
    /// freed. `live` lists the live objects in id order, so each entity's are a stretch of it (an
    /// id begins with its entity's tag, as a relationship's tag does): a stretch is walked once
    /// per relationship of its entity, in the relationships' order. `rank` gives each live
    /// object's place in `live`, so the targets sort as integers.
    ///
    /// Every link key is ``linkKeyBytes`` long and they are made in key order, so a batch is just
    /// their bytes back to back (``appendLinkKeys(_:of:checkUsable:)``). A ``KeyRun`` would copy
    /// each key twice and give it an entry for a sort that never runs: about a third of this
    /// loop's time on the catalog.
    private func writeLinks(_ live: [Int], into env: LMDBEnvironment, rank: [UInt32],
                            checkUsable: () throws -> Void) throws {
        var batch: [UInt8] = []
        batch.reserveCapacity(BulkStateBuilder.batchBytes + Self.linkKeyBytes)
        var targets: [(rank: UInt32, number: Int32)] = []
        var start = 0
        while start < live.count {
            let tag = ids[live[start]].entityTag
            var end = start + 1
            while end < live.count, ids[live[end]].entityTag == tag { end += 1 }
            guard let entity = schema.entity(tag: tag) else {
                throw StrataError.corruptRecord(id: ids[live[start]], reason: "a bulk load in memory holds an object of no entity")
            }
            for (position, r) in entity.relationships.enumerated() {
                for from in live[start..<end] {
                    var e = headFirst[Int(headBase[from]) + position]
                    targets.removeAll(keepingCapacity: true)
                    while e >= 0 {
                        let edge = edges[Int(e)], target = edge.to & Self.targetMask
                        if target != Self.targetMask { targets.append((rank[Int(target)], target)) }
                        e = edge.next
                    }
                    guard !targets.isEmpty else { continue }
                    if targets.count > 1 { targets.sort { $0.rank < $1.rank } }
                    let source = ids[from]
                    for t in targets {
                        // Layout.linkKey(r.tag, source, target), written in place.
                        batch.append(UInt8(r.tag >> 8))
                        batch.append(UInt8(r.tag & 0xff))
                        source.appendKeyBytes(to: &batch)
                        ids[Int(t.number)].appendKeyBytes(to: &batch)
                    }
                    if batch.count >= BulkStateBuilder.batchBytes {
                        try Self.appendLinkKeys(batch, of: env, checkUsable: checkUsable)
                        batch.removeAll(keepingCapacity: true)
                    }
                }
            }
            start = end
        }
        try Self.appendLinkKeys(batch, of: env, checkUsable: checkUsable)
        headBase = []
        headFirst = []
        edges = []
    }

    /// Bytes of a key of `links`: the relationship's tag, the source's id, the target's id.
    static let linkKeyBytes = 2 + 16 + 16

    /// Appends the link keys `keys` holds back to back (each ``linkKeyBytes`` long, in key order,
    /// after every key of `links`), with empty values, as ``append(_:into:of:checkUsable:)``
    /// appends a run.
    private static func appendLinkKeys(_ keys: [UInt8], of env: LMDBEnvironment,
                                       checkUsable: () throws -> Void) throws {
        guard !keys.isEmpty else { return }
        precondition(keys.count % linkKeyBytes == 0, "link keys are \(linkKeyBytes) bytes each")
        try appendInOneTransaction(into: .links, of: env, checkUsable: checkUsable) { appender in
            try keys.withUnsafeBytes { all in
                let empty = UnsafeRawBufferPointer(rebasing: all[0..<0])
                for at in stride(from: 0, to: all.count, by: linkKeyBytes) {
                    try appender.append(key: UnsafeRawBufferPointer(rebasing: all[at..<at + linkKeyBytes]), value: empty)
                }
            }
        }
    }

    /// Appends `run` (in key order, after every key of the database) to database `name`.
    private static func append(_ run: KeyRun, into name: DatabaseName, of env: LMDBEnvironment,
                               checkUsable: () throws -> Void) throws {
        guard !run.entries.isEmpty else { return }
        try appendInOneTransaction(into: name, of: env, checkUsable: checkUsable) { appender in
            for i in run.entries.indices {
                try run.withEntry(i) { k, v in try appender.append(key: k, value: v) }
            }
        }
    }

    /// Runs `body`'s appends to database `name` in one write transaction, redone whole if the map
    /// grows (so `body` must be repeatable); then, as a compaction's copy does, starts the disk on
    /// it, and checks the store is still usable.
    private static func appendInOneTransaction(into name: DatabaseName, of env: LMDBEnvironment,
                                               checkUsable: () throws -> Void,
                                               _ body: (LMDBTransaction.Appender) throws -> Void) throws {
        try env.writeGrowing { txn in try txn.withAppender(env[name], body) }
        if env.options.noSync { env.startWriteback() }
        try checkUsable()
    }
}

/// Bytes appended in chunks that never move (a growing array would copy everything it holds
/// each time it doubles, and hold twice its size meanwhile).
struct ByteArena {
    static let chunkBytes = 1 << 20
    struct Location {
        var chunk: UInt32
        var offset: UInt32
        var count: UInt32
        /// No bytes: what a deleted object's record is (a stored entry is never empty).
        static let deleted = Location(chunk: 0, offset: 0, count: 0)
    }
    private var chunks: [[UInt8]] = []

    /// Stores `bytes` (not empty) in the last chunk, or in a new one (of ``chunkBytes``, or of
    /// their size when larger) when they do not fit in what it has reserved.
    mutating func append(_ bytes: [UInt8]) -> Location { bytes.withUnsafeBytes { append($0) } }

    /// Stores the bytes `bytes` points at (not empty), as the array's ``append(_:)`` does.
    mutating func append(_ bytes: UnsafeRawBufferPointer) -> Location {
        precondition(!bytes.isEmpty, "an empty entry cannot be told from a deleted one")
        if chunks.isEmpty || chunks[chunks.count - 1].count + bytes.count > chunks[chunks.count - 1].capacity {
            var chunk: [UInt8] = []
            chunk.reserveCapacity(max(Self.chunkBytes, bytes.count))
            chunks.append(chunk)
        }
        let c = chunks.count - 1
        let offset = chunks[c].count
        chunks[c].append(contentsOf: bytes)
        return Location(chunk: UInt32(c), offset: UInt32(offset), count: UInt32(bytes.count))
    }

    func withBytes<R>(_ l: Location, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try chunks[Int(l.chunk)].withUnsafeBytes {
            try body(UnsafeRawBufferPointer(rebasing: $0[Int(l.offset)..<Int(l.offset) + Int(l.count)]))
        }
    }
}

/// ``StateStore`` over a ``BulkMemoryState``: what ``StateApplier`` does to the B-trees, done to
/// the tables in memory, with the same errors (a live id inserted again, a unique key another
/// object holds, an update or delete of a missing object).
struct BulkMemoryApplier: StateStore {
    let state: BulkMemoryState
    var transactionID: TransactionID
    var defersUniqueClashes = false
    private var deferredUniques: [DeferredUniqueKey] = []
    /// Net inserts less deletes per entity in this save (as ``StateApplier`` counts them).
    private var countDeltas = CountDeltas()

    init(state: BulkMemoryState, transactionID: TransactionID) {
        self.state = state
        self.transactionID = transactionID
    }

    var schema: Schema { state.schema }

    private func entity(of id: ObjectID) throws -> EntityDescription {
        guard let e = schema.entity(tag: id.entityTag) else {
            throw StrataError.corruptRecord(
                id: id, reason: "no entity with tag \(id.entityTag) in schema \(schema.model) v\(schema.version)")
        }
        return e
    }

    func record(_ id: ObjectID) throws -> Record? { try state.number(id).map { try state.record(number: $0) } }

    func exists(_ id: ObjectID) throws -> Bool { state.number(id) != nil }

    func targets(_ tag: UInt16, from: ObjectID) throws -> [ObjectID] {
        guard let n = state.number(from) else { return [] }
        return state.targetNumbers(tag, from: n).map(state.id).sorted()
    }

    func linked(_ tag: UInt16, from: ObjectID, to: ObjectID) throws -> Bool {
        guard let a = state.number(from), let b = state.number(to) else { return false }
        return state.linked(tag, a, b)
    }

    func uniqueOwner(_ key: [UInt8]) throws -> ObjectID? { state.uniqueOwner(key).map(state.id) }

    mutating func apply(_ change: LoggedChange) throws {
        switch change {
        case .insert(let id, let values):
            let e = try entity(of: id)
            guard try state.insert(Record(entity: e, id: id, values: values, version: transactionID)) else {
                throw StrataError.duplicateID(e, id)
            }
            countDeltas.add(e.tag, 1)
            for unique in e.uniques {
                if let key = try Layout.uniqueKey(unique, record: values, entity: e, id: id) {
                    try putUnique(key, unique, e, values, id)
                }
            }
        case .update(let id, let changes, _):
            let n = try state.existingNumber(id, "update")
            var record = try state.record(number: n)
            let before = record.values
            for c in changes { record.values[c.attribute] = c.new }
            record.version = transactionID
            state.store(record, number: n)
            let touched = Set(changes.map(\.attribute))
            for unique in record.entity.uniques where unique.attributes.contains(where: touched.contains) {
                if let key = try Layout.uniqueKey(unique, record: before, entity: record.entity, id: id) {
                    try deleteUnique(key, of: id)
                }
                if let key = try Layout.uniqueKey(unique, record: record.values, entity: record.entity, id: id) {
                    try putUnique(key, unique, record.entity, record.values, id)
                }
            }
        case .delete(let id, _, _):
            let n = try state.existingNumber(id, "delete")
            let record = try state.record(number: n)
            for unique in record.entity.uniques {
                if let key = try Layout.uniqueKey(unique, record: record.values, entity: record.entity, id: id) {
                    try deleteUnique(key, of: id)
                }
            }
            state.remove(number: n, entity: record.entity.tag)
            countDeltas.add(record.entity.tag, -1)
        case .link(let tag, let a, let b):
            try checkRelationship(tag)
            let (x, y) = (try state.existingNumber(a, "link"), try state.existingNumber(b, "link"))
            try state.addLink(tag, x, y)
        case .unlink(let tag, let a, let b):
            try checkRelationship(tag)
            guard let x = state.number(a), let y = state.number(b) else { return }
            state.removeLink(tag, x, y)
        }
    }

    private func checkRelationship(_ tag: UInt16) throws {
        guard schema.linkRule(tag: tag) != nil else {
            throw StrataError.corruptLogEntry(transaction: transactionID, reason: "unknown relationship tag \(tag)")
        }
    }

    /// As ``StateApplier``'s: a key another object holds is refused, or put off while clashes
    /// are deferred; one the object holds already is left as it is.
    private mutating func putUnique(_ key: [UInt8], _ unique: IndexDescription, _ e: EntityDescription,
                                    _ values: [Value], _ id: ObjectID) throws {
        if let owner = state.uniqueOwner(key) {
            let ownerID = state.id(owner)
            guard ownerID != id else { return }
            guard defersUniqueClashes else { throw StrataError.uniqueClash(unique, e, values, id: id, owner: ownerID) }
            deferredUniques.append(DeferredUniqueKey(key: key, unique: unique, entity: e, id: id))
            return
        }
        try state.setUnique(key, try state.existingNumber(id, "unique key"))
    }

    private func deleteUnique(_ key: [UInt8], of id: ObjectID) throws {
        if defersUniqueClashes, let owner = state.uniqueOwner(key), state.id(owner) != id { return }
        try state.setUnique(key, nil)
    }

    /// Notes the entities whose count this save changed (the counts themselves live in the state).
    mutating func flushCounts() throws {
        for (tag, delta) in countDeltas.entries where delta != 0 { state.countWritten(tag) }
        countDeltas.removeAll()
    }

    mutating func takeDeferredUniqueKeys() throws {
        let held = try stillHeld(deferredUniques)
        deferredUniques = []
        defersUniqueClashes = false
        for (d, values) in held { try putUnique(d.key, d.unique, d.entity, values, d.id) }
    }
}

/// An open-addressing hash table of `Int32` entries (what they stand for, and their hashes, are
/// the caller's), probed linearly and kept at most half full: 4 bytes a slot.
struct HashSlots {
    private var slots: [Int32]
    private(set) var count = 0

    /// A table with room for `expected` entries before it first grows.
    init(expected: Int) {
        var n = 16
        while n < expected * 2 { n <<= 1 }
        slots = [Int32](repeating: -1, count: n)
    }

    /// Probes from `hash` for an entry `matches` accepts: that entry and its slot, or the empty
    /// slot where an entry with that hash would go.
    @inline(__always)
    func find(hash: Int, _ matches: (Int32) -> Bool) -> (slot: Int, entry: Int32?) {
        let mask = slots.count - 1
        var i = hash & mask
        while true {
            let e = slots[i]
            if e < 0 { return (i, nil) }
            if matches(e) { return (i, e) }
            i = (i + 1) & mask
        }
    }

    /// Puts `entry` (not negative) in `slot`, the empty one ``find(hash:_:)`` gave; past half
    /// full the table doubles, every entry placed again by `hash`.
    mutating func insert(_ entry: Int32, at slot: Int, hash: (Int32) -> Int) {
        precondition(entry >= 0 && slots[slot] < 0, "a slot table's entry goes in an empty slot")
        slots[slot] = entry
        count += 1
        guard count * 2 > slots.count else { return }
        let old = slots
        slots = [Int32](repeating: -1, count: old.count * 2)
        let mask = slots.count - 1
        for e in old where e >= 0 {
            var i = hash(e) & mask
            while slots[i] >= 0 { i = (i + 1) & mask }
            slots[i] = e
        }
    }
}
