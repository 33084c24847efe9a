import Glibc

/// Reads a file line by line with bounded memory: a fixed read buffer plus the current line.
/// Lines end at `\n` (a trailing `\r` is dropped). A line longer than `maxLineBytes` is reported
/// as such and skipped without being held in memory (its `"` characters counted, so that a CSV
/// reader knows whether a quoted field it opened goes on over the next lines).
struct LineReader {
    enum Line {
        case text([UInt8])
        case tooLong(bytes: Int, quotes: Int)
    }

    let path: String
    let maxLineBytes: Int
    private var file: InputFile.Reader
    private var buffer: [UInt8]
    private var start = 0
    private var end = 0
    private var eof = false
    /// 1-based number of the line last returned.
    private(set) var lineNumber = 0
    /// Bytes consumed so far (for progress).
    private(set) var bytesRead = 0
    /// Whether the line last returned ended in `\r\n` (its `\r` dropped): a CSV field quoted
    /// across lines gets its line break back as it was.
    private(set) var lastLineEndedWithCR = false

    init(path: String, maxLineBytes: Int, bufferBytes: Int = 1 << 20) throws {
        self.path = path
        self.maxLineBytes = maxLineBytes
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

    /// The first line without a UTF-8 byte order mark (`EF BB BF`), which some editors write
    /// at the start of a file: the data starts after it.
    static func withoutByteOrderMark(_ line: [UInt8], line number: Int) -> [UInt8] {
        guard number == 1, line.count >= 3, line[0] == 0xEF, line[1] == 0xBB, line[2] == 0xBF else { return line }
        return Array(line.dropFirst(3))
    }

    private mutating func fill() throws {
        if start > 0 {
            buffer.withUnsafeMutableBytes { b in
                if end > start { memmove(b.baseAddress!, b.baseAddress! + start, end - start) }
            }
            end -= start
            start = 0
        }
        guard !eof, end < buffer.count else { return }
        let n = try file.read(into: &buffer, at: end, line: lineNumber + 1)
        if n == 0 { eof = true }
        end += n
    }

    /// The next line, or nil at the end of the file.
    mutating func next() throws -> Line? {
        var pending: [UInt8] = []
        var overflow = 0, overflowQuotes = 0
        while true {
            if let nl = buffer[start..<end].firstIndex(of: 0x0A) {
                let chunk = buffer[start..<nl]
                bytesRead += nl - start + 1
                start = nl + 1
                lineNumber += 1
                // The line's length without the `\r` of a `\r\n` ending, which is not part of it.
                let endsWithCR = chunk.last == 0x0D || (chunk.isEmpty && pending.last == 0x0D)
                if overflow > 0 || pending.count + chunk.count - (endsWithCR ? 1 : 0) > maxLineBytes {
                    return .tooLong(bytes: overflow + pending.count + chunk.count,
                                    quotes: overflowQuotes + Self.quotes(pending) + Self.quotes(chunk))
                }
                pending += chunk
                lastLineEndedWithCR = pending.last == 0x0D
                if lastLineEndedWithCR { pending.removeLast() }
                return .text(Self.withoutByteOrderMark(pending, line: lineNumber))
            }
            // No newline in the buffer: keep what there is (or count it, past the limit) and read
            // more. One byte past the limit is kept: it may be the `\r` of a `\r\n` ending.
            let chunk = end - start
            if pending.count + chunk > maxLineBytes + 1 || overflow > 0 {
                overflow += pending.count + chunk
                overflowQuotes += Self.quotes(pending) + Self.quotes(buffer[start..<end])
                pending = []
            } else {
                pending += buffer[start..<end]
            }
            bytesRead += chunk
            start = end
            if eof {
                guard overflow > 0 || !pending.isEmpty else { return nil }
                lineNumber += 1
                if overflow > 0 { return .tooLong(bytes: overflow, quotes: overflowQuotes) }
                lastLineEndedWithCR = pending.last == 0x0D
                if lastLineEndedWithCR { pending.removeLast() }
                defer { pending = [] }
                if pending.count > maxLineBytes { return .tooLong(bytes: pending.count, quotes: Self.quotes(pending)) }
                return .text(Self.withoutByteOrderMark(pending, line: lineNumber))
            }
            try fill()
        }
    }

    /// The `"` characters of `bytes`.
    static func quotes(_ bytes: some Collection<UInt8>) -> Int { bytes.count(where: { $0 == 0x22 }) }
}
