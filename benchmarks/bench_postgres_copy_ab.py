"""A/B of the bulk COPY's reply on PostgreSQL: read later (as shipped) vs waited for, SQLite beside.

    python benchmarks/bench_postgres_copy_ab.py [--batches 15] [--fresh]

One process; the two PostgreSQL variants and SQLite alternate batch by batch (2,000 new
decision -> outcome pairs each), so a noisy machine hits all three alike. "waited" sends the same
binary COPY and waits for the server's reply before returning (``PostgresStore._copy_in``), the
way the code did before the reply was read later. ``--fresh``: a new ``Memory`` (and connection)
per batch, as ``bench_postgres.py``'s first row; default: one kept open. Starts a throwaway
durable cluster (tests/pg_cluster.py) unless ``CAUSALMEM_BENCH_PG_DSN`` names a server. Prints
medians; writes nothing.
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_postgres import texts  # noqa: E402
from causalmem import Memory  # noqa: E402
from causalmem.store import postgres as pgmod  # noqa: E402
from store_bench import vocab  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=15)
    ap.add_argument("--fresh", action="store_true")
    args = ap.parse_args()
    cluster = None
    server = os.environ.get("CAUSALMEM_BENCH_PG_DSN")
    if not server:
        import pg_cluster

        cluster = pg_cluster.start(durable=True)
        server = cluster.dsn
    ahead = pgmod.PostgresStore._copy_ahead

    def waited(self, table, columns, rows, types):
        return self._copy_in(table, columns, rows, types)

    rng = np.random.default_rng(8)
    words = vocab(np.random.default_rng(7))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            targets = {"pg": f"{server}{'&' if '?' in server else '?'}schema=copy_ab_{uuid.uuid4().hex[:8]}",
                       "sqlite": str(Path(tmp) / "ab.db")}
            mems = {k: Memory(t, embedder=None) for k, t in targets.items()}
            for mem in mems.values():  # not counted
                mem.record_many(list(zip(texts(rng, words, 2000), texts(rng, words, 2000))))
            rates: dict[str, list[float]] = {"pg, reply read later": [], "pg, reply waited for": [], "sqlite": []}
            print(f"load at start {os.getloadavg()[0]:.1f}", flush=True)
            for _ in range(args.batches):
                for name in rates:
                    k = "sqlite" if name == "sqlite" else "pg"
                    pgmod.PostgresStore._copy_ahead = waited if name.endswith("waited for") else ahead
                    if args.fresh:
                        mems[k].close()
                        mems[k] = Memory(targets[k], embedder=None)
                    batch = list(zip(texts(rng, words, 2000), texts(rng, words, 2000)))
                    t = time.perf_counter()
                    mems[k].record_many(batch)
                    rates[name].append(2000 / (time.perf_counter() - t))
            pgmod.PostgresStore._copy_ahead = ahead
            for mem in mems.values():
                mem.close()
    finally:
        if cluster is not None:
            cluster.stop()
    mode = "a fresh Memory per batch" if args.fresh else "one Memory kept open"
    for name, v in rates.items():
        print(f"{name:22s} median {statistics.median(v):8,.0f} edges/s ({mode}; batches: "
              f"{', '.join(f'{x:,.0f}' for x in v)})")
    print(f"load at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
