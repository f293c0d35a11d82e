"""Write-path helpers: polarity guessing, message normalisation, argument checks (SPEC §7)."""
from __future__ import annotations

import math
import re
from typing import Any, Iterable, Mapping

from .types import POLARITIES, SOURCES_CONFIDENCE

# Bilingual keyword rule. English words match at word starts (so "failed", "crashes" count);
# Chinese keywords match as substrings.
_NEG_EN = (
    "fail", "error", "crash", "timeout", "timed out", "time out", "deadlock", "outage", "down", "broke",
    "bug", "leak", "regression", "exception", "corrupt", "lost", "loss", "slow", "panic", "reject",
    "complaint", "incident", "injection", "vulnerab", "breach", "rollback", "downtime", "hang",
    "overload", "degrad", "unavailable", "blocked", "wrong", "bad",
)
_POS_EN = (
    "fixed", "fix ", "passed", "pass ", "resolved", "success", "succeed", "works", "worked", "stable",
    "faster", "improv", "safe", "green", "caught", "smooth", "without a hitch", "saved", "recovered",
    "healthy", "better", "solved", "approved", "happy", "win", "won",
)
_NEG_ZH = ("失败", "报错", "错误", "崩溃", "超时", "宕机", "故障",
           "死锁", "泄漏", "回滚", "漏洞", "异常", "卡死", "丢失")
_POS_ZH = ("成功", "修复", "解决", "通过", "稳定", "恢复", "正常", "提升", "加快", "顺利")

def _trie_pattern(words) -> str:
    """A regex alternation factored into a prefix trie: one pass instead of one try per word."""
    trie: dict = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict) -> str:
        end = "" in node
        alts = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 and not end else "(?:" + "|".join(alts) + ")"
        return body + ("?" if end else "")

    return emit(trie)


# One scan finds both kinds: English keywords at word starts, Chinese ones anywhere (lowercased text).
_KEYWORDS = re.compile(
    r"(?P<neg>\b" + _trie_pattern(_NEG_EN) + "|" + _trie_pattern(_NEG_ZH) + r")|(?P<pos>\b"
    + _trie_pattern(w.strip() for w in _POS_EN) + "|" + _trie_pattern(_POS_ZH) + ")")
# "no errors", "without downtime", "prevented a crash": a negative word that was negated counts as positive.
_NEGATED_NEG = re.compile(r"\b(?:no|without|zero|never|avoid(?:ed)?|prevent(?:ed)?)\s+(?:\w+\s+)?"
                          r"(?:fail|error|crash|timeout|downtime|outage|bug|regression|incident)")
_NEGATION_HINT = re.compile(r"\b(?:no|without|zero|never|avoid|prevent)")


def guess_polarity(text: str) -> str | None:
    """positive | negative | mixed from keywords (English and Chinese); None if no signal."""
    t = (text or "").lower()
    negated = 0
    if _NEGATION_HINT.search(t):
        t, negated = _NEGATED_NEG.subn(" ", t)
    neg = pos = 0
    for m in _KEYWORDS.finditer(t):
        if m.lastgroup == "neg":
            neg += 1
        else:
            pos += 1
    pos += negated
    if neg and pos:
        return "mixed" if neg == pos else ("negative" if neg > pos else "positive")
    if neg:
        return "negative"
    if pos:
        return "positive"
    return None


def check_text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{name} must be non-empty text, got {value!r}")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    return value


def check_limit(limit: Any, name: str = "limit") -> int:
    """A result count: an integer in [1, 10000]."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"{name} must be an integer, got {type(limit).__name__}")
    if limit <= 0 or limit > 10000:
        raise ValueError(f"{name} must be between 1 and 10000, got {limit}")
    return limit


def check_confidence(value: Any, name: str = "confidence") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number in [0, 1], got {type(value).__name__}")
    v = float(value)
    if math.isnan(v) or not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return v


def check_polarity(value: Any) -> str | None:
    if value is None:
        return None
    if value not in POLARITIES:
        raise ValueError(f"polarity must be one of {', '.join(POLARITIES)} or None, got {value!r}")
    return value


def check_source(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"source must be a non-empty string such as {', '.join(SOURCES_CONFIDENCE)}, got {value!r}")
    return value.strip()


def check_scope_value(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string or None, got {value!r}")
    return value


def normalize_messages(messages: Any) -> list[tuple[str | None, str, dict]]:
    """(speaker, text, extra) per turn from a string, OpenAI-style or {speaker, text} dicts."""
    if isinstance(messages, str):
        check_text(messages, "messages")
        return [(None, messages, {})]
    if isinstance(messages, Mapping):
        messages = [messages]
    if not isinstance(messages, Iterable):
        raise TypeError(
            "messages must be a string or a list of {'role', 'content'} / {'speaker', 'text'} dicts")
    out: list[tuple[str | None, str, dict]] = []
    for i, m in enumerate(messages):
        if isinstance(m, str):
            check_text(m, f"messages[{i}]")
            out.append((None, m, {}))
            continue
        if not isinstance(m, Mapping):
            raise TypeError(f"messages[{i}] must be a dict or a string, got {type(m).__name__}")
        # A named speaker ("speaker"/"name") is part of the memory's text; a bare OpenAI role is metadata.
        if "content" in m:
            speaker, text = m.get("name") or m.get("speaker"), m["content"]
        elif "text" in m:
            speaker, text = m.get("speaker") or m.get("name"), m["text"]
        else:
            raise ValueError(f"messages[{i}] needs 'content' (with 'role') or 'text' (with 'speaker')")
        if isinstance(text, list):  # OpenAI content parts
            text = " ".join(p.get("text", "") for p in text if isinstance(p, Mapping))
        check_text(text, f"messages[{i}] text")
        extra = {k: v for k, v in m.items() if k not in ("content", "text", "speaker", "name")}
        out.append((speaker if speaker is None else str(speaker), text, extra))
    if not out:
        raise ValueError("messages must contain at least one turn")
    return out
