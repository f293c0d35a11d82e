"""The speaker match of retrieval: a question that names a speaker is answered by what that speaker said.

A turn added with a speaker is stored as "Speaker: text" (``write.py``), so the speaker of a memory is
its text's "Name:" prefix. When the query names some, but not all, of the speakers among the best
candidates ("What activities does Melanie do?" over a conversation of Melanie and Caroline), the
candidates spoken by a named speaker are multiplied by ``1 + weight``: a person's own words are the
evidence about that person (what the other speaker says about them, or about themselves, is not). The
order within each group is kept; a query naming no speaker, or every speaker of the pool, changes nothing.

No model and no list of names: the speakers are those the candidates' own texts name, and a speaker is
named by the query when the query contains its full name or its first word (case-insensitive, a
possessive "'s" dropped: "Melanie's" names Melanie).
"""
from __future__ import annotations

import re
from typing import Iterable, Sequence

import numpy as np

__all__ = ["speaker_of", "named_speakers", "speaker_match"]

# the engine writes "speaker: text"; a speaker's name is short and has no colon or line break
_PREFIX_RE = re.compile(r"^\s*([^:\n]{1,40}?)\s*:\s")
_WORD_RE = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")


def speaker_of(text: str) -> str | None:
    """The "Name:" prefix of a memory's text (stripped), or None when it has none."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    m = _PREFIX_RE.match(text)
    return m.group(1) if m else None


def _words(text: str) -> set[str]:
    out: set[str] = set()
    for w in _WORD_RE.findall(text.lower()):
        w = w.replace("\u2019", "'")
        out.add(w[:-2] if w.endswith("'s") else w)
    return out


def named_speakers(query: str, speakers: Iterable[str]) -> set[str]:
    """The speakers (as given) that ``query`` names: by their full name, or by their first word."""
    words = _words(query)
    low = query.lower()
    named: set[str] = set()
    for s in speakers:
        tokens = s.split()
        if not tokens:
            continue
        first = _words(tokens[0])
        full = len(tokens) > 1 and re.search(r"(?<!\w)" + re.escape(s.lower()) + r"(?!\w)", low) is not None
        if full or (len(first) == 1 and first <= words):
            named.add(s)
    return named


def speaker_match(nids: np.ndarray, scores: np.ndarray, texts: Sequence[tuple[int, str]], query: str,
                  weight: float) -> np.ndarray:
    """``scores`` with the candidates among ``texts`` ((nid, text) of the pool) that a speaker the query
    names said multiplied by ``1 + weight`` (a new array; the input unchanged when nothing applies)."""
    if weight <= 0 or not len(nids):
        return scores
    spoken = {int(n): speaker_of(t) for n, t in texts}
    present = {s for s in spoken.values() if s is not None}
    if len(present) < 2:
        return scores
    named = named_speakers(query, present)
    if not named or named == present:
        return scores
    # never empty: every named speaker is one of the pool's
    favoured = np.fromiter((n for n, s in spoken.items() if s in named), dtype=np.int64)
    out = np.asarray(scores, dtype=np.float64).copy()
    out[np.isin(nids, favoured)] *= 1.0 + weight
    return out
