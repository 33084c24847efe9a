import ArgumentParser
import Foundation
import Strata

struct ExportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Export entities' records as NDJSON or CSV, from one snapshot, while writes go on.",
        discussion: """
        The output can be imported again: records carry their ids and relationships by id. \
        Several entities (--entity repeated, or --all) are read from one snapshot, so the files \
        agree with each other whatever is saved meanwhile, and import again in any order. NDJSON \
        goes to one output (each line names its entity) or, with --output-dir, to a file per \
        entity; CSV of several entities needs --output-dir (DIR/ENTITY.csv, the name import reads \
        the entity from). Every file is written beside its destination and renamed over it once \
        the whole export has been written and synced: a failure while reading or writing replaces none.

        Examples:
          storectl export ./library.strata --entity Track > tracks.ndjson
          storectl export ./library.strata --entity Album --format csv --output Album.csv
          storectl export ./library.strata --entity Track --where "durationSeconds > 600"
          storectl export ./library.strata --all > library.ndjson
          storectl export ./library.strata --all --format csv --output-dir dump
        """
    )

    @OptionGroup var target: StoreArgument
    @Option(name: .customLong("entity"),
            help: ArgumentHelp("Entity to export (repeatable: several from one snapshot).", valueName: "name"))
    var entities: [String] = []
    @Flag(help: "Export every entity of the schema, from one snapshot.") var all = false
    @Option(help: "ndjson or csv.") var format = "ndjson"
    @Option(help: ArgumentHelp("File to write (default, or -: stdout). A file that exists is replaced whole, "
                               + "keeping its permissions.", valueName: "file"))
    var output: String?
    @Option(help: ArgumentHelp("Directory to write a file per entity in (ENTITY.ndjson or ENTITY.csv; made "
                               + "if missing, its parent must exist).", valueName: "dir"))
    var outputDir: String?
    @Option(name: .customLong("where"),
            help: ArgumentHelp("Filter (repeatable: every one must hold; see `storectl query --help`).", valueName: "expr"))
    var filters: [String] = []

    func validate() throws {
        guard ImportFormat(rawValue: format) != nil else { throw ValidationError("--format must be ndjson or csv") }
        if all && !entities.isEmpty { throw ValidationError("give --entity or --all, not both") }
        if !all && entities.isEmpty { throw ValidationError("give the entity to export (--entity NAME) or --all") }
        if output != nil && outputDir != nil { throw ValidationError("give --output or --output-dir, not both") }
        // As an empty --output is: the files would land in the current directory by their bare names.
        if outputDir == "" { throw ValidationError("--output-dir: the path is empty (give a directory)") }
        let several = all || Set(entities).count > 1
        if several && !filters.isEmpty {
            throw ValidationError("--where filters one entity's records: export that entity alone")
        }
        if several && format == "csv" && outputDir == nil {
            throw ValidationError("CSV of several entities is a file per entity: give --output-dir")
        }
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
        var names: [String] = []
        for name in all ? store.schema.entities.map(\.name) : entities where !names.contains(name) {
            guard store.schema.entity(named: name) != nil else { throw failure(unknownEntity(name, in: store.schema)) }
            names.append(name)
        }
        let format = ImportFormat(rawValue: format)!
        // The filters are read before the directory is made: a usage error writes nothing.
        let query = names.count == 1 ? try query(names[0], in: store) : nil
        let paths = try outputDir.map { try filePaths(names, format: format, in: $0) } ?? [:]
        if let query {
            try exportOne(query, format: format, from: store, to: paths[names[0]] ?? output)
            return
        }
        try exportSeveral(names, format: format, from: store, to: output, paths: paths)
    }

    /// The query of one entity's export, with its `--where` filters.
    private func query(_ name: String, in store: Store) throws -> Query {
        guard let e = store.schema.entity(named: name) else { throw failure(unknownEntity(name, in: store.schema)) }
        var query = Query(entity: e.name)
        do {
            if let filter = try QueryCommand.filter(filters, entity: e, schema: store.schema) { query.predicate = filter }
        } catch let error as CLIError {
            throw failure(error)
        } catch {
            throw failure(CLIError("--where: \(error)", code: Exit.usage))
        }
        return query
    }

    /// The file of each entity in `directory` (made when missing), each checked to be outside
    /// any store.
    private func filePaths(_ names: [String], format: ImportFormat, in directory: String) throws -> [String: String] {
        var paths: [String: String] = [:]
        // Two entities whose names differ only in case would be one file on a file system that
        // ignores case (vfat, exFAT, SMB, a casefolded ext4 directory): one export over the other.
        var lowered: [String: String] = [:]
        for name in names {
            if let other = lowered.updateValue(name, forKey: name.lowercased()) {
                throw failure(CLIError("""
                    \(directory): the entities \(other) and \(name) would be written to files whose names differ only \
                    in case, one file where case is ignored; export them apart
                    """, code: Exit.usage), context: "--output-dir")
            }
        }
        var lst = stat(), st = stat()
        if lstat(directory, &lst) == 0, lst.st_mode & S_IFMT == S_IFLNK, stat(directory, &st) != 0 {
            throw failure(CLIError("\(directory): a symbolic link to nothing (give a directory)", code: Exit.cannotCreate),
                          context: "--output-dir")
        }
        var destinations: [String: String] = [:]
        for name in names {
            let path = (directory as NSString).appendingPathComponent("\(name).\(format.rawValue)")
            do {
                try OutputPathGuard.check(path, storeDirectory: target.store)
            } catch {
                throw failure(error, context: "--output-dir")
            }
            // A file there may be a link to another entity's file: both would go to one file.
            var where_ = SymbolicLinks.followed(path)
            if stat(path, &st) == 0 { where_ = "\(st.st_dev):\(st.st_ino)" }
            if let other = destinations.updateValue(name, forKey: where_) {
                throw failure(CLIError("\(path): the same file as \(other)'s (a link); give a directory of plain files",
                                       code: Exit.usage), context: "--output-dir")
            }
            paths[name] = path
        }
        var isDirectory: ObjCBool = false
        if !FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory) {
            if mkdir(directory, 0o777) != 0 && errno != EEXIST {
                throw failure(CLIError("\(directory): cannot make the directory: \(String(cString: strerror(errno)))",
                                       code: Exit.cannotCreate), context: "--output-dir")
            }
        } else if !isDirectory.boolValue {
            throw failure(CLIError("\(directory): not a directory", code: Exit.cannotCreate), context: "--output-dir")
        }
        return paths
    }

    /// One entity to one output, with its `--where` filters.
    private func exportOne(_ query: Query, format: ImportFormat, from store: Store, to output: String?) throws {
        let sink: OutputSink
        do {
            sink = try OutputSink(path: output)
        } catch {
            throw failure(error, context: output).withCode(Exit.cannotCreate)
        }
        do {
            let result = try Exporter(store: store).export(query, format: format) {
                try sink.write($0)
            }
            try sink.close()
            if output != nil {
                note("exported \(result.records) \(query.entity) record(s) as of transaction \(result.transaction)")
            }
        } catch {
            sink.discard()
            throw failure(error).withCode(Exit.code(for: error) == Exit.software ? Exit.ioError : Exit.code(for: error))
        }
    }

    /// Several entities from one snapshot: to one output (NDJSON), or a file per entity in
    /// `--output-dir`, every file renamed into place only once all are written and synced.
    private func exportSeveral(_ names: [String], format: ImportFormat, from store: Store, to output: String?,
                               paths: [String: String]) throws {
        // One sink per file: the one output, or each entity's file in the directory.
        var sinks: [OutputSink] = []
        func discardAll() { for sink in sinks { sink.discard() } }
        for path in outputDir == nil ? [output] : names.map({ paths[$0] }) {
            do {
                sinks.append(try OutputSink(path: path))
            } catch {
                discardAll()
                throw failure(error, context: path).withCode(Exit.cannotCreate)
            }
        }
        let sinkOf = Dictionary(uniqueKeysWithValues: names.enumerated().map { ($1, outputDir == nil ? 0 : $0) })
        let result: (records: [(entity: String, records: Int)], transaction: TransactionID)
        do {
            result = try Exporter(store: store).export(entities: names, format: format) { name, line in
                guard let k = sinkOf[name] else { preconditionFailure("an entity exported was not asked for: \(name)") }
                try sinks[k].write(line)
            }
            // Every file written and synced before any is renamed: a full disk found in the last
            // one replaces none.
            for sink in sinks { try sink.finishWriting() }
        } catch {
            discardAll()
            throw failure(error).withCode(Exit.code(for: error) == Exit.software ? Exit.ioError : Exit.code(for: error))
        }
        // The renames: each file was checked to be one this process may replace when it was
        // opened, so one fails only if the directory changed meanwhile; the message then says
        // which files were replaced already.
        for (k, sink) in sinks.enumerated() {
            do {
                try sink.renameIntoPlace()
            } catch {
                for rest in sinks[(k + 1)...] { rest.discard() }
                let replaced = outputDir == nil ? [] : names[..<k].compactMap { paths[$0] }
                if !replaced.isEmpty {
                    note("replaced before the failure: \(replaced.map(EchoedText.escaped).joined(separator: ", "))")
                }
                throw failure(error)
            }
        }
        if output != nil || outputDir != nil {
            for (name, n) in result.records {
                // Escaped as every echoed path is: a control character in it reached the terminal.
                let place = paths[name].map { " to \(EchoedText.escaped($0))" } ?? ""
                note("exported \(n) \(name) record(s)\(place)")
            }
        }
        // Also when the records went to standard output: the one transaction they all hold.
        note("as of transaction \(result.transaction)")
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
                    // In a sticky directory (/tmp), only the file's owner, the directory's or
                    // root may rename over it: refused now, before anything is written, not at
                    // the rename after the whole export.
                    var dir = stat()
                    let parent = (path as NSString).deletingLastPathComponent
                    let me = geteuid()
                    if me != 0, stat(parent.isEmpty ? "." : parent, &dir) == 0, dir.st_mode & S_ISVTX != 0,
                       st.st_uid != me, dir.st_uid != me {
                        throw CLIError("""
                            cannot replace it: another user's file in a sticky directory, which only its owner may \
                            replace; write to another path
                            """, code: Exit.cannotCreate)
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
                    // Nothing written yet; the error thrown says why the file is not made.
                    _ = Glibc.close(fd)
                    _ = unlink(tmp)
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
        try finishWriting()
        try renameIntoPlace()
    }

    /// Writes what is buffered and, for a file, syncs it (without renaming it yet): a write error
    /// or a full disk shows here, so an export of several files can find it in every file before
    /// it renames any.
    func finishWriting() throws {
        try flush()
        guard temporary != nil, let destination else { return }
        do {
            try handle.synchronize()
        } catch {
            try? handle.close()
            throw CLIError("cannot write \(destination): \(systemReason(error))", code: Exit.ioError)
        }
    }

    /// Renames the file, written and synced by ``finishWriting()``, over its destination, and
    /// closes it (standard output and devices: nothing to do).
    func renameIntoPlace() throws {
        guard let temporary, let destination else { return }
        // rename(2) replaces a file atomically and fails on a directory (never removed). Done
        // while the file is still open, so still locked: another export's removal of leftovers
        // (unlocked partial files) cannot take it first.
        guard Glibc.rename(temporary, destination) == 0 else {
            let reason = String(cString: strerror(errno))
            // The partial file goes; the error thrown is the rename's.
            _ = unlink(temporary)
            try? handle.close()
            throw CLIError("cannot write \(destination): \(reason)", code: Exit.cannotCreate)
        }
        do {
            try handle.close()
        } catch {
            throw CLIError("cannot write \(destination): \(systemReason(error))", code: Exit.ioError)
        }
    }

    /// After a failure: removes the partial file (stdout is left as written).
    func discard() {
        guard let temporary else { return }
        try? handle.close()
        // One that cannot be removed is a leftover the next export removes (`removeLeftovers`).
        _ = unlink(temporary)
    }
}
