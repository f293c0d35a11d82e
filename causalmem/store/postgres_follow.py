"""The PostgreSQL store's view of other connections' commits: the change sequence and
``data_version``, the twin connection whose commits are adopted as this store's own, the change log
read since the views were last in step (``foreign_changes``) and the LISTEN/NOTIFY wait.

A mixin of :class:`causalmem.store.postgres.PostgresStore`: its state (the row cache, the sequences
seen, synced and expected) is the store's own, declared here for the type checker.
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ._common import CHUNK_COLS
from .postgres_cache import RowCache, superseded_of, touched_row
from .postgres_schema import SUPERSEDED_SQL
from .postgres_wire import int_array

try:
    import psycopg
    from psycopg import sql as pg_sql
except ImportError:  # pragma: no cover - exercised only without the extra
    psycopg = None  # type: ignore[assignment]
    pg_sql = None  # type: ignore[assignment]

__all__ = ["ChangeFollowing"]


class ChangeFollowing:
    """Following the commits of other connections (this host's or another's)."""

    if TYPE_CHECKING:  # the store's state and helpers this mixin uses (set in PostgresStore.__init__)
        conn: Any
        dsn: str
        channel: str
        _lock: threading.RLock
        _depth: int
        _tls: threading.local
        _pending: str | None
        _seen_seq: int
        _foreign: int
        _synced_seq: int
        _own: set[int]
        _expected: set[int]
        _listener: Any
        _cache: RowCache
        _prefetched: tuple[int, dict[int, tuple], int] | None
        _hashes: set[int] | None
        _hashes_upto: int

        def _ensure_open(self) -> None: ...
        def _ours(self, lo: int, hi: int) -> bool: ...
        def _send_check(self) -> None: ...
        def _store_error(self, exc: BaseException, doing: str = "") -> Any: ...
        def _one(self, sql: str, params: Sequence[Any] | None = None) -> Any: ...
        def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple]: ...

    # ------------------------------------------------------------------ versions, change sequence
    def change_seq(self) -> int:
        """The memory's change sequence: advanced by every committed write transaction that changed
        a row, on any host; a random start per memory."""
        return int(self._one("SELECT seq FROM causalmem_state"))

    def data_version(self) -> int:
        """Changes when another connection (this host or another) committed a write."""
        with self._lock:
            self._ensure_open()
            if self._depth > 0:
                return self._foreign
            tls = self._tls
            if getattr(tls, "ahead", None) is not None:  # in read_once: the check goes out, read later
                if tls.ahead is False and not self._pending:
                    self._send_check()
                    tls.ahead = True
                tls.fresh = True
                return self._foreign
            seq = self.change_seq()
            if seq != self._seen_seq:
                if not self._ours(self._seen_seq + 1, seq):
                    self._foreign += 1
                self._seen_seq = seq
            self._tls.fresh = getattr(self._tls, "calls", 0) > 0  # only inside a public call (see errors)
            return self._foreign

    # ------------------------------------------------------------------ a twin connection's writes
    def stored_nids(self, nids: Sequence[int]) -> set[int]:
        """Which of ``nids`` have a chunk row (live or deleted, not purged), read from the server."""
        return {n for (n,) in self.query("SELECT nid FROM chunks WHERE nid = ANY(%s)", ([int(n) for n in nids],))}

    def expect_own(self, seq: int) -> None:
        """A twin's transaction will commit ``seq`` (it holds the writer lock): a change check that
        sees it before the twin's write is adopted does not take it for another host's. Called by the twin
        while it holds the writer lock: it must not wait for ``_lock``, which this store holds through a
        whole ``transaction()`` — also while that waits for the writer lock (a deadlock until the busy
        timeout). A set's ``add`` is atomic; the twin commits ``seq`` only after this returns."""
        self._expected.add(int(seq))

    def forget_expected(self, seq: int) -> None:
        """The twin's transaction that named ``seq`` committed nothing (rolled back, or changed no
        row): another connection may commit ``seq`` now. If the views were brought in step past it
        meanwhile, the change log is read again from before it."""
        with self._lock:
            self._expected.discard(int(seq))
            if self._hashes_upto >= seq:
                self._hashes = None
            if self._synced_seq >= seq:
                self._synced_seq = seq - 1
                self._cache.clear(seq - 1)
                self._foreign += 1
            elif self._seen_seq >= seq:  # seen and taken for ours: the views read the log from before it
                self._foreign += 1

    def adopt_write(self, seq: int, touched: Mapping[int, tuple[int, float, float]], co_keys: list[int] | None,
                    co_rows: Sequence[tuple]) -> bool:
        """A twin committed ``seq`` for this process: the access counts it set (``touched``) and the
        co-occurrence pairs it read back go into the row cache as an own commit's would. True when
        nothing newer than ``seq`` is known here, so ``touched`` is the rows' current state; False:
        a later commit was applied first, the rows are dropped (read again on use)."""
        with self._lock:
            self._expected.discard(seq)
            cache = self._cache
            current = self._seen_seq <= seq
            if current:
                for n, v in touched.items():
                    row = cache.rows.get(n)
                    if row is not None:
                        cache.rows[n] = touched_row(row, *v)
                if co_keys is None:
                    cache.co, cache.co_missing = None, set()
                else:
                    cache.co_replace(co_keys, co_rows)
            else:
                cache.invalidate({"cu": list(touched)})
                if co_keys is None:
                    cache.co, cache.co_missing = None, set()
                elif cache.co is not None:
                    cache.co_missing.update(co_keys)
            if seq > self._seen_seq:
                if not self._ours(self._seen_seq + 1, seq - 1):
                    self._foreign += 1
                self._seen_seq = seq
            if seq > self._synced_seq:
                self._own.add(seq)
            if self._hashes is not None and self._hashes_upto == seq - 1:
                self._hashes_upto = seq  # access counts only: no text changed
            if cache.upto == seq - 1:
                cache.upto = seq
                while cache.upto + 1 in self._own:  # own commits after it, their rows applied already
                    cache.upto += 1
            return current

    def foreign_changes(self) -> dict[str, list[int]] | None:
        """What other connections changed since this process's views were last in step: kind ->
        sorted keys (kinds ``ci cu cd ei eu ed oi ou od vi vu vd``: chunks, edges, co-occurrence,
        embeddings x insert, update, delete). ``None`` when the log no longer reaches back that far
        (the views then re-read everything). Marks the views as in step up to ``data_version``'s read."""
        with self._lock:
            self._ensure_open()
            upto = self._seen_seq
            after = self._synced_seq
            own = sorted(s for s in self._own | self._expected if after < s <= upto)
            # One round trip (several statements in one simple query; the values are integers): the
            # log's floor and the keys, and what the views will ask next: the changed chunks' rows,
            # the changed edges' states, the newest text-update event, the superseded set.
            where = (f"seq > {int(after)} AND seq <= {int(upto)} "
                     f"AND NOT (seq = ANY('{int_array(own)}'::bigint[]))")
            keys = f"SELECT unnest(keys) FROM changes WHERE {where} AND kind IN "
            try:
                cur = self.conn.execute(
                    "SELECT 'floor', log_floor FROM causalmem_state UNION ALL "
                    f"SELECT kind, unnest(keys) FROM changes WHERE {where}; "
                    f"SELECT {CHUNK_COLS}, text_hash FROM chunks WHERE nid IN ({keys}('ci', 'cu')); "
                    "SELECT eid, src, dst, rel_code, confidence, valid_to IS NULL FROM edges "
                    f"WHERE eid IN ({keys}('ei', 'eu')) ORDER BY eid; "
                    "SELECT COALESCE(MAX(hid), 0) FROM chunk_history WHERE event = 'update'; "
                    + SUPERSEDED_SQL.format(where="") + "; "
                    f"SELECT a, b, weight FROM cooccurrence WHERE a IN ({keys}('oi', 'ou', 'od'))")
                results = [cur.fetchall()]
                while cur.nextset():
                    results.append(cur.fetchall())
            except psycopg.Error as exc:
                raise self._store_error(exc, "reading the change log") from exc
            log_rows, chunk_rows, edge_rows, (last_update,), superseded, co_rows = results
            self._synced_seq = upto  # read: the views are in step up to here once they apply it
            self._own = {s for s in self._own if s > upto}
            out: dict[str, set[int]] = {}
            floor = None
            for kind, key in log_rows:
                if kind == "floor":
                    floor = int(key)
                else:
                    out.setdefault(kind, set()).add(int(key))
            cache = self._cache
            if floor is None or after < floor:
                cache.clear(upto)
                self._hashes = None
                return None
            delta = {k: sorted(v) for k, v in out.items()}
            if cache.upto < after:
                cache.clear(upto)
            else:
                cache.invalidate(delta)
                cache.upto = max(cache.upto, upto)
            for r in chunk_rows:  # read after the changes: at least as new as upto
                cache.put(r)
            if self._hashes is not None:
                self._hashes.update(r[16] for r in chunk_rows)
                if self._hashes_upto >= after:
                    self._hashes_upto = max(self._hashes_upto, upto)
            cache.superseded = superseded_of(superseded)
            cache.co_replace([a for k in ("oi", "ou", "od") for a in delta.get(k, ())], co_rows)
            self._prefetched = (upto, {r[0]: tuple(r) for r in edge_rows}, int(last_update[0]))
            return delta

    def wait_for_change(self, timeout: float) -> bool:
        """Block until another connection commits a write (LISTEN/NOTIFY) or ``timeout`` seconds
        pass; True if a change arrived. A dedicated connection listens, so queries go on meanwhile."""
        if self._listener is None:
            self._listener = psycopg.connect(self.dsn, autocommit=True)
            self._listener.execute(pg_sql.SQL("LISTEN {}").format(pg_sql.Identifier(self.channel)))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            for note in self._listener.notifies(timeout=left, stop_after=1):
                if note.pid != self.conn.info.backend_pid:
                    return True
