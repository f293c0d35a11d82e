"""Targets: RSS and cold start of a store WITH vectors, and search latency with the model.

    python benchmarks/vector_index_bench.py --n 1000000 --workdir /tmp/cm-vec    # the 1M RSS row
    python benchmarks/vector_index_bench.py --n 100000 --workdir /tmp/cm-vec     # the 100k rows

A store of ``--n`` chunks / ``3 n`` edges is written through the bulk API (``store_bench.build_store``,
as ``fast_defaults.py`` does). Its vectors are **synthetic from real-model vectors**: ``--sample``
English-like sentences (``fast_defaults.sentences`` + the LoCoMo dev turns when ``../shared/data`` is
there) are encoded with the default embedder, and chunk *i* gets sample ``i mod sample`` plus Gaussian
noise (cosine ~0.9 to its source), renormalised, stored as the current model's vector of the chunk's
text (so every chunk counts as embedded; nothing is encoded per chunk). Then, each in a fresh process
(``python -c``), medians of ``--runs``:

* ``Memory(path)`` (model installed, the default): the first open builds and saves the vector index
  (``<db>.idx/vectors.usearch``, timed once); later opens memory-map it. Measured: open + first search
  (seconds, RSS, whether the first search already had the semantic channel), then the time until the
  index is ready, RSS after 20 more searches with distinct queries (every one encoded) and their p50;
* the peer: the same store opened with ``embedder=None`` (no vectors at all), open + first search, RSS.

RSS is also read after 100, 500 and 1,000 searches when ``--queries`` is that large (``--queries 501``:
the growth over 500 searches).

Writes ``benchmarks/results/vector_index_targets_<n>.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from fast_defaults import sentences  # noqa: E402
from store_bench import build_store, vocab  # noqa: E402

from causalmem import Memory  # noqa: E402
from causalmem.semantic import resolve_embedder, vector_to_blob  # noqa: E402
from causalmem.store.base import EmbeddingRow  # noqa: E402

RESULTS = HERE / "results"
LOCOMO = REPO.parent / "shared" / "data" / "locomo-dev" / "locomo_dev.json"


def sample_texts(n: int, rng) -> list[str]:
    out: list[str] = []
    if LOCOMO.exists():
        for s in json.loads(LOCOMO.read_text()):
            for k, v in s["conversation"].items():
                if k.startswith("session_") and isinstance(v, list):
                    out += [t["text"] for t in v if isinstance(t, dict) and t.get("text")]
    return (out + sentences(rng, max(0, n - len(out))))[:n]


def write_vectors(path: Path, sample: np.ndarray, model: str, rng, noise: float = 0.45) -> None:
    mem = Memory(path, embedder=None)
    store = mem._store
    rows = store.query("SELECT nid, text_hash FROM chunks WHERE valid_to IS NULL ORDER BY nid")
    nids = np.asarray([r[0] for r in rows], dtype=np.int64)
    hashes = [r[1] for r in rows]
    dim = sample.shape[1]
    for lo in range(0, len(nids), 50_000):
        part = nids[lo: lo + 50_000]
        base = sample[part % sample.shape[0]]
        v = base + (noise / np.sqrt(dim)) * rng.standard_normal(base.shape).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        with store.transaction():
            store.put_embeddings(EmbeddingRow(int(n), model, dim, hashes[lo + j], vector_to_blob(v[j]))
                                 for j, n in enumerate(part.tolist()))
    mem.close()


CHILD = """
import os, sys, time, json
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, {repo!r})
import numpy as np
t0 = time.perf_counter()
from causalmem import Memory
import psutil
def rss():
    return psutil.Process().memory_info().rss / 2**20
def status():
    d = {{}}
    for line in open("/proc/self/status"):
        if line.startswith(("RssAnon", "RssFile")):
            d[line.split(":")[0]] = int(line.split()[1]) / 1024
    return d
queries = {queries!r}
t1 = time.perf_counter()
from causalmem import Config
mem = Memory({db!r}, embedder={spec}, config=Config(vector_quantization={quant!r}))
hits = mem.search(queries[0], top_k=10, reinforce=False, explain=True)
t2 = time.perf_counter()
out = {{"import_s": t1 - t0, "open_search_s": t2 - t1, "hits": len(hits), "rss_first": rss(),
       "status_first": status(), "semantic_first": any(h.signals.get("cosine_rank") is not None for h in hits)}}
if {spec} is not None:
    t = time.perf_counter()
    mem._views.wait_vectors({wait}, folded=True)
    out["ready_s"] = time.perf_counter() - t2
    vi = mem._views.vectors
    out["index"] = repr(vi)
    out["fast"] = bool(vi.loading_fast)
    lat = []
    for i, q in enumerate(queries[1:]):
        t = time.perf_counter()
        mem.search(q, top_k=10, reinforce=False)
        lat.append((time.perf_counter() - t) * 1000)
        if i + 2 in (20, 100, 500, 1000):
            out[f"rss_{{i + 2}}"] = rss()
            out[f"status_{{i + 2}}"] = status()
    out["p50_ms"] = float(np.percentile(lat, 50))
    peer, enc = [], []
    for q in queries[1:41]:  # peers, same queries: without the semantic channel; the query encoding alone
        t = time.perf_counter()
        mem.search(q, top_k=10, reinforce=False, channels=("lexical", "graph"))
        peer.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        mem.embedder.encode([q + " again"])
        enc.append((time.perf_counter() - t) * 1000)
    out["p50_peer_ms"] = float(np.percentile(peer, 50))
    out["p50_encode_ms"] = float(np.percentile(enc, 50))
    out["rss_after"] = rss()
    out["status_after"] = status()
mem.close()
print(json.dumps(out))
"""

RECALL = """
import os, sys, json
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, {repo!r})
import numpy as np
from causalmem import Memory, Config
mem = Memory({db!r}, config=Config(vector_quantization={quant!r}))
mem._views.wait_vectors(3600, folded=True)
with mem._views.lock:
    vi = mem._views.vector_index()
q = np.asarray(mem.embedder.encode({queries!r}), dtype=np.float32)
q /= np.linalg.norm(q, axis=1, keepdims=True)
seg = vi.segment
best = [([], []) for _ in range(q.shape[0])]
for lo, block in seg.rows.blocks():  # exact: every stored vector, one pass
    keys = seg.keys[lo: lo + block.shape[0]]
    sc = block @ q.T
    for j in range(q.shape[0]):
        top = np.argpartition(-sc[:, j], 50)[:50]
        best[j][0].extend(keys[top].tolist())
        best[j][1].extend(sc[top, j].tolist())
r10, r50 = [], []
for j in range(q.shape[0]):
    ids, scs = np.asarray(best[j][0]), np.asarray(best[j][1])
    order = np.argsort(-scs)
    for k, acc in ((10, r10), (50, r50)):
        exact = set(ids[order[:k]].tolist())
        got, _ = vi.search(q[j], top_k=k)
        acc.append(len(exact & set(got.tolist())) / k)
mem.close()
print(json.dumps({{"recall10": float(np.mean(r10)), "recall50": float(np.mean(r50)), "n": len(r10), "index": repr(vi)}}))
"""


def child(db: Path, spec: str, queries: list[str], quant: str, wait: float = 3600, code: str = CHILD) -> dict:
    code = code.format(repo=str(REPO), db=str(db), spec=spec, queries=queries, wait=wait, quant=quant)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=7200)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--sample", type=int, default=20_000, help="texts encoded with the real model")
    ap.add_argument("--workdir", default=None, help="keeps the store (and the encoded sample) between runs")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--queries", type=int, default=101)
    ap.add_argument("--quantization", default="f32", choices=("f32", "f16", "i8"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--build-only", action="store_true", help="write the store and its vectors, then stop")
    ap.add_argument("--index-only", action="store_true", help="also open it once (the index is built), then stop")
    ap.add_argument("--recall", type=int, default=50, help="queries for recall@10 against exact (0: skip)")
    args = ap.parse_args()
    work = Path(args.workdir or f"/tmp/causalmem-vec-{os.getpid()}")
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)
    emb = resolve_embedder("auto")
    assert emb is not None, "needs the packaged model"
    cache = work / f"sample_{args.sample}.npy"
    if cache.exists():
        sample = np.load(cache)
    else:
        t = time.perf_counter()
        sample = np.asarray(emb.encode(sample_texts(args.sample, rng)), dtype=np.float32)
        np.save(cache, sample)
        print(f"encoded the sample in {time.perf_counter() - t:.0f} s", flush=True)
    db = work / f"vec_{args.n}.db"
    if not db.exists():
        t = time.perf_counter()
        build_store(db, rng, vocab(rng), args.n, 3 * args.n).close()
        write_vectors(db, sample, emb.model_name, rng)
        print(f"store written in {time.perf_counter() - t:.0f} s", flush=True)
    if args.build_only:
        return
    queries = [f"{' '.join(s.split()[:-1])} {w}" for s, w in
               zip(sentences(rng, args.queries), ["again", "today", "later", "twice", "badly"] * args.queries)]
    first = None
    head = Path(str(db) + ".idx") / "vectors.json"
    if not head.exists() or json.loads(head.read_text()).get("dtype") != args.quantization:
        first = child(db, "'auto'", queries[:2], args.quantization)  # builds and saves the index (the keeper's direct build)
        print("first open (index built):", first, flush=True)
        (work / f"first_{args.n}_{args.quantization}.json").write_text(json.dumps(first))
    elif (work / f"first_{args.n}_{args.quantization}.json").exists():
        first = json.loads((work / f"first_{args.n}_{args.quantization}.json").read_text())
    if args.index_only:
        return
    load = os.getloadavg()[0]
    runs, peers = [], []
    for _ in range(args.runs):  # alternating: the machine is shared
        runs.append(child(db, "'auto'", queries, args.quantization))
        peers.append(child(db, "None", queries[:1], args.quantization))
        print(runs[-1], flush=True)
    rec = child(db, "'auto'", queries[-args.recall:], args.quantization, code=RECALL) if args.recall else None

    def med(key: str, sub: str | None = None) -> float:
        return statistics.median(r[key][sub] if sub else r[key] for r in runs)

    peer_rss = statistics.median(r["rss_first"] for r in peers)
    peer_s = statistics.median(r["open_search_s"] for r in peers)
    n = args.n
    lines = [f"# Vector index targets, {n:,} chunks with vectors", "",
             f"`python benchmarks/vector_index_bench.py {' '.join(sys.argv[1:])}`", "",
             f"Vectors: {args.sample:,} texts encoded with {emb!r}, then chunk i = sample[i mod {args.sample:,}] + "
             "noise, renormalised (synthetic from real-model vectors; see the script). Fresh process per run "
             f"(`Memory(path)`, model installed), medians of {args.runs}; rows stored as {args.quantization}; "
             f"load average at the start of the timed runs {load:.1f}.", "",
             "| what | figure | peer in the same run | target |", "|---|---|---|---|"]
    if first is not None:
        lines.append(f"| first open of the store: the keeper builds and saves the index | ready after "
                     f"{first['ready_s']:.0f} s ({first['index']}) | | off the query path |")
    lines.append(f"| open + first search (model load and query encoding included) | {med('open_search_s'):.2f} s; "
                 f"semantic channel in the first answer: {sum(r['semantic_first'] for r in runs)}/{len(runs)} runs; "
                 f"index files current: {sum(r['fast'] for r in runs)}/{len(runs)} | embedder=None "
                 f"{peer_s:.2f} s | |")
    lines.append(f"| vector index ready after the first answer | {med('ready_s'):.3f} s | | not on the query path |")
    for key, label in (("rss_first", "1 search"), ("rss_20", "20 searches"), ("rss_100", "100 searches"),
                       ("rss_500", "500 searches"), ("rss_1000", "1,000 searches")):
        if key not in runs[0]:
            continue
        st = "status_" + key.split("_")[1]
        lines.append(f"| RSS after {label} with the model | {med(key):.0f} MB (anonymous {med(st, 'RssAnon'):.0f} MB, "
                     f"file-backed {med(st, 'RssFile'):.0f} MB) | embedder=None after one search {peer_rss:.0f} MB "
                     f"| ≤ 800 MB at 1M |")
    lines.append(f"| `search` with the model ({len(queries) - 1} distinct queries, every one encoded) | p50 "
                 f"{med('p50_ms'):.2f} ms | lexical+graph only p50 {med('p50_peer_ms'):.2f} ms; encoding one query "
                 f"alone p50 {med('p50_encode_ms'):.2f} ms | ≤ 10 ms p50 at 100k |")
    if rec is not None:
        lines.append(f"| recall against exact ({rec['n']} queries, the index as the search uses it) | recall@10 "
                     f"{rec['recall10']:.3f}, recall@50 {rec['recall50']:.3f} | | recall@10 ≥ 0.95 |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out) if args.out else RESULTS / f"vector_index_targets_{n}_{args.quantization}.md"
    if str(out) != "-":
        out.write_text(text)


if __name__ == "__main__":
    main()
