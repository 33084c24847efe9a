import ArgumentParser
import StrataLMDB
import Foundation
import Strata
import StrataCluster

/// storectl's exit codes (BSD sysexits.h), documented in the README.
enum Exit {
    static let usage: Int32 = 64
    static let dataError: Int32 = 65
    static let noInput: Int32 = 66
    static let software: Int32 = 70
    static let cannotCreate: Int32 = 73
    static let ioError: Int32 = 74
    static let tempFailure: Int32 = 75

    /// The exit code for an error thrown by Strata or the file system.
    static func code(for error: Error) -> Int32 {
        switch error {
        case let e as StrataError:
            switch e {
            case .schema, .validation, .corruptRecord, .corruptLogEntry, .damagedStore, .invalidQuery, .modelMismatch,
                 .migrationRequired, .storeTooNew, .schemaChanged, .entityMismatch, .saveTooLarge:
                return dataError
            case .storeNotFound, .notAStore, .insecure, .noSuchTransaction: return noInput
            case .alreadyOpen, .writerOverloaded, .tooManySnapshots, .conflict, .storeBusy: return tempFailure
            case .beforeHorizon: return noInput
            case .storeFull: return ioError
            case .readOnly: return cannotCreate
            case .lmdb(let l): return code(forLMDB: l)
            case .closed, .usedAfterFork, .migrated, .saveFromWriter, .saveInsideRead, .invalidConfiguration: return software
            case .replication(let r):
                switch r.kind {
                case .unavailable, .outcomeUnknown, .contended: return tempFailure
                case .notAttached: return cannotCreate
                case .rejectedEntry, .migrationNeeded, .saveTooLarge: return dataError
                case .behindRetention: return noInput
                }
            }
        case let e as LMDBError: return code(forLMDB: e)
        case let e as ClusterError:
            switch e.kind {
            case .badAddress, .badArgument: return usage
            case .unavailable, .replicaActive: return tempFailure
            case .noCluster, .wrongStore, .noSuchReplica: return noInput
            case .clusterExists, .storeExists, .nameTaken, .refused: return cannotCreate
            case .badSnapshot, .mustRejoin: return dataError
            }
        case is SchemaError: return dataError
        case let e as ImportIssue: return e.line == 0 ? noInput : dataError
        // What stopped it decides, not that batches were written before.
        case let e as ImportInterrupted: return code(for: e.underlying)
        case let e as CLIError: return e.code
        case is OutputPathRefusal: return usage
        case is MigrationError: return dataError
        default: return software
        }
    }

    static func code(forLMDB e: LMDBError) -> Int32 {
        // A panic follows a failed write of a commit's meta page: an I/O error.
        if e.isMapFull || e.isPanic { return ioError }
        if e.isReadersFull { return tempFailure }
        // liblmdb found a page it cannot use, a file of another format, a key of an impossible
        // size: a damaged store.
        if e.isDamage { return dataError }
        // A directory that cannot be made where its parent is missing or no directory (a scratch
        // environment under a `TMPDIR` that does not exist) is as much "cannot create" as one
        // whose parent may not be written: it exited 70 (software) and 73 for the two.
        if e.operation.hasPrefix("mkdir "), e.code == ENOENT || e.code == ENOTDIR { return cannotCreate }
        switch e.code {
        case EIO, ENOSPC, EFBIG, EDQUOT: return ioError
        case EACCES, EROFS, EPERM: return cannotCreate
        case EAGAIN, EBUSY: return tempFailure
        default: return software
        }
    }
}

/// Prints `storectl: error: …` to stderr and returns the exit code to throw.
func failure(_ error: Error, context: String? = nil) -> ExitCode {
    let text = context.map { "\($0): \(error)" } ?? "\(error)"
    // What an error echoes of its input (a path given on the command line) reaches the terminal
    // with its control characters escaped, a line break included: a value cannot print a line of
    // its own. Only the errors written as several lines (an import issue, a conflict a line),
    // whose parts are escaped where they are made, keep their lines.
    let multiline: Bool
    switch error {
    case is ImportFailed, StrataError.conflict: multiline = true
    default: multiline = false
    }
    let shown = multiline
        ? text.split(separator: "\n", omittingEmptySubsequences: false)
            .map { EchoedText.escaped(String($0)) }.joined(separator: "\n")
        : EchoedText.escaped(text)
    StandardStreams.writeError("storectl: error: \(shown)\n")
    return ExitCode(Exit.code(for: error))
}

/// The system's words for a Foundation file error (`strerror` of the POSIX error under it),
/// instead of its `Error Domain=NSCocoaErrorDomain Code=640 … UserInfo=…` description.
func systemReason(_ error: Error) -> String {
    systemErrno(error).map { String(cString: strerror($0)) } ?? (error as NSError).localizedDescription
}

/// The `errno` behind a Foundation file error, when there is one to tell.
func systemErrno(_ error: Error) -> Int32? {
    let ns = error as NSError
    if ns.domain == NSPOSIXErrorDomain { return Int32(ns.code) }
    if let underlying = ns.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
        return Int32(underlying.code)
    }
    guard ns.domain == NSCocoaErrorDomain else { return nil }
    switch CocoaError.Code(rawValue: ns.code) {
    case .fileWriteOutOfSpace: return ENOSPC
    case .fileNoSuchFile, .fileReadNoSuchFile: return ENOENT
    case .fileWriteNoPermission, .fileReadNoPermission: return EACCES
    case .fileWriteVolumeReadOnly: return EROFS
    case .fileWriteFileExists: return EEXIST
    default: return nil
    }
}

/// The usage error for an `--entity` the store's schema does not have, listing the ones it has.
func unknownEntity(_ name: String, in schema: Schema) -> CLIError {
    CLIError(
        "unknown entity '\(EchoedText.shown(name))' (known: \(schema.entities.map(\.name).joined(separator: ", ")))",
        code: Exit.usage)
}

/// Prints one line to stderr.
func note(_ text: String) {
    StandardStreams.writeError(text + "\n")
}

/// Prints a JSON document on one line to stdout.
func printJSON(_ value: JSONValue) {
    print(value.serialized)
}

/// An error found by storectl itself (an argument or a file), with its exit code.
struct CLIError: Error, CustomStringConvertible {
    let description: String
    let code: Int32
    init(_ description: String, code: Int32 = Exit.dataError) {
        self.description = description
        self.code = code
    }
}
