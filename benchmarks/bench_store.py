"""pytest-benchmark suite of the store's batch writes, with the regression gate's peer ratio.

    pytest benchmarks/bench_store.py --benchmark-only

``Memory.record_many`` of 1,000 decision→outcome pairs (new texts every round, so each round
writes 2,000 chunks and 1,000 edges, and updates the projection and the lexical index) against
raw ``sqlite3.executemany`` inserting the same number of rows into a similar two-table schema
with the same indexes and no causalmem logic: the floor any SQLite-backed store pays.  The
texts and the raw peer (``raw_store``/``raw_insert``) are those of ``store_bench.py`` (which
prints the full store table).
"""
from __future__ import annotations

import itertools

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

    con = SB.raw_store(tmp_path / "raw.db")
    peer_batches = iter(batches)
    serial = itertools.count(0, 2 * BATCH)

    def ours():
        mem.record_many(next(ours_batches))

    def peer():
        SB.raw_insert(con, [t for pair in next(peer_batches) for t in pair], next(serial))

    benchmark.group = "gate: batch writes (1,000 pairs)"
    try:
        peer_ratio(benchmark, ours, peer, peer_name="sqlite3 executemany", rounds=ROUNDS)
        assert mem.stats()["edges"] >= BATCH * ROUNDS
    finally:
        mem.close()
        con.close()
