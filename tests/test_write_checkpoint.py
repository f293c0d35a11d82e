"""Write-ahead log checkpoints off the write path: a commit that fills the log past
``CHECKPOINT_PAGES`` wakes a thread that checkpoints on its own connection; the writing connection
no longer copies the log into the file itself (its auto-checkpoint is only a far safety net).
Real SQLite files and a real writer process killed with SIGKILL while checkpoints run."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import rawdb

from causalmem import Memory
from causalmem.store import sqlite as S

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(rawdb.PG_MODE, reason="SQLite's write-ahead log")


def _batch(k: int, n: int = 1000) -> list[tuple[str, str]]:
    return [(f"b{k} we turned on setting {i}", f"b{k} the queue {i} drained") for i in range(n)]


def _wal_frames(db: Path) -> tuple[int, int]:
    """(frames in the log, frames of it already in the database file), read by a passive checkpoint
    of a connection of its own that copies nothing new: asked right after the background one finished."""
    con = sqlite3.connect(db)
    try:
        _busy, log, done = con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return log, done
    finally:
        con.close()


def test_the_log_is_checkpointed_by_the_thread_not_by_the_commit(tmp_path):
    db = tmp_path / "m.db"
    with Memory(db, embedder=None) as mem:
        store = mem._store
        assert store.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == S.AUTO_CHECKPOINT_PAGES
        ck = store._checkpointer
        runs = []
        real = ck._run

        def run():
            runs.append(threading.current_thread().name)
            real()

        ck._run = run  # type: ignore[method-assign]
        page = store.conn.execute("PRAGMA page_size").fetchone()[0]
        k = 0
        while os.path.getsize(str(db) + "-wal") < S.CHECKPOINT_PAGES * page:  # fill the log past the size
            assert ck._thread is None  # nothing asked for a checkpoint yet
            mem.record_many(_batch(k))
            k += 1
        deadline = time.monotonic() + 120
        while ck.done == 0:
            assert time.monotonic() < deadline, "the checkpointer never ran"
            time.sleep(0.01)
        assert runs == ["causalmem-checkpoint"]
        with ck.lock:  # no checkpoint in progress: the log is in the file up to its last frame
            log, done = _wal_frames(db)
        assert log > 0 and done == log
        n = len(mem.search_causal("b0 we turned on setting 7"))
        assert n == 1
    assert not os.path.exists(str(db) + "-wal")  # the last connection closed: log checkpointed and removed
    assert ck._thread is not None and not ck._thread.is_alive()
    assert not any(t.name == "causalmem-checkpoint" and t.is_alive() for t in threading.enumerate())


def test_compact_waits_for_a_checkpoint_in_progress(tmp_path):
    db = tmp_path / "m.db"
    with Memory(db, embedder=None) as mem:
        for k in range(3):
            mem.record_many(_batch(k, 300))
        store = mem._store
        ck = store._checkpointer
        ck.lock.acquire()  # a checkpoint "in progress"
        out = []
        th = threading.Thread(target=lambda: out.append(store.compact()))
        th.start()
        time.sleep(0.2)
        assert th.is_alive()  # compact waits for it instead of failing busy
        ck.lock.release()
        th.join(60)
        assert out == [True]


WRITER = textwrap.dedent("""
    import sys
    from causalmem import Memory
    path = sys.argv[1]
    mem = Memory(path, embedder=None)
    k = 0
    while True:
        mem.record_many([(f"b{k} decision {i}", f"b{k} outcome {i}") for i in range(2000)])
        print(k, mem._store._checkpointer.done, flush=True)  # batch k is committed
        k += 1
""")


@pytest.mark.parametrize("round_", range(4))
def test_sigkill_while_checkpoints_run_loses_nothing_committed(tmp_path, round_):
    db = tmp_path / "crash.db"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True, env=env)
    committed, checkpoints = -1, 0
    deadline = time.monotonic() + 120
    while (committed < 5 + round_ or checkpoints < 1) and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        committed, checkpoints = map(int, line.split())
    time.sleep(0.005 * round_)
    proc.send_signal(signal.SIGKILL)
    rest = proc.stdout.read()
    proc.wait()
    for line in rest.splitlines():
        committed = max(committed, int(line.split()[0]))
    assert checkpoints >= 1, "no background checkpoint ran before the kill"
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    n_edges = con.execute("SELECT COUNT(*) FROM edges").fetchone()[0]
    con.close()
    assert n_edges >= (committed + 1) * 2000 and n_edges % 2000 == 0  # every reported batch, none in part
    with Memory(db, embedder=None) as mem:
        assert [a.text for a in mem.search_causal("b0 decision 7")] == ["b0 outcome 7"]
