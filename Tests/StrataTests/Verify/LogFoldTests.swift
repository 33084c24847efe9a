import Foundation
import LibraryModel
import Testing
@testable import Strata

/// `LogFold` on crafted op streams: what it refuses (verify then rebuilds on disk, which names
/// the problem), what it accepts, and its limits. Nothing here reads the map: only digesting
/// does, and the verify tests cover that on real stores.
@Suite struct LogFoldTests {
    let schema: Schema
    let track: EntityDescription

    init() throws {
        schema = try librarySchema()
        track = try #require(schema.entity(named: "Track"))
    }

    /// Applies `ops` in order to a new fold; the result of each, and whether a limit stopped it.
    func run(_ ops: [FoldOp], objectLimit: Int = 100) -> (results: [Bool], exceeded: Bool) {
        var f = LogFold(schema: schema, capacity: 4, objectLimit: objectLimit)
        var results: [Bool] = []
        for op in ops { results.append(f.apply(op)) }
        return (results, f.exceededLimit)
    }

    func newID() -> ObjectID { ObjectID.make(entityTag: track.tag) }
    func insert(_ id: ObjectID, tx: UInt64 = 1, count: Int? = nil) -> FoldOp {
        FoldOp(kind: .insert, count: count ?? track.attributes.count, id: id, transaction: tx)
    }
    func version(_ id: ObjectID, tx: UInt64 = 2) -> FoldOp { FoldOp(kind: .version, id: id, transaction: tx) }
    func set(_ id: ObjectID, _ attribute: Int, tx: UInt64 = 2) -> FoldOp { FoldOp(kind: .set, count: attribute, id: id, transaction: tx) }
    func delete(_ id: ObjectID, tx: UInt64 = 2) -> FoldOp { FoldOp(kind: .delete, id: id, transaction: tx) }

    @Test func changesThatCannotApplyAreRefused() {
        let a = newID(), missing = newID(), n = track.attributes.count
        // An insert with the wrong number of values, or of a live id.
        #expect(run([insert(a, count: n - 1)]).results == [false])
        #expect(run([insert(a), insert(a, tx: 2)]).results == [true, false])
        // An update, a set or a delete of an object that is not there.
        #expect(run([version(missing)]).results == [false])
        #expect(run([set(missing, 1)]).results == [false])
        #expect(run([delete(missing)]).results == [false])
        // A set past the entity's attributes, or below 0.
        #expect(run([insert(a), version(a), set(a, n)]).results == [true, true, false])
        #expect(run([insert(a), version(a), set(a, -1)]).results == [true, true, false])
        // An update of a deleted object.
        #expect(run([insert(a), delete(a), version(a, tx: 3)]).results == [true, true, false])
        #expect(run([insert(a), delete(a), set(a, 1, tx: 3)]).results == [true, true, false])
        // An edge of an unknown relationship.
        let edge = run([insert(a), FoldOp(kind: .link, relationship: 0xFFFF, id: a, other: missing, transaction: 2)])
        #expect(edge.results == [true, false] && !edge.exceeded)
    }

    @Test func aDeletedObjectCanBeInsertedAgainAndUpdated() {
        let a = newID()
        let r = run([insert(a), delete(a), insert(a, tx: 3), version(a, tx: 4), set(a, 1, tx: 4),
                     version(a, tx: 5)])   // an update with no attribute change is a version op alone
        #expect(r.results.allSatisfy { $0 } && !r.exceeded)
    }

    /// One patch per attribute: setting the same one again and again stays within the limit
    /// (4 × objects); a fifth distinct attribute of the only object allowed does not.
    @Test func patchesAreOnePerAttributeAndBounded() {
        let a = newID()
        var ops = [insert(a)]
        for tx in 2..<50 as Range<UInt64> { ops += [version(a, tx: tx), set(a, 1, tx: tx)] }
        for attribute in 2...4 { ops.append(set(a, attribute, tx: 60)) }
        let within = run(ops, objectLimit: 1)
        #expect(within.results.allSatisfy { $0 } && !within.exceeded)
        let over = run(ops + [set(a, 5, tx: 61)], objectLimit: 1)
        #expect(over.results.last == false && over.exceeded)
        // And the object limit.
        let objects = run([insert(newID()), insert(newID())], objectLimit: 1)
        #expect(objects.results == [true, false] && objects.exceeded)
    }

    @Test func thePatchLimitIsFourPerObjectBelowTwoToThe31() {
        #expect(LogFold(schema: schema, capacity: 1, objectLimit: 1).patchLimit == LogFold.patchesPerObject)
        #expect(LogFold(schema: schema, capacity: 1, objectLimit: 1 << 40).patchLimit == Int(Int32.max))
        #expect(LogFold(schema: schema, capacity: 1, objectLimit: .max).patchLimit == Int(Int32.max))
    }
}
