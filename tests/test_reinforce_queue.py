"""The reinforcement queue when the writer stays busy (``Config.reinforce_queue_max``).

Another connection holds the write lock for longer than ``reinforce_queue_max`` searches: the
searches go on with their results unchanged, the oldest queued searches are dropped, and

* a dropped search that carried no Hebbian pairs (the default: a search queues access counts
  only) costs no projection rebuild: the projection holds nothing of it;
* the log says it once per episode (a warning), not once per search; the episode ends at the
  next successful write of the queue (an info line with its count), and a later episode warns again;
* ``Views.reinforce_dropped`` counts the dropped searches;
* once the lock is released, ``flush()`` writes the access counts of the searches kept.

The lock is real: on SQLite another process in a ``BEGIN IMMEDIATE`` transaction on the file; on
PostgreSQL another connection's write transaction (the server's writer lock), with the flusher
thread's batch waiting for it (its wait is longer than the test). No sleeps, no timing."""
from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import textwrap
from typing import Iterator

import pytest

from causalmem import Config, Memory

HOLDER = textwrap.dedent("""
    import sqlite3, sys
    con = sqlite3.connect(sys.argv[1], isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    con.execute("INSERT INTO meta (key, value) VALUES ('holder', 'x')")
    print("locked", flush=True)
    sys.stdin.readline()
    con.execute("ROLLBACK")
""")

QUEUE_MAX, BATCH = 8, 4
FULL = "reinforcement queue full"


@contextlib.contextmanager
def _write_lock_held(m: Memory, target) -> Iterator[None]:
    """The memory's write lock, held by another connection until the block ends."""
    if hasattr(m._store, "writer_twin"):  # PostgreSQL: another connection's write transaction
        with Memory(target, embedder=None) as other, other._store.transaction():
            yield
        return
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(target)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "locked"
        yield
    finally:
        assert p.stdin is not None
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait(timeout=30)


def _flusher_batch_waits_for_the_lock(m: Memory) -> int:
    """PostgreSQL: the first full batch was taken by the flusher thread, which now waits for the
    writer lock; how many searches it holds (0 on SQLite, whose queue is written inline)."""
    flusher = m._views.reinforcement.flusher
    if flusher is None:
        return 0
    with m._views.lock:
        while not flusher.inflight:  # taken under this lock: nothing else queues meanwhile
            flusher.cond.wait(0.01)
        assert not m._views.reinforcement.queued
    return BATCH


def _access_counts(m: Memory) -> dict[str, int]:
    return {row.id: row.access_count for row in (m._store.chunk_row(c.id) for c in m.get_all(limit=100))}


@pytest.fixture(params=["path", "postgres"])
def target(request, db_path):
    """A SQLite file (a PostgreSQL schema on the suite's PostgreSQL run), or a PostgreSQL memory."""
    return request.getfixturevalue("pg_dsn") if request.param == "postgres" else db_path


@pytest.mark.timeout(120)
def test_a_full_queue_drops_without_a_rebuild_per_search_and_warns_once(target, caplog):
    # the lock waits are longer than the test: the flusher's batch (PostgreSQL) waits for the holder
    cfg = Config(reinforce_queue_max=QUEUE_MAX, reinforce_batch=BATCH, reinforce_seconds=3600,
                 busy_timeout_ms=120_000)
    with Memory(target, embedder=None, config=cfg) as m:
        m.record_many([("deploy without tests", "production crash"), ("enable caching", "faster response"),
                       ("rotate the keys", "expired certificate")])
        query = dict(query="deploy without tests", top_k=3, channels=("lexical", "graph"))
        want = [(h.id, h.score) for h in m.search(**query, reinforce=False)]
        assert want and m._views.projection.graph is not None
        views, before = m._views, _access_counts(m)
        rebuilds, stale = views.projection.rebuilds, views.projection._stale
        marks = []
        mark_stale = views.projection.mark_stale
        views.projection.mark_stale = lambda: (marks.append(1), mark_stale())[1]
        caplog.set_level(logging.INFO, logger="causalmem")
        n = 3 * QUEUE_MAX
        with _write_lock_held(m, target):
            got = [[(h.id, h.score) for h in m.search(**query)] for _ in range(BATCH)]
            in_flight = _flusher_batch_waits_for_the_lock(m)
            got += [[(h.id, h.score) for h in m.search(**query)] for _ in range(n - BATCH)]
            assert got == [want] * n  # the searches' results do not change
            assert len(views.reinforcement.queued) == QUEUE_MAX
            # no rebuild, not even one marked for the next query: the dropped searches carried no pairs
            assert (views.projection.rebuilds, views.projection._stale, marks) == (rebuilds, stale, [])
            full = [r for r in caplog.records if FULL in r.getMessage()]
            assert [r.levelno for r in full] == [logging.WARNING]  # once, not once per search
            dropped = n - in_flight - QUEUE_MAX
            assert views.reinforce_dropped == dropped == m.stats()["reinforce_dropped"]
        written = m.flush()  # PostgreSQL: the flusher thread may have taken the rest already
        assert not views.reinforcement.queued and written == (0 if in_flight and written == 0 else QUEUE_MAX)
        kept = in_flight + QUEUE_MAX  # the searches whose access counts reach the store
        after = _access_counts(m)
        assert {c: after[c] - before[c] for c in before if after[c] != before[c]} == {i: kept for i, _s in want}
        ended = [r for r in caplog.records if "dropped while the writer" in r.getMessage()]
        assert len(ended) == 1 and f" {dropped} searches" in ended[0].getMessage()
        assert views.projection.rebuilds == rebuilds and marks == []

        # the next episode warns again (once), and the count goes on
        caplog.clear()
        with _write_lock_held(m, target):
            for _ in range(BATCH):
                m.search(**query)
            in_flight = _flusher_batch_waits_for_the_lock(m)
            for _ in range(QUEUE_MAX + 2):
                m.search(**query)
        assert [r.levelno for r in caplog.records if FULL in r.getMessage()] == [logging.WARNING]
        assert views.reinforce_dropped == dropped + BATCH - in_flight + 2
        m.flush()
        assert views.projection.rebuilds == rebuilds and marks == []


@pytest.mark.timeout(120)
def test_dropping_searches_that_carried_links_takes_their_links_out_of_the_projection(db_path):
    """With search-time credit (``Config.hebbian_search``) a dropped search's links were in the
    projection already: they leave it (a rebuild from the store), and the store never gets them."""
    cfg = Config(reinforce_queue_max=QUEUE_MAX, reinforce_batch=BATCH, reinforce_seconds=3600,
                 busy_timeout_ms=120_000, hebbian_search=True, hebbian_same_session=False)
    with Memory(db_path, embedder=None, config=cfg) as m:
        if m._views.reinforcement.flusher is not None:
            pytest.skip("PostgreSQL: the flusher thread takes the batch (the test above covers it)")
        a = m.add("alpha release of the kafka consumer", user_id="u")[0].id
        b = m.add("beta rollout of the kafka consumer", user_id="u")[0].id
        views = m._views
        with _write_lock_held(m, db_path):
            for _ in range(QUEUE_MAX):
                m.search("kafka consumer", top_k=2, user_id="u")
            assert views.reinforcement.pending_co and not views.projection._stale
            m.search("kafka consumer", top_k=2, user_id="u")
            assert views.projection._stale and not views.reinforcement.pending_co
            assert views.reinforce_dropped == 1
        m.flush()
        pair = tuple(sorted((m._store.nid_of(a), m._store.nid_of(b))))
        row = m._store.cooccurrence_row(*pair)
        assert row is not None and row[3] == QUEUE_MAX  # the kept searches' credits, not the dropped one's


@pytest.mark.timeout(120)
def test_a_refused_write_of_the_queue_is_counted_as_deferred_and_the_queue_kept(target):
    """The store refusing the queue's write for now (the write lock held past the busy timeout) is
    counted in ``stats()["reinforce_deferred"]``; the searches stay queued and reach the store later."""
    cfg = Config(reinforce_queue_max=QUEUE_MAX, reinforce_batch=BATCH, reinforce_seconds=3600, busy_timeout_ms=200)
    with Memory(target, embedder=None, config=cfg) as m:
        m.record_many([("deploy without tests", "production crash"), ("enable caching", "faster response")])
        query = dict(query="deploy without tests", top_k=2, channels=("lexical", "graph"))
        want = [h.id for h in m.search(**query, reinforce=False)]
        before = _access_counts(m)
        assert m.stats()["reinforce_deferred"] == 0
        flusher = m._views.reinforcement.flusher
        with _write_lock_held(m, target):
            for _ in range(BATCH):
                m.search(**query)
            if flusher is not None:  # PostgreSQL: the flusher thread's write times out on the lock
                with m._views.lock:
                    while flusher.deferred == 0:
                        flusher.cond.wait(0.05)
            deferred = m.stats()["reinforce_deferred"]
            assert deferred >= 1
            assert m.stats()["reinforce_dropped"] == 0  # deferred, not dropped
        m.flush()
        after = _access_counts(m)
        assert {c for c in after if after[c] != before[c]} == set(want)
        assert all(after[c] - before[c] == BATCH for c in want)
