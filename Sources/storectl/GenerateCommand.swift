import ArgumentParser
import Foundation
import Strata

struct GenerateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "generate",
        abstract: "Generate typed Swift entities (structs with typed keys) from a schema.",
        discussion: """
        Examples:
          storectl generate --schema Schemas/library --output Sources/LibraryModel/LibraryModel.swift
          storectl generate --schema Schemas/library          # prints to stdout
        """
    )

    @Option(
        help: ArgumentHelp("Model directory with v1.json … vN.json; the highest version is used.", valueName: "dir"))
    var schema: String
    @Option(help: ArgumentHelp("File to write (default, or -: stdout).", valueName: "file"))
    var output: String?

    func run() async throws {
        let output = self.output == "-" ? nil : self.output
        // No store is named, but the file must not land in one (a store directory anywhere
        // above it): refused before the schema is read or anything is created.
        if let output {
            do {
                try OutputPathGuard.check(output, storeDirectory: nil)
            } catch {
                throw failure(error, context: "--output")
            }
        }
        let loaded: Schema
        do { loaded = try Schema.load(directory: URL(fileURLWithPath: schema)) } catch { throw failure(error) }
        if let problem = ModelGenerator.problems(in: loaded, file: schema).first { throw failure(problem) }
        let source = ModelGenerator.swiftSource(for: loaded)
        guard let output else {
            // Written at once, not through `print`: a stream whose write failed (a full disk,
            // `> /dev/full`) drops its buffer, and the flush at exit then finds nothing to fail
            // on, so the cut file would end with exit 0.
            do {
                try FileHandle.standardOutput.write(contentsOf: Data(source.utf8))
            } catch {
                throw failure(CLIError("cannot write to standard output: \(systemReason(error))", code: Exit.ioError))
            }
            return
        }
        do {
            // A device or pipe (`/dev/stdout`) is written in place; only a regular file (or a new
            // one) is replaced atomically: `.atomic` renames a new file over the path.
            // A symbolic link is written through (the new file renamed over what it points at).
            let special = SymbolicLinks.isSpecial(output)
            let path = special ? output : SymbolicLinks.followed(output)
            // A file replaced keeps its permissions and owner, as `>` would (the new file had the
            // umask's mode).
            var st = stat()
            let existing: stat? = !special && stat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFREG ? st : nil
            try Data(source.utf8).write(to: URL(fileURLWithPath: path), options: special ? [] : .atomic)
            if let existing {
                _ = chown(path, existing.st_uid, existing.st_gid)
                _ = chmod(path, existing.st_mode & 0o7777)
            }
        } catch {
            var isDirectory: ObjCBool = false
            let reason = FileManager.default.fileExists(atPath: output, isDirectory: &isDirectory)
                && isDirectory.boolValue
                ? "is a directory" : systemReason(error)
            // Out of space (or an I/O error) is 74; anything else stops the file being made: 73.
            let code = [ENOSPC, EIO, EDQUOT].contains(systemErrno(error) ?? 0) ? Exit.ioError : Exit.cannotCreate
            throw failure(CLIError(reason, code: code), context: output).withCode(code)
        }
        note("wrote \(output) (\(loaded.entities.count) entities)")
    }
}
