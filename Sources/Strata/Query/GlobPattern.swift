/// The pattern language of ``StringOperator/matches``: a glob over Unicode scalars.
///
/// | Pattern | Matches |
/// |---|---|
/// | `*` | any run of characters, also none |
/// | `?` | any one character |
/// | `[abc]`, `[a-z0-9]` | one character of the set (ranges by code point) |
/// | `[^ -~]` | one character not in the set (here: outside printable ASCII) |
/// | `\x` | the character `x` itself (`\*`, `\[`, `\\`) |
/// | anything else | itself |
///
/// The whole string must match (`*love*` finds "love" anywhere). So "names with a character
/// outside printable ASCII" is, in the filter language, `name matches '*[^ -~]*'`.
///
/// Cost is bounded: a pattern has at most ``maxElements`` elements, and matching takes at most
/// (text length + 1) × (pattern elements + 1) steps (the greedy algorithm that backtracks only to
/// the last `*`); there is no exponential case.
public struct GlobPattern: Sendable, Equatable {
    /// The most elements (characters, sets, wildcards) a pattern may have.
    public static let maxElements = 256

    enum Element: Sendable, Equatable {
        case star
        case one
        case literal(Unicode.Scalar)
        case set([ClosedRange<UInt32>], negated: Bool)
        /// A set of a case-insensitive pattern, met by case-folded text: its ranges as written,
        /// holding the scalar or one of its case forms.
        case setAnyCase([ClosedRange<UInt32>], negated: Bool)

        func matches(_ c: Unicode.Scalar) -> Bool {
            switch self {
            case .star, .one: return true
            case .literal(let l): return l == c
            case .set(let ranges, let negated): return ranges.contains { $0.contains(c.value) } != negated
            case .setAnyCase(let ranges, let negated):
                let forms = Self.caseForms(c)
                return forms.contains { f in ranges.contains { $0.contains(f.value) } } != negated
            }
        }

        /// `c` and its upper- and lowercase forms that are one scalar each.
        static func caseForms(_ c: Unicode.Scalar) -> [Unicode.Scalar] {
            var forms = [c]
            for form in [c.properties.uppercaseMapping, c.properties.lowercaseMapping] {
                let scalars = form.unicodeScalars
                if scalars.count == 1, let f = scalars.first, f != c { forms.append(f) }
            }
            return forms
        }
    }

    /// A pattern that does not parse.
    public struct Invalid: Error, Sendable, CustomStringConvertible {
        /// What is wrong.
        public let reason: String
        /// The reason.
        public var description: String { reason }
    }

    let elements: [Element]

    /// Parses `pattern`; throws ``Invalid`` for a set without its `]`, an empty set, a range whose
    /// end is before its start, a `\` at the end, or more than ``maxElements`` elements.
    public init(_ pattern: String) throws {
        var out: [Element] = []
        var it = Array(pattern.unicodeScalars)[...]
        while let c = it.popFirst() {
            switch c {
            case "*": if out.last != .star { out.append(.star) }   // `**` is `*`
            case "?": out.append(.one)
            case "\\":
                guard let next = it.popFirst() else { throw Invalid(reason: "a '\\' at the end of the pattern") }
                out.append(.literal(next))
            case "[":
                var negated = false
                if it.first == "^" {
                    negated = true
                    it.removeFirst()
                }
                var ranges: [ClosedRange<UInt32>] = []
                var closed = false
                while let x = it.popFirst() {
                    if x == "]" {
                        guard !ranges.isEmpty else {
                            throw Invalid(reason: "an empty set '[]' in the pattern (write '\\]' for the character ])")
                        }
                        closed = true
                        break
                    }
                    var low = x
                    if low == "\\" {
                        guard let e = it.popFirst() else { throw Invalid(reason: "a '\\' at the end of the pattern") }
                        low = e
                    }
                    var high = low
                    if it.first == "-", it.count >= 2, it[it.index(after: it.startIndex)] != "]" {
                        it.removeFirst()
                        high = it.removeFirst()
                        if high == "\\" {
                            guard let e = it.popFirst() else { throw Invalid(reason: "a '\\' at the end of the pattern") }
                            high = e
                        }
                        guard high.value >= low.value else {
                            throw Invalid(reason: "the range '\(low)-\(high)' ends before it starts")
                        }
                    }
                    ranges.append(low.value...high.value)
                }
                guard closed else { throw Invalid(reason: "a '[' without its ']' in the pattern") }
                out.append(.set(ranges, negated: negated))
            default: out.append(.literal(c))
            }
            if out.count > Self.maxElements {
                throw Invalid(reason: "a pattern of more than \(Self.maxElements) elements")
            }
        }
        elements = out
    }

    /// `pattern` for matching case-folded text (`imatches`): parsed as written (so it is valid
    /// or not as written), then each literal character case-folded, and each set kept with its
    /// ranges as written, met by a character or one of its case forms. (Folding the pattern's
    /// text before parsing it changed its sets: `[A-_]` became `[a-_]`, a range that ends before it
    /// starts, and matched nothing; `[A-z]` became `[a-z]`, without `[\]^_`.)
    public init(caseInsensitive pattern: String, fold: (String) -> String) throws {
        let written = try GlobPattern(pattern)
        var out: [Element] = []
        for element in written.elements {
            switch element {
            case .literal(let l): out += fold(String(l)).unicodeScalars.map { .literal($0) }
            case .set(let ranges, let negated): out.append(.setAnyCase(ranges, negated: negated))
            case .star, .one, .setAnyCase: out.append(element)
            }
        }
        elements = out
    }

    /// Whether the whole of `text` matches.
    public func matches(_ text: String) -> Bool {
        let t = Array(text.unicodeScalars)
        var i = 0, p = 0
        var lastStar = -1, resumeAt = 0
        while i < t.count {
            if p < elements.count, elements[p] == .star {
                lastStar = p
                resumeAt = i
                p += 1
            } else if p < elements.count, elements[p].matches(t[i]) {
                p += 1
                i += 1
            } else if lastStar >= 0 {
                // Let the last `*` take one more character and try again from there.
                p = lastStar + 1
                resumeAt += 1
                i = resumeAt
            } else {
                return false
            }
        }
        while p < elements.count, elements[p] == .star { p += 1 }
        return p == elements.count
    }
}
