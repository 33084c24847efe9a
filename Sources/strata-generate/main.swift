// strata-generate: writes a deterministic synthetic data set as NDJSON (the import format).
//
//   strata-generate RECORDS [--seed N] [--output FILE] [--shape library|catalog]
//
// library (Schemas/library): about 1% artists, 10% albums, 0.1% playlists (50 tracks each),
// 24 genres, the rest tracks.
// catalog (Schemas/catalog): a package catalog shaped as a dependency graph: 40 sections, about
// 3.5% maintainers, the rest packages, each depending on 0 to 8 others (4 on average, more often
// on low-numbered, popular ones), so about 4 edges per package between records of one entity,
// about half of them pointing forward in the file.
// The same RECORDS, seed and shape always give the same bytes.
import Foundation

struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Writes `text` to standard error, ignoring a failure (Foundation's `FileHandle.write` ends the
/// process on one, so `2>/dev/full` turned every exit code into a crash).
func writeError(_ text: String) {
    let bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
        let n = bytes.withUnsafeBytes { write(2, $0.baseAddress! + offset, $0.count - offset) }
        if n > 0 { offset += n } else if !(n < 0 && errno == EINTR) { return }
    }
}

func usage(_ message: String) -> Never {
    writeError("strata-generate: \(message)\n"
              + "usage: strata-generate RECORDS [--seed N] [--output FILE] [--shape library|catalog]\n")
    exit(64)
}

// Past a file-size limit a write fails with EFBIG (reported, exit 74) instead of the signal
// killing the tool with its output half written.
signal(SIGXFSZ, SIG_IGN)

/// The file written aside, as a C string for the signal handler (declared before the code that
/// sets it: a global of this file is initialized when the run reaches it). Set once, by the main thread,
/// before the handlers that read it are installed, and never changed: the handlers only read it
/// (a signal handler may not allocate, so the path is prepared here).
nonisolated(unsafe) var signalStagingPath: UnsafeMutablePointer<CChar>?

/// On SIGINT, SIGTERM or SIGHUP, removes `path` (the file written aside) and then ends the tool
/// by the signal, as it would have ended: Ctrl-C left `FILE.partial-PID` behind for good.
func removeOnSignal(_ path: String) {
    signalStagingPath = strdup(path)
    for number in [SIGINT, SIGTERM, SIGHUP] {
        signal(number) { received in
            // Async-signal-safe calls only: unlink, signal, raise.
            if let path = signalStagingPath { unlink(path) }
            signal(received, SIG_DFL)
            raise(received)
        }
    }
}


var args = Array(CommandLine.arguments.dropFirst())
var seed: UInt64 = 1
var output: String?
var total: Int?
var catalog = false
while !args.isEmpty {
    let a = args.removeFirst()
    switch a {
    case "--seed":
        guard let v = args.first.flatMap({ UInt64($0) }) else { usage("--seed needs a number") }
        seed = v
        args.removeFirst()
    case "--shape":
        switch args.first {
        case "library": catalog = false
        case "catalog": catalog = true
        default: usage("--shape needs library or catalog")
        }
        args.removeFirst()
    case "--output":
        guard let v = args.first else { usage("--output needs a file") }
        output = v
        args.removeFirst()
    default:
        guard let n = Int(a), n >= 100,
              n <= 100_000_000 else { usage("RECORDS must be a number from 100 to 100000000") }
        total = n
    }
}
guard let total else { usage("missing RECORDS") }

var rng = SplitMix64(state: seed)
let syllables = ["ka", "lo", "mi", "ra", "sen", "tó", "vi", "ø", "dr", "an", "é", "el", "yu", "夜", "光", "но",
                 "чь", "ζω", "ή", "ber", "lin", "ma", "os", "ur"]
func word(_ rng: inout SplitMix64) -> String {
    let n = Int.random(in: 2...4, using: &rng)
    let w = (0..<n).map { _ in syllables.randomElement(using: &rng)! }.joined()
    return w.prefix(1).uppercased() + w.dropFirst()
}
func uuid(_ rng: inout SplitMix64) -> String {
    var bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) }
    bytes[6] = bytes[6] & 0x0F | 0x40
    bytes[8] = bytes[8] & 0x3F | 0x80
    let hex = bytes.map { String(format: "%02x", $0) }.joined()
    let c = Array(hex)
    return "\(String(c[0..<8]))-\(String(c[8..<12]))-\(String(c[12..<16]))-\(String(c[16..<20]))-\(String(c[20..<32]))"
}
func quote(_ s: String) -> String {
    "\"" + s.replacingOccurrences(of: "\\", with: "\\\\", options: .literal)
        .replacingOccurrences(of: "\"", with: "\\\"", options: .literal) + "\""
}
let isoFormat = Date.ISO8601FormatStyle()
func date(_ seconds: Int) -> String {
    isoFormat.format(Date(timeIntervalSince1970: TimeInterval(seconds)))
}

let genreCount = 24
let artistCount = max(1, total / 100)
let albumCount = max(1, total / 10)
let playlistCount = max(1, total / 1000)
let trackCount = max(1, total - genreCount - artistCount - albumCount - playlistCount)

let handle: FileHandle
/// A regular file (or a new one) is written aside and renamed over the path at the end, so a
/// failed run leaves the file that was there as it was: the file written and its destination.
nonisolated(unsafe) var staging: (written: String, target: String)?  // single-threaded tool
/// The descriptor an output path names by its text (`/dev/stdout`, `/dev/fd/N`,
/// `/proc/self/fd/N`): written through a duplicate of it, which shares its offset, so that a
/// shell's `>> file` keeps what the file held (opening the path again would write from the
/// file's start; renaming a file over it would replace the shell's file).
func descriptorNamed(_ path: String) -> Int32? {
    if path == "/dev/stdout" { return 1 }
    if path == "/dev/stderr" { return 2 }
    for prefix in ["/dev/fd/", "/proc/self/fd/"] where path.hasPrefix(prefix) {
        return Int32(path.dropFirst(prefix.count))
    }
    return nil
}

if let output, let n = descriptorNamed(output) {
    let fd = fcntl(n, F_DUPFD_CLOEXEC, 0)
    guard fd >= 0 else {
        writeError("strata-generate: cannot write to \(output): \(String(cString: strerror(errno)))\n")
        exit(73)
    }
    handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
} else if let output {
    // Where the write goes: through symbolic links, also a dangling one.
    var target = output
    for _ in 0..<40 {
        var st = stat()
        guard lstat(target, &st) == 0, (st.st_mode & S_IFMT) == S_IFLNK,
              let next = try? FileManager.default.destinationOfSymbolicLink(atPath: target) else { break }
        target = next.hasPrefix("/") ? next
            : ((target as NSString).deletingLastPathComponent as NSString).appendingPathComponent(next)
    }
    // A device or pipe, also through a link (`/dev/stdout` of a pipe: its link reads
    // `pipe:[N]`, no path), is written directly.
    var st = stat()
    let special = stat(output, &st) == 0 && (st.st_mode & S_IFMT) != S_IFREG
    // A device or pipe (`/dev/stdout`) is written directly.
    if !special {
        var lt = stat()
        // A loop of links, or one whose target is no path: written as given.
        if lstat(target, &lt) == 0 && (lt.st_mode & S_IFMT) == S_IFLNK { target = output }
    }
    let written = special ? output : target + ".partial-\(getpid())"
    // Before the file exists: a signal between its creation and the handlers would leave it.
    if !special { removeOnSignal(written) }
    let fd = open(written, O_WRONLY | O_CREAT | (special ? O_TRUNC : O_EXCL) | O_CLOEXEC, 0o644)
    guard fd >= 0 else {
        writeError("strata-generate: cannot create \(written): \(String(cString: strerror(errno)))\n")
        exit(73)
    }
    if !special { staging = (written, target) }
    handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
} else {
    handle = FileHandle.standardOutput
}

/// Ends the tool with `code` after a failure, removing the file written aside.
func fail(_ message: String, _ code: Int32) -> Never {
    if let staging { unlink(staging.written) }
    writeError("strata-generate: \(message)\n")
    exit(code)
}
nonisolated(unsafe) var buffer = ""  // single-threaded tool: only the main thread touches it
/// Writes `text`, or ends the tool with exit 74 naming the error (a full disk, a closed pipe):
/// `FileHandle.write(_:)` would trap instead.
@MainActor func writeOut(_ text: String) {
    do { try handle.write(contentsOf: Data(text.utf8)) } catch {
        fail("cannot write \(output ?? "to stdout"): \(error.localizedDescription)", 74)
    }
}
@MainActor func emit(_ line: String) {
    buffer += line
    buffer += "\n"
    if buffer.utf8.count > 1 << 20 {
        writeOut(buffer)
        buffer = ""
    }
}

/// The catalog shape: sections, maintainers and packages that depend on each other.
@MainActor func emitCatalog() {
    let sections = (0..<40).map { "section-\($0)-" + word(&rng).lowercased() }
    for s in sections { emit(#"{"entity":"Section","name":\#(quote(s))}"#) }
    let maintainerCount = max(1, total * 35 / 1000)
    let packageCount = max(2, total - sections.count - maintainerCount)
    for m in 0..<maintainerCount {
        emit(#"{"entity":"Maintainer","email":"m\#(m)@example.org","name":\#(quote(word(&rng) + " " + word(&rng)))}"#)
    }
    for p in 0..<packageCount {
        // Popular packages have low numbers: a target is the smaller of two uniform draws.
        let n = Int.random(in: 0...8, using: &rng)
        var depends = Set<Int>()
        for _ in 0..<n {
            let t = min(Int.random(in: 0..<packageCount, using: &rng), Int.random(in: 0..<packageCount, using: &rng))
            if t != p { depends.insert(t) }
        }
        let list = depends.sorted().map { #"{"name":"pkg-\#($0)"}"# }.joined(separator: ",")
        let version = "\(Int.random(in: 0...9, using: &rng)).\(Int.random(in: 0...30, using: &rng))"
        emit(#"""
            {"entity":"Package","name":"pkg-\#(p)","version":"\#(version)",\#
            "installedSize":\#(Int.random(in: 1...500_000, using: &rng)),\#
            "section":{"name":\#(quote(sections.randomElement(using: &rng)!))},\#
            "maintainer":{"email":"m\#(Int.random(in: 0..<maintainerCount, using: &rng))@example.org"},\#
            "depends":[\#(list)]}
            """#)
    }
}

if catalog {
    emitCatalog()
    finishOutput()
    exit(0)
}

let genres = (0..<genreCount).map { "Genre \($0) " + word(&rng) }
for g in genres { emit(#"{"entity":"Genre","name":\#(quote(g))}"#) }
var artistIDs: [String] = []
for _ in 0..<artistCount {
    let id = uuid(&rng)
    artistIDs.append(id)
    let country = ["IS", "NO", "DK", "JP", "RU", "GR", "BR", "US", "DE", "PL"].randomElement(using: &rng)!
    emit(#"""
        {"entity":"Artist","mbid":"\#(id)","name":\#(quote(word(&rng) + " " + word(&rng))),\#
        "country":"\#(country)","foundedYear":"\#(Int.random(in: 1950...2024, using: &rng))"}
        """#)
}
var albumIDs: [String] = []
for _ in 0..<albumCount {
    let id = uuid(&rng)
    albumIDs.append(id)
    let year = Int.random(in: 1960...2025, using: &rng)
    emit(#"""
        {"entity":"Album","mbid":"\#(id)","title":\#(quote(word(&rng) + " " + word(&rng))),"year":\#(year),\#
        "artist":{"mbid":"\#(artistIDs.randomElement(using: &rng)!)"}}
        """#)
}
var trackIDs: [String] = []
trackIDs.reserveCapacity(min(trackCount, playlistCount * 50 * 4))
for i in 0..<trackCount {
    let id = uuid(&rng)
    if trackIDs.count < playlistCount * 200 { trackIDs.append(id) }
    let rating = Int.random(in: 0...3, using: &rng) == 0
        ? "" : #","rating":\#(Double(Int.random(in: 0...10, using: &rng)) / 2)"#
    emit(#"""
        {"entity":"Track","mbid":"\#(id)","title":\#(quote(word(&rng) + " " + word(&rng))),\#
        "durationSeconds":\#(Int.random(in: 60...900, using: &rng)),"trackNumber":\#(i % 14 + 1),\#
        "addedAt":"\#(date(1_500_000_000 + Int.random(in: 0...250_000_000, using: &rng)))"\#(rating),\#
        "album":{"mbid":"\#(albumIDs.randomElement(using: &rng)!)"},\#
        "genre":{"name":\#(quote(genres.randomElement(using: &rng)!))}}
        """#)
}
for p in 0..<playlistCount {
    let members = (0..<50).map { _ in trackIDs.randomElement(using: &rng)! }
    let list = Set(members).sorted().map { #"{"mbid":"\#($0)"}"# }.joined(separator: ",")
    emit(#"""
        {"entity":"Playlist","name":"Playlist \#(p) \#(word(&rng))",\#
        "createdAt":"\#(date(1_600_000_000 + p * 3600))","tracks":[\#(list)]}
        """#)
}
finishOutput()

/// Writes what is buffered and, for a file, syncs and closes it (exit 74 on failure).
@MainActor func finishOutput() {
    writeOut(buffer)
    buffer = ""
    guard output != nil else { return }
    do {
        var st = stat()
        if fstat(handle.fileDescriptor, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG { try handle.synchronize() }
        try handle.close()
    } catch {
        fail("cannot write \(output ?? ""): \(error.localizedDescription)", 74)
    }
    if let staging, rename(staging.written, staging.target) != 0 {
        fail("cannot rename \(staging.written) to \(staging.target): \(String(cString: strerror(errno)))", 73)
    }
}
