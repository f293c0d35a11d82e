"""The second pass (pseudo-relevance feedback, ``retrieval._second_pass``) in a small store and a larger one.

In a handful of memories every lexical match of a query is a candidate of the first pass already; the
feedback hits are then simply all the matches, the weak ones included, and a word only a weak match has
used to lift it by the pass's full weight above the memory whose text IS the query. The pass now runs only
when the scope has more lexical matches than the first pass takes as candidates; where it runs it still lifts
a memory that shares no query word but the best hits' distinctive words. Both on SQLite and, in the suite's
PostgreSQL run (``CAUSALMEM_TEST_BACKEND=postgres``), on PostgreSQL: every store here is opened by path.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from causalmem import Memory, retrieval

NO_PASS = replace(retrieval.PARAMS, prf_terms=0)


def _ids(mem, query, params=None, **kw):
    hits = retrieval.search(mem._views, query, reinforce=False, params=params, **kw)
    return [h.id for h in hits]


def test_exact_text_ranks_first_in_a_small_store(db_path, clock):
    """The repro: the decision whose text is the query ranked second, under a weaker match lifted by the
    only word not in the query ("restart", from that weaker match)."""
    with Memory(db_path, embedder=None, clock=clock) as mem:
        mem.record_decision("restart the worker pool", "queue drained but jobs were lost", task_tag="ops")
        mem.record_decision("scale the worker pool out", "queue drained and no jobs lost", task_tag="ops")
        hits = mem.search("scale the worker pool out", top_k=4, explain=True)
        assert hits[0].text == "scale the worker pool out"
        score = {h.text: h.score for h in hits}
        assert score["restart the worker pool"] < score["scale the worker pool out"]
        # nothing was added to the weaker match: its score is its first-pass score
        assert _ids(mem, "scale the worker pool out", top_k=4) == _ids(mem, "scale the worker pool out", NO_PASS,
                                                                       top_k=4)
        assert score["restart the worker pool"] == pytest.approx(
            next(h.score for h in retrieval.search(mem._views, "scale the worker pool out", top_k=4, reinforce=False,
                                                   params=NO_PASS) if h.text == "restart the worker pool"))


@pytest.mark.parametrize("weak", ["restart and flush the worker pool after draining",
                                  "restart flush drain reboot the worker pool nightly"])
def test_exact_text_first_whatever_the_weaker_match_adds(db_path, clock, weak):
    """More words only the weaker match has: before, its words (here "drain") lifted the exact decision's
    outcome, a graph neighbour, above the exact text."""
    with Memory(db_path, embedder=None, clock=clock) as mem:
        mem.record_decision(weak, "queue drained but jobs were lost", task_tag="ops")
        mem.record_decision("scale the worker pool out", "queue drained and no jobs lost", task_tag="ops")
        hits = mem.search("scale the worker pool out", top_k=4)
        assert hits[0].text == "scale the worker pool out"


def _larger_store(mem, n_filler: int):
    """Two equally strong matches of the query, each followed in its session by a turn that shares no query
    word: after the tahoe one, a turn about tahoe kayaking (the answer); after the river one, a dentist visit
    (the decoy, added first so that it wins a tie on id). ``n_filler`` weak matches ("trip" and many words)."""
    q = "where was the cabin booked for the trip"
    river, decoy = mem.add(["booked the cabin for the trip river fishing", "dentist visit boring afternoon"],
                           user_id="u", session_id="river")
    tahoe, answer = mem.add(["booked the cabin for the trip tahoe kayaking", "tahoe kayaking freezing water"],
                            user_id="u", session_id="tahoe")
    for i in range(n_filler):
        mem.add(f"trip log entry {i} written down later with plenty of other words", user_id="u",
                session_id=f"log{i}")
    return q, river, decoy, tahoe, answer


def test_second_pass_still_lifts_a_turn_sharing_the_best_hits_words_in_a_larger_store(db_path, clock):
    """60 more matches than the best hits: the pass runs, and of the two graph neighbours of the two best
    hits (equal graph bonus, no query word) the one sharing the best hits' rare words ranks first."""
    with Memory(db_path, embedder=None, clock=clock) as mem:
        q, river, decoy, tahoe, answer = _larger_store(mem, 60)
        lex_ids, _ = mem._views.tables()[1].search(q, top_k=10_000, allowed=None)
        assert len(lex_ids) > retrieval.PARAMS.candidates  # more matches than the first pass's candidates
        got = [h.id for h in mem.search(q, top_k=6, user_id="u", reinforce=False)]
        assert answer.id in got and decoy.id in got
        assert got.index(answer.id) < got.index(decoy.id)
        without = _ids(mem, q, NO_PASS, top_k=6, user_id="u")
        assert without.index(decoy.id) < without.index(answer.id)  # the tie goes to the lower id without the pass
        score = {h.id: h.score for h in mem.search(q, top_k=6, user_id="u", reinforce=False)}
        base = {h.id: h.score for h in retrieval.search(mem._views, q, top_k=6, user_id="u", reinforce=False,
                                                        params=NO_PASS)}
        assert score[answer.id] > base[answer.id]  # the pass's boost
        assert score[decoy.id] == pytest.approx(base[decoy.id])


def test_no_second_pass_when_every_match_is_a_candidate(db_path, clock):
    """The same store with 10 weak matches instead of 60: every match is a candidate of the first pass, so
    the feedback hits would be all the matches there are; the pass does not run (scores = without it)."""
    with Memory(db_path, embedder=None, clock=clock) as mem:
        q, river, decoy, tahoe, answer = _larger_store(mem, 10)
        got = {h.id: h.score for h in mem.search(q, top_k=20, user_id="u", reinforce=False)}
        base = {h.id: h.score for h in retrieval.search(mem._views, q, top_k=20, user_id="u", reinforce=False,
                                                        params=NO_PASS)}
        assert got == base
