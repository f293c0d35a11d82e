"""No thread of a ``Memory`` outlives its ``close()``, with the packaged model on (the default
``embedder="auto"``): the ONNX embedder's helper threads, started by an encode of several sub-batches,
are stopped at close (found by ``benchmarks/soak.py``: one ``causalmem-onnx_0`` thread per reopen
stayed alive after close when something still referenced the closed memory's embedder)."""
from __future__ import annotations

import gc
import threading

import pytest

from causalmem import Memory

pytest.importorskip("onnxruntime")


def _ours() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("causalmem"))


@pytest.mark.timeout(300)
def test_the_embedders_helper_threads_stop_at_close(db_path):
    before = _ours()
    held = []
    for round_ in range(2):
        m = Memory(db_path)  # the default: the packaged model through ONNX Runtime
        emb = m._views.embedder
        if emb is None or not hasattr(emb, "stop_helpers"):
            pytest.skip(f"the default embedder here is {emb!r}, not the ONNX one")
        # enough texts for several sub-batches, so the encode starts its helper threads
        m.add([f"note {round_}-{i}: the deploy of service {i} changed cache settings" for i in range(3 * emb.batch_size)],
              user_id="u", link=False)
        m.flush()
        assert any(name.startswith("causalmem-onnx") for name in _ours())
        m.close()
        held.append(emb)  # a reference that outlives the memory (as a user's or a cache's would)
        gc.collect()
        assert _ours() == before, f"after close {round_ + 1}: {_ours()} (before: {before})"
    # the embedder still works after its memory closed (helpers start again on demand)
    assert held[0].encode([f"text {i}" for i in range(3 * held[0].batch_size)]).shape[0] == 3 * held[0].batch_size
    held[0].stop_helpers()
