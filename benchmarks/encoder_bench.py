"""Encoder backends side by side: torch (sentence-transformers) vs ONNX Runtime fp32 / int8.

One process, the same texts, rounds interleaved so a noisy shared machine hits every backend
alike; figures are medians and ratios against torch measured in this run.

    python benchmarks/encoder_bench.py              # writes benchmarks/results/encoders.md
    python benchmarks/encoder_bench.py --quick      # fewer texts, no LoCoMo, print only

* batch throughput: LoCoMo-dev turns ("speaker: text"), encoded in one call per round
* single-query latency: one LoCoMo question per call (what a search pays without a cache)
* agreement: per-text cosine against torch on the batch sample
* LoCoMo-dev recall@10 (benchmarks/locomo_retrieval.py protocol, reinforce=False): the semantic
  channel alone and the default configuration, each backend's vectors
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from _common import RESULTS, setup

setup()

import numpy as np  # noqa: E402


import locomo_retrieval as lr  # noqa: E402

from causalmem.onnx_embedder import OnnxEmbedder  # noqa: E402
from causalmem.semantic import SentenceTransformerEmbedder  # noqa: E402



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--texts", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    convs = lr.load(lr.DEFAULT_DATA)
    turns = [f"{t['speaker']}: {t['text']}" for c in convs for _, _, ts in c["sessions"] for t in ts]
    questions = [qa["question"] for c in convs for qa in c["qa"]]
    rng = np.random.default_rng(0)
    n = 128 if args.quick else args.texts
    sample = [turns[i] for i in rng.choice(len(turns), size=min(n, len(turns)), replace=False)]
    queries = [questions[i] for i in rng.choice(len(questions), size=30 if args.quick else 60, replace=False)]
    backends = {
        "torch (sentence-transformers)": SentenceTransformerEmbedder(),
        "onnx fp32": OnnxEmbedder(precision="fp32"),
        "onnx int8": OnnxEmbedder(precision="int8"),
    }
    t0 = time.perf_counter()
    for e in backends.values():  # load / export / warm up outside the timings
        e.encode(sample[:16])
    setup_s = time.perf_counter() - t0
    rates: dict[str, list[float]] = {k: [] for k in backends}
    lat: dict[str, list[float]] = {k: [] for k in backends}
    vecs: dict[str, np.ndarray] = {}
    for _ in range(1 if args.quick else args.rounds):
        for k, e in backends.items():
            t = time.perf_counter()
            vecs[k] = e.encode(sample)
            rates[k].append(len(sample) / (time.perf_counter() - t))
        for q in queries:
            for k, e in backends.items():
                t = time.perf_counter()
                e.encode([q])
                lat[k].append((time.perf_counter() - t) * 1000)
    ref_name = "torch (sentence-transformers)"
    ref_rate = statistics.median(rates[ref_name])
    ref_lat = statistics.median(lat[ref_name])
    rows = []
    for k in backends:
        cos = (vecs[k] * vecs[ref_name]).sum(axis=1)
        rows.append({"name": k, "rate": statistics.median(rates[k]), "lat": statistics.median(lat[k]),
                     "lat95": float(np.percentile(lat[k], 95)), "cos_min": float(cos.min()),
                     "cos_mean": float(cos.mean())})
    recall: dict[str, dict[str, float]] = {}
    if not args.quick:
        for k, e in backends.items():
            emb = lr.CachedEmbedder(e)
            emb.encode(turns)
            mems = [(c, *lr.build_memory(c, emb)) for c in convs]
            recall[k] = {}
            for label, channels, fusion in (("semantic only", ("semantic",), "auto"),
                                            ("default", ("lexical", "semantic", "graph"), "auto")):
                s = lr.summarise(lr.run_config(mems, channels, fusion, reinforce=False))
                recall[k][label] = s["all"]["R@10"]
            for _, mem, _ in mems:
                mem.close()
            print(k, recall[k], flush=True)
    lines = [
        "# Encoder backends: torch vs ONNX Runtime (all-MiniLM-L6-v2, packaged weights)",
        "",
        f"`python benchmarks/encoder_bench.py{' --quick' if args.quick else ''}` — one process, "
        f"{len(sample)} LoCoMo-dev turns per batch round, {len(queries)} questions for single-query latency, "
        f"{1 if args.quick else args.rounds} interleaved rounds, medians; {os.cpu_count()} cores shared with other "
        f"work (absolute rates vary with the load, the ratios are the comparable figures). Setup (load/export/warm-up, "
        f"export cached across runs) {setup_s:.1f} s.",
        "",
        "| backend | batch texts/s | × torch | single query p50 (p95) ms | × torch | cosine vs torch min / mean |"
        + (" LoCoMo R@10 semantic only | default config |" if recall else ""),
        "|---|---|---|---|---|---|" + ("---|---|" if recall else ""),
    ]
    for r in rows:
        line = (f"| {r['name']} | {r['rate']:.0f} | {r['rate'] / ref_rate:.2f} | {r['lat']:.1f} ({r['lat95']:.1f}) | "
                f"{ref_lat / r['lat']:.2f} faster | {r['cos_min']:.4f} / {r['cos_mean']:.4f} |")
        if recall:
            rr = recall[r["name"]]
            base = recall[ref_name]
            line += (f" {rr['semantic only']:.4f} ({rr['semantic only'] - base['semantic only']:+.4f}) |"
                     f" {rr['default']:.4f} ({rr['default'] - base['default']:+.4f}) |")
        lines.append(line)
    table = "\n".join(lines)
    print(table)
    if not args.quick:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "encoders.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
