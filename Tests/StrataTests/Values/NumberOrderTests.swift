import Foundation
import LibraryModel
import Testing
@testable import Strata

/// Doubles, dates and decimals have one total order in the three places that must agree —
/// `Value.compare` (and `==`, `<`, hashing), the index keys' byte order, and what may be stored
/// or asked — the order PostgreSQL gives its numbers: -0 equals +0, every NaN equals every other
/// NaN and comes after every number. A NaN or infinite date, a NaN from a migration's custom step
/// and a NaN query value are refused. (A NaN compared "greater" in both directions, a negative
/// NaN's index key sorted below -infinity, and a NaN date could be stored.)
@Suite struct NumberOrderTests {
    /// A NaN with the sign bit set, as `0.0 / 0.0` gives at run time on x86.
    static let negativeNaN = Double(bitPattern: Double.nan.bitPattern | (1 << 63))
    /// A NaN with a payload.
    static let payloadNaN = Double(nan: 0x1234, signaling: false)

    static let ordered: [Double] = [-.infinity, -1e300, -1, -.leastNonzeroMagnitude, 0, 1, 1e300, .infinity]
    static let nans: [Double] = [.nan, negativeNaN, payloadNaN, -Double.nan]

    func key(_ v: Value) -> [UInt8] {
        var out: [UInt8] = []
        SortableEncoding.encode(v, into: &out)
        return out
    }

    @Test func doublesHaveOneTotalOrderInCompareHashAndKeys() {
        let values = Self.ordered + Self.nans
        for a in values {
            for b in values {
                let va = Value.double(a), vb = Value.double(b)
                let c = Value.compare(va, vb)
                #expect(c.signum() == -Value.compare(vb, va).signum(), "antisymmetric: \(a), \(b)")
                let keyOrder = key(va).lexicographicallyPrecedes(key(vb)) ? -1 : (key(va) == key(vb) ? 0 : 1)
                #expect(c.signum() == keyOrder, "compare and the index key agree: \(a) against \(b)")
                if a.isNaN && b.isNaN { #expect(c == 0 && va == vb && va.hashValue == vb.hashValue) }
                if a.isNaN != b.isNaN { #expect(c.signum() == (a.isNaN ? 1 : -1), "a NaN is after every number") }
            }
        }
        #expect(Value.double(-0.0) == Value.double(0.0) && key(.double(-0.0)) == key(.double(0.0)))
        #expect(Value.double(-0.0).hashValue == Value.double(0.0).hashValue)
        // A sort puts every NaN after +infinity, whatever order they come in.
        let sorted = (Self.nans + Self.ordered.reversed()).map(Value.double).sorted()
        #expect(Array(sorted.prefix(Self.ordered.count)) == Self.ordered.map(Value.double))
        #expect(sorted.suffix(Self.nans.count).allSatisfy { if case .double(let d) = $0 { d.isNaN } else { false } })
    }

    @Test func datesAndDecimalsOrderTheirNaNsTheSameWay() {
        let nanDate = Value.date(Date(timeIntervalSinceReferenceDate: Self.negativeNaN))
        let farFuture = Value.date(Date(timeIntervalSinceReferenceDate: .infinity))
        #expect(Value.compare(nanDate, farFuture) > 0 && Value.compare(farFuture, nanDate) < 0)
        #expect(nanDate == Value.date(Date(timeIntervalSinceReferenceDate: .nan)))
        #expect(key(farFuture).lexicographicallyPrecedes(key(nanDate)))
        let nanDecimal = Value.decimal(.nan), big = Value.decimal(Decimal(string: "1e100")!)
        #expect(Value.compare(nanDecimal, big) > 0 && Value.compare(big, nanDecimal) < 0)
        #expect(nanDecimal == Value.decimal(.nan))
    }

    @Test func aDateThatIsNotFiniteIsRefusedBySaves() async throws {
        try await withLibraryStore { store in
            for bad in [Double.nan, .infinity, -.infinity] {
                do {
                    _ = try await store.save {
                        $0.insert(makeTrack(title: "t", duration: 1, added: Date(timeIntervalSinceReferenceDate: bad)))
                    }
                    Issue.record("a date of \(bad) seconds was saved")
                } catch StrataError.validation(let f) {
                    #expect(f.kind == .wrongType && f.field == "addedAt" && f.reason == "dates must be finite", "\(f)")
                }
            }
            // Finite but past what an export's ISO-8601 text can hold and import read back.
            do {
                _ = try await store.save {
                    $0.insert(makeTrack(title: "t", duration: 1, added: Date(timeIntervalSince1970: 3e13)))
                }
                Issue.record("a date 950,000 years away was saved")
            } catch StrataError.validation(let f) {
                #expect(f.field == "addedAt" && f.reason.contains("within 3e13 seconds"), "\(f)")
            }
            _ = try await store.save {
                $0.insert(makeTrack(title: "far", duration: 1, added: Date(timeIntervalSince1970: 2.9e13)))
            }
            #expect(try store.mainContext.count(Track.self) == 1)
            // The farthest dates a store may hold read back from the text an export writes.
            for t in [2.9e13, -2.9e13, ISO8601.maxSecondsFrom1970.nextDown.rounded(.down)] {
                let date = Date(timeIntervalSince1970: t)
                #expect(ISO8601.date(from: ISO8601.string(from: date)) == date, "\(t)")
            }
        }
    }

    @Test func aNaNOrInfiniteQueryValueIsRefused() async throws {
        try await withLibraryStore { store in
            _ = try await store.save { $0.insert(makeTrack(title: "t", duration: 1, rating: 3)) }
            let track = try #require(store.schema.entity(named: "Track"))
            let rating = try #require(track.attributes.firstIndex { $0.name == "rating" })
            let added = try #require(track.attributes.firstIndex { $0.name == "addedAt" })
            let refused: [Filter] = [
                .compare(attribute: rating, .greater, .double(.nan)),
                .compare(attribute: rating, .lessOrEqual, .double(Self.negativeNaN)),
                .compare(attribute: rating, .less, .double(.infinity)),
                .between(attribute: rating, .double(0), .double(.nan)),
                .isIn(attribute: rating, [.double(1), .double(.nan)]),
                .compare(attribute: added, .equal, .date(Date(timeIntervalSinceReferenceDate: .nan))),
            ]
            for predicate in refused {
                let query = Query(entity: "Track", predicate: predicate)
                #expect(throws: StrataError.self, "fetch: \(predicate)") { try store.mainContext.fetch(query) }
                do {
                    _ = try store.mainContext.count(query)
                    Issue.record("count took \(predicate)")
                } catch StrataError.invalidQuery(let entity, let reason) {
                    #expect(entity == "Track" && reason.contains("must be finite"), "\(reason)")
                }
            }
            #expect(try store.mainContext.count(Query(entity: "Track", predicate: .compare(attribute: rating, .less,
                                                                                            .double(1e300)))) == 1)
        }
    }

    @Test func aMigrationStepThatWritesANaNIsRefused() async throws {
        let v1 = #"""
        {"model":"gauge","version":1,"entities":[
          {"name":"Reading","attributes":[{"name":"value","type":"double"}],"indexes":[["value"]]}]}
        """#
        let v2 = #"""
        {"model":"gauge","version":2,"entities":[
          {"name":"Reading","attributes":[{"name":"value","type":"double"}],"indexes":[["value"]]}],
         "migration":{"steps":[{"op":"custom","entity":"Reading","name":"spoil"}]}}
        """#
        let schemas = try [v1, v2].enumerated().map {
            try Schema.parse(Array($1.utf8), source: "v\($0 + 1).json", expectedVersion: $0 + 1)
        }
        let dir = temporaryDirectory("migrate-nan")
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let store = try Store.open(at: dir, schema: schemas[0])
            defer { store.close() }
            let reading = try #require(schemas[0].entity(named: "Reading"))
            var r = Record(entity: reading)
            r["value"] = .double(1.5)
            _ = try await store.save { $0.insert(r) }
        }
        var registry = MigrationRegistry()
        registry.register("spoil") { $0["value"] = .double(0.0 / Double(0)) }
        do {
            _ = try await Store.migrate(at: dir, schemas: schemas, registry: registry)
            Issue.record("a migration stored a NaN")
        } catch let e as MigrationError {
            #expect(e.reason.contains("'value'") && e.reason.contains("doubles must be finite"), "\(e.reason)")
        }
        let store = try Store.open(at: dir, schema: schemas[0])
        defer { store.close() }
        #expect(try store.mainContext.fetch(Query(entity: "Reading")).map { $0["value"] } == [.double(1.5)])
    }

    /// `dateToInt` of a date whose seconds do not fit 64 bits fails the conversion (it trapped
    /// converting the double), as `doubleToInt` does.
    @Test func dateToIntOfAFarDateFailsInsteadOfTrapping() throws {
        let far = Value.date(Date(timeIntervalSinceReferenceDate: 1e300))
        #expect(throws: ValueConversion.Failure.self) { try TypeConversion.dateToInt.convert(far) }
        let near = Value.date(Date(timeIntervalSince1970: 1_700_000_000.75))
        #expect(try TypeConversion.dateToInt.convert(near) == .int(1_700_000_000))
        // A conversion's result is held to what a save accepts: `intToDate` past the date range.
        #expect(throws: ValueConversion.Failure.self) { try TypeConversion.intToDate.convert(.int(Int64.max)) }
        #expect(try TypeConversion.intToDate.convert(.int(86_400)) == .date(Date(timeIntervalSince1970: 86_400)))
    }
}
