"""Exact vs IVF vector search in ``causalmem.semantic.VectorIndex`` (synthetic vectors).

    python benchmarks/bench_vectors.py [--sizes 100000,1000000] [--queries 200] [--no-uniform] [--no-encode] [--no-dense]

Prints a Markdown table. Data is synthetic and seeded:

* *clustered* (stands in for real sentence embeddings, which are far from uniform):
  2,000 Gaussian blobs around random unit centres in 384-d, blob sizes log-normal (a few
  big topics, many small ones), noise chosen so a point's nearest neighbour has cosine
  ~0.6 and its 50th ~0.45 (the range MiniLM gives for related sentences). Queries are
  fresh draws from the same mixture (not stored vectors).
  At 1M, 2,000 blobs hold ~500 vectors each (an easy case: all 50 neighbours sit in one
  blob), so 1M is also run with 20,000 blobs (~50 per blob, as at 100k).
* *uniform* (the adversarial case): uniformly random unit vectors; there are no clusters, so
  IVF's coarse lists cannot predict neighbours and its recall collapses.

Exact and IVF answers are timed side by side, per query alternating (the machine is shared),
on the same index object (``search(..., exact=True)`` vs the default); nprobe "auto" is the
value the index calibrated at training (smallest with estimated recall@50 >= 0.95 on
stored rows, or 0 = IVF declined), "fixed" rows force an nprobe. Recall@k = overlap of
the IVF top-k with the exact top-k. Build = ``add`` of all vectors in chunks; train = the
first search (k-means + in-place reordering). With ``--encode`` (default on when the
packaged all-MiniLM-L6-v2 is installed) the query-encoding cost is measured in the same run.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from causalmem.semantic import VectorIndex

DIM = 384
BLOBS = 2_000
SPREAD = 0.9  # noise norm relative to the unit blob centre
CHUNK = 100_000


class Clustered:
    def __init__(self, seed: int = 0, blobs: int = BLOBS) -> None:
        rng = np.random.default_rng(seed)
        self.blobs = blobs
        c = rng.standard_normal((blobs, DIM)).astype(np.float32)
        self.centres = c / np.linalg.norm(c, axis=1, keepdims=True)
        w = rng.lognormal(0.0, 1.0, blobs)
        self.weights = w / w.sum()

    def draw(self, n: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        lab = rng.choice(self.blobs, size=n, p=self.weights)
        x = self.centres[lab] + (SPREAD / np.sqrt(DIM)) * rng.standard_normal((n, DIM), dtype=np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)


def uniform(n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def build(n: int, draw) -> tuple[VectorIndex, float]:
    ix = VectorIndex(DIM)
    t = time.perf_counter()
    for s in range(0, n, CHUNK):
        m = min(CHUNK, n - s)
        ix.add(np.arange(s, s + m), draw(m, 1_000 + s // CHUNK))
    return ix, time.perf_counter() - t


def pct(a: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(a) * 1e3, p))


def run_case(label: str, n: int, draw, queries: np.ndarray, nprobes: list[int | None]) -> list[str]:
    ix, t_build = build(n, draw)
    t = time.perf_counter()
    ix.search(queries[0], top_k=10)  # trains the IVF lists
    t_train = time.perf_counter() - t
    nlist = ix.nlist
    rows = []
    refs = []
    t_exact: list[float] = []
    for q in queries:
        t = time.perf_counter()
        refs.append(ix.search(q, top_k=50, exact=True)[0])
        t_exact.append(time.perf_counter() - t)
    for npb in nprobes:
        ix._nprobe = npb
        t_ivf: list[float] = []
        t_ex: list[float] = []
        r10 = r50 = 0.0
        for q, ref in zip(queries, refs):  # alternate exact / IVF per query
            t = time.perf_counter()
            ix.search(q, top_k=50, exact=True)
            t_ex.append(time.perf_counter() - t)
            t = time.perf_counter()
            got = ix.search(q, top_k=50)[0]
            t_ivf.append(time.perf_counter() - t)
            r50 += len(set(got.tolist()) & set(ref.tolist())) / 50
            r10 += len(set(got[:10].tolist()) & set(ref[:10].tolist())) / 10
        k = len(queries)
        how = "auto" if npb is None else "fixed"
        if not nlist:
            shown = "- (below ivf_min: exact)"
        else:
            shown = f"{ix.nprobe} ({how})" if ix.nprobe else "0 (auto: IVF declined, exact)"
        rows.append(
            f"| {label} | {n:,} | {nlist} / {shown} | {pct(t_ex, 50):.2f} / {pct(t_ex, 95):.2f} | "
            f"{pct(t_ivf, 50):.2f} / {pct(t_ivf, 95):.2f} | {pct(t_ex, 50) / pct(t_ivf, 50):.1f}x | "
            f"{r10 / k:.3f} | {r50 / k:.3f} | {t_build:.1f} | {t_train:.1f} |"
        )
        print(rows[-1], flush=True)
    mat_mb = ix._mat.nbytes / 2**20
    extra_mb = (ix._cent.nbytes + ix._starts.nbytes) / 2**20 if ix._cent is not None else 0.0
    cal = ", ".join(f"{p}: {r:.3f}" for p, r in ix.calibration.items())
    rows.append(f"|  | calibration (nprobe: estimated recall@50) {cal}; memory: matrix {mat_mb:.0f} MB "
                f"(capacity incl. growth slack), IVF overhead {extra_mb:.1f} MB |  |  |  |  |  |  |  |  |")
    del ix
    return rows


def encode_cost(n: int = 60) -> list[str]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch

        from causalmem.semantic import SentenceTransformerEmbedder, _packaged_model_dir

        if _packaged_model_dir() is None:
            return []
        emb = SentenceTransformerEmbedder()
    except Exception as exc:  # noqa: BLE001 - report why, keep the table
        return [f"(query encoding not measured: {exc})"]
    texts = [f"what did Caroline say about the adoption agency in week {i}?" for i in range(n)]
    out = []
    for threads in (torch.get_num_threads(), 1):
        torch.set_num_threads(threads)
        emb.encode(texts[:3])
        ts = []
        for t_ in texts:
            t = time.perf_counter()
            emb.encode([t_])
            ts.append(time.perf_counter() - t)
        out.append(f"| MiniLM query encoding, {threads} torch thread(s) | {pct(ts, 50):.2f} / {pct(ts, 95):.2f} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--no-uniform", action="store_true")
    ap.add_argument("--no-encode", action="store_true")
    ap.add_argument("--no-dense", action="store_true", help="skip the 1M x 20,000-blob case")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    t0 = time.perf_counter()
    print(f"# Vector search: exact vs IVF ({DIM}-d, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})\n")
    head = [
        "| data | vectors | nlist / nprobe | exact p50 / p95 ms | IVF p50 / p95 ms | speed-up p50 | recall@10 | recall@50 | build s | train s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(head), flush=True)
    rows = []
    for n in sizes:
        nq = args.queries if n <= 200_000 else max(50, args.queries // 2)
        # 2,000 blobs everywhere; at 1M also 20,000 blobs, the same ~50 vectors per blob as 100k
        for blobs in [BLOBS] + ([n // 50] if n > 200_000 and not args.no_dense else []):
            gen = Clustered(seed=0, blobs=blobs)
            qs = gen.draw(nq, seed=99)
            rows += run_case(f"clustered ({blobs:,} blobs)", n, gen.draw, qs, [None, _nlist(n) // 32, _nlist(n) // 16])
    if not args.no_uniform:
        n = sizes[0]
        rows += run_case("uniform random", n, uniform, uniform(args.queries, seed=99), [None, _nlist(n) // 32, _nlist(n) // 8])
    enc = [] if args.no_encode else encode_cost()
    print("\n" + "\n".join(head + rows))
    if enc:
        print("\n| measurement | p50 / p95 ms |\n|---|---|\n" + "\n".join(enc))
    print(f"\nTotal runtime {time.perf_counter() - t0:.0f} s; load at the end {os.getloadavg()[0]:.1f}.")


def _nlist(n: int) -> int:
    return max(16, min(int(2 ** round(np.log2(4.0 * np.sqrt(n)))), 2048, n))


# -- pytest-benchmark / regression gate: the default (IVF) search against the exact scan ---------

try:
    import pytest
except ImportError:  # the script above runs without pytest
    pytest = None

if pytest is not None:

    @pytest.mark.gate
    def test_gate_vector_search_vs_exact_scan(benchmark):
        """60k clustered vectors (above ``ivf_min``, so the default search is IVF with its
        calibrated nprobe), 20 fresh queries a round, top 50; the peer is ``exact=True`` on the
        same index (one matrix-vector product + argpartition over every vector)."""
        from conftest import peer_ratio

        gen = Clustered(seed=0)
        ix, _ = build(60_000, gen.draw)
        qs = gen.draw(20, seed=99)
        ix.search(qs[0], top_k=50)  # trains the IVF lists outside the timed part
        assert ix.nlist > 0

        def ours():
            for q in qs:
                ix.search(q, top_k=50)

        def peer():
            for q in qs:
                ix.search(q, top_k=50, exact=True)

        benchmark.group = "gate: vector search 60k"
        benchmark.extra_info["nprobe"] = int(ix.nprobe)
        peer_ratio(benchmark, ours, peer, peer_name="exact scan (numpy)", rounds=15)


if __name__ == "__main__":
    main()
