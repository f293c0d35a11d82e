"""Cold start: a fresh process imports causalmem, opens a store and answers its first search.

    python benchmarks/cold_start.py --baseline ddd01a1       # writes benchmarks/results/cold_start.md
    python benchmarks/cold_start.py --sizes 300000 --no-vectors --out -   # a quick look, print only

Stores are built once into ``--cache`` (default ``$TMPDIR/causalmem-cold-start``) and reused by
later runs; ``--rebuild`` starts them over. Every store is written by ``record_many`` only, batches
of 1,000 decision/outcome pairs (``store_bench`` texts: Zipf words), in a process that never
searches: closed by ``with`` (``close``), or left open when the interpreter exits (``exit``). The
store with vectors is written by the default ``Memory(path)`` and closed with ``drain=True`` (every
chunk embedded by the packaged MiniLM); the others by ``Memory(path, embedder=None)`` (embedding a
million chunks on this machine is not part of a cold start).

Each figure is the median of ``--runs`` fresh processes. A reader runs the default
``Memory(path)`` (the model installed, ``HF_HUB_OFFLINE=1``) and times, inside the process, from
before ``import causalmem`` to the first search's answer (``reinforce=False``, so a run changes
nothing the next one reads); the process's whole wall clock (interpreter start and exit included)
is given beside it. Each reader also reports what it rebuilt from the database instead of loading
from ``<db>.idx/`` (``IndexFiles.rebuilt``, ``Projection.rebuilds``).

The write rate: ``record_many`` into a fresh store (``embedder=None``), this tree and ``--baseline``
in alternating fresh processes (the baseline exported with ``git archive`` into a temporary
directory); the rate counts the ``record_many`` calls, and ``close`` (where this tree builds and
saves the index files) is reported beside it as the writer's extra time.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import HERE, REPO, RESULTS, export_revision, load_text, write_report

BUILD = r"""
import sys, time
tree, bench, path, n_chunks, mode = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
sys.path[:0] = [tree, bench]
import numpy as np
from store_bench import texts, vocab
from causalmem import Memory
rng = np.random.default_rng(7)
words = vocab(rng)
t = time.perf_counter()
m = Memory(path, embedder="auto" if mode == "vectors" else None)
for _ in range(n_chunks // 2000):
    m.record_many(list(zip(texts(rng, words, 1000), texts(rng, words, 1000))))
print(f"wrote {n_chunks} chunks in {time.perf_counter() - t:.1f} s", file=sys.stderr)
if mode == "vectors":
    m.close(drain=True)
elif mode == "close":
    m.close()
# mode "exit": the interpreter's exit closes it
"""

READ = r"""
import time
t0 = time.perf_counter()
import json, sys
tree, path, query, channels = sys.argv[1], sys.argv[2], sys.argv[3], tuple(sys.argv[4].split(","))
sys.path.insert(0, tree)
import causalmem
from causalmem import Memory
m = Memory(path)
t1 = time.perf_counter()
hits = m.search(query, channels=channels, reinforce=False)
t2 = time.perf_counter()
views = m._views
again = m.search(query, channels=channels, reinforce=False, explain=True)  # not timed: which channel answered
semantic = sum(1 for h in again if (h.signals or {}).get("cosine") is not None)
out = {"first": t2 - t0, "open": t1 - t0, "search": t2 - t1, "hits": len(hits), "semantic_hits": semantic,
       "rebuilt": dict(getattr(views.files, "rebuilt", {})), "graph_rebuilds": views.projection.rebuilds,
       "heavy": sorted(k for k in ("scipy", "onnxruntime", "usearch", "torch", "sentence_transformers")
                       if k in sys.modules)}
m.close()
print(json.dumps(out))
"""

RATE = r"""
import json, sys, tempfile, time
from pathlib import Path
tree, bench, n_batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path[:0] = [tree, bench]
import causalmem  # first: store_bench's _common puts this checkout on sys.path
from causalmem import Memory
import numpy as np
from store_bench import texts, vocab
assert causalmem.__file__.startswith(tree), causalmem.__file__
rng = np.random.default_rng(11)
words = vocab(rng)
batches = [list(zip(texts(rng, words, 1000), texts(rng, words, 1000))) for _ in range(n_batches)]
with tempfile.TemporaryDirectory() as d:
    m = Memory(Path(d) / "w.db", embedder=None)
    spent = 0.0
    for b in batches:
        t = time.perf_counter()
        m.record_many(b)
        spent += time.perf_counter() - t
    t = time.perf_counter()
    m.close()
    closing = time.perf_counter() - t
    idx = sorted(p.name for p in (Path(d) / "w.db.idx").glob("*.cmx")) if (Path(d) / "w.db.idx").exists() else []
print(json.dumps({"rate": n_batches * 1000 / spent, "write_s": spent, "close_s": closing, "files": idx}))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    return env


def _child(code: str, *args: object, timeout: float = 7200) -> dict:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=_env(), capture_output=True,
                          text=True, timeout=timeout, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    lines = proc.stdout.strip().splitlines()
    out = json.loads(lines[-1]) if lines else {}
    out["wall"] = wall
    return out


def build(cache: Path, name: str, n_chunks: int, mode: str, rebuild: bool) -> Path:
    """The store ``name`` in ``cache`` (built now when missing or ``rebuild``)."""
    path = cache / name / "m.db"
    done = cache / name / "done"
    if done.exists() and not rebuild:
        return path
    if (cache / name).exists():
        subprocess.run(["rm", "-rf", str(cache / name)], check=True)
    (cache / name).mkdir(parents=True)
    t = time.perf_counter()
    _child(BUILD, REPO, HERE, path, n_chunks, mode)
    done.write_text(f"{n_chunks} {mode} {time.perf_counter() - t:.1f}\n")
    print(f"built {name}: {n_chunks} chunks ({mode}) in {time.perf_counter() - t:.0f} s", flush=True)
    return path


def readers(path: Path, query: str, channels: str, runs: int) -> dict:
    got = [_child(READ, REPO, path, query, channels) for _ in range(runs)]
    med = {k: statistics.median(g[k] for g in got) for k in ("first", "open", "search", "wall")}
    med["hits"] = got[-1]["hits"]
    med["semantic_hits"] = got[-1]["semantic_hits"]
    med["rebuilt"] = sum(sum(g["rebuilt"].values()) + g["graph_rebuilds"] for g in got)
    med["heavy"] = sorted({h for g in got for h in g["heavy"]})
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "causalmem-cold-start")
    ap.add_argument("--rebuild", action="store_true", help="build the cached stores again")
    ap.add_argument("--sizes", default="300000,1000000", help="chunks of the lexical stores")
    ap.add_argument("--vectors", type=int, default=100_000, help="chunks of the store with vectors")
    ap.add_argument("--no-vectors", action="store_true")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--baseline", default=None, help="git revision to compare the write rate with")
    ap.add_argument("--rate-batches", type=int, default=100, help="batches of 1,000 pairs per write-rate run")
    ap.add_argument("--out", default=str(RESULTS / "cold_start.md"))
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",") if s]
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    rows: list[tuple[str, dict, str]] = []
    query = None
    for n in sizes:
        path = build(a.cache, f"lexical-{n}", n, "close", a.rebuild)
        if query is None:  # mid-frequency words of the store_bench vocabulary
            query = _query()
        rows.append((f"fresh process: import + open + first lexical-only search, {n:,} chunks written by "
                     f"`record_many` only", readers(path, query, "lexical", a.runs), "lexical"))
    if sizes:
        n = max(sizes)
        path = build(a.cache, f"exit-{n}", n, "exit", a.rebuild)
        rows.append((f"the same after the writer exited without `close()`, {n:,} chunks",
                     readers(path, query or _query(), "lexical", a.runs), "lexical"))
    if not a.no_vectors:
        path = build(a.cache, f"vectors-{a.vectors}", a.vectors, "vectors", a.rebuild)
        rows.append((f"first full search (semantic channel on) in a fresh process, {a.vectors:,} chunks with vectors, "
                     f"encoder start included", readers(path, query or _query(), "lexical,semantic,graph", a.runs),
                     "full"))
    rate_rows = []
    if a.baseline:
        with tempfile.TemporaryDirectory() as tmp:
            base = export_revision(a.baseline, Path(tmp) / "base")
            trees = {"this tree": REPO, f"{a.baseline}": base}
            got: dict[str, list[dict]] = {k: [] for k in trees}
            for r in range(a.runs):
                order = list(trees) if r % 2 == 0 else list(trees)[::-1]
                for k in order:
                    got[k].append(_child(RATE, trees[k], HERE, a.rate_batches))
            for k, runs in got.items():
                rate_rows.append((k, statistics.median(g["rate"] for g in runs),
                                  statistics.median(g["close_s"] for g in runs),
                                  statistics.median(g["write_s"] for g in runs), runs[-1]["files"]))
    lines = [
        "# Cold start",
        "",
        f"Commit `{commit}`; load average at the end {load_text()} (a shared 2-core machine); "
        f"medians of {a.runs} fresh processes.",
        "",
        "```",
        "python benchmarks/cold_start.py " + " ".join(sys.argv[1:]),
        "```",
        "",
        "Readers: the default `Memory(path)` (packaged MiniLM installed, `HF_HUB_OFFLINE=1`), the page cache warm. "
        "*first*: from before `import causalmem` to the first search's answer, inside the process; *process*: the "
        "child's whole wall clock (interpreter start and exit, `close`, included). *rebuilt*: views built from the "
        "database instead of loaded from `<db>.idx/`, summed over the runs.",
        "",
        "| what | first (s) | open (s) | search (s) | process (s) | hits | rebuilt | heavy modules imported |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for what, med, _kind in rows:
        heavy = ", ".join(med["heavy"]) or "none"
        hits = f"{med['hits']}" + (f" ({med['semantic_hits']} semantic)" if _kind == "full" else "")
        lines.append(f"| {what} | {med['first']:.3f} | {med['open']:.3f} | {med['search']:.3f} | {med['wall']:.3f} "
                     f"| {hits} | {med['rebuilt']} | {heavy} |")
    if rate_rows:
        lines += [
            "",
            f"Write rate: `record_many`, {a.rate_batches} batches of 1,000 pairs into a fresh store, "
            "`Memory(path, embedder=None)`, the trees in alternating fresh processes. The rate counts the "
            "`record_many` calls; `close` is where this tree builds and saves the index files.",
            "",
            "| tree | edges/s | ratio | record_many total (s) | close (s) | files left |",
            "|---|---|---|---|---|---|",
        ]
        ref = rate_rows[1][1]
        for k, rate, close_s, write_s, files in rate_rows:
            lines.append(f"| {k} | {rate:,.0f} | {rate / ref:.2f}x | {write_s:.2f} | {close_s:.2f} | "
                         f"{', '.join(files) or 'none'} |")
    write_report(lines, a.out)


def _query() -> str:
    import numpy as np

    sys.path.insert(0, str(HERE))
    from store_bench import vocab

    words = vocab(np.random.default_rng(7))
    return " ".join(words[i] for i in (3, 40, 400))


if __name__ == "__main__":
    main()
