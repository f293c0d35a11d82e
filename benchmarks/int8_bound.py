"""Is the int8 encoder within 0.01 LoCoMo-dev recall@10 of torch? Question by question, with its noise.

    python benchmarks/int8_bound.py                 # writes benchmarks/results/int8_bound.md
    python benchmarks/int8_bound.py --variants      # also three other int8 quantisations of the graph

The reference is the ONNX fp32 graph: ``benchmarks/encoder_bench.py`` shows it gives torch's
vectors (cosine 1.0000 min and mean) and torch's recall to four decimals, and it is much faster
to run than torch on a shared machine. Protocol of ``encoder_bench.py`` (one ``Memory(':memory:')``
per conversation, ``reinforce=False``), for the semantic channel alone and the default
configuration. Per question, recall@10 of the int8 variant minus the reference's: the mean
(the bound), how many questions change at all, and a paired bootstrap 95% interval of the mean
(10,000 resamples of the 495 questions) - the resolution of a bound measured on this set.

Variants (``--variants``), all ``onnxruntime.quantization.quantize_dynamic`` of the cached fp32
graph with per-channel int8 weights: the shipped one (MatMul and the embedding Gather), MatMul
only (embeddings fp32), and MatMul only with the last or the first encoder layer kept fp32.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import RESULTS, setup, write_report

setup()

import numpy as np  # noqa: E402


import locomo_retrieval as lr  # noqa: E402

from causalmem.onnx_embedder import OnnxEmbedder, export_onnx  # noqa: E402

CONFIGS = (("semantic only", ("semantic",)), ("default config", ("lexical", "semantic", "graph")))


def graph_embedder(path: Path) -> OnnxEmbedder:
    """An OnnxEmbedder running the given graph file (same tokenizer, batching and pooling)."""
    class _Graph(OnnxEmbedder):
        graph_path = property(lambda self: path)  # type: ignore[assignment]

    return _Graph(precision="fp32")


def variants(fp32: Path, out: Path) -> dict[str, Path]:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(fp32))
    weights = {t.name for t in model.graph.initializer}
    matmuls = [n.name for n in model.graph.node if n.op_type == "MatMul" and weights.intersection(n.input)]
    per_layer = len(matmuls) // 6  # MiniLM-L6: Q, K, V, attention output, FFN in, FFN out per layer
    specs = {
        "int8, MatMul only (embeddings fp32)": dict(op_types_to_quantize=["MatMul"]),
        "int8, MatMul only, last layer fp32": dict(op_types_to_quantize=["MatMul"], nodes_to_exclude=matmuls[-per_layer:]),
        "int8, MatMul only, first layer fp32": dict(op_types_to_quantize=["MatMul"], nodes_to_exclude=matmuls[:per_layer]),
    }
    paths = {}
    for i, (name, kw) in enumerate(specs.items()):
        paths[name] = out / f"variant{i}.onnx"
        quantize_dynamic(str(fp32), str(paths[name]), weight_type=QuantType.QInt8, per_channel=True,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT}, **kw)
    return paths


def per_question(embedder, convs, texts) -> dict[str, np.ndarray]:
    emb = lr.CachedEmbedder(embedder)
    emb.encode(texts)
    mems = [(c, *lr.build_memory(c, emb)) for c in convs]
    out = {}
    for label, channels in CONFIGS:
        per_cat = lr.run_config(mems, channels, "auto", reinforce=False)
        out[label] = np.asarray([row[1] for c in sorted(per_cat) for row in per_cat[c]])  # R@10 per question
    for _, mem, _ in mems:
        mem.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", action="store_true", help="also measure three other int8 quantisations")
    ap.add_argument("--out", default=str(RESULTS / "int8_bound.md"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    convs = lr.load(lr.DEFAULT_DATA)
    texts = list(dict.fromkeys([f"{t['speaker']}: {t['text']}" for c in convs for _, _, ts in c["sessions"]
                                for t in ts] + [qa["question"] for c in convs for qa in c["qa"]]))
    backends: dict[str, OnnxEmbedder] = {"fp32 (reference: torch's vectors)": OnnxEmbedder(precision="fp32"),
                                         "int8 (shipped: MatMul + embeddings, per-channel)": OnnxEmbedder(precision="int8")}
    with tempfile.TemporaryDirectory(prefix="causalmem-int8-") as d:
        if args.variants:
            fp32 = export_onnx(backends["fp32 (reference: torch's vectors)"].model_dir, "fp32")
            for name, path in variants(fp32, Path(d)).items():
                backends[name] = graph_embedder(path)
        scores = {name: per_question(e, convs, texts) for name, e in backends.items()}
    ref_name = next(iter(backends))
    ref = scores[ref_name]
    rng = np.random.default_rng(0)
    n = len(next(iter(ref.values())))
    lines = ["# int8 encoder vs torch: LoCoMo-dev recall@10, question by question", "",
             f"`python benchmarks/int8_bound.py{' --variants' if args.variants else ''}` — {n} questions, "
             f"{len(convs)} conversations, protocol of `encoder_bench.py`; runtime {time.perf_counter() - t0:.0f} s.",
             "", "| encoder graph | config | R@10 | Δ vs torch | questions changed (up / down) | paired bootstrap 95% "
             "interval of Δ | within 0.01 |", "|---|---|---|---|---|---|---|"]
    for name in backends:
        for label, _ in CONFIGS:
            r = scores[name][label]
            delta = r - ref[label]
            boots = np.array([delta[rng.integers(0, n, n)].mean() for _ in range(10_000)])
            lo, hi = np.percentile(boots, [2.5, 97.5])
            lines.append(f"| {name} | {label} | {r.mean():.4f} | {delta.mean():+.4f} | {int((delta != 0).sum())} "
                         f"({int((delta > 0).sum())} / {int((delta < 0).sum())}) | [{lo:+.4f}, {hi:+.4f}] | "
                         f"{'yes' if abs(delta.mean()) <= 0.01 else 'no'} |")
            print(lines[-1], flush=True)
    write_report(lines, args.out)


if __name__ == "__main__":
    main()
