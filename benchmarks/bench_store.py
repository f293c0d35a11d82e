"""pytest-benchmark suite of the store's batch writes, with the regression gate's peer ratio.

    pytest benchmarks/bench_store.py --benchmark-only

``Memory.record_many`` of 1,000 decision→outcome pairs (new texts every round, so each round
writes 2,000 chunks and 1,000 edges, and updates the projection and the lexical index) against
raw ``sqlite3.executemany`` inserting the same number of rows into a similar two-table schema
with the same indexes and no causalmem logic: the floor any SQLite-backed store pays.  The
texts and the raw schema are those of ``store_bench.py`` (which prints the full store table).
"""
from __future__ import annotations

import itertools
import sqlite3

import numpy as np
import pytest

import store_bench as SB
from conftest import peer_ratio

from causalmem import Memory

BATCH = 1000
ROUNDS = 12


@pytest.mark.gate
def test_gate_record_many_vs_executemany(benchmark, tmp_path):
    rng = np.random.default_rng(0)
    words = SB.vocab(rng)
    n_batches = ROUNDS + 2 + 1  # rounds + warmup + one spare
    batches = [list(zip(SB.texts(rng, words, BATCH), SB.texts(rng, words, BATCH)))
               for _ in range(n_batches)]
    mem = Memory(tmp_path / "w.db", embedder=None)
    ours_batches = iter(batches)

    con = sqlite3.connect(tmp_path / "raw.db", isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute("CREATE TABLE c (nid INTEGER PRIMARY KEY, id TEXT UNIQUE, text TEXT, h INTEGER)")
    con.execute("CREATE INDEX ch ON c(h)")
    con.execute("CREATE TABLE e (eid INTEGER PRIMARY KEY, id TEXT UNIQUE, src INTEGER, dst INTEGER, conf REAL)")
    con.execute("CREATE INDEX es ON e(src)")
    con.execute("CREATE INDEX ed ON e(dst)")
    peer_batches = iter(batches)
    serial = itertools.count(0, 2 * BATCH)

    def ours():
        mem.record_many(next(ours_batches))

    def peer():
        pairs, k = next(peer_batches), next(serial)
        texts = [t for pair in pairs for t in pair]
        con.execute("BEGIN")
        con.executemany("INSERT INTO c VALUES (?,?,?,?)",
                        [(k + i + 1, f"{k + i:032x}", x, hash(x)) for i, x in enumerate(texts)])
        con.executemany("INSERT INTO e VALUES (?,?,?,?,?)",
                        [(k // 2 + i + 1, f"{k + i:032x}", k + 2 * i + 1, k + 2 * i + 2, 0.6)
                         for i in range(len(pairs))])
        con.execute("COMMIT")

    benchmark.group = "gate: batch writes (1,000 pairs)"
    try:
        peer_ratio(benchmark, ours, peer, peer_name="sqlite3 executemany", rounds=ROUNDS)
        assert mem.stats()["edges"] >= BATCH * ROUNDS
    finally:
        mem.close()
        con.close()
