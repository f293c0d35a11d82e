"""Time one ``Memory.sleep()`` cycle on stores of 10k / 100k / 1M edges.

    python benchmarks/bench_sleep.py                 # 10k, 100k, 1M
    python benchmarks/bench_sleep.py --sizes 10000 100000

Each size runs in its own subprocess (so the peak resident memory is that run's own): the store
is built in bulk with ``executemany`` (chunks with Zipf-distributed words from a 30k-word
vocabulary, random typed edges with sources, polarities, 20 task tags and discovery times over
the last 60 days, 10% as many Hebbian pairs), then one sleep cycle runs 30 days later and a
second one a day after that (incremental). A worst-case row uses a small uniform vocabulary (no
rare words: pattern mining's candidate budget is what bounds it). Prints a Markdown table and
writes it to ``benchmarks/results/sleep.md``. Targets: 100k edges ≤ 5 s, 1M edges ≤ 60 s.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from causalmem.memory import Memory  # noqa: E402
from causalmem.store import text_hash  # noqa: E402
from causalmem.types import Relation  # noqa: E402

T = 1_700_000_000.0
DAY = 86400.0
TARGETS = {100_000: 5.0, 1_000_000: 60.0}


def build_store(path: str, n_edges: int, *, seed: int = 0, vocab_size: int = 30_000, zipf: bool = True) -> None:
    rng = np.random.default_rng(seed)
    n_nodes = max(4, n_edges // 2)
    Memory(path, embedder=None).close()  # schema
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=OFF")
    vocab = np.array([f"w{i}" for i in range(vocab_size)])
    if zipf:
        p = 1.0 / np.arange(1, vocab_size + 1) ** 1.05
        p /= p.sum()
    else:
        p = None
    lengths = rng.integers(5, 10, n_nodes)
    words = rng.choice(vocab_size, size=int(lengths.sum()), p=p)
    bounds = np.r_[0, np.cumsum(lengths)]
    texts = (" ".join(vocab[words[bounds[i]:bounds[i + 1]]]) for i in range(n_nodes))
    with con:
        con.executemany(
            "INSERT INTO chunks (nid, id, text, text_hash, kind, created_at, q_value) VALUES (?,?,?,?,?,?,?)",
            ((i + 1, f"c{i + 1}", t, text_hash(t), "decision", T - 60 * DAY, 0.5) for i, t in enumerate(texts)))
        rels = ["caused", "enabled", "prevented", "temporal", "fact"]
        rel_codes = [Relation.parse(r).code for r in rels]
        sources = ["rule", "llm_inferred", "temporal", "user_feedback"]
        pols = [None, "positive", "negative", "neutral"]
        src = rng.integers(1, n_nodes + 1, n_edges)
        dst = rng.integers(1, n_nodes + 1, n_edges)
        rel = rng.integers(0, len(rels), n_edges)
        so = rng.integers(0, len(sources), n_edges)
        pol = rng.integers(0, len(pols), n_edges)
        conf = rng.uniform(0.2, 0.95, n_edges)
        disc = T - rng.uniform(0, 60 * DAY, n_edges)
        tags = rng.integers(0, 20, n_edges)
        con.executemany(
            "INSERT INTO edges (eid, id, src, dst, relation, rel_code, confidence, source, polarity, task_tag, "
            "discovered_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            ((i + 1, f"e{i + 1}", s, d, rels[r], rel_codes[r], c, sources[o], pols[q], f"tag{g}", dd)
             for i, (s, d, r, o, q, c, dd, g) in enumerate(zip(
                 src.tolist(), dst.tolist(), rel.tolist(), so.tolist(), pol.tolist(), conf.tolist(), disc.tolist(),
                 tags.tolist()))))
        a = rng.integers(1, n_nodes + 1, n_edges // 10)
        b = rng.integers(1, n_nodes + 1, n_edges // 10)
        pairs = {(min(x, y), max(x, y)) for x, y in zip(a.tolist(), b.tolist()) if x != y}
        con.executemany("INSERT INTO cooccurrence (a, b, weight, hits, updated_at) VALUES (?,?,?,?,?)",
                        ((x, y, 0.3, 2, T - 20 * DAY) for x, y in pairs))
    con.close()


def run_one(n_edges: int, zipf: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.db")
        t0 = time.perf_counter()
        build_store(path, n_edges, zipf=zipf, vocab_size=30_000 if zipf else 5_000)
        build_s = time.perf_counter() - t0
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with Memory(path, embedder=None) as mem:
            t0 = time.perf_counter()
            r1 = mem.sleep(now=T + 30 * DAY)
            first = time.perf_counter() - t0
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            t0 = time.perf_counter()
            mem.sleep(now=T + 31 * DAY)
            second = time.perf_counter() - t0
            ok = mem._store.integrity_check() == "ok"
        size_mb = os.path.getsize(path) / 1e6
    return {
        "edges": n_edges, "zipf": zipf, "build_s": build_s, "sleep_s": first, "second_s": second,
        "peak_rss_mb": peak / 1024, "rss_before_mb": rss_before / 1024, "db_mb": size_mb, "integrity": ok,
        "stages": {k: round(v, 3) for k, v in r1.elapsed.items()},
        "counts": {k: getattr(r1, k) for k in ("protected", "q_updates", "superseded", "merged", "patterns",
                                              "decayed", "retired", "rem_links", "hebbian_faded",
                                              "hebbian_dropped")},
    }


def table(rows: list[dict]) -> str:
    head = ("| edges | vocabulary | build (s) | sleep (s) | target | 2nd sleep (s) | peak RSS (MB) | "
            "slowest stages (s) | protected | superseded | merged | patterns | retired | REM |")
    lines = [head, "|" + "|".join(["---"] * 14) + "|"]
    for r in rows:
        st = sorted(((v, k) for k, v in r["stages"].items() if k != "total"), reverse=True)[:3]
        target = TARGETS.get(r["edges"]) if r["zipf"] else None
        verdict = "" if target is None else (f"≤ {target:g} ✓" if r["sleep_s"] <= target else f"≤ {target:g} ✗")
        c = r["counts"]
        lines.append(
            f"| {r['edges']:,} | {'Zipf 30k' if r['zipf'] else 'uniform 5k (worst case)'} | {r['build_s']:.1f} | "
            f"{r['sleep_s']:.2f} | {verdict} | {r['second_s']:.2f} | {r['peak_rss_mb']:.0f} | "
            + ", ".join(f"{k} {v:.2f}" for v, k in st)
            + f" | {c['protected']:,} | {c['superseded']:,} | {c['merged']:,} | {c['patterns']:,} | "
              f"{c['retired']:,} | {c['rem_links']:,} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--no-worst-case", action="store_true", help="skip the uniform-vocabulary 100k row")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--uniform", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sleep.md"))
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, zipf=not args.uniform)))
        return
    jobs = [(n, False) for n in args.sizes]
    if not args.no_worst_case and 100_000 in args.sizes:
        jobs.append((100_000, True))
    rows = []
    for n, uniform in jobs:
        cmd = [sys.executable, __file__, "--one", str(n)] + (["--uniform"] if uniform else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        row = json.loads(out.strip().splitlines()[-1])
        rows.append(row)
        print(f"{n:>9,} edges{' (uniform)' if uniform else ''}: sleep {row['sleep_s']:.2f} s, "
              f"peak RSS {row['peak_rss_mb']:.0f} MB, stages {row['stages']}", file=sys.stderr)
    md = table(rows)
    load = os.getloadavg()
    header = (f"# Sleep benchmark\n\n`python benchmarks/bench_sleep.py` on {platform.machine()}, "
              f"{os.cpu_count()} cores, Python {platform.python_version()}, SQLite {sqlite3.sqlite_version} "
              f"(load average at the end {load[0]:.1f}). One cycle 30 days after the edges were written "
              f"(every edge decays: every row is rewritten), then a second cycle a day later.\n\n")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(header + md + "\n")
    print(md)


# -- pytest-benchmark / regression gate: one sleep cycle against a full read of the same store ---

try:
    import pytest
except ImportError:  # the script above runs without pytest
    pytest = None

if pytest is not None:

    @pytest.mark.gate
    def test_gate_sleep_vs_full_read(benchmark, tmp_path):
        """Open + one sleep cycle on a fresh copy of a 10k-edge store (30 days after the writes);
        the peer opens another copy with raw sqlite3 and reads every row of every table: the I/O
        floor of any pass over the whole store.  The ratio is far below 1; it tracks how much the
        consolidation stages cost on top of reading what they look at."""
        import shutil

        from conftest import peer_ratio

        rounds, warmup = 8, 2
        master = tmp_path / "master.db"
        build_store(str(master), 10_000)
        copies = []
        for i in range(2 * (rounds + warmup)):
            dst = tmp_path / f"copy{i}.db"
            shutil.copyfile(master, dst)
            copies.append(dst)
        ours_copies, peer_copies = iter(copies[::2]), iter(copies[1::2])

        def ours():
            with Memory(str(next(ours_copies)), embedder=None) as mem:
                mem.sleep(now=T + 30 * DAY)

        def peer():
            con = sqlite3.connect(next(peer_copies))
            try:
                tables = [r[0] for r in con.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
                for name in tables:
                    con.execute(f'SELECT * FROM "{name}"').fetchall()
            finally:
                con.close()

        benchmark.group = "gate: sleep 10k edges"
        peer_ratio(benchmark, ours, peer, peer_name="sqlite3 full read", rounds=rounds, warmup=warmup)


if __name__ == "__main__":
    main()
