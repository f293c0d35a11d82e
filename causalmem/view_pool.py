"""Views per tenant on a PostgreSQL memory: a pool ``user_id`` -> ``Views``, least recently used first out.

A worker serving many tenants holds the chunk table, BM25 index, vector index and projection of the
tenants it served last, not of the whole database. Each pooled ``Views`` sits on a
``store.postgres_scoped.ScopedStore`` (the rows of one ``user_id``), is built on its first use from the
database and kept in step from the per-tenant change log: before every call on a tenant the pool
reads what was committed to that tenant's rows since its views last looked (one indexed round trip,
``store.postgres_scoped.tenant_log``; other tenants' writes cost it nothing) and hands the keys to the
tenant's store, which the views then patch in as they patch another host's commits. The estimated
bytes of every pooled views (the arrays they hold, the rows read for searches) are kept under
``budget_bytes``: past it, the least recently used views are closed (their queued reinforcement
written first). A tenant is a ``user_id``; ``agent_id`` and ``run_id`` narrow a call inside its views
as they narrow a whole-store search, so BM25's statistics come from the tenant's rows.

Writes go through the whole-store views (stored nids, the write path unchanged) and reach the
tenant's pooled views through the same log, like any other connection's commit.
"""
from __future__ import annotations

import collections
import contextlib
import threading
from typing import Any, Callable, Iterator

import numpy as np

from .errors import StoreError
from .store.postgres_scoped import ScopedStore, tenant_log
from .views import Views

__all__ = ["ViewPool", "DEFAULT_BUDGET_MB", "estimate_bytes"]

#: ``Memory(dsn, views_budget_mb=...)``'s default: the per-scope views a worker keeps, in MB
DEFAULT_BUDGET_MB = 96.0
#: a cached chunk row's bytes besides its text: the row object and its ~16 values (tracemalloc, CPython 3.11)
ROW_BYTES = 1000



def _array_bytes(obj: Any, depth: int, seen: set[int]) -> int:
    if obj is None or id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes) if obj.base is None else 0
    if isinstance(obj, (str, bytes, int, float, bool)):
        return 0
    if isinstance(obj, dict):
        total = 100 * len(obj)  # a key, a value and the slot, roughly
        if depth > 0:
            total += sum(_array_bytes(v, depth - 1, seen) for v in obj.values() if isinstance(v, np.ndarray))
        return total
    if isinstance(obj, (list, tuple)):
        if depth > 0:
            return 8 * len(obj) + sum(_array_bytes(v, depth - 1, seen) for v in obj)
        return 8 * len(obj)
    if depth <= 0 or not hasattr(obj, "__dict__"):
        return 0
    return sum(_array_bytes(v, depth - 1, seen) for v in vars(obj).values())


def estimate_bytes(views: Views) -> int:
    """The bytes a ``Views`` holds in its chunk table, BM25 index, projection and vector index (their
    arrays, and a rough 100 bytes per entry of their dictionaries)."""
    seen: set[int] = set()
    cached = getattr(views.store, "rows", None) or {}  # a ScopedStore's rows read for searches
    rows = sum(ROW_BYTES + len(r.text) for r in cached.values() if r is not None)
    return rows + sum(_array_bytes(part, 3, seen) for part in
                                         (views.chunks, views.lexical, views.projection, views.vector_view.index))


class ViewPool:
    """``user_id`` -> ``Views`` of that tenant, kept in step and under a byte budget (module docstring)."""

    def __init__(self, whole: Views, clock: Callable[[], float], *, budget_mb: float | None = None) -> None:
        """``budget_mb``: ``Memory(views_budget_mb=...)``, checked there (None: ``DEFAULT_BUDGET_MB``)."""
        self.whole = whole  # the views of the whole store: calls without a user_id, and every call on SQLite
        self.store: Any = whole.store
        # a change log to follow (PostgreSQL), and not turned off (``Config.scoped_views``)
        self.enabled = hasattr(self.store, "foreign_changes") and whole.config.scoped_views is True
        self.config = whole.config
        self.clock = clock
        self.embedder = whole.embedder
        self.lock: threading.RLock = whole.lock
        self.budget_bytes = int((DEFAULT_BUDGET_MB if budget_mb is None else budget_mb) * 1024 * 1024)
        self.views: collections.OrderedDict[str, Views] = collections.OrderedDict()
        self.sizes: dict[str, int] = {}
        self.keys: dict[str, tuple] = {}  # what a views' size was estimated at (its parts, its store's counts)
        self.evictions = 0
        self.builds = 0

    # ------------------------------------------------------------------ the tenant's change log, once per call
    def catch_up(self, scoped: ScopedStore) -> None:
        """Hand one tenant's store the changes to its rows committed since its last look, by any
        connection (this process's own writes through the whole-store views included): one indexed read
        of the per-tenant change log (``tenant_log``), whatever the other tenants wrote meanwhile."""
        after = scoped.cursor
        upto, floor, rows = tenant_log(self.store, scoped.user_id, after)
        if upto == after:
            return
        if floor is not None and after < floor:  # the log no longer reaches back: re-read the scope
            scoped.deliver(None)
        else:
            delta: dict[str, set[int]] = {}
            for _seq, kind, keys in rows:
                delta.setdefault(kind, set()).update(keys)
            scoped.deliver(delta)
        scoped.cursor = upto

    @staticmethod
    def _scoped(v: Views) -> ScopedStore:
        store = v.store
        assert isinstance(store, ScopedStore)
        return store

    # ------------------------------------------------------------------ the pool
    @contextlib.contextmanager
    def scope(self, user_id: str | None) -> Iterator[Views]:
        """The views a read on ``user_id`` uses: the tenant's own (PostgreSQL), else the whole store's."""
        if not self.enabled or user_id is None:
            yield self.whole
            return
        try:
            yield self.get(user_id)
        finally:
            self.done(user_id)

    @contextlib.contextmanager
    def writing(self, user_id: str | None) -> Iterator[Views]:
        """The views a write uses: always the whole store's (stored nids); the tenant's queued search
        reinforcement is written first, as a whole-store views writes its own in its next write."""
        if self.enabled and user_id is not None:
            with self.lock:
                v = self.views.get(user_id)
                if v is not None and v.reinforcement.queued:
                    v.flush_reinforcement()
        yield self.whole

    def get(self, user_id: str) -> Views:
        """The views of ``user_id``, in step with the store (built now on a first touch)."""
        with self.lock:
            v = self.views.get(user_id)
            if v is None:
                scoped = ScopedStore(self.store, user_id)
                scoped.cursor = int(self.store.change_seq())  # read before the build reads the rows
                v = Views(scoped, self.config, self.clock, embedder=self.embedder, lock=self.lock)
                self.views[user_id] = v
                self.sizes[user_id] = 0
                self.builds += 1
            else:
                self.catch_up(self._scoped(v))
            self.views.move_to_end(user_id)
            return v

    def done(self, user_id: str) -> None:
        """A call on ``user_id``'s views ended: its size counted, the pool trimmed."""
        with self.lock:
            v = self.views.get(user_id)
            if v is None:
                return
            scoped = self._scoped(v)
            key = (scoped.data_version(), scoped.n_local, len(scoped.rows), len(scoped.superseded),
                   *(id(p) for p in (v.chunks, v.lexical, v.projection, v.vector_view.index)))
            if self.keys.get(user_id) != key:  # walking the views' parts costs more than a warm search
                self.keys[user_id] = key
                self.sizes[user_id] = estimate_bytes(v)
            self.trim()

    def trim(self) -> None:
        """Close the least recently used views while the pool is over its budget (the newest stays)."""
        while len(self.views) > 1 and sum(self.sizes.values()) > self.budget_bytes:
            uid, v = self.views.popitem(last=False)
            self.sizes.pop(uid, None)
            self.keys.pop(uid, None)
            self._close(v)
            self.evictions += 1

    @staticmethod
    def _close(v: Views) -> None:
        """Close pooled views, their queued search reinforcement written first (``Views.close`` marks
        the views closed before it flushes, which a pooled views' own write would then refuse)."""
        try:
            v.flush_reinforcement(wait=True)
        except StoreError as exc:
            v.reinforcement.drop(str(exc))
        v.close()

    def flush(self) -> int:
        """``Memory.flush``'s part for the tenants' views: write each one's queued search reinforcement
        now; returns how many searches it covered."""
        with self.lock:
            return sum(v.flush_reinforcement(wait=True) for v in self.views.values() if v.reinforcement.queued)

    @property
    def bytes(self) -> int:
        return sum(self.sizes.values())

    def close(self) -> None:
        with self.lock:
            while self.views:
                _, v = self.views.popitem(last=False)
                self._close(v)
            self.sizes.clear()
            self.keys.clear()
