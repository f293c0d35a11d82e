"""``record_many`` stores exactly what recording the same items one by one stores.

Random batches (texts drawn from a small pool, so texts are reused within and across batches and
pairs repeat; scopes, relations, sources, confidences, given polarities, task tags and event times
mixed) go into one memory through ``record_many`` and into another through ``record_decision`` per
item. Every stored row must agree: the chunks (text, kind, scope, times, Q, importance, metadata)
and the edges (both ends' texts, relation, subtype, confidence, evidence, polarity and its origin,
task tag, event time, validity). The one documented difference is the contradiction fast path: a
batch annotates only the failures that existed before it, so a failure recorded earlier in the
*same* batch as a success is annotated item by item but not by that batch (a success of a later
batch may annotate it then) — every other annotation must be the same. This guards the bulk path's shortcuts (rows built column-wise, polarity by text
shape, the in-memory views filled in bulk) against the plain construction.
"""
from __future__ import annotations

import random

import pytest
import rawdb

from causalmem import Memory
from causalmem.types import Relation

_DECISIONS = ["restart the cache", "scale the pool", "bump the lib", "drop the index", "retry the job",
              "pin the version", "add a replica", "turn off the flag"]
_OUTCOMES = ["the deploy failed", "latency improved", "tests passed", "nothing happened", "the job timed out",
             "error rate dropped, no crash", "not fixed yet", "the build is green again", "users complained",
             "memory leak fixed", "queue drained"]
_SCOPES = [(None, None, None), ("u1", None, None), ("u1", "a1", None), (None, None, "r1")]
_RELATIONS = ["caused", "caused", "enabled", "prevented", "no_effect", "refines", "similar_to"]


def _item(rng: random.Random, serial: int) -> dict:
    d = rng.choice(_DECISIONS)
    o = rng.choice(_OUTCOMES) if rng.random() < 0.8 else f"outcome {serial} of {d}"
    item = {"decision": d, "outcome": o}
    scope = rng.choice(_SCOPES)
    for key, value in zip(("user_id", "agent_id", "run_id"), scope):
        if value is not None:
            item[key] = value
    if rng.random() < 0.4:
        item["relation"] = rng.choice(_RELATIONS)
    if rng.random() < 0.3:
        item["source"] = rng.choice(["rule", "user", "llm_inferred", "distill"])
    if rng.random() < 0.3:
        item["confidence"] = round(rng.uniform(0.1, 0.95), 3)
    if rng.random() < 0.25:
        item["polarity"] = rng.choice(["positive", "negative", "mixed"])
    if rng.random() < 0.2:
        item["task_tag"] = rng.choice(["t1", "t2"])
    if rng.random() < 0.2:
        item["event_time"] = float(rng.randrange(1_000_000, 2_000_000))
    return item


def _chunks(path) -> list[tuple]:
    con = rawdb.connect(path, read_only=True)
    try:
        rows = con.execute("SELECT text, kind, user_id, agent_id, run_id, session_id, event_time, q_value, importance, "
                           "access_count, metadata, valid_to FROM chunks").fetchall()
    finally:
        con.close()
    return sorted(rows, key=repr)


def _edges(path) -> dict[tuple, tuple]:
    """(src text, dst text, scope, relation, subtype) -> the stored edge's fields, the superseding
    edge named by its own key (ids differ between the two memories)."""
    con = rawdb.connect(path, read_only=True)
    try:
        rows = con.execute(
            "SELECT e.id, s.text, d.text, s.user_id, s.agent_id, s.run_id, e.relation, e.subtype, e.rel_code, "
            "e.confidence, e.source, e.polarity, e.polarity_origin, e.task_tag, e.event_time, e.evidence, "
            "e.valid_to, e.invalid_reason, e.superseded_by FROM edges e JOIN chunks s ON s.nid = e.src "
            "JOIN chunks d ON d.nid = e.dst").fetchall()
    finally:
        con.close()
    key_of = {r[0]: tuple(r[1:8]) for r in rows}
    out = {}
    for r in rows:
        key = tuple(r[1:8])
        assert key not in out, f"two edges for {key}"
        out[key] = (round(r[9], 12),) + tuple(r[8:9]) + tuple(r[10:18]) + (key_of.get(r[18]) if r[18] else None,)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_record_many_stores_what_one_by_one_stores(tmp_path, seed):
    rng = random.Random(seed)
    batches = [[_item(rng, 100 * b + i) for i in range(rng.randrange(1, 70))] for b in range(rng.randrange(2, 5))]
    with Memory(tmp_path / "batch.db", embedder=None) as bulk, Memory(tmp_path / "single.db", embedder=None) as single:
        for batch in batches:
            returned = bulk.record_many(batch)
            assert len(returned) == len(batch)
            for e in returned:  # what record_many returns is what is stored
                assert e == bulk.get_edge(e.id)
            for item in batch:
                single.record_decision(**item)
        # the in-memory views agree with the store: every text is found lexically, in its scope
        for text in {t for b in batches for i in b for t in (i["decision"], i["outcome"])}:
            for mem in (bulk, single):
                assert any(h.text == text for h in mem.search(text, top_k=50, channels=("lexical",),
                                                              reinforce=False, user_id=None)), text
    assert _chunks(tmp_path / "batch.db") == _chunks(tmp_path / "single.db")
    got, want = _edges(tmp_path / "batch.db"), _edges(tmp_path / "single.db")
    assert got.keys() == want.keys()
    batch_of = {}  # edge key -> the batch that created it
    for b, batch in enumerate(batches):
        for item in batch:
            rel = item.get("relation", "caused")
            scope = tuple(item.get(k) for k in ("user_id", "agent_id", "run_id"))
            batch_of.setdefault((item["decision"], item["outcome"], *scope, Relation.parse(rel).value,
                                 Relation.subtype_of(rel)), b)
    for key in want:
        g, w = got[key], want[key]
        assert g[:-1] == w[:-1], (key, g, w)
        if g[-1] != w[-1]:
            # only a failure annotated item by item by a success of its own batch may differ: the
            # batch leaves it to a success of a later batch, if any (the first annotation stays)
            assert w[-1] is not None and batch_of[w[-1]] == batch_of[key], (key, g, w)
            assert g[-1] is None or batch_of[g[-1]] > batch_of[key], (key, g, w)
