"""Learned links that only re-rank (``Config.hebbian_rerank``) and credit only for close pairs
(``Config.hebbian_min_cosine``). Mechanisms, not figures: a learned link never
brings in a chunk the query did not find; it re-ranks the ones it did, at once (no write, no
timer) and as the store holds it after the write; scopes stay apart; a projection file saved under
the other rule is not adopted; far pairs get no credit."""
from __future__ import annotations

import numpy as np
import pytest

from causalmem import Memory, learning
from causalmem.config import Config

LEX_GRAPH = ("lexical", "graph")
RERANK = Config(hebbian_search=True, hebbian_same_session=False, hebbian_rerank=True)


def _nid(m: Memory, chunk_id: str) -> int:
    return m._store.nid_of(chunk_id)


def _hits(m: Memory, query: str, **scope) -> dict[str, tuple[int, float | None, float]]:
    """id -> (rank, graph activation, score) for ``query`` (no reinforcement)."""
    got = m.search(query, top_k=10, channels=LEX_GRAPH, explain=True, reinforce=False, **scope)
    return {h.id: (k, h.signals["activation"], h.score) for k, h in enumerate(got)}


def _stored_weight(m: Memory, x: str, y: str) -> float | None:
    a, b = sorted((_nid(m, x), _nid(m, y)))
    row = m._store.cooccurrence_row(a, b)
    return None if row is None else row[2]


def _kafka(m: Memory) -> tuple[str, str, str]:
    a = m.add("alpha release of the kafka consumer", user_id="u")[0].id
    b = m.add("beta rollout of the kafka consumer", user_id="u")[0].id
    c = m.add("gamma rollout of the kafka consumer", user_id="u")[0].id
    return a, b, c


@pytest.mark.parametrize("rerank", [False, True])
def test_a_learned_link_brings_in_a_chunk_only_when_it_is_a_graph_edge(db_path, clock, rerank):
    """The contrast that shows the rule: "alpha release" does not find b by its words. As a graph edge
    (the default) the learned link a-b pulls b in; under re-ranking it does not."""
    cfg = Config(hebbian_search=True, hebbian_same_session=False, hebbian_rerank=rerank)
    with Memory(db_path, embedder=None, clock=clock, config=cfg) as m:
        a, b, _c = _kafka(m)
        assert b not in _hits(m, "alpha release", user_id="u")
        assert {h.id for h in m.search("alpha beta", top_k=2, user_id="u")} == {a, b}  # learns a-b
        assert (b in _hits(m, "alpha release", user_id="u")) is (not rerank)
        m.flush()
        m._projection.mark_stale()
        assert (b in _hits(m, "alpha release", user_id="u")) is (not rerank)


def test_a_learned_link_reranks_a_found_candidate_at_once_and_as_stored(db_path, clock):
    """b and c match "alpha kafka rollout" alike (the same words, so the same score); after a search
    links a with c, c gains energy from the seed a and climbs above b for the next query, without a
    write; the store, once written, gives the same scores."""
    with Memory(db_path, embedder=None, clock=clock, config=RERANK) as m:
        a, b, c = _kafka(m)
        before = _hits(m, "alpha kafka rollout", user_id="u")
        assert before[b][1] is None and before[c][1] is None  # no edge: no graph energy
        assert before[b][2] == pytest.approx(before[c][2])  # the same words
        assert {h.id for h in m.search("alpha gamma", top_k=2, user_id="u")} == {a, c}  # learns a-c
        assert _stored_weight(m, a, c) is None  # queued only
        after = _hits(m, "alpha kafka rollout", user_id="u")
        assert after[c][1] is not None and after[c][1] > 0  # c receives from the seed a over the link
        assert after[b][1] is None  # b does not
        assert after[c][0] < after[b][0] and after[c][2] > after[b][2]
        m.flush()
        assert _stored_weight(m, a, c) == pytest.approx(m.config.hebbian_start)
        m._projection.mark_stale()
        stored = _hits(m, "alpha kafka rollout", user_id="u")
        assert stored[c][2] == pytest.approx(after[c][2], rel=1e-6)
        assert stored[c][1] == pytest.approx(after[c][1], rel=1e-6)


def test_reranking_credit_is_bounded(db_path, clock):
    """A link credited many times stops at the cap in the store, and the energy it adds to a
    candidate never exceeds the graph cap (the best seed's energy)."""
    with Memory(db_path, embedder=None, clock=clock, config=RERANK) as m:
        a, b, c = _kafka(m)
        for _ in range(40):
            m.search("alpha gamma", top_k=2, user_id="u")
        m.flush()
        assert _stored_weight(m, a, c) == pytest.approx(m.config.hebbian_cap)
        got = _hits(m, "alpha kafka rollout", user_id="u")
        best_seed = max(s for _k, _act, s in got.values())
        assert 0 < got[c][1] <= best_seed


def test_reranking_links_never_cross_a_scope(db_path, clock):
    with Memory(db_path, embedder=None, clock=clock, config=RERANK) as m:
        alice = m.add("quarterly billing export for alice", user_id="alice")[0].id
        bob = m.add("quarterly billing export secret of bob", user_id="bob")[0].id
        m.add("alice renewed the billing contract", user_id="alice")
        for _ in range(5):  # unscoped: both users' chunks come back together, and are not linked
            assert {h.user_id for h in m.search("quarterly billing export")} == {"alice", "bob"}
        assert all(_nid(m, bob) not in pair for pair in m._views.reinforcement.pending_co)
        m.flush()
        assert _stored_weight(m, alice, bob) is None
        assert bob not in _hits(m, "quarterly billing export", user_id="alice")


def test_a_projection_file_of_the_other_rule_is_not_adopted(db_path, clock):
    """A graph saved with learned links as edges, opened with re-ranking, would keep pulling in
    linked chunks: the file says which rule built it and the other rule rebuilds."""
    with Memory(db_path, embedder=None, clock=clock,
                config=Config(hebbian_search=True, hebbian_same_session=False)) as m:
        a, b, _c = _kafka(m)
        m.search("alpha beta", top_k=2, user_id="u")
        assert b in _hits(m, "alpha release", user_id="u")
    with Memory(db_path, embedder=None, clock=clock, config=RERANK) as m:
        assert _stored_weight(m, a, b) is not None
        assert b not in _hits(m, "alpha release", user_id="u")
    with Memory(db_path, embedder=None, clock=clock,
                config=Config(hebbian_search=True, hebbian_same_session=False)) as m:
        assert b in _hits(m, "alpha release", user_id="u")


def test_learned_bonus_formula():
    cand = np.array([5, 7, 9], dtype=np.int64)
    pairs = {(1, 7): 0.5, (5, 9): 0.2, (2, 3): 1.0, (1, 9): 0.0}
    seeds = {1: 2.0, 5: 1.0}
    got = learning.learned_bonus(pairs, seeds, cand, scale=3.0, coefficient=0.5, degree_of={7: 4.0})
    # 7 <- seed 1 (weight 0.5, degree factors 1 and 4); 9 <- seed 5 (0.2); 5 <- nothing (9 is no seed);
    # (2, 3) joins no candidate; a weight-0 pair adds nothing
    assert got.tolist() == pytest.approx([0.0, 3.0 * 2.0 * 0.5 * 0.5 / 2.0, 3.0 * 1.0 * 0.5 * 0.2])
    assert not learning.learned_bonus({}, seeds, cand, scale=1.0, coefficient=0.5).any()


def test_only_close_pairs_are_credited(db_path, clock, embedder):
    """``hebbian_min_cosine``: two hits returned together are linked only when their vectors are
    close; with the check off the same search links them."""
    texts = ("the kafka consumer lags behind the producer", "the kafka consumer lag grew after the deploy",
             "kafka is also the name of a novelist")
    for threshold, linked_far in ((0.0, True), (0.6, False)):
        cfg = Config(hebbian_search=True, hebbian_same_session=False, hebbian_top=3, hebbian_min_cosine=threshold,
                     hebbian_min_ratio=0.0)
        path = db_path.with_name(f"cos{threshold}.db")
        with Memory(path, embedder=embedder, clock=clock, config=cfg) as m:
            ids = [m.add(t, user_id="u")[0].id for t in texts]
            m.flush()
            vecs = m._views.vectors_of(sorted(_nid(m, i) for i in ids))[1]
            vecs = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
            sims = vecs @ vecs.T
            assert sims[0, 1] > 0.6 > max(sims[0, 2], sims[1, 2])  # the premise: two close, one far
            got = m.search("kafka consumer lag", top_k=3, user_id="u", channels=LEX_GRAPH)
            assert {h.id for h in got} == set(ids)
            m.flush()
            lead = got[0].id
            assert lead != ids[2]  # the pairs are credited against the best hit
            close = ids[1] if lead == ids[0] else ids[0]
            assert _stored_weight(m, lead, close) is not None
            assert (_stored_weight(m, lead, ids[2]) is not None) is linked_far


def test_min_cosine_is_checked():
    for bad in (1.5, -2.0, True, "0.5"):
        with pytest.raises(ValueError, match="hebbian_min_cosine"):
            Config(hebbian_min_cosine=bad)
    with pytest.raises(ValueError, match="hebbian_rerank"):
        Config(hebbian_rerank=1)


def test_min_ratio_credits_only_a_partner_that_scored_near_the_best(db_path, clock):
    """``hebbian_min_ratio``: the best two hits are linked only when the second scored at least that
    fraction of the first; the same search with the check off links them."""
    for ratio, linked in ((0.0, True), (0.99, False)):
        cfg = Config(hebbian_search=True, hebbian_same_session=False, hebbian_min_ratio=ratio)
        with Memory(db_path.with_name(f"ratio{ratio}.db"), embedder=None, clock=clock, config=cfg) as m:
            strong = m.add("kafka consumer lag alert on the billing cluster", user_id="u")[0].id
            weak = m.add("billing invoice template", user_id="u")[0].id
            got = m.search("kafka consumer lag billing", top_k=2, user_id="u", channels=LEX_GRAPH)
            assert [h.id for h in got] == [strong, weak] and got[1].score < 0.99 * got[0].score
            m.flush()
            assert (_stored_weight(m, strong, weak) is not None) is linked


def test_rerank_seeds_limits_which_seeds_send_over_learned_links(db_path, clock):
    """``hebbian_rerank_seeds=1``: only the best seed sends; a link from a weaker seed re-ranks nothing."""
    for top, reaches in ((0, True), (1, False)):
        cfg = Config(hebbian_search=True, hebbian_same_session=False, hebbian_rerank=True, hebbian_rerank_seeds=top)
        with Memory(db_path.with_name(f"seeds{top}.db"), embedder=None, clock=clock, config=cfg) as m:
            a, b, c = _kafka(m)
            m.search("beta gamma", top_k=2, user_id="u")  # links b-c
            got = _hits(m, "alpha kafka beta gamma rollout alpha", user_id="u")
            assert got[a][0] == 0  # a is the best seed, b and c weaker seeds
            assert (got[c][1] is not None) is reaches


def test_the_search_rule_does_not_link_a_partner_far_below_the_best_hit(db_path, clock):
    """The opt-in search-time rule at its default ratio (``hebbian_min_ratio`` 0.7): the best two hits of a
    session are linked when the second scored near the first, not when it scored far below it."""
    assert Config().hebbian_min_ratio == 0.7
    with Memory(db_path, embedder=None, clock=clock, config=Config(hebbian_search=True)) as m:
        near = m.add(["kafka consumer lag alert on billing", "kafka consumer lag alert on search"], user_id="u",
                     session_id="s1")
        far = m.add(["redis eviction storm on the payments cluster", "the invoice template for payments"],
                    user_id="u", session_id="s2")
        got = m.search("kafka consumer lag alert billing search", top_k=2, user_id="u", channels=("lexical",))
        assert {h.id for h in got} == {near[0].id, near[1].id} and got[1].score >= 0.7 * got[0].score
        got = m.search("redis eviction storm payments", top_k=2, user_id="u", channels=("lexical",))
        assert [h.id for h in got] == [far[0].id, far[1].id] and got[1].score < 0.7 * got[0].score
        m.flush()
        assert _stored_weight(m, near[0].id, near[1].id) is not None
        assert _stored_weight(m, far[0].id, far[1].id) is None
