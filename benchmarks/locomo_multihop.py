"""LoCoMo-dev: one retrieval mechanism at a time, paired on vs off in one run, per category, with CV.

The protocol of ``locomo_retrieval.py`` (one store, ``user_id`` = conversation, every question asks
``search(question, top_k=10, user_id=conv)``, reinforcement off so every variant sees the same store).
A *mechanism* is a set of ``RetrievalParams`` overrides; ``off`` is the shipped constants. For each
mechanism the page gives, per category and overall:
- in-sample: the mechanism at each of its values on all three conversations, paired against off;
- cross-validated (leave one conversation out): per fold the value (off included) with the best
  (R@10 + nDCG@10) / 2 on the other two conversations is scored on the held-out one; the pooled
  held-out scores are paired against off (95% bootstrap interval over questions, 2,000 resamples).

    python benchmarks/locomo_multihop.py --embedder none --mechanism "entity_hop=0.25,0.5,1" --out -
    python benchmarks/locomo_multihop.py --embedder auto --vectors /tmp/cache/vecs.npz --mechanism ...
"""
from __future__ import annotations

import argparse
import datetime as dt
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo_retrieval as lr  # noqa: E402
from causalmem import Memory, retrieval  # noqa: E402

ALL_CHANNELS = ("lexical", "semantic", "graph")
NO_MODEL = ("lexical", "graph")


def parse_mechanism(spec: str) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """ "entity_hop=0.25,0.5,1" -> ("entity_hop", [("entity_hop=0.25", {...}), ...]); several fields
    joined by ';' move together: "entity_hop=0.5;entity_seeds=3"."""
    known = {f.name: f for f in fields(retrieval.RetrievalParams)}
    parts = [p.strip() for p in spec.split(";") if p.strip()]
    axes: list[tuple[str, list[str]]] = []
    for part in parts:
        name, _, vals = part.partition("=")
        name = name.strip()
        if name not in known:
            raise SystemExit(f"--mechanism: RetrievalParams has no field {name!r}; fields: {sorted(known)}")
        axes.append((name, [v.strip() for v in vals.split(",") if v.strip()]))
    n = max(len(v) for _, v in axes)
    points = []
    for k in range(n):
        over: dict[str, Any] = {}
        for name, vals in axes:
            raw = vals[min(k, len(vals) - 1)]
            typ = type(getattr(retrieval.PARAMS, name))
            over[name] = typ(float(raw)) if typ is int else typ(raw) if typ is not bool else raw in ("1", "true")
        points.append((" ".join(f"{a}={b}" for a, b in over.items()), over))
    return spec, points


class ContextEmbedder:
    """Encodes a stored turn with the turn before it in its session prepended when it has fewer than
    ``max_words`` words (0: every turn); any other text (a query) as given. What the engine would
    encode if the document side carried the context MiniLM was trained on (sentence pairs): measured
    here through the encoder, the engine's write path unchanged."""

    def __init__(self, base: Any, convs: list[dict], max_words: int) -> None:
        self.base = base
        self.model_name = f"{base.model_name}+ctx{max_words}"
        self.dim = base.dim
        self._with: dict[str, str] = {}
        for conv in convs:
            for _, _, turns in conv["sessions"]:
                prev = None
                for t in turns:
                    text = f"{t['speaker']}: {t['text']}"
                    if prev is not None and (max_words == 0 or len(t["text"].split()) < max_words):
                        self._with[text] = f"{prev} {text}"
                    prev = text

    def encode(self, texts: Sequence[str], **kw: Any) -> np.ndarray:
        return self.base.encode([self._with.get(t, t) for t in texts], **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)


def paired_by_category(on: lr.Scores, off: lr.Scores, conv_ids: Sequence[str], metric: str = "R@10",
                       seed: int = 0) -> dict[str, dict[str, float]]:
    """Per category and overall: on, off, on - off and its 95% bootstrap interval over questions."""
    k = lr.METRICS.index(metric)
    cats, a = lr.pooled(on, conv_ids)
    _, b = lr.pooled(off, conv_ids)
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, float]] = {}
    for c in (*lr.CATEGORIES, "all"):
        sel = np.ones(len(cats), bool) if c == "all" else cats == c
        d = a[sel, k] - b[sel, k]
        boots = d[rng.integers(0, len(d), size=(2000, len(d)))].mean(axis=1)
        out[str(c)] = {"n": int(sel.sum()), "on": float(a[sel, k].mean()), "off": float(b[sel, k].mean()),
                       "diff": float(d.mean()), "lo": float(np.quantile(boots, 0.025)),
                       "hi": float(np.quantile(boots, 0.975)), "up": int((d > 1e-12).sum()),
                       "down": int((d < -1e-12).sum())}
    return out


def _table(title: str, res: dict[str, dict[str, float]]) -> list[str]:
    lines = [f"**{title}**", "", "| category | n | off | on | on - off [95%] | up / down |", "|---|---|---|---|---|---|"]
    for c, r in res.items():
        name = "overall" if c == "all" else f"{c} {lr.CAT_NAMES[int(c)]}"
        lines.append(f"| {name} | {r['n']} | {r['off']:.3f} | {r['on']:.3f} | {r['diff']:+.3f} "
                     f"[{r['lo']:+.3f}, {r['hi']:+.3f}] | {r['up']} / {r['down']} |")
    return lines + [""]


def latency(mem: Memory, convs: list[dict], chans: tuple[str, ...], points: list[tuple[str, dict[str, Any]]],
            repeat: int) -> dict[str, np.ndarray]:
    """Per variant (off = the shipped constants, then each point), the ms of each question's search; the
    variants take turns on each question (a shared machine's load falls on all of them alike), the best of
    ``repeat`` tries kept per question and variant."""
    variants = [("off", retrieval.PARAMS)] + [(label, replace(retrieval.PARAMS, **over)) for label, over in points]
    out: dict[str, list[float]] = {label: [] for label, _ in variants}
    for conv in convs:
        for qa in conv["qa"]:
            for label, params in variants:
                best = math.inf
                for _ in range(repeat):
                    t = time.perf_counter()
                    retrieval.search(mem._views, qa["question"], top_k=10, user_id=conv["id"], channels=chans,
                                     reinforce=False, params=params)
                    best = min(best, time.perf_counter() - t)
                out[label].append(1000 * best)
    return {label: np.asarray(v) for label, v in out.items()}


def run(args: argparse.Namespace) -> str:
    convs = lr.load(args.data)
    if args.conv:
        convs = [c for c in convs if c["id"] in args.conv.split(",")]
    conv_ids = [c["id"] for c in convs]
    emb = lr.make_embedder(args.embedder)
    vec_path = Path(args.vectors) if args.vectors else None
    if emb is not None and vec_path is not None:
        emb.load(vec_path)
    chans = NO_MODEL if emb is None else ALL_CHANNELS
    t0 = time.time()
    if args.doc_context:
        if emb is None:
            raise SystemExit("--doc-context needs a model (--embedder auto)")
        return doc_context_run(args, convs, conv_ids, emb, vec_path, t0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "locomo.db"
        dia_of = lr.build_store(convs, emb, path)
        if emb is not None and vec_path is not None:
            vec_path.parent.mkdir(parents=True, exist_ok=True)
            emb.save(vec_path)
        t_build = time.time() - t0
        timings: list[tuple[str, dict[str, np.ndarray]]] = []
        with Memory(path, embedder=emb) as mem:
            base = lr.ask_all(mem, convs, dia_of, chans, "auto", reinforce=False, params=None)
            # The baseline the tables pair against: the shipped search, or (``--versus-channels``) the shipped
            # search on fewer channels, the shipped point then being one of the values the folds choose from.
            ref = base
            if args.versus_channels or args.versus:
                over = parse_mechanism(args.versus)[1][0][1] if args.versus else {}
                ref = lr.ask_all(mem, convs, dia_of, tuple(args.versus_channels.split(",")) if args.versus_channels
                                 else chans, "auto", reinforce=False,
                                 params=replace(retrieval.PARAMS, **over) if over else None)
            sections = []
            for spec in args.mechanism:
                _, points = parse_mechanism(spec)
                by_point: dict[str, lr.Scores] = {"off": base}
                for label, over in points:
                    by_point[label] = lr.ask_all(mem, convs, dia_of, chans, "auto", reinforce=False,
                                                 params=replace(retrieval.PARAMS, **over))
                sections.append((spec, by_point))
                if args.latency:
                    timings.append((spec, latency(mem, convs, chans, points, args.latency)))
    lines = [f"## {len(sections)} mechanism(s), channels {', '.join(chans)}", "",
             f"Store build {t_build:.0f} s, total {time.time() - t0:.0f} s. Conversations: {', '.join(conv_ids)}; "
             f"{sum(len(c['qa']) for c in convs)} questions.", ""]
    if args.versus_channels or args.versus:
        what = " with ".join(x for x in (f"channels {args.versus_channels}" if args.versus_channels else "",
                                         f"`{args.versus}`" if args.versus else "") if x)
        lines += [f"Baseline (*off* in the tables): the shipped search, {what}; *off* among "
                  f"the values the folds choose from and the in-sample `off` row are the shipped search on "
                  f"{', '.join(chans)}.", ""]
    for spec, ms in timings:
        lines += [f"### Latency of `{spec}`: `search` per question, ms (each question asked {args.latency} times "
                  "per variant, variants interleaved; one store)", "",
                  "| variant | p50 | p95 | p50 / off |", "|---|---|---|---|"]
        for label, t in ms.items():
            lines.append(f"| {label} | {np.median(t):.2f} | {np.quantile(t, 0.95):.2f} | "
                         f"{np.median(t) / np.median(ms['off']):.2f} |")
        lines.append("")
    for spec, by_point in sections:
        lines += [f"### `{spec}`", ""]
        if len(conv_ids) > 1:
            held, chosen = lr.cross_validate(by_point, conv_ids)
            lines += [f"Cross-validated (value chosen per fold: {', '.join(f'{h}: `{v}`' for h, v in chosen.items())})", ""]
            for m in ("R@10", "nDCG@10"):
                lines += _table(f"CV, {m}", paired_by_category(held, ref, conv_ids, m))
        for label, scores in by_point.items():
            if label == "off" and not (args.versus_channels or args.versus):
                continue
            lines += _table(f"in-sample `{label}`, R@10", paired_by_category(scores, ref, conv_ids, "R@10"))
            lines += _table(f"in-sample `{label}`, nDCG@10", paired_by_category(scores, ref, conv_ids, "nDCG@10"))
    return "\n".join(lines) + "\n"


def doc_context_run(args: argparse.Namespace, convs: list[dict], conv_ids: list[str], emb: Any,
                    vec_path: Path | None, t0: float) -> str:
    """The default search on stores whose turns were encoded without / with the previous turn as context."""
    variants = [("off", emb)] + [(f"context<{n}w" if n else "context all", ContextEmbedder(emb, convs, n))
                                 for n in (int(v) for v in args.doc_context.split(","))]
    by_point: dict[str, lr.Scores] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, (label, e) in enumerate(variants):
            path = Path(tmp) / f"locomo{k}.db"
            dia_of = lr.build_store(convs, e, path)
            if vec_path is not None:
                emb.save(vec_path)
            with Memory(path, embedder=e) as mem:
                by_point[label] = lr.ask_all(mem, convs, dia_of, ALL_CHANNELS, "auto", reinforce=False, params=None)
    base = by_point["off"]
    lines = [f"## Document-side context (`--doc-context {args.doc_context}`), default search", "",
             f"Total {time.time() - t0:.0f} s. Conversations: {', '.join(conv_ids)}.", ""]
    held, chosen = lr.cross_validate(by_point, conv_ids)
    lines += [f"Cross-validated (variant chosen per fold: {', '.join(f'{h}: `{v}`' for h, v in chosen.items())})", ""]
    for m in ("R@10", "nDCG@10"):
        lines += _table(f"CV, {m}", paired_by_category(held, base, conv_ids, m))
    for label, scores in by_point.items():
        if label != "off":
            for m in ("R@10", "nDCG@10"):
                lines += _table(f"in-sample `{label}`, {m}", paired_by_category(scores, base, conv_ids, m))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=lr.DEFAULT_DATA)
    ap.add_argument("--embedder", default="none", help="'none' (lexical + graph), 'auto' or a model name")
    ap.add_argument("--vectors", default="", help="file caching the vectors by text between runs (outside the repo)")
    ap.add_argument("--conv", default="", help="comma-separated conversation ids (default: all)")
    ap.add_argument("--mechanism", action="append", default=[],
                    help="RetrievalParams field=values ('entity_hop=0.25,0.5,1'); repeat for several")
    ap.add_argument("--doc-context", default="",
                    help="comma-separated word limits: turns shorter than that are encoded with the previous turn "
                         "(0 = every turn); compares stores, the mechanisms are not run")
    ap.add_argument("--versus-channels", default="",
                    help="pair against the shipped search on these channels (e.g. 'lexical,graph': the semantic "
                         "channel's contribution, its weight chosen per fold from the shipped one and the mechanism's)")
    ap.add_argument("--versus", default="",
                    help="pair against the shipped search with these RetrievalParams overrides (e.g. 'date_match=0': "
                         "a mechanism that is on by default against it off)")
    ap.add_argument("--latency", type=int, default=0,
                    help="also time every question's search under off and each mechanism point (best of this many)")
    ap.add_argument("--out", default="-", help="Markdown file to write, '-' = stdout only")
    args = ap.parse_args(argv)
    if not args.mechanism and not args.doc_context:
        raise SystemExit("--mechanism is required, e.g. --mechanism 'entity_hop=0.25,0.5,1'")
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent).stdout.strip()
    text = run(args)
    head = (f"Code {rev}, run {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC. Command: "
            f"`python benchmarks/locomo_multihop.py {' '.join(sys.argv[1:] if argv is None else argv)}`\n\n")
    print(head + text)
    if args.out != "-":
        Path(args.out).write_text(head + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
