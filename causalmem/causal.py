"""Causal queries: seeds, spreading, chains and risk labels (SPEC §3).

``search_causal``/``trace_cause`` spread forward/backward (causal preset) from the chunks a
query names; ``intervention`` adds, for each activated outcome, the best valid chain from a seed
and a DANGER / WARNING / SAFE / UNKNOWN label. The caller holds ``views.lock``.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from . import ingest
from .config import SpreadParams
from .types import Activation, InterventionReport, PredictedOutcome
from .views import Scope, Views

__all__ = ["causal_seeds", "activations", "spread_query", "intervention", "outcome_label", "overall_label",
           "NO_PRECEDENT"]

_MAX_SEEDS = 3
_SEED_RATIO = 0.5
NO_PRECEDENT = ("no precedent: nothing in memory follows from this action (that does not mean it is safe)")


def causal_seeds(views: Views, query: str, scope: Scope,
                 task_tag: str | None) -> tuple[np.ndarray, list[int]]:
    """Scope mask and the chunks matching the query: the exact text if stored, else the best BM25 matches."""
    table, lexical = views.tables()
    mask = table.scope_mask(user_id=scope[0], agent_id=scope[1], run_id=scope[2])
    if task_tag is not None:
        tmask = np.zeros_like(mask)
        idx = np.asarray([n for n in views.store.task_tag_nodes(task_tag) if n < len(mask)], dtype=np.int64)
        tmask[idx] = True
        mask = mask & tmask
    exact = views.store.find_reusable_chunk(query.strip(), *scope)
    if exact is not None and exact.nid < len(mask) and mask[exact.nid]:
        return mask, [exact.nid]
    ids, scores = lexical.search(query, top_k=_MAX_SEEDS, allowed=mask)
    if len(ids) == 0:
        return mask, []
    best = float(scores[0])
    return mask, [int(i) for i, s in zip(ids, scores) if s >= _SEED_RATIO * best]


def spread_from(views: Views, seeds: list[int], *, reverse: bool, params: SpreadParams,
                overrides: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Spread from ``seeds`` with energy 0.5 + 0.5·Q."""
    # the chunk table causal_seeds just brought in step (no second look at the store in one query)
    table = views.chunks if views.chunks is not None else views.tables()[0]
    q = table.q[np.asarray(seeds, dtype=np.int64)]
    energy = (0.5 + 0.5 * q).astype(np.float32)
    kwargs = params.as_kwargs()
    kwargs.update(overrides)
    return views.projection.spread(np.asarray(seeds, dtype=np.int64), energy, reverse=reverse, params=kwargs)


def activations(views: Views, nodes: np.ndarray, energy: np.ndarray, mask: np.ndarray, exclude: set[int],
                limit: int) -> list[Activation]:
    """The first ``limit`` activated nodes inside the mask, as ``Activation`` values."""
    keep = [(int(n), float(e)) for n, e in zip(nodes, energy)
            if int(n) not in exclude and int(n) < len(mask) and mask[int(n)]][:limit]
    if not keep:
        return []
    rows = views.store.chunk_rows_by_nid([n for n, _ in keep])
    sup = views.store.superseded_chunks([n for n, _ in keep])
    return [Activation(node_id=rows[n].id, text=rows[n].text, energy=e, superseded_by=sup.get(n))
            for n, e in keep if n in rows]


def spread_query(views: Views, query: str, *, reverse: bool, limit: int, task_tag: str | None,
                 scope: Scope, include_seeds: bool,
                 overrides: Mapping[str, Any]) -> list[Activation]:
    """What follows from (``reverse``: what led to) ``query``."""
    if not query.strip():
        return []
    mask, seeds = causal_seeds(views, query, scope, task_tag)
    if not seeds:
        return []
    nodes, energy = spread_from(views, seeds, reverse=reverse, params=views.config.causal, overrides=overrides)
    return activations(views, nodes, energy, mask, set() if include_seeds else set(seeds), limit)


def intervention(views: Views, action: str, *, max_depth: int, limit: int,
                 scope: Scope) -> InterventionReport:
    """Predict what doing ``action`` again leads to, with causal chains and a risk label."""
    empty = InterventionReport(action=action, label="UNKNOWN", outcomes=(), has_precedent=False, summary=NO_PRECEDENT)
    if not action.strip():
        return empty
    mask, seeds = causal_seeds(views, action, scope, None)
    if not seeds:
        return empty
    nodes, energy = spread_from(views, seeds, reverse=False, params=views.config.causal,
                                overrides={"max_steps": max_depth})
    acts = activations(views, nodes, energy, mask, set(seeds), limit)
    seed_rows = views.store.chunk_rows_by_nid(seeds)
    seed_ids = tuple(seed_rows[s].id for s in seeds if s in seed_rows)
    if not acts:
        return InterventionReport(action=action, label="UNKNOWN", outcomes=(), seeds=seed_ids, has_precedent=False,
                                  summary=NO_PRECEDENT)
    # a consequence is reached over causal edges: spreading also walks the conversation's temporal
    # "next turn" edges and co-occurrence, which say nothing about what the action leads to
    outcomes = [o for o in chains(views, seeds, acts, max_depth) if o.relations]
    if not outcomes:
        return InterventionReport(action=action, label="UNKNOWN", outcomes=(), seeds=seed_ids, has_precedent=False,
                                  summary=NO_PRECEDENT)
    label = overall_label(outcomes)
    # every outcome of the report: the inspector's table and graph show them all (``limit`` bounds them)
    names = ", ".join(f"{o.text} ({outcome_label(o)})" for o in outcomes)
    return InterventionReport(action=action, label=label, outcomes=tuple(outcomes), seeds=seed_ids,
                              has_precedent=True, summary=f"{label}: {names}")


def chains(views: Views, seeds: list[int], acts: list[Activation], max_depth: int) -> list[PredictedOutcome]:
    """Best (highest confidence-product) valid path from a seed to each activated node."""
    store = views.store
    keys = store.chunk_keys_by_id([a.node_id for a in acts])
    nid_of = {cid: k.nid for cid, k in keys.items()}
    text_of: dict[int, str | None] = {nid_of[a.node_id]: a.text for a in acts if a.node_id in nid_of}
    for s, row in store.chunk_rows_by_nid(seeds).items():
        text_of[s] = row.text
    # best[node] = (confidence product, path nids, relations, last polarity)
    best: dict[int, tuple[float, list[int], list[str], str | None]] = {s: (1.0, [s], [], None) for s in seeds}
    frontier = list(seeds)
    for _ in range(max_depth):
        if not frontier:
            break
        nxt = []
        for e in store.chain_out_edges(frontier):
            base = best[e.src]
            if e.dst in base[1]:
                continue
            cand = (base[0] * e.confidence, base[1] + [e.dst], base[2] + [e.relation], e.polarity)
            if e.dst not in best or cand[0] > best[e.dst][0]:
                if e.dst not in best:
                    nxt.append(e.dst)
                best[e.dst] = cand
                text_of.setdefault(e.dst, None)
        frontier = nxt
    missing = [n for n, t in text_of.items() if t is None]
    for n, row in store.chunk_rows_by_nid(missing).items():
        text_of[n] = row.text
    out = []
    for a in acts:
        nid = nid_of.get(a.node_id, -1)
        conf, path, rels, pol = best.get(nid, (0.0, [nid], [], None))
        if pol is None:
            pol = ingest.guess_polarity(a.text or "")
        out.append(PredictedOutcome(
            node_id=a.node_id, text=a.text or "", energy=a.energy, polarity=pol,
            chain=tuple(_ids_of(views, path)), chain_texts=tuple(text_of.get(p) or "" for p in path),
            chain_confidence=conf, relations=tuple(rels), superseded_by=a.superseded_by))
    return out


def _ids_of(views: Views, nids: Sequence[int]) -> list[str]:
    rows = views.store.chunk_rows_by_nid(nids)
    return [rows[n].id for n in nids if n in rows]


def outcome_label(o: PredictedOutcome) -> str:
    if o.energy < 0:
        # reached over a prevented edge: the action blocks it, so blocking a good outcome is a warning and
        # blocking a bad one is safe (as ``causalmem search-causal`` marks "WARNING (prevented)")
        return {"positive": "WARNING", "negative": "SAFE"}.get(o.polarity or "", "UNKNOWN")
    return {"negative": "DANGER", "positive": "SAFE", "mixed": "WARNING"}.get(o.polarity or "", "UNKNOWN")


def overall_label(outcomes: Sequence[PredictedOutcome]) -> str:
    labels = {outcome_label(o) for o in outcomes}
    for label in ("DANGER", "WARNING", "SAFE"):
        if label in labels:
            return label
    return "UNKNOWN"


#: the spread parameters a causal query may override, with their sane bounds (a spread of
#: 2**31 steps holds the lock for minutes; nothing useful is more than a few dozen hops away)
_OVERRIDE_BOUNDS: dict[str, tuple[float, float]] = {
    "max_steps": (1, 100), "top_k": (0, 1_000_000), "decay": (0.0, 1.0), "threshold": (0.0, 1e6),
    "lo": (-1e6, 0.0), "hi": (0.0, 1e6), "teleport": (0.0, 1.0), "inhibit_multiplier": (0.0, 1e3),
}


def check_query(query: Any, name: str, task_tag: Any = None) -> None:
    """A causal query's text (``name``: the argument's public name) and optional task tag."""
    if not isinstance(query, str):
        raise TypeError(f"{name} must be a string, got {type(query).__name__}")
    ingest.check_unicode(query, name)
    if task_tag is not None:
        if not isinstance(task_tag, str):
            raise TypeError(f"task_tag must be a string or None, got {type(task_tag).__name__}")
        ingest.check_unicode(task_tag, "task_tag")


def check_max_depth(max_depth: Any) -> int:
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or not 1 <= max_depth <= 20:
        raise ValueError(f"max_depth must be an integer between 1 and 20, got {max_depth!r}")
    return max_depth


def check_spread_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in overrides.items():
        if k == "reemit":
            if not isinstance(v, bool):
                raise TypeError(f"reemit must be True or False, got {type(v).__name__}")
            out[k] = v
            continue
        if k not in _OVERRIDE_BOUNDS:
            raise TypeError(f"unexpected keyword argument {k!r}; spread overrides are "
                            f"{', '.join(sorted([*_OVERRIDE_BOUNDS, 'reemit']))}")
        lo, hi = _OVERRIDE_BOUNDS[k]
        integral = k in ("max_steps", "top_k")
        if isinstance(v, bool) or not isinstance(v, int if integral else (int, float)):
            raise TypeError(f"{k} must be {'an integer' if integral else 'a number'}, got {type(v).__name__}")
        if not (lo <= v <= hi):
            raise ValueError(f"{k} must be between {lo:g} and {hi:g}, got {v!r}")
        out[k] = v
    return out
