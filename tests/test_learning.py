"""Learning rules (SPEC §5, §6 stage 3): Q-values, Hebbian co-occurrence, half-life decay."""
from __future__ import annotations

import math

import numpy as np
import pytest

from causalmem import learning
from causalmem.config import Config
from causalmem.memory import Memory

T = 1_700_000_000.0
DAY = 86400.0
START = Config().hebbian_start  # a new pair's weight (0.1; SPEC §5 says 0.2, see the README's learning section)


def _mem(path, t=T, **kw):
    return Memory(path, clock=lambda: t, embedder=None, **kw)


def _nid(mem, chunk_id):
    return mem._store.nid_of(chunk_id)


# ------------------------------------------------------------------------------ Bellman / Q


def test_bellman_worked_values():
    assert learning.bellman(0.5, 1.0, 0.0) == pytest.approx(0.55)
    assert learning.bellman(0.5, -1.0, 0.0) == pytest.approx(0.35)
    assert learning.bellman(0.5, 0.0, 1.0) == pytest.approx(0.5 + 0.1 * (0.9 - 0.5))
    assert learning.bellman(0.0, 1.0, 0.0, alpha=0.5, gamma=0.9) == pytest.approx(0.5)
    # clamped to [0, 1]
    assert learning.bellman(0.99, 1.0, 1.0, alpha=1.0) == 1.0
    assert learning.bellman(0.01, -1.0, 0.0, alpha=1.0) == 0.0
    vec = learning.bellman_vec(np.array([0.5, 0.5]), 1.0, np.array([0.0, 1.0]))
    assert vec.tolist() == pytest.approx([learning.bellman(0.5, 1, 0), learning.bellman(0.5, 1, 1)])


def test_rewarded_above_untouched_above_penalised(tmp_path):
    with _mem(tmp_path / "m.db") as mem:
        good = mem.record_decision("used the retry wrapper", "requests succeeded", task_tag="net")
        mem.record_decision("left the default timeout", "slow page loads", task_tag="net")
        bad = mem.record_decision("copied the prod config by hand", "typo in the config", task_tag="ops")
        q_good = mem.feedback(good.src, 1.0)
        q_bad = mem.feedback(bad.src, -1.0)
        untouched = mem.get(mem.edges()[1].src).q_value
        assert untouched == 0.5
        assert q_good > untouched > q_bad
        # successor of each decision is its outcome, still at q_init 0.5
        assert q_good == pytest.approx(0.5 + 0.1 * (1.0 + 0.9 * 0.5 - 0.5))
        assert q_bad == pytest.approx(0.5 + 0.1 * (-1.0 + 0.9 * 0.5 - 0.5))
        assert mem.get(good.src).q_value == pytest.approx(q_good)


def test_higher_q_seeds_stronger(tmp_path):
    with _mem(tmp_path / "m.db") as mem:
        mem.record_decision("enable the query cache", "faster dashboard", confidence=0.8)
        mem.record_decision("enable the page cache", "faster homepage", confidence=0.8)
        src_a = mem.edges()[0].src
        before = {a.text: a.energy for a in mem.search_causal("enable the query cache")}
        for _ in range(10):
            mem.feedback(src_a, 1.0)
        after = {a.text: a.energy for a in mem.search_causal("enable the query cache")}
        other = {a.text: a.energy for a in mem.search_causal("enable the page cache")}
        q = mem.get(src_a).q_value
        assert q > 0.8
        assert after["faster dashboard"] == pytest.approx((0.5 + 0.5 * q) * 0.8 * 0.7, abs=1e-4)
        assert after["faster dashboard"] > before["faster dashboard"]
        assert after["faster dashboard"] > other["faster homepage"]


def test_bellman_propagates_from_high_q_successor(tmp_path):
    with _mem(tmp_path / "m.db") as mem:
        e = mem.record_decision("pinned the dependency versions", "reproducible builds")
        lone = mem.record_decision("wrote a runbook", "on-call felt calmer")
        for _ in range(30):
            mem.feedback(e.dst, 1.0)  # the outcome proves very useful
        q_succ = mem.get(e.dst).q_value
        assert q_succ > 0.9
        q_a = mem.feedback(e.src, 0.0)
        assert q_a == pytest.approx(0.5 + 0.1 * (0.9 * q_succ - 0.5))
        assert q_a > 0.5
        # a chunk whose successor is still at 0.5 gains less from the same zero reward
        q_lone = mem.feedback(lone.src, 0.0)
        assert q_lone == pytest.approx(0.5 + 0.1 * (0.9 * 0.5 - 0.5))
        assert q_a > q_lone
        # no successor at all (an outcome): max over nothing is 0
        q_leaf = mem.feedback(lone.dst, 0.0)
        assert q_leaf == pytest.approx(0.45)


def test_successors_skip_invalid_edges_and_deleted_chunks(tmp_path):
    with _mem(tmp_path / "m.db") as mem:
        e = mem.record_decision("turned on autoscaling", "costs doubled")
        for _ in range(30):
            mem.feedback(e.dst, 1.0)
        mem.invalidate(e.id, "wrong attribution")
        assert mem.feedback(e.src, 0.0) == pytest.approx(0.45)
        e2 = mem.record_decision("turned off debug logging", "disk stopped filling")
        for _ in range(30):
            mem.feedback(e2.dst, 1.0)
        mem.delete(e2.dst)
        assert mem._store.max_successor_q(_nid(mem, e2.src)) is None


def test_q_persists_across_reopen(tmp_path):
    path = tmp_path / "m.db"
    with _mem(path) as mem:
        e = mem.record_decision("added a health check", "bad pods were replaced")
        q = mem.feedback(e.src, 1.0)
    with _mem(path) as mem:
        assert mem.get(e.src).q_value == pytest.approx(q)
        assert mem.feedback(e.src, 1.0) > q


def test_q_init_default_and_configured(tmp_path):
    assert Config().q_init == 0.5
    with _mem(tmp_path / "a.db") as mem:
        e = mem.record_decision("a decision", "an outcome")
        assert mem.get(e.src).q_value == 0.5
    with _mem(tmp_path / "b.db", config=Config(q_init=0.0)) as mem:
        e = mem.record_decision("a decision", "an outcome")
        assert mem.get(e.src).q_value == 0.0
        assert mem.get(e.dst).q_value == 0.0
        assert mem.feedback(e.src, 1.0) == pytest.approx(0.1)  # literal MemRL from zero


def test_feedback_uses_configured_alpha_gamma(tmp_path):
    with _mem(tmp_path / "m.db", config=Config(q_alpha=0.5, q_gamma=0.5)) as mem:
        e = mem.record_decision("x decision", "y outcome")
        assert mem.feedback(e.src, 1.0) == pytest.approx(0.5 + 0.5 * (1 + 0.5 * 0.5 - 0.5))


# ------------------------------------------------------------------------------ Hebbian


def _credit(mem, nids, now):
    with mem._store.transaction():
        return learning.hebbian_credit(mem._store, nids, now, mem.config)


def test_hebbian_new_pairs_then_strengthen_to_cap(tmp_path):
    with _mem(tmp_path / "m.db") as mem:
        ids = [mem.record_decision(f"decision {i} alpha", f"outcome {i} beta").src for i in range(3)]
        nids = [_nid(mem, c) for c in ids]
        first = _credit(mem, list(reversed(nids)), T)
        assert sorted(first) == sorted(
            [(min(a, b), max(a, b), START, True) for i, a in enumerate(nids) for b in nids[i + 1:]])
        w = START
        for k in range(20):
            out = _credit(mem, nids, T + k)
            w = min(1.0, w + 0.05)
            assert all(not new and weight == pytest.approx(w) for _a, _b, weight, new in out)
        row = mem._store.cooccurrence_row(nids[0], nids[1])
        assert row[2] == pytest.approx(1.0) and row[3] == 21 and row[4] == T + 19
        # a single chunk, duplicates only: no pair
        assert _credit(mem, [nids[0], nids[0]], T) == []


def test_hebbian_fades_when_idle_and_is_dropped_in_sleep(tmp_path):
    with _mem(tmp_path / "m.db") as mem:
        a = mem.record_decision("rotate the api keys", "old keys revoked")
        b = mem.record_decision("rotate the tls certs", "no expiry outage")
        na, nb, nc = _nid(mem, a.src), _nid(mem, b.src), _nid(mem, a.dst)
        _credit(mem, [na, nb], T)
        _credit(mem, [na, nc], T)
        r1 = mem.sleep(now=T + 10 * DAY)
        assert r1.hebbian_faded == 2 and r1.hebbian_dropped == 0
        assert mem._store.cooccurrence_row(na, nb)[2] == pytest.approx(START * 0.99 ** 10)
        # reinforced pair: idle time counts from its last credit, not from the last sleep
        _credit(mem, [na, nc], T + 15 * DAY)
        r2 = mem.sleep(now=T + 20 * DAY)
        assert mem._store.cooccurrence_row(na, nb)[2] == pytest.approx(START * 0.99 ** 20)
        assert mem._store.cooccurrence_row(na, nc)[2] == pytest.approx((START * 0.99 ** 10 + 0.05) * 0.99 ** 5)
        assert r2.hebbian_faded == 2
        r3 = mem.sleep(now=T + 200 * DAY)  # START·0.99^200 < 0.05
        assert r3.hebbian_dropped == 2
        assert mem._store.cooccurrence_row(na, nb) is None
        assert mem._store.cooccurrence_row(na, nc) is None


def test_hebbian_survives_rebuild_and_restart(tmp_path):
    from causalmem.projection import CO_OCCURRENCE_COEFFICIENT as CO
    path = tmp_path / "m.db"
    with _mem(path) as mem:
        a = mem.record_decision("cache the user profile", "profile page is instant")
        b = mem.record_decision("warm the cache on deploy", "no cold-start latency")
        na, nb = _nid(mem, a.src), _nid(mem, b.src)
        for _ in range(round((1.0 - START) / 0.05) + 1):  # START + n × 0.05 = 1.0
            _credit(mem, [na, nb], T)
        mem._projection.mark_stale()
        acts = {x.text: x.energy for x in mem.search_causal("cache the user profile")}
        assert acts.get("warm the cache on deploy") == pytest.approx(0.75 * 1.0 * CO * 0.7, abs=1e-4)
    with _mem(path) as mem:
        assert mem._store.cooccurrence_row(na, nb)[2] == pytest.approx(1.0)
        acts = {x.text: x.energy for x in mem.search_causal("cache the user profile")}
        assert acts.get("warm the cache on deploy") == pytest.approx(0.75 * 1.0 * CO * 0.7, abs=1e-4)


def test_search_credits_pairs_returned_together_with_the_search_rule(tmp_path):
    """``Config.hebbian_search`` (opt-in): a search credits its best hits as a pair."""
    pytest.importorskip("causalmem.retrieval")
    with _mem(tmp_path / "m.db", config=Config(hebbian_search=True)) as mem:
        mem.add(["the kafka consumer lagged behind", "we raised the kafka partition count",
                 "kafka lag went back to zero"], user_id="u")
        hits = mem.search("kafka lag", top_k=3, user_id="u")
        assert len(hits) >= 2
        nids = [_nid(mem, h.id) for h in hits]
        assert mem._store.cooccurrence_row(nids[0], nids[1]) is None  # queued: a search never writes
        mem.flush()
        row = mem._store.cooccurrence_row(nids[0], nids[1])
        assert row is not None and row[2] == pytest.approx(START)
        mem.search("kafka lag", top_k=3, user_id="u")
        mem.flush()
        assert mem._store.cooccurrence_row(nids[0], nids[1])[2] == pytest.approx(START + 0.05)


def test_hebbian_credit_caps_the_number_of_pairs(tmp_path):
    with _mem(tmp_path / "m.db") as mem:
        nids = [mem._store.insert_chunk(text=f"chunk {i}", kind="fact", created_at=T, q_value=0.5)[0]
                for i in range(100)]
        out = _credit(mem, nids, T)
        k = learning.MAX_HEBBIAN_NIDS
        assert len(out) == k * (k - 1) // 2


# ------------------------------------------------------------------------------ decay (pure)


def test_decay_worked_values():
    assert learning.decayed_confidence(0.8, "rule", 10) == pytest.approx(0.8 * 0.99 ** 10)
    assert learning.decayed_confidence(0.8, "distill", 10) == pytest.approx(0.8 * 0.99 ** 10)
    assert learning.decayed_confidence(0.8, "temporal", 10) == pytest.approx(0.8 * 0.5 ** (240 / 168))
    assert learning.decayed_confidence(0.8, "user_feedback", 10) == pytest.approx(0.8 * 0.5 ** (240 / 2160))
    assert learning.decayed_confidence(0.8, "llm_inferred", 10) == pytest.approx(0.8 * 0.5 ** (240 / 2160))
    # protected edges age at half speed
    assert learning.decayed_confidence(0.8, "rule", 10, protected=True) == pytest.approx(0.8 * 0.99 ** 5)
    assert learning.decayed_confidence(0.8, "temporal", 14, protected=True) == pytest.approx(0.4)
    # access boost +0.05, capped at 0.95, never lowering
    assert learning.decayed_confidence(0.7, "rule", 0, accessed=True) == pytest.approx(0.75)
    assert learning.decayed_confidence(0.93, "rule", 0, accessed=True) == pytest.approx(0.95)
    assert learning.decayed_confidence(0.97, "rule", 0, accessed=True) == pytest.approx(0.97)
    assert learning.decay_factor("rule", -5) == 1.0  # a clock going backwards never grows an edge


def test_retirement_rules():
    aged = learning.decayed_confidence(0.21, "rule", 10)
    assert aged == pytest.approx(0.21 * 0.99 ** 10) and aged < 0.2
    assert learning.should_retire(aged, "rule")
    uf = learning.decayed_confidence(0.21, "user_feedback", 10)
    assert uf < 0.2 and not learning.should_retire(uf, "user_feedback")
    assert not learning.should_retire(0.01, "user_feedback")
    assert not learning.should_retire(0.15, "rule", protected=True)
    assert learning.should_retire(0.09, "rule", protected=True)
    assert not learning.should_retire(0.2, "rule")


@pytest.mark.parametrize("source", ["rule", "temporal", "user_feedback", "llm_inferred", "distill"])
def test_vectorised_decay_matches_scalar(source):
    rng = np.random.default_rng(7)
    conf = rng.uniform(0, 1, 200)
    age = rng.uniform(-2, 400, 200)
    prot = rng.random(200) < 0.3
    acc = rng.random(200) < 0.3
    hl = learning.half_life_days(source)
    half = np.full(200, np.nan if hl is None else hl)
    vec = learning.decay_confidences(conf, half, age, prot, acc)
    ref = [learning.decayed_confidence(c, source, a, protected=p, accessed=x)
           for c, a, p, x in zip(conf, age, prot, acc)]
    np.testing.assert_allclose(vec, ref, rtol=1e-12)
    never = np.full(200, source in learning.NEVER_RETIRED_SOURCES)
    assert learning.retire_mask(vec, never, prot).tolist() == [
        learning.should_retire(c, source, protected=p) for c, p in zip(vec, prot)]


def test_hebbian_fade_formula():
    assert learning.hebbian_faded_weight(0.2, 10) == pytest.approx(0.2 * 0.99 ** 10)
    assert learning.hebbian_faded_weight(0.2, -3) == pytest.approx(0.2)
    assert math.isclose(float(learning.hebbian_faded_weight(1.0, 0)), 1.0)


# ------------------------------------------------------------------------------ decay through sleep


def _seed_decay_store(mem):
    kw = dict(polarity="neutral")
    rule = mem.record_decision("moved cron to the scheduler", "jobs ran on the new host", source="rule",
                               confidence=0.8, **kw)
    temporal = mem.record_decision("opened the incident channel", "people joined the channel",
                                   source="temporal", confidence=0.8, **kw)
    uf = mem.record_decision("asked for a second reviewer", "the review took longer", source="user_feedback",
                             confidence=0.8, **kw)
    uf_low = mem.record_decision("pinned the node version", "builds matched local runs", source="user_feedback",
                                 confidence=0.65, **kw)
    weak_rule = mem.record_decision("renamed the dashboard", "links pointed at the old name", source="rule",
                                    confidence=0.21, **kw)
    weak_uf = mem.record_decision("muted the flaky alert", "the alert stayed quiet", source="user_feedback",
                                  confidence=0.21, **kw)
    return rule, temporal, uf, uf_low, weak_rule, weak_uf


def test_decay_through_sleep_on_a_real_store(tmp_path):
    path = tmp_path / "m.db"
    with _mem(path) as mem:
        rule, temporal, uf, uf_low, weak_rule, weak_uf = _seed_decay_store(mem)
        r1 = mem.sleep(now=T + 10 * DAY)
        assert r1.protected == 1  # user_feedback 0.8 + 0.3 ≥ 1.0: replay-protected, ages at half speed
        assert mem.get_edge(rule.id).confidence == pytest.approx(0.8 * 0.99 ** 10)
        assert mem.get_edge(temporal.id).confidence == pytest.approx(0.8 * 0.5 ** (240 / 168))
        assert mem.get_edge(uf_low.id).confidence == pytest.approx(0.65 * 0.5 ** (240 / 2160))
        assert mem.get_edge(uf.id).confidence == pytest.approx(0.8 * 0.5 ** (120 / 2160))
        wr = mem.get_edge(weak_rule.id)
        assert not wr.valid and wr.invalid_reason == "decayed below 0.2"
        assert wr.confidence == pytest.approx(0.21 * 0.99 ** 10)
        assert mem.get_edge(weak_uf.id).valid  # user feedback is never retired
        assert r1.decayed == 6 and r1.retired == 1
    with _mem(path) as mem:  # second cycle after a restart: only the 5 days since the first one
        r2 = mem.sleep(now=T + 15 * DAY)
        assert mem.get_edge(rule.id).confidence == pytest.approx(0.8 * 0.99 ** 15)
        t_edge = mem.get_edge(temporal.id)  # 0.8 · 0.5^(15/7) ≈ 0.18: retired now
        assert t_edge.confidence == pytest.approx(0.8 * 0.5 ** (15 * 24 / 168)) and not t_edge.valid
        assert mem.get_edge(uf_low.id).confidence == pytest.approx(0.65 * 0.5 ** (15 * 24 / 2160))
        assert mem.get_edge(uf.id).confidence == pytest.approx(0.8 * 0.5 ** (7.5 * 24 / 2160))
        assert r2.decayed == 5 and r2.retired == 1
        r3 = mem.sleep(now=T + 15 * DAY)  # same instant again: nothing left to decay
        assert r3.decayed == 0
        assert mem.sleep(now=T + 12 * DAY).decayed == 0  # an earlier clock neither decays nor rewinds
        assert mem.sleep(now=T + 16 * DAY).decayed == 4  # one more day, counted from day 15
        assert mem.get_edge(rule.id).confidence == pytest.approx(0.8 * 0.99 ** 16)


def test_access_boost_through_sleep(tmp_path):
    with _mem(tmp_path / "m.db") as mem:
        e = mem.record_decision("split the monolith job", "the nightly run finished early", source="rule",
                                confidence=0.7, polarity="neutral")
        with mem._store.transaction():
            mem._store.touch_chunks([_nid(mem, e.src), _nid(mem, e.dst)], T + 9 * DAY)
        r = mem.sleep(now=T + 10 * DAY)
        assert r.boosted == 1
        assert mem.get_edge(e.id).confidence == pytest.approx(min(0.95, 0.7 * 0.99 ** 10 + 0.05))


def test_a_start_zero_rule_drops_pairs_never_repeated_at_sleep(tmp_path):
    """``Config(hebbian_start=0)``: a pair seen once is recorded at weight 0 and dropped by the next
    sleep (below ``hebbian_drop_below``); a repeated pair keeps its weight, faded."""
    cfg = Config(hebbian_start=0.0, hebbian_step=0.1)
    with _mem(tmp_path / "m.db", config=cfg) as mem:
        a = mem.record_decision("rotate the api keys", "old keys revoked")
        b = mem.record_decision("rotate the tls certs", "no expiry outage")
        na, nb, nc = _nid(mem, a.src), _nid(mem, b.src), _nid(mem, a.dst)
        assert _credit(mem, [na, nb], T) == [(min(na, nb), max(na, nb), 0.0, True)]
        assert _credit(mem, [na, nb], T)[0][2] == pytest.approx(0.1)
        assert _credit(mem, [na, nb], T)[0][2] == pytest.approx(0.2)
        _credit(mem, [na, nc], T)  # once only
        r = mem.sleep(now=T + DAY)
        assert r.hebbian_dropped == 1
        assert mem._store.cooccurrence_row(na, nc) is None
        assert mem._store.cooccurrence_row(na, nb)[2] == pytest.approx(0.2 * 0.99)
