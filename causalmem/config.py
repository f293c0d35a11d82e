"""Tunable constants of the engine (SPEC §2–§6), gathered in one frozen dataclass."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping


@dataclass(frozen=True)
class SpreadParams:
    decay: float
    threshold: float
    lo: float
    hi: float
    max_steps: int
    reemit: bool
    top_k: int
    teleport: float = 0.0
    inhibit_multiplier: float = 1.0

    def as_kwargs(self) -> dict[str, Any]:
        return {
            "decay": self.decay,
            "threshold": self.threshold,
            "lo": self.lo,
            "hi": self.hi,
            "max_steps": self.max_steps,
            "reemit": self.reemit,
            "top_k": self.top_k,
            "teleport": self.teleport,
            "inhibit_multiplier": self.inhibit_multiplier,
        }


CAUSAL = SpreadParams(decay=0.7, threshold=0.1, lo=-1.0, hi=1.0, max_steps=5, reemit=True, top_k=1000)
PEDSA = SpreadParams(
    decay=0.6, threshold=0.01, lo=-2.0, hi=2.0, max_steps=2, reemit=False, top_k=100,
    teleport=0.0, inhibit_multiplier=2.0,
)
PEDSA_RETRIEVAL = replace(PEDSA, teleport=0.15)
PRESETS: Mapping[str, SpreadParams] = {"causal": CAUSAL, "pedsa": PEDSA, "pedsa_retrieval": PEDSA_RETRIEVAL}


@dataclass(frozen=True)
class Config:
    # graph lifecycle (SPEC §2)
    rebuild_writes: int = 5
    rebuild_seconds: float = 30.0
    # learning (SPEC §5)
    q_init: float = 0.5
    q_alpha: float = 0.1
    q_gamma: float = 0.9
    # a memory's Q-value scales its fused search score by (0.5 + 0.5·Q) / (0.5 + 0.5·q_init): SPEC §4's
    # seed factor, applied to the ranking too, exactly 1 for a memory whose Q never moved (a store nobody
    # gave feedback to and that never slept ranks as without it). A memory a caller rewarded ranks higher
    # for the next queries (MemRL: retrieval weighs learned utility beside similarity). A search never
    # moves Q; `feedback` does, and so does sleep's stage 1.5 (SPEC §6: r = 1 to both ends of
    # replay-protected edges: failure lessons, a session's temporal links, edges whose ends were accessed
    # within 7 days), so after a sleep those memories rank higher too, and reinforcement on / off can
    # differ then (access counts toward protection). Bounded: [0.67, 1.33] at q_init 0.5. A store written
    # at one q_init and opened with another ranks its older memories by the difference. False: Q reaches
    # ranking only through the graph seeds' energy (SPEC §4). Measured on LoCoMo-dev with an agent
    # rewarding the gold hits it used: README "Q-values rank what proved useful",
    # benchmarks/results/locomo_paired_feedback.md.
    q_rank: bool = True
    # a pair's first credit: half of SPEC §5's 0.2 (one co-retrieval is weak evidence that two memories
    # belong together; a pair seen three times reaches 0.2). See README "The learning loop".
    hebbian_start: float = 0.1
    hebbian_step: float = 0.05
    hebbian_cap: float = 1.0
    hebbian_idle_fade: float = 0.99
    hebbian_drop_below: float = 0.05
    # learned (Hebbian) links come from hits the caller confirmed (Memory.confirm); a search alone
    # writes access counts only. True: a search also credits co-retrieved pairs (the rule below:
    # hebbian_top, same session, hebbian_min_ratio ...). Opt-in: 13 such search-time rules were
    # neutral within noise on LoCoMo-dev under paired cross-validation, never shown >= off
    # (benchmarks/results/locomo_learning_rules.md); co-retrieval alone is weak evidence. With False,
    # reinforcement on = off on LoCoMo-dev exactly (no question moves: nothing is learned unless a caller
    # confirms); a simulated agent confirming the gold hits measures -0.002 R@10 / +0.0026 nDCG@10 there
    # (one question; within noise): the mechanism is not shown to help on LoCoMo's independent questions.
    hebbian_search: bool = False
    # with hebbian_search, a search credits co-occurrence pairs among its best this-many hits only
    # (0 or 1: none; SPEC §5 credits every co-retrieved pair): the third hit is more often a
    # non-answer than the first two.
    # Learned links are visible to the next search (SPEC §2), persisted with the queued reinforcement.
    hebbian_top: int = 2
    # ... and only between hits of the same session (what plausibly belongs together: pairing the best
    # hits across sessions cost LoCoMo-dev recall@10 with reinforcement on, 0.756 -> 0.707)
    hebbian_same_session: bool = True
    # how learned links reach retrieval. False: they are edges of the spreading graph (a learned
    # neighbour of a hit is pulled in even when the query did not find it). True: they only re-rank
    # candidates the query's channels (and structural edges) already found: a candidate gains what a
    # seed linked to it by a learned pair sends over one hop (learning.learned_bonus); nothing new is
    # brought in, so a link cannot add an unrelated chunk (benchmarks/results/locomo_learning_rules.md).
    hebbian_rerank: bool = False
    # credit a pair only when the cosine of its two chunks' vectors is at least this (0: no check;
    # a pair with a chunk lacking a vector is not credited when > 0): co-retrieval plus closeness
    hebbian_min_cosine: float = 0.0
    # (search-time rule, with hebbian_search) credit a pair only when the lesser hit scored at least this
    # fraction of the group's best (0: no check):
    # a second hit far below the best is more often a non-answer than a partner. At 0.7, on LoCoMo-dev
    # under paired cross-validation, reinforcement on - off is R@10 +0.001, nDCG@10 +0.0025 (the rule before,
    # with no check: -0.002 / +0.0017), all within noise; but 0.7 was chosen among 13 rules on the same
    # folds, and letting the folds choose gives +0.000 / -0.0004: neutral, not shown >= off
    # (benchmarks/results/locomo_learning_rules.md)
    hebbian_min_ratio: float = 0.7
    # re-rank mode: only the best this-many seeds send over learned links (0: all seeds)
    hebbian_rerank_seeds: int = 0
    # sleep stage 4b (consolidation/transfer.py): at most this many meta similar_to links per decision
    # between decisions of different tasks whose outcomes have the same shape (0: the stage is off).
    # Opt-in: the shape alone ("a first step that caused a failure") also links unrelated tasks on a
    # user's store ("ate the gas-station sushi" ~ "deployed without running tests"), and search_causal
    # then reaches the other task's outcomes; on CausalEval's designed analogues 2 lifts lesson
    # transfer (held-back category 16 0.05 -> 0.35, benchmarks/results/causal_eval.md)
    transfer_links: int = 0
    # spreading presets
    causal: SpreadParams = CAUSAL
    pedsa: SpreadParams = PEDSA_RETRIEVAL
    # retrieval (SPEC §4)
    rrf_k: int = 60
    lexical_weight: float = 0.18
    # speaker match (causalmem/speakers.py): a query naming a speaker favours what that speaker said,
    # candidates' scores x (1 + this); 0 = off. Measured in benchmarks/results/locomo_speaker_match.md
    speaker_match: float = 0.0
    # date match (causalmem/dates.py): a query naming a date (a day, a month, a year) favours the memories
    # whose event time falls in it (widened by ``date_slack_days`` each side), candidates' scores x (1 + this);
    # 0 = off. 16 (the default) is where the effect saturates: the candidates of the named period come
    # first, in their own order (16, 64 and 10^6 rank alike on LoCoMo dev). benchmarks/results/locomo_date_match.md
    date_match: float = 16.0
    date_slack_days: float = 0.0
    # session support (causalmem/sessions.py): a candidate whose session also holds the best hits gains,
    # x (1 + this x their summed score / (5 x the best score)), in the blend fusion (the default; rrf and hybrid
    # keep their scores); 0 = off. None (the default): 4 for a search
    # without the semantic channel (lexical + graph: +0.042 R@10 cross-validated), 0 with it (its
    # cross-validated gain there is within noise). benchmarks/results/locomo_session_support.md
    session_support: float | None = None
    max_top_k: int = 1000
    # SQLite
    busy_timeout_ms: int = 30000
    # PostgreSQL: a call naming a user_id uses views of that user's rows alone (``view_pool``), kept
    # under ``Memory(views_budget_mb=...)``; False: every call uses views of the whole database (a
    # worker's memory and open time then grow with every tenant: benchmarks/results/fleet.md)
    scoped_views: bool = True
    # sleep: wall-clock seconds one cycle may spend asking a slow (LLM) judge; the rest waits
    sleep_llm_budget: float = 120.0
    # search reinforcement (access counts, Hebbian pairs) is queued and written in batches, so a
    # search never takes the write lock: at the next write, at close, or when this many searches
    # are queued / the oldest has waited this long (then only if the lock is free right away)
    reinforce_batch: int = 64
    reinforce_seconds: float = 5.0
    reinforce_queue_max: int = 10000
    # vector index (vector_index.py): vectors kept exact until this many, then an HNSW segment
    # (None: always exact); storage type of the segment: "f32", "f16" or "i8"; a scoped search whose scope
    # holds at most ``vector_exact_scope`` segment vectors scores them all exactly (larger: HNSW candidates)
    vector_ann_min: int | None = 20_000
    vector_exact_scope: int = 2048
    vector_quantization: str = "f32"
    # what close() does with chunks this process wrote that still have no vector (embedding.py, README
    # "Who embeds the queue of a short-lived process"): "auto" — embed them here for at most 0.5 s when
    # the model is loaded, hand the rest to one detached ``causalmem embed`` per store (it embeds only
    # this session's rows and those written while it runs, then exits); "drain" — embed them here
    # before close returns (loads the model if needed; never a child process); "off" — neither: they
    # wait for the next process that stays open, ``flush()`` or ``causalmem embed``. True = "auto",
    # False = "off". The environment variable CAUSALMEM_EMBED_HANDOFF, when set, overrides it.
    embed_handoff: str | bool = "auto"

    def __post_init__(self) -> None:
        if self.rebuild_writes < 1:
            raise ValueError(f"rebuild_writes must be >= 1, got {self.rebuild_writes}")
        if self.rebuild_seconds < 0:
            raise ValueError(f"rebuild_seconds must be >= 0, got {self.rebuild_seconds}")
        if not 0.0 <= self.q_init <= 1.0:
            raise ValueError(f"q_init must be in [0, 1], got {self.q_init}")
        if isinstance(self.sleep_llm_budget, bool) or not isinstance(self.sleep_llm_budget, (int, float)) \
                or not 0 < self.sleep_llm_budget < float("inf"):
            raise ValueError(f"sleep_llm_budget must be a positive number of seconds, got {self.sleep_llm_budget!r}")
        if isinstance(self.busy_timeout_ms, bool) or not isinstance(self.busy_timeout_ms, int) \
                or not 0 <= self.busy_timeout_ms <= 600_000:
            raise ValueError(f"busy_timeout_ms must be an integer in [0, 600000], got {self.busy_timeout_ms!r}")
        if isinstance(self.hebbian_top, bool) or not isinstance(self.hebbian_top, int) or self.hebbian_top < 0:
            raise ValueError(f"hebbian_top must be an integer >= 0, got {self.hebbian_top!r}")
        if not 0.0 < self.hebbian_cap <= 1.0 or not 0.0 <= self.hebbian_start <= self.hebbian_cap \
                or not 0.0 <= self.hebbian_step <= self.hebbian_cap:
            raise ValueError(f"hebbian_start, hebbian_step, hebbian_cap must satisfy 0 <= start, step <= cap <= 1, got "
                             f"{self.hebbian_start}, step {self.hebbian_step}, cap {self.hebbian_cap}")
        if isinstance(self.hebbian_min_ratio, bool) or not isinstance(self.hebbian_min_ratio, (int, float)) \
                or not 0.0 <= self.hebbian_min_ratio <= 1.0:
            raise ValueError(f"hebbian_min_ratio must be a number in [0, 1], got {self.hebbian_min_ratio!r}")
        if isinstance(self.hebbian_rerank_seeds, bool) or not isinstance(self.hebbian_rerank_seeds, int) \
                or self.hebbian_rerank_seeds < 0:
            raise ValueError(f"hebbian_rerank_seeds must be an integer >= 0, got {self.hebbian_rerank_seeds!r}")
        if not isinstance(self.q_rank, bool):
            raise ValueError(f"q_rank must be a bool, got {self.q_rank!r}")
        if not isinstance(self.hebbian_search, bool):
            raise ValueError(f"hebbian_search must be a bool, got {self.hebbian_search!r}")
        if not isinstance(self.hebbian_rerank, bool):
            raise ValueError(f"hebbian_rerank must be a bool, got {self.hebbian_rerank!r}")
        if isinstance(self.hebbian_min_cosine, bool) or not isinstance(self.hebbian_min_cosine, (int, float)) \
                or not -1.0 <= self.hebbian_min_cosine <= 1.0:
            raise ValueError(f"hebbian_min_cosine must be a number in [-1, 1], got {self.hebbian_min_cosine!r}")
        if isinstance(self.transfer_links, bool) or not isinstance(self.transfer_links, int) \
                or not 0 <= self.transfer_links <= 64:
            raise ValueError(f"transfer_links must be an integer in [0, 64], got {self.transfer_links!r}")
        for name in ("date_match", "date_slack_days", "session_support"):
            v = getattr(self, name)
            if v is None and name == "session_support":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v < float("inf"):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if not 1 <= self.reinforce_batch <= self.reinforce_queue_max:
            raise ValueError(f"reinforce_batch must be in [1, reinforce_queue_max], got {self.reinforce_batch}")
        if self.vector_ann_min is not None and (isinstance(self.vector_ann_min, bool)
                                                or not isinstance(self.vector_ann_min, int) or self.vector_ann_min < 1):
            raise ValueError(f"vector_ann_min must be a positive int or None, got {self.vector_ann_min!r}")
        if isinstance(self.vector_exact_scope, bool) or not isinstance(self.vector_exact_scope, int) \
                or self.vector_exact_scope < 1:
            raise ValueError(f"vector_exact_scope must be a positive int, got {self.vector_exact_scope!r}")
        if self.vector_quantization not in ("f32", "f16", "i8"):
            raise ValueError(f"vector_quantization must be 'f32', 'f16' or 'i8', got {self.vector_quantization!r}")
        object.__setattr__(self, "embed_handoff", handoff_mode(self.embed_handoff, "embed_handoff"))


#: the values of ``Config.embed_handoff`` (after normalisation)
HANDOFF_MODES = ("auto", "drain", "off")


def handoff_mode(value: Any, name: str) -> str:
    """``value`` as one of ``HANDOFF_MODES`` (True -> "auto", False -> "off"); ValueError naming ``name``."""
    if value is True:
        return "auto"
    if value is False:
        return "off"
    if isinstance(value, str) and value in HANDOFF_MODES:
        return value
    raise ValueError(f"{name} must be 'auto', 'drain', 'off', True or False, got {value!r}")


def default_db() -> str:
    """The database the CLI and the MCP server open by default: $CAUSALMEM_DB, else the user data dir."""
    env = os.environ.get("CAUSALMEM_DB")
    if env:
        return env
    try:
        from platformdirs import user_data_dir

        base = Path(user_data_dir("causalmem", appauthor=False))
    except ImportError:  # pragma: no cover - platformdirs is a dependency
        base = Path.home() / ".local" / "share" / "causalmem"
    return str(base / "memory.db")
