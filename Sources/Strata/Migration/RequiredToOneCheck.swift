import StrataLMDB

/// A migration that makes a to-one relationship required (`"optional": false` in the new
/// version, optional or absent in the store's) proves it of the data: every object of its entity
/// has a target, or the migration is refused naming the first that has none. Saves enforce a
/// required to-one when they insert or relink an object, so without this a store could hold
/// objects its schema says cannot exist.
enum RequiredToOneCheck {
    /// The to-one relationships `new` requires and `old` did not (by entity tag, which a
    /// migration keeps, and relationship name).
    static func newlyRequired(from old: Schema, to new: Schema) -> [(EntityDescription, RelationshipDescription)] {
        new.entities.flatMap { e in
            e.relationships.filter { r in
                guard !r.isToMany && !r.isOptional else { return false }
                let before = old.entity(tag: e.tag)?.relationships.first { $0.name == r.name }
                return before.map { $0.isToMany || $0.isOptional } ?? true
            }.map { (e, $0) }
        }
    }

    /// Throws ``MigrationError`` when an object of `new`'s state in `env` lacks the target of a
    /// relationship ``newlyRequired(from:to:)`` names.
    static func check(_ env: LMDBEnvironment, from old: Schema, to new: Schema) throws {
        let required = newlyRequired(from: old, to: new)
        guard !required.isEmpty else { return }
        try env.read { txn in
            let view = ReadView(txn: txn, env: env, schema: new)
            for (e, r) in required {
                // A to-one holds at most one link an object: as many links as objects, and each
                // has one (a link's source is an object the state holds).
                var links = 0
                try txn.scan(env[.links], prefix: Layout.u16(r.tag)) { _, _ in
                    links += 1
                    return true
                }
                if links == (try view.objectCount(e)) { continue }
                var missing: ObjectID?
                try txn.scan(env[.objects], prefix: Layout.entityPrefix(e.tag)) { key, _ in
                    let id = try ObjectID.stored(key, in: "objects")
                    if try view.targets(r.tag, from: id).isEmpty {
                        missing = id
                        return false
                    }
                    return true
                }
                if let missing {
                    throw MigrationError(reason: """
                        \(e.name) \(missing): relationship '\(r.name)' is required in v\(new.version) and the object \
                        has no target (give every \(e.name) one before making it required, or keep it optional)
                        """)
                }
            }
        }
    }
}
