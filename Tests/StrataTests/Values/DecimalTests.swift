import Foundation
import Testing
@testable import Strata

/// The `decimal` attribute type: text parsed exactly and strictly, one normal form per number,
/// limits that are refused rather than rounded, index keys in value order, exact sums, and the
/// way in and out through import, export, `storectl` and migrations.
@Suite struct DecimalTests {
    static let schemaText = #"""
    {"model": "shop", "version": 1, "entities": [
      {"name": "Invoice",
       "attributes": [
         {"name": "number", "type": "int"},
         {"name": "total", "type": "decimal"},
         {"name": "fee", "type": "decimal", "optional": true, "default": 0.10},
         {"name": "rate", "type": "double", "optional": true}],
       "uniques": [["number"]],
       "indexes": [["total"]]}]}
    """#

    func schema() throws -> Schema { try Schema.parse(Array(Self.schemaText.utf8), source: "v1.json", expectedVersion: 1) }

    func dec(_ s: String) throws -> Decimal { try DecimalNumber.parse(s).decimal }

    // MARK: Text

    @Test func textParsesExactlyIntoOneNormalForm() throws {
        let cases: [(String, String)] = [
            ("0.99", "0.99"), ("2.50", "2.5"), ("-0.0099", "-0.0099"), ("+12", "12"), ("1500", "1500"),
            (".5", "0.5"), ("5.", "5"), ("1.5e3", "1500"), ("1E-2", "0.01"), ("-0", "0"), ("000.000", "0"),
            ("12345678901234567890123456789012345678", "12345678901234567890123456789012345678"),
            ("0.1", "0.1"), ("2328.6", "2328.6"),
        ]
        for (input, text) in cases {
            let n = try DecimalNumber.parse(input)
            #expect(n.text == text, "\(input)")
            #expect(DecimalNumber(n.decimal) == n, "\(input) through Decimal")
            #expect(try DecimalNumber.parse(n.text) == n, "\(input) printed and read again")
        }
        #expect(try DecimalNumber.parse("2.50") == DecimalNumber.parse("2.5"))
        #expect(Value.decimal(try dec("2.50")) == Value.decimal(try dec("2.5")))
        #expect(Set([Value.decimal(try dec("2.50")), .decimal(try dec("2.5"))]).count == 1)
    }

    @Test func textThatIsNotADecimalOrDoesNotFitIsRefusedWithAReason() throws {
        for bad in ["", "-", ".", "1.2.3", "1,5", " 1", "1 ", "NaN", "inf", "0x10", "1e", "1e+", "e5", "1.2abc", "--1"] {
            #expect(throws: ValueConversion.Failure.self, "\(bad)") { try DecimalNumber.parse(bad) }
        }
        let long = String(repeating: "1", count: 39)
        #expect { try DecimalNumber.parse(long) } throws: { "\($0)".contains("39 significant digits") }
        #expect { try DecimalNumber.parse("1e-129") } throws: { "\($0)".contains("too small") }
        #expect { try DecimalNumber.parse("1e200") } throws: { "\($0)".contains("too large") }
        #expect { try DecimalNumber.parse("1e99999999") } throws: { "\($0)".contains("exponent out of range") }
        // Trailing zeros of a large number fit by moving into the digits.
        #expect(try DecimalNumber.parse("1e150").text == "1" + String(repeating: "0", count: 150))
    }

    // MARK: Bytes

    /// A random decimal of up to `digits` significant digits around 10^0.
    func randomDecimal(_ rng: inout SeededGenerator, digits: Int = 12) -> DecimalNumber {
        let count = Int.random(in: 0...digits, using: &rng)
        let d = (0..<count).map { _ in UInt8(0x30 + Int.random(in: 0...9, using: &rng)) }
        return DecimalNumber(negative: Bool.random(using: &rng), digits: d, exponent: Int.random(in: -20...20, using: &rng))
    }

    @Test(arguments: 1...3)
    func indexKeysSortAsTheNumbers(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        let numbers = (0..<400).map { _ in randomDecimal(&rng) } + [.zero, try DecimalNumber.parse("1e-128"),
                                                                   try DecimalNumber.parse("-1e150")]
        func key(_ n: DecimalNumber) -> [UInt8] {
            var out: [UInt8] = []
            SortableEncoding.encode(.decimal(n.decimal), into: &out)
            return out
        }
        for _ in 0..<2000 {
            let a = numbers.randomElement(using: &rng)!, b = numbers.randomElement(using: &rng)!
            let byKey = Value.compareBytes(key(a), key(b)).signum()
            // The reference: Foundation's own order of the two numbers.
            let reference = a.decimal < b.decimal ? -1 : (a.decimal == b.decimal ? 0 : 1)
            #expect(byKey == reference, "seed \(seed): \(a.text) vs \(b.text)")
            #expect(DecimalNumber.compare(a, b) == reference, "seed \(seed): \(a.text) vs \(b.text)")
        }
    }

    @Test func storedBytesRoundTripAndDamageIsRefused() throws {
        var rng = SeededGenerator(seed: 7)
        for n in (0..<300).map({ _ in randomDecimal(&rng, digits: 38) }) {
            var w = ByteWriter()
            ValueCodec.encode(.decimal(n.decimal), into: &w)
            try w.bytes.withUnsafeBytes { raw in
                var r = ByteReader(raw)
                #expect(try ValueCodec.decode(from: &r) == .decimal(n.decimal))
                var c = ByteReader(raw)
                try ValueCodec.check(from: &c)
                #expect(c.offset == raw.count)
            }
        }
        // A digit nibble above 9, a digit count of zero, a leading zero, a cut value, 38 digits at
        // 10^128 (past what a decimal holds: 128 is zig-zag 256, varint 0x80 0x02).
        let wide: [UInt8] = [8, 0, 0x80, 0x02, 38] + [UInt8](repeating: 0x11, count: 19)
        for damaged: [UInt8] in [[8, 0, 0, 1, 0xA0], [8, 0, 0, 0], [8, 0, 0, 2, 0x01], [8, 0, 0, 3, 0x12], wide] {
            damaged.withUnsafeBytes { raw in
                var r = ByteReader(raw)
                #expect(throws: (any Error).self, "\(damaged)") { try ValueCodec.decode(from: &r) }
            }
        }
    }

    // MARK: In a store

    @Test func aStoreKeepsSortsAndFindsDecimalsExactly() async throws {
        let store = try Store.temporary(schema: schema())
        defer { store.close() }
        let e = try #require(store.schema.entity(named: "Invoice"))
        let totals = ["0.99", "2.50", "-3", "0.1", "0.2", "0.30", "1e3", "0.000001"]
        _ = try await store.save { c in
            for (i, t) in totals.enumerated() {
                var r = Record(entity: e)
                r["number"] = .int(Int64(i))
                r["total"] = .decimal(try! DecimalNumber.parse(t).decimal)
                c.insert(r)
            }
        }
        let ctx = store.mainContext
        let sorted = try ctx.fetch(Query(entity: "Invoice", sort: [SortKey(attribute: 1)])).map { $0["total"].description }
        #expect(sorted == ["-3", "0.000001", "0.1", "0.2", "0.3", "0.99", "2.5", "1000"])
        func count(_ filter: String) throws -> Int {
            try ctx.count(Query(entity: "Invoice", predicate: PredicateParser.parse(filter, entity: e, schema: store.schema)))
        }
        #expect(try count("total == 2.5") == 1)
        #expect(try count("total == 2.50") == 1)
        #expect(try count("total == 0.3") == 1)
        #expect(try count("total > 0.2") == 4)
        #expect(try count("total >= 0.1 and total <= 0.99") == 4)
        #expect(try count("total < 0") == 1)
        // The default applies, exactly.
        #expect(try ctx.fetch(Query(entity: "Invoice")).allSatisfy { $0["fee"] == .decimal(try dec("0.1")) })

        // 0.1 + 0.2 is 0.3, not 0.30000000000000004.
        let sum = try ctx.aggregate(Query(entity: "Invoice", predicate: PredicateParser.parse(
            "total == 0.1 or total == 0.2", entity: e, schema: store.schema)), groupedBy: nil, [.sum(attribute: 1)])
        #expect(sum.first?.values.first?.description == "0.3")

        let bad = { (value: Value) async throws in
            _ = try await store.save { c in
                var r = Record(entity: e)
                r["number"] = .int(99)
                r["total"] = value
                c.insert(r)
            }
        }
        await #expect { try await bad(.decimal(.nan)) } throws: { "\($0)".contains("NaN") }
        // 39 digits: a Foundation Decimal holds them (below 2^128), a decimal value does not.
        let wide = try #require(Decimal(string: "340282366920938463463374607431768211455"))
        await #expect { try await bad(.decimal(wide)) } throws: { "\($0)".contains("significant digits") }
        #expect(try ctx.count(Query(entity: "Invoice")) == totals.count)
    }

    @Test(arguments: 1...3)
    func sumsAndMeansEqualAPlainComputationInCents(seed: UInt64) async throws {
        var rng = SeededGenerator(seed: seed)
        let store = try Store.temporary(schema: schema())
        defer { store.close() }
        let e = try #require(store.schema.entity(named: "Invoice"))
        // Amounts in cents, held as integers by the reference.
        let cents = (0..<500).map { _ in Int64.random(in: -1_000_000_000...1_000_000_000, using: &rng) }
        _ = try await store.save { c in
            for (i, v) in cents.enumerated() {
                var r = Record(entity: e)
                r["number"] = .int(Int64(i))
                r["rate"] = .double(Double(i % 7))  // the group
                r["total"] = .decimal(Decimal(v) / 100)
                c.insert(r)
            }
        }
        let rows = try store.mainContext.aggregate(
            Query(entity: "Invoice"), groupedBy: .attribute(path: [], attribute: 3),
            [.sum(attribute: 1), .min(attribute: 1), .max(attribute: 1), .average(attribute: 1)])
        #expect(rows.count == 7)
        for row in rows {
            guard case .double(let rate) = row.group else { Issue.record("group \(row.group)"); continue }
            let g = Int(rate)
            let mine = cents.enumerated().filter { $0.offset % 7 == g }.map(\.element)
            let total = mine.reduce(0, +)
            func text(_ c: Int64) -> String {
                let a = c.magnitude
                let s = "\(c < 0 ? "-" : "")\(a / 100).\(a % 100 < 10 ? "0" : "")\(a % 100)"
                return (try? DecimalNumber.parse(s).text) ?? s
            }
            #expect(row.values[0].description == text(total), "seed \(seed) group \(g)")
            #expect(row.values[1].description == text(mine.min()!), "seed \(seed) group \(g)")
            #expect(row.values[2].description == text(mine.max()!), "seed \(seed) group \(g)")
            // The mean: the exact sum divided by the count, to 38 digits; times the count it is
            // the sum within the last digit.
            guard case .decimal(let mean) = row.values[3] else { Issue.record("mean \(row.values[3])"); continue }
            let back = mean * Decimal(mine.count) - Decimal(total) / 100
            #expect(abs(NSDecimalNumber(decimal: back).doubleValue) < 1e-20, "seed \(seed) group \(g)")
        }
    }

    /// A plain reference for ``DecimalNumber/divided(by:)``: the dividend's digits followed by
    /// 200 zeros, divided by schoolbook division into a whole quotient; the digits kept are the
    /// first 38 and those at 10^-128 or above, whichever are fewer, rounded half away from zero
    /// by the first digit cut.
    func referenceQuotient(_ x: DecimalNumber, _ n: Int) -> DecimalNumber {
        let extra = 200
        let dividend = x.digits.map { Int($0 - 0x30) } + [Int](repeating: 0, count: extra)
        var quotient: [Int] = [], r = 0
        for d in dividend {
            r = r * 10 + d
            quotient.append(r / n)
            r %= n
        }
        while quotient.first == 0 { quotient.removeFirst() }
        let last = x.exponent - extra   // the power of ten of the quotient's last digit
        // Digit i's power is last + (count - 1 - i): keep those at minExponent or above, 38 at most.
        let aboveLimit = max(0, min(quotient.count, last + quotient.count - DecimalNumber.minExponent))
        let keep = min(38, aboveLimit)
        var power = last + quotient.count - keep
        // The first digit cut decides, if it is the one right below the last kept place (with
        // nothing kept, the place is 10^minExponent, and a first digit further down rounds to 0).
        var up = keep < quotient.count && quotient[keep] >= 5
        if keep == 0 {
            up = up && power - 1 == DecimalNumber.minExponent - 1
            power = DecimalNumber.minExponent
        }
        quotient = Array(quotient.prefix(keep))
        if up {
            var k = keep - 1
            while k >= 0 && quotient[k] == 9 { quotient[k] = 0; k -= 1 }
            if k >= 0 { quotient[k] += 1 } else { quotient.insert(1, at: 0) }
            if quotient.count > 38 { quotient.removeLast(); power += 1 }
        }
        return DecimalNumber(negative: x.negative, digits: quotient.map { UInt8(0x30 + $0) }, exponent: power)
    }

    /// The mean of decimals: a quotient rounded to 38 significant digits (half away from zero),
    /// on random dividends and counts against a plain reference, and at the edges: a quotient
    /// below 10^-128 rounds at that power (Foundation's division gave NaN for 1e-91 / 1, scaling
    /// it past the limit), and none has 39 digits (Foundation cut 5/3 to 39 without rounding).
    @Test(arguments: 1...3)
    func divisionRoundsToThirtyEightDigitsWithinTheLimits(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        for _ in 0..<2000 {
            let count = Int.random(in: 1...38, using: &rng)
            var digits = (0..<count).map { _ in UInt8(0x30 + Int.random(in: 0...9, using: &rng)) }
            digits[0] = UInt8(0x31 + Int.random(in: 0...8, using: &rng))
            // Up to the least power a decimal holds, where the quotient is cut short of 38 digits.
            let x = DecimalNumber(negative: Bool.random(using: &rng), digits: digits,
                                  exponent: Int.random(in: DecimalNumber.minExponent...60, using: &rng))
            let n = [Int.random(in: 1...12, using: &rng), Int.random(in: 1...1_000_000_007, using: &rng)].randomElement(using: &rng)!
            let q = x.divided(by: n)
            #expect(q == referenceQuotient(x, n), "seed \(seed): \(x.text) / \(n)")
            #expect(q.digits.count <= DecimalNumber.maxDigits && q.exponent >= DecimalNumber.minExponent)
            #expect(DecimalNumber(q.decimal) == q, "seed \(seed): \(x.text) / \(n) through Decimal")
        }
        func quotient(_ text: String, _ n: Int) throws -> String {
            let q = try DecimalNumber.parse(text).divided(by: n)
            return q.isZero ? "0" : (q.negative ? "-" : "") + String(decoding: q.digits, as: UTF8.self) + "e\(q.exponent)"
        }
        #expect(try quotient("5", 3) == "16666666666666666666666666666666666667e-37")
        #expect(try quotient("-2", 3) == "-66666666666666666666666666666666666667e-38")
        #expect(try quotient("1e-91", 1) == "1e-91")
        #expect(try quotient("1e-91", 2) == "5e-92")
        #expect(try quotient("1e-128", 2) == "1e-128")     // 5e-129: half, away from zero
        #expect(try quotient("1e-128", 3) == "0")          // 3.3e-129
        #expect(try quotient("2e-128", 3) == "1e-128")     // 6.7e-129
        #expect(try quotient("1e-127", 3) == "3e-128")
        #expect(try quotient("1e-128", 20) == "0")         // 5e-130
        #expect(try quotient("1e-128", 11) == "0")         // 9.1e-130
        #expect(try quotient("1e-127", 200) == "0")        // 5e-130
        #expect(try quotient("1e-127", 20) == "1e-128")    // 5e-129: half, away from zero
        #expect(try quotient("123e-128", 10) == "12e-128") // 12.3e-128
        #expect(try quotient("99999999999999999999999999999999999999", 1) == "99999999999999999999999999999999999999e0")
        #expect(try quotient("99999999999999999999999999999999999999", 7) == "14285714285714285714285714285714285714e0")
        #expect(try quotient("1e127", 3) == "33333333333333333333333333333333333333e89")
        #expect(try quotient("0", 5) == "0")
    }

    /// The average of small decimals is their mean (it was NaN, printed as null, for 1e-91), and
    /// a mean of 38 digits is rounded (5/3 was cut to 39 digits).
    @Test func averagesOfDecimalsAreRoundedMeansWithinTheLimits() async throws {
        let store = try Store.temporary(schema: schema())
        defer { store.close() }
        let e = try #require(store.schema.entity(named: "Invoice"))
        _ = try await store.save { c in
            for (i, t) in ["1e-91", "1", "2", "2"].enumerated() {
                var r = Record(entity: e)
                r["number"] = .int(Int64(i))
                r["total"] = .decimal(try! DecimalNumber.parse(t).decimal)
                c.insert(r)
            }
        }
        func average(_ numbers: ClosedRange<Int64>) throws -> String {
            let q = Query(entity: "Invoice", predicate: .between(attribute: 0, .int(numbers.lowerBound), .int(numbers.upperBound)))
            return try store.mainContext.aggregate(q, groupedBy: nil, [.average(attribute: 1)]).first!.values[0].description
        }
        #expect(try average(0...0) == "0.0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000001")
        #expect(try average(1...3) == "1.6666666666666666666666666666666666667")
    }

    @Test func aSumThatCannotBeExactIsRefused() async throws {
        let store = try Store.temporary(schema: schema())
        defer { store.close() }
        let e = try #require(store.schema.entity(named: "Invoice"))
        _ = try await store.save { c in
            for (i, t) in ["1e30", "1e-10"].enumerated() {
                var r = Record(entity: e)
                r["number"] = .int(Int64(i))
                r["total"] = .decimal(try! DecimalNumber.parse(t).decimal)
                c.insert(r)
            }
        }
        #expect { try store.mainContext.aggregate(Query(entity: "Invoice"), groupedBy: nil, [.sum(attribute: 1)]) }
            throws: { "\($0)".contains("more than 38 significant digits") }
    }

    // MARK: Conversions

    @Test func jsonNumbersAndStringsConvertExactly() throws {
        let exact = try JSONValue.parse(Array(#"{"a": 0.1, "b": 1e-2, "c": 7, "d": 123456789012345678901234567890123456789.5}"#.utf8),
                                        exactDecimals: true)
        #expect(try ValueConversion.value(from: exact["a"]!, type: .decimal) == .decimal(try dec("0.1")))
        #expect(try ValueConversion.value(from: exact["b"]!, type: .decimal) == .decimal(try dec("0.01")))
        #expect(try ValueConversion.value(from: exact["c"]!, type: .decimal) == .decimal(7))
        // Too many digits for a decimal: the parser gives a double, which a decimal attribute
        // refuses (taking it would round it silently); a double attribute takes it.
        if case .double = exact["d"]! {} else { Issue.record("\(exact["d"]!)") }
        #expect { try ValueConversion.value(from: exact["d"]!, type: .decimal) } throws: { "\($0)".contains("not exact") }
        // Too small as well (a digit below 10^-128): the reason names both limits, and the string
        // form says which it was (it named the digits alone).
        let tiny = try JSONValue.parse(Array(#"{"e": 1.5e-128}"#.utf8), exactDecimals: true)
        #expect { try ValueConversion.value(from: tiny["e"]!, type: .decimal) } throws: {
            "\($0)".contains("none below 10^-128") && "\($0)".contains("written as a string")
        }
        #expect { try ValueConversion.value(from: .string("1.5e-128"), type: .decimal) } throws: {
            "\($0)".contains("too small for a decimal")
        }
        #expect(try ValueConversion.value(from: exact["d"]!, type: .double) != .null)
        // A double attribute takes the exact number rounded once; an int one a whole number.
        #expect(try ValueConversion.value(from: exact["a"]!, type: .double) == .double(0.1))
        #expect(try ValueConversion.value(from: .decimal(try dec("12")), type: .int) == .int(12))
        #expect(throws: ValueConversion.Failure.self) { try ValueConversion.value(from: exact["a"]!, type: .int) }
        #expect(try ValueConversion.value(from: .string("0.99"), type: .decimal) == .decimal(try dec("0.99")))
        #expect(throws: ValueConversion.Failure.self) { try ValueConversion.value(from: .string("0,99"), type: .decimal) }
        #expect(try ValueConversion.value(fromText: "-2.50", type: .decimal) == .decimal(try dec("-2.5")))
        #expect(ValueConversion.json(.decimal(try dec("2328.6"))).serialized == "2328.6")
        #expect(ValueConversion.text(.decimal(try dec("-0.0099"))) == "-0.0099")
    }

    /// An import line giving a decimal attribute a number that does not fit a decimal (too many
    /// digits, too small) is refused quoting the number as written, as the same number in a
    /// string is: the reason quoted the double it rounds to (`1.2345678901234568e+36`), which the
    /// line does not hold. Also in a reference's key, and with a double attribute beside it.
    @Test func anImportedNumberThatDoesNotFitADecimalIsQuotedAsWritten() throws {
        let schema = try schema()
        let builder = RecordBuilder(schema: schema, file: "in.ndjson", maxValueBytes: 1 << 20)
        let cases: [(line: String, reason: String)] = [
            (#"{"entity":"Invoice","number":1,"total":1234567890123456789012345678901234567.89}"#,
             "'1234567890123456789012345678901234567.89' has 39 significant digits"),
            (#"{"entity":"Invoice","number":2,"total":0.12345678901234567890123456789012345678901,"rate":1e-5}"#,
             "'0.12345678901234567890123456789012345678901' has 41 significant digits"),
            (#"{"entity":"Invoice","number":3,"total":1.5e-128}"#, "too small for a decimal"),
        ]
        for c in cases {
            #expect { try builder.fromJSON(Array(c.line.utf8), line: 7) } throws: { error in
                guard let issue = error as? ImportIssue else { return false }
                return issue.line == 7 && issue.field == "total" && issue.reason.contains(c.reason)
                    && !issue.reason.contains("e+36") && !issue.reason.contains("not exact")
            }
        }
        // The same double from two different texts in one line: the reason cannot tell which
        // was written for this attribute, and names the limits instead.
        let twice = #"{"entity":"Invoice","number":4,"rate":1.2345678901234567890123456789012345678901,"# +
            #""total":1.2345678901234567890123456789012345678902}"#
        #expect { try builder.fromJSON(Array(twice.utf8), line: 1) } throws: { "\($0)".contains("not exact as a decimal") }
    }

    @Test func migrationsConvertToAndFromDecimals() throws {
        #expect(try TypeConversion.doubleToDecimal.convert(.double(0.1)) == .decimal(try dec("0.1")))
        #expect(try TypeConversion.doubleToDecimal.convert(.double(2328.6)) == .decimal(try dec("2328.6")))
        #expect(throws: ValueConversion.Failure.self) { try TypeConversion.doubleToDecimal.convert(.double(.infinity)) }
        // Past a decimal's range (38 digits times 10^-128 … 10^127), as the README says.
        for outside in [1e200, Double.leastNonzeroMagnitude, -Double.greatestFiniteMagnitude] {
            #expect(throws: ValueConversion.Failure.self) { try TypeConversion.doubleToDecimal.convert(.double(outside)) }
        }
        #expect(try TypeConversion.doubleToDecimal.convert(.double(1e120)) == .decimal(try dec("1e120")))
        #expect(try TypeConversion.intToDecimal.convert(.int(-5)) == .decimal(-5))
        #expect(try TypeConversion.stringToDecimal.convert(.string(" 0.99 ")) == .decimal(try dec("0.99")))
        #expect(throws: ValueConversion.Failure.self) { try TypeConversion.stringToDecimal.convert(.string("x")) }
        #expect(try TypeConversion.decimalToString.convert(.decimal(try dec("1e3"))) == .string("1000"))
        #expect(try TypeConversion.decimalToDouble.convert(.decimal(try dec("0.1"))) == .double(0.1))
    }

    @Test func generatedCodeDeclaresDecimals() throws {
        let source = ModelGenerator.swiftSource(for: try schema())
        #expect(source.contains("public var total: Foundation.Decimal"), "\(source)")
        #expect(source.contains("fee value2: Foundation.Decimal? = Foundation.Decimal(sign: .plus, exponent: -1, significand: 1)"),
                "\(source)")
    }

    /// A default of more than 18 digits is generated exactly (it was generated as `nil` on an
    /// optional attribute, and not at all on a required one): the generated expressions, compiled
    /// and run, print the schema's values.
    @Test func generatedDefaultsOfUpTo38DigitsAreExact() async throws {
        let json = #"""
        {"model": "m", "version": 1, "entities": [{"name": "A", "attributes": [
          {"name": "a", "type": "decimal", "optional": true, "default": "12345678901234567890123.45"},
          {"name": "b", "type": "decimal", "default": "-0.12345678901234567890123456789012345678"},
          {"name": "c", "type": "decimal", "default": "100000000000000000000000000000000000"},
          {"name": "d", "type": "decimal", "default": "123456789012345678"},
          {"name": "e", "type": "decimal", "default": "1e130"}]}]}
        """#
        let schema = try Schema.parse(Array(json.utf8), source: "v1.json")
        let entity = try #require(schema.entity(named: "A"))
        let literals = try entity.attributes.map { try #require(ModelGenerator.defaultLiteral($0), "\($0.name)") }
        #expect(!literals[0].contains("nil") && literals[3] == "Foundation.Decimal(sign: .plus, exponent: 0, significand: 123456789012345678)",
                "\(literals)")
        // Past 10^127 (Foundation's largest exponent) the value is parsed from its text.
        #expect(literals[4].contains(#"Foundation.Decimal(string: "1000e127""#), "\(literals)")
        let dir = temporaryDirectory("decimal-defaults")
        defer { try? FileManager.default.removeItem(at: dir) }
        let program = "import Foundation\n" + literals.map { "print(\($0) as Foundation.Decimal)\n" }.joined()
        try Data(program.utf8).write(to: dir.appendingPathComponent("main.swift"))
        let built = try await run("/usr/bin/env", ["swiftc", "-o", dir.appendingPathComponent("p").path,
                                                   dir.appendingPathComponent("main.swift").path])
        #expect(built.status == 0, "\(built.stderr.prefix(2_000))\n\(program)")
        let ran = try await run(dir.appendingPathComponent("p").path, [])
        #expect(ran.stdout == "12345678901234567890123.45\n-0.12345678901234567890123456789012345678\n" +
                             "100000000000000000000000000000000000\n123456789012345678\n" +
                             "1" + String(repeating: "0", count: 130) + "\n", "\(ran.stdout)\n\(program)")
    }

    // MARK: Through storectl

    @Test func importExportAndQueryThroughStorectlAreExact() async throws {
        let dir = temporaryDirectory("decimal-storectl")
        defer { try? FileManager.default.removeItem(at: dir) }
        let schemaDir = dir.appendingPathComponent("schema")
        try FileManager.default.createDirectory(at: schemaDir, withIntermediateDirectories: true)
        try Data(Self.schemaText.utf8).write(to: schemaDir.appendingPathComponent("v1.json"))
        let store = dir.appendingPathComponent("store").path
        #expect(try await storectl("init", store, "--schema", schemaDir.path).status == 0)

        var lines = ""
        for i in 0..<1000 { lines += #"{"entity": "Invoice", "number": \#(i), "total": 2.3286}"# + "\n" }
        lines += #"{"entity": "Invoice", "number": 1000, "total": "0.99", "rate": 0.1}"# + "\n"
        let input = dir.appendingPathComponent("in.ndjson")
        try Data(lines.utf8).write(to: input)
        let imported = try await storectl("import", store, input.path, "--quiet")
        #expect(imported.status == 0, "\(imported.stderr)")

        let sum = try await storectl("query", store, "--entity", "Invoice", "--sum", "total", "--json")
        #expect(sum.status == 0, "\(sum.stderr)")
        #expect(sum.stdout.contains(#""sum(total)":2329.59"#), "\(sum.stdout)")
        let found = try await storectl("query", store, "--entity", "Invoice", "--where", "total == 0.99", "--json")
        #expect(found.stdout.contains(#""total":0.99"#) && found.stdout.contains(#""rate":0.1"#), "\(found.stdout)")

        let exported = try await storectl("export", store, "--entity", "Invoice", "--format", "csv")
        #expect(exported.status == 0, "\(exported.stderr)")
        #expect(exported.stdout.contains(",2.3286,") && exported.stdout.contains(",0.99,"), "\(exported.stdout.prefix(300))")

        // A bad decimal names the line and the field, and nothing of the file is written.
        let bad = dir.appendingPathComponent("bad.ndjson")
        try Data((#"{"entity": "Invoice", "number": 1, "total": 5}"# + "\n" +
                  #"{"entity": "Invoice", "number": 2, "total": "1.2.3"}"# + "\n").utf8).write(to: bad)
        let refused = try await storectl("import", store, bad.path, "--quiet")
        #expect(refused.status == 65 && refused.stderr.contains("bad.ndjson:2: total:"), "\(refused.stderr)")
        #expect(refused.stderr.contains("is not a decimal number"), "\(refused.stderr)")
        let count = try await storectl("query", store, "--entity", "Invoice", "--count")
        #expect(count.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1001", "\(count.stdout)")
    }

    /// A custom migration step may not write a decimal a save would refuse: 39 significant
    /// digits (what Foundation's `Decimal` holds up to 2¹²⁸) were encoded and then refused on
    /// every read of the object.
    @Test func aMigrationStepThatWritesADecimalPastTheLimitsIsRefused() async throws {
        let v1 = #"""
        {"model":"till","version":1,"entities":[
          {"name":"Sale","attributes":[{"name":"amount","type":"decimal"}]}]}
        """#
        let v2 = #"""
        {"model":"till","version":2,"entities":[
          {"name":"Sale","attributes":[{"name":"amount","type":"decimal"}]}],
         "migration":{"steps":[{"op":"custom","entity":"Sale","name":"double"}]}}
        """#
        let schemas = try [v1, v2].enumerated().map {
            try Schema.parse(Array($1.utf8), source: "v\($0 + 1).json", expectedVersion: $0 + 1)
        }
        let dir = temporaryDirectory("migrate-decimal-digits")
        defer { try? FileManager.default.removeItem(at: dir) }
        let largest = try #require(Decimal(string: "99999999999999999999999999999999999999"))
        do {
            let store = try Store.open(at: dir, schema: schemas[0])
            defer { store.close() }
            var r = Record(entity: try #require(schemas[0].entity(named: "Sale")))
            r["amount"] = .decimal(largest)
            _ = try await store.save { $0.insert(r) }
            // A save refuses the sum.
            var over = Record(entity: try #require(schemas[0].entity(named: "Sale")))
            over["amount"] = .decimal(largest + largest)
            await #expect(throws: StrataError.self) { _ = try await store.save { $0.insert(over) } }
        }
        var registry = MigrationRegistry()
        registry.register("double") { r in
            if case .decimal(let d) = r["amount"] { r["amount"] = .decimal(d + d) }
        }
        do {
            _ = try await Store.migrate(at: dir, schemas: schemas, registry: registry)
            Issue.record("a migration stored a decimal of 39 digits")
        } catch let e as MigrationError {
            #expect(e.reason.contains("'amount'") && e.reason.contains("39 significant digits"), "\(e.reason)")
        }
        let store = try Store.open(at: dir, schema: schemas[0])
        defer { store.close() }
        #expect(try store.mainContext.fetch(Query(entity: "Sale")).map { $0["amount"] } == [.decimal(largest)])
    }
}
