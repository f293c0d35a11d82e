"""Write-path helpers: polarity guessing, message normalisation, argument checks (SPEC §7)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from .types import POLARITIES, SOURCES_CONFIDENCE

if TYPE_CHECKING:  # pragma: no cover
    from .store.base import ChunkRow, EdgeRow, StoreBackend

# The polarity guess lives in ``polarity`` (an explicit bilingual lexicon, whole words, negation scope).
from .polarity import guess_polarity  # noqa: E402,F401  (re-exported: the write path's one guess)


def check_unicode(value: str, name: str) -> str:
    """Text SQLite can store: no lone surrogates (they cannot be encoded as UTF-8)."""
    if value.isascii():  # O(1) in CPython: nothing to encode
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} is not valid Unicode text: lone surrogate {value[exc.start]!r} at position "
                         f"{exc.start}") from None
    return value


#: the longest text one memory may hold, in characters (1 MiB of ASCII): a longer text is a ValueError
#: naming the argument; split a document into passages before adding it
MAX_TEXT_CHARS = 1_048_576


def check_text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    if len(value) > MAX_TEXT_CHARS:
        raise ValueError(f"{name} is {len(value):,} characters; a memory holds at most {MAX_TEXT_CHARS:,} "
                         "characters (split a long document into passages)")
    if not value.strip():
        raise ValueError(f"{name} must be non-empty text, got {value!r}")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    return check_unicode(value, name)


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
    try:
        v = float(value)
    except OverflowError:
        raise ValueError(f"{name} must be in [0, 1], got an integer of {len(str(value))} digits") from None
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
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a non-empty string or None, got {type(value).__name__}")
    if not value or "\x00" in value:
        raise ValueError(f"{name} must be a non-empty string or None, got {value!r}")
    return check_unicode(value, name)


def link_and_dedupe(turns: list[tuple[str | None, str, dict]], session_id: str | None,
                    link: bool | None, dedupe: bool | None) -> tuple[bool, bool]:
    """``add``'s ``link`` and ``dedupe`` flags, checked and defaulted.

    ``link``: chain the turns by temporal edges. Default: yes for a conversation (dicts with a role,
    speaker or other fields, or any call with a ``session_id``: its turns continue the session), no
    for plain texts (a string, or a list of strings: separate memories, e.g. a bulk load of notes).
    ``dedupe``: a text that is, exactly, a live memory of the same scope is that memory (returned;
    its access count goes up by one and its last access is now) instead of a second copy. Default:
    yes for unlinked texts, no for linked turns (a turn is an event: "ok" said twice is two turns).
    """
    for name, flag in (("link", link), ("dedupe", dedupe)):
        if flag is not None and not isinstance(flag, bool):
            raise TypeError(f"{name} must be True, False or None (the default), got {type(flag).__name__}")
    if link is None:
        link = session_id is not None or not all(speaker is None and not extra for speaker, _t, extra in turns)
    if dedupe is None:
        dedupe = not link
    return link, dedupe


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


def require_chunk(store: StoreBackend, chunk_id: Any, name: str = "chunk_id") -> ChunkRow:
    """The stored row of a public chunk id argument (TypeError/KeyError naming ``name``)."""
    if not isinstance(chunk_id, str):
        raise TypeError(f"{name} must be a chunk id string, got {type(chunk_id).__name__}")
    check_unicode(chunk_id, name)
    row = store.chunk_row(chunk_id)
    if row is None:
        raise KeyError(f"unknown {name} {chunk_id!r}")
    return row


def require_edge(store: StoreBackend, edge_id: Any) -> EdgeRow:
    """The stored row of a public edge id argument."""
    if not isinstance(edge_id, str):
        raise TypeError(f"edge_id must be an edge id string, got {type(edge_id).__name__}")
    check_unicode(edge_id, "edge_id")
    row = store.edge_row(edge_id)
    if row is None:
        raise KeyError(f"unknown edge_id {edge_id!r}")
    return row
