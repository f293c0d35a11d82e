"""Sleep / consolidation (SPEC §6): stages end to end on real SQLite files."""
from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from causalmem import consolidation
from causalmem.tokenizer import tokenize
from causalmem.memory import Memory
from causalmem.store import text_hash
from causalmem.types import Relation

T = 1_700_000_000.0
DAY = 86400.0
REPO = Path(__file__).resolve().parents[1]


def _mem(path, t=T, **kw):
    return Memory(path, clock=lambda: t, embedder=None, **kw)


def _dump(path) -> list[str]:
    con = sqlite3.connect(str(path))
    try:
        return list(con.iterdump())
    finally:
        con.close()


def _jaccard(a: str, b: str) -> float:
    x, y = set(tokenize(a)), set(tokenize(b))
    return len(x & y) / len(x | y)


PAY = "restarted the payment service without draining the queue first"
BILL = "restarted the billing service without draining the queue first"


def _parallel_edge(mem, edge, **kw):
    """A second valid edge beside ``edge`` (same chunks and relation), as an older file may hold one."""
    from causalmem import write

    src, dst = mem._store.nid_of(edge.src), mem._store.nid_of(edge.dst)
    with mem._views.write() as fx:
        _, edge_id = write.insert_edge(mem._views, fx, src, dst, Relation.parse(edge.relation), event_time=None, **kw)
        mem._views.effects.count_write(fx)
    return mem.get_edge(edge_id)


def _seed(mem):
    """A small store exercising every stage."""
    out = {}
    out["protected"] = mem.record_decision("ran the migration at peak hour", "checkout timed out for users",
                                           confidence=0.6, polarity="negative", task_tag="db")
    out["plain"] = mem.record_decision("added an index on orders", "queries got faster", confidence=0.6,
                                       polarity="positive", task_tag="db")
    out["dup_weak"] = mem.record_decision("bumped the worker count", "throughput doubled", confidence=0.6,
                                          source="rule", polarity="positive", task_tag="perf")
    # record_decision and link fold repeated evidence into one edge; a file written before they did
    # can hold parallel edges (one written here with the store's raw insert): sleep merges them
    out["dup_strong"] = _parallel_edge(mem, out["dup_weak"], confidence=0.9, source="rule", polarity="positive",
                                       task_tag="perf")
    out["pay"] = mem.record_decision(PAY, "orders were lost during the restart", task_tag="payments",
                                     polarity="negative", confidence=0.4)
    out["bill"] = mem.record_decision(BILL, "invoices were lost during the restart", task_tag="billing",
                                      polarity="negative", confidence=0.4)
    # same task tag: similar texts but not a cross-task pattern
    mem.record_decision("restarted the payment service without draining the queue",
                        "payments failed during the restart", task_tag="payments", confidence=0.4,
                        polarity="negative")
    # another user: never linked across scopes
    mem.record_decision("restarted the ledger service without draining the queue first",
                        "entries were lost during the restart", task_tag="ledger", user_id="other",
                        confidence=0.4, polarity="negative")
    return out


def test_sleep_end_to_end(tmp_path):
    assert _jaccard(PAY, BILL) >= 0.65
    with _mem(tmp_path / "m.db") as mem:
        e = _seed(mem)
        r = mem.sleep(now=T + DAY)
        # stage 1 / 1.5: the failure edge is replay-protected; both endpoints gain Q
        assert r.protected >= 1 and r.reactivated == 8
        assert mem.get(e["protected"].src).q_value == pytest.approx(0.5 + 0.1 * (1 + 0.9 * 0.5 - 0.5))
        assert mem.get(e["protected"].dst).q_value == pytest.approx(0.5 + 0.1 * (1 - 0.5))
        assert mem.get(e["plain"].src).q_value == 0.5  # 0.6 + nothing < 1.0: not protected
        assert r.q_updates >= 2
        # stage 2: duplicates merge into the strongest
        assert r.merged == 1
        weak, strong = mem.get_edge(e["dup_weak"].id), mem.get_edge(e["dup_strong"].id)
        assert not weak.valid and weak.invalid_reason == f"merged into {strong.id}"
        assert strong.valid and strong.confidence == pytest.approx(0.9 * 0.99)
        # stage 2: one cross-task pattern (payments vs billing), not within a task, not across users
        assert r.patterns == 1
        all_metas = [x for x in mem.edges() if x.relation == "meta"]
        metas = [x for x in all_metas if x.subtype == "repeated"]
        assert len(metas) == 1
        assert {metas[0].src, metas[0].dst} == {e["pay"].src, e["bill"].src}
        assert metas[0].source == "rule"
        assert r.rem_links == 0  # already linked by the pattern
        # stage 4b: the rest are structural similar_to links (tests/test_sleep_transfer.py)
        assert r.transfer_links == len(all_metas) - 1 == len([x for x in all_metas if x.subtype == "similar_to"])
        # stage 3
        assert r.decayed >= 7 and r.retired == 0
        assert not r.dry_run and not r.skipped_low_diversity
        assert set(r.elapsed) >= {"reactivation", "q_update", "supersession", "generalization", "decay",
                                  "hebbian", "rem", "total"}
        assert mem._store.integrity_check() == "ok"


def test_rem_links_patterns_with_disjoint_tags(tmp_path):
    with _mem(tmp_path / "m.db") as mem:
        a = mem.record_decision("cached the config lookups", "config reads stopped timing out",
                                task_tag="api", polarity="positive")
        b = mem.record_decision("cached the schema lookups", "schema reads stopped timing out",
                                task_tag="etl", polarity="positive")
        assert _jaccard(a.src and "cached the config lookups", "cached the schema lookups") < 0.65
        r = mem.sleep(now=T + DAY)
        assert r.patterns == 0 and r.rem_links == 1
        metas = [x for x in mem.edges() if x.relation == "meta"]
        assert len(metas) == 1 and metas[0].subtype == "similar_to"
        assert {metas[0].src, metas[0].dst} == {a.src, b.src}
        assert mem.sleep(now=T + 2 * DAY).rem_links == 0  # incremental: nothing new to compare


def test_dry_run_writes_nothing_and_reports_the_same(tmp_path):
    path = tmp_path / "m.db"
    with _mem(path) as mem:
        _seed(mem)
        with mem._store.transaction():
            from causalmem import learning
            nids = [r[0] for r in mem._store.query("SELECT nid FROM chunks ORDER BY nid LIMIT 3")]
            learning.hebbian_credit(mem._store, nids, T, mem.config)
    before = _dump(path)
    with _mem(path) as mem:
        dry = mem.sleep(now=T + 30 * DAY, dry_run=True)
    assert _dump(path) == before
    assert dry.dry_run
    with _mem(path) as mem:
        real = mem.sleep(now=T + 30 * DAY)
    assert _dump(path) != before
    strip = lambda rep: {k: v for k, v in rep.__dict__.items() if k not in ("elapsed", "dry_run")}  # noqa: E731
    assert strip(dry) == strip(real)
    assert real.merged == 1 and real.patterns == 1 and real.hebbian_faded == 3


def test_second_run_is_reported_honestly(tmp_path):
    path = tmp_path / "m.db"
    with _mem(path) as mem:
        e = _seed(mem)
        r1 = mem.sleep(now=T + 10 * DAY)
        c1 = mem.get_edge(e["dup_strong"].id).confidence
        r2 = mem.sleep(now=T + 20 * DAY)
        assert r1.merged == 1 and r2.merged == 0
        assert r1.patterns == 1 and r2.patterns == 0
        assert r2.decayed > 0  # ten more days of decay, counted again
        assert mem.get_edge(e["dup_strong"].id).confidence == pytest.approx(c1 * 0.99 ** 10)
        assert mem.get_edge(e["dup_strong"].id).confidence == pytest.approx(0.9 * 0.99 ** 20)
        assert r2.q_updates >= 1  # still protected, Q rises again
        assert mem._store.get_meta("last_sleep_at") == repr(T + 20 * DAY)


def test_novelty_gate_skips_a_repetitive_store(tmp_path):
    path = tmp_path / "m.db"
    with _mem(path) as mem:
        mem.add(["ok ok ok"] * 70, user_id="u")
    before = _dump(path)
    with _mem(path) as mem:
        r = mem.sleep(now=T + DAY, min_diversity=0.5)
        assert r.skipped_low_diversity and r.diversity < 0.5
        assert "skipped" in consolidation.format_report(r)
    assert _dump(path) == before
    with _mem(path) as mem:
        r = mem.sleep(now=T + DAY)  # default 0: always runs
        assert not r.skipped_low_diversity


def test_token_diversity():
    assert consolidation.token_diversity([]) == 0.0
    assert consolidation.token_diversity(["alpha beta gamma delta"]) == pytest.approx(1.0)
    low = consolidation.token_diversity(["ok ok ok"] * 64)
    assert low == 0.0
    mixed = consolidation.token_diversity(["deploy failed again", "deploy failed again", "cache warmed up"])
    assert 0.0 < mixed < 1.0


def test_jaccard_pairs_matches_brute_force():
    rng = np.random.default_rng(3)
    vocab = [f"w{i}" for i in range(30)]
    docs = [frozenset(rng.choice(vocab, size=rng.integers(1, 8), replace=False)) for _ in range(150)]
    probe = [bool(x) for x in rng.random(150) < 0.5]
    got = {(i, j) for i, j, _ in consolidation.jaccard_pairs(docs, probe, 0.65)}
    want = {(i, j) for i in range(150) for j in range(i + 1, 150)
            if (probe[i] or probe[j]) and len(docs[i] & docs[j]) / len(docs[i] | docs[j]) >= 0.65}
    assert got == want


# ------------------------------------------------------------------------------ supersession


def _negative_then_positive(mem):
    old = mem.record_decision("set the pool size to 5", "connections ran out under load", polarity="negative")
    other = mem.record_decision("load-tested the service", "the pool held under load", polarity="positive")
    new = mem.link(old.src, other.dst, "caused", polarity="positive", source="llm_inferred")
    return old, new


def test_rule_judge_annotates_then_never_rejudges(tmp_path):
    with _mem(tmp_path / "m.db") as mem:
        old, new = _negative_then_positive(mem)
        r = mem.sleep(now=T + DAY)
        assert r.superseded == 1 and r.annotated == 1 and r.judge_failures == 0
        e = mem.get_edge(old.id)
        assert e.valid and e.superseded_by == new.id
        assert mem._store.superseded_chunks([mem._store.nid_of(old.dst)])  # flagged for retrieval
        assert mem.sleep(now=T + 2 * DAY).superseded == 0
        mem.restore(old.id)  # the user disagrees: the decision sticks
        assert mem.sleep(now=T + 3 * DAY).superseded == 0
        assert mem.get_edge(old.id).superseded_by is None


def test_rule_judge_retire_action(tmp_path):
    with _mem(tmp_path / "m.db") as mem:
        old, new = _negative_then_positive(mem)
        r = mem.sleep(now=T + DAY, action="retire")
        assert r.superseded == 1 and r.annotated == 0
        e = mem.get_edge(old.id)
        assert not e.valid and e.superseded_by == new.id and e.invalid_reason.startswith(f"superseded by {new.id}")
        assert mem.get_edge(new.id).valid


def test_rule_judge_leaves_non_updates_alone(tmp_path):
    with _mem(tmp_path / "m.db") as mem:
        a = mem.record_decision("moved logs to s3", "log search got slower", polarity="negative")
        b = mem.record_decision("archived old logs", "storage bill dropped", polarity="positive")
        mem.link(a.src, b.dst, "caused", polarity="negative")  # failure after failure: no update
        mem.link(b.src, a.dst, "caused", polarity="neutral")
        r = mem.sleep(now=T + DAY)
        assert r.superseded == 0
        assert all(x.superseded_by is None for x in mem.edges())


def test_explicit_invalidates_edge_supersedes_old_belief(tmp_path):
    with _mem(tmp_path / "m.db") as mem:
        old = mem.record_decision("waited for the health check before switching DNS", "traffic moved over",
                                  relation="enabled", polarity="positive", task_tag="infra")
        meta = mem.record_decision("automated the health-check-gated DNS", old.src and
                                   "waited for the health check before switching DNS", relation="invalidates",
                                   task_tag="infra")
        assert meta.relation == "meta" and meta.subtype == "invalidates" and meta.dst == old.src
        r = mem.sleep(now=T + DAY)
        assert r.superseded == 1 and r.annotated == 1
        e = mem.get_edge(old.id)
        assert e.valid and e.superseded_by == meta.id
        sup = mem._store.superseded_chunks([mem._store.nid_of(old.src)])
        assert sup == {mem._store.nid_of(old.src): meta.src}
        assert mem.sleep(now=T + 2 * DAY).superseded == 0


def test_sleep_argument_errors(tmp_path):
    with _mem(tmp_path / "m.db") as mem:
        with pytest.raises(ValueError, match="action"):
            mem.sleep(action="delete")
        with pytest.raises(ValueError, match="min_diversity"):
            mem.sleep(min_diversity=2.0)
        with pytest.raises(TypeError, match="judge"):
            mem.sleep(judge=object())


def test_format_report_lists_every_stage(tmp_path):
    with _mem(tmp_path / "m.db") as mem:
        _seed(mem)
        text = consolidation.format_report(mem.sleep(now=T + DAY, dry_run=True))
    for label in ("novelty gate", "reactivation", "Q update", "supersession", "generalization", "decay",
                  "hebbian", "REM", "total", "dry run"):
        assert label in text


def test_progress_is_silent_on_small_stores(tmp_path, capsys):
    with _mem(tmp_path / "m.db") as mem:
        _seed(mem)
        mem.sleep(now=T + DAY, progress=True)
    assert capsys.readouterr().err == ""


# ------------------------------------------------------------------------------ crash safety


def build_bulk_store(path, n_edges: int, *, seed: int = 0, now: float = T) -> None:
    """A store of n_edges random edges over n_edges/2 chunks, written with executemany."""
    rng = np.random.default_rng(seed)
    n_nodes = max(4, n_edges // 2)
    Memory(path, embedder=None).close()  # create the schema
    con = sqlite3.connect(str(path))
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=OFF")
    vocab = [f"tok{i}" for i in range(5000)]
    words = rng.integers(0, len(vocab), size=(n_nodes, 6))
    with con:
        con.executemany(
            "INSERT INTO chunks (nid, id, text, text_hash, kind, created_at, q_value) VALUES (?,?,?,?,?,?,?)",
            ((i + 1, f"c{i + 1}", t, text_hash(t), "decision", now - 60 * DAY, 0.5)
             for i, t in enumerate(" ".join(vocab[w] for w in row) for row in words)))
        rels = ["caused", "enabled", "prevented", "temporal", "fact"]
        sources = ["rule", "llm_inferred", "temporal", "user_feedback"]
        pols = [None, "positive", "negative", "neutral"]
        src = rng.integers(1, n_nodes + 1, n_edges)
        dst = rng.integers(1, n_nodes + 1, n_edges)
        rel = rng.integers(0, len(rels), n_edges)
        srcs = rng.integers(0, len(sources), n_edges)
        pol = rng.integers(0, len(pols), n_edges)
        conf = rng.uniform(0.2, 0.95, n_edges)
        disc = now - rng.uniform(0, 60 * DAY, n_edges)
        tags = rng.integers(0, 20, n_edges)
        con.executemany(
            "INSERT INTO edges (eid, id, src, dst, relation, rel_code, confidence, source, polarity, task_tag, "
            "discovered_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            ((i + 1, f"e{i + 1}", int(s), int(d), rels[r], Relation.parse(rels[r]).code, float(c), sources[so],
              pols[p], f"tag{t}", float(dd))
             for i, (s, d, r, so, p, c, dd, t) in enumerate(zip(src, dst, rel, srcs, pol, conf, disc, tags))))
        a = rng.integers(1, n_nodes + 1, n_edges // 10)
        b = rng.integers(1, n_nodes + 1, n_edges // 10)
        pairs = {(int(min(x, y)), int(max(x, y))) for x, y in zip(a, b) if x != y}
        con.executemany("INSERT INTO cooccurrence (a, b, weight, hits, updated_at) VALUES (?,?,?,?,?)",
                        ((x, y, 0.3, 2, now - 20 * DAY) for x, y in pairs))
    con.close()


def _content_hash(path) -> str:
    con = sqlite3.connect(str(path))
    try:
        h = hashlib.sha256()
        for table, key in (("chunks", "nid"), ("edges", "eid"), ("cooccurrence", "a, b"), ("meta", "key")):
            for row in con.execute(f"SELECT * FROM {table} ORDER BY {key}"):
                h.update(repr(row).encode())
        return h.hexdigest()
    finally:
        con.close()


_CHILD = """
import sys, time
from causalmem import consolidation
from causalmem.memory import Memory

stage = consolidation._Progress.stage

def paused(self, name):  # hold the transaction open once decay and Hebbian fading have written
    stage(self, name)
    if name == "rem":
        time.sleep(120)

consolidation._Progress.stage = paused
mem = Memory(sys.argv[1], embedder=None)
mem.sleep(now=float(sys.argv[2]), progress=True)
print("finished", flush=True)
"""


@pytest.mark.slow
def test_sigkill_mid_sleep_leaves_the_store_unchanged(tmp_path):
    path = tmp_path / "big.db"
    build_bulk_store(path, 60_000)
    before = _content_hash(path)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(path), repr(T + 30 * DAY)], stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env, text=True)
    seen = []
    try:
        deadline = time.monotonic() + 120
        for line in proc.stderr:
            seen.append(line)
            if " rem" in line:  # decay + Hebbian have written their rows; the transaction is still open
                os.kill(proc.pid, signal.SIGKILL)
                break
            assert time.monotonic() < deadline
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, ("".join(seen), proc.stdout.read())
    assert any("decay" in s for s in seen) and any("hebbian" in s for s in seen)
    con = sqlite3.connect(str(path))
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    assert _content_hash(path) == before
    with Memory(path, embedder=None) as mem:  # and the store still sleeps normally afterwards
        r = mem.sleep(now=T + 30 * DAY)
        assert r.decayed > 0
    assert _content_hash(path) != before
