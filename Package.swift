// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "Strata",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Strata", targets: ["Strata"]),
        .library(name: "LibraryModel", targets: ["LibraryModel"]),
        // Several machines on one dataset: the log in PostgreSQL, an LMDB replica on each machine.
        .library(name: "StrataCluster", targets: ["StrataCluster"]),
        .executable(name: "storectl", targets: ["storectl"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // `swift package generate-documentation` (Tools/docs builds the DocC archive).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // liblmdb from the system (Debian: liblmdb-dev).
        .systemLibrary(
            name: "CLMDB",
            path: "Sources/CLMDB",
            pkgConfig: "lmdb",
            providers: [.apt(["liblmdb-dev"])]
        ),
        // libzstd from the system (Debian: libzstd-dev): the compressed bodies of large log entries.
        .systemLibrary(
            name: "CZstd",
            path: "Sources/CZstd",
            pkgConfig: "libzstd",
            providers: [.apt(["libzstd-dev"])]
        ),
        // CRC-32C with the SSE4.2 instruction where the CPU has it (checked at run time).
        .target(name: "CStrataCRC", path: "Sources/CStrataCRC"),
        // A rename that never replaces what is at its destination (Linux's `renameat2`).
        .target(name: "CStrataPOSIX", path: "Sources/CStrataPOSIX"),
        // LMDB for Strata: environments, transactions, cursors, map growth, page audits. The only
        // target that imports CLMDB; it knows nothing of Strata's keys, ids or formats.
        .target(
            name: "StrataLMDB",
            dependencies: [
                "CLMDB",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "Strata",
            dependencies: [
                "StrataLMDB",
                "CStrataCRC",
                "CZstd",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The cluster: PostgreSQL (postgres-nio) holds the ordered log; the core stays free of NIO.
        .target(
            name: "StrataCluster",
            dependencies: [
                "Strata",
                "CStrataPOSIX",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Typed entities generated from Schemas/library by `storectl generate`.
        .target(name: "LibraryModel", dependencies: ["Strata"]),
        .executableTarget(
            name: "storectl",
            dependencies: [
                "Strata",
                "StrataCluster",
                "StrataLMDB",
                "LibraryModel",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // Deterministic synthetic libraries for benchmarks and scale tests (Tools/generate-library).
        .executableTarget(name: "strata-generate"),
        // README's end-to-end example, compiled and run by Tools/test.
        .executableTarget(name: "strata-example", dependencies: ["Strata", "LibraryModel"]),
        // Helpers both test targets use: paths, temporary stores, running storectl and other processes.
        .target(name: "StrataTestSupport", dependencies: ["Strata", "LibraryModel"], path: "Tests/StrataTestSupport"),
        // Unit and feature tests, filed by the code under test (storectl runs as a real process).
        .testTarget(
            name: "StrataTests",
            dependencies: ["Strata", "StrataLMDB", "LibraryModel", "StrataTestSupport", "storectl", "strata-generate"]
        ),
        // The writer process of the cluster tests: saves through a replica, records each call and
        // its outcome, and can kill itself around its append.
        .executableTarget(
            name: "strata-cluster-child",
            dependencies: ["Strata", "StrataCluster", "LibraryModel"],
            path: "Tests/StrataClusterChild"
        ),
        // A cluster against a real PostgreSQL (a private server each test process starts with
        // Tools/postgres): replicas in one process and as storectl processes, kills, restarts.
        .testTarget(
            name: "StrataClusterTests",
            dependencies: ["Strata", "StrataCluster", "LibraryModel", "StrataTestSupport", "storectl",
                           "strata-cluster-child"]
        ),
        // Processes killed with SIGKILL, injected faults (byte flips, resource limits, full disks),
        // several processes on one store; most use Tools/reliability's child program.
        .testTarget(
            name: "StrataReliabilityTests",
            dependencies: ["Strata", "StrataLMDB", "LibraryModel", "StrataTestSupport", "storectl", "strata-generate"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
