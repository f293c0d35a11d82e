"""The date match of retrieval: a query naming a date favours the memories told around that date.

A memory's time is its ``event_time`` (when it was said: a conversation turn added with its session's
date), else its ``created_at``. A query that names an absolute date ("on 7 July, 2023", "on May 23,
2023", "in August 2023", "in June", "in 2022") names a period: that day, month or year (a month
without a year: that month in any year). The candidates whose time falls in a named period, widened by
``slack_days`` on each side (an event is told some days after it happened, and a question's date may
be the event's or the telling's), have their score multiplied by ``1 + weight``. The order within each
group is kept; a query naming no date, or candidates none or all of which fall in its periods, change
nothing.

No model and no reference time: relative expressions ("last week", "yesterday") are not resolved, and
"before" / "after" are read as the date they name. Calendar days are UTC days.
"""
from __future__ import annotations

import calendar
import datetime as dt
import re
from typing import NamedTuple

import numpy as np

__all__ = ["Period", "named_periods", "in_periods", "date_match"]

_MONTHS = {name.lower(): k for k, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): k for k, name in enumerate(calendar.month_abbr) if name})
_MONTHS["sept"] = 9
_MON = r"(?P<mon>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_FULL_MON = r"(?P<mon>" + "|".join(name.lower() for name in calendar.month_name if name) + r")"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_B = r"(?<![\w-])"
_E = r"(?![\w-])"
# most specific first; a span taken by one form is not read again by a later one
_FORMS = (
    re.compile(_B + r"(?P<year>\d{4})-(?P<mon>\d{1,2})-(?P<day>\d{1,2})" + _E),
    re.compile(_B + _DAY + r"(?:\s+of)?\s+" + _MON + r",?\s+" + _YEAR + _E),
    re.compile(_B + _MON + r"\s+" + _DAY + r",?\s+" + _YEAR + _E),
    re.compile(_B + _MON + r",?\s+" + _YEAR + _E),
    # a month or a year alone only after a preposition ("may" is also a verb, "2000" also a number)
    re.compile(_B + r"(?:in|during|of|since|by|before|after|until|early|late|mid)\s+" + _FULL_MON + _E),
    re.compile(_B + r"(?:in|during|of|since|by|before|after|until)\s+" + _YEAR + _E),
)


class Period(NamedTuple):
    """A named day, month or year; ``year`` None = that month in any year."""

    year: int | None
    month: int | None
    day: int | None


def named_periods(query: str) -> list[Period]:
    """The absolute dates ``query`` names, in order of appearance (an impossible date names none)."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, got {type(query).__name__}")
    low = query.lower()
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, Period]] = []
    for form in _FORMS:
        for m in form.finditer(low):
            if any(m.start() < b and a < m.end() for a, b in taken):
                continue
            taken.append((m.start(), m.end()))  # an impossible date too: its month is not read on its own
            g = m.groupdict()
            mon = g.get("mon")
            month = None if mon is None else int(mon) if mon.isdigit() else _MONTHS[mon]
            year = int(g["year"]) if g.get("year") else None
            day = int(g["day"]) if g.get("day") else None
            if month is not None and not 1 <= month <= 12:
                continue
            if day is not None and (year is None or month is None or day > calendar.monthrange(year, month)[1]
                                    or day < 1):
                continue
            found.append((m.start(), Period(year, month, day)))
    return [p for _, p in sorted(found)]


def _bounds(p: Period, year: int) -> tuple[float, float]:
    """[start, end) of period ``p`` in ``year`` (p.year when it has one), as UTC timestamps."""
    y = p.year if p.year is not None else year
    if p.month is None:
        a, b = dt.datetime(y, 1, 1), dt.datetime(y + 1, 1, 1)
    elif p.day is None:
        a = dt.datetime(y, p.month, 1)
        b = dt.datetime(y + (p.month == 12), p.month % 12 + 1, 1)
    else:
        a = dt.datetime(y, p.month, p.day)
        b = a + dt.timedelta(days=1)
    utc = dt.timezone.utc
    return a.replace(tzinfo=utc).timestamp(), b.replace(tzinfo=utc).timestamp()


def in_periods(times: np.ndarray, periods: list[Period], slack_days: float) -> np.ndarray:
    """Whether each time (UTC timestamp; NaN = unknown, never in) falls in one of ``periods`` widened by
    ``slack_days`` on each side."""
    times = np.asarray(times, dtype=np.float64)
    out = np.zeros(len(times), dtype=bool)
    known = ~np.isnan(times)
    if not periods or not known.any():
        return out
    slack = float(slack_days) * 86400.0
    lo_t, hi_t = float(times[known].min()), float(times[known].max())
    years = range(dt.datetime.fromtimestamp(max(lo_t, -6e10), dt.timezone.utc).year - 1,
                  dt.datetime.fromtimestamp(min(hi_t, 2.5e11), dt.timezone.utc).year + 2)
    for p in periods:
        for y in ([p.year] if p.year is not None else years):
            if not 1 <= y <= 9998:
                continue
            a, b = _bounds(p, y)
            out |= known & (times >= a - slack) & (times < b + slack)
    return out


def date_match(nids: np.ndarray, scores: np.ndarray, times: np.ndarray, query: str, weight: float,
               slack_days: float) -> np.ndarray:
    """``scores`` (of candidates ``nids`` whose times are ``times``) with those in a period the query names
    multiplied by ``1 + weight`` (a new array; the input unchanged when nothing applies)."""
    if weight <= 0 or not len(nids):
        return scores
    periods = named_periods(query)
    if not periods:
        return scores
    hit = in_periods(times, periods, slack_days)
    if not hit.any() or hit.all():
        return scores
    out = np.asarray(scores, dtype=np.float64).copy()
    out[hit] *= 1.0 + weight
    return out
