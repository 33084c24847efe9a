import Foundation

/// Where things are, found from this source file's location at build time (the harness lives in
/// `Tools/Benchmarks` of the Strata repository) or from the working directory.
enum Paths {
    /// The repository root: the first directory above this source file that has `Schemas/library`.
    static var repositoryRoot: URL? {
        var url = URL(fileURLWithPath: #filePath)
        while url.path != "/" {
            url.deleteLastPathComponent()
            if FileManager.default.fileExists(atPath: url.appendingPathComponent("Schemas/library").path) { return url }
        }
        let cwd = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
        return FileManager.default.fileExists(atPath: cwd.appendingPathComponent("Schemas/library").path) ? cwd : nil
    }

    static var defaultSchemaDirectory: URL? { repositoryRoot?.appendingPathComponent("Schemas/library") }

    /// `<repository>/.bench-data`: on the real disk, unlike `/tmp`, which may be tmpfs.
    static var defaultDataDirectory: URL {
        (repositoryRoot ?? URL(fileURLWithPath: FileManager.default.currentDirectoryPath)).appendingPathComponent(".bench-data")
    }

    /// The `storectl` binary W11 runs: the path in `STRATA_BENCH_STORECTL`, which `Tools/bench`
    /// sets to the release build it makes; nil when unset or not an executable file.
    static var storectl: String? {
        guard let path = ProcessInfo.processInfo.environment["STRATA_BENCH_STORECTL"], !path.isEmpty,
              FileManager.default.isExecutableFile(atPath: path) else { return nil }
        return path
    }

    /// This executable (to re-run it as a child process).
    static var executable: String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    }
}
