import Foundation
import LibraryModel
import Testing
@testable import Strata
import StrataLMDB

/// A damaged data file where liblmdb itself would trust it (a page number outside the file, a
/// value size past its page, a meta page): every storectl read command exits 65 naming the
/// database and page, never a signal; `Store.verify()` reports it as `damagedStore`.
/// The long run is `Tools/reliability/flip-campaign --cli`.
@Suite(.serialized) struct StoreDamageTests {
    static let pageSize = 4096
    static let readCommands: [[String]] = [["info"], ["verify"], ["query", "--entity", "Track", "--where", "durationSeconds > 10"],
                                           ["export", "--entity", "Track"], ["log"]]

    /// A closed store of 400 tracks: the objects database has branch pages.
    func buildStore(_ url: URL) async throws {
        let store = try Store.open(at: url, schema: try librarySchema())
        defer { store.close() }
        var c = ChangeSet()
        for i in 0..<400 { c.insert(makeTrack(title: "damage \(i)", duration: i + 1)) }
        _ = try await store.save(c)
    }

    func dataFile(_ store: URL) -> String { store.appendingPathComponent("current/data.mdb").path }

    func u16(_ b: [UInt8], _ o: Int) -> Int { Int(b[o]) | Int(b[o + 1]) << 8 }
    static func u16(_ b: [UInt8], _ o: Int) -> Int { Int(b[o]) | Int(b[o + 1]) << 8 }
    func u64(_ b: [UInt8], _ o: Int) -> UInt64 { (0..<8).reduce(UInt64(0)) { $0 | UInt64(b[o + $1]) << (8 * UInt64($1)) } }

    /// The first node of the first leaf page whose value is on the page: its value's size (low
    /// 16 bits) raised past the page.
    static func valueSizePastItsPage(_ b: inout [UInt8]) -> Bool {
        for page in 2..<(b.count / pageSize) {
            let base = page * pageSize
            guard u16(b, base + 10) == 0x02 else { continue }
            let node = base + u16(b, base + 16)
            guard u16(b, node + 4) == 0 else { continue }
            b[node + 1] = 0x7F
            return true
        }
        return false
    }

    /// Changes the data file's bytes with `edit`, which returns false when it found nothing to change.
    /// Sets the last page number (bytes 136..<144, little-endian) of the meta page LMDB opens:
    /// the one with the larger transaction id (page 0 when they are equal).
    func setLastPage(_ store: URL, to page: UInt64) throws {
        try damage(store) { b in
            let t0 = u64(b, 144), t1 = u64(b, Self.pageSize + 144)
            let newer = t1 > t0 ? Self.pageSize : 0
            for i in 0..<8 { b[newer + 136 + i] = UInt8(truncatingIfNeeded: page >> (8 * UInt64(i))) }
            return true
        }
    }

    func damage(_ store: URL, _ edit: (inout [UInt8]) -> Bool) throws {
        let path = dataFile(store)
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        try #require(edit(&bytes), "nothing to damage in \(path)")
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    /// Runs every read command on `store`; each must exit 65 with `expected` in its error.
    func expectEveryCommandRefuses(_ store: URL, mentioning expected: [String]) async throws {
        for command in Self.readCommands {
            var args = [command[0], store.path]
            args += command.dropFirst()
            let r = try await storectl(args)
            #expect(r.status == 65, "\(command[0]): exit \(r.status), stderr \(r.stderr)")
            for text in expected { #expect(r.stderr.contains(text), "\(command[0]): \(r.stderr)") }
        }
    }

    @Test func aStoreRememberedAsCheckedIsCheckedAgainOnceItChanges() async throws {
        let dir = temporaryDirectory("page-check-memo")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store")
        try await buildStore(store)
        let cache = dir.appendingPathComponent("cache")
        func storectlRemembering(_ args: String...) async throws -> ProcessResult {
            try await run(storectlPath, args, environment: ["XDG_CACHE_HOME": cache.path])
        }
        let memos = cache.appendingPathComponent("strata/page-checks")
        func memo() throws -> String {
            let files = try FileManager.default.contentsOfDirectory(atPath: memos.path).filter { !$0.hasPrefix(".") }
            try #require(files.count == 1, "\(files)")
            return try String(contentsOf: memos.appendingPathComponent(files[0]), encoding: .utf8)
        }
        // A memo directory others may write is not trusted: nothing is remembered in it.
        try FileManager.default.createDirectory(at: memos, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o777])
        try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: memos.path)
        #expect(try await storectlRemembering("info", store.path).status == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: memos.path).isEmpty)
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: memos.path)
        #expect(try await storectlRemembering("info", store.path).status == 0)
        let first = try memo()
        // Unchanged: remembered as it was.
        #expect(try await storectlRemembering("query", store.path, "--entity", "Track", "--count").stdout.hasPrefix("400"))
        #expect(try memo() == first)
        // A commit changes the file: checked again, remembered anew.
        let input = dir.appendingPathComponent("genre.ndjson")
        try Data(#"{"entity": "Genre", "name": "after"}"#.utf8).write(to: input)
        #expect(try await storectlRemembering("import", store.path, input.path, "--quiet").status == 0)
        #expect(try await storectlRemembering("info", store.path).status == 0)
        #expect(try memo() != first)
        // Damage after a check is found: the file is not the one remembered.
        try damage(store, Self.valueSizePastItsPage)
        let refused = try await storectlRemembering("info", store.path)
        #expect(refused.status == 65 && refused.stderr.contains("runs past the page"), "\(refused.stderr)")
    }

    @Test func thePageCheckMemoKeepsTheMostRecentFewHundred() async throws {
        let dir = temporaryDirectory("page-check-prune")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store")
        try await buildStore(store)
        let cache = dir.appendingPathComponent("cache"), memos = cache.appendingPathComponent("strata/page-checks")
        try FileManager.default.createDirectory(at: memos, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        // 300 memos of stores long gone, the first 100 older than the rest.
        for i in 0..<300 {
            let url = memos.appendingPathComponent("1-\(i)")
            try Data("0 0.0 0.0 0\n".utf8).write(to: url)
            let age = Date(timeIntervalSinceNow: i < 100 ? -86_400 : -3_600)
            try FileManager.default.setAttributes([.modificationDate: age], ofItemAtPath: url.path)
        }
        #expect(try await run(storectlPath, ["info", store.path], environment: ["XDG_CACHE_HOME": cache.path]).status == 0)
        let left = try FileManager.default.contentsOfDirectory(atPath: memos.path).filter { !$0.hasPrefix(".") }
        #expect(left.count == PageCheckMemo.maxMemos * 3 / 4 + 1, "\(left.count)")
        #expect(!left.contains("1-0") && !left.contains("1-99"))   // the oldest went first
    }

    @Test func aBranchPointerOutsideTheFileIsRefusedByEveryCommand() async throws {
        let dir = temporaryDirectory("damage-branch")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store")
        try await buildStore(store)
        try damage(store) { b in
            for page in 2..<(b.count / Self.pageSize) {
                let base = page * Self.pageSize
                guard u16(b, base + 10) & 0x01 != 0 else { continue }
                // The child page number of node 1 (low 16 bits) pointed far past the file.
                let node = base + u16(b, base + 18)
                b[node + 2] = 0x7F
                return true
            }
            return false
        }
        try await expectEveryCommandRefuses(store, mentioning: ["the store is damaged", "database '", "page "])
    }

    @Test func aValueSizePastItsPageIsRefusedByEveryCommand() async throws {
        let dir = temporaryDirectory("damage-size")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store")
        try await buildStore(store)
        try damage(store, Self.valueSizePastItsPage)
        try await expectEveryCommandRefuses(store, mentioning: ["the store is damaged", "runs past the page", "key 0x"])
    }

    @Test func aDamagedMetaPageIsRefusedByEveryCommand() async throws {
        let dir = temporaryDirectory("damage-meta")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store")
        try await buildStore(store)
        try damage(store) { b in
            b[16] ^= 0x01   // meta page 0's magic
            return true
        }
        try await expectEveryCommandRefuses(store, mentioning: ["meta page 0: bad magic"])
    }

    /// The older meta page's transaction id raised above the newer one's would make LMDB open the
    /// older state: the page check refuses meta pages that are not consecutive commits.
    @Test func aTransactionIdThatWouldSelectTheOlderMetaPageIsRefused() async throws {
        let dir = temporaryDirectory("damage-txnid")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store")
        try await buildStore(store)
        try damage(store) { b in
            let t0 = Int(b[144]), t1 = Int(b[Self.pageSize + 144])
            let older = t0 < t1 ? 0 : Self.pageSize
            b[older + 144 + 1] ^= 0x01   // + 256
            return true
        }
        try await expectEveryCommandRefuses(store, mentioning: ["meta pages: transaction ids", "not consecutive commits"])
        #expect(throws: StrataError.self) { try Store.openReadOnly(at: store, configuration: { var c = StoreConfiguration(); c.checkPagesOnOpen = true; return c }()) }
    }

    /// The newer meta page's last page number set to all ones (meta pages carry no checksum):
    /// the check compared its byte offset with the file's size, which overflowed (a trap).
    @Test func aLastPageNumberOfAllOnesIsRefusedByEveryCommand() async throws {
        let dir = temporaryDirectory("damage-lastpage")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store")
        try await buildStore(store)
        try setLastPage(store, to: UInt64.max)
        try await expectEveryCommandRefuses(store, mentioning: ["last page 18446744073709551615 is past the end of the file"])
    }

    /// A last page number whose byte offset does not fit 64 bits (a flipped high bit, 2^52 here)
    /// makes liblmdb's own size check wrap, so the environment opens; the size check after it
    /// multiplied in bytes too, and trapped. An open without the page check (the library's
    /// default) refuses the store instead, and storectl still names the damage.
    @Test func aLastPageNumberPastAnyFileIsRefusedByAnOpenWithoutThePageCheck() async throws {
        let dir = temporaryDirectory("damage-lastpage-high")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store")
        try await buildStore(store)
        try setLastPage(store, to: 1 << 52)
        #expect { _ = try Store.openReadOnly(at: store) } throws: { error in
            guard case StrataError.notAStore(_, let reason) = error else { return false }
            return reason.contains("past any file")
        }
        try await expectEveryCommandRefuses(store, mentioning: ["is past the end of the file"])
    }

    @Test func verifyOfTheLibraryReportsPageDamageAsDamagedStore() async throws {
        let dir = temporaryDirectory("damage-verify")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store")
        try await buildStore(store)
        // Damage the last leaf page's header page number: liblmdb does not check it, the page check does.
        try damage(store) { b in
            for page in (2..<(b.count / Self.pageSize)).reversed() where u16(b, page * Self.pageSize + 10) == 0x02 {
                b[page * Self.pageSize] ^= 0x40
                return true
            }
            return false
        }
        let s = try Store.openReadOnly(at: store)
        defer { s.close() }
        do {
            _ = try s.verify()
            Issue.record("verify passed a damaged page")
        } catch StrataError.damagedStore(_, let reason) {
            #expect(reason.contains("its header says page"), "\(reason)")
        }
    }

    /// The stored schema names what every value is read as; no other checksum covers it.
    @Test func aDamagedStoredSchemaIsRefusedByEveryCommand() async throws {
        let dir = temporaryDirectory("damage-schema")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store")
        try await buildStore(store)
        try damage(store) { b in
            let needle = Array("\"name\":\"sortName\"".utf8)
            guard let at = (0..<(b.count - needle.count)).first(where: { Array(b[$0..<$0 + needle.count]) == needle }) else { return false }
            b[at + 9] ^= 0x20   // sortName → SortName: still a valid schema
            return true
        }
        try await expectEveryCommandRefuses(store, mentioning: ["database 'meta', key 'schema': the stored schema fails its checksum"])
    }

    @Test func aDamagedLockFileDoesNotStopReads() async throws {
        let dir = temporaryDirectory("damage-lock")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store")
        try await buildStore(store)
        let lock = store.appendingPathComponent("current/lock.mdb").path
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: lock)))
        for i in stride(from: 0, to: bytes.count, by: 7) { bytes[i] ^= 0xA5 }
        try Data(bytes).write(to: URL(fileURLWithPath: lock))
        let r = try await storectl("verify", store.path)
        #expect(r.status == 0, "\(r.status) \(r.stderr)")
    }

    /// A lookup key made from stored data with a size LMDB cannot hold is a corrupt entry, not a trap.
    @Test func aLookupKeyOfAnImpossibleSizeIsACorruptEntry() throws {
        let store = try Store.temporary(schema: try librarySchema())
        defer { store.close() }
        let env = store.env
        for size in [0, LMDBLimits.maxKeyBytes + 1] {
            #expect(throws: StrataError.self) {
                try env.read { txn in try txn.withValue(env[.objects], key: [UInt8](repeating: 1, count: size)) { _ in true } }
            }
        }
    }
}
