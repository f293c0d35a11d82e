"""Entity terms of a text and the entity hop of retrieval (a second hop through shared entities).

An *entity term* is the index term (``Tokenizer`` term, so the lexical index knows it) of a word
that names something: a capitalised word that does not start a sentence (people, places, titles,
brands: "... my home country, Sweden"), or a number ("4 years", "2022"). A leading "Name:" speaker
prefix is not part of the text's entities. No model, no list of names: the rule reads the text's
own capitalisation, so it is cheap enough to run on every hit.

The entity hop (``entity_hop``): the best first-pass hits (the *seeds*) name entities the query did
not; a memory that names an entity of a seed is reached from that seed. A memory reached from two
seeds has two independent pieces of evidence that it belongs to the same story as the answer, so
its bonus is the sum over the seeds that reach it (each weighed by its own score), not the best one.
"""
from __future__ import annotations

import re
from typing import Iterable, Sequence

import numpy as np

__all__ = ["entity_words", "entity_terms", "entity_hop"]

_WORD_RE = re.compile(r"[A-Za-z\u00c0-\u024f][A-Za-z\u00c0-\u024f'\u2019]*|\d+")
_SPEAKER_RE = re.compile(r"^\s*[^:\n]{1,40}:\s")
_SENTENCE_END = frozenset(".!?\n\"\u201c(")
# a capitalised word that is an entity only by its position in English grammar
_NOT_NAMES = frozenset({"i", "i'm", "i've", "i'll", "i'd", "ok", "okay", "oh", "hey", "hi", "yeah", "yes", "no", "wow"})


def entity_words(text: str) -> list[str]:
    """The words of ``text`` that name something (see the module docstring), in order, as written."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    m = _SPEAKER_RE.match(text)
    start = m.end() if m else 0
    out: list[str] = []
    for w in _WORD_RE.finditer(text, start):
        word = w.group(0)
        if word[0].isdigit():
            out.append(word)
            continue
        if not word[0].isupper() or word.lower() in _NOT_NAMES:
            continue
        # a sentence's first word is capitalised whatever it is: skip it
        k = w.start() - 1
        while k >= start and text[k] == " ":
            k -= 1
        if k < start or text[k] in _SENTENCE_END:
            continue
        out.append(word)
    return out


def entity_terms(text: str, tokenizer) -> set[str]:
    """The index terms of ``entity_words(text)`` (stop words and words that tokenise to nothing dropped)."""
    terms: set[str] = set()
    for word in entity_words(text):
        terms.update(tokenizer.tokenize(word))
    return terms


def entity_hop(seed_nids: Sequence[int], seed_terms: Sequence[Iterable[str]], seed_energy: Sequence[float],
               query_terms: Iterable[str], lexical, mask: np.ndarray, depth: int,
               max_df_share: float, combine: str = "sum") -> tuple[np.ndarray, np.ndarray]:
    """Memories reached from the seeds through shared terms (``seed_terms``: each seed's entity terms, or
    its keyphrases = its rare index terms): (nids, reach) where reach is the
    sum over the seeds naming a shared entity of that seed's energy / the best seed's (1.0 = reached
    from the best seed; two seeds add up). Terms of the query are left out (BM25 scored them already),
    and so are terms in more than ``max_df_share`` of the store's documents (a speaker's own name
    in every other turn links everything to everything). A seed is not reached from itself, but may be
    from the other seeds. ``combine="max"`` keeps only the best seed's share instead of the sum (one seed
    or two count the same: the comparison the sum is measured against)."""
    if combine not in ("sum", "max"):
        raise ValueError(f"combine must be 'sum' or 'max', got {combine!r}")
    q = set(query_terms)
    per_seed: list[set[str]] = [set(t) - q for t in seed_terms]
    vocab = sorted(set().union(*per_seed)) if per_seed else []
    if not vocab:
        return np.empty(0, np.int64), np.empty(0)
    limit = max_df_share * max(lexical.n_docs, 1)
    df = lexical.document_frequencies(vocab)
    vocab = [t for t, d in zip(vocab, df.tolist()) if 0 < d <= limit]
    if not vocab:
        return np.empty(0, np.int64), np.empty(0)
    keep = set(vocab)
    per_seed = [s & keep for s in per_seed]
    ids, _ = lexical.search(vocab, top_k=depth, allowed=mask)
    if not len(ids):
        return np.empty(0, np.int64), np.empty(0)
    e = np.asarray(seed_energy, np.float64)
    e = e / max(float(e.max()), 1e-12)
    reach = np.zeros(len(ids))
    seeds = [int(n) for n in seed_nids]
    for k, (nid, terms) in enumerate(zip(ids.tolist(), lexical.doc_terms(ids.tolist()))):
        if terms is None:
            continue
        have = set(terms)
        shares = [float(e[j]) for j, s in enumerate(per_seed) if s and seeds[j] != nid and not have.isdisjoint(s)]
        if shares:
            reach[k] = sum(shares) if combine == "sum" else max(shares)
    got = reach > 0
    return ids[got].astype(np.int64), reach[got]
