"""PostgreSQL schema: the DDL of each ordered migration and the SQL the backend sends as constants.

The change-log triggers, the statement-level edge-end checks that replace the foreign keys, the
migrations list ``MIGRATIONS`` (``SCHEMA_VERSION`` entries, recorded in
``causalmem_state.schema_version``), and the statements ``postgres.PostgresStore`` builds its queries
from (insert column lists and their binary ``COPY`` types, the scope condition, the next free keys,
the superseded set). No connection here: ``postgres.py`` runs them.
"""
from __future__ import annotations

import re

from ._common import sleep_edge_select

#: schemas 1-3 are the SQLite backend's; PostgreSQL's 4-6 change only its physical layout (see
#: ``V4``, ``V5``, ``V6``; SQLite's own 4 is an index change of its own): the rows and their meaning are
#: those of SQLite's schema 3, the same on both backends
SCHEMA_VERSION = 8
DEFAULT_SCHEMA = "causalmem"
#: first key of the two-key advisory locks ("CMem")
LOCK_NAMESPACE = 0x434D656D
SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

# The change log: statement-level triggers with transition tables record which rows each write
# transaction touched, under that transaction's change sequence (``kind`` = table code + i/u/d).
# Another host's views catch up from these keys instead of re-reading everything.
LOG_TRIGGERS = """
        CREATE FUNCTION log_{table}() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$
        BEGIN
            INSERT INTO changes (seq, kind, key)
            SELECT COALESCE(NULLIF(current_setting('causalmem.seq', true), '')::bigint,
                            (SELECT seq FROM causalmem_state)), TG_ARGV[0], {key} FROM changed_rows;
            RETURN NULL;
        END $f$;
        CREATE TRIGGER {table}_log_i AFTER INSERT ON {table} REFERENCING NEW TABLE AS changed_rows
            FOR EACH STATEMENT EXECUTE FUNCTION log_{table}('{code}i');
        CREATE TRIGGER {table}_log_u AFTER UPDATE ON {table} REFERENCING NEW TABLE AS changed_rows
            FOR EACH STATEMENT EXECUTE FUNCTION log_{table}('{code}u');
        CREATE TRIGGER {table}_log_d AFTER DELETE ON {table} REFERENCING OLD TABLE AS changed_rows
            FOR EACH STATEMENT EXECUTE FUNCTION log_{table}('{code}d');
"""
# Schema 3: one change-log row per statement and kind, its keys as an array (a batch of 4,000 chunks
# logs one row, not 4,000). The log restarts empty: a host further behind re-reads everything.
LOG_V3 = """
        DROP TABLE changes;
        CREATE TABLE changes (
            seq BIGINT NOT NULL,
            kind TEXT NOT NULL,
            keys BIGINT[] NOT NULL
        );
        CREATE INDEX changes_seq ON changes(seq);
        UPDATE causalmem_state SET log_floor = seq;
""" + "".join(f"""
        CREATE OR REPLACE FUNCTION log_{table}() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$
        BEGIN
            INSERT INTO changes (seq, kind, keys)
            SELECT COALESCE(NULLIF(current_setting('causalmem.seq', true), '')::bigint,
                            (SELECT seq FROM causalmem_state)), TG_ARGV[0], array_agg({key}) FROM changed_rows
            HAVING COUNT(*) > 0;
            RETURN NULL;
        END $f$;""" for table, key in (("chunks", "nid"), ("edges", "eid"), ("cooccurrence", "a"),
                                      ("embeddings", "nid")))
# Schema 4 (PostgreSQL only; the logical content is SQLite's schema 3):
# * an edge's two ends are checked once per statement instead of by a foreign key's per-row trigger
#   (a lookup and a row lock per end, ~2/3 of a bulk edge insert's server time): the inserted ends
#   must all be chunks, and those not inserted by this transaction are locked FOR KEY SHARE, as the
#   foreign key locks them, so a concurrent delete of an end waits for this transaction and then
#   fails its own check; deleting (or renumbering) a chunk an edge still names is refused. The
#   same integrity as the foreign key, for every client of the database, in one query per insert
#   statement (updates of src/dst or of a chunk's nid, which causalmem never makes, per row).
# * the exact-text reuse index holds the text hash alone (the scope is checked on the few rows a
#   hash finds): a smaller entry per chunk in the one index whose inserts land in random order.
# each check: a trigger function that raises foreign_key_violation when ``failed`` holds after ``body``
FK_CHECK = """
        CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT{plan} AS $f$
        DECLARE
            wanted BIGINT;
            found BIGINT;
            locked BIGINT;
        BEGIN{body}
            IF {failed} THEN
                RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation', MESSAGE = '{message}';
            END IF;
            RETURN {ret};
        END $f$;
        CREATE TRIGGER {trigger} {event} FOR EACH {level} EXECUTE FUNCTION {name}();
"""
# one index probe per key (never a scan of the chunks or edges, whatever the planner estimates)
PROBES = " SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off"
ENDS = "(SELECT src AS nid FROM new_edges UNION SELECT dst FROM new_edges)"
NO_END = "an edge names a chunk that does not exist (edges.src/dst -> chunks.nid)"
V4 = """
        ALTER TABLE edges DROP CONSTRAINT IF EXISTS edges_src_fkey;
        ALTER TABLE edges DROP CONSTRAINT IF EXISTS edges_dst_fkey;
        DROP INDEX IF EXISTS chunks_reuse;
        CREATE INDEX chunks_reuse ON chunks(text_hash);
""" + FK_CHECK.format(
    # ends inserted (or last updated) by this transaction are invisible to, or locked against, every
    # other one: no lock needed; the others are locked as a foreign key would
    name="check_edge_ends", plan=PROBES, ret="NULL", message=NO_END, level="STATEMENT",
    trigger="edges_ends_i", event="AFTER INSERT ON edges REFERENCING NEW TABLE AS new_edges",
    body=f"""
            SELECT COUNT(*), COUNT(c.nid) FILTER (WHERE c.xmin = pg_current_xact_id()::xid) INTO wanted, found
            FROM {ENDS} e LEFT JOIN chunks c ON c.nid = e.nid;
            IF found < wanted THEN
                SELECT COUNT(*) INTO locked FROM (SELECT 1 FROM chunks c JOIN {ENDS} e ON c.nid = e.nid
                    WHERE c.xmin <> pg_current_xact_id()::xid FOR KEY SHARE OF c) f;
                found := found + locked;
            END IF;""", failed="found <> wanted") + FK_CHECK.format(
    name="check_edge_ends_moved", plan="", ret="NEW", message=NO_END, level="ROW",
    trigger="edges_ends_u", event="BEFORE UPDATE OF src, dst ON edges", body="""
            SELECT COUNT(*) INTO found FROM (SELECT 1 FROM chunks c WHERE c.nid IN (NEW.src, NEW.dst)
                FOR KEY SHARE) f;""",
    failed="found <> (CASE WHEN NEW.src = NEW.dst THEN 1 ELSE 2 END)") + FK_CHECK.format(
    name="check_chunk_unreferenced", plan=PROBES, ret="NULL", level="STATEMENT",
    message="a chunk that an edge still names cannot be deleted (edges.src/dst -> chunks.nid)",
    trigger="chunks_referenced_d", event="AFTER DELETE ON chunks REFERENCING OLD TABLE AS old_chunks", body="",
    failed="EXISTS (SELECT 1 FROM old_chunks o JOIN edges e ON e.src = o.nid "
           "WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.nid = o.nid)) "
           "OR EXISTS (SELECT 1 FROM old_chunks o JOIN edges e ON e.dst = o.nid "
           "WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.nid = o.nid))") + FK_CHECK.format(
    name="check_chunk_renumbered", plan="", ret="NEW", level="ROW",
    message="a chunk that an edge still names cannot be renumbered (edges.src/dst -> chunks.nid)",
    trigger="chunks_referenced_u", event="BEFORE UPDATE OF nid ON chunks", body="",
    failed="NEW.nid <> OLD.nid AND EXISTS (SELECT 1 FROM edges e WHERE e.src = OLD.nid OR e.dst = OLD.nid)")
# Schema 5 (PostgreSQL only, the rows unchanged): the change log's key arrays are stored out of line
# uncompressed. A bulk write logs one array of thousands of keys per statement; compressing it
# (pglz, the default for arrays over 2 kB) was ~9% of a 2,000-pair ``record_many``'s server time.
V5 = """
        ALTER TABLE changes ALTER COLUMN keys SET STORAGE EXTERNAL;
"""
# Schema 6 (PostgreSQL only, the rows unchanged):
# * no ``chunks_scope`` index. No statement causalmem sends on PostgreSQL used it: the reuse lookup
#   finds its rows by text hash and checks the scope with ``IS NOT DISTINCT FROM`` (which a btree does
#   not answer), and a whole-scope statement (``delete``/``stats`` of one user) reads most of the
#   table anyway. It cost an index entry per chunk written (~8% of a bulk write's server time) and
#   per updated row version.
# * ``chunks`` and ``cooccurrence`` keep 10% of each page free (``fillfactor`` 90; pages written
#   before keep theirs): the access counts a search's reinforcement writes and the co-occurrence
#   upserts change no indexed column, so with room on the page they update in place (HOT, no new
#   index entries) instead of moving every updated row to a new page.
# * the edge-end check skips the ends that this (sub)transaction's own bulk ``COPY`` of chunks just
#   inserted: the store names that key range in the transaction-local setting ``causalmem.own_nids``
#   (``lo:hi``) in the same (sub)transaction, right before the ``COPY``, so an error of the ``COPY``
#   rolls the setting back with the rows. A delete or renumbering of any chunk clears it. The other ends are checked
#   (and locked) as before.
OWN_NIDS = "causalmem.own_nids"
V6 = f"""
        DROP INDEX IF EXISTS chunks_scope;
        ALTER TABLE chunks SET (fillfactor = 90);
        ALTER TABLE cooccurrence SET (fillfactor = 90);
        CREATE OR REPLACE FUNCTION check_edge_ends() RETURNS trigger LANGUAGE plpgsql
        SET search_path FROM CURRENT{PROBES} AS $f$
        DECLARE
            wanted BIGINT;
            found BIGINT;
            locked BIGINT;
            own TEXT := current_setting('{OWN_NIDS}', true);
            lo BIGINT := 0;
            hi BIGINT := -1;
        BEGIN
            IF own IS NOT NULL AND own <> '' THEN
                lo := split_part(own, ':', 1)::bigint;
                hi := split_part(own, ':', 2)::bigint;
            END IF;
            SELECT COUNT(*), COUNT(*) FILTER (WHERE e.nid BETWEEN lo AND hi) INTO wanted, found FROM {ENDS} e;
            IF found < wanted THEN
                SELECT found + COUNT(c.nid) FILTER (WHERE c.xmin = pg_current_xact_id()::xid) INTO found
                FROM {ENDS} e LEFT JOIN chunks c ON c.nid = e.nid WHERE e.nid NOT BETWEEN lo AND hi;
            END IF;
            IF found < wanted THEN
                SELECT COUNT(*) INTO locked FROM (SELECT 1 FROM chunks c JOIN {ENDS} e ON c.nid = e.nid
                    WHERE e.nid NOT BETWEEN lo AND hi AND c.xmin <> pg_current_xact_id()::xid FOR KEY SHARE OF c) f;
                found := found + locked;
            END IF;
            IF found <> wanted THEN
                RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation', MESSAGE = '{NO_END}';
            END IF;
            RETURN NULL;
        END $f$;
        CREATE OR REPLACE FUNCTION check_chunk_unreferenced() RETURNS trigger LANGUAGE plpgsql
        SET search_path FROM CURRENT{PROBES} AS $f$
        BEGIN
            PERFORM set_config('{OWN_NIDS}', '', true);
            IF EXISTS (SELECT 1 FROM old_chunks o JOIN edges e ON e.src = o.nid
                       WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.nid = o.nid))
               OR EXISTS (SELECT 1 FROM old_chunks o JOIN edges e ON e.dst = o.nid
                          WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.nid = o.nid)) THEN
                RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation',
                    MESSAGE = 'a chunk that an edge still names cannot be deleted (edges.src/dst -> chunks.nid)';
            END IF;
            RETURN NULL;
        END $f$;
        CREATE OR REPLACE FUNCTION check_chunk_renumbered() RETURNS trigger LANGUAGE plpgsql
        SET search_path FROM CURRENT AS $f$
        BEGIN
            IF NEW.nid <> OLD.nid THEN
                PERFORM set_config('{OWN_NIDS}', '', true);
                IF EXISTS (SELECT 1 FROM edges e WHERE e.src = OLD.nid OR e.dst = OLD.nid) THEN
                    RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation',
                        MESSAGE = 'a chunk that an edge still names cannot be renumbered (edges.src/dst -> chunks.nid)';
                END IF;
            END IF;
            RETURN NEW;
        END $f$;
"""
# Schema 8 (PostgreSQL only, the rows unchanged): a change log per tenant beside the whole one. Each
# trigger also writes its keys grouped by the ``user_id`` of their rows (a chunk's own; an edge's two
# ends', so a cross-tenant edge reaches both; a co-occurrence pair's ``a``; an embedding's chunk), so
# the per-tenant views of a worker learn whether *their* tenant changed, and what, from one indexed
# read (``store.postgres_scoped.tenant_log``), however many other tenants wrote meanwhile. Rows of
# chunks without a ``user_id`` are no tenant's and are not repeated here; a key whose chunk is gone
# (deleted for good in the same transaction) is logged with a NULL ``user_id``, which every tenant
# reads. Pruned with the whole log (``log_floor``); the log restarts empty at the migration.
V8 = """
        CREATE TABLE tenant_changes (
            user_id TEXT,
            seq BIGINT NOT NULL,
            kind TEXT NOT NULL,
            keys BIGINT[] NOT NULL
        );
        ALTER TABLE tenant_changes ALTER COLUMN keys SET STORAGE EXTERNAL;
        CREATE INDEX tenant_changes_user ON tenant_changes(user_id, seq);
        CREATE INDEX tenant_changes_seq ON tenant_changes(seq);
        UPDATE causalmem_state SET log_floor = seq;
""" + "".join(f"""
        CREATE OR REPLACE FUNCTION log_{table}() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$
        DECLARE
            s BIGINT := COALESCE(NULLIF(current_setting('causalmem.seq', true), '')::bigint,
                                 (SELECT seq FROM causalmem_state));
        BEGIN
            INSERT INTO changes (seq, kind, keys)
            SELECT s, TG_ARGV[0], array_agg({key}) FROM changed_rows HAVING COUNT(*) > 0;
            INSERT INTO tenant_changes (user_id, seq, kind, keys)
            {by_user};
            RETURN NULL;
        END $f$;""" for table, key, by_user in (
    ("chunks", "nid", "SELECT user_id, s, TG_ARGV[0], array_agg(nid) FROM changed_rows "
                      "WHERE user_id IS NOT NULL GROUP BY user_id"),
    ("edges", "eid", "SELECT c.user_id, s, TG_ARGV[0], array_agg(DISTINCT r.eid) FROM changed_rows r "
                     "CROSS JOIN LATERAL (VALUES (r.src), (r.dst)) AS v(nid) LEFT JOIN chunks c ON c.nid = v.nid "
                     "WHERE c.nid IS NULL OR c.user_id IS NOT NULL GROUP BY c.user_id"),
    ("cooccurrence", "a", "SELECT c.user_id, s, TG_ARGV[0], array_agg(DISTINCT r.a) FROM changed_rows r "
                          "LEFT JOIN chunks c ON c.nid = r.a WHERE c.nid IS NULL OR c.user_id IS NOT NULL "
                          "GROUP BY c.user_id"),
    ("embeddings", "nid", "SELECT c.user_id, s, TG_ARGV[0], array_agg(r.nid) FROM changed_rows r "
                          "LEFT JOIN chunks c ON c.nid = r.nid WHERE c.nid IS NULL OR c.user_id IS NOT NULL "
                          "GROUP BY c.user_id")))


MIGRATIONS: list[tuple[str, str]] = [
    (
        "initial schema",
        """
        CREATE TABLE chunks (
            nid BIGINT PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            text TEXT NOT NULL,
            text_hash BIGINT NOT NULL,
            kind TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            event_time DOUBLE PRECISION,
            q_value DOUBLE PRECISION NOT NULL,
            importance DOUBLE PRECISION NOT NULL DEFAULT 5.0,
            access_count BIGINT NOT NULL DEFAULT 0,
            last_accessed_at DOUBLE PRECISION,
            user_id TEXT,
            agent_id TEXT,
            run_id TEXT,
            session_id TEXT,
            metadata TEXT NOT NULL DEFAULT '{}',
            valid_to DOUBLE PRECISION
        );
        CREATE INDEX chunks_reuse ON chunks(text_hash, user_id, agent_id, run_id);
        CREATE INDEX chunks_scope ON chunks(user_id, agent_id, run_id);
        CREATE INDEX chunks_session ON chunks(session_id, nid);
        CREATE TABLE edges (
            eid BIGINT PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            src BIGINT NOT NULL REFERENCES chunks(nid),
            dst BIGINT NOT NULL REFERENCES chunks(nid),
            relation TEXT NOT NULL,
            rel_code INTEGER NOT NULL,
            subtype TEXT,
            confidence DOUBLE PRECISION NOT NULL,
            source TEXT NOT NULL,
            polarity TEXT,
            task_tag TEXT,
            event_time DOUBLE PRECISION,
            discovered_at DOUBLE PRECISION NOT NULL,
            valid_to DOUBLE PRECISION,
            invalid_reason TEXT,
            superseded_by TEXT
        );
        CREATE INDEX edges_src ON edges(src);
        CREATE INDEX edges_dst ON edges(dst);
        CREATE TABLE cooccurrence (
            a BIGINT NOT NULL,
            b BIGINT NOT NULL,
            weight DOUBLE PRECISION NOT NULL,
            hits BIGINT NOT NULL DEFAULT 1,
            updated_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (a, b)
        );
        CREATE INDEX cooccurrence_b ON cooccurrence(b);
        CREATE TABLE facts (
            fid BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            nid BIGINT NOT NULL REFERENCES chunks(nid),
            user_id TEXT,
            agent_id TEXT,
            run_id TEXT,
            confidence DOUBLE PRECISION NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            valid_to DOUBLE PRECISION
        );
        CREATE INDEX facts_key ON facts(key, user_id, agent_id, run_id);
        CREATE INDEX facts_nid ON facts(nid);
        CREATE TABLE embeddings (
            nid BIGINT PRIMARY KEY REFERENCES chunks(nid),
            model TEXT NOT NULL,
            dim INTEGER NOT NULL,
            text_hash BIGINT NOT NULL,
            vector BYTEA NOT NULL
        );
        CREATE INDEX embeddings_model ON embeddings(model);
        CREATE TABLE chunk_history (
            hid BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            nid BIGINT NOT NULL,
            event TEXT NOT NULL,
            old_text TEXT,
            new_text TEXT,
            at DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX chunk_history_nid ON chunk_history(nid);
        CREATE INDEX chunk_history_event ON chunk_history(event, hid);
        CREATE TABLE meta (
            key TEXT PRIMARY KEY,
            value TEXT
        );
        CREATE TABLE changes (
            seq BIGINT NOT NULL,
            kind TEXT NOT NULL,
            key BIGINT NOT NULL
        );
        CREATE INDEX changes_seq ON changes(seq);
        """ + "".join(LOG_TRIGGERS.format(table=t, key=k, code=c) for t, k, c in (
            ("chunks", "nid", "c"), ("edges", "eid", "e"), ("cooccurrence", "a", "o"), ("embeddings", "nid", "v"))),
    ),
    (
        "polarity origin, evidence count, edge pair index",
        """
        ALTER TABLE edges ADD COLUMN polarity_origin TEXT;
        ALTER TABLE edges ADD COLUMN evidence BIGINT NOT NULL DEFAULT 1;
        UPDATE edges SET polarity_origin = CASE WHEN polarity IS NULL THEN 'unknown' ELSE 'guessed' END;
        CREATE INDEX edges_pair ON edges(src, dst, relation);
        """,
    ),
    (
        "leaner write-path indexes (as SQLite's schema 3), superseded-edge indexes",
        # As the SQLite backend's schema 3: only turns need the session index, and edges_pair starts
        # with src. The two partial indexes hold only the (few) edges that mark a chunk superseded,
        # so the row cache's read of the whole superseded set costs that set, not a scan of the edges.
        """
        DROP INDEX IF EXISTS chunks_session;
        CREATE INDEX chunks_session ON chunks(session_id, nid) WHERE session_id IS NOT NULL;
        DROP INDEX IF EXISTS edges_src;
        CREATE INDEX edges_superseded ON edges(dst) WHERE valid_to IS NULL AND superseded_by IS NOT NULL;
        CREATE INDEX edges_superseding ON edges(dst)
            WHERE valid_to IS NULL AND subtype IN ('invalidates', 'supersedes');
        """ + LOG_V3,
    ),
    (
        "edge ends checked per statement, a text-hash-only reuse index",
        V4,
    ),
    (
        "change-log key arrays stored uncompressed",
        V5,
    ),
    (
        "no scope index, room for in-place updates, the edge-end check skips a transaction's own new chunks",
        V6,
    ),
    (
        # per-tenant views (view_pool) read one user's rows on a first touch: without it, a scan of every
        # tenant's chunks (measured ~30 ms at 100k chunks, ~90 ms per first touch at 400k)
        "a (user_id, nid) index for reads of one tenant's rows",
        "CREATE INDEX chunks_user ON chunks(user_id, nid);",
    ),
    (
        "a change log per tenant (user_id) beside the whole one",
        V8,
    ),
]
OWN_TABLES = frozenset({"chunks", "edges", "cooccurrence", "facts", "embeddings", "chunk_history", "meta",
                        "changes", "tenant_changes", "causalmem_state"})
assert len(MIGRATIONS) == SCHEMA_VERSION

#: the columns an insert of a chunk sets (and the order a just-inserted row is cached in)
INSERT_COLS = ("nid, id, text, text_hash, kind, created_at, event_time, q_value, importance, user_id, agent_id, "
               "run_id, session_id, metadata")
#: their types (a binary ``COPY`` sends them as these)
INSERT_TYPES = ("int8", "text", "text", "int8", "text", "float8", "float8", "float8", "float8", "text", "text", "text",
                "text", "text")
META_UPSERT = "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
SCOPE = "user_id IS NOT DISTINCT FROM %s AND agent_id IS NOT DISTINCT FROM %s AND run_id IS NOT DISTINCT FROM %s"



SLEEP_EDGE_SELECT = sleep_edge_select("({})::int")
# the next free chunk and edge keys: MAX + 1, above every purged key too
NEXT_KEYS = ("GREATEST((SELECT COALESCE(MAX(nid), 0) FROM chunks), (SELECT COALESCE(MAX(value::bigint), 0) "
              "FROM meta WHERE key = 'purged_max_nid')) + 1, GREATEST((SELECT COALESCE(MAX(eid), 0) FROM edges), "
              "(SELECT COALESCE(MAX(value::bigint), 0) FROM meta WHERE key = 'purged_max_eid')) + 1")

# chunk nid -> id of the chunk superseding it (see ``superseded_chunks``); ``where`` narrows ``e``
SUPERSEDED_SQL = (
    "SELECT e.dst, d.id FROM edges e JOIN edges n ON n.id = e.superseded_by "
    "JOIN chunks d ON d.nid = n.dst WHERE {where}e.valid_to IS NULL "
    "AND e.superseded_by IS NOT NULL AND n.dst <> e.dst AND n.relation <> 'meta' "
    "UNION ALL SELECT e.dst, s.id FROM edges e JOIN chunks s ON s.nid = e.src "
    "WHERE {where}e.valid_to IS NULL AND e.subtype IN ('invalidates', 'supersedes') AND s.valid_to IS NULL")


#: the columns ``insert_edges_bulk`` sets
EDGE_INSERT_COLS = ("eid, id, src, dst, relation, rel_code, subtype, confidence, source, polarity, polarity_origin, "
                    "task_tag, event_time, discovered_at")
EDGE_INSERT_TYPES = ("int8", "text", "int8", "int8", "text", "int4", "text", "float8", "text", "text", "text", "text",
                     "float8", "float8")
