"""Warm ``search`` latency of two checkouts side by side, query by query.

    python benchmarks/search_before_after.py OLD_TREE=OLD_DB NEW_TREE=NEW_DB [JSON_SEARCH_KWARGS]

Each TREE is a checkout whose ``causalmem`` is imported (its kernel built in place), each DB a
store that checkout can open (an old checkout cannot open a newer schema: build the store with
the old checkout, e.g. ``store_bench.build_store`` or ``search_speed.open_store``, and give the new
one a copy, which it migrates), with the queries in ``OLD_DB.queries.json`` (a JSON list of
strings). Two persistent processes answer the same queries alternately, one query at a time,
so the load of a shared machine hits both alike; printed: wall p50/p95 of each (the first run
of a query), CPU p50 (its second run), how many queries found something (queries made of the
store's own words all should: ``search_speed.queries`` takes 3-5 words of a stored turn) and the
median per-query ratio of process CPU time (new / old). ``embedder=None``, ``reinforce=False``.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import numpy as np

CHILD = r"""
import sys, time, json
sys.path.insert(0, sys.argv[1])
from causalmem import Memory
import causalmem
assert causalmem.__file__.startswith(sys.argv[1]), causalmem.__file__
mem = Memory(sys.argv[2], embedder=None)
kw = json.loads(sys.argv[3])
print("ready", flush=True)
for line in sys.stdin:
    q = json.loads(line)
    t = time.perf_counter()
    hits = mem.search(q, reinforce=False, **kw)
    dt = (time.perf_counter() - t) * 1000
    t = time.process_time()
    mem.search(q, reinforce=False, **kw)
    ct = (time.process_time() - t) * 1000
    print(json.dumps([dt, ct, len(hits)]), flush=True)
"""


def ask(p: subprocess.Popen, q: str) -> list[float]:
    p.stdin.write(json.dumps(q) + "\n")
    p.stdin.flush()
    return json.loads(p.stdout.readline())


def main() -> None:
    specs = [a.split("=", 1) for a in sys.argv[1:3]]  # tree=db
    kw = sys.argv[3] if len(sys.argv) > 3 else "{}"
    qs = json.load(open(specs[0][1] + ".queries.json"))
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, tree, db, kw], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for tree, db in specs]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
        for q in qs[:3]:  # the first searches build the in-memory indexes
            ask(p, q)
    print("load average at the start: %.2f / %.2f / %.2f" % os.getloadavg(), flush=True)
    res: list[list[list[float]]] = [[], []]
    for i, q in enumerate(qs):
        for k in ((0, 1) if i % 2 == 0 else (1, 0)):
            res[k].append(ask(procs[k], q))
    for p in procs:
        p.stdin.close()
        p.wait()
    for k, (tree, db) in enumerate(specs):
        w = [r[0] for r in res[k]]
        c = [r[1] for r in res[k]]
        print(f"{tree} {db}: wall p50 {np.percentile(w, 50):.2f} ms, p95 {np.percentile(w, 95):.2f} ms, "
              f"CPU p50 {np.percentile(c, 50):.2f} ms; queries with hits {sum(r[2] > 0 for r in res[k])}/{len(qs)}")
    print("load average at the end: %.2f / %.2f / %.2f" % os.getloadavg())
    ratio = [b[1] / a[1] for a, b in zip(res[0], res[1]) if a[1] > 0]
    print(f"per-query CPU time, new / old: median {statistics.median(ratio):.3f} ({len(ratio)} queries)")


if __name__ == "__main__":
    main()
