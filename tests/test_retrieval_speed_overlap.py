"""Search with the model: the query thread encodes the query and then searches the vector
index while the caller runs the lexical channel; a search handed over after the encode finished
(a caller slow to reach the hand-over) still runs on the query thread. Real model, real store."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from causalmem import Memory


@pytest.fixture
def store(tmp_path, embedder):
    mem = Memory(tmp_path / "m.db", embedder=embedder)
    mem.record_many([(f"decision {k}: restart the {w} service", f"the {w} service came back after {k} minutes")
                     for k, w in enumerate(["billing", "search", "auth", "mail", "queue", "cache"] * 6)])
    mem.flush()
    mem.search("warm up", reinforce=False)
    assert mem._views.wait_vectors(60)
    yield mem
    mem.close()


@pytest.mark.parametrize("late", [False, True])
def test_vector_search_runs_on_the_query_thread_even_when_offered_late(store, late):
    views = store._views
    views.query_cache.clear()
    pending = views.encode_query_later("which service came back after a restart")
    assert pending.future is not None  # a real encode on the query thread
    if late:
        pending.future.result()  # the encode finished before the hand-over
    ran_on: list[str] = []
    with views.lock:
        table, _ = views.tables()
        mask = table.scope_mask()

        def job(qv):
            ran_on.append(threading.current_thread().name)
            return views.vector_search(qv, 50, mask, on_query_thread=True)

        pending.offer(job)
        qvec = pending.result()
        assert pending.searched is not None and ran_on and ran_on[0].startswith("causalmem-query")
        want = views.vector_search(qvec[0], 50, mask)
    np.testing.assert_array_equal(pending.searched[0], want[0])
    np.testing.assert_array_equal(pending.searched[1], want[1])


def test_search_answers_the_same_with_a_late_hand_over(store, monkeypatch):
    """The search as users call it: the hand-over made after the encode finished gives the same hits."""
    from causalmem import views as views_mod

    views = store._views
    q = "the auth service came back"
    views.query_cache.clear()
    want = [(h.id, h.score) for h in store.search(q, reinforce=False)]
    offer = views_mod.PendingQuery.offer

    def late_offer(self, job):
        if self.future is not None:
            self.future.result()
        return offer(self, job)

    monkeypatch.setattr(views_mod.PendingQuery, "offer", late_offer)
    views.query_cache.clear()
    got = [(h.id, h.score) for h in store.search(q, reinforce=False)]
    assert got == want and got
