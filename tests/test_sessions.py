"""Session support: a weak match that shares its session with the best hits climbs (by default in a search
without the semantic channel only)."""
from __future__ import annotations

import numpy as np
import pytest

from causalmem import Memory, retrieval, sessions
from causalmem.config import Config


def test_session_support_multiplies_by_the_other_best_hits_of_the_session():
    nids = np.arange(6)
    scores = np.array([1.0, 0.9, 0.5, 0.4, 0.3, 0.2])
    codes = np.array([1, 1, 2, 1, 0, 2])  # 0 = no session
    out = sessions.session_support(nids, scores, codes, 1.0, 3)
    # seeds 0, 1, 2: session 1 holds 1.0 + 0.9, session 2 holds 0.5; a seed's own score is left out
    want = [1.0 * (1 + 0.9 / 3), 0.9 * (1 + 1.0 / 3), 0.5, 0.4 * (1 + 1.9 / 3), 0.3, 0.2 * (1 + 0.5 / 3)]
    assert np.allclose(out, want)
    assert scores.tolist() == [1.0, 0.9, 0.5, 0.4, 0.3, 0.2]  # the input is not changed


@pytest.mark.parametrize("weight, seeds, codes", [
    (0.0, 3, [1, 1, 1]),   # off
    (1.0, 0, [1, 1, 1]),   # no seeds
    (1.0, 3, [0, 0, 0]),   # no sessions
    (1.0, 3, [1, 2, 3]),   # every seed alone in its session and no other candidate shares one
    (1.0, 3, [0, 1, 1]),   # the best hit was said in no session (a decision): nothing to complete
])
def test_session_support_leaves_the_scores_when_nothing_applies(weight, seeds, codes):
    scores = np.array([0.9, 0.5, 0.1])
    out = sessions.session_support(np.arange(3), scores, np.array(codes), weight, seeds)
    assert out.tolist() == scores.tolist()


def test_config_session_support_defaults_by_channel_and_is_checked_by_name():
    assert Config().session_support is None
    assert Config(session_support=1).session_support == 1
    p = retrieval._params_for(Config())
    assert (p.session_support, p.session_support_lexical) == (0.0, 4.0)
    p = retrieval._params_for(Config(session_support=0))
    assert (p.session_support, p.session_support_lexical) == (0.0, 0.0)
    for bad in (-1.0, float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match="session_support must be a finite number >= 0"):
            Config(session_support=bad)


def _garden_store(path, fillers: int) -> None:
    with Memory(path, embedder=None) as mem:
        mem.add(["Ana: the garden tomatoes are ripe", "Ben: tomatoes from the garden, great", "Ana: how was the match",
                 "Ben: we lost again", "Ana: too bad, next time",
                 "Ana: I did the watering this morning before the long walk with the dog"], user_id="u", session_id="1")
        mem.add(["Ben: my sister called", "Ana: the watering can", "Ben: see you at work"], user_id="u", session_id="2")
        for i in range(fillers):  # weak matches, each said alone: the lexical channel fills its 50 candidates
            mem.add([f"Cy: entry {i} of the community garden committee minutes, a long list of agenda items and other "
                     "business"], user_id="u", session_id=f"n{i}")


TARGET, OTHER = "Ana: I did the watering this morning before the long walk with the dog", "Ana: the watering can"


def test_search_session_support_lifts_the_turn_of_the_matching_session(tmp_path):
    """The garden and the tomatoes are talked about in the first conversation; its watering turn, long and three
    turns after them, matches the query less than the short watering turn of the other. With support it climbs
    above it; so do the first conversation's turns that match nothing (the cost of the mechanism)."""
    path = tmp_path / "m.db"
    _garden_store(path, 60)
    got = {}
    for w in (0.0, 2.0, None):
        with Memory(path, embedder=None, config=Config(session_support=w)) as mem:
            got[w] = [h.text for h in mem.search("garden tomatoes watering", top_k=8, user_id="u", reinforce=False)]
    assert got[0.0].index(OTHER) < got[0.0].index(TARGET)
    assert got[2.0].index(TARGET) < got[2.0].index(OTHER)
    assert got[2.0][:2] == got[0.0][:2]  # the best hits keep their places
    assert got[None].index(TARGET) < got[None].index(OTHER)  # the default without a model: on (weight 4)
    assert got[2.0].index("Ana: how was the match") < got[2.0].index(OTHER)


def test_search_session_support_leaves_a_store_whose_every_match_is_a_candidate(tmp_path):
    """As the second pass: when the lexical channel did not fill its depth, the first pass scored every match,
    and no turn that matched nothing may climb above one that did."""
    path = tmp_path / "m.db"
    _garden_store(path, 0)
    got = {}
    for w in (0.0, 4.0):
        with Memory(path, embedder=None, config=Config(session_support=w)) as mem:
            got[w] = [(h.id, h.score) for h in mem.search("garden tomatoes watering", top_k=8, user_id="u",
                                                          reinforce=False)]
    assert got[4.0] == got[0.0]


def test_search_session_support_default_is_off_with_the_semantic_channel(tmp_path, embedder):
    """The default (None) applies no support when the semantic channel runs: the same hits as weight 0."""
    path = tmp_path / "m.db"
    with Memory(path, embedder=embedder) as mem:
        mem.add(["Ana: the garden tomatoes are ripe", "Ben: tomatoes from the garden, great", "Ana: how was the match",
                 "Ana: I did the watering this morning before the long walk with the dog"], user_id="u", session_id="1")
        mem.add(["Ben: my sister called", "Ana: the watering can"], user_id="u", session_id="2")
        mem.flush()
    got = {}
    for w in (None, 0.0):
        with Memory(path, embedder=embedder, config=Config(session_support=w)) as mem:
            got[w] = [(h.id, round(h.score, 9)) for h in mem.search("garden tomatoes watering", top_k=6, user_id="u",
                                                                      reinforce=False)]
    assert got[None] == got[0.0]
