import Foundation
import Testing
@testable import Strata

/// A migration's type conversions at the edges of their types: every value that fits converts,
/// and text is read as the rest of Strata reads numbers (decimal text only).
@Suite struct TypeConversionTests {
    /// `doubleToInt` takes every whole double within Int64, its ends included (it refused those
    /// from 9.2e18 up, and Int64.min), and refuses the first one past them.
    @Test func doubleToIntTakesEveryDoubleWithinInt64() throws {
        for (d, i) in [(9.21e18, Int64(9_210_000_000_000_000_000)), (-9_223_372_036_854_775_808.0, Int64.min),
                       (9_223_372_036_854_774_784.0, Int64(9_223_372_036_854_774_784)), (2.5, 3), (-2.5, -3)] {
            #expect(try TypeConversion.doubleToInt.convert(.double(d)) == .int(i), "\(d)")
        }
        for d in [9_223_372_036_854_775_808.0, -9_223_372_036_854_777_856.0, .infinity, .nan] {
            #expect(throws: ValueConversion.Failure.self, "\(d)") { try TypeConversion.doubleToInt.convert(.double(d)) }
        }
    }

    /// `stringToDouble` reads decimal text, as import and filters do: hexadecimal (`0x10`), and
    /// a number that a double holds only as 0 (`1e-400`), are refused; they became 16 and 0.
    @Test func stringToDoubleReadsDecimalTextOnly() throws {
        for (s, d) in [(" 2.5 ", 2.5), ("-1e3", -1000.0), ("0", 0.0), ("0.000", 0.0), ("0e10", 0.0), ("5e-324", Double.leastNonzeroMagnitude)] {
            #expect(try TypeConversion.stringToDouble.convert(.string(s)) == .double(d), "\(s)")
        }
        for s in ["0x10", "0x1p-2", "1e-400", "nan", "inf", "1e400", "1,5", ""] {
            #expect(throws: ValueConversion.Failure.self, "\(s)") { try TypeConversion.stringToDouble.convert(.string(s)) }
        }
    }

    /// `intToDouble` converts every integer a double holds exactly (all within ±2^53, and the
    /// larger ones that are multiples of a power of two, Int64's ends among them) and refuses
    /// one it would round, as an import refuses such a number: 2^53 + 1 became 2^53.
    @Test func intToDoubleRefusesAnIntegerItWouldRound() throws {
        let exact: [Int64] = [0, -1, 1 << 53, -(1 << 53), (1 << 53) - 1, 1 << 62, Int64.min]
        for i in exact {
            #expect(try TypeConversion.intToDouble.convert(.int(i)) == .double(Double(i)), "\(i)")
        }
        for i: Int64 in [(1 << 53) + 1, -(1 << 53) - 1, Int64.max, (1 << 62) + 1] {
            #expect(throws: ValueConversion.Failure.self, "\(i)") { try TypeConversion.intToDouble.convert(.int(i)) }
        }
    }
}
