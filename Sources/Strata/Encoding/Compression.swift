import CZstd
import StrataLMDB

/// Zstandard (libzstd) compression of byte blocks: the bodies of large log entries
/// (``LogEntryCodec``). Contexts are kept in a small pool, so compressing many medium blocks
/// does not allocate and initialize a context each time.
enum Compression {
    /// zstd's level 1: its fastest standard level. On a bulk import's log entries it keeps about
    /// two fifths of the bytes at several hundred MB/s, so the writer barely notices it.
    static let level: Int32 = 1

    /// The most a block may grow when decompressed, as a multiple of its compressed size, above
    /// ``alwaysAllowedBytes``: what a decoder allocates before it knows whether the frame is sound.
    static let maxRatio = 1_024

    /// A decompressed size allowed whatever the ratio.
    static let alwaysAllowedBytes = 16 << 20

    /// Whether a block of `compressed` bytes (at least one) may decompress to `plain` bytes: up
    /// to ``alwaysAllowedBytes``, or up to ``maxRatio`` times `compressed`.
    static func allowed(plain: Int, compressed: Int) -> Bool {
        guard compressed > 0, plain >= 0 else { return false }
        // compressed × maxRatio ≥ plain, without overflowing.
        return plain <= alwaysAllowedBytes || compressed >= (plain / maxRatio) + (plain % maxRatio == 0 ? 0 : 1)
    }

    /// Writes the zstd frame of `source` into `destination`; its size, or nil when it does not
    /// fit there (or zstd fails, or has no memory for a context: the block is then kept as it is).
    static func compress(_ source: UnsafeRawBufferPointer, into destination: UnsafeMutableRawBufferPointer) -> Int? {
        guard !destination.isEmpty, let context = compressors.take() ?? ZstdContext(.compress) else { return nil }
        defer { compressors.put(context) }
        let r = ZSTD_compressCCtx(context.handle, destination.baseAddress, destination.count,
                                  source.baseAddress, source.count, level)
        // Among the errors: "destination too small", the frame not fitting.
        return ZSTD_isError(r) == 0 && r > 0 ? r : nil
    }

    /// Decompresses the one zstd frame `frame` holds (nothing before or after it) into
    /// `destination`, which it must fill exactly.
    /// - Throws: ``DecodingError`` when the frame is damaged, is not exactly one frame, or its
    ///   size is not the destination's.
    static func decompress(_ frame: UnsafeRawBufferPointer, into destination: UnsafeMutableRawBufferPointer) throws {
        let size = ZSTD_findFrameCompressedSize(frame.baseAddress, frame.count)
        guard ZSTD_isError(size) == 0, size == frame.count else {
            throw DecodingError(offset: 0, reason: "compressed body is not one zstd frame")
        }
        guard let context = decompressors.take() ?? ZstdContext(.decompress) else {
            throw DecodingError(offset: 0, reason: "no memory for a zstd decompression context")
        }
        defer { decompressors.put(context) }
        let r = ZSTD_decompressDCtx(context.handle, destination.baseAddress, destination.count,
                                    frame.baseAddress, frame.count)
        if ZSTD_isError(r) != 0 {
            throw DecodingError(offset: 0, reason: "compressed body does not decompress (\(String(cString: ZSTD_getErrorName(r))))")
        }
        guard r == destination.count else {
            throw DecodingError(offset: 0, reason: "compressed body holds \(r) bytes, not the \(destination.count) it declares")
        }
    }

    private static let compressors = ContextPool()
    private static let decompressors = ContextPool()
}

/// A zstd compression or decompression context. It is used by one thread at a time: a
/// ``ContextPool`` hands each out to one caller and takes it back when that caller is done.
private final class ZstdContext: @unchecked Sendable {
    // Safe to send: the context is only ever used between `take()` and `put(_:)` by the caller
    // that took it (the pool's lock orders those hand-overs), and nothing else holds it.
    enum Kind { case compress, decompress }

    let handle: OpaquePointer
    private let kind: Kind

    /// Nil when zstd cannot allocate the context (malloc failed).
    init?(_ kind: Kind) {
        self.kind = kind
        switch kind {
        case .compress:
            guard let c = ZSTD_createCCtx() else { return nil }
            handle = c
        case .decompress:
            guard let d = ZSTD_createDCtx() else { return nil }
            handle = d
        }
    }

    deinit {
        switch kind {
        case .compress: ZSTD_freeCCtx(handle)
        case .decompress: ZSTD_freeDCtx(handle)
        }
    }
}

/// Idle contexts of one kind, at most one per core or so (more are freed on return).
private final class ContextPool: Sendable {
    private static let keep = 4
    private let idle = Locked<[ZstdContext]>([])

    func take() -> ZstdContext? { idle.withLock { $0.popLast() } }

    func put(_ context: ZstdContext) {
        idle.withLock { if $0.count < Self.keep { $0.append(context) } }
    }
}
