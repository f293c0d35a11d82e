"""Entity words, the entity hop, and the hop inside ``search`` (off by default)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from causalmem import Memory, entities, retrieval
from causalmem.lexical import BM25Index


def test_entity_words_skip_sentence_starts_and_speaker_prefix():
    text = "Caroline: Thanks, Melanie! This necklace is from my home country, Sweden. I moved 4 years ago."
    assert entities.entity_words(text) == ["Melanie", "Sweden", "4"]
    assert entities.entity_words("Hey there. Oh I see") == []
    with pytest.raises(TypeError, match="text must be a string"):
        entities.entity_words(None)  # type: ignore[arg-type]


def _index(texts: list[str]) -> BM25Index:
    idx = BM25Index()
    for k, t in enumerate(texts):
        idx.add(k, t)
    return idx


def test_entity_hop_sums_over_seeds_and_skips_the_seed_itself():
    texts = ["we drove to Lisbon and Porto", "then Lisbon again", "spring in Porto", "a Lisbon and Porto trip",
             "nothing here", *[f"filler {k}" for k in range(200)]]
    idx = _index(texts)
    mask = np.ones(len(texts), bool)
    seeds = [1, 2]  # seed 1 names Lisbon, seed 2 names Porto
    terms = [entities.entity_terms(texts[s], idx.tokenizer) for s in seeds]
    ids, reach = entities.entity_hop(seeds, terms, [1.0, 0.5], [], idx, mask, 50, 0.05)
    got = dict(zip(ids.tolist(), reach.tolist()))
    assert got[0] == pytest.approx(1.5) and got[3] == pytest.approx(1.5)  # reached from both seeds
    assert 1 not in got and 2 not in got and 4 not in got  # a seed does not reach itself
    ids, reach = entities.entity_hop(seeds, terms, [1.0, 0.5], [], idx, mask, 50, 0.05, combine="max")
    assert dict(zip(ids.tolist(), reach.tolist()))[0] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="combine must be"):
        entities.entity_hop(seeds, terms, [1.0, 0.5], [], idx, mask, 50, 0.05, combine="mean")
    # a query term is not followed (BM25 scored it already); nor a term too common in the store
    ids, _ = entities.entity_hop(seeds, terms, [1.0, 0.5], ["lisbon", "porto"], idx, mask, 50, 0.05)
    assert len(ids) == 0
    ids, _ = entities.entity_hop(seeds, terms, [1.0, 0.5], [], idx, mask, 50, 0.001)
    assert len(ids) == 0


def test_search_entity_hop_brings_in_a_memory_sharing_only_an_entity(tmp_path):
    with Memory(tmp_path / "m.db", embedder=None) as mem:
        mem.add("Jon: I booked the ferry to Texel for the photography workshop.", user_id="u", session_id="1")
        for k in range(60):
            mem.add(f"Jon: the weather note {k} was grey and cold today", user_id="u", session_id=str(k + 2))
        target = mem.add("Gina: Texel has the best dunes, bring a wide lens.", user_id="u", session_id="99")[0]
        mem.flush()
        q = "Where is Jon's photography workshop?"
        off = [h.id for h in mem.search(q, top_k=3, user_id="u", channels=("lexical", "graph"), reinforce=False)]
        params = replace(retrieval.PARAMS, entity_hop=1.0, entity_max_df=0.05)  # "texel": 2 of 62 docs
        on = [h.id for h in retrieval.search(mem._views, q, top_k=3, user_id="u", channels=("lexical", "graph"),
                                             reinforce=False, params=params)]
    assert target.id not in off  # shares no query word
    assert target.id in on       # reached through "Texel", named by the best hit
