"""``record_many`` stores exactly what recording the same items one by one stores.

Random batches (texts drawn from a small pool, so texts are reused within and across batches and
pairs repeat; scopes, relations, sources, confidences, given polarities, task tags and event times
mixed) go into one memory through ``record_many`` and into another through ``record_decision`` per
item. Every stored row must agree: the chunks (text, kind, scope, times, Q, importance, metadata)
and the edges (both ends' texts, relation, subtype, confidence, evidence, polarity and its origin,
task tag, event time, validity, and which edge supersedes it). The contradiction fast path
included: a new success annotates the failures of its decision *as they stand at its position in
the batch* (a failure recorded earlier in the same batch is annotated; one that only becomes a
failure later in the batch is not), exactly as item by item. This guards the bulk path's shortcuts
(rows built column-wise, polarity by text shape, the in-memory views filled in bulk, one
annotation pass per batch) against the plain construction. The named tests below pin the
supersession cases one at a time.
"""
from __future__ import annotations

import random

import pytest
import rawdb

from causalmem import Memory

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
                           "access_count, metadata, valid_to IS NULL FROM chunks").fetchall()
    finally:
        con.close()
    return sorted(rows, key=repr)


def _edges(path) -> dict[tuple, tuple]:
    """(src text, dst text, scope, relation, subtype, n) -> the stored edge's fields (n: its rank among
    the edges with those, by age), the superseding edge named by its own key (ids differ between
    the two memories)."""
    con = rawdb.connect(path, read_only=True)
    try:
        rows = con.execute(
            "SELECT e.id, s.text, d.text, s.user_id, s.agent_id, s.run_id, e.relation, e.subtype, e.rel_code, "
            "e.confidence, e.source, e.polarity, e.polarity_origin, e.task_tag, e.event_time, e.evidence, "
            "e.valid_to IS NULL, e.invalid_reason, e.superseded_by FROM edges e JOIN chunks s ON s.nid = e.src "
            "JOIN chunks d ON d.nid = e.dst ORDER BY e.eid").fetchall()
    finally:
        con.close()
    key_of: dict[str, tuple] = {}
    seen: dict[tuple, int] = {}
    for r in rows:
        base = tuple(r[1:8])
        key_of[r[0]] = base + (seen.get(base, 0),)
        seen[base] = seen.get(base, 0) + 1
    return {key_of[r[0]]: (round(r[9], 12),) + tuple(r[8:9]) + tuple(r[10:18]) + (key_of.get(r[18]) if r[18] else None,)
            for r in rows}


def _run_both(tmp_path, batches: list[list], search: bool = True) -> tuple[dict, dict]:
    with Memory(tmp_path / "batch.db", embedder=None) as bulk, Memory(tmp_path / "single.db", embedder=None) as single:
        for batch in batches:
            returned = bulk.record_many(batch)
            assert len(returned) == len(batch)
            for e in returned:  # what record_many returns is what is stored (its annotation too)
                assert e == bulk.get_edge(e.id)
            for item in batch:
                single.record_decision(**item)
        # the in-memory views agree with the store: every text is found lexically, in its scope
        for text in {t for b in batches for i in b for t in (i["decision"], i["outcome"])} if search else ():
            for mem in (bulk, single):
                assert any(h.text == text for h in mem.search(text, top_k=50, channels=("lexical",),
                                                              reinforce=False, user_id=None)), text
        # and the graph projections: the same spread from every decision (same ids, same order)
        for d in {i["decision"] for b in batches for i in b} if search else ():
            spread = [[(a.text, round(a.energy, 9), a.superseded_by is not None)
                       for a in mem.search_causal(d, limit=10, user_id=None)] for mem in (bulk, single)]
            assert spread[0] == spread[1], d
    assert _chunks(tmp_path / "batch.db") == _chunks(tmp_path / "single.db")
    return _edges(tmp_path / "batch.db"), _edges(tmp_path / "single.db")


@pytest.mark.parametrize("seed", range(256))
def test_record_many_stores_what_one_by_one_stores(tmp_path, seed):
    rng = random.Random(seed)
    batches = [[_item(rng, 100 * b + i) for i in range(rng.randrange(1, 70))] for b in range(rng.randrange(2, 5))]
    got, want = _run_both(tmp_path, batches, search=seed % 4 == 0)  # the searches: a quarter of the seeds
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == want[key], key


# -- the contradiction fast path, case by case (each failed before record_many followed batch order)
_D = "restart the cache"
_KEY = (None, None, None, "caused", None, 0)


def _sup(edges: dict, outcome: str) -> tuple | None:
    """The key of the edge that supersedes ``_D -> outcome`` (None: not annotated)."""
    return edges[(_D, outcome, *_KEY)][-1]


def _success(o: str) -> dict:
    return {"decision": _D, "outcome": o, "polarity": "positive"}


def _failure(o: str) -> dict:
    return {"decision": _D, "outcome": o, "polarity": "negative"}


def test_a_failure_re_recorded_after_a_success_of_its_batch_is_not_superseded_by_it(tmp_path):
    # W1 (a): the pair was a success when "latency improved" arrived, a failure only after it
    got, want = _run_both(tmp_path, [[_success("memory leak fixed")],
                                     [_success("latency improved"), _failure("memory leak fixed")]])
    assert _sup(want, "memory leak fixed") is None
    assert got == want


def test_a_success_after_a_new_failure_of_its_batch_annotates_it(tmp_path):
    # W1 (b): the failure is new in the same batch, before the success
    got, want = _run_both(tmp_path, [[_failure("the deploy failed"), _success("tests passed")]])
    assert _sup(want, "the deploy failed") == (_D, "tests passed", *_KEY)
    assert got == want
    with Memory(tmp_path / "again.db", embedder=None) as mem:  # and the edge record_many returns says so
        fail, ok = mem.record_many([_failure("the deploy failed"), _success("tests passed")])
        assert fail.superseded_by == ok.id and mem.get_edge(fail.id).superseded_by == ok.id
        assert ok.superseded_by is None


def test_a_success_before_a_new_failure_of_its_batch_does_not_annotate_it(tmp_path):
    got, want = _run_both(tmp_path, [[_success("tests passed"), _failure("the deploy failed")]])
    assert _sup(want, "the deploy failed") is None
    assert got == want


def test_a_stored_failure_re_recorded_as_a_success_after_the_batch_success_is_annotated_by_it(tmp_path):
    # negative when "tests passed" arrived, positive by the end of the batch: annotated, as one by one
    got, want = _run_both(tmp_path, [[_failure("the deploy failed")],
                                     [_success("tests passed"), _success("the deploy failed")]])
    assert _sup(want, "the deploy failed") == (_D, "tests passed", *_KEY)
    assert got == want


def test_a_stored_success_turned_failure_before_the_batch_success_is_annotated(tmp_path):
    got, want = _run_both(tmp_path, [[_success("the deploy failed")],
                                     [_failure("the deploy failed"), _success("tests passed")]])
    assert _sup(want, "the deploy failed") == (_D, "tests passed", *_KEY)
    assert got == want


def test_the_first_success_at_which_an_edge_is_a_failure_annotates_it(tmp_path):
    # two successes in one batch: the failure exists only from between them on
    got, want = _run_both(tmp_path, [[_success("tests passed"), _failure("the deploy failed"),
                                      _success("latency improved"), _success("queue drained")]])
    assert _sup(want, "the deploy failed") == (_D, "latency improved", *_KEY)
    assert _sup(want, "tests passed") is None
    assert got == want


def test_a_success_re_recorded_as_a_failure_in_its_batch_is_annotated_by_a_later_success(tmp_path):
    got, want = _run_both(tmp_path, [[_success("tests passed"), _failure("tests passed"), _success("queue drained")]])
    assert _sup(want, "tests passed") == (_D, "queue drained", *_KEY)
    assert got == want


def test_one_decision_with_many_successes_and_failures_in_one_batch(tmp_path):
    # dense: every success meets failures stored before, new in the batch, re-recorded either way,
    # and a failure to its own outcome under the other excitatory relation (never annotated by it)
    rng = random.Random(7)

    def item() -> dict:
        it = {"decision": _D, "outcome": f"outcome {rng.randrange(40)}", "relation": rng.choice(["caused", "enabled"])}
        pol = rng.choice(["positive", "negative", "positive", "negative", "mixed", None])
        if pol is not None:
            it["polarity"] = pol
        return it

    batches = [[item() for _ in range(60)], [item() for _ in range(400)], [item() for _ in range(200)]]
    got, want = _run_both(tmp_path, batches, search=False)
    assert sum(v[-1] is not None for v in want.values()) > 10  # many annotations, all alike
    assert got == want


# -- batches with other writes between them (the same on both memories, addressed by content)
def _chunk_id(path, text: str, scope: tuple) -> str | None:
    con = rawdb.connect(path, read_only=True)
    try:
        row = con.execute("SELECT id FROM chunks WHERE text = ? AND user_id IS NOT DISTINCT FROM ? AND "
                          "agent_id IS NOT DISTINCT FROM ? AND run_id IS NOT DISTINCT FROM ? AND valid_to IS NULL",
                          (text, *scope)).fetchone()
    finally:
        con.close()
    return row[0] if row else None


def _edge_id(path, key: tuple) -> str:
    """The id of the edge ``_edges`` names ``key``."""
    con = rawdb.connect(path, read_only=True)
    try:
        rows = con.execute(
            "SELECT e.id FROM edges e JOIN chunks s ON s.nid = e.src JOIN chunks d ON d.nid = e.dst WHERE s.text = ? "
            "AND d.text = ? AND s.user_id IS NOT DISTINCT FROM ? AND s.agent_id IS NOT DISTINCT FROM ? AND "
            "s.run_id IS NOT DISTINCT FROM ? AND e.relation = ? AND e.subtype IS NOT DISTINCT FROM ? ORDER BY e.eid",
            key[:7]).fetchall()
    finally:
        con.close()
    return rows[key[7]][0]


def _live(path) -> list[tuple]:
    con = rawdb.connect(path, read_only=True)
    try:
        return sorted(con.execute("SELECT text, user_id, agent_id, run_id FROM chunks WHERE valid_to IS NULL"
                                  ).fetchall(), key=repr)
    finally:
        con.close()


def _operate(rng: random.Random, mems: dict, serial: int) -> None:
    """One random write other than record_*, done alike on both memories (or refused alike)."""
    path = next(iter(mems))
    edges = _edges(path)
    live = _live(path)
    op = rng.choice(["invalidate", "restore", "delete", "link", "link", "feedback", "update"])
    calls = {}
    # an edge to invalidate: a valid one; to restore: one invalidated or superseded (valid flag, superseding key)
    keys = sorted((k for k, v in edges.items() if v[8] == (op == "invalidate") or (op == "restore" and v[-1])), key=repr)
    if op in ("invalidate", "restore") and keys:
        key = rng.choice(keys)
        calls = {p: (lambda m, e=_edge_id(p, key): getattr(m, op)(e)) for p in mems}
    elif op in ("delete", "feedback", "update") and live:
        text, *scope = rng.choice(live)
        ids = {p: _chunk_id(p, text, tuple(scope)) for p in mems}
        if op == "delete":
            calls = {p: (lambda m, c=ids[p]: m.delete(c)) for p in mems}
        elif op == "feedback":
            reward = rng.choice([-1.0, 0.5, 1.0])
            calls = {p: (lambda m, c=ids[p]: m.feedback(c, reward)) for p in mems}
        else:
            new = rng.choice(_DECISIONS + _OUTCOMES + [f"renamed {serial}"])
            calls = {p: (lambda m, c=ids[p]: m.update(c, new)) for p in mems}
    elif op == "link" and len(live) > 1:
        a, b = rng.sample(live, 2)
        if a[1:] != b[1:]:
            b = next((c for c in live if c[1:] == a[1:] and c != a), None)
        if b is not None:
            rel = rng.choice(["caused", "enabled", "prevented", "refines"])
            pol = rng.choice(["positive", "negative", None])
            calls = {p: (lambda m, x=_chunk_id(p, a[0], a[1:]), y=_chunk_id(p, b[0], b[1:]):
                         m.link(x, y, rel, polarity=pol)) for p in mems}
    outcome = set()
    for p, call in calls.items():
        try:
            call(mems[p])
            outcome.add("ok")
        except ValueError as exc:  # e.g. restoring an edge whose chunk was deleted: refused alike
            outcome.add(type(exc).__name__ + str(exc).split("'")[0])
    assert len(outcome) <= 1, (op, outcome)


@pytest.mark.parametrize("seed", range(64))
def test_record_many_matches_one_by_one_with_other_writes_between_batches(tmp_path, seed):
    rng = random.Random(10_000 + seed)
    with Memory(tmp_path / "batch.db", embedder=None) as bulk, Memory(tmp_path / "single.db", embedder=None) as single:
        mems = {tmp_path / "batch.db": bulk, tmp_path / "single.db": single}
        for b in range(rng.randrange(3, 7)):
            batch = [_item(rng, 100 * b + i) for i in range(rng.randrange(1, 50))]
            for it in batch:  # chains: an outcome recorded as a decision, a decision as an outcome
                if rng.random() < 0.15:
                    it["outcome"] = rng.choice([d for d in _DECISIONS if d != it["decision"]])
                elif rng.random() < 0.1:
                    it["decision"] = rng.choice([o for o in _OUTCOMES if o != it["outcome"]])
            for e in bulk.record_many(batch):
                assert e == bulk.get_edge(e.id)
            for it in batch:
                single.record_decision(**it)
            for k in range(rng.randrange(0, 6)):
                _operate(rng, mems, 100 * b + k)
        live = _live(tmp_path / "batch.db")
        assert live == _live(tmp_path / "single.db")
        for text, *scope in live[:: max(1, len(live) // 12)]:  # the in-memory views: a sample of the texts
            for mem in (bulk, single):
                assert any(h.text == text for h in mem.search(text, top_k=50, channels=("lexical",), reinforce=False,
                                                              user_id=None)), text
        for d in _DECISIONS:  # the graph projections after the invalidations, restores and deletes
            spread = [[(a.text, round(a.energy, 9), a.superseded_by is not None)
                       for a in mem.search_causal(d, limit=10, user_id=None)] for mem in (bulk, single)]
            assert spread[0] == spread[1], d
    assert _chunks(tmp_path / "batch.db") == _chunks(tmp_path / "single.db")
    got, want = _edges(tmp_path / "batch.db"), _edges(tmp_path / "single.db")
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == want[key], key


def test_a_batch_over_more_decisions_than_one_store_query_takes(tmp_path):
    # the store reads the batch's decisions' edges in chunks of a few hundred ids: 640-odd decisions,
    # pairs stored before and re-recorded, successes and failures across the chunk boundaries
    rng = random.Random(3)

    def item(i: int) -> dict:
        it = _item(rng, i)
        it["decision"] = f"decision {rng.randrange(800)}"
        if rng.random() < 0.7:
            it["outcome"] = rng.choice(_OUTCOMES)
        return it

    got, want = _run_both(tmp_path, [[item(i) for i in range(400)], [item(1000 + i) for i in range(900)]], search=False)
    assert len({k[0] for k in want}) > 500 and sum(v[-1] is not None for v in want.values()) > 5
    assert got == want
