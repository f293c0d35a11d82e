"""Sleep: one consolidation cycle over the whole store (SPEC §6), in stages.

Modules: ``cycle`` (the transaction and stages 0-4), ``supersession`` (stage 1.7's pairs and
judge), ``transfer`` (stage 4b), ``mining`` (token diversity, Jaccard pair mining for stages 2 and 4), ``report``
(``SleepReport``, progress bar, CLI table).

Stages (all counted in the ``SleepReport``):

0    novelty gate — token diversity of the 64 newest chunks; below ``min_diversity`` the cycle is
     skipped and nothing is written. Diversity = Shannon entropy of the token distribution
     divided by log2(number of tokens): 1.0 when no token repeats, → 0 when the same few
     tokens fill every chunk.
1    reactivation — every valid edge scores ``confidence + 0.5·failure outcome + 0.3·user_feedback
     + 0.2·contradicted + 0.2·accessed within 7 d``; score ≥ 1.0 = replay-protected.
     *contradicted*: the decision also has an outcome of the opposite polarity, an endpoint is the
     target of a contradicts/invalidates/supersedes meta edge, or the edge was annotated as
     superseded. *accessed*: both endpoint chunks' ``last_accessed_at`` within 7 d.
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
4b   structural transfer (``transfer``) — decisions of different tasks in one scope whose causal
     out-edges have the same shape (relation × outcome polarity, root or chain link) get a meta
     ``similar_to`` edge, best pattern overlap first, at most ``Config.transfer_links`` per decision,
     so spreading from one task reaches the other task's lesson even when no word is shared.

The whole cycle is one transaction: killed mid-way, the store is as before; ``dry_run`` runs
everything and rolls back. A judge that is not cheap (no ``might_supersede`` pre-filter, e.g. an
LLM) is consulted *before* the write transaction opens and, through ``Memory.sleep``, with the
``Memory`` lock released (``plan_slow_judging`` under the lock, ``ask_judge`` without it), so slow
HTTP calls never hold the write lock nor block readers; at most ``MAX_JUDGE_CALLS`` pairs per cycle
and at most ``llm_budget`` seconds of asking (``Config.sleep_llm_budget``), the rest waits for the
next cycle (``judge_deferred``). Its verdicts are applied inside the transaction only where both
edges are still as they were (old valid and unannotated, new valid); a stale verdict is dropped
and the pair asked again next cycle. Pattern mining is
incremental — only decisions new since the last sleep are compared (against all decisions) — and
bounded: at most ``MAX_PATTERN_CANDIDATES`` candidate pairs per pass, rarest shared words first.

Bulk work is vectorised: one read per table into numpy arrays, ``executemany`` of only the
rows that changed (``benchmarks/bench_sleep.py``: 100k edges ≈ 2 s, 1M edges ≈ 24 s on 2 cores).
"""
from __future__ import annotations

from .cycle import (ACTIONS, LAST_REPORT_KEY, LAST_SLEEP_KEY, MAX_JUDGE_CALLS, check_sleep_args, last_report,
                    plan_slow_judging, sleep, sleep_memory)
from .mining import MAX_PATTERN_CANDIDATES, MAX_PATTERN_GROUP, PATTERN_JACCARD, jaccard_pairs, token_diversity
from .report import Progress, format_report
from .supersession import JudgePlan, ask_judge

_Progress = Progress  # the name tests and earlier code use

__all__ = ["sleep", "sleep_memory", "last_report", "check_sleep_args", "plan_slow_judging", "ask_judge", "JudgePlan",
           "format_report",
           "token_diversity", "jaccard_pairs", "ACTIONS", "LAST_SLEEP_KEY",
           "LAST_REPORT_KEY", "MAX_JUDGE_CALLS", "PATTERN_JACCARD", "MAX_PATTERN_GROUP", "MAX_PATTERN_CANDIDATES",
           "_Progress"]
