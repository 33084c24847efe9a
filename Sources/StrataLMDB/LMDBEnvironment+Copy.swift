import CLMDB
import Foundation

extension LMDBEnvironment {
    /// Runs a write transaction, growing the map and redoing it on `MDB_MAP_FULL` (for bulk
    /// builds of scratch environments and new generations; `body` must be repeatable).
    package func writeGrowing(_ body: (LMDBTransaction) throws -> Void) throws {
        while true {
            do {
                try write(body)
                return
            } catch let e as LMDBError where e.isMapFull {
                guard try growMap() else { throw e }
            }
        }
    }

    /// Copies a database from `source` in key order, `batch` entries per write transaction,
    /// appending (the destination must be empty from the first key on). `transform` may rewrite
    /// or drop each entry.
    package func copy(_ db: LMDBDatabase, from source: LMDBTransaction, sourceEnv: LMDBEnvironment,
                      into target: LMDBDatabase, prefix: [UInt8]? = nil, start: [UInt8]? = nil,
                      until stop: [UInt8]? = nil, batch: Int = 8192,
                      transform: (([UInt8], [UInt8]) -> ([UInt8], [UInt8])?)? = nil) throws -> Int {
        try copy(db, from: .held(source), sourceEnv: sourceEnv, into: target, prefix: prefix, start: start, until: stop,
                 batch: batch, transform: transform)
    }

    /// ``copy(_:from:sourceEnv:into:prefix:start:until:batch:transform:)`` from a
    /// ``ReadSource``: from a pinned snapshot, each chunk of the source is read in a read of its
    /// own, and the writes happen outside the source's reads.
    package func copy(_ db: LMDBDatabase, from source: ReadSource, sourceEnv: LMDBEnvironment,
                      into target: LMDBDatabase, prefix: [UInt8]? = nil, start: [UInt8]? = nil,
                      until stop: [UInt8]? = nil, batch: Int = 8192,
                      transform: (([UInt8], [UInt8]) -> ([UInt8], [UInt8])?)? = nil) throws -> Int {
        precondition(db.name != "main" && target.name != "main",
                     "LMDB's main database holds the named databases' records")
        if transform == nil && prefix == nil {
            return try copyDirect(db, from: source, sourceEnv: sourceEnv, into: target, start: start,
                                  until: stop).entries
        }
        var scan = ChunkedScan(source: source, db: db, prefix: prefix, start: start)
        var pending: [([UInt8], [UInt8])] = []
        var copied = 0
        func flush() throws {
            guard !pending.isEmpty else { return }
            try writeGrowing { txn in
                for (k, v) in pending {
                    // From another store: a size LMDB cannot hold is a damaged source, reported
                    // as LMDB would (as ``LMDBTransaction/Appender`` does), not the put's trap.
                    guard k.count > 0 && k.count <= LMDBLimits.maxKeyBytes else {
                        throw LMDBError(code: MDB_BAD_VALSIZE,
                                        operation: "copy into \(target.name): a \(k.count)-byte key")
                    }
                    try txn.put(target, key: k, value: v, mode: .append)
                }
            }
            copied += pending.count
            pending.removeAll(keepingCapacity: true)
        }
        while let entry = try scan.next() {
            if let stop, KeyOrder.compare(entry.key, stop) > 0 { break }
            if let transform {
                if let t = transform(entry.key, entry.value) { pending.append(t) }
            } else {
                pending.append((entry.key, entry.value))
            }
            if pending.count >= batch { try flush() }
        }
        try flush()
        return copied
    }

    /// ``copy(_:from:sourceEnv:into:prefix:start:until:batch:transform:)`` without a transform:
    /// the entries and the key and value bytes copied, and how many buffers were appended again
    /// by transactions redone after map growth.
    ///
    /// The calling thread reads the source with one cursor and packs entries into buffers of an
    /// ``EntryPipe``; once more than one buffer is needed, a worker thread of its own appends them
    /// to the destination through an appending cursor while the reading goes on, up to
    /// `batchBytes` of buffers per write transaction (a copy that fits in one buffer is appended
    /// on the calling thread). Reading the source was about a quarter of a single-threaded copy's
    /// time (a profile of a 1M-object compaction).
    ///
    /// After each transaction, writeback of what it wrote starts
    /// (``LMDBEnvironment/startWriteback()``, dropping the pages already written for a new
    /// generation), so the disk works while the next is built. 4 MiB measured no slower than
    /// larger batches on a 1M-object compaction and keeps LMDB's dirty page buffers small. A
    /// transaction redone after map growth appends the buffers it holds again. Keys must ascend
    /// strictly (`MDB_APPEND` refuses any other, so a corrupt source tree whose cursor went
    /// backwards fails the copy instead of looping). An error on either side cancels the other,
    /// and this returns only after the worker finished (its open transaction aborted).
    ///
    /// The worker runs on a serial queue of its own, not on Dispatch's global pool (two threads
    /// here), where it could wait behind busy work while the caller, possibly the writer, waits
    /// for it. The source must be another environment: the worker's map growth needs this
    /// environment's map lock exclusively.
    package func copyDirect(_ db: LMDBDatabase, from source: LMDBTransaction, sourceEnv: LMDBEnvironment,
                            into target: LMDBDatabase, start: [UInt8]?, until stop: [UInt8]?,
                            batchBytes: Int = 4 << 20) throws -> (entries: Int, bytes: Int, replayedBuffers: Int) {
        try copyDirect(db, from: .held(source), sourceEnv: sourceEnv, into: target, start: start, until: stop,
                       batchBytes: batchBytes)
    }

    /// ``copyDirect(_:from:sourceEnv:into:start:until:batchBytes:)`` from a ``ReadSource``: from
    /// a pinned snapshot, each buffer is filled in a read of its own, and the calling thread
    /// hands it to the appending thread (waiting for an empty one if need be) outside the
    /// source's reads. So a growth of the source's map waits for one buffer's read at most,
    /// never for the whole copy. A source whose keys come out of order or of an impossible size
    /// (a damaged B-tree: LMDB keys carry no checksum) fails the copy with an ``LMDBError``
    /// (`MDB_KEYEXIST` or `MDB_BAD_VALSIZE`).
    ///
    /// `check`, when given, sees every entry copied, in key order, on the calling thread as it is
    /// read (the appending thread meanwhile appends the buffers before it); an error it throws
    /// ends the copy with that error.
    package func copyDirect(_ db: LMDBDatabase, from source: ReadSource, sourceEnv: LMDBEnvironment,
                            into target: LMDBDatabase, start: [UInt8]?, until stop: [UInt8]?,
                            batchBytes: Int = 4 << 20,
                            check: ((UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void)? = nil)
        throws -> (entries: Int, bytes: Int, replayedBuffers: Int) {
        precondition(batchBytes > 0, "a copy's batch must be positive")
        precondition(db.name != "main" && target.name != "main",
                     "LMDB's main database holds the named databases' records")
        precondition(sourceEnv !== self, "a direct copy into the environment it reads")
        let sourceDB = db
        let bufferBytes = Self.copyBufferBytes
        // The worker holds at most `maxHeld` buffers until it commits; two more keep the reader busy
        // meanwhile, so it never waits for a buffer the worker cannot give back.
        let maxHeld = min(Self.copyMaxBuffersPerTransaction, (batchBytes + bufferBytes - 1) / bufferBytes)
        let pipe = EntryPipe(bufferCount: maxHeld + 2, bufferBytes: bufferBytes)
        typealias Appended = Result<(entries: Int, bytes: Int, replayedBuffers: Int), Error>
        var worker: (done: DispatchGroup, result: Locked<Appended?>)?
        func startWorker() {
            let done = DispatchGroup(), result = Locked<Appended?>(nil)
            DispatchQueue(label: "strata.copy.append").async(group: done) { [self] in
                let appended = Result {
                    try appendAll(from: pipe, to: target, batchBytes: batchBytes, maxHeld: maxHeld)
                }
                if case .failure = appended { pipe.cancel() }
                result.withLock { $0 = appended }
            }
            worker = (done, result)
        }
        do {
            try readAll(sourceDB, from: source, start: start, until: stop, into: pipe, check: check) {
                if worker == nil { startWorker() }
            }
        } catch {
            pipe.cancel()
            worker?.done.wait()
            throw error
        }
        // Everything fit in one buffer (sent and finished): append it here.
        guard let worker else { return try appendAll(from: pipe, to: target, batchBytes: batchBytes, maxHeld: maxHeld) }
        worker.done.wait()
        guard let result = worker.result.withLock({ $0 }) else {
            // Not reachable: the worker stores its result before leaving the group.
            throw LMDBError(code: EINVAL, operation: "copy of \(db.name): the appending thread left no result")
        }
        return try result.get()
    }

    /// Bytes per buffer of ``copyDirect(_:from:sourceEnv:into:start:until:batchBytes:)``'s pipe.
    package static let copyBufferBytes = 512 << 10
    /// Buffers one transaction of ``copyDirect(_:from:sourceEnv:into:start:until:batchBytes:)``
    /// holds at most (a larger `batchBytes` commits at this many).
    package static let copyMaxBuffersPerTransaction = 16

    /// The reading side of ``copyDirect(_:from:sourceEnv:into:start:until:batchBytes:)``: every
    /// entry from `start` to `stop`, in key order, into `pipe`'s buffers; then ``EntryPipe/finish()``.
    /// `beforeSendingAFullBuffer` runs before each buffer sent while more entries follow (the copy
    /// starts its worker at the first). Returns early, without finishing, when the pipe was
    /// cancelled (the worker failed).
    ///
    /// Each buffer is filled in one read of `source` (a new cursor positioned by key at the first
    /// entry that did not fit the previous buffer), and sent outside it: nothing read stays in use
    /// across reads but the bytes copied into the buffers.
    private func readAll(_ db: LMDBDatabase, from source: ReadSource, start: [UInt8]?, until stop: [UInt8]?,
                         into pipe: EntryPipe,
                         check: ((UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void)?,
                         beforeSendingAFullBuffer: () -> Void) throws {
        guard var buffer = pipe.takeEmpty() else { return }
        // Where the next read starts (the first key not yet copied); nil once the range is done.
        var resume: [UInt8]? = start
        var first = true
        while first || resume != nil {
            let from = resume
            first = false
            resume = nil
            try source.read { txn in
                var seeking = from != nil
                try txn.scan(db, from: from) { key, value in
                    // A corrupt branch page can route the seek before the key asked for: skip up
                    // to it (appending refuses keys out of order, so a damaged tree fails the copy).
                    if seeking, let from {
                        if KeyOrder.compare(key, from) < 0 { return true }
                        seeking = false
                    }
                    if let stop, KeyOrder.compare(key, stop) > 0 { return false }
                    if !pipe.fits(key: key.count, value: value.count, in: buffer) {
                        resume = Array(key)
                        return false
                    }
                    try check?(key, value)
                    EntryPipe.append(key: key, value: value, to: &buffer)
                    return true
                }
            }
            guard resume != nil else { break }
            // The buffer is full and more entries follow: hand it over, outside the read.
            beforeSendingAFullBuffer()
            guard pipe.send(buffer), let next = pipe.takeEmpty() else { return }
            buffer = next
        }
        if !buffer.isEmpty { guard pipe.send(buffer) else { return } }
        pipe.finish()
    }

    /// The appending side of ``copyDirect(_:from:sourceEnv:into:start:until:batchBytes:)``: every
    /// buffer `pipe` delivers, in write transactions of about `batchBytes` (at most `maxHeld`
    /// buffers); each buffer goes back to the pipe once its transaction committed.
    private func appendAll(from pipe: EntryPipe, to target: LMDBDatabase, batchBytes: Int,
                           maxHeld: Int) throws -> (entries: Int, bytes: Int, replayedBuffers: Int) {
        struct Cancelled: Error {}
        var copied = 0, copiedBytes = 0, replayed = 0
        var held: [[UInt8]] = []
        var ended = false
        while !ended {
            var count = 0, bytes = 0
            do {
                try writeGrowing { txn in
                    count = 0
                    bytes = 0
                    try txn.withAppender(target) { appender in
                        func appendBuffer(_ buffer: [UInt8]) throws {
                            try EntryPipe.forEachEntry(in: buffer) { key, value in
                                try appender.append(key: key, value: value)
                                count += 1
                                bytes += key.count + value.count
                            }
                        }
                        // Buffers of an attempt redone after map growth first.
                        for buffer in held { try appendBuffer(buffer) }
                        replayed += held.count
                        var heldBytes = held.reduce(0) { $0 + $1.count }
                        while !ended && heldBytes < batchBytes && held.count < maxHeld {
                            switch pipe.receive() {
                            case .buffer(let buffer):
                                held.append(buffer)
                                heldBytes += buffer.count
                                try appendBuffer(buffer)
                            case .end:
                                ended = true
                            case .cancelled:
                                throw Cancelled()
                            }
                        }
                    }
                }
            } catch is Cancelled {
                // The reader failed; it reports why. The open transaction was aborted.
                return (copied, copiedBytes, replayed)
            }
            copied += count
            copiedBytes += bytes
            while let buffer = held.popLast() { pipe.recycle(buffer) }
            if options.noSync { startWriteback() }
        }
        return (copied, copiedBytes, replayed)
    }
}
