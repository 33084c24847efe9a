import FuzzSupport
@_spi(Fuzz) import Strata

/// The transaction the inputs are decoded as (its 8 key bytes are part of the checksum).
let transaction: UInt64 = 7

/// The log-entry decoder must never crash on any bytes: it returns an entry or throws
/// `corruptLogEntry` naming the transaction. The input is an entry body without its checksum:
/// it is decoded as it is (nearly always "checksum mismatch" or "too short") and sealed with the
/// right checksum (so mutations reach the body's decoding). An entry that decodes must survive
/// encode → decode, and its canonical bytes must be stable (compared as bytes, so NaN payloads
/// and -0.0 count). The scan `verify` reads the log with must agree with the decoder on both.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzLogEntry(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let body = Array(UnsafeBufferPointer(start: data, count: size))
    _ = decode(body)
    let sealed = FuzzEntryPoints.sealLogEntry(body, transaction: transaction)
    // The scan verify reads the log with must accept and refuse exactly what the decoder does.
    for bytes in [body, sealed] {
        if let d = FuzzEntryPoints.scanDisagreement(bytes, transaction: transaction) { fatalError("scan and decode disagree: \(d)") }
    }
    guard let entry = decode(sealed) else { return 0 }
    guard entry.transactionID.rawValue == transaction else { fatalError("decoded entry names transaction \(entry.transactionID)") }
    let canonical = FuzzEntryPoints.encodeLogEntry(entry)
    let again: LogEntry
    do { again = try FuzzEntryPoints.decodeLogEntry(canonical, transaction: transaction) } catch {
        fatalError("the encoding of a decoded entry does not decode: \(error)\n\(entry)")
    }
    if FuzzEntryPoints.encodeLogEntry(again) != canonical { fatalError("entry round trip changed the bytes:\n\(entry)\n\(again)") }
    if again.changes.count != entry.changes.count || again.metadata != entry.metadata || again.author != entry.author
        || again.schemaVersion != entry.schemaVersion || again.timestampMs != entry.timestampMs {
        fatalError("entry round trip changed the entry:\n\(entry)\n\(again)")
    }
    return 0
}

/// The entry, nil for a `corruptLogEntry` of this transaction; any other error is a failure.
func decode(_ bytes: [UInt8]) -> LogEntry? {
    do { return try FuzzEntryPoints.decodeLogEntry(bytes, transaction: transaction) } catch StrataError.corruptLogEntry(let tx, _) where tx.rawValue == transaction {
        return nil
    } catch {
        fatalError("the decoder threw something other than corruptLogEntry(\(transaction)): \(error)")
    }
}

/// The entry point SwiftPM links as `main`.
@_cdecl("fuzz_log_entry_main")
public func fuzz_log_entry_main(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv) { data, size in data.map { fuzzLogEntry($0, size) } ?? 0 }
}
