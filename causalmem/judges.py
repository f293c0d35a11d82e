"""Judges (does a newer belief supersede an older one? SPEC §6 stage 1.7) and distillers
(conversation → facts, lessons, causal pairs; SPEC §7).

Judge protocol
--------------
A judge is any object with::

    decide(old: EdgeInfo, new: EdgeInfo, *, decision_text: str, old_outcome_text: str,
           new_outcome_text: str) -> Verdict

``old`` and ``new`` describe two valid excitatory edges (caused/enabled) that leave the same
decision chunk towards different outcomes, ``new`` recorded later. ``Verdict.supersedes`` says
whether the newer outcome replaces the older belief; ``reasoning`` is kept for the log. A judge
signals an unusable answer by raising ``causalmem.errors.LLMError``; the sleep stage then keeps
the old edge and counts a judge failure. Optionally a judge may offer
``might_supersede(old_polarity, new_polarity) -> bool`` as a cheap pre-filter (the rule judge
does), so that sleep only asks it about plausible pairs, and ``remember_negative`` (default
True): whether a "keep" verdict is remembered so the pair is not asked again next cycle.

Distiller protocol
------------------
``distill(turns: list[{"speaker", "text"}]) -> list[DistilledItem]``; ``Memory.add(...,
infer=True)`` stores the items (facts and lessons as chunks, causal items as
decision→outcome edges of source ``distill``).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, runtime_checkable

from .errors import LLMError
from .llm import DEFAULT_MAX_RESPONSE_BYTES, ChatClient, extract_json

log = logging.getLogger("causalmem")

__all__ = [
    "EdgeInfo", "Verdict", "Judge", "RuleJudge", "LLMJudge",
    "DistilledItem", "Distillation", "Distiller", "LLMDistiller", "SUPERSEDING_SUBTYPES",
    "parse_distilled", "parse_verdict", "validate_distilled", "MAX_DISTILLED_ITEMS",
]

SUPERSEDING_SUBTYPES = ("invalidates", "supersedes", "contradicts")


@dataclass(frozen=True)
class EdgeInfo:
    """What a judge sees of one edge (plain values, no store access)."""

    id: str
    relation: str
    confidence: float
    source: str
    polarity: str | None
    task_tag: str | None = None
    discovered_at: float | None = None
    subtype: str | None = None
    decision_text: str = ""
    outcome_text: str = ""


@dataclass(frozen=True)
class Verdict:
    supersedes: bool
    reasoning: str = ""


@runtime_checkable
class Judge(Protocol):
    def decide(self, old: EdgeInfo, new: EdgeInfo, *, decision_text: str, old_outcome_text: str,
               new_outcome_text: str) -> Verdict: ...


class RuleJudge:
    """Default judge, no LLM.

    The newer edge supersedes the older one when (a) it is an explicit meta edge of subtype
    ``invalidates`` / ``supersedes`` / ``contradicts`` (its source is the new belief), or (b) for
    the same decision, the older outcome was a failure (polarity negative) and the newer one a
    success (polarity positive). Everything else keeps the old edge.
    """

    remember_negative = False  # cheap to re-evaluate; no need to store "keep" verdicts

    def __repr__(self) -> str:
        return "RuleJudge()"

    @staticmethod
    def might_supersede(old_polarity: str | None, new_polarity: str | None) -> bool:
        return old_polarity == "negative" and new_polarity == "positive"

    def decide(self, old: EdgeInfo, new: EdgeInfo, *, decision_text: str = "", old_outcome_text: str = "",
               new_outcome_text: str = "") -> Verdict:
        if new.subtype in SUPERSEDING_SUBTYPES:
            return Verdict(True, f"explicit {new.subtype} edge")
        if self.might_supersede(old.polarity, new.polarity):
            return Verdict(True, "rule: an earlier failure was followed by a success for the same decision")
        return Verdict(False, f"rule: {old.polarity or 'unknown'} → {new.polarity or 'unknown'} is not an update")


_JUDGE_SYSTEM = (
    "You maintain the long-term memory of an AI agent. The same decision was recorded twice with "
    "different outcomes. Decide whether the NEWER record supersedes (replaces, corrects or makes "
    "obsolete) the OLDER belief, or whether both remain true. Answer with JSON only: "
    '{"supersedes": true|false, "reasoning": "<one sentence>"}'
)


MAX_REASONING_CHARS = 1000


def _llm_kwargs(timeout: float, retries: int, backoff: float, attempt_timeout: float | None,
                max_response_bytes: int) -> dict:
    return {"timeout": timeout, "retries": retries, "backoff": backoff, "attempt_timeout": attempt_timeout,
            "max_response_bytes": max_response_bytes}


class LLMJudge:
    """Ask any OpenAI-compatible ``/chat/completions`` endpoint (temperature 0, JSON answer).

    ``base_url``, ``model`` and ``api_key`` default to ``CAUSALMEM_LLM_BASE_URL``,
    ``CAUSALMEM_LLM_MODEL`` and ``CAUSALMEM_LLM_API_KEY``; no base URL → ``ConfigurationError``.
    A failed call (deadline, HTTP error after retries, refused redirect, oversize or too deeply
    nested answer; see ``causalmem.llm``) or an answer without a boolean ``supersedes`` raises
    ``LLMError``. ``timeout`` bounds one ``decide`` call, retries included.
    """

    remember_negative = True

    def __init__(self, base_url: str | None = None, model: str | None = None, api_key: str | None = None, *,
                 timeout: float = 10.0, retries: int = 2, backoff: float = 0.5,
                 attempt_timeout: float | None = None,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> None:
        self.client = ChatClient(base_url, model, api_key,
                                 **_llm_kwargs(timeout, retries, backoff, attempt_timeout, max_response_bytes))

    @classmethod
    def from_env(cls, **kwargs: Any) -> "LLMJudge":
        """Configure from ``CAUSALMEM_LLM_*`` environment variables."""
        return cls(None, None, None, **kwargs)

    def __repr__(self) -> str:
        return f"LLMJudge({self.client.base_url!r}, model={self.client.model!r})"

    def decide(self, old: EdgeInfo, new: EdgeInfo, *, decision_text: str, old_outcome_text: str,
               new_outcome_text: str, timeout: float | None = None) -> Verdict:
        """``timeout`` (optional) shortens this call's deadline, e.g. to what is left of sleep's budget."""
        user = json.dumps({
            "decision": decision_text,
            "older": {"outcome": old_outcome_text, "relation": old.relation, "polarity": old.polarity,
                      "task": old.task_tag, "recorded_at": old.discovered_at},
            "newer": {"outcome": new_outcome_text, "relation": new.relation, "polarity": new.polarity,
                      "task": new.task_tag, "recorded_at": new.discovered_at, "kind": new.subtype},
        }, ensure_ascii=False)
        content = self.client.chat([{"role": "system", "content": _JUDGE_SYSTEM},
                                    {"role": "user", "content": user}], temperature=0.0, timeout=timeout)
        return parse_verdict(content)


def parse_verdict(content: str) -> Verdict:
    """``{"supersedes": bool, "reasoning": str}`` from an LLM answer; ``LLMError`` if unusable."""
    try:
        value = extract_json(content)
    except ValueError as exc:
        raise LLMError(f"judge answer is not JSON: {exc}") from None
    if not isinstance(value, Mapping) or "supersedes" not in value:
        raise LLMError(f"judge answer lacks a 'supersedes' field: {content[:120]!r}")
    sup = value["supersedes"]
    if isinstance(sup, str) and sup.strip().lower() in ("true", "false", "yes", "no"):
        sup = sup.strip().lower() in ("true", "yes")
    if not isinstance(sup, bool):
        raise LLMError(f"judge answer 'supersedes' is not a boolean: {sup!r}")
    reasoning = value.get("reasoning", "")
    if not isinstance(reasoning, str):
        reasoning = json.dumps(reasoning, ensure_ascii=False)[:MAX_REASONING_CHARS]
    return Verdict(sup, _utf8(reasoning)[:MAX_REASONING_CHARS])


def _utf8(text: str) -> str:
    """Text that SQLite can store: lone surrogates (legal JSON escapes) become '?'."""
    return text.encode("utf-8", "replace").decode("utf-8")


# ---------------------------------------------------------------------------- distillers

DISTILLED_KINDS = ("fact", "lesson", "causal")


@dataclass(frozen=True)
class DistilledItem:
    """One thing worth remembering from a conversation.

    For ``kind == "causal"``, ``decision`` is the cause and ``text`` the outcome; ``relation``
    is a relation name (default caused) and ``supersedes`` optionally names an older belief.
    """

    kind: str
    text: str
    decision: str | None = None
    relation: str | None = None
    supersedes: str | None = None
    task_tag: str | None = None


@runtime_checkable
class Distiller(Protocol):
    def distill(self, turns: list[dict]) -> list[DistilledItem]: ...


_DISTILL_SYSTEM = (
    "Extract durable memories from the conversation. Return JSON only: a list of items, each "
    '{"kind": "fact"|"lesson"|"causal", "text": str, "decision": str|null, "relation": '
    '"caused"|"enabled"|"prevented"|null, "supersedes": str|null, "task_tag": str|null}. '
    "For kind causal, decision is what was done and text is what happened because of it. "
    "Lessons are generalisable advice; facts are stable statements about people or systems."
)


MAX_DISTILLED_ITEMS = 50  # per answer; the rest is skipped and reported
MAX_ITEM_CHARS = 4000  # per text field of one item


class Distillation(list):
    """What one distiller answer yields: the valid items (it *is* that list) and ``skipped``,
    one human-readable reason per item that was left out (bad fields, over the cap)."""

    def __init__(self, items: Any = (), skipped: Any = ()) -> None:
        super().__init__(items)
        self.skipped: list[str] = list(skipped)

    def __repr__(self) -> str:
        return f"Distillation({list.__repr__(self)}, skipped={self.skipped!r})"


class LLMDistiller:
    """Distil conversation turns with an OpenAI-compatible endpoint (same client as ``LLMJudge``).

    Tolerant of fenced or slightly broken JSON (trailing commas, prose around one JSON value, a
    ``{"items": [...]}`` wrapper). Items are validated one by one: a bad one is skipped, logged
    and listed in the result's ``skipped``; at most ``max_items`` items are kept per answer. A
    failed call or an answer with no JSON list at all raises ``LLMError``.
    """

    def __init__(self, base_url: str | None = None, model: str | None = None, api_key: str | None = None, *,
                 timeout: float = 30.0, retries: int = 2, backoff: float = 0.5,
                 attempt_timeout: float | None = None, max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                 max_items: int = MAX_DISTILLED_ITEMS) -> None:
        self.client = ChatClient(base_url, model, api_key,
                                 **_llm_kwargs(timeout, retries, backoff, attempt_timeout, max_response_bytes))
        self.max_items = _max_items(max_items)

    @classmethod
    def from_env(cls, **kwargs: Any) -> "LLMDistiller":
        return cls(None, None, None, **kwargs)

    def __repr__(self) -> str:
        return f"LLMDistiller({self.client.base_url!r}, model={self.client.model!r})"

    def distill(self, turns: list[dict]) -> Distillation:
        lines = []
        for t in turns:
            speaker = t.get("speaker") if isinstance(t, Mapping) else None
            text = t.get("text") if isinstance(t, Mapping) else str(t)
            lines.append(f"{speaker}: {text}" if speaker else str(text))
        if not lines:
            return Distillation()
        content = self.client.chat([{"role": "system", "content": _DISTILL_SYSTEM},
                                    {"role": "user", "content": "\n".join(lines)}], temperature=0.0)
        return parse_distilled(content, max_items=self.max_items)


def _max_items(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_items must be an integer >= 1, got {value!r}")
    return value


def parse_distilled(content: str, *, max_items: int = MAX_DISTILLED_ITEMS) -> Distillation:
    """Items from an LLM answer; ``LLMError`` when no JSON list can be found at all."""
    try:
        value = extract_json(content)
    except ValueError as exc:
        raise LLMError(f"distiller answer is not JSON: {exc}") from None
    if isinstance(value, Mapping):
        for key in ("items", "memories", "results", "data"):
            if isinstance(value.get(key), list):
                value = value[key]
                break
        else:
            value = [value] if "kind" in value else None
    if not isinstance(value, list):
        raise LLMError(f"distiller answer is not a list of items: {content[:120]!r}")
    return validate_distilled(value, max_items=max_items)


def validate_distilled(raw_items: Any, *, max_items: int = MAX_DISTILLED_ITEMS) -> Distillation:
    """Check items one by one (``DistilledItem`` objects or JSON objects); keep at most ``max_items``.

    Never raises for a bad item: it is skipped, logged and listed in ``skipped``. ``raw_items``
    that is not a list/tuple at all is one skipped "item".
    """
    max_items = _max_items(max_items)
    out = Distillation()
    if isinstance(raw_items, Distillation):
        out.skipped.extend(raw_items.skipped)
    if not isinstance(raw_items, (list, tuple)):
        out.skipped.append(f"distiller returned {type(raw_items).__name__}, not a list of items")
        log.warning("causalmem: %s", out.skipped[-1])
        return out
    for i, raw in enumerate(raw_items):
        if len(out) >= max_items:
            rest = len(raw_items) - i
            out.skipped.append(f"{rest} item(s) beyond max_items={max_items}")
            log.warning("causalmem: distiller answer: %s dropped", out.skipped[-1])
            break
        item = _distilled_item(raw)
        if isinstance(item, str):
            out.skipped.append(f"item {i}: {item}")
            log.warning("causalmem: distiller item %d skipped (%s): %.200r", i, item, raw)
            continue
        out.append(item)
    return out


def _opt_str(raw: Mapping, key: str) -> tuple[bool, str | None]:
    v = raw.get(key)
    if v is None:
        return True, None
    if isinstance(v, str):
        return True, (v.strip() or None)
    return False, None


def _text_problem(name: str, value: str) -> str | None:
    if len(value) > MAX_ITEM_CHARS:
        return f"{name} longer than {MAX_ITEM_CHARS} characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return f"{name} is not valid Unicode text (lone surrogate)"
    if "\x00" in value:
        return f"{name} contains a NUL character"
    return None


def _distilled_item(raw: Any) -> DistilledItem | str:
    """The item, or a short reason why it is not one."""
    if isinstance(raw, DistilledItem):
        raw = {"kind": raw.kind, "text": raw.text, "decision": raw.decision, "relation": raw.relation,
               "supersedes": raw.supersedes, "task_tag": raw.task_tag}
    if not isinstance(raw, Mapping):
        return f"not an object ({type(raw).__name__})"
    kind = raw.get("kind")
    text = raw.get("text")
    if not isinstance(kind, str) or kind.strip().lower() not in DISTILLED_KINDS:
        return f"kind must be one of {', '.join(DISTILLED_KINDS)}"
    if not isinstance(text, str) or not text.strip():
        return "text must be a non-empty string"
    kind = kind.strip().lower()
    fields: dict[str, str | None] = {}
    for key in ("decision", "relation", "supersedes", "task_tag"):
        ok, v = _opt_str(raw, key)
        if not ok:
            return f"{key} must be a string or null"
        fields[key] = v
    for key, value in (("text", text), *((k, v) for k, v in fields.items() if v is not None)):
        problem = _text_problem(key, value)
        if problem:
            return problem
    if kind == "causal":
        if not fields["decision"]:
            return "a causal item needs a decision"
        if fields["decision"] == text.strip():
            return "decision and outcome are the same text"
        if fields["relation"] is not None:
            from .types import Relation

            try:
                Relation.parse(fields["relation"])
            except ValueError:
                return f"unknown relation {fields['relation'][:40]!r}"
    return DistilledItem(kind=kind, text=text.strip(), **fields)
