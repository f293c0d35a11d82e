"""Value types shared by every layer: relations, result dataclasses, time helpers.

Everything here is plain data (no SQL, no arrays), so any layer may import it.
"""
from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping


class Relation(str, Enum):
    """Typed causal relations and their spread coefficients (SPEC §1).

    ``Relation.parse`` also accepts the meta sub-kinds (``similar_to``, ``repeated``,
    ``refines``, ``contradicts``, ``invalidates``) and maps them to ``META``.
    """

    CAUSED = "caused"
    FACT = "fact"
    META = "meta"
    ENABLED = "enabled"
    TEMPORAL = "temporal"
    CO_OCCURRENCE = "co_occurrence"
    PREVENTED = "prevented"
    NO_EFFECT = "no_effect"

    @property
    def coefficient(self) -> float:
        return _COEFFICIENTS[self]

    @property
    def inhibitory(self) -> bool:
        return self is Relation.PREVENTED

    @property
    def code(self) -> int:
        """Small integer code used in arrays and the store."""
        return _CODES[self]

    @classmethod
    def from_code(cls, code: int) -> "Relation":
        return _BY_CODE[int(code)]

    @classmethod
    def parse(cls, value: "str | Relation") -> "Relation":
        """Return the relation named ``value``; unknown names raise ``ValueError``."""
        if isinstance(value, Relation):
            return value
        if not isinstance(value, str):
            raise TypeError(
                f"relation must be a string, got {type(value).__name__}; valid: {valid_relation_names()}"
            )
        key = value.strip().lower()
        if key in _BY_VALUE:
            return _BY_VALUE[key]
        if key in META_KINDS:
            return Relation.META
        raise ValueError(
            f"unknown relation {value!r}; valid relations: {valid_relation_names()}"
        )

    @classmethod
    def subtype_of(cls, value: "str | Relation") -> str | None:
        """The meta sub-kind named by ``value`` (``similar_to`` …), else ``None``."""
        if isinstance(value, str) and value.strip().lower() in META_KINDS:
            return value.strip().lower()
        return None


META_KINDS = ("similar_to", "repeated", "refines", "contradicts", "invalidates", "supersedes")

_COEFFICIENTS = {
    Relation.CAUSED: 1.0,
    Relation.FACT: 0.8,
    Relation.META: 0.6,
    Relation.ENABLED: 0.5,
    Relation.TEMPORAL: 0.2,
    Relation.CO_OCCURRENCE: 1.0,
    Relation.PREVENTED: -0.3,
    Relation.NO_EFFECT: 0.0,
}
_CODES = {r: i for i, r in enumerate(Relation)}
_BY_CODE = {i: r for r, i in _CODES.items()}
_BY_VALUE = {r.value: r for r in Relation}


def valid_relation_names() -> str:
    return ", ".join([r.value for r in Relation] + list(META_KINDS))


CHUNK_KINDS = ("decision", "outcome", "fact", "turn", "lesson", "event", "pattern")
SOURCES_CONFIDENCE = {
    "temporal": 0.4,
    "rule": 0.7,
    "llm_inferred": 0.6,
    "user_feedback": 0.95,
    "distill": 0.6,
    # recorded by hand: Memory.record_decision / record_many, `causalmem record`, MCP remember_decision
    "manual": 0.6,
    "cli": 0.6,
    "mcp": 0.6,
}
POLARITIES = ("positive", "negative", "mixed", "neutral")


@dataclass(frozen=True)
class ChunkFields:
    """What a chunk is: the fields the public ``Chunk`` and the store's ``ChunkRow`` share."""

    id: str
    text: str
    kind: str
    q_value: float
    importance: float
    created_at: float
    event_time: float | None
    user_id: str | None
    agent_id: str | None
    run_id: str | None
    session_id: str | None


@dataclass(frozen=True)
class Chunk(ChunkFields):
    metadata: Mapping[str, Any] = field(default_factory=dict)
    access_count: int = 0
    last_accessed_at: float | None = None
    valid: bool = True


@dataclass(frozen=True)
class Edge:
    id: str
    src: str
    dst: str
    relation: str
    confidence: float
    source: str
    polarity: str | None
    task_tag: str | None
    event_time: float | None
    valid: bool
    superseded_by: str | None
    discovered_at: float | None = None
    subtype: str | None = None
    invalid_reason: str | None = None
    #: how ``polarity`` was obtained: ``given`` by the caller, ``guessed`` from the lexicon, ``unknown``
    polarity_origin: str | None = None
    #: how many times this (decision, outcome, relation) was recorded in its scope
    evidence: int = 1


def new_edge(id: str, src: str, dst: str, relation: str, confidence: float, source: str, polarity: str | None,
             task_tag: str | None, event_time: float | None, valid: bool, superseded_by: str | None,
             discovered_at: float | None, subtype: str | None, invalid_reason: str | None,
             polarity_origin: str | None, evidence: int) -> Edge:
    """An ``Edge`` from values the store already holds, every field given: the frozen dataclass's
    ``__init__`` sets its 16 fields one ``object.__setattr__`` at a time, which dominates a
    thousand-edge ``record_many``; this fills the instance dict at once (same object, equal)."""
    edge = object.__new__(Edge)
    object.__setattr__(edge, "__dict__", {
        "id": id, "src": src, "dst": dst, "relation": relation, "confidence": confidence, "source": source,
        "polarity": polarity, "task_tag": task_tag, "event_time": event_time, "valid": valid,
        "superseded_by": superseded_by, "discovered_at": discovered_at, "subtype": subtype,
        "invalid_reason": invalid_reason, "polarity_origin": polarity_origin, "evidence": evidence})
    return edge


@dataclass(frozen=True)
class Activation:
    """One activated node of a spread: ``energy`` < 0 is a warning (inhibition)."""

    node_id: Any
    text: str | None
    energy: float
    superseded_by: str | None = None

    @property
    def is_warning(self) -> bool:
        return self.energy < 0


@dataclass(frozen=True)
class Hit:
    """One result of ``Memory.search``."""

    id: str
    text: str
    score: float
    kind: str
    created_at: float
    event_time: float | None
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    session_id: str | None = None
    superseded_by: str | None = None
    signals: Mapping[str, Any] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PredictedOutcome:
    node_id: str
    text: str
    energy: float
    polarity: str | None
    chain: tuple[str, ...]
    chain_texts: tuple[str, ...]
    chain_confidence: float
    relations: tuple[str, ...]
    superseded_by: str | None = None


@dataclass(frozen=True)
class InterventionReport:
    action: str
    label: str  # DANGER | SAFE | WARNING | UNKNOWN
    outcomes: tuple[PredictedOutcome, ...]
    seeds: tuple[str, ...] = ()
    has_precedent: bool = False
    summary: str = ""

    def __bool__(self) -> bool:  # an empty report is falsy: no precedent
        return bool(self.outcomes)


@dataclass(frozen=True)
class SleepReport:
    skipped_low_diversity: bool = False
    diversity: float = 0.0
    reactivated: int = 0
    protected: int = 0
    q_updates: int = 0
    superseded: int = 0
    annotated: int = 0
    judge_failures: int = 0
    judge_deferred: int = 0  # supersession pairs left for the next sleep (call cap, LLM budget, edges changed)
    merged: int = 0
    patterns: int = 0
    decayed: int = 0
    boosted: int = 0
    retired: int = 0
    rem_links: int = 0
    transfer_links: int = 0  # stage 4b: similar_to links between same-shaped decisions of different tasks
    redirects: int = 0
    hebbian_faded: int = 0
    hebbian_dropped: int = 0
    dry_run: bool = False
    elapsed: Mapping[str, float] = field(default_factory=dict)


class AddResult(list):
    """What ``Memory.add`` returns: the stored turns (it *is* that list of ``Chunk``) and how
    distillation went: ``distilled`` items stored, ``distill_skipped`` one reason per item left
    out, ``distill_error`` why the distiller gave nothing (``None`` when it answered)."""

    def __init__(self, chunks: Any = (), *, distilled: int = 0, distill_skipped: Any = (),
                 distill_error: str | None = None) -> None:
        super().__init__(chunks)
        self.distilled = distilled
        self.distill_skipped: list[str] = list(distill_skipped)
        self.distill_error = distill_error


def check_texts(texts: Any, name: str = "texts") -> list[str]:
    """A batch of texts for an encoder (every ``Embedder.encode``): a sequence of strings, never
    one string (which would encode character by character); ``TypeError`` names the bad item."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of strings, not a single {type(texts).__name__}")
    try:
        out = list(texts)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of strings, got {type(texts).__name__}") from None
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"{name}[{i}] must be a string, got {type(t).__name__}")
    return out


def to_timestamp(value: "float | int | _dt.datetime | None", *, name: str = "time") -> float | None:
    """POSIX seconds from a float or a timezone-aware ``datetime``; ``None`` passes through."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"{name} must be POSIX seconds or a timezone-aware datetime, got bool")
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
            raise ValueError(
                f"{name} must be a timezone-aware datetime (naive datetimes are ambiguous); "
                "use datetime(..., tzinfo=timezone.utc)"
            )
        return value.timestamp()
    if isinstance(value, (int, float)):
        try:
            v = float(value)
        except OverflowError:  # an int beyond float range (10**400)
            raise ValueError(f"{name} must be finite POSIX seconds, got an integer of {len(str(value))} digits") \
                from None
        if not math.isfinite(v) or abs(v) > MAX_TIMESTAMP:
            raise ValueError(f"{name} must be finite POSIX seconds within ±{MAX_TIMESTAMP:.0e}, got {value!r}")
        return v
    raise TypeError(
        f"{name} must be POSIX seconds (float) or a timezone-aware datetime, got {type(value).__name__}"
    )


#: |POSIX seconds| beyond this (about year 33,000) is not a time but a unit mistake or garbage
MAX_TIMESTAMP = 1e12
#: the plausible window of a *clock reading* (``clock()``, ``now=``): 1990-01-01 .. now + 1 year.
#: A millisecond clock (1.8e12) or an epoch-0 clock would retire or freeze everything.
CLOCK_MIN = 631_152_000.0
CLOCK_AHEAD = 366 * 86400.0


def check_clock_value(value: Any, name: str = "clock") -> float:
    """A clock reading or ``now=`` as POSIX seconds, refused outside 1990 .. wall time + 1 year."""
    import time as _time

    if isinstance(value, _dt.datetime):
        v = to_timestamp(value, name=name)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must return POSIX seconds (a float), got {type(value).__name__}")
    else:
        v = to_timestamp(value, name=name)
    assert v is not None
    hi = _time.time() + CLOCK_AHEAD
    if not CLOCK_MIN <= v <= hi:
        hint = " (milliseconds? divide by 1000)" if v > hi and CLOCK_MIN <= v / 1000.0 <= hi else ""
        raise ValueError(f"{name} gave {v!r}, outside the plausible window of POSIX seconds "
                         f"[{CLOCK_MIN:.0f} (1990-01-01), {hi:.0f} (now + 1 year)]{hint}")
    return v
