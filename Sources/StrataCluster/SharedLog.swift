import Foundation
import Logging
import PostgresNIO
import Synchronization
import Strata

/// The cluster's log in PostgreSQL, as a replica's writer sees it (``ReplicationLog``).
///
/// ## Why ids are gap-free and in commit order
///
/// An append is one call of `strata_append` (``ClusterSchema``), one statement in its own
/// transaction: `UPDATE strata_cluster SET head = H + n WHERE head = H`, then the n rows with ids
/// H+1…H+n, then `pg_notify`. The UPDATE takes the row lock of the cluster's one row and holds it
/// to the commit. A second appender's UPDATE waits for that lock; under READ COMMITTED it then
/// re-checks its `WHERE` against the row as committed: if the first committed, the head is no
/// longer H, nothing is updated, the function returns false and inserts nothing (the writer
/// catches up and tries again at the new head); if the first rolled back, the head is still H and
/// the second goes on. So:
/// - exactly one append succeeds per head value, and its ids start right after it: no id is
///   used twice, none is skipped (a rolled-back append moved nothing);
/// - an append for ids after H+n can only start once the append of H+1…H+n committed (it needs
///   the head it set), so ids commit in id order, and a reader that sees id k sees every id
///   before it. `WHERE id > applied ORDER BY id` never skips an entry that commits later.
///
/// PostgreSQL sequences give none of this: `nextval` is not transactional (a rollback leaves a
/// gap) and values are taken in one order and committed in another.
///
/// ``appendInTurn(_:)`` takes the same row lock first (`SELECT … FOR UPDATE` in a transaction of
/// its own), so the head it reads cannot move until it commits: `strata_append` at that head
/// then always succeeds, and every other appender waits for the lock meanwhile (and, under READ
/// COMMITTED, finds the head moved once it gets it). Waiters get the lock in the order they
/// asked, so a writer that waits its turn is never passed over for ever.
///
/// ## Appending after a later head
///
/// ``append(_:validatedAt:footprint:)`` calls `strata_append_after`, which locks the same row
/// (`SELECT … FOR UPDATE`) and so keeps every property above: it appends at the head it finds
/// under the lock, H′ ≥ H. When H′ > H it appends only if the entries H+1…H′ are all in the log
/// and none shares a hash with the group's footprint (an entry without one, as `strata_append`
/// writes, shares everything), which is when the group's validation at H holds at H′ too (see
/// ``ReplicationFootprint``). Each entry's checksum covers its id, so the replica sends, with
/// each entry, its checksum at each of the next ``appendWindow`` ids; the function writes the
/// one for the id it takes, and the stored entry is byte for byte what the replica would have
/// encoded there. A head more than that many ids on appends nothing.
final class SharedLog: ReplicationLog {
    let session: PostgresSession
    /// This replica's name, stored with each entry it appends.
    let replica: String
    /// How many ids past the head it was validated at an entry may move (a checksum of 4 bytes
    /// sent for each).
    static let appendWindow = 64
    /// False once the cluster's database turned out to have no `strata_append_after` (made by an
    /// earlier version): appends then go only right after the head they were validated at.
    private let footprintsCompared = Atomic<Bool>(true)
    /// What `strata_append_after` answered when it moved a group, when the answer held them all:
    /// every entry after the head the group was validated at, through the group's own. The
    /// replica's writer asks for exactly these next (``entries(after:limit:)``), and gets them
    /// without another round trip.
    private let movedRun = Mutex<(after: TransactionID, entries: [ReplicatedEntry])?>(nil)

    /// False once the cluster's database turned out to have no committing procedures
    /// (`strata_commit_append`, made by an earlier version): appends then run between BEGIN and
    /// COMMIT, three round trips instead of one.
    private let committingCalls = Atomic<Bool>(true)

    /// False for a cluster of layout 1 (``ClusterSchema/compressedEntriesLayout``): its replicas
    /// may run a Strata that cannot read compressed entries.
    let takesCompressedEntries: Bool

    /// The replica's follower's ledger of notifications (nil: no follower), told of each append
    /// and read this writer sends, and of the end of the log each one reached.
    let ledger: NotificationLedger?

    /// - Parameter layout: the cluster's layout (`strata_cluster.layout`).
    init(session: PostgresSession, replica: String, layout: Int, ledger: NotificationLedger? = nil) {
        self.session = session
        self.replica = replica
        self.ledger = ledger
        takesCompressedEntries = layout >= Int(ClusterSchema.compressedEntriesLayout)
    }

    /// Runs `statement` as one the ledger hears of: it returns its result and the end of the log
    /// it reached, if it did.
    private func noted<R>(_ statement: () throws -> (R, TransactionID?)) rethrows -> R {
        guard let ledger else { return try statement().0 }
        let mark = ledger.begin()
        var reached: TransactionID?
        defer { ledger.end(mark, reached: reached) }
        let (result, end) = try statement()
        reached = end
        return result
    }

    /// An append outside a machine's turn is one `CALL` of a procedure that runs the append
    /// function and then `COMMIT`s inside itself (`strata_commit_append`,
    /// `strata_commit_append_after`), not one statement committed implicitly: the answer to a
    /// statement of the extended protocol arrives before PostgreSQL commits it (at the Sync after
    /// it), and a commit that then fails (a deferred check, a cancelled wait for the NOTIFY
    /// queue's lock, a shutdown) was reported after the answer, when the client had taken the
    /// statement as done and acknowledged saves that PostgreSQL rolled back. The procedure's
    /// answer comes after its commit, and a failed commit is its error, as a `COMMIT`'s own would
    /// be; one round trip instead of the three of BEGIN, the statement and COMMIT (which a
    /// cluster made by an earlier version, without the procedures, still takes).
    ///
    /// A refused `CALL` may still have committed: PostgreSQL builds and sends the answer after
    /// the procedure's `COMMIT`, and a failure while it builds it (out of memory) or a cancel
    /// (`statement_timeout`) caught between the `COMMIT` and the answer ends the call with an
    /// error. Only refusals that happen before any commit (``callRefusedBeforeCommit``: a
    /// serialization failure, a deadlock, a lock wait that ran out,
    /// ``ClusterSchema/lockWaitMilliseconds``) are taken as they are. For any other the statement
    /// is over, committed or rolled back for good, so the replica has PostgreSQL look for its
    /// entries in the log (``committedBeforeRefusal(_:after:_:)``). A connection lost under the
    /// `CALL` leaves the outcome unknown: the server may still be running it.
    ///
    /// Refusals of an append that appended nothing and mean the writer should catch up and try
    /// again: a serialization failure or deadlock rolled it back (another machine appended
    /// first), or its wait for the head row's lock ran out of time (a machine held it for its turn
    /// all that while). It tries again, in its own turn at the latest.
    static let appendedNothing: Set<String> = ["40001", "40P01", "57014", "55P03"]

    /// ``appendedNothing`` for a committing procedure's `CALL`: without 57014, which may come
    /// after the procedure committed.
    static let callRefusedBeforeCommit = appendedNothing.subtracting(["57014"])

    /// How a committing `CALL` ended.
    private enum CallOutcome<Answer> {
        case answered(Answer)
        /// The cluster has no such procedure (or function): nothing was done, the append goes
        /// the older way.
        case noProcedure
        /// Nothing was appended, and the writer should catch up and try again.
        case behind
        /// PostgreSQL refused the call after it had committed: the entries are in the log from
        /// this id on.
        case committedAt(TransactionID)
    }

    /// Runs a committing procedure's `call` for `entries` validated at `head`: its answer, or
    /// how it ended without one. Any other failure is thrown as the append's error: an outcome
    /// unknown when the connection broke under the call.
    private func committingCall<R>(_ entries: [ReplicatedEntry], after head: TransactionID,
                                   _ call: () throws -> R) throws -> CallOutcome<R> {
        do {
            return .answered(try call())
        } catch let failure as PostgresSession.Failure {
            switch failure {
            case .refused("42883", let message) where message.contains("strata_"):
                // A procedure or the function it calls is missing: nothing ran.
                committingCalls.store(false, ordering: .relaxed)
                return .noProcedure
            case .refused(let sqlState, _) where Self.callRefusedBeforeCommit.contains(sqlState):
                return .behind
            case .refused(let sqlState, _):
                if let first = try committedBeforeRefusal(entries, after: head, failure) { return .committedAt(first) }
                // Cancelled before it committed (a long wait): as the other path's 57014.
                if sqlState == "57014" { return .behind }
                throw Self.appendError(failure, entries, sent: false)
            case .broken:
                throw Self.appendError(failure, entries, sent: true)
            case .notConnected:
                throw Self.appendError(failure, entries, sent: false)
            }
        }
    }

    /// Where the log holds `entries`, appended by this replica after `head` by a `CALL` that
    /// PostgreSQL then refused (`failure`): the id of the first, or nil when they are not there.
    /// The call is over, so its commit, if any, is visible here and no later one can come.
    ///
    /// PostgreSQL compares, so that no entry comes back: each of the group's entries must be
    /// there, this replica's, in order at consecutive ids from one moved position on, with its
    /// length, its time and, as its last 4 bytes, its checksum at the id it took (the checksums
    /// the replica sends with an append, which cover the entry's bytes and that id). A group this
    /// replica appended earlier with the same changes has other times (a retry comes after a
    /// failure, and a failure after at least a round trip). A horizon past `head` (the cluster
    /// trimmed the log meanwhile) leaves the outcome unknown: rows the lookup needs may be gone.
    private func committedBeforeRefusal(_ entries: [ReplicatedEntry], after head: TransactionID,
                                        _ failure: PostgresSession.Failure) throws -> TransactionID? {
        guard !entries.isEmpty else { return nil }
        let after = try Self.bigint(head)
        // The last id a move could have given the group (the log's ids stop at Int64.max).
        let (reach, overflow) = after.addingReportingOverflow(Int64(Self.appendWindow + entries.count))
        let through = overflow ? Int64.max : reach
        let lengths = entries.map { Int64($0.bytes.count) }, saved = entries.map(\.timestampMs)
        let sums = entries.map { ByteBuffer(bytes: $0.checksumBytes(from: $0.transactionID, count: Self.appendWindow)) }
        let firstID = entries[0].transactionID.rawValue, lastID = entries[entries.count - 1].transactionID.rawValue
        func unknown(_ why: String) -> StrataError {
            StrataError.replication(ReplicationError(.outcomeUnknown, """
                PostgreSQL refused the append of transactions \(firstID)–\(lastID) after it may have committed \
                (\(failure.text)), and \(why): they may or may not be in the cluster's log
                """))
        }
        let rows: PostgresQueryResult
        do {
            rows = try session.run("""
                SELECT c.horizon, m.i, m.id FROM strata_cluster c LEFT JOIN LATERAL (
                    SELECT u.i, l.id
                    FROM unnest(\(lengths)::bigint[], \(saved)::bigint[], \(sums)::bytea[]) WITH ORDINALITY
                         AS u(len, saved, sums, i)
                    JOIN strata_log l ON l.id >= \(after) + u.i AND l.id <= \(through) AND l.replica = \(replica)
                        AND l.id - \(after) - u.i < length(u.sums) / 4
                        AND octet_length(l.entry) = u.len AND l.saved_ms = u.saved
                        AND substring(l.entry FROM octet_length(l.entry) - 3 FOR 4)
                            = substring(u.sums FROM ((l.id - \(after) - u.i) * 4 + 1)::integer FOR 4)) m ON true
                """)
        } catch {
            throw unknown("the log could not be read to tell (\(error.text))")
        }
        // For each possible move, the entries found there.
        var found: [Int64: Set<Int64>] = [:]
        for row in rows {
            guard let (horizon, i, id) = try? row.decode((Int64, Int64?, Int64?).self) else {
                throw unknown("the log's answer to the lookup could not be read")
            }
            if horizon > after { throw unknown("the cluster's log was trimmed past transaction \(after) meanwhile") }
            guard let i, let id else { continue }
            found[id - after - i, default: []].insert(i)
        }
        let all = Set(1...Int64(entries.count))
        guard let moved = found.filter({ $0.value == all }).keys.min() else { return nil }
        guard let position = UInt64(exactly: after + 1 + moved) else { return nil }
        return TransactionID(position)
    }

    func append(_ entries: [ReplicatedEntry], after head: TransactionID) throws -> ReplicationAppend {
        guard !entries.isEmpty else { return .appended }
        if committingCalls.load(ordering: .relaxed) {
            let outcome = try noted { () throws -> (CallOutcome<Bool>, TransactionID?) in
                let outcome = try committingCall(entries, after: head) {
                    try appendStatement(entries, after: head, committing: true)
                }
                guard case .answered(true) = outcome else { return (outcome, nil) }
                return (outcome, entries.last?.transactionID)
            }
            switch outcome {
            case .answered(let done): return done ? .appended : .behind
            case .behind: return .behind
            case .committedAt(let first) where first == head.next: return .appended
            case .committedAt(let first):
                throw StrataError.replication(ReplicationError(.outcomeUnknown, """
                    strata_commit_append appended transactions validated after \(head) at \(first)
                    """))
            case .noProcedure: break
            }
        }
        // Whether the append statement went through and only the COMMIT was left (as in
        // ``appendInTurn(_:)``): a connection that broke before, at the BEGIN or under the
        // statement, ended an uncommitted transaction, which PostgreSQL rolls back.
        var sent = false
        do {
            let appended = try noted { () throws -> (Bool, TransactionID?) in
                let done = try session.transaction {
                    let done = try Self.rolledBack { try appendStatement(entries, after: head) }
                    sent = true
                    return done
                }
                return (done, done ? entries.last?.transactionID : nil)
            }
            return appended ? .appended : .behind
        } catch let failure as PostgresSession.Failure {
            switch failure {
            case .refused(let sqlState, _) where Self.appendedNothing.contains(sqlState):
                return .behind
            default:
                throw Self.appendError(failure, entries, sent: sent)
            }
        }
    }

    /// `statement`, run inside an append's transaction: an outcome it finds unknown (an answer
    /// without the row it expects) is thrown inside the transaction, which is then rolled back,
    /// so nothing was appended (`unavailable`).
    private static func rolledBack<R>(_ statement: () throws -> R) throws -> R {
        do {
            return try statement()
        } catch StrataError.replication(let e) where e.kind == .outcomeUnknown {
            throw StrataError.replication(ReplicationError(.unavailable, e.reason))
        }
    }

    func append(_ entries: [ReplicatedEntry], validatedAt head: TransactionID,
                footprint: ReplicationFootprint) throws -> ReplicationAppend {
        guard !entries.isEmpty else { return .appended }
        guard footprintsCompared.load(ordering: .relaxed) else { return try append(entries, after: head) }
        var first: Int64 = 0, run: [ReplicatedEntry] = []
        var answered = false
        if committingCalls.load(ordering: .relaxed) {
            let outcome = try noted { () throws -> (CallOutcome<(Int64, [ReplicatedEntry])>, TransactionID?) in
                let outcome = try committingCall(entries, after: head) {
                    try appendAfterCall(entries, validatedAt: head, footprint: footprint)
                }
                guard case .answered(let answer) = outcome else { return (outcome, nil) }
                return (outcome, Self.end(ofGroupAt: answer.0, entries))
            }
            switch outcome {
            case .answered(let answer):
                (first, run) = answer
                answered = true
            case .behind: return .behind
            case .committedAt(let position):
                (first, run) = (Int64(position.rawValue), [])
                answered = true
            case .noProcedure: break
            }
        }
        if !answered {
            guard let answer = try appendAfterInTransaction(entries, validatedAt: head, footprint: footprint) else {
                // No such function: a cluster made by an earlier version. The statement did
                // nothing; this and every later append go right after their head only.
                return try append(entries, after: head)
            }
            (first, run) = answer
        }
        return try taken(first, run, entries, validatedAt: head, wholeRun: !answered)
    }

    /// The end of the log a group's append reached, taken at `first` (`strata_append_after`'s
    /// answer): the group's last id; nil when nothing was appended (`first` 0).
    private static func end(ofGroupAt first: Int64, _ entries: [ReplicatedEntry]) -> TransactionID? {
        let (end, overflow) = first.addingReportingOverflow(Int64(entries.count) - 1)
        guard first > 0, !overflow, let last = UInt64(exactly: end) else { return nil }
        return TransactionID(last)
    }

    /// ``append(_:validatedAt:footprint:)`` between BEGIN and COMMIT (a cluster without the
    /// committing procedures): what `strata_append_after` answered, or nil when the cluster has
    /// no such function either (nothing was done).
    private func appendAfterInTransaction(_ entries: [ReplicatedEntry], validatedAt head: TransactionID,
                                          footprint: ReplicationFootprint) throws -> (Int64, [ReplicatedEntry])? {
        let first: Int64, run: [ReplicatedEntry]
        var sent = false
        do {
            (first, run) = try noted { () throws -> ((Int64, [ReplicatedEntry]), TransactionID?) in
                let answer = try session.transaction {
                    let answer = try Self.rolledBack {
                        try appendAfterStatement(entries, validatedAt: head, footprint: footprint)
                    }
                    sent = true
                    return answer
                }
                return (answer, Self.end(ofGroupAt: answer.0, entries))
            }
        } catch let failure as PostgresSession.Failure {
            switch failure {
            case .refused(let sqlState, let message)
                where sqlState == "42883" && message.contains("strata_append_after("):
                footprintsCompared.store(false, ordering: .relaxed)
                return nil
            case .refused(let sqlState, _) where Self.appendedNothing.contains(sqlState):
                return (0, [])
            default:
                throw Self.appendError(failure, entries, sent: sent)
            }
        }
        return (first, run)
    }

    /// What `strata_append_after` answered (`first`, and the moved `run`) as the append's outcome.
    /// `wholeRun`: the answer holds every entry of a moved run (the statement's does; a
    /// committing call's is cut after ``readBytes``, and one found after a refusal has none).
    private func taken(_ first: Int64, _ run: [ReplicatedEntry], _ entries: [ReplicatedEntry],
                       validatedAt head: TransactionID, wholeRun: Bool) throws -> ReplicationAppend {
        if first == 0 { return .behind }
        // A group moves fewer than ``appendWindow`` ids (it carries checksums for no more): an
        // answer past them is not this protocol's (a procedure replaced in the database).
        guard let position = UInt64(exactly: first), position >= head.next.rawValue,
              position - head.next.rawValue < UInt64(Self.appendWindow) else {
            throw StrataError.replication(ReplicationError(.outcomeUnknown, """
                strata_append_after answered \(first) for transactions validated after \(head)
                """))
        }
        if position == head.next.rawValue { return .appended }
        let last = position + UInt64(entries.count) - 1
        // Every entry after `head` through the group's.
        let runLength = Int(last - head.rawValue)
        // The whole run, or the first entries of it (a committing call answers them up to
        // ``readBytes``; none when it was refused after its commit): the replica reads the rest.
        guard wholeRun ? run.count == runLength : run.count <= runLength,
              run.indices.allSatisfy({ run[$0].transactionID.rawValue == head.next.rawValue + UInt64($0) }) else {
            throw StrataError.replication(ReplicationError(.outcomeUnknown, """
                strata_append_after appended transactions \(position)–\(last) but answered \(run.count) entries \
                after \(head)
                """))
        }
        if run.count == runLength { movedRun.withLock { $0 = (head, run) } }
        return .appendedLater(first: TransactionID(position))
    }

    /// The author as the log table's `author` column shows it: PostgreSQL's text holds no NUL
    /// character, so each becomes U+FFFD there. The column is a copy for people reading the
    /// table; the entry's bytes keep the author exactly, and replicas take it from them. (Sent
    /// as it is, one author with a NUL failed the whole group's append, every saver in it.)
    static func authorColumn(_ author: String) -> String {
        // Literally: a NUL followed by a combining mark is one Character that is not "\u{0}".
        author.unicodeScalars.contains("\u{0}")
            ? author.replacingOccurrences(of: "\u{0}", with: "\u{FFFD}", options: .literal) : author
    }

    /// The arguments of `strata_append_after` for `entries` validated at `head`.
    private func appendAfterArguments(_ entries: [ReplicatedEntry], validatedAt head: TransactionID)
        throws -> (expected: Int64, payloads: [ByteBuffer], sums: [ByteBuffer], authors: [String],
                   saved: [Int64], versions: [Int32]) {
        var payloads: [ByteBuffer] = [], sums: [ByteBuffer] = [], authors: [String] = [], saved: [Int64] = []
        var versions: [Int32] = []
        for (i, e) in entries.enumerated() {
            precondition(e.transactionID.rawValue == head.rawValue + UInt64(i) + 1,
                         "a group's entries follow the head it was validated at")
            payloads.append(ByteBuffer(bytes: e.bytes))
            sums.append(ByteBuffer(bytes: e.checksumBytes(from: e.transactionID, count: Self.appendWindow)))
            authors.append(Self.authorColumn(e.author))
            saved.append(e.timestampMs)
            versions.append(Int32(e.schemaVersion))
        }
        return (try Self.bigint(head), payloads, sums, authors, saved, versions)
    }

    /// Calls `strata_commit_append_after` for `entries` validated at `head` (committed when it
    /// answers): as ``appendAfterStatement(_:validatedAt:footprint:)``'s answer, the moved run
    /// cut after ``readBytes``. An answer that does not read as one leaves the outcome unknown:
    /// the call has committed by then.
    private func appendAfterCall(_ entries: [ReplicatedEntry], validatedAt head: TransactionID,
                                 footprint: ReplicationFootprint) throws -> (Int64, [ReplicatedEntry]) {
        let a = try appendAfterArguments(entries, validatedAt: head), keys = footprint.keys
        let query: PostgresQuery = """
            CALL strata_commit_append_after(\(a.expected), \(a.payloads), \(a.sums), \(a.authors), \(a.saved), \
            \(a.versions), \(keys), \(replica), \(Int64(readBytes)), NULL, NULL, NULL, NULL, NULL, NULL)
            """
        let rows = try session.run(query)
        typealias Answer = (Int64?, [Int64]?, [ByteBuffer]?, [String]?, [Int64]?, [Int32]?)
        guard rows.count == 1, let row = rows.first, let answer = try? row.decode(Answer.self),
              let first = answer.0 else {
            throw StrataError.replication(ReplicationError(.outcomeUnknown, """
                strata_commit_append_after at \(session.address) answered what does not read as its result
                """))
        }
        let ids = answer.1 ?? [], payloads = answer.2 ?? [], authors = answer.3 ?? []
        let saved = answer.4 ?? [], versions = answer.5 ?? []
        guard payloads.count == ids.count, authors.count == ids.count, saved.count == ids.count,
              versions.count == ids.count else {
            throw StrataError.replication(ReplicationError(.outcomeUnknown, """
                strata_commit_append_after at \(session.address) answered columns of different lengths
                """))
        }
        var run: [ReplicatedEntry] = []
        run.reserveCapacity(ids.count)
        for i in ids.indices {
            run.append(try ReplicatedEntry(row: ids[i], payloads[i], authors[i], saved[i], versions[i]))
        }
        return (first, run)
    }

    /// Runs `strata_append_after` for `entries` validated at `head`: the first id they took (0
    /// when nothing was appended), and, when they moved, the entries after `head` through theirs.
    private func appendAfterStatement(_ entries: [ReplicatedEntry], validatedAt head: TransactionID,
                                      footprint: ReplicationFootprint) throws -> (Int64, [ReplicatedEntry]) {
        let a = try appendAfterArguments(entries, validatedAt: head), keys = footprint.keys
        let query: PostgresQuery = """
            SELECT * FROM strata_append_after(\(a.expected), \(a.payloads), \(a.sums), \(a.authors), \(a.saved), \
            \(a.versions), \(keys), \(replica))
            """
        let rows = try session.run(query)
        var first: Int64?
        var run: [ReplicatedEntry] = []
        for row in rows {
            let decoded = try? row.decode((Int64, Int64?, ByteBuffer?, String?, Int64?, Int32?).self)
            guard let (taken, id, payload, author, saved, version) = decoded, first == nil || first == taken else {
                throw StrataError.replication(ReplicationError(.outcomeUnknown, """
                    strata_append_after at \(session.address) answered a row that does not read as its result
                    """))
            }
            first = taken
            guard let id, let payload, let author, let saved, let version else { continue }
            run.append(try ReplicatedEntry(row: id, payload, author, saved, version))
        }
        guard let first else {
            throw StrataError.replication(ReplicationError(.outcomeUnknown,
                                                           "strata_append_after at \(session.address) answered no row"))
        }
        return (first, run)
    }

    func appendInTurn(_ body: (TransactionID) throws -> [ReplicatedEntry]) throws {
        var entries: [ReplicatedEntry] = []
        // Whether the append went through and only the COMMIT was left: a connection that broke
        // before (the append's own statement included) ended an uncommitted transaction, which
        // PostgreSQL rolls back; only a COMMIT whose answer is lost leaves the outcome unknown.
        var sent = false
        do {
            try session.transaction {
                let rows = try session.run("SELECT head FROM strata_cluster WHERE singleton FOR UPDATE")
                guard let row = rows.first else {
                    throw StrataError.replication(ReplicationError(.rejectedEntry, "the cluster at \(session.address) has no head row"))
                }
                let head: Int64
                do { head = try row.decode(Int64.self) } catch {
                    throw StrataError.replication(ReplicationError(.rejectedEntry, "the cluster's head: \(error)"))
                }
                // Past the largest id, a save's id would not fit the log's `bigint`.
                guard let position = UInt64(exactly: head), position < TransactionID.largest.rawValue else {
                    throw StrataError.replication(ReplicationError(.rejectedEntry, "the cluster's head is \(head)"))
                }
                entries = try body(TransactionID(position))
                guard !entries.isEmpty else { return }
                let appended = try Self.rolledBack { try appendStatement(entries, after: TransactionID(position)) }
                guard appended else {
                    // Impossible while this transaction holds the head's row lock.
                    throw StrataError.replication(ReplicationError(.rejectedEntry, """
                        the cluster's head moved from \(position) while this replica held its lock
                        """))
                }
                sent = true
            }
        } catch let failure as PostgresSession.Failure {
            throw Self.appendError(failure, entries, sent: sent)
        }
    }

    /// Runs `strata_append` for `entries` after `head`: true when it appended them. `committing`:
    /// through `strata_commit_append`, committed when it answers (an answer that does not read as
    /// one then leaves the outcome unknown, as it does here).
    private func appendStatement(_ entries: [ReplicatedEntry], after head: TransactionID,
                                 committing: Bool = false) throws -> Bool {
        var ids: [Int64] = [], payloads: [ByteBuffer] = [], authors: [String] = [], saved: [Int64] = []
        var versions: [Int32] = []
        for e in entries {
            ids.append(try Self.bigint(e.transactionID))
            payloads.append(ByteBuffer(bytes: e.bytes))
            authors.append(Self.authorColumn(e.author))
            saved.append(e.timestampMs)
            versions.append(Int32(e.schemaVersion))
        }
        let expected = try Self.bigint(head)
        let query: PostgresQuery = committing ? """
            CALL strata_commit_append(\(expected), \(ids), \(payloads), \(authors), \(saved), \(versions), \(replica), NULL)
            """ : """
            SELECT strata_append(\(expected), \(ids), \(payloads), \(authors), \(saved), \(versions), \(replica))
            """
        let rows = try session.run(query)
        guard let row = rows.first, let done = try? row.decode(Bool?.self) ?? nil else {
            throw StrataError.replication(ReplicationError(.outcomeUnknown,
                                                           "strata_append at \(session.address) answered no result"))
        }
        return done
    }

    /// A failed append's error: nothing appended unless the connection broke after the append
    /// was `sent` (then the outcome is unknown).
    private static func appendError(_ failure: PostgresSession.Failure, _ entries: [ReplicatedEntry],
                                    sent: Bool) -> StrataError {
        let first = entries.first?.transactionID.rawValue ?? 0, last = entries.last?.transactionID.rawValue ?? 0
        switch failure {
        case .notConnected(let s):
            return .replication(ReplicationError(.unavailable, s))
        case .refused where entries.isEmpty:
            return .replication(ReplicationError(.unavailable, """
                PostgreSQL refused this replica its turn to append: \(failure.text)
                """))
        case .refused:
            return .replication(ReplicationError(.unavailable, """
                PostgreSQL refused the append of transactions \(first)–\(last): \(failure.text)
                """))
        case .broken(let s) where !sent:
            return .replication(ReplicationError(.unavailable, "\(s) before anything was appended"))
        case .broken(let s):
            return .replication(ReplicationError(.outcomeUnknown, """
                \(s) during the append of transactions \(first)–\(last): they may or may not be in the \
                cluster's log
                """))
        }
    }

    /// The entries after `position` (``entries(_:after:limit:)``), or, once, the run a moved
    /// append answered, when it answers this question: that run ends with the group's own
    /// entries, may be followed by later ones though shorter than `limit`, and is bounded by the
    /// append window and the group (and, answered by a committing call, by ``readBytes``: only
    /// a whole run is kept). Its only reader, the writer's catch-up after that append, needs the
    /// entries through the group's, no more.
    func entries(after position: TransactionID, limit: Int) throws -> [ReplicatedEntry] {
        // The run a moved append answered, once, when this is the question it answers.
        let answered = movedRun.withLock { run -> [ReplicatedEntry]? in
            defer { run = nil }
            guard let r = run, r.after == position, r.entries.count < limit else { return nil }
            return r.entries
        }
        if let answered { return answered }
        return try noted { () throws -> ([ReplicatedEntry], TransactionID?) in
            let (entries, head) = try Self.entriesAndHead(session, after: position, limit: limit)
            return (entries, Self.end(of: entries, after: position, head: head))
        }
    }

    /// `head` when `entries`, read after `position`, are every entry through it.
    static func end(of entries: [ReplicatedEntry], after position: TransactionID,
                    head: TransactionID?) -> TransactionID? {
        guard let head, (entries.last?.transactionID ?? position) == head else { return nil }
        return head
    }

    /// The log's entries after `position` (at most `limit`, and no more once they reach
    /// ``ReplicatedEntry/maxReadBytes``), in id order, read with the cluster's retention horizon
    /// in one statement. (`octet_length` of a stored value reads its size, not the value.)
    static func entries(_ session: PostgresSession, after position: TransactionID,
                        limit: Int) throws -> [ReplicatedEntry] {
        try entriesAndHead(session, after: position, limit: limit).entries
    }

    /// ``entries(_:after:limit:)`` and the cluster's head as the same statement read it.
    static func entriesAndHead(_ session: PostgresSession, after position: TransactionID,
                               limit: Int) throws -> (entries: [ReplicatedEntry], head: TransactionID?) {
        let after = Int64(position.rawValue), count = Int64(limit)
        let budget = Int64(readBytes(session))
        let query: PostgresQuery = """
            SELECT c.horizon, c.head, l.id, l.entry, l.author, l.saved_ms, l.schema_version
            FROM strata_cluster c LEFT JOIN LATERAL (
                SELECT id, entry, author, saved_ms, schema_version FROM (
                    SELECT id, entry, author, saved_ms, schema_version,
                           sum(octet_length(entry)) OVER (ORDER BY id) - octet_length(entry) AS before
                    FROM strata_log WHERE id > \(after) ORDER BY id LIMIT \(count)) w
                WHERE w.before < \(budget)) l ON true
            ORDER BY l.id
            """
        let rows: PostgresQueryResult
        do {
            rows = try session.run(query)
        } catch {
            throw StrataError.replication(ReplicationError(.unavailable, "reading the cluster's log: \(error.text)"))
        }
        do {
            return try decodeEntries(rows, after: after)
        } catch let e as StrataError {
            throw e
        } catch {
            throw StrataError.replication(ReplicationError(.rejectedEntry,
                                                           "the cluster's log cannot be read: \(error)"))
        }
    }

    /// `id` as the log's `bigint` column holds it (ids past 2^63 − 1 are refused, not trapped).
    static func bigint(_ id: TransactionID) throws -> Int64 {
        guard let v = Int64(exactly: id.rawValue) else {
            throw StrataError.replication(ReplicationError(.rejectedEntry, "transaction id \(id) does not fit the cluster's log"))
        }
        return v
    }

    /// A smaller ``ReplicatedEntry/maxReadBytes`` for reads of the cluster in `database` (tests).
    static let readBytesForTesting = Mutex<[String: Int]>([:])

    /// The bytes of entries after which a read through `session` stops.
    static func readBytes(_ session: PostgresSession) -> Int {
        readBytesForTesting.withLock { $0[session.address.database] } ?? ReplicatedEntry.maxReadBytes
    }

    var readBytes: Int { Self.readBytes(session) }

    /// The rows of ``entries(_:after:limit:)``'s statement as entries, checked against the
    /// cluster's head and horizon.
    private static func decodeEntries(_ rows: PostgresQueryResult,
                                      after: Int64) throws -> (entries: [ReplicatedEntry], head: TransactionID?) {
        var entries: [ReplicatedEntry] = []
        var sharedHead: TransactionID?
        entries.reserveCapacity(rows.count)
        for row in rows {
            let (horizon, head, id, payload, author, saved, version) = try row.decode(
                (Int64, Int64, Int64?, ByteBuffer?, String?, Int64?, Int32?).self)
            sharedHead = UInt64(exactly: head).map(TransactionID.init)
            if after > head {
                throw StrataError.replication(ReplicationError(.rejectedEntry, """
                    this replica is at transaction \(after), past the cluster's head \(head): the database lost \
                    transactions it had committed (restored from a backup, or a standby promoted?); this replica's \
                    history is no longer the cluster's, start it again with `storectl cluster reset STORE`
                    """))
            }
            if after < horizon {
                throw StrataError.replication(ReplicationError(.behindRetention, """
                    this replica is at transaction \(after), and the cluster keeps its log only after transaction \
                    \(horizon) (older entries were trimmed with a snapshot): start it again from the latest \
                    snapshot with `storectl cluster reset STORE` (Cluster.reset)
                    """))
            }
            guard let id, let payload, let author, let saved, let version else {
                // No entry after `after`, though the head is past it: the log lost entries it
                // had (a hand edit, a damaged database). Reading again would find nothing either.
                if head > after {
                    throw StrataError.replication(ReplicationError(.rejectedEntry, """
                        the cluster's head is \(head) but its log has no entry after transaction \(after)
                        """))
                }
                continue
            }
            entries.append(try ReplicatedEntry(row: id, payload, author, saved, version))
        }
        return (entries, sharedHead)
    }
}

extension ReplicatedEntry {
    /// An entry as a row of `strata_log` holds it (`id`, `entry`, `author`, `saved_ms`,
    /// `schema_version`).
    /// - Throws: ``ReplicationError/Kind/rejectedEntry`` for an id no transaction has (negative).
    init(row id: Int64, _ payload: ByteBuffer, _ author: String, _ savedMs: Int64, _ version: Int32) throws {
        guard let tx = UInt64(exactly: id) else {
            throw StrataError.replication(ReplicationError(.rejectedEntry, "the cluster's log holds id \(id)"))
        }
        self.init(transactionID: TransactionID(tx), bytes: Array(buffer: payload), author: author,
                  timestampMs: savedMs, schemaVersion: Int(version))
    }
}

extension Error {
    /// A session failure's words, or the error's own.
    var text: String { (self as? PostgresSession.Failure)?.text ?? "\(self)" }
}
