import Dispatch
import Foundation
import Strata

/// Shared pieces of the fuzz targets: the library schema, one temporary store per process
/// (relaxed durability: the fuzzer is after parser bugs, not fsync), and a way to run the async
/// importer from libFuzzer's synchronous callback.
public enum FuzzSupport {
    /// The repository root (four levels above this file), or `STRATA_ROOT`.
    public static let repositoryRoot: URL = {
        if let root = ProcessInfo.processInfo.environment["STRATA_ROOT"] { return URL(fileURLWithPath: root) }
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<5 { url.deleteLastPathComponent() }
        return url
    }()

    public static let schema: Schema = {
        do { return try Schema.load(directory: repositoryRoot.appendingPathComponent("Schemas/library")) } catch {
            fatalError("fuzz: cannot load Schemas/library: \(error)")
        }
    }()

    public static let store: Store = {
        var config = StoreConfiguration()
        config.durability = .relaxed
        do { return try Store.temporary(schema: schema, configuration: config) } catch {
            fatalError("fuzz: cannot create the temporary store: \(error)")
        }
    }()

    /// A scratch directory for input files, one per process.
    public static let scratch: String = {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("strata-fuzz-\(getpid())").path
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }()

    /// Runs the importer on `bytes` written to `scratch/name`. Every outcome but a crash is fine:
    /// a refused import (``ImportFailed``, ``ImportIssue``, a ``StrataError``) is the parser doing its job.
    public static func importFile(_ bytes: UnsafeRawBufferPointer, name: String, options: ImportOptions = ImportOptions()) {
        let path = scratch + "/" + name
        guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else { fatalError("fuzz: cannot write \(path)") }
        let importer = Importer(store: store, options: options)
        let done = DispatchSemaphore(value: 0)
        Task {
            _ = try? await importer.run(files: [path])
            done.signal()
        }
        done.wait()
    }
}

import CFuzzDriver

/// The signature libFuzzer calls for each input.
public typealias FuzzCallback = @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt

/// Runs libFuzzer with the process's arguments (what each target's `<module>_main` returns).
public func runFuzzer(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ callback: FuzzCallback) -> CInt {
    var count = argc
    var vector = argv
    return LLVMFuzzerRunDriver(&count, &vector, callback)
}
