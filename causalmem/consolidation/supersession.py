"""Stage 1.7 of sleep: which older outcome edges a newer one may supersede, and the judge."""
from __future__ import annotations

import inspect
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import LLMError
from ..judges import EdgeInfo
from ..store.base import POLARITY_NAMES, JudgeEdgeRow, StoreBackend
from ..types import Relation
from .mining import unique

log = logging.getLogger("causalmem")

__all__ = ["supersession_pairs", "run_judge", "plan_judging", "ask_judge", "still_current", "JudgePlan",
           "JudgeTask", "empty_verdicts"]

_R_CAUSED = Relation.CAUSED.code
_R_ENABLED = Relation.ENABLED.code


def supersession_pairs(edges: np.ndarray, alive: np.ndarray, prefilter: Callable | None, *,
                       retire: bool = False) -> np.ndarray:
    """(old_row, new_row) index pairs into ``edges`` for stage 1.7 (a).

    Edges already annotated ``superseded_by`` (by the write-time fast path, or an earlier
    annotate cycle) are judged again only when the cycle may ``retire``: the write path never
    retires on its own, retirement is the judge's call."""
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
    cand = (s != newest) & (edges["dst"][s] != edges["dst"][newest]) & ((edges["sup"][s] == 0) | retire)
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


@dataclass(frozen=True)
class JudgeTask:
    """One (older, newer) edge pair to put to the judge: plain values, no store access needed."""

    old_eid: int
    new_eid: int
    old: EdgeInfo
    new: EdgeInfo
    decision: str
    old_text: str
    new_text: str
    old_dst: int
    new_dst: int

    @property
    def key(self) -> str:
        return f"judged:{self.old.id}:{self.new.id}"


@dataclass
class JudgePlan:
    """The pairs a sleep cycle will ask the judge about (gathered under the lock, asked outside it)."""

    tasks: list[JudgeTask] = field(default_factory=list)
    deferred: int = 0  # pairs over ``limit``: left for the next cycle


def empty_verdicts() -> dict[str, Any]:
    return {"supersede": [], "keep": [], "failures": 0, "calls": 0, "deferred": 0, "seconds": 0.0}


def plan_judging(store: StoreBackend, judge: Any, pairs: np.ndarray, edges: np.ndarray, *,
                 limit: int | None) -> JudgePlan:
    """The not yet decided (old, new) row pairs of ``pairs``, with the texts the judge needs."""
    plan = JudgePlan()
    if not len(pairs):
        return plan
    old_eids = edges["eid"][pairs[:, 0]]
    new_eids = edges["eid"][pairs[:, 1]]
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
        plan.deferred = len(todo) - limit
        log.info("causalmem: sleep judges %d supersession pairs now, %d next cycle", limit, len(todo) - limit)
        todo = todo[:limit]
    texts = store.chunk_texts(sorted({rows[e].src for pair in todo for e in pair} | {rows[e].dst for pair in todo
                                                                                        for e in pair}))
    for o, n in todo:
        ro, rn = rows[o], rows[n]
        decision = texts.get(ro.src, "")
        old_text, new_text = texts.get(ro.dst, ""), texts.get(rn.dst, "")
        plan.tasks.append(JudgeTask(o, n, _edge_info(ro, decision, old_text), _edge_info(rn, decision, new_text),
                                    decision, old_text, new_text, ro.dst, rn.dst))
    return plan


def ask_judge(judge: Any, plan: JudgePlan, *, budget: float | None = None) -> dict[str, Any]:
    """Put ``plan``'s pairs to ``judge``; no store access, so callers run it without any lock.

    ``budget`` (seconds of wall time) stops asking once spent: the pairs not asked are counted in
    ``deferred`` and wait for the next cycle. A judge whose ``decide`` takes ``timeout`` (as
    ``LLMJudge`` does) gets what is left of the budget, so the budget is strict; any other judge's
    call under way finishes on its own terms. Returns decisions, remembered verdicts, failures.
    """
    out = empty_verdicts()
    out["deferred"] = plan.deferred
    remember = getattr(judge, "remember_negative", True)
    takes_timeout = budget is not None and _takes_timeout(judge)
    start = time.monotonic()
    for i, task in enumerate(plan.tasks):
        left_s = None if budget is None else budget - (time.monotonic() - start)
        if left_s is not None and left_s <= 0:
            left = len(plan.tasks) - i
            out["deferred"] += left
            log.warning("causalmem: sleep LLM budget of %g s spent; %d supersession pair(s) left for the next "
                        "sleep", budget, left)
            break
        out["calls"] += 1
        try:
            extra = {"timeout": left_s} if takes_timeout else {}
            verdict = judge.decide(task.old, task.new, decision_text=task.decision, old_outcome_text=task.old_text,
                                   new_outcome_text=task.new_text, **extra)
            sup = getattr(verdict, "supersedes", None)
            if not isinstance(sup, bool):
                raise LLMError(f"judge returned {verdict!r}, expected a Verdict with a boolean 'supersedes'")
        except Exception as exc:  # a failed judge keeps the old edge, whatever went wrong
            if budget is not None and time.monotonic() - start >= budget:
                out["deferred"] += 1  # cut by the budget, not a verdict: asked again next sleep
                log.warning("causalmem: sleep judge call on edges %s → %s cut by the LLM budget (%s)",
                            task.old.id, task.new.id, exc)
                continue
            out["failures"] += 1
            log.warning("causalmem: sleep judge failed on edges %s → %s, keeping the old edge: %s",
                        task.old.id, task.new.id, exc)
            continue
        reasoning = getattr(verdict, "reasoning", "") or ""
        if not isinstance(reasoning, str):
            reasoning = str(reasoning)
        if sup:
            # (old eid, new eid, new id, reasoning, redirect from chunk, redirect to chunk, judged key)
            out["supersede"].append((task.old_eid, task.new_eid, task.new.id, reasoning, task.old_dst, task.new_dst,
                                     task.key))
            out["keep"].append(task.key)  # decided: never asked again (restore sticks)
        elif remember:
            out["keep"].append(task.key)
    out["seconds"] = time.monotonic() - start
    return out


def _takes_timeout(judge: Any) -> bool:
    """Whether ``judge.decide`` names a ``timeout`` parameter (``LLMJudge`` does): then the budget is strict."""
    try:
        return "timeout" in inspect.signature(judge.decide).parameters
    except (TypeError, ValueError):
        return False


def run_judge(store: StoreBackend, judge: Any, pairs: np.ndarray, edges: np.ndarray, *, limit: int | None,
              budget: float | None = None) -> dict[str, Any]:
    """Plan and ask in one go (cheap judges inside the transaction, or a store used without a lock)."""
    return ask_judge(judge, plan_judging(store, judge, pairs, edges, limit=limit), budget=budget)


def still_current(verdicts: dict[str, Any], edges: np.ndarray, valid: np.ndarray) -> dict[str, Any]:
    """Verdicts gathered before the transaction, kept only where both edges are still as they were.

    The old edge must still be valid and not yet superseded, the new one still valid (endpoints
    alive). A stale verdict is dropped and not remembered, so the pair is judged again next cycle.
    """
    if not verdicts["supersede"]:
        return verdicts
    live_eids = edges["eid"][valid]
    live = set(live_eids.tolist())
    open_ = set(live_eids[edges["sup"][valid] == 0].tolist())
    fresh, stale_keys = [], set()
    for d in verdicts["supersede"]:
        if d[0] in open_ and d[1] in live:
            fresh.append(d)
        else:
            stale_keys.add(d[6])
    if not stale_keys:
        return verdicts
    log.info("causalmem: %d judge verdict(s) dropped: their edges changed while the judge was asked",
             len(stale_keys))
    return {**verdicts, "supersede": fresh, "keep": [k for k in verdicts["keep"] if k not in stale_keys],
            "deferred": verdicts["deferred"] + len(stale_keys)}
