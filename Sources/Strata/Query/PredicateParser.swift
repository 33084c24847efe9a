/// Parses the small filter language of `storectl query --where` and `export --where`:
///
/// ```
/// durationSeconds > 300 and (title contains 'love' or rating >= 4.5)
/// album.year between 1990 and 1999         -- through a to-one relationship
/// playlists.name == 'Road trip'            -- "any" over a to-many relationship
/// genre == null      title prefix 'Jó'     year in [1997, 2001]     not explicit == true
/// playlists == null                        -- a to-many without targets (!= null: with some)
/// name matches '*[^ -~]*'                  -- a glob (GlobPattern): here, a character outside printable ASCII
/// ```
///
/// Operators: `== != < <= > >=`, `contains`, `icontains` (case-insensitive), `prefix`, `suffix`,
/// `matches`, `imatches` (a ``GlobPattern`` the whole string matches),
/// `in [..]`, `between .. and ..`; `and`, `or`, `not`, parentheses. Strings are quoted with `'`
/// or `"` (double the quote to include it); dates are ISO-8601 strings.
public struct PredicateParser {
    enum Token: Equatable {
        case word(String)
        case string(String)
        case number(String)
        case symbol(String)
    }

    /// A filter or sort text that does not parse, or that names something the entity does not have.
    public struct ParseError: Error, Sendable, CustomStringConvertible {
        /// The 0-based position in the text (in Unicode scalars) where the problem was found.
        public let position: Int
        /// What is wrong.
        public let reason: String
        /// The error as `at character N: reason`, counting characters from 1.
        public var description: String { "at character \(position + 1): \(reason)" }
    }

    let schema: Schema
    private var tokens: [(Token, Int)] = []
    private var i = 0
    /// The text's length in Unicode scalars: where an error found at its end points.
    private var end = 0
    /// `not`s and parentheses open around the current position.
    private var nesting = 0

    /// The deepest nesting of `not` and parentheses a filter may have (the parser recurses once
    /// per level; the JSON reader's limit is the same).
    public static let maxNesting = 64
    /// The most relationships a dotted path may follow (`album.artist.name` follows two): each
    /// step nests the filter once more, and each to-many one multiplies the objects a scan reads.
    public static let maxPathSteps = 8

    /// Parses `text` as a filter over `entity`.
    public static func parse(_ text: String, entity: EntityDescription, schema: Schema) throws -> Filter {
        var p = PredicateParser(schema: schema)
        let scalars = Array(text.unicodeScalars)
        p.tokens = try tokenize(scalars)
        p.end = scalars.count
        let result = try p.orExpression(entity)
        guard p.i == p.tokens.count else { throw p.error("unexpected \(p.describe(p.tokens[p.i].0))") }
        return result
    }

    /// Parses `title,-year` (a `-` prefix sorts descending).
    public static func parseSort(_ text: String, entity: EntityDescription) throws -> [SortKey] {
        try parseSort(text, entity: entity, schema: nil)
    }

    /// Parses a sort list as ``parseSort(_:entity:)`` does, where a name may also be a path
    /// through to-one relationships (`album.title`, `album.artist.name`): objects are sorted by
    /// the attribute of the object the path leads to, those whose path ends at no object first.
    public static func parseSort(_ text: String, entity: EntityDescription, schema: Schema?) throws -> [SortKey] {
        // Each key's errors point at it: `at` counts characters (Unicode scalars, as the filter's
        // positions do) from the start of the text to where the key's name begins.
        var at = 0
        return try text.split(separator: ",", omittingEmptySubsequences: false).map { part in
            let partStart = at
            at += part.unicodeScalars.count + 1
            let leading = part.unicodeScalars.prefix { $0.properties.isWhitespace }.count
            // White space of any kind around a name, line breaks too, as `--where` skips it.
            let s = part.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !s.isEmpty, s != "-" else {
                throw ParseError(position: partStart + leading,
                                 reason: "an empty sort attribute (write names separated by commas, e.g. title,-year)")
            }
            let descending = s.hasPrefix("-")
            let name = descending ? String(s.dropFirst()) : s
            let nameStart = partStart + leading + (descending ? 1 : 0)
            if name.hasPrefix("count("), name.hasSuffix(")") {
                let inner = String(name.dropFirst(6).dropLast())
                guard let r = entity.relationship(named: inner), r.isToMany else {
                    throw ParseError(position: nameStart + 6,
                                     reason: "'\(EchoedText.shown(inner))' is not a to-many relationship of " +
                                             "\(entity.name) (count(rel) sorts by a to-many's number of targets)")
                }
                return SortKey(countOf: r.tag, ascending: !descending)
            }
            do {
                let (path, attribute) = try parseAttributePath(name, entity: entity, schema: schema, use: "sort")
                return SortKey(path: path, attribute: attribute, ascending: !descending)
            } catch let e as ParseError {
                // `title desc` (SQL's way) reads as one unknown name: say how descending is written.
                let hint = name.unicodeScalars.contains { $0.properties.isWhitespace }
                    ? " (a '-' before a name sorts descending: -title)" : ""
                throw ParseError(position: nameStart + e.position, reason: e.reason + hint)
            }
        }
    }

    /// An attribute of `entity` (`title`), or a path through to-one relationships to an attribute
    /// of the object it leads to (`album.artist.name`): the relationships' tags and the
    /// attribute's index. `use` names what the path is for in the errors (`sort`, `group-by`),
    /// whose positions count characters from the start of `name` to the step they are about.
    public static func parseAttributePath(_ name: String, entity: EntityDescription, schema: Schema?,
                                          use: String) throws -> (path: [UInt16], attribute: Int) {
        var steps = name.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        let last = steps.removeLast()
        guard steps.count <= Self.maxPathSteps else {
            throw ParseError(position: 0, reason: "a path of \(steps.count) relationships: at most " +
                                                  "\(Self.maxPathSteps) may be followed")
        }
        var at = entity
        var path: [UInt16] = []
        var stepStart = 0
        for step in steps {
            guard let schema else {
                throw ParseError(position: 0, reason: "a \(use) path ('\(EchoedText.shown(name))') needs the schema")
            }
            guard let r = at.relationship(named: step), !r.isToMany,
                  let next = schema.entity(named: r.destination) else {
                throw ParseError(position: stepStart,
                                 reason: "'\(EchoedText.shown(step))' is not a to-one relationship of \(at.name) " +
                                         "(a \(use) path follows to-one relationships to an attribute)")
            }
            path.append(r.tag)
            at = next
            stepStart += step.unicodeScalars.count + 1
        }
        guard let a = at.attribute(named: last) else {
            throw ParseError(position: stepStart,
                             reason: "unknown \(use) attribute '\(EchoedText.shown(String(last)))' of \(at.name)")
        }
        return (path, a.index)
    }

    private func error(_ reason: String) -> ParseError { error(at: i, reason) }

    /// An error about the token at `token` (a path named before the token the parser is at).
    private func error(at token: Int, _ reason: String) -> ParseError {
        // Past the last token: the filter ended where more was expected (`(`, `name ==`).
        guard token < tokens.count else { return ParseError(position: end, reason: reason + " at the end of the filter") }
        return ParseError(position: tokens[token].1, reason: reason)
    }

    private func describe(_ t: Token) -> String {
        switch t {
        case .word(let w): "'\(EchoedText.shown(String(w)))'"
        case .string(let s): "string '\(EchoedText.shown(String(s)))'"
        case .number(let n): "number \(EchoedText.shown(String(n)))"
        case .symbol(let s): "'\(s)'"
        }
    }

    private static func tokenize(_ s: [Unicode.Scalar]) throws -> [(Token, Int)] {
        var out: [(Token, Int)] = []
        var i = 0
        func isWord(_ c: Unicode.Scalar) -> Bool {
            c.properties.isAlphabetic || c == "_" || c == "." || ("0"..."9").contains(c)
        }
        func isDigit(_ k: Int) -> Bool { k < s.count && ("0"..."9").contains(s[k]) }
        // A digit, or a point before one (`.5`), after an optional sign (`-3`, `-.5`).
        func startsNumber(at k: Int) -> Bool {
            var k = k
            if s[k] == "-" || s[k] == "+" { k += 1 }
            return isDigit(k) || (k < s.count && s[k] == "." && isDigit(k + 1))
        }
        while i < s.count {
            let c = s[i]
            let start = i
            // Any white space (a carriage return from a script written on Windows, a no-break space).
            if c.properties.isWhitespace { i += 1; continue }
            if c == "'" || c == "\"" {
                var text = ""
                i += 1
                while true {
                    guard i < s.count else { throw ParseError(position: start, reason: "unterminated string") }
                    if s[i] == c {
                        if i + 1 < s.count && s[i + 1] == c { text.unicodeScalars.append(c); i += 2; continue }
                        i += 1
                        break
                    }
                    text.unicodeScalars.append(s[i])
                    i += 1
                }
                out.append((.string(text), start))
            } else if startsNumber(at: i) {
                i += 1
                // Digits, a point, and an exponent with its sign (`1e-5`, `2.5E+3`).
                while i < s.count && (("0"..."9").contains(s[i]) || s[i] == "." || s[i] == "e" || s[i] == "E"
                                      || ((s[i] == "-" || s[i] == "+") && (s[i - 1] == "e" || s[i - 1] == "E"))) {
                    i += 1
                }
                out.append((.number(String(String.UnicodeScalarView(s[start..<i]))), start))
            } else if isWord(c) {
                while i < s.count && isWord(s[i]) { i += 1 }
                out.append((.word(String(String.UnicodeScalarView(s[start..<i]))), start))
            } else {
                let two = i + 1 < s.count ? String(String.UnicodeScalarView([c, s[i + 1]])) : ""
                if ["==", "!=", "<=", ">="].contains(two) {
                    out.append((.symbol(two), start))
                    i += 2
                } else if "<>=()[],".unicodeScalars.contains(c) {
                    out.append((.symbol(c == "=" ? "==" : String(c)), start))
                    i += 1
                } else {
                    throw ParseError(position: start,
                                     reason: "unexpected character '\(EchoedText.escaped(Character(c)))'")
                }
            }
        }
        return out
    }

    private mutating func accept(_ t: Token) -> Bool {
        guard i < tokens.count, tokens[i].0 == t else { return false }
        i += 1
        return true
    }

    private mutating func orExpression(_ e: EntityDescription) throws -> Filter {
        var p = try andExpression(e)
        while accept(.word("or")) { p = p || (try andExpression(e)) }
        return p
    }

    private mutating func andExpression(_ e: EntityDescription) throws -> Filter {
        var p = try unary(e)
        while accept(.word("and")) { p = p && (try unary(e)) }
        return p
    }

    private mutating func unary(_ e: EntityDescription) throws -> Filter {
        // An attribute or relationship named `not` (a schema may have one): `not == 1` compares
        // it. Tried first when the entity has one; when the words after it make no comparison,
        // `not` is the operator (`not rating == 1`). It could not be named in a filter at all.
        if i < tokens.count, case .word("not") = tokens[i].0,
           e.attribute(named: "not") != nil || e.relationship(named: "not") != nil {
            let at = i
            if let compared = try? comparison(e) { return compared }
            i = at
        }
        let opens = accept(.word("not")) ? "not" : accept(.symbol("(")) ? "(" : nil
        guard let opens else { return try comparison(e) }
        nesting += 1
        defer { nesting -= 1 }
        guard nesting <= Self.maxNesting else {
            throw error("nested more than \(Self.maxNesting) levels deep (not and parentheses)")
        }
        if opens == "not" { return .not(try unary(e)) }
        let p = try orExpression(e)
        guard accept(.symbol(")")) else { throw error("expected ')'") }
        return p
    }

    private mutating func comparison(_ e: EntityDescription) throws -> Filter {
        guard i < tokens.count, case .word(let path) = tokens[i].0 else { throw error("expected an attribute name") }
        // Errors about the path point at it, not at the token after it.
        let pathToken = i
        i += 1
        let steps = path.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        // `.`, `a.`, `.a`, `a..b`: a step without a name.
        guard !steps.contains(where: \.isEmpty) else {
            throw error(at: pathToken, "'\(EchoedText.shown(path))': expected an attribute name before and after each '.'")
        }
        guard steps.count - 1 <= Self.maxPathSteps else {
            throw error(at: pathToken,
                        "a path of \(steps.count - 1) relationships: at most \(Self.maxPathSteps) may be followed")
        }
        return try resolve(steps, in: e, pathToken: pathToken)
    }

    /// Walks a dotted path: to-one relationships become `through`, to-many ones `any`.
    private mutating func resolve(_ path: [String], in e: EntityDescription, pathToken: Int) throws -> Filter {
        let head = path[0]
        if path.count == 1, let a = e.attribute(named: head) { return try condition(on: a) }
        guard let r = e.relationship(named: head) else {
            throw error(at: pathToken, "\(e.name) has no attribute or relationship '\(EchoedText.shown(String(head)))'")
        }
        let destination = schema.entity(named: r.destination)!
        if path.count == 1 {
            if r.isToMany {
                // `tracks == null`: no target; `tracks != null`: at least one.
                let at = i
                if let op = try? comparisonOperator(), op == .equal || op == .notEqual, accept(.word("null")) {
                    let some = Filter.any(relationship: r.tag, .all)
                    return op == .equal ? .not(some) : some
                }
                i = at
                throw error("'\(head)' is to-many: compare it with null (\(head) == null: none, " +
                            "\(head) != null: some) or name one of its attributes, e.g. " +
                            "\(head).\(destination.attributes.first?.name ?? "x")")
            }
            let op = try comparisonOperator()
            guard op == .equal || op == .notEqual else { throw error("a relationship compares with == or != only") }
            let target: ObjectID?
            if accept(.word("null")) { target = nil } else {
                guard i < tokens.count, case .string(let s) = tokens[i].0,
                      let id = ObjectID(string: s) else { throw error("expected an object id string or null") }
                guard id.entityTag == destination.tag else {
                    let named = schema.entity(tag: id.entityTag).map { "entity \($0.name)" } ?? "no entity of this schema"
                    throw error("'\(head)' leads to entity \(destination.name); \(id) is an id of \(named)")
                }
                i += 1
                target = id
            }
            let p = Filter.related(relationship: r.tag, target)
            return op == .equal ? p : .not(p)
        }
        let inner = try resolve(Array(path.dropFirst()), in: destination, pathToken: pathToken)
        return r.isToMany ? .any(relationship: r.tag, inner) : .through(relationship: r.tag, inner)
    }

    private mutating func comparisonOperator() throws -> ComparisonOperator {
        guard i < tokens.count, case .symbol(let s) = tokens[i].0, let op = ComparisonOperator(rawValue: s) else {
            throw error("expected a comparison operator")
        }
        i += 1
        return op
    }

    private mutating func condition(on a: AttributeDescription) throws -> Filter {
        guard i < tokens.count else { throw error("expected an operator after '\(a.name)'") }
        if case .word(let w) = tokens[i].0 {
            i += 1
            switch w {
            case "contains", "icontains", "prefix", "suffix", "matches", "imatches":
                guard a.type == .string else {
                    throw error("'\(w)' needs a string attribute; '\(a.name)' is \(a.type.rawValue)")
                }
                guard i < tokens.count,
                      case .string(let s) = tokens[i].0 else { throw error("expected a string after '\(w)'") }
                let op: StringOperator
                switch w {
                case "prefix": op = .hasPrefix
                case "suffix": op = .hasSuffix
                case "matches", "imatches":
                    op = .matches
                    do { _ = try GlobPattern(s) } catch let invalid as GlobPattern.Invalid {
                        throw error("pattern: \(invalid.reason)")
                    }
                default: op = .contains
                }
                i += 1
                return .string(attribute: a.index, op, s, caseInsensitive: w.hasPrefix("i"))
            case "in":
                guard accept(.symbol("[")) else { throw error("expected '[' after in") }
                var values: [Value] = []
                if !accept(.symbol("]")) {
                    repeat { values.append(try literal(for: a)) } while accept(.symbol(","))
                    guard accept(.symbol("]")) else { throw error("expected ']'") }
                }
                return .isIn(attribute: a.index, values)
            case "between":
                let lo = try literal(for: a)
                guard accept(.word("and")) else { throw error("expected 'and' in between") }
                return .between(attribute: a.index, lo, try literal(for: a))
            default:
                i -= 1
                throw error("unknown operator '\(EchoedText.shown(String(w)))'")
            }
        }
        let op = try comparisonOperator()
        return .compare(attribute: a.index, op, try literal(for: a))
    }

    private mutating func literal(for a: AttributeDescription) throws -> Value {
        guard i < tokens.count else { throw error("expected a value for '\(a.name)'") }
        let (t, _) = tokens[i]
        let text: String
        switch t {
        case .word("null"): i += 1; return .null
        case .word("true") where a.type == .bool: i += 1; return .bool(true)
        case .word("false") where a.type == .bool: i += 1; return .bool(false)
        case .string(let s) where a.type == .string: i += 1; return .string(s)
        case .string(let s): text = s
        case .number(let n): text = n
        default: throw error("expected a value for '\(a.name)', found \(describe(t))")
        }
        do {
            let v = try ValueConversion.value(fromText: text, type: a.type)
            // A date past what a store holds is refused here, at its position, as a number out
            // of range is (it was refused when the query ran: exit 65, the value in seconds).
            if let why = v.notFiniteReason {
                throw error("'\(a.name)' is \(a.type.rawValue): '\(EchoedText.shown(text))' is out of range: \(why)")
            }
            i += 1
            return v
        } catch let f as ValueConversion.Failure {
            throw error("'\(a.name)' is \(a.type.rawValue): \(f.reason)")
        }
    }
}

import Foundation
