"""The superseded lookup of a search: two partial indexes (schema 4) and, outside a write,
a whole-store map kept in memory until the database changes. Each read is checked against the
lookup asked of SQLite directly, over real files, own writes, another connection's commits,
uncommitted rows inside a write and rollbacks."""
from __future__ import annotations

import random
import sqlite3

import pytest

from causalmem import Memory
from causalmem.store import sqlite as sqlite_mod
from causalmem.store.sqlite import SCHEMA_VERSION, SQLiteStore, _SUPERSEDED_SQL


def truth(path, nids) -> dict[int, str]:
    """The lookup as SQL alone, on a fresh connection (no cache anywhere)."""
    con = sqlite3.connect(path)
    try:
        q = ",".join("?" * len(nids))
        out: dict[int, str] = {}
        for nid, by in con.execute(_SUPERSEDED_SQL.format(where=f"e.dst IN ({q}) AND "), [*nids, *nids]):
            out.setdefault(nid, by)
        return out
    finally:
        con.close()


def edge_eids(path) -> list[int]:
    con = sqlite3.connect(path)
    try:
        return [r[0] for r in con.execute("SELECT eid FROM edges ORDER BY eid")]
    finally:
        con.close()


def test_schema_4_indexes_are_used(tmp_path):
    path = tmp_path / "m.db"
    with Memory(path, embedder=None) as mem:
        mem.record_decision("a", "b")
        assert mem.stats()["schema_version"] == SCHEMA_VERSION == 4
    store = SQLiteStore(path)
    try:
        for where in ("", "e.dst IN (1, 2, 3) AND "):
            plan = " ".join(r[3] for r in store.query("EXPLAIN QUERY PLAN " + _SUPERSEDED_SQL.format(where=where)))
            assert "edges_superseded" in plan and "edges_invalidating" in plan, plan
    finally:
        store.close()


def test_version_3_file_migrates_without_touching_change_seq(tmp_path):
    """Index-only migration: the change counter (and so the index files made from the store) stays."""
    from causalmem.store.sqlite import MIGRATIONS, _split_sql

    path = tmp_path / "v3.db"
    with Memory(path, embedder=None) as mem:
        for k in range(20):
            mem.record_decision(f"decision {k}", f"outcome {k}")
    with Memory(path, embedder=None) as mem:
        mem.search("decision 7", reinforce=False)  # builds the views; close saves them
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("DROP INDEX edges_superseded")
    con.execute("DROP INDEX edges_invalidating")
    con.execute("PRAGMA user_version = 3")
    seq = con.execute("SELECT value FROM meta WHERE key = 'change_seq'").fetchone()[0]
    con.close()
    idx = tmp_path / "v3.db.idx"
    files = {f.name: f.stat().st_mtime_ns for f in idx.iterdir() if f.suffix == ".cmx"}
    assert {"chunks.cmx", "lexical.cmx", "projection.cmx"} <= set(files)
    assert "edges_superseded" in MIGRATIONS[3][1] and _split_sql(MIGRATIONS[3][1])
    # a read-only open serves a file that only lacks indexes as it is, and leaves it unmodified (review R1)
    with Memory(path, embedder=None, read_only=True) as ro:
        assert "decision 7" in [h.text for h in ro.search("decision 7", reinforce=False)[:2]]
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == 3
    assert not {"edges_superseded", "edges_invalidating"} & {
        r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    con.close()
    with Memory(path, embedder=None) as mem:
        assert mem.stats()["schema_version"] == 4
        hits = mem.search("decision 7", reinforce=False)
        assert "decision 7" in [h.text for h in hits[:2]]
    # the index files were current before the migration and still are: read, neither rebuilt nor rewritten
    assert {f.name: f.stat().st_mtime_ns for f in idx.iterdir() if f.suffix == ".cmx"} == files
    con = sqlite3.connect(path)
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"edges_superseded", "edges_invalidating"} <= names
    assert con.execute("SELECT value FROM meta WHERE key = 'change_seq'").fetchone()[0] == seq
    con.close()


@pytest.mark.parametrize("cache_max", [sqlite_mod.SUPERSEDED_CACHE_MAX, 1])
def test_superseded_lookup_matches_sql_through_every_kind_of_change(tmp_path, monkeypatch, cache_max):
    """A random sequence of supersessions, invalidations, restores, deletions and meta edges, written
    by this connection (committed, uncommitted, rolled back) and by another one: after each step
    ``superseded_chunks`` equals the SQL lookup (cache_max 1: the map is too big, per-query reads)."""
    monkeypatch.setattr(sqlite_mod, "SUPERSEDED_CACHE_MAX", cache_max)
    monkeypatch.setattr(sqlite_mod, "SUPERSEDED_MAP_AFTER", 1)  # the map from the 2nd unchanged search on
    rnd = random.Random(5)
    path = tmp_path / "s.db"
    mem = Memory(path, embedder=None)
    other = Memory(path, embedder=None)
    try:
        edges = [mem.record_decision(f"decision {k % 6}", f"outcome {k} {'failed' if k % 2 else 'passed'}")
                 for k in range(24)]
        store = mem._store
        nids = sorted({n for (n,) in store.query("SELECT nid FROM chunks")})
        seen_nonempty = 0
        for step in range(60):
            op = rnd.choice(["annotate", "retire", "restore", "meta", "other_meta", "delete", "rollback", "inside"])
            eids = edge_eids(path)
            eid = rnd.choice(eids)
            by = rnd.choice(edges).id
            if op == "annotate":
                with store.transaction():
                    store.annotate_superseded([(by, eid)])
            elif op == "retire":
                with store.transaction():
                    store.retire_superseded([(1.7e9, "superseded", by, eid)])
            elif op == "restore":
                with store.transaction():
                    store.restore_edge(eid)
            elif op == "meta":
                a, b = rnd.sample(nids, 2)
                if mem._store.query("SELECT valid_to IS NULL FROM chunks WHERE nid = ?", (a,))[0][0] and \
                        mem._store.query("SELECT valid_to IS NULL FROM chunks WHERE nid = ?", (b,))[0][0]:
                    ids = dict(store.query("SELECT nid, id FROM chunks WHERE nid IN (?, ?)", (a, b)))
                    mem.link(ids[a], ids[b], rnd.choice(["invalidates", "supersedes", "related"]))
            elif op == "other_meta":  # another connection's commit
                live = [r[0] for r in store.query("SELECT id FROM chunks WHERE valid_to IS NULL")]
                a, b = rnd.sample(live, 2)
                other.link(a, b, "invalidates")
            elif op == "delete":
                live = [r[0] for r in store.query("SELECT id FROM chunks WHERE valid_to IS NULL")]
                mem.delete(rnd.choice(live))
            elif op == "rollback":
                with pytest.raises(RuntimeError):
                    with store.transaction():
                        store.annotate_superseded([(by, eid)])
                        store.retire_superseded([(1.7e9, "superseded", by, rnd.choice(eids))])
                        assert store.superseded_chunks(nids) == own_view(store, nids)
                        raise RuntimeError("abandon")
            else:  # inside a write: its own uncommitted rows count
                with store.transaction():
                    store.annotate_superseded([(by, eid)])
                    assert store.superseded_chunks(nids) == own_view(store, nids)
            got = store.superseded_chunks(nids)
            assert got == truth(path, nids), (step, op)
            assert store.superseded_chunks(nids[::-1][:7]) == truth(path, nids[::-1][:7])
            seen_nonempty += bool(got)
        assert seen_nonempty > 10  # the sequence really superseded something
    finally:
        other.close()
        mem.close()


def own_view(store: SQLiteStore, nids) -> dict[int, str]:
    """The SQL lookup on the store's own connection (inside its transaction: its uncommitted rows)."""
    q = ",".join("?" * len(nids))
    out: dict[int, str] = {}
    for nid, by in store.query(_SUPERSEDED_SQL.format(where=f"e.dst IN ({q}) AND "), [*nids, *nids]):
        out.setdefault(nid, by)
    return out


def test_search_flags_a_supersession_made_by_another_process_after_a_cached_read(tmp_path):
    """The search's own view: a chunk superseded through another connection after this one cached
    the (empty) map is demoted and flagged at the next search."""
    path = tmp_path / "x.db"
    with Memory(path, embedder=None) as mem, Memory(path, embedder=None) as other:
        old = mem.add("the deploy key is stored in vault path alpha")[0]
        new = mem.add("the deploy key is stored in vault path bravo")[0]
        first = mem.search("deploy key vault path", reinforce=False)
        assert first[0].id == old.id and all(h.superseded_by is None for h in first)
        other.link(new.id, old.id, "invalidates")
        hits = mem.search("deploy key vault path", reinforce=False)
        assert [h.id for h in hits][:2] == [new.id, old.id]
        assert hits[1].superseded_by == new.id


def test_a_search_right_after_a_write_asks_for_its_chunks_not_the_whole_map(tmp_path):
    """Review R2: every commit changes the map's key. Searches after a write answer with the lookup of
    their own chunks; only after a stretch of searches on an unchanged store is the whole map read, once,
    and later searches use it."""
    path = tmp_path / "w.db"
    with Memory(path, embedder=None) as mem:
        old = [mem.add(f"the limit of service {k} is {k} requests")[0] for k in range(6)]
        new = [mem.add(f"the limit of service {k} is {k + 10} requests")[0] for k in range(6)]
        for a, b in zip(new, old):
            mem.link(a.id, b.id, "supersedes")
        store = mem._store
        nids = [n for (n,) in store.query("SELECT nid FROM chunks ORDER BY nid")]
        want = truth(path, nids)
        assert len(want) == 6
        read_at = store._sup_key  # the state the whole map was last read at
        for _ in range(sqlite_mod.SUPERSEDED_MAP_AFTER):  # changed, then unchanged for a stretch: its chunks
            assert store.superseded_chunks(nids) == want and store._sup_key == read_at
        assert store.superseded_chunks(nids) == want and store._sup_key != read_at  # then the map, once
        read_at = store._sup_key
        assert store.superseded_chunks(nids) == want and store._sup_key == read_at  # kept
        for k in range(3):  # write, search, write, search: never the whole map
            mem.add(f"an unrelated note {k}")
            assert store.superseded_chunks(nids) == want and store._sup_key == read_at
