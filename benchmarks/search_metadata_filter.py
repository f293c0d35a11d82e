"""Search latency with a metadata filter beside the same search without one, in one run.

A store of N chunks in ONE scope (``user_id="u"``): Zipf pseudo-word texts (``search_speed.TextGen``),
metadata ``{"tier": i % 5, "tags": [2 of 20 tags, + "rare" on 1%], "ts": ISO date over 1000 days}``
(every chunk's metadata text differs: the cache gets no help from repeated metadata), written
with the store's bulk insert and cached on disk between runs; no edges. Searches
(``reinforce=False``: a pure read) in that scope with

* (a) no filter, (b) ``{"tier": 2}`` (20%), (c) ``{"tier": {"$in": [1, 3]}, "ts": {"$gte": the N/2-th chunk's}}``
  (20%), (d) ``{"tags": {"$contains": "rare"}}`` (1%);

query by query, the four in rotating order (load hits them alike), over ``--searches`` queries of
3-5 words of a stored text; median wall ms of each, the ratio to (a), and:

* ``cold``: the first search with each filter (nothing known yet: every chunk's metadata is read),
* ``after own update``: a search with filter (b) right after ``update(metadata=...)`` of one chunk,
* ``after other write``: a search with (b) right after another connection (a second ``Memory`` on
  the file: what another process's commit looks like to this one) changed one chunk's metadata,
* RSS (MB) after the unfiltered searches and after the filtered ones (the filter cache's cost).

``embedder=None`` at every size; with the default model (``Memory(path)``: the packaged MiniLM, the
query encoded per search) at ``--model-sizes``. ``--before REV`` also measures git revision REV
(exported, its kernel built in a temporary directory) on the same stores, each configuration
right after the other (same load).

    python benchmarks/search_metadata_filter.py --before REV   # -> results/search_metadata_filter.md
    python benchmarks/search_metadata_filter.py --sizes 10k --model-sizes none --searches 30 --out -
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO, RESULTS, export_revision, load_text, setup, write_report

setup()
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

GEN = 2
T0 = _dt.datetime(2024, 1, 1)


def ts(i: int) -> str:
    return (T0 + _dt.timedelta(seconds=797 * i)).isoformat() + "Z"


def filters(n: int) -> dict[str, Any]:
    """The four searches' filters on a store of ``n`` chunks; (c): the later half's tiers 1 and 3 (20%)."""
    return {"none": None, "eq": {"tier": 2}, "in+gte": {"tier": {"$in": [1, 3]}, "ts": {"$gte": ts(n // 2)}},
            "1%": {"tags": {"$contains": "rare"}}}


def metadata(i: int) -> dict[str, Any]:
    """Chunk i's metadata; its ``ts`` (i x 797 s after T0: 1.7 years at 100k, 2 months at 10k) differs per chunk."""
    tags = [f"tag{i % 20}", f"tag{(i * 7 + 3) % 20}"] + (["rare"] if i % 100 == 0 else [])
    return {"tier": i % 5, "tags": tags, "ts": ts(i)}


def build(path: Path, n: int, model: bool) -> None:
    """The store at ``path`` (kept while its generation tag matches)."""
    from causalmem import Memory
    from search_speed import TextGen

    tag = f"{GEN}:{n}:{model}"
    if path.exists():
        mem = Memory(path, embedder=None)
        ok = mem._store.get_meta("bench_meta_gen") == tag
        mem.close()
        if ok:
            return
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    texts = TextGen(0).texts(n, "t")
    mem = Memory(path, embedder=None)
    now = time.time()
    for lo in range(0, n, 50_000):
        with mem._store.transaction():
            mem._store.insert_chunks_bulk([
                {"text": texts[i], "kind": "turn", "created_at": now, "q_value": 0.5, "user_id": "u",
                 "metadata": metadata(i)} for i in range(lo, min(n, lo + 50_000))])
    mem.close()
    if model:
        mem = Memory(path)
        mem.reembed()
        mem.close()
    mem = Memory(path, embedder=None)
    mem.search("w100x", user_id="u", reinforce=False)  # the index files in <db>.idx/, saved at close
    mem._store.set_meta("bench_meta_gen", tag)
    mem.close()


def queries(n: int, k: int) -> list[str]:
    import numpy as np
    from search_speed import TextGen

    texts = TextGen(0).texts(n, "t")
    rng = np.random.default_rng(11)
    out = []
    for i in rng.integers(0, n, size=k).tolist():
        words = texts[i].split()[1:]
        out.append(" ".join(rng.choice(words, size=min(int(rng.integers(3, 6)), len(words)), replace=False)))
    return out


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def child(tree: str, db: str, n: int, model: bool, searches: int) -> dict[str, Any]:
    """One tree's measurement on one store (run in its own process: ``--child``)."""
    sys.path.insert(0, tree)
    import causalmem
    from causalmem import Memory

    assert causalmem.__file__.startswith(tree), causalmem.__file__
    qs = queries(n, searches + 3)
    mem = Memory(db) if model else Memory(db, embedder=None)
    if model:
        mem.wait_embedded(600)
    for q in qs[:3]:  # the indexes load, the model warms up
        mem.search(q, user_id="u", reinforce=False)
    rss0 = rss_mb()
    out: dict[str, Any] = {"cold": {}}
    specs = filters(n)
    for name, spec in specs.items():
        if spec is not None:
            t = time.perf_counter()
            mem.search(qs[0], user_id="u", metadata=spec, reinforce=False)
            out["cold"][name] = (time.perf_counter() - t) * 1000
    lat: dict[str, list[float]] = {name: [] for name in specs}
    hits: dict[str, int] = {name: 0 for name in specs}
    names = list(specs)
    for k, q in enumerate(qs[3:]):
        for j in range(len(names)):
            name = names[(k + j) % len(names)]
            t = time.perf_counter()
            got = mem.search(q, user_id="u", metadata=specs[name], reinforce=False)
            lat[name].append((time.perf_counter() - t) * 1000)
            hits[name] += len(got)
    out["median"] = {name: statistics.median(v) for name, v in lat.items()}
    out["hits"] = hits
    out["rss_before_filters"] = rss0
    out["rss_after_filters"] = rss_mb()
    cache = getattr(mem._views, "meta_cache", None)
    out["cache_mb"] = None if cache is None else cache_bytes(cache) / 2**20
    # one chunk's metadata changes (own write / another connection's), then a filtered search
    ids = [c.id for c in mem.get_all(user_id="u", limit=5)]
    own, other = [], []
    second = Memory(db, embedder=None)
    for r in range(5):
        mem.update(ids[r], metadata={"tier": (r + 1) % 5})
        t = time.perf_counter()
        mem.search(qs[3 + r], user_id="u", metadata=specs["eq"], reinforce=False)
        own.append((time.perf_counter() - t) * 1000)
        second.update(ids[r], metadata={"tier": r % 5})
        t = time.perf_counter()
        mem.search(qs[3 + r], user_id="u", metadata=specs["eq"], reinforce=False)
        other.append((time.perf_counter() - t) * 1000)
    for r in range(5):  # back as built
        second.update(ids[r], metadata={"tier": metadata_tier(second, ids[r])})
    second.close()
    out["after_own_update"] = statistics.median(own)
    out["after_other_write"] = statistics.median(other)
    mem.close()
    return out


def deep_size(o: Any) -> int:
    """Bytes of a parsed JSON value (sys.getsizeof of it and everything in it)."""
    size = sys.getsizeof(o)
    if isinstance(o, dict):
        size += sum(deep_size(k) + deep_size(v) for k, v in o.items())
    elif isinstance(o, list):
        size += sum(deep_size(v) for v in o)
    return size


def cache_bytes(cache: Any) -> int:
    """What a ``FilterCache`` holds: its arrays, texts, index and parsed values."""
    size = cache.code.nbytes + sys.getsizeof(cache.texts) + sys.getsizeof(cache.index) + sys.getsizeof(cache.parsed)
    size += sum(sys.getsizeof(t) for t in cache.texts) + sum(deep_size(p) for p in cache.parsed if p is not None)
    for e in cache.filters.values():
        size += e.hits.nbytes + (e.nids.nbytes if e.nids is not None else 0)
    return size


def metadata_tier(mem: Any, cid: str) -> int:
    """The tier the builder gave chunk ``cid`` (its text starts with ``t<i> ``)."""
    return int(mem.get(cid).text.split()[0][1:]) % 5


def run_child(tree: Path, db: Path, n: int, model: bool, searches: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    res = subprocess.run([sys.executable, __file__, "--child", str(tree), str(db), str(n), str(int(model)),
                          str(searches)], env=env, capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"child {tree} {db} failed:\n{res.stderr[-4000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def label(n: int) -> str:
    return f"{n // 1000}k"


def parse_sizes(s: str) -> list[int]:
    if s.strip().lower() == "none":
        return []
    return [int(float(x.strip().lower().rstrip("k")) * 1000) for x in s.split(",")]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        tree, db, n, model, searches = sys.argv[2:7]
        print(json.dumps(child(tree, db, int(n), model == "1", int(searches))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10k,100k", help="store sizes measured with embedder=None")
    ap.add_argument("--model-sizes", default="10k", help="store sizes measured with the default model ('none')")
    ap.add_argument("--searches", type=int, default=30, help="searches per filter (>= 30 for the report)")
    ap.add_argument("--before", default=None, help="a git revision measured side by side (e.g. main)")
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("CAUSALMEM_BENCH_CACHE", tempfile.gettempdir() + "/causalmem-bench")))
    ap.add_argument("--out", default=str(RESULTS / "search_metadata_filter.md"))
    ap.add_argument("--build-only", action="store_true", help="build the cached stores, measure nothing")
    args = ap.parse_args()
    if args.searches < 1:
        raise SystemExit(f"--searches must be at least 1, got {args.searches}")
    args.cache.mkdir(parents=True, exist_ok=True)
    configs = [(n, False) for n in parse_sizes(args.sizes)] + [(n, True) for n in parse_sizes(args.model_sizes)]
    for n, model in configs:
        build(args.cache / f"meta-{label(n)}{'-model' if model else ''}.db", n, model)
    if args.build_only:
        return
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "causalmem"], capture_output=True,
                           text=True).stdout.strip()
    trees: list[tuple[str, Path]] = [(f"{commit}{' (+ uncommitted changes)' if dirty else ''}", REPO)]
    tmp = None
    if args.before:
        tmp = tempfile.TemporaryDirectory()
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.before], capture_output=True,
                             text=True, check=True).stdout.strip()
        trees.insert(0, (f"{rev} (before)", export_revision(args.before, Path(tmp.name))))
    lines = ["# Metadata-filtered search beside unfiltered search", "",
             "    python benchmarks/search_metadata_filter.py " + " ".join(sys.argv[1:]), "",
             f"Commit {commit}; {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC; load average at the "
             f"start {load_text()}. {args.searches} searches per filter, median wall ms per search, "
             "reinforce=False, one scope (user_id='u') holding every chunk, every chunk's metadata text "
             "distinct. Filters: (a) none, (b) {\"tier\": 2} (20%), (c) {\"tier\": {\"$in\": [1, 3]}, "
             "\"ts\": {\"$gte\": ts of chunk N/2}} (20%), (d) {\"tags\": {\"$contains\": \"rare\"}} "
             "(1%). cold: the first "
             "search with each filter; after own update / other write: a search with (b) right after one "
             "chunk's metadata changed by this Memory / by a second Memory on the file (another "
             "connection's commit); RSS after the unfiltered and after the filtered searches; filter cache MB: "
             "the sizes (sys.getsizeof) of what the cache holds after the run (texts, parsed values, arrays).", "",
             "| N | embedder | tree | (a) none | (b) eq | (c) $in+$gte | (d) 1% | (b)/(a) | (c)/(a) | (d)/(a) "
             "| cold (b) / (c) / (d) | after own update | after other write | RSS MB before / after filters "
             "| filter cache MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, model in configs:
        db = args.cache / f"meta-{label(n)}{'-model' if model else ''}.db"
        for name, tree in trees:
            r = run_child(tree, db, n, model, args.searches)
            m, c = r["median"], r["cold"]
            lines.append(
                f"| {label(n)} | {'MiniLM (default)' if model else 'None'} | {name} | {m['none']:.2f} | {m['eq']:.2f} "
                f"| {m['in+gte']:.2f} | {m['1%']:.2f} | {m['eq'] / m['none']:.2f} | {m['in+gte'] / m['none']:.2f} "
                f"| {m['1%'] / m['none']:.2f} | {c['eq']:.0f} / {c['in+gte']:.0f} / {c['1%']:.0f} "
                f"| {r['after_own_update']:.2f} | {r['after_other_write']:.2f} "
                f"| {r['rss_before_filters']:.0f} / {r['rss_after_filters']:.0f} "
                f"| {'-' if r['cache_mb'] is None else format(r['cache_mb'], '.1f')} |")
            print(lines[-1], flush=True)
    lines += ["", f"Load average at the end: {load_text()}."]
    write_report(lines, args.out)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
