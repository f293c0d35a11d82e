"""``Config.q_rank``: a memory's Q-value scales its fused search score by
(0.5 + 0.5·Q) / (0.5 + 0.5·q_init). Mechanisms, not figures: a reward is visible to the next query (in
this process and another), a memory nobody rewarded ranks exactly as without the factor, the factor is
bounded, a search alone never moves Q, scopes stay apart, and the switch turns it off."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from causalmem import Memory
from causalmem.config import Config
from causalmem.retrieval import usefulness

FUSIONS = ("blend", "hybrid", "rrf")
# five turns the query matches alike (same words, same length); ties go to the older one
TEXTS = [f"the nightly backup job failed on host {name}" for name in ("amber", "birch", "cedar", "delta", "ember")]
QUERY = "nightly backup job failed"


def _fill(m: Memory, user: str = "u") -> list[str]:
    return [m.add(t, user_id=user, session_id=f"s{k}")[0].id for k, t in enumerate(TEXTS)]


def _ranked(m: Memory, user: str = "u", **kw) -> list[tuple[str, float]]:
    return [(h.id, h.score) for h in m.search(QUERY, top_k=5, user_id=user, reinforce=False, **kw)]


@pytest.mark.parametrize("fusion", FUSIONS)
def test_a_reward_lifts_the_memory_for_the_next_query(db_path, clock, fusion):
    with Memory(db_path, embedder=None, clock=clock) as m:
        ids = _fill(m)
        before = _ranked(m, fusion=fusion)
        assert [i for i, _ in before][0] != ids[3]
        q = m.feedback(ids[3], 1.0)
        assert q > m.config.q_init
        after = _ranked(m, fusion=fusion)  # no flush, no sleep: the next query
        assert after[0][0] == ids[3]
        # the others keep their order (and in blend, whose second pass and graph bonus scale with the
        # best hit's score, only their order)
        others = [x for x in after if x[0] != ids[3]], [x for x in before if x[0] != ids[3]]
        assert [i for i, _ in others[0]] == [i for i, _ in others[1]]
        if fusion != "blend":  # the factor is the last step of these fusions: without the graph channel
            # (whose seeds carry 0.5 + 0.5·Q too, SPEC §4) the score moves by exactly usefulness(Q)
            m.feedback(ids[3], -1.0)
            m.feedback(ids[0], 0.0)  # a zero reward: Q 0.5 -> 0.45 (Bellman toward 0)
            plain = dict(_ranked(m, fusion=fusion, channels=("lexical",)))
            q0, q3 = m.get(ids[0]).q_value, m.get(ids[3]).q_value
            with Memory(db_path, embedder=None, clock=clock, config=Config(q_rank=False)) as m2:
                raw = dict(_ranked(m2, fusion=fusion, channels=("lexical",)))
            for i, qv in ((ids[0], q0), (ids[3], q3), (ids[1], m.config.q_init)):
                want = raw[i] * float(usefulness(np.array([qv]), m.config.q_init)[0])
                assert plain[i] == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("fusion", FUSIONS)
def test_memories_nobody_rewarded_rank_exactly_as_without_the_factor(db_path, clock, fusion):
    with Memory(db_path, embedder=None, clock=clock) as m:
        ids = _fill(m)
        m.link(ids[0], ids[1], "caused")
        on = _ranked(m, fusion=fusion)
    with Memory(db_path, embedder=None, clock=clock, config=Config(q_rank=False)) as m:
        assert _ranked(m, fusion=fusion) == on  # same ids, same scores, bit for bit
    assert usefulness(np.array([0.5]), 0.5)[0] == 1.0
    assert usefulness(np.array([0.0]), 0.0)[0] == 1.0


def test_a_search_never_moves_q(db_path, clock):
    with Memory(db_path, embedder=None, clock=clock) as m:
        ids = _fill(m)
        for _ in range(20):
            m.search(QUERY, top_k=5, user_id="u")  # reinforcement on (the default)
        m.flush()
        assert {m.get(i).q_value for i in ids} == {m.config.q_init}
        assert len({s for _, s in _ranked(m, fusion="hybrid")}) == 1  # still tied


def test_the_factor_is_bounded(db_path, clock):
    with Memory(db_path, embedder=None, clock=clock) as m:
        ids = _fill(m)
        lex = {"fusion": "hybrid", "channels": ("lexical",)}
        base = dict(_ranked(m, **lex))[ids[2]]
        for _ in range(200):
            q = m.feedback(ids[2], 1.0)
        assert q <= 1.0
        top = dict(_ranked(m, **lex))[ids[2]]
        assert top / base == pytest.approx(1.0 / (0.5 + 0.5 * m.config.q_init), rel=1e-6)  # Q = 1: 4/3 at q_init 0.5
        for _ in range(200):
            q = m.feedback(ids[4], -1.0)
        assert q >= 0.0
        low = dict(_ranked(m, **lex))[ids[4]]
        assert low / base == pytest.approx(0.5 / (0.5 + 0.5 * m.config.q_init), rel=1e-6)
        assert [i for i, _ in _ranked(m, **lex)][-1] == ids[4]  # a harmful memory sinks


def test_a_reward_in_one_scope_does_not_move_another(db_path, clock):
    with Memory(db_path, embedder=None, clock=clock) as m:
        _fill(m, "alice")
        bob = _fill(m, "bob")
        before = _ranked(m, "alice")
        m.feedback(bob[4], 1.0)
        assert _ranked(m, "alice") == before
        assert _ranked(m, "bob")[0][0] == bob[4]


def test_the_switch_leaves_q_to_the_graph_seeds_only(db_path, clock):
    with Memory(db_path, embedder=None, clock=clock, config=Config(q_rank=False)) as m:
        ids = _fill(m)
        before = _ranked(m, channels=("lexical",))
        m.feedback(ids[3], 1.0)
        assert _ranked(m, channels=("lexical",)) == before  # no graph, no factor: Q is not read
    with Memory(db_path, embedder=None, clock=clock) as m:
        assert _ranked(m, channels=("lexical",))[0][0] == ids[3]  # the default reads it


def test_another_process_sees_the_reward_on_its_next_search(db_path, clock):
    with Memory(db_path, embedder=None, clock=clock) as reader:
        ids = _fill(reader)
        assert _ranked(reader)[0][0] != ids[4]
        with Memory(db_path, embedder=None, clock=clock) as writer:  # another Memory in this process
            writer.feedback(ids[4], 1.0)
        assert _ranked(reader)[0][0] == ids[4]
        code = ("import sys; from causalmem import Memory\n"
                "with Memory(sys.argv[1], embedder=None) as m: print(m.feedback(sys.argv[2], 1.0))")
        out = subprocess.run([sys.executable, "-c", code, str(db_path), ids[2]], capture_output=True, text=True,
                             timeout=120)  # another OS process
        assert out.returncode == 0, out.stderr
        assert float(out.stdout) > reader.config.q_init
        # its next search, no reopen: both rewarded once (equal Q, so the tie goes to the older one)
        assert [i for i, _ in _ranked(reader)][:2] == [ids[2], ids[4]]


def test_sleep_moves_q_and_so_the_ranking(db_path, clock):
    """Documented (README "Q-values rank what proved useful"): sleep's stage 1.5 (SPEC §6) rewards both
    ends of replay-protected edges, such as a session's temporal links (confidence 1.0), so after a sleep
    those turns rank above an equal single message, with no feedback from anyone; q_rank=False does not."""
    with Memory(db_path, embedder=None, clock=clock) as m:
        single = m.add(TEXTS[0], user_id="u")[0].id
        turn = m.add([{"role": "user", "content": TEXTS[1]},
                      {"role": "assistant", "content": "noted, looking into it later today"}],
                     user_id="u", session_id="s")[0].id
        ranked = _ranked(m, fusion="hybrid", channels=("lexical",))
        assert dict(ranked)[single] == dict(ranked)[turn]  # equal before
        report = m.sleep()
        assert report.q_updates >= 2 and m.get(turn).q_value > m.config.q_init == m.get(single).q_value
        assert _ranked(m, fusion="hybrid", channels=("lexical",))[0][0] == turn
    with Memory(db_path, embedder=None, clock=clock, config=Config(q_rank=False)) as m:
        ranked = _ranked(m, fusion="hybrid", channels=("lexical",))
        assert dict(ranked)[single] == dict(ranked)[turn]


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_q_rank_must_be_a_bool(bad):
    with pytest.raises(ValueError, match="q_rank"):
        Config(q_rank=bad)


def test_explain_shows_the_factor(db_path, clock):
    with Memory(db_path, embedder=None, clock=clock) as m:
        ids = _fill(m)
        q = m.feedback(ids[1], 1.0)
        sig = {h.id: h.signals for h in m.search(QUERY, top_k=5, user_id="u", explain=True, reinforce=False)}
        assert sig[ids[1]]["q_value"] == pytest.approx(q)
        assert sig[ids[1]]["usefulness"] == pytest.approx((0.5 + 0.5 * q) / 0.75)
        assert sig[ids[0]]["usefulness"] == 1.0
    with Memory(db_path, embedder=None, clock=clock, config=Config(q_rank=False)) as m:
        sig = {h.id: h.signals for h in m.search(QUERY, top_k=5, user_id="u", explain=True, reinforce=False)}
        assert sig[ids[1]]["usefulness"] == 1.0
