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


def _wal_size(db: Path) -> int:
    return os.path.getsize(str(db) + "-wal")


def _fill_past_the_threshold(mem: Memory, db: Path, page: int, k: int = 0) -> int:
    """1,000-pair batches until the log holds ``CHECKPOINT_PAGES``; the next batch number."""
    while _wal_size(db) < S.CHECKPOINT_PAGES * page:
        mem.record_many(_batch(k))
        k += 1
    return k


def _wait_for(ck, n: int) -> None:
    """Until the checkpointer has finished ``n`` checkpoints (the deadline only guards a hang)."""
    deadline = time.monotonic() + 120
    while ck.done < n:
        assert time.monotonic() < deadline, f"the checkpointer ran {ck.done} checkpoints, not {n}"
        time.sleep(0.01)
    with ck.lock:  # and is not in the middle of another one
        pass


def test_the_log_is_checkpointed_by_the_thread_not_by_the_commit(tmp_path):
    db = tmp_path / "m.db"
    with Memory(db, embedder=None) as mem:
        store = mem._store
        assert store.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == S.AUTO_CHECKPOINT_PAGES
        ck = store._checkpointer
        runs = []
        real = ck._run
        go = threading.Event()  # the thread's checkpoint waits until the file size was read

        def run():
            runs.append(threading.current_thread().name)
            assert go.wait(120), "the test never let the checkpoint run"
            real()

        ck._run = run  # type: ignore[method-assign]
        page = store.conn.execute("PRAGMA page_size").fetchone()[0]
        file_before = os.path.getsize(db)
        k = 0
        while _wal_size(db) < S.CHECKPOINT_PAGES * page:  # fill the log past the size
            assert ck._thread is None  # nothing asked for a checkpoint yet
            mem.record_many(_batch(k))
            k += 1
        # the commits copied nothing into the database file themselves (the last one woke the
        # thread, whose checkpoint would copy the log at any moment from here: it waits for ``go``)
        assert os.path.getsize(db) == file_before
        go.set()
        _wait_for(ck, 1)
        assert runs == ["causalmem-checkpoint"]
        # the thread's own checkpoint copied the whole log (the writer is idle, no reader holds a
        # snapshot) into the database file, which now holds the batches' pages
        _busy, log, done = ck.last
        assert log >= S.CHECKPOINT_PAGES and done == log
        assert os.path.getsize(db) >= file_before + S.CHECKPOINT_PAGES * page // 2
        n = len(mem.search_causal("b0 we turned on setting 7"))
        assert n == 1
    assert not os.path.exists(str(db) + "-wal")  # the last connection closed: log checkpointed and removed
    assert ck._thread is not None and not ck._thread.is_alive()
    assert not any(t.name == "causalmem-checkpoint" and t.is_alive() for t in threading.enumerate())
    with sqlite3.connect(db) as con:  # nothing lost
        assert con.execute("SELECT COUNT(*) FROM edges").fetchone()[0] == 1000 * k


def test_after_a_checkpoint_the_next_commit_restarts_the_log_truncated(tmp_path):
    """The -wal file stays bounded while writes go on: each finished background checkpoint lets the
    next commit start the log again from its beginning, and ``journal_size_limit 0`` cuts the file
    to what that commit wrote (a checkpointer that copies nothing leaves it growing; without the
    limit the file keeps its high-water size)."""
    db = tmp_path / "m.db"
    with Memory(db, embedder=None) as mem:
        ck = mem._store._checkpointer
        page = mem._store.conn.execute("PRAGMA page_size").fetchone()[0]
        k = 0
        for round_ in range(3):
            k = _fill_past_the_threshold(mem, db, page, k)
            assert _wal_size(db) >= S.CHECKPOINT_PAGES * page
            _wait_for(ck, round_ + 1)
            mem.record_decision(f"round {round_} small decision", f"round {round_} small outcome")
            assert _wal_size(db) < 100 * page, (round_, _wal_size(db) // page)
        assert ck.done == 3
        assert [a.text for a in mem.search_causal("b0 we turned on setting 7")] == ["b0 the queue 7 drained"]
        assert len(mem.search_causal("round 1 small decision")) == 1


def test_small_commits_past_the_threshold_do_not_each_wake_the_checkpointer(tmp_path):
    """K1: once the log passed ``CHECKPOINT_PAGES`` and a checkpoint is under way (it cannot restart
    the log yet), the commits that follow ask for another one only per ``CHECKPOINT_PAGES`` new
    pages, not each time; once it is done, the log restarts small and small commits ask for none.
    Counted at the commit side, every wait on a state, not on a clock."""
    db = tmp_path / "m.db"
    with Memory(db, embedder=None) as mem:
        ck = mem._store._checkpointer
        page = mem._store.conn.execute("PRAGMA page_size").fetchone()[0]
        requests = []
        real = ck.request

        def request():
            requests.append(_wal_size(db))
            real()

        ck.request = request  # type: ignore[method-assign]
        n = 40
        with ck.lock:  # a checkpoint "in progress": the thread waits, the log is not restarted
            k = _fill_past_the_threshold(mem, db, page)
            assert len(requests) == 1  # the commit that filled it
            before = _wal_size(db)
            for i in range(n):
                mem.record_decision(f"small decision {i}", f"small outcome {i}")
            grown = (_wal_size(db) - before) // page
            assert len(requests) - 1 <= grown // S.CHECKPOINT_PAGES + 1 < n // 4, (len(requests), grown)
            assert ck.done == 0
            # the thread took the first wake-up (it waits for the lock now) ...
            deadline = time.monotonic() + 120
            while ck._wake.is_set():
                assert time.monotonic() < deadline, "the checkpointer thread never woke"
                time.sleep(0.01)
            # ... and a log grown by another CHECKPOINT_PAGES asks again, checkpoint or not
            asked, target = len(requests), requests[-1] + S.CHECKPOINT_PAGES * page
            while _wal_size(db) < target:
                mem.record_many(_batch(k))
                k += 1
            assert len(requests) == asked + 1
        _wait_for(ck, 2)  # the two wake-ups: two checkpoints, then the thread sleeps
        # the log is in the file: the next commit restarts it small, and small commits ask for nothing
        asked = len(requests)
        for i in range(n):
            mem.record_decision(f"later decision {i}", f"later outcome {i}")
        assert len(requests) == asked and _wal_size(db) < S.CHECKPOINT_PAGES * page
        assert ck.done == 2
        assert len(mem.search_causal("small decision 39")) == 1


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
