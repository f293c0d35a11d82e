"""Store benchmarks: write throughput, projection rebuild, causal query latency.

    python benchmarks/store_bench.py            # full run (~3-5 min on 2 cores)
    python benchmarks/store_bench.py --quick    # small sizes, for a smoke run

Prints a Markdown table and writes it to benchmarks/results/store.md. Every figure is a median
(or p50/p95) measured in this one run; the raw-sqlite3 reference inserts the same rows with
``executemany`` and no causalmem logic, side by side, so the ratio survives a noisy machine.
"""
from __future__ import annotations

import argparse
import gc
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from causalmem import Memory  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def vocab(rng: np.random.Generator, n_words: int = 20000) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return ["".join(rng.choice(letters, size=int(rng.integers(3, 9)))) for _ in range(n_words)]


def texts(rng: np.random.Generator, words: list[str], n: int, length: int = 6) -> list[str]:
    # Zipf-distributed words, plus a unique serial so texts are distinct
    z = np.minimum(rng.zipf(1.3, size=(n, length)) - 1, len(words) - 1)
    return [" ".join(words[j] for j in row) + f" #{i}" for i, row in enumerate(z)]


def rss_mb() -> float:
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except ImportError:  # pragma: no cover
        return float("nan")


def raw_store(path: Path) -> sqlite3.Connection:
    """The reference for batch writes: raw sqlite3 with a schema like the store's chunks and edges
    (same indexes, WAL, synchronous=NORMAL) and no causalmem logic."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute("CREATE TABLE c (nid INTEGER PRIMARY KEY, id TEXT UNIQUE, text TEXT, h INTEGER)")
    con.execute("CREATE INDEX ch ON c(h)")
    con.execute("CREATE TABLE e (eid INTEGER PRIMARY KEY, id TEXT UNIQUE, src INTEGER, dst INTEGER, conf REAL)")
    con.execute("CREATE INDEX es ON e(src)")
    con.execute("CREATE INDEX ed ON e(dst)")
    return con


def raw_insert(con: sqlite3.Connection, texts: list[str], k: int) -> None:
    """One transaction: the texts as chunks (keys after ``k``) and one edge per pair of them."""
    con.execute("BEGIN")
    con.executemany("INSERT INTO c VALUES (?,?,?,?)", [(k + i + 1, f"{k + i:032x}", x, hash(x))
                                                     for i, x in enumerate(texts)])
    con.executemany("INSERT INTO e VALUES (?,?,?,?,?)", [(k // 2 + i + 1, f"{k + i:032x}", k + 2 * i + 1,
                                                          k + 2 * i + 2, 0.6) for i in range(len(texts) // 2)])
    con.execute("COMMIT")


def bench_writes(tmp: Path, rng, words, n_single: int, n_batches: int) -> dict:
    out = {}
    with Memory(tmp / "w1.db", embedder=None) as mem:
        items = list(zip(texts(rng, words, n_single), texts(rng, words, n_single)))
        t = time.perf_counter()
        for d, o in items:
            mem.record_decision(d, o)
        out["record_decision (1 per transaction)"] = n_single / (time.perf_counter() - t)
    with Memory(tmp / "w2.db", embedder=None) as mem:
        rates = []
        for _ in range(n_batches):
            batch = list(zip(texts(rng, words, 1000), texts(rng, words, 1000)))
            t = time.perf_counter()
            mem.record_many(batch)
            rates.append(1000 / (time.perf_counter() - t))
        out["record_many (batches of 1,000)"] = statistics.median(rates)
    # reference: the same shape of rows inserted by raw sqlite3 executemany into a similar schema
    con = raw_store(tmp / "raw.db")
    rates = []
    k = 0
    for _ in range(n_batches):
        ts = texts(rng, words, 2000)
        t = time.perf_counter()
        raw_insert(con, ts, k)
        rates.append(1000 / (time.perf_counter() - t))
        k += 2000
    con.close()
    out["raw sqlite3 executemany (reference)"] = statistics.median(rates)
    return out


def build_store(path: Path, rng, words, n_chunks: int, n_edges: int) -> Memory:
    """A store of n_chunks chunks and n_edges random causal edges, written through the store's bulk API."""
    from _common import bulk_store

    return bulk_store(path, rng, words, n_chunks, n_edges)


def bench_rebuild(tmp: Path, rng, words, n_edges: int, n_chunks: int) -> dict:
    mem = build_store(tmp / f"rebuild_{n_edges}.db", rng, words, n_chunks, n_edges)
    mem.close()
    gc.collect()
    mem = Memory(tmp / f"rebuild_{n_edges}.db", embedder=None)
    times = []
    before = rss_mb()
    for _ in range(3):
        mem._projection.graph = None
        gc.collect()
        t = time.perf_counter()
        mem._projection.rebuild()
        times.append(time.perf_counter() - t)
    g = mem._projection.graph
    out = {"edges": g.n_edges, "rebuild_s": statistics.median(times), "bytes_per_edge": g.nbytes / max(1, g.n_edges),
           "rss_delta_mb": rss_mb() - before}
    mem.close()
    return out


def bench_causal_queries(tmp: Path, rng, words, n_chunks: int, n_edges: int, n_queries: int) -> dict:
    mem = build_store(tmp / "query.db", rng, words, n_chunks, n_edges)
    rows = mem._store.query("SELECT text FROM chunks ORDER BY random() LIMIT ?", (n_queries,))
    # queries: 3 words of a stored text (token seeding, not exact text)
    queries = [" ".join(r[0].split()[:3]) for r in rows]
    t = time.perf_counter()
    mem.search_causal(queries[0])  # first query builds the indexes and the projection
    warm = time.perf_counter() - t
    lat = {"search_causal": [], "trace_cause": []}
    for q in queries:
        for name, fn in (("search_causal", mem.search_causal), ("trace_cause", mem.trace_cause)):
            t = time.perf_counter()
            fn(q)
            lat[name].append((time.perf_counter() - t) * 1000)
    mem.close()
    return {name: (float(np.percentile(v, 50)), float(np.percentile(v, 95))) for name, v in lat.items()} | {
        "first_query_s": warm}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(42)
    words = vocab(rng)
    q = args.quick
    lines = ["| benchmark | figure | target |", "|---|---|---|"]
    with tempfile.TemporaryDirectory(prefix="causalmem-bench-") as d:
        tmp = Path(d)
        w = bench_writes(tmp, rng, words, n_single=300 if q else 2000, n_batches=5 if q else 30)
        ref = w["raw sqlite3 executemany (reference)"]
        for name, rate in w.items():
            target = {"record_decision (1 per transaction)": "≥ 1,000 edges/s",
                      "record_many (batches of 1,000)": "≥ 20,000 edges/s"}.get(name, "")
            lines.append(f"| {name} | {rate:,.0f} edges/s ({rate / ref:.2f}× raw sqlite3) | {target} |")
        n_e = 100_000 if q else 1_000_000
        r = bench_rebuild(tmp, rng, words, n_edges=n_e, n_chunks=n_e // 3)
        lines.append(f"| full projection rebuild from file, {r['edges']:,} edges | {r['rebuild_s']:.2f} s (median of 3) "
                     f"| ≤ 2 s at 1M |")
        lines.append(f"| projection memory | {r['bytes_per_edge']:.1f} bytes/edge (RSS +{r['rss_delta_mb']:.0f} MB) | |")
        nc, ne = (10_000, 30_000) if q else (100_000, 300_000)
        c = bench_causal_queries(tmp, rng, words, nc, ne, n_queries=100 if q else 500)
        for name in ("search_causal", "trace_cause"):
            p50, p95 = c[name]
            lines.append(f"| `{name}` on {nc:,} chunks / {ne:,} edges | p50 {p50:.2f} ms, p95 {p95:.2f} ms "
                         f"| p50 ≤ 2 ms |")
        lines.append(f"| first query (loads BM25 index, chunk table, projection) | {c['first_query_s']:.2f} s | |")
    table = "\n".join(lines)
    print(table)
    if not q:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "store.md").write_text(table + "\n\n`python benchmarks/store_bench.py`\n")


if __name__ == "__main__":
    main()
