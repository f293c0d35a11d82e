"""PostgreSQL: the search reinforcement is written off the search call (``reinforce_flush.py``).
The search-time credit rule (``Config.hebbian_search``, opt-in) is on where a test watches links.

The search that fills the batch only wakes the flusher thread, which writes the queue on its own
connection; the links the searches learned are visible to the next query while that write is in
flight; ``flush()`` and ``close()`` wait for it and write what is still queued. Real server
(tests/pg_cluster.py); the flusher is held mid-write with an event (no sleeps, no timing).

The flusher thread is the whole-store views': these memories run with ``Config(scoped_views=False)``,
so that their calls naming a user_id use those views (a tenant's views, ``view_pool``, start no thread
and write their queue inside the call that fills it: tests/test_postgres_scoped.py).
"""
from __future__ import annotations

import threading

import pytest

psycopg = pytest.importorskip("psycopg")

from causalmem import Config, Memory  # noqa: E402

LEX_GRAPH = ("lexical", "graph")


class Held:
    """Holds the flusher's write (before it sends anything) until ``release``."""

    def __init__(self, mem: Memory) -> None:
        self.flusher = mem._views.reinforcement.flusher
        assert self.flusher is not None
        self.started, self.go = threading.Event(), threading.Event()
        write = self.flusher._write

        def held(batch):
            self.started.set()
            assert self.go.wait(15), "the test never released the flusher"
            return write(batch)

        self.flusher._write = held

    def __enter__(self) -> "Held":
        return self

    def __exit__(self, *exc) -> None:
        self.go.set()  # never leave the flusher waiting after a failed assertion

    def release(self) -> None:
        self.go.set()


def _activation(m: Memory, query: str, target: str, **scope) -> float | None:
    for h in m.search(query, top_k=10, channels=LEX_GRAPH, explain=True, reinforce=False, **scope):
        if h.id == target:
            return h.signals["activation"]
    return None


def _stored(m: Memory, x: str, y: str) -> float | None:
    a, b = sorted((m._store.nid_of(x), m._store.nid_of(y)))
    rows = m._store.query("SELECT weight FROM cooccurrence WHERE a = %s AND b = %s", (a, b))
    return rows[0][0] if rows else None


def test_the_search_that_fills_the_batch_sends_no_write_and_the_links_stay_visible_meanwhile(pg_dsn):
    cfg = Config(scoped_views=False, reinforce_seconds=3600, reinforce_batch=4, hebbian_same_session=False, hebbian_search=True)
    with Memory(pg_dsn, embedder=None, config=cfg) as m:
        a = m.add("alpha release of the kafka consumer", user_id="u")[0].id
        b = m.add("beta rollout of the kafka consumer", user_id="u")[0].id
        assert _activation(m, "alpha release", b, user_id="u") is None  # nothing joins them yet
        m.add("gamma node of the zookeeper ensemble", user_id="u")
        m.add("delta node of the zookeeper ensemble", user_id="u")
        m.search("zookeeper ensemble", top_k=2, user_id="u")  # the co-occurrence mirror read, once
        m.flush()
        held = Held(m)
        sent: list[str] = []
        execute = psycopg.Cursor.execute

        def counted(cur, query, *args, **kwargs):
            if cur.connection is m._store.conn:
                sent.append(str(query))
            return execute(cur, query, *args, **kwargs)

        psycopg.Cursor.execute = counted
        try:
            for _ in range(4):  # the 4th fills the batch: it wakes the flusher, which is held
                checks = m._store.checks_sent
                hits = m.search("kafka consumer", top_k=2, user_id="u")
                assert {h.id for h in hits} == {a, b}
                assert m._store.checks_sent == checks + 1  # its change check, sent ahead
            assert held.started.wait(30)
            assert sent == []  # no statement of its own: no lock, no write, no second check
        finally:
            psycopg.Cursor.execute = execute
        assert held.flusher.inflight and m._views.reinforcement.queued == []
        assert _stored(m, a, b) is None  # the batch (the pair's first credits) not written yet ...
        seen = _activation(m, "alpha release", b, user_id="u")
        assert seen is not None and seen > 0  # ... and the next query sees the links
        # credited again while in flight: the increment counts the credit in flight (a first credit
        # would add ``hebbian_start``, a repeat adds ``hebbian_step``)
        more = m.search("kafka consumer", top_k=2, user_id="u")
        assert {h.id for h in more} == {a, b}
        again = _activation(m, "alpha release", b, user_id="u")
        assert again > seen
        held.release()
        m.flush()  # waits for the batch in flight, then writes the 5th search inline
        step, start = m.config.hebbian_step, m.config.hebbian_start
        assert _stored(m, a, b) == pytest.approx(start + 4 * step)
        assert held.flusher.batches == 1
        m._projection.mark_stale()  # rebuilt from the store alone: what the queries saw
        assert _activation(m, "alpha release", b, user_id="u") == pytest.approx(again, rel=1e-5)
        counts = dict(m._store.query("SELECT nid, access_count FROM chunks"))
        assert sorted(counts.values())[-2:] == [5, 5]


def test_close_writes_the_batch_in_flight_and_what_is_queued_behind_it(pg_dsn):
    cfg = Config(scoped_views=False, reinforce_seconds=3600, reinforce_batch=8, hebbian_search=True)
    m = Memory(pg_dsn, embedder=None, config=cfg)
    edges = m.record_many([(f"pin the {w} version {i}", f"the {w} build {i} went green")
                           for i in range(20) for w in ("compiler", "linker")])
    m.search("pin the compiler version 1", reinforce=False)
    held = Held(m)
    returned = 0
    for i in range(13):  # 8 in flight (held), 5 queued behind them
        returned += len(m.search(f"pin the {('compiler', 'linker')[i % 2]} version {i}"))
        if i == 7:
            assert held.started.wait(30)  # the flusher has taken the first 8
    assert len(m._views.reinforcement.queued) == 5
    closing = threading.Thread(target=m.close)
    closing.start()
    closing.join(0.2)
    assert closing.is_alive()  # close waits for the batch in flight
    held.release()
    closing.join(60)
    assert not closing.is_alive()
    with Memory(pg_dsn, embedder=None) as fresh:
        total = fresh._store.query("SELECT SUM(access_count) FROM chunks")[0][0]
        assert total == returned  # every search's access, the batch in flight and the queue behind it
        pairs = fresh._store.query("SELECT COUNT(*), SUM(hits) FROM cooccurrence")[0]
        assert pairs[0] > 0
        assert fresh.get(edges[0].src) is not None


def test_a_failed_flush_keeps_the_batch_in_front_and_nothing_is_lost(pg_dsn):
    """The flusher's write fails (here: another host holds the writer lock past the busy timeout):
    the batch goes back in front of the newer searches, the next flush writes both."""
    cfg = Config(scoped_views=False, reinforce_seconds=3600, reinforce_batch=4, hebbian_same_session=False, busy_timeout_ms=200,
                 hebbian_search=True)
    with Memory(pg_dsn, embedder=None, config=cfg) as m, \
            Memory(pg_dsn, embedder=None) as other:
        a = m.add("alpha release of the kafka consumer", user_id="u")[0].id
        b = m.add("beta rollout of the kafka consumer", user_id="u")[0].id
        flusher = m._views.reinforcement.flusher
        with other._store.transaction():  # the writer lock, held
            for _ in range(4):
                m.search("kafka consumer", top_k=2, user_id="u")
            with m._views.lock:
                flusher.cond.wait_for(lambda: not flusher.inflight and not flusher.wanted, 30)
            assert len(m._views.reinforcement.queued) == 4 and flusher.batches == 0
            assert _activation(m, "alpha release", b, user_id="u") > 0  # still visible
        m.search("kafka consumer", top_k=2, user_id="u")
        m.flush()
        step, start = m.config.hebbian_step, m.config.hebbian_start
        assert _stored(m, a, b) == pytest.approx(start + 4 * step)
        assert sorted(v for (v,) in m._store.query("SELECT access_count FROM chunks")) == [5, 5]


def test_another_hosts_write_during_a_flush_is_still_seen_by_the_next_query(pg_dsn):
    """A write from another host lands while this host's flusher commits: the next query here sees
    it (the flusher's own commit is not taken for it, nor it for the flusher's)."""
    cfg = Config(scoped_views=False, reinforce_seconds=3600, reinforce_batch=4)
    with Memory(pg_dsn, embedder=None, config=cfg) as a, Memory(pg_dsn, embedder=None) as b:
        a.record_many([(f"decision {i}", f"outcome {i}") for i in range(20)])
        a.search_causal("decision 1")
        for round_ in range(3):
            held = Held(a)
            for i in range(4):
                a.search(f"decision {i}")
            assert held.started.wait(30)
            b.record_decision(f"rollout plan {round_}", f"pager storm {round_}")  # before the flush's commit
            held.release()
            with a._views.lock:
                a._views.reinforcement.flusher.join()
            assert [x.text for x in a.search_causal(f"rollout plan {round_}")] == [f"pager storm {round_}"]
            b.record_decision(f"second plan {round_}", f"second storm {round_}")  # after it
            assert [x.text for x in a.search_causal(f"second plan {round_}")] == [f"second storm {round_}"]
            a._views.reinforcement.flusher._write = type(a._views.reinforcement.flusher)._write.__get__(a._views.reinforcement.flusher)
        a.flush()
        rows = a._store.query("SELECT SUM(access_count) FROM chunks")[0][0]
        assert rows > 0


def test_an_idle_flusher_thread_ends_and_the_next_batch_starts_another(pg_dsn, monkeypatch):
    """The thread ends after ``IDLE_S`` without a batch (it then holds no reference to a Memory its
    caller dropped unclosed); the next full batch starts another, and both batches are written."""
    from causalmem import reinforce_flush

    monkeypatch.setattr(reinforce_flush, "IDLE_S", 0.05)
    threads: list = []  # every thread a wake-up started, noted in the searching thread (the test may look late)
    wake = reinforce_flush.Flusher.wake

    def noted(self):
        wake(self)
        if not any(t is self.thread for t in threads):
            threads.append(self.thread)

    monkeypatch.setattr(reinforce_flush.Flusher, "wake", noted)
    cfg = Config(scoped_views=False, reinforce_seconds=3600, reinforce_batch=4)
    with Memory(pg_dsn, embedder=None, config=cfg) as m:
        m.record_many([(f"decision {i}", f"outcome {i}") for i in range(10)])
        flusher = m._views.reinforcement.flusher
        for k in range(2):
            for i in range(4):
                m.search(f"decision {i}")
            assert len(threads) == k + 1 and threads[-1] is not None  # the 4th search started a thread
            threads[-1].join(30)  # written, then idle: the thread ends by itself
            assert not threads[-1].is_alive() and flusher.thread is None
        assert threads[0] is not threads[1] and flusher.batches == 2
        returned = m._store.query("SELECT SUM(access_count) FROM chunks")[0][0]
        assert returned >= 8


def test_chunks_purged_before_the_flush_takes_the_lock_get_no_credit(pg_dsn):
    """Another host's purge takes the writer lock while a batch waits to be written: the batch's
    write (after it) leaves no co-occurrence row and no access count for the purged chunks; the
    chunks that remain are credited. (This host's own purge waits for the batch in flight:
    ``Flusher.settle``.)"""
    cfg = Config(scoped_views=False, reinforce_seconds=3600, reinforce_batch=4, hebbian_same_session=False, hebbian_search=True)
    with Memory(pg_dsn, embedder=None, config=cfg) as m, Memory(pg_dsn, embedder=None) as other:
        m.add("alpha release of the kafka consumer", user_id="u")
        m.add("beta rollout of the kafka consumer", user_id="u")
        m.add("gamma node of the zookeeper ensemble", user_id="v")
        m.add("delta node of the zookeeper ensemble", user_id="v")
        m.search("zookeeper ensemble", top_k=2, user_id="v")
        m.flush()  # v's pair credited once, before
        with Held(m) as held:
            for i in range(4):
                m.search("kafka consumer" if i % 2 else "zookeeper ensemble", top_k=2,
                         user_id="u" if i % 2 else "v")
            assert held.started.wait(30)
            assert other.delete_all(user_id="u", purge=True) == 2  # takes the lock before the batch
            held.release()
            m.flush()
        left = {n for (n,) in m._store.query("SELECT nid FROM chunks")}
        pairs = m._store.query("SELECT a, b, hits FROM cooccurrence")
        assert len(left) == 2 and pairs and all(a in left and b in left for a, b, _h in pairs)
        assert [h for _a, _b, h in pairs] == [3]  # once before, twice in the batch


def test_a_confirm_while_a_batch_is_in_flight_leaves_the_projection_equal_to_the_store(pg_dsn):
    """``confirm`` of a pair whose search credit is in flight (the flusher took the batch and has
    not taken the writer lock yet): after both commit, what the queries see is what the store holds
    (a projection rebuilt from the store alone gives the same energy). The confirm's credit counts
    the batch's: the write waits for the batch in flight (``Views._write``), else it would add a
    first credit (``hebbian_start``) on top of the batch's own first one."""
    cfg = Config(scoped_views=False, reinforce_seconds=3600, reinforce_batch=4, hebbian_same_session=False, hebbian_search=True)
    with Memory(pg_dsn, embedder=None, config=cfg) as m:
        a = m.add("alpha release of the kafka consumer", user_id="u")[0].id
        b = m.add("beta rollout of the kafka consumer", user_id="u")[0].id
        with Held(m) as held:
            for _ in range(4):
                m.search("kafka consumer", top_k=2, user_id="u")
            assert held.started.wait(30) and _stored(m, a, b) is None  # the pair's first credits, in flight
            # the confirm runs in a thread; the flusher is let go once the confirm has committed
            # (the old code) or waits for the batch (a wait on the flusher's condition): no timing
            confirming: list[threading.Thread] = []
            parked, result = threading.Event(), []
            cond = held.flusher.cond
            wait = cond.wait

            def noted(timeout=None):
                if threading.current_thread() in confirming:
                    parked.set()
                return wait(timeout)

            cond.wait = noted

            def run() -> None:
                try:
                    result.append(m.confirm([a, b]))
                except BaseException as exc:  # pragma: no cover - reported by the assertion below
                    result.append(exc)
                finally:
                    parked.set()

            confirming.append(threading.Thread(target=run))
            confirming[0].start()
            assert parked.wait(30)
            held.release()
            confirming[0].join(30)
            assert not confirming[0].is_alive() and result == [1]
        m.flush()
        step, start = m.config.hebbian_step, m.config.hebbian_start
        assert _stored(m, a, b) == pytest.approx(start + 4 * step)  # credits commute: 4 searches + 1 confirm
        seen = _activation(m, "alpha release", b, user_id="u")
        m._projection.mark_stale()  # rebuilt from the store alone
        assert _activation(m, "alpha release", b, user_id="u") == pytest.approx(seen, rel=1e-5)


def test_a_write_waiting_for_the_batch_in_flight_goes_before_the_next_batch(pg_dsn):
    """``Flusher.settle`` is fair: a write that waits for the batch in flight commits before the thread
    takes the next batch, however many searches queue meanwhile (else a stream of searches with a
    small ``reinforce_batch`` starves the main connection's writes)."""
    cfg = Config(scoped_views=False, reinforce_seconds=3600, reinforce_batch=1)
    with Memory(pg_dsn, embedder=None, config=cfg) as m:
        m.add("alpha release of the kafka consumer", user_id="u")
        with Held(m) as held:
            m.search("kafka consumer", top_k=1, user_id="u")  # batch 1, taken and held
            assert held.started.wait(30)
            flusher, order = held.flusher, []
            inner = flusher._write

            def noted(batch):
                order.append("batch")
                return inner(batch)

            flusher._write = noted
            track = m._views.files.track_commit  # the write's commit, noted under the views lock

            def committed(vectors):
                order.append("write")
                return track(vectors)

            m._views.files.track_commit = committed  # type: ignore[method-assign]
            writer = threading.Thread(target=m.add, args=("beta rollout",), kwargs={"user_id": "u"})
            writer.start()
            with m._views.lock:  # the write waits in settle (its wait releases the lock)
                while not flusher.settling:
                    flusher.cond.wait(0.01)
            for _ in range(3):  # batch 2 asked for while the write waits
                m.search("kafka consumer", top_k=1, user_id="u")
            held.release()
            writer.join(30)
            assert not writer.is_alive()
            m.flush()
        assert order[0] == "write", order
