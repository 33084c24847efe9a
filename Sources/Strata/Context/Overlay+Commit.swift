/// What a layer commits, and what stays pending after a commit.
extension Overlay {
    /// The net change set of this layer: the state it shows, never a replay of the operations
    /// that made it. In order:
    ///
    /// 1. unlinks: edges removed here and to-one relationships cleared here;
    /// 2. updates: the attributes whose value differs from what this layer read below when it
    ///    first changed the object (``originals``; else the object's base; else every attribute);
    /// 3. inserts;
    /// 4. links: edges added here, and each to-one set here to its target;
    /// 5. deletes of objects that exist below.
    ///
    /// The set is judged on its result (``ChangeSet/isNetState``: unique keys are checked when it
    /// ends), so the order only has to let each step apply: unlinks first so that a delete denied
    /// by an edge the context removed is not denied, links after inserts so that both ends exist,
    /// deletes last so that their cascades take whatever the store linked meanwhile. Edge facts
    /// whose ends no longer exist in `view` are left out (the context does not show them).
    /// - Parameters:
    ///   - view: the context's whole view (this layer over everything below it).
    ///   - below: the state below this layer.
    /// - Complexity: O(changes in the layer), plus O(e log e) for its e edge facts.
    func netChanges<V: LayeredState, B: LayeredState>(schema: Schema, bases: [ObjectID: BaseVersion], view: V,
                                                      below: B) throws -> [ChangeSet.Operation] {
        var unlinks: [ChangeSet.Operation] = []
        var links: [ChangeSet.Operation] = []
        for key in Set(edges.keys).union(replaced).sorted(by: Self.keyOrder) {
            try edgeChanges(key, schema: schema, view: view, below: below, unlinks: &unlinks, links: &links)
        }
        var deletes: [ChangeSet.Operation] = []
        var updates: [ChangeSet.Operation] = []
        var inserts: [ChangeSet.Operation] = []
        inserts.reserveCapacity(order.count)
        for touch in order {
            let id = touch.id, isNew = touch.isNew
            guard let entry = records[id] else { continue }
            switch entry {
            case nil:
                if !isNew { deletes.append(.delete(id: id)) }
            case let record?:
                if isNew {
                    inserts.append(.insert(id: id, values: record.values))
                    continue
                }
                let base = originals[id] ?? bases[id]?.values
                let changed = record.values.indices.filter { i in
                    base.map { i >= $0.count || $0[i] != record.values[i] } ?? true
                }
                if !changed.isEmpty {
                    updates.append(.update(id: id, attributes: changed.map {
                        ChangeSet.AttributeValue(attribute: $0, value: record.values[$0])
                    }))
                }
            }
        }
        // One array, sized once: chained `+` copied (and retained) every operation up to three times.
        if unlinks.isEmpty, updates.isEmpty, links.isEmpty, deletes.isEmpty { return inserts }
        var all: [ChangeSet.Operation] = []
        all.reserveCapacity(unlinks.count + updates.count + inserts.count + links.count + deletes.count)
        all += unlinks
        all += updates
        all += inserts
        all += links
        all += deletes
        return all
    }

    /// Edge keys in a fixed order (tag, then source id), so that a commit's log is the same
    /// whatever the hash seed.
    private static func keyOrder(_ a: LinkKey, _ b: LinkKey) -> Bool {
        a.tag != b.tag ? a.tag < b.tag : a.from < b.from
    }

    /// The operations one key asks for. Each edge is held in both directions; it is sent once:
    /// from a replaced to-one key (which sends its target, or a clear), or, between two to-many
    /// relationships, from the smaller tag (the smaller id for a relationship that is its own
    /// inverse). A to-many key whose inverse is to-one sends no links: the inverse key does. A
    /// replaced to-many key of a live object (deleted and inserted again here) first unlinks
    /// every edge it has below.
    private func edgeChanges<V: LayeredState, B: LayeredState>(_ key: LinkKey, schema: Schema, view: V, below: B,
                                                               unlinks: inout [ChangeSet.Operation],
                                                               links: inout [ChangeSet.Operation]) throws {
        guard let r = schema.relationship(tag: key.tag), let inverseTag = schema.inverseTag(of: key.tag),
              let inverse = schema.relationship(tag: inverseTag) else { return }
        let facts = edges[key] ?? [:]
        let from = key.from
        if replaced.contains(key) {
            // The layer defines the key's whole target set, for an object that lives here (a
            // deleted one's edges go with its delete).
            guard records[from] != .some(nil), try view.exists(from) else { return }
            if !r.isToMany {
                let targets = try facts.filter { $0.value }.keys.sorted().filter { try view.exists($0) }
                if let target = targets.last {
                    links.append(.link(relationship: key.tag, from: .id(from), to: .id(target)))
                } else if try below.exists(from) {
                    unlinks.append(.unlink(relationship: key.tag, from: .id(from), to: nil))
                }
                return
            }
            // A to-many replaced on a live object: deleted and inserted again here. It starts
            // without the edges it has in the store, whatever they are when the commit applies
            // (the edges this layer gave it are linked again after).
            if try below.exists(from) {
                unlinks.append(.unlink(relationship: key.tag, from: .id(from), to: nil))
            }
        } else if !r.isToMany {
            return
        }
        guard inverse.isToMany else { return }
        // A fact about an edge between two objects this layer did not write (no insert, update
        // or delete: their edges are what they are below) that says what the edge was below when
        // the layer set it is no change (an edge added and removed again, or removed and added
        // again): sent, it would undo what another writer did to that edge since.
        let whole = replaced.contains(key) || records[from] != nil
        let originals = edgeOriginals[key]
        for (to, present) in facts.sorted(by: { $0.key < $1.key }) {
            guard key.tag < inverseTag || (key.tag == inverseTag && from <= to) else { continue }
            if !whole, records[to] == nil, originals?[to] == present { continue }
            if present {
                guard try view.exists(from), try view.exists(to) else { continue }
                links.append(.link(relationship: key.tag, from: .id(from), to: .id(to)))
            } else {
                // An edge with a new end is not one below; an end deleted below took its edges.
                guard !isNew(from), !isNew(to), try below.exists(from), try below.exists(to) else { continue }
                unlinks.append(.unlink(relationship: key.tag, from: .id(from), to: .id(to)))
            }
        }
    }

    /// Whether `id` was inserted here (absent below when it was).
    /// - Complexity: O(1) for an object this layer has not changed; O(changes) otherwise (edges
    ///   of objects changed here are few next to the objects a layer inserts).
    private func isNew(_ id: ObjectID) -> Bool {
        guard records[id] != nil else { return false }
        return order.last(where: { $0.id == id })?.isNew ?? false
    }

    /// What stays pending after `committed` (an earlier copy of this layer) was committed at the
    /// root, as a layer over the state that now includes it: every record, edge fact and
    /// replaced key that changed since, and nothing that did not.
    ///
    /// A layer only ever gains or overwrites entries (a failed change is rolled back to exactly
    /// the entries it had), so an entry equal to the committed one is what was committed.
    /// - Complexity: O(this layer).
    func remainder(after committed: Overlay) -> Overlay {
        var rest = Overlay()
        for touch in order {
            guard let entry = records[touch.id] else { continue }
            let before = committed.records[touch.id]
            if let before, before?.values == entry?.values { continue }
            rest.records[touch.id] = entry
            // Inserted or changed by the commit, it exists below the rest with the values committed.
            if case .some(.some(let committedRecord)) = before {
                rest.order.append(Touch(id: touch.id, isNew: false))
                rest.originals[touch.id] = committedRecord.values
            } else {
                rest.order.append(touch)
                if let original = originals[touch.id] { rest.originals[touch.id] = original }
            }
        }
        for (key, facts) in edges {
            let before = committed.edges[key]
            if replaced.contains(key) {
                if committed.replaced.contains(key), before == facts { continue }
                rest.replaced.insert(key)
                rest.edges[key] = facts
            } else {
                let changed = facts.filter { before?[$0.key] != $0.value }
                if !changed.isEmpty { rest.edges[key] = changed }
                // Below the rest, an edge is what the commit set, or what it was before.
                for to in changed.keys {
                    if let original = before?[to] ?? edgeOriginals[key]?[to] {
                        rest.edgeOriginals[key, default: [:]][to] = original
                    }
                }
            }
        }
        for key in replaced
            where edges[key] == nil && !(committed.replaced.contains(key) && committed.edges[key] == nil) {
            rest.replaced.insert(key)
        }
        for (key, owner) in uniques where committed.uniques[key] != owner { rest.uniques[key] = owner }
        // Every key a record the rest keeps holds is the rest's to answer for, as when the layer
        // first changed that object: a key the commit also held was dropped above, and a state
        // below in which another writer moved the object's key away then took it for free.
        for (id, entry) in rest.records {
            guard case .some(let record) = entry else { continue }
            for u in record.entity.uniques {
                if let key = try? Layout.uniqueKey(u, record: record.values, entity: record.entity, id: id) {
                    rest.uniques[ByteKey(key)] = id
                }
            }
        }
        for key in rest.replaced {
            rest.replacedTags.insert(key.tag)
            rest.markDirty(key.from)
        }
        for (key, facts) in rest.edges {
            rest.factCount += facts.count
            rest.markDirty(key.from)
        }
        return rest
    }
}
