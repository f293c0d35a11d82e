"""A search never loads the query encoder while it holds the ``Memory`` lock.

A search encodes its query on the query thread while it holds the lock and runs the lexical
channel, then waits for that encode under the lock. When the single-query session is not loaded yet
(a process that waited for its vectors, as the framework adapters do, and then searches for the first
time) that wait was the session load: ~1 s at load 12, every writer thread of the process stalled
behind it (measured: writes stalled 1.2-1.9 s, 5-8 writes in the first search's time instead of
81-92). Now such a search encodes before it takes the lock. Real parts: a real SQLite file, the
packaged MiniLM.
"""
from __future__ import annotations

import threading

import pytest

from causalmem import Memory
from causalmem.embedding import query_encoder_ready


@pytest.fixture
def store(tmp_path):
    db = tmp_path / "agent.db"
    with Memory(db) as m:
        if m.embedder is None:
            pytest.skip("needs the packaged model")
        m.record_many([(f"changed setting {i} of the queue consumer", f"the lag of consumer {i} dropped")
                       for i in range(20)])
        m.flush()
    return db


def test_the_first_search_after_waiting_for_vectors_encodes_before_the_lock(store):
    with Memory(store) as mem:
        assert mem.wait_embedded(120)  # the vector index is loaded; the query encoder is not
        views = mem._views
        emb = mem.embedder
        assert views.vectors is not None and views.vectors.ready and len(views.vectors) == 40
        assert not query_encoder_ready(emb)
        seen = []
        real = views.encode_query

        def encode_query(q):  # where the encode runs, and whether that thread holds the Memory lock
            seen.append((threading.current_thread().name, views.lock._is_owned()))
            return real(q)

        views.encode_query = encode_query
        hits = mem.search("which setting cut the lag of the consumer", reinforce=False, explain=True)
        assert seen == [(threading.current_thread().name, False)]  # encoded here, before the lock
        assert hits and hits[0].signals["cosine"] is not None
        assert query_encoder_ready(emb)
        # from now on the encode overlaps the lexical channel on the query thread, as before
        later = views.encode_query_later("which other setting cut the lag")
        assert later.future is not None and later.result() is not None
        views.encode_query = real


def test_an_embedder_of_unknown_kind_counts_as_ready():
    class Plain:
        model_name, dim = "plain", 3

        def encode(self, texts):
            return [[1.0, 0.0, 0.0] for _ in texts]

    assert query_encoder_ready(Plain())
