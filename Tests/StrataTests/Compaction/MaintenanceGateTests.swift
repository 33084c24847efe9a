import Foundation
import Testing
@testable import Strata

/// A compaction and a migration of one store asked for at the same time in one process run one
/// after the other (`MaintenanceGate`). Without the gate both would build from the live
/// generation and both switch: a compaction whose switch was queued behind a migration's would put
/// back a compacted copy of the unmigrated store.
@Suite(.serialized, .timeLimit(.minutes(15))) struct MaintenanceGateTests {
    /// Executors of the suite's own, kept alive by these constants (a task does not retain its
    /// executor preference): the first operation runs on `held`, whose thread the hold blocks; the
    /// second on `other`, off the cooperative pool, which CPU-bound tests can occupy for seconds.
    static let held = HookExecutor()
    static let other = HookExecutor()

    /// Waits until the second operation waits at the gate: 60 s at most, checked once more after
    /// the deadline (in the full suite this task can wait seconds for a thread of the cooperative
    /// pool). Without the gate it never waits, and this fails.
    private func waitForSecondInLine(_ store: Store) async throws {
        let deadline = Date().addingTimeInterval(60)
        while store.maintenance.waitingForTesting < 1 {
            if Date() >= deadline {
                try #require(store.maintenance.waitingForTesting >= 1, "the second operation did not wait for the first")
                return
            }
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    /// A store of `count` lab samples at schema v1, in `dir`.
    private func labStore(_ dir: URL, count: Int) async throws -> Store {
        let schemas = try labSchemas()
        let store = try Store.open(at: dir, schema: schemas[0])
        let sample = try #require(schemas[0].entity(named: "Sample"))
        _ = try await store.save { c in
            for i in 0..<count {
                var r = Record(entity: sample)
                r.values[0] = .string("s\(i)")
                c.insert(r)
            }
        }
        return store
    }

    /// A progress callback that holds the first caller until `release()` (60 s at most).
    private final class Hold: Sendable {
        let reached = DispatchSemaphore(value: 0)
        let go = DispatchSemaphore(value: 0)
        private let first = Locked(true)
        func callback() {
            guard first.withLock({ f in defer { f = false }; return f }) else { return }
            reached.signal()
            _ = go.wait(timeout: .now() + 60)
        }
        /// Waits (60 s at most) until the first operation is held; fails if it ended without it.
        func waitUntilReached<R>(_ task: Task<R, Error>) async throws {
            let deadline = Date().addingTimeInterval(60)
            while reached.wait(timeout: .now()) != .success {
                if Date() >= deadline {
                    _ = try await task.value   // shows its error, if it failed before its first progress
                    Issue.record("the first operation never reported progress")
                    throw CancellationError()
                }
                try await Task.sleep(for: .milliseconds(1))
            }
        }
        func release() { go.signal() }
    }

    @Test func aCompactionAskedForDuringAMigrationWaitsAndIsRefused() async throws {
        let dir = temporaryDirectory("gate-migration-first")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try await labStore(dir, count: 200)
        let schemas = try labSchemas()
        let hold = Hold()
        let migration = Task(executorPreference: Self.held) {
            try await store.migrate(schemas: schemas, progress: { _ in hold.callback() })
        }
        defer { hold.release() }
        try await hold.waitUntilReached(migration)
        let compaction = Task(executorPreference: Self.other) { try await store.compact() }
        try await waitForSecondInLine(store)
        hold.release()
        let report = try await migration.value
        #expect(report.objects == 200)
        do {
            _ = try await compaction.value
            Issue.record("a compaction of the migrated instance ran")
        } catch StrataError.migrated(_, let version) {
            #expect(version == 2)
        }
        store.close()
        let migrated = try Store.open(at: dir, schema: schemas[1])
        defer { migrated.close() }
        #expect(try migrated.mainContext.count(Query(entity: "Specimen")) == 200)
    }

    @Test func aMigrationAskedForDuringACompactionStartsFromTheCompactedStore() async throws {
        let dir = temporaryDirectory("gate-compaction-first")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try await labStore(dir, count: 200)
        let schemas = try labSchemas()
        let sample = try #require(schemas[0].entity(named: "Sample"))
        let hold = Hold()
        let compaction = Task(executorPreference: Self.held) {
            try await store.compact(progress: { _ in hold.callback() })
        }
        defer { hold.release() }
        try await hold.waitUntilReached(compaction)
        let migration = Task(executorPreference: Self.other) { try await store.migrate(schemas: schemas) }
        try await waitForSecondInLine(store)
        // A save during the compaction's build: caught up by the compaction, then migrated.
        _ = try await store.save { c in
            var r = Record(entity: sample)
            r.values[0] = .string("late")
            c.insert(r)
        }
        hold.release()
        _ = try await compaction.value
        let report = try await migration.value
        #expect(report.objects == 201)
        // From the compacted store: its log holds the late save alone (the uncompacted one, two).
        #expect(report.transactionsUpcast == 1)
        store.close()
        let migrated = try Store.open(at: dir, schema: schemas[1])
        defer { migrated.close() }
        #expect(try migrated.mainContext.count(Query(entity: "Specimen")) == 201)
    }

    /// Marking the store a replica during a compaction waits for it. The mark is no log entry:
    /// written into the generation being replaced, after the compaction's snapshot, it was lost
    /// at the switch (and the switch gave back the exclusive lock the mark is written under).
    @Test func markingAReplicaDuringACompactionWaitsAndTheMarkSurvivesTheSwitch() async throws {
        let dir = temporaryDirectory("gate-compaction-mark")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try await labStore(dir, count: 200)
        let hold = Hold()
        let compaction = Task(executorPreference: Self.held) {
            try await store.compact(progress: { _ in hold.callback() })
        }
        defer { hold.release() }
        try await hold.waitUntilReached(compaction)
        let mark = Task(executorPreference: Self.other) { try await store.markAsReplica(clusterID: "cluster-a") }
        try await waitForSecondInLine(store)
        hold.release()
        _ = try await compaction.value
        try await mark.value
        #expect(try store.replicaClusterID == "cluster-a")
        store.close()
        let reopened = try Store.open(at: dir, schema: try labSchemas()[0])
        defer { reopened.close() }
        #expect(try reopened.replicaClusterID == "cluster-a")
    }

    /// Leaving a cluster during a compaction waits for it too: the removed mark would otherwise
    /// come back with the compacted generation, built from a snapshot that still had it.
    @Test func leavingAClusterDuringACompactionWaitsAndTheMarkStaysRemoved() async throws {
        let dir = temporaryDirectory("gate-compaction-leave")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try await labStore(dir, count: 200)
        try await store.markAsReplica(clusterID: "cluster-a")
        let hold = Hold()
        let compaction = Task(executorPreference: Self.held) {
            try await store.compact(progress: { _ in hold.callback() })
        }
        defer { hold.release() }
        try await hold.waitUntilReached(compaction)
        let leave = Task(executorPreference: Self.other) { try await store.leaveCluster(clusterID: "cluster-a") }
        try await waitForSecondInLine(store)
        hold.release()
        _ = try await compaction.value
        try await leave.value
        #expect(try store.replicaClusterID == nil)
        store.close()
        let reopened = try Store.open(at: dir, schema: try labSchemas()[0])
        defer { reopened.close() }
        #expect(try reopened.replicaClusterID == nil)
    }

    /// Waits until `n` operations wait at the gate (60 s at most).
    private func waitUntilWaiting(_ store: Store, _ n: Int) async throws {
        let deadline = Date().addingTimeInterval(60)
        while store.maintenance.waitingForTesting < n {
            try #require(Date() < deadline, "\(n) operations did not wait at the gate")
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    /// A bulk load and a migration that waited at the gate behind a markAsReplica are refused
    /// once they get through: the store is a replica by then, and either would write local
    /// transactions its cluster's log does not have. (They checked before waiting only, and ran.)
    @Test(.timeLimit(.minutes(15))) func aBulkLoadOrMigrationThatWaitedBehindAReplicaMarkIsRefused() async throws {
        let dir = temporaryDirectory("gate-replica-mark-first")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try await labStore(dir, count: 20)
        defer { store.close() }
        let head = try store.lastTransactionID
        await store.maintenance.enter()
        let mark = Task(executorPreference: Self.held) { try await store.markAsReplica(clusterID: "cluster-a") }
        try await waitUntilWaiting(store, 1)
        let load = Task(executorPreference: Self.other) { try await store.beginBulkLoad() }
        try await waitUntilWaiting(store, 2)
        let migration = Task(executorPreference: Self.other) { _ = try await store.migrate(schemas: try labSchemas()) }
        try await waitUntilWaiting(store, 3)
        store.maintenance.leave()
        try await mark.value
        #expect(try store.replicaClusterID == "cluster-a")
        do {
            let began = try await load.value
            began.abandon()   // lets the migration through the gate
            Issue.record("a bulk load began on a replica")
        } catch StrataError.replication(let e) {
            #expect(e.kind == .notAttached, "\(e)")
        }
        do {
            try await migration.value
            Issue.record("a replica migrated alone")
        } catch let e as MigrationError {
            #expect(e.reason.contains("replica"), "\(e.reason)")
        }
        #expect(try store.lastTransactionID == head)
        #expect(store.schema.version == 1)
    }

    /// Leaving a cluster needs the store to itself, as joining one does: another process that
    /// has it open may be compacting, from a snapshot that still holds the mark, and its switch
    /// would bring the mark back. (Only this process's own gate was waited for.)
    @Test(.timeLimit(.minutes(15))) func leavingAClusterWhileAnotherProcessHasTheStoreOpenIsRefused() async throws {
        let dir = temporaryDirectory("leave-other-process")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try await labStore(dir, count: 5)
        defer { store.close() }
        try await store.markAsReplica(clusterID: "cluster-a")
        let follower = try ChildProcess.start(storectlPath, ["log", dir.path, "--follow"])
        defer { follower.kill() }
        let lock = try #require(store.lock)
        let deadline = Date().addingTimeInterval(60)
        while lock.otherHolders().isEmpty {
            try #require(Date() < deadline, "storectl log --follow did not open the store")
            try await Task.sleep(for: .milliseconds(5))
        }
        do {
            try await store.leaveCluster(clusterID: "cluster-a")
            Issue.record("left the cluster while another process had the store open")
        } catch StrataError.storeBusy(_, let pids) {
            #expect(pids.contains(follower.pid), "\(pids)")
        }
        #expect(try store.replicaClusterID == "cluster-a")
        follower.kill()
        _ = try await follower.finished()
        try await store.leaveCluster(clusterID: "cluster-a")
        #expect(try store.replicaClusterID == nil)
    }
}
