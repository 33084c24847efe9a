import Foundation

/// Buffers of key-value entries handed from the thread reading a database to the thread
/// appending them to another environment
/// (``LMDBEnvironment/copyDirect(_:from:sourceEnv:into:start:until:batchBytes:)``), so that
/// reading the source and building the copy's B-trees run on two cores.
///
/// At most ``bufferCount`` buffers circulate (made as the reader first needs them): the reader
/// fills an empty one and sends it; the appender gives it back once the transaction that wrote
/// it has committed. Reusing them keeps their pages mapped (fresh memory for every buffer would
/// cost a page fault per 4 KiB). Each entry in a buffer is its key's length and its value's
/// length (two `UInt32`, little endian), then the key's bytes, then the value's.
///
/// `@unchecked Sendable` is safe: every stored property is read and written only while
/// `condition` is locked; buffers move between the threads by value, and a buffer is touched by
/// one side at a time (the side that took it out of `empty` or `filled`).
package final class EntryPipe: @unchecked Sendable {
    /// How a ``receive()`` ended.
    package enum Received {
        case buffer([UInt8])
        /// The reader finished: every buffer it filled was received.
        case end
        /// ``cancel()`` was called: the copy is abandoned.
        case cancelled
    }

    /// Buffers in circulation, at most.
    package let bufferCount: Int
    /// The size of a buffer: the reader sends a buffer before an entry would take it past this
    /// (an entry larger than it alone gets a buffer grown to fit, replaced once given back).
    package let bufferBytes: Int
    private let condition = NSCondition()
    private var empty: [[UInt8]] = []
    /// Buffers made so far (``takeEmpty()`` makes one while fewer than ``bufferCount`` exist).
    private var made = 0
    private var filled: [[UInt8]] = []
    private var finished = false
    private var cancelled = false

    /// Up to `bufferCount` buffers of `bufferBytes` each. The appender may hold up to a
    /// transaction's worth of buffers until it commits, so `bufferCount` must exceed that (see
    /// ``LMDBEnvironment/copyDirect(_:from:sourceEnv:into:start:until:batchBytes:)``).
    package init(bufferCount: Int, bufferBytes: Int) {
        precondition(bufferCount >= 2 && bufferBytes > 0, "an entry pipe needs two buffers or more")
        self.bufferCount = bufferCount
        self.bufferBytes = bufferBytes
    }

    /// Reader: an empty buffer, waiting until the appender gives one back when all
    /// ``bufferCount`` are out; nil once cancelled.
    package func takeEmpty() -> [UInt8]? {
        condition.lock()
        defer { condition.unlock() }
        while empty.isEmpty && made == bufferCount && !cancelled { condition.wait() }
        guard !cancelled else { return nil }
        if var b = empty.popLast() {
            b.removeAll(keepingCapacity: true)
            return b
        }
        made += 1
        var b: [UInt8] = []
        b.reserveCapacity(bufferBytes)
        return b
    }

    /// Reader: whether an entry of `key` and `value` bytes still fits in `buffer` (an empty
    /// buffer takes any entry).
    @inline(__always)
    package func fits(key: Int, value: Int, in buffer: [UInt8]) -> Bool {
        buffer.isEmpty || buffer.count + Self.entryHeaderBytes + key + value <= bufferBytes
    }

    /// Reader: hands a filled buffer to the appender; false once cancelled.
    package func send(_ buffer: [UInt8]) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !cancelled else { return false }
        filled.append(buffer)
        condition.broadcast()
        return true
    }

    /// Reader: nothing more will be sent.
    package func finish() {
        condition.lock()
        finished = true
        condition.broadcast()
        condition.unlock()
    }

    /// Appender: the next filled buffer, in the order sent, waiting for one.
    package func receive() -> Received {
        condition.lock()
        defer { condition.unlock() }
        while filled.isEmpty && !finished && !cancelled { condition.wait() }
        if cancelled { return .cancelled }
        if filled.isEmpty { return .end }
        return .buffer(filled.removeFirst())
    }

    /// Appender: gives a buffer back once what it held is committed. One grown past twice
    /// ``bufferBytes`` (a large entry's) is dropped and a buffer of the usual size made instead
    /// at the next ``takeEmpty()``, so large values do not stay allocated.
    package func recycle(_ buffer: [UInt8]) {
        condition.lock()
        if buffer.capacity > 2 * bufferBytes {
            made -= 1
        } else {
            empty.append(buffer)
        }
        condition.broadcast()
        condition.unlock()
    }

    /// Either side stopped on an error: the other side's next call returns nil, false or
    /// ``Received/cancelled``, and nothing waits any longer.
    package func cancel() {
        condition.lock()
        cancelled = true
        condition.broadcast()
        condition.unlock()
    }

    /// The bytes before each entry's key in a buffer: the key's and the value's lengths (`UInt32` each).
    package static let entryHeaderBytes = 2 * MemoryLayout<UInt32>.size

    /// Appends one entry to `buffer` in the pipe's layout.
    @inline(__always)
    package static func append(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, to buffer: inout [UInt8]) {
        precondition(key.count <= Int(UInt32.max) && value.count <= Int(UInt32.max), "an entry over 4 GiB in a copy")
        withUnsafeBytes(of: UInt32(key.count).littleEndian) { buffer.append(contentsOf: $0) }
        withUnsafeBytes(of: UInt32(value.count).littleEndian) { buffer.append(contentsOf: $0) }
        buffer.append(contentsOf: key)
        buffer.append(contentsOf: value)
    }

    /// Calls `body` with each entry of a buffer filled by ``append(key:value:to:)``, in order.
    package static func forEachEntry(in buffer: [UInt8],
                                     _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) rethrows {
        try buffer.withUnsafeBytes { raw in
            var at = 0
            while at < raw.count {
                precondition(raw.count - at >= entryHeaderBytes, "truncated entry header in a copy buffer")
                let k = Int(UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: at, as: UInt32.self)))
                let v = Int(UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: at + 4, as: UInt32.self)))
                at += entryHeaderBytes
                precondition(raw.count - at >= k + v, "truncated entry in a copy buffer")
                try body(UnsafeRawBufferPointer(rebasing: raw[at..<at + k]),
                         UnsafeRawBufferPointer(rebasing: raw[at + k..<at + k + v]))
                at += k + v
            }
        }
    }
}
