"""PostgreSQL row cache: this process's copy of the chunk rows and co-occurrence pairs a query reads.

``postgres.PostgresStore`` keeps it exact against the change sequence (its own commits from their
change-log keys, other hosts' through ``foreign_changes``); this module holds the cache itself and
the row shapes it keeps, and talks to no database.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

#: most chunk rows a process mirrors (a store with more chunks is cached row by row, up to this many)
ROW_CACHE_MAX = 250_000
#: most co-occurrence pairs a process mirrors (a larger table is read per query, as before)
CO_CACHE_MAX = 250_000
#: a write transaction that updated at most this many chunks (or co-occurrence keys) reads their new
#: state back in its last round trip, so the row cache keeps them instead of re-reading them later
REFRESH_MAX = 2_000


class RowCache:
    """This process's copy of the chunk rows a query reads (texts, ids, metadata, the superseded
    set), so a query answers from memory like the SQLite backend's page cache does.

    Exact with respect to ``upto``: every change with a sequence value up to it has been applied
    (own commits from their change-log keys, other hosts' from ``foreign_changes``). ``complete``:
    ``rows`` holds every chunk of the store except the nids in ``missing`` (changed, to be re-read),
    so an exact-text lookup that finds nothing in ``by_hash`` is a true miss. A row is kept as the
    tuple the server returned (``CHUNK_COLS`` + ``text_hash``), or as this process inserted it
    (``INSERT_COLS`` order: no copy per row on the write path); ``full`` makes either the former."""

    def __init__(self, max_rows: int = 250_000) -> None:
        self.max_rows = max_rows  # most rows kept (``postgres.ROW_CACHE_MAX`` when the store opened)
        self.clear(0)

    def clear(self, upto: int) -> None:
        self.rows: dict[int, tuple] = {}
        self.by_hash: dict[int, list[int]] = {}
        self.complete = False
        self.missing: set[int] = set()
        self.superseded: dict[int, str] | None = None
        self.upto = upto
        #: the co-occurrence table as a -> {b: weight} (None: not mirrored), except the pairs of
        #: the ``a`` keys in ``co_missing`` (changed, to be re-read); ``co_too_big``: not tried again
        self.co: dict[int, dict[int, float]] | None = None
        self.co_missing: set[int] = set()
        self.co_too_big = False

    def co_replace(self, keys: Iterable[int], rows: Iterable[Sequence[Any]]) -> None:
        """The pairs of every ``a`` in ``keys`` are exactly ``rows`` (a, b, weight) now."""
        co = self.co
        if co is None:
            return
        keys = {int(a) for a in keys}
        for a in keys:
            co.pop(a, None)
        for a, b, w in rows:
            co.setdefault(int(a), {})[int(b)] = float(w)
        self.co_missing -= keys

    def put(self, row: tuple) -> None:
        nid, h = row[0], row[16] if len(row) == 17 else row[3]
        if nid in self.rows:
            self.drop(nid)
        elif len(self.rows) >= self.max_rows:
            self.clear(self.upto)
        self.rows[nid] = row
        self.missing.discard(nid)
        bucket = self.by_hash.setdefault(h, [])
        bucket.append(nid)
        if len(bucket) > 1:
            bucket.sort()

    def put_all(self, rows: Sequence[tuple]) -> None:
        """``put`` of each row (a write's inserted chunks), in one pass."""
        if len(self.rows) + len(rows) >= self.max_rows:
            for row in rows:
                self.put(row)
            return
        cached, by_hash = self.rows, self.by_hash
        for row in rows:
            nid = row[0]
            if nid in cached:
                self.drop(nid)
            cached[nid] = row
            h = row[16] if len(row) == 17 else row[3]
            bucket = by_hash.get(h)
            if bucket is None:
                by_hash[h] = [nid]
            else:
                bucket.append(nid)
                bucket.sort()
        if self.missing:
            self.missing.difference_update(row[0] for row in rows)

    def drop(self, nid: int) -> None:
        row = self.rows.pop(nid, None)
        if row is not None:
            h = row[16] if len(row) == 17 else row[3]
            bucket = self.by_hash.get(h)
            if bucket is not None:
                bucket.remove(nid)
                if not bucket:
                    del self.by_hash[h]

    def invalidate(self, changes: Mapping[str, Sequence[int]]) -> None:
        """Forget what the change-log keys say changed (kinds as ``foreign_changes`` returns them)."""
        for kind in ("ci", "cu", "cd"):
            for nid in changes.get(kind, ()):
                self.drop(int(nid))
                if self.complete:
                    self.missing.add(int(nid))
        if any(k[0] == "e" or k in ("cu", "cd") for k in changes):
            self.superseded = None  # edges or a superseding chunk's liveness changed
        if self.co is not None:
            for kind in ("oi", "ou", "od"):
                self.co_missing.update(int(a) for a in changes.get(kind, ()))


def touched_row(row: tuple, access_count: int, importance: float, last_accessed_at: float) -> tuple:
    """A cached row (either order) in ``CHUNK_COLS`` + ``text_hash`` order, with the three columns a
    reinforcement write sets as the update returned them."""
    r = full_row(row)
    return (*r[:5], importance, *r[6:13], access_count, last_accessed_at, *r[15:])


def full_row(row: tuple) -> tuple:
    """A cached row in ``CHUNK_COLS`` + ``text_hash`` order (from ``INSERT_COLS`` order if needed)."""
    if len(row) == 17:
        return row
    nid, cid, text, h, kind, created_at, event_time, q, imp, user, agent, run, session, meta = row
    return (nid, cid, text, kind, float(q), float(imp), float(created_at),
            None if event_time is None else float(event_time), user, agent, run, session, meta, 0, None, None, h)


def superseded_of(rows: Iterable[Sequence[Any]]) -> dict[int, str]:
    out: dict[int, str] = {}
    for nid, by in rows:
        out.setdefault(int(nid), by)
    return out
