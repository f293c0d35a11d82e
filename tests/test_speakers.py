"""The speaker match: a query naming a speaker favours what that speaker said (off by default)."""
from __future__ import annotations

import numpy as np
import pytest

from causalmem import Memory, speakers
from causalmem.config import Config


def test_speaker_of_reads_the_name_prefix_the_engine_writes():
    assert speakers.speaker_of("Melanie: I painted a lake") == "Melanie"
    assert speakers.speaker_of("Dr. Ana Lima: see you") == "Dr. Ana Lima"
    assert speakers.speaker_of("no speaker here") is None
    assert speakers.speaker_of("time 10:30 is late") is None  # no space after the colon
    with pytest.raises(TypeError, match="text must be a string"):
        speakers.speaker_of(None)  # type: ignore[arg-type]


def test_named_speakers_by_first_word_full_name_and_possessive():
    pool = {"Melanie", "Caroline", "Ana Lima"}
    assert speakers.named_speakers("What did Melanie paint?", pool) == {"Melanie"}
    assert speakers.named_speakers("Where is Melanie's studio?", pool) == {"Melanie"}
    assert speakers.named_speakers("Where is Melanie\u2019s studio?", pool) == {"Melanie"}
    assert speakers.named_speakers("what does ana lima teach?", pool) == {"Ana Lima"}
    assert speakers.named_speakers("Does Ana teach?", pool) == {"Ana Lima"}
    assert speakers.named_speakers("Did Caroline and Melanie meet?", pool) == {"Caroline", "Melanie"}
    assert speakers.named_speakers("What was painted?", pool) == set()
    assert speakers.named_speakers("Who is Mel?", pool) == set()  # a prefix of a name is not the name


def test_speaker_match_multiplies_only_the_named_speakers_candidates():
    nids = np.array([10, 11, 12, 13])
    scores = np.array([1.0, 0.9, 0.8, 0.7])
    texts = [(10, "Caroline: paint"), (11, "Melanie: paint"), (12, "Caroline: lake"), (13, "a note")]
    out = speakers.speaker_match(nids, scores, texts, "What does Melanie paint?", 0.5)
    assert out.tolist() == pytest.approx([1.0, 1.35, 0.8, 0.7])
    assert scores.tolist() == [1.0, 0.9, 0.8, 0.7]  # the input is not changed
    # naming every speaker of the pool, or none, or weight 0: nothing changes
    for q, w in (("Did Caroline tell Melanie?", 0.5), ("What was painted?", 0.5), ("What does Melanie paint?", 0.0)):
        assert speakers.speaker_match(nids, scores, texts, q, w).tolist() == scores.tolist()
    # one speaker in the pool: nothing to tell apart
    one = [(10, "Melanie: a"), (11, "Melanie: b")]
    assert speakers.speaker_match(nids[:2], scores[:2], one, "Melanie?", 0.5).tolist() == [1.0, 0.9]


TURNS = [
    ("Caroline", "Melanie, you should paint sunsets with me, I paint them every weekend."),
    ("Melanie", "Last week I finished a watercolour of the lake near our cabin."),
    ("Caroline", "I love to paint, it calms me down after work."),
    ("Melanie", "My kids and I went camping in the mountains."),
    ("Caroline", "The support group meets on Tuesdays."),
    ("Melanie", "Pottery class is my new favourite thing."),
]


def _store(path, embedder):
    with Memory(path, embedder=embedder) as mem:
        for k, (who, text) in enumerate(TURNS):
            mem.add([{"speaker": who, "text": text}], user_id="u", session_id=str(k // 2 + 1))
        mem.flush()


@pytest.mark.parametrize("channels", [("lexical", "semantic", "graph"), ("lexical", "graph")])
def test_search_speaker_match_puts_the_named_speakers_turn_first(tmp_path, embedder, channels):
    path = tmp_path / "m.db"
    _store(path, embedder)
    q = "What did Melanie paint?"
    with Memory(path, embedder=embedder) as mem:
        off = mem.search(q, top_k=3, user_id="u", channels=channels, reinforce=False)
    with Memory(path, embedder=embedder, config=Config(speaker_match=1.0)) as mem:
        on = mem.search(q, top_k=3, user_id="u", channels=channels, reinforce=False)
        none = mem.search("Who should paint sunsets?", top_k=3, user_id="u", channels=channels, reinforce=False)
    with Memory(path, embedder=embedder) as mem:
        none_off = mem.search("Who should paint sunsets?", top_k=3, user_id="u", channels=channels, reinforce=False)
    assert off[0].text.startswith("Caroline:")  # without the match the other speaker's "paint" wins
    assert on[0].text == "Melanie: " + TURNS[1][1]
    assert [h.id for h in none] == [h.id for h in none_off]  # a query naming no speaker: the same hits


def test_config_speaker_match_is_off_by_default():
    assert Config().speaker_match == 0.0
