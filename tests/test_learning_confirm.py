"""``Memory.confirm``: the caller confirms hits that were useful together, and only that
makes a learned (Hebbian) link by default. Mechanisms, not figures: the links are visible to the next
query, credit is bounded, a link never joins two scopes, a search alone links nothing."""
from __future__ import annotations

import pytest

from causalmem import Memory, learning
from causalmem.config import Config
# the graph-energy and stored-weight probes of the search-time learning tests, shared
from test_retrieval_learning import LEX_GRAPH, _activation, _nid
from test_retrieval_learning import _stored_weight as _weight

DAY = 86400.0


def _pairs(m: Memory) -> int:
    return m.stats()["cooccurrence"]


@pytest.fixture
def mem(db_path, clock):
    m = Memory(db_path, embedder=None, clock=clock)
    yield m
    m.close()


def _two(m: Memory, user: str = "u") -> tuple[str, str]:
    """Two chunks of different sessions that no edge joins; 'alpha release' finds only the first."""
    a = m.add("alpha release of the kafka consumer", user_id=user, session_id="s1")[0].id
    b = m.add("beta rollout finished on friday", user_id=user, session_id="s2")[0].id
    return a, b


def test_a_search_alone_makes_no_link_by_default(mem, db_path):
    assert Config().hebbian_search is False
    a, b = _two(mem)
    c = mem.add("kafka consumer beta rollout notes", user_id="u", session_id="s1")[0].id
    for _ in range(5):
        hits = mem.search("kafka consumer beta rollout", top_k=3, user_id="u")
        assert len(hits) >= 2
    mem.flush()
    assert _pairs(mem) == 0  # no co-occurrence pair written
    assert not mem._projection._overlay.learned and not mem._views.reinforcement.pending_co  # and none in the view
    # the search's other reinforcement is still written: access counts
    assert sum(mem.get(x).access_count for x in (a, b, c)) > 0
    # the opt-in switch brings the search-time rule back (same hits, same session: linked); the second hit
    # scores 0.61 of the first in this 3-chunk store (no second pass below the candidate depth), so the
    # rule's score-ratio check is set below that
    with Memory(db_path, embedder=None, config=Config(hebbian_search=True, hebbian_same_session=False,
                                                      hebbian_min_ratio=0.5)) as m2:
        m2.search("kafka consumer beta rollout", top_k=3, user_id="u")
        m2.flush()
        assert _pairs(m2) > 0


def test_confirmed_links_are_visible_to_the_next_query_and_match_the_store(mem, db_path):
    a, b = _two(mem)
    assert _activation(mem, "alpha release", b, user_id="u") is None  # nothing joins them
    assert mem.confirm([a, b]) == 1
    assert _weight(mem, a, b) == pytest.approx(mem.config.hebbian_start)  # written by the call itself
    got = _activation(mem, "alpha release", b, user_id="u")  # no flush, no sleep, no clock advance
    assert got is not None and got > 0
    # the view the next query used is what a rebuild from the store gives
    mem._projection.mark_stale()
    assert _activation(mem, "alpha release", b, user_id="u") == pytest.approx(got, rel=1e-5)
    # and what another opener of the file sees
    with Memory(db_path, embedder=None) as other:
        assert _activation(other, "alpha release", b, user_id="u") == pytest.approx(got, rel=1e-5)


def test_confirm_seen_by_a_memory_that_already_had_its_graph(db_path, clock):
    with Memory(db_path, embedder=None, clock=clock) as m1, Memory(db_path, embedder=None, clock=clock) as m2:
        a, b = _two(m1)
        assert _activation(m2, "alpha release", b, user_id="u") is None  # m2's graph built, no link
        m1.confirm([a, b])
        got = _activation(m2, "alpha release", b, user_id="u")  # the other opener's next query
        assert got is not None and got > 0


def test_credit_is_bounded_per_call_and_in_total(db_path, clock):
    cfg = Config(hebbian_start=0.1, hebbian_step=0.3, hebbian_cap=0.5)
    with Memory(db_path, embedder=None, clock=clock, config=cfg) as m:
        a, b = _two(m)
        # a chunk named twice counts once: one pair, one credit
        assert m.confirm([a, b, a, b]) == 1
        assert _weight(m, a, b) == pytest.approx(0.1)
        assert m.confirm([b, a]) == 1
        assert _weight(m, a, b) == pytest.approx(0.4)
        after = _activation(m, "alpha release", b, user_id="u")
        for _ in range(5):
            m.confirm([a, b])
        assert _weight(m, a, b) == pytest.approx(0.5)  # the cap, in the store ...
        capped = _activation(m, "alpha release", b, user_id="u")
        m._projection.mark_stale()
        assert _activation(m, "alpha release", b, user_id="u") == pytest.approx(capped, rel=1e-5)  # ... and the view
        assert capped > after
        assert m.confirm([a]) == 0  # one chunk: nothing to pair
        row = m._store.cooccurrence_row(*sorted((_nid(m, a), _nid(m, b))))
        assert row[3] == 7  # every credit counted, the weight still capped
    # at most MAX_HEBBIAN_NIDS distinct chunks per call: a longer list is refused, not cut
    with Memory(db_path.with_name("big.db"), embedder=None, clock=clock) as m:
        ids = [c.id for c in m.add([f"note number {i} on the rollout" for i in range(learning.MAX_HEBBIAN_NIDS + 1)],
                                   user_id="u")]
        with pytest.raises(ValueError, match="chunk_ids"):
            m.confirm(ids)
        assert _pairs(m) == 0
        k = learning.MAX_HEBBIAN_NIDS
        assert m.confirm(ids[:k]) == k * (k - 1) // 2


def test_confirm_never_links_two_scopes(mem):
    alice, alice2 = _two(mem, "alice")
    bob = mem.add("alpha release secret of bob", user_id="bob")[0].id
    agent = mem.add("alpha release of the agent", user_id="alice", agent_id="bot")[0].id
    for bad in ([alice, bob], [alice, alice2, bob], [alice, agent]):
        with pytest.raises(ValueError, match="different scopes"):
            mem.confirm(bad)
    assert _pairs(mem) == 0  # nothing written, not even alice's own pair of the refused call
    assert mem.confirm([alice, alice2]) == 1
    # bob's searches never reach alice's linked chunk, and alice's never reach bob's
    assert alice2 not in {h.id for h in mem.search("alpha release", user_id="bob", channels=LEX_GRAPH)}
    assert bob not in {h.id for h in mem.search("alpha release", user_id="alice", channels=LEX_GRAPH)}
    assert (_activation(mem, "alpha release", alice2, user_id="alice") or 0) > 0


def test_bad_arguments_name_the_argument_and_write_nothing(mem):
    a, b = _two(mem)
    for bad, exc in (("a-chunk-id", TypeError), (b"x", TypeError), (None, TypeError), (3, TypeError),
                     ([a, 3], TypeError), ([], ValueError), ([a, "\ud800"], ValueError)):
        with pytest.raises(exc, match="chunk_ids"):
            mem.confirm(bad)
    with pytest.raises(KeyError, match="chunk_ids"):
        mem.confirm([a, b, "no-such-chunk"])  # one transaction: a and b are not linked either
    mem.delete(b)
    with pytest.raises(ValueError, match="chunk_ids.*deleted"):
        mem.confirm([a, b])
    assert _pairs(mem) == 0
    assert mem.confirm((x for x in [a])) == 0  # any iterable of ids


def test_confirmed_pairs_fade_and_drop_at_sleep_like_search_pairs(mem, clock):
    a, b = _two(mem)
    c = mem.add("gamma notes", user_id="u", session_id="s3")[0].id
    mem.confirm([a, b])
    mem.confirm([a, b])  # 0.15
    mem.confirm([a, c])  # 0.1
    r = mem.sleep(now=clock() + 10 * DAY)
    assert r.hebbian_faded >= 2
    fade = mem.config.hebbian_idle_fade ** 10
    assert _weight(mem, a, b) == pytest.approx(0.15 * fade)
    assert _weight(mem, a, c) == pytest.approx(0.1 * fade)
    mem.sleep(now=clock() + 80 * DAY)  # 0.1 * 0.99^80 < hebbian_drop_below: dropped
    assert _weight(mem, a, c) is None
    assert _activation(mem, "gamma notes", a, user_id="u") is None


def test_confirm_writes_the_queued_search_credit_first(db_path, clock):
    """With the opt-in search rule, a confirm carries the queued search credit in its transaction and
    adds its own on top: the store and the view agree on the sum."""
    cfg = Config(hebbian_search=True, hebbian_same_session=False, reinforce_seconds=3600,
                 scoped_views=False)  # it reads the whole-store views' queue (m._views)
    with Memory(db_path, embedder=None, clock=clock, config=cfg) as m:
        a = m.add("alpha release of the kafka consumer", user_id="u")[0].id
        b = m.add("beta rollout of the kafka consumer", user_id="u")[0].id
        hits = m.search("kafka consumer", top_k=2, user_id="u")
        assert {h.id for h in hits} == {a, b} and m._views.reinforcement.queued
        m.confirm([a, b])
        assert not m._views.reinforcement.queued
        assert _weight(m, a, b) == pytest.approx(cfg.hebbian_start + cfg.hebbian_step)
        got = _activation(m, "alpha release", b, user_id="u")
        m._projection.mark_stale()
        assert _activation(m, "alpha release", b, user_id="u") == pytest.approx(got, rel=1e-5)


@pytest.mark.parametrize("fail_at", ["credit", "projection"])
def test_a_confirm_that_fails_midway_leaves_no_pair_and_no_link(mem, monkeypatch, fail_at):
    """One transaction (review C2): when the write fails after the pairs were credited in the store
    (or while they go into the projection), nothing of the call stays: no stored pair, no link."""
    a, b = _two(mem)
    views = mem._views
    if fail_at == "credit":
        real = views.store.credit_cooccurrence

        def credit_then_fail(rows):
            real(rows)
            raise RuntimeError("disk gone")
        monkeypatch.setattr(views.store, "credit_cooccurrence", credit_then_fail)
    else:
        def fail(*args, **kwargs):
            raise RuntimeError("disk gone")
        monkeypatch.setattr(views.effects, "confirmed_links", fail)
    with pytest.raises(RuntimeError, match="disk gone"):
        mem.confirm([a, b])
    monkeypatch.undo()
    assert _pairs(mem) == 0 and _weight(mem, a, b) is None
    assert _activation(mem, "alpha release", b, user_id="u") is None
    assert mem.confirm([a, b]) == 1 and _weight(mem, a, b) == pytest.approx(mem.config.hebbian_start)
