import FuzzSupport
import Strata

/// A CSV import of arbitrary bytes must end in a summary or an error, never a crash. The first
/// byte picks the entity (the file is named after it); the rest is the file.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzImportCSV(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 1 else { return 0 }
    let entities = FuzzSupport.schema.entities.map(\.name)
    let entity = entities[Int(data[0]) % entities.count]
    var options = ImportOptions()
    options.batchSize = 7
    FuzzSupport.importFile(UnsafeRawBufferPointer(start: data + 1, count: size - 1), name: "\(entity).csv", options: options)
    return 0
}

/// The entry point SwiftPM links as `main`.
@_cdecl("fuzz_import_csv_main")
public func fuzz_import_csv_main(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv) { data, size in data.map { fuzzImportCSV($0, size) } ?? 0 }
}
