import Foundation
import Glibc
import StrataLMDB

/// Keys (each with a value) handed out in LMDB's key order with bounded memory: an external
/// merge sort. Entries gather in a ``KeyRun``; when it passes ``budgetBytes`` it is sorted and
/// written to a run file in ``directory``; ``drain(batchBytes:_:)`` merges the run files with the
/// entries still in memory and hands each entry out once, in order, a batch at a time. At most
/// ``mergeWidth`` run files are read at once: past that, groups of them are first merged into
/// longer runs, so the open files and read buffers stay bounded whatever the input.
///
/// Every entry goes to the database in one appending pass, so each page is written once, full —
/// unlike runs put one after another into a B-tree, where every run after the first splits the
/// pages the earlier ones filled. The run files are created like the store's other files
/// (``StorePermissions``: `O_EXCL | O_NOFOLLOW`, the store's file mode), removed by
/// ``drain(batchBytes:_:)`` and by ``discard()``; left behind by a killed process, they go with
/// their directory (a generation that was never switched in). Each run file's entry count is
/// kept in memory and checked when it is read back, so a file cut short, at any byte, is an error.
struct ExternalKeySort {
    /// Bytes of gathered entries (with their bookkeeping) kept in memory before a run is written.
    let budgetBytes: Int
    /// Where the run files go.
    let directory: String
    let permissions: StorePermissions
    /// Run files merged at once.
    let mergeWidth: Int
    /// Bytes a run file is written and read in (unless given): half the budget shared among the
    /// files of a merge (each reader holds up to two chunks), between 64 KiB and 1 MiB. So a
    /// merge's read buffers take about the budget again, beside the entries still in memory.
    let ioChunkBytes: Int

    private struct Run {
        let path: String
        let entries: Int
    }
    private var run = KeyRun()
    private var runs: [Run] = []
    private var filesMade = 0
    /// Run files written so far (including those made by merging others), less those merged.
    var spilledRuns: Int { runs.count }
    /// Entries added so far (handed out or not).
    private(set) var added = 0
    /// Run files that could not be removed (their paths), for the caller to report.
    private(set) var unremovedFiles: [String] = []

    /// The start of the run files' names (two sorts sharing a directory need different ones).
    let filePrefix: String

    init(budgetBytes: Int, directory: String, permissions: StorePermissions = .private, mergeWidth: Int = 64,
         ioChunkBytes: Int? = nil, filePrefix: String = "sort-run-") {
        self.filePrefix = filePrefix
        precondition(budgetBytes > 0, "the budget of an external sort must be positive")
        precondition(mergeWidth >= 2, "a merge needs at least two runs")
        self.budgetBytes = budgetBytes
        self.directory = directory
        self.permissions = permissions
        self.mergeWidth = mergeWidth
        self.ioChunkBytes = ioChunkBytes ?? Self.chunkBytes(budgetBytes: budgetBytes, mergeWidth: mergeWidth)
        precondition(self.ioChunkBytes > 0, "the I/O chunk of an external sort must be positive")
    }

    /// Adds a key written by `body` (with an empty value).
    mutating func addKey(_ body: (inout [UInt8]) -> Void) throws {
        added += 1
        run.addKey(body)
        if run.byteCount >= budgetBytes { try spill() }
    }

    /// Adds `key` with `value`.
    mutating func add(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws {
        added += 1
        run.add(key: key, value: value)
        if run.byteCount >= budgetBytes { try spill() }
    }

    /// The I/O chunk of a sort of `budgetBytes` merging `mergeWidth` files at once (``ioChunkBytes``).
    static func chunkBytes(budgetBytes: Int, mergeWidth: Int = 64) -> Int {
        min(1 << 20, max(64 << 10, budgetBytes / (2 * (mergeWidth + 1))))
    }

    /// Bytes of the entries in memory, with their bookkeeping (what is measured against
    /// ``budgetBytes``).
    var memoryBytes: Int { run.byteCount }

    /// Sorts the entries in memory and writes them to a run file now, before the budget is
    /// reached: for a caller that bounds several sorts together. Nothing when none is in memory.
    /// The buffers' memory goes too, as with every run written.
    mutating func writeRun() throws {
        guard !run.entries.isEmpty else { return }
        try spill()
    }

    /// Sorts the entries still in memory, which ``drain(batchBytes:_:)`` would do first: a caller
    /// that fills the sort on one thread and drains it on another sorts it on the first.
    mutating func sortInMemory() { run.sortIfNeeded() }

    /// Sorts the entries in memory and writes them to a new run file.
    private mutating func spill() throws {
        run.sortIfNeeded()
        let writer = try newRunWriter()
        for i in run.entries.indices {
            try run.withEntry(i) { k, v in try writer.append(k, v) }
        }
        runs.append(Run(path: writer.path, entries: try writer.finish()))
        // Its buffers go too: kept, a sort would hold their grown size to its end beside what a
        // caller bounding several sorts together lets the others take.
        run = KeyRun()
    }

    private mutating func newRunWriter() throws -> RunWriter {
        let path = directory + "/\(filePrefix)\(filesMade).tmp"
        filesMade += 1
        return try RunWriter(path: path, permissions: permissions, chunkBytes: ioChunkBytes)
    }

    /// Hands every entry out once, in key order, in batches of about `batchBytes` (each a
    /// ``KeyRun`` in key order, handed to `body` once). Equal keys are handed out as often as
    /// they were added, in the order they were added. Removes the run files; the sort is empty
    /// afterwards, also when `body` or a read throws.
    mutating func drain(batchBytes: Int, _ body: (KeyRun) throws -> Void) throws {
        defer { discard() }
        run.sortIfNeeded()
        // Passes that merge each `mergeWidth` neighbouring runs into one (which takes their place,
        // so equal keys keep their order), until one merge can take them all: every entry is
        // read and written once per pass. `runs` names every file there is at every moment, so
        // an error leaves nothing `discard()` does not remove.
        while runs.count > mergeWidth {
            var merged: [Run] = [], rest = runs[...]
            while !rest.isEmpty {
                let group = Array(rest.prefix(mergeWidth))
                rest = rest.dropFirst(group.count)
                if group.count == 1 {
                    merged.append(group[0])
                } else {
                    let writer = try newRunWriter()
                    try merge(group, withMemory: false) { k, v in try writer.append(k, v) }
                    merged.append(Run(path: writer.path, entries: try writer.finish()))
                    remove(group)
                }
                runs = merged + rest
            }
        }
        var batch = KeyRun()
        try merge(runs, withMemory: true) { k, v in
            batch.add(key: k, value: v, sorted: true)
            if batch.byteCount >= batchBytes {
                try body(batch)
                batch.removeAll()
            }
        }
        if !batch.entries.isEmpty { try body(batch) }
    }

    /// Every entry of `sources` (and, `withMemory`, of the run in memory, which must be sorted),
    /// in key order; for equal keys, the earlier source first (memory last).
    private func merge(_ sources: [Run], withMemory: Bool,
                       _ emit: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws {
        if sources.isEmpty {
            guard withMemory else { return }
            for i in run.entries.indices { try run.withEntry(i, emit) }
            return
        }
        let readers = try sources.map { try RunReader(path: $0.path, entries: $0.entries, chunkBytes: ioChunkBytes) }
        // Each source's next entry, copied into memory of its own (the run in memory last): the
        // merge allocates nothing per entry (two arrays an entry were a fifth of the merge that
        // ends a 1,000,000-record import, which the other core waits out).
        let heads = (0...readers.count).map { _ in MergeHead() }
        var memoryNext = 0
        func load(_ source: Int) throws -> Bool {
            if source < readers.count { return try readers[source].next(into: heads[source]) }
            guard withMemory, memoryNext < run.entries.count else { return false }
            try run.withEntry(memoryNext) { k, v in heads[source].set(k, v) }
            memoryNext += 1
            return true
        }
        var heap: [Int] = []
        for source in heads.indices {
            if try load(source) { heap.append(source) }
        }
        // A binary min-heap of the sources that have a head, by head key, then source index.
        func less(_ a: Int, _ b: Int) -> Bool {
            let c = KeyOrder.compare(heads[a].key, heads[b].key)
            return c < 0 || (c == 0 && a < b)
        }
        func siftDown(_ start: Int) {
            var i = start
            while true {
                let l = 2 * i + 1, r = l + 1
                var m = i
                if l < heap.count, less(heap[l], heap[m]) { m = l }
                if r < heap.count, less(heap[r], heap[m]) { m = r }
                if m == i { return }
                heap.swapAt(i, m)
                i = m
            }
        }
        for i in stride(from: heap.count / 2 - 1, through: 0, by: -1) { siftDown(i) }
        while let top = heap.first {
            try emit(heads[top].key, heads[top].value)
            if try !load(top) {
                heap[0] = heap[heap.count - 1]
                heap.removeLast()
            }
            if !heap.isEmpty { siftDown(0) }
        }
    }

    private mutating func remove(_ gone: [Run]) {
        for r in gone where unlink(r.path) != 0 && errno != ENOENT { unremovedFiles.append(r.path) }
    }

    /// Removes the run files and forgets every entry.
    mutating func discard() {
        remove(runs)
        runs = []
        run = KeyRun()
    }
}

/// Writes one run file of an ``ExternalKeySort``: per entry a big-endian 32-bit key length, the
/// same for the value, then the key and the value. A file not finished (an error, or the sort
/// abandoned meanwhile) is closed and removed when the writer goes.
private final class RunWriter {
    let path: String
    private var fd: Int32
    private var buffer: ByteWriter
    private var entries = 0
    /// Created by this writer and not finished: removed when the writer goes.
    private var unfinished = false
    private let chunkBytes: Int

    init(path: String, permissions: StorePermissions, chunkBytes: Int) throws {
        self.path = path
        self.chunkBytes = chunkBytes
        buffer = ByteWriter(capacity: chunkBytes + 8)
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, permissions.fileMode)
        guard fd >= 0 else { throw StorePermissions.posix(errno, "create \(path)") }
        unfinished = true
        try StorePermissions.setMode(fd, permissions.fileMode, path: path)
    }

    deinit {
        if fd >= 0 { close(fd) }
        if unfinished { unlink(path) }
    }

    func append(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws {
        // Keys are at most LMDB's 511 bytes and values short: a length past 32 bits is a broken
        // invariant, and `UInt32(_:)` traps on it.
        buffer.u32(UInt32(key.count))
        buffer.u32(UInt32(value.count))
        buffer.bytes.append(contentsOf: key)
        buffer.bytes.append(contentsOf: value)
        entries += 1
        if buffer.bytes.count >= chunkBytes { try flush() }
    }

    private func flush() throws {
        try buffer.bytes.withUnsafeBytes { try StorePermissions.writeAll(fd, $0, path: path) }
        buffer.bytes.removeAll(keepingCapacity: true)
    }

    /// Writes what is buffered and closes the file; the number of entries it holds.
    func finish() throws -> Int {
        try flush()
        let rc = close(fd)
        fd = -1
        guard rc == 0 else { throw StorePermissions.posix(errno, "close \(path)") }
        unfinished = false
        return entries
    }
}

/// Reads one run file of an ``ExternalKeySort`` back, entry by entry, a chunk at a time, and
/// checks it ends after exactly the entries written to it. The file is closed at its end or when
/// the reader goes.
private final class RunReader {
    let path: String
    private let expected: Int
    private var fd: Int32
    private var buffer: [UInt8] = []
    /// What one `read(2)` fills.
    private var scratch: [UInt8]
    private var offset = 0
    private var ended = false
    private var entriesRead = 0

    init(path: String, entries: Int, chunkBytes: Int) throws {
        self.path = path
        expected = entries
        scratch = [UInt8](repeating: 0, count: chunkBytes)
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw StorePermissions.posix(errno, "open \(path)") }
    }

    deinit { if fd >= 0 { close(fd) } }

    /// Makes at least `count` unread bytes available; false at the end of the file.
    private func fill(_ count: Int) throws -> Bool {
        while buffer.count - offset < count {
            if ended { return false }
            if offset > 0 {
                buffer.removeSubrange(0..<offset)
                offset = 0
            }
            let n = scratch.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw StorePermissions.posix(errno, "read \(path)")
            }
            buffer.append(contentsOf: scratch[0..<n])
            if n == 0 {
                ended = true
                close(fd)
                fd = -1
            }
        }
        return true
    }

    private func length() -> Int {
        var n = 0
        for i in 0..<4 { n = n << 8 | Int(buffer[offset + i]) }
        offset += 4
        return n
    }

    /// Copies the next entry into `head`; false after the last one.
    func next(into head: MergeHead) throws -> Bool {
        guard try fill(8) else {
            guard buffer.count == offset, entriesRead == expected else { throw damaged() }
            return false
        }
        let keyCount = length(), valueCount = length()
        guard try fill(keyCount + valueCount) else { throw damaged() }
        let start = offset
        buffer.withUnsafeBytes { all in
            head.set(UnsafeRawBufferPointer(rebasing: all[start..<start + keyCount]),
                     UnsafeRawBufferPointer(rebasing: all[start + keyCount..<start + keyCount + valueCount]))
        }
        offset += keyCount + valueCount
        entriesRead += 1
        guard entriesRead <= expected else { throw damaged() }
        return true
    }

    private func damaged() -> StrataError {
        StrataError.corruptRecord(id: ObjectID(high: 0, low: 0),
                                  reason: "sort run \(path) holds \(entriesRead) whole entries of the \(expected) written " +
                                          "to it (a file of the sort was changed)")
    }
}

/// One source's current entry in a merge of an ``ExternalKeySort``: its key and value copied
/// into memory this head owns, grown when an entry does not fit and never shrunk, so that taking
/// the next entry allocates nothing. `key` and `value` are valid until the next ``set(_:_:)``.
private final class MergeHead {
    private var bytes: UnsafeMutableRawPointer
    private var capacity = 1_024
    private var keyCount = 0
    private var valueCount = 0

    init() { bytes = .allocate(byteCount: capacity, alignment: 8) }
    deinit { bytes.deallocate() }

    func set(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) {
        let needed = key.count + value.count
        if needed > capacity {
            bytes.deallocate()
            capacity = max(needed, 2 * capacity)
            bytes = .allocate(byteCount: capacity, alignment: 8)
        }
        if let k = key.baseAddress, !key.isEmpty { bytes.copyMemory(from: k, byteCount: key.count) }
        if let v = value.baseAddress, !value.isEmpty { (bytes + key.count).copyMemory(from: v, byteCount: value.count) }
        keyCount = key.count
        valueCount = value.count
    }

    var key: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: bytes, count: keyCount) }
    var value: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: bytes + keyCount, count: valueCount) }
}
