"""Stage 1.7 of sleep: which older outcome edges a newer one may supersede, and the judge."""
from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np

from ..errors import LLMError
from ..judges import EdgeInfo
from ..store.base import POLARITY_NAMES, JudgeEdgeRow, StoreBackend
from ..types import Relation
from .mining import unique

log = logging.getLogger("causalmem")

__all__ = ["supersession_pairs", "run_judge"]

_R_CAUSED = Relation.CAUSED.code
_R_ENABLED = Relation.ENABLED.code


def supersession_pairs(edges: np.ndarray, alive: np.ndarray, prefilter: Callable | None) -> np.ndarray:
    """(old_row, new_row) index pairs into ``edges`` for stage 1.7 (a)."""
    exc = np.flatnonzero(((edges["rel"] == _R_CAUSED) | (edges["rel"] == _R_ENABLED))
                         & alive[edges["src"]] & alive[edges["dst"]])
    if len(exc) < 2:
        return np.empty((0, 2), dtype=np.int64)
    sub = edges[exc]
    order = np.lexsort((sub["eid"], sub["disc"], sub["src"]))
    s = exc[order]
    src = edges["src"][s]
    last_of_group = np.ones(len(s), dtype=bool)
    last_of_group[:-1] = src[1:] != src[:-1]
    group_id = np.cumsum(np.r_[True, src[1:] != src[:-1]]) - 1
    newest = s[np.flatnonzero(last_of_group)][group_id]
    cand = (s != newest) & (edges["dst"][s] != edges["dst"][newest]) & (edges["sup"][s] == 0)
    old, new = s[cand], newest[cand]
    if prefilter is not None and len(old):
        table = np.zeros((8, 8), dtype=bool)
        for a in range(5):
            for b in range(5):
                table[a, b] = bool(prefilter(POLARITY_NAMES[a], POLARITY_NAMES[b]))
        keep = table[edges["pol"][old], edges["pol"][new]]
        old, new = old[keep], new[keep]
    return np.stack([old, new], axis=1) if len(old) else np.empty((0, 2), dtype=np.int64)


def _edge_info(row: JudgeEdgeRow, decision: str, outcome: str) -> EdgeInfo:
    eid_str, relation, conf, source, pol, tag, disc, subtype, _src, _dst = row
    return EdgeInfo(id=eid_str, relation=relation, confidence=conf, source=source, polarity=pol, task_tag=tag,
                    discovered_at=disc, subtype=subtype, decision_text=decision, outcome_text=outcome)


def run_judge(store: StoreBackend, judge: Any, pairs: np.ndarray, edges: np.ndarray, *, limit: int | None) -> dict[str, Any]:
    """Ask ``judge`` about (old, new) row pairs; returns decisions, remembered negatives, failures."""
    out: dict[str, Any] = {"supersede": [], "keep": [], "failures": 0, "calls": 0, "deferred": 0}
    if not len(pairs):
        return out
    old_eids = edges["eid"][pairs[:, 0]]
    new_eids = edges["eid"][pairs[:, 1]]
    remember = getattr(judge, "remember_negative", True)
    judged = store.judged_pairs()
    rows = store.edge_judge_rows(unique(np.concatenate([old_eids, new_eids])).tolist())
    todo = []
    for o, n in zip(old_eids.tolist(), new_eids.tolist()):
        if o not in rows or n not in rows:
            continue
        if f"judged:{rows[o].id}:{rows[n].id}" in judged:
            continue
        todo.append((o, n))
    if limit is not None and len(todo) > limit:
        out["deferred"] = len(todo) - limit
        log.info("causalmem: sleep judges %d supersession pairs now, %d next cycle", limit, len(todo) - limit)
        todo = todo[:limit]
    texts = store.chunk_texts(sorted({rows[e].src for pair in todo for e in pair} | {rows[e].dst for pair in todo
                                                                                        for e in pair}))
    for o, n in todo:
        ro, rn = rows[o], rows[n]
        decision = texts.get(ro.src, "")
        old_text, new_text = texts.get(ro.dst, ""), texts.get(rn.dst, "")
        out["calls"] += 1
        try:
            verdict = judge.decide(_edge_info(ro, decision, old_text), _edge_info(rn, decision, new_text),
                                   decision_text=decision, old_outcome_text=old_text, new_outcome_text=new_text)
            sup = getattr(verdict, "supersedes", None)
            if not isinstance(sup, bool):
                raise LLMError(f"judge returned {verdict!r}, expected a Verdict with a boolean 'supersedes'")
        except Exception as exc:  # a failed judge keeps the old edge, whatever went wrong
            out["failures"] += 1
            log.warning("causalmem: sleep judge failed on edges %s → %s, keeping the old edge: %s",
                        ro.id, rn.id, exc)
            continue
        reasoning = getattr(verdict, "reasoning", "") or ""
        if sup:
            out["supersede"].append((o, n, rn.id, reasoning, ro.dst, rn.dst))
            out["keep"].append(f"judged:{ro.id}:{rn.id}")  # decided: never asked again (restore sticks)
        elif remember:
            out["keep"].append(f"judged:{ro.id}:{rn.id}")
    return out


