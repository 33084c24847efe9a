import Foundation

/// A ``RecordIterator`` run on a thread of its own, a bounded number of records ahead of the
/// consumer: reading and parsing the input (about half of an import's work) overlaps with what
/// the consumer does with the records (checking them, building and saving batches), so an import
/// uses two cores.
///
/// The items come out in the iterator's order, with the same results, and an error the iterator
/// throws (an unreadable file) comes out where it happened, after the items before it. Memory: at
/// most ``chunksAhead`` chunks of ``chunkSize`` items wait, and no more than ``bytesAhead`` of
/// input in them (and one chunk more): a chunk ends after ``chunkBytes`` of input, so records
/// of large values are held a few at a time, not thousands (16 chunks of 256 records of 16 MiB
/// lines would have been 64 GiB).
///
/// A chunk's array is handed back once the consumer is done with it (``spares``), and the producer
/// fills the same few arrays again. The records' small blocks are freed on the consumer's threads,
/// so glibc merges its free lists (`malloc_consolidate`) before it hands out a new array of a
/// chunk's size: an array a chunk costs about a tenth of the reading thread's time on the catalog
/// (a fiftieth of the import's CPU).
final class PipelinedRecords: @unchecked Sendable {
    // Safe to share: every stored property below `condition` is read and written only with
    // `condition` locked (the producer thread and the consumer both take it), and the items are
    // handed over whole (the producer gives up its chunk as it queues it, `consume`). The
    // `current` chunk and `bytesRead` belong to the consumer alone.

    /// Items per hand-over: large enough that locking is rare, small enough to start at once.
    static let chunkSize = 256
    /// Chunks the producer may be ahead.
    static let chunksAhead = 16
    /// Input bytes after which a chunk ends, whatever its count of items.
    static let chunkBytes = 1 << 20
    /// Input bytes the queued chunks may hold before the producer waits (it always queues one).
    static let bytesAhead = 16 << 20

    private struct Chunk {
        /// Each is taken out (left nil) as it is handed to the consumer, in place: the array is
        /// the consumer's alone once queued, so an item is moved, with no reference counted.
        var items: [RecordIterator.Item?]
        /// The iterator's ``RecordIterator/bytesRead`` after the chunk's last item.
        let bytesRead: Int
        /// What ended the input after these items: an error, or nil (more may come, or the end
        /// when `last`).
        let error: Error?
        let last: Bool
        /// Bytes of input its items were read from.
        var inputBytes = 0
    }

    private let condition = NSCondition()
    private var queued: [Chunk] = []
    /// The input bytes of the queued chunks.
    private var queuedBytes = 0
    private var stopped = false
    private var producerDone = false
    /// Emptied chunk arrays the consumer handed back, their capacity kept, for the producer to fill
    /// again: at most ``maxSpares``.
    private var spares: [[RecordIterator.Item?]] = []
    static let maxSpares = 4
    /// Spare arrays the producer took (``spareArraysReused``).
    private var sparesTaken = 0

    private var current: Chunk?
    private var position = 0
    /// Bytes of the input read up to the last item handed out.
    private(set) var bytesRead = 0

    init(_ iterator: RecordIterator) {
        let thread = Thread { [self] in produce(iterator) }
        thread.name = "strata.import-reader"
        // JSON nesting is bounded by the parser; this is ample for its recursion.
        thread.stackSize = 8 << 20
        thread.start()
    }

    private func produce(_ start: RecordIterator) {
        var iterator = start
        defer {
            iterator.close()
            condition.lock()
            producerDone = true
            condition.broadcast()
            condition.unlock()
        }
        while true {
            condition.lock()
            var items: [RecordIterator.Item?] = []
            if let spare = spares.popLast() {
                items = spare
                sparesTaken += 1
            }
            condition.unlock()
            assert(items.isEmpty, "a spare chunk array is handed back empty")
            items.reserveCapacity(Self.chunkSize)
            var error: Error?
            var last = false
            let startBytes = iterator.bytesRead
            do {
                while items.count < Self.chunkSize && iterator.bytesRead - startBytes < Self.chunkBytes {
                    guard let item = try iterator.next() else {
                        last = true
                        break
                    }
                    items.append(item)
                }
            } catch let e {
                error = e
            }
            var chunk = Chunk(items: consume items, bytesRead: iterator.bytesRead, error: error,
                              last: last || error != nil)
            chunk.inputBytes = iterator.bytesRead - startBytes
            let ends = chunk.last
            condition.lock()
            while (queued.count >= Self.chunksAhead || (!queued.isEmpty && queuedBytes >= Self.bytesAhead)) && !stopped {
                condition.wait()
            }
            if stopped {
                condition.unlock()
                return
            }
            queuedBytes += chunk.inputBytes
            // Given up here: the consumer takes its items out in place, which a second reference
            // to the array would turn into a copy of it.
            queued.append(consume chunk)
            condition.broadcast()
            condition.unlock()
            if ends { return }
        }
    }

    /// The next item; nil at the end of the input. Throws what the iterator threw, in its place.
    func next() throws -> RecordIterator.Item? {
        while true {
            // Taken out of the chunk in place (each item once, at its position).
            if position < current?.items.count ?? 0, let item = current?.items[position].take() {
                position += 1
                bytesRead = current?.bytesRead ?? bytesRead
                return item
            }
            if let chunk = current {
                if let error = chunk.error {
                    current = Chunk(items: [], bytesRead: chunk.bytesRead, error: nil, last: true)
                    throw error
                }
                if chunk.last { return nil }
            }
            // The finished chunk's array, its items taken, goes back to the producer with its
            // capacity.
            var spare = current?.items ?? []
            current = nil
            spare.removeAll(keepingCapacity: true)
            condition.lock()
            if spare.capacity > 0, spares.count < Self.maxSpares {
                spares.append(spare)
            }
            while queued.isEmpty && !producerDone { condition.wait() }
            guard !queued.isEmpty else {
                condition.unlock()
                return nil
            }
            current = queued.removeFirst()
            queuedBytes -= current?.inputBytes ?? 0
            position = 0
            condition.broadcast()
            condition.unlock()
        }
    }

    /// Chunk arrays the consumer handed back and the producer filled again so far (tests).
    var spareArraysReused: Int {
        condition.lock()
        defer { condition.unlock() }
        return sparesTaken
    }

    /// The input bytes of the chunks queued now (tests: the read-ahead's bound).
    var queuedInputBytes: Int {
        condition.lock()
        defer { condition.unlock() }
        return queuedBytes
    }

    /// Stops the producer and waits for it to close its file (call once the consumer is done,
    /// also when it stops early).
    func close() {
        condition.lock()
        stopped = true
        condition.broadcast()
        while !producerDone { condition.wait() }
        queued = []
        spares = []
        condition.unlock()
    }
}
