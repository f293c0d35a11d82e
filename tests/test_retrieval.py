"""Retrieval pipeline (SPEC §4): fusion math, explain, scope isolation, argument checks, freshness."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from causalmem import Memory
from causalmem import retrieval
from causalmem.retrieval import RetrievalParams, hybrid_score, time_decay

LEX = ("lexical",)
LEX_GRAPH = ("lexical", "graph")


@pytest.fixture
def mem(clock):
    m = Memory(":memory:", embedder=None, clock=clock)
    yield m
    m.close()


# ----------------------------------------------------------------------------- fusion math
def test_time_decay_golden_values():
    assert time_decay(0) == pytest.approx(1.0)
    assert time_decay(30) == pytest.approx(0.8451, abs=1e-4)
    assert time_decay(-5) == pytest.approx(1.0)  # future timestamps count as new
    assert 0.8 < time_decay(1e6) < time_decay(365) < time_decay(30) < time_decay(1)


def test_hybrid_score_formula():
    p = RetrievalParams()
    # all signals saturated, brand new -> 1.0
    assert hybrid_score(2.0, 1.0, 1.0, 10.0, 0.0, p) == pytest.approx(1.0)
    # hand computation with the lexical channel on (delta = 0.18)
    g, v, lx, imp, days = 1.0, 0.5, 0.25, 5.0, 30.0
    num = 0.6 * 0.5 + 0.3 * 0.5 + 0.18 * 0.25 + 0.1 * 0.5
    expected = num / (0.6 + 0.3 + 0.18 + 0.1) * (0.8 + 0.2 / (1 + math.log(1 + 30)))
    assert hybrid_score(g, v, lx, imp, days, p) == pytest.approx(expected)
    # lexical channel off: delta leaves the denominator
    num_off = 0.6 * 0.5 + 0.3 * 0.5 + 0.1 * 0.5
    assert hybrid_score(g, v, None, imp, 0.0, p) == pytest.approx(num_off / 1.0)
    # clamps: graph/2 and cosine above 1, negatives to 0
    assert hybrid_score(10.0, 3.0, 5.0, 50.0, 0.0, p) == pytest.approx(1.0)
    assert hybrid_score(-1.0, -1.0, -1.0, -1.0, 0.0, p) == pytest.approx(0.0)


def test_hybrid_vectorised_matches_scalar():
    class T:
        importance = np.array([0, 5.0, 10.0, 2.0], np.float32)
        created_at = np.array([0, 0.0, -86400.0 * 30, -86400.0 * 400])

    nids = np.array([1, 2, 3])
    lex = {1: 0.3, 2: 1.0}
    cos = {1: 0.9, 3: 0.2}
    act = {2: 1.5, 3: -0.4}
    got = retrieval._hybrid(nids, lex, cos, act, T, 0.0, retrieval.PARAMS)
    for j, n in enumerate(nids.tolist()):
        days = -T.created_at[n] / 86400.0
        want = hybrid_score(act.get(n, 0.0), cos.get(n, 0.0), lex.get(n, 0.0), float(T.importance[n]), days)
        assert got[j] == pytest.approx(want)


def test_rrf_values():
    nids = np.array([10, 11, 12])
    lex_rank = {10: 0, 11: 1}
    vec_rank = {11: 0, 12: 4}
    act = {12: 0.5, 10: 0.9, 11: -0.2}  # negative activation does not count as a graph rank
    got = retrieval._rrf(nids, lex_rank, vec_rank, act, 60)
    assert got[0] == pytest.approx(1 / 61 + 1 / 61)          # lexical #1, graph #1
    assert got[1] == pytest.approx(1 / 62 + 1 / 61)          # lexical #2, semantic #1
    assert got[2] == pytest.approx(1 / 65 + 1 / 62)          # semantic #5, graph #2


def test_fusions_all_run_and_rank_the_match_first(mem):
    mem.add(["the cat sat on the mat", "dogs bark at night", "a cat and a dog"], user_id="u", session_id="s")
    for fusion in ("auto", "rrf", "hybrid", "blend"):
        hits = mem.search("cat mat", user_id="u", fusion=fusion, reinforce=False)
        assert hits and hits[0].text == "the cat sat on the mat", fusion


# ----------------------------------------------------------------------------- arguments
@pytest.mark.parametrize("q", ["", "   ", "\n\t"])
def test_blank_query_returns_empty(mem, q):
    mem.add("something", user_id="u")
    assert mem.search(q) == []


@pytest.mark.parametrize("k", [0, -1, 10**9])
def test_bad_top_k(mem, k):
    with pytest.raises(ValueError, match="top_k"):
        mem.search("x", top_k=k)


def test_top_k_type(mem):
    with pytest.raises(TypeError, match="top_k"):
        mem.search("x", top_k=2.5)
    with pytest.raises(TypeError, match="top_k"):
        mem.search("x", top_k=True)


def test_unknown_channel_and_fusion(mem):
    with pytest.raises(ValueError, match="channels"):
        mem.search("x", channels=("lexical", "telepathy"))
    with pytest.raises(ValueError, match="channels"):
        mem.search("x", channels=())
    with pytest.raises(ValueError, match="fusion"):
        mem.search("x", fusion="magic")


def test_query_type(mem):
    with pytest.raises(TypeError, match="query"):
        mem.search(None)


# ----------------------------------------------------------------------------- freshness
def test_new_memory_found_by_next_query(devops):
    devops.search("production crash", reinforce=True)  # builds every index
    assert not any("kubernetes" in h.text for h in devops.search("kubernetes upgrade"))
    devops.add("kubernetes upgrade broke the ingress", user_id=None)
    hits = devops.search("kubernetes upgrade")
    assert hits and hits[0].text == "kubernetes upgrade broke the ingress"
    devops.record_decision("pin the helm chart", "stable kubernetes deploys")
    assert any(h.text == "pin the helm chart" for h in devops.search("helm chart"))


def test_deleted_memory_never_returned(devops):
    target = next(h for h in devops.search("production crash", reinforce=False) if h.text == "production crash")
    devops.delete(target.id)
    for fusion in ("auto", "rrf", "hybrid"):
        for q in ("production crash", "deploy without tests", "user complaints", "rollback needed"):
            hits = devops.search(q, top_k=50, fusion=fusion, reinforce=False)
            assert target.id not in {h.id for h in hits}


def test_superseded_chunk_demoted_and_flagged(mem):
    old = mem.add("the deploy key is stored in vault path alpha", user_id="u")[0]
    new = mem.add("the deploy key is stored in vault path bravo", user_id="u")[0]
    before = mem.search("deploy key vault path", user_id="u", channels=LEX, reinforce=False)
    assert before[0].id == old.id  # lower nid wins the tie before supersession
    mem.link(new.id, old.id, "invalidates")
    hits = mem.search("deploy key vault path", user_id="u", channels=LEX, reinforce=False)
    assert [h.id for h in hits][:2] == [new.id, old.id]
    flagged = {h.id: h.superseded_by for h in hits}
    assert flagged[old.id] == new.id and flagged[new.id] is None
    assert hits[1].score < hits[0].score


# ----------------------------------------------------------------------------- explain
def test_explain_signals_and_graph_path(devops):
    hits = devops.search("skip code review", channels=LEX_GRAPH, explain=True, reinforce=False)
    by_text = {h.text: h for h in hits}
    seed = by_text["skip code review"]
    s = seed.signals
    for key in ("fusion", "lexical_rank", "lexical_score", "cosine_rank", "cosine", "activation", "seed_energy",
                "q_value", "importance", "path", "superseded_by"):
        assert key in s
    assert s["lexical_rank"] == 0 and s["lexical_score"] > 0 and s["seed_energy"] > 0
    assert s["cosine"] is None and s["fusion"] == "blend"
    # "hidden bugs" shares no word with the query: only the graph (skip code review -caused-> hidden bugs)
    assert "hidden bugs" in by_text
    g = by_text["hidden bugs"].signals
    assert g["lexical_rank"] is None and g["activation"] > 0
    assert any(e["relation"] == "caused" and e["from"] == seed.id and e["to"] == by_text["hidden bugs"].id
               for e in g["path"])


def test_explain_off_has_no_signals(devops):
    assert all(h.signals is None for h in devops.search("production crash", reinforce=False))


def test_graph_channel_adds_next_turn(mem):
    mem.add([{"speaker": "A", "text": "where did you go on holiday this summer?"},
             {"speaker": "B", "text": "we went to Lisbon and ate pasteis de nata"},
             {"speaker": "A", "text": "unrelated chatter about football"}], user_id="u", session_id="1")
    mem.add(["filler one about taxes", "filler two about gardening"], user_id="u", session_id="2")
    lex = [h.text for h in mem.search("holiday this summer", user_id="u", channels=LEX, reinforce=False)]
    full = [h.text for h in mem.search("holiday this summer", user_id="u", channels=LEX_GRAPH, reinforce=False)]
    assert not any("Lisbon" in t for t in lex)
    assert full[1] == "B: we went to Lisbon and ate pasteis de nata"


# ----------------------------------------------------------------------------- scope isolation
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_scope_isolation_even_with_cross_user_links(data):
    words = ["alpha", "beta", "gamma", "delta", "deploy", "crash", "cache", "tests"]
    users = ["a", "b", "c"]
    text = st.lists(st.sampled_from(words), min_size=1, max_size=4).map(" ".join)
    items = data.draw(st.lists(st.tuples(st.sampled_from(users), text), min_size=2, max_size=14))
    with Memory(":memory:", embedder=None) as mem:
        owner = {}
        for i, (u, t) in enumerate(items):
            c = mem.add(f"{t} #{i}", user_id=u, session_id=f"{u}-{i % 3}")[0]
            owner[c.id] = u
        ids = list(owner)
        links = data.draw(st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids),
                                             st.sampled_from(["caused", "enabled", "fact", "co_occurrence",
                                                              "similar_to", "prevented"])), max_size=12))
        for s_, d_, rel in links:
            if s_ == d_:
                continue
            if owner[s_] != owner[d_]:  # scope is a wall: a cross-user link is refused
                with pytest.raises(ValueError, match="scope"):
                    mem.link(s_, d_, rel)
            else:
                mem.link(s_, d_, rel)
        queries = data.draw(st.lists(text, min_size=1, max_size=4))
        for q in queries:
            for user in users:
                for fusion in ("auto", "rrf", "hybrid"):
                    for hit in mem.search(q, user_id=user, top_k=20, fusion=fusion):
                        assert owner[hit.id] == user
                        assert hit.user_id == user


# ----------------------------------------------------------------------------- multilingual
def test_chinese_query_finds_chinese_memory(mem):
    mem.add(["生产环境宕机", "测试环境一切正常", "今天天气很好"], user_id="u")
    hits = mem.search("生产环境宕机了怎么办", user_id="u", reinforce=False)
    assert hits and hits[0].text == "生产环境宕机"


# ----------------------------------------------------------------------------- semantic (real model)
def test_semantic_channel_with_packaged_model(embedder, clock):
    with Memory(":memory:", embedder=embedder, clock=clock) as mem:
        mem.add(["The database server ran out of disk space overnight.",
                 "We adopted a puppy named Biscuit.",
                 "My favourite food is spicy ramen."], user_id="u", session_id="s")
        mem.flush()  # vectors are computed in the background
        hits = mem.search("storage full on the DB machine", user_id="u", channels=("semantic",), explain=True,
                          reinforce=False)
        assert hits[0].text == "The database server ran out of disk space overnight."
        assert hits[0].signals["cosine"] > hits[1].signals["cosine"]
        # the default pipeline finds it too although no word is shared
        assert mem.search("storage full on the DB machine", user_id="u")[0].text.startswith("The database")
        # a dog question lands on the puppy
        assert "puppy" in mem.search("dog", user_id="u", reinforce=False)[0].text


def test_preventer_surfaces_as_warning(devops):
    hits = devops.search("sql injection", channels=LEX_GRAPH, explain=True, reinforce=False)
    by_text = {h.text: h for h in hits}
    assert "add input validation" in by_text
    sig = by_text["add input validation"].signals
    assert sig["activation"] < 0 and sig["lexical_rank"] is None
    assert any(e["relation"] == "prevented" for e in sig["path"])


def test_config_rrf_k_is_honoured(clock):
    from causalmem import Config

    with Memory(":memory:", embedder=None, clock=clock, config=Config(rrf_k=1)) as mem:
        mem.add(["alpha beta", "alpha", "gamma"], user_id="u")
        hits = mem.search("alpha beta", user_id="u", channels=LEX, fusion="rrf", reinforce=False)
        assert hits[0].score == pytest.approx(1 / 2)  # 1 / (k + rank 1) with k = 1


def test_second_pass_lifts_what_shares_words_with_the_first_hits(mem):
    """Pseudo-relevance feedback: the rare words of the best hits query BM25 again, so of two
    equally weak matches the one that shares them with the best hit ranks first; without the
    pass the tie goes to the lower id. Nothing that matched no channel is brought in. (The pass runs
    only when the scope has more matches than the candidate depth: the 60 longer "trip" texts.)"""
    from dataclasses import replace

    first = mem.add("we booked the cabin near lake tahoe for the kayaking trip", user_id="u")[0]
    decoy = mem.add("trip notes dentist visit boring", user_id="u")[0]
    other = mem.add("trip notes tahoe kayaking freezing", user_id="u")[0]
    unrelated = mem.add("tahoe kayaking rental prices", user_id="u")[0]
    for i in range(60):
        mem.add(f"trip log entry {i} written down later with plenty of other words", user_id="u")
    q = "where was the cabin booked for the trip"
    best_only = replace(retrieval.PARAMS, prf_docs=1)  # feedback from the best hit alone, as in a big store
    with_pass = [h.id for h in retrieval.search(mem._views, q, user_id="u", channels=LEX, reinforce=False,
                                                params=best_only)]
    assert with_pass[:3] == [first.id, other.id, decoy.id]
    assert unrelated.id not in with_pass  # shares no query word: not brought in
    off = replace(retrieval.PARAMS, prf_terms=0)
    without = [h.id for h in retrieval.search(mem._views, q, user_id="u", channels=LEX, reinforce=False, params=off)]
    assert without[:3] == [first.id, decoy.id, other.id]
    assert unrelated.id not in without
