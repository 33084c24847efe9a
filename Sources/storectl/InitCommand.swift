import ArgumentParser
import Foundation
import Strata

struct InitCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init",
        abstract: "Create an empty store for the current version of a schema.",
        discussion: """
        Examples:
          storectl init ./library.strata --schema Schemas/library
          storectl init /var/lib/app/store --schema Schemas/library --json

        Fails with exit 73 when STORE already holds a store. A store whose creation
        stopped before its first commit (a full disk, a kill) is created again.
        """
    )

    @OptionGroup var target: NewStoreArgument
    @Option(
        help: ArgumentHelp("Model directory with v1.json … vN.json; the highest version is used.", valueName: "dir"))
    var schema: String
    @Flag(help: "Print the result as JSON.") var json = false

    func validate() throws {
        try refuseEmptySchema(schema)
    }

    func run() async throws {
        let loaded: Schema
        do { loaded = try Schema.load(directory: URL(fileURLWithPath: schema)) } catch { throw failure(error) }
        // Inits in one directory take turns (an exclusive `flock` on it), or two at once would
        // both open the new store and both say they had created it. The lock is let go last,
        // after a failed init has removed the parents it made (defers run in reverse order).
        var parentFD: Int32 = -1
        defer { if parentFD >= 0 { close(parentFD) } }
        // The missing parents are made here, and removed again if the store is not made.
        let parent = target.url.deletingLastPathComponent().path
        var madeParents = Self.makeParents(parent)
        var made = false
        defer { if !made { for dir in madeParents.reversed() { _ = rmdir(dir) } } }
        // A directory that cannot be opened or locked (a file in the way, a file system without
        // `flock`) only loses the turn-taking: the open below says what is wrong with the path.
        for _ in 0..<Self.parentAttempts {
            let fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard fd >= 0 else {
                // Removed since it was made (by an `init` that had made it and failed): made again.
                guard errno == ENOENT else { break }
                madeParents += Self.makeParents(parent)
                continue
            }
            while flock(fd, LOCK_EX) != 0 && errno == EINTR {}
            // The turn is taken on the directory the path names now: one removed meanwhile is
            // made again and locked.
            var locked = stat(), named = stat()
            if fstat(fd, &locked) == 0, stat(parent, &named) == 0,
               locked.st_dev == named.st_dev, locked.st_ino == named.st_ino {
                parentFD = fd
                break
            }
            close(fd)
            madeParents += Self.makeParents(parent)
        }
        try create(loaded)
        made = true
    }

    /// Times an `init` tries to open and lock the store's parent directory before it goes on
    /// without its turn (each time the directory was removed before or while it took the lock).
    static let parentAttempts = 8

    /// Makes the missing directories above a new store, outermost first, with the default mode;
    /// returns those it made. One another process made meanwhile (`EEXIST`: an `init` of a path
    /// beside this one, or of the same path) is passed over and the deeper ones are still made:
    /// stopping there would leave the store's parent missing when this `init` opens it to take its
    /// turn. One that cannot be made for another reason ends the list: the open then says why.
    static func makeParents(_ parent: String) -> [String] {
        var missing: [String] = []
        var dir = parent
        var st = stat()
        while !dir.isEmpty, dir != "/", lstat(dir, &st) != 0, errno == ENOENT {
            missing.append(dir)
            dir = (dir as NSString).deletingLastPathComponent
        }
        var made: [String] = []
        for d in missing.reversed() {
            if mkdir(d, 0o777) == 0 {
                made.append(d)
            } else if errno != EEXIST {
                break
            }
        }
        return made
    }

    private func create(_ loaded: Schema) throws {
        if Store.exists(at: target.url) {
            throw failure(CLIError("\(target.store): a store already exists here", code: Exit.cannotCreate))
        }
        do {
            let store = try Store.open(at: target.url, schema: loaded, configuration: target.configuration)
            defer { store.close() }
            // Only a store whose creation stopped before its first commit gets here with a store
            // in the directory, and such a store has no transaction: one that has is a finished
            // store beside a stray creation marker (the open just removed it).
            if try store.lastTransactionID > .zero {
                throw failure(CLIError("\(target.store): a store already exists here", code: Exit.cannotCreate))
            }
            if json {
                printJSON(.object([("path", .string(store.path)),
                                   ("schema", .object([("model", .string(loaded.model)),
                                                       ("version", .int(Int64(loaded.version)))]))]))
            } else {
                print("created \(EchoedText.escaped(store.path)) (\(loaded.model) v\(loaded.version), \(loaded.entities.count) entities)")
            }
        } catch let exit as ExitCode {
            throw exit
        } catch {
            switch error as? StrataError {
            case .modelMismatch?, .migrationRequired?, .storeTooNew?, .schemaChanged?:
                // The directory holds a finished store's metadata, of another schema.
                throw failure(CLIError("\(target.store): a store already exists here (\(error))",
                                       code: Exit.cannotCreate))
            default: break
            }
            // The store's directory could not be made (a file in the way, a read-only or
            // special file system): "cannot create", as the README says, not "not a store".
            if case StrataError.notAStore(let path, let reason) = error, reason.hasPrefix("cannot create directory") {
                // Not "not a Strata store": nothing was there, and none could be made.
                throw failure(CLIError("\(path): cannot create the store: \(reason)", code: Exit.cannotCreate))
            }
            throw failure(error)
                .withCode(Exit.code(for: error) == Exit.software ? Exit.cannotCreate : Exit.code(for: error))
        }
    }
}

extension ExitCode {
    func withCode(_ code: Int32) -> ExitCode { ExitCode(code) }
}
