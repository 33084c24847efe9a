// swift-tools-version: 6.0
import Foundation
import PackageDescription

// The reliability harness (see RELIABILITY.md): a child program that saves or imports into a real store
// until it is killed, and the drivers that kill it, corrupt copies of a store and check them.
// Built in its own folder (Tools/reliability/.build) so it never touches the root build.
//
// The Strata package is the repository two levels up. SwiftPM names a path dependency after its
// directory, which is whatever the clone is called, so the identity is computed, not hard-coded.
let strataRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..").standardizedFileURL
let strataIdentity = strataRoot.lastPathComponent.lowercased()

let package = Package(
    name: "StrataReliability",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: "../.."),
    ],
    targets: [
        // liblmdb from the system (Debian: liblmdb-dev), only to write compacted copies
        // (mdb_env_copy2 with MDB_CP_COMPACT) for the byte-flip campaign. Its own module so the
        // harness never reaches into Strata's internal CLMDB target.
        .systemLibrary(
            name: "CLMDBReliability",
            path: "Sources/CLMDBReliability",
            pkgConfig: "lmdb",
            providers: [.apt(["liblmdb-dev"])]
        ),
        .executableTarget(
            name: "strata-crash-child",
            dependencies: [
                "CLMDBReliability",
                .product(name: "Strata", package: strataIdentity),
                .product(name: "LibraryModel", package: strataIdentity),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
