// swift-tools-version: 6.0
import Foundation
import PackageDescription

// The Strata package is the repository two levels up. SwiftPM names a path dependency after its
// directory, which is whatever the clone is called, so the identity is computed, not hard-coded.
let strataRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..").standardizedFileURL
let strataIdentity = strataRoot.lastPathComponent.lowercased()

let package = Package(
    name: "StrataBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: "../.."),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        // liblmdb from the system (Debian: liblmdb-dev), for the raw-LMDB baseline. Its own module
        // so the benchmark never reaches into Strata's internal CLMDB target.
        .systemLibrary(
            name: "CLMDBBench",
            path: "Sources/CLMDBBench",
            pkgConfig: "lmdb",
            providers: [.apt(["liblmdb-dev"])]
        ),
        .executableTarget(
            name: "strata-bench",
            dependencies: [
                "CLMDBBench",
                .product(name: "Strata", package: strataIdentity),
                .product(name: "StrataCluster", package: strataIdentity),
                .product(name: "LibraryModel", package: strataIdentity),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
