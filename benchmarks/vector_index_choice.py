"""Which approximate vector index replaces the hand-written IVF?

usearch vs hnswlib vs faiss-cpu (IndexHNSWFlat), all HNSW, against exact numpy search, on the
seeded clustered 384-d data of ``bench_vectors.py`` (stands in for MiniLM vectors). One process,
queries alternate between the candidates (the machine is shared), medians.

    python benchmarks/vector_index_choice.py [--n 100000] [--queries 200]

Measured per candidate: build (add all vectors, 2 threads), recall@10 against exact, query p50,
save, reopen (load into RAM; usearch also as a memory-mapped view), RSS growth of the reopened
index, and scope-filtered search at two scope sizes (1% and 20% of the vectors):

* hnswlib: its ``filter=`` callback (a Python call per visited node),
* faiss: ``SearchParametersHNSW(sel=IDSelectorBitmap)`` (a bitmap checked in C++),
* usearch: no filter in the Python API; over-fetch 10x top-k and mask, exact scan of the
  allowed rows when fewer than top-k survive (what the engine does for every index).

Writes benchmarks/results/vector_index.md.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_vectors import Clustered  # noqa: E402

RESULTS = HERE / "results"
DIM = 384
K = 10
M, EF_C, EF_S = 16, 128, 64


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def exact_topk(x: np.ndarray, q: np.ndarray, k: int, allowed: np.ndarray | None = None) -> np.ndarray:
    s = x @ q
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    part = np.argpartition(-s, k)[:k]
    return part[np.argsort(-s[part])]


class Usearch:
    name = "usearch"

    def build(self, x):
        from usearch.index import Index

        self.ix = Index(ndim=DIM, metric="ip", dtype="f32", connectivity=M, expansion_add=EF_C, expansion_search=EF_S)
        self.ix.add(np.arange(x.shape[0], dtype=np.uint64), x, threads=2)

    def search(self, q, k):
        return np.asarray(self.ix.search(q, k, threads=1).keys, dtype=np.int64)

    def search_filtered(self, q, k, allowed, x):
        keys = np.asarray(self.ix.search(q, 10 * k, threads=1).keys, dtype=np.int64)
        keys = keys[allowed[keys]][:k]
        if keys.shape[0] < k:
            rows = np.flatnonzero(allowed)
            s = x[rows] @ q
            take = np.argsort(-s)[:k]
            keys = rows[take]
        return keys

    def save(self, path):
        self.ix.save(str(path))

    def load(self, path, view=False):
        from usearch.index import Index

        self.ix = Index.restore(str(path), view=view)
        self.ix.expansion_search = EF_S


class Hnswlib:
    name = "hnswlib"

    def build(self, x):
        import hnswlib

        self.ix = hnswlib.Index(space="ip", dim=DIM)
        self.ix.init_index(max_elements=x.shape[0], M=M, ef_construction=EF_C)
        self.ix.add_items(x, np.arange(x.shape[0]), num_threads=2)
        self.ix.set_ef(EF_S)

    def search(self, q, k):
        return self.ix.knn_query(q, k=k, num_threads=1)[0][0].astype(np.int64)

    def search_filtered(self, q, k, allowed, x):
        try:
            return self.ix.knn_query(q, k=k, num_threads=1, filter=lambda i: bool(allowed[i]))[0][0].astype(np.int64)
        except RuntimeError:  # fewer than k reachable under the filter
            rows = np.flatnonzero(allowed)
            return rows[np.argsort(-(x[rows] @ q))[:k]]

    def save(self, path):
        self.ix.save_index(str(path))

    def load(self, path, view=False):
        import hnswlib

        self.ix = hnswlib.Index(space="ip", dim=DIM)
        self.ix.load_index(str(path))
        self.ix.set_ef(EF_S)


class Faiss:
    name = "faiss HNSWFlat"

    def build(self, x):
        import faiss

        faiss.omp_set_num_threads(2)
        self.ix = faiss.IndexHNSWFlat(DIM, M, faiss.METRIC_INNER_PRODUCT)
        self.ix.hnsw.efConstruction = EF_C
        self.ix.add(x)
        self.ix.hnsw.efSearch = EF_S

    def search(self, q, k):
        import faiss

        faiss.omp_set_num_threads(1)
        return self.ix.search(q.reshape(1, -1), k)[1][0].astype(np.int64)

    def search_filtered(self, q, k, allowed, x):
        import faiss

        bits = np.packbits(allowed, bitorder="little")
        sel = faiss.IDSelectorBitmap(allowed.shape[0], faiss.swig_ptr(bits))
        params = faiss.SearchParametersHNSW(sel=sel, efSearch=EF_S)
        ids = self.ix.search(q.reshape(1, -1), k, params=params)[1][0].astype(np.int64)
        return ids[ids >= 0]

    def save(self, path):
        import faiss

        faiss.write_index(self.ix, str(path))

    def load(self, path, view=False):
        import faiss

        self.ix = faiss.read_index(str(path), faiss.IO_FLAG_MMAP if view else 0)
        self.ix.hnsw.efSearch = EF_S


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    data = Clustered(seed=0, blobs=max(200, args.n // 50))
    x = data.draw(args.n, seed=1)
    qs = data.draw(args.queries, seed=2)
    truth = [exact_topk(x, q, K) for q in qs]
    rng = np.random.default_rng(3)
    scopes = {f"{p:.0%} scope": rng.random(args.n) < p for p in (0.01, 0.2)}
    truth_f = {s: [exact_topk(x, q, K, m) for q in qs] for s, m in scopes.items()}
    cands = [Usearch(), Hnswlib(), Faiss()]
    rows = {c.name: {} for c in cands}
    tmp = Path(tempfile.mkdtemp(prefix="vindex-"))
    for c in cands:
        gc.collect()
        t = time.perf_counter()
        c.build(x)
        rows[c.name]["build_s"] = time.perf_counter() - t
        t = time.perf_counter()
        c.save(tmp / c.name.split()[0])
        rows[c.name]["save_s"] = time.perf_counter() - t
        rows[c.name]["file_mb"] = os.path.getsize(tmp / c.name.split()[0]) / 2**20
        del c.ix
        gc.collect()
        print(c.name, "built", rows[c.name], flush=True)
    # reopen (RAM), then time everything alternating per query
    for c in cands:
        gc.collect()
        before = rss_mb()
        t = time.perf_counter()
        c.load(tmp / c.name.split()[0])
        rows[c.name]["load_s"] = time.perf_counter() - t
        rows[c.name]["load_rss_mb"] = rss_mb() - before
    lat = {c.name: [] for c in cands}
    lat_exact = []
    rec = {c.name: [] for c in cands}
    flat = {c.name: {s: [] for s in scopes} for c in cands}
    frec = {c.name: {s: [] for s in scopes} for c in cands}
    for i, q in enumerate(qs):
        t = time.perf_counter()
        exact_topk(x, q, K)
        lat_exact.append((time.perf_counter() - t) * 1000)
        for c in cands:
            t = time.perf_counter()
            got = c.search(q, K)
            lat[c.name].append((time.perf_counter() - t) * 1000)
            rec[c.name].append(len(set(got.tolist()) & set(truth[i].tolist())) / K)
            for s, m in scopes.items():
                t = time.perf_counter()
                got = c.search_filtered(q, K, m, x)
                flat[c.name][s].append((time.perf_counter() - t) * 1000)
                frec[c.name][s].append(len(set(got.tolist()) & set(truth_f[s][i].tolist())) / K)
    # usearch / faiss memory-mapped views
    views = {}
    for c in cands:
        if isinstance(c, Hnswlib):
            continue
        del c.ix
        gc.collect()
        before = rss_mb()
        t = time.perf_counter()
        c.load(tmp / c.name.split()[0], view=True)
        load_s = time.perf_counter() - t
        vl = []
        for q in qs[:50]:
            t = time.perf_counter()
            c.search(q, K)
            vl.append((time.perf_counter() - t) * 1000)
        views[c.name] = (load_s, rss_mb() - before, statistics.median(vl))
    ex = statistics.median(lat_exact)
    lines = [
        f"# Vector index choice: HNSW libraries vs exact, {args.n:,} x {DIM} clustered vectors",
        "",
        f"`python benchmarks/vector_index_choice.py --n {args.n} --queries {args.queries}` — HNSW M={M}, "
        f"efConstruction={EF_C}, efSearch={EF_S}, inner product on unit vectors, builds with 2 threads, queries "
        f"1 thread, alternating per query; exact = numpy matrix-vector product + argpartition "
        f"(p50 {ex:.2f} ms in this run). Shared 2-core machine: compare within the table.",
        "",
        "| index | build s | recall@10 | query p50 ms (× exact) | save s | file MB | reopen s (RSS +MB) | "
        "mmap view: open s, RSS +MB, p50 ms | " + " | ".join(f"{s}: recall@10, p50 ms" for s in scopes) + " |",
        "|---|---|---|---|---|---|---|---|" + "---|" * len(scopes),
    ]
    for c in cands:
        r = rows[c.name]
        p50 = statistics.median(lat[c.name])
        v = views.get(c.name)
        vtxt = f"{v[0]:.3f}, +{v[1]:.0f}, {v[2]:.2f}" if v else "not supported"
        ftxt = " | ".join(f"{np.mean(frec[c.name][s]):.3f}, {statistics.median(flat[c.name][s]):.2f}" for s in scopes)
        lines.append(f"| {c.name} | {r['build_s']:.1f} | {np.mean(rec[c.name]):.3f} | {p50:.3f} ({p50 / ex:.2f}) | "
                     f"{r['save_s']:.2f} | {r['file_mb']:.0f} | {r['load_s']:.2f} (+{r['load_rss_mb']:.0f}) | {vtxt} | "
                     f"{ftxt} |")
    table = "\n".join(lines)
    print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "vector_index.md").write_text(table + "\n")
    for p in tmp.iterdir():
        p.unlink()
    tmp.rmdir()


if __name__ == "__main__":
    main()
