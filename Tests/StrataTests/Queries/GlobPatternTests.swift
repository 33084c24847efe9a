import Foundation
import Testing
@testable import Strata

/// A plain recursive glob matcher, written from the documented rules with no attention to cost:
/// the reference `GlobPattern` is checked against. (Exponential in the worst case; used on
/// short strings only.)
enum ReferenceGlob {
    static func matches(_ text: ArraySlice<Unicode.Scalar>, _ pattern: ArraySlice<Unicode.Scalar>) -> Bool {
        guard let p = pattern.first else { return text.isEmpty }
        let rest = pattern.dropFirst()
        switch p {
        case "*":
            // Any run, also none.
            return (0...text.count).contains { matches(text.dropFirst($0), rest) }
        case "?":
            return !text.isEmpty && matches(text.dropFirst(), rest)
        case "\\":
            guard let escaped = rest.first else { return false }
            return text.first == escaped && matches(text.dropFirst(), rest.dropFirst())
        case "[":
            guard let (set, after) = set(rest), let c = text.first else { return false }
            return set(c) && matches(text.dropFirst(), after)
        default:
            return text.first == p && matches(text.dropFirst(), rest)
        }
    }

    /// The set starting after `[`: its membership test and the pattern after its `]`.
    private static func set(_ s: ArraySlice<Unicode.Scalar>)
        -> ((Unicode.Scalar) -> Bool, ArraySlice<Unicode.Scalar>)? {
        var s = s
        let negated = s.first == "^"
        if negated { s = s.dropFirst() }
        var ranges: [(UInt32, UInt32)] = []
        while let c = s.first {
            s = s.dropFirst()
            if c == "]" {
                let r = ranges
                return ({ x in r.contains { $0.0 <= x.value && x.value <= $0.1 } != negated }, s)
            }
            var low = c
            if low == "\\" {
                guard let e = s.first else { return nil }
                low = e
                s = s.dropFirst()
            }
            var high = low
            if s.first == "-", s.count >= 2, s[s.startIndex + 1] != "]" {
                high = s[s.startIndex + 1]
                s = s.dropFirst(2)
                if high == "\\" {
                    guard let e = s.first else { return nil }
                    high = e
                    s = s.dropFirst()
                }
            }
            ranges.append((low.value, high.value))
        }
        return nil
    }
}

/// `matches` patterns (`GlobPattern`): the documented forms, the refused ones, and a randomized
/// comparison with the plain reference matcher over replayable seeds.
@Suite struct GlobPatternTests {
    @Test func theDocumentedForms() throws {
        // Each pattern is used in a matching case too, so a pattern that failed to parse would show.
        func m(_ text: String, _ pattern: String) -> Bool { (try? GlobPattern(pattern))?.matches(text) ?? false }
        #expect(m("Björk", "*[^ -~]*") && !m("Bjork", "*[^ -~]*"))
        #expect(m("love song", "*love*") && !m("Love", "*love*"))
        #expect(m("abc", "a?c") && !m("ac", "a?c"))
        #expect(m("x7", "[a-z][0-9]") && !m("X7", "[a-z][0-9]"))
        #expect(m("a*b", "a\\*b") && !m("axb", "a\\*b"))
        #expect(m("", "*") && m("", "") && !m("a", ""))
        #expect(m("]", "[\\]]") && m("-", "[a\\-]"))
        #expect(m("光", "?") && m("夜光", "*光"))
    }

    @Test(arguments: ["[abc", "a\\", "[]", "[z-a]", String(repeating: "a", count: GlobPattern.maxElements + 1)])
    func aBadPatternIsRefused(pattern: String) {
        #expect(throws: GlobPattern.Invalid.self) { try GlobPattern(pattern) }
    }

    @Test(.timeLimit(.minutes(5))) func aPatternOfManyStarsOnALongTextEndsQuickly() throws {
        // The greedy matcher backtracks only to the last star: linear in the text per element.
        let pattern = try GlobPattern(String(repeating: "*a", count: 100) + "b")
        #expect(!pattern.matches(String(repeating: "a", count: 20_000)))
    }

    @Test(arguments: 1...4)
    func randomPatternsAgreeWithTheReference(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        let alphabet: [Unicode.Scalar] = ["a", "b", "é", "*", "?", "[", "]", "^", "-", "\\"]
        var compared = 0
        for _ in 0..<3000 {
            let pattern = String(String.UnicodeScalarView((0..<Int.random(in: 0...6, using: &rng)).map { _ in
                alphabet.randomElement(using: &rng)!
            }))
            let text = String(String.UnicodeScalarView((0..<Int.random(in: 0...6, using: &rng)).map { _ in
                (["a", "b", "é", "*", "-"] as [Unicode.Scalar]).randomElement(using: &rng)!
            }))
            guard let glob = try? GlobPattern(pattern) else { continue }
            compared += 1
            let expected = ReferenceGlob.matches(Array(text.unicodeScalars)[...], Array(pattern.unicodeScalars)[...])
            #expect(glob.matches(text) == expected, "seed \(seed): '\(text)' matches '\(pattern)'")
        }
        #expect(compared > 1000)
    }
}
