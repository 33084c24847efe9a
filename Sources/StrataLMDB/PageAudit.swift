import Glibc

/// A structural check of an LMDB 0.9.24 data file, made with `pread` and bounds checks before
/// liblmdb is trusted to walk it.
///
/// liblmdb trusts its pages: a page number outside the file, a node offset or size past the end of
/// its page, an overflow run past the end of the file or a page of the wrong kind makes it read
/// outside the map (a fault inside the library) or hand back a value that runs past the end of
/// the file (a fault in the code reading it). This check reads the file itself, never through the
/// map, and follows every pointer only after checking it, so damage is reported as
/// the owner's ``EnvironmentPolicy/damaged(path:reason:)`` error naming the database and page (and the key near it).
///
/// What it checks, for the meta page LMDB will use (the one with the larger transaction id) and
/// every database reachable from it (the free-page database, the main database, every named
/// database recorded in the main one):
/// - both meta pages: page flags, magic, format version, page size, last page inside the file,
///   transaction ids one apart with the parity of their page (LMDB writes meta `txnid % 2`), so a
///   damaged transaction id cannot make LMDB open the older state silently;
/// - every page: its number in range and not reached twice, its header's number equal to where it
///   is, its kind (branch or leaf, overflow where a big value points), the node array and free gap
///   inside the page;
/// - every node: inside its page, key within LMDB's limits, leaf data inside the page or an
///   overflow run inside the file, a database record only in the main database, no sorted
///   duplicates (Strata uses none);
/// - keys ascending within each page and within the bounds its parent's separators give, so a
///   lookup finds what a scan finds;
/// - each database's recorded depth, page counts and entry count equal to what the walk found.
///
/// The check reads every page of the tree once: a cost proportional to the file, like `verify`'s.
/// It is done with a read transaction open on the environment being checked (the caller's), so
/// no page of the state it checks is reused by a writer meanwhile.
package struct PageAudit {
    package static let headerSize = 16
    package static let metaMagic: UInt32 = 0xBEEF_C0DE
    package static let dataVersion: UInt32 = 1
    package static let invalidPage = UInt64.max
    package static let maxDepth = 32
    package static let freeName = "free pages"
    // Page flags (mdb.c: P_BRANCH, P_LEAF, P_OVERFLOW, P_META, P_LEAF2, P_SUBP).
    package static let pBranch: UInt16 = 0x01, pLeaf: UInt16 = 0x02, pOverflow: UInt16 = 0x04, pMeta: UInt16 = 0x08
    package static let pLeaf2: UInt16 = 0x20, pSubp: UInt16 = 0x40
    // Node flags (F_BIGDATA, F_SUBDATA, F_DUPDATA).
    package static let fBigData: UInt16 = 0x01, fSubData: UInt16 = 0x02, fDupData: UInt16 = 0x04
    // Database flags that change how LMDB reads a tree (MDB_REVERSEKEY, MDB_DUPSORT,
    // MDB_INTEGERKEY, MDB_DUPFIXED, MDB_INTEGERDUP, MDB_REVERSEDUP).
    package static let layoutFlags: UInt16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x20 | 0x40

    /// An LMDB database record (`MDB_db`, 48 bytes).
    package struct DBRecord {
        package var flags: UInt16
        package var depth: UInt16
        package var branchPages: UInt64
        package var leafPages: UInt64
        package var overflowPages: UInt64
        package var entries: UInt64
        package var root: UInt64

        package init(_ b: [UInt8], at o: Int) {
            flags = PageAudit.u16(b, o + 4)
            depth = PageAudit.u16(b, o + 6)
            branchPages = PageAudit.u64(b, o + 8)
            leafPages = PageAudit.u64(b, o + 16)
            overflowPages = PageAudit.u64(b, o + 24)
            entries = PageAudit.u64(b, o + 32)
            root = PageAudit.u64(b, o + 40)
        }
    }

    /// What the walk of one database found.
    package struct Tally {
        package var depth = 0
        package var branchPages: UInt64 = 0
        package var leafPages: UInt64 = 0
        package var overflowPages: UInt64 = 0
        package var entries: UInt64 = 0
    }

    package struct Damage: Error {
        package let reason: String
    }

    /// The meta pages moved on past the caller's transaction during the check.
    package struct Outdated: Error {}

    package let fd: Int32
    package let fileBytes: Int
    package let pageSize: Int
    package let lastPage: UInt64
    private var seen: [UInt64]
    /// The free-page database's values (key, list), checked once every tree is walked.
    private var freeLists: [([UInt8], [UInt8])] = []

    /// Checks the data file at `path` (`…/data.mdb`) as LMDB sees it at transaction `txnID`
    /// (a read transaction the caller holds open; nil: the newest meta page's).
    /// - Throws: the owner's ``EnvironmentPolicy/damaged(path:reason:)`` error for the first damage found;
    ///   ``LMDBError`` when the file cannot be read.
    /// - Throws: ``Outdated`` when commits since `txnID` overwrote its meta page (begin again).
    package static func check(dataFile path: String, store: String, txnID: UInt64?,
                              policy: any EnvironmentPolicy) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw LMDBError(code: errno, operation: "open(\(path)) for the page check") }
        // Read only.
        defer { _ = close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw LMDBError(code: errno, operation: "fstat(\(path))") }
        do {
            let metas = try readMetas(fd: fd, fileBytes: Int(st.st_size))
            var meta = metas.chosen
            if let txnID, txnID != meta.txnID {
                // A commit since the caller's transaction began wrote the other meta page; two or
                // more overwrote the caller's: the caller begins again.
                guard let own = metas.all.first(where: { $0.txnID == txnID }) else {
                    if meta.txnID > txnID { throw Outdated() }
                    throw Damage(reason: "meta pages are at transactions \(metas.all[0].txnID) and " +
                                         "\(metas.all[1].txnID), LMDB opened transaction \(txnID)")
                }
                meta = own
            }
            var audit = PageAudit(fd: fd, fileBytes: Int(st.st_size), pageSize: metas.pageSize, lastPage: meta.lastPage)
            try audit.walkAll(free: meta.free, main: meta.main)
        } catch let d as Damage {
            throw policy.damaged(path: store, reason: d.reason)
        }
    }

    /// Checks only the two meta pages of the data file at `path` (before `mdb_env_open`, which
    /// would report a damaged one as a file that is not LMDB's). An empty or missing file passes
    /// (LMDB writes new meta pages into it).
    package static func checkMetas(dataFile path: String, store: String, policy: any EnvironmentPolicy) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return }
            throw LMDBError(code: errno, operation: "open(\(path)) for the page check")
        }
        // Read only.
        defer { _ = close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw LMDBError(code: errno, operation: "fstat(\(path))") }
        guard st.st_size > 0 else { return }
        do {
            _ = try readMetas(fd: fd, fileBytes: Int(st.st_size))
        } catch let d as Damage {
            throw policy.damaged(path: store, reason: d.reason)
        }
    }

    package struct Meta {
        package var txnID: UInt64
        package var lastPage: UInt64
        package var free: DBRecord
        package var main: DBRecord
    }

    /// Reads and checks both meta pages; returns the one LMDB uses.
    package static func readMetas(
        fd: Int32, fileBytes: Int) throws -> (chosen: Meta, chosenIndex: Int, all: [Meta], pageSize: Int) {
        // The page size is meta page 0's (mm_psize): meta page 1 starts there, and meta page 1
        // must say the same.
        guard fileBytes >= 160 else {
            throw Damage(reason: "data.mdb is \(fileBytes) bytes, too short for its meta pages")
        }
        var first = [UInt8](repeating: 0, count: 160)
        try readExactly(fd, &first, at: 0)
        let pageSize = Int(u32(first, 40))
        guard pageSize >= 512 && pageSize <= 65536 && pageSize & (pageSize - 1) == 0 else {
            throw Damage(reason: "meta page 0: page size \(pageSize) is not a power of two LMDB uses")
        }
        guard fileBytes >= 2 * pageSize else {
            throw Damage(reason: "data.mdb is \(fileBytes) bytes, shorter than its two meta pages")
        }
        var metas: [Meta] = []
        for i in 0..<2 {
            var b = [UInt8](repeating: 0, count: 160)
            try readExactly(fd, &b, at: i * pageSize)
            let flags = u16(b, 10)
            guard flags & pMeta != 0 && flags & (pBranch | pLeaf | pOverflow) == 0 else {
                throw Damage(reason: "meta page \(i): page flags 0x\(String(flags, radix: 16)) are not a meta page's")
            }
            guard u64(b, 0) == UInt64(i) else {
                throw Damage(reason: "meta page \(i): its header says page \(u64(b, 0))")
            }
            guard u32(b, 16) == metaMagic else {
                throw Damage(reason: "meta page \(i): bad magic 0x\(String(u32(b, 16), radix: 16))")
            }
            guard u32(b, 20) == dataVersion else {
                throw Damage(reason: "meta page \(i): format version \(u32(b, 20)), LMDB 0.9 writes \(dataVersion)")
            }
            guard Int(u32(b, 40)) == pageSize else {
                throw Damage(reason: "meta page \(i): page size \(u32(b, 40)), meta page 0 says \(pageSize)")
            }
            let m = Meta(txnID: u64(b, 144), lastPage: u64(b, 136), free: DBRecord(b, at: 40),
                         main: DBRecord(b, at: 88))
            metas.append(m)
        }
        let chosenIndex = metas[0].txnID < metas[1].txnID ? 1 : 0
        let chosen = metas[chosenIndex], other = metas[1 - chosenIndex]
        // A commit writes meta `txnid % 2`; the other holds the commit before it (or both hold the
        // same id: a new file, a compacted copy). Anything else is a damaged transaction id, which
        // would make LMDB pick the wrong meta page.
        let consistent = (chosen.txnID == other.txnID)
            || (chosen.txnID == other.txnID + 1 && chosen.txnID % 2 == UInt64(chosenIndex))
        guard consistent else {
            throw Damage(reason: "meta pages: transaction ids \(metas[0].txnID) (page 0) and \(metas[1].txnID) (page " +
                                 "1) are not consecutive commits")
        }
        // The older meta page's state is not read, but a last page past the file's end is damage.
        for (i, m) in metas.enumerated() {
            guard m.lastPage >= 1 else { throw Damage(reason: "meta page \(i): last page \(m.lastPage)") }
            guard i == chosenIndex || m.lastPage < UInt64(fileBytes / pageSize) else {
                throw Damage(reason: "meta page \(i): last page \(m.lastPage) is past the end of the file")
            }
        }
        // Compared in pages: `(lastPage + 1) * pageSize` overflows for a damaged last page.
        guard chosen.lastPage < UInt64(fileBytes / pageSize) else {
            throw Damage(reason: "meta page \(chosenIndex): last page \(chosen.lastPage) is past the end of the file " +
                                 "(\(fileBytes / pageSize) pages)")
        }
        return (chosen, chosenIndex, metas, pageSize)
    }

    private init(fd: Int32, fileBytes: Int, pageSize: Int, lastPage: UInt64) {
        self.fd = fd
        self.fileBytes = fileBytes
        self.pageSize = pageSize
        self.lastPage = lastPage
        seen = [UInt64](repeating: 0, count: Int(lastPage) / 64 + 1)
    }

    package mutating func walkAll(free: DBRecord, main: DBRecord) throws {
        guard free.flags & (Self.layoutFlags & ~UInt16(0x08)) == 0 else {
            throw Damage(reason: "meta page: the free-page database has flags 0x\(String(free.flags, radix: 16))")
        }
        _ = try walkDatabase(Self.freeName, free, isMain: false)
        guard main.flags & Self.layoutFlags == 0 else {
            throw Damage(reason: "meta page: the main database has flags 0x\(String(main.flags, radix: 16))")
        }
        let named = try walkDatabase("main", main, isMain: true)
        for (name, record) in named {
            guard record.flags & Self.layoutFlags == 0 else {
                throw Damage(reason: "database '\(name)': flags 0x\(String(record.flags, radix: 16)) (recorded in " +
                                     "the main database)")
            }
            _ = try walkDatabase(name, record, isMain: false)
        }
        // A free list names pages a writer may reuse: one that is still part of a tree, or past
        // the last page, would have the next write overwrite live data.
        for (key, value) in freeLists {
            let at = "database '\(Self.freeName)', key \(Self.hex(key))"
            guard value.count >= 8, value.count % 8 == 0, Self.u64(value, 0) == UInt64(value.count / 8 - 1) else {
                throw Damage(reason: "\(at): a \(value.count)-byte free list whose count does not match its size")
            }
            for i in 1..<(value.count / 8) {
                let page = Self.u64(value, 8 * i)
                guard page >= 2 && page <= lastPage else {
                    throw Damage(reason: "\(at): lists page \(page), outside pages 2…\(lastPage)")
                }
                guard seen[Int(page / 64)] & (UInt64(1) << (page % 64)) == 0 else {
                    throw Damage(reason: "\(at): lists page \(page) as free, but a database still uses it")
                }
            }
        }
    }

    /// Walks one database; for the main database returns the named databases it records.
    package mutating func walkDatabase(_ name: String, _ db: DBRecord, isMain: Bool) throws -> [(String, DBRecord)] {
        var named: [(String, DBRecord)] = []
        var tally = Tally()
        if db.root == Self.invalidPage {
            guard db.depth == 0 && db.entries == 0 && db.branchPages == 0 && db.leafPages == 0
                && db.overflowPages == 0 else {
                throw Damage(reason: "database '\(name)': empty (no root page) but its record says depth " +
                                     "\(db.depth), \(db.entries) entries")
            }
            return named
        }
        guard db.depth >= 1 && Int(db.depth) <= Self.maxDepth else {
            throw Damage(reason: "database '\(name)': recorded depth \(db.depth)")
        }
        try walkPage(db.root, db: name, level: 1, depth: Int(db.depth), low: nil, high: nil, isMain: isMain,
                     path: PathPages(pageSize: pageSize), tally: &tally, named: &named)
        guard tally.entries == db.entries, tally.branchPages == db.branchPages, tally.leafPages == db.leafPages,
              tally.overflowPages == db.overflowPages else {
            throw Damage(
                reason: "database '\(name)': its record says \(db.entries) entries in \(db.branchPages) branch, " +
                        "\(db.leafPages) leaf and \(db.overflowPages) overflow pages; its pages hold " +
                        "\(tally.entries) in \(tally.branchPages), \(tally.leafPages) and \(tally.overflowPages)")
        }
        return named
    }

    private mutating func claim(_ page: UInt64, db: String, what: @autoclosure () -> String) throws {
        guard page >= 2 && page <= lastPage else {
            throw Damage(
                reason: "database '\(db)': \(what()) points to page \(page), outside pages 2…\(lastPage) of the file")
        }
        let word = Int(page / 64), bit = UInt64(1) << (page % 64)
        guard seen[word] & bit == 0 else {
            throw Damage(reason: "database '\(db)': page \(page) is reached twice (\(what()))")
        }
        seen[word] |= bit
    }

    private func readPage(_ page: UInt64) throws -> [UInt8] {
        var b = [UInt8](repeating: 0, count: pageSize)
        try Self.readExactly(fd, &b, at: Int(page) * pageSize)
        return b
    }

    /// The pages on the path from a tree's root to the page being walked, one region of
    /// `pageSize` bytes per level (level `l` at `l * pageSize`; region 0 unused), so a branch
    /// page's keys stay readable while its children are walked and no tree page is allocated
    /// (an overflow run's head page, the free lists and the named databases' records are still
    /// read into arrays of their own). A class: the walk writes a child's region while it holds
    /// offsets into its parents'.
    private final class PathPages {
        var bytes: [UInt8]
        init(pageSize: Int) { bytes = [UInt8](repeating: 0, count: (PageAudit.maxDepth + 1) * pageSize) }
    }

    /// A key inside ``PathPages``: where it starts and its length.
    private struct KeySpan {
        let start: Int, count: Int
    }

    /// The bytes of `span` (for a message or a kept free list).
    private static func bytes(_ all: UnsafeRawBufferPointer, _ span: KeySpan) -> [UInt8] {
        Array(all[span.start..<(span.start + span.count)])
    }

    /// `a` before `b` in the database's key order: bytewise (LMDB's default), or as integers for
    /// the free-page database's 8-byte transaction ids (`MDB_INTEGERKEY`).
    private static func ordered(_ all: UnsafeRawBufferPointer, _ a: KeySpan, _ b: KeySpan, integer: Bool) -> Bool {
        if integer && a.count == 8 && b.count == 8 {
            return all.loadUnaligned(fromByteOffset: a.start, as: UInt64.self).littleEndian
                < all.loadUnaligned(fromByteOffset: b.start, as: UInt64.self).littleEndian
        }
        let n = min(a.count, b.count)
        if n == 0 { return a.count < b.count }
        let c = memcmp(all.baseAddress! + a.start, all.baseAddress! + b.start, n)
        return c != 0 ? c < 0 : a.count < b.count
    }

    private mutating func walkPage(_ page: UInt64, db: String, level: Int, depth: Int, low: KeySpan?, high: KeySpan?,
                                   isMain: Bool, path: PathPages, tally: inout Tally,
                                   named: inout [(String, DBRecord)]) throws {
        let isFree = db == Self.freeName
        // Messages are built only when a check fails (formatting every key would dominate the check).
        func near(_ all: UnsafeRawBufferPointer) -> String {
            low.map { ", after key \(Self.hex(Self.bytes(all, $0)))" } ?? ""
        }
        try claim(page, db: db, what: level == 1 ? "its root"
                  : "a branch node at level \(level - 1)\(path.bytes.withUnsafeBytes { near($0) })")
        let base = level * pageSize
        try path.bytes.withUnsafeMutableBytes { all in
            try Self.readExactly(fd, UnsafeMutableRawBufferPointer(rebasing: all[base..<(base + pageSize)]),
                                 at: Int(page) * pageSize)
        }
        // The node loop reads the path's pages in place; the children are walked after it (their
        // reads write the path's next region).
        let children = try path.bytes.withUnsafeBytes { all -> [(UInt64, KeySpan?, KeySpan?)] in
            let b = UnsafeRawBufferPointer(rebasing: all[base..<(base + pageSize)])
            func u16(_ o: Int) -> UInt16 { b.loadUnaligned(fromByteOffset: o, as: UInt16.self).littleEndian }
            func u64(_ o: Int) -> UInt64 { b.loadUnaligned(fromByteOffset: o, as: UInt64.self).littleEndian }
            func whereText() -> String { "database '\(db)', page \(page)\(near(all))" }
            guard u64(0) == page else {
                throw Damage(reason: "\(whereText()): its header says page \(u64(0))")
            }
            let flags = u16(10)
            let isBranch = flags & Self.pBranch != 0, isLeaf = flags & Self.pLeaf != 0
            guard isBranch != isLeaf, flags & (Self.pOverflow | Self.pMeta | Self.pLeaf2 | Self.pSubp) == 0 else {
                throw Damage(
                    reason: "\(whereText()): page flags 0x\(String(flags, radix: 16)) are not a branch or leaf page's")
            }
            guard isLeaf == (level == depth) else {
                throw Damage(reason: "\(whereText()): a \(isLeaf ? "leaf" : "branch") page at level \(level) of a " +
                                     "tree of depth \(depth)")
            }
            let lower = Int(u16(12)), upper = Int(u16(14))
            guard lower >= Self.headerSize, lower % 2 == 0, lower <= upper, upper <= pageSize else {
                throw Damage(
                    reason: "\(whereText()): node array bounds \(lower)…\(upper) do not fit a \(pageSize)-byte page")
            }
            let count = (lower - Self.headerSize) / 2
            guard count > 0 else { throw Damage(reason: "\(whereText()): no nodes") }
            if isBranch {
                tally.branchPages += 1
                guard count >= 2 || level == 1 else {
                    throw Damage(reason: "\(whereText()): a branch page with \(count) node")
                }
            } else {
                tally.leafPages += 1
            }
            var previous: KeySpan? = nil
            var children: [(UInt64, KeySpan?, KeySpan?)] = []
            for i in 0..<count {
                let offset = Int(u16(Self.headerSize + 2 * i))
                guard offset >= upper, offset + 8 <= pageSize else {
                    throw Damage(reason: "\(whereText()): node \(i) at offset \(offset) is outside the page's node " +
                                         "area \(upper)…\(pageSize)")
                }
                let lo = UInt64(u16(offset)), hi = UInt64(u16(offset + 2))
                let nodeFlags = u16(offset + 4)
                let keySize = Int(u16(offset + 6))
                guard keySize <= LMDBLimits.maxKeyBytes, offset + 8 + keySize <= pageSize else {
                    throw Damage(reason: "\(whereText()): node \(i)'s \(keySize)-byte key runs past the page")
                }
                let key = KeySpan(start: base + offset + 8, count: keySize)
                func keyText() -> String { "\(whereText()), key \(Self.hex(Self.bytes(all, key)))" }
                // Node 0 of a branch page has no key of its own (its bound is the parent's).
                if !(isBranch && i == 0) {
                    guard keySize > 0 else { throw Damage(reason: "\(whereText()): node \(i) has an empty key") }
                    // The free-page database's keys are transaction ids (MDB_INTEGERKEY): compared
                    // as integers; every other database's bytewise.
                    if isFree, keySize != 8 {
                        throw Damage(reason: "\(keyText()): a \(keySize)-byte key in the free-page database")
                    }
                    if let previous, !Self.ordered(all, previous, key, integer: isFree) {
                        throw Damage(reason: "\(keyText()): keys out of order (node \(i))")
                    }
                    if let low, Self.ordered(all, key, low, integer: isFree) {
                        throw Damage(reason: "\(keyText()): below its parent's separator \(Self.hex(Self.bytes(all, low)))")
                    }
                    if let high, !Self.ordered(all, key, high, integer: isFree) {
                        throw Damage(reason: "\(keyText()): not below the next separator " +
                                             "\(Self.hex(Self.bytes(all, high))) of its parent")
                    }
                    previous = key
                }
                if isBranch {
                    let child = lo | hi << 16 | UInt64(nodeFlags) << 32
                    children.append((child, i == 0 ? low : key, nil))
                    continue
                }
                tally.entries += 1
                let dataSize = Int(lo | hi << 16)
                guard nodeFlags & ~(Self.fBigData | Self.fSubData) == 0 else {
                    throw Damage(reason: "\(keyText()): node flags 0x\(String(nodeFlags, radix: 16)) (sorted " +
                                         "duplicates are not used)")
                }
                let dataStart = offset + 8 + keySize
                if nodeFlags & Self.fBigData != 0 {
                    guard nodeFlags & Self.fSubData == 0, dataStart + 8 <= pageSize else {
                        throw Damage(reason: "\(keyText()): a big value's page number runs past the page")
                    }
                    let first = u64(dataStart)
                    let pages = UInt64((Self.headerSize + dataSize + pageSize - 1) / pageSize)
                    try claim(first, db: db, what: "the value of key \(Self.hex(Self.bytes(all, key)))")
                    guard first + pages - 1 <= lastPage else {
                        throw Damage(reason: "\(keyText()): its \(dataSize)-byte value on pages " +
                                             "\(first)…\(first + pages - 1) runs past the last page \(lastPage)")
                    }
                    let head = try readPage(first)
                    guard Self.u64(head, 0) == first, Self.u16(head, 10) & Self.pOverflow != 0,
                          UInt64(Self.u32(head, 12)) == pages else {
                        throw Damage(reason: "\(keyText()): page \(first), which holds its \(dataSize)-byte value, " +
                                             "is not an overflow page of \(pages) page(s)")
                    }
                    for p in (first + 1)..<(first + pages) {
                        try claim(p, db: db, what: "the value of key \(Self.hex(Self.bytes(all, key)))")
                    }
                    tally.overflowPages += pages
                    if isFree {
                        var value = [UInt8](repeating: 0, count: dataSize)
                        try Self.readExactly(fd, &value, at: Int(first) * pageSize + Self.headerSize)
                        freeLists.append((Self.bytes(all, key), value))
                    }
                } else {
                    guard dataStart + dataSize <= pageSize else {
                        throw Damage(reason: "\(keyText()): its \(dataSize)-byte value runs past the page")
                    }
                    if isFree { freeLists.append((Self.bytes(all, key), Array(b[dataStart..<(dataStart + dataSize)]))) }
                    if nodeFlags & Self.fSubData != 0 {
                        guard isMain, dataSize == 48 else {
                            throw Damage(reason: "\(keyText()): a database record where none belongs")
                        }
                        named.append((String(decoding: Self.bytes(all, key), as: UTF8.self),
                                      DBRecord(Array(b[dataStart..<(dataStart + dataSize)]), at: 0)))
                    }
                }
            }
            return children
        }
        for (n, child) in children.enumerated() {
            let upperBound = n + 1 < children.count ? children[n + 1].1 : high
            try walkPage(child.0, db: db, level: level + 1, depth: depth, low: child.1, high: upperBound,
                         isMain: isMain, path: path, tally: &tally, named: &named)
        }
    }

    // MARK: Bytes

    package static func readExactly(_ fd: Int32, _ buffer: inout [UInt8], at offset: Int) throws {
        try buffer.withUnsafeMutableBytes { try readExactly(fd, $0, at: offset) }
    }

    /// Fills `buffer` with the file's bytes at `offset` (`pread`, again after a short read or `EINTR`).
    package static func readExactly(_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws {
        var done = 0
        let wanted = buffer.count
        while done < wanted {
            let n = pread(fd, buffer.baseAddress! + done, wanted - done, off_t(offset + done))
            if n < 0 {
                if errno == EINTR { continue }
                throw LMDBError(code: errno, operation: "pread(data.mdb, offset \(offset + done))")
            }
            if n == 0 {
                throw Damage(reason: "data.mdb ends at byte \(offset + done), inside the \(wanted) bytes read at " +
                                     "offset \(offset)")
            }
            done += n
        }
    }

    package static func u16(_ b: [UInt8], _ o: Int) -> UInt16 { UInt16(b[o]) | UInt16(b[o + 1]) << 8 }
    package static func u32(_ b: [UInt8], _ o: Int) -> UInt32 { UInt32(u16(b, o)) | UInt32(u16(b, o + 2)) << 16 }
    package static func u64(_ b: [UInt8], _ o: Int) -> UInt64 { UInt64(u32(b, o)) | UInt64(u32(b, o + 4)) << 32 }

    /// LMDB's default key order: bytes compared as unsigned, a prefix first.
    package static func less(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        let n = min(a.count, b.count)
        if n == 0 { return a.count < b.count }
        let c = a.withUnsafeBytes { ab in b.withUnsafeBytes { bb in memcmp(ab.baseAddress!, bb.baseAddress!, n) } }
        return c != 0 ? c < 0 : a.count < b.count
    }

    package static func hex(_ key: [UInt8]) -> String {
        let shown = key.prefix(24)
            .map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
        return "0x" + shown + (key.count > 24 ? "…" : "")
    }
}
