"""How long a search with the model holds the ``Memory`` lock while it waits for its query encode, and
what that costs a writer thread of the same process.

    python benchmarks/search_lock_wait.py --workdir DIR [--chunks 3000] [--searches 150] [--rounds 2]

One process, the default ``Memory(path)`` (model installed) on a store of ``--chunks`` chunks written by
``record_many`` and embedded with the real model. Per round, two configurations alternate, each on a
fresh ``Memory`` of the same file: searches with every channel, and the peer, lexical + graph searches
(no encode); meanwhile a writer thread writes one decision/outcome pair every 2 ms. Measured: the
search's wait inside ``PendingQuery.result()`` (the only place a search waits for its encode, under
the lock), search latency, the writer's ``record_decision`` latency. Medians over the round.
Then, in fresh processes, the first search of a process that waited for its vectors (as the framework
adapters do) while a writer thread runs: the lock wait then includes the query session's load.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("CAUSALMEM_EMBED_HANDOFF", "0")  # the writer threads' rows stay with this process

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from causalmem import Memory  # noqa: E402
from causalmem import views as views_mod  # noqa: E402

WORDS = ("cache queue consumer deploy rollback latency index disk memory shard replica timeout retry batch worker "
         "lock schema migration alert page budget quota").split()


def sentence(rng, k: int) -> str:
    return " ".join(rng.choice(WORDS, 6)) + f" step {k}"


class Waits:
    """Times every ``PendingQuery.result()`` call (the search's wait for its encode, lock held)."""

    def __init__(self) -> None:
        self.ms: list[float] = []
        real = views_mod.PendingQuery.result

        def timed(pq):
            t = time.perf_counter()
            out = real(pq)
            self.ms.append((time.perf_counter() - t) * 1000)
            return out

        views_mod.PendingQuery.result = timed  # type: ignore[method-assign]


def one_round(db: Path, channels: tuple[str, ...], searches: int, waits: Waits, rng) -> dict:
    mem = Memory(db)
    mem.search("warm up the model", reinforce=False)
    mem._views.wait_vectors(120, folded=True)
    mem.search("warm up again", reinforce=False)
    waits.ms.clear()
    stop = threading.Event()
    writes: list[float] = []

    def writer() -> None:
        k = 0
        while not stop.is_set():
            t = time.perf_counter()
            mem.record_decision(f"writer thread decision {k} {time.time()}", f"writer outcome {k}")
            writes.append((time.perf_counter() - t) * 1000)
            k += 1
            time.sleep(0.002)

    th = threading.Thread(target=writer)
    th.start()
    lat = []
    for i in range(searches):
        t = time.perf_counter()
        mem.search(f"{sentence(rng, i)} query {i} {channels[-1]}", reinforce=False, channels=channels)
        lat.append((time.perf_counter() - t) * 1000)
    stop.set()
    th.join()
    mem.close()
    return {"channels": "+".join(channels), "search_p50_ms": statistics.median(lat),
            "lock_wait_p50_ms": statistics.median(waits.ms) if waits.ms else 0.0,
            "lock_wait_p90_ms": float(np.percentile(waits.ms, 90)) if waits.ms else 0.0,
            "write_p50_ms": statistics.median(writes), "write_p90_ms": float(np.percentile(writes, 90)),
            "write_max_ms": max(writes), "writes": len(writes), "searches": searches}


FIRST = """
import json, sys, threading, time
sys.path.insert(0, {repo!r})
from causalmem import Memory
from causalmem import views as views_mod
waits = []
real = views_mod.PendingQuery.result
def timed(pq):
    t = time.perf_counter(); out = real(pq); waits.append((time.perf_counter() - t) * 1000); return out
views_mod.PendingQuery.result = timed
mem = Memory({db!r})
mem.wait_embedded(120)  # as the framework adapters do: the vector index is loaded, the query encoder not
stop = threading.Event(); writes = []
def writer():
    k = 0
    while not stop.is_set():
        t = time.perf_counter(); mem.record_decision("adapter write %d %f" % (k, time.time()), "its outcome")
        writes.append((time.perf_counter() - t) * 1000); k += 1; time.sleep(0.005)
th = threading.Thread(target=writer); th.start(); time.sleep(0.1)
t = time.perf_counter()
mem.search("which consumer setting cut the lag", reinforce=False)
s = (time.perf_counter() - t) * 1000
time.sleep(0.1); stop.set(); th.join()
mem.close()
print(json.dumps({{"first_search_ms": s, "lock_wait_ms": sum(waits), "write_max_ms": max(writes),
                  "writes": len(writes)}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--chunks", type=int, default=3000)
    ap.add_argument("--searches", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--first", type=int, default=3, help="fresh processes for the first-search case")
    ap.add_argument("--out", default=str(HERE / "results" / "search_lock_wait.md"))
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    db = work / f"lockwait_{args.chunks}.db"
    if not db.exists():
        with Memory(db) as m:
            m.record_many([(sentence(rng, i), sentence(rng, i + 10 ** 6)) for i in range(args.chunks // 2)])
            m.flush()
    load = os.getloadavg()
    waits = Waits()
    rows = []
    for _ in range(args.rounds):
        for ch in (("lexical", "semantic", "graph"), ("lexical", "graph")):
            rows.append(one_round(db, ch, args.searches, waits, rng))
            print(json.dumps(rows[-1]), flush=True)
    firsts = []
    for i in range(args.first):
        copy = work / f"first_{i}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(str(copy) + suffix).unlink(missing_ok=True)
        subprocess.run(["cp", str(db), str(copy)], check=True)
        subprocess.run(["rm", "-rf", str(copy) + ".idx"], check=True)
        subprocess.run(["cp", "-r", str(db) + ".idx", str(copy) + ".idx"], check=False)
        p = subprocess.run([sys.executable, "-c", FIRST.format(repo=str(HERE.parent), db=str(copy))],
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise RuntimeError(p.stderr[-3000:])
        firsts.append(json.loads(p.stdout.strip().splitlines()[-1]))
        print(json.dumps(firsts[-1]), flush=True)
    lines = ["# A search's wait for its query encode, under the lock", "",
             f"`python benchmarks/search_lock_wait.py --workdir DIR --chunks {args.chunks} --searches {args.searches} "
             f"--rounds {args.rounds} --first {args.first}`", "",
             f"Load average at the start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}. One process, default "
             f"`Memory(path)` on {args.chunks:,} chunks embedded with the real model; a writer thread writes one pair "
             "every 2 ms beside the search loop. Not a timed target: the figures compare the two configurations "
             "of the same run.", "",
             "| searches | search p50 | search's wait for its encode, lock held: p50 / p90 | writer thread: "
             "write p50 / p90 / max | writes |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['channels']} | {r['search_p50_ms']:.2f} ms | {r['lock_wait_p50_ms']:.2f} / "
                     f"{r['lock_wait_p90_ms']:.2f} ms | {r['write_p50_ms']:.2f} / {r['write_p90_ms']:.2f} / "
                     f"{r['write_max_ms']:.1f} ms | {r['writes']} |")
    lines += ["", "First search of a fresh process that waited for its vectors (a writer thread beside it):", "",
              "| run | first search | wait for the encode, lock held | writer's longest write | writes meanwhile |",
              "|---|---|---|---|---|"]
    for i, f in enumerate(firsts, 1):
        lines.append(f"| {i} | {f['first_search_ms']:.0f} ms | {f['lock_wait_ms']:.1f} ms | {f['write_max_ms']:.0f} ms "
                     f"| {f['writes']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out != "-":
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
