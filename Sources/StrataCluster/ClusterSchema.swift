import PostgresNIO

/// The tables and the append function a cluster keeps in its PostgreSQL database (all named
/// `strata_…`). ``SharedLog`` explains why `strata_append` gives gap-free ids in commit order.
enum ClusterSchema {
    /// The layout of these tables; a cluster made by a later layout is refused.
    static let layout: Int32 = 1
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
            appended_at timestamptz NOT NULL DEFAULT now())
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
    ]
}
