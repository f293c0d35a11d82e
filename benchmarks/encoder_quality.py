"""Does the ONNX encoder that ``Memory(path)`` uses cost retrieval quality against sentence-transformers?

The question: the fast default encoder must not cost quality. The default
``Memory(path)`` encodes with :class:`causalmem.onnx_embedder.OnnxEmbedder` (``embedder="auto"``: the int8
graph, ``onnx_embedder.DEFAULT_PRECISION``); the reference is the same packaged all-MiniLM-L6-v2 on torch
through sentence-transformers (``embedder="torch"``, :class:`causalmem.semantic.SentenceTransformerEmbedder`).

For every encoder variant the LoCoMo-dev store is built exactly as ``benchmarks/locomo_retrieval.py``
builds it (its ``load`` / ``build_store``: one store file, all conversations scoped by ``user_id``, one
``add`` per session, vectors computed by the background worker in the batches it forms, then ``flush``)
and every question is asked with ``search(question, top_k=10, user_id=conv, reinforce=False)`` (its
``ask_all``). The encoder is wrapped by a pass-through recorder that keeps each text's vector as the
engine computed it (same calls, same batches: no de-duplication or re-batching), so:

1. **Vectors**: per text (every turn, every question), the cosine between the variant's vector and
   torch's (min / p1 / median / mean), and for each question whether its 10 nearest turns of its own
   conversation by cosine (the semantic channel alone) differ from torch's (as a set, and in order).
2. **Retrieval, paired per question**: variant - torch, R@10 and nDCG@10, pooled over the 495 questions with
   a 95% bootstrap interval (``locomo_retrieval.paired_spread``), per category too; at the shipped
   constants (the default ``search`` call) and under the leave-one-conversation-out cross-validation of
   ``locomo_retrieval`` (``grid_points`` / ``cross_validate``: each encoder tuned by its own folds, as a
   user of that encoder gets it; and both at the same point per fold, ``paired_cross_validate``).

Variants (``--variants``, default all):

* ``torch``       - sentence-transformers on torch: the reference.
* ``int8``        - what ``Memory(path)`` uses (``resolve_embedder("auto")``; the script checks that).
* ``int8-again``  - the same, a second store build: int8's dynamic quantisation scales a sub-batch's
  activations together, so a turn's vector depends on which texts the background worker encodes with
  it, i.e. on timing. The difference between two builds is the run-to-run noise of the default.
* ``fp32``        - the fp32 ONNX graph (``embedder="onnx-fp32"``).
* ``int8-sln``    - int8 with onnxruntime's SkipLayerNormFusion switched back on (7963ef2 left it out of
  the session: ``onnx_embedder.DISABLED_FUSIONS``), everything else as shipped.
* ``int8-pre7963``- int8 as before 7963ef2: SkipLayerNormFusion on, sub-batches of 64 texts, the worker
  encoding 64 texts per call (7963ef2 changed both to 16 / 128).

    python benchmarks/encoder_quality.py                               # writes results/encoder_quality.md
    python benchmarks/encoder_quality.py --variants torch,int8 --cv torch,int8 --out -
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import os
import pickle
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

from _common import setup

setup()
os.environ.setdefault("CAUSALMEM_EMBED_HANDOFF", "0")  # every vector in this process, through the recorder
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import locomo_retrieval as lr  # noqa: E402
from causalmem import Memory  # noqa: E402
from causalmem import embedding as embedding_mod  # noqa: E402
from causalmem import onnx_embedder as oe  # noqa: E402
from causalmem.semantic import resolve_embedder  # noqa: E402

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "encoder_quality.md"
VARIANTS = ("torch", "int8", "int8-again", "fp32", "int8-sln", "int8-pre7963")
CHANNELS = ("lexical", "semantic", "graph")
R10, NDCG = lr.METRICS.index("R@10"), lr.METRICS.index("nDCG@10")


# ----------------------------------------------------------------------------- encoders
class Recording:
    """Pass-through wrapper: the engine's calls unchanged, each text's vector(s) kept as computed."""

    def __init__(self, base: Any) -> None:
        self.base = base
        self.model_name = base.model_name
        self.dim = base.dim
        self.vectors: dict[str, list[np.ndarray]] = {}
        self.calls = 0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        vecs = np.asarray(self.base.encode(texts), dtype=np.float32)
        self.calls += 1
        for t, v in zip(texts, vecs):
            self.vectors.setdefault(t, []).append(v.copy())
        return vecs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def first(self, text: str) -> np.ndarray:
        return self.vectors[text][0]


class Recorded:
    """The vectors a :class:`Recording` kept (what ``--cache`` saves of it)."""

    def __init__(self, vectors: dict[str, list[np.ndarray]]) -> None:
        self.vectors = vectors

    def first(self, text: str) -> np.ndarray:
        return self.vectors[text][0]


class SessionVariant(oe.OnnxEmbedder):
    """The shipped OnnxEmbedder with other disabled fusions (its own onnxruntime session, same options)."""

    def __init__(self, *args: Any, disabled: Sequence[str] = (), **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.disabled_fusions = tuple(disabled)


def make_encoder(name: str) -> Any:
    if name == "torch":
        return resolve_embedder("torch")
    if name in ("int8", "int8-again"):
        emb = resolve_embedder("auto")  # exactly what Memory(path) resolves
        if not isinstance(emb, oe.OnnxEmbedder):
            raise SystemExit(f"encoder_quality: embedder='auto' resolved to {emb!r}, not the ONNX encoder")
        return emb
    if name == "fp32":
        return resolve_embedder("onnx-fp32")
    if name == "int8-sln":
        return SessionVariant(oe._DEFAULT_MODEL, precision=oe.DEFAULT_PRECISION, disabled=())
    if name == "int8-pre7963":
        return SessionVariant(oe._DEFAULT_MODEL, precision=oe.DEFAULT_PRECISION, disabled=(), batch_size=64)
    raise SystemExit(f"encoder_quality: unknown variant {name!r} (one of {', '.join(VARIANTS)})")


# ----------------------------------------------------------------------------- one variant
def run_variant(name: str, convs: list[dict], tmp: Path, *, cv: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    rec = Recording(make_encoder(name))
    old_sub = embedding_mod._SUB_BATCH
    if name == "int8-pre7963":
        embedding_mod._SUB_BATCH = 64
    try:
        path = tmp / f"{name}.db"
        dia_of = lr.build_store(convs, rec, path)
    finally:
        embedding_mod._SUB_BATCH = old_sub
    built = time.perf_counter() - t0
    points = lr.grid_points(CHANNELS, "auto", "full" if cv else "none")
    by_point: dict[str, lr.Scores] = {}
    with Memory(path, embedder=rec) as mem:
        stored: dict[str, list[str]] = {}  # conversation -> the embedded text of each of its turns
        for cid in dia_of:
            chunk = mem.get(cid)
            stored.setdefault(str(chunk.user_id), []).append(chunk.text)
        for label, params in points:
            by_point[label] = lr.ask_all(mem, convs, dia_of, CHANNELS, "auto", reinforce=False, params=params)
        semantic = lr.ask_all(mem, convs, dia_of, ("semantic",), "auto", reinforce=False, params=None)
    out = {"name": name, "rec": rec, "shipped": by_point["shipped"], "semantic": semantic, "by_point": by_point,
           "stored": stored, "build_s": built, "eval_s": time.perf_counter() - t0 - built, "encoder": repr(rec.base)}
    print(f"{name:14s} built {built:.0f} s, {len(points)} grid point(s) + semantic-only in {out['eval_s']:.0f} s; "
          f"shipped R@10 {mean(out['shipped'], R10):.4f} nDCG@10 {mean(out['shipped'], NDCG):.4f}", flush=True)
    return out


def mean(scores: lr.Scores, k: int) -> float:
    return float(np.concatenate([m[:, k] for _, m in scores.values()]).mean())


# ----------------------------------------------------------------------------- comparisons
def vector_stats(ref: Recording, var: Recording, convs: list[dict], stored: dict[str, list[str]]) -> dict[str, Any]:
    """Cosine per text and the semantic channel's top-10 per question, variant against reference
    (``stored``: each conversation's turns as the engine embedded them, "speaker: text")."""
    out: dict[str, Any] = {}
    turns = [t for c in convs for t in stored[c["id"]]]
    questions = [q["question"] for c in convs for q in c["qa"]]
    for kind, texts in (("turns", turns), ("questions", questions)):
        uniq = list(dict.fromkeys(texts))
        cos = np.array([float(ref.first(t) @ var.first(t)) for t in uniq])
        out[kind] = {"n": len(uniq), "min": float(cos.min()), "p1": float(np.quantile(cos, 0.01)),
                     "median": float(np.median(cos)), "mean": float(cos.mean()),
                     "worst": uniq[int(cos.argmin())]}
    set_diff = order_diff = 0
    overlap = []
    for c in convs:
        ctexts = stored[c["id"]]
        a = np.vstack([ref.first(t) for t in ctexts])
        b = np.vstack([var.first(t) for t in ctexts])
        for q in c["qa"]:
            ta = np.argsort(-(a @ ref.first(q["question"])), kind="stable")[:10]
            tb = np.argsort(-(b @ var.first(q["question"])), kind="stable")[:10]
            set_diff += set(ta.tolist()) != set(tb.tolist())
            order_diff += ta.tolist() != tb.tolist()
            overlap.append(len(set(ta.tolist()) & set(tb.tolist())))
    nq = len(overlap)
    out["top10"] = {"n": nq, "set_differs": set_diff / nq, "order_differs": order_diff / nq,
                    "mean_overlap": float(np.mean(overlap))}
    return out


def by_category(scores: lr.Scores, cat: int) -> lr.Scores:
    return {c: (cats[cats == cat], mat[cats == cat]) for c, (cats, mat) in scores.items()}


def paired(var: lr.Scores, ref: lr.Scores, conv_ids: list[str]) -> dict[str, Any]:
    """variant - reference per question (locomo_retrieval.paired_spread), pooled and per category."""
    out = {"all": lr.paired_spread(var, ref, conv_ids)}
    for cat in lr.CATEGORIES:
        with warnings.catch_warnings():  # a conversation without questions of this category: its own mean is nan
            warnings.simplefilter("ignore", RuntimeWarning)
            out[cat] = lr.paired_spread(by_category(var, cat), by_category(ref, cat), conv_ids)
    return out


# ----------------------------------------------------------------------------- report
def _f(d: dict[str, Any]) -> str:
    return f"{d['pooled']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}] ({d['up']} up / {d['down']} down)"


def _verdict(d: dict[str, Any]) -> str:
    return "excludes 0" if d["lo"] > 0 or d["hi"] < 0 else "contains 0"


def report(results: dict[str, dict], convs: list[dict], meta: dict[str, Any]) -> str:
    conv_ids = [c["id"] for c in convs]
    ref = results["torch"]
    lines = [
        "# Does the ONNX encoder cost retrieval quality?", "",
        f"Command: `{meta['command']}`  ", f"Run: {meta['date']}, {meta['lock']}; load average at the start "
        f"{meta['load_start']}, at the end {meta['load_end']}; runtime {meta['seconds']:.0f} s; code of {meta['commit']}.  ",
        f"Data: `../shared/data/locomo-dev/locomo_dev.json` ({len(convs)} conversations, "
        f"{sum(len(c['qa']) for c in convs)} questions with evidence, "
        f"{sum(len(t) for c in convs for _, _, t in c['sessions'])} turns).", "",
        "Protocol of `benchmarks/locomo_retrieval.py` (its functions, imported): one store file, all conversations "
        "scoped by `user_id`, vectors from the background worker as `Memory(path)` computes them, then "
        "`search(question, top_k=10, user_id=conv, reinforce=False)`. Each encoder is wrapped in a pass-through "
        "recorder (the engine's calls and batches unchanged) that keeps every text's vector. Reference: torch "
        "(sentence-transformers). Intervals: 95% bootstrap over questions, 2,000 resamples "
        "(`locomo_retrieval.paired_spread`).", "",
        "| variant | encoder | store build s | eval s |", "|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| `{name}` | `{r['encoder']}` | {r['build_s']:.0f} | {r['eval_s']:.0f} |")
    lines += ["", "## 1. Vectors against torch", "",
              "Cosine of each distinct text's vector with torch's; top-10: the 10 nearest turns of the question's own "
              "conversation by cosine (the semantic channel alone), compared with torch's.", "",
              "| variant | turns: min / p1 / median / mean | questions: min / p1 / median / mean | questions whose "
              "top-10 set differs | ... whose top-10 order differs | mean overlap of the top-10 |",
              "|---|---|---|---|---|---|"]
    worst: list[str] = []
    for name, r in results.items():
        if name == "torch":
            continue
        v = r["vectors"]
        t, q, k = v["turns"], v["questions"], v["top10"]
        lines.append(f"| `{name}` | {t['min']:.4f} / {t['p1']:.4f} / {t['median']:.5f} / {t['mean']:.5f} | "
                     f"{q['min']:.4f} / {q['p1']:.4f} / {q['median']:.5f} / {q['mean']:.5f} | "
                     f"{k['set_differs']:.3f} ({round(k['set_differs'] * k['n'])} of {k['n']}) | "
                     f"{k['order_differs']:.3f} | {k['mean_overlap']:.2f} / 10 |")
        worst.append(f"`{name}`: turn {t['worst'][:70]!r}, question {q['worst'][:70]!r}")
    lines += ["", "Lowest-cosine texts: " + "; ".join(worst) + ".", ""]
    if "int8" in results and "int8-again" in results:
        v = vector_stats(results["int8"]["rec"], results["int8-again"]["rec"], convs, results["int8"]["stored"])
        t, k = v["turns"], v["top10"]
        lines += [f"`int8` against `int8-again` (the same encoder, a second store build): turn cosine min "
                  f"{t['min']:.4f} / p1 {t['p1']:.4f} / median {t['median']:.5f}; top-10 set differs for "
                  f"{k['set_differs']:.3f} of the questions.", ""]
    lines += ["## 2. Retrieval, paired per question: variant - torch", "",
              "### At the shipped constants (the default `search` call)", "",
              "| variant | R@10 | nDCG@10 | semantic only R@10 | Δ R@10 vs torch | Δ nDCG@10 vs torch | "
              "Δ semantic-only R@10 |", "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        row = f"| `{name}` | {mean(r['shipped'], R10):.4f} | {mean(r['shipped'], NDCG):.4f} | {mean(r['semantic'], R10):.4f} |"
        if name == "torch":
            lines.append(row + " - | - | - |")
            continue
        d, s = r["paired_shipped"]["all"], r["paired_semantic"]["all"]
        lines.append(row + f" {_f(d['R@10'])} | {_f(d['nDCG@10'])} | {_f(s['R@10'])} |")
    lines += ["", "Per category (shipped constants), Δ vs torch with its interval:", "",
              "| variant | metric | " + " | ".join(f"{c} {lr.CAT_NAMES[c]}" for c in lr.CATEGORIES) + " |",
              "|---|---|" + "---|" * len(lr.CATEGORIES)]
    for name, r in results.items():
        if name == "torch":
            continue
        for m in ("R@10", "nDCG@10"):
            cells = []
            for c in lr.CATEGORIES:
                d = r["paired_shipped"][c][m]
                cells.append(f"{d['pooled']:+.4f} [{d['lo']:+.3f}, {d['hi']:+.3f}]")
            lines.append(f"| `{name}` | {m} | " + " | ".join(cells) + " |")
    cv_names = [n for n, r in results.items() if "cv" in r]
    if "torch" in cv_names and len(cv_names) > 1:
        lines += ["", "### Under leave-one-conversation-out cross-validation "
                  f"({len(ref['by_point'])}-point grid of `locomo_retrieval.grid_points`)", "",
                  "*own folds*: each encoder tuned by its own folds (`cross_validate`), what a user of that encoder "
                  "gets; *same point*: both at the point with the best criterion on the training conversations "
                  "averaged over the two encoders (`paired_cross_validate`), the encoder's effect alone.", "",
                  "| variant | CV R@10 | CV nDCG@10 | points chosen (held out " + ", ".join(conv_ids) + ") | "
                  "Δ R@10 own folds | Δ nDCG@10 own folds | Δ R@10 same point | Δ nDCG@10 same point |",
                  "|---|---|---|---|---|---|---|---|"]
        for name in cv_names:
            r = results[name]
            row = (f"| `{name}` | {mean(r['cv'], R10):.4f} | {mean(r['cv'], NDCG):.4f} | "
                   + ", ".join(f"`{r['chosen'][c]}`" for c in conv_ids) + " |")
            if name == "torch":
                lines.append(row + " - | - | - | - |")
                continue
            own, same = r["paired_cv"]["all"], r["paired_same"]["all"]
            lines.append(row + f" {_f(own['R@10'])} | {_f(own['nDCG@10'])} | {_f(same['R@10'])} | "
                         f"{_f(same['nDCG@10'])} |")
    lines += ["", "## Verdict", "", "(written by hand from the tables above)", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=lr.DEFAULT_DATA)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS))
    ap.add_argument("--cv", default="torch,int8,int8-sln",
                    help="variants also run on the full tuning grid for the cross-validated comparison ('' = none)")
    ap.add_argument("--cache", default="", help="directory keeping each variant's vectors and scores, keyed by a hash of the "
                    "engine's and the harness's code, the data and the variant: a rerun of the same code reuses them")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="markdown path, or - to print")
    ap.add_argument("--lock", default="run under the shared lock for non-timed jobs (a quality run, not timed)")
    args = ap.parse_args(argv)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    if "torch" not in names:
        names.insert(0, "torch")
    cv = {v.strip() for v in args.cv.split(",") if v.strip()}
    t0 = time.perf_counter()
    load_start = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else ["?"]
    convs = lr.load(args.data)
    conv_ids = [c["id"] for c in convs]
    results: dict[str, dict] = {}
    cache = Path(args.cache) if args.cache else None
    with tempfile.TemporaryDirectory(prefix="encoder-quality-") as tmp:
        for name in names:
            mode = 'cv' if name in cv else 'shipped'
            # keyed by what the result depends on: the engine's code, this harness and locomo_retrieval's,
            # the data, the variant and its mode (a stale file from other code is never read)
            harness = b"".join((HERE / f).read_bytes() for f in ("encoder_quality.py", "locomo_retrieval.py"))
            key = lr._source_key(args.data, f"{name}\0{mode}\0{hashlib.sha256(harness).hexdigest()}")
            saved = cache / f"{name}-{mode}-{key}.pkl" if cache else None
            if saved is not None and saved.is_file():  # a variant of an earlier run of this same code and data
                with open(saved, "rb") as f:
                    results[name] = pickle.load(f)
                print(f"{name:14s} from {saved.name}", flush=True)
                continue
            results[name] = run_variant(name, convs, Path(tmp), cv=name in cv)
            if saved is not None:
                saved.parent.mkdir(parents=True, exist_ok=True)
                keep = dict(results[name], rec=Recorded(results[name]["rec"].vectors))
                with open(saved, "wb") as f:
                    pickle.dump(keep, f)
    ref = results["torch"]
    if "torch" in cv:
        ref["cv"], ref["chosen"] = lr.cross_validate(ref["by_point"], conv_ids)
    for name, r in results.items():
        if name == "torch":
            continue
        r["vectors"] = vector_stats(ref["rec"], r["rec"], convs, ref["stored"])
        r["paired_shipped"] = paired(r["shipped"], ref["shipped"], conv_ids)
        r["paired_semantic"] = paired(r["semantic"], ref["semantic"], conv_ids)
        if name in cv and "torch" in cv:
            r["cv"], r["chosen"] = lr.cross_validate(r["by_point"], conv_ids)
            r["paired_cv"] = paired(r["cv"], ref["cv"], conv_ids)
            same_v, same_t, _ = lr.paired_cross_validate(r["by_point"], ref["by_point"], conv_ids)
            r["paired_same"] = paired(same_v, same_t, conv_ids)
    load_end = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else ["?"]
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout.strip()
    meta = {"command": "python benchmarks/encoder_quality.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "lock": args.lock,
            "load_start": " ".join(load_start), "load_end": " ".join(load_end),
            "seconds": time.perf_counter() - t0, "commit": commit or "?"}
    md = report(results, convs, meta)
    if args.out == "-":
        print(md)
    else:
        Path(args.out).write_text(md + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
