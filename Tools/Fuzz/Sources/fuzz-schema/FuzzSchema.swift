import FuzzSupport
import Strata

/// Schema.parse must never crash; a schema it accepts must parse again from its canonical JSON
/// to the same canonical JSON (the store keeps that text and parses it at every open).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSchema(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let schema = try? Schema.parse(bytes, source: "fuzz.json") else { return 0 }
    let canonical = schema.canonicalJSON
    let again: Schema
    do { again = try Schema.parse(Array(canonical.utf8), source: "canonical.json") } catch {
        fatalError("canonical JSON of an accepted schema is refused: \(error)\n\(canonical.prefix(300))")
    }
    if again.canonicalJSON != canonical { fatalError("canonical JSON is not stable:\n\(canonical.prefix(300))\n\(again.canonicalJSON.prefix(300))") }
    return 0
}

/// The entry point SwiftPM links as `main`.
@_cdecl("fuzz_schema_main")
public func fuzz_schema_main(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv) { data, size in data.map { fuzzSchema($0, size) } ?? 0 }
}
