import Foundation

/// A ``RecordIterator`` run on a thread of its own, a bounded number of records ahead of the
/// consumer: reading and parsing the input (about half of an import's work) overlaps with what
/// the consumer does with the records (checking them, building and saving batches), so an import
/// uses two cores.
///
/// The items come out in the iterator's order, with the same results, and an error the iterator
/// throws (an unreadable file) comes out where it happened, after the items before it. Memory: at
/// most ``chunksAhead`` chunks of ``chunkSize`` items wait.
final class PipelinedRecords: @unchecked Sendable {
    // Safe to share: every stored property below `condition` is read and written only with
    // `condition` locked (the producer thread and the consumer both take it), and the items are
    // handed over whole (the producer keeps no reference to a chunk it has queued). The
    // `current` chunk and `bytesRead` belong to the consumer alone.

    /// Items per hand-over: large enough that locking is rare, small enough to start at once.
    static let chunkSize = 256
    /// Chunks the producer may be ahead.
    static let chunksAhead = 16

    private struct Chunk {
        var items: [RecordIterator.Item]
        /// The iterator's ``RecordIterator/bytesRead`` after the chunk's last item.
        let bytesRead: Int
        /// What ended the input after these items: an error, or nil (more may come, or the end
        /// when `last`).
        let error: Error?
        let last: Bool
    }

    private let condition = NSCondition()
    private var queued: [Chunk] = []
    private var stopped = false
    private var producerDone = false

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
            var items: [RecordIterator.Item] = []
            items.reserveCapacity(Self.chunkSize)
            var error: Error?
            var last = false
            do {
                while items.count < Self.chunkSize {
                    guard let item = try iterator.next() else {
                        last = true
                        break
                    }
                    items.append(item)
                }
            } catch let e {
                error = e
            }
            let chunk = Chunk(items: items, bytesRead: iterator.bytesRead, error: error, last: last || error != nil)
            condition.lock()
            while queued.count >= Self.chunksAhead && !stopped { condition.wait() }
            if stopped {
                condition.unlock()
                return
            }
            queued.append(chunk)
            condition.broadcast()
            condition.unlock()
            if chunk.last { return }
        }
    }

    /// The next item; nil at the end of the input. Throws what the iterator threw, in its place.
    func next() throws -> RecordIterator.Item? {
        while true {
            if let chunk = current {
                if position < chunk.items.count {
                    let item = chunk.items[position]
                    position += 1
                    bytesRead = chunk.bytesRead
                    return item
                }
                if let error = chunk.error {
                    current = Chunk(items: [], bytesRead: chunk.bytesRead, error: nil, last: true)
                    throw error
                }
                if chunk.last { return nil }
            }
            condition.lock()
            while queued.isEmpty && !producerDone { condition.wait() }
            guard !queued.isEmpty else {
                condition.unlock()
                return nil
            }
            current = queued.removeFirst()
            position = 0
            condition.broadcast()
            condition.unlock()
        }
    }

    /// Stops the producer and waits for it to close its file (call once the consumer is done,
    /// also when it stops early).
    func close() {
        condition.lock()
        stopped = true
        condition.broadcast()
        while !producerDone { condition.wait() }
        queued = []
        condition.unlock()
    }
}
