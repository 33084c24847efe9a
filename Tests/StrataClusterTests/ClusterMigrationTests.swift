import Foundation
import LibraryModel
@testable import Strata
import StrataTestSupport
import Testing
@testable import StrataCluster

/// A schema migration of a cluster is an event at one position of its log: every replica
/// migrates there, and none applies or appends past it before it has.
@Suite(.serialized) struct ClusterMigrationTests {
    @Test func aSchemaMigrationHappensAtOnePositionOfTheLogOnEveryReplica() async throws {
        let c = try await V1Cluster.make()
        defer { try? FileManager.default.removeItem(at: c.root) }
        let (schemas, v1, address, urlA, urlB, first) = (c.schemas, c.v1, c.address, c.urlA, c.urlB, c.first)
        let a = try await ClusterReplica.open(store: first, address: address, name: "a")
        let joined = try await Cluster.join(at: urlB, address: address)
        let b = try await ClusterReplica.open(store: joined, address: address, name: "b")
        let genre = try #require(v1.entity(named: "Genre"))
        var record = Record(entity: genre)
        record["name"] = .string("Saved at v1")
        _ = try await b.store.save { $0.insert(record) }
        try await a.catchUp()
        await a.close()
        first.close()

        // The first replica migrated appends the migration to the cluster's log.
        let migratedA = try await Cluster.migrate(at: urlA, address: address, schemas: schemas,
                                                  registry: libraryMigrations)
        let position = try #require(migratedA?.migrationTransaction)
        #expect(migratedA?.to == 2)
        // b, still at v1, applies nothing past it and cannot save.
        do {
            var late = Record(entity: genre)
            late["name"] = .string("Saved at v1 after the migration")
            _ = try await b.store.save { $0.insert(late) }
            Issue.record("a v1 replica saved past the cluster's migration")
        } catch StrataError.replication(let e) {
            #expect(e.kind == .migrationNeeded)
            #expect(e.reason.contains("from v1 to v2"))
        }
        #expect(try b.store.lastTransactionID.next == position)
        await b.close()
        joined.close()
        // b migrates at the same position, with storectl.
        let url = "postgres://\(address.user)@\(address.host):\(address.port)/\(address.database)"
        let migratedB = try await storectl(["migrate", urlB.path, "--schema", librarySchemaDirectory.path, "--postgres", url,
                                            "--json", "--quiet"])
        #expect(migratedB.status == 0, "\(migratedB.stderr)")
        #expect(migratedB.stdout.contains("\"migrationTransaction\":\(position.rawValue)"), "\(migratedB.stdout)")
        let again = try await storectl(["migrate", urlB.path, "--schema", librarySchemaDirectory.path, "--postgres", url])
        #expect(again.status == 0 && again.stdout.contains("up to date"), "\(again.stdout) \(again.stderr)")

        // Both at v2: saves on one are read on the other; logs and states agree.
        let storeA = try Store.openExisting(at: urlA), storeB = try Store.openExisting(at: urlB)
        let ra = try await ClusterReplica.open(store: storeA, address: address, name: "a")
        let rb = try await ClusterReplica.open(store: storeB, address: address, name: "b")
        #expect(storeA.schema.version == 2 && storeB.schema.version == 2)
        // Still replicas of the cluster: the migration carries the mark into the new generation.
        #expect(try storeA.replicaClusterID != nil && storeB.replicaClusterID == storeA.replicaClusterID)
        let id = try await storeB.save { $0.insert(newTrack("saved at v2")) }
        try await ra.catchUp(to: id)
        #expect(try storeA.changes(in: position) == storeB.changes(in: position))
        #expect(try storeA.changes(in: position).metadata["migrationTo"] == "2")
        #expect(try ClusterFixture.exported(storeA) == ClusterFixture.exported(storeB))
        #expect(try storeA.verify().ok && storeB.verify().ok)
        #expect(try await Cluster.status(address: address).schemaVersion == 2)
        await ra.close()
        await rb.close()
        storeA.close()
        storeB.close()
    }

    /// A replica that had not applied the entries before the cluster's migration when it was
    /// migrated: it applies them, then migrates at the entry. It applied its catch-up batch in
    /// one transaction that the migration entry aborted, so it stayed at its head and refused to
    /// migrate, stuck (`storectl migrate` said to run itself).
    /// A replica stopped at the cluster's migration entry (its code not migrated yet) while the
    /// migrated machines save: its follower waits out its back-off instead of reading the log
    /// again at every other machine's append (each notification cut the wait short), and it
    /// goes on telling the cluster it is alive (it stopped its heartbeats, so `status` showed it
    /// as gone and `forget` removed its row without `--force`).
    @Test func aReplicaStoppedAtAMigrationStaysListedAndDoesNotReadAtEveryAppend() async throws {
        let c = try await V1Cluster.make()
        defer { try? FileManager.default.removeItem(at: c.root) }
        let a = try await ClusterReplica.open(store: c.first, address: c.address, name: "a")
        let joined = try await Cluster.join(at: c.urlB, address: c.address)
        let b = try await ClusterReplica.open(store: joined, address: c.address, name: "b")
        await a.close()
        c.first.close()
        let migrated = try await Cluster.migrate(at: c.urlA, address: c.address, schemas: c.schemas,
                                                 registry: libraryMigrations)
        let marked = ContinuousClock.now
        #expect(migrated?.migrationTransaction != nil)
        let storeA = try Store.openExisting(at: c.urlA)
        let ra = try await ClusterReplica.open(store: storeA, address: c.address, name: "a")
        let readsBefore = b.followerReads
        for i in 0..<40 { _ = try await storeA.save { $0.insert(Genre(name: "saved at v2 \(i)")) } }
        let reads = b.followerReads - readsBefore
        #expect(reads < 15, "the stopped replica read the log \(reads) times during 40 appends")
        try await Task.sleep(until: marked + .seconds(7))
        let row = try #require(try await Cluster.status(address: c.address).replicas.first { $0.name == "b" })
        #expect(row.secondsSinceSeen < 5, "seen \(row.secondsSinceSeen) s ago")
        do {
            _ = try await Cluster.forget(replica: "b", address: c.address)
            Issue.record("the row of a running replica was removed without force")
        } catch let e as ClusterError {
            #expect(e.kind == .replicaActive, "\(e)")
        }
        await ra.close()
        await b.close()
        storeA.close()
        joined.close()
    }

    /// `cluster compact` does not trim a migration entry a replica still has to migrate at: it
    /// is refused, naming the replica, until that replica migrated. It went through, and the
    /// replica, behind the horizon, was told to reset, which gave it the new schema's state with
    /// no check that its steps were the cluster's.
    @Test func aCompactionWaitsForEveryReplicaToMigrateBeforeTrimmingTheMigration() async throws {
        let c = try await V1Cluster.make()
        defer { try? FileManager.default.removeItem(at: c.root) }
        let a = try await ClusterReplica.open(store: c.first, address: c.address, name: "a")
        let joined = try await Cluster.join(at: c.urlB, address: c.address)
        let b = try await ClusterReplica.open(store: joined, address: c.address, name: "b")
        await a.close()
        c.first.close()
        let migrated = try await Cluster.migrate(at: c.urlA, address: c.address, schemas: c.schemas,
                                                 registry: libraryMigrations)
        let entry = try #require(migrated?.migrationTransaction)
        await b.close()
        joined.close()
        let storeA = try Store.openExisting(at: c.urlA)
        defer { storeA.close() }
        let ra = try await ClusterReplica.open(store: storeA, address: c.address, name: "a")
        _ = try await storeA.save { $0.insert(Genre(name: "saved at v2")) }
        do {
            _ = try await Cluster.compact(replica: ra)
            Issue.record("the compaction trimmed the migration entry replica b has to migrate at")
        } catch let e as ClusterError {
            #expect(e.kind == .replicaActive, "\(e)")
            #expect(e.reason.contains("replica b") && e.reason.contains("migration at \(entry.rawValue)"), "\(e)")
        }
        #expect(try await Cluster.status(address: c.address).horizon < entry.rawValue)
        // b migrated and opened again under its name (its service restarted with the new code):
        // the compaction goes through.
        _ = try await Cluster.migrate(at: c.urlB, address: c.address, schemas: c.schemas, registry: libraryMigrations)
        let storeB = try Store.openExisting(at: c.urlB)
        let rb = try await ClusterReplica.open(store: storeB, address: c.address, name: "b")
        await rb.close()
        storeB.close()
        let status = try await Cluster.compact(replica: ra)
        #expect(status.horizon > entry.rawValue)
        await ra.close()
    }

    @Test func aReplicaBehindTheMigrationAppliesWhatCameBeforeItAndMigrates() async throws {
        let c = try await V1Cluster.make()
        defer { try? FileManager.default.removeItem(at: c.root) }
        let (schemas, v1, address, urlA, urlB, first) = (c.schemas, c.v1, c.address, c.urlA, c.urlB, c.first)
        let joined = try await Cluster.join(at: urlB, address: address)
        let joinedAt = try joined.lastTransactionID
        joined.close()
        // b is closed while a saves, then a migrates: b is two saves behind the migration.
        let a = try await ClusterReplica.open(store: first, address: address, name: "a")
        let genre = try #require(v1.entity(named: "Genre"))
        for name in ["before the migration", "just before it"] {
            var record = Record(entity: genre)
            record["name"] = .string(name)
            _ = try await a.store.save { $0.insert(record) }
        }
        await a.close()
        first.close()
        let migratedA = try await Cluster.migrate(at: urlA, address: address, schemas: schemas, registry: libraryMigrations)
        let position = try #require(migratedA?.migrationTransaction)
        #expect(position == TransactionID(joinedAt.rawValue + 3))

        let migratedB = try await Cluster.migrate(at: urlB, address: address, schemas: schemas, registry: libraryMigrations)
        #expect(migratedB?.migrationTransaction == position)
        let storeA = try Store.openExisting(at: urlA), storeB = try Store.openExisting(at: urlB)
        defer { storeA.close(); storeB.close() }
        #expect(storeA.schema.version == 2 && storeB.schema.version == 2)
        #expect(try storeB.lastTransactionID == position)
        #expect(try ClusterFixture.exported(storeA) == ClusterFixture.exported(storeB))
        #expect(try storeB.verify().ok)
    }

    /// Another machine appends while the migrating replica's dry run runs: the replica applies
    /// those transactions, then migrates right after them. It appended the cluster's migration
    /// entry after them but had not applied them, and stopped with "the replica's next
    /// transaction is …; the cluster migrates at …" (exit 65), the cluster migrated and itself not.
    @Test func aReplicaMigratesAfterTransactionsAppendedDuringItsDryRun() async throws {
        let c = try await V1Cluster.make()
        defer { try? FileManager.default.removeItem(at: c.root) }
        let (schemas, v1, address, urlA, urlB, first) = (c.schemas, c.v1, c.address, c.urlA, c.urlB, c.first)
        first.close()
        let joined = try await Cluster.join(at: urlB, address: address)
        let b = try await ClusterReplica.open(store: joined, address: address, name: "b")
        let genre = try #require(v1.entity(named: "Genre"))
        let savedDuring = Locked<[TransactionID]>([])
        let dryRuns = Locked(0)
        Cluster.afterMigrationDryRunForTesting.withLock {
            $0 = {
                // Saves during the first dry run only: the second checks them, and the entry goes in.
                guard dryRuns.withLock({ $0 += 1; return $0 }) == 1 else { return }
                for name in ["during the dry run", "still during it"] {
                    var record = Record(entity: genre)
                    record["name"] = .string(name)
                    let id = try await b.store.save { $0.insert(record) }
                    savedDuring.withLock { $0.append(id) }
                }
            }
        }
        defer { Cluster.afterMigrationDryRunForTesting.withLock { $0 = nil } }
        let migratedA = try await Cluster.migrate(at: urlA, address: address, schemas: schemas, registry: libraryMigrations)
        let saved = savedDuring.withLock { $0 }
        let position = try #require(migratedA?.migrationTransaction)
        #expect(saved.count == 2 && position == saved.last?.next, "\(saved) then \(position)")
        #expect(dryRuns.withLock { $0 } == 2)
        await b.close()
        joined.close()
        let migratedB = try await Cluster.migrate(at: urlB, address: address, schemas: schemas, registry: libraryMigrations)
        #expect(migratedB?.migrationTransaction == position)
        let storeA = try Store.openExisting(at: urlA), storeB = try Store.openExisting(at: urlB)
        defer { storeA.close(); storeB.close() }
        #expect(storeA.schema.version == 2 && storeB.schema.version == 2)
        #expect(try storeA.lastTransactionID == storeB.lastTransactionID)
        #expect(try ClusterFixture.exported(storeA) == ClusterFixture.exported(storeB))
        #expect(try storeA.verify().ok && storeB.verify().ok)
    }

    /// Data another replica saves while the migration's dry run runs is checked before the
    /// cluster holds the migration's entry: an artist the migration's custom step refuses fails
    /// the migration with nothing appended, and the other replica goes on saving. (The entry
    /// went in after those saves unchecked, and every replica then stopped at it for good.)
    @Test func dataSavedDuringAMigrationsDryRunIsCheckedBeforeTheClusterHoldsItsEntry() async throws {
        let c = try await V1Cluster.make()
        defer { try? FileManager.default.removeItem(at: c.root) }
        c.first.close()
        let joined = try await Cluster.join(at: c.urlB, address: c.address)
        let b = try await ClusterReplica.open(store: joined, address: c.address, name: "b")
        struct Refused: Error {}
        var registry = MigrationRegistry()
        registry.register("deriveSortName") { record in
            if case .string("poison") = record["name"] { throw Refused() }
        }
        let artist = try #require(c.v1.entity(named: "Artist"))
        Cluster.afterMigrationDryRunForTesting.withLock {
            $0 = {
                var record = Record(entity: artist)
                record["mbid"] = .uuid(UUID())
                record["name"] = .string("poison")
                _ = try await b.store.save { $0.insert(record) }
            }
        }
        defer { Cluster.afterMigrationDryRunForTesting.withLock { $0 = nil } }
        do {
            _ = try await Cluster.migrate(at: c.urlA, address: c.address, schemas: c.schemas, registry: registry)
            Issue.record("the migration was made over data its step refuses")
        } catch {
            #expect("\(error)".contains("deriveSortName"), "\(error)")
        }
        Cluster.afterMigrationDryRunForTesting.withLock { $0 = nil }
        // No entry in the cluster: the other replica still saves, and the first opens at v1.
        var genre = Record(entity: try #require(c.v1.entity(named: "Genre")))
        genre["name"] = .string("after the refused migration")
        _ = try await b.store.save { $0.insert(genre) }
        let status = try await Cluster.status(address: c.address)
        #expect(TransactionID(status.head) == (try b.store.lastTransactionID))
        await b.close()
        joined.close()
        let a = try Store.openExisting(at: c.urlA)
        #expect(a.schema.version == 1)
        a.close()
    }

    /// A migration whose every dry run sees other replicas' saves arrive gives up after
    /// `maxMigrationChecks` of them, with nothing appended.
    @Test func aMigrationThatOtherSavesKeepOvertakingGivesUpWithNothingAppended() async throws {
        let c = try await V1Cluster.make()
        defer { try? FileManager.default.removeItem(at: c.root) }
        c.first.close()
        let joined = try await Cluster.join(at: c.urlB, address: c.address)
        let b = try await ClusterReplica.open(store: joined, address: c.address, name: "b")
        let genre = try #require(c.v1.entity(named: "Genre"))
        let dryRuns = Locked(0)
        Cluster.afterMigrationDryRunForTesting.withLock {
            $0 = {
                let n = dryRuns.withLock { $0 += 1; return $0 }
                var record = Record(entity: genre)
                record["name"] = .string("saved during dry run \(n)")
                _ = try await b.store.save { $0.insert(record) }
            }
        }
        defer { Cluster.afterMigrationDryRunForTesting.withLock { $0 = nil } }
        do {
            _ = try await Cluster.migrate(at: c.urlA, address: c.address, schemas: c.schemas, registry: libraryMigrations)
            Issue.record("the migration went in")
        } catch let e as ClusterError {
            #expect(e.kind == .unavailable, "\(e)")
        }
        #expect(dryRuns.withLock { $0 } == Cluster.maxMigrationChecks)
        Cluster.afterMigrationDryRunForTesting.withLock { $0 = nil }
        var record = Record(entity: genre)
        record["name"] = .string("after")
        _ = try await b.store.save { $0.insert(record) }
        await b.close()
        joined.close()
    }

    @Test func aReplicaRefusesAMigrationEntryPlannedWithOtherStepsOrSchemas() async throws {
        let schemas = try Schema.loadAll(directory: librarySchemaDirectory)
        let v1 = try #require(schemas.first { $0.version == 1 })
        let address = try await TestPostgres.shared().freshDatabase()
        let root = temporaryDirectory("strata-cluster")
        defer { try? FileManager.default.removeItem(at: root) }
        let url = root.appendingPathComponent("a")
        try await makeV1TrackStore(at: url, schema: v1)
        let store = try Store.openExisting(at: url)
        defer { store.close() }
        try await Cluster.initialize(store: store, address: address, name: "a")
        let honest = try store.migrationMarker(schemas: schemas, registry: libraryMigrations,
                                               at: try store.lastTransactionID.next)
        let entry = try honest.bytes.withUnsafeBytes {
            try LogEntryCodec.decode($0, transactionID: honest.transactionID)
        }
        #expect(entry.metadata["schemaChecksum"] != nil)
        // The entry another replica would have appended with other steps, or another v2 schema.
        for (key, value) in [("steps", "v2: something else"), ("schemaChecksum", "0")] {
            let other = LogEntry(transactionID: entry.transactionID, schemaVersion: entry.schemaVersion,
                                 timestampMs: entry.timestampMs, author: entry.author,
                                 metadata: entry.metadata.merging([key: value]) { $1 }, changes: [])
            var forged = honest
            forged.bytes = LogEntryCodec.encode(other)
            do {
                _ = try await store.migrateReplica(schemas: schemas, to: 2, registry: libraryMigrations, marker: forged)
                Issue.record("a replica migrated at an entry with another \(key)")
            } catch let e as MigrationError {
                #expect(e.reason.contains("planned with other schemas or steps"), "\(e.reason)")
            }
        }
        #expect(store.schema.version == 1)
    }
}

/// A cluster made from a store of library v1 tracks (replica `a`, its store `first` open at
/// `urlA`), in a fresh database, with the place `urlB` for a second replica.
struct V1Cluster {
    let schemas: [Schema]
    let v1: Schema
    let address: ClusterAddress
    let root: URL
    let urlA: URL
    let urlB: URL
    let first: Store

    static func make() async throws -> V1Cluster {
        let schemas = try Schema.loadAll(directory: librarySchemaDirectory)
        let v1 = try #require(schemas.first { $0.version == 1 })
        let address = try await TestPostgres.shared().freshDatabase()
        let root = temporaryDirectory("strata-cluster")
        let (urlA, urlB) = (root.appendingPathComponent("a"), root.appendingPathComponent("b"))
        try await makeV1TrackStore(at: urlA, schema: v1)
        let first = try Store.openExisting(at: urlA)
        try await Cluster.initialize(store: first, address: address, name: "a")
        return V1Cluster(schemas: schemas, v1: v1, address: address, root: root, urlA: urlA, urlB: urlB, first: first)
    }
}
