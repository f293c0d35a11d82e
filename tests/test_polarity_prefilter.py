"""The write path's polarity guess skips the tokenizer for texts with no lexicon word: that
shortcut must never change an answer. Hypothesis compares ``guess_polarity`` (prefilter + memo)
with the lexicon algorithm run on every text (``_guess_tokens``)."""
from __future__ import annotations

from hypothesis import given, settings
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
