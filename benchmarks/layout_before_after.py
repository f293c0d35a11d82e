"""The kernel, ``search`` and ``record_many`` of two checkouts side by side, alternately, in one run.

    python benchmarks/layout_before_after.py OLD_TREE NEW_TREE [--rounds 15] [--out FILE.json]

Each TREE is a checkout whose ``causalmem`` is imported (its kernel built in place:
``python setup.py build_ext --inplace``). One persistent child process per tree answers each
measurement in turn, old then new then old ..., so the load of a shared machine hits both alike:

* ``kernel``: 8 spreads (``CSR.spread``, the causal preset of ``benchmarks/conftest.py``, random
  seed sets) on the seeded 100k-node / 1M-edge power-law graph, one timing per round;
* ``search``: ``Memory.search`` at the default configuration (MiniLM embedder, every channel,
  ``reinforce=True``) on a store of the LoCoMo-dev conversations' turns (file store, every vector
  embedded first), one query of the dev questions per call, warm;
* ``record_many``: ``Memory.record_many`` of 20 (cause, effect) pairs at the default configuration
  (the vectors are the background worker's), into a growing file store.

Printed: the median of each (ms) per tree and the ratio new / old of the medians.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import sys, time, json, os, tempfile
tree = sys.argv[1]
sys.path.insert(0, tree)
sys.path.insert(1, os.path.join(tree, "benchmarks"))
import numpy as np
import causalmem
assert causalmem.__file__.startswith(tree), causalmem.__file__
from causalmem import Memory
from causalmem.spreading import CSR
from conftest import CAUSAL_BENCH, powerlaw_edges, random_seed_sets

data = json.load(open(sys.argv[2]))
turns, questions = [], []
for conv in data:
    for key, sess in conv["conversation"].items():
        if key.startswith("session_") and isinstance(sess, list):
            turns += [f"{t['speaker']}: {t['text']}" for t in sess]
    questions += [q["question"] for q in conv["qa"]]
work = tempfile.mkdtemp(prefix="layout-ab-")
src, dst, val, inh = powerlaw_edges(100_000, 1_000_000)
csr = CSR.from_coo(100_000, src, dst, val, inhibitory=inh)
seed_sets = random_seed_sets(100_000, 8)
energy = np.full(10, 0.75, np.float32)
search_mem = Memory(os.path.join(work, "search.db"))
search_mem.add(turns)
assert search_mem.wait_embedded(600)
record_mem = Memory(os.path.join(work, "record.db"))
state = {"q": 0, "r": 0}
print("ready", flush=True)
for line in sys.stdin:
    what = line.strip()
    if what == "kernel":
        t = time.perf_counter()
        for s in seed_sets:
            csr.spread(s, energy, **CAUSAL_BENCH)
    elif what == "search":
        q = questions[state["q"] % len(questions)]
        state["q"] += 1
        t = time.perf_counter()
        search_mem.search(q, top_k=10)
    elif what == "record_many":
        k = state["r"]
        state["r"] += 1
        pairs = [(f"step {k}.{i}: deploy the build without running the tests",
                  f"outcome {k}.{i}: the service crashed in production") for i in range(20)]
        t = time.perf_counter()
        record_mem.record_many(pairs)
    else:
        raise SystemExit(f"unknown {what!r}")
    print(json.dumps((time.perf_counter() - t) * 1000), flush=True)
search_mem.close()
record_mem.close()
"""

WHAT = ("kernel", "search", "record_many")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--search-per-round", type=int, default=10)
    ap.add_argument("--data", required=True, help="the LoCoMo dev conversations (locomo_dev.json)")
    ap.add_argument("--out")
    args = ap.parse_args()
    trees = {"old": args.old, "new": args.new}
    procs = {k: subprocess.Popen([sys.executable, "-c", CHILD, str(Path(t).resolve()), args.data],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for k, t in trees.items()}
    for p in procs.values():
        assert p.stdout.readline().strip() == "ready"

    def ask(k: str, what: str) -> float:
        p = procs[k]
        p.stdin.write(what + "\n")
        p.stdin.flush()
        return float(json.loads(p.stdout.readline()))

    times: dict[str, dict[str, list[float]]] = {k: {w: [] for w in WHAT} for k in trees}
    for _ in range(2):  # warm-up: first spreads, first searches (index load, query thread)
        for k in trees:
            for w in WHAT:
                ask(k, w)
    for r in range(args.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for w in WHAT:
            for _ in range(args.search_per_round if w == "search" else 1):
                for k in order:
                    times[k][w].append(ask(k, w))
    for p in procs.values():
        p.stdin.close()
        p.wait(120)
    out = {}
    print(f"{'':12} {'old ms':>9} {'new ms':>9} {'new/old':>8}   (medians; n per tree)")
    for w in WHAT:
        o, n = statistics.median(times["old"][w]), statistics.median(times["new"][w])
        out[w] = {"old_ms": o, "new_ms": n, "ratio": n / o, "n": len(times["old"][w])}
        print(f"{w:12} {o:9.2f} {n:9.2f} {n / o:8.3f}   n={len(times['old'][w])}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
