"""Scope is a wall.

No learned, linked or consolidated edge joins two scopes; a scoped call never returns another
scope's chunk and never changes another scope's data. A scope is the full
(user_id, agent_id, run_id) triple a chunk was written with.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from causalmem import Memory
import rawdb


def _cross_scope_links(path) -> list[tuple]:
    """Every edge or co-occurrence pair of the file whose two chunks have different scopes."""
    con = rawdb.connect(path, read_only=True)
    try:
        edges = con.execute(
            "SELECT 'edge', e.relation, s.text, d.text FROM edges e JOIN chunks s ON s.nid = e.src "
            "JOIN chunks d ON d.nid = e.dst WHERE s.user_id IS DISTINCT FROM d.user_id OR s.agent_id IS DISTINCT FROM d.agent_id "
            "OR s.run_id IS DISTINCT FROM d.run_id").fetchall()
        co = con.execute(
            "SELECT 'cooccurrence', c.weight, s.text, d.text FROM cooccurrence c JOIN chunks s ON s.nid = c.a "
            "JOIN chunks d ON d.nid = c.b WHERE s.user_id IS DISTINCT FROM d.user_id OR s.agent_id IS DISTINCT FROM d.agent_id "
            "OR s.run_id IS DISTINCT FROM d.run_id").fetchall()
    finally:
        con.close()
    return edges + co


def _scope_data(path, user_id) -> dict:
    """Everything stored about the chunks of users other than ``user_id`` (None = unscoped chunks)."""
    con = rawdb.connect(path, read_only=True)
    try:
        nids = [r[0] for r in con.execute("SELECT nid FROM chunks WHERE user_id IS DISTINCT FROM ?", (user_id,))]
        q = ",".join("?" * len(nids)) or "NULL"
        return {
            "chunks": con.execute(f"SELECT * FROM chunks WHERE nid IN ({q}) ORDER BY nid", nids).fetchall(),
            "edges": con.execute(f"SELECT * FROM edges WHERE src IN ({q}) OR dst IN ({q}) ORDER BY eid",
                                 nids + nids).fetchall(),
            "co": con.execute(f"SELECT * FROM cooccurrence WHERE a IN ({q}) OR b IN ({q}) ORDER BY a, b",
                              nids + nids).fetchall(),
            "facts": con.execute(f"SELECT * FROM facts WHERE nid IN ({q}) ORDER BY fid", nids).fetchall(),
        }
    finally:
        con.close()


def test_link_across_scopes_is_refused(db_path):
    with Memory(db_path, embedder=None) as m:
        a = m.record_decision("rotate the keys", "alice private outcome", user_id="alice")
        b = m.record_decision("rotate the keys", "bob private outcome", user_id="bob")
        g = m.record_decision("rotate the keys", "shared outcome")
        ag = m.record_decision("rotate the keys", "alice agent outcome", user_id="alice", agent_id="bot")
        for src, dst in ((a.src, b.dst), (b.dst, a.src), (a.dst, g.dst), (a.dst, ag.dst)):
            with pytest.raises(ValueError, match="scope"):
                m.link(src, dst, "caused")
        m.link(a.dst, m.record_decision("x", "alice other", user_id="alice").dst, "fact")  # same scope: fine
        assert _cross_scope_links(db_path) == []
        # A's what-if shows none of B's texts
        rep = m.intervention_query("rotate the keys", user_id="alice")
        texts = {t for o in rep.outcomes for t in o.chain_texts}
        assert "bob private outcome" not in texts and "shared outcome" not in texts


def test_unscoped_search_credits_pairs_only_within_a_scope(db_path):
    """The reported leak: an unscoped search (reinforcement on) linked alice's and bob's chunks,
    and alice's scoped search_causal then travelled through bob's private edge."""
    with Memory(db_path, embedder=None) as m:
        m.record_decision("migrate the billing database", "invoices delayed", user_id="alice")
        m.record_decision("billing database vacuum", "bob secret payroll leaked", user_id="bob")
        for _ in range(5):
            hits = m.search("billing database")  # unscoped, reinforce=True by default
            assert {h.user_id for h in hits} == {"alice", "bob"}
    assert _cross_scope_links(db_path) == []
    with Memory(db_path, embedder=None) as m:
        m.sleep()
        assert _cross_scope_links(db_path) == []
        before = [(a.text, a.energy) for a in m.search_causal("migrate the billing database", user_id="alice")]
        assert before and all(a[0] != "bob secret payroll leaked" for a in before)
        # bob's edits do not change alice's answers
        bob = m.record_decision("billing database vacuum", "bob second outcome", user_id="bob")
        m.feedback(bob.src, 1.0)
        m.delete(bob.dst)
        # bob's own search (an unscoped one is everybody's: it may strengthen alice's own pairs,
        # visible at once since learned links no longer wait for a timed rebuild)
        m.search("billing database vacuum", user_id="bob")
        m.flush()
        after = [(a.text, a.energy) for a in m.search_causal("migrate the billing database", user_id="alice")]
        assert after == before


# ---------------------------------------------------------------------------------------------
# Hypothesis: random multi-user workloads

SCOPES = [("u1", None, None), ("u2", None, None), ("u1", "bot", None), (None, None, None)]
WORDS = ["deploy", "friday", "cache", "restart", "crash", "billing", "login", "timeout", "fixed", "slow"]
text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)
scope_ix = st.integers(0, len(SCOPES) - 1)

op = st.one_of(
    st.tuples(st.just("record"), scope_ix, text, text, st.sampled_from(["caused", "prevented", "enabled"])),
    st.tuples(st.just("add"), scope_ix, st.lists(text, min_size=1, max_size=3), st.sampled_from(["s1", "s2"])),
    st.tuples(st.just("search"), st.one_of(st.none(), scope_ix), text),
    st.tuples(st.just("search_causal"), scope_ix, text),
    st.tuples(st.just("link"), scope_ix, st.integers(0, 5), scope_ix, st.integers(0, 5)),
    st.tuples(st.just("feedback"), scope_ix, st.integers(0, 5), st.sampled_from([-1.0, 0.5, 1.0])),
    st.tuples(st.just("sleep"), st.floats(0, 30)),
)


def _filter(ix):
    user, agent, run = SCOPES[ix]
    return {"user_id": user, "agent_id": agent, "run_id": run}


def _in_filter(chunk, flt) -> bool:
    return all(v is None or getattr(chunk, k) == v for k, v in flt.items())


def _chunks_of(m, ix):
    u, a, r = SCOPES[ix]
    return [c for c in m.get_all(limit=1000, user_id=u, agent_id=a, run_id=r)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=14))
def test_no_call_returns_or_changes_another_scopes_data(ops):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scope.db"
        clock_t = [1_700_000_000.0]
        m = Memory(path, embedder=None, clock=lambda: clock_t[0])
        try:
            for o in ops:
                clock_t[0] += 60
                kind = o[0]
                # the user whose call this is: every other user's data must come out unchanged.
                # An unscoped search may reinforce anyone's chunks and sleep is global: for those
                # only the invariant below (no edge or pair across scopes) is checked.
                unscoped_search = kind == "search" and (o[1] is None or SCOPES[o[1]][0] is None)
                m.flush()
                before = None
                if kind not in ("sleep",) and not unscoped_search:
                    owner = SCOPES[o[1]][0]
                    before = _scope_data(path, owner)
                if kind == "record":
                    _, ix, d, out, rel = o
                    if d != out:
                        m.record_decision(d, out, relation=rel, **_filter(ix))
                elif kind == "add":
                    _, ix, turns, session = o
                    m.add(turns, session_id=session, **_filter(ix))
                elif kind == "search":
                    _, ix, q = o
                    flt = {} if ix is None else _filter(ix)
                    for h in m.search(q, top_k=10, **flt):
                        assert _in_filter(h, flt), (h, flt)
                elif kind == "search_causal":
                    _, ix, q = o
                    flt = _filter(ix)
                    for a in m.search_causal(q, limit=20, **flt):
                        assert _in_filter(m.get(a.node_id), flt), (a, flt)
                    rep = m.intervention_query(q, **flt)
                    for out in rep.outcomes:
                        for cid in out.chain:
                            assert _in_filter(m.get(cid), flt)
                elif kind == "link":
                    _, ia, i, ib, j = o
                    ca, cb = _chunks_of(m, ia), _chunks_of(m, ib)
                    if not ca or not cb:
                        continue
                    a, b = ca[i % len(ca)], cb[j % len(cb)]
                    if a.id == b.id:
                        continue
                    if SCOPES[ia] != SCOPES[ib]:
                        with pytest.raises(ValueError):
                            m.link(a.id, b.id, "caused")
                    else:
                        m.link(a.id, b.id, "caused")
                elif kind == "feedback":
                    _, ix, i, r = o
                    cs = _chunks_of(m, ix)
                    if cs:
                        m.feedback(cs[i % len(cs)].id, r)
                elif kind == "sleep":
                    clock_t[0] += o[1] * 86400
                    m.sleep()
                m.flush()
                if before is not None:
                    assert _scope_data(path, owner) == before, f"{kind} in scope of {owner!r} changed others' data"
                assert _cross_scope_links(path) == [], o
        finally:
            m.close()
        assert _cross_scope_links(path) == []
