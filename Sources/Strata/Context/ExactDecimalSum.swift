/// The exact sum of decimals however many significant digits it needs on the way: a fixed-point
/// number of base-10⁹ limbs whose lowest digit is 10^``DecimalNumber/minExponent`` (the lowest a
/// decimal holds), one magnitude for the positive terms and one for the negative ones. A running
/// sum cut to 38 digits would fail or not by the order of its terms (`a + b - b` past the limit,
/// `b - b + a` within it); this one depends only on the terms.
///
/// Size: a decimal's last digit lies at 10^-128…10^127 and it has at most 38 digits, so a term
/// is below 10^166; with up to 2^63 terms the sum is below 10^185, which 36 limbs (324 digits
/// from 10^-128) hold with room.
struct ExactDecimalSum: Sendable {
    private static let base: UInt64 = 1_000_000_000
    private static let limbCount = 36
    private static let powers: [UInt64] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000]
    private var positive = [UInt64](repeating: 0, count: limbCount)
    private var negative = [UInt64](repeating: 0, count: limbCount)

    init() {}

    /// Adds `x` (checked against the decimal limits where it was made).
    mutating func add(_ x: DecimalNumber) {
        guard !x.isZero else { return }
        precondition(x.exponent >= DecimalNumber.minExponent, "a decimal's last digit is at or above 10^minExponent")
        if x.negative { Self.add(x, to: &negative) } else { Self.add(x, to: &positive) }
    }

    private static func add(_ x: DecimalNumber, to limbs: inout [UInt64]) {
        // Digit i from the last lies at 10^(exponent + i), that is at position exponent + i -
        // minExponent from the lowest digit of the sum.
        let offset = x.exponent - DecimalNumber.minExponent
        var lowest = limbCount, highest = 0
        for (i, d) in x.digits.reversed().enumerated() {
            let p = offset + i
            let limb = p / 9
            precondition(limb < limbCount, "a decimal term lies below 10^166")
            limbs[limb] += UInt64(d - 0x30) * powers[p % 9]
            lowest = min(lowest, limb)
            highest = max(highest, limb)
        }
        // Carries from the limbs touched up (each limb was below the base, plus at most 10^9 - 1).
        var limb = lowest
        var carry: UInt64 = 0
        while limb < limbCount && (limb <= highest || carry > 0) {
            let v = limbs[limb] + carry
            limbs[limb] = v % base
            carry = v / base
            limb += 1
        }
        precondition(carry == 0, "the sum of decimals stays below 10^196")
    }

    /// The sum, exactly: its digits may be more than a decimal keeps (the caller checks, or
    /// divides it down, ``DecimalNumber/divided(by:)``).
    var total: DecimalNumber {
        let (magnitude, isNegative): ([UInt64], Bool)
        if Self.compare(positive, negative) >= 0 {
            magnitude = Self.subtract(positive, negative)
            isNegative = false
        } else {
            magnitude = Self.subtract(negative, positive)
            isNegative = true
        }
        var digits: [UInt8] = []
        for limb in magnitude.reversed() {
            if digits.isEmpty {
                if limb != 0 { digits.append(contentsOf: Array(String(limb).utf8)) }
            } else {
                let text = Array(String(limb).utf8)
                digits.append(contentsOf: [UInt8](repeating: 0x30, count: 9 - text.count))
                digits.append(contentsOf: text)
            }
        }
        return DecimalNumber(negative: isNegative, digits: digits, exponent: DecimalNumber.minExponent)
    }

    private static func compare(_ a: [UInt64], _ b: [UInt64]) -> Int {
        for i in stride(from: limbCount - 1, through: 0, by: -1) where a[i] != b[i] {
            return a[i] < b[i] ? -1 : 1
        }
        return 0
    }

    /// `a - b` for `a >= b`.
    private static func subtract(_ a: [UInt64], _ b: [UInt64]) -> [UInt64] {
        var out = a
        var borrow: UInt64 = 0
        for i in 0..<limbCount {
            let sub = b[i] + borrow
            if out[i] >= sub {
                out[i] -= sub
                borrow = 0
            } else {
                out[i] = out[i] + base - sub
                borrow = 1
            }
        }
        return out
    }
}
