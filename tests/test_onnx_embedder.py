"""The ONNX Runtime encoder against the torch (sentence-transformers) encoder of the same packaged model.

Real parts only: the packaged all-MiniLM-L6-v2 weights, a real export with torch.onnx into a
temporary cache directory, real onnxruntime sessions.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the [onnx] extra is not installed")
pytest.importorskip("onnx", reason="the [onnx] extra is not installed")

from causalmem import onnx_embedder as oe  # noqa: E402
from causalmem.onnx_embedder import INT8_MIN_COSINE, INT8_MIN_MEAN_COSINE, OnnxEmbedder, QueryVectorCache, export_onnx  # noqa: E402
from causalmem.semantic import SentenceTransformerEmbedder, _packaged_model_dir  # noqa: E402

SAMPLE = [
    "the deploy failed because the disk on the build host was full",
    "we rolled back the release after the error rate doubled",
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "Melanie: Wow, that's cool, Caroline! What happened that was so awesome?",
    "increase the connection pool size to 200",
    "database latency dropped from 40 ms to 8 ms",
    "the cat sat on the mat",
    "A man is playing a guitar on stage.",
    "Quarterly revenue grew 12% year over year, driven by cloud subscriptions.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "Remind me to call the dentist on Tuesday at 3pm",
    "user prefers dark mode and vim keybindings",
    "因为缓存失效，接口响应变慢了",
    "Der Zug hatte wegen eines Stellwerksausfalls 40 Minuten Verspätung.",
    "🙂 thanks!!",
    "",
    "x",
    "OOMKilled: container exceeded memory limit of 512Mi; pod restarted 7 times",
    "SELECT * FROM users WHERE id = 42; -- slow query, missing index on email",
    "She switched to a plant-based diet and her cholesterol went down within three months.",
    "The migration to Kubernetes cut our infrastructure bill by a third but doubled on-call pages.",
    "Jon: I lost my job as a banker yesterday, so I'm gonna take a shot at starting my own business.",
    "Gina: Sorry about your job Jon, but starting your own business sounds awesome!",
    "Took the kids to the beach last weekend [shares photo: a family standing on a sandy beach]",
    # longer than the model's 256-token window: both backends truncate the same way
    " ".join(["The incident review found that alerts were routed to an unmonitored channel"] * 40),
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def torch_vecs():
    return SentenceTransformerEmbedder().encode(SAMPLE)


@pytest.fixture(scope="module")
def fp32(cache_dir):
    return OnnxEmbedder(precision="fp32", cache_dir=cache_dir)


@pytest.fixture(scope="module")
def int8(cache_dir):
    return OnnxEmbedder(precision="int8", cache_dir=cache_dir)


def test_fp32_agrees_with_torch(fp32, torch_vecs):
    v = fp32.encode(SAMPLE)
    assert v.shape == (len(SAMPLE), 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    cos = (v * torch_vecs).sum(axis=1)
    assert cos.min() >= 0.99, cos
    assert fp32.model_name == SentenceTransformerEmbedder().model_name  # same model, vectors interchangeable


def test_int8_within_stated_bound(int8, torch_vecs):
    v = int8.encode(SAMPLE)
    cos = (v * torch_vecs).sum(axis=1)
    assert cos.min() >= INT8_MIN_COSINE, cos
    assert cos.mean() >= INT8_MIN_MEAN_COSINE, cos.mean()
    # quantisation keeps the geometry: pairwise similarities stay strongly correlated
    iu = np.triu_indices(len(SAMPLE), k=1)
    r = np.corrcoef((torch_vecs @ torch_vecs.T)[iu], (v @ v.T)[iu])[0, 1]
    assert r >= 0.97, r


def test_batch_composition_does_not_change_vectors(fp32):
    """Padding and length sorting must not leak into a text's vector."""
    together = fp32.encode(SAMPLE)
    alone = np.vstack([fp32.encode([t]) for t in SAMPLE])
    np.testing.assert_allclose(together, alone, atol=2e-5)
    small = OnnxEmbedder(precision="fp32", cache_dir=fp32.cache_dir, batch_size=3)
    np.testing.assert_allclose(small.encode(SAMPLE[::-1])[::-1], together, atol=2e-5)


def test_export_is_cached_and_keyed(cache_dir, fp32, int8, monkeypatch):
    fp32.encode(["warm"])
    int8.encode(["warm"])
    path = export_onnx(_packaged_model_dir(), "fp32", cache_dir)
    assert path == fp32.graph_path and path.is_file()
    mtime = os.stat(path).st_mtime_ns
    calls = []
    monkeypatch.setattr(oe, "_export_raw", lambda *a: calls.append(a))
    again = export_onnx(_packaged_model_dir(), "fp32", cache_dir)
    assert again == path and os.stat(again).st_mtime_ns == mtime and calls == []  # no second export
    # another onnxruntime version -> another key -> another folder (a stale graph is never reused)
    real = oe._version
    monkeypatch.setattr(oe, "_version", lambda m: "0.0-test" if m == "onnxruntime" else real(m))
    assert oe._export_key(_packaged_model_dir()) != path.parent.name
    # no leftovers of the atomic writes
    assert sorted(p.name for p in path.parent.iterdir()) == ["model-fp32.onnx", "model-int8.onnx"]


def test_bad_arguments(cache_dir, fp32):
    with pytest.raises(ValueError, match="precision"):
        OnnxEmbedder(precision="fp16", cache_dir=cache_dir)
    with pytest.raises(ValueError, match="batch_size"):
        OnnxEmbedder(batch_size=0, cache_dir=cache_dir)
    with pytest.raises(ValueError, match="threads"):
        OnnxEmbedder(threads=-1, cache_dir=cache_dir)
    with pytest.raises(ValueError, match="model"):
        OnnxEmbedder("some-hub-name/that-is-not-local", cache_dir=cache_dir)
    with pytest.raises(TypeError, match="sequence of strings"):
        fp32.encode("one string")
    with pytest.raises(TypeError, match=r"texts\[1\] must be a string, got int"):
        fp32.encode(["ok", 3])
    with pytest.raises(ValueError, match="precision"):
        export_onnx(_packaged_model_dir(), "int4", cache_dir)
    with pytest.raises(ValueError, match="model_dir"):
        export_onnx(cache_dir, "fp32", cache_dir)
    assert fp32.encode([]).shape == (0, 384)


def test_query_vector_cache(fp32):
    cache = QueryVectorCache(maxsize=2)
    a = cache.get(fp32, "disk full")
    assert cache.misses == 1 and cache.hits == 0
    assert cache.get(fp32, "disk full") is a and cache.hits == 1
    np.testing.assert_allclose(a, fp32.encode(["disk full"])[0], atol=1e-6)
    assert not a.flags.writeable
    cache.get(fp32, "b")
    cache.get(fp32, "disk full")  # refresh: "b" is now the least recently used
    cache.get(fp32, "c")
    assert len(cache) == 2
    cache.get(fp32, "disk full")
    assert cache.hits == 3
    cache.get(fp32, "b")
    assert cache.misses == 4  # "b" had been evicted
    off = QueryVectorCache(maxsize=0)
    off.get(fp32, "x")
    assert len(off) == 0
    with pytest.raises(ValueError, match="maxsize"):
        QueryVectorCache(maxsize=-1)
    with pytest.raises(TypeError, match="text"):
        cache.get(fp32, 5)
