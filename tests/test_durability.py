"""Crash safety and multi-process use of one database file."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from causalmem import Memory

REPO = Path(__file__).resolve().parents[1]

WRITER = textwrap.dedent("""
    import sys
    from causalmem import Memory
    path, batch = sys.argv[1], int(sys.argv[2])
    mem = Memory(path, embedder=None)
    k = 0
    while True:
        mem.record_many([(f"b{k} decision {i}", f"b{k} outcome {i}") for i in range(batch)])
        print(k, flush=True)  # batch k is committed
        k += 1
""")


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.parametrize("round_", range(10))
def test_sigkill_mid_record_many_loses_nothing_committed(tmp_path, round_):
    db = tmp_path / "crash.db"
    batch = 400
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db), str(batch)], stdout=subprocess.PIPE,
                            text=True, env=_env())
    committed = -1
    deadline = time.monotonic() + 60
    # wait for a few commits, then kill at a point that varies per round (mid-transaction most times)
    while committed < 1 + round_ % 3 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        committed = int(line)
    time.sleep(0.003 * (round_ % 5))
    proc.send_signal(signal.SIGKILL)
    rest = proc.stdout.read()
    proc.wait()
    for line in rest.split():
        committed = max(committed, int(line))
    assert committed >= 1, "the writer never committed a batch"
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    n_edges = con.execute("SELECT COUNT(*) FROM edges").fetchone()[0]
    con.close()
    # every reported batch is there, and no batch is there in part
    assert n_edges >= (committed + 1) * batch
    assert n_edges % batch == 0
    with Memory(db, embedder=None) as mem:
        assert [a.text for a in mem.search_causal("b0 decision 7")] == ["b0 outcome 7"]


PEER = textwrap.dedent("""
    import sys, time
    from causalmem import Memory
    path, name, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    mem = Memory(path, embedder=None)
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        mem.record_decision(f"{name} step {n}", f"{name} result {n}")
        mem.search_causal(f"{name} step {n // 2}")
        mem.trace_cause(f"{name} result {n}")
        n += 1
    print(n, flush=True)
""")


def test_two_processes_write_and_read_concurrently(tmp_path):
    db = tmp_path / "shared.db"
    Memory(db, embedder=None).close()
    procs = [subprocess.Popen([sys.executable, "-c", PEER, str(db), name, "3"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env()) for name in ("alpha", "beta")]
    counts = {}
    for name, p in zip(("alpha", "beta"), procs):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "locked" not in err
        counts[name] = int(out.strip())
    with Memory(db, embedder=None) as mem:
        assert mem.stats()["edges"] == counts["alpha"] + counts["beta"]
        for name, n in counts.items():
            assert [a.text for a in mem.search_causal(f"{name} step {n - 1}")] == [f"{name} result {n - 1}"]
        assert mem._store.integrity_check() == "ok"
