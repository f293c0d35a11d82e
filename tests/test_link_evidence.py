"""``Memory.link`` follows SPEC §7 "repeated evidence": linking again what is already linked (same
source chunk, destination chunk, relation and meta kind, in its scope) updates that edge — evidence
+ 1, confidence combined noisy-or and capped, a given polarity replaces the stored one — and returns
it; never a parallel edge that would double the energy spreading between the two chunks. The
projection holds one entry for it and spreads what one edge of the combined confidence spreads.
The async facade and the MCP ``link`` tool go through the same code.

Real stores, no model: these run on SQLite and, in the suite's PostgreSQL pass
(``CAUSALMEM_TEST_BACKEND=postgres``), on PostgreSQL."""
from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from causalmem import Memory
from causalmem.async_memory import AsyncMemory

REPO = Path(__file__).resolve().parents[1]
CAP = 0.99  # SPEC §7: repeated evidence never makes an edge certain
RULE, FEEDBACK = 0.7, 0.95  # default confidences of the sources "rule" and "user_feedback" (SPEC §7)
PLAN = "deploy the release without running the tests"
CRASH = "the checkout service crashed in production"


def _noisy_or(*confs: float) -> float:
    """What independent pieces of evidence say together, capped (computed here, not by causalmem)."""
    miss = 1.0
    for c in confs:
        miss *= 1.0 - c
    return max(*confs, min(CAP, 1.0 - miss))


def _pair(mem: Memory, user_id: str | None = None) -> tuple[str, str]:
    """Two chunks of one scope with no edge between them."""
    a = mem.add_fact("plan", PLAN, user_id=user_id)
    b = mem.add_fact("result", CRASH, user_id=user_id)
    return a.id, b.id


def _between(mem: Memory, a: str, b: str, valid_only: bool = True) -> list:
    return [e for e in mem.edges(a, valid_only=valid_only) if {e.src, e.dst} == {a, b}]


def test_link_twice_updates_one_edge(db_path):
    with Memory(db_path, embedder=None) as mem:
        a, b = _pair(mem)
        first = mem.link(a, b, "caused")
        assert (first.evidence, first.confidence, first.source) == (1, pytest.approx(RULE), "rule")
        again = mem.link(a, b, "caused")
        assert again.id == first.id
        assert again.evidence == 2 and again.confidence == pytest.approx(_noisy_or(RULE, RULE))
        assert _between(mem, a, b) == [again] and mem.get_edge(first.id) == again
        # another source: its confidence adds up, the edge keeps the source it was learned from
        # (its decay); 0.91 with 0.95 is 0.9955, capped
        third = mem.link(a, b, "caused", source="user_feedback")
        assert third.id == first.id and third.evidence == 3 and third.source == "rule"
        assert third.confidence == pytest.approx(CAP) == pytest.approx(_noisy_or(RULE, RULE, FEEDBACK))
        assert mem.link(a, b, "caused", confidence=0.2).confidence == pytest.approx(CAP)  # never lowered
        assert mem.stats()["edges"] == 1


def test_polarity_task_tag_and_what_is_another_edge(db_path):
    with Memory(db_path, embedder=None) as mem:
        a, b = _pair(mem)
        e = mem.link(a, b, "caused", task_tag="release")
        assert (e.polarity, e.polarity_origin) == (None, "unknown")
        neg = mem.link(a, b, "caused", polarity="negative", task_tag="other")
        assert (neg.id, neg.polarity, neg.polarity_origin, neg.task_tag) == (e.id, "negative", "given", "release")
        kept = mem.link(a, b, "caused")  # no polarity given: the stored one stays
        assert (kept.id, kept.polarity, kept.evidence) == (e.id, "negative", 3)
        pos = mem.link(a, b, "caused", polarity="positive")  # the latest given polarity wins
        assert (pos.id, pos.polarity, pos.evidence) == (e.id, "positive", 4)
        # another relation, another meta kind, the other direction: other edges, each repeated once
        others = [("enabled", a, b), ("similar_to", a, b), ("refines", a, b), ("caused", b, a)]
        firsts = [mem.link(s, d, rel) for rel, s, d in others]
        seconds = [mem.link(s, d, rel) for rel, s, d in others]
        assert len({e.id, *(x.id for x in firsts)}) == 5
        assert [x.id for x in seconds] == [x.id for x in firsts] and {x.evidence for x in seconds} == {2}
        assert len(_between(mem, a, b)) == 5


def test_record_decision_and_link_share_the_edge(db_path):
    with Memory(db_path, embedder=None) as mem:
        rec = mem.record_decision(PLAN, CRASH, confidence=0.6, polarity="negative")
        lin = mem.link(rec.src, rec.dst, "caused", confidence=0.5)
        assert lin.id == rec.id and lin.evidence == 2 and lin.confidence == pytest.approx(_noisy_or(0.6, 0.5))
        rec2 = mem.record_decision(PLAN, CRASH, confidence=0.6, polarity="negative")
        assert rec2.id == rec.id and rec2.evidence == 3
        assert rec2.confidence == pytest.approx(_noisy_or(0.6, 0.5, 0.6))
        assert len(_between(mem, rec.src, rec.dst)) == 1


def _energies(mem: Memory) -> dict[str, float]:
    return {a.text: float(a.energy) for a in mem.search_causal(PLAN, limit=10, include_seeds=True)}


def _nids(mem: Memory, *ids: str) -> np.ndarray:
    return np.array([mem._store.nid_of(i) for i in ids], np.int64)


@pytest.mark.parametrize("where", ["overlay", "graph"])
def test_projection_holds_one_entry_and_spreads_one_edge(tmp_path, where):
    """``overlay``: both links after the graph was built (the edge lives in the write overlay);
    ``graph``: the graph is built between the two links (the second sets its weight in the graph)."""
    with Memory(tmp_path / "ref.db", embedder=None) as ref:
        a, b = _pair(ref)
        one = ref.link(a, b, "caused", confidence=_noisy_or(0.6, 0.5))
        expected = _energies(ref)
    assert one.confidence == pytest.approx(0.8)
    assert expected[f"result: {CRASH}"] > 0
    with Memory(tmp_path / "twice.db", embedder=None) as mem:
        a, b = _pair(mem)
        if where == "overlay":
            _energies(mem)
        mem.link(a, b, "caused", confidence=0.6)
        if where == "graph":
            _energies(mem)
        edge = mem.link(a, b, "caused", confidence=0.5)
        assert edge.confidence == pytest.approx(one.confidence)
        proj = mem._projection
        assert not proj.needs_rebuild()  # what follows is the graph/overlay as updated in place
        assert len(proj.links_among(_nids(mem, a, b))) == 1
        got = _energies(mem)
        assert got == pytest.approx(expected, rel=1e-6, abs=1e-9)
        proj.mark_stale()  # a rebuild from the store answers the same
        assert _energies(mem) == pytest.approx(expected, rel=1e-6, abs=1e-9)
        assert len(proj.links_among(_nids(mem, a, b))) == 1


def test_an_invalidated_edge_is_not_reused(db_path):
    with Memory(db_path, embedder=None) as mem:
        a, b = _pair(mem)
        old = mem.link(a, b, "caused", confidence=0.9)
        mem.invalidate(old.id, reason="wrong")
        new = mem.link(a, b, "caused", confidence=0.4)
        assert new.id != old.id and new.valid and (new.evidence, new.confidence) == (1, pytest.approx(0.4))
        gone = mem.get_edge(old.id)
        assert not gone.valid and gone.evidence == 1 and gone.confidence == pytest.approx(0.9)
        again = mem.link(a, b, "caused", confidence=0.4)  # the new edge is the one repeated evidence updates
        assert again.id == new.id and again.evidence == 2
        assert [e.id for e in _between(mem, a, b)] == [new.id]
        assert len(_between(mem, a, b, valid_only=False)) == 2


def test_an_annotated_superseded_edge_is_still_the_edge(db_path):
    """A success annotates the older failure of the same decision (``superseded_by``) but leaves it
    valid: linking that failure again is evidence for it, not a second, unannotated edge."""
    with Memory(db_path, embedder=None) as mem:
        fail = mem.record_decision(PLAN, CRASH, polarity="negative")
        ok = mem.record_decision(PLAN, "the release went out fine", polarity="positive")
        assert mem.get_edge(fail.id).superseded_by == ok.id
        again = mem.link(fail.src, fail.dst, "caused")
        assert again.id == fail.id and again.evidence == 2 and again.superseded_by == ok.id
        assert len(_between(mem, fail.src, fail.dst)) == 1


def test_scopes_stay_walls(db_path):
    with Memory(db_path, embedder=None) as mem:
        alice, bob = _pair(mem, "alice"), _pair(mem, "bob")
        for _ in range(2):
            ea = mem.link(*alice, "caused")
            eb = mem.link(*bob, "caused")
        assert ea.id != eb.id and ea.evidence == eb.evidence == 2  # evidence is counted per scope
        for s, d in ((alice[0], bob[1]), (bob[0], alice[1])):
            with pytest.raises(ValueError, match="different scopes"):
                mem.link(s, d, "caused")
        assert mem.stats(user_id="alice")["edges"] == mem.stats(user_id="bob")["edges"] == 1
        assert mem.stats()["edges"] == 2


def test_two_openers_of_one_store_share_the_edge(db_path, tmp_path):
    """Another ``Memory`` on the same store (another process or host) finds the edge in the store,
    and the first one's graph picks up the new confidence: it spreads one edge, as a fresh open does."""
    with Memory(db_path, embedder=None) as one, Memory(db_path, embedder=None) as two:
        a, b = _pair(one)
        first = one.link(a, b, "caused", confidence=0.6)
        _energies(one)  # one's graph is built with the edge at 0.6
        second = two.link(a, b, "caused", confidence=0.5)
        assert second.id == first.id and second.evidence == 2
        assert second.confidence == pytest.approx(_noisy_or(0.6, 0.5))
        got = _energies(one)
        assert len(one._projection.links_among(_nids(one, a, b))) == 1
    with Memory(tmp_path / "ref.db", embedder=None) as ref:
        ref.link(*_pair(ref), "caused", confidence=_noisy_or(0.6, 0.5))
        assert got == pytest.approx(_energies(ref), rel=1e-6, abs=1e-9)


def test_async_facade_links_through_the_same_code(db_path):
    async def run() -> tuple:
        async with AsyncMemory(db_path, embedder=None) as amem:
            a = await amem.add_fact("plan", PLAN)
            b = await amem.add_fact("result", CRASH)
            first, second = await asyncio.gather(amem.link(a.id, b.id, "caused"), amem.link(a.id, b.id, "caused"))
            third = await amem.link(a.id, b.id, "caused", polarity="negative")
            return a.id, b.id, first, second, third, await amem.edges(a.id)

    a, b, first, second, third, edges = asyncio.run(run())
    assert first.id == second.id == third.id and {first.evidence, second.evidence} == {1, 2}
    assert (third.evidence, third.polarity) == (3, "negative")
    assert third.confidence == pytest.approx(_noisy_or(RULE, RULE, RULE))
    assert [e.id for e in edges] == [third.id]


def test_mcp_link_tool(tmp_path):
    pytest.importorskip("mcp")
    anyio = pytest.importorskip("anyio")
    from mcp import Client, StdioServerParameters, stdio_client

    db = tmp_path / "agent.db"
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": os.environ.get("PATH", ""),
           **{k: v for k, v in os.environ.items() if k.startswith("CAUSALMEM_TEST_")}}  # the PostgreSQL run
    params = StdioServerParameters(command=sys.executable, args=["-m", "causalmem.mcp_server", "--db", str(db),
                                                                 "--no-semantic"], cwd=str(REPO), env=env)

    def data(result):
        assert not result.is_error, result.content
        return json.loads(json.dumps(result.structured_content))

    async def session() -> list:
        out = []
        with anyio.fail_after(120):
            async with Client(stdio_client(params, errlog=sys.stderr), read_timeout_seconds=60) as c:
                a = data(await c.call_tool("add_fact", {"key": "plan", "value": PLAN}))
                b = data(await c.call_tool("add_fact", {"key": "result", "value": CRASH}))
                for args in ({}, {"confidence": 0.5, "polarity": "negative"}):
                    out.append(data(await c.call_tool("link", {"src_chunk_id": a["id"], "dst_chunk_id": b["id"],
                                                               "relation": "enabled", **args})))
                out.append((a["id"], b["id"]))
        return out

    first, second, (a, b) = anyio.run(session)
    assert second["id"] == first["id"] and (first["evidence"], second["evidence"]) == (1, 2)
    assert second["confidence"] == pytest.approx(_noisy_or(RULE, 0.5)) and second["polarity"] == "negative"
    with Memory(db, embedder=None) as mem:  # what the server stored
        assert [e.id for e in _between(mem, a, b)] == [first["id"]]
        assert mem.get_edge(first["id"]).evidence == 2
