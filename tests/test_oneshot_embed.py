"""Short-lived processes at the defaults get their vectors without a manual step (review R7).

A process that writes and closes within a second (a CLI call, a worker per request) never starts
its background worker (the start is deferred so that it never loads the model just to write). At
``close()`` it hands the queue to a detached ``causalmem embed`` — one at a time per store — and a
process whose model is loaded already embeds its own few rows itself. Real parts: a real SQLite
file, the packaged MiniLM (``Memory(path)`` as users run it), fresh processes for every writer and
reader, the real detached child.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from causalmem import Memory
from causalmem.embedding import LOCK_NAME, try_lock

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "CAUSALMEM_EMBED_HANDOFF": "1", "PYTHONPATH": str(REPO)}

WRITER = """
import json, sys, time
t0 = time.perf_counter()
from causalmem import Memory
t1 = time.perf_counter()
import causalmem.view_embedding as _v; _v.WORKER_START_DELAY_S = _v.RESUME_DELAY_S = _v.CLOSE_DRAIN_S = 3600.0  # no wall-clock window
mem = Memory({db!r})  # the default: the model installed, background embedding
{search}
for k in range(2):
    mem.record_decision("request {i} changed setting %d of the queue consumer" % k,
                        "request {i} saw the lag of consumer %d drop" % k)
views = mem._views
mem.close()
t2 = time.perf_counter()
emb = views.vector_view.resolved
print(json.dumps({{"model_loaded": emb is not None and (getattr(emb, "_sess", None) is not None
                                                       or getattr(emb, "_sess_one", None) is not None),
                   "write_s": t2 - t1, "import_s": t1 - t0}}))
"""

READER = """
import json
from causalmem import Memory
mem = Memory({db!r})
hits = mem.search("which setting of the queue consumer cut the lag", top_k=5, reinforce=False, explain=True)
out = {{"coverage": hits[0].signals["semantic_coverage"] if hits else None,
       "cosines": [h.signals["cosine"] for h in hits], "texts": [h.text for h in hits]}}
mem.close()
print(json.dumps(out))
"""


def _run(code: str) -> dict:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=ENV,
                       cwd=REPO)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _missing(db: Path) -> tuple[int, int]:
    """(chunks without a current vector, chunks), read without the model."""
    with Memory(db, embedder=None) as m:
        total, have = m._store.embedding_backlog("all-MiniLM-L6-v2")
    return total - have, total


def _wait_lock_free(db: Path, timeout: float) -> bool:
    """The detached embedder is gone once nobody holds the store's embed lock."""
    directory = Path(str(db) + ".idx")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fd = try_lock(directory)
        if fd is not None:
            os.close(fd)
            return True
        time.sleep(0.2)
    return False


def test_one_shot_writers_get_vectors_without_a_manual_step(tmp_path):
    """Four one-shot writers in a row (two memories each) never load the model; afterwards, with no
    flush or ``causalmem embed`` by anyone, every chunk gets its vector within a bounded time and a
    fresh reader's first search has the semantic channel over all of them."""
    db = tmp_path / "agent.db"
    writers = [_run(WRITER.format(db=str(db), i=i, search="")) for i in range(4)]
    assert not any(w["model_loaded"] for w in writers), writers
    assert (Path(str(db) + ".idx") / LOCK_NAME).exists()  # a child was handed the queue
    deadline = time.monotonic() + 240
    while _missing(db)[0]:
        assert time.monotonic() < deadline, f"still without vectors after 240 s: {_missing(db)}"
        time.sleep(0.5)
    assert _missing(db) == (0, 16)
    assert _wait_lock_free(db, 60), "the detached embedder did not exit"
    out = _run(READER.format(db=str(db)))
    assert out["coverage"] == {"with_vector": 16, "in_scope": 16, "fraction": 1.0}, out
    assert out["cosines"] and all(c is not None for c in out["cosines"]), out


def test_a_process_with_its_model_loaded_embeds_its_own_rows_at_close(tmp_path):
    """A process that searched with the model (so it is loaded) and then writes a few memories embeds
    them inside its close (bounded): they have vectors the moment close returns, and no child is
    started (the lock file never appears)."""
    db = tmp_path / "agent.db"
    with Memory(db) as m:
        m.record_decision("seeded a first decision", "and its outcome")
        m.flush()
    w = _run(WRITER.format(db=str(db), i=0, search='mem.search("warm the model up", reinforce=False)'))
    assert w["model_loaded"], w
    assert _missing(db) == (0, 6)
    assert not (Path(str(db) + ".idx") / LOCK_NAME).exists()


def test_while_one_embedder_runs_a_closing_writer_starts_none_and_nothing_is_lost(tmp_path, monkeypatch):
    """The lock is held (as by a running detached embedder): writers closing meanwhile start no child;
    the holder, once done, finds their rows when it looks at the queue again after releasing the lock."""
    from causalmem import view_embedding as views_mod
    from causalmem.embedding import LOCK_FD_ENV

    db = tmp_path / "agent.db"
    directory = Path(str(db) + ".idx")
    with Memory(db, embedder=None) as m:  # no worker here: only the writers below may not embed
        m.record_decision("first decision", "first outcome")
    fd = try_lock(directory)
    assert fd is not None
    for i in range(2):
        _run(WRITER.format(db=str(db), i=i, search=""))
    time.sleep(1.0)
    assert _missing(db) == (10, 10)  # nobody started: the lock is held
    # the holder: what a handed-off ``causalmem embed`` runs (the lock's descriptor in its environment)
    real = views_mod.embed_pending
    passes = []

    def first_pass_then_a_write(*a, **kw):
        n = real(*a, **kw)
        if not passes:  # rows committed after the holder's pass, before it released the lock
            _run(WRITER.format(db=str(db), i=9, search=""))  # finds the lock held: starts nobody
        passes.append(n)
        return n

    monkeypatch.setattr(views_mod, "embed_pending", first_pass_then_a_write)
    monkeypatch.setenv(LOCK_FD_ENV, str(fd))
    with Memory(db) as m:
        # a handed-off child starts no background worker of its own: none can take the late writer's rows
        # before the recheck does (it did under load before: n == 12, a resumed worker took 2)
        assert m._views.embedding.handoff_child
        n = m.reembed()
        assert m._views.embedding._worker is None
    assert passes == [10] and n == 14 and _missing(db) == (0, 14)
    assert _wait_lock_free(db, 5)
