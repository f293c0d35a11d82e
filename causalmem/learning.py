"""Learning rules (SPEC §5, §6 stage 3): Q-values, Hebbian co-occurrence, half-life decay.

Pure functions of plain values or numpy arrays; the few SQL statements they need live in
the store backend (``store.base.StoreBackend``).

Decay bookkeeping: an edge's age at a sleep is ``now − max(discovered_at, last_sleep_at)``,
where ``last_sleep_at`` is the time of the previous committed sleep cycle (kept in the store's
``meta`` table under ``'last_sleep_at'``). A second sleep therefore decays only the time elapsed
since the first one; no per-edge column is needed. Hebbian pairs idle for
``now − max(updated_at, last_sleep_at)``.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .config import Config
from .store.base import StoreBackend

__all__ = [
    "bellman", "apply_feedback", "hebbian_credit", "learned_bonus", "hebbian_pairs", "next_hebbian_weight",
    "MAX_HEBBIAN_NIDS",
    "HALF_LIFE_DAYS", "DAILY_FACTOR", "ACCESS_BOOST", "ACCESS_CAP", "ACCESS_WINDOW_DAYS",
    "RETIRE_BELOW", "RETIRE_BELOW_PROTECTED", "NEVER_RETIRED_SOURCES",
    "half_life_days", "decay_factor", "decayed_confidence", "should_retire",
    "decay_confidences", "retire_mask", "hebbian_faded_weight",
]

DAY = 86400.0

# -------------------------------------------------------------------------------- Q-values


def bellman(q: float, reward: float, max_next_q: float, *, alpha: float = 0.1, gamma: float = 0.9) -> float:
    """One MemRL update ``Q + α·(r + γ·max_next − Q)``, clamped to [0, 1]."""
    value = q + alpha * (reward + gamma * max_next_q - q)
    if math.isnan(value):
        raise ValueError(f"Bellman update produced NaN from q={q!r}, reward={reward!r}, max_next_q={max_next_q!r}")
    return min(1.0, max(0.0, value))


def bellman_vec(q: np.ndarray, reward: np.ndarray | float, max_next_q: np.ndarray, *, alpha: float = 0.1,
                gamma: float = 0.9) -> np.ndarray:
    """Vectorised ``bellman``."""
    return np.clip(q + alpha * (reward + gamma * max_next_q - q), 0.0, 1.0)


def apply_feedback(store: StoreBackend, nid: int, reward: float, config: Config) -> float:
    """Update and persist the Q-value of chunk ``nid`` for ``reward``; returns the new Q.

    Successors are the destinations of the chunk's valid out-edges whose chunks are not deleted
    (max Q of none = 0). Runs inside the caller's transaction.
    """
    q = store.q_value_of(nid)
    max_next = store.max_successor_q(nid)
    new_q = bellman(q, float(reward), 0.0 if max_next is None else max_next,
                    alpha=config.q_alpha, gamma=config.q_gamma)
    store.set_q_value(nid, new_q)
    return new_q


# -------------------------------------------------------------------------------- Hebbian

# A search with a huge top_k would otherwise credit ~k²/2 pairs; ``hebbian_credit`` takes only the
# first MAX_HEBBIAN_NIDS of the nids it is given.
MAX_HEBBIAN_NIDS = 64


def hebbian_pairs(nids: Sequence[int], top: int) -> list[tuple[int, int]]:
    """The pairs (a < b) one search credits: every pair among its ``top`` best distinct results.

    Only the best few hits plausibly belong together: pairing a whole top-10 list links an answer
    to the nine non-answers ranked after it, and on LoCoMo-dev (one store, questions asked in a
    row) that cost ~0.05 recall@10. ``top`` <= 1 credits nothing."""
    uniq = list(dict.fromkeys(int(n) for n in nids))[:max(0, min(int(top), MAX_HEBBIAN_NIDS))]
    srt = sorted(uniq)
    return [(srt[i], srt[j]) for i in range(len(srt)) for j in range(i + 1, len(srt))]


def next_hebbian_weight(weight: float | None, config: Config) -> float:
    """Weight of a pair after one more credit: ``hebbian_start`` when new (``None``), else
    ``+hebbian_step`` up to ``hebbian_cap``."""
    if weight is None:
        return min(config.hebbian_cap, config.hebbian_start)
    return min(config.hebbian_cap, max(weight, weight + config.hebbian_step))


def hebbian_credit(store: StoreBackend, nids: Sequence[int], now: float,
                   config: Config) -> list[tuple[int, int, float, bool]]:
    """Credit every unordered pair of ``nids`` (the best hits of one search, in order).

    A new pair starts at ``hebbian_start``; a known pair gains ``hebbian_step`` up to
    ``hebbian_cap``. Persisted in ``cooccurrence`` (a < b). Returns ``(a, b, weight, is_new)``.
    """
    pairs = hebbian_pairs(nids, MAX_HEBBIAN_NIDS)
    if not pairs:
        return []
    existing = store.cooccurrence_weights(sorted({n for pair in pairs for n in pair}))
    out: list[tuple[int, int, float, bool]] = []
    rows = []
    for a, b in pairs:
        w = existing.get((a, b))
        nw = next_hebbian_weight(w, config)
        out.append((a, b, nw, w is None))
        rows.append((a, b, nw, now))
    store.upsert_cooccurrence(rows)
    return out


def learned_bonus(pairs: dict[tuple[int, int], float], seeds: dict[int, float], candidates: np.ndarray, *,
                  scale: float, coefficient: float, degree_of: dict[int, float] | None = None) -> np.ndarray:
    """What learned links add to ``candidates`` when they only re-rank (``Config.hebbian_rerank``).

    A candidate ``c`` gains ``scale x sum over seeds s joined to c by a learned pair of
    energy(s) x coefficient x weight(s, c) / sqrt(degree factor of s x that of c)``: one hop, from
    the query's seeds only, and only to the candidates given (a learned link never brings a chunk
    in). ``pairs`` maps ``(a < b)`` to the pair's weight; ``degree_of`` holds each node's factor
    (>= 1, the retrieval's degree normalisation), 1 when absent. Returns one float64 per candidate."""
    out = np.zeros(len(candidates), dtype=np.float64)
    if not pairs or not seeds or not len(candidates):
        return out
    pos = {int(n): k for k, n in enumerate(candidates.tolist())}
    deg = degree_of or {}
    for (a, b), w in pairs.items():
        if w <= 0:
            continue
        for s, c in ((a, b), (b, a)):
            e = seeds.get(s)
            k = pos.get(c)
            if e is not None and k is not None and e > 0:
                out[k] += scale * e * coefficient * w / math.sqrt(deg.get(s, 1.0) * deg.get(c, 1.0))
    return out


def hebbian_faded_weight(weight, idle_days, *, fade: float = 0.99):
    """``w · fade^idle_days`` (scalar or array); idle time never negative."""
    return weight * np.power(fade, np.maximum(idle_days, 0.0))


# -------------------------------------------------------------------------------- edge decay

HALF_LIFE_DAYS = {"user_feedback": 90.0, "llm_inferred": 90.0, "temporal": 7.0,
                  "manual": 90.0, "cli": 90.0, "mcp": 90.0}  # hand-recorded: as llm_inferred
DAILY_FACTOR = 0.99  # rule and every other source
ACCESS_WINDOW_DAYS = 7.0
ACCESS_BOOST = 0.05
ACCESS_CAP = 0.95
RETIRE_BELOW = 0.2
RETIRE_BELOW_PROTECTED = 0.1
NEVER_RETIRED_SOURCES = ("user_feedback",)


def half_life_days(source: str | None) -> float | None:
    """Half-life of an edge learned from ``source``; ``None`` = multiplicative 0.99 per day."""
    return HALF_LIFE_DAYS.get(source or "")


def decay_factor(source: str | None, age_days: float, *, protected: bool = False) -> float:
    """Multiplier applied to the confidence of an edge of ``source`` aged ``age_days``.

    Protected (replay) edges age at half speed."""
    age = max(0.0, float(age_days)) * (0.5 if protected else 1.0)
    hl = half_life_days(source)
    if hl is None:
        return DAILY_FACTOR ** age
    return 0.5 ** (age / hl)


def decayed_confidence(confidence: float, source: str | None, age_days: float, *, protected: bool = False,
                       accessed: bool = False) -> float:
    """Confidence after one sleep: half-life decay, then +0.05 if accessed within 7 days (cap 0.95;
    the boost never lowers a confidence already above the cap)."""
    c = float(confidence) * decay_factor(source, age_days, protected=protected)
    if accessed:
        c = max(c, min(ACCESS_CAP, c + ACCESS_BOOST))
    return c


def should_retire(confidence: float, source: str | None, *, protected: bool = False) -> bool:
    """Below 0.2 (0.1 if protected) an edge is retired; user_feedback edges never are."""
    if source in NEVER_RETIRED_SOURCES:
        return False
    return float(confidence) < (RETIRE_BELOW_PROTECTED if protected else RETIRE_BELOW)


def decay_confidences(confidence: np.ndarray, half_life: np.ndarray, age_days: np.ndarray, protected: np.ndarray,
                      accessed: np.ndarray) -> np.ndarray:
    """Vectorised ``decayed_confidence``; ``half_life`` is NaN for the 0.99-per-day sources."""
    age = np.maximum(age_days, 0.0) * np.where(protected, 0.5, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        by_half_life = np.power(0.5, age / half_life)
    factor = np.where(np.isnan(half_life), np.power(DAILY_FACTOR, age), by_half_life)
    c = confidence * factor
    boosted = np.maximum(c, np.minimum(ACCESS_CAP, c + ACCESS_BOOST))
    return np.where(accessed, boosted, c)


def retire_mask(confidence: np.ndarray, never_retired: np.ndarray, protected: np.ndarray) -> np.ndarray:
    """Vectorised ``should_retire``."""
    floor = np.where(protected, RETIRE_BELOW_PROTECTED, RETIRE_BELOW)
    return (confidence < floor) & ~never_retired
