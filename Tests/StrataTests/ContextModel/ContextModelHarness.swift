import Foundation
import LibraryModel
import Testing
@testable import Strata

// Drives a real store and the reference model with the same steps and compares, after every
// step, every read of every live context.

/// The model's view of a context, read through the same protocol as a real context (so the typed
/// API built on it, `object` and `related`, reads the model the same way).
struct ModelReader: ObjectReading {
    let schema: Schema
    let state: ModelState

    func record(_ id: ObjectID) -> Record? {
        guard let o = state.objects[id], let e = schema.entity(tag: o.entity) else { return nil }
        return Record(entity: e, id: id, values: o.values, version: TransactionID(o.version))
    }

    func relatedIDs(_ relationship: RelationshipDescription, of id: ObjectID) -> [ObjectID] {
        // "relatedIDs(r, of: a) = ... ([] when a does not exist)"
        state.exists(id) ? state.targets(relationship.tag, of: id) : []
    }

    func fetch(_ query: Query) -> [Record] { state.fetch(query, ModelSchema(schema: schema)).compactMap { record($0) } }
    func count(_ query: Query) -> Int { state.count(query, ModelSchema(schema: schema)) }
}

/// The reads compared after every step, each as one line `label = result`.
enum ModelReads {
    /// The queries: per entity, all objects, a filter on an attribute, filters through
    /// relationships (to-one target, unset, key path, to-many membership), sort with a window.
    static let queries: [(label: String, query: Query, count: Bool)] = {
        let ar0 = ModelPool.id(1, 0), al0 = ModelPool.id(2, 0), t0 = ModelPool.id(3, 0), t1 = ModelPool.id(3, 1)
        let g0 = ModelPool.id(4, 0), p0 = ModelPool.id(5, 0)
        return [
            ("Artist", Query(entity: "Artist"), true),
            ("Artist name == a", Query(entity: "Artist", predicate: (Artist.name == "a").predicate), true),
            ("Artist albums.any(title == x)", Query(entity: "Artist", predicate: Artist.albums.any(Album.title == "x").predicate), true),
            ("Artist by name desc, offset 1, limit 1", Query(entity: "Artist", sort: [Artist.name.descending], limit: 1, offset: 1), false),
            ("Album", Query(entity: "Album"), true),
            ("Album year == 1990", Query(entity: "Album", predicate: (Album.year == 1990).predicate), true),
            ("Album artist == Ar0", Query(entity: "Album", predicate: (Album.artist == ar0).predicate), true),
            ("Album artist == nil", Query(entity: "Album", predicate: (Album.artist == nil).predicate), true),
            ("Album tracks.any(duration >= 200)", Query(entity: "Album", predicate: Album.tracks.any(Track.durationSeconds >= 200).predicate), true),
            ("Album tracks.contains(T0)", Query(entity: "Album", predicate: Album.tracks.contains(t0).predicate), true),
            ("Album by title, year desc, offset 1, limit 2",
             Query(entity: "Album", sort: [Album.title.ascending, Album.year.descending], limit: 2, offset: 1), false),
            ("Track", Query(entity: "Track"), true),
            ("Track duration >= 200", Query(entity: "Track", predicate: (Track.durationSeconds >= 200).predicate), true),
            ("Track album == Al0", Query(entity: "Track", predicate: (Track.album == al0).predicate), true),
            ("Track album == nil", Query(entity: "Track", predicate: (Track.album == nil).predicate), true),
            ("Track genre == G0", Query(entity: "Track", predicate: (Track.genre == g0).predicate), true),
            ("Track album.matches(title == x)", Query(entity: "Track", predicate: Track.album.matches(Album.title == "x").predicate), true),
            ("Track playlists.contains(P0)", Query(entity: "Track", predicate: Track.playlists.contains(p0).predicate), true),
            ("Track by duration, title desc, offset 1, limit 3",
             Query(entity: "Track", sort: [Track.durationSeconds.ascending, Track.title.descending], limit: 3, offset: 1), false),
            ("Track by rating desc, limit 2", Query(entity: "Track", sort: [Track.rating.descending], limit: 2), false),
            ("Genre", Query(entity: "Genre"), true),
            ("Genre name == rock", Query(entity: "Genre", predicate: (Genre.name == "rock").predicate), true),
            ("Genre tracks.any(title == t1)", Query(entity: "Genre", predicate: Genre.tracks.any(Track.title == "t1").predicate), true),
            ("Genre by name, limit 2", Query(entity: "Genre", sort: [Genre.name.ascending], limit: 2), false),
            ("Playlist", Query(entity: "Playlist"), true),
            ("Playlist tracks.contains(T1)", Query(entity: "Playlist", predicate: Playlist.tracks.contains(t1).predicate), true),
            ("Playlist notes == nil", Query(entity: "Playlist", predicate: (Playlist.notes == nil).predicate), true),
            ("Playlist by name desc, offset 1", Query(entity: "Playlist", sort: [Playlist.name.descending], offset: 1), false),
        ]
    }()

    static func render(_ r: Record, version: Bool) -> String {
        "\(r.values.map(\.description))" + (version ? " v\(r.version)" : "")
    }

    static func render<E: Entity>(_ e: E?) -> String {
        e.map { "\(ModelPool.name($0.id)) \($0.storedValues.map(\.description))" } ?? "nil"
    }

    static func render<E: Entity>(_ list: [E]) -> String { "[" + list.map { render($0) }.joined(separator: ", ") + "]" }

    /// Every read: each object of the pool by id, each query with its count, `relatedIDs` in both
    /// directions of every relationship of every object of the pool, typed `related` and a typed
    /// fetch. `version(id)` tells whether the record's version is compared.
    static func lines(_ r: some ObjectReading, version: (ObjectID) -> Bool) -> [String] {
        var lines: [String] = []
        lines.reserveCapacity(160)
        func line(_ label: String, _ body: () throws -> String) {
            do { lines.append("\(label) = \(try body())") } catch { lines.append("\(label) threw \(error)") }
        }
        let schema = r.schema
        for id in ModelPool.allIDs {
            line("record \(ModelPool.name(id))") { try r.record(id).map { render($0, version: version(id)) } ?? "nil" }
        }
        for q in queries {
            line("fetch \(q.label)") {
                let records = try r.fetch(q.query)
                return q.count ? ModelPool.names(records.map(\.id)) : records.map { "\(ModelPool.name($0.id)) \($0.values.map(\.description))" }.joined(separator: ", ")
            }
            if q.count { line("count \(q.label)") { "\(try r.count(q.query))" } }
        }
        for id in ModelPool.allIDs {
            for rel in schema.entity(tag: id.entityTag)?.relationships ?? [] {
                line("\(ModelPool.name(id)).\(rel.name)") { ModelPool.names(try r.relatedIDs(rel, of: id)) }
            }
        }
        for id in ModelPool.ids(Artist.entityTag) { line("related(\(ModelPool.name(id)), Artist.albums)") { render(try r.related(id, Artist.albums)) } }
        for id in ModelPool.ids(Album.entityTag) {
            line("related(\(ModelPool.name(id)), Album.artist)") { render(try r.related(id, Album.artist)) }
            line("related(\(ModelPool.name(id)), Album.tracks)") { render(try r.related(id, Album.tracks)) }
        }
        for id in ModelPool.ids(Track.entityTag) {
            line("related(\(ModelPool.name(id)), Track.album)") { render(try r.related(id, Track.album)) }
            line("related(\(ModelPool.name(id)), Track.genre)") { render(try r.related(id, Track.genre)) }
            line("related(\(ModelPool.name(id)), Track.playlists)") { render(try r.related(id, Track.playlists)) }
        }
        for id in ModelPool.ids(Genre.entityTag) { line("related(\(ModelPool.name(id)), Genre.tracks)") { render(try r.related(id, Genre.tracks)) } }
        for id in ModelPool.ids(Playlist.entityTag) { line("related(\(ModelPool.name(id)), Playlist.tracks)") { render(try r.related(id, Playlist.tracks)) } }
        line("typed fetch Track duration >= 200 && album != nil by title, limit 2") {
            render(try r.fetch(Track.self, where: Track.durationSeconds >= 200 && Track.album != nil, sortedBy: [Track.title.ascending], limit: 2))
        }
        line("typed count Genre tracks.any(all)") { "\(try r.count(Genre.self, where: Genre.tracks.any(.all)))" }
        return lines
    }
}

/// The library schema, or its variant in which every track needs an album (Track.album not
/// optional), to exercise required to-ones at the root commit.
func contextModelSchema(albumRequired: Bool) throws -> Schema {
    guard albumRequired else { return try librarySchema() }
    let file = librarySchemaDirectory.appendingPathComponent("v2.json")
    guard var json = try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any],
          var entities = json["entities"] as? [[String: Any]],
          let t = entities.firstIndex(where: { $0["name"] as? String == "Track" }),
          var relationships = entities[t]["relationships"] as? [[String: Any]],
          let a = relationships.firstIndex(where: { $0["name"] as? String == "album" })
    else { throw StrataError.invalidQuery(entity: "Track", reason: "the library schema has no Track.album") }
    relationships[a]["optional"] = false
    entities[t]["relationships"] = relationships
    json["entities"] = entities
    let data = try JSONSerialization.data(withJSONObject: json)
    return try Schema.parse(Array(data), source: "library v2 with Track.album required", expectedVersion: 2)
}

/// A real store and the model, driven step by step.
final class ModelHarness {
    let schema: Schema
    let store: Store
    private(set) var model: ContextModel
    private var views: [Int: ViewContext] = [:]
    private var children: [Int: ChildContext] = [:]
    /// One line per step: what was done and how it ended.
    private(set) var trace: [String] = []
    /// The last step's refused commit (the generator follows it with a fix).
    private(set) var refused: (ctx: Int, failure: ModelFailure)?
    /// Children that accepted a change since they were last emptied (by a commit or a discard).
    /// Decision: a change that changes nothing (clearing an unset to-one, setting a value it
    /// has) may count as pending or not; a child emptied and not changed since has no changes.
    private var changedSinceEmptied: Set<Int> = []

    init(schema: Schema) throws {
        self.schema = schema
        store = try Store.temporary(schema: schema)
        model = ContextModel(schema: schema)
        views[0] = store.mainContext
        model.addView(0, autoRefresh: true)
    }

    func close() {
        for v in views.values { v.close() }
        views = [:]
        children = [:]
        store.close()
    }

    /// Whether `step` can run (the contexts it needs are there, the ones it makes are not).
    func canRun(_ step: ModelStep) -> Bool {
        switch step {
        case .newView(let c), .newChild(let c, _, _): if views[c] != nil || children[c] != nil { return false }
        default: break
        }
        switch step {
        case .refresh(let v): return model.isView(v) && v != 0
        case .drop(let c): return c != 0 && (model.isView(c) || model.isChild(c))
        case .newChild(_, let p, _): return model.isView(p) || model.isChild(p)
        case .change(let c, _, _), .commit(let c), .discard(let c), .rebase(let c): return model.isChild(c)
        case .newView, .save: return true
        }
    }

    /// Runs `step` on both; returns what differs (nil: they agree, in the outcome and, with
    /// `reads`, in every read).
    func perform(_ step: ModelStep, reads: Bool = true) async -> [String]? {
        refused = nil
        let index = trace.count
        var outcome = "ok"
        var differences: [String]?
        switch step {
        case .newView(let v):
            do {
                views[v] = try store.newViewContext(label: "c\(v)")
                model.addView(v, autoRefresh: false)
            } catch {
                differences = ["newViewContext threw \(error)"]
            }
        case .refresh(let v):
            do { try views[v]?.refresh() } catch { differences = ["refresh() threw \(error)"] }
            model.refresh(v)
        case .drop(let c):
            for d in model.descendants(c) + [c] {
                children[d] = nil
                views.removeValue(forKey: d)?.close()
            }
            model.drop(c)
        case .newChild(let c, let p, let policy):
            if let v = views[p] {
                children[c] = v.newChild(label: "c\(c)", mergePolicy: (policy ?? .fail).mergePolicy)
                model.addChild(c, parent: p, policy: policy ?? .fail)
            } else if let parent = children[p], let inherited = model.children[p]?.policy {
                children[c] = parent.newChild(label: "c\(c)", mergePolicy: policy?.mergePolicy)
                model.addChild(c, parent: p, policy: policy ?? inherited)
            }
        case .change(let c, let ops, let typed):
            guard let child = children[c] else { break }
            var real: Error?
            do {
                if typed, ops.count == 1 { try Self.performTyped(ops[0], on: child) } else { try child.apply(Self.changeSet(ops)) }
            } catch { real = error }
            var expected: ModelFailure?
            do { try model.change(c, ops) } catch let f as ModelFailure { expected = f } catch { expected = ModelFailure() }
            (outcome, differences) = Self.compare(real, expected)
            if real == nil { changedSinceEmptied.insert(c) }
        case .save(let ops):
            var real: Error?, tx: TransactionID?
            do { tx = try await store.save(Self.changeSet(ops), author: "elsewhere") } catch { real = error }
            var expected: ModelFailure?, modelTx: UInt64 = 0
            do { modelTx = try model.save(ops) } catch let f as ModelFailure { expected = f } catch { expected = ModelFailure() }
            (outcome, differences) = Self.compare(real, expected)
            if differences == nil, expected == nil {
                outcome = "transaction \(modelTx)"
                if tx != TransactionID(modelTx) { differences = ["store.save returned transaction \(tx.map(\.description) ?? "nil"), the model \(modelTx)"] }
            }
        case .commit(let c):
            guard let child = children[c] else { break }
            let head = model.head
            var real: Error?, tx: TransactionID?
            do { tx = try await child.commit() } catch { real = error }
            var expected: ModelFailure?, result = ModelCommitResult.nothing
            do { result = try model.commit(c) } catch let f as ModelFailure { expected = f } catch { expected = ModelFailure() }
            (outcome, differences) = Self.compare(real, expected)
            if let expected, differences == nil { refused = (c, expected) }
            if real == nil {
                changedSinceEmptied.remove(c)
                if let p = model.children[c]?.parent, model.isChild(p), result == .nested { changedSinceEmptied.insert(p) }
            }
            if differences == nil, expected == nil {
                let returned = tx.map(\.description) ?? "nil"
                switch result {
                case .nested:
                    outcome = "into its parent"
                    if tx != nil { differences = ["commit() into a parent child returned transaction \(returned), not nil"] }
                case .nothing, .root(created: nil):
                    // Decision: when nothing changed in the store, nil and the previous transaction's
                    // id are both accepted (whether an all-no-op set reaches the writer is open).
                    outcome = result == .nothing ? "nothing to commit" : "sent, no change in the store"
                    if tx != nil, tx != TransactionID(head) { differences = ["commit() returned transaction \(returned); nothing was written (head \(head))"] }
                case .root(created: let n?):
                    outcome = "transaction \(n)"
                    if tx != TransactionID(n) { differences = ["commit() returned \(returned), the model's transaction is \(n)"] }
                }
            }
        case .discard(let c):
            changedSinceEmptied.remove(c)
            children[c]?.discard()
            model.discard(c)
        case .rebase(let c):
            var real: Error?
            do { try children[c]?.rebase() } catch { real = error }
            var expected: ModelFailure?
            do { try model.rebase(c) } catch let f as ModelFailure { expected = f } catch { expected = ModelFailure() }
            (outcome, differences) = Self.compare(real, expected)
        }
        trace.append("\(index): \(step.text)  ⇒ \(outcome)")
        if let differences { return differences }
        return reads ? compareReads() : nil
    }

    /// Every read of every live context, real against the model.
    func compareReads() -> [String]? {
        var differences: [String] = []
        for ctx in model.contexts {
            for problem in model.invariantViolations(ctx) { differences.append("the model itself is wrong: c\(ctx): \(problem)") }
            let layered = model.layeredIDs(ctx)
            let version = { (id: ObjectID) in !layered.contains(id) }
            let expected = ModelReads.lines(ModelReader(schema: schema, state: model.view(ctx)), version: version)
            let actual: [String]
            if let v = views[ctx] {
                actual = ModelReads.lines(v, version: version)
            } else if let c = children[ctx] {
                actual = ModelReads.lines(c, version: version)
                // hasChanges: true when there is something to commit, false when nothing is pending.
                if !model.netChanges(ctx).isEmpty, !c.hasChanges { differences.append("c\(ctx).hasChanges is false; the model has \(model.netChanges(ctx)) to commit") }
                if !model.hasPendingLayer(ctx), !changedSinceEmptied.contains(ctx), c.hasChanges { differences.append("c\(ctx).hasChanges is true; the model has nothing pending") }
            } else {
                continue
            }
            for (e, a) in zip(expected, actual) where e != a {
                differences.append("c\(ctx) \(a)\n      model: \(e)")
            }
            if differences.count >= 16 { break }
        }
        return differences.isEmpty ? nil : differences
    }

    /// The outcome of a change made on both: the same success, or refusals of a kind the model allows.
    static func compare(_ real: Error?, _ expected: ModelFailure?) -> (String, [String]?) {
        switch (real, expected) {
        case (nil, nil): return ("ok", nil)
        case (let e?, let f?):
            if let k = ModelFailureKind(e), f.kinds.contains(k) { return ("refused: \(k)", nil) }
            return ("refused", ["the implementation threw \(e); the model refuses with \(f)"])
        case (nil, let f?):
            let culprits = f.culprits.map { "\($0.key): \(ModelPool.names($0.value))" }.sorted().joined(separator: "; ")
            return ("accepted", ["the implementation accepted it; the model refuses with \(culprits)"])
        case (let e?, nil):
            return ("refused", ["the implementation threw \(e); the model accepts it"])
        }
    }

    static func changeSet(_ ops: [ModelOp]) -> ChangeSet {
        var c = ChangeSet()
        for op in ops { c.append(op.operation) }
        return c
    }

    /// One operation through the typed API of a child.
    static func performTyped(_ op: ModelOp, on c: ChildContext) throws {
        switch op {
        case .insert(let id, let v):
            switch id.entityTag {
            case Artist.entityTag: try c.insert(try Artist(id: id, storedValues: v))
            case Album.entityTag: try c.insert(try Album(id: id, storedValues: v))
            case Track.entityTag: try c.insert(try Track(id: id, storedValues: v))
            case Genre.entityTag: try c.insert(try Genre(id: id, storedValues: v))
            default: try c.insert(try Playlist(id: id, storedValues: v))
            }
        case .update(let id, let attributes):
            let values = attributes.map(\.value)
            let whole = attributes.enumerated().allSatisfy { $0.offset == $0.element.index }
            switch (id.entityTag, whole, attributes.count) {
            case (Artist.entityTag, true, 5): try c.update(try Artist(id: id, storedValues: values))
            case (Album.entityTag, true, 4): try c.update(try Album(id: id, storedValues: values))
            case (Track.entityTag, true, 11): try c.update(try Track(id: id, storedValues: values))
            case (Playlist.entityTag, true, 3): try c.update(try Playlist(id: id, storedValues: values))
            case (_, _, 1): try set(attributes[0], of: id, on: c)
            default: try c.change { $0.update(id, attributes.map { ChangeSet.AttributeValue(attribute: $0.index, value: $0.value) }) }
            }
        case .delete(let id): try c.delete(id)
        case .link(let rel, let a, let b):
            switch rel {
            case Album.artist.tag: try c.set(Album.artist, of: a, to: b)
            case Track.album.tag: try c.set(Track.album, of: a, to: b)
            case Track.genre.tag: try c.set(Track.genre, of: a, to: b)
            case Artist.albums.tag: try c.add(b, to: Artist.albums, of: a)
            case Album.tracks.tag: try c.add(b, to: Album.tracks, of: a)
            case Track.playlists.tag: try c.add(b, to: Track.playlists, of: a)
            case Genre.tracks.tag: try c.add(b, to: Genre.tracks, of: a)
            default: try c.add(b, to: Playlist.tracks, of: a)
            }
        case .unlink(let rel, let a, nil):
            switch rel {
            case Album.artist.tag: try c.set(Album.artist, of: a, to: nil)
            case Track.album.tag: try c.set(Track.album, of: a, to: nil)
            case Track.genre.tag: try c.set(Track.genre, of: a, to: nil)
            default: try c.apply(changeSet([op]))
            }
        case .unlink(let rel, let a, let b?):
            switch rel {
            case Artist.albums.tag: try c.remove(b, from: Artist.albums, of: a)
            case Album.tracks.tag: try c.remove(b, from: Album.tracks, of: a)
            case Track.playlists.tag: try c.remove(b, from: Track.playlists, of: a)
            case Genre.tracks.tag: try c.remove(b, from: Genre.tracks, of: a)
            case Playlist.tracks.tag: try c.remove(b, from: Playlist.tracks, of: a)
            default: try c.apply(changeSet([op]))
            }
        }
    }

    /// One attribute through the typed `set(_:of:to:)`.
    static func set(_ a: ModelAttribute, of id: ObjectID, on c: ChildContext) throws {
        func set<E: Entity, V: StoredValue>(_ key: Attribute<E, V>) throws { try c.set(key, of: id, to: try V(storedValue: a.value)) }
        switch (id.entityTag, a.index) {
        case (Artist.entityTag, 0): try set(Artist.mbid)
        case (Artist.entityTag, 1): try set(Artist.name)
        case (Album.entityTag, 0): try set(Album.mbid)
        case (Album.entityTag, 1): try set(Album.title)
        case (Album.entityTag, 2): try set(Album.year)
        case (Track.entityTag, 0): try set(Track.mbid)
        case (Track.entityTag, 1): try set(Track.title)
        case (Track.entityTag, 2): try set(Track.durationSeconds)
        case (Track.entityTag, 6): try set(Track.rating)
        case (Track.entityTag, 10): try set(Track.playCount)
        case (Genre.entityTag, 0): try set(Genre.name)
        case (Playlist.entityTag, 0): try set(Playlist.name)
        case (Playlist.entityTag, 2): try set(Playlist.notes)
        default: try c.change { $0.update(id, [ChangeSet.AttributeValue(attribute: a.index, value: a.value)]) }
        }
    }
}

/// A program that made the implementation and the model disagree.
struct ModelRunFailure: Sendable {
    let seed: UInt64
    let albumRequired: Bool
    /// The step at which they disagreed, and how many steps the run was to have.
    let step: Int
    let steps: Int
    let trace: [String]
    let differences: [String]
    /// The program shortened while it still fails (when shrinking ran): its trace and differences.
    var shortened: (trace: [String], differences: [String])?

    var report: String {
        var s = "The implementation and the context model disagree: seed \(seed)\(albumRequired ? " (schema variant: Track.album required)" : ""), step \(step).\n"
        s += "Replay: STRATA_MODEL_SEED=\(seed) STRATA_MODEL_STEPS=\(step + 1) swift test --skip-build --filter ContextModel\n"
        s += "What differs (implementation first):\n" + differences.prefix(16).map { "  " + $0 }.joined(separator: "\n") + "\n"
        if let shortened {
            s += "Shortened program (\(shortened.trace.count) steps, still failing):\n" + shortened.trace.map { "  " + $0 }.joined(separator: "\n") + "\n"
            s += "  what differs there:\n" + shortened.differences.prefix(8).map { "    " + $0 }.joined(separator: "\n") + "\n"
        }
        s += "Steps:\n" + trace.map { "  " + $0 }.joined(separator: "\n")
        return s
    }
}

/// Runs programs: one seed, a replay of recorded steps, shrinking.
enum ContextModelRun {
    static let environment = ProcessInfo.processInfo.environment

    /// Every fourth seed uses the schema variant with a required Track.album.
    static func albumRequired(_ seed: UInt64) -> Bool { seed % 4 == 3 }

    /// The seeds of the short run, or `STRATA_MODEL_SEED` (one) / `STRATA_MODEL_SEEDS`
    /// (`a-b` inclusive, or `a,b,c`).
    static func seeds() -> [UInt64] {
        if let one = environment["STRATA_MODEL_SEED"].flatMap({ UInt64($0) }) { return [one] }
        if let list = environment["STRATA_MODEL_SEEDS"] { return parseSeeds(list) }
        return Array(1...12)
    }

    static func parseSeeds(_ text: String) -> [UInt64] {
        let parts = text.split(separator: "-").map { UInt64($0.trimmingCharacters(in: .whitespaces)) }
        if parts.count == 2, let a = parts[0], let b = parts[1], a <= b { return Array(a...b) }
        return text.split(separator: ",").compactMap { UInt64($0.trimmingCharacters(in: .whitespaces)) }
    }

    /// Steps per seed (`STRATA_MODEL_STEPS`).
    static func steps(default d: Int) -> Int { environment["STRATA_MODEL_STEPS"].flatMap { Int($0) } ?? d }

    /// Whether a failing program is shortened (`STRATA_MODEL_SHRINK=0` turns it off), and for how
    /// long at most (`STRATA_MODEL_SHRINK_SECONDS`, default 10).
    static var shrinks: Bool { environment["STRATA_MODEL_SHRINK"] != "0" }
    static var shrinkBudget: Duration { .seconds(environment["STRATA_MODEL_SHRINK_SECONDS"].flatMap { Int($0) } ?? 10) }

    /// Runs `steps` steps of the program of `seed`; returns how many ran and the failure, if any.
    static func run(seed: UInt64, steps: Int, shrink: Bool) async throws -> (steps: Int, failure: ModelRunFailure?) {
        let required = albumRequired(seed)
        let harness = try ModelHarness(schema: try contextModelSchema(albumRequired: required))
        var program = ModelProgram(seed: seed, albumRequired: required)
        var recorded: [ModelStep] = []
        var failure: ModelRunFailure?
        for i in 0..<steps {
            let step = program.next(harness.model, refused: harness.refused)
            recorded.append(step)
            // A step is synchronous work on a cooperative thread: give the other tests their turn.
            await Task.yield()
            if let differences = await harness.perform(step) {
                failure = ModelRunFailure(seed: seed, albumRequired: required, step: i, steps: steps, trace: harness.trace, differences: differences)
                break
            }
        }
        harness.close()
        guard var failure else { return (steps, nil) }
        if shrink { failure.shortened = try await shorten(recorded, albumRequired: required, budget: shrinkBudget) }
        return (failure.step + 1, failure)
    }

    /// Runs the program of `seed` on the model alone (no store), checking after every step that
    /// every view keeps the invariants and that the store stays valid (unique keys, required
    /// to-ones): a check of the model over programs longer than the comparison reaches on a
    /// failing implementation. Returns the first problem.
    static func runModelOnly(seed: UInt64, steps: Int) throws -> String? {
        let required = albumRequired(seed)
        let schema = try contextModelSchema(albumRequired: required)
        var model = ContextModel(schema: schema)
        model.addView(0, autoRefresh: true)
        var program = ModelProgram(seed: seed, albumRequired: required)
        var refused: (ctx: Int, failure: ModelFailure)?
        var trace: [String] = []
        for i in 0..<steps {
            let step = program.next(model, refused: refused)
            refused = nil
            trace.append("\(i): \(step.text)")
            if case .commit(let c) = step, model.isChild(c) {
                do { _ = try model.commit(c) } catch let f as ModelFailure { refused = (c, f) }
            } else {
                ContextModelScenarioTests.run(step, on: &model)
            }
            var problems = model.contexts.flatMap { c in model.invariantViolations(c).map { "c\(c): \($0)" } }
            let store = ModelWriter(schema: model.schema, state: model.store, version: 0)
            for id in model.store.objects.keys.sorted() where store.uniqueClash(id) { problems.append("the store holds a unique clash on \(ModelPool.name(id))") }
            for id in store.requiredViolations() { problems.append("the store holds \(ModelPool.name(id)) without its required to-one") }
            if let first = problems.first {
                return "seed \(seed), step \(i): \(first)\n" + trace.suffix(30).joined(separator: "\n")
            }
        }
        return nil
    }

    /// Runs recorded steps (skipping those whose contexts are gone); returns the trace and what
    /// differs, or nil when the program passes.
    /// With `readsEveryStep` false (while shrinking), the reads are compared after the last step
    /// only (outcomes after every step): a shortened program must still fail where it ends.
    static func replay(_ steps: [ModelStep], albumRequired: Bool, readsEveryStep: Bool = true) async throws -> (trace: [String], differences: [String])? {
        let harness = try ModelHarness(schema: try contextModelSchema(albumRequired: albumRequired))
        defer { harness.close() }
        for step in steps where harness.canRun(step) {
            await Task.yield()
            if let differences = await harness.perform(step, reads: readsEveryStep) { return (harness.trace, differences) }
        }
        if !readsEveryStep, let differences = harness.compareReads() { return (harness.trace, differences) }
        return nil
    }

    /// Drops chunks of steps (halves, quarters, … single steps) while the program still fails,
    /// within `budget`.
    static func shorten(_ steps: [ModelStep], albumRequired: Bool, budget: Duration) async throws -> (trace: [String], differences: [String])? {
        let clock = ContinuousClock()
        let deadline = clock.now + budget
        var current = steps
        guard var last = try await replay(current, albumRequired: albumRequired, readsEveryStep: false) else { return nil }
        var chunk = max(1, current.count / 2)
        while clock.now < deadline {
            var i = 0
            var removed = false
            while i < current.count, clock.now < deadline {
                var candidate = current
                candidate.removeSubrange(i..<min(current.count, i + chunk))
                if let failing = try await replay(candidate, albumRequired: albumRequired, readsEveryStep: false) {
                    current = candidate
                    last = failing
                    removed = true
                } else {
                    i += chunk
                }
            }
            if chunk == 1 && !removed { break }
            if !removed || chunk > 1 { chunk = max(1, chunk / 2) }
        }
        // The shortened program again, compared after every step (it may fail earlier than its end).
        return try await replay(current, albumRequired: albumRequired) ?? last
    }
}
