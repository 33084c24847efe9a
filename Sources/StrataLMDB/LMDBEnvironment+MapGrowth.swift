import Foundation
import Logging
import CLMDB
import Glibc
import Synchronization

/// Growing the map: on `MDB_MAP_FULL`, and adopting another process's growth.
extension LMDBEnvironment {
    /// Another process grew the map past this process's (`MDB_MAP_RESIZED`): maps at least the
    /// data's size again. Sized as a growth (``growMap()``), not at the size the other process
    /// wrote (`mdb_env_set_mapsize(0)`), so that the new size is reserved first; LMDB raises a
    /// size below the pages in use to them.
    package func adoptMapSize() throws {
        // A read begun inside another read of this thread: the outer one holds the map lock, and
        // the map cannot be replaced under it (nor its size adopted with it active).
        guard !mapLock.isHeldSharedByCurrentThread else {
            throw LMDBError(code: MDB_MAP_RESIZED, operation: """
                a read of \(path) begun inside another read of the same thread, after another process grew the \
                store's map (the outer read must end before this process can map the larger file)
                """)
        }
        try mapLock.withExclusive {
            let current = currentMapSize.load(ordering: .relaxed)
            // At least the pages the other process has in use (liblmdb raises the size to them,
            // and that much must be reserved first): read from the meta page, which the map,
            // still in place, shows as that process wrote it.
            var info = MDB_envinfo(), stat = MDB_stat()
            let inUse = mdb_env_info(handle, &info) == MDB_SUCCESS && mdb_env_stat(handle, &stat) == MDB_SUCCESS
                ? Self.bytesInUse(info, stat) ?? 0 : 0
            let floor = max(current + 1 << 20, inUse)
            try remapHoldingMapLock(to: max(current * 2, current + growthStep, floor), atLeast: floor)
        }
    }

    /// The bytes of the pages `info` says are in use (its last page number, plus one, times
    /// `stat`'s page size); nil when that is no size a file can have (a damaged meta page: a
    /// negative number, or one whose product overflows).
    static func bytesInUse(_ info: MDB_envinfo, _ stat: MDB_stat) -> Int? {
        guard info.me_last_pgno >= 0 else { return nil }
        let (pages, past) = info.me_last_pgno.addingReportingOverflow(1)
        let (bytes, overflow) = pages.multipliedReportingOverflow(by: max(1, Int(stat.ms_psize)))
        return past || overflow ? nil : bytes
    }

    /// The error every transaction meets once the environment lost its map (``mapLost``): it
    /// would read unmapped memory. Nil while the map is there.
    var lostMapError: LMDBError? {
        guard mapLost.load(ordering: .acquiring) else { return nil }
        return LMDBError(code: ENOMEM, operation: """
            \(path): a growth of the map failed after the old map was let go, so the store has no map in this \
            process; close it and open it again
            """)
    }

    /// Grows the map (up to ``LMDBOptions/maxMapSizeBytes``) to at least twice its size and by at
    /// least ``growthStepBytes`` (see there). Call only while this process has no write
    /// transaction open; readers are held off by ``mapLock`` for the remap.
    ///
    /// Taking ``mapLock`` exclusively waits for the reads holding it at that moment. The long
    /// readers hold it a chunk at a time: their user code runs between reads (an export's `emit`,
    /// a transaction visit's body, a compaction's `progress`), and their scans read a chunk per
    /// hold (``ReadSource``, ``ChunkedScan``, the direct copy), so a growth waits for at most one
    /// chunk of each of them. Verify, migration, single queries and a child's custom merge
    /// closure are the exceptions: see ARCHITECTURE.md, "Map growth and the map lock".
    ///
    /// LMDB documents `mdb_env_set_mapsize` as safe only with no transaction active in the process.
    /// Pinned snapshots keep read transactions open across a growth. That is safe with liblmdb
    /// 0.9.x because an idle read transaction holds no pointer into the map: `mdb_txn_renew0`
    /// copies the meta page's database records into the transaction, and every page is found
    /// from `env->me_map` at the time of access. Page pointers live only in cursors, which Strata
    /// opens and closes inside one operation while holding ``mapLock`` shared.
    /// - Returns: false when the map is already at its maximum.
    package func growMap() throws -> Bool {
        if closed.load(ordering: .acquiring) { throw options.policy.closed(path: path) }
        guard !mapLock.isHeldSharedByCurrentThread else {
            throw LMDBError(code: MDB_MAP_FULL, operation: """
                a write of \(path) made inside a read of the same thread needs a larger map, which cannot be \
                mapped while that read holds the present one
                """)
        }
        return try mapLock.withExclusive {
            let current = currentMapSize.load(ordering: .relaxed)
            guard current < options.maxMapSizeBytes else { return false }
            let next = min(options.maxMapSizeBytes, max(current * 2, current + growthStep))
            try remapHoldingMapLock(to: next, atLeast: min(options.maxMapSizeBytes, current + 1 << 20))
            return true
        }
    }

    /// The least a growth adds: ``growthStepBytes``, or 1 MiB for an `MDB_WRITEMAP` map.
    var growthStep: Int { options.writeMap ? 1 << 20 : Self.growthStepBytes }

    /// `mdb_env_set_mapsize` to `target` bytes, or less down to `floor` when that much address
    /// space cannot be reserved; the caller holds ``mapLock`` exclusively.
    ///
    /// `mdb_env_set_mapsize` unmaps the old map before it maps the new one, and an environment
    /// whose new map failed has no map at all (its next transaction would read unmapped memory).
    /// So the new size is first reserved as address space (``canReserveAddressSpace(_:)``, with
    /// the old map still in place, which asks for more than the remap will), halving the step
    /// down to `floor` when that fails; when not even that can be reserved, this throws `ENOMEM`
    /// without touching the map, and the environment stays usable at its present size.
    func remapHoldingMapLock(to target: Int, atLeast floor: Int) throws {
        var size = max(target, floor)
        while !(try Self.canReserveMap(size)) {
            guard size > floor else {
                throw LMDBError(code: ENOMEM,
                                operation: "mdb_env_set_mapsize(\(size)): no address space for the new map")
            }
            size = max(floor, floor + (size - floor) / 2)
        }
        // Before the map grows over it (see init): a file system without room for the larger
        // file fails the growth, and the map stays as it was.
        if options.writeMap { try Self.allocate(path + "/data.mdb", bytes: size) }
        let rc = mdb_env_set_mapsize(handle, size)
        if rc != MDB_SUCCESS {
            // liblmdb unmapped the old map before it tried the new one: there may be none now.
            mapLost.store(true, ordering: .releasing)
            try lmdbCheck(rc, "mdb_env_set_mapsize(\(size))")
        }
        cachedMappings.withLock { $0 = nil }
        // LMDB raises a size below the pages in use to them.
        var info = MDB_envinfo()
        try lmdbCheck(mdb_env_info(handle, &info), "mdb_env_info")
        currentMapSize.store(info.me_mapsize, ordering: .relaxed)
    }

    /// The least a growth (``growMap()``) adds to a map that is not written in place. Without
    /// `MDB_WRITEMAP` LMDB maps the data file read-only and never extends the file to the map's
    /// size (`mdb_env_map` calls `ftruncate` only with `MDB_WRITEMAP`), so the map is address
    /// space alone: a large step costs nothing, and makes growths (each one a redo of the
    /// writer's group and a moment in which readers pause) rare. `MDB_WRITEMAP` maps (scratch
    /// environments) are the file's size, and grow by doubling, at least 1 MiB.
    package static let growthStepBytes = 1 << 30

    /// Whether a map of `bytes` leaves the process as much address space again: twice `bytes`
    /// can be reserved now (``canReserveAddressSpace(_:)``). Under an address-space limit
    /// (`ulimit -v`) a map that took nearly all of it left nothing for the heap and the threads'
    /// stacks: the next allocation ended the process, or a thread that could not be started
    /// left the work waiting for it forever.
    package static func canReserveMap(_ bytes: Int) throws -> Bool {
        try canReserveAddressSpace(bytes <= Int.max / 2 ? bytes * 2 : bytes)
    }

    /// Whether `bytes` of address space can be reserved now: maps them (anonymous, `PROT_NONE`,
    /// `MAP_NORESERVE`: no memory, no commit charge) and unmaps them at once. False where the
    /// address space is short (`RLIMIT_AS`, a 47-bit space full of maps).
    package static func canReserveAddressSpace(_ bytes: Int) throws -> Bool {
        guard let region = mmap(nil, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0),
              region != UnsafeMutableRawPointer(bitPattern: -1) else {
            return false
        }
        guard munmap(region, bytes) == 0 else { throw LMDBError(code: errno, operation: "munmap(address space probe)") }
        return true
    }
}
