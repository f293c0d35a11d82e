"""Bad clocks are refused, sleep never stores a future ``last_sleep_at``."""
from __future__ import annotations

import datetime as dt
import time

import pytest

from causalmem import Memory
import rawdb

MS_NOW = time.time() * 1000.0  # a millisecond clock: the classic mistake


def test_millisecond_clock_is_refused_before_anything_is_written(db_path):
    with Memory(db_path, embedder=None, clock=lambda: MS_NOW) as m:
        with pytest.raises(ValueError, match="clock"):
            m.record_decision("deploy", "crash")
        with pytest.raises(ValueError, match="clock"):
            m.add("hello there")
    with Memory(db_path, embedder=None) as m:
        assert m.stats()["chunks_total"] == 0


@pytest.mark.parametrize("bad", [MS_NOW, 0.0, -5.0, 631_152_000.0 - 1, time.time() + 400 * 86400,
                                 dt.datetime(1970, 1, 2, tzinfo=dt.timezone.utc)])
def test_sleep_now_outside_the_plausible_window_is_refused(db_path, bad):
    with Memory(db_path, embedder=None) as m:
        for i in range(20):
            m.record_decision(f"decision {i}", f"outcome {i}")
        with pytest.raises(ValueError, match="now"):
            m.sleep(now=bad)
        assert len(m.edges()) == 20  # nothing retired
        con = rawdb.connect(db_path)
        assert con.execute("SELECT value FROM meta WHERE key = 'last_sleep_at'").fetchall() == []
        con.close()


def test_millisecond_sleep_no_longer_retires_everything(db_path):
    """The reported case: sleep(now=<ms>) retired 100 of 101 edges and turned decay off."""
    with Memory(db_path, embedder=None) as m:
        m.record_many([(f"d{i}", f"o{i}") for i in range(101)])
        with pytest.raises(ValueError):
            m.sleep(now=MS_NOW)
        assert len(m.edges()) == 101


def test_sleep_never_stores_a_future_last_sleep_at(db_path):
    future = time.time() + 30 * 86400  # within the window (a clock a month fast), but in the future
    with Memory(db_path, embedder=None, clock=lambda: future) as m:
        m.record_decision("d", "o")
        m.sleep()
    con = rawdb.connect(db_path)
    stored = float(con.execute("SELECT value FROM meta WHERE key = 'last_sleep_at'").fetchone()[0])
    con.close()
    assert stored <= time.time() + 1


def test_a_future_last_sleep_at_already_stored_does_not_switch_decay_off(db_path, clock):
    """A file poisoned by an older version (last_sleep_at = 1.8e12) decays again."""
    with Memory(db_path, embedder=None, clock=clock) as m:
        e = m.record_decision("d", "o", confidence=0.9)
    con = rawdb.connect(db_path)
    con.execute("INSERT INTO meta (key, value) VALUES ('last_sleep_at', '1.8e12') "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value")
    con.commit()
    con.close()
    clock.advance(90 * 86400)
    with Memory(db_path, embedder=None, clock=clock) as m:
        m.sleep()
        assert m.get_edge(e.id).confidence == pytest.approx(0.45, rel=1e-3)  # one 90-day half-life


def test_clock_of_the_wrong_type_is_a_type_error(db_path):
    with Memory(db_path, embedder=None, clock=lambda: "now") as m:
        with pytest.raises(TypeError, match="clock"):
            m.record_decision("d", "o")
    with Memory(db_path, embedder=None, clock=lambda: float("nan")) as m:
        with pytest.raises(ValueError, match="clock"):
            m.record_decision("d", "o")
