"""Lexical channel latency: BM25Index vs rank-bm25 on synthetic Zipf corpora.

Prints build time and search p50/p95 (2-6 word queries) at 10k / 100k / 1M docs of ~15
words; rank-bm25 (same k1/b, SPEC IDF not needed for timing) side by side at 10k / 100k.

    python benchmarks/bench_lexical.py [--sizes 10000,100000,1000000] [--queries 200]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from causalmem.lexical import BM25Index

VOCAB = 50_000


def make_vocab(rng: np.random.Generator, n: int) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = set()
    while len(words) < n:
        k = int(rng.integers(4, 10))
        words.add("".join(rng.choice(letters, k)) + "q")  # "q" tail: no stemming/stop-word hits
    return sorted(words)


def zipf_ids(rng: np.random.Generator, size: int, n_vocab: int) -> np.ndarray:
    ranks = np.arange(1, n_vocab + 1)
    p = 1.0 / ranks**1.07
    p /= p.sum()
    return rng.choice(n_vocab, size=size, p=p)


def make_corpus(rng, vocab, n_docs, words_per_doc=15):
    ids = zipf_ids(rng, n_docs * words_per_doc, len(vocab))
    arr = np.array(vocab, dtype=object)[ids].reshape(n_docs, words_per_doc)
    return [" ".join(row) for row in arr]


def make_queries(rng, vocab, n):
    out = []
    for _ in range(n):
        k = int(rng.integers(2, 7))
        out.append(" ".join(vocab[i] for i in zipf_ids(rng, k, len(vocab))))
    return out


def pct(ts):
    a = np.asarray(ts) * 1000
    return np.percentile(a, 50), np.percentile(a, 95)


def timed(index: BM25Index, queries: list[str], repeat: int) -> list[float]:
    out = []
    for q in queries:
        best = float("inf")
        for _ in range(max(1, repeat)):
            t = time.perf_counter()
            index.search(q, top_k=10)
            best = min(best, time.perf_counter() - t)
        out.append(best)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rank-bm25-max", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=1, help="time each query N times, keep the fastest (shared machines)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    vocab = make_vocab(rng, VOCAB)
    queries = make_queries(rng, vocab, args.queries)
    print(f"{'docs':>9s} {'engine':>10s} {'build s':>8s} {'p50 ms':>8s} {'p95 ms':>8s}")
    for n in [int(x) for x in args.sizes.split(",")]:
        corpus = make_corpus(rng, vocab, n)
        t0 = time.perf_counter()
        index = BM25Index()
        index.add_many(list(enumerate(corpus)))
        build = time.perf_counter() - t0
        for q in queries[:10]:
            index.search(q, top_k=10)
        ts = timed(index, queries, args.repeat)
        p50, p95 = pct(ts)
        print(f"{n:9d} {'causalmem':>10s} {build:8.2f} {p50:8.3f} {p95:8.3f}")
        # incremental writes on the built index
        t = time.perf_counter()
        for i, text in enumerate(corpus[:1000]):
            index.add(n + i, text)
        add_us = (time.perf_counter() - t) / 1000 * 1e6
        t = time.perf_counter()
        for i in range(1000):
            index.remove(i)
        rm_us = (time.perf_counter() - t) / 1000 * 1e6
        ts = timed(index, queries, args.repeat)
        p50, p95 = pct(ts)
        print(f"{'':9s} {'+1k add/rm':>10s} {'':8s} {p50:8.3f} {p95:8.3f}   add {add_us:.0f} us, remove {rm_us:.0f} us")
        if n <= args.rank_bm25_max:
            from rank_bm25 import BM25Okapi

            tok = index.tokenizer.tokenize
            t0 = time.perf_counter()
            ref = BM25Okapi([tok(c) for c in corpus], k1=1.2, b=0.75)
            build = time.perf_counter() - t0
            ts = []
            for q in queries[: max(10, args.queries // 10)]:
                t = time.perf_counter()
                s = ref.get_scores(tok(q))
                np.argpartition(-s, 10)[:10]
                ts.append(time.perf_counter() - t)
            p50, p95 = pct(ts)
            print(f"{n:9d} {'rank-bm25':>10s} {build:8.2f} {p50:8.3f} {p95:8.3f}")
        del index, corpus


if __name__ == "__main__":
    main()


# -- pytest-benchmark / regression gate: BM25Index against bm25s on the same corpus --------------

try:
    import pytest
except ImportError:  # the script above runs without pytest
    pytest = None

if pytest is not None:

    @pytest.mark.gate
    def test_gate_lexical_vs_bm25s(benchmark):
        """Per-query search (tokenize + score + top 10) over 20k Zipf docs, batches of 20 queries;
        the peer is bm25s (same k1/b, same tokens, one ``retrieve`` call per query)."""
        bm25s = pytest.importorskip("bm25s")
        from conftest import peer_ratio

        rng = np.random.default_rng(0)
        vocab = make_vocab(rng, VOCAB)
        queries = make_queries(rng, vocab, 20)
        corpus = make_corpus(rng, vocab, 20_000)
        index = BM25Index()
        index.add_many(list(enumerate(corpus)))
        tok = index.tokenizer.tokenize
        ref = bm25s.BM25(k1=1.2, b=0.75)
        ref.index([tok(c) for c in corpus], show_progress=False)
        assert int(ref.retrieve([tok(queries[0])], k=1, show_progress=False).documents[0][0]) == \
            int(index.search(queries[0], top_k=1)[0][0])  # same top hit: the same work is timed

        def ours():
            for q in queries:
                index.search(q, top_k=10)

        def peer():
            for q in queries:
                ref.retrieve([tok(q)], k=10, show_progress=False)

        benchmark.group = "gate: lexical 20k docs"
        peer_ratio(benchmark, ours, peer, peer_name="bm25s", rounds=25)
