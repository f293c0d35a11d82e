"""What the detached ``causalmem embed`` started by a one-shot writer's ``close()`` costs
(the README's "bounded hand-off child" figure).

    python benchmarks/handoff_child.py --workdir DIR [--older 10000] [--runs 2] [--tree PATH ...]

Per run and per tree (this checkout, and any older checkout given with ``--tree``, alternating):
a store with ``--older`` chunks written with ``embedder=None`` (an older backlog without vectors),
then a one-shot writer at the default ``Memory(path)`` (model installed, a fresh ``python -c``
process) records one decision/outcome pair and exits. Measured from the writer's exit: whether a
child took the store's embed lock (``<db>.idx/embed.lock``), how long until it released it, and
how many chunks have a vector afterwards (read from the SQLite file). The writer and the child
run the tree under test; this script only polls the lock (``flock``, non-blocking, every 5 ms)
and reads the file. Linux/macOS only (the hand-off needs ``flock``).
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

OLDER = """
from causalmem import Memory
mem = Memory({db!r}, embedder=None)
mem.record_many([{{"decision": "older task %d moved shard %d of the queue" % (i, i % 97),
                   "outcome": "older task %d saw replica %d catch up" % (i, i % 89)}}
                  for i in range({pairs})])
mem.close()
"""

WRITER = """
from causalmem import Memory
mem = Memory({db!r})
mem.record_decision("the one-shot writer raised the consumer's batch size",
                    "the one-shot writer saw the queue lag drop")
mem.close()
"""


def _run(tree: Path, code: str, handoff: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUSALMEM_")}
    env.update(PYTHONPATH=str(tree), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if handoff is not None:
        env["CAUSALMEM_EMBED_HANDOFF"] = handoff
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=str(tree), timeout=900)


def _lock_held(lock: Path) -> bool:
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops a lock this process took
    return False


def _vectors(db: Path) -> tuple[int, int]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        chunks = con.execute("SELECT count(*) FROM chunks").fetchone()[0]
        vecs = con.execute("SELECT count(*) FROM embeddings").fetchone()[0]
    finally:
        con.close()
    return int(chunks), int(vecs)


def one(tree: Path, base: Path, work: Path, tag: str) -> dict:
    db = work / f"{tag}.db"
    for p in work.glob(f"{tag}.db*"):
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    for p in base.parent.glob(base.name + "*"):
        dst = work / p.name.replace(base.name, f"{tag}.db", 1)
        shutil.copytree(p, dst) if p.is_dir() else shutil.copy2(p, dst)
    before = _vectors(db)
    t0 = time.perf_counter()
    _run(tree, WRITER.format(db=str(db)), None)
    exited = time.perf_counter()
    lock = db.parent / (db.name + ".idx") / "embed.lock"
    held = seen = _lock_held(lock)
    while held:
        time.sleep(0.005)
        held = _lock_held(lock)
    released = time.perf_counter()
    after = _vectors(db)
    return {"tree": str(tree), "writer_s": round(exited - t0, 2), "child": seen,
            "lock_held_after_exit_s": round(released - exited, 2) if seen else 0.0,
            "chunks": after[0], "vectors_before": before[1], "vectors_after": after[1],
            "embedded_by_writer_and_child": after[1] - before[1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True, type=Path)
    ap.add_argument("--older", type=int, default=10000, help="older chunks without vectors (pairs x 2)")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--tree", type=Path, action="append", default=[],
                    help="another checkout to time alternately (e.g. a worktree of an older commit)")
    args = ap.parse_args()
    if args.older < 2 or args.runs < 1:
        ap.error("--older must be >= 2 and --runs >= 1")
    trees = [HERE.parent, *[t.resolve() for t in args.tree]]
    args.workdir.mkdir(parents=True, exist_ok=True)
    base = args.workdir / "base.db"
    if not base.exists():
        _run(HERE.parent, OLDER.format(db=str(base), pairs=args.older // 2), "0")
    rows = []
    for r in range(args.runs):
        for k, tree in enumerate(trees):
            row = one(tree, base, args.workdir, f"run{r}_tree{k}")
            rows.append(row)
            print(json.dumps(row), flush=True)
    for k, tree in enumerate(trees):
        held = [x["lock_held_after_exit_s"] for x in rows if x["tree"] == str(tree)]
        got = [x["embedded_by_writer_and_child"] for x in rows if x["tree"] == str(tree)]
        print(f"{tree}: lock held after the writer's exit, median {statistics.median(held):.2f} s "
              f"(runs {held}); chunks embedded by the writer and its child {got}; load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
