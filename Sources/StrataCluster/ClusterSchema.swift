import PostgresNIO

/// The tables, the append functions and the procedures that call them and commit, which a
/// cluster keeps in its PostgreSQL database (all named `strata_…`; `CALL` needs PostgreSQL 11 or
/// later). ``SharedLog`` explains why `strata_append` gives gap-free ids in commit order.
enum ClusterSchema {
    /// The layout of these tables and of the entries in them; a cluster made by a later layout
    /// is refused. Layout 2 has the tables of layout 1; its log may hold compressed entries,
    /// which a Strata that knows only layout 1 cannot read. Into a cluster of layout 1 (made by
    /// such a Strata, which may still run replicas of it) every entry is appended plain.
    static let layout: Int32 = 2
    /// The first layout whose log may hold compressed entries.
    static let compressedEntriesLayout: Int32 = 2
    /// The channel `strata_append` notifies (no payload: a signal to read the log).
    static let channel = "strata_log"

    static let create: [PostgresQuery] = [
        """
        CREATE TABLE strata_cluster (
            singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            cluster_id text NOT NULL,
            layout integer NOT NULL,
            model text NOT NULL,
            schema_version integer NOT NULL,
            head bigint NOT NULL,
            horizon bigint NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now())
        """,
        """
        CREATE TABLE strata_log (
            id bigint PRIMARY KEY,
            entry bytea NOT NULL,
            author text NOT NULL,
            saved_ms bigint NOT NULL,
            schema_version integer NOT NULL,
            replica text NOT NULL,
            appended_at timestamptz NOT NULL DEFAULT now(),
            footprint bigint[])
        """,
        """
        CREATE TABLE strata_snapshots (
            id bigserial PRIMARY KEY,
            position bigint NOT NULL,
            bytes bigint NOT NULL,
            chunks integer NOT NULL,
            checksum bigint NOT NULL,
            made_by text NOT NULL,
            complete boolean NOT NULL DEFAULT false,
            created_at timestamptz NOT NULL DEFAULT now())
        """,
        """
        CREATE TABLE strata_snapshot_chunks (
            snapshot_id bigint NOT NULL REFERENCES strata_snapshots ON DELETE CASCADE,
            seq integer NOT NULL,
            data bytea NOT NULL,
            PRIMARY KEY (snapshot_id, seq))
        """,
        """
        CREATE TABLE strata_replicas (
            name text PRIMARY KEY,
            applied bigint NOT NULL,
            host text NOT NULL,
            pid integer NOT NULL,
            last_seen timestamptz NOT NULL DEFAULT now())
        """,
        """
        CREATE FUNCTION strata_append(expected bigint, ids bigint[], entries bytea[], authors text[],
                                      saved bigint[], versions integer[], replica text) RETURNS boolean
        LANGUAGE plpgsql AS $$
        DECLARE
            n integer := cardinality(ids);
        BEGIN
            IF n = 0 OR ids <> ARRAY(SELECT generate_series(expected + 1, expected + n)) THEN
                RAISE EXCEPTION 'strata_append: ids % to % do not follow head %', ids[1], ids[n], expected;
            END IF;
            UPDATE strata_cluster SET head = expected + n,
                schema_version = GREATEST(schema_version, (SELECT max(v) FROM unnest(versions) AS v))
                WHERE singleton AND head = expected;
            IF NOT FOUND THEN
                RETURN false;
            END IF;
            INSERT INTO strata_log (id, entry, author, saved_ms, schema_version, replica)
                SELECT u.id, u.entry, u.author, u.saved, u.version, replica
                FROM unnest(ids, entries, authors, saved, versions) AS u(id, entry, author, saved, version);
            PERFORM pg_notify('strata_log', '');
            RETURN true;
        END $$
        """,
        // Appends entries validated at `expected` after the head as it is: right after
        // `expected`, or after later entries when all of them are there (none trimmed) and none
        // shares a hash with `p_footprint` (a footprint of NULL, as `strata_append` leaves, shares
        // everything). The entries were encoded for ids expected+1…; `p_checksums[i]` holds entry
        // i's checksum for each id from expected+i on (4 bytes each), so an entry moved k ids on
        // ends with the k-th. The footprint is stored with every entry of the group (a later
        // group may have been validated at a head inside this one). A head before `expected`
        // appends nothing. Returns rows of (the first
        // id taken, or 0 when nothing was appended;
        // then, when the entries moved, every entry after `expected` through the appended ones,
        // which the replica applies next: one row with NULLs otherwise).
        """
        CREATE FUNCTION strata_append_after(expected bigint, p_entries bytea[], p_checksums bytea[],
                                            p_authors text[], p_saved bigint[], p_versions integer[],
                                            p_footprint bigint[], p_replica text)
            RETURNS TABLE (first bigint, id bigint, entry bytea, author text, saved_ms bigint, schema_version integer)
        LANGUAGE plpgsql AS $$
        DECLARE
            n integer := cardinality(p_entries);
            shared_head bigint;
            moved bigint;
            present bigint;
            shared boolean;
        BEGIN
            IF n IS NULL OR n = 0 OR cardinality(p_checksums) <> n OR p_footprint IS NULL THEN
                RAISE EXCEPTION 'strata_append_after: % entries with % checksum lists', n, cardinality(p_checksums);
            END IF;
            SELECT c.head INTO shared_head FROM strata_cluster c WHERE c.singleton FOR UPDATE;
            moved := shared_head - expected;
            -- A replica past the head (the cluster lost entries) appends nothing: it learns why
            -- when it reads the log to catch up.
            IF moved > 0 AND moved * 4 + 4 <= length(p_checksums[1]) THEN
                -- One pass over the entries since `expected`, under the head row's lock.
                SELECT count(*), coalesce(bool_or(l.footprint IS NULL OR l.footprint && p_footprint), false)
                    INTO present, shared
                    FROM strata_log l WHERE l.id > expected AND l.id <= shared_head;
            END IF;
            IF moved <> 0 THEN
                IF moved < 0 OR moved * 4 + 4 > length(p_checksums[1]) OR present <> moved OR shared THEN
                    RETURN QUERY SELECT 0::bigint, NULL::bigint, NULL::bytea, NULL::text, NULL::bigint, NULL::integer;
                    RETURN;
                END IF;
            END IF;
            UPDATE strata_cluster c SET head = shared_head + n,
                schema_version = GREATEST(c.schema_version, (SELECT max(v) FROM unnest(p_versions) AS v))
                WHERE c.singleton;
            INSERT INTO strata_log (id, entry, author, saved_ms, schema_version, replica, footprint)
                SELECT shared_head + u.i,
                       CASE WHEN moved = 0 THEN u.entry
                            ELSE overlay(u.entry PLACING substring(u.sums FROM (moved * 4 + 1)::integer FOR 4)
                                         FROM length(u.entry) - 3) END,
                       u.author, u.saved, u.version, p_replica, p_footprint
                FROM unnest(p_entries, p_checksums, p_authors, p_saved, p_versions)
                     WITH ORDINALITY AS u(entry, sums, author, saved, version, i);
            PERFORM pg_notify('strata_log', '');
            IF moved = 0 THEN
                RETURN QUERY SELECT shared_head + 1, NULL::bigint, NULL::bytea, NULL::text, NULL::bigint, NULL::integer;
            ELSE
                RETURN QUERY SELECT shared_head + 1, l.id, l.entry, l.author, l.saved_ms, l.schema_version
                    FROM strata_log l WHERE l.id > expected AND l.id <= shared_head + n ORDER BY l.id;
            END IF;
        END $$
        """,
        // The two appends as procedures that commit before they answer (one round trip, and an
        // answer that only comes once PostgreSQL has committed: see ``SharedLog``). The second
        // answers the moved run as arrays (a procedure answers one row), only its first entries
        // up to `p_run_bytes` (one value of PostgreSQL holds at most 1 GB, and after the COMMIT
        // the answer should have nothing left that can fail): the replica reads the rest.
        PostgresQuery(unsafeSQL: """
        CREATE PROCEDURE strata_commit_append(expected bigint, ids bigint[], entries bytea[], authors text[],
                                              saved bigint[], versions integer[], replica text,
                                              INOUT o_done boolean DEFAULT NULL)
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM set_config('lock_timeout', '\(lockWaitMilliseconds)', true);
            o_done := strata_append(expected, ids, entries, authors, saved, versions, replica);
            COMMIT;
        END $$
        """),
        PostgresQuery(unsafeSQL: """
        CREATE PROCEDURE strata_commit_append_after(expected bigint, p_entries bytea[], p_checksums bytea[],
                                                    p_authors text[], p_saved bigint[], p_versions integer[],
                                                    p_footprint bigint[], p_replica text, p_run_bytes bigint,
                                                    INOUT o_first bigint DEFAULT NULL, INOUT o_ids bigint[] DEFAULT NULL,
                                                    INOUT o_entries bytea[] DEFAULT NULL,
                                                    INOUT o_authors text[] DEFAULT NULL,
                                                    INOUT o_saved bigint[] DEFAULT NULL,
                                                    INOUT o_versions integer[] DEFAULT NULL)
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM set_config('lock_timeout', '\(lockWaitMilliseconds)', true);
            SELECT max(w.first),
                   array_agg(w.id ORDER BY w.id) FILTER (WHERE w.id IS NOT NULL AND w.upto <= p_run_bytes),
                   array_agg(w.entry ORDER BY w.id) FILTER (WHERE w.id IS NOT NULL AND w.upto <= p_run_bytes),
                   array_agg(w.author ORDER BY w.id) FILTER (WHERE w.id IS NOT NULL AND w.upto <= p_run_bytes),
                   array_agg(w.saved_ms ORDER BY w.id) FILTER (WHERE w.id IS NOT NULL AND w.upto <= p_run_bytes),
                   array_agg(w.schema_version ORDER BY w.id) FILTER (WHERE w.id IS NOT NULL AND w.upto <= p_run_bytes)
                INTO o_first, o_ids, o_entries, o_authors, o_saved, o_versions
                FROM (SELECT a.*, sum(octet_length(a.entry)) OVER (ORDER BY a.id) AS upto
                      FROM strata_append_after(expected, p_entries, p_checksums, p_authors, p_saved, p_versions,
                                               p_footprint, p_replica) AS a) AS w;
            COMMIT;
        END $$
        """),
    ]

    /// The oldest PostgreSQL a cluster can be made in (`server_version_num`): procedures that
    /// commit, and `CALL`, came with PostgreSQL 11.
    static let oldestServer = 110_000

    /// Refuses a server older than ``oldestServer``, naming its version.
    static func requireCallableProcedures(_ session: PostgresSession) throws {
        let rows = try session.run("SELECT current_setting('server_version_num')::integer, version()")
        guard let row = rows.first, let (number, text) = try? row.decode((Int32, String).self) else {
            throw ClusterError(.refused, "the PostgreSQL at \(session.address) did not say which version it is")
        }
        if Int(number) < oldestServer {
            throw ClusterError(.refused, """
                the PostgreSQL at \(session.address) is \(text); a cluster needs PostgreSQL 11 or later \
                (its appends are procedures that commit)
                """)
        }
    }

    /// How long one wait of the committing procedures for a lock (the head row's, which a
    /// machine holds for its turn) may last before they give up with `lock_not_available`
    /// (55P03), having appended nothing, and the writer catches up and tries again: below the
    /// sessions' `statement_timeout`, so that a single long wait ends that way rather than as a
    /// cancelled statement (whose outcome the replica then has to look up, see ``SharedLog``).
    /// Written into the procedures when a cluster is made.
    static let lockWaitMilliseconds = PostgresSession.serverTimeoutMilliseconds - 4_000
}
