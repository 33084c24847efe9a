import Foundation

/// A track decoded from raw LMDB bytes into Swift values (the baseline's equivalent of `Track`).
///
/// Layout (about 100 bytes): `[format u8 = 1][mbid 16][addedAt ms u64 BE][duration u32 BE]`
/// then title, artist, album and genre, each `[length u8][UTF-8]`.
struct PlainTrack: Sendable {
    let mbid: UUID
    let title: String
    let artist: String
    let album: String
    let genre: String
    let durationSeconds: Int
    let addedAt: Date

    struct Malformed: Error, CustomStringConvertible {
        let reason: String
        var description: String { "malformed raw LMDB track record: \(reason)" }
    }

    static func encode(_ t: TrackData, into out: inout [UInt8]) {
        out.removeAll(keepingCapacity: true)
        out.append(1)
        withUnsafeBytes(of: t.mbid.uuid) { out.append(contentsOf: $0) }
        let ms = UInt64(bitPattern: Int64((t.addedAt.timeIntervalSince1970 * 1000).rounded()))
        for s in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: ms >> UInt64(s))) }
        let d = UInt32(clamping: t.durationSeconds)
        for s in stride(from: 24, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: d >> UInt32(s))) }
        for text in [t.title, t.artist, t.album, t.genre] {
            let utf8 = text.utf8.prefix(255)
            out.append(UInt8(utf8.count))
            out.append(contentsOf: utf8)
        }
    }

    static func decode(_ b: UnsafeRawBufferPointer) throws -> PlainTrack {
        guard b.count >= 1 + 16 + 8 + 4 + 4, b[0] == 1 else { throw Malformed(reason: "\(b.count) bytes, format \(b.first ?? 0)") }
        var u: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &u) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: b[1..<17])) }
        var ms: UInt64 = 0
        for i in 17..<25 { ms = ms << 8 | UInt64(b[i]) }
        var d: UInt32 = 0
        for i in 25..<29 { d = d << 8 | UInt32(b[i]) }
        var offset = 29
        func text() throws -> String {
            guard offset < b.count else { throw Malformed(reason: "truncated at \(offset)") }
            let n = Int(b[offset])
            guard offset + 1 + n <= b.count else { throw Malformed(reason: "string of \(n) bytes at \(offset) overruns") }
            defer { offset += 1 + n }
            return String(decoding: UnsafeRawBufferPointer(rebasing: b[(offset + 1)..<(offset + 1 + n)]), as: UTF8.self)
        }
        let title = try text(), artist = try text(), album = try text(), genre = try text()
        return PlainTrack(mbid: UUID(uuid: u), title: title, artist: artist, album: album, genre: genre,
                          durationSeconds: Int(d), addedAt: Date(timeIntervalSince1970: Double(Int64(bitPattern: ms)) / 1000))
    }
}
