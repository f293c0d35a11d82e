"""The one tokenizer: text -> index terms, shared by the lexical channel, consolidation and the
benchmark harnesses (so their terms always agree).

Lowercase latin words (digits kept, accents folded), possessives and clitics dropped
("Caroline's" -> "caroline", "don't" -> stop word), a small English stop-word list, a light
suffix stripper (plurals, -ing/-ed/-ly, final e); CJK runs (Han, kana, Hangul) become
overlapping character bigrams (a lone CJK character stays a unigram); each emoji is a term of
its own ("🚀" finds the text holding it; skin-tone modifiers, variation selectors and joiners are
dropped); everything else (punctuation, other symbols) is dropped.

Two fast paths for bulk work give exactly ``Tokenizer.tokenize``: ``ascii_words`` (the words of
an ASCII text, before ``term_of``) and ``ascii_runs`` (one ``bytes.translate`` + ``split`` of many
joined ASCII texts into runs of ``[a-z0-9']``; ``Tokenizer.run_terms`` resolves one run).
"""
from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Iterable

__all__ = ["ENGLISH_STOP_WORDS", "Tokenizer", "DEFAULT_TOKENIZER", "tokenize", "light_stem", "light_stem_ing_ed",
           "ascii_words", "ascii_runs", "RUN_SEPARATOR"]

# Small list on purpose: function words, pronouns, auxiliaries and the clitic leftovers of
# the apostrophe rule. Content words that carry meaning in agent memories ("not", "no",
# "never", numbers) are kept out of it: "not" is kept because "did not deploy" and "deploy"
# differ.
ENGLISH_STOP_WORDS = frozenset(
    """
    a an the and or but if then than so as of at by for from in into on onto to up down out
    over under with about against between through during before after above below off
    is am are was were be been being have has had having do does did doing
    i me my mine myself we us our ours ourselves you your yours yourself yourselves
    he him his himself she her hers herself it its itself they them their theirs themselves
    this that these those there here what which who whom whose when where why how
    all any both each few more most other some such only own same too very just also
    can could will would shall should may might must ought
    s t d ll m re ve ca wo sha
    let lets im ive id youre youve youll youd hes shes its were theyre theyve weve
    """.split()
)

# --------------------------------------------------------------------------- tokenizer

_CJK_CLASS = (
    "\u1100-\u11ff"  # Hangul jamo
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\u3130-\u318f"  # Hangul compatibility jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0002ebef"  # CJK extensions B-F
)
# Latin (incl. accented), Greek and Cyrillic letters; the multiplication/division signs
# inside Latin-1 are excluded.
_WORD_CLASS = "0-9a-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u0370-\u03ff\u0400-\u04ff\u1e00-\u1eff"
# Emoji and pictographs: one term per code point. The skin-tone modifiers (U+1F3FB-U+1F3FF) are left
# out (a modifier is not a term of its own), as are variation selectors and the zero-width joiner.
_EMOJI_CLASS = (
    "\u2300-\u23ff"  # misc technical (watch, hourglass, ...)
    "\u2600-\u27bf"  # misc symbols, dingbats
    "\u2b00-\u2bff"  # stars, arrows, squares
    "\U0001f000-\U0001f3fa"  # tiles, cards, enclosed, misc symbols and pictographs (part 1)
    "\U0001f400-\U0001faff"  # pictographs (part 2), emoticons, transport, supplemental, extended-A
)
_ASCII_WORD_RE = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")
_ascii_findall = _ASCII_WORD_RE.findall
_MIXED_RE = re.compile(
    rf"(?P<w>[{_WORD_CLASS}]+(?:'[{_WORD_CLASS}]+)*)|(?P<c>[{_CJK_CLASS}]+)|(?P<e>[{_EMOJI_CLASS}])"
)
_CLITICS = frozenset({"s", "t", "d", "ll", "m", "re", "ve"})


def _fold_word(word: str) -> str:
    """Resolve apostrophes: drop a final English clitic ("caroline's", "don't"), join the rest
    ("o'neill's" -> "oneill")."""
    head, _, tail = word.rpartition("'")
    if tail in _CLITICS:
        if tail == "t" and head.endswith("n") and len(head) > 2:
            head = head[:-1]  # "didn't" -> "did", "couldn't" -> "could"
        return head.replace("'", "")
    return word.replace("'", "")


def _strip_accents(word: str) -> str:
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


_STEM_EXCEPTIONS = frozenset({"news", "series", "species", "always", "perhaps", "lens", "bus", "gas"})


def light_stem(word: str) -> str:
    """A tiny plural stripper ("stories" -> "story", "classes" -> "class", "cats" -> "cat").

    Only "-s" forms of words longer than three letters; "-ss", "-us", "-is" endings
    ("glass", "status", "analysis") are left alone.
    """
    n = len(word)
    if n <= 3 or word[-1] != "s" or word[-2].isdigit() or word in _STEM_EXCEPTIONS:
        return word
    if word.endswith("ies") and n > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes")):
        return word[:-2]
    if word.endswith(("ss", "us", "is")):
        return word
    return word[:-1]


def light_stem_ing_ed(word: str) -> str:
    """``light_stem`` plus "-ied"/"-ing"/"-ed"/"-ly" stripping and a final "e" drop.

    "danced", "dancing", "dance" -> "danc"; "studied" -> "study"; "stopped" -> "stop";
    "quickly" -> "quick". Stems shorter than four letters are never produced by the
    "-ing"/"-ed" rules ("making", "used" stay as they are). Own rules, no Porter tables.
    """
    if word in _STEM_EXCEPTIONS:
        return word
    word = light_stem(word)
    n = len(word)
    if word.endswith("ied") and n >= 5:
        return word[:-3] + "y"
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and n - len(suffix) >= 4:
            stem = word[: -len(suffix)]
            if stem[-1] == stem[-2] and stem[-1] not in "lsz":
                stem = stem[:-1]  # "running" -> "run", "stopped" -> "stop"
            return stem
    if word.endswith("ly") and n >= 6:
        return word[:-2]
    if word.endswith("e") and n >= 5:
        return word[:-1]
    return word


class Tokenizer:
    """Text -> list of index terms. Immutable; equal settings give identical tokens.

    ``stem`` is ``"light"`` (default: plural, -ied/-ing/-ed/-ly, final e), ``"plural"`` or
    ``"none"``; the default won on LoCoMo-dev (benchmarks/bm25_locomo_check.py);
    ``stop_words`` defaults to :data:`ENGLISH_STOP_WORDS` (pass ``()`` to keep everything).
    """

    def __init__(self, *, stem: str = "light", stop_words: Iterable[str] | None = None) -> None:
        stemmers = {"none": None, "plural": light_stem, "light": light_stem_ing_ed}
        if stem not in stemmers:
            raise ValueError(f"stem must be one of {sorted(stemmers)}, got {stem!r}")
        self.stem = stem
        self.stop_words = frozenset(ENGLISH_STOP_WORDS if stop_words is None else stop_words)
        self._stemmer = stemmers[stem]
        # Pure function of the surface word; memoised because words repeat (Zipf).
        self.term_of = lru_cache(maxsize=1 << 18)(self._term_of)

    def __repr__(self) -> str:
        # "emoji": the terms differ from the tokenizer that dropped emoji, so saved postings are rebuilt
        return f"Tokenizer(stem={self.stem!r}, stop_words=<{len(self.stop_words)} words>, emoji)"

    def _term_of(self, word: str) -> str | None:
        """Normalise one matched latin word; ``None`` means drop (stop word / empty)."""
        if "'" in word:
            word = _fold_word(word)
        if not word.isascii():
            word = _strip_accents(word)
        if not word or word in self.stop_words:
            return None
        if self._stemmer is not None:
            word = self._stemmer(word)
            if word in self.stop_words:
                return None
        return word

    def __call__(self, text: str | None) -> list[str]:
        return self.tokenize(text)

    def tokenize(self, text: str | None) -> list[str]:
        if not text:
            return []
        if text.isascii():
            term_of = self.term_of
            return [t for t in map(term_of, _ascii_findall(text.lower())) if t is not None]
        return self._tokenize_unicode(text)

    def run_terms(self, run: str) -> list[str]:
        """Terms of one ASCII run of ``[a-z0-9']`` (as cut by ``ascii_runs``)."""
        words = _ascii_findall(run) if "'" in run else [run]
        return [t for t in map(self.term_of, words) if t is not None]

    def _tokenize_unicode(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFKC", text).lower().replace("\u2019", "'").replace("\u2018", "'")
        out: list[str] = []
        term_of = self.term_of
        for m in _MIXED_RE.finditer(text):
            word = m.group("w")
            if word is not None:
                term = term_of(word)
                if term is not None:
                    out.append(term)
                continue
            run = m.group("c")
            if run is None:  # an emoji
                out.append(m.group("e"))
                continue
            if len(run) == 1:
                out.append(run)
            else:
                out.extend(run[i : i + 2] for i in range(len(run) - 1))
        return out


DEFAULT_TOKENIZER = Tokenizer()


def tokenize(text: str | None) -> list[str]:
    """Tokenize ``text`` with the default tokenizer (see module docstring)."""
    return DEFAULT_TOKENIZER.tokenize(text)


def ascii_words(text: str) -> list[str]:
    """The words of an ASCII ``text`` that ``Tokenizer.tokenize`` passes to ``term_of``."""
    return _ascii_findall(text.lower())


RUN_SEPARATOR = " \x01 "
# ``ascii_runs`` joins texts with RUN_SEPARATOR; bytes.translate table: lowercase ASCII letters,
# keep digits, apostrophe and the \x01 doc separator, everything else becomes a space.
_ASCII_TABLE = bytes(
    c + 32 if 65 <= c <= 90 else c if (97 <= c <= 122 or 48 <= c <= 57 or c in (39, 1)) else 32
    for c in range(256)
)




def ascii_runs(joined: str) -> list[bytes]:
    """Runs of ``[a-z0-9']`` (lowercased) and ``\x01`` separators of an ASCII string, in order."""
    return joined.encode("ascii").translate(_ASCII_TABLE).split()
