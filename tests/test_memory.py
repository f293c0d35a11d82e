"""Memory on SQLite: write path, causal queries, persistence, lifecycle of the projection, bad input."""
from __future__ import annotations

import math
import sqlite3

import numpy as np
import pytest

from causalmem import Memory, SchemaVersionError, StoreError
from causalmem.store import SCHEMA_VERSION
from causalmem.graph import CausalGraph
from causalmem.projection import build_graph

from conftest import DEVOPS_EDGES


def energies(acts):
    return {a.text: round(a.energy, 4) for a in acts}


# ---------------------------------------------------------------- golden values (SPEC §3)
def test_devops_forward_golden(devops):
    got = energies(devops.search_causal("deploy without tests", include_seeds=True))
    assert got == pytest.approx({"deploy without tests": 0.75, "production crash": 0.4725,
                                 "user complaints": 0.2646, "safe release": -0.1339,
                                 "rollback needed": 0.1158}, abs=1e-4)
    assert "downtime" not in got  # 0.0608 is below the threshold


def test_devops_forward_excludes_seed_by_default(devops):
    acts = devops.search_causal("deploy without tests")
    assert [a.text for a in acts] == ["production crash", "user complaints", "safe release", "rollback needed"]
    assert acts[2].is_warning and acts[2].energy == pytest.approx(-0.1339, abs=1e-4)


def test_devops_caching_and_reverse_golden(devops):
    assert energies(devops.search_causal("enable caching")) == pytest.approx(
        {"faster response": 0.42, "timeout errors": -0.1339}, abs=1e-4)
    assert energies(devops.trace_cause("production crash")) == pytest.approx(
        {"deploy without tests": 0.4725, "hidden bugs": 0.3675, "skip code review": 0.2187}, abs=1e-4)


def test_graph_a_golden_with_q_values(db_path):
    with Memory(db_path, embedder=None) as mem:
        mem.record_decision("used Redis for caching", "cache hit rate up", confidence=0.9)
        mem.record_decision("used mutex lock", "deadlock crash", confidence=0.85)
        mem.record_decision("refactored to lock-free queue", "fixed race condition", confidence=0.95)
        mem.record_decision("used mutex lock", "fixed race condition", relation="prevented", confidence=0.6)
        qs = {"used Redis for caching": 0.8, "used mutex lock": 0.7, "refactored to lock-free queue": 0.9,
              "deadlock crash": 0.7}
        with mem._store.transaction():  # set Q directly (feedback() would go through Bellman)
            for text, q in qs.items():
                mem._store.conn.execute("UPDATE chunks SET q_value = ? WHERE text = ?", (q, text))
        mem._chunks = None  # drop the cached columns so the new Q-values are read
        fwd = energies(mem.search_causal("used mutex lock", include_seeds=True))
        assert fwd == pytest.approx({"used mutex lock": 0.85, "deadlock crash": 0.50575,
                                     "fixed race condition": -0.1071}, abs=1e-4)
        rev = energies(mem.trace_cause("deadlock crash", include_seeds=True))
        assert rev == pytest.approx({"deadlock crash": 0.85, "used mutex lock": 0.50575}, abs=1e-4)


def test_intervention_query_labels_and_chains(devops):
    rep = devops.intervention_query("deploy without tests")
    assert rep.label == "DANGER" and rep.has_precedent
    crash = next(o for o in rep.outcomes if o.text == "production crash")
    assert crash.chain_texts == ("deploy without tests", "production crash")
    assert crash.chain_confidence == pytest.approx(0.9)
    complaints = next(o for o in rep.outcomes if o.text == "user complaints")
    assert complaints.chain_confidence == pytest.approx(0.9 * 0.8)
    assert complaints.relations == ("caused", "caused")
    assert devops.intervention_query("enable caching").label == "SAFE"
    none = devops.intervention_query("rewrite everything in a weekend")
    assert none.label == "UNKNOWN" and not none.has_precedent and not none and "no precedent" in none.summary
    assert not devops.intervention_query("   ")


def test_token_seeding_not_only_substrings(devops):
    # Word order and extra words: still seeds "deploy without tests".
    acts = devops.search_causal("what happens if we deploy again without running the tests?")
    assert "production crash" in {a.text for a in acts}


def test_blank_queries_return_empty(devops):
    assert devops.search_causal("") == []
    assert devops.search_causal("   \n") == []
    assert devops.trace_cause("") == []
    assert devops.search_causal("nothing like this exists zzz") == []


# ---------------------------------------------------------------- write path
def test_exact_chunk_reuse_within_scope(db_path):
    with Memory(db_path, embedder=None) as mem:
        e1 = mem.record_decision("use redis", "fast reads")
        e2 = mem.record_decision("use redis", "memory pressure")
        assert e1.src == e2.src
        e3 = mem.record_decision("use redis", "fast reads", user_id="alice")
        assert e3.src != e1.src and e3.dst != e1.dst
        assert mem.get(e3.src).user_id == "alice"


def test_confidence_by_source_and_polarity_rule(db_path):
    with Memory(db_path, embedder=None) as mem:
        assert mem.record_decision("a1", "build failed", source="rule").confidence == pytest.approx(0.7)
        assert mem.record_decision("a2", "b2", source="user_feedback").confidence == pytest.approx(0.95)
        assert mem.record_decision("a3", "b3", source="temporal").confidence == pytest.approx(0.4)
        assert mem.record_decision("a4", "b4").confidence == pytest.approx(0.6)
        assert mem.record_decision("a5", "deploy crashed with an error").polarity == "negative"
        assert mem.record_decision("a6", "tests passed, bug fixed").polarity == "positive"
        assert mem.record_decision("a7", "上线后服务崩溃").polarity == "negative"
        assert mem.record_decision("a8", "问题已修复，发布成功").polarity == "positive"
        assert mem.record_decision("a9", "it rained", polarity="neutral").polarity == "neutral"


def test_contradiction_fast_path_annotates_older_failure(db_path):
    """The write-time fast path annotates (superseded_by) and leaves retirement to sleep."""
    with Memory(db_path, embedder=None) as mem:
        old = mem.record_decision("restart the worker pool", "jobs failed with timeout errors")
        new = mem.record_decision("restart the worker pool", "jobs resolved and passed")
        old_now = mem.get_edge(old.id)
        assert old_now.valid and old_now.superseded_by == new.id
        acts = {a.text: a for a in mem.search_causal("restart the worker pool")}
        assert set(acts) == {"jobs resolved and passed", "jobs failed with timeout errors"}
        assert acts["jobs failed with timeout errors"].superseded_by == mem.get_edge(new.id).dst
        mem.sleep(action="retire")  # the judge retires it
        assert not mem.get_edge(old.id).valid
        assert [a.text for a in mem.search_causal("restart the worker pool")] == ["jobs resolved and passed"]
        # a prevented edge is not a "success" of the decision: nothing retired
        e = mem.record_decision("ship friday", "weekend outage")
        mem.record_decision("ship friday", "safe release", relation="prevented")
        assert mem.get_edge(e.id).valid


def test_record_many_tuples_dicts_and_atomicity(db_path):
    with Memory(db_path, embedder=None) as mem:
        edges = mem.record_many([("a", "b"), ("b", "c", "enabled"), {"decision": "c", "outcome": "d",
                                                                     "relation": "prevented"}])
        assert [e.relation for e in edges] == ["caused", "enabled", "prevented"]
        before = mem.stats()["edges"]
        with pytest.raises(ValueError, match=r"items\[1\].*relation"):
            mem.record_many([("x", "y"), ("y", "z", "bogus")])
        assert mem.stats()["edges"] == before  # nothing of the failed batch was written
        with pytest.raises(TypeError, match=r"items\[0\]"):
            mem.record_many([42])


def test_link_fact_invalidate_delete_and_reads(db_path):
    with Memory(db_path, embedder=None) as mem:
        e = mem.record_decision("enable caching", "faster response")
        f = mem.add_fact("db.engine", "postgres 15")
        link = mem.link(e.dst, f.id, "fact", confidence=0.9)
        assert link.relation == "fact" and link.confidence == pytest.approx(0.9)
        assert {x.id for x in mem.edges(e.dst)} == {e.id, link.id}
        f2 = mem.add_fact("db.engine", "postgres 16", replace_same_key=True)
        assert f2.id != f.id
        assert not mem.get(f.id).valid  # the older value of the key was retired
        assert [c.text for c in mem.get_all(kind="fact")] == ["db.engine: postgres 16"]
        inv = mem.invalidate(e.id, reason="wrong")
        assert not inv.valid and inv.invalid_reason == "wrong"
        with pytest.raises(ValueError, match="already invalid"):
            mem.invalidate(e.id)
        assert mem.search_causal("enable caching") == []
        assert len(mem.edges(e.src, valid_only=False)) == 1
        restored = mem.restore(e.id)
        assert restored.valid
        assert [a.text for a in mem.search_causal("enable caching")] == ["faster response"]
        mem.delete(e.dst)
        assert mem.search_causal("enable caching") == []
        assert not mem.get(e.dst).valid


def test_unknown_ids_raise_keyerror_naming_the_id(devops):
    with pytest.raises(KeyError, match="nope"):
        devops.get("nope")
    with pytest.raises(KeyError, match="nope-edge"):
        devops.get_edge("nope-edge")
    with pytest.raises(KeyError, match="ghost"):
        devops.invalidate("ghost")
    with pytest.raises(KeyError, match="ghost"):
        devops.link("ghost", "ghost2", "caused")
    with pytest.raises(KeyError, match="ghost"):
        devops.delete("ghost")
    with pytest.raises(KeyError, match="ghost"):
        devops.edges("ghost")


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"decision": "", "outcome": "x"}, ValueError, "decision"),
    ({"decision": "   ", "outcome": "x"}, ValueError, "decision"),
    ({"decision": "x", "outcome": "\t"}, ValueError, "outcome"),
    ({"decision": None, "outcome": "x"}, TypeError, "decision"),
    ({"decision": "x", "outcome": "y", "relation": "causes"}, ValueError, "valid relations: caused"),
    ({"decision": "x", "outcome": "y", "confidence": 1.5}, ValueError, "confidence"),
    ({"decision": "x", "outcome": "y", "confidence": -0.1}, ValueError, "confidence"),
    ({"decision": "x", "outcome": "y", "confidence": float("nan")}, ValueError, "confidence"),
    ({"decision": "x", "outcome": "y", "polarity": "good"}, ValueError, "polarity"),
    ({"decision": "x", "outcome": "x"}, ValueError, "same"),
    ({"decision": "x", "outcome": "y", "event_time": float("inf")}, ValueError, "event_time"),
    ({"decision": "x", "outcome": "y", "user_id": ""}, ValueError, "user_id"),
])
def test_bad_input_is_a_clear_error_and_loses_nothing(devops, kwargs, exc, match):
    before = devops.stats()
    with pytest.raises(exc, match=match):
        devops.record_decision(**kwargs)
    assert devops.stats() == before


def test_large_and_sql_looking_texts_stored_verbatim(db_path):
    big = ("x" * 1023 + "\n") * 1024  # 1 MB
    evil = "'); DROP TABLE chunks; -- \" OR 1=1"
    with Memory(db_path, embedder=None) as mem:
        e = mem.record_decision(big, evil)
        assert mem.get(e.src).text == big and mem.get(e.dst).text == evil
    with Memory(db_path, embedder=None) as mem:
        assert mem.get(e.dst).text == evil
        assert mem.stats()["chunks"] == 2


def test_limits_are_validated(devops):
    with pytest.raises(ValueError, match="limit"):
        devops.search_causal("deploy without tests", limit=0)
    with pytest.raises(TypeError, match="limit"):
        devops.trace_cause("production crash", limit="5")
    with pytest.raises(ValueError, match="max_depth"):
        devops.intervention_query("deploy without tests", max_depth=0)


# ---------------------------------------------------------------- persistence and files
def test_reopen_keeps_everything(db_path, clock):
    with Memory(db_path, embedder=None, clock=clock) as mem:
        mem.record_many([{"decision": d, "outcome": o, "relation": r, "confidence": c}
                         for d, o, r, c in DEVOPS_EDGES])
        e = mem.record_decision("x", "y")
        mem.invalidate(e.id, reason="test")
        with mem._store.transaction():
            mem._store.conn.execute("UPDATE chunks SET q_value = 0.9 WHERE text = 'production crash'")
        stats = mem.stats()
    with Memory(db_path, embedder=None, clock=clock) as mem:
        assert mem.stats() == {**stats, "graph_rebuilds": 0}
        assert not mem.get_edge(e.id).valid
        crash = [c for c in mem.get_all(kind="outcome") if c.text == "production crash"][0]
        assert crash.q_value == pytest.approx(0.9)
        # the persisted Q seeds the query: (0.5 + 0.5·0.9)·0.9·0.7
        assert energies(mem.trace_cause("production crash"))["deploy without tests"] == pytest.approx(
            0.95 * 0.9 * 0.7, abs=1e-4)


def test_missing_parent_directory_is_refused(tmp_path):
    # a typo in a directory must not silently create a new tree (only the default data dir is created)
    path = tmp_path / "a" / "b" / "c" / "mem.db"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Memory(path, embedder=None)
    assert not (tmp_path / "a").exists()
    path.parent.mkdir(parents=True)
    with Memory(path, embedder=None) as mem:
        mem.record_decision("x", "y")
    assert path.exists()


def test_non_sqlite_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "notes.db"
    bad.write_text("this is not a database\n" * 10)
    with pytest.raises(StoreError, match="not a SQLite database"):
        Memory(bad, embedder=None)
    assert bad.read_text().startswith("this is not a database")
    with pytest.raises(StoreError, match="directory"):
        Memory(tmp_path, embedder=None)


def test_future_schema_version_is_refused_and_untouched(db_path):
    with Memory(db_path, embedder=None) as mem:
        mem.record_decision("x", "y")
    con = sqlite3.connect(db_path)
    con.execute("PRAGMA user_version = 99")
    con.commit()
    con.close()
    before = db_path.read_bytes()
    with pytest.raises(SchemaVersionError, match="99"):
        Memory(db_path, embedder=None)
    assert db_path.read_bytes() == before


def test_migrations_are_idempotent(db_path):
    for _ in range(3):
        with Memory(db_path, embedder=None) as mem:
            assert mem.stats()["schema_version"] == SCHEMA_VERSION
    con = sqlite3.connect(db_path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()


def test_closed_memory_refuses_use(db_path):
    mem = Memory(db_path, embedder=None)
    mem.close()
    with pytest.raises(StoreError, match="closed"):
        mem.record_decision("x", "y")


# ---------------------------------------------------------------- projection lifecycle
def _fresh_graph(mem) -> CausalGraph:
    return build_graph(mem._store.projection_arrays())


def _spread_both(mem, graph: CausalGraph | None, seeds: list[int]):
    energy = np.full(len(seeds), 0.75, dtype=np.float32)
    params = mem.config.causal.as_kwargs()
    out = []
    for reverse in (False, True):
        if graph is None:
            n, e = mem._projection.spread(np.asarray(seeds), energy, reverse=reverse, params=params)
        else:
            csr = graph.reverse if reverse else graph.forward
            ok = [s for s in seeds if s < csr.n_nodes]
            n, e = csr.spread(np.asarray(ok), energy[: len(ok)], **params)
        out.append(dict(zip(n.tolist(), np.round(e, 5).tolist())))
    return out


def test_write_visible_to_next_query_and_overlay_equals_rebuild(db_path, clock):
    rng = np.random.default_rng(7)
    with Memory(db_path, embedder=None, clock=clock) as mem:
        mem.record_many([(f"n{i}", f"n{i + 1}") for i in range(30)])
        mem.search_causal("n0")  # build the projection
        rebuilds = mem._projection.rebuilds
        edges = []
        for step in range(4):  # < rebuild_writes: everything goes through the overlay
            op = step % 4
            if op in (0, 2):
                a, b = rng.integers(0, 40, size=2)
                if a != b:
                    edges.append(mem.record_decision(f"n{a}", f"n{b}", relation=["caused", "prevented"][op // 2]))
            elif op == 1 and edges:
                mem.invalidate(edges[0].id)
            else:
                mem.delete(mem.get_all(limit=5)[3].id)
            assert mem._projection.rebuilds == rebuilds
            nids = [int(x) for x in rng.choice(np.arange(1, 40), size=5, replace=False)]
            assert _spread_both(mem, None, nids) == _spread_both(mem, _fresh_graph(mem), nids)
        assert mem._projection.rebuilds == rebuilds
        mem.record_decision("zz1", "zz2")  # 5th write → the next query rebuilds
        assert [a.text for a in mem.search_causal("zz1")] == ["zz2"]
        assert mem._projection.rebuilds == rebuilds + 1


def test_rebuild_after_time(db_path, clock):
    with Memory(db_path, embedder=None, clock=clock) as mem:
        mem.record_decision("a", "b")
        mem.search_causal("a")
        r = mem._projection.rebuilds
        mem.record_decision("b", "c")
        assert [x.text for x in mem.search_causal("a")] == ["b", "c"]
        assert mem._projection.rebuilds == r  # seen through the overlay
        clock.advance(31)
        mem.search_causal("a")
        assert mem._projection.rebuilds == r + 1


def test_external_writer_is_seen(db_path):
    with Memory(db_path, embedder=None) as a, Memory(db_path, embedder=None) as b:
        a.record_decision("p", "q")
        assert [x.text for x in b.search_causal("p")] == ["q"]
        a.record_decision("q", "r")
        assert [x.text for x in b.search_causal("p")] == ["q", "r"]


def test_scope_isolation_in_causal_queries(db_path):
    with Memory(db_path, embedder=None) as mem:
        mem.record_decision("deploy on friday", "weekend outage", user_id="alice")
        mem.record_decision("deploy on friday", "calm weekend", user_id="bob")
        assert [a.text for a in mem.search_causal("deploy on friday", user_id="alice")] == ["weekend outage"]
        assert [a.text for a in mem.search_causal("deploy on friday", user_id="bob")] == ["calm weekend"]
        assert mem.search_causal("deploy on friday", user_id="carol") == []


def test_task_tag_restricts_seeds(db_path):
    with Memory(db_path, embedder=None) as mem:
        mem.record_decision("retry the job", "duplicate charges", task_tag="billing")
        mem.record_decision("retry the upload", "upload finished", task_tag="storage")
        got = [a.text for a in mem.search_causal("retry", task_tag="storage")]
        assert got == ["upload finished"]


def test_math_sanity_of_activation_energies(devops):
    for a in devops.search_causal("deploy without tests", limit=10):
        assert math.isfinite(a.energy) and abs(a.energy) <= 1.0


def test_external_delete_add_and_update_reach_the_text_index(db_path):
    with Memory(db_path, embedder=None) as a, Memory(db_path, embedder=None) as b:
        whale = a.add("the blue whale sings at night", user_id="u")[0]
        assert [h.id for h in b.search("whale", user_id="u", reinforce=False)] == [whale.id]
        a.delete(whale.id)
        assert b.search("whale", user_id="u", reinforce=False) == []
        ele = a.add("a purple elephant in the room", user_id="u")[0]
        assert [h.id for h in b.search("elephant", user_id="u", reinforce=False)] == [ele.id]
        a.update(ele.id, "a green giraffe in the room")
        assert b.search("elephant", user_id="u", reinforce=False) == []
        assert [h.id for h in b.search("giraffe", user_id="u", reinforce=False)] == [ele.id]
        assert [h["event"] for h in b.history(ele.id)] == ["create", "update"]
