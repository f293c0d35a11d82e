"""LoCoMo-dev retrieval-only evaluation through the public API, as users run it; in-sample and cross-validated.

Protocol (shared/data/README.md): ONE store file, ``Memory(path)`` with its
defaults, holding every dev conversation scoped by ``user_id`` (= sample id). Every turn is one
memory ("speaker: text" + " [shares photo: caption]"), added session by session with the session's
date as event time and the session number as session id. Each question asks ``search(question,
top_k=10, user_id=conv)``. Gold evidence ids are normalised ("D8:6; D9:17" split, "D:11:26" ->
"D11:26", "D30:05" -> "D30:5", ids naming no turn dropped, empty evidence skipped); hits map back
to dia_ids through the chunk metadata.

Reinforcement: the default (``reinforce=True``) strengthens what a search returns and learns
co-occurrence links that the next search sees. A reinforce-on run asks every question in data
order on a fresh copy of the built store; reinforce-off runs share one copy (they change nothing).

Cross-validation: the pipeline's constants (blend weight of the semantic channel, graph bonus
scale and backward/forward ratio) are tuned leave-one-conversation-out: for each conversation,
the grid point with the best (recall@10 + nDCG@10) / 2 on the other two conversations is scored on it; the CV
figure pools the three held-out scores. "in-sample" = the shipped constants on all three
(they were tuned on this very data), "best in-sample" = the best grid point on all three.

    python benchmarks/locomo_retrieval.py                     # everything, writes results/locomo.md
    python benchmarks/locomo_retrieval.py --grid none         # shipped constants only (no CV)
    python benchmarks/locomo_retrieval.py --configs default --out -   # one configuration, print only
    python benchmarks/locomo_retrieval.py --embedder none     # lexical/graph only (no model)
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One BLAS thread: a matrix-vector product per query gains nothing from threads, and on a shared
# machine OpenBLAS's spinning threads made the cosine scan ~14x slower (0.6 ms -> 8.6 ms).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from causalmem import Memory  # noqa: E402
from causalmem import retrieval  # noqa: E402
from causalmem.config import Config  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data" / "locomo-dev" / "locomo_dev.json"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "locomo.md"
CATEGORIES = (1, 2, 3, 4, 5)
CAT_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_ID_RE = re.compile(r"D:?(\d+):(\d+)")

METRICS = ("R@5", "R@10", "nDCG@10", "hit@10", "MRR")
DEFAULT_LABEL = "**default** (all channels, fusion=auto)"

# (label, channels, fusion); the default = what Memory.search does without arguments.
CONFIGS: list[tuple[str, tuple[str, ...], str]] = [
    (DEFAULT_LABEL, ("lexical", "semantic", "graph"), "auto"),
    ("lexical only (BM25 + second pass)", ("lexical",), "auto"),
    ("semantic only (MiniLM cosine)", ("semantic",), "auto"),
    ("lexical + graph", ("lexical", "graph"), "auto"),
    ("semantic + graph", ("semantic", "graph"), "auto"),
    ("lexical + semantic, blend", ("lexical", "semantic"), "blend"),
    ("lexical + semantic, rrf", ("lexical", "semantic"), "rrf"),
    ("lexical + semantic, hybrid (ST-BME)", ("lexical", "semantic"), "hybrid"),
    ("full pipeline, rrf", ("lexical", "semantic", "graph"), "rrf"),
    ("full pipeline, hybrid (ST-BME)", ("lexical", "semantic", "graph"), "hybrid"),
]
# Configurations also run with reinforcement on (each on a fresh copy of the store).
REINFORCED = (DEFAULT_LABEL, "lexical + graph")

# The fitted constants under cross-validation: semantic weight in the blend, scale of the graph
# bonus, backward/forward ratio of the graph bonus. The shipped values are the first grid point.
GRID_AXES: dict[str, tuple[float, ...]] = {
    # 0 = no semantic channel: the folds may drop it ("or weight it down")
    "blend_vec": (retrieval.PARAMS.blend_vec, 0.5, 2.0, 3.0, 0.0),
    "graph_scale": (1.0, 0.5, 2.0),
    "backward_ratio": (retrieval.PARAMS.graph_backward / retrieval.PARAMS.graph_forward, 1.0, 0.25),
    "prf_weight": (retrieval.PARAMS.prf_weight, 0.0, 0.3),
}


# ----------------------------------------------------------------------------- data
def normalise_evidence(evidence: Sequence[Any], known: set[str]) -> list[str]:
    """Split multi-id strings, fix "D:11:26" / "D30:05", drop ids that name no turn."""
    out: list[str] = []
    for item in evidence:
        for m in _ID_RE.finditer(str(item)):
            did = f"D{int(m.group(1))}:{int(m.group(2))}"
            if did in known and did not in out:
                out.append(did)
    return out


def parse_session_time(s: str) -> dt.datetime:
    """"1:56 pm on 8 May, 2023" -> aware UTC datetime."""
    return dt.datetime.strptime(s.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.timezone.utc)


def load(path: Path) -> list[dict]:
    convs = []
    for s in json.loads(Path(path).read_text()):
        c = s["conversation"]
        sessions = []
        known: set[str] = set()
        n = 1
        while f"session_{n}" in c:
            turns = []
            for t in c[f"session_{n}"]:
                text = t["text"]
                if t.get("blip_caption"):
                    text += f" [shares photo: {t['blip_caption']}]"
                turns.append({"speaker": t["speaker"], "text": text, "dia_id": t["dia_id"]})
                known.add(t["dia_id"])
            if turns:
                sessions.append((str(n), parse_session_time(c[f"session_{n}_date_time"]), turns))
            n += 1
        qas = []
        for qa in s["qa"]:
            gold = normalise_evidence(qa.get("evidence") or [], known)
            if gold and qa.get("category") in CATEGORIES:
                qas.append({"question": qa["question"], "gold": gold, "category": qa["category"]})
        convs.append({"id": s["sample_id"], "sessions": sessions, "qa": qas})
    return convs


# ----------------------------------------------------------------------------- embedder
class CachedEmbedder:
    """Wraps an embedder; remembers vectors by text so several fresh memories do not re-encode."""

    def __init__(self, base: Any) -> None:
        self.base = base
        self.model_name = base.model_name
        self.dim = base.dim
        self._cache: dict[str, np.ndarray] = {}

    def encode(self, texts: Sequence[str], **kw: Any) -> np.ndarray:
        texts = list(texts)
        todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if todo:
            vecs = np.asarray(self.base.encode(todo), dtype=np.float32)
            self._cache.update(zip(todo, vecs))
        return np.vstack([self._cache[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def load(self, path: Path) -> None:
        """Vectors saved by ``save`` for this model (a later run re-encodes nothing it has)."""
        if path.is_file():
            with np.load(path, allow_pickle=False) as z:
                if str(z["model"]) == f"{self.model_name}|{self.dim}":
                    self._cache.update(zip(z["texts"].tolist(), z["vecs"]))

    def save(self, path: Path) -> None:
        texts = list(self._cache)
        np.savez(path, model=np.str_(f"{self.model_name}|{self.dim}"), texts=np.asarray(texts, dtype=np.str_),
                 vecs=np.vstack([self._cache[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32))


def make_embedder(spec: str) -> Any:
    if spec == "none":
        return None
    from causalmem.semantic import resolve_embedder

    return CachedEmbedder(resolve_embedder(spec))


# ----------------------------------------------------------------------------- eval
Scores = dict[str, tuple[np.ndarray, np.ndarray]]  # conv id -> (categories (n,), metrics (n, 5))


def grid_points(channels: tuple[str, ...], fusion: str, grid: str) -> list[tuple[str, retrieval.RetrievalParams | None]]:
    """The grid of the constants this configuration uses; the first point (params None) is shipped."""
    if grid == "none" or fusion not in ("auto", "blend"):
        return [("shipped", None)]
    axes: dict[str, tuple[float, ...]] = {}
    if "lexical" in channels and "semantic" in channels:
        axes["blend_vec"] = GRID_AXES["blend_vec"]
    if "graph" in channels:
        axes["graph_scale"] = GRID_AXES["graph_scale"]
        axes["backward_ratio"] = GRID_AXES["backward_ratio"]
    if "lexical" in channels:
        axes["prf_weight"] = GRID_AXES["prf_weight"]
    points: list[dict[str, float]] = [{}]
    for name, values in axes.items():
        points = [dict(p, **{name: v}) for p in points for v in values]
    base = retrieval.PARAMS
    out: list[tuple[str, retrieval.RetrievalParams | None]] = []
    for k, pt in enumerate(points):
        if k == 0:
            out.append(("shipped", None))
            continue
        scale = pt.get("graph_scale", 1.0)
        ratio = pt.get("backward_ratio", base.graph_backward / base.graph_forward)
        params = replace(base, blend_vec=pt.get("blend_vec", base.blend_vec), graph_forward=base.graph_forward * scale,
                         graph_backward=base.graph_forward * scale * ratio,
                         prf_weight=pt.get("prf_weight", base.prf_weight))
        out.append((" ".join(f"{n}={v:g}" for n, v in pt.items()), params))
    for name, values in EXTRA_AXES.items():  # --grid-axis: every point at each value (the first = shipped)
        out = [(label if v == values[0] else f"{label} {name}={v:g}",
                params if v == values[0] else replace(params or base, **{name: v}))
               for label, params in out for v in values]
    return out


# --grid-axis: RetrievalParams fields added to the grid (first value = the shipped one); the folds choose
# them together with the grid's constants, and the run also reports that nested choice paired against the
# grid without them.
EXTRA_AXES: dict[str, tuple[float, ...]] = {}


def build_store(convs: list[dict], embedder: Any, path: Path) -> dict[str, str]:
    """One store holding every conversation (user_id = sample id); returns chunk id -> dia_id."""
    dia_of: dict[str, str] = {}
    with Memory(path, embedder=embedder) as mem:
        for conv in convs:
            for session_id, when, turns in conv["sessions"]:
                for chunk in mem.add(turns, user_id=conv["id"], session_id=session_id, event_time=when):
                    dia_of[chunk.id] = chunk.metadata["dia_id"]
        mem.flush()  # vectors are computed in the background; the eval asks with every vector present
    return dia_of


def fresh_copy(base: Path, name: str) -> Path:
    """A copy of the built store file (and its WAL, if any) to run one reinforce-on pass on."""
    dst = base.with_name(name)
    for suffix in ("", "-wal", "-shm"):
        src = Path(str(base) + suffix)
        target = Path(str(dst) + suffix)
        if src.exists():
            shutil.copyfile(src, target)
        elif target.exists():
            target.unlink()
    return dst


def score_question(ranked: list[str], gold: list[str]) -> np.ndarray:
    g = set(gold)
    top5, top10 = ranked[:5], ranked[:10]
    dcg = sum(1.0 / math.log2(r + 2) for r, d in enumerate(top10) if d in g)
    idcg = sum(1.0 / math.log2(r + 2) for r in range(min(len(g), 10)))
    rr = next((1.0 / (r + 1) for r, d in enumerate(top10) if d in g), 0.0)
    return np.array([len(g.intersection(top5)) / len(g), len(g.intersection(top10)) / len(g), dcg / idcg,
                     float(bool(g.intersection(top10))), rr])


def ask_all(mem: Memory, convs: list[dict], dia_of: dict[str, str], channels: tuple[str, ...], fusion: str, *,
            reinforce: bool, params: retrieval.RetrievalParams | None, agent: Sequence[str] = ()) -> Scores:
    """Every question of every conversation, in data order, on one store. ``agent``: what the simulated
    agent of protocol B does after a question is scored (its learning reaches only the
    questions after it):
    - ``confirm``: confirms (``Memory.confirm``) the hits of its top 10 that are gold evidence, when
      there are at least 2 (what an agent that used them would confirm);
    - ``feedback``: rewards (``Memory.feedback(id, 1.0)``) each hit of its top 10 that is gold evidence
      (the memories it used to answer);
    - ``feedback-top``: rewards its best hit, gold or not (an agent that trusts its first hit: a noisy
      signal, the check that wrong feedback does not run away)."""
    out: Scores = {}
    for conv in convs:
        cats, rows = [], []
        for qa in conv["qa"]:
            if params is None:  # exactly what a user's call does
                hits = mem.search(qa["question"], top_k=10, user_id=conv["id"], channels=channels, fusion=fusion,
                                  reinforce=reinforce)
            else:
                hits = retrieval.search(mem._views, qa["question"], top_k=10, user_id=conv["id"], channels=channels,
                                        fusion=fusion, reinforce=reinforce, params=params)
            cats.append(qa["category"])
            rows.append(score_question([dia_of[h.id] for h in hits], qa["gold"]))
            useful = list(dict.fromkeys(h.id for h in hits[:10] if dia_of[h.id] in set(qa["gold"])))
            if "confirm" in agent and len(useful) >= 2:
                mem.confirm(useful)
            if "feedback" in agent:
                for cid in useful:
                    mem.feedback(cid, 1.0)
            if "feedback-top" in agent and hits:
                mem.feedback(hits[0].id, 1.0)
        out[conv["id"]] = (np.asarray(cats), np.vstack(rows) if rows else np.zeros((0, len(METRICS))))
    return out


def pooled(scores: Scores, convs: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    cats = np.concatenate([scores[c][0] for c in convs])
    mat = np.vstack([scores[c][1] for c in convs])
    return cats, mat


def _criterion(scores: Scores, convs: Sequence[str]) -> float:
    """What the tuning maximises: (R@10 + nDCG@10) / 2 over the given conversations' questions
    (both are targets; tuning on R@10 alone bought recall with ranking quality)."""
    mat = pooled(scores, convs)[1]
    return round(float((mat[:, METRICS.index("R@10")] + mat[:, METRICS.index("nDCG@10")]).mean() / 2), 9)


def cross_validate(by_point: dict[str, Scores], conv_ids: list[str]) -> tuple[Scores, dict[str, str]]:
    """Leave one conversation out: pick the grid point with the best criterion on the other two
    (ties: the earlier point, i.e. the shipped constants), score it on the held-out one."""
    names = list(by_point)
    held: Scores = {}
    chosen: dict[str, str] = {}
    for h in conv_ids:
        train = [c for c in conv_ids if c != h]
        best = max(names, key=lambda g: (_criterion(by_point[g], train), -names.index(g)))
        held[h] = by_point[best][h]
        chosen[h] = best
    return held, chosen


def paired_cross_validate(on: dict[str, Scores], off: dict[str, Scores], conv_ids: list[str]
                          ) -> tuple[Scores, Scores, dict[str, str]]:
    """Reinforcement on and off scored at the SAME grid point per fold: the point with the best
    criterion on the other two conversations averaged over both runs. Unpaired CV lets the two runs
    pick different points, so their difference mixes the learning effect with fold-choice noise."""
    names = list(on)
    held_on: Scores = {}
    held_off: Scores = {}
    chosen: dict[str, str] = {}
    for h in conv_ids:
        train = [c for c in conv_ids if c != h]
        best = max(names, key=lambda g: (_criterion(on[g], train) + _criterion(off[g], train), -names.index(g)))
        held_on[h], held_off[h], chosen[h] = on[best][h], off[best][h], best
    return held_on, held_off, chosen


def paired_spread(on: Scores, off: Scores, conv_ids: list[str], *, seed: int = 0) -> dict[str, dict[str, Any]]:
    """The paired on - off difference per held-out conversation and pooled, how many questions moved
    each way, and a 95% bootstrap interval over questions (the spread a reader needs to judge a
    difference of one or two questions)."""
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, Any]] = {}
    for m in ("R@10", "nDCG@10"):
        k = METRICS.index(m)
        per_conv = {c: float((on[c][1][:, k] - off[c][1][:, k]).mean()) for c in conv_ids}
        diff = np.concatenate([on[c][1][:, k] - off[c][1][:, k] for c in conv_ids])
        boots = diff[rng.integers(0, len(diff), size=(2000, len(diff)))].mean(axis=1)
        out[m] = {"per_conv": per_conv, "pooled": float(diff.mean()), "up": int((diff > 1e-12).sum()),
                  "down": int((diff < -1e-12).sum()), "lo": float(np.quantile(boots, 0.025)),
                  "hi": float(np.quantile(boots, 0.975))}
    return out


def best_in_sample(by_point: dict[str, Scores], conv_ids: list[str]) -> str:
    names = list(by_point)
    return max(names, key=lambda g: (_criterion(by_point[g], conv_ids), -names.index(g)))


def summarise_scores(scores: Scores, conv_ids: list[str]) -> dict[str, dict[str, float]]:
    cats, mat = pooled(scores, conv_ids)
    out: dict[str, dict[str, float]] = {}
    for c in CATEGORIES:
        sel = mat[cats == c]
        out[str(c)] = {m: float(sel[:, k].mean()) if len(sel) else float("nan") for k, m in enumerate(METRICS)}
        out[str(c)]["n"] = int(len(sel))
    sel = mat[np.isin(cats, CATEGORIES)]
    out["all"] = {m: float(sel[:, k].mean()) for k, m in enumerate(METRICS)}
    out["all"]["n"] = int(len(sel))
    return out


# ----------------------------------------------------------------------------- per-conversation helpers
# (one memory per conversation; benchmarks/encoder_bench.py compares encoders with these)
def build_memory(conv: dict, embedder: Any) -> tuple[Memory, dict[str, str]]:
    mem = Memory(":memory:", embedder=embedder)
    dia_of: dict[str, str] = {}
    for session_id, when, turns in conv["sessions"]:
        for chunk in mem.add(turns, user_id=conv["id"], session_id=session_id, event_time=when):
            dia_of[chunk.id] = chunk.metadata["dia_id"]
    mem.flush()
    return mem, dia_of


def run_config(mems: list[tuple[dict, Memory, dict]], channels, fusion, *, reinforce: bool) -> dict[int, list[np.ndarray]]:
    per_cat: dict[int, list[np.ndarray]] = {}
    for conv, mem, dia_of in mems:
        got = ask_all(mem, [conv], dia_of, tuple(channels), fusion, reinforce=reinforce, params=None)[conv["id"]]
        for c, row in zip(*got):
            per_cat.setdefault(int(c), []).append(row)
    return per_cat


def summarise(per_cat: dict[int, list[np.ndarray]]) -> dict[str, dict[str, float]]:
    cats = [c for c, rows in per_cat.items() for _ in rows]
    mat = np.vstack([r for rows in per_cat.values() for r in rows])
    return summarise_scores({"all": (np.asarray(cats), mat)}, ["all"])


# ----------------------------------------------------------------------------- report
def _row(label: str, s: dict, extra: str = "") -> str:
    a = s["all"]
    cats = " | ".join(f"{s[str(c)]['R@10']:.3f}" for c in CATEGORIES)
    return (f"| {label} | {a['R@5']:.3f} | {a['R@10']:.3f} | {a['nDCG@10']:.3f} | {a['hit@10']:.3f} | "
            f"{a['MRR']:.3f} | {cats} |{extra}")


def _per_category(title: str, s: dict) -> list[str]:
    lines = [f"### {title}", "", "| category | n | R@5 | R@10 | nDCG@10 | hit@10 | MRR |", "|---|---|---|---|---|---|---|"]
    for c in list(map(str, CATEGORIES)) + ["all"]:
        r = s[c]
        name = f"{c} {CAT_NAMES[int(c)]}" if c != "all" else "**overall**"
        lines.append(f"| {name} | {r['n']} | {r['R@5']:.3f} | {r['R@10']:.3f} | {r['nDCG@10']:.3f} | "
                     f"{r['hit@10']:.3f} | {r['MRR']:.3f} |")
    return lines + [""]


def markdown(rows: list[dict], meta: dict) -> str:
    head = "| configuration | R@5 | R@10 | nDCG@10 | hit@10 | MRR | R@10 c1 | c2 | c3 | c4 | c5 |"
    sep = "|---|---|---|---|---|---|---|---|---|---|---|"
    lines = [
        "# LoCoMo-dev retrieval: one store as users run it, in-sample and cross-validated",
        "",
        f"Command: `{meta['command']}`  " + (f"Config overrides: `{meta['config']}`.  " if meta.get("config") else ""),
        f"Data: `{meta['data']}` ({meta['n_conv']} conversations, {meta['n_q']} questions with evidence, "
        f"categories 1-5). Embedder: {meta['embedder']}. Runtime {meta['seconds']:.0f} s.",
        "",
        "Protocol: ONE store file opened with `Memory(path)` defaults holds all conversations, each scoped by "
        "`user_id` = sample id (one `add` per session: session_id = session number, event_time = session date). "
        "Each question asks `search(question, top_k=10, user_id=conv)`. *reinforce=on* is the default: every "
        "question in data order on a fresh copy of the store, each search's reinforcement (and learned links) "
        "visible to the next. *reinforce=off* passes `reinforce=False`.",
        "",
        "Cross-validation (leave one conversation out): for each conversation, the grid point with the best "
        "(R@10 + nDCG@10) / 2 on the other two is scored on it; the three held-out sets are pooled. Grid: "
        + meta["grid"] + ". rrf/hybrid rows have no constants to tune here (CV = in-sample).",
        "",
        "## Cross-validated (headline)",
        "",
        head + " R@10 of the best grid point in-sample | grid points |",
        sep + "---|---|",
    ]
    for r in rows:
        lines.append(_row(r["label"], r["cv"], f" {r['best_r10']:.3f} | {r['n_points']} |"))
    lines += ["", "## In-sample (shipped constants, tuned on this same data)", "", head, sep]
    for r in rows:
        lines.append(_row(r["label"], r["in"]))
    sizes = rows[0]["in"]
    lines += ["", "Category sizes: " + ", ".join(f"{c} {CAT_NAMES[c]} = {sizes[str(c)]['n']}" for c in CATEGORIES)
              + ".", "", "## Per category", ""]
    for r in rows:
        if r["label"].startswith(DEFAULT_LABEL):
            lines += _per_category(f"{r['label']}: cross-validated", r["cv"])
            lines += _per_category(f"{r['label']}: in-sample", r["in"])
    if meta.get("paired"):
        lines += ["## Paired: reinforcement on vs off at the same grid point per fold", "",
                  "Each fold picks ONE grid point for both runs (best criterion on the two training conversations, "
                  "averaged over the on and off runs), so the on - off difference is the learning effect, not two "
                  "folds choosing differently.", "",
                  "| configuration | on R@10 | off R@10 | on - off | on nDCG@10 | off nDCG@10 | on - off | "
                  + " | ".join(f"held out {c}" for c in meta["conv_ids"]) + " |",
                  "|---|---|---|---|---|---|---|" + "---|" * len(meta["conv_ids"])]
        for pr in meta["paired"]:
            a, b = pr["on"]["all"], pr["off"]["all"]
            lines.append(f"| {pr['label']} | {a['R@10']:.4f} | {b['R@10']:.4f} | {a['R@10'] - b['R@10']:+.4f} | "
                         f"{a['nDCG@10']:.4f} | {b['nDCG@10']:.4f} | {a['nDCG@10'] - b['nDCG@10']:+.4f} | "
                         + " | ".join(f"`{pr['chosen'][c]}`" for c in meta["conv_ids"]) + " |")
        lines += ["", "Spread of the paired on - off difference: per held-out conversation, the number of questions "
                  "whose score went up / down, and a 95% bootstrap interval over questions (2,000 resamples).", "",
                  "| configuration | metric | " + " | ".join(f"held out {c}" for c in meta["conv_ids"])
                  + " | pooled | questions up / down | 95% interval |", "|---|---|" + "---|" * len(meta["conv_ids"])
                  + "---|---|---|"]
        for pr in meta["paired"]:
            for m, d in pr["spread"].items():
                lines.append(f"| {pr['label']} | {m} | " + " | ".join(f"{d['per_conv'][c]:+.4f}" for c in meta["conv_ids"])
                             + f" | {d['pooled']:+.4f} | {d['up']} / {d['down']} | [{d['lo']:+.4f}, {d['hi']:+.4f}] |")
        lines.append("")
    lines += ["## Grid points chosen by the folds", "", "| configuration | " + " | ".join(
        f"held out {c}" for c in meta["conv_ids"]) + " | best on all three |", "|---" * (len(meta["conv_ids"]) + 2) + "|"]
    for r in rows:
        if r["n_points"] > 1:
            lines.append(f"| {r['label']} | " + " | ".join(f"`{r['chosen'][c]}`" for c in meta["conv_ids"])
                         + f" | `{r['best']}` |")
    lines.append("")
    if meta.get("notes"):
        lines += ["## Notes", ""] + meta["notes"] + [""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- paired mode
# Reinforcement on vs off on the same store builds, default configuration only: the cheap check of a
# learning rule. ``--paired "on,links-only,access-only,start0:hebbian_start=0;hebbian_step=0.1"``: each
# variant is ``label[:overrides]`` (Config fields as in --config, ';'-separated, applied on top of
# --config); the token ``noaccess`` keeps a variant from writing access counts / importance (the
# ablation of the learned links alone), ``coef=X`` sets the learned links' spread coefficient
# (``projection.CO_OCCURRENCE_COEFFICIENT``) for that variant. Q-values are never changed by a search
# (only ``feedback``): the table's last column counts them. The tokens ``confirm``, ``feedback`` and
# ``feedback-top`` make the variant's simulated agent confirm / reward hits of each question's top 10 after
# it is scored (protocol B, ``ask_all``); its reinforce-off peer is the same off grid (no learning,
# no confirmation, no feedback).
# Named variants:
NAMED_VARIANTS: dict[str, str] = {
    "on": "",                      # the default: everything a search's reinforcement does
    "search-rule": "hebbian_search=1",  # the opt-in search-time co-retrieval credit
    "links-only": "noaccess;hebbian_search=1",  # search-time learned (Hebbian) links only
    "access-only": "hebbian_top=0",  # access counts + importance only, no learned links
}


AGENT_ACTIONS = ("confirm", "feedback", "feedback-top")
AGENT_WORDS = {"confirm": " + the agent confirms the gold hits of each top 10",
               "feedback": " + the agent rewards the gold hits of each top 10",
               "feedback-top": " + the agent rewards its best hit (gold or not)"}


def parse_variant(spec: str, base: Config) -> tuple[str, Config, bool, float | None, tuple[str, ...]]:
    """``label[:overrides]`` -> (label, Config, no access writes, learned-link coefficient or None, the
    simulated agent's actions)."""
    label, _, over = spec.partition(":")
    label = label.strip()
    over = NAMED_VARIANTS.get(label, "") if not over else over
    items = [x.strip() for x in over.split(";") if x.strip()]
    no_access = "noaccess" in items
    agent = tuple(x for x in AGENT_ACTIONS if x in items)
    coef = next((float(x.partition("=")[2]) for x in items if x.startswith("coef=")), None)
    kw = {}
    for item in (x for x in items if x != "noaccess" and x not in AGENT_ACTIONS and not x.startswith("coef=")):
        key, _, raw = item.partition("=")
        if not hasattr(base, key):
            raise SystemExit(f"locomo_retrieval: --paired {spec!r}: Config has no field {key!r}")
        kind = type(getattr(base, key))
        kw[key] = raw.lower() in ("1", "true", "yes") if kind is bool else kind(raw)
    return label, replace(base, **kw), no_access, coef, agent


def _source_key(data: Path, extra: str) -> str:
    """What the reinforce-off scores depend on: the engine's code, the data, the run's options."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted((REPO / "causalmem").rglob("*")):
        if f.suffix in (".py", ".pyx") and f.is_file():
            h.update(f.relative_to(REPO).as_posix().encode() + b"\0" + f.read_bytes())
    h.update(Path(data).read_bytes())
    h.update(extra.encode())
    return h.hexdigest()[:20]


def _store_facts(path: Path) -> tuple[int, int, int]:
    """(learned pairs, chunks with an access count, chunks whose Q-value is not the initial 0.5) of a store file."""
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        pairs = con.execute("SELECT COUNT(*) FROM cooccurrence").fetchone()[0]
        cols = {r[1] for r in con.execute("PRAGMA table_info(chunks)")}
        touched = con.execute("SELECT COUNT(*) FROM chunks WHERE access_count > 0").fetchone()[0] \
            if "access_count" in cols else -1
        q_moved = con.execute("SELECT COUNT(*) FROM chunks WHERE abs(q_value - 0.5) > 1e-9").fetchone()[0]
    finally:
        con.close()
    return int(pairs), int(touched), int(q_moved)


def paired_mode(args: argparse.Namespace, convs: list[dict], emb: Any, cfg: Config) -> int:
    """Reinforcement on (one run per variant) vs off on the same store builds, paired per question."""
    t0 = time.perf_counter()
    conv_ids = [c["id"] for c in convs]
    channels, fusion = ("lexical", "semantic", "graph") if emb is not None else ("lexical", "graph"), "auto"
    variants = [parse_variant(v, cfg) for v in args.paired.split(",") if v.strip()]
    points = grid_points(channels, fusion, "none" if args.paired_grid == "shipped" else "full")
    cache = Path(args.cache) if args.cache else None
    timing: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="locomo-paired-") as tmp:
        base = Path(tmp) / "base.db"
        dia_of = build_store(convs, emb, base)
        timing["store build"] = time.perf_counter() - t0
        print(f"store built in {timing['store build']:.0f} s", flush=True)
        base_facts = _store_facts(base)
        # reinforce off at every grid point needed (cached: they depend on the code, not on the rule)
        t1 = time.perf_counter()
        key = _source_key(args.data, f"{args.config}|{args.raw_cosine}|{GRID_AXES}|{len(points)}|"
                          f"{'none' if emb is None else emb.model_name}|encoded as users encode")
        off_file = cache / f"off-{key}.npz" if cache else None
        off: dict[str, Scores] = {}
        if off_file is not None and off_file.is_file():
            with np.load(off_file, allow_pickle=False) as z:
                for name, _ in points:
                    off[name] = {c: (z[f"{name}|{c}|cats"], z[f"{name}|{c}|scores"]) for c in conv_ids}
            print(f"reinforce-off scores of {len(points)} grid points read from {off_file}", flush=True)
        else:
            with Memory(fresh_copy(base, "off.db"), embedder=emb, config=cfg) as mem:
                for name, params in points:
                    off[name] = ask_all(mem, convs, dia_of, channels, fusion, reinforce=False, params=params)
            if off_file is not None:
                np.savez_compressed(off_file, **{f"{g}|{c}|{part}": off[g][c][j] for g in off for c in conv_ids
                                                 for j, part in enumerate(("cats", "scores"))})
        timing["reinforce off, all points"] = time.perf_counter() - t1
        # the points the reinforce-on runs need: the shipped one, and per fold the best few by the off runs
        if args.paired_grid.startswith("top"):
            n_top = int(args.paired_grid[3:] or 3)
            names = [g for g, _ in points]
            keep = {"shipped"}
            for h in conv_ids:
                train = [c for c in conv_ids if c != h]
                keep.update(sorted(names, key=lambda g: (-_criterion(off[g], train), names.index(g)))[:n_top])
            run_points = [(g, prm) for g, prm in points if g in keep]
        else:
            run_points = points
        print(f"reinforce-on runs at {len(run_points)} of {len(points)} grid points", flush=True)
        results = []
        from causalmem import projection

        shipped_coef = projection.CO_OCCURRENCE_COEFFICIENT
        for label, vcfg, no_access, coef, agent in variants:
            t2 = time.perf_counter()
            projection.CO_OCCURRENCE_COEFFICIENT = shipped_coef if coef is None else coef
            on: dict[str, Scores] = {}
            facts = None
            for k, (name, params) in enumerate(run_points):
                path = fresh_copy(base, f"on{k}.db")
                with Memory(path, embedder=emb, config=vcfg) as mem:
                    if no_access:  # the learned links alone: no access counts / importance written
                        mem._views.effects.accessed = lambda fx, nids: None  # type: ignore[method-assign]
                        mem._views.store.touch_chunks_batch = lambda touches: None  # type: ignore[method-assign]
                    on[name] = ask_all(mem, convs, dia_of, channels, fusion, reinforce=True, params=params,
                                       agent=agent)
                if name == "shipped":
                    facts = _store_facts(path)
            sub_off = {g: off[g] for g in on}
            p_on, p_off, chosen = paired_cross_validate(on, sub_off, conv_ids)
            shipped_on = {c: on["shipped"][c] for c in conv_ids}
            shipped_off = {c: off["shipped"][c] for c in conv_ids}
            projection.CO_OCCURRENCE_COEFFICIENT = shipped_coef
            res = {"label": label, "coef": coef, "overrides": {f: getattr(vcfg, f) for f in vcfg.__dataclass_fields__
                                                               if getattr(vcfg, f) != getattr(Config(), f)},
                   "no_access": no_access, "agent": agent, "cv_on": summarise_scores(p_on, conv_ids),
                   "cv_off": summarise_scores(p_off, conv_ids), "chosen": chosen,
                   "cv": paired_spread(p_on, p_off, conv_ids), "shipped": paired_spread(shipped_on, shipped_off, conv_ids),
                   "facts": facts, "seconds": time.perf_counter() - t2}
            res["_scores"] = (on, sub_off, chosen)
            results.append(res)
            d, e = res["cv"]["R@10"], res["cv"]["nDCG@10"]
            print(f"{label:22s} paired CV on-off R@10 {d['pooled']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}] "
                  f"nDCG@10 {e['pooled']:+.4f} [{e['lo']:+.4f}, {e['hi']:+.4f}]  up/down {d['up']}/{d['down']}; "
                  f"{e['up']}/{e['down']}  facts {facts}  ({res['seconds']:.0f} s)", flush=True)
    if args.dump is not None:  # every variant's per-question scores at every point it ran, and the off ones
        np.savez_compressed(args.dump, **{f"{r['label']}|{g}|{c}|{part}": r["_scores"][0][g][c][j] for r in results
                                          for g in r["_scores"][0] for c in conv_ids
                                          for j, part in enumerate(("cats", "scores"))},
                            **{f"off|{g}|{c}|{part}": off[g][c][j] for g in off for c in conv_ids
                               for j, part in enumerate(("cats", "scores"))})
    rules = [r for r in results if r["label"] not in ("links-only", "access-only")]  # ablations are no rules
    held_back = rule_by_folds(rules, conv_ids) if len(rules) > 1 else None
    if held_back is not None:
        d, e = held_back["spread"]["R@10"], held_back["spread"]["nDCG@10"]
        print(f"rule chosen by the folds: {held_back['chosen']}  held-out on-off R@10 {d['pooled']:+.4f} "
              f"[{d['lo']:+.4f}, {d['hi']:+.4f}] nDCG@10 {e['pooled']:+.4f} [{e['lo']:+.4f}, {e['hi']:+.4f}]", flush=True)
    timing["total"] = time.perf_counter() - t0
    md = paired_markdown(results, {"held_back": held_back,
        "command": "python benchmarks/locomo_retrieval.py " + " ".join(sys.argv[1:]), "conv_ids": conv_ids,
        "n_q": sum(len(c["qa"]) for c in convs), "points": len(points), "run_points": [g for g, _ in run_points],
        "grid": args.paired_grid, "timing": timing, "base_facts": base_facts, "config": args.config,
        "embedder": "none" if emb is None else f"{emb.model_name} (dim {emb.dim})"})
    if args.out != "-":
        Path(args.out).write_text(md + "\n")
        print(f"wrote {args.out}")
    else:
        print(md)
    return 0


def rule_by_folds(results: list[dict], conv_ids: list[str]) -> dict[str, Any]:
    """The held-back check of choosing a rule: for each conversation, the variant whose paired on - off
    criterion is best on the OTHER two conversations (at the grid point that fold chose for it) is scored on
    this one, so the rule is never judged on the questions that picked it."""
    held_on: Scores = {}
    held_off: Scores = {}
    chosen: dict[str, str] = {}
    for h in conv_ids:
        train = [c for c in conv_ids if c != h]

        def gain(r: dict) -> float:
            on, off, pts = r["_scores"]
            g = pts[h]
            return _criterion(on[g], train) - _criterion(off[g], train)

        best = max(results, key=lambda r: (gain(r), -results.index(r)))
        on, off, pts = best["_scores"]
        held_on[h], held_off[h], chosen[h] = on[pts[h]][h], off[pts[h]][h], best["label"]
    return {"chosen": chosen, "spread": paired_spread(held_on, held_off, conv_ids)}


def paired_markdown(results: list[dict], meta: dict) -> str:
    convs = meta["conv_ids"]
    t = meta["timing"]
    lines = [
        "# LoCoMo-dev: reinforcement on vs off, paired, default configuration",
        "",
        f"Command: `{meta['command']}`" + (f" (Config overrides for every run: `{meta['config']}`)" if meta["config"]
                                           else ""),
        "",
        f"{meta['n_q']} questions of {len(convs)} conversations in ONE store (`user_id` = conversation, the protocol "
        f"of `locomo.md`); embedder {meta['embedder']}. Reinforce-off runs at all {meta['points']} grid points; "
        f"reinforce-on runs (every question in data order on a fresh copy of the same built store, each search's "
        f"reinforcement visible to the next) at {len(meta['run_points'])} of them (`--paired-grid {meta['grid']}`: "
        "the shipped point and, per fold, the best points of the off runs on the two training conversations). "
        "Paired CV: each fold picks ONE of those points for on and off (best (R@10 + nDCG@10) / 2 on the training "
        "conversations, averaged over on and off) and scores it on the held-out conversation. Intervals: 95% "
        "bootstrap over questions (2,000 resamples) of the pooled per-question difference.",
        "",
        "Time: " + ", ".join(f"{k} {v:.0f} s" for k, v in t.items()) + " (per variant: see the table).",
        "",
        "| variant | Config overrides | paired CV on - off R@10 [95%] | nDCG@10 [95%] | up / down (R@10; nDCG) | "
        + " | ".join(f"nDCG {c}" for c in convs) + " | shipped point R@10 / nDCG | learned pairs, chunks with "
        "an access count, Q-values moved | s |",
        "|---|---|---|---|---|" + "---|" * len(convs) + "---|---|---|",
    ]
    for r in results:
        d, e = r["cv"]["R@10"], r["cv"]["nDCG@10"]
        sd, se = r["shipped"]["R@10"], r["shipped"]["nDCG@10"]
        ov = ", ".join(f"{k}={v}" for k, v in r["overrides"].items()) + (" + no access writes" if r["no_access"] else "") \
            + "".join(AGENT_WORDS[a] for a in r.get("agent", ())) \
            + (f" + link coefficient {r['coef']:g}" if r["coef"] is not None else "")
        lines.append(
            f"| {r['label']} | {ov or '(default)'} | {d['pooled']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}] | "
            f"{e['pooled']:+.4f} [{e['lo']:+.4f}, {e['hi']:+.4f}] | {d['up']} / {d['down']}; {e['up']} / {e['down']} | "
            + " | ".join(f"{e['per_conv'][c]:+.4f}" for c in convs)
            + f" | {sd['pooled']:+.4f} / {se['pooled']:+.4f} | {r['facts']} | {r['seconds']:.0f} |")
    lines += ["", "Absolute paired-CV figures (on / off) and the points the folds chose:", "",
              "| variant | R@10 on | R@10 off | nDCG@10 on | nDCG@10 off | " + " | ".join(f"chosen, held out {c}" for c in convs)
              + " |", "|---|---|---|---|---|" + "---|" * len(convs)]
    for r in results:
        a, b = r["cv_on"]["all"], r["cv_off"]["all"]
        lines.append(f"| {r['label']} | {a['R@10']:.4f} | {b['R@10']:.4f} | {a['nDCG@10']:.4f} | {b['nDCG@10']:.4f} | "
                     + " | ".join(f"`{r['chosen'][c]}`" for c in convs) + " |")
    hb = meta.get("held_back")
    if hb is not None:
        d, e = hb["spread"]["R@10"], hb["spread"]["nDCG@10"]
        lines += ["", "Held-back check of the choice of rule: for each conversation, the variant with the best paired "
                  "on - off criterion on the other two (at that fold's grid point) is scored on it.", "",
                  "| | " + " | ".join(f"held out {c}" for c in convs) + " | pooled on - off R@10 [95%] | nDCG@10 [95%] |",
                  "|---|" + "---|" * len(convs) + "---|---|",
                  "| variant chosen | " + " | ".join(f"`{hb['chosen'][c]}`" for c in convs)
                  + f" | {d['pooled']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}] | {e['pooled']:+.4f} [{e['lo']:+.4f}, "
                  f"{e['hi']:+.4f}] |",
                  "| on - off per held-out conversation, R@10 / nDCG@10 | " + " | ".join(
                      f"{d['per_conv'][c]:+.4f} / {e['per_conv'][c]:+.4f}" for c in convs) + " | | |"]
    lines += ["", f"Base store before any search: {meta['base_facts']} (learned pairs, chunks with an access count, "
              "Q-values moved)."]
    return "\n".join(lines)


def parse_config(spec: str) -> Config:
    """``'a=1,b=0.5,c=true'`` -> ``Config(a=1, b=0.5, c=True)`` (each value as the field's default type)."""
    kw: dict[str, Any] = {}
    defaults = Config()
    for item in filter(None, (x.strip() for x in spec.split(","))):
        key, _, raw = item.partition("=")
        if not hasattr(defaults, key):
            raise SystemExit(f"locomo_retrieval: --config: Config has no field {key!r}")
        kind = type(getattr(defaults, key))
        kw[key] = raw.lower() in ("1", "true", "yes") if kind is bool else kind(raw)
    return Config(**kw)


def _param_value(current: Any, raw: str) -> Any:
    """A command-line value for a RetrievalParams field, of the field's type (``current`` is its value)."""
    return raw.strip() in ("1", "true", "True") if isinstance(current, bool) else type(current)(float(raw))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="path to locomo_dev.json")
    ap.add_argument("--embedder", default="auto", help="'auto' (what Memory(path) uses), a model name/path, or 'none'")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="Markdown output file, '-' for stdout only")
    ap.add_argument("--configs", default="", help="comma-separated substrings selecting configurations")
    ap.add_argument("--grid", choices=("full", "none"), default="full", help="'none': shipped constants only")
    ap.add_argument("--no-reinforce-run", action="store_true", help="skip the reinforce=on runs")
    ap.add_argument("--params", default="",
                    help="RetrievalParams overrides applied at every grid point, e.g. 'entity_hop=1'")
    ap.add_argument("--raw-cosine", action="store_true",
                    help="ablation: raw cosines in the blend (no centring on the candidates' mean vector), semantic "
                    "weight 2 shipped (the fusion before centring)")
    ap.add_argument("--grid-axis", action="append", default=[],
                    help="a RetrievalParams field added to the CV grid, 'session_support=0,2,4' (first value = the "
                         "shipped one); also prints the nested choice paired against the grid without it")
    ap.add_argument("--json", type=Path, default=None, help="also write the summaries as JSON here")
    ap.add_argument("--dump", type=Path, default=None,
                    help="write every grid point's per-question scores (reinforce on and off) to this .npz")
    ap.add_argument("--config", default="", help="Config fields to override, e.g. 'hebbian_start=0,hebbian_step=0.1' "
                    "(an ablation of the learning rule; default: Config())")
    ap.add_argument("--co-coefficient", type=float, default=None,
                    help="ablation: spread coefficient of learned co-occurrence links (default: "
                    "causalmem.projection.CO_OCCURRENCE_COEFFICIENT)")
    ap.add_argument("--paired", default="",
                    help="paired mode: only the default configuration, reinforcement on (one run per variant, e.g. "
                    "'on,links-only,access-only,start0:hebbian_start=0;hebbian_step=0.1') vs off on the same store "
                    "builds; per-conversation paired differences with bootstrap intervals")
    ap.add_argument("--paired-grid", default="top3",
                    help="paired mode: 'shipped' (no CV), 'topN' (reinforce-on at the shipped point and each fold's N "
                    "best off points), 'full'")
    ap.add_argument("--cache", default="", help="directory for the reinforce-off scores between runs (paired mode)")
    args = ap.parse_args(argv)
    cfg = parse_config(args.config)
    if args.paired and args.out == str(DEFAULT_OUT):
        args.out = str(DEFAULT_OUT.with_name("locomo_paired.md"))
    if args.co_coefficient is not None:
        from causalmem import projection

        projection.CO_OCCURRENCE_COEFFICIENT = args.co_coefficient
    if args.params:  # every grid point (the shipped one too) with these RetrievalParams overrides
        over: dict[str, Any] = {}
        for item in args.params.split(","):
            key, _, raw = item.partition("=")
            cur = getattr(retrieval.PARAMS, key.strip(), None)
            if cur is None:
                raise SystemExit(f"locomo_retrieval: --params {item!r}: RetrievalParams has no field {key.strip()!r}")
            over[key.strip()] = _param_value(cur, raw)
        retrieval.PARAMS = replace(retrieval.PARAMS, **over)
    for spec in args.grid_axis:
        name, _, vals = spec.partition("=")
        name = name.strip()
        if not hasattr(retrieval.PARAMS, name):
            raise SystemExit(f"locomo_retrieval: --grid-axis {spec!r}: RetrievalParams has no field {name!r}")
        values = tuple(_param_value(getattr(retrieval.PARAMS, name), v) for v in vals.split(",") if v.strip())
        if not values or values[0] != getattr(retrieval.PARAMS, name):
            raise SystemExit(f"locomo_retrieval: --grid-axis {spec!r}: the first value must be the shipped "
                             f"{getattr(retrieval.PARAMS, name)!r}")
        EXTRA_AXES[name] = values
    if args.raw_cosine:
        retrieval.PARAMS = replace(retrieval.PARAMS, centre=False)  # raw cosine weight raw_weight x blend_vec = 2
        GRID_AXES["blend_vec"] = (1.0, 0.25, 0.5, 1.5, 0.0)  # raw weights 2, 0.5, 1, 3, 0 (the grid before)
    t0 = time.perf_counter()
    if not Path(args.data).is_file():  # never replace the committed table with empty rows
        print(f"locomo_retrieval: {args.data} not found (the eval data is read from ../shared/data "
              f"next to the checkout, or give --data); nothing written to {args.out}", file=sys.stderr)
        return 2
    convs = load(args.data)
    if not convs:
        print(f"locomo_retrieval: no conversations in {args.data}; nothing written to {args.out}",
              file=sys.stderr)
        return 2
    conv_ids = [c["id"] for c in convs]
    emb = make_embedder(args.embedder)
    # No pre-encoding: the turns are embedded by the store's background worker as `Memory.add` leaves
    # them, each question by its own `search`, as a user's calls do. The default int8 ONNX encoder
    # quantises a call's activations together, so a text's vector depends on the texts encoded with it:
    # encoding every question in one batch call (as this harness did until 2026-12-02) made the figures a
    # function of the harness's batching (benchmarks/results/encoder_quality.md). `CachedEmbedder` only
    # hands the same text's first vector to the later fresh memories of one run.
    if args.paired:
        return paired_mode(args, convs, emb, cfg)
    configs = [cfg for cfg in CONFIGS if emb is not None or "semantic" not in cfg[1]]
    if emb is None:
        configs = [("**default** (lexical + graph, no model)" if lab == "lexical + graph" else lab, ch, fu)
                   for lab, ch, fu in configs]
    if args.configs:
        wanted = [w.strip() for w in args.configs.split(",")]
        configs = [cfg for cfg in configs if any(w in cfg[0] for w in wanted)]
    rows: list[dict] = []
    paired: list[dict] = []
    dumped: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        base = Path(tmp) / "base.db"
        dia_of = build_store(convs, emb, base)
        print(f"store built in {time.perf_counter() - t0:.0f} s", flush=True)
        shared = Memory(fresh_copy(base, "off.db"), embedder=emb, config=cfg)
        for label, channels, fusion in configs:
            points = grid_points(channels, fusion, args.grid)
            modes = [False] + ([True] if not args.no_reinforce_run and
                               any(label.startswith(r) or "**default**" in label for r in REINFORCED) else [])
            runs: dict[bool, dict[str, Scores]] = {}
            for reinforce in modes:
                by_point: dict[str, Scores] = runs.setdefault(reinforce, {})
                for k, (name, params) in enumerate(points):
                    if reinforce:
                        with Memory(fresh_copy(base, f"on{k}.db"), embedder=emb, config=cfg) as mem:
                            by_point[name] = ask_all(mem, convs, dia_of, channels, fusion, reinforce=True,
                                                     params=params)
                    else:
                        by_point[name] = ask_all(shared, convs, dia_of, channels, fusion, reinforce=False,
                                                 params=params)
                cv, chosen = cross_validate(by_point, conv_ids)
                if EXTRA_AXES:
                    tags = [f" {n}=" for n in EXTRA_AXES]
                    plain = {g: v for g, v in by_point.items() if not any(t in f" {g}" for t in tags)}
                    cv0, chosen0 = cross_validate(plain, conv_ids)
                    sp = paired_spread(cv, cv0, conv_ids)
                    a, b = summarise_scores(cv, conv_ids), summarise_scores(cv0, conv_ids)
                    for m in ("R@10", "nDCG@10"):
                        d = sp[m]
                        print(f"{label}: CV {m} with the folds also choosing {dict(EXTRA_AXES)} {a['all'][m]:.4f} "
                              f"vs the grid without them {b['all'][m]:.4f}: {d['pooled']:+.4f} [{d['lo']:+.4f}, "
                              f"{d['hi']:+.4f}], {d['up']} up / {d['down']} down", flush=True)
                    print(f"{label}: chosen with them {chosen}; without {chosen0}", flush=True)
                    for c in CATEGORIES:
                        print(f"{label}: category {c} {CAT_NAMES[c]} CV R@10 {a[str(c)]['R@10']:.3f} vs "
                              f"{b[str(c)]['R@10']:.3f}", flush=True)
                best = best_in_sample(by_point, conv_ids)
                row = {"label": f"{label}, reinforce={'on' if reinforce else 'off'}",
                       "in": summarise_scores(by_point["shipped"], conv_ids), "cv": summarise_scores(cv, conv_ids),
                       "best": best, "best_r10": summarise_scores(by_point[best], conv_ids)["all"]["R@10"],
                       "chosen": chosen, "n_points": len(points)}
                rows.append(row)
                print(f"{row['label']:60s} R@10 in {row['in']['all']['R@10']:.4f} cv {row['cv']['all']['R@10']:.4f} "
                      f"nDCG cv {row['cv']['all']['nDCG@10']:.4f}  ({time.perf_counter() - t0:.0f} s)", flush=True)
            if len(runs) == 2 and len(points) > 1:
                p_on, p_off, p_chosen = paired_cross_validate(runs[True], runs[False], conv_ids)
                pair = {"label": label, "on": summarise_scores(p_on, conv_ids),
                        "off": summarise_scores(p_off, conv_ids), "chosen": p_chosen,
                        "spread": paired_spread(p_on, p_off, conv_ids)}
                if args.dump is not None:  # every grid point's per-question scores, both runs
                    dumped.update({f"{label}|{'on' if r else 'off'}|{g}|{c}|{part}": runs[r][g][c][j]
                                   for r in (True, False) for g in runs[r] for c in conv_ids for j, part in
                                   enumerate(("cats", "scores"))})
                    np.savez_compressed(args.dump, **dumped)
                paired.append(pair)
                print(f"{label:60s} paired CV on {pair['on']['all']['R@10']:.4f} / {pair['on']['all']['nDCG@10']:.4f}"
                      f" off {pair['off']['all']['R@10']:.4f} / {pair['off']['all']['nDCG@10']:.4f}", flush=True)
        shared.close()
    rows.sort(key=lambda r: (not r["label"].startswith("**default**"),))
    meta = {"command": "python benchmarks/locomo_retrieval.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "data": "../shared/data/locomo-dev/locomo_dev.json" if args.data == DEFAULT_DATA else str(args.data),
            "n_conv": len(convs), "n_q": sum(len(c["qa"]) for c in convs), "conv_ids": conv_ids,
            "embedder": "none" if emb is None else f"{emb.model_name} (dim {emb.dim})",
            "seconds": time.perf_counter() - t0, "notes": NOTES,
            "grid": "none (shipped constants only)" if args.grid == "none" else ", ".join(
                f"{k} in {{{', '.join(f'{v:g}' for v in vals)}}}" for k, vals in GRID_AXES.items())
            + " (graph_scale multiplies the forward and backward bonus weights; backward_ratio = backward / forward;"
              " each axis only where the configuration uses it)"}
    meta["paired"] = paired
    if args.config:
        meta["config"] = args.config
    md = markdown(rows, meta)
    if args.json is not None:
        args.json.write_text(json.dumps({r["label"]: {"in": r["in"], "cv": r["cv"], "chosen": r["chosen"]}
                                         for r in rows}, indent=1))
    if args.out != "-":
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(md + "\n")
        print(f"wrote {args.out}")
    else:
        print(md)
    return 0


NOTES: list[str] = [
    "- **blend** (`fusion=auto`): base = (1 x BM25/best BM25 + 1 x centred cosine) / 2 over the union of the "
    "channels' top-50, where the centred cosine is the cosine of (query - m) and (candidate - m), m = the mean "
    "vector of those candidates (raw cosines at weight 2 while fewer than 50 candidates have a vector); energy = base - the "
    "50th best candidate's base. The 20 best candidates seed PEDSA spreading "
    "(teleport 0.15) forward and backward, in groups no edge joins (a greedy colouring of the seeds, which "
    "replaced the even/odd-nid split: same figures here, and a cause and its outcome now credit each other "
    "whatever their ids); what reaches a node is added to its energy (forward weight 5.0, backward 2.5), "
    "degree-normalised (1/sqrt(degree/2) at both ends, structural edges only) and capped at the best seed's "
    "energy. Then a **second pass** (pseudo-relevance feedback): the 10 words of the best 3 hits that share a "
    "word with the query, frequent there and rare in the store, query BM25 again; the candidates it finds gain "
    "0.5 x the best score x its score / its best (nothing new is brought in). "
    "**hybrid** = the ST-BME formula of SPEC §4 verbatim; **rrf** = reciprocal rank fusion, k = 60.",
    "- **Centring** (why the semantic channel added nothing under cross-validation): every turn "
    "of a conversation shares a large component with every other and with the question (the speakers' names, "
    "the register of chat), so raw MiniLM cosines sit in a narrow band and rank best the turns that are nearly "
    "pure shared component: short content-free turns ('Jon: What gave you the idea?', cosine 0.53) outranked "
    "answers (0.24-0.47) once the weight-2 semantic term was added to BM25 — on conv-30 the channel cost nDCG "
    "at every weight. Removing the speaker names from the embedded text instead made it worse (semantic alone "
    "R@10 0.457 -> 0.284: the name is what ties a question to its speaker); removing the '[shares photo: ...]' "
    "captions helped a little (0.773 -> 0.786 R@10 at the shipped point) but is a property of this data set, "
    "not something the engine can know. Tried at the shipped graph point, reinforcement off, R@10 / nDCG@10 "
    "in-sample: raw cosine weight 2 0.773 / 0.567; cosine rescaled from the 50th to the best (weights "
    "0.25-2) at best 0.770 / 0.564; cosine / best cosine at best 0.758 / 0.565; centred on the mean of the "
    "whole scope (the conversation) 0.771 / 0.567 (weight 1), 0.779 / 0.562 (2), conv-30 still below lexical + "
    "graph on both; **centred on the candidates' mean, weight 1: 0.779 / 0.579; per conversation against lexical "
    "+ graph (0.758 / 0.542, 0.737 / 0.586, 0.735 / 0.570) 0.791 / 0.560, 0.766 / 0.585, 0.775 / 0.594** (weight 0.5 0.769 / 0.573, 2 0.785 / 0.576, 3 0.775 / 0.554). Weight 1 (equal "
    "weights) is the shipped value; the grid keeps 0.5, 2, 3 and 0 (no semantic channel). A semantic second "
    "pass (Rocchio: centred centroid of the best 3 hits, weight 0.15 / 0.3 / 0.5 of the best score) measured "
    "+0.009 / +0.006 / -0.003 R@10 in-sample but lower on conv-30 at every weight: dropped.",
    "- The second pass (added before centring; figures of the raw-cosine fusion) measured as a gain under cross-validation: default, "
    "reinforcement off, CV R@10 0.731 -> 0.746, nDCG@10 0.508 -> 0.542 (in-sample 0.751 -> 0.773, "
    "0.534 -> 0.564); reinforcement on, CV 0.745 -> 0.755, 0.521 -> 0.553. Its 10 terms / 3 documents were "
    "picked from in-sample tries (5/10/20 terms, 1/3/5 documents, weight 0.15/0.3/0.5; feedback from any "
    "of the best hits, graph-only neighbours included, and letting it bring in new candidates: 0.769 and "
    "0.773 in-sample, and the former let a neighbour overtake the exact match in small stores); only its "
    "weight is on the CV grid. Other tries, flat in-sample (within 0.005 R@10): candidate depth 100, 10 or "
    "30 seeds, graph cap 0.5 / 0.8, degree power 0.25 / 1.",
    "- **Learned links** (reinforce=on): by default (`Config.hebbian_search` = False) a search writes access "
    "counts only, which the default fusion does not read, so reinforce=on = reinforce=off question by question "
    "here; learned links come from `Memory.confirm` (hits a caller used together), which this harness does not "
    "call (`--paired ...:confirm` does: `results/locomo_paired_confirm.md`). With the opt-in `hebbian_search`, "
    "a search credits the pair of its best 2 hits when they share a session "
    "(`Config.hebbian_top` = 2, `hebbian_same_session`) and the second scored >= 0.7 x the best "
    "(`hebbian_min_ratio`); a new pair starts at weight 0.1 (`hebbian_start`: one "
    "co-retrieval is weak evidence), +0.05 per repeat up to 1.0, spread with coefficient 0.5 and left out of the "
    "degree normalisation; visible to the very next search (an overlay of the credit still queued for the store), "
    "faded in sleep. SPEC §5 credits every co-retrieved pair at 0.2: pairing a whole top-10 cost 0.09 R@10. "
    "Other rules on the full grid, paired CV on - off (R@10 / nDCG@10): `results/locomo_learning_rules.md`.",
    "- How the credit rule was chosen (raw-cosine fusion, before centring): reinforce-on minus reinforce-off, R@10 / nDCG@10, pooled over six grid "
    "points (the shipped constants and the five points earlier folds chose; 6 x 495 questions, all three "
    "conversations, so this choice itself is in-sample): best 3, start 0.2 (the previous rule) -0.0047 / -0.0031; "
    "best 4 -0.0099 / -0.0157; best 2 +0.0041 / -0.0004; **best 2, start 0.1 +0.0017 / +0.0008 (chosen)**; best 2, "
    "coefficient 0.25 +0.0017 / +0.0012 (same questions change; the coefficient lives in the projection); best 2, "
    "coefficient 0.75 +0.0033 / -0.0031; best 2 across sessions +0.0019 / -0.0088; start 0 (a link counts only once "
    "repeated), step 0.05: 0.0000 / +0.0009; only pairs no edge joins yet: best 3 -0.0022 / -0.0055, best 2 "
    "+0.0012 / +0.0008 (dropped). 10-50 of the 2,970 question scores move either way: learned links are a small "
    "effect on LoCoMo's independent questions; they are meant for an agent's repeated, related queries.",
    "- The previous rule (best 3, start 0.2) on the 108-point grid of the raw-cosine fusion: CV R@10 0.742 / nDCG@10 0.551 reinforce on, "
    "0.745 / 0.545 off; in-sample 0.768 / 0.563 on, 0.773 / 0.564 off.",
    "- Cross-validation is noisy with three conversations: the tuning criterion matters (before the second pass, "
    "tuning on R@10 alone gave CV R@10 0.752 off / 0.746 on; on (R@10 + nDCG@10) / 2, 0.731 / 0.745).",
    "- One store for all conversations (the protocol as users run it) gives ~0.018 less R@10 than one store per "
    "conversation (0.768 before): BM25's document frequencies and lengths are store-wide. The int8 ONNX "
    "encoder (what `Memory(path)` uses with the [onnx] extra) scores as torch / fp32 ONNX (R@10 0.7505 vs "
    "0.7495 reinforce=off, before the second pass).",
]


if __name__ == "__main__":
    raise SystemExit(main())
