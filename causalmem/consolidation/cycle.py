"""The sleep cycle: one transaction over stages 0-4 (see the package docstring)."""
from __future__ import annotations

import json
import logging
import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import learning
from ..config import Config
from ..judges import RuleJudge
from ..store.base import POLARITY_CODES, SOURCE_CODES, SUBTYPE_CODES, StoreBackend
from ..types import CLOCK_AHEAD, Relation, SleepReport
from .mining import Docs, decision_docs, linked_pairs, mine, token_diversity, unique
from .transfer import transfer_links
from .report import Progress, Timer, make_report
from .supersession import JudgePlan, ask_judge, plan_judging, run_judge, still_current, supersession_pairs

if TYPE_CHECKING:  # pragma: no cover
    from ..views import Views

log = logging.getLogger("causalmem")

__all__ = ["sleep", "sleep_memory", "last_report", "check_sleep_args", "plan_slow_judging", "ACTIONS", "LAST_SLEEP_KEY",
           "LAST_REPORT_KEY", "MAX_JUDGE_CALLS"]

DAY = 86400.0
NOVELTY_WINDOW = 64
REPLAY_THRESHOLD = 1.0
MAX_JUDGE_CALLS = 200  # per cycle for judges without a cheap pre-filter; the rest waits for the next
PROGRESS_MIN_ROWS = 50_000
LAST_SLEEP_KEY = "last_sleep_at"
LAST_REPORT_KEY = "last_sleep_report"


def last_report(store: StoreBackend) -> dict[str, Any] | None:
    """The counts the last committed cycle stored (``now``: when it ran), or None before the first."""
    raw = store.get_meta(LAST_REPORT_KEY)
    return None if raw is None else json.loads(raw)


ACTIONS = ("annotate", "retire")
REDIRECT_SUBTYPE = "refines"  # src = superseded chunk, dst = the chunk that refines / replaces it
REDIRECT_CONFIDENCE = 0.9

_R_CAUSED = Relation.CAUSED.code
_R_ENABLED = Relation.ENABLED.code
_R_PREVENTED = Relation.PREVENTED.code
_R_META = Relation.META.code
_EXPLICIT_SUBS = np.array([SUBTYPE_CODES[s] for s in ("contradicts", "invalidates", "supersedes")], dtype=np.int8)
_EXPLICIT_LOOKUP = np.zeros(256, dtype=bool)
_EXPLICIT_LOOKUP[_EXPLICIT_SUBS] = True
_HALF_LIFE_BY_CODE = np.full(8, np.nan)
for _name, _code in SOURCE_CODES.items():
    _hl = learning.half_life_days(_name)
    if _hl is not None:
        _HALF_LIFE_BY_CODE[_code] = _hl
_NEVER_RETIRED_BY_CODE = np.zeros(8, dtype=bool)
for _name in learning.NEVER_RETIRED_SOURCES:
    _NEVER_RETIRED_BY_CODE[SOURCE_CODES[_name]] = True


class _Rollback(Exception):
    """Raised inside the sleep transaction to undo a dry run."""


def _node_mask(size: int, nodes: np.ndarray) -> np.ndarray:
    m = np.zeros(size, dtype=bool)
    m[nodes] = True
    return m


def _valid_action(action: Any) -> str:
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {ACTIONS}, got {action!r}")
    return action


def check_sleep_args(*, now: Any, judge: Any, min_diversity: Any, action: Any, llm_budget: Any) -> Any:
    """Validate the arguments of a cycle (before any judge is asked); returns the judge to use."""
    _valid_action(action)
    if isinstance(min_diversity, bool) or not isinstance(min_diversity, (int, float)) \
            or not 0.0 <= float(min_diversity) <= 1.0:
        raise ValueError(f"min_diversity must be a number in [0, 1], got {min_diversity!r}")
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        raise ValueError(f"now must be finite POSIX seconds, got {now!r}")
    if llm_budget is not None and (isinstance(llm_budget, bool) or not isinstance(llm_budget, (int, float))
                                   or not 0 < llm_budget < math.inf):
        raise ValueError(f"llm_budget must be a positive number of seconds or None, got {llm_budget!r}")
    if judge is None:
        judge = RuleJudge()
    if not callable(getattr(judge, "decide", None)):
        raise TypeError(f"judge must have a decide(old, new, ...) method, got {type(judge).__name__}")
    return judge


def plan_slow_judging(store: StoreBackend, judge: Any, *, min_diversity: float = 0.0,
                      retire: bool = False) -> JudgePlan | None:
    """For a judge without a cheap pre-filter (an LLM): the pairs to ask it about, read from ``store``.

    ``None`` when the judge is cheap (it is asked inside the transaction) or the novelty gate will
    skip the cycle. The caller may then ask the judge (``ask_judge``) with no lock held and pass the
    verdicts to ``sleep(..., verdicts=...)``, which applies only those whose edges did not change.
    """
    if getattr(judge, "might_supersede", None) is not None:
        return None
    if token_diversity(store.recent_chunk_texts(NOVELTY_WINDOW)) < min_diversity:
        return None
    ex = store.sleep_edge_arrays(relations=("caused", "enabled"))
    ch = store.sleep_chunk_arrays()
    return plan_judging(store, judge, supersession_pairs(ex, _alive_lookup(ch, ex), None, retire=retire), ex,
                        limit=MAX_JUDGE_CALLS)


def sleep_memory(views: Views, *, now: float, judge: Any, dry_run: bool, min_diversity: float, action: str,
                 progress: bool, llm_budget: float) -> SleepReport:
    """``Memory.sleep``: a slow judge is asked with the lock released (its pairs planned under the
    lock), then one cycle under the lock; the views are patched by difference afterwards."""
    judge = check_sleep_args(now=now, judge=judge, min_diversity=min_diversity, action=action,
                             llm_budget=llm_budget)
    verdicts = None
    with views.lock:
        views.sync_external()
        plan = plan_slow_judging(views.store, judge, min_diversity=min_diversity, retire=action == "retire")
    if plan is not None:  # never hold the lock across a network call
        verdicts = ask_judge(judge, plan, budget=llm_budget)
    with views.lock:
        views.sync_external()
        report = sleep(views.store, config=views.config, now=now, dry_run=dry_run, judge=judge,
                       min_diversity=min_diversity, action=action, progress=progress, llm_budget=llm_budget,
                       verdicts=verdicts)
        if not dry_run:  # Q-values, retired edges, merged chunks: re-read, patch indexes by difference
            views.after_bulk_change()
        return report


def sleep(store: StoreBackend, *, config: Config, now: float, dry_run: bool = False, judge: Any = None,
          min_diversity: float = 0.0, action: str = "annotate", progress: bool = False,
          llm_budget: float | None = None, verdicts: dict[str, Any] | None = None) -> SleepReport:
    """Run one consolidation cycle on ``store`` at time ``now`` (see the module docstring).

    ``verdicts``: a slow judge's answers gathered beforehand (``plan_slow_judging`` + ``ask_judge``);
    without them a slow judge is asked here, before the transaction, within ``llm_budget`` seconds.
    """
    judge = check_sleep_args(now=now, judge=judge, min_diversity=min_diversity, action=action,
                             llm_budget=llm_budget)
    now = float(now)
    big = progress and (store.edge_count() >= PROGRESS_MIN_ROWS)
    bar = Progress(bool(big))
    timer = Timer(bar)
    counts: dict[str, Any] = {"dry_run": bool(dry_run)}

    # stage 0: novelty gate (read only)
    timer.start("gate")
    diversity = token_diversity(store.recent_chunk_texts(NOVELTY_WINDOW))
    counts["diversity"] = diversity
    timer.stop()
    if diversity < min_diversity:
        timer.total()
        log.info("causalmem: sleep skipped, diversity %.3f < min_diversity %.3f", diversity, min_diversity)
        return make_report(skipped_low_diversity=True, elapsed=dict(timer.elapsed), **counts)

    prefilter = getattr(judge, "might_supersede", None)
    early_verdicts = verdicts
    if early_verdicts is not None:
        timer.elapsed["judge"] = float(early_verdicts.get("seconds", 0.0))
    elif prefilter is None:  # slow judge (LLM): consult it before taking the write lock
        timer.start("judge")
        plan = plan_slow_judging(store, judge, retire=action == "retire") or JudgePlan()
        early_verdicts = ask_judge(judge, plan, budget=llm_budget)
        timer.stop()

    try:
        with store.transaction():
            report = _cycle(store, config=config, now=now, judge=judge, prefilter=prefilter, action=action,
                            early=early_verdicts, timer=timer, counts=counts)
            if dry_run:
                raise _Rollback(report)
            timer.start("commit")
        timer.stop()
    except _Rollback as rb:
        report = rb.args[0]
    bar.done()
    timer.total()
    return make_report(elapsed=dict(timer.elapsed), **report)


def _alive_lookup(chunks: np.ndarray, edges: np.ndarray) -> np.ndarray:
    size = int(max(chunks["nid"].max(initial=0), edges["src"].max(initial=0), edges["dst"].max(initial=0))) + 1
    alive = np.zeros(size, dtype=bool)
    alive[chunks["nid"]] = chunks["alive"].astype(bool)
    return alive


def _last_sleep(store: StoreBackend) -> float:
    """The previous cycle's time; a stored value in the future (written by an older version from
    a millisecond clock, say) is ignored with a warning instead of switching decay off."""
    raw = store.get_meta(LAST_SLEEP_KEY)
    if raw is None:
        return -math.inf
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value > time.time() + CLOCK_AHEAD:
        log.warning("causalmem: ignoring an impossible stored last_sleep_at (%r): decaying from each edge's "
                    "discovery time instead", raw)
        return -math.inf
    return value


def _cycle(store: StoreBackend, *, config: Config, now: float, judge, prefilter, action: str, early, timer: Timer,
           counts: dict[str, Any]) -> dict[str, Any]:
    last_sleep = _last_sleep(store)

    timer.start("load")
    edges = store.sleep_edge_arrays()
    chunks = store.sleep_chunk_arrays()
    alive = _alive_lookup(chunks, edges)
    size = len(alive)
    q = np.zeros(size)
    q[chunks["nid"]] = chunks["q"]
    chunk_acc = np.full(size, -1e300)
    chunk_acc[chunks["nid"]] = chunks["acc"]
    valid = alive[edges["src"]] & alive[edges["dst"]]
    timer.stop()

    # stage 1: reactivation
    timer.start("reactivation")
    src, dst, rel, pol = edges["src"], edges["dst"], edges["rel"], edges["pol"]
    excit = (rel == _R_CAUSED) | (rel == _R_ENABLED)
    both = (_node_mask(size, src[valid & excit & (pol == POLARITY_CODES["negative"])])
            & _node_mask(size, src[valid & excit & (pol == POLARITY_CODES["positive"])]))
    explicit = valid & (rel == _R_META) & _EXPLICIT_LOOKUP[edges["sub"]]
    contested = _node_mask(size, dst[explicit])
    contradicted = both[src] | contested[src] | contested[dst] | (edges["sup"] == 1)
    recent = now - learning.ACCESS_WINDOW_DAYS * DAY
    accessed = (chunk_acc[src] >= recent) & (chunk_acc[dst] >= recent)
    score = (edges["conf"] + 0.5 * (pol == POLARITY_CODES["negative"])
             + 0.3 * (edges["source"] == SOURCE_CODES["user_feedback"]) + 0.2 * contradicted + 0.2 * accessed)
    protected = valid & (score >= REPLAY_THRESHOLD - 1e-12)
    counts["reactivated"] = int(valid.sum())
    counts["protected"] = int(protected.sum())
    timer.stop()

    # stage 1.5: Q update (r = 1 for both endpoints of protected edges, once per chunk)
    timer.start("q_update")
    counts["q_updates"] = 0
    if protected.any():
        nodes = np.flatnonzero(_node_mask(size, np.concatenate([src[protected], dst[protected]])))
        nodes = nodes[alive[nodes]]
        max_next = np.zeros(size)
        np.maximum.at(max_next, src[valid], q[dst[valid]])
        new_q = learning.bellman_vec(q[nodes], 1.0, max_next[nodes], alpha=config.q_alpha, gamma=config.q_gamma)
        changed = np.abs(new_q - q[nodes]) > 1e-12
        if changed.any():
            store.update_q_values(zip(new_q[changed].tolist(), nodes[changed].tolist()))
            q[nodes[changed]] = new_q[changed]
        counts["q_updates"] = int(changed.sum())
    timer.stop()

    # stage 1.7: supersession
    timer.start("supersession")
    if early is None:
        vedges = edges[valid]
        early = run_judge(store, judge, supersession_pairs(vedges, alive, prefilter, retire=action == "retire"), vedges,
                          limit=None if prefilter is not None else MAX_JUDGE_CALLS)
    else:  # asked before this transaction: apply only where the edges are still as they were
        early = still_current(early, edges, valid)
    early = {**early, "keep": list(early["keep"])}
    # (old eid, new eid, new id, reasoning, redirect from chunk, redirect to chunk)
    decisions = list(early["supersede"])
    redirect_pairs = [(d[4], d[5]) for d in decisions]
    # explicit meta edges: the old belief's valid caused/enabled out-edges are superseded
    if explicit.any():
        rows = np.flatnonzero(explicit)
        rows = rows[np.lexsort((edges["eid"][rows], edges["disc"][rows]))]  # latest meta edge wins
        by_old = {int(edges["dst"][r]): int(edges["eid"][r]) for r in rows}
        old_out = np.flatnonzero(valid & excit & (edges["sup"] == 0)
                                 & _node_mask(size, np.fromiter(by_old, np.int64))[src])
        meta_ids = store.edge_ids(sorted(set(by_old.values())))
        meta_src = {int(edges["eid"][r]): int(edges["src"][r]) for r in rows}
        old_ids = store.edge_ids(edges["eid"][old_out].tolist()) if len(old_out) else {}
        judged = store.judged_pairs()
        for old_node, m in by_old.items():
            key = f"judged:redirect:{meta_ids[m]}"
            if key not in judged:
                redirect_pairs.append((old_node, meta_src[m]))
                early["keep"].append(key)
        for r in old_out.tolist():
            m = by_old[int(src[r])]
            if int(dst[r]) == meta_src[m]:
                continue  # the edge already points at the new belief
            key = f"judged:{old_ids[int(edges['eid'][r])]}:{meta_ids[m]}"
            if key in judged:
                continue  # decided in an earlier cycle (and maybe restored by the user since)
            decisions.append((int(edges["eid"][r]), m, meta_ids[m], "explicit meta edge"))
            early["keep"].append(key)
    decisions = list({d[0]: d for d in reversed(decisions)}.values())[::-1]  # first decision per old edge wins
    counts["judge_failures"] = int(early["failures"])
    counts["judge_deferred"] = int(early.get("deferred", 0))
    if early["keep"]:
        store.remember_judged(early["keep"], "decided")
    superseded = 0
    if decisions:
        if action == "annotate":
            superseded = store.annotate_superseded([(d[2], d[0]) for d in decisions])
        else:
            superseded = store.retire_superseded(
                [(now, f"superseded by {d[2]}: {d[3]}"[:500], d[2], d[0]) for d in decisions])
    counts["superseded"] = int(superseded)
    counts["annotated"] = int(superseded) if action == "annotate" else 0
    # Redirect: a meta 'refines' edge from the superseded chunk to the one that replaces it (old → new),
    # so whatever recalls the outdated belief also spreads to its correction.
    redirects = 0
    if redirect_pairs:
        m = valid & (rel == _R_META)
        have = set(zip(src[m].tolist(), dst[m].tolist()))
        for a, b in redirect_pairs:
            pair = (int(a), int(b))
            if pair[0] == pair[1] or pair in have or not (alive[pair[0]] and alive[pair[1]]):
                continue
            have.add(pair)
            store.insert_edge(src=pair[0], dst=pair[1], relation=Relation.META, subtype=REDIRECT_SUBTYPE,
                              confidence=REDIRECT_CONFIDENCE, source="rule", polarity=None, task_tag=None,
                              event_time=None, discovered_at=now)
            redirects += 1
    counts["redirects"] = redirects
    eid_pos = {int(e): i for i, e in enumerate(edges["eid"].tolist())} if decisions else {}
    for old, *_ in decisions:
        i = eid_pos.get(old)
        if i is not None:
            edges["sup"][i] = 1
            if action == "retire":
                valid[i] = False
    timer.stop()

    # stage 2: generalization — merge duplicates, mine cross-task patterns
    timer.start("generalization")
    live = np.flatnonzero(valid)
    counts["merged"] = 0
    if len(live) > 1:
        sub = edges[live]
        order = np.lexsort((sub["eid"], -sub["conf"], sub["sub"], sub["rel"], sub["dst"], sub["src"]))
        s = live[order]
        same = ((src[s][1:] == src[s][:-1]) & (dst[s][1:] == dst[s][:-1]) & (rel[s][1:] == rel[s][:-1])
                & (edges["sub"][s][1:] == edges["sub"][s][:-1]))
        if same.any():
            first = np.r_[True, ~same]
            keeper = s[np.flatnonzero(first)][np.cumsum(first) - 1]
            dup = s[~first]
            keep_of_dup = keeper[~first]
            keep_ids = store.edge_ids(unique(edges["eid"][keep_of_dup]).tolist())
            store.retire_edges([(now, f"merged into {keep_ids[int(k)]}", float(c), int(e)) for e, k, c in zip(
                edges["eid"][dup].tolist(), edges["eid"][keep_of_dup].tolist(), edges["conf"][dup].tolist())])
            valid[dup] = False
            counts["merged"] = int(len(dup))
    linked = linked_pairs(edges, valid)
    decisions_docs = decision_docs(store, last_sleep) if store.has_new_tagged_decisions(last_sleep) else Docs()
    counts["patterns"] = mine(store, decisions_docs, linked, now, kind="patterns")
    timer.stop()

    # stage 3: decay + GC (edges), Hebbian fading
    timer.start("decay")
    live = np.flatnonzero(valid)
    counts.update(decayed=0, boosted=0, retired=0)
    if len(live):
        e = edges[live]
        age_days = (now - np.maximum(e["disc"], last_sleep)) / DAY
        acc = accessed[live]
        prot = protected[live]
        half = _HALF_LIFE_BY_CODE[e["source"]]
        decayed_only = learning.decay_confidences(e["conf"], half, age_days, prot, np.zeros(len(live), bool))
        new_conf = learning.decay_confidences(e["conf"], half, age_days, prot, acc)
        retire = learning.retire_mask(new_conf, _NEVER_RETIRED_BY_CODE[e["source"]], prot)
        changed = np.abs(new_conf - e["conf"]) > 1e-12
        counts["decayed"] = int((decayed_only < e["conf"] - 1e-12).sum())
        counts["boosted"] = int((acc & (new_conf > decayed_only + 1e-12)).sum())
        upd = changed & ~retire
        if upd.any():
            store.update_edge_confidences(zip(new_conf[upd].tolist(), e["eid"][upd].tolist()))
        if retire.any():
            floor = np.where(prot[retire], learning.RETIRE_BELOW_PROTECTED, learning.RETIRE_BELOW)
            store.retire_edges([(now, f"decayed below {f:g}", float(c), int(x)) for f, c, x in zip(
                floor.tolist(), new_conf[retire].tolist(), e["eid"][retire].tolist())])
            valid[live[retire]] = False
        counts["retired"] = int(retire.sum())
    timer.stop()

    timer.start("hebbian")
    co = store.sleep_cooccurrence_arrays()
    counts.update(hebbian_faded=0, hebbian_dropped=0)
    if len(co):
        idle = (now - np.maximum(co["upd"], last_sleep)) / DAY
        w = learning.hebbian_faded_weight(co["w"], idle, fade=config.hebbian_idle_fade)
        drop = w < config.hebbian_drop_below
        fade = (np.abs(w - co["w"]) > 1e-12) & ~drop
        if fade.any():
            store.set_cooccurrence_weights(zip(w[fade].tolist(), co["a"][fade].tolist(), co["b"][fade].tolist()))
        if drop.any():
            store.delete_cooccurrence(zip(co["a"][drop].tolist(), co["b"][drop].tolist()))
        counts["hebbian_faded"] = int(fade.sum())
        counts["hebbian_dropped"] = int(drop.sum())
    timer.stop()

    # stage 4: REM transfer
    timer.start("rem")
    counts["rem_links"] = mine(store, decisions_docs, linked, now, kind="rem")
    # stage 4b: structural transfer (same shape of outcome, different task; transfer.py)
    counts["transfer_links"] = transfer_links(store, decisions_docs, edges, valid, linked, now,
                                              per_node=config.transfer_links)
    timer.stop()

    # a clock set back never re-decays a period; a clock running ahead never stores a future time
    # (that would switch decay off until the wall clock caught up)
    store.set_meta(LAST_SLEEP_KEY, repr(min(max(now, last_sleep), time.time())))
    summary = {k: v for k, v in counts.items()}
    summary["now"] = now
    store.set_meta(LAST_REPORT_KEY, json.dumps(summary, sort_keys=True))
    return counts


