"""The write path's polarity guess skips the tokenizer for texts with no lexicon word: that
shortcut must never change an answer. Hypothesis compares ``guess_polarity`` (prefilter + memo)
with the lexicon algorithm run on every text (``_guess_tokens``)."""
from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from causalmem import polarity as P

# pieces that stress the prefilter's idea of a word: lexicon words glued to letters, digits,
# apostrophes, hyphens, non-ASCII letters, phrase heads, negators, CJK words and punctuation
_LEXICON = sorted(P.NEGATIVE_EN | P.POSITIVE_EN | P.NEGATORS_EN | P.CLAUSE_EN)
_PIECES = st.one_of(
    st.sampled_from([w.replace("_", " ") for w in _LEXICON]),
    st.sampled_from(sorted(P.NEGATIVE_ZH | P.POSITIVE_ZH | P.NEGATORS_ZH | P.NEUTRAL_ZH | P.CLAUSE_ZH)),
    st.sampled_from(["timed out", "rolled back", "went down", "no longer", "timed", "out", "rolled", "back", "went", "down", "no", "longer", "of", "-free", "-less",
                     "-", "'", "’", "s", "9", "é", "İ", "K", ".", ",", "!", "，", "。", " ", "  ", "\n", "the",
                     "deploy", "cache", "服务", "数据库", "Fail", "ERROR", "Fixed"]),
    st.text(alphabet="abcdefxyz019-'’ éß中文。", max_size=6),
)


@settings(max_examples=800, deadline=None)
@given(st.lists(_PIECES, max_size=12), st.lists(st.sampled_from(["", " "]), min_size=12, max_size=12))
def test_prefilter_never_changes_the_guess(pieces, seps):
    text = "".join(p + s for p, s in zip(pieces, seps))
    assert P.guess_polarity(text) == P._guess_tokens(text.lower()), text
    assert P.guess_polarity(text) == P._guess_tokens(text), text  # _guess_tokens lowers itself


def test_prefilter_cases():
    # lexicon words glued to other letters or digits are no words; a non-ASCII neighbour splits
    assert P.guess_polarity("unfailing uptime2 bugs3") is None
    assert P.guess_polarity("éfailed") == P._guess_tokens("éfailed") == "negative"
    assert P.guess_polarity("error-free release") == "positive"
    assert P.guess_polarity("the job timed out") == "negative"
    assert P.guess_polarity("服务崩溃") == "negative"
    assert P.guess_polarity("") is None
    long = "the deploy " * 50 + "failed"  # longer than the memo's limit: computed every time
    assert len(long) > P._MEMO_CHARS and P.guess_polarity(long) == "negative"


# ASCII texts take the shape road (C-speed split, kinds by dict, verdict memoised on the shape with
# filler runs capped at the scope): long runs of fillers around negators and repair words, phrases,
# hyphens, apostrophes and stops are where a shape could differ from the tokens' verdict
_ASCII_PIECES = st.one_of(
    st.sampled_from([w.replace("_", " ") for w in _LEXICON if w.isascii()]),
    st.sampled_from(["timed out", "rolled back", "went down", "no longer", "out of", "timed", "out", "no", "went",
                     "error-free", "bug-free", "crash-less", "fail-safe", "re-fixed", "didn't", "failure's", "won't",
                     "-", "'", ".", ",", ";", ":", "!", "?", "#12", "b3", "x", "the deploy", "a b c d e", "9-", "-free"]),
    st.text(alphabet="abfilxyz019-'. ", max_size=5),
)


@settings(max_examples=600, deadline=None)
@given(st.lists(_ASCII_PIECES, max_size=16), st.lists(st.sampled_from(["", " ", "  "]), min_size=16, max_size=16))
@example(["weren't", "500s"], [""] * 16)  # a contraction run on into digits (found by this test in CI)
def test_ascii_shape_gives_the_lexicon_verdict(pieces, seps):
    text = "".join(p + s for p, s in zip(pieces, seps))
    assert P.guess_polarity(text) == P._guess_tokens(text), text
    assert P.guess_polarity(text.upper()) == P._guess_tokens(text.upper()), text


_FEW = ["a", "b", "a b c", "not", "no", "never", "fixed", "prevented", "failed", "crash", "passed", "stable", ".",
        ",", "but", "timed out", "no longer", "error-free", "didn't", "-", "'", "out"]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_FEW), max_size=18))
def test_ascii_shape_scopes(words):
    """Few kinds of token, many of them: negation and repair scopes across runs of fillers."""
    text = " ".join(words)
    assert P.guess_polarity(text) == P._guess_tokens(text), text


def test_ascii_shape_every_short_sequence():
    """Every sequence of up to 6 tokens over a filler, a negator, a repair word, a failure and a stop,
    and over a filler, another negator, a success, another failure and a clause word: the shape's
    verdict is the lexicon's."""
    import itertools

    for alphabet, longest in ((["a", "not", "fixed", "failed", "."], 6), (["b", "never", "passed", "crash", "but"], 6)):
        for n in range(longest + 1):
            for words in itertools.product(alphabet, repeat=n):
                text = " ".join(words)
                assert P._decide_shape(P._ascii_shape(text)) == P._guess_tokens(text), text


def test_ascii_shape_cases():
    # a negator reaches the third token after it, not the fourth; a repair word three either side
    assert P.guess_polarity("not a b failed") == "positive"
    assert P.guess_polarity("not a b c failed") == "negative"
    assert P.guess_polarity("not a b c d e f failed") == "negative"
    assert P.guess_polarity("fixed a b crash") == "positive"
    assert P.guess_polarity("fixed a b c d crash") == "mixed"
    assert P.guess_polarity("no. failed") == "negative"  # a stop ends the negation's scope
    assert P.guess_polarity("the job timed out") == "negative" and P.guess_polarity("no longer failing") == "positive"
    assert P.guess_polarity("error-free deploy #12") == "positive"
    # texts that differ only in neutral words share a shape, hence one memo entry
    assert P._ascii_shape("the deploy #12 failed") == P._ascii_shape("the cache of run 7 failed") == "n"
