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
