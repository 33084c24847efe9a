import ArgumentParser
import Foundation
import Strata

struct ExportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Export an entity's records as NDJSON or CSV, from one snapshot, while writes go on.",
        discussion: """
        The output can be imported again: records carry their ids and relationships by id.

        Examples:
          storectl export ./library.strata --entity Track > tracks.ndjson
          storectl export ./library.strata --entity Album --format csv --output Album.csv
          storectl export ./library.strata --entity Track --where "durationSeconds > 600"
        """
    )

    @OptionGroup var target: StoreArgument
    @Option(help: ArgumentHelp("Entity to export.", valueName: "name")) var entity: String
    @Option(help: "ndjson or csv.") var format = "ndjson"
    @Option(help: ArgumentHelp("File to write (default, or -: stdout). A file that exists is replaced whole, "
                               + "keeping its permissions.", valueName: "file"))
    var output: String?
    @Option(name: .customLong("where"),
            help: ArgumentHelp("Filter (repeatable: every one must hold; see `storectl query --help`).", valueName: "expr"))
    var filters: [String] = []

    func validate() throws {
        guard ImportFormat(rawValue: format) != nil else { throw ValidationError("--format must be ndjson or csv") }
    }

    func run() async throws {
        // `-` is standard output, as for most tools that write a file.
        let output = self.output == "-" ? nil : self.output
        // Before anything is opened or created: an output inside the store would destroy it.
        if let output {
            do {
                try OutputPathGuard.check(output, storeDirectory: target.store)
            } catch {
                throw failure(error, context: "--output")
            }
        }
        let store: Store
        do {
            store = try Store.openReadOnly(at: target.url, configuration: target.configuration)
            noteUnfinishedClusterInit(store)
        } catch {
            throw failure(error)
        }
        defer { store.close() }
        guard let e = store.schema.entity(named: entity) else {
            throw failure(unknownEntity(entity, in: store.schema))
        }
        var query = Query(entity: e.name)
        do {
            if let filter = try QueryCommand.filter(filters, entity: e, schema: store.schema) { query.predicate = filter }
        } catch let error as CLIError {
            throw failure(error)
        } catch {
            throw failure(CLIError("--where: \(error)", code: Exit.usage))
        }
        let sink: OutputSink
        do {
            sink = try OutputSink(path: output)
        } catch {
            throw failure(error, context: output).withCode(Exit.cannotCreate)
        }
        do {
            let result = try Exporter(store: store).export(query, format: ImportFormat(rawValue: format)!) {
                try sink.write($0)
            }
            try sink.close()
            if output != nil {
                note("exported \(result.records) \(e.name) record(s) as of transaction \(result.transaction)")
            }
        } catch {
            sink.discard()
            throw failure(error).withCode(Exit.code(for: error) == Exit.software ? Exit.ioError : Exit.code(for: error))
        }
    }
}

/// Buffered line output to a file or stdout. A file is written beside its destination as
/// `FILE.partial-PID-HEX` and renamed over it by ``close()`` (the destination holds the old file or
/// the whole new one, never part of it); ``discard()`` removes it after a failure. A destination
/// that is a directory is refused, a device, pipe or socket is written to in place, and a
/// descriptor of the process (`/dev/stdout`, whatever it leads to) through a duplicate of it:
/// none is ever replaced.
final class OutputSink {
    private let handle: FileHandle
    private let temporary: String?
    private let destination: String?
    private var buffer = Data()

    init(path given: String?) throws {
        // A symbolic link is written through: the new file is renamed over what it points at
        // (also when that does not exist yet: the link stays a link). A device or pipe, also
        // through a link (`/dev/stdout`), is opened as given.
        // A descriptor of this process (`/dev/stdout`, also when the shell sent it to a file) is
        // written through a duplicate of it, sharing its offset: `>> log` keeps what log held.
        if let given, let link = SymbolicLinks.unfollowableLink(given) {
            throw CLIError("""
                refused to write through \(link): a symbolic link in a sticky directory that anyone may write, owned \
                by another user (the kernel refuses a shell's redirection through it too); write to another path
                """, code: Exit.cannotCreate)
        }
        if let given, let n = SymbolicLinks.descriptor(given) {
            let fd = fcntl(n, F_DUPFD_CLOEXEC, 0)
            guard fd >= 0 else {
                throw CLIError("cannot write to descriptor \(n): \(String(cString: strerror(errno)))",
                               code: Exit.cannotCreate)
            }
            handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
            destination = given
            temporary = nil
            return
        }
        let path = given.map { SymbolicLinks.isSpecial($0) ? $0 : SymbolicLinks.followed($0) }
        destination = path
        if let path {
            var st = stat()
            if stat(path, &st) == 0 {
                switch st.st_mode & S_IFMT {
                case S_IFREG:
                    // A file this process may not write is not replaced by one it makes, as `>`
                    // would not write it.
                    if faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) != 0 {
                        throw CLIError("cannot write: \(String(cString: strerror(errno)))", code: Exit.cannotCreate)
                    }
                case S_IFDIR: throw CLIError("is a directory (give a file name)", code: Exit.cannotCreate)
                default:
                    // A device, a pipe or a socket (`/dev/stdout`, a FIFO): written to directly,
                    // never replaced by a renamed file.
                    guard let h = FileHandle(forWritingAtPath: path) else {
                        throw CLIError("cannot open for writing: \(String(cString: strerror(errno)))",
                                       code: Exit.cannotCreate)
                    }
                    handle = h
                    temporary = nil
                    return
                }
            }
            Self.removeLeftovers(of: path)
            // The process id and a random part: a process of the same id (a container's first
            // process, run again) must not find the file of a killed one in its way.
            let tmp = path + ".partial-\(getpid())-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))"
            // A file replaced keeps its permissions (and, where the process may, its owner), as
            // `>` would: a private file did not stay private, renamed over by one of the umask's
            // mode. Made with them from the start, so the partial file is no more readable.
            let existing: stat? = stat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFREG ? st : nil
            let mode = existing.map { $0.st_mode & 0o7777 } ?? 0o666
            let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
            guard fd >= 0 else {
                throw CLIError("cannot create \(tmp): \(String(cString: strerror(errno)))", code: Exit.cannotCreate)
            }
            if let existing {
                // The umask took bits off at open: the old file's mode exactly.
                // Owner and group where the process may set them; the group alone when it may
                // not set the owner (another user's file: Linux refuses both in one call then).
                // A group that cannot be kept takes the group's and others' bits off, so that
                // the file is not opened to a group it was not open to.
                var mode = existing.st_mode & 0o7777
                if fchown(fd, existing.st_uid, existing.st_gid) != 0 && fchown(fd, uid_t.max, existing.st_gid) != 0 {
                    mode &= ~0o077
                }
                guard fchmod(fd, mode) == 0 else {
                    let reason = String(cString: strerror(errno))
                    Glibc.close(fd)
                    unlink(tmp)
                    throw CLIError("cannot set the mode of \(tmp): \(reason)", code: Exit.cannotCreate)
                }
            }
            handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
            // Held until the process ends, however it ends: a file nobody holds is a leftover.
            _ = flock(handle.fileDescriptor, LOCK_EX | LOCK_NB)
            temporary = tmp
        } else {
            handle = FileHandle.standardOutput
            temporary = nil
        }
    }

    /// Removes the `FILE.partial-PID-HEX` files that exports to `path` killed before they finished
    /// left beside it (``LeftoverFiles``: an export holds its own from its start to its end).
    static func removeLeftovers(of path: String) {
        let url = URL(fileURLWithPath: path)
        let prefix = url.lastPathComponent + ".partial-"
        LeftoverFiles.remove(in: url.deletingLastPathComponent().path) { name in
            // `PID` (older exports) or `PID-HEX`.
            let rest = name.dropFirst(prefix.count)
            guard name.hasPrefix(prefix) else { return false }
            let parts = rest.split(separator: "-", omittingEmptySubsequences: false)
            guard (1...2).contains(parts.count), !parts[0].isEmpty, parts[0].allSatisfy({ ("0"..."9").contains($0) })
            else { return false }
            return parts.count == 1 || (!parts[1].isEmpty && parts[1].allSatisfy(\.isHexDigit))
        }
    }

    /// Appends `bytes` as they are (no line end).
    func write(bytes: Data) throws {
        buffer.append(bytes)
        if buffer.count >= 1 << 16 { try flush() }
    }

    func write(_ line: String) throws {
        buffer.append(contentsOf: line.utf8)
        buffer.append(0x0A)
        if buffer.count >= 1 << 16 { try flush() }
    }

    private func flush() throws {
        do { try handle.write(contentsOf: buffer) } catch {
            // A reader that went away (`| head`), with SIGPIPE ignored by the parent: ended as
            // SIGPIPE would end it, as every other output of storectl is.
            if destination == nil, systemErrno(error) == EPIPE { StandardStreams.endByClosedPipe() }
            throw CLIError("cannot write \(destination ?? "to standard output"): \(systemReason(error))",
                           code: Exit.ioError)
        }
        buffer.removeAll(keepingCapacity: true)
    }

    /// Writes what is buffered; for a file, syncs it and renames it over the destination.
    func close() throws {
        try flush()
        if let temporary, let destination {
            do {
                try handle.synchronize()
            } catch {
                try? handle.close()
                throw CLIError("cannot write \(destination): \(systemReason(error))", code: Exit.ioError)
            }
            // rename(2) replaces a file atomically and fails on a directory (never removed). Done
            // while the file is still open, so still locked: another export's removal of leftovers
            // (unlocked partial files) cannot take it first.
            guard rename(temporary, destination) == 0 else {
                let reason = String(cString: strerror(errno))
                unlink(temporary)
                try? handle.close()
                throw CLIError("cannot write \(destination): \(reason)", code: Exit.cannotCreate)
            }
            do {
                try handle.close()
            } catch {
                throw CLIError("cannot write \(destination): \(systemReason(error))", code: Exit.ioError)
            }
        }
    }

    /// After a failure: removes the partial file (stdout is left as written).
    func discard() {
        guard let temporary else { return }
        try? handle.close()
        unlink(temporary)
    }
}
