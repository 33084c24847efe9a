import Glibc

/// Reads a JSON file whose top level is one array of objects (`[{…}, {…}]`, on one line or
/// pretty-printed), one object at a time, with bounded memory: a read buffer plus the current
/// object. Each object comes with the line it starts on; its line breaks (which JSON allows only
/// between tokens) become spaces, so it is one NDJSON line, as the rejects file keeps it.
///
/// The array itself is only scanned (brackets, strings, commas), never parsed whole: the objects
/// are parsed one by one by the NDJSON code. Once the array's structure is broken (something
/// other than an object in it, a missing comma, text after it, the file ending inside it), the
/// rest of the file cannot be split reliably: that is reported once and reading stops.
struct JSONArrayReader {
    enum Element {
        case object([UInt8], line: Int)
        /// An object longer than the limit, skipped without being held in memory.
        case tooLong(bytes: Int, line: Int)
        /// The array's structure is broken here; nothing more is read.
        case malformed(reason: String, line: Int)

        /// The line the element starts on (or where the array broke).
        var line: Int {
            switch self {
            case .object(_, let line), .tooLong(_, let line), .malformed(_, let line): return line
            }
        }
    }

    let path: String
    let maxObjectBytes: Int
    private var file: InputFile.Reader
    private var buffer: [UInt8]
    private var start = 0
    private var end = 0
    private var eof = false
    /// The line being read (1-based).
    private var line = 1
    /// Bytes consumed so far (for progress).
    private(set) var bytesRead = 0
    /// Where the scan is: before `[`, after `[` (an object or `]` next), after an object (`,` or
    /// `]` next), after a comma (an object next: JSON allows no trailing comma), after `]`.
    private enum Phase { case opening, beforeElement, afterElement, afterComma, closed, stopped }
    private var phase = Phase.opening

    init(path: String, maxObjectBytes: Int, bufferBytes: Int = 1 << 20) throws {
        self.path = path
        self.maxObjectBytes = maxObjectBytes
        file = try InputFile.Reader(path: path)
        buffer = [UInt8](repeating: 0, count: bufferBytes)
    }

    func close() { file.close() }

    /// The identity of the file being read (``InputFile/Identity``).
    func identity() throws -> InputFile.Identity { try file.identity() }

    /// The version of the file this reader reads, or nil (``InputFile/Reader/expected``).
    var expected: InputFile.Identity? {
        get { file.expected }
        set { file.expected = newValue }
    }

    /// Whether the file's first byte that is not white space (after a UTF-8 byte order mark) is `[`.
    static func holdsArray(_ path: String) -> Bool {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { _ = Glibc.close(fd) }
        var head = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = head.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { return false }
            var bytes = head[..<n]
            if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes = bytes.dropFirst(3) }
            if let first = bytes.first(where: { !Self.isSpace($0) }) { return first == UInt8(ascii: "[") }
            // Only white space so far: the next read decides (the mark can only come first).
            head = [UInt8](repeating: 0, count: 4096)
        }
    }

    private static func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x0A || b == 0x0D || b == 0x09 }

    /// The next byte, or nil at the end of the file.
    private mutating func byte() throws -> UInt8? {
        if start == end {
            guard !eof else { return nil }
            let n = try file.read(into: &buffer, at: 0, line: line)
            if n == 0 {
                eof = true
                return nil
            }
            start = 0
            end = n
        }
        let b = buffer[start]
        start += 1
        bytesRead += 1
        if b == 0x0A { line += 1 }
        return b
    }

    /// The next byte that is not white space (nil at the end of the file).
    private mutating func token() throws -> UInt8? {
        while let b = try byte() {
            if !Self.isSpace(b) { return b }
        }
        return nil
    }

    private mutating func stop(_ reason: String, at line: Int) -> Element {
        phase = .stopped
        return .malformed(reason: reason, line: line)
    }

    /// The next object of the array, a report, or nil when the array (and the file) has ended.
    mutating func next() throws -> Element? {
        while true {
            switch phase {
            case .stopped:
                return nil
            case .closed:
                guard let b = try token() else { return nil }
                return stop("unexpected '\(Self.shown(b))' after the array (a .json file holds one array of " +
                            "objects, or one object per line)", at: line)
            case .opening:
                var b = try token()
                if b == 0xEF {   // a byte order mark: EF BB BF
                    guard try byte() == 0xBB, try byte() == 0xBF else {
                        return stop("expected '[' to open the array (the file starts with a byte 0xEF that " +
                                    "begins no UTF-8 byte order mark)", at: line)
                    }
                    b = try token()
                }
                guard b == UInt8(ascii: "[") else { return stop("expected '[' to open the array", at: line) }
                phase = .beforeElement
            case .beforeElement, .afterElement, .afterComma:
                guard let b = try token() else {
                    return stop("the file ends inside the array (a ']' is missing)", at: line)
                }
                if b == UInt8(ascii: "]") {
                    if phase == .afterComma {
                        return stop("a ',' before the array's ']' (JSON allows no comma after the last element)",
                                    at: line)
                    }
                    phase = .closed
                    continue
                }
                if phase == .afterElement {
                    guard b == UInt8(ascii: ",") else {
                        return stop("expected ',' or ']' after an object of the array, found '\(Self.shown(b))'",
                                    at: line)
                    }
                    phase = .afterComma
                    continue
                }
                guard b == UInt8(ascii: "{") else {
                    return stop("expected an object in the array, found '\(Self.shown(b))' (each element " +
                                "is one record: a JSON object with an \"entity\" member)", at: line)
                }
                phase = .afterElement
                return try object(startingAt: line)
            }
        }
    }

    /// Reads the rest of an object whose `{` was just read.
    private mutating func object(startingAt first: Int) throws -> Element {
        var bytes: [UInt8] = [UInt8(ascii: "{")]
        var size = 1
        var depth = 1, inString = false, escaped = false
        while depth > 0 {
            guard let b = try byte() else {
                return stop("the file ends inside an object that starts on line \(first)", at: line)
            }
            size += 1
            if inString {
                if escaped {
                    escaped = false
                } else if b == UInt8(ascii: "\\") {
                    escaped = true
                } else if b == UInt8(ascii: "\"") {
                    inString = false
                }
            } else {
                switch b {
                case UInt8(ascii: "\""): inString = true
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"): depth -= 1
                default: break
                }
            }
            if size <= maxObjectBytes {
                // Line breaks stay: outside strings the parser takes them as the whitespace they
                // are, and counts them, so that a problem is reported on its own line of the file;
                // one inside a string is refused there (JSON escapes it as \n), as it is in a line
                // of NDJSON. The object is put on one line for a rejects file (``RecordIterator``).
                bytes.append(b)
            } else if !bytes.isEmpty {
                bytes = []
            }
        }
        return size <= maxObjectBytes ? .object(bytes, line: first) : .tooLong(bytes: size, line: first)
    }

    private static func shown(_ b: UInt8) -> String {
        let hex = Array("0123456789ABCDEF")
        guard b < 0x20 || b >= 0x7F else { return String(UnicodeScalar(b)) }
        return "\\x" + String(hex[Int(b >> 4)]) + String(hex[Int(b & 15)])
    }
}
