import FuzzSupport
import Strata

/// An NDJSON import of arbitrary bytes must end in a summary or an error, never a crash.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzImportNDJSON(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var options = ImportOptions()
    options.batchSize = 7
    FuzzSupport.importFile(UnsafeRawBufferPointer(start: data, count: size), name: "input.ndjson", options: options)
    return 0
}

/// The entry point SwiftPM links as `main`.
@_cdecl("fuzz_import_ndjson_main")
public func fuzz_import_ndjson_main(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv) { data, size in data.map { fuzzImportNDJSON($0, size) } ?? 0 }
}
