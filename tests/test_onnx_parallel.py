"""The ONNX encoder's batch path: sub-batches run in parallel on one single-threaded session.

Real parts only: the packaged all-MiniLM-L6-v2, a real export into a temporary cache directory, real
onnxruntime sessions. Nothing here is timed (speed is benchmarks/fast_defaults.py's job).
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the [onnx] extra is not installed")
pytest.importorskip("onnx", reason="the [onnx] extra is not installed")

from causalmem import onnx_embedder as oe  # noqa: E402
from causalmem.onnx_embedder import OnnxEmbedder  # noqa: E402
from causalmem.semantic import SentenceTransformerEmbedder  # noqa: E402

SUBJ = ["the deploy", "the nightly job", "the cache", "the payment service", "our on-call rotation"]
VERB = ["failed after", "recovered after", "was rolled back after", "ran out of memory during"]
OBJ = ["the kernel upgrade", "a spike in traffic that lasted most of the afternoon", "the schema change", "x"]
TEXTS = [f"{SUBJ[i % 5]} {VERB[i % 4]} {OBJ[(i // 3) % 4]} #{i}" + (" and then some more words" * (i % 7))
         for i in range(150)] + ["", "🙂", "x"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def int8(cache_dir):
    return OnnxEmbedder(precision="int8", cache_dir=cache_dir, threads=1)


def test_thread_count_never_changes_a_vector(cache_dir, int8):
    """A text's vector depends on its sub-batch only, not on how many run at once or which thread ran
    it: bit-identical for 1, 2 and 5 threads, and for a repeat of the same call."""
    one = int8.encode(TEXTS)
    for threads in (2, 5):
        emb = OnnxEmbedder(precision="int8", cache_dir=cache_dir, threads=threads)
        assert emb.parallel == threads
        np.testing.assert_array_equal(emb.encode(TEXTS), one)
        np.testing.assert_array_equal(emb.encode(TEXTS), one)
    assert OnnxEmbedder(precision="int8", cache_dir=cache_dir).parallel == oe.usable_cores() >= 1


def test_parallel_batches_agree_with_torch(cache_dir):
    """The parallel path (several sub-batches, threads > 1) keeps the quality bounds against torch."""
    ref = SentenceTransformerEmbedder().encode(TEXTS)
    for precision, lo, mean in (("fp32", 0.99, 0.999), ("int8", oe.INT8_MIN_COSINE, oe.INT8_MIN_MEAN_COSINE)):
        v = OnnxEmbedder(precision=precision, cache_dir=cache_dir, threads=3, batch_size=8).encode(TEXTS)
        cos = (v * ref).sum(axis=1)
        assert cos.min() >= lo and cos.mean() >= mean, (precision, cos.min(), cos.mean())
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)


def test_one_session_single_threaded_without_spinning(int8):
    """Batch and query calls share one session of one intra-op thread with no spinning pool (a spinning
    pool burned CPU that a shared machine's other processes needed, and every operator waited for its
    slowest thread)."""
    int8.encode(["warm"])
    assert int8._sess is int8._sess_one
    opts = int8._sess.get_session_options()
    assert opts.intra_op_num_threads == 1 and opts.inter_op_num_threads == 1
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_concurrent_callers_get_their_own_vectors(cache_dir):
    """Two threads encoding at once (the background worker and a search's query) on one embedder."""
    emb = OnnxEmbedder(precision="int8", cache_dir=cache_dir, threads=2)
    want_a, want_b = emb.encode(TEXTS[:100]), emb.encode(TEXTS[100:])
    got: dict[str, list[np.ndarray]] = {"a": [], "b": []}

    def run(key: str, texts: list[str]) -> None:
        for _ in range(3):
            got[key].append(emb.encode(texts))

    threads = [threading.Thread(target=run, args=("a", TEXTS[:100])), threading.Thread(target=run, args=("b", TEXTS[100:]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(got["a"]) == len(got["b"]) == 3
    for v in got["a"]:
        np.testing.assert_array_equal(v, want_a)
    for v in got["b"]:
        np.testing.assert_array_equal(v, want_b)


def test_a_failing_sub_batch_raises_in_the_caller(cache_dir, monkeypatch):
    """An error in a sub-batch run by a helper thread reaches the caller (no silent zero rows, no hang)."""
    emb = OnnxEmbedder(precision="int8", cache_dir=cache_dir, threads=2, batch_size=4)
    emb.encode(["warm"])
    real = emb._run
    calls = []

    def flaky(encs):
        calls.append(threading.current_thread().name)
        if len(calls) == 3:
            raise RuntimeError("sub-batch failed")
        return real(encs)

    monkeypatch.setattr(emb, "_run", flaky)
    with pytest.raises(RuntimeError, match="sub-batch failed"):
        emb.encode(TEXTS[:40])
    monkeypatch.setattr(emb, "_run", real)
    assert emb.encode(TEXTS[:40]).shape == (40, 384)  # the embedder still works afterwards
