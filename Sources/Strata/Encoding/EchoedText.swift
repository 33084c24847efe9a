/// Text from input (a name in a schema or an import file, a value, an option) as Strata and
/// storectl show it in messages and text output: control characters escaped, so nothing read
/// can move the cursor, clear a terminal or hide the rest of a line, and in messages cut short,
/// so a megabyte name is not echoed whole.
///
/// ```
/// EchoedText.escaped("a\u{0}b\n")   // a\u{0}b\n  (as typed: a backslash, u, braces)
/// EchoedText.shown(String(repeating: "x", count: 1_000_000))
/// // xxxx…x (64 x's)…(1000000 bytes)
/// ```
public enum EchoedText {
    /// Characters of input a message shows at most, before `…(N bytes)`.
    public static let maxCharacters = 64

    /// `text` with control characters escaped (``escaped(_:)-(String)``), cut after
    /// ``maxCharacters`` Unicode scalars of the original and followed by `…(N bytes)`, N being the
    /// whole text's length in UTF-8 bytes, when it is longer.
    public static func shown(_ text: String) -> String { rendered(text, quoting: false, cut: true) }

    /// `text` with control characters escaped, and with `quoting` a `"` or `\` too; with `cut`,
    /// cut after ``maxCharacters`` Unicode scalars (a letter followed by a million combining
    /// marks is one Character, and is cut too) and followed by `…(N bytes)`.
    private static func rendered(_ text: String, quoting: Bool, cut: Bool) -> String {
        var out = ""
        var count = 0
        for c in text {
            let n = c.unicodeScalars.count
            if cut && count + n > maxCharacters {
                for u in c.unicodeScalars.prefix(maxCharacters - count) { append(Character(u), to: &out) }
                return out + "…(\(text.utf8.count) bytes)"
            }
            // By scalar: a `"` or `\` followed by a combining mark is one Character equal to
            // neither, and went out unescaped.
            if quoting, c.unicodeScalars.contains(where: { $0 == "\"" || $0 == "\\" }) {
                for u in c.unicodeScalars {
                    switch u {
                    case "\"": out += "\\\""
                    case "\\": out += "\\\\"
                    default: append(Character(u), to: &out)
                    }
                }
            } else {
                append(c, to: &out)
            }
            count += n
        }
        return out
    }

    /// `text` with every control character written as an escape: `\n`, `\r`, `\t`, and
    /// `\u{X}` (hexadecimal) for the others: C0 (U+0000–U+001F), DEL (U+007F), C1
    /// (U+0080–U+009F), and the bidirectional controls and line separators that reorder or break
    /// what follows (U+200E–U+200F, U+2028–U+202E, U+2066–U+2069). A backslash is left as it is.
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isControl) else { return text }
        var out = ""
        for c in text { append(c, to: &out) }
        return out
    }

    /// `text` in double quotes as text output shows a string value: control characters escaped
    /// as ``escaped(_:)-(String)`` escapes them, and a `"` or `\` inside written `\"` and `\\`, so
    /// that where the string ends is never in doubt (`s="x" i=5` was one value or two). With
    /// `cut`, cut as ``shown(_:)`` cuts.
    public static func quoted(_ text: String, cut: Bool = false) -> String {
        "\"" + rendered(text, quoting: true, cut: cut) + "\""
    }

    /// The escaped form of one character (as ``escaped(_:)-(String)`` writes it).
    public static func escaped(_ c: Character) -> String {
        var out = ""
        append(c, to: &out)
        return out
    }

    static func isControl(_ u: Unicode.Scalar) -> Bool {
        u.value < 0x20 || (0x7F...0x9F).contains(u.value) || isFormatControl(u.value)
    }

    /// Scalars that move or reorder what a terminal shows after them without being C0 or C1
    /// controls: the bidirectional marks, embeddings, overrides and isolates (U+200E–U+200F,
    /// U+202A–U+202E, U+2066–U+2069), and the line and paragraph separators (U+2028–U+2029).
    private static func isFormatControl(_ v: UInt32) -> Bool {
        (0x200E...0x200F).contains(v) || (0x2028...0x202E).contains(v) || (0x2066...0x2069).contains(v)
    }

    private static func append(_ c: Character, to out: inout String) {
        guard c.unicodeScalars.contains(where: isControl) else {
            out.append(c)
            return
        }
        // A character may join a control scalar with others (`\r\n` is one Character).
        for u in c.unicodeScalars {
            switch u {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where isControl(u): out += "\\u{" + String(u.value, radix: 16, uppercase: true) + "}"
            default: out.unicodeScalars.append(u)
            }
        }
    }
}
