import Foundation
import Testing
@testable import Strata

/// The import's line reader holds a line to `maxLineBytes` of its own bytes: the `\r` of a `\r\n`
/// ending is not part of the line, wherever the reader's buffer cuts it.
@Suite struct LineReaderTests {
    /// The lines `text` reads as, with a limit of `limit` bytes and a buffer of `buffer`.
    private func lines(_ text: String, limit: Int, buffer: Int) throws -> [String] {
        let dir = temporaryDirectory("line-reader")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("in.txt").path
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        var reader = try LineReader(path: path, maxLineBytes: limit, bufferBytes: buffer)
        defer { reader.close() }
        var out: [String] = []
        while let line = try reader.next() {
            switch line {
            case .text(let bytes): out.append(String(decoding: bytes, as: UTF8.self))
            case .tooLong(let bytes, _): out.append("too long: \(bytes)")
            }
        }
        return out
    }

    /// A line of exactly the limit is read whatever its ending (a `\r\n` line of the limit was
    /// refused as one byte too long, while the same line ending in `\n` was read); one byte more
    /// is too long either way, also as a last line without a line end.
    @Test(arguments: [4, 5, 6, 7, 64])
    func aLineOfTheLimitIsReadWhateverItsEnding(buffer: Int) throws {
        let five = "abcde", six = "abcdef"
        #expect(try lines("\(five)\r\n\(five)\n\(five)\r\n", limit: 5, buffer: buffer) == [five, five, five])
        #expect(try lines("\(five)\r\n\(five)", limit: 5, buffer: buffer) == [five, five])
        #expect(try lines("\(five)\r", limit: 5, buffer: buffer) == [five])
        #expect(try lines("\(six)\r\n\(five)\n", limit: 5, buffer: buffer) == ["too long: 7", five])
        #expect(try lines("\(six)\n\(five)\n", limit: 5, buffer: buffer) == ["too long: 6", five])
        #expect(try lines("\(five)\n\(six)", limit: 5, buffer: buffer) == [five, "too long: 6"])
    }
}
