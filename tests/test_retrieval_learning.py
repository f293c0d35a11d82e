"""Learning from searches: co-occurrence links are visible to the next query, credit is
bounded (best few hits, weight cap), and learned links never cross a scope. Mechanisms, not figures."""
from __future__ import annotations

import pytest

from causalmem import Memory
from causalmem.config import Config
from causalmem import learning

LEX_GRAPH = ("lexical", "graph")


def _nid(m: Memory, chunk_id: str) -> int:
    return m._store.nid_of(chunk_id)


def _pair(m: Memory, x: str, y: str) -> tuple[int, int]:
    a, b = _nid(m, x), _nid(m, y)
    return (a, b) if a < b else (b, a)


def _stored_weight(m: Memory, x: str, y: str) -> float | None:
    row = m._store.cooccurrence_row(*_pair(m, x, y))
    return None if row is None else row[2]


def _activation(m: Memory, query: str, target: str, **scope) -> float | None:
    """The graph energy ``target`` receives for ``query`` (None: not returned)."""
    for h in m.search(query, top_k=10, channels=LEX_GRAPH, explain=True, reinforce=False, **scope):
        if h.id == target:
            return h.signals["activation"]
    return None


@pytest.fixture
def two(db_path, clock):
    """Two memories in separate sessions (no edge joins them) that one query finds together
    (credit across sessions allowed here, to watch one link)."""
    # scoped_views=False: these tests read the whole-store views' queue (``m._views``), which a
    # PostgreSQL memory's calls naming a user_id would otherwise leave for that tenant's own views
    m = Memory(db_path, embedder=None, clock=clock, config=Config(hebbian_search=True, hebbian_same_session=False,
                                                                  scoped_views=False))
    a = m.add("alpha release of the kafka consumer", user_id="u")[0].id
    b = m.add("beta rollout of the kafka consumer", user_id="u")[0].id
    yield m, a, b
    m.close()


def test_learned_link_is_visible_to_the_next_query(two):
    m, a, b = two
    assert _activation(m, "alpha release", b, user_id="u") is None  # nothing joins them yet
    hits = m.search("kafka consumer", top_k=2, user_id="u")  # reinforce=True: a and b returned together
    assert {h.id for h in hits} == {a, b}
    assert _stored_weight(m, a, b) is None  # queued: the search wrote nothing
    got = _activation(m, "alpha release", b, user_id="u")  # no clock advance, no write, no sleep
    assert got is not None and got > 0
    # what the next query saw is exactly what the store holds once the queue is written
    m.flush()
    assert _stored_weight(m, a, b) == pytest.approx(m.config.hebbian_start)
    m._projection.mark_stale()
    assert _activation(m, "alpha release", b, user_id="u") == pytest.approx(got, rel=1e-5)


def test_repeated_credit_is_seen_at_once_and_matches_the_store(two):
    m, a, b = two
    for _ in range(3):
        m.search("kafka consumer", top_k=2, user_id="u")
    seen = _activation(m, "alpha release", b, user_id="u")
    m.flush()
    assert _stored_weight(m, a, b) == pytest.approx(m.config.hebbian_start + 2 * m.config.hebbian_step)
    m._projection.mark_stale()
    assert _activation(m, "alpha release", b, user_id="u") == pytest.approx(seen, rel=1e-5)
    # credited again after the write: the overlay adds only the difference to the stored weight
    m.search("kafka consumer", top_k=2, user_id="u")
    seen = _activation(m, "alpha release", b, user_id="u")
    m.flush()
    m._projection.mark_stale()
    assert _stored_weight(m, a, b) == pytest.approx(m.config.hebbian_start + 3 * m.config.hebbian_step)
    assert _activation(m, "alpha release", b, user_id="u") == pytest.approx(seen, rel=1e-5)


def test_links_queued_before_a_rebuild_stay_visible(two):
    m, a, b = two
    m.search("kafka consumer", top_k=2, user_id="u")
    m._projection.mark_stale()  # e.g. another process committed: the graph is re-read from the store
    assert _stored_weight(m, a, b) is None
    assert (_activation(m, "alpha release", b, user_id="u") or 0) > 0


def test_credit_only_among_the_best_hits(db_path, clock):
    with Memory(db_path, embedder=None, clock=clock, config=Config(hebbian_search=True, hebbian_top=3, hebbian_same_session=False)) as m:
        ids = [m.add(f"incident {i} on the payment gateway", user_id="u")[0].id for i in range(6)]
        hits = m.search("payment gateway incident", top_k=6, user_id="u")
        assert len(hits) == 6
        m.flush()
        best = [h.id for h in hits]
        linked = {(x, y) for i, x in enumerate(ids) for y in ids[i + 1:] if _stored_weight(m, x, y) is not None}
        assert len(linked) == 3  # the pairs of the best three, not the 15 of all six
        assert all(x in best[:3] and y in best[:3] for x, y in linked)
    with Memory(db_path, embedder=None, clock=clock, config=Config(hebbian_search=True, hebbian_top=1)) as m:
        before = m.stats()["cooccurrence"]
        m.search("payment gateway incident", top_k=6, user_id="u")
        m.flush()
        assert m.stats()["cooccurrence"] == before  # hebbian_top=1: access counts only


def test_the_search_rule_links_only_hits_of_one_session(db_path, clock):
    with Memory(db_path, embedder=None, clock=clock, config=Config(hebbian_search=True, hebbian_top=3)) as m:
        a = m.add("the deploy froze on the staging cluster", user_id="u", session_id="s1")[0].id
        m.add(["unrelated small talk about lunch", "more small talk"], user_id="u", session_id="s1")
        b = m.add("we rolled back the staging cluster deploy", user_id="u", session_id="s1")[0].id
        c = m.add("staging cluster deploy checklist", user_id="u", session_id="s2")[0].id
        hits = m.search("staging cluster deploy", top_k=3, user_id="u")
        assert {h.id for h in hits} == {a, b, c}
        m.flush()
        assert _stored_weight(m, a, b) == pytest.approx(m.config.hebbian_start)  # same session, not adjacent
        assert _stored_weight(m, a, c) is None and _stored_weight(m, b, c) is None


def test_the_search_rule_credits_the_best_two_hits_weaker_than_spec(db_path, clock):
    """The opt-in search-time rule (``hebbian_search``) at its default constants: only the best two hits
    of a search (of one session) are paired, and a new pair starts at half of SPEC §5's 0.2 (one
    co-retrieval is weak evidence)."""
    cfg = Config(hebbian_search=True)
    assert (cfg.hebbian_top, cfg.hebbian_start, cfg.hebbian_same_session) == (2, 0.1, True)
    with Memory(db_path, embedder=None, clock=clock, config=cfg) as m:
        ids = [m.add(f"incident {i} on the payment gateway", user_id="u", session_id="s")[0].id for i in range(5)]
        hits = m.search("payment gateway incident", top_k=5, user_id="u")
        assert len(hits) == 5
        m.flush()
        linked = {(x, y) for i, x in enumerate(ids) for y in ids[i + 1:] if _stored_weight(m, x, y) is not None}
        assert linked == {tuple(sorted((hits[0].id, hits[1].id), key=ids.index))}
        assert _stored_weight(m, hits[0].id, hits[1].id) == pytest.approx(0.1)
        # three more searches that return the same two first: 0.1 -> 0.15 -> 0.2 -> 0.25
        for _ in range(3):
            again = m.search("payment gateway incident", top_k=5, user_id="u")
            assert [h.id for h in again[:2]] == [h.id for h in hits[:2]]
        m.flush()
        assert _stored_weight(m, hits[0].id, hits[1].id) == pytest.approx(0.25)


def test_weight_is_capped_in_the_view_and_in_the_store(two):
    m, a, b = two
    cap = m.config.hebbian_cap
    for _ in range(40):  # 0.2 + 39 x 0.05 would be 2.15
        m.search("kafka consumer", top_k=2, user_id="u")
    assert sum(m._views.reinforcement.pending_co.values()) == pytest.approx(cap)
    seen = _activation(m, "alpha release", b, user_id="u")
    m.flush()
    assert _stored_weight(m, a, b) == pytest.approx(cap)
    m._projection.mark_stale()
    assert _activation(m, "alpha release", b, user_id="u") == pytest.approx(seen, rel=1e-5)


def test_credit_rules():
    cfg = Config()
    assert learning.next_hebbian_weight(None, cfg) == cfg.hebbian_start
    assert learning.next_hebbian_weight(0.5, cfg) == pytest.approx(0.55)
    assert learning.next_hebbian_weight(cfg.hebbian_cap, cfg) == cfg.hebbian_cap
    assert learning.hebbian_pairs([5, 3, 5, 9, 1], 3) == [(3, 5), (3, 9), (5, 9)]
    assert learning.hebbian_pairs([5, 3], 1) == []
    for bad in (dict(hebbian_top=-1), dict(hebbian_top=2.5), dict(hebbian_cap=1.5),
                dict(hebbian_start=0.6, hebbian_cap=0.5)):
        with pytest.raises(ValueError, match="hebbian"):
            Config(**bad)


def test_learned_links_never_cross_a_scope(db_path, clock):
    # across sessions allowed: only the scope rule keeps bob's chunk out
    cfg = Config(hebbian_search=True, hebbian_same_session=False, scoped_views=False)  # reads m._views' queue
    with Memory(db_path, embedder=None, clock=clock, config=cfg) as m:
        alice = m.add("quarterly billing export for alice", user_id="alice")[0].id
        bob = m.add("quarterly billing export secret of bob", user_id="bob")[0].id
        alice2 = m.add("alice renewed the billing contract", user_id="alice")[0].id
        for _ in range(5):  # unscoped: both users' chunks come back together
            hits = m.search("quarterly billing export")
            assert {h.user_id for h in hits} == {"alice", "bob"}
        m.search("billing alice", user_id="alice")  # a scoped search links alice's own chunks
        pending = m._views.reinforcement.pending_co
        nb = _nid(m, bob)
        assert pending and all(nb not in pair for pair in pending)  # nothing learned across scopes
        assert _pair(m, alice, alice2) in pending
        # alice's scoped searches never reach bob's chunk, before or after the queue is written
        for _ in range(2):
            for q in ("quarterly billing export", "alice renewed the billing contract"):
                assert bob not in {h.id for h in m.search(q, user_id="alice", channels=LEX_GRAPH, reinforce=False)}
            m.flush()
            m._projection.mark_stale()
        assert _stored_weight(m, alice, bob) is None


def test_dropped_reinforcement_takes_its_links_back(two):
    m, a, b = two
    m.search("kafka consumer", top_k=2, user_id="u")
    assert (_activation(m, "alpha release", b, user_id="u") or 0) > 0
    m._views.reinforcement.drop("test")
    assert _activation(m, "alpha release", b, user_id="u") is None
    m.flush()
    assert _stored_weight(m, a, b) is None


def test_adjacent_seeds_credit_each_other_whatever_their_ids(db_path, clock):
    """Seeds joined by an edge spread in different groups (no id-parity rule): a cause and its
    outcome that both match the query each receive what the other sends."""
    with Memory(db_path, embedder=None, clock=clock) as m:
        x = m.add("redis cache warmed before the launch", user_id="u")[0].id
        m.add("unrelated note about lunch", user_id="u")
        y = m.add("redis cache hit rate stayed high", user_id="u")[0].id
        assert (_nid(m, x) - _nid(m, y)) % 2 == 0  # same parity: the old even/odd split kept them apart
        assert _activation(m, "redis cache", y, user_id="u") is None  # no edge yet: no graph energy
        m.link(x, y, "caused")
        got_y = _activation(m, "redis cache", y, user_id="u")
        got_x = _activation(m, "redis cache", x, user_id="u")
        assert got_y is not None and got_y > 0  # forward: the outcome receives from its cause
        assert got_x is not None and got_x > 0  # backward: the cause receives from its outcome


def test_a_rule_that_links_only_repeated_pairs_shows_the_repeat_at_once(db_path, clock):
    """``Config(hebbian_start=0)``: a first co-retrieval records the pair at weight 0 (no link); the
    repeat, still queued behind it, gives the link to the very next query, and the store agrees once
    the queue is written. (The overlay once forgot a weight-0 pair, so the repeat was invisible until
    the queue was written: a timer in disguise.)"""
    cfg = Config(hebbian_search=True, hebbian_start=0.0, hebbian_step=0.1, hebbian_same_session=False)
    with Memory(db_path, embedder=None, clock=clock, config=cfg) as m:
        a = m.add("alpha release of the kafka consumer", user_id="u")[0].id
        b = m.add("beta rollout of the kafka consumer", user_id="u")[0].id
        assert {h.id for h in m.search("kafka consumer", top_k=2, user_id="u")} == {a, b}
        assert _activation(m, "alpha release", b, user_id="u") is None  # once: no link
        assert {h.id for h in m.search("kafka consumer", top_k=2, user_id="u")} == {a, b}
        assert _stored_weight(m, a, b) is None  # nothing written yet
        got = _activation(m, "alpha release", b, user_id="u")
        assert got is not None and got > 0
        m.flush()
        assert _stored_weight(m, a, b) == pytest.approx(0.1)
        m._projection.mark_stale()
        assert _activation(m, "alpha release", b, user_id="u") == pytest.approx(got, rel=1e-5)
