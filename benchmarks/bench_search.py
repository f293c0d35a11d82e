"""pytest-benchmark suite for ``Memory.search`` on a synthetic store (10k memories by default).

    pytest benchmarks/bench_search.py --benchmark-only
    CAUSALMEM_BENCH_N=100000 pytest benchmarks/bench_search.py --benchmark-only --benchmark-autosave

The store is the one of ``search_speed.py`` (Zipf texts, sessions of 20 turns, record_many
pairs, ~1.5 edges per chunk), built once per session in a temporary directory. Baselines in
the same run: ``rank-bm25`` and brute-force numpy cosine over N random 384-d vectors.
"""
from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import search_speed as S  # noqa: E402

from causalmem import Memory  # noqa: E402

N = int(os.environ.get("CAUSALMEM_BENCH_N", "10000"))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "store.db"
    S.build_store(path, N)
    return path


@pytest.fixture(scope="module")
def qs():
    return S.queries(200, N)


@pytest.fixture(scope="module")
def mem(store, qs):
    m = Memory(store, embedder=None)
    m.search(qs[0], reinforce=False)  # build the indexes outside the timed part
    yield m
    m.close()


def _cycle(qs):
    it = itertools.cycle(qs)
    return lambda: next(it)


@pytest.mark.parametrize("fusion", ["auto", "hybrid", "rrf"])
def test_search_read(benchmark, mem, qs, fusion):
    nxt = _cycle(qs)
    benchmark(lambda: mem.search(nxt(), fusion=fusion, reinforce=False))


def test_search_lexical_only(benchmark, mem, qs):
    nxt = _cycle(qs)
    benchmark(lambda: mem.search(nxt(), channels=("lexical",), reinforce=False))


def test_search_default_with_reinforcement(benchmark, mem, qs):
    nxt = _cycle(qs)
    benchmark(lambda: mem.search(nxt()))


def test_baseline_rank_bm25(benchmark, qs):
    rank_bm25 = pytest.importorskip("rank_bm25")
    from causalmem.tokenizer import tokenize

    gen = S.TextGen(0)
    corpus = gen.texts(N // 2, "t") + gen.texts(N - N // 2, "d")
    bm = rank_bm25.BM25Okapi([tokenize(t) for t in corpus])
    nxt = _cycle([tokenize(q) for q in qs])
    benchmark(lambda: np.argpartition(-bm.get_scores(nxt()), 10)[:10])


def test_baseline_numpy_cosine(benchmark):
    rng = np.random.default_rng(0)
    mat = rng.standard_normal((N, 384), dtype=np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    q = mat[0].copy()
    benchmark(lambda: np.argpartition(-(mat @ q), 10)[:10])


def test_add_session_of_20(benchmark, tmp_path):
    m = Memory(tmp_path / "add.db", embedder=None)
    gen = S.TextGen(3)
    texts = gen.texts(20 * 400, "a")
    counter = itertools.count()

    def add():
        i = next(counter) % 400
        m.add(texts[20 * i:20 * i + 20], session_id=f"s{next(counter)}")

    benchmark.pedantic(add, rounds=100, iterations=1)
    m.close()


@pytest.mark.gate
def test_gate_search_vs_exact_scan(benchmark, mem, qs):
    """``Memory.search`` (the default pipeline of a store without an embedder: BM25 + graph,
    fused) against an exact scan, rank-bm25 scoring every text of the store, 10 queries a round."""
    rank_bm25 = pytest.importorskip("rank_bm25")
    from conftest import peer_ratio
    from causalmem.tokenizer import tokenize

    gen = S.TextGen(0)
    corpus = gen.texts(N // 2, "t") + gen.texts(N - N // 2, "d")
    bm = rank_bm25.BM25Okapi([tokenize(t) for t in corpus])
    batch = qs[:10]
    tokens = [tokenize(q) for q in batch]

    def ours():
        for q in batch:
            mem.search(q, reinforce=False)

    def peer():
        for t in tokens:
            np.argpartition(-bm.get_scores(t), 10)[:10]

    benchmark.group = f"gate: search {N // 1000}k vs exact scan"
    peer_ratio(benchmark, ours, peer, peer_name="rank-bm25 exact scan", rounds=10)
