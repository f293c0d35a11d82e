"""A full reinforcement queue (the writer busy for long) degrades with one warning per episode and a
counter in ``stats()``: never a log line per search, never a projection rebuild per search, also with
search-time Hebbian credit on (``Config.hebbian_search``), whose dropped searches carried links the
projection was already showing. The writer is held busy by a real second connection to the file."""
from __future__ import annotations

import logging
import os
import sqlite3

import pytest

from causalmem import Config, Memory

# the writer is held busy by a second sqlite3 connection: on PostgreSQL the flusher thread writes the queue
# on its own connection instead (its race with confirm: tests/test_postgres_flush.py)
sqlite_writer = pytest.mark.skipif(os.environ.get("CAUSALMEM_TEST_BACKEND") == "postgres",
                                reason="holds SQLite's write lock from a second sqlite3 connection")


def _memory(db_path) -> Memory:
    cfg = Config(hebbian_search=True, hebbian_same_session=False, reinforce_batch=4, reinforce_queue_max=8,
                 reinforce_seconds=3600)
    m = Memory(db_path, embedder=None, config=cfg)
    for i in range(6):
        m.add(f"kafka consumer lag alert number {i}", user_id="u")
    m.flush()
    return m


class HeldWriter:
    """Another connection holds SQLite's write lock (BEGIN IMMEDIATE) until released."""

    def __init__(self, path) -> None:
        self.con = sqlite3.connect(path, isolation_level=None, timeout=0)

    def __enter__(self) -> "HeldWriter":
        self.con.execute("BEGIN IMMEDIATE")
        return self

    def __exit__(self, *exc) -> None:
        self.con.execute("ROLLBACK")
        self.con.close()


def _records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "causalmem" and r.levelno >= logging.INFO]


@sqlite_writer
@pytest.mark.parametrize("episodes", [1, 2])
def test_a_full_queue_warns_once_per_episode_and_rebuilds_no_projection_per_search(db_path, caplog, episodes):
    m = _memory(db_path)
    try:
        searches = 60
        for ep in range(episodes):
            m.search("kafka consumer lag", top_k=4, user_id="u")  # the projection is built before the episode
            rebuilds = m.stats()["graph_rebuilds"]
            dropped = m.stats()["reinforce_dropped"]
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="causalmem"), HeldWriter(db_path):
                for _ in range(searches):
                    hits = m.search("kafka consumer lag", top_k=4, user_id="u")
                    assert len(hits) >= 2
                during = _records(caplog)
                after_rebuilds = m.stats()["graph_rebuilds"]
            warnings = [r for r in during if r.levelno >= logging.WARNING]
            assert len(warnings) == 1 and "queue full" in warnings[0].getMessage(), [r.getMessage() for r in during]
            assert len(during) == 1, [r.getMessage() for r in during]  # no line per search at any level
            assert m.stats()["reinforce_dropped"] - dropped >= searches - 8
            # at most one rebuild when the episode starts dropping linked searches, none per search
            assert after_rebuilds - rebuilds <= 1, (rebuilds, after_rebuilds)
            with caplog.at_level(logging.INFO, logger="causalmem"):
                m.flush()  # the writer is free again: the episode ends with one line counting its drops
            assert any("dropped while the writer was busy" in r.getMessage() for r in _records(caplog))
    finally:
        m.close()


@sqlite_writer
def test_after_an_episode_the_projection_answers_as_one_rebuilt_from_the_store(db_path):
    """Dropped searches' links leave the queries' view: what the projection shows after the episode is
    what the store holds (a projection rebuilt from the store alone gives the same links)."""
    m = _memory(db_path)
    try:
        with HeldWriter(db_path):
            for _ in range(40):
                m.search("kafka consumer lag", top_k=4, user_id="u")
        m.flush()
        ids = [c.id for c in m.get_all(user_id="u")]
        seen = [a.energy for a in m.search_causal("kafka consumer lag alert number 0", limit=10, user_id="u",
                                                  include_seeds=True)]
        stored = m._views.reinforcement.learned_weights(list(range(100)))
        m._projection.mark_stale()
        again = [a.energy for a in m.search_causal("kafka consumer lag alert number 0", limit=10, user_id="u",
                                                   include_seeds=True)]
        assert ids and seen == pytest.approx(again, rel=1e-5), (seen, again, stored)
    finally:
        m.close()


def test_a_refused_flusher_write_logs_once_per_episode_not_per_search(pg_dsn, caplog):
    """PostgreSQL: while the store refuses the flusher's batch (here a CHECK constraint the access-count
    update violates, as a full disk would), every search wakes the thread and the batch fails again:
    one log line for the episode, the failures counted; once the store takes writes, the queue is written."""
    if os.environ.get("CAUSALMEM_TEST_BACKEND") != "postgres":
        pytest.skip("the flusher thread runs on PostgreSQL only (CAUSALMEM_TEST_BACKEND=postgres)")
    import psycopg

    schema = pg_dsn.rsplit("schema=", 1)[1]
    base = pg_dsn.rsplit("schema=", 1)[0].rstrip("?&")
    cfg = Config(reinforce_batch=2, reinforce_seconds=3600, scoped_views=False)  # the whole-store views' flusher
    with Memory(pg_dsn, embedder=None, config=cfg) as m:
        for i in range(4):
            m.add(f"kafka consumer lag alert number {i}", user_id="u")
        flusher = m._views.reinforcement.flusher
        with psycopg.connect(base, autocommit=True) as con:
            con.execute(f'ALTER TABLE "{schema}".chunks ADD CONSTRAINT soak_refuse CHECK (access_count < 0) NOT VALID')
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="causalmem"):
                for _ in range(30):
                    m.search("kafka consumer lag", top_k=4, user_id="u")
                    with m._views.lock:
                        flusher.join()
            lines = [r.getMessage() for r in _records(caplog)]
            con.execute(f'ALTER TABLE "{schema}".chunks DROP CONSTRAINT soak_refuse')
        assert flusher.deferred >= 10, flusher.deferred
        assert len(lines) == 1 and "deferred" in lines[0], lines
        m.flush()
        assert m._store.query("SELECT SUM(access_count) FROM chunks")[0][0] >= 30
