"""The blend's semantic signal: cosines measured from the candidates' mean vector.

Real MiniLM (the packaged offline model), real SQLite-backed ``Memory``. These pin the mechanism, not
a benchmark figure: the score is the cosine of (query - mean) and (candidate - mean) over the
candidate pool; what every candidate shares (here: the speaker's name, the chat register) stops
ranking content-free turns; a pool too small to estimate the mean keeps raw cosines.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from causalmem import Memory, retrieval

TURNS = [
    ("Jon", "Hey Gina, long time no see! How have you been?"),
    ("Gina", "Busy as always. The shop keeps me on my toes, but sales picked up this month."),
    ("Jon", "That's great to hear!"),
    ("Gina", "What about you? Any news?"),
    ("Jon", "Took a short trip last week to Rome to clear my head before signing the lease for the studio."),
    ("Gina", "Rome sounds lovely. Did you get to see the Colosseum?"),
    ("Jon", "Yeah, it was amazing."),
    ("Jon", "What gave you the idea?"),
    ("Gina", "I wanted a logo that feels handmade, so I sketched it myself."),
    ("Jon", "Ha ha, yeah, just doing it!"),
    ("Jon", "Thanks for having my back."),
    ("Gina", "Always. Let me know when the studio opens."),
    ("Jon", "I'm going for my dreams!"),
    ("Gina", "My cousin is getting married in June, so I'll be travelling a lot."),
    ("Jon", "Let's keep going and chase our dreams!"),
    ("Gina", "I adopted a cat from the shelter, her name is Pepper."),
    ("Jon", "Your help matters to me."),
    ("Gina", "The new winter collection sold out in two days."),
    ("Jon", "Cool, keep me posted!"),
    ("Gina", "I'm taking a pottery class on Thursdays to unwind."),
    ("Jon", "Sounds fun."),
    ("Gina", "Have you found dancers for the opening show yet?"),
    ("Jon", "Not yet, still holding auditions next weekend."),
    ("Jon", "Thanks, talk soon!"),
]
# more of the same two people's chat on other subjects: a scope larger than one search's candidates
TOPICS = ["the farmers market", "a jazz concert", "the new bakery downtown", "a hiking trail up north",
          "the football match", "my sister's garden", "a cooking class", "the science museum",
          "a bike repair shop", "the city library", "a board game night", "the beach cleanup",
          "a photography workshop", "the chess club", "a vintage car show"]
TURNS += [(("Gina", "Jon")[k % 2], f"Last {day} I went to {topic} and it was {mood}.")
          for k, (day, topic, mood) in enumerate(
              (d, t, m) for t in TOPICS for d, m in (("Saturday", "packed"), ("Sunday", "quiet")))]
RAW = replace(retrieval.PARAMS, centre=False)  # the blend before centring: raw cosine, weight 2
SEM = ("semantic",)


@pytest.fixture
def chat(embedder, tmp_path):
    with Memory(tmp_path / "chat.db", embedder=embedder) as mem:
        mem.add([{"speaker": s, "text": t} for s, t in TURNS], user_id="u", session_id="1")
        mem.flush()
        yield mem


def _search(mem, query, params, **kw):
    return retrieval.search(mem._views, query, top_k=kw.pop("top_k", 10), user_id="u", reinforce=False,
                            params=params, explain=True, **kw)


def test_score_is_the_cosine_from_the_candidates_mean(chat):
    assert retrieval.PARAMS.centre and len(TURNS) >= retrieval.PARAMS.candidates >= retrieval.PARAMS.centre_min
    q = "What did Jon take a trip to Rome for?"
    hits = _search(chat, q, retrieval.PARAMS, channels=SEM, top_k=20)  # depth: max(candidates, 2 x top_k)
    views = chat._views
    # semantic only: the pool is the semantic channel's ``candidates`` best, scored alone
    nids = np.flatnonzero(views.tables()[0].scope_mask(user_id="u"))
    have, mat = views.vectors_of(nids)
    assert len(have) == len(TURNS)
    pool_ids, _ = views.vector_search(views.encode_query(q)[0], retrieval.PARAMS.candidates, None)
    in_pool = np.isin(have, pool_ids)
    assert in_pool.sum() == retrieval.PARAMS.candidates
    mean = mat[in_pool].astype(np.float64).mean(axis=0)
    qv = views.encode_query(q)[0].astype(np.float64)
    qv /= np.linalg.norm(qv)
    qc = qv - mean
    d = mat.astype(np.float64) - mean
    cc = (d @ qc) / (np.linalg.norm(d, axis=1) * np.linalg.norm(qc))
    ref = np.sort(cc[in_pool])[0]  # energy starts at the ``candidates``-th best: here the pool's worst
    nid_of = {int(n): k for k, n in enumerate(have.tolist())}
    assert hits and all(views.store.nid_of(h.id) in set(pool_ids.tolist()) for h in hits)
    for h in hits:
        k = nid_of[views.store.nid_of(h.id)]
        assert h.score == pytest.approx(max(cc[k] - ref, 0.0), abs=1e-5)
        # explain still reports the raw cosine
        assert h.signals["cosine"] == pytest.approx(float(mat[k].astype(np.float64) @ qv), abs=1e-5)
    assert hits[0].text.endswith(TURNS[4][1])


def test_centring_ranks_topic_above_speaker(chat):
    """Raw cosines rank several of the asker's content-free turns (their name is most of the text) above the
    other speaker's reply on the same topic; measured from the pool's mean, the topic wins over the name."""
    q = "What did Jon take a trip to Rome for?"
    answer, reply = TURNS[4][1], TURNS[5][1]
    filler = {t for s, t in TURNS if s == "Jon" and len(t) < 30}

    def ranks(params):
        return [h.text.split(": ", 1)[1] for h in _search(chat, q, params, channels=SEM, top_k=20)]

    raw, centred = ranks(RAW), ranks(retrieval.PARAMS)
    assert raw[0] == answer and centred[0] == answer

    def filler_above_reply(ranked):
        stop = ranked.index(reply) if reply in ranked else len(ranked)
        return sum(1 for f in filler if f in ranked[:stop])

    assert filler_above_reply(raw) >= 3
    assert filler_above_reply(centred) <= 1


def test_answer_stands_further_apart_from_filler(chat):
    """The gap between the answer and the best content-free turn grows relative to the score scale."""
    q = "What pet did Gina adopt?"
    answer = TURNS[15][1]

    def gap(params):
        hits = _search(chat, q, params, channels=SEM)
        top = hits[0]
        assert top.text.endswith(answer)
        second = hits[1].score
        return (top.score - second) / top.score

    assert gap(retrieval.PARAMS) > gap(RAW)


def test_small_pool_keeps_raw_cosines(embedder, tmp_path):
    """Fewer than ``centre_min`` candidates with a vector: the mean would be mostly the candidates
    themselves, so the blend uses raw cosines (as with ``centre=False``)."""
    with Memory(tmp_path / "small.db", embedder=embedder) as mem:
        mem.add(["The database server ran out of disk space overnight.", "We adopted a puppy named Biscuit.",
                 "My favourite food is spicy ramen."], user_id="u", session_id="s")
        mem.flush()
        assert retrieval.PARAMS.raw_weight * retrieval.PARAMS.blend_vec == 2.0  # the weight before centring
        for q in ("storage full on the DB machine", "dog"):
            a = _search(mem, q, retrieval.PARAMS)
            b = _search(mem, q, RAW)
            assert [h.id for h in a] == [h.id for h in b]
            assert [h.score for h in a] == pytest.approx([h.score for h in b])
            assert a[0].signals["cosine"] is not None


def test_vectors_of_matches_the_index(chat):
    views = chat._views
    nids = np.flatnonzero(views.tables()[0].scope_mask(user_id="u"))
    have, mat = views.vectors_of(list(nids[::-1]) + [10 ** 9])  # an id with no vector is left out
    assert list(have) == list(nids[::-1])
    for n, v in zip(have.tolist(), mat):
        assert np.allclose(v, views.vectors.get(n))
        assert np.linalg.norm(v) == pytest.approx(1.0, abs=1e-4)
