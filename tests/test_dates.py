"""The date match: a query naming a date favours the memories told around that date (on by default)."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from causalmem import Memory, dates
from causalmem.config import Config

P = dates.Period
UTC = dt.timezone.utc


def _ts(y, m, d, h=12):
    return dt.datetime(y, m, d, h, tzinfo=UTC).timestamp()


def test_named_periods_reads_days_months_and_years():
    assert dates.named_periods("What did Maria share on 16 June, 2023?") == [P(2023, 6, 16)]
    assert dates.named_periods("What did she paint on October 13, 2023?") == [P(2023, 10, 13)]
    assert dates.named_periods("the 3rd of June 2023 and 2023-07-09") == [P(2023, 6, 3), P(2023, 7, 9)]
    assert dates.named_periods("What happened to John's job in August 2023?") == [P(2023, 8, None)]
    assert dates.named_periods("the week before Aug. 3, 2023") == [P(2023, 8, 3)]
    assert dates.named_periods("When did Melanie go camping in June?") == [P(None, 6, None)]
    assert dates.named_periods("Who adopted a child in 2022?") == [P(2022, None, None)]
    # "may" the verb, a bare number, an impossible day: no date
    assert dates.named_periods("May I ask what Maria may do next?") == []
    assert dates.named_periods("She walked 2000 steps, 2023 of them uphill") == []
    assert dates.named_periods("on 31 February, 2023") == []
    assert dates.named_periods("What did Jon do?") == []
    with pytest.raises(TypeError, match="query must be a string"):
        dates.named_periods(None)  # type: ignore[arg-type]


def test_in_periods_widens_by_the_slack_and_reads_a_bare_month_in_any_year():
    times = np.array([_ts(2023, 6, 3), _ts(2023, 6, 9), _ts(2023, 6, 12), _ts(2022, 6, 20), np.nan])
    day = [P(2023, 6, 3)]
    assert dates.in_periods(times, day, 0).tolist() == [True, False, False, False, False]
    assert dates.in_periods(times, day, 7).tolist() == [True, True, False, False, False]
    assert dates.in_periods(times, [P(None, 6, None)], 0).tolist() == [True, True, True, True, False]
    assert dates.in_periods(times, [P(2022, None, None)], 0).tolist() == [False, False, False, True, False]
    assert dates.in_periods(times, [], 7).tolist() == [False] * 5
    # the end of a month is exclusive, the slack reaches into the next one
    eom = np.array([_ts(2023, 7, 1, 0), _ts(2023, 7, 2)])
    assert dates.in_periods(eom, [P(2023, 6, None)], 0).tolist() == [False, False]
    assert dates.in_periods(eom, [P(2023, 6, None)], 1).tolist() == [True, False]


def test_date_match_multiplies_only_the_candidates_in_the_period():
    nids = np.array([10, 11, 12])
    scores = np.array([1.0, 0.9, 0.8])
    times = np.array([_ts(2023, 5, 8), _ts(2023, 10, 13), _ts(2023, 10, 20)])
    out = dates.date_match(nids, scores, times, "What did she paint on 13 October, 2023?", 1.0, 0)
    assert out.tolist() == pytest.approx([1.0, 1.8, 0.8])
    assert scores.tolist() == [1.0, 0.9, 0.8]  # the input is not changed
    # no date named, a date none or all candidates fall in, weight 0: nothing changes
    for q, w in (("What did she paint?", 1.0), ("in 2019", 1.0), ("in 2023", 1.0), ("on 13 October, 2023", 0.0)):
        assert dates.date_match(nids, scores, times, q, w, 0).tolist() == scores.tolist()


# (session date, turns): the same speaker paints in both sessions; the October turn says less about painting
SESSIONS = [
    (dt.datetime(2023, 5, 8, 13, 56, tzinfo=UTC), [
        ("Melanie", "I painted a lake at sunrise, painting is how I relax, I paint every weekend."),
        ("Caroline", "The support group meets on Tuesdays."),
    ]),
    (dt.datetime(2023, 10, 13, 10, 0, tzinfo=UTC), [
        ("Melanie", "Here is my newest one: a horse in a field, all in blue."),
        ("Caroline", "My kids and I went camping in the mountains."),
    ]),
]


def _store(path, embedder):
    with Memory(path, embedder=embedder) as mem:
        for k, (when, turns) in enumerate(SESSIONS):
            mem.add([{"speaker": s, "text": t} for s, t in turns], user_id="u", session_id=str(k + 1), event_time=when)
        mem.flush()


@pytest.mark.parametrize("channels", [("lexical", "semantic", "graph"), ("lexical", "graph")])
def test_search_date_match_puts_the_named_days_turn_first(tmp_path, embedder, channels):
    path = tmp_path / "m.db"
    _store(path, embedder)
    q = "What painting did Melanie show on 13 October, 2023?"
    plain = "What painting did Melanie show?"
    with Memory(path, embedder=embedder, config=Config(date_match=0.0)) as mem:
        off = mem.search(q, top_k=2, user_id="u", channels=channels, reinforce=False)
        plain_off = mem.search(plain, top_k=4, user_id="u", channels=channels, reinforce=False)
    with Memory(path, embedder=embedder) as mem:  # the default: on
        on = mem.search(q, top_k=2, user_id="u", channels=channels, reinforce=False)
        plain_on = mem.search(plain, top_k=4, user_id="u", channels=channels, reinforce=False)
    assert off[0].text.startswith("Melanie: I painted a lake")  # without the match the May turn wins
    assert on[0].text == "Melanie: " + SESSIONS[1][1][0][1]
    assert [h.id for h in plain_on] == [h.id for h in plain_off]  # a query naming no date: the same hits


def test_search_date_slack_reaches_a_turn_told_days_after_the_named_day(tmp_path, embedder):
    path = tmp_path / "m.db"
    _store(path, embedder)
    q = "What painting did Melanie show on 10 October, 2023?"  # nothing was said that day; the turn is of the 13th
    got = {}
    for slack in (0.0, 7.0):
        with Memory(path, embedder=embedder, config=Config(date_match=4.0, date_slack_days=slack)) as mem:
            got[slack] = mem.search(q, top_k=2, user_id="u", reinforce=False)
    assert got[0.0][0].text.startswith("Melanie: I painted a lake")
    assert got[7.0][0].text == "Melanie: " + SESSIONS[1][1][0][1]


def test_config_date_match_is_on_by_default_and_checked_by_name():
    assert Config().date_match == 16.0
    assert Config(date_match=0).date_match == 0
    assert Config(date_match=4, date_slack_days=0).date_slack_days == 0
    for bad in (-1.0, float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match="date_match must be a finite number >= 0"):
            Config(date_match=bad)
        with pytest.raises(ValueError, match="date_slack_days must be a finite number >= 0"):
            Config(date_slack_days=bad)
