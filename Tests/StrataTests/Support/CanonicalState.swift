import Foundation
@testable import Strata

/// Every object as a line naming it by its entity and first unique key (ids differ between
/// two imports of the same input), with its values and its relationships' targets named the
/// same way, sorted: equal for equal states.
func canonicalState(_ store: Store) throws -> [String] {
    try store.read { view in
        let schema = store.schema
        var names: [ObjectID: String] = [:]
        func all(_ e: EntityDescription, _ visit: (Record) throws -> Void) throws {
            try view.scanAll(e, only: [Bool](repeating: true, count: e.attributes.count)) {
                try visit($0)
                return true
            }
        }
        for e in schema.entities {
            try all(e) { r in
                let key = e.uniques.first.map { u in u.attributes.map { "\(r.values[$0])" }.joined(separator: "|") }
                names[r.id] = e.name + ":" + (key ?? r.id.description)
            }
        }
        var lines: [String] = []
        for e in schema.entities {
            try all(e) { r in
                var line = names[r.id, default: "?"] + " " + r.values.map { "\($0)" }.joined(separator: ",")
                for rel in e.relationships {
                    let targets = try view.targets(rel.tag, from: r.id).map { names[$0, default: "?"] }.sorted()
                    line += " \(rel.name)=[\(targets.joined(separator: ","))]"
                }
                lines.append(line)
            }
        }
        return lines.sorted()
    }
}
