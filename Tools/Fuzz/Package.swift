// swift-tools-version: 6.0
import Foundation
import PackageDescription

// libFuzzer targets for Strata's parsers and binary decoders. Build and run with Tools/fuzz; by hand:
//   swift build -c release --package-path Tools/Fuzz --scratch-path Tools/Fuzz/.build \
//     -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library
// Each executable's `LLVMFuzzerTestOneInput` takes one input. SwiftPM links executables with
// `main` aliased to `<module>_main`, so each target defines that (with -parse-as-library there is
// no top-level code) and hands control to libFuzzer's LLVMFuzzerRunDriver.
//
// The Strata package is the repository two levels up; its identity is its directory's name.
let strataRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..").standardizedFileURL
let strataIdentity = strataRoot.lastPathComponent.lowercased()
let strata = Target.Dependency.product(name: "Strata", package: strataIdentity)

let package = Package(
    name: "StrataFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: "../.."),
    ],
    targets: [
        // Declares libFuzzer's LLVMFuzzerRunDriver for the targets' entry points.
        .target(name: "CFuzzDriver"),
        .target(name: "FuzzSupport", dependencies: [strata, "CFuzzDriver"]),
        // JSONValue.parse, and serialize → parse gives the same value.
        .executableTarget(name: "fuzz-json", dependencies: [strata, "FuzzSupport"]),
        // Schema.parse, and a parsed schema's canonical JSON parses to the same schema.
        .executableTarget(name: "fuzz-schema", dependencies: [strata, "FuzzSupport"]),
        // Importer on an NDJSON file, into a temporary store of the library schema.
        .executableTarget(name: "fuzz-import-ndjson", dependencies: [strata, "FuzzSupport"]),
        // Importer on a CSV file (first byte picks the entity), into a temporary store.
        .executableTarget(name: "fuzz-import-csv", dependencies: [strata, "FuzzSupport"]),
        // The log-entry decoder (through @_spi(Fuzz) FuzzEntryPoints): input = entry body, sealed
        // with its checksum by the target; round trip encode → decode on what decodes.
        .executableTarget(name: "fuzz-log-entry", dependencies: [strata, "FuzzSupport"]),
        // The record decoder: input = 16 id bytes + record body, sealed by the target; round trip.
        .executableTarget(name: "fuzz-record", dependencies: [strata, "FuzzSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
