import Foundation
import LibraryModel
@testable import Strata

// The random programs of the differential test: a small pool of ids and values (so that unique
// values clash, objects are changed on both sides and relationships cross often), the steps, and
// a generator that picks each step from the model's current state.

/// The ids and values the programs use, and their short names for traces.
struct ModelPool: Sendable {
    /// How many ids of each entity (by tag: Artist 1, Album 2, Track 3, Genre 4, Playlist 5).
    static let counts: [UInt16: Int] = [1: 2, 2: 3, 3: 5, 4: 3, 5: 3]
    static let prefixes: [UInt16: String] = [1: "Ar", 2: "Al", 3: "T", 4: "G", 5: "P"]
    static let tags: [UInt16] = [1, 2, 3, 4, 5]

    /// Deterministic ids (not `ObjectID.make()`, which is random): entity tag, a fixed
    /// millisecond, then the index.
    static func id(_ tag: UInt16, _ i: Int) -> ObjectID {
        ObjectID(high: UInt64(tag) << 48 | 1_700_000_000_000, low: UInt64(i))
    }

    static func ids(_ tag: UInt16) -> [ObjectID] { (0..<(counts[tag] ?? 0)).map { id(tag, $0) } }
    static let allIDs: [ObjectID] = tags.flatMap { ids($0) }

    static func name(_ id: ObjectID) -> String {
        guard let prefix = prefixes[id.entityTag], id.high & 0xFFFF_FFFF_FFFF == 1_700_000_000_000 else { return id.description }
        return "\(prefix)\(id.low)"
    }

    static func names(_ ids: [ObjectID]) -> String { "[" + ids.map(name).joined(separator: ", ") + "]" }

    /// A deterministic UUID: `n` in its last bytes.
    static func uuid(_ n: Int) -> UUID {
        UUID(uuid: (0xC0, 0xDE, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n)))
    }

    static let addedAt = Date(timeIntervalSince1970: 1_700_000_000)
    static let createdAt = Date(timeIntervalSince1970: 1_690_000_000)

    /// The values each changeable attribute takes (entity tag, attribute position).
    static let choices: [UInt16: [Int: [Value]]] = [
        1: [0: (0..<3).map { .uuid(uuid(100 + $0)) }, 1: [.string("a"), .string("b")]],
        2: [0: (0..<4).map { .uuid(uuid(200 + $0)) }, 1: [.string("x"), .string("y")], 2: [.null, .int(1990), .int(2000)]],
        3: [0: (0..<6).map { .uuid(uuid(300 + $0)) }, 1: [.string("t1"), .string("t2"), .string("t3")],
            2: [.int(100), .int(200), .int(300)], 6: [.null, .double(1.5), .double(4.5)], 10: [.int(0), .int(1), .int(2)]],
        4: [0: [.string("rock"), .string("jazz"), .string("pop")]],
        5: [0: [.string("p1"), .string("p2"), .string("p3")], 2: [.null, .string("n")]],
    ]

    /// A fresh value for the unique attribute of `tag` (a fix for a unique clash).
    static func fresh(_ tag: UInt16, _ n: Int) -> ModelAttribute {
        switch tag {
        case 4, 5: ModelAttribute(index: 0, value: .string("fix\(n)"))
        default: ModelAttribute(index: 0, value: .uuid(uuid(1000 + n)))
        }
    }

    /// All values of a new object of `tag`, from `pick`.
    static func values(_ tag: UInt16, _ pick: (Int) -> Value) -> [Value] {
        switch tag {
        case 1: [pick(0), pick(1), .null, .null, .null]
        case 2: [pick(0), pick(1), pick(2), .null]
        case 3: [pick(0), pick(1), pick(2), .null, .int(1), .bool(false), pick(6), .null, .date(addedAt), .null, pick(10)]
        case 4: [pick(0)]
        default: [pick(0), .date(createdAt), pick(2)]
        }
    }

    static let toOneTags: [UInt16] = [Album.artist.tag, Track.album.tag, Track.genre.tag]
    static let toManyTags: [UInt16] = [Artist.albums.tag, Album.tracks.tag, Track.playlists.tag, Genre.tracks.tag, Playlist.tracks.tag]
}

/// One step of a program. Contexts are numbered: 0 is the main context; every new context gets
/// the next number, so a recorded program replays exactly (also with steps left out).
enum ModelStep: Sendable, Equatable {
    case newView(Int)
    case refresh(Int)
    /// Drops a pinned view or a child, with every context below it.
    case drop(Int)
    case newChild(Int, parent: Int, policy: ModelPolicy?)
    /// Changes in a child: one operation through the typed API (`typed`), or a change set
    /// through `apply` (all or nothing).
    case change(Int, [ModelOp], typed: Bool)
    /// A save of another writer (`store.save`).
    case save([ModelOp])
    case commit(Int)
    case discard(Int)
    case rebase(Int)

    /// The contexts the step needs (it is skipped when one is gone, as in a shortened program).
    var contexts: [Int] {
        switch self {
        case .newView, .save: []
        case .refresh(let c), .drop(let c), .change(let c, _, _), .commit(let c), .discard(let c), .rebase(let c): [c]
        case .newChild(_, let parent, _): [parent]
        }
    }
}

extension ModelOp {
    var text: String {
        func attrs(_ id: ObjectID, _ list: [ModelAttribute]) -> String {
            let e = ModelSchema(schema: ModelProgram.schema).entity(id)
            return list.map { "\(e.attributes[$0.index].name)=\($0.value)" }.joined(separator: " ")
        }
        func rel(_ tag: UInt16) -> String {
            [Album.artist.tag: "Album.artist", Track.album.tag: "Track.album", Track.genre.tag: "Track.genre",
             Artist.albums.tag: "Artist.albums", Album.tracks.tag: "Album.tracks", Track.playlists.tag: "Track.playlists",
             Genre.tracks.tag: "Genre.tracks", Playlist.tracks.tag: "Playlist.tracks"][tag] ?? "rel \(tag)"
        }
        switch self {
        case .insert(let id, let values): return "insert \(ModelPool.name(id)) \(values.filter { !$0.isNull })"
        case .update(let id, let list): return "update \(ModelPool.name(id)) \(attrs(id, list))"
        case .delete(let id): return "delete \(ModelPool.name(id))"
        case .link(let r, let a, let b): return "link \(rel(r)) of \(ModelPool.name(a)) → \(ModelPool.name(b))"
        case .unlink(let r, let a, let b): return "unlink \(rel(r)) of \(ModelPool.name(a)) → \(b.map(ModelPool.name) ?? "nil")"
        }
    }

    /// The operation as a change set operation.
    var operation: ChangeSet.Operation {
        switch self {
        case .insert(let id, let values): .insert(id: id, values: values)
        case .update(let id, let list): .update(id: id, attributes: list.map { ChangeSet.AttributeValue(attribute: $0.index, value: $0.value) })
        case .delete(let id): .delete(id: id)
        case .link(let r, let a, let b): .link(relationship: r, from: .id(a), to: .id(b))
        case .unlink(let r, let a, let b): .unlink(relationship: r, from: .id(a), to: b.map { .id($0) })
        }
    }
}

extension ModelStep {
    var text: String {
        switch self {
        case .newView(let v): "c\(v) = store.newViewContext(autoRefresh: false)"
        case .refresh(let v): "c\(v).refresh()"
        case .drop(let c): "drop c\(c) (and the contexts below it)"
        case .newChild(let c, let p, let policy): "c\(c) = c\(p).newChild(mergePolicy: \(policy.map(\.description) ?? "inherited"))"
        case .change(let c, let ops, let typed):
            ops.count == 1 && typed ? "c\(c): \(ops[0].text)" : "c\(c).apply { " + ops.map(\.text).joined(separator: "; ") + " }"
        case .save(let ops): "store.save { " + ops.map(\.text).joined(separator: "; ") + " }"
        case .commit(let c): "c\(c).commit()"
        case .discard(let c): "c\(c).discard()"
        case .rebase(let c): "c\(c).rebase()"
        }
    }
}

/// Picks the steps of a program from a seed and the model's current state.
struct ModelProgram {
    private var rng: SeededGenerator
    /// Whether Track.album is required (the schema variant of some seeds).
    let albumRequired: Bool
    private var nextContext = 1
    private var freshValues = 0
    /// Steps decided ahead (a fix after a refused commit, then the commit again).
    private var queued: [ModelStep] = []
    private var started = false

    init(seed: UInt64, albumRequired: Bool) {
        rng = SeededGenerator(seed: seed)
        self.albumRequired = albumRequired
    }

    private mutating func roll(_ n: Int) -> Int { Int.random(in: 0..<n, using: &rng) }
    private mutating func chance(_ percent: Int) -> Bool { roll(100) < percent }
    private mutating func pick<T>(_ list: [T]) -> T? { list.isEmpty ? nil : list[roll(list.count)] }

    /// The next step, given the model after the previous one and, when the previous step was a
    /// refused commit, that refusal.
    mutating func next(_ model: ContextModel, refused: (ctx: Int, failure: ModelFailure)?) -> ModelStep {
        if !started {
            started = true
            return .save(populate())
        }
        if let refused, model.isChild(refused.ctx), chance(85) { queued = fix(model, refused.ctx, refused.failure) }
        while let step = queued.first {
            queued.removeFirst()
            if step.contexts.allSatisfy({ model.isView($0) || model.isChild($0) }) { return step }
        }
        let children = model.children.keys.sorted()
        let pinned = model.views.filter { $0.value != nil }.keys.sorted()
        if children.isEmpty || (children.count < 5 && chance(9)) { return newChild(model) }
        let r = roll(100)
        switch r {
        case 0..<14: return .save(ops(model.store, count: 1 + roll(3), forStore: true))
        case 14..<27: return .commit(pick(children) ?? 0)
        case 27..<30: return .discard(pick(children) ?? 0)
        case 30..<33: return .rebase(pick(children) ?? 0)
        case 33..<36 where pinned.count < 2:
            nextContext += 1
            return .newView(nextContext - 1)
        case 36..<41 where !pinned.isEmpty: return .refresh(pick(pinned) ?? 0)
        case 41..<43 where !pinned.isEmpty: return .drop(pick(pinned) ?? 0)
        case 43..<46: return .drop(pick(children) ?? 0)
        default:
            let c = pick(children) ?? 0
            let view = model.view(c)
            let many = chance(15)
            return .change(c, ops(view, count: many ? 2 + roll(2) : 1, forStore: false), typed: !many && chance(80))
        }
    }

    /// The first save: about two thirds of the pool with some relationships (values that do not
    /// clash; with a required album, every track gets one).
    private mutating func populate() -> [ModelOp] {
        let schema = ModelSchema(schema: Self.schema)
        var writer = ModelWriter(schema: schema, state: ModelState(), version: 0)
        var ops: [ModelOp] = []
        func attempt(_ op: ModelOp) {
            var probe = writer
            if (try? probe.apply(op)) != nil {
                writer = probe
                ops.append(op)
            }
        }
        for tag in [Artist.entityTag, Album.entityTag, Genre.entityTag, Playlist.entityTag, Track.entityTag] {
            for id in ModelPool.ids(tag) where chance(65) {
                for _ in 0..<4 where !writer.state.exists(id) { attempt(.insert(id, ModelPool.values(tag) { value(tag, $0, not: nil) })) }
                if albumRequired, tag == Track.entityTag, writer.state.exists(id) {
                    if let album = pick(writer.state.objects.keys.filter { $0.entityTag == Album.entityTag }.sorted()) {
                        attempt(.link(Track.album.tag, id, album))
                    } else {
                        ops.removeLast()
                        writer.state.objects[id] = nil
                    }
                }
            }
        }
        for _ in 0..<10 {
            let rel = pick([Album.artist.tag, Track.album.tag, Track.genre.tag, Track.playlists.tag, Track.playlists.tag]) ?? Track.album.tag
            let destination = Self.schema.entity(named: schema.relationship(rel).destination)?.tag ?? 2
            if let a = pick(writer.state.objects.keys.filter { $0.entityTag == rel >> 8 }.sorted()),
               let b = pick(writer.state.objects.keys.filter { $0.entityTag == destination }.sorted()) {
                attempt(.link(rel, a, b))
            }
        }
        return ops
    }

    private mutating func newChild(_ model: ContextModel) -> ModelStep {
        let pinned = model.views.filter { $0.value != nil }.keys.sorted()
        let nestable = model.children.keys.filter { model.depth($0) < 4 }.sorted()
        var parent = 0
        let r = roll(100)
        if r < 30, let p = pick(pinned) { parent = p } else if r < 65, let p = pick(nestable) { parent = p }
        let policies: [ModelPolicy] = [.fail, .fail, .storeWins, .contextWins, .propertyMerge(preferContext: false), .propertyMerge(preferContext: true)]
        let policy = model.isChild(parent) && chance(50) ? nil : pick(policies)
        nextContext += 1
        return .newChild(nextContext - 1, parent: parent, policy: policy)
    }

    /// Operations against `state` (a child's view, or the store for a save): mostly on objects
    /// that exist there, sometimes on any id of the pool (so that ids, unique values and ends
    /// clash and are missing).
    private mutating func ops(_ state: ModelState, count: Int, forStore: Bool) -> [ModelOp] {
        var state = state
        var result: [ModelOp] = []
        for _ in 0..<count {
            var op = op(state)
            // In a child, a change that changes nothing (setting a to-one to its target, adding an
            // edge that exists, a whole-value update equal to the values) is not generated: whether
            // it touches the object or key is left open by the semantics.
            for _ in 0..<8 where !forStore && Self.changesNothing(op, in: state) { op = self.op(state) }
            result.append(op)
            // Later operations of one set see the earlier ones (as far as they apply).
            var w = ModelWriter(schema: ModelSchema(schema: Self.schema), state: state, version: 0)
            if (try? w.apply(op)) != nil { state = w.state }
            if albumRequired, forStore, case .insert(let id, _) = op, id.entityTag == Track.entityTag,
               let album = pick(state.objects.keys.filter { $0.entityTag == Album.entityTag }.sorted()) {
                result.append(.link(Track.album.tag, id, album))
            }
        }
        return result
    }

    /// Whether `op` is accepted in `state` and changes nothing there.
    static func changesNothing(_ op: ModelOp, in state: ModelState) -> Bool {
        var w = ModelWriter(schema: ModelSchema(schema: schema), state: state, version: 0)
        return (try? w.apply(op)) != nil && !w.changed
    }

    /// The schema the generator plans with (relationships and inverses only; both variants agree).
    static let schema: Schema = {
        do { return try librarySchema() } catch { preconditionFailure("the library schema loads: \(error)") }
    }()

    private mutating func object(_ state: ModelState, _ tag: UInt16) -> ObjectID {
        let existing = state.objects.keys.filter { $0.entityTag == tag }.sorted()
        if !existing.isEmpty, chance(80), let id = pick(existing) { return id }
        return pick(ModelPool.ids(tag)) ?? ModelPool.id(tag, 0)
    }

    private mutating func value(_ tag: UInt16, _ attribute: Int, not current: Value?) -> Value {
        let options = ModelPool.choices[tag]?[attribute] ?? [.null]
        let different = options.filter { $0 != current }
        return pick(different.isEmpty ? options : different) ?? .null
    }

    private mutating func op(_ state: ModelState) -> ModelOp {
        let tag: UInt16 = [1, 2, 2, 3, 3, 3, 3, 4, 4, 5, 5][roll(11)]
        let schema = ModelSchema(schema: Self.schema)
        let existing = state.objects.keys.filter { $0.entityTag == tag }.count
        let insertShare = existing * 2 < ModelPool.counts[tag, default: 1] ? 45 : 18
        switch roll(100) < insertShare ? 0 : 18 + roll(82) {
        case 0..<18:
            let id = chance(70) ? (pick(ModelPool.ids(tag).filter { !state.exists($0) }) ?? ModelPool.id(tag, 0)) : (pick(ModelPool.ids(tag)) ?? ModelPool.id(tag, 0))
            return .insert(id, ModelPool.values(tag) { value(tag, $0, not: nil) })
        case 18..<42:
            let id = object(state, tag)
            let changeable = (ModelPool.choices[tag] ?? [:]).keys.sorted()
            let current = state.objects[id]?.values
            if let current, chance(25) {
                // A whole-value update (typed `update(_:)`): one or two attributes differ.
                var values = current
                for _ in 0..<(1 + roll(2)) {
                    if let a = pick(changeable) { values[a] = value(tag, a, not: values[a]) }
                }
                return .update(id, values.enumerated().map { ModelAttribute(index: $0.offset, value: $0.element) })
            }
            let a = pick(changeable) ?? 0
            // A new value for an existing object (an update that changes nothing is not generated:
            // whether it counts as a change is left open).
            return .update(id, [ModelAttribute(index: a, value: value(tag, a, not: current?[a]))])
        case 42..<54:
            return .delete(object(state, tag))
        case 54..<76:
            let rel = pick(ModelPool.toOneTags) ?? Track.album.tag
            let r = schema.relationship(rel)
            let a = object(state, rel >> 8)
            if chance(22) { return .unlink(rel, a, nil) }
            let destination = Self.schema.entity(named: r.destination)?.tag ?? 2
            return .link(rel, a, object(state, destination))
        default:
            let rel = pick(ModelPool.toManyTags) ?? Playlist.tracks.tag
            let r = schema.relationship(rel)
            let destination = Self.schema.entity(named: r.destination)?.tag ?? 3
            let existing = state.edges.filter { $0.rel == rel }.sorted()
            if chance(40), let e = pick(existing) { return .unlink(rel, e.from, e.to) }
            return .link(rel, object(state, rel >> 8), object(state, destination))
        }
    }

    /// Steps that fix a refused commit of `ctx`, then the commit again: rename what clashes,
    /// rebase after a conflict, delete an insert whose id is taken, give a track its required
    /// album, refresh a pinned root after a missing end, discard when nothing else helps.
    private mutating func fix(_ model: ContextModel, _ ctx: Int, _ failure: ModelFailure) -> [ModelStep] {
        let view = model.view(ctx)
        var steps: [ModelStep] = []
        for kind in failure.kinds.sorted(by: { $0.description < $1.description }) {
            let culprits = failure.culprits[kind] ?? []
            switch kind {
            case .conflict:
                steps.append(.rebase(ctx))
            case .validation(.uniqueConstraint):
                for id in culprits where view.exists(id) {
                    freshValues += 1
                    steps.append(.change(ctx, [.update(id, [ModelPool.fresh(id.entityTag, freshValues)])], typed: true))
                }
            case .validation(.duplicateID):
                for id in culprits where view.exists(id) { steps.append(.change(ctx, [.delete(id)], typed: true)) }
            case .validation(.requiredRelationship):
                let albums = view.objects.keys.filter { $0.entityTag == Album.entityTag }.sorted()
                for id in culprits where view.exists(id) {
                    if let album = pick(albums) {
                        steps.append(.change(ctx, [.link(Track.album.tag, id, album)], typed: true))
                    } else {
                        steps.append(.change(ctx, [.delete(id)], typed: true))
                    }
                }
            case .validation(.objectNotFound):
                // (Also accepted for a conflict on an object the store deleted: the rebase is the fix.)
                if Set(culprits).isSubset(of: failure.culprits[.conflict] ?? []) { continue }
                let root = model.rootView(ctx)
                steps.append(root != 0 && chance(70) ? .refresh(root) : .discard(ctx))
            default:
                steps.append(.discard(ctx))
            }
        }
        steps.append(.commit(ctx))
        return steps
    }
}
