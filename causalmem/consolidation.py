"""Sleep: one consolidation cycle over the whole store (SPEC §6).

Stages (all counted in the ``SleepReport``):

0    novelty gate — token diversity of the 64 newest chunks; below ``min_diversity`` the cycle is
     skipped and nothing is written. Diversity = Shannon entropy of the token distribution
     divided by log2(number of tokens): 1.0 when no token repeats, → 0 when the same few
     tokens fill every chunk.
1    reactivation — every valid edge scores ``confidence + 0.5·failure outcome + 0.3·user_feedback
     + 0.2·contradicted + 0.2·accessed within 7 d``; score ≥ 1.0 = replay-protected.
     *contradicted*: the decision also has an outcome of the opposite polarity, an endpoint is the
     target of a contradicts/invalidates/supersedes meta edge, or the edge was annotated as
     superseded. *accessed*: the edge's ``last_accessed_at``, or both endpoint chunks', within 7 d.
1.5  Q update — Bellman with r = 1 once for each endpoint of a protected edge.
1.7  supersession (C7) — (a) a decision with several valid caused/enabled outcomes: each older
     edge (by discovered_at, then id) to a different outcome is judged against the newest one;
     (b) an explicit meta edge of subtype invalidates/supersedes/contradicts (src = new belief,
     dst = old belief) supersedes the old belief's valid caused/enabled out-edges. ``annotate``
     sets ``superseded_by`` (still valid and retrievable, flagged); ``retire`` also sets
     ``valid_to``. Either way the superseded chunk (old outcome, or old belief) gets a *redirect*:
     a meta ``refines`` edge old → new (confidence 0.9), so whatever recalls the outdated belief
     also spreads to its correction (on causal-eval category 17 this lifts the corrected belief
     above the superseded one for every dev question). A judge failure keeps the old edge and
     counts in ``judge_failures``. Every decided pair is remembered in ``meta``
     (``judged:<old id>:<new id>``): never re-judged, so a user's ``restore`` sticks; an LLM
     judge's "keep" verdicts are remembered the same way.
2    generalization — duplicate valid edges (same src, dst, relation, subtype) merge into the
     strongest (highest confidence, then lowest id); cross-task patterns: decisions in the same
     scope whose texts have token Jaccard ≥ 0.65 and different task-tag sets get a meta
     ``repeated`` edge (older → newer chunk).
3    decay + GC — half-life decay since ``max(discovered_at, last sleep)`` (``learning``), access
     boost, retirement; Hebbian pairs fade ``w·0.99^idle days`` and are dropped below 0.05.
4    REM transfer — decisions with disjoint task-tag sets whose *patterns* (decision tokens ∪
     outcome tokens) have Jaccard ≥ 0.65 get a meta ``similar_to`` edge, unless already linked.

The whole cycle is one transaction: killed mid-way, the store is as before; ``dry_run`` runs
everything and rolls back. A judge that is not cheap (no ``might_supersede`` pre-filter, e.g. an
LLM) is consulted *before* the write transaction opens, so slow HTTP calls never hold the write
lock (at most ``MAX_JUDGE_CALLS`` per cycle; the rest waits for the next one); its verdicts are
applied inside the transaction only to edges still valid and unannotated. Pattern mining is
incremental — only decisions new since the last sleep are compared (against all decisions) — and
bounded: at most ``MAX_PATTERN_CANDIDATES`` candidate pairs per pass, rarest shared words first.

Bulk work is vectorised: one SELECT per table into numpy arrays, ``executemany`` of only the
rows that changed (``benchmarks/bench_sleep.py``: 100k edges ≈ 2 s, 1M edges ≈ 24 s on 2 cores).
"""
from __future__ import annotations

import json
import logging
import math
import re
import sys
import time
from collections import Counter
from dataclasses import asdict
from typing import Any, Callable, Sequence

import numpy as np

from . import learning
from .config import Config
from .errors import LLMError
from .judges import EdgeInfo, RuleJudge
from .lexical import DEFAULT_TOKENIZER, tokenize
from .store_learning import POLARITY_CODES, POLARITY_NAMES, SOURCE_CODES, SUBTYPE_CODES
from .types import Relation, SleepReport

log = logging.getLogger("causalmem")

__all__ = ["sleep", "format_report", "token_diversity", "jaccard_pairs"]

DAY = 86400.0
NOVELTY_WINDOW = 64
REPLAY_THRESHOLD = 1.0
PATTERN_JACCARD = 0.65
MAX_PATTERN_GROUP = 2000
MAX_PATTERN_CANDIDATES = 300_000
MAX_JUDGE_CALLS = 200  # per cycle for judges without a cheap pre-filter; the rest waits for the next
PROGRESS_MIN_ROWS = 50_000
LAST_SLEEP_KEY = "last_sleep_at"
LAST_REPORT_KEY = "last_sleep_report"
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


class _Progress:
    """A few-line progress bar on stderr (only when asked and the store is large)."""

    STAGES = ("judge", "load", "reactivation", "q_update", "supersession", "generalization", "decay",
              "hebbian", "rem", "commit")

    def __init__(self, enabled: bool, stream=None) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def stage(self, name: str) -> None:
        if not self.enabled:
            return
        i = self.STAGES.index(name) + 1 if name in self.STAGES else 0
        n = len(self.STAGES)
        bar = "#" * i + "." * (n - i)
        line = f"sleep [{bar}] {i}/{n} {name}"
        if self.tty:
            self.stream.write("\r" + line.ljust(60))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


class _Timer:
    def __init__(self, progress: _Progress) -> None:
        self.elapsed: dict[str, float] = {}
        self.progress = progress
        self._t = time.perf_counter()
        self._t0 = self._t

    def start(self, name: str) -> None:
        self.progress.stage(name)
        self._name = name
        self._t = time.perf_counter()

    def stop(self) -> None:
        self.elapsed[self._name] = self.elapsed.get(self._name, 0.0) + time.perf_counter() - self._t

    def total(self) -> None:
        self.elapsed["total"] = time.perf_counter() - self._t0


# ------------------------------------------------------------------------------ helpers


def _unique(a: np.ndarray) -> np.ndarray:
    """Sorted unique values (sort-based: numpy 2's hash-based ``np.unique`` is ~100× slower here)."""
    if len(a) == 0:
        return np.asarray(a).copy()
    b = np.sort(a)
    return b[np.r_[True, b[1:] != b[:-1]]]


def _node_mask(size: int, nodes: np.ndarray) -> np.ndarray:
    m = np.zeros(size, dtype=bool)
    m[nodes] = True
    return m


def token_diversity(texts: Sequence[str]) -> float:
    """Normalised token entropy in [0, 1]: H(tokens) / log2(#tokens); 0 with fewer than 2 tokens."""
    counts: Counter[str] = Counter()
    for t in texts:
        counts.update(tokenize(t))
    n = sum(counts.values())
    if n < 2:
        return 0.0
    p = np.fromiter(counts.values(), dtype=np.float64, count=len(counts)) / n
    h = float(-(p * np.log2(p)).sum())
    return max(0.0, min(1.0, h / math.log2(n)))


def jaccard_pairs(docs: Sequence[frozenset], probe: Sequence[bool], threshold: float,
                  accept: Callable[[int, int], bool] | None = None, *,
                  max_group: int | None = None) -> list[tuple[int, int, float]]:
    """All pairs (i, j, J), i < j, with token Jaccard J ≥ ``threshold`` and at least one probe side.

    Prefix filtering (AllPairs), vectorised: tokens are ranked rare-first; two sets with
    Jaccard ≥ t share a token among the first ``|x| − ⌈t·|x|⌉ + 1`` of each, so candidates are
    the pairs sharing a prefix token; they are verified exactly with a sparse row product.
    Non-probe documents are only matched against probes (old×old pairs were compared in an
    earlier cycle). Work is bounded: prefix tokens are taken rarest-group first while the
    candidate count stays within ``MAX_PATTERN_CANDIDATES`` and a group within ``max_group``
    (default ``MAX_PATTERN_GROUP``) documents; pairs whose only shared prefix tokens are more
    frequent than that are missed (logged). Real text is Zipfian, so this rarely bites; it keeps a
    cycle on a million edges of near-uniform vocabulary from exploding quadratically.
    ``accept(i, j)`` filters the verified pairs.
    """
    vocab: dict[Any, int] = {}
    ids = [np.fromiter((vocab.setdefault(t, len(vocab)) for t in d), dtype=np.int64) for d in docs]
    lens = np.fromiter((len(d) for d in ids), dtype=np.int64, count=len(ids))
    cols = np.concatenate(ids) if ids else np.empty(0, np.int64)
    return _jaccard_csr(np.r_[0, np.cumsum(lens)], cols, len(vocab), probe, threshold, accept, max_group=max_group)


def _jaccard_csr(indptr: np.ndarray, cols: np.ndarray, n_vocab: int, probe: Sequence[bool] | np.ndarray,
                 threshold: float, accept: Callable[[int, int], bool] | None = None, *,
                 max_group: int | None = None) -> list[tuple[int, int, float]]:
    """``jaccard_pairs`` over documents in CSR form: doc i = distinct token ids cols[indptr[i]:indptr[i+1]]."""
    n = len(indptr) - 1
    probe = np.asarray(probe, dtype=bool)
    if n < 2 or not probe.any() or not len(cols):
        return []
    max_group = MAX_PATTERN_GROUP if max_group is None else max_group
    lens = np.diff(indptr)
    cols = np.asarray(cols, dtype=np.int64)
    col = cols
    row = np.repeat(np.arange(n, dtype=np.int64), lens)
    df = np.bincount(col, minlength=n_vocab)
    rank = np.empty(n_vocab, dtype=np.int64)
    rank[np.lexsort((np.arange(n_vocab), df))] = np.arange(n_vocab)
    tok_rank = rank[col]
    order = np.lexsort((tok_rank, row))  # per doc, rare tokens first
    pos = np.arange(len(col)) - indptr[row[order]]
    plen = lens - np.ceil(threshold * lens - 1e-9).astype(np.int64) + 1
    keep = pos < plen[row[order]]
    p_doc, p_rank = row[order][keep], tok_rank[order][keep]
    g_order = np.lexsort((p_doc, p_rank))
    p_doc, p_rank = p_doc[g_order], p_rank[g_order]
    starts = np.flatnonzero(np.r_[True, p_rank[1:] != p_rank[:-1]])
    sizes = np.diff(np.r_[starts, len(p_rank)])
    probe_arr = probe
    pa: list[np.ndarray] = []
    pb: list[np.ndarray] = []
    skipped = 0
    budget = MAX_PATTERN_CANDIDATES
    for g in _unique(sizes):  # ascending: the most selective (rarest shared) tokens first
        g = int(g)
        if g < 2:
            continue
        n_groups = int((sizes == g).sum())
        cost = n_groups * g * (g - 1) // 2
        if g > max_group or cost > budget:
            skipped += int((sizes >= g).sum())
            break
        budget -= cost
        st = starts[sizes == g]
        members = p_doc[st[:, None] + np.arange(g)[None, :]]  # (groups, g)
        iu, ju = np.triu_indices(g, 1)
        a, b = members[:, iu].ravel(), members[:, ju].ravel()
        m = probe_arr[a] | probe_arr[b]
        pa.append(a[m])
        pb.append(b[m])
    if skipped:
        log.info("causalmem: pattern mining skipped %d frequent prefix tokens (candidate budget %d pairs, "
                 "max group %d)", skipped, MAX_PATTERN_CANDIDATES, max_group)
    if not pa:
        return []
    a = np.concatenate(pa)
    b = np.concatenate(pb)
    key = _unique(np.minimum(a, b) * n + np.maximum(a, b))
    a, b = key // n, key % n
    la, lb = lens[a], lens[b]
    ok = (la >= threshold * lb - 1e-9) & (lb >= threshold * la - 1e-9)
    a, b = a[ok], b[ok]
    from scipy import sparse  # imported here: only pattern mining needs it

    x = sparse.csr_matrix((np.ones(len(col), dtype=np.float32), col, indptr), shape=(n, n_vocab))
    out: list[tuple[int, int, float]] = []
    step = 200_000
    for k in range(0, len(a), step):
        ca, cb = a[k:k + step], b[k:k + step]
        inter = np.asarray(x[ca].multiply(x[cb]).sum(axis=1)).ravel()
        jac = inter / (lens[ca] + lens[cb] - inter)
        hit = jac + 1e-12 >= threshold
        for i, j, v in zip(ca[hit].tolist(), cb[hit].tolist(), jac[hit].tolist()):
            if accept is None or accept(i, j):
                out.append((i, j, float(v)))
    return out


def _valid_action(action: Any) -> str:
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {ACTIONS}, got {action!r}")
    return action


# ------------------------------------------------------------------------------ supersession


def _supersession_pairs(edges: np.ndarray, alive: np.ndarray, prefilter: Callable | None) -> np.ndarray:
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


def _edge_info(row: tuple, decision: str, outcome: str) -> EdgeInfo:
    eid_str, relation, conf, source, pol, tag, disc, subtype, _src, _dst = row
    return EdgeInfo(id=eid_str, relation=relation, confidence=conf, source=source, polarity=pol, task_tag=tag,
                    discovered_at=disc, subtype=subtype, decision_text=decision, outcome_text=outcome)


def _run_judge(store, judge, pairs: np.ndarray, edges: np.ndarray, *, limit: int | None) -> dict[str, Any]:
    """Ask ``judge`` about (old, new) row pairs; returns decisions, remembered negatives, failures."""
    out: dict[str, Any] = {"supersede": [], "keep": [], "failures": 0, "calls": 0, "deferred": 0}
    if not len(pairs):
        return out
    old_eids = edges["eid"][pairs[:, 0]]
    new_eids = edges["eid"][pairs[:, 1]]
    remember = getattr(judge, "remember_negative", True)
    judged = store.judged_pairs()
    rows = store.edge_judge_rows(_unique(np.concatenate([old_eids, new_eids])).tolist())
    todo = []
    for o, n in zip(old_eids.tolist(), new_eids.tolist()):
        if o not in rows or n not in rows:
            continue
        if f"judged:{rows[o][0]}:{rows[n][0]}" in judged:
            continue
        todo.append((o, n))
    if limit is not None and len(todo) > limit:
        out["deferred"] = len(todo) - limit
        log.info("causalmem: sleep judges %d supersession pairs now, %d next cycle", limit, len(todo) - limit)
        todo = todo[:limit]
    texts = store.chunk_texts(sorted({rows[e][8] for pair in todo for e in pair} | {rows[e][9] for pair in todo
                                                                                        for e in pair}))
    for o, n in todo:
        ro, rn = rows[o], rows[n]
        decision = texts.get(ro[8], "")
        old_text, new_text = texts.get(ro[9], ""), texts.get(rn[9], "")
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
                        ro[0], rn[0], exc)
            continue
        reasoning = getattr(verdict, "reasoning", "") or ""
        if sup:
            out["supersede"].append((o, n, rn[0], reasoning, ro[9], rn[9]))
            out["keep"].append(f"judged:{ro[0]}:{rn[0]}")  # decided: never asked again (restore sticks)
        elif remember:
            out["keep"].append(f"judged:{ro[0]}:{rn[0]}")
    return out


# ------------------------------------------------------------------------------ the cycle


def sleep(store, *, config: Config, now: float, dry_run: bool = False, judge: Any = None,
          min_diversity: float = 0.0, action: str = "annotate", progress: bool = False) -> SleepReport:
    """Run one consolidation cycle on ``store`` at time ``now`` (see the module docstring)."""
    action = _valid_action(action)
    if isinstance(min_diversity, bool) or not isinstance(min_diversity, (int, float)) \
            or not 0.0 <= float(min_diversity) <= 1.0:
        raise ValueError(f"min_diversity must be a number in [0, 1], got {min_diversity!r}")
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        raise ValueError(f"now must be finite POSIX seconds, got {now!r}")
    if judge is None:
        judge = RuleJudge()
    if not callable(getattr(judge, "decide", None)):
        raise TypeError(f"judge must have a decide(old, new, ...) method, got {type(judge).__name__}")
    now = float(now)
    big = progress and (store.query("SELECT COUNT(*) FROM edges")[0][0] >= PROGRESS_MIN_ROWS)
    bar = _Progress(bool(big))
    timer = _Timer(bar)
    counts: dict[str, Any] = {"dry_run": bool(dry_run)}

    # stage 0: novelty gate (read only)
    timer.start("gate")
    diversity = token_diversity(store.recent_chunk_texts(NOVELTY_WINDOW))
    counts["diversity"] = diversity
    timer.stop()
    if diversity < min_diversity:
        timer.total()
        log.info("causalmem: sleep skipped, diversity %.3f < min_diversity %.3f", diversity, min_diversity)
        return _report(skipped_low_diversity=True, elapsed=dict(timer.elapsed), **counts)

    prefilter = getattr(judge, "might_supersede", None)
    early_verdicts = None
    if prefilter is None:  # slow judge (LLM): consult it before taking the write lock
        timer.start("judge")
        ex = store.sleep_edge_arrays(relations=("caused", "enabled"))
        ch = store.sleep_chunk_arrays()
        alive = _alive_lookup(ch, ex)
        early_verdicts = _run_judge(store, judge, _supersession_pairs(ex, alive, None), ex, limit=MAX_JUDGE_CALLS)
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
    return _report(elapsed=dict(timer.elapsed), **report)


_REPORT_FIELDS = set(SleepReport.__dataclass_fields__)


def _report(**values: Any) -> SleepReport:
    """A SleepReport of the known fields (counts this version of SleepReport lacks are only logged)."""
    extra = {k: v for k, v in values.items() if k not in _REPORT_FIELDS}
    if extra:
        log.info("causalmem: sleep %s", extra)
    return SleepReport(**{k: v for k, v in values.items() if k in _REPORT_FIELDS})


def _alive_lookup(chunks: np.ndarray, edges: np.ndarray) -> np.ndarray:
    size = int(max(chunks["nid"].max(initial=0), edges["src"].max(initial=0), edges["dst"].max(initial=0))) + 1
    alive = np.zeros(size, dtype=bool)
    alive[chunks["nid"]] = chunks["alive"].astype(bool)
    return alive


def _cycle(store, *, config: Config, now: float, judge, prefilter, action: str, early, timer: _Timer,
           counts: dict[str, Any]) -> dict[str, Any]:
    last_raw = store.get_meta(LAST_SLEEP_KEY)
    last_sleep = float(last_raw) if last_raw is not None else -math.inf

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
    accessed = (edges["acc"] >= recent) | ((chunk_acc[src] >= recent) & (chunk_acc[dst] >= recent))
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
        early = _run_judge(store, judge, _supersession_pairs(vedges, alive, prefilter), vedges,
                           limit=None if prefilter is not None else MAX_JUDGE_CALLS)
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
    seen: set[int] = set()
    decisions = [d for d in decisions if not (d[0] in seen or seen.add(d[0]))]
    counts["judge_failures"] = int(early["failures"])
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
            keep_ids = store.edge_ids(_unique(edges["eid"][keep_of_dup]).tolist())
            store.retire_edges([(now, f"merged into {keep_ids[int(k)]}", float(c), int(e)) for e, k, c in zip(
                edges["eid"][dup].tolist(), edges["eid"][keep_of_dup].tolist(), edges["conf"][dup].tolist())])
            valid[dup] = False
            counts["merged"] = int(len(dup))
    linked = _linked_pairs(edges, valid)
    decisions_docs = _decision_docs(store, last_sleep) if store.has_new_tagged_decisions(last_sleep) else _Docs()
    counts["patterns"] = _mine(store, decisions_docs, linked, now, kind="patterns")
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
    counts["rem_links"] = _mine(store, decisions_docs, linked, now, kind="rem")
    timer.stop()

    store.set_meta(LAST_SLEEP_KEY, repr(max(now, last_sleep)))  # a clock set back never re-decays a period
    summary = {k: v for k, v in counts.items()}
    summary["now"] = now
    store.set_meta(LAST_REPORT_KEY, json.dumps(summary, sort_keys=True))
    return counts


def _linked_pairs(edges: np.ndarray, valid: np.ndarray) -> set[tuple[int, int]]:
    """Unordered chunk pairs already joined by a valid meta edge."""
    m = valid & (edges["rel"] == _R_META)
    a, b = edges["src"][m], edges["dst"][m]
    return set(zip(np.minimum(a, b).tolist(), np.maximum(a, b).tolist()))


class _Docs:
    """Decisions with task tags, in CSR form: token ids of the text and of the pattern (text ∪
    outcome texts), tag codes, scope code, novelty."""

    def __init__(self) -> None:
        self.nids = np.empty(0, np.int64)
        self.text = (np.zeros(1, np.int64), np.empty(0, np.int64))
        self.pattern = (np.zeros(1, np.int64), np.empty(0, np.int64))
        self.tags = (np.zeros(1, np.int64), np.empty(0, np.int64))
        self.scope = np.empty(0, np.int64)
        self.new = np.empty(0, bool)
        self.n_vocab = 0

    def tag_set(self, i: int) -> frozenset:
        ptr, val = self.tags
        return frozenset(val[ptr[i]:ptr[i + 1]].tolist())


def _csr_from_pairs(doc: np.ndarray, val: np.ndarray, n_docs: int, n_vals: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (doc, value) pairs as CSR (values sorted within a doc)."""
    key = _unique(doc.astype(np.int64) * max(n_vals, 1) + val)
    d, v = key // max(n_vals, 1), key % max(n_vals, 1)
    return np.r_[0, np.cumsum(np.bincount(d, minlength=n_docs))], v


def _gather(indptr: np.ndarray, cols: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner index, value) of every entry of the CSR rows ``rows`` (rows may repeat)."""
    lens = indptr[rows + 1] - indptr[rows]
    total = int(lens.sum())
    owner = np.repeat(np.arange(len(rows)), lens)
    offs = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
    return owner, cols[np.repeat(indptr[rows], lens) + offs]


_ASCII_WORD_RE = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")  # lexical's ASCII word pattern


class _WordIds(dict):
    """surface word -> term id (-1 = stop word), memoised; terms from the lexical tokenizer."""

    def __init__(self, vocab: dict[str, int]) -> None:
        super().__init__()
        self.vocab = vocab
        self.term_of = DEFAULT_TOKENIZER.term_of

    def __missing__(self, word: str) -> int:
        term = self.term_of(word)
        tid = -1 if term is None else self.vocab.setdefault(term, len(self.vocab))
        self[word] = tid
        return tid


def _decision_docs(store, last_sleep: float) -> _Docs:
    docs = _Docs()
    e_src, e_dst, e_disc, e_tag = [], [], [], []
    tag_code: dict[str, int] = {}
    for s_, d_, disc, tag in store.tagged_edge_rows():
        e_src.append(s_)
        e_dst.append(d_)
        e_disc.append(disc)
        e_tag.append(tag_code.setdefault(tag, len(tag_code)))
    if not e_src:
        return docs
    e_src, e_dst = np.asarray(e_src, np.int64), np.asarray(e_dst, np.int64)
    e_disc, e_tag = np.asarray(e_disc, np.float64), np.asarray(e_tag, np.int64)
    need = _unique(np.concatenate([e_src, e_dst]))
    size = int(need[-1]) + 1
    pos = np.full(size, -1, np.int64)
    pos[need] = np.arange(len(need))
    vocab: dict[str, int] = {}
    scope_code: dict[tuple, int] = {}
    c_scope = np.full(len(need), -1, np.int64)
    c_created = np.zeros(len(need))
    tok_lens = np.zeros(len(need), np.int64)
    tok_cols: list[int] = []
    word_ids = _WordIds(vocab)
    findall = _ASCII_WORD_RE.findall
    for nid, text, user, agent, run, created in store.chunk_rows_for_mining(need.tolist()):
        i = pos[nid]
        c_scope[i] = scope_code.setdefault((user, agent, run), len(scope_code))
        c_created[i] = created
        if text.isascii():  # fast path, same terms as lexical.tokenize
            ids = set(map(word_ids.__getitem__, findall(text.lower())))
            ids.discard(-1)
        else:
            ids = {vocab.setdefault(t, len(vocab)) for t in tokenize(text)}
        tok_lens[i] = len(ids)
        tok_cols.extend(sorted(ids))
    tok_indptr = np.r_[0, np.cumsum(tok_lens)]
    tok_cols_arr = np.asarray(tok_cols, np.int64)
    live = (c_scope[pos[e_src]] >= 0) & (c_scope[pos[e_dst]] >= 0)  # both chunks alive
    e_src, e_dst, e_disc, e_tag = e_src[live], e_dst[live], e_disc[live], e_tag[live]
    if not len(e_src):
        return docs
    dnids = _unique(e_src)
    dpos = np.searchsorted(dnids, e_src)  # doc index of every edge
    n_docs, n_vocab = len(dnids), max(len(vocab), 1)
    docs.nids = dnids
    docs.n_vocab = n_vocab
    cidx = pos[dnids]
    t_owner, t_val = _gather(tok_indptr, tok_cols_arr, cidx)
    docs.text = _csr_from_pairs(t_owner, t_val, n_docs, n_vocab)
    o_owner, o_val = _gather(tok_indptr, tok_cols_arr, pos[e_dst])
    docs.pattern = _csr_from_pairs(np.concatenate([t_owner, dpos[o_owner]]), np.concatenate([t_val, o_val]),
                                   n_docs, n_vocab)
    docs.tags = _csr_from_pairs(dpos, e_tag, n_docs, max(len(tag_code), 1))
    docs.scope = c_scope[cidx]
    newest = np.full(n_docs, -np.inf)
    np.maximum.at(newest, dpos, e_disc)
    docs.new = (c_created[cidx] > last_sleep) | (newest > last_sleep)
    return docs


def _mine(store, docs: _Docs, linked: set[tuple[int, int]], now: float, *, kind: str) -> int:
    """Stage 2 patterns (kind='patterns', meta 'repeated') or stage 4 REM links (kind='rem', 'similar_to')."""
    if len(docs.nids) < 2 or not docs.new.any():
        return 0
    scope = docs.scope
    if kind == "patterns":
        (indptr, cols), subtype = docs.text, "repeated"

        def accept(i: int, j: int) -> bool:
            return scope[i] == scope[j] and docs.tag_set(i) != docs.tag_set(j)
    else:
        (indptr, cols), subtype = docs.pattern, "similar_to"

        def accept(i: int, j: int) -> bool:
            return scope[i] == scope[j] and not (docs.tag_set(i) & docs.tag_set(j))

    made = 0
    for i, j, _jac in _jaccard_csr(indptr, cols, docs.n_vocab, docs.new, PATTERN_JACCARD, accept):
        a, b = int(docs.nids[i]), int(docs.nids[j])
        key = (min(a, b), max(a, b))
        if key in linked:
            continue
        linked.add(key)
        store.insert_edge(src=key[0], dst=key[1], relation=Relation.META, subtype=subtype, confidence=0.7,
                          source="rule", polarity=None, task_tag=None, event_time=None, discovered_at=now)
        made += 1
    return made


# ------------------------------------------------------------------------------ report

_ROWS = (
    ("0 novelty gate", "diversity", "gate", "token diversity of the newest chunks"),
    ("1 reactivation", "reactivated", "reactivation", "valid edges replayed"),
    ("", "protected", None, "replay-protected (score ≥ 1.0)"),
    ("1.5 Q update", "q_updates", "q_update", "chunks whose Q-value rose"),
    ("1.7 supersession", "superseded", "supersession", "edges superseded"),
    ("", "annotated", None, "… of which annotated (still retrievable)"),
    ("", "judge_failures", None, "judge failures (old edge kept)"),
    ("", "redirects", None, "redirect edges old → new (meta refines)"),
    ("2 generalization", "merged", "generalization", "duplicate edges merged"),
    ("", "patterns", None, "cross-task pattern edges (meta repeated)"),
    ("3 decay + GC", "decayed", "decay", "edges decayed"),
    ("", "boosted", None, "edges boosted by recent access"),
    ("", "retired", None, "edges retired (below threshold)"),
    ("  hebbian", "hebbian_faded", "hebbian", "co-occurrence pairs faded"),
    ("", "hebbian_dropped", None, "co-occurrence pairs dropped"),
    ("4 REM transfer", "rem_links", "rem", "cross-task links (meta similar_to)"),
)


def format_report(report: SleepReport) -> str:
    """A plain-text table of a ``SleepReport`` for the CLI."""
    data = asdict(report) if not isinstance(report, dict) else dict(report)
    elapsed = data.get("elapsed") or {}
    title = "sleep (dry run: nothing written)" if data.get("dry_run") else "sleep"
    lines = [title]
    if data.get("skipped_low_diversity"):
        lines.append(f"skipped: diversity {data.get('diversity', 0.0):.3f} below min_diversity")
        return "\n".join(lines)
    w0, w1, w2 = 18, 9, 44
    lines.append(f"{'stage':<{w0}} {'count':>{w1}}  {'what':<{w2}} {'time':>8}")
    lines.append("-" * (w0 + w1 + w2 + 12))
    for stage, key, tkey, what in _ROWS:
        if key not in data:  # a count this version of SleepReport does not carry
            continue
        value = data[key]
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        t = f"{elapsed[tkey]:.3f}s" if tkey and tkey in elapsed else ""
        lines.append(f"{stage:<{w0}} {shown:>{w1}}  {what:<{w2}} {t:>8}")
    lines.append("-" * (w0 + w1 + w2 + 12))
    if "total" in elapsed:
        lines.append(f"{'total':<{w0}} {'':>{w1}}  {'':<{w2}} {elapsed['total']:.3f}s")
    return "\n".join(lines)
