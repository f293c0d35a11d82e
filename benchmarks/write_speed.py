"""``record_many`` without the model, before/after in one run.

    python benchmarks/write_speed.py --baseline 8a72a54      # writes benchmarks/results/write_speed.md
    python benchmarks/write_speed.py --rounds 2 --out -      # current tree only, print only

Batches of 1,000 decision/outcome pairs (``store_bench`` texts: Zipf words, distinct) into a
fresh file store, ``embedder=None``, as ``store_bench.bench_writes`` does. Each round runs every
tree in its own fresh process, the order alternating between rounds, so a shared machine's load
hits both alike; figures are medians over all batches of all rounds, wall clock and process CPU
time (CPU time is what the code costs; wall clock is what a caller waits, load included). The
raw-sqlite3 peer (``store_bench.raw_store``: the same rows with no causalmem logic) runs in the
same rounds. ``--baseline REV`` exports that revision's package with ``git archive`` into a
temporary directory and builds its kernel there; nothing is written into the repository.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import HERE, REPO, RESULTS, export_revision, load_text, write_report

CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
tree, bench, seed, n_batches = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, bench)
sys.path.insert(0, tree)
if tree != "raw":
    import causalmem  # before store_bench, which puts this repository first on sys.path
import numpy as np
from store_bench import raw_insert, raw_store, texts, vocab
rng = np.random.default_rng(seed)
words = vocab(rng)
batches = [list(zip(texts(rng, words, 1000), texts(rng, words, 1000))) for _ in range(n_batches)]
wall, cpu = [], []
with tempfile.TemporaryDirectory() as d:
    if tree == "raw":
        con = raw_store(Path(d) / "raw.db")
        for i, b in enumerate(batches):
            flat = [x for pair in b for x in pair]
            t, c = time.perf_counter(), time.process_time()
            raw_insert(con, flat, 2000 * i)
            wall.append(1000 / (time.perf_counter() - t)); cpu.append(1000 / max(1e-9, time.process_time() - c))
        con.close()
    else:
        from causalmem import Memory
        assert causalmem.__file__.startswith(tree), causalmem.__file__
        with Memory(Path(d) / "w.db", embedder=None) as mem:
            for b in batches:
                t, c = time.perf_counter(), time.process_time()
                mem.record_many(b)
                wall.append(1000 / (time.perf_counter() - t)); cpu.append(1000 / max(1e-9, time.process_time() - c))
print(json.dumps([wall, cpu]))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", metavar="REV", help="git revision to measure side by side")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--out", default=str(RESULTS / "write_speed.md"))
    args = ap.parse_args()
    load_start = load_text()
    trees = {"current tree": str(REPO)}
    with tempfile.TemporaryDirectory(prefix="causalmem-write-baseline-") as tmp:
        if args.baseline:
            trees = {f"baseline {args.baseline}": str(export_revision(args.baseline, Path(tmp))), **trees}
        trees["raw sqlite3 executemany (peer)"] = "raw"
        res: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in trees}
        for r in range(args.rounds):
            for name in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
                p = subprocess.run([sys.executable, "-c", CHILD, trees[name], str(HERE), str(r), str(args.batches)],
                                   capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
                if p.returncode != 0:
                    raise RuntimeError(p.stderr[-3000:])
                wall, cpu = json.loads(p.stdout.strip().splitlines()[-1])
                res[name][0].extend(wall)
                res[name][1].extend(cpu)
    load = f"{load_start} at the start, {load_text()} at the end"
    cur = res["current tree"]
    lines = ["# `record_many` without the model, before/after", "",
             f"`python benchmarks/write_speed.py{' --baseline ' + args.baseline if args.baseline else ''}` — "
             f"{args.rounds} rounds × {args.batches} batches of 1,000 pairs per tree, fresh process and file each, "
             f"order alternating; {os.cpu_count()} cores, load average {load} (wall-clock rates "
             "fall with the load; CPU-time rates and the ratios are the comparable figures).", "",
             "| writer | wall edges/s (median) | CPU-time edges/s (median) | × current, wall / CPU |", "|---|---|---|---|"]
    for name, (wall, cpu) in res.items():
        w, c = statistics.median(wall), statistics.median(cpu)
        lines.append(f"| {name} | {w:,.0f} | {c:,.0f} | {w / statistics.median(cur[0]):.2f} / "
                     f"{c / statistics.median(cur[1]):.2f} |")
    write_report(lines, args.out)


if __name__ == "__main__":
    main()
