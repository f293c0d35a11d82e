"""Target table: speed at the defaults (``Memory(path)`` with the model installed).

    python benchmarks/fast_defaults.py                       # writes benchmarks/results/fast_defaults.md
    python benchmarks/fast_defaults.py --sizes 100000 --embedded 20000 --out -   # smaller, print only

Every figure is a median from this one run, next to a peer measured in the same run where one
exists (the machine is shared; the ratio is the comparable number):

* ``record_many`` at the default configuration (background embedding) vs ``embedder=None``; each
  batch is checked to be lexically searchable right after the call returns.
* background embedding throughput: chunks written, then ``flush()``; the default encoder vs the
  torch encoder on the same texts.
* ``record_many`` without the model vs raw sqlite3 ``executemany`` of the same shape of rows.
* open + first search in a fresh process (``python -c``), stores of ``--sizes`` chunks written
  through the bulk API (no vectors: the lexical + graph answer, as a store whose backlog is not
  embedded yet), and the same for a store whose chunks all have vectors (``--embedded``).
* search latency p50/p95 with the model (``--embedded`` chunks embedded with the real model by
  the background worker) and without the model at each size.
* a one-shot writer process (``Memory(path)``, one ``record_decision``, ``close`` — a CLI
  ``record``) on each cold-start store, and the open + first search of the reader after it, side
  by side with the code of ``--peer REV`` (exported with ``git archive``) in alternating rounds.

The cold-start stores are kept in ``--stores DIR`` when given (built there once: run
``--build-only`` with other jobs allowed, then the timed run alone on the machine).

The search-with-the-model row on the real-model store ("100k chunks embedded with the
real model"), kept in ``--stores DIR``:

    python benchmarks/fast_defaults.py --stores DIR --build-only --sizes "" --semantic 100000
    python benchmarks/fast_defaults.py --stores DIR --sizes "" --semantic 100000 --queries 200

The build writes 50,000 ``record_many`` pairs of ``sentences`` (batches of 5,000 pairs) at the
default ``Memory(path)``, the background worker embeds every text with the default encoder,
``flush``, ``close``; then one more open searches, waits until the vector index is folded into its
segment and closes (the index files current, as a long-lived process leaves them). The timed run
asks ``paraphrases``: distinct questions about stored sentences in other words (they share words
with the store, so the lexical and graph channels work too), each once per configuration —
default search and lexical+graph only, alternating — plus the stages alone: encoding the query,
the vector-index search.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, RESULTS, bulk_store, export_revision, load_text, setup, write_report

setup()

import numpy as np  # noqa: E402

from store_bench import bench_writes, vocab  # noqa: E402

from causalmem import Memory  # noqa: E402


SUBJ = ["the deploy", "the migration", "the nightly job", "the cache", "the api gateway", "the build",
        "the database", "the payment service", "the search index", "the worker pool"]
VERB = ["failed after", "slowed down after", "recovered after", "timed out during", "crashed after",
        "sped up after", "was rolled back after", "passed after", "ran out of memory after", "stalled during"]
OBJ = ["the config change", "the kernel upgrade", "the schema change", "the traffic spike", "the cache flush",
       "the library bump", "the failover", "the index rebuild", "the load test", "the retry storm"]


def sentences(rng: np.random.Generator, n: int) -> list[str]:
    """English-like decision/outcome sentences (the model sees realistic lengths)."""
    a = rng.integers(0, 10, size=(n, 3))
    return [f"{SUBJ[i]} {VERB[j]} {OBJ[k]} #{m}" for m, (i, j, k) in enumerate(a)]


# How a user asks about a stored sentence: the same thing in other words (a question, a synonym, a
# verb in another form, a time qualifier) — it shares some words with the store, never all of them.
_Q_SUBJ = [["the deploy", "deployment", "our deploys"], ["the migration", "db migration", "migrating"],
           ["the nightly job", "nightly batch job", "the cron job"], ["the cache", "caching layer", "cache"],
           ["the api gateway", "gateway", "the API"], ["the build", "CI build", "builds"],
           ["the database", "db", "postgres database"], ["the payment service", "payments", "billing service"],
           ["the search index", "search", "index search"], ["the worker pool", "workers", "background workers"]]
_Q_VERB = [["why did {s} fail after {o}", "{s} failing after {o}", "what broke {s} after {o}"],
           ["why was {s} slow after {o}", "{s} slowdown after {o}", "{s} got slower after {o}?"],
           ["did {s} recover after {o}", "{s} recovery after {o}", "how did {s} come back after {o}"],
           ["{s} timeouts during {o}", "why did {s} time out during {o}", "{s} timing out in {o}"],
           ["{s} crash after {o}", "what crashed {s} after {o}", "why did {s} crash after {o}"],
           ["why was {s} faster after {o}", "{s} speedup after {o}", "did {s} speed up after {o}"],
           ["why was {s} rolled back after {o}", "{s} rollback after {o}", "rolling back {s} after {o}"],
           ["did {s} pass after {o}", "{s} passing after {o}", "{s} green again after {o}"],
           ["{s} out of memory after {o}", "{s} OOM after {o}", "why did {s} run out of memory after {o}"],
           ["{s} stalled during {o}", "why did {s} stall during {o}", "{s} stuck during {o}"]]
_Q_OBJ = [["the config change", "changing the config", "a configuration change"],
          ["the kernel upgrade", "upgrading the kernel", "the new kernel"],
          ["the schema change", "changing the schema", "a schema migration"],
          ["the traffic spike", "a spike in traffic", "high traffic"],
          ["the cache flush", "flushing the cache", "a cache purge"],
          ["the library bump", "bumping the library", "a dependency upgrade"],
          ["the failover", "failing over", "a failover"],
          ["the index rebuild", "rebuilding the index", "a reindex"],
          ["the load test", "load testing", "the stress test"],
          ["the retry storm", "a storm of retries", "retries piling up"]]
_Q_WHEN = ["", "", " last week", " yesterday", " in production", " on friday", " again", " this morning",
           " in staging", " last night", " during the release", " after lunch"]


def paraphrases(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` distinct questions about the store's sentences (see above): every one encoded by the
    search (the query-vector LRU never answers), every one sharing words with stored texts."""
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        i, j, k = (int(x) for x in rng.integers(0, 10, size=3))
        pick = lambda opts: opts[int(rng.integers(len(opts)))]  # noqa: E731
        q = pick(_Q_VERB[j]).format(s=pick(_Q_SUBJ[i]), o=pick(_Q_OBJ[k])) + pick(_Q_WHEN)
        if q not in seen:
            seen.add(q)
            out.append(q)
    return out


def bench_default_writes(tmp: Path, rng, n_batches: int) -> dict:
    out = {}
    for label, spec in (("default (model installed)", "auto"), ("embedder=None (peer)", None)):
        path = tmp / f"dw_{spec}.db"
        # the default configuration; only what close() does differs: its hand-off would start a
        # ``causalmem embed`` process for the 20,000 texts left to embed, running beside the rows
        # measured next (the peer, background embedding)
        mem = Memory(path, embedder=spec, embed_handoff="off")
        rates, searchable = [], 0
        for b in range(n_batches):
            ds, os_ = sentences(rng, 1000), sentences(rng, 1000)
            batch = [(f"{d} b{b}", f"{o} outcome b{b}") for d, o in zip(ds, os_)]
            t = time.perf_counter()
            mem.record_many(batch)
            rates.append(1000 / (time.perf_counter() - t))
            probe = batch[len(batch) // 2][0]
            hits = mem.search(probe, top_k=5, channels=("lexical",), reinforce=False)
            searchable += any(h.text == probe for h in hits)
        out[label] = (statistics.median(rates), searchable, n_batches, mem.embedder)
        mem.close()
    return out


class _StageTimer:
    """Wall and thread-CPU seconds spent in named functions (wrapped for the benchmark only)."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def wrap(self, owner, name: str, label: str):
        real = getattr(owner, name)

        def timed(*a, **k):
            t, c = time.perf_counter(), time.thread_time()
            try:
                return real(*a, **k)
            finally:
                self.wall[label] = self.wall.get(label, 0.0) + time.perf_counter() - t
                self.cpu[label] = self.cpu.get(label, 0.0) + time.thread_time() - c

        setattr(owner, name, timed)
        return lambda: setattr(owner, name, real)


def bench_background(tmp: Path, rng, n: int, rounds: int = 3) -> dict:
    """Background embedding throughput: ``record_many`` of ``n / 2`` pairs then ``flush()`` at the default
    ``Memory(path)`` and with ``embedder="torch"`` (the peer), fresh texts and store per round, the two
    alternating (ABBA...); per round texts/s and the stage split of the default encoder: the write, the
    worker's queue reads, its encode calls, the rest of its batches (vectors stored, index updated,
    commit), each wall and CPU, and the process CPU per text."""
    import causalmem.embedding as cm_embedding

    out: dict[str, dict] = {}
    specs = (("default encoder", "auto"), ("torch encoder (peer)", "torch"))
    for r in range(rounds):
        for label, spec in (specs if r % 2 == 0 else specs[::-1]):
            items = list(zip(sentences(rng, n // 2), [s + " outcome" for s in sentences(rng, n // 2)]))
            mem = Memory(tmp / f"bg_{spec}_{r}.db", embedder=spec)
            mem.embedder.encode(["warm up the model"])  # load / export outside the timing
            st = _StageTimer()
            undo = [st.wrap(mem, "record_many", "write (record_many)"),
                    st.wrap(mem._store, "chunks_missing_embedding", "queue reads"),
                    st.wrap(mem.embedder, "encode", "encode"),
                    st.wrap(cm_embedding, "_embed_batch", "worker batches")]
            c0, t = time.process_time(), time.perf_counter()
            mem.record_many(items)
            mem.flush()
            wall, cpu = time.perf_counter() - t, time.process_time() - c0
            for u in undo:
                u()
            d = out.setdefault(label, {"rates": [], "stages": [], "cpu_ms_per_text": [], "embedder": repr(mem.embedder),
                                       "load": []})
            d["rates"].append(n / wall)
            d["cpu_ms_per_text"].append(cpu / n * 1000)
            d["load"].append(load_text())
            rest_w = st.wall.get("worker batches", 0.0) - st.wall.get("encode", 0.0)
            rest_c = st.cpu.get("worker batches", 0.0) - st.cpu.get("encode", 0.0)
            stages = {k: (st.wall.get(k, 0.0), st.cpu.get(k, 0.0)) for k in ("write (record_many)", "queue reads", "encode")}
            stages["store vectors + index + commit"] = (rest_w, rest_c)
            stages["total, write → flush (CPU: the whole process)"] = (wall, cpu)
            d["stages"].append(stages)
            mem.close()
    for d in out.values():
        d["median"] = statistics.median(d["rates"])
    return out


def background_rows(bg: dict, n: int, row, lines: list[str]) -> None:
    """The background-embedding row (median over the rounds, every round listed) and its stage split."""
    d, p = bg["default encoder"], bg["torch encoder (peer)"]
    rounds = len(d["rates"])
    row(f"background embedding throughput ({n:,} texts, write → flush; median of {rounds} rounds)",
        f"{d['median']:,.0f} texts/s ({d['embedder']}); rounds: {', '.join(f'{x:,.0f}' for x in d['rates'])}; "
        f"process CPU {statistics.median(d['cpu_ms_per_text']):.2f} ms/text",
        f"torch {p['median']:,.0f} texts/s ({d['median'] / p['median']:.2f}×); rounds: "
        f"{', '.join(f'{x:,.0f}' for x in p['rates'])}; CPU {statistics.median(p['cpu_ms_per_text']):.2f} ms/text",
        "≥ 300 texts/s")
    split = ["", f"Background embedding, stage split of the default encoder ({d['embedder']}), median of "
             f"{rounds} rounds, wall ms / CPU ms of the thread that ran it (the encode's helper threads not "
             "counted in its CPU; the process CPU is in the row above):", "",
             "| stage | wall ms | CPU ms |", "|---|---|---|"]
    for k in d["stages"][0]:
        w = statistics.median(s[k][0] for s in d["stages"]) * 1000
        c = statistics.median(s[k][1] for s in d["stages"]) * 1000
        split.append(f"| {k} | {w:.0f} | {c:.0f} |")
    split.append("")
    split.append(f"Load average after each round: {'; '.join(d['load'])}.")
    for line in split:
        print(line)
    lines.extend(split)


CHILD = """
import os, sys, time, json
os.environ.setdefault("HF_HUB_OFFLINE", "1")
t0 = time.perf_counter()
sys.path.insert(0, {repo!r})
from causalmem import Memory
t1 = time.perf_counter()
mem = Memory({db!r}, embedder={spec})
hits = mem.search({query!r}, top_k=10, reinforce=False)
t2 = time.perf_counter()
if {close}:
    mem.close()  # writes the index files (<db>.idx/) the next open loads
t3 = time.perf_counter()
import psutil
print(json.dumps({{"import_s": t1 - t0, "open_search_s": t2 - t1, "hits": len(hits), "close_s": t3 - t2,
                  "rss_mb": psutil.Process().memory_info().rss / 2**20}}))
"""


def cold_start(db: Path, spec: str, query: str, runs: int = 3, close: bool = False, repo: str = str(REPO)) -> dict:
    res = []
    for _ in range(runs):
        code = CHILD.format(repo=repo, db=str(db), spec=spec, query=query, close=close)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1800,
                           env={**os.environ, "PYTHONPATH": ""})
        if p.returncode != 0:
            raise RuntimeError(p.stderr[-2000:])
        res.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return {k: statistics.median(r[k] for r in res) for k in ("import_s", "open_search_s", "hits", "rss_mb", "close_s")}


WRITER = """
import os, sys, time, json
t0 = time.perf_counter()
sys.path.insert(0, {repo!r})
from causalmem import Memory
import causalmem
assert causalmem.__file__.startswith({repo!r}), causalmem.__file__
t1 = time.perf_counter()
mem = Memory({db!r}, embedder={spec})
mem.record_decision("one-shot decision {tag}", "one-shot outcome {tag}")
mem.close()
print(json.dumps({{"import_s": t1 - t0, "write_s": time.perf_counter() - t1}}))
"""


def one_shot_writes(db: Path, query: str, trees: dict[str, str], rounds: int, tmp: Path,
                    spec: str = "'auto'") -> dict:
    """Per tree, on its own copy of ``db`` and its index files: wall seconds of a one-shot writer
    process (open + one record + close, import excluded) and of the open + first search (+ close)
    of the reader that comes next, both with that tree's code; rounds alternate the trees' order;
    medians."""
    copies = {}
    for k, name in enumerate(trees):
        copy = tmp / f"oneshot_{k}.db"
        shutil.copy(db, copy)
        shutil.rmtree(str(copy) + ".idx", ignore_errors=True)
        shutil.copytree(str(db) + ".idx", str(copy) + ".idx")
        copies[name] = copy
    res: dict[str, dict[str, list[float]]] = {k: {"write": [], "read": [], "close": []} for k in trees}
    for r in range(rounds):
        for name in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
            code = WRITER.format(repo=trees[name], db=str(copies[name]), spec=spec, tag=f"{name} {r}")
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1800,
                               env={**os.environ, "PYTHONPATH": ""})
            if p.returncode != 0:
                raise RuntimeError(p.stderr[-2000:])
            res[name]["write"].append(json.loads(p.stdout.strip().splitlines()[-1])["write_s"])
            c = cold_start(copies[name], spec, query, runs=1, close=True, repo=trees[name])
            res[name]["read"].append(c["open_search_s"])
            res[name]["close"].append(c["close_s"])
    for copy in copies.values():
        copy.unlink()
        shutil.rmtree(str(copy) + ".idx", ignore_errors=True)
    return {k: {m: statistics.median(v) for m, v in d.items()} for k, d in res.items()}


def cold_store(stores: Path, n: int, rng, words, n_queries: int) -> tuple[Path, list[str]]:
    """The cold-start store of ``n`` chunks / ``3 n`` edges in ``stores`` (built once, its index files
    written by a first open + close) and its queries."""
    path = stores / f"cold_{n}.db"
    qfile = stores / f"cold_{n}.queries.json"
    if not (path.exists() and qfile.exists()):
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        shutil.rmtree(str(path) + ".idx", ignore_errors=True)
        mem = bulk_store(path, rng, words, n, n * 3)
        q = [" ".join(r[0].split()[:3]) for r in
             mem._store.query("SELECT text FROM chunks ORDER BY random() LIMIT ?", (max(n_queries, 200),))]
        mem.close()
        qfile.write_text(json.dumps(q))
    return path, json.loads(qfile.read_text())[:n_queries]


def latency(mem: Memory, queries: list[str], **kw) -> tuple[float, float]:
    mem.search(queries[0], reinforce=False, **kw)
    lat = []
    for q in queries:
        t = time.perf_counter()
        mem.search(q, reinforce=False, **kw)
        lat.append((time.perf_counter() - t) * 1000)
    return float(np.percentile(lat, 50)), float(np.percentile(lat, 95))


def embedded_store(stores: Path, n: int) -> tuple[Path, dict]:
    """The real-model store of ``n`` chunks in ``stores`` (built once, kept): ``n / 2``
    decision/outcome pairs (``sentences``) written by ``record_many`` at the default
    ``Memory(path)`` in batches of 5,000 pairs, every text embedded by the background worker
    (the ONNX int8 MiniLM when installed), ``flush()``, ``close()`` (which writes the index files)."""
    path = stores / f"embedded_{n}.db"
    meta = stores / f"embedded_{n}.json"
    if path.exists() and meta.exists():
        return path, json.loads(meta.read_text())
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    shutil.rmtree(str(path) + ".idx", ignore_errors=True)
    rng = np.random.default_rng(n + 1)
    mem = Memory(path)  # the default: model installed, background embedding
    t = time.perf_counter()
    for lo in range(0, n // 2, 5000):
        k = min(5000, n // 2 - lo)
        mem.record_many(list(zip(sentences(rng, k), [s + " outcome" for s in sentences(rng, k)])))
    mem.flush()
    info = {"build_s": time.perf_counter() - t, "embedder": repr(mem.embedder), "chunks": n}
    mem.close()
    settle(path)
    meta.write_text(json.dumps(info))
    return path, info


def settle(path: Path) -> None:
    """What a long-lived process leaves behind: open, search, wait until the vector index is built
    (folded into its segment), close — the index files (``<db>.idx/``) are current."""
    mem = Memory(path)
    mem.search("the deploy failed", reinforce=False)
    assert mem._views.wait_vectors(3600, folded=True)
    mem.search("the deploy failed", reinforce=False)
    mem.close()


def semantic_latency(path: Path, queries: list[str]) -> dict:
    """Warm search latency on ``path`` at the default ``Memory(path)``, each query once per
    configuration, the configurations alternating per query: the default search (three channels,
    query encoded: distinct queries, the LRU never answers), the lexical+graph-only search (the
    peer), and the two stages of the semantic channel alone: encoding the query, the vector-index
    search (``candidates`` ids within the scope)."""
    mem = Memory(path)
    views = mem._views
    mem.search("warm up the model and the index files", reinforce=False)
    views.wait_vectors(120)
    mem.search("warm up once more", reinforce=False)
    vi = views.vectors
    emb = views.embedder
    from causalmem.retrieval import _params_for
    depth = max(_params_for(views.config).candidates, 20)
    t = {"default": [], "lexical+graph": [], "encode": [], "vector search": [], "semantic only": []}
    for r, q in enumerate(queries):
        order = ["default", "lexical+graph"] if r % 2 == 0 else ["lexical+graph", "default"]
        for name in order:
            views.query_cache.clear()
            t0 = time.perf_counter()
            if name == "default":
                mem.search(q, reinforce=False)
            else:
                mem.search(q, reinforce=False, channels=("lexical", "graph"))
            t[name].append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        qv = np.asarray(emb.encode([q]), dtype=np.float32)[0]
        t["encode"].append((time.perf_counter() - t0) * 1000)
        mask = views.chunks.scope_mask()
        t0 = time.perf_counter()
        vi.search(qv, top_k=depth, allowed=mask)
        t["vector search"].append((time.perf_counter() - t0) * 1000)
        views.query_cache.clear()
        t0 = time.perf_counter()
        mem.search(q, reinforce=False, channels=("semantic",))
        t["semantic only"].append((time.perf_counter() - t0) * 1000)
    hits = mem.search(queries[0], reinforce=False, explain=True)
    cov = hits[0].signals["semantic_coverage"] if hits else None
    out = {k: (float(np.percentile(v, 50)), float(np.percentile(v, 90))) for k, v in t.items()}
    out["coverage"] = cov
    out["index"] = repr(vi)
    out["embedder"] = repr(emb)
    mem._views.save_sidecars = lambda: []  # the store's files stay as built
    mem.close()
    return out


def semantic_rows(stores: Path, n: int, n_queries: int, row) -> None:
    path, info = embedded_store(stores, n)
    qs = paraphrases(np.random.default_rng(11), n_queries)
    s = semantic_latency(path, qs)
    (p50, p90), (l50, l90) = s["default"], s["lexical+graph"]
    row(f"`search` with the model, {n:,} chunks embedded with the real model ({info['embedder']}; "
        f"store built + embedded at the default in {info['build_s']:.0f} s); {len(qs)} distinct questions "
        "paraphrasing stored sentences (every one encoded)",
        f"p50 {p50:.2f} ms, p90 {p90:.2f} ms; of which: query encode p50 {s['encode'][0]:.2f} ms, vector-index "
        f"search p50 {s['vector search'][0]:.2f} ms; semantic channel alone p50 {s['semantic only'][0]:.2f} ms; "
        f"coverage {s['coverage']}",
        f"lexical+graph only p50 {l50:.2f} ms, p90 {l90:.2f} ms", "≤ 10 ms p50")


def write_rows(tmp: Path, rng, words, args, row) -> list[str]:
    """The write rows: ``record_many`` at the default vs ``embedder=None``, background embedding
    (default encoder vs torch), ``record_many`` without the model vs raw sqlite3."""
    dw = bench_default_writes(tmp, rng, args.batches)
    (r_def, s_def, nb, emb), (r_none, _, _, _) = dw["default (model installed)"], dw["embedder=None (peer)"]
    row("`record_many` at the default configuration (batches of 1,000 pairs)",
        f"{r_def:,.0f} edges/s ({emb!r}); lexically searchable at once: {s_def}/{nb} batches",
        f"embedder=None {r_none:,.0f} edges/s ({r_def / r_none:.2f}×)", "≥ 10,000 edges/s")
    split: list[str] = []  # the background row's stage split, printed below the table
    if args.background:
        bg = bench_background(tmp, rng, args.background, args.bg_rounds)
        background_rows(bg, args.background, row, split)
    w = bench_writes(tmp, rng, words, n_single=200, n_batches=args.batches)
    ref = w["raw sqlite3 executemany (reference)"]
    rm = w["record_many (batches of 1,000)"]
    row("`record_many` without the model (batches of 1,000)", f"{rm:,.0f} edges/s",
        f"raw sqlite3 executemany {ref:,.0f} ({rm / ref:.2f}×)", "≥ 20,000 edges/s")
    return split


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000", help="store sizes (chunks) for cold start / no-model search")
    ap.add_argument("--embedded", type=int, default=100_000, help="chunks embedded with the real model")
    ap.add_argument("--background", type=int, default=2048, help="texts for the background throughput row (0: none)")
    ap.add_argument("--bg-rounds", type=int, default=3, help="rounds of the background row (median reported)")
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--out", default=str(RESULTS / "fast_defaults.md"))
    ap.add_argument("--stores", help="directory keeping the cold-start stores between runs")
    ap.add_argument("--build-only", action="store_true", help="build the cold-start stores in --stores, time nothing")
    ap.add_argument("--peer", default="4bf789f", help="revision of the one-shot writer peer ('' to skip)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the one-shot writer rows")
    ap.add_argument("--skip-writes", action="store_true", help="no write / background rows")
    ap.add_argument("--semantic", type=int, default=0,
                    help="only the search-with-the-model row on the kept real-model store of this many chunks "
                         "in --stores (built there by --build-only)")
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    words = vocab(rng)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.build_only:
        assert args.stores, "--build-only needs --stores"
        if args.semantic:
            embedded_store(Path(args.stores), args.semantic)
        for n in sizes:
            path, q = cold_store(Path(args.stores), n, np.random.default_rng(n), words, args.queries)
            cold_start(path, "None", q[0], runs=1, close=True)  # writes the index files (all three)
        return
    argv = ["DIR" if k and sys.argv[k] == args.stores and sys.argv[k - 1] == "--stores" else a
            for k, a in enumerate(sys.argv)]  # no machine path in the report
    lines = ["# Fast at the defaults", "",
             f"`python benchmarks/fast_defaults.py {' '.join(argv[1:])}`".replace(" `", "`"), "",
             "| what | figure | peer in the same run | target |", "|---|---|---|---|"]

    def row(what, fig, peer, target):
        lines.append(f"| {what} | {fig} | {peer} | {target} |")
        print(lines[-1], flush=True)

    with tempfile.TemporaryDirectory(prefix="causalmem-fast-") as d:
        tmp = Path(d)
        lines.insert(3, f"Load average at the start: {load_text()}.")
        if args.semantic:
            assert args.stores, "--semantic needs --stores (the kept real-model store)"
            semantic_rows(Path(args.stores), args.semantic, args.queries, row)
            lines.extend(["", f"Load average at the end: {load_text()}."])
            write_report(lines, args.out)
            return
        notes: list[str] = []  # text below the table
        if not args.skip_writes:
            notes = write_rows(tmp, rng, words, args, row)
        stores = Path(args.stores) if args.stores else tmp
        trees = {"current tree": str(REPO)}
        if args.peer and sizes:
            trees[f"before ({args.peer})"] = str(export_revision(args.peer, tmp / "peer"))
        for n in sizes:
            path, q = cold_store(stores, n, np.random.default_rng(n), words, args.queries)
            idx, kept = Path(str(path) + ".idx"), Path(str(path) + ".idx-kept")
            if idx.exists():  # the peer: no index files (a rebuild from the database); not saved
                cold_start(path, "None", q[0], runs=1, close=True)  # every file current (not timed)
                shutil.rmtree(kept, ignore_errors=True)
                idx.rename(kept)
                c_first = cold_start(path, "None", q[0], runs=1, close=False)
                shutil.rmtree(idx, ignore_errors=True)
                kept.rename(idx)
            else:  # a fresh store: the first open rebuilds and writes the files at close
                c_first = cold_start(path, "None", q[0], runs=1, close=True)
            c_none = cold_start(path, "None", q[0])
            c_auto = cold_start(path, "'auto'", q[0])
            row(f"open + first search, {n:,} chunks, fresh process (no vectors stored; index files from an "
                "earlier close)",
                f"{c_auto['open_search_s']:.2f} s default, {c_none['open_search_s']:.2f} s embedder=None "
                f"(+ import {c_auto['import_s']:.2f} s); RSS {c_auto['rss_mb']:.0f} MB",
                f"without index files (rebuild from the database): {c_first['open_search_s']:.2f} s "
                f"({c_first['open_search_s'] / max(c_auto['open_search_s'], 1e-9):.0f}×)",
                "≤ 0.3 s at 100k, ≤ 1 s at 1M")
            # warm path side by side: views loaded from the index files vs rebuilt from the database,
            # queries alternating between the two (same answers checked)
            mem_files = Memory(path, embedder=None)
            mem_files.search(q[0], reinforce=False)
            idx.rename(kept)
            mem_rebuilt = Memory(path, embedder=None)
            mem_rebuilt.search(q[0], reinforce=False)
            lat_f, lat_r = [], []
            for qq in q:
                got = []
                for m, lat in ((mem_files, lat_f), (mem_rebuilt, lat_r)):
                    t = time.perf_counter()
                    got.append([h.id for h in m.search(qq, reinforce=False)])
                    lat.append((time.perf_counter() - t) * 1000)
                assert got[0] == got[1], qq
            mem_files._views.save_sidecars = lambda: []  # the files stay as loaded
            mem_files.close()
            mem_rebuilt._views.save_sidecars = lambda: []
            mem_rebuilt.close()
            shutil.rmtree(idx, ignore_errors=True)
            kept.rename(idx)
            p50, p95 = float(np.percentile(lat_f, 50)), float(np.percentile(lat_f, 95))
            r50 = float(np.percentile(lat_r, 50))
            row(f"`search` without the model, {n:,} chunks / {3 * n:,} edges", f"p50 {p50:.2f} ms, p95 {p95:.2f} ms "
                "(views loaded from the index files)", f"views rebuilt from the database: p50 {r50:.2f} ms "
                f"({p50 / r50:.2f}×; same answers)", "no worse than 2.0 / 3.8 ms")
            # a one-shot writer (a CLI `record`) and the reader after it, this tree vs the peer's code
            if len(trees) > 1:
                ow = one_shot_writes(path, q[1], trees, args.rounds, tmp)
                cur, (peer_name, peer) = ow["current tree"], [(k, v) for k, v in ow.items() if k != "current tree"][0]
                row(f"one-shot writer process, {n:,} chunks (`Memory(path)` + `record_decision` + `close`, import "
                    f"excluded; {args.rounds} rounds)", f"{cur['write'] * 1000:.0f} ms (appends one journal line)",
                    f"{peer_name}: {peer['write'] * 1000:.0f} ms (loads and rewrites the index files; "
                    f"{peer['write'] / max(cur['write'], 1e-9):.1f}×)", "cheap")
                row(f"open + first search of the reader after that write, {n:,} chunks (its close)",
                    f"{cur['read']:.2f} s (files of an earlier state caught up from the journal; close "
                    f"{cur['close'] * 1000:.0f} ms)", f"{peer_name}: {peer['read']:.2f} s (files current; close "
                    f"{peer['close'] * 1000:.0f} ms)", "≤ 0.3 s at 100k, ≤ 1 s at 1M")
        if args.embedded:
            n = args.embedded
            path = tmp / f"embedded_{n}.db"
            mem = Memory(path)  # the default: model installed, background embedding
            t = time.perf_counter()
            for lo in range(0, n // 2, 5000):
                k = min(5000, n // 2 - lo)
                mem.record_many(list(zip(sentences(rng, k), [s + " outcome" for s in sentences(rng, k)])))
            mem.flush()
            build_s = time.perf_counter() - t
            # distinct queries (a sentence shape plus a random word): the query-vector LRU never hits
            qs = [f"{' '.join(s.split()[:-1])} {words[int(rng.integers(len(words)))]}"
                  for s in sentences(rng, args.queries)]
            p50, p95 = latency(mem, qs)
            mem._views.query_cache.clear()
            p50n, p95n = latency(mem, qs, channels=("lexical", "graph"))
            emb = repr(mem.embedder)
            mem.close()
            row(f"`search` with the model, {n:,} chunks embedded with the real model ({emb}; built + embedded "
                f"in {build_s:.0f} s)", f"p50 {p50:.2f} ms, p95 {p95:.2f} ms ({len(set(qs))} distinct queries: "
                f"every one encoded)", f"lexical+graph only p50 {p50n:.2f} ms", "≤ 10 ms p50")
            c = cold_start(path, "'auto'", qs[0])
            row(f"open + first search, {n:,} chunks with vectors, fresh process", f"{c['open_search_s']:.2f} s, "
                f"RSS {c['rss_mb']:.0f} MB", "", "≤ 0.3 s at 100k; RSS ≤ 800 MB at 1M")
        lines.extend(notes)
    lines.append("")
    lines.append(f"Load average at the end: {load_text()}.")
    write_report(lines, args.out)


if __name__ == "__main__":
    main()
