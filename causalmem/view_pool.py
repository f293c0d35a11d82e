"""Views per tenant on a PostgreSQL memory: a pool ``user_id`` -> ``Views``, least recently used first out.

A worker serving many tenants holds the chunk table, BM25 index, vector index and projection of the
tenants it served last, not of the whole database. Each pooled ``Views`` sits on a
``store.postgres_scoped.ScopedStore`` (the rows of one ``user_id``), is built on its first use from the
database and kept in step from the change log: before every scoped call the pool reads what was
committed since its last look (one round trip: the change-log keys and the ``user_id`` of each key's
row) and hands each tenant's views the keys of its rows, leaving out the commits that views made
itself. The estimated bytes of every pooled views (the arrays they hold) are kept under
``budget_bytes``: past it, the least recently used views are closed (their queued reinforcement
written first). A tenant is a ``user_id``; ``agent_id`` and ``run_id`` narrow a call inside its views
as they narrow a whole-store search, so BM25's statistics come from the tenant's rows.

A write made through pooled views is this process's own commit, which the whole-store views (the
unscoped calls) would not see: their tables are dropped, to be rebuilt by the next unscoped call.
"""
from __future__ import annotations

import collections
import contextlib
import threading
from typing import Any, Callable, Iterator

import numpy as np

from .store.postgres_scoped import ScopedStore, tenant_changes
from .views import Views

__all__ = ["ViewPool", "DEFAULT_BUDGET_MB", "estimate_bytes"]

#: ``Memory(dsn, views_budget_mb=...)``'s default: the per-scope views a worker keeps, in MB
DEFAULT_BUDGET_MB = 96.0

_GONE_KINDS = ("cd", "ed", "vd")  # rows deleted for good: which tenant they were is not known


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
    return sum(_array_bytes(part, 3, seen) for part in
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
        self.cursor: int | None = None
        self.evictions = 0
        self.builds = 0

    # ------------------------------------------------------------------ the change log, once per call
    def sync(self) -> None:
        """Hand every pooled views the changes to its tenant's rows committed since the last look (by any
        connection, this one's own writes through the whole-store views included): one round trip."""
        after = self.cursor
        if after is None or not self.views:
            self.cursor = int(self.store.change_seq())
            return
        upto, floor, rows = tenant_changes(self.store, after)
        if upto == after:
            return
        self.whole.sync_external()  # the wrapped store's row cache hears of the same commits first
        if floor is not None and after < floor:  # the log no longer reaches back: re-read every scope
            for v in self.views.values():
                self._scoped(v).deliver(None)
        else:
            by_user: dict[str | None, dict[str, set[int]]] = {}
            gone: dict[str, set[int]] = {}
            for _seq, kind, key, user in rows:
                if user is None and kind in _GONE_KINDS:
                    gone.setdefault(kind, set()).add(key)
                    continue
                by_user.setdefault(user, {}).setdefault(kind, set()).add(key)
            for uid, v in self.views.items():
                delta = by_user.get(uid, {})
                if gone:
                    delta = {**delta, **{k: delta.get(k, set()) | keys for k, keys in gone.items()}}
                self._scoped(v).deliver(delta)
        self.cursor = upto

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
            self.sync()
            v = self.views.get(user_id)
            if v is None:
                v = Views(ScopedStore(self.store, user_id), self.config, self.clock, embedder=self.embedder,
                          lock=self.lock)
                self.views[user_id] = v
                self.sizes[user_id] = 0
                self.builds += 1
            self.views.move_to_end(user_id)
            return v

    def done(self, user_id: str) -> None:
        """A call on ``user_id``'s views ended: its size counted, the pool trimmed."""
        with self.lock:
            v = self.views.get(user_id)
            if v is None:
                return
            self.sizes[user_id] = estimate_bytes(v)
            self.trim()

    def trim(self) -> None:
        """Close the least recently used views while the pool is over its budget (the newest stays)."""
        while len(self.views) > 1 and sum(self.sizes.values()) > self.budget_bytes:
            uid, v = self.views.popitem(last=False)
            self.sizes.pop(uid, None)
            v.close()
            self.evictions += 1

    @property
    def bytes(self) -> int:
        return sum(self.sizes.values())

    def close(self) -> None:
        with self.lock:
            while self.views:
                _, v = self.views.popitem(last=False)
                v.close()
            self.sizes.clear()
