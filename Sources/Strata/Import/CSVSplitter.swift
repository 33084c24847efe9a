/// Splits CSV (RFC 4180): comma-separated, `"`-quoted fields with `""` for a quote; quoted
/// fields may span lines.
enum CSVSplitter {
    /// One field and whether it was quoted (`""` is an empty string, an empty unquoted field null).
    struct Field: Equatable {
        let text: String
        let quoted: Bool
    }

    enum Result {
        case fields([Field])
        /// The record continues on the next line (an open quote).
        case needsMore
    }

    /// Whether a record whose quoted field continues on `line` (the line begins inside that
    /// field) still has a field open at the line's end. Text CSV does not allow (a quote inside
    /// an unquoted field, or anything but a comma after a closing quote) ends the record on this
    /// line: ``split(_:)`` then reports it for this record, and the next line is a record of its
    /// own. (Counting quote characters, the record ran on while the count was odd, and a stray
    /// quote made it take in the records after it.)
    /// - Complexity: O(line), so a record of many lines costs its length.
    static func quoteStaysOpen(continuing line: [UInt8]) -> Bool {
        enum Where { case quoted, closed, fieldStart, unquoted }
        var at = Where.quoted
        var i = 0
        while i < line.count {
            let c = line[i]
            switch at {
            case .quoted:
                if c == 0x22 {
                    if i + 1 < line.count && line[i + 1] == 0x22 { i += 1 } else { at = .closed }
                }
            case .closed:
                guard c == 0x2C else { return false }
                at = .fieldStart
            case .fieldStart:
                at = c == 0x22 ? .quoted : c == 0x2C ? .fieldStart : .unquoted
            case .unquoted:
                if c == 0x22 { return false }
                if c == 0x2C { at = .fieldStart }
            }
            i += 1
        }
        return at == .quoted
    }

    static func split(_ bytes: [UInt8]) throws -> Result {
        var fields: [Field] = []
        var field: [UInt8] = []
        var i = 0
        var quoted = false
        var wasQuoted = false
        while i < bytes.count {
            let c = bytes[i]
            if quoted {
                if c == 0x22 {
                    if i + 1 < bytes.count && bytes[i + 1] == 0x22 {
                        field.append(0x22)
                        i += 2
                        continue
                    }
                    quoted = false
                } else {
                    field.append(c)
                }
            } else if c == 0x2C {
                fields.append(Field(text: try text(field, fields.count), quoted: wasQuoted))
                field = []
                wasQuoted = false
            } else if c == 0x22 && field.isEmpty && !wasQuoted {
                quoted = true
                wasQuoted = true
            } else if c == 0x22 {
                throw CSVError(reason: "quote inside an unquoted field \(fields.count + 1)")
            } else {
                if wasQuoted { throw CSVError(reason: "text after the closing quote of field \(fields.count + 1)") }
                field.append(c)
            }
            i += 1
        }
        if quoted { return .needsMore }
        fields.append(Field(text: try text(field, fields.count), quoted: wasQuoted))
        return .fields(fields)
    }

    private static func text(_ bytes: [UInt8], _ index: Int) throws -> String {
        guard let s = UTF8Text.string(bytes) else { throw CSVError(reason: "field \(index + 1) is not valid UTF-8") }
        return s
    }

    struct CSVError: Error { let reason: String }
}
