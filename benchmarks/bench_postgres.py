"""PostgreSQL backend vs SQLite, side by side in one run (issue 14 targets).

    python benchmarks/bench_postgres.py            # full run: 1M-edge rebuild (~5-10 min on 2 loaded cores)
    python benchmarks/bench_postgres.py --quick    # small sizes, a smoke run

Starts a throwaway PostgreSQL cluster (tests/pg_cluster.py: fsync on, synchronous_commit off, the
durability class of SQLite's WAL + synchronous=NORMAL) unless ``CAUSALMEM_BENCH_PG_DSN`` names a
server. Every figure is a median over repeats measured in this one run, PostgreSQL and SQLite
alternating, so the ratio column survives a noisy machine. Writes benchmarks/results/postgres.md.

Measured:
* ``record_many`` throughput (edges/s, batches of 2,000 new decision->outcome pairs);
* full projection rebuild from N edges (PostgreSQL: binary COPY into numpy; SQLite: packed SELECT);
* ``search`` / ``search_causal`` latency (both answer from the in-process projection and indexes);
* catch-up: another connection ("host") writes one small ``record_decision``; time of this host's
  next ``search_causal`` (which notices the change, catches up and answers) minus nothing — the
  raw latency of that first query, and of the sync step alone.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from causalmem import Memory  # noqa: E402
from causalmem.types import Relation  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def texts(rng: np.random.Generator, words: list[str], n: int, length: int = 6) -> list[str]:
    z = np.minimum(rng.zipf(1.3, size=(n, length)) - 1, len(words) - 1)
    tag = uuid.uuid4().hex[:6]
    return [" ".join(words[j] for j in row) + f" #{tag}{i}" for i, row in enumerate(z)]


def vocab(rng: np.random.Generator, n_words: int = 20000) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return ["".join(rng.choice(letters, size=int(rng.integers(3, 9)))) for _ in range(n_words)]


def bench_record_many(target: str, rng, words, n_batches: int, size: int) -> float:
    rates = []
    with Memory(target, embedder=None) as mem:
        for _ in range(n_batches):
            batch = list(zip(texts(rng, words, size), texts(rng, words, size)))
            t = time.perf_counter()
            mem.record_many(batch)
            rates.append(size / (time.perf_counter() - t))
    return statistics.median(rates)


def build_store(target: str, rng, words, n_chunks: int, n_edges: int) -> None:
    """n_chunks chunks and n_edges random edges through the store's bulk API (both backends alike)."""
    mem = Memory(target, embedder=None)
    now = time.time()
    rels = [Relation.CAUSED, Relation.ENABLED, Relation.PREVENTED, Relation.FACT]
    step = 100_000
    for lo in range(0, n_chunks, step):
        n = min(step, n_chunks - lo)
        with mem._store.transaction():
            mem._store.insert_chunks_bulk([{"text": t, "kind": "decision", "created_at": now, "q_value": 0.5}
                                           for t in texts(rng, words, n)])
    for lo in range(0, n_edges, step):
        n = min(step, n_edges - lo)
        src = (rng.zipf(1.5, size=n) * 7919 + rng.integers(0, n_chunks, size=n)) % n_chunks + 1
        dst = rng.integers(1, n_chunks + 1, size=n)
        dst = np.where(dst == src, dst % n_chunks + 1, dst)
        conf = rng.uniform(0.3, 1.0, size=n)
        rel = rng.integers(0, len(rels), size=n)
        with mem._store.transaction():
            mem._store.insert_edges_bulk([{"src": int(s), "dst": int(d), "relation": rels[r], "confidence": float(c),
                                           "source": "llm_inferred", "discovered_at": now}
                                          for s, d, c, r in zip(src, dst, conf, rel)])
    mem.close()


def bench_rebuild(targets: dict[str, str], repeats: int) -> dict[str, tuple[float, float, int]]:
    """backend -> (median full rebuild s, median of the store read alone s, edges)."""
    mems = {k: Memory(t, embedder=None) for k, t in targets.items()}
    full: dict[str, list[float]] = {k: [] for k in targets}
    load: dict[str, list[float]] = {k: [] for k in targets}
    for _ in range(repeats):
        for k, mem in mems.items():  # alternate the backends
            t = time.perf_counter()
            mem._store.projection_arrays()
            load[k].append(time.perf_counter() - t)
            mem._projection.graph = None
            t = time.perf_counter()
            mem._projection.rebuild()
            full[k].append(time.perf_counter() - t)
    out = {k: (statistics.median(full[k]), statistics.median(load[k]), mems[k]._projection.graph.n_edges)
           for k in targets}
    for mem in mems.values():
        mem.close()
    return out


def bench_queries(targets: dict[str, str], rng, words, n_pairs: int, n_queries: int) -> dict[str, dict[str, float]]:
    decisions = texts(rng, words, n_pairs)
    outcomes = texts(rng, words, n_pairs)
    mems = {}
    for k, t in targets.items():
        mem = Memory(t, embedder=None)
        for lo in range(0, n_pairs, 2000):
            mem.record_many(list(zip(decisions[lo:lo + 2000], outcomes[lo:lo + 2000])))
        mem.search_causal(decisions[0])
        mem.search(outcomes[0], channels=("lexical", "graph"))
        mems[k] = mem
    qs = [decisions[int(i)] for i in rng.integers(0, n_pairs, size=n_queries)]
    lat: dict[str, dict[str, list[float]]] = {k: {"search_causal": [], "search": []} for k in targets}
    for q in qs:
        for k, mem in mems.items():
            t = time.perf_counter()
            mem.search_causal(q)
            lat[k]["search_causal"].append(time.perf_counter() - t)
            t = time.perf_counter()
            mem.search(q, channels=("lexical", "graph"), reinforce=False)
            lat[k]["search"].append(time.perf_counter() - t)
    for mem in mems.values():
        mem.close()
    return {k: {name: statistics.median(v) * 1000 for name, v in d.items()} for k, d in lat.items()}


def bench_catch_up(targets: dict[str, str], rng, words, n_pairs: int, rounds: int) -> dict[str, dict[str, float]]:
    """Two Memory objects on one store (two connections = two hosts): B writes one decision, A's next
    search_causal must see it. Reports the median of that first query and of a warm query."""
    out = {}
    for k, t in targets.items():
        a = Memory(t, embedder=None)
        decisions, outcomes = texts(rng, words, n_pairs), texts(rng, words, n_pairs)
        for lo in range(0, n_pairs, 2000):
            a.record_many(list(zip(decisions[lo:lo + 2000], outcomes[lo:lo + 2000])))
        b = Memory(t, embedder=None)
        a.search_causal(decisions[0])
        b.search_causal(decisions[0])
        first, warm, sync = [], [], []
        for i in range(rounds):
            d, o = f"host b decision {uuid.uuid4().hex[:8]}", f"host b outcome {i}"
            b.record_decision(d, o)
            t0 = time.perf_counter()
            got = a.search_causal(d)
            first.append(time.perf_counter() - t0)
            assert [x.text for x in got] == [o], (k, got)
            t0 = time.perf_counter()
            a.search_causal(d)
            warm.append(time.perf_counter() - t0)
            b.record_decision(d + " again", o + " again")
            t0 = time.perf_counter()
            with a._lock:
                a._views.sync_external()
            sync.append(time.perf_counter() - t0)
        out[k] = {"first query after the write (ms)": statistics.median(first) * 1000,
                  "same query warm (ms)": statistics.median(warm) * 1000,
                  "sync step alone (ms)": statistics.median(sync) * 1000}
        a.close()
        b.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rebuild-edges", type=int, default=None)
    args = ap.parse_args()
    quick = args.quick
    rng = np.random.default_rng(7)
    words = vocab(rng)
    cluster = None
    server = os.environ.get("CAUSALMEM_BENCH_PG_DSN")
    if not server:
        import pg_cluster

        cluster = pg_cluster.start(durable=True)
        server = cluster.dsn
    sep = "&" if "?" in server else "?"

    def pg(name: str) -> str:
        return f"{server}{sep}schema=bench_{name}_{uuid.uuid4().hex[:8]}"

    lines = ["# PostgreSQL backend vs SQLite (issue 14)", "",
             f"Machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start "
             "(shared with other jobs: compare the ratio column, not absolute figures). "
             "PostgreSQL 15 on a Unix socket on the same machine; fsync on, synchronous_commit off. "
             f"Command: `python benchmarks/bench_postgres.py{' --quick' if quick else ''}`.", "",
             "| measurement | PostgreSQL | SQLite | PG / SQLite | target |", "|---|---|---|---|---|"]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            # 1. record_many throughput, alternating backends
            n_batches, size = (3, 1000) if quick else (7, 2000)
            pg_rates, lite_rates = [], []
            pg_target, lite_target = pg("writes"), str(Path(tmp) / "writes.db")
            for _ in range(n_batches):
                pg_rates.append(bench_record_many(pg_target, rng, words, 1, size))
                lite_rates.append(bench_record_many(lite_target, rng, words, 1, size))
            p, s = statistics.median(pg_rates), statistics.median(lite_rates)
            lines.append(f"| record_many, batches of {size:,} new pairs (median of {n_batches}) | {p:,.0f} edges/s | "
                         f"{s:,.0f} edges/s | {p / s:.2f} | PG >= 20,000 edges/s: {'met' if p >= 20000 else 'NOT met'} |")
            print(lines[-1], flush=True)

            # 2. projection rebuild
            n_edges = args.rebuild_edges or (100_000 if quick else 1_000_000)
            targets = {"pg": pg("rebuild"), "sqlite": str(Path(tmp) / "rebuild.db")}
            for t in targets.values():
                build_store(t, np.random.default_rng(11), words, n_edges // 3, n_edges)
            r = bench_rebuild(targets, 3)
            lines.append(f"| full projection rebuild, {r['pg'][2]:,} valid edges (median of 3) | {r['pg'][0]:.2f} s | "
                         f"{r['sqlite'][0]:.2f} s | {r['pg'][0] / r['sqlite'][0]:.2f} | <= 3 s: "
                         f"{'met' if r['pg'][0] <= 3 else 'NOT met'} |")
            lines.append(f"| of which reading the edges from the store | {r['pg'][1]:.2f} s (binary COPY) | "
                         f"{r['sqlite'][1]:.2f} s | {r['pg'][1] / r['sqlite'][1]:.2f} | |")
            print("\n".join(lines[-2:]), flush=True)

            # 3. query latency
            n_pairs, n_q = (2000, 50) if quick else (10000, 200)
            targets = {"pg": pg("queries"), "sqlite": str(Path(tmp) / "queries.db")}
            q = bench_queries(targets, rng, words, n_pairs, n_q)
            for name in ("search_causal", "search"):
                lines.append(f"| {name} p50, {n_pairs:,}-pair store (lexical+graph; {n_q} queries) | "
                             f"{q['pg'][name]:.2f} ms | {q['sqlite'][name]:.2f} ms | "
                             f"{q['pg'][name] / q['sqlite'][name]:.2f} | equal within noise |")
            print("\n".join(lines[-2:]), flush=True)

            # 4. catch-up after another host's write
            targets = {"pg": pg("catchup"), "sqlite": str(Path(tmp) / "catchup.db")}
            c = bench_catch_up(targets, rng, words, n_pairs, 10 if quick else 30)
            for name in c["pg"]:
                target = "<= 10 ms" if name.startswith("first") else ""
                if target:
                    target += ": " + ("met" if c["pg"][name] <= 10 else "NOT met")
                lines.append(f"| catch-up, {n_pairs:,}-pair store: {name} | {c['pg'][name]:.2f} ms | "
                             f"{c['sqlite'][name]:.2f} ms | {c['pg'][name] / c['sqlite'][name]:.2f} | {target} |")
            print("\n".join(lines[-3:]), flush=True)
    finally:
        if cluster is not None:
            cluster.stop()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("postgres_quick.md" if quick else "postgres.md")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
