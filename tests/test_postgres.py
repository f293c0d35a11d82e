"""PostgreSQL backend on a real throwaway cluster (tests/pg_cluster.py): selection, schema
guarantees, several processes ("hosts") on one memory, projection read as binary arrays, backup.

The rest of the suite runs on PostgreSQL too with ``CAUSALMEM_TEST_BACKEND=postgres`` (.ci/run).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg")

from causalmem import Config, Memory  # noqa: E402
from causalmem.errors import SchemaVersionError, StoreError  # noqa: E402
from causalmem.store import SQLiteStore, open_store  # noqa: E402
from causalmem.store.postgres import PostgresStore, RetryableStoreError, split_dsn  # noqa: E402
from causalmem.types import Relation  # noqa: E402

WORKER = str(Path(__file__).resolve().parent / "pg_worker.py")
REPO = Path(__file__).resolve().parents[1]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.pop("CAUSALMEM_TEST_BACKEND", None)  # the worker opens the DSN it is given, nothing mapped
    return env


def _admin(pg_dsn):
    conninfo, schema = split_dsn(pg_dsn)
    return psycopg.connect(conninfo, autocommit=True), schema


# ---------------------------------------------------------------- selection
def test_a_dsn_selects_postgres_and_a_path_keeps_sqlite(pg_dsn, tmp_path):
    with Memory(pg_dsn, embedder=None) as mem:
        assert isinstance(mem._store, PostgresStore)
        mem.record_decision("deploy without tests", "production crash")
        assert [a.text for a in mem.search_causal("deploy without tests")] == ["production crash"]
        assert mem.stats()["schema_version"] == 8
    if os.environ.get("CAUSALMEM_TEST_BACKEND") != "postgres":  # that run maps every path to PostgreSQL
        assert isinstance(open_store(tmp_path / "m.db"), SQLiteStore)
        assert isinstance(open_store(":memory:"), SQLiteStore)


def test_backend_argument_checks_the_target(pg_dsn, tmp_path):
    assert isinstance(open_store(pg_dsn, backend="postgres"), PostgresStore)
    with pytest.raises(ValueError, match="postgresql://"):
        open_store(tmp_path / "m.db", backend="postgres")
    with pytest.raises(ValueError, match="sqlite"):
        open_store(pg_dsn, backend="sqlite")
    with pytest.raises(ValueError, match="backend"):
        open_store(pg_dsn, backend="mysql")


def test_password_is_not_shown_and_bad_schema_name_is_refused(pg_database):
    with pytest.raises(ValueError, match="schema"):
        PostgresStore(pg_database + "&schema=bad-name; drop")
    from causalmem.store.postgres import redact

    shown = redact("postgresql://u:secret@db.example:5432/x")
    assert "secret" not in shown and "db.example" in shown
    with pytest.raises(StoreError) as err:
        PostgresStore("postgresql://u:secret@127.0.0.1:1/x", connect_timeout_s=1)
    assert "secret" not in str(err.value)


def test_unreachable_server_is_a_store_error():
    with pytest.raises(StoreError, match="cannot connect"):
        PostgresStore("postgresql://nobody@127.0.0.1:1/none", connect_timeout_s=1)


# ---------------------------------------------------------------- schema guarantees
def test_newer_schema_is_refused_untouched(pg_dsn):
    Memory(pg_dsn, embedder=None).close()
    conn, schema = _admin(pg_dsn)
    with conn:
        conn.execute(f"UPDATE {schema}.causalmem_state SET schema_version = 99")
        state = conn.execute(f"SELECT * FROM {schema}.causalmem_state").fetchall()
        with pytest.raises(SchemaVersionError, match="99"):
            Memory(pg_dsn, embedder=None)
        assert conn.execute(f"SELECT * FROM {schema}.causalmem_state").fetchall() == state


def _indexes(conn, schema: str) -> dict[str, str]:
    return dict(conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s", (schema,)).fetchall())


def test_a_schema_2_memory_is_migrated_to_6_in_place(pg_dsn):
    """A memory written at schema 2 (built here with schema 2's own SQL, rows logged by its
    triggers) is brought to 6 at the next open: (3) the session index partial, edges_src gone, the
    superseded-edge indexes there, the change log one row per statement; (4) the reuse index on the
    text hash alone, the edges' foreign keys replaced by statement-level checks; (5) the change log's
    key arrays stored uncompressed; (6) no scope index, room for in-place updates; the rows kept."""
    from causalmem.store import postgres as pg

    conn, schema = _admin(pg_dsn)
    with conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path TO {schema}")
        conn.execute("CREATE TABLE causalmem_state (id INTEGER PRIMARY KEY DEFAULT 1 CHECK (id = 1), "
                     "schema_version INTEGER NOT NULL, seq BIGINT NOT NULL, log_floor BIGINT NOT NULL DEFAULT 0)")
        conn.execute("INSERT INTO causalmem_state (schema_version, seq) VALUES (0, 1000)")
        for _, sql in pg.MIGRATIONS[:2]:
            conn.execute(sql)
        conn.execute("UPDATE causalmem_state SET schema_version = 2, seq = 1001")
        texts = ["shard the queue", "latency halved", "cache the token", "stale sessions"]
        for nid, t in enumerate(texts, 1):
            conn.execute("INSERT INTO chunks (nid, id, text, text_hash, kind, created_at, q_value) "
                         "VALUES (%s, %s, %s, %s, 'decision', 1.0, 0.5)", (nid, f"c{nid}", t, pg.text_hash(t)))
        for eid, (src, dst, rel, sub) in enumerate([(1, 2, "caused", None), (3, 4, "caused", None),
                                                    (2, 4, "meta", "supersedes")], 1):
            code = {"caused": Relation.CAUSED.code, "meta": Relation.META.code}[rel]
            conn.execute("INSERT INTO edges (eid, id, src, dst, relation, rel_code, subtype, confidence, source, "
                         "discovered_at) VALUES (%s, %s, %s, %s, %s, %s, %s, 0.9, 'rule', 1.0)",
                         (eid, f"e{eid}", src, dst, rel, code, sub))
        assert conn.execute("SELECT COUNT(*) FROM changes").fetchone()[0] == 7  # schema 2: one row per key
        assert "edges_src" in _indexes(conn, schema)
        with Memory(pg_dsn, embedder=None) as mem:
            assert mem.stats()["schema_version"] == 8
            assert [a.text for a in mem.search_causal("shard the queue")][:1] == ["latency halved"]
            assert mem.search_causal("cache the token")[0].superseded_by == "c2"
            mem.record_many([(f"decision {i}", f"outcome {i}") for i in range(50)])
        idx = _indexes(conn, schema)
        assert "edges_src" not in idx
        assert "WHERE (session_id IS NOT NULL)" in idx["chunks_session"]
        assert "superseded_by IS NOT NULL" in idx["edges_superseded"]
        assert "invalidates" in idx["edges_superseding"]
        # schema 4: the reuse index on the hash alone, the edges' ends checked by statement triggers
        assert idx["chunks_reuse"].endswith("(text_hash)")
        assert conn.execute("SELECT COUNT(*) FROM pg_constraint WHERE conrelid = 'edges'::regclass "
                            "AND contype = 'f'").fetchone()[0] == 0
        triggers = {r[0] for r in conn.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal").fetchall()}
        assert {"edges_ends_i", "edges_ends_u", "chunks_referenced_d", "chunks_referenced_u"} <= triggers
        # schema 5: 'e' (external, not compressed) storage for the log's key arrays
        assert conn.execute("SELECT attstorage FROM pg_attribute WHERE attrelid = 'changes'::regclass "
                            "AND attname = 'keys'").fetchone()[0] == "e"
        # schema 6: no scope index; chunks and co-occurrence pages keep room for in-place updates
        assert "chunks_scope" not in idx
        for table in ("chunks", "cooccurrence"):
            assert conn.execute("SELECT reloptions FROM pg_class WHERE relname = %s AND relnamespace = "
                                "%s::regnamespace", (table, schema)).fetchone()[0] == ["fillfactor=90"]
        # the batch of 100 chunks and 50 edges: one log row per statement and kind
        assert conn.execute("SELECT kind, cardinality(keys) FROM changes ORDER BY kind").fetchall() == \
            [("ci", 100), ("ei", 50)]
        conn.execute("SET enable_seqscan = off")  # a tiny table: ask whether the index can answer at all
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT dst FROM edges WHERE valid_to IS NULL AND superseded_by IS NOT NULL").fetchall())
        assert "edges_superseded" in plan  # the whole superseded set without a scan of every edge


def test_another_applications_schema_is_refused_untouched(pg_dsn):
    conn, schema = _admin(pg_dsn)
    with conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.orders (id int)")
        with pytest.raises(StoreError, match="another application"):
            Memory(pg_dsn, embedder=None)
        tables = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))}
        assert tables == {"orders"}


def test_read_only_open(pg_dsn):
    with pytest.raises(StoreError, match="creates nothing"):
        Memory(pg_dsn, embedder=None, read_only=True)
    with Memory(pg_dsn, embedder=None) as mem:
        mem.record_decision("a", "b")
    with Memory(pg_dsn, embedder=None, read_only=True) as ro:
        assert [a.text for a in ro.search_causal("a")] == ["b"]
        with pytest.raises(StoreError, match="read-only"):
            ro.record_decision("c", "d")


def test_one_transaction_per_batch_all_or_nothing(pg_dsn):
    with Memory(pg_dsn, embedder=None) as mem:
        with pytest.raises(ValueError):
            mem.record_many([("ok decision", "ok outcome"), ("bad", "x", "not-a-relation")])
        assert mem.stats()["edges"] == 0
        before = mem._store.change_seq()
        mem.record_many([(f"d{i}", f"o{i}") for i in range(50)])
        assert mem._store.change_seq() == before + 1  # one write transaction
        assert mem.stats()["edges"] == 50


def test_scopes_are_isolated(pg_dsn):
    with Memory(pg_dsn, embedder=None) as mem:
        mem.record_decision("shared deploy", "alice outage", user_id="alice")
        mem.record_decision("shared deploy", "bob outage", user_id="bob")
        assert [a.text for a in mem.search_causal("shared deploy", user_id="alice")] == ["alice outage"]
        assert mem.stats(user_id="bob")["edges"] == 1


def test_two_memories_in_one_database_do_not_see_each_other(pg_database):
    a = Memory(pg_database + "&schema=team_a_x1", embedder=None)
    b = Memory(pg_database + "&schema=team_b_x1", embedder=None)
    try:
        a.record_decision("only in a", "a outcome")
        assert b.search_causal("only in a") == []
        assert b.stats()["edges"] == 0
    finally:
        a.close()
        b.close()


# ---------------------------------------------------------------- retries
def test_deadlock_with_another_session_is_retried_inside(pg_dsn, monkeypatch):
    """Another application's session locks a chunk row, waits until a causalmem write holds the
    memory's writer lock and waits for that row, then asks for the writer lock itself: a deadlock.
    The server aborts causalmem's side (the other session's check is set to run 20 s later); the
    public call runs again, so the caller only sees success — and it did run again."""
    import causalmem.store.postgres as pgmod
    from causalmem.store.postgres import LOCK_NAMESPACE

    aborted: list = []
    real = pgmod._retryable
    monkeypatch.setattr(pgmod, "_retryable", lambda exc: aborted.append(type(exc).__name__) or real(exc))
    with Memory(pg_dsn, embedder=None) as mem:
        edge = mem.record_decision("lock me", "then me")
        conn, schema = _admin(pg_dsn)
        conn.execute("SET deadlock_timeout = '20s'")  # the server's check runs on causalmem's side first
        cid = edge.src
        me = mem._store.conn.info.backend_pid
        locked, done = threading.Event(), threading.Event()
        other_error: list = []

        def other() -> None:
            try:
                with conn.transaction():
                    conn.execute(f"SELECT 1 FROM {schema}.chunks WHERE id = %s FOR UPDATE", (cid,))
                    locked.set()
                    deadline = time.monotonic() + 60
                    # causalmem holds the writer lock and waits for this row (not a sleep: its lock wait)
                    while not conn.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted",
                                           (me,)).fetchone()[0]:
                        assert time.monotonic() < deadline, "causalmem never waited for the row"
                        time.sleep(0.01)
                    conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LOCK_NAMESPACE, schema))
            except Exception as exc:
                other_error.append(exc)
            finally:
                done.set()

        t = threading.Thread(target=other)
        t.start()
        assert locked.wait(30)
        q = mem.feedback(cid, 1.0)  # updates the locked chunk row inside its transaction
        t.join(60)
        conn.close()
        assert done.is_set() and other_error == []
        assert q > 0.5
        assert mem.get(cid).q_value == pytest.approx(q)
        assert aborted == ["DeadlockDetected"]  # the server aborted causalmem's side once; the facade ran it again


def test_writer_lock_held_elsewhere_is_waited_for_or_refused_at_once(pg_dsn):
    """A write waits for another writer's lock up to the busy timeout (then a StoreError); with
    ``wait=False`` it is refused at once, naming the lock; both work again once the lock is free."""
    from causalmem.store.postgres import LOCK_NAMESPACE

    store = PostgresStore(pg_dsn, busy_timeout_ms=300)
    conn, schema = _admin(pg_dsn)
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LOCK_NAMESPACE, schema))
            with pytest.raises(StoreError, match="not waiting"):
                with store.transaction(wait=False):
                    store.set_meta("k", "v")
            t = time.perf_counter()
            with pytest.raises(StoreError, match="locked by another writer"):
                with store.transaction():
                    store.set_meta("k", "v")
            assert time.perf_counter() - t >= 0.25
        seq = store.change_seq()
        with store.transaction(wait=False):
            store.set_meta("k", "v")
        assert store.get_meta("k") == "v" and store.change_seq() == seq + 1
        with store.transaction():  # a transaction that changes nothing leaves the sequence alone
            store.get_meta("k")
        assert store.change_seq() == seq + 1
    finally:
        conn.close()
        store.close()


def test_retryable_error_is_a_store_error():
    assert issubclass(RetryableStoreError, StoreError)


# ---------------------------------------------------------------- projection as binary arrays
def test_projection_read_as_binary_arrays_matches_the_rows(pg_dsn):
    with Memory(pg_dsn, embedder=None) as mem:
        empty = mem._store.projection_arrays()
        assert len(empty["edges"]) == 0 and len(empty["co"]) == 0 and empty["n_nodes"] == 1
        edges = mem.record_many([(f"cause {i}", f"effect {i % 7}", "enabled" if i % 3 else "caused")
                                 for i in range(200)])
        mem.invalidate(edges[5].id)
        arrays = mem._store.projection_arrays()
        rows = mem._store.query("SELECT eid, src, dst, rel_code, confidence FROM edges WHERE valid_to IS NULL "
                                "ORDER BY eid")
        got = np.sort(arrays["edges"], order="eid")
        assert len(got) == len(rows) == 199
        assert got["eid"].tolist() == [r[0] for r in rows]
        assert got["src"].tolist() == [r[1] for r in rows]
        assert got["dst"].tolist() == [r[2] for r in rows]
        assert got["rel"].tolist() == [r[3] for r in rows]
        assert np.allclose(got["conf"], [r[4] for r in rows])
        assert arrays["n_nodes"] == mem._store.query("SELECT MAX(nid) FROM chunks")[0][0] + 1
        with mem._store.transaction():
            mem._store.upsert_cooccurrence([(1, 5, 0.25, 1.0), (2, 3, 0.5, 1.0)])
        co = np.sort(mem._store.projection_arrays()["co"], order=["a", "b"])
        assert co["a"].tolist() == [1, 2] and co["b"].tolist() == [5, 3] and co["w"].tolist() == [0.25, 0.5]


# ---------------------------------------------------------------- several hosts
class Worker:
    def __init__(self, dsn: str) -> None:
        self.p = subprocess.Popen([sys.executable, WORKER, "serve", dsn], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=_env())
        assert self.ask_raw() == {"ready": True}

    def ask_raw(self) -> dict:
        assert self.p.stdout is not None
        line = self.p.stdout.readline()
        assert line, "worker died"
        return json.loads(line)

    def ask(self, **cmd) -> dict:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        out = self.ask_raw()
        assert "error" not in out, out
        return out

    def close(self) -> None:
        try:
            self.ask(op="quit")
        finally:
            self.p.wait(10)


def test_a_write_in_one_process_is_visible_to_the_next_query_in_another(pg_dsn):
    mine = Memory(pg_dsn, embedder=None)
    other = Worker(pg_dsn)
    try:
        mine.record_decision("warm the views", "views built")
        assert mine.search_causal("warm the views")  # projection and indexes built here
        assert other.ask(op="search_causal", query="warm the views")["texts"] == ["views built"]
        for i in range(5):
            # the other host writes; the very next query here sees it (graph and lexical channels)
            other.ask(op="record", decision=f"rotate key {i}", outcome=f"sessions dropped {i}")
            assert [a.text for a in mine.search_causal(f"rotate key {i}")] == [f"sessions dropped {i}"]
            assert f"sessions dropped {i}" in [h.text for h in mine.search(f"sessions dropped {i}")]
            # and the other way round
            mine.record_decision(f"scale out {i}", f"latency fell {i}")
            assert other.ask(op="search_causal", query=f"scale out {i}")["texts"] == [f"latency fell {i}"]
        mine.invalidate(mine.edges()[0].id)
        assert other.ask(op="search_causal", query="warm the views")["texts"] == []
        assert other.ask(op="stats")["stats"]["edges"] == mine.stats()["edges"] == 10
    finally:
        other.close()
        mine.close()


def test_four_processes_write_and_search_for_20_seconds(pg_dsn):
    Memory(pg_dsn, embedder=None).close()  # schema created once, before the race
    seconds = float(os.environ.get("CAUSALMEM_PG_WORKLOAD_SECONDS", "20"))
    procs = [subprocess.Popen([sys.executable, WORKER, "workload", pg_dsn, f"w{i}", str(seconds)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
             for i in range(4)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=seconds + 120)
        assert p.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    for r in results:
        assert r["errors"] == [], r["errors"][:3]
        assert r["misses"] == 0  # each worker's own write was visible to its next query
        assert r["written"] and r["searches"] >= len(r["written"])
    written = [e for r in results for e in r["written"]]
    assert len(written) == len(set(written))
    with Memory(pg_dsn, embedder=None) as mem:
        stored = {e.id for e in mem.edges(valid_only=False)}
        assert set(written) <= stored  # no lost write
        assert len(stored) == len(written)
        assert mem._store.integrity_check() == "ok"
        # the projection of a fresh process agrees with the rows
        assert len(mem._store.projection_arrays()["edges"]) == len(written)


def test_notify_wakes_a_listener_on_another_connection(pg_dsn):
    a = PostgresStore(pg_dsn)
    b = PostgresStore(pg_dsn)
    try:
        assert not b.wait_for_change(0.05)
        got: list = []
        t = threading.Thread(target=lambda: got.append(b.wait_for_change(10)))
        t.start()
        time.sleep(0.2)
        with a.transaction():
            a.set_meta("k", "v")
        t.join(10)
        assert got == [True]
        assert b.get_meta("k") == "v"
    finally:
        a.close()
        b.close()


def test_data_version_changes_only_for_other_connections(pg_dsn):
    a = PostgresStore(pg_dsn)
    b = PostgresStore(pg_dsn)
    try:
        va, vb = a.data_version(), b.data_version()
        with a.transaction():
            a.set_meta("x", "1")
        assert a.data_version() == va  # its own commit
        assert b.data_version() != vb  # another connection's commit
        seq = a.change_seq()
        with b.transaction():
            b.set_meta("x", "2")
        assert a.change_seq() == seq + 1
        assert a.data_version() != va
    finally:
        a.close()
        b.close()


# ---------------------------------------------------------------- backup: export works on both
def test_export_from_postgres_imports_into_sqlite_and_back(pg_dsn, pg_database, tmp_path):
    with Memory(pg_dsn, embedder=None) as mem:
        mem.record_decision("deploy without tests", "production crash", polarity="negative")
        mem.add("we moved the queue to redis", user_id="u1")
        mem.add_fact("region", "eu-west", user_id="u1")
        mem.feedback(mem.search("redis")[0].id, 0.5)
        n = mem.export(tmp_path / "dump.jsonl")
        before = mem.stats()
    assert n > 0
    with Memory(tmp_path / "copy.db", embedder=None) as lite:
        lite.import_(tmp_path / "dump.jsonl")
        after = lite.stats()
        assert {k: after[k] for k in ("chunks", "edges", "facts")} == {k: before[k] for k in ("chunks", "edges",
                                                                                              "facts")}
        lite.export(tmp_path / "dump2.jsonl")
    with Memory(pg_database + "&schema=restored_x1", embedder=None) as back:
        back.import_(tmp_path / "dump2.jsonl")
        assert [a.text for a in back.search_causal("deploy without tests")] == ["production crash"]
        assert back.stats()["facts"] == 1


def test_catch_up_patches_the_views_from_the_change_log(pg_dsn):
    """Another host's small writes reach this host's views through the change log: new chunks and
    edges are patched in (no full projection rebuild, no re-read of every chunk), invalidations,
    deletions and text updates too; a purge (rows gone for good) falls back to a full re-read. (The
    whole-store views: a tenant's own views catch up from its change log, tests/test_postgres_scoped.py.)"""
    a = Memory(pg_dsn, embedder=None, config=Config(scoped_views=False))
    b = Memory(pg_dsn, embedder=None)
    try:
        a.record_many([(f"warm decision {i}", f"warm outcome {i}") for i in range(50)])
        assert a.search_causal("warm decision 3")
        rebuilds = a._projection.rebuilds
        reads: list = []
        original = a._store.chunk_columns
        a._store.chunk_columns = lambda **kw: reads.append(kw) or original(**kw)  # type: ignore[method-assign]

        e = b.record_decision("rotate the signing key", "tokens rejected")
        assert [x.text for x in a.search_causal("rotate the signing key")] == ["tokens rejected"]
        assert [h.text for h in a.search("tokens rejected", channels=("lexical",))][0] == "tokens rejected"
        b.invalidate(e.id)
        assert a.search_causal("rotate the signing key") == []
        c = b.record_decision("pin the base image", "builds reproducible")
        b.update(c.dst, "builds reproducible and fast")
        assert "builds reproducible and fast" in [h.text for h in a.search("reproducible", channels=("lexical",))]
        b.delete(c.dst)
        assert a.search_causal("pin the base image") == []
        assert "builds reproducible and fast" not in [h.text for h in a.search("reproducible",
                                                                                 channels=("lexical",))]
        assert a._projection.rebuilds == rebuilds  # patched, never rebuilt
        assert reads == []  # no full re-read of the chunk columns
        b.delete_all(user_id="nobody", purge=True)  # nothing to purge: still no deletion in the log
        b.record_decision("x", "y", user_id="gone")
        b.delete_all(user_id="gone", purge=True)  # rows deleted for good
        assert a.search_causal("x", user_id="gone") == []
        assert reads  # the purge made this host re-read everything
    finally:
        a.close()
        b.close()


def test_bulk_writes_keep_every_character(pg_dsn):
    """record_many sends its rows as ready COPY text: backslashes, tabs, newlines, carriage returns,
    quotes, non-ASCII and JSON escapes in texts, scopes and metadata come back exactly, and a
    batch read back equals one written row by row."""
    texts = ["a\\b", "tab\there", "line\nbreak", "cr\rlf\r\n", "\\N", "'q' \"qq\"", "ünï ✓ 中文 🙂", "\\t\\n literal",
             "trailing backslash \\"]
    items = [{"decision": f"do {t}", "outcome": f"got {t}", "user_id": f"u\t{i}\\", "task_tag": f"tag\n{i}",
              "confidence": 0.123456789012345, "event_time": 1.5e9 + i / 3}
             for i, t in enumerate(texts)]
    with Memory(pg_dsn, embedder=None) as mem:
        edges = mem.record_many(items)
        by_text = {c.text: c for c in mem.get_all(limit=1000)}
        for i, t in enumerate(texts):
            for text in (f"do {t}", f"got {t}"):
                assert text in by_text, text
                assert by_text[text].user_id == f"u\t{i}\\"
        rows = mem._store.query("SELECT e.task_tag, e.confidence, e.event_time, s.text, d.text FROM edges e "
                                "JOIN chunks s ON s.nid = e.src JOIN chunks d ON d.nid = e.dst ORDER BY e.eid")
        assert [(r[3], r[4]) for r in rows] == [(f"do {t}", f"got {t}") for t in texts]
        assert [r[0] for r in rows] == [f"tag\n{i}" for i in range(len(texts))]
        assert [r[1] for r in rows] == [0.123456789012345] * len(texts)
        assert [r[2] for r in rows] == [1.5e9 + i / 3 for i in range(len(texts))]
        assert [e.src for e in edges] == [by_text[f"do {t}"].id for t in texts]
        # the same texts again reuse the chunks (the text hash written by COPY matches)
        again = mem.record_many(items)
        assert [e.id for e in again] == [e.id for e in edges]
        meta = {"k": "a\\b\t\n\r\"", "n": 1.5, "u": "ünï"}
        turns = mem.add([{"role": "user", "content": "hi\tthere\\"}, {"role": "assistant", "content": "ok\n"}],
                        session_id="s\t1", metadata=meta)
        got = mem.get_all(session_id="s\t1")
        assert [c.text for c in got] == [c.text for c in turns]
        assert got[0].text.endswith("hi\tthere\\") and got[1].text.endswith("ok\n")
        assert all({k: c.metadata[k] for k in meta} == meta for c in got)


def test_edge_ends_are_checked_as_a_foreign_key_would(pg_dsn):
    """Schema 4 checks an edge's ends once per statement instead of per row: an edge naming no
    chunk is refused, a chunk an edge names cannot be deleted, and the race a foreign key's row
    lock prevents is prevented too: a delete of an edge's end waits for the inserting transaction
    and then fails; an insert naming a chunk another transaction is deleting waits and then fails."""
    with Memory(pg_dsn, embedder=None) as mem:
        mem.record_many([("a1", "b1"), ("a2", "b2")])
        mem.add([{"role": "user", "content": "lonely chunk"}])  # one turn: a chunk no edge names
    conn, schema = _admin(pg_dsn)
    other = psycopg.connect(split_dsn(pg_dsn)[0], autocommit=True)
    with conn, other:
        for c in (conn, other):
            c.execute(f"SET search_path TO {schema}")
        nid = dict(conn.execute("SELECT text, nid FROM chunks WHERE kind <> 'turn'").fetchall())
        nid["lonely chunk"] = conn.execute("SELECT nid FROM chunks WHERE kind = 'turn'").fetchone()[0]
        top = conn.execute("SELECT MAX(eid) FROM edges").fetchone()[0]
        insert = ("INSERT INTO edges (eid, id, src, dst, relation, rel_code, confidence, source, discovered_at) "
                  "VALUES (%s, %s, %s, %s, 'caused', 1, 0.5, 'rule', 1.0)")
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute(insert, (top + 1, "x1", nid["a1"], 10 ** 9))
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute("DELETE FROM chunks WHERE nid = %s", (nid["b1"],))
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute("UPDATE edges SET dst = %s WHERE dst = %s", (10 ** 9, nid["b1"]))
        assert conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 5  # nothing was changed

        def in_thread(fn):
            box: list = []
            t = threading.Thread(target=lambda: box.append(_outcome(fn)))
            t.start()
            return t, box

        def _outcome(fn):
            try:
                fn()
                return "ok"
            except psycopg.Error as exc:
                return type(exc).__name__

        # 1. an insert names an existing chunk; a delete of it waits for that transaction, then fails
        with conn.transaction():
            conn.execute(insert, (top + 2, "x2", nid["lonely chunk"], nid["a2"]))
            t, box = in_thread(lambda: other.execute("DELETE FROM chunks WHERE nid = %s", (nid["lonely chunk"],)))
            t.join(0.5)
            assert t.is_alive()  # waits on the row lock the check took
        t.join(10)
        assert box == ["ForeignKeyViolation"]
        # 2. a delete is under way; an insert naming that chunk waits for it, then fails
        conn.execute("DELETE FROM edges WHERE eid = %s", (top + 2,))
        with other.transaction():
            other.execute("DELETE FROM chunks WHERE nid = %s", (nid["lonely chunk"],))
            t, box = in_thread(lambda: conn.execute(insert, (top + 3, "x3", nid["lonely chunk"], nid["a2"])))
            t.join(0.5)
            assert t.is_alive()
        t.join(10)
        assert box == ["ForeignKeyViolation"]
        assert conn.execute("SELECT COUNT(*) FROM edges WHERE eid > %s", (top,)).fetchone()[0] == 0


def test_the_edge_end_check_skips_only_the_chunks_a_transaction_just_copied_in(pg_dsn):
    """Schema 6: the ends that the (sub)transaction's own bulk COPY of chunks inserted are not looked
    up again (the store names their key range in a transaction-local setting). A savepoint rolled
    back after such a COPY takes the setting with it, and a delete of a chunk clears it: an edge
    naming a key that is not a chunk is refused in both cases."""
    from causalmem.types import Relation as Rel

    def edge(src, dst):
        return {"src": src, "dst": dst, "relation": Rel.CAUSED, "confidence": 0.5, "source": "rule",
                "discovered_at": 1.0}

    rows = [{"text": f"copied chunk {i}", "kind": "decision", "created_at": 1.0, "q_value": 0.5} for i in range(3)]
    with Memory(pg_dsn, embedder=None) as mem:
        mem.record_many([("shard the queue", "latency halved")])
        store = mem._store
        own = "SELECT current_setting('causalmem.own_nids', true)"
        with store.transaction():
            with pytest.raises(KeyError):
                with store.transaction():  # a savepoint
                    gone = store.insert_chunks_bulk(rows)
                    assert store.conn.execute(own).fetchone()[0] == f"{gone[0].nid}:{gone[-1].nid}"
                    raise KeyError("rolled back")
            assert store.conn.execute(own).fetchone()[0] in (None, "")
            with pytest.raises(StoreError, match="names a chunk that does not exist"):
                with store.transaction():
                    store.insert_edges_bulk([edge(gone[0].nid, gone[1].nid)])
            keys = store.insert_chunks_bulk(rows)
            store.insert_edges_bulk([edge(keys[0].nid, keys[1].nid)])  # skipped: inserted just now
            store.conn.execute("DELETE FROM chunks WHERE nid = %s", (keys[2].nid,))
            assert store.conn.execute(own).fetchone()[0] == ""
            with pytest.raises(StoreError, match="names a chunk that does not exist"):
                with store.transaction():
                    store.insert_edges_bulk([edge(keys[0].nid, keys[2].nid)])
        assert store.counts()["edges"] == 2 and store.counts()["chunks"] == 4


# ---------------------------------------------------------------- replies read later (read_once, bulk COPY)
def test_a_query_run_ahead_of_its_change_check_runs_again_after_another_hosts_commit(pg_dsn):
    """search_causal sends its change check and answers from the views meanwhile (``read_once``);
    when the reply shows another host's commit, the answer is dropped and the query runs again in
    step, so the write is in the very next answer."""
    with Memory(pg_dsn, embedder=None) as a, Memory(pg_dsn, embedder=None) as b:
        a.record_many([(f"decision {i}", f"outcome {i}") for i in range(20)])
        assert [x.text for x in a.search_causal("decision 3")][:1] == ["outcome 3"]
        for i in range(3):
            b.record_decision(f"rollout plan {i}", f"pager storm {i}")
            sent = a._store.checks_sent
            assert [x.text for x in a.search_causal(f"rollout plan {i}")] == [f"pager storm {i}"]
            assert a._store.checks_sent == sent + 1  # one check, sent ahead; the rerun checked in front
            assert a._store._pending is None
        b.record_decision("rollout plan 0", "pager storm again")  # another host reinforces a known decision
        assert sorted(x.text for x in a.trace_cause("pager storm again")) == ["rollout plan 0"]


def test_a_search_run_ahead_of_its_change_check_is_ranked_again_after_another_hosts_commit(pg_dsn, monkeypatch):
    """``search`` sends its change check as its ranking starts (``read_once``): with no commit
    elsewhere the ranking is the answer (one pass, no statement but the check); after another
    host's commit it is ranked again in step, so that write is in the very next answer, and the
    reinforcement is queued once, for the answer returned."""
    from causalmem import retrieval

    passes = []
    ranked = retrieval._ranked

    def counted(*args, **kwargs):
        passes.append(1)
        return ranked(*args, **kwargs)

    monkeypatch.setattr(retrieval, "_ranked", counted)
    with Memory(pg_dsn, embedder=None) as a, Memory(pg_dsn, embedder=None) as b:
        a.record_many([(f"decision {i} on the cache", f"outcome {i} of the cache") for i in range(20)])
        a.search("decision 3 on the cache")
        for i in range(3):
            del passes[:]
            sent, queued = a._store.checks_sent, len(a._views.reinforcement.queued)
            assert "outcome 4 of the cache" in [h.text for h in a.search("outcome 4 of the cache")]
            assert len(passes) == 1 and a._store.checks_sent == sent + 1  # the fast path
            b.record_decision(f"rotate the signing key {i}", f"token refresh storm {i}")
            del passes[:]
            sent = a._store.checks_sent
            hits = a.search(f"token refresh storm {i}")
            assert f"token refresh storm {i}" in [h.text for h in hits]  # the other host's write
            assert len(passes) == 2 and a._store.checks_sent == sent + 1  # ranked again, the check in front
            assert a._store._pending is None
            assert len(a._views.reinforcement.queued) == queued + 2  # one entry per search returned, not per pass


def test_a_bulk_copy_that_fails_raises_inside_its_transaction(pg_dsn):
    """The reply to a bulk COPY is read before the connection's next statement: a COPY the server
    refuses (an edge naming no chunk) fails its transaction or savepoint, nothing of it stays, and
    the connection goes on as before."""
    from causalmem.types import Relation as Rel

    with Memory(pg_dsn, embedder=None) as mem:
        mem.record_many([("shard the queue", "latency halved")])
        store = mem._store
        bad = {"src": 10 ** 9, "dst": 10 ** 9 + 1, "relation": Rel.CAUSED, "confidence": 0.5, "source": "rule",
               "discovered_at": 1.0}
        with pytest.raises(StoreError, match="names a chunk that does not exist"):
            with store.transaction():
                store.insert_edges_bulk([bad])
        with store.transaction():  # the savepoint fails, the transaction goes on and commits the rest
            with pytest.raises(StoreError, match="names a chunk that does not exist"):
                with store.transaction():
                    store.insert_edges_bulk([bad])
            store.set_meta("after", "yes")
        with pytest.raises(KeyError):  # an error of the caller's own while the COPY's reply is unread
            with store.transaction():
                store.insert_edges_bulk([bad])
                raise KeyError("caller")
        assert store._pending is None and store.get_meta("after") == "yes"
        assert store.counts()["edges"] == 1
        mem.record_many([("cache the token", "stale sessions")])
        assert [x.text for x in mem.search_causal("cache the token")] == ["stale sessions"]
