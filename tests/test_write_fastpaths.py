"""The write path's shortcuts give exactly what the plain constructions give: ``new_edge`` vs the
``Edge`` dataclass, ``new_ids`` vs per-id formatting, and ``record_many``'s edges vs what the
store reads back."""
from __future__ import annotations

import dataclasses
import re

import pytest

from causalmem import Memory
from causalmem.store.base import new_id, new_ids
from causalmem.types import Edge, new_edge


def test_new_edge_equals_the_dataclass():
    values = dict(id="e1", src="a", dst="b", relation="caused", confidence=0.7, source="llm_inferred",
                  polarity="negative", task_tag="t", event_time=3.0, valid=True, superseded_by=None,
                  discovered_at=2.0, subtype="because", invalid_reason=None, polarity_origin="guessed", evidence=2)
    assert list(values) == [f.name for f in dataclasses.fields(Edge)]  # a new Edge field must reach new_edge
    fast, plain = new_edge(*values.values()), Edge(**values)
    assert type(fast) is Edge and fast == plain and hash(fast) == hash(plain) and repr(fast) == repr(plain)
    assert dataclasses.asdict(fast) == values
    try:
        fast.confidence = 0.1  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("new_edge must stay frozen")


def test_new_ids_are_unique_increasing_hex():
    batch = new_ids(1000) + new_ids(1) + [new_id()] + new_ids(7)
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in batch)
    assert batch == sorted(batch) and len(set(batch)) == len(batch)
    assert new_ids(0) == []
    # the clock half counts up by one per id inside a batch
    clocks = [int(i[:16], 16) for i in new_ids(5)]
    assert clocks == list(range(clocks[0], clocks[0] + 5))


def test_record_many_edges_match_the_stored_ones(tmp_path):
    with Memory(tmp_path / "m.db", embedder=None) as mem:
        mem.record_decision("restart the cache", "the deploy failed")
        items = [("restart the cache", "the deploy failed"), ("scale the pool", "latency improved"),
                 {"decision": "bump the lib", "outcome": "tests passed", "relation": "enabled", "polarity": "mixed"},
                 ("scale the pool", "latency improved"), ("drop the index", "nothing happened")]
        edges = mem.record_many(items)
        for e in edges:
            assert e == mem.get_edge(e.id), e
        assert [e.polarity for e in edges] == ["negative", "positive", "mixed", "positive", None]
        assert [e.polarity_origin for e in edges] == ["guessed", "guessed", "given", "guessed", "unknown"]
        assert edges[1] == edges[3] and edges[1].evidence == 2 and edges[0].evidence == 2


def test_bulk_inserts_leave_out_only_unset_columns(tmp_path):
    """A batch where some rows set optional columns and others do not stores exactly what each
    row says (NULL / the column default where a row is silent), and a batch setting none of them
    stores the defaults."""
    from causalmem.store.sqlite import SQLiteStore
    from causalmem.types import Relation

    store = SQLiteStore(tmp_path / "s.db")
    plain = {"text": "plain", "kind": "decision", "created_at": 1.0, "q_value": 0.5}
    rich = {"text": "rich", "kind": "turn", "created_at": 2.0, "q_value": 0.4, "event_time": 0.0, "importance": 7.0,
            "user_id": "u", "agent_id": "a", "run_id": "r", "session_id": "s", "metadata": {"k": "é"}}
    with store.transaction():
        keys = store.insert_chunks_bulk([plain, rich, dict(plain, text="plain2")])
        only_plain = store.insert_chunks_bulk([dict(plain, text="p3")])
        nids = [k.nid for k in keys + only_plain]
        e1 = store.insert_edges_bulk([
            {"src": nids[0], "dst": nids[2], "relation": Relation.CAUSED, "confidence": 0.6, "source": "rule",
             "discovered_at": 1.0},
            {"src": nids[0], "dst": nids[3], "relation": Relation.PREVENTED, "confidence": 0.7, "source": "rule",
             "discovered_at": 1.0, "subtype": None, "polarity": "negative", "task_tag": "t", "event_time": 0.0}])
    rows = store.chunk_rows_by_nid(nids)
    got = [(r.text, r.event_time, r.importance, r.user_id, r.agent_id, r.run_id, r.session_id, r.metadata)
           for r in (rows[n] for n in nids)]
    assert got == [("plain", None, 5.0, None, None, None, None, "{}"),
                   ("rich", 0.0, 7.0, "u", "a", "r", "s", '{"k": "é"}'),
                   ("plain2", None, 5.0, None, None, None, None, "{}"),
                   ("p3", None, 5.0, None, None, None, None, "{}")]
    edges = {r.id: r for r in store.edge_rows_by_ids([i for _e, i in e1])}
    a, b = (edges[i] for _e, i in e1)
    assert (a.relation, a.polarity, a.polarity_origin, a.task_tag, a.event_time) == ("caused", None, "unknown", None,
                                                                                     None)
    assert (b.relation, b.polarity, b.polarity_origin, b.task_tag, b.event_time) == ("prevented", "negative", "given",
                                                                                     "t", 0.0)
    store.close()


def test_version_2_file_migrates_to_leaner_indexes(tmp_path):
    import sqlite3

    from causalmem.store.sqlite import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, SQLiteStore, _split_sql

    path = tmp_path / "v2.db"
    con = sqlite3.connect(path, isolation_level=None)
    for _name, sql in MIGRATIONS[:2]:
        for statement in _split_sql(sql):
            con.execute(statement)
    con.execute("INSERT INTO chunks (nid, id, text, text_hash, kind, created_at, q_value, session_id) "
                "VALUES (1, 'c1', 'hello', 1, 'turn', 1.0, 0.5, 's1')")
    con.execute("PRAGMA user_version = 2")
    con.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    con.close()
    with Memory(path, embedder=None) as mem:
        assert mem.stats()["schema_version"] == SCHEMA_VERSION == 4
        assert mem.get("c1").text == "hello"
    store = SQLiteStore(path)
    sql = dict(store.conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"))
    assert "edges_src" not in sql and "edges_pair" in sql
    assert "WHERE session_id IS NOT NULL" in sql["chunks_session"]
    assert store.previous_turn("s1", None, None, None) == 1
    store.close()


def test_record_many_pauses_the_collector_and_restores_it(tmp_path):
    """The cyclic collector is off while a ``record_many`` runs (seen from inside the write) and
    back to the caller's setting afterwards — on after a write that raised too, and still off for
    a caller who had turned it off; overlapping writes of two threads leave it on."""
    import gc
    import threading

    from causalmem import write

    seen = []
    real = write.record_batch

    def spy(views, fx, items, vecs=None):
        seen.append(gc.isenabled())
        if items[0]["decision"] == "boom":
            raise RuntimeError("boom")
        return real(views, fx, items, vecs)

    assert gc.isenabled()
    with Memory(tmp_path / "m.db", embedder=None) as mem:
        write.record_batch = spy
        try:
            mem.record_many([("a", "b"), ("c", "d")])
            assert seen == [False] and gc.isenabled()
            with pytest.raises(RuntimeError):
                mem.record_many([("boom", "b")])
            assert gc.isenabled() and mem.stats()["edges"] == 2
            gc.disable()
            try:
                mem.record_many([("e", "f")])
                assert not gc.isenabled()
            finally:
                gc.enable()
            assert seen == [False, False, False]
        finally:
            write.record_batch = real
        inside, release = threading.Event(), threading.Event()

        def slow():
            with write.gc_paused():
                inside.set()
                release.wait(10)

        t = threading.Thread(target=slow)
        t.start()
        assert inside.wait(10)
        mem.record_many([("g", "h")])  # ends while the other thread's pause goes on
        assert not gc.isenabled()
        release.set()
        t.join(10)
        assert gc.isenabled()
