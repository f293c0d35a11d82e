"""A one-shot writer at the default configuration (a CLI ``record``/``add``: open, write, close) is
cheap: it neither loads nor rewrites the index files (one journal line per commit) and never loads
the model (the background worker's first start is deferred, and close cancels it); the next reader
still answers with every row, lexically at once, and ``flush`` still gets every vector.

Real parts: real SQLite files, the packaged MiniLM (``Memory(path)`` as users run it), fresh
processes for the one-shot writers."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from causalmem import Memory, sidecar

REPO = Path(__file__).resolve().parents[1]

WRITER = """
import json, sys
sys.path.insert(0, {repo!r})
from causalmem import Memory
import causalmem.view_embedding as _v; _v.WORKER_START_DELAY_S = _v.RESUME_DELAY_S = _v.CLOSE_DRAIN_S = 3600.0  # no wall-clock window
mem = Memory({db!r})  # the default: the model installed, background embedding
mem.record_decision({decision!r}, {outcome!r})
views = mem._views
mem.close()
emb = views.vector_view.resolved  # resolving is cheap; the model loads on the first encode
print(json.dumps({{"model_loaded": emb is not None and getattr(emb, "_sess", None) is not None,
                   "worker_started": views.embedding._worker is not None and views.embedding._worker._thread is not None,
                   "loaded_views": sorted(views.files.file_seq),
                   "tables": views.chunks is not None}}))
"""


def _one_shot(db: Path, decision: str, outcome: str) -> dict:
    code = WRITER.format(repo=str(REPO), db=str(db), decision=decision, outcome=outcome)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_one_shot_writers_touch_no_index_file_and_load_no_model(tmp_path):
    db = tmp_path / "agent.db"
    with Memory(db, embedder=None) as m:  # a store with index files
        m.record_many([(f"raised the cache size {i}", f"latency dropped {i}") for i in range(50)])
        m.search("cache latency", reinforce=False)
        m.search_causal("raised the cache size 3")  # builds the graph: all three files saved
    idx = Path(str(db) + ".idx")
    files = {f.name: f.stat().st_mtime_ns for f in idx.glob("*.cmx")}
    assert set(files) == {"chunks.cmx", "lexical.cmx", "projection.cmx"}
    for i in range(3):
        got = _one_shot(db, f"switched the queue to kafka {i}", f"consumer lag vanished {i}")
        assert got == {"model_loaded": False, "worker_started": False, "loaded_views": [], "tables": False}
    assert {f.name: f.stat().st_mtime_ns for f in idx.glob("*.cmx")} == files
    assert len((idx / sidecar.JOURNAL).read_bytes().splitlines()) == 3
    with Memory(db) as m:  # the reader: every write is there at once (lexical + graph)
        hits = m.search("kafka consumer lag", top_k=10, reinforce=False)
        assert {f"switched the queue to kafka {i}" for i in range(3)} <= {h.text for h in hits}
        assert m._views.files.caught_up is not None and m._projection.rebuilds == 0
        chain = m.search_causal("switched the queue to kafka 2")
        assert any("consumer lag vanished 2" in str(c) for c in chain)
        # the deferred start does not delay flush: every vector is there when it returns
        m.flush()
        missing = m._store.chunks_missing_embedding(m._views.embedder.model_name, limit=5)
        assert missing == []


def test_a_writer_that_stays_open_still_embeds_in_the_background(tmp_path):
    """The deferral only skips the model load of a process that closes at once: one that stays
    open gets its vectors without a flush."""
    import time

    db = tmp_path / "agent.db"
    with Memory(db) as m:
        m.record_decision("pinned the numpy version", "the build passed again")
        deadline = time.monotonic() + 120
        # the worker counts a batch after its commit: wait on its count, not on the table
        while m._views.embedding._worker is None or m._views.embedding._worker.embedded < 2:
            assert time.monotonic() < deadline, "no vectors after 120 s"
            time.sleep(0.2)
        assert m._store.chunks_missing_embedding(m._views.embedder.model_name, limit=1) == []
