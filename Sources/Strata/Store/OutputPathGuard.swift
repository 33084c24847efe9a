import Foundation
import Glibc

/// An output file refused before anything was created or truncated: writing it would land in a
/// store directory, or on one of a store's files, and damage the store.
public struct OutputPathRefusal: Error, Sendable, CustomStringConvertible, Equatable {
    /// The path as given.
    public let path: String
    /// Why the path is refused.
    public let reason: String
    /// The refusal as `path: reason` (`the path is empty …` for an empty one).
    public var description: String { path.isEmpty ? "the path \(reason)" : "\(path): \(reason)" }
}

/// The check every file Strata or `storectl` writes on a user's behalf goes through first (an
/// export, a rejects file, generated code): the file must not land inside a store.
///
/// A path is followed the way a write would follow it: through symbolic links (every link on
/// the way is checked, and the place where the last one points, also when it points at nothing
/// yet), `..` and the real directories above it. It is refused when
///
/// - the directory it would be written in is the store directory or inside it (compared by
///   device and inode, so another spelling of the same directory, a bind mount or a link to it
///   is caught too), or is inside any other Strata store directory (one holding `strata.lock` or
///   a `current` link);
/// - it names an existing file that is one of the store's files under another name (a hard
///   link: same device and inode as a file anywhere in the store directory's tree);
/// - it is the store directory itself.
///
/// Nothing is created, opened for writing or changed by the check.
public enum OutputPathGuard {
    /// Throws ``OutputPathRefusal`` when a file written at `path` would land in the store at
    /// `storeDirectory` (or in any store directory; `storeDirectory` may be nil when no store is
    /// involved, as for generated code).
    public static func check(_ path: String, storeDirectory: String?) throws(OutputPathRefusal) {
        guard !path.isEmpty else { throw OutputPathRefusal(path: path, reason: "is empty (give a file name)") }
        let store = storeDirectory.flatMap { identity(of: $0) }
        let hops = linkChain(absolute(path))
        for hop in hops {
            // The hop itself when it is a directory (an output naming the store), else the
            // directory it would be created in.
            if let id = identity(of: hop), isDirectory(hop), let store, id == store {
                throw OutputPathRefusal(
                    path: path,
                    reason: "is the store directory \(storeDirectory ?? hop) (give a file outside the store)")
            }
            let parent = (hop as NSString).deletingLastPathComponent
            if let inside = storeAbove(parent.isEmpty ? "/" : parent, store: store) {
                throw OutputPathRefusal(path: path, reason: "is inside the store directory \(inside); writing there " +
                                                            "would damage the store (give a file outside it)")
            }
        }
        // An existing file that is one of the store's files under another name (a hard link).
        guard let storeDirectory, let store, let last = hops.last, let target = identity(of: last),
              !isDirectory(last) else { return }
        if let file = storeFile(with: target, in: storeDirectory, device: store.device) {
            throw OutputPathRefusal(path: path,
                                    reason: "is the store's file \(file) under another name (a hard link); writing " +
                                            "there would damage the store (give another file)")
        }
    }

    /// A file's device and inode.
    struct Identity: Equatable {
        let device: UInt64
        let inode: UInt64
    }

    /// The device and inode of what `path` names, following links; nil when it does not exist.
    static func identity(of path: String) -> Identity? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return Identity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
    }

    static func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    /// `path` made absolute against the working directory (not resolved).
    static func absolute(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        let cwd = FileManager.default.currentDirectoryPath
        return cwd.hasSuffix("/") ? cwd + path : cwd + "/" + path
    }

    /// `path`, then where each symbolic link it is points, in turn (at most 40 links, as the
    /// kernel allows): a write through the path creates or replaces the last one, and a writer
    /// that replaces the link itself writes at the first.
    static func linkChain(_ path: String) -> [String] {
        var chain = [path]
        var current = path
        for _ in 0..<40 {
            var st = stat()
            guard lstat(current, &st) == 0, (st.st_mode & S_IFMT) == S_IFLNK else { break }
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let n = readlink(current, &buffer, buffer.count - 1)
            guard n > 0 else { break }
            let target = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            current = target.hasPrefix("/") ? target : (current as NSString).deletingLastPathComponent + "/" + target
            chain.append(current)
        }
        return chain
    }

    /// The store directory that `directory` is, or is inside, if any: `store` (by device and
    /// inode) or any directory holding `strata.lock` or a `current` link. The longest existing
    /// prefix of `directory` is resolved (`realpath`), then every directory from it up to `/` is
    /// looked at. Returns the store directory's path.
    static func storeAbove(_ directory: String, store: Identity?) -> String? {
        var existing = directory
        var resolved: String?
        while resolved == nil {
            if let real = realpath(existing, nil) {
                resolved = String(cString: real)
                free(real)
            } else {
                let up = (existing as NSString).deletingLastPathComponent
                if up == existing || up.isEmpty { return nil }
                existing = up
            }
        }
        guard var d = resolved else { return nil }
        while true {
            if let id = identity(of: d), let store, id == store { return d }
            if looksLikeStore(d) { return d }
            if d == "/" { return nil }
            let up = (d as NSString).deletingLastPathComponent
            d = up.isEmpty ? "/" : up
        }
    }

    /// Whether `directory` holds a store's lock file, or a `current` link with a generation
    /// directory beside it or a generation's name as its target. (Any link named `current` was
    /// taken for a store's: a deploy layout's `/srv/app/current -> releases/…` made every output
    /// under `/srv/app` refused.)
    static func looksLikeStore(_ directory: String) -> Bool {
        var st = stat()
        if lstat(directory + "/" + StoreDirectory.lockFile, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG { return true }
        let link = directory + "/" + StoreDirectory.currentLink
        guard lstat(link, &st) == 0, (st.st_mode & S_IFMT) == S_IFLNK else { return false }
        if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: link),
           StoreDirectory.generationNumber((target as NSString).lastPathComponent) != nil {
            return true
        }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.contains { StoreDirectory.generationNumber($0) != nil }
    }

    /// The path (relative to `root`) of a file in `root`'s tree with identity `target`, not
    /// following symbolic links and not leaving the device; nil when none has it.
    static func storeFile(with target: Identity, in root: String, device: UInt64) -> String? {
        var pending = [""]
        var visited = 0
        while let relative = pending.popLast() {
            let directory = relative.isEmpty ? root : root + "/" + relative
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { continue }
            for name in names {
                visited += 1
                // A store holds a few dozen entries; a tree this large is not a store's.
                if visited > 100_000 { return nil }
                let path = directory + "/" + name
                var st = stat()
                guard lstat(path, &st) == 0, UInt64(st.st_dev) == device else { continue }
                let entry = relative.isEmpty ? name : relative + "/" + name
                switch st.st_mode & S_IFMT {
                case S_IFDIR: pending.append(entry)
                case S_IFREG:
                    if Identity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino)) == target { return entry }
                default: continue
                }
            }
        }
        return nil
    }
}
