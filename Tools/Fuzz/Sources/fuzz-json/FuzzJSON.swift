import FuzzSupport
import Strata

/// JSONValue.parse must never crash, and what it accepts must survive serialize → parse unchanged.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJSON(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    guard let value = try? JSONValue.parse(bytes) else { return 0 }
    let text = value.serialized
    guard let again = try? JSONValue.parse(text) else {
        fatalError("serialized JSON does not parse again: \(text.prefix(200))")
    }
    if again != value { fatalError("JSON round trip changed the value: \(text.prefix(200))") }
    return 0
}

/// The entry point SwiftPM links as `main`.
@_cdecl("fuzz_json_main")
public func fuzz_json_main(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv) { data, size in data.map { fuzzJSON($0, size) } ?? 0 }
}
