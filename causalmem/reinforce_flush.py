"""Search reinforcement written off the search call, on a server backend (PostgreSQL).

Every ``reinforce_batch``-th search (or the first after ``reinforce_seconds``) used to write the
queue of access counts and Hebbian credit inside that search: on PostgreSQL a few round trips and
~10 ms of server time, which made the default search's p99 that write. Here the search only wakes
this thread, which writes the queue on its own connection (the store's ``writer_twin``) without
the views lock, then — under the lock, a few microseconds of work — adopts the commit into this
process's row cache and chunk table (``PostgresStore.adopt_write``).

What stays as it was:
* learned links are visible to the next query at once: the projection carries them from the
  search that made them (``Reinforcement.learn_now``); until the write is adopted, the credit in flight
  (``Reinforcement.flushing_co``) counts beside the queued one for the next search's increments;
* one transaction for the whole batch, retried when the server rolls it back; a busy writer lock
  leaves the batch queued (in front of newer searches) for the next wake-up;
* ``flush()`` and ``close()`` wait for a write in flight, then write what is still queued on the
  main connection: nothing queued is lost at close;
* a write on the main connection (``Views.write``: ``confirm``, ``add`` ...) waits for a batch in flight
  before it takes the writer lock (``Flusher.settle``), so it reads the co-occurrence weights with
  the batch's credit in them, as the projection counts them;
* a crash loses what is queued in memory, as on SQLite (whose queue is in memory too): at most
  the searches since the last written batch, including a batch in flight.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Protocol, Sequence

from . import learning
from .errors import StoreError, run_retrying

log = logging.getLogger("causalmem")

Queued = Sequence[tuple[float, list[int], list[list[int]]]]


class FlushQueue(Protocol):
    """What the flusher thread is given: the reinforcement queue (``reinforcement.Reinforcement``)."""

    lock: threading.RLock
    store: Any
    config: Any
    queued: list[tuple[float, list[int], list[list[int]]]]
    pending_co: dict[tuple[int, int], float]
    flushing_co: dict[tuple[int, int], float]
    off: str | None

    def adopted(self, done: tuple[int, dict, list[int] | None, list[tuple]], batch: Queued) -> None: ...

    def written(self) -> None: ...

    def turn_off(self, why: str) -> None: ...

#: seconds the thread waits for the next batch before it ends (a later batch starts another): an
#: idle thread holds no reference to a ``Memory`` its caller dropped without closing it
IDLE_S = 2.0


def credit_rows(store: Any, queued: Queued, config: Any) -> tuple[list[tuple[int, int, float, int, float]], list]:
    """The co-occurrence rows the queued searches leave (weight after each group's credit in queue
    order, number of credits, last time), from the weights ``store`` holds now, and the groups."""
    credits = [(t, g) for t, _nids, groups in queued for g in groups]
    if not credits:
        return [], []
    stored = store.cooccurrence_weights(sorted({n for _t, g in credits for n in g}))
    final: dict[tuple[int, int], list] = {}  # pair -> [weight, credits, last time]
    for t, g in credits:
        for key in learning.hebbian_pairs(g, learning.MAX_HEBBIAN_NIDS):
            got = final.get(key)
            if got is None:
                final[key] = [learning.next_hebbian_weight(stored.get(key), config), 1, t]
            else:
                got[0], got[1], got[2] = learning.next_hebbian_weight(got[0], config), got[1] + 1, t
    return [(a, b, w, n, t) for (a, b), (w, n, t) in final.items()], [g for _t, g in credits]


class Flusher:
    """The thread that writes the reinforcement queue (see the module docstring). Its state is
    guarded by the queue's lock, the views lock (``cond`` waits on it). ``spawn(name, target)`` starts
    its thread (``background.Background.thread``: the owner of a memory's threads)."""

    def __init__(self, queue: FlushQueue, *, spawn: Callable[..., threading.Thread] | None = None) -> None:
        self.queue = queue
        self.cond = threading.Condition(queue.lock)
        self._spawn = spawn
        self.inflight = False
        self.wanted = False
        self.stopping = False
        self.thread: threading.Thread | None = None
        self.twin: Any = None
        self.batches = 0  # batches written (tests)
        self.settling = 0  # writers waiting in ``settle``: no new batch is taken meanwhile
        self.deferred = 0  # batch writes the store refused (busy, disk full ...), ever
        self._deferring = False  # in an episode of refused writes: logged once, until a batch is written

    def wake(self) -> None:
        """A search filled the batch (the caller holds the views lock): write it soon."""
        self.wanted = True
        if self.thread is None:
            if self._spawn is not None:
                self.thread = self._spawn("causalmem-reinforce", self._run)
            else:
                self.thread = threading.Thread(target=self._run, name="causalmem-reinforce", daemon=True)
                self.thread.start()
        self.cond.notify_all()

    def join(self) -> None:
        """Wait (the views lock released meanwhile) until no batch is in flight or asked for."""
        while self.inflight or (self.wanted and not self.stopping and self.thread is not None
                                and self.thread.is_alive()):
            self.cond.wait(0.5)

    def settle(self) -> None:
        """Wait (the views lock released meanwhile) until no batch is in flight: a write on the main
        connection calls this before it takes the writer lock (``Views._write``; the caller holds the
        views lock, and keeps it through its transaction, so no batch is taken meanwhile).

        Why: the projection counts a batch's credit from its searches on; a write that took the
        writer lock between the batch's pick-up and its commit would read the co-occurrence weights
        without it — a ``confirm`` would add a first credit (``hebbian_start``) to the projection
        where the batch had given it already — and leave the projection a credit step off the store
        until the next rebuild (the stored weights are right: credits commute). No deadlock: the
        thread holding the writer lock for the batch needs neither this lock nor the main store's
        ``_lock`` until it has committed (``PostgresStore.expect_own``), and then takes them with the
        writer lock released."""
        if not self.inflight:
            return
        self.settling += 1  # the thread takes no new batch before this writer has had its turn
        try:
            while self.inflight:
                self.cond.wait(0.5)
        finally:
            self.settling -= 1
            self.cond.notify_all()  # the thread may take the next batch once this write has released the lock

    def close(self) -> None:
        """Stop the thread after its batch in flight (the caller holds the views lock), close the twin."""
        self.stopping = True
        self.cond.notify_all()
        self.join()
        thread, self.thread = self.thread, None
        if thread is not None:
            while thread.is_alive():
                self.cond.wait(0.01)  # the thread needs the lock to see ``stopping``
        twin, self.twin = self.twin, None
        if twin is not None:
            twin.close()

    def _run(self) -> None:
        queue = self.queue
        while True:
            with queue.lock:
                while (not self.wanted or self.settling) and not self.stopping:
                    if not self.cond.wait(IDLE_S) and not self.wanted and not self.stopping:
                        self.thread = None  # idle: ends here; ``wake`` starts another
                        self.cond.notify_all()
                        return
                if self.stopping:
                    return
                self.wanted = False
                batch = queue.queued
                if not batch or queue.off is not None:
                    continue
                queue.queued = []
                queue.flushing_co, queue.pending_co = queue.pending_co, {}
                self.inflight = True
            try:
                done = self._write(batch)
            except BaseException as exc:  # nothing written: the batch waits in front of newer searches
                with queue.lock:
                    queue.queued = list(batch) + queue.queued
                    for key, d in queue.flushing_co.items():
                        queue.pending_co[key] = queue.pending_co.get(key, 0.0) + d
                    queue.flushing_co = {}
                    self.inflight = False
                    self.cond.notify_all()
                    self._failed(exc)
                continue
            with queue.lock:
                try:
                    if done is not None:
                        queue.adopted(done, batch)
                    queue.flushing_co = {}
                    queue.written()
                    self.batches += 1
                    self._deferring = False
                finally:
                    self.inflight = False
                    self.cond.notify_all()

    def _failed(self, exc: BaseException) -> None:
        msg = str(exc)
        queue = self.queue
        if isinstance(exc, StoreError) and ("read-only" in msg or "readonly" in msg):
            queue.turn_off(f"the database is read-only ({msg})")
        elif isinstance(exc, StoreError):
            # every search wakes the thread while the batch waits: one line per episode, not per search
            self.deferred += 1
            if not self._deferring:
                self._deferring = True
                log.info("causalmem: %s: reinforcement write deferred until the store takes it: %s",
                         queue.store.path, msg)
        else:  # pragma: no cover - a bug: say so, keep the queue
            log.warning("causalmem: %s: reinforcement write failed: %r", queue.store.path, exc)

    def _write(self, batch: Queued) -> tuple[int, dict, list[int] | None, list[tuple]] | None:
        """The batch in one transaction on the twin connection (retried when the server rolls it
        back); the twin's ``last_write``, or None when it changed nothing."""
        queue = self.queue
        main_: Any = queue.store  # a server backend (``writer_twin``)
        if self.twin is None:
            self.twin = main_.writer_twin()
        twin = self.twin

        def once() -> tuple[int, dict, list[int] | None, list[tuple]] | None:
            named: list[int] = []

            def begun(seq: int) -> None:
                named.append(seq)
                main_.expect_own(seq)

            twin.on_begin = begun
            twin.last_write = None
            try:
                with twin.transaction(wait=True):
                    # the chunks still stored, under the writer lock: one purged by a write that
                    # took the lock first (the inline path wrote the queue before it) gets nothing
                    wanted = sorted({n for _t, nids, _g in batch for n in nids}
                                    | {n for _t, _n, groups in batch for g in groups for n in g})
                    kept = twin.stored_nids(wanted)
                    live = batch if len(kept) == len(wanted) else [
                        (t, [n for n in nids if n in kept],
                         [k for k in ([n for n in g if n in kept] for g in groups) if len(k) > 1])
                        for t, nids, groups in batch]
                    twin.touch_chunks_batch([(nids, t) for t, nids, _groups in live])
                    rows, _groups = credit_rows(twin, live, queue.config)
                    twin.credit_cooccurrence(rows)
            except BaseException:  # rolled back (retried by run_retrying) or failed: nothing committed
                for seq in named:
                    main_.forget_expected(seq)
                raise
            done = twin.last_write
            if done is None or not named or done[0] != named[-1]:
                for seq in named:
                    main_.forget_expected(seq)
                return None
            return done

        return run_retrying(once)
