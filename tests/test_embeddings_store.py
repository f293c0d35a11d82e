"""Vectors live in SQLite per model: computed once, never mixed across models, re-embedded on demand."""
from __future__ import annotations


import pytest

from causalmem import ConfigurationError, Memory
from toy_embedder import BagOfWordsEmbedder


class HashEmbedder(BagOfWordsEmbedder):
    """A deterministic bag-of-words embedder (a second, different vector space for the tests)."""

    model_name = "toy-hash-64"


def model_rows(mem):
    return dict(mem._store.query("SELECT model, COUNT(*) FROM embeddings GROUP BY model"))


def test_vectors_are_stored_and_not_recomputed(db_path):
    emb = HashEmbedder()
    with Memory(db_path, embedder=emb) as mem:
        mem.add(["the cat sat on the mat", "dogs chase cats"], user_id="u")
        mem.flush()  # vectors are computed by the background worker
        assert model_rows(mem) == {"toy-hash-64": 2}
        n = emb.texts
        hits = mem.search("cat mat", user_id="u", channels=("semantic",), reinforce=False)
        assert hits and hits[0].text == "the cat sat on the mat"
        assert emb.texts == n + 1  # only the query was encoded
    emb2 = HashEmbedder()
    with Memory(db_path, embedder=emb2) as mem:
        mem.search("cat", user_id="u", channels=("semantic",), reinforce=False)
        assert emb2.texts == 1  # vectors came from SQLite, not recomputed


def test_changed_model_never_mixes_spaces_and_reembed(db_path):
    with Memory(db_path, embedder="all-MiniLM-L6-v2") as mem:
        mem.add(["the server crashed at night", "I like pizza"], user_id="u")
        mem.flush()
        assert model_rows(mem) == {"all-MiniLM-L6-v2": 2}
    toy = HashEmbedder()
    with Memory(db_path, embedder=toy) as mem:
        assert mem.reembed() == 2
        assert model_rows(mem) == {"toy-hash-64": 2}  # one vector per chunk, in the current model's space
        assert mem.reembed() == 0  # nothing changed since
        hits = mem.search("pizza", user_id="u", channels=("semantic",), reinforce=False, explain=True)
        assert hits[0].text == "I like pizza"
        assert mem._vector_index().dim == 64  # only toy vectors are in the index


def test_update_reembeds_the_changed_text(db_path):
    emb = HashEmbedder()
    with Memory(db_path, embedder=emb) as mem:
        c = mem.add("alpha beta", user_id="u")[0]
        mem.search("alpha", user_id="u", channels=("semantic",), reinforce=False)
        mem.update(c.id, "gamma delta")
        mem.flush()  # the new text's vector comes from the background worker
        hits = mem.search("gamma", user_id="u", channels=("semantic",), reinforce=False)
        assert hits[0].id == c.id


def test_reembed_without_embedder_is_a_clear_error(db_path):
    with Memory(db_path, embedder=None) as mem:
        with pytest.raises(ConfigurationError, match="embedder"):
            mem.reembed()
