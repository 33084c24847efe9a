import Foundation
import StrataLMDB

/// Keys (each with a value) handed out in LMDB's key order with bounded memory: an external
/// merge sort. Entries gather in a ``KeyRun``; when it passes ``budgetBytes`` it is sorted and
/// written to a run file in ``directory``; ``drain(batchBytes:_:)`` merges the run files with the
/// entries still in memory and hands each entry out once, in order, a batch at a time.
///
/// Every entry goes to the database in one appending pass, so each page is written once, full —
/// unlike runs put one after another into a B-tree, where every run after the first splits the
/// pages the earlier ones filled. The run files are removed by ``drain(batchBytes:_:)`` and by
/// ``discard()``; left behind by a killed process, they go with the directory (a generation that
/// was never switched in).
struct ExternalKeySort {
    /// Bytes of gathered entries (with their bookkeeping) kept in memory before a run is written.
    let budgetBytes: Int
    /// Where the run files go.
    let directory: URL
    private var run = KeyRun()
    private var runFiles: [URL] = []
    /// Run files written so far.
    var spilledRuns: Int { runFiles.count }

    /// Bytes a run file is written and read in.
    static let ioChunkBytes = 1 << 20

    init(budgetBytes: Int, directory: URL) {
        precondition(budgetBytes > 0, "the budget of an external sort must be positive")
        self.budgetBytes = budgetBytes
        self.directory = directory
    }

    /// Adds a key written by `body` (with an empty value).
    mutating func addKey(_ body: (inout [UInt8]) -> Void) throws {
        run.addKey(body)
        if run.byteCount >= budgetBytes { try spill() }
    }

    /// Sorts the entries in memory and writes them to a new run file: per entry a big-endian
    /// 32-bit key length, the same for the value, then the key and the value.
    private mutating func spill() throws {
        run.sortIfNeeded()
        let url = directory.appendingPathComponent("sort-run-\(runFiles.count).tmp")
        guard FileManager.default.createFile(atPath: url.path, contents: nil, attributes: [.posixPermissions: 0o600])
        else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: url.path])
        }
        runFiles.append(url)
        let handle = try FileHandle(forWritingTo: url)
        defer { try? handle.close() }
        var buffer: [UInt8] = []
        buffer.reserveCapacity(Self.ioChunkBytes + 4096)
        for i in run.entries.indices {
            try run.withEntry(i) { k, v in
                Self.appendLength(k.count, to: &buffer)
                Self.appendLength(v.count, to: &buffer)
                buffer.append(contentsOf: k)
                buffer.append(contentsOf: v)
            }
            if buffer.count >= Self.ioChunkBytes {
                try handle.write(contentsOf: buffer)
                buffer.removeAll(keepingCapacity: true)
            }
        }
        if !buffer.isEmpty { try handle.write(contentsOf: buffer) }
        run.removeAll()
    }

    private static func appendLength(_ n: Int, to buffer: inout [UInt8]) {
        let v = UInt32(n)
        buffer.append(UInt8(truncatingIfNeeded: v >> 24))
        buffer.append(UInt8(truncatingIfNeeded: v >> 16))
        buffer.append(UInt8(truncatingIfNeeded: v >> 8))
        buffer.append(UInt8(truncatingIfNeeded: v))
    }

    /// Hands every entry out once, in key order, in batches of about `batchBytes` (each a
    /// ``KeyRun`` in key order, handed to `body` once). Equal keys are handed out as often as
    /// they were added, in the order they were added. Removes the run files; the sort is empty
    /// afterwards, also when `body` or a read throws.
    mutating func drain(batchBytes: Int, _ body: (KeyRun) throws -> Void) throws {
        defer { discard() }
        run.sortIfNeeded()
        var batch = KeyRun()
        func flush() throws {
            guard !batch.entries.isEmpty else { return }
            try body(batch)
            batch.removeAll()
        }
        if runFiles.isEmpty {
            for i in run.entries.indices {
                try run.withEntry(i) { k, v in batch.add(key: k, value: v, sorted: true) }
                if batch.byteCount >= batchBytes { try flush() }
            }
            return try flush()
        }
        var sources = try runFiles.map { try RunReader(url: $0) }
        var memoryNext = 0
        // The head of each source: run files first, then the entries in memory.
        var heads: [(key: [UInt8], value: [UInt8])?] = try sources.indices.map { try sources[$0].next() }
        func memoryHead() throws -> (key: [UInt8], value: [UInt8])? {
            guard memoryNext < run.entries.count else { return nil }
            var head: (key: [UInt8], value: [UInt8])?
            try run.withEntry(memoryNext) { k, v in head = (Array(k), Array(v)) }
            memoryNext += 1
            return head
        }
        heads.append(try memoryHead())
        // A binary min-heap of the sources that have a head, by head key (then source, so the
        // order of equal keys is the order they were added in).
        func less(_ a: Int, _ b: Int) -> Bool {
            let c = KeyOrder.compare(heads[a]!.key, heads[b]!.key)
            return c < 0 || (c == 0 && a < b)
        }
        var heap = heads.indices.filter { heads[$0] != nil }
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
            let entry = heads[top]!
            batch.add(key: entry.key, value: entry.value, sorted: true)
            if batch.byteCount >= batchBytes { try flush() }
            heads[top] = top < sources.count ? try sources[top].next() : try memoryHead()
            if heads[top] == nil {
                heap[0] = heap[heap.count - 1]
                heap.removeLast()
            }
            if !heap.isEmpty { siftDown(0) }
        }
        try flush()
    }

    /// Removes the run files and forgets every entry.
    mutating func discard() {
        for url in runFiles { try? FileManager.default.removeItem(at: url) }
        runFiles = []
        run = KeyRun()
    }
}

/// Reads one run file of an ``ExternalKeySort`` back, entry by entry, a chunk at a time.
private struct RunReader {
    let url: URL
    private let handle: FileHandle
    private var buffer: [UInt8] = []
    private var offset = 0
    private var ended = false

    init(url: URL) throws {
        self.url = url
        handle = try FileHandle(forReadingFrom: url)
    }

    /// Makes at least `count` unread bytes available; false at the end of the file.
    private mutating func fill(_ count: Int) throws -> Bool {
        while buffer.count - offset < count {
            if ended { return false }
            if offset > 0 {
                buffer.removeSubrange(0..<offset)
                offset = 0
            }
            let chunk = try handle.read(upToCount: ExternalKeySort.ioChunkBytes) ?? Data()
            if chunk.isEmpty {
                ended = true
                try handle.close()
            } else {
                buffer.append(contentsOf: chunk)
            }
        }
        return true
    }

    private mutating func length() -> Int {
        var n = 0
        for i in 0..<4 { n = n << 8 | Int(buffer[offset + i]) }
        offset += 4
        return n
    }

    /// The next entry, or nil at the end of the file.
    mutating func next() throws -> (key: [UInt8], value: [UInt8])? {
        guard try fill(8) else {
            guard buffer.count == offset else { throw truncated() }
            return nil
        }
        let keyCount = length(), valueCount = length()
        guard try fill(keyCount + valueCount) else { throw truncated() }
        let key = Array(buffer[offset..<offset + keyCount])
        let value = Array(buffer[offset + keyCount..<offset + keyCount + valueCount])
        offset += keyCount + valueCount
        return (key, value)
    }

    private func truncated() -> StrataError {
        StrataError.corruptRecord(id: ObjectID(high: 0, low: 0),
                                  reason: "sort run \(url.path) ends inside an entry (a file of the sort was changed)")
    }
}
