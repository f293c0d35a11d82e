"""PostgreSQL backend: one memory shared by many processes on many hosts. Implements ``base.StoreBackend``.

Selected by a DSN: ``Memory("postgresql://user@host:5432/db")``. An optional ``schema=NAME``
query parameter (``postgresql://.../db?schema=team_a``) keeps several memories in one database,
as several SQLite files would be; the default schema is ``causalmem``. psycopg 3 (``pip install
"causalmem-engine[postgres]"``); PostgreSQL 15 or newer.

Same guarantees as the SQLite backend:

* one transaction per public write, nested calls are savepoints; writers of one memory are
  serialized by a transaction-level advisory lock taken first (the analogue of SQLite's
  ``BEGIN IMMEDIATE``), so the dense integer keys (``MAX + 1``) need no sequence and two
  causalmem writers can neither deadlock nor fail to serialize against each other;
* a deadlock or serialization failure that still happens (another application's session
  holding rows) rolls the transaction back and raises ``RetryableStoreError``; the ``Memory``
  facade re-runs the whole public call (its in-memory effects apply only after commit), so a
  caller never sees it;
* ordered migrations recorded in ``causalmem_state.schema_version``; a schema written by a newer
  causalmem is refused untouched (``SchemaVersionError``), a schema holding another
  application's tables is refused untouched (``StoreError``).

Hosts stay in step through a change sequence: every write transaction advances
``causalmem_state.seq`` (the same statement that takes the row lock). ``data_version()``
changes when a sequence value appears that this store object did not write, which is what the
in-process views compare before every query and write (``views.sync_external``): the next query
after another host's commit catches up. ``change_seq()`` is the current value. After each commit
a ``NOTIFY`` on the memory's channel lets a listener wake early (``wait_for_change``).

The projection is rebuilt with ``COPY ... TO STDOUT (FORMAT BINARY)`` parsed straight into numpy
(fixed-width rows, no Python object per cell); bulk inserts of chunks and edges use ``COPY FROM``.
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import secrets
import select
import threading
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np

from ..errors import RetryableStoreError, SchemaVersionError, StoreError
from ._common import (
    CHUNK_COLS, EXPORTS, IMPORT_COLS, SharedStore, chunk_columns_of, evidence_edges, export_record, import_rows,
    same_text,
)
from .base import (
    CHUNK_DTYPE, COOC_DTYPE, EDGE_DTYPE, PROJECTION_CO_DTYPE, PROJECTION_EDGE_DTYPE, ChunkColumns, ChunkKey,
    ChunkRow, EmbeddingRow, EvidenceEdge, MiningChunkRow, OutEdge, StoredVector,
    is_dsn, new_id, new_ids, text_hash,
)

try:  # optional dependency: causalmem-engine[postgres]
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import sql as pg_sql
except ImportError:  # pragma: no cover - exercised only without the extra
    psycopg = None  # type: ignore[assignment]
    pg_errors = None  # type: ignore[assignment]
    pg_sql = None  # type: ignore[assignment]

from .postgres_follow import ChangeFollowing
from .postgres_cache import CO_CACHE_MAX, REFRESH_MAX, ROW_CACHE_MAX, RowCache, full_row, superseded_of, touched_row
from .postgres_schema import (
    DEFAULT_SCHEMA, EDGE_INSERT_COLS, EDGE_INSERT_TYPES, INSERT_COLS, INSERT_TYPES, LOCK_NAMESPACE, META_UPSERT,
    MIGRATIONS, NEXT_KEYS, OWN_NIDS, SCHEMA_NAME, SCHEMA_VERSION, SCOPE, SLEEP_EDGE_SELECT,
    SUPERSEDED_SQL,
)
from .postgres_schema import OWN_TABLES as OWN_TABLES  # noqa: F401 - kept importable from here
from .postgres_wire import RAW_ARRAY_OIDS, array_literal, array_values, int_array

if psycopg is not None:
    from .postgres_wire import CopyAhead, RawArrayLoader

log = logging.getLogger("causalmem")

R = TypeVar("R")

__all__ = ["PostgresStore", "RetryableStoreError", "SCHEMA_VERSION", "MIGRATIONS", "is_dsn", "DEFAULT_SCHEMA"]

_full = full_row  # the name the tests read a cached row's full form by

#: change-log rows older than this many transactions are pruned (a host further behind re-reads all)
LOG_KEEP = 4096


@functools.lru_cache(maxsize=256)
def _placeholders(sql: str) -> str:
    """A statement written with ``?`` placeholders (``SharedStore``) in psycopg's ``%s`` style."""
    return sql.replace("?", "%s")


def split_dsn(dsn: str) -> tuple[str, str]:
    """(connection string for psycopg, schema): the ``schema`` query parameter is ours, not libpq's."""
    parts = urlsplit(dsn.strip())
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = DEFAULT_SCHEMA
    rest = []
    for k, v in query:
        if k == "schema":
            schema = v
        else:
            rest.append((k, v))
    if not SCHEMA_NAME.match(schema):
        raise ValueError(f"schema must be a plain SQL identifier (letters, digits, _; at most 63), got {schema!r}")
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(rest), parts.fragment)), schema.lower()


def redact(dsn: str) -> str:
    """The DSN without its password (for messages and ``Memory.path``)."""
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _retryable(exc: BaseException) -> bool:
    return pg_errors is not None and isinstance(exc, (pg_errors.SerializationFailure, pg_errors.DeadlockDetected))


class PostgresStore(ChangeFollowing, SharedStore):
    """One psycopg connection to one causalmem schema of a PostgreSQL database."""

    def __init__(self, dsn: str, *, busy_timeout_ms: int = 30000, read_only: bool = False,
                 schema: str | None = None, connect_timeout_s: float = 10.0):
        if psycopg is None:
            raise StoreError('the PostgreSQL backend needs psycopg 3: pip install "causalmem-engine[postgres]"')
        if not is_dsn(dsn):
            raise ValueError(f"dsn must be a postgresql:// URL, got {dsn!r}")
        conninfo, dsn_schema = split_dsn(dsn)
        if schema is not None:
            if not isinstance(schema, str) or not SCHEMA_NAME.match(schema):
                raise ValueError(f"schema must be a plain SQL identifier, got {schema!r}")
            dsn_schema = schema.lower()
        self.schema = dsn_schema
        self.dsn = conninfo
        self._given_dsn = dsn
        self.path = redact(dsn)
        self.read_only = bool(read_only)
        self.busy_timeout_ms = int(busy_timeout_ms)
        self._lock = threading.RLock()
        self._depth = 0
        self._closed = False
        self._seen_seq = 0  # newest change sequence value this object knows about
        self._foreign = 0  # commits by other connections noticed so far (data_version)
        self._tx_seq = 0
        #: ``change_seq`` as this object's last write transaction committed it (``views`` tracks it)
        self.committed_seq: int | None = None
        self._synced_seq = 0  # the views of this process hold every change up to here
        self._own: set[int] = set()  # sequence values of this object's own commits not yet synced past
        # sequence values a twin connection of this process is committing for it (``expect_own``): the
        # reinforcement written off the search call; counted as own until adopted or given up
        self._expected: set[int] = set()
        #: called with the sequence value an outermost write transaction will commit, once it is known
        #: (under the writer lock); a twin sets it to its main store's ``expect_own``
        self.on_begin: Callable[[int], None] | None = None
        #: the last committed write's (seq, access counts it set by nid, co-occurrence keys read back or
        #: None, their rows): what a twin's main store adopts (``adopt_write``)
        self.last_write: tuple[int, dict[int, tuple[int, float, float]], list[int] | None, list[tuple]] | None = None
        self._listener: Any = None
        self.channel = f"causalmem_{self.schema}"
        self._cache = RowCache(ROW_CACHE_MAX)
        self._tls = threading.local()  # per thread: public-call depth, seq checked in this call
        self._tx_changes: dict[str, list[int]] | None = None  # the committing transaction's change-log keys
        self._prefetched: tuple[int, dict[int, tuple], int] | None = None  # see foreign_changes
        self._staged: list[tuple] = []  # chunks inserted by the open transaction (as the row cache keeps them)
        # the text hash of every chunk row committed up to ``_hashes_upto`` (and maybe more: rows
        # deleted since stay in it): a bulk write's reuse lookup asks the server only about the
        # texts whose hash is in it. Built at this object's second reuse lookup (a Memory kept open).
        self._hashes: set[int] | None = None
        self._hashes_upto = 0
        self._reuse_lookups = 0
        self.hash_rebuilds = 0  #: times every stored text hash was read (once per store, unless the log fell behind)
        # what the committing transaction updated, read back: chunk rows, co-occurrence keys and rows
        self._tx_refresh: tuple[list[tuple], list[int] | None, list[tuple]] = ([], [], [])
        # the access counts the open transaction's reinforcement set (``touch_chunks_batch``), as the
        # update returned them: nid -> (access_count, importance, last_accessed_at); ``_end_write``
        # reads back no row they explain (``_tx_patch``: they are all it changed)
        self._tx_touched: dict[int, tuple[int, float, float]] = {}
        self._tx_patch: dict[int, tuple[int, float, float]] | None = None
        # statements of the outermost transaction kept to go out with its last one (``_defer``): kind
        # ("touch": its rows are the update's new access counts) and the statement; ``_tx_used``: the
        # connection carried a statement of this transaction since its first (``_begin_write``)
        self._deferred: list[tuple[str, Any]] = []
        self._tx_used = False
        # the open write transaction's next free keys (read once under the writer lock, then counted
        # here), the chunks it inserted and the ends of the edges it inserted (None: not known): a
        # chunk inserted by this transaction has no edge but those, so no lookup for it is needed
        self._tx_keys: dict[str, int] = {}
        self._migrating = False
        self._tx_new: set[int] = set()
        self._tx_ends: set[int] | None = set()
        # a change check sent ahead of a read (``read_once``) whose answer is not read yet, and what
        # the last answer said: another connection had committed since this object last looked
        self._pending: str | None = None
        self._moved = False
        #: change checks sent ahead (``read_once``): statements that do not pass through a cursor
        self.checks_sent = 0
        try:
            self._conn: Any = psycopg.connect(conninfo, autocommit=True, application_name="causalmem",
                                              connect_timeout=max(1, int(connect_timeout_s)))
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {self.path!r}: {str(exc).strip()}") from exc
        try:
            self._open()
        except psycopg.Error as exc:
            self.conn.close()
            raise self._store_error(exc, "open") from exc
        except Exception:
            self.conn.close()
            raise

    # ------------------------------------------------------------------ plumbing
    def _open(self) -> None:
        ident = pg_sql.Identifier(self.schema)
        version = self._inspect()
        if version is None:  # no causalmem schema here yet
            if self.read_only:
                raise StoreError(f"no causalmem memory in schema {self.schema!r} of {self.path!r} "
                                 "(read-only open creates nothing)")
            with self.conn.transaction():
                self._schema_lock()
                self.conn.execute(pg_sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
                self.conn.execute(pg_sql.SQL("SET search_path TO {}").format(ident))
                version = self._inspect()  # re-check under the lock: another process may have created it
                if version is None:
                    self.conn.execute(
                        "CREATE TABLE causalmem_state (id INTEGER PRIMARY KEY DEFAULT 1 CHECK (id = 1), "
                        "schema_version INTEGER NOT NULL, seq BIGINT NOT NULL, log_floor BIGINT NOT NULL DEFAULT 0)")
                    # a random start per memory, as the SQLite backend: a copy differs after a write
                    self.conn.execute("INSERT INTO causalmem_state (schema_version, seq) VALUES (0, %s)",
                                      (secrets.randbits(40) << 20,))
                    version = 0
        # jit off: every statement causalmem sends is a short OLTP one, yet the planner's row estimates
        # for the one-row state table and the change log push a few over ``jit_above_cost``, and
        # compiling them took ~40 ms (a write's last round trip, a queue write inside a search)
        self.conn.execute(pg_sql.SQL("SET search_path TO {}; SET jit = off").format(ident))
        if self.read_only:
            self.conn.execute("SET default_transaction_read_only = on")
            if version < SCHEMA_VERSION:
                raise StoreError(f"memory {self.path!r} has an older schema that needs an upgrade; open it once "
                                 "without read_only=True")
        elif version < SCHEMA_VERSION:
            self._migrate()
        self._seen_seq = self._synced_seq = self.change_seq()

    def _schema_lock(self) -> None:
        self.conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LOCK_NAMESPACE, "schema:" + self.schema))

    def _inspect(self) -> int | None:
        """Schema version of the memory (None: no causalmem tables yet). Refuses, without writing,
        a schema of another application or of a newer causalmem."""
        tables = {r[0] for r in self.conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (self.schema,))}
        if not tables:
            return None
        if "causalmem_state" not in tables:
            raise StoreError(f"schema {self.schema!r} of {self.path!r} holds another application's tables "
                             f"({', '.join(sorted(tables)[:5])}); refusing to open it as a causalmem memory. "
                             "Nothing was modified.")
        version = self.conn.execute(
            pg_sql.SQL("SELECT schema_version FROM {}.causalmem_state").format(
                pg_sql.Identifier(self.schema))).fetchone()[0]
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"memory {self.path!r} (schema {self.schema!r}) has schema version {version}, newer than this "
                f"causalmem understands ({SCHEMA_VERSION}); upgrade causalmem. Nothing was modified.")
        return int(version)

    def _migrate(self) -> None:
        self._migrating = True
        try:
            self._migrate_now()
        finally:
            self._migrating = False

    def _migrate_now(self) -> None:
        with self.transaction():
            version = self.conn.execute("SELECT schema_version FROM causalmem_state").fetchone()[0]
            if version > SCHEMA_VERSION:  # re-check under the write lock
                raise SchemaVersionError(f"memory {self.path!r} has schema version {version}, newer than "
                                         f"{SCHEMA_VERSION}")
            for i in range(version, SCHEMA_VERSION):
                name, sql = MIGRATIONS[i]
                log.info("causalmem: applying migration %d (%s) in PostgreSQL schema %s", i + 1, name, self.schema)
                self.conn.execute(sql)  # several statements, no parameters: one simple query
                self.conn.execute("UPDATE causalmem_state SET schema_version = %s", (i + 1,))

    def _store_error(self, exc: BaseException, doing: str = "") -> StoreError:
        msg = str(exc).strip()
        where = f" ({doing})" if doing else ""
        if pg_errors is not None:
            if isinstance(exc, pg_errors.LockNotAvailable) or isinstance(exc, pg_errors.QueryCanceled):
                return StoreError(f"memory {self.path!r} is locked by another writer{where}; gave up after the "
                                  f"busy timeout of {self.busy_timeout_ms} ms ({msg})")
            if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
                return StoreError(f"memory {self.path!r} is read-only{where}: cannot write ({msg})")
            if isinstance(exc, (pg_errors.DiskFull, pg_errors.OutOfMemory)):
                return StoreError(f"cannot write to {self.path!r}: the server is out of space{where} ({msg}); "
                                  "nothing of this call was saved")
            if _retryable(exc):
                return RetryableStoreError(f"memory {self.path!r}: transaction rolled back by the server{where} "
                                           f"({msg})")
        if psycopg is not None and isinstance(exc, psycopg.OperationalError):
            return StoreError(f"lost the connection to PostgreSQL at {self.path!r}{where}: {msg}")
        return StoreError(f"memory {self.path!r}: {msg}{where}")

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Around every public ``Memory`` call: raw driver errors become ``StoreError``; a call starts
        with the row cache closed to it until it has checked the change sequence (``data_version``)."""
        tls = self._tls
        depth = getattr(tls, "calls", 0)
        if depth == 0:
            tls.fresh = False
        tls.calls = depth + 1
        try:
            yield
        except psycopg.Error as exc:
            raise self._store_error(exc) from exc
        finally:
            tls.calls = depth

    def _cached(self) -> RowCache | None:
        """The row cache, when this read may answer from it: outside a write transaction (which sees
        its own uncommitted rows), in a public call that has checked the change sequence (so another
        host's commit before this call is known), with every change up to that check applied."""
        tls = self._tls
        if self._depth > 0 or not getattr(tls, "fresh", False) or not getattr(tls, "calls", 0):
            return None
        cache = self._cache
        if cache.upto < self._seen_seq and not self._ours(cache.upto + 1, self._seen_seq):
            cache.clear(self._seen_seq)  # changes noticed but not read from the log: start over
        return cache

    def _hashes_committed(self, seq: int, changes: Mapping[str, Sequence[int]], rows: Sequence[tuple]) -> None:
        """An own commit: the text hashes of the chunks it inserted (as staged) or changed (as read
        back) join the set; a chunk change it cannot account for drops the set (rebuilt when asked)."""
        hashes = self._hashes
        assert hashes is not None
        staged = {row[0]: (row[16] if len(row) == 17 else row[3]) for row in self._staged}
        read = {r[0]: r[16] for r in rows}
        for nid in changes.get("ci", ()):
            h = read.get(nid, staged.get(nid))
            if h is None:
                self._hashes = None
                return
            hashes.add(h)
        for nid in changes.get("cu", ()):  # (a reinforcement's access counts alone are not listed here)
            if nid not in read:
                self._hashes = None
                return
            hashes.add(read[nid])
        if self._hashes_upto == seq - 1 or self._ours(self._hashes_upto + 1, seq - 1):
            self._hashes_upto = seq

    def _ours(self, lo: int, hi: int) -> bool:
        """Every sequence value in ``lo..hi`` is this process's: an own commit, or one a twin is
        committing for it (its rows are this process's to patch; nothing to read from the log)."""
        if hi - lo + 1 > len(self._own) + len(self._expected):
            return False
        return all(s in self._own or s in self._expected for s in range(lo, hi + 1))

    @contextlib.contextmanager
    def transaction(self, *, wait: bool = True) -> Iterator[Any]:
        """One write transaction (nested: a savepoint). Takes this memory's writer lock first (at
        most the busy timeout; ``wait=False``: not at all) and advances the change sequence."""
        with self._lock:
            self._ensure_open()
            if self.read_only:
                raise StoreError(f"memory {self.path!r} was opened read-only: cannot write")
            if self._depth > 0:
                self._depth += 1
                try:
                    with self.conn.transaction():
                        try:
                            yield self.conn
                        except BaseException:
                            self._settle_quietly()
                            raise
                        if self._pending is not None:  # a COPY's error belongs inside the savepoint
                            self._settle()
                except psycopg.Error as exc:
                    raise self._store_error(exc) from exc
                finally:
                    self._depth -= 1
                return
            self.committed_seq = None
            self._staged, self._tx_changes, self._tx_refresh = [], None, ([], [], [])
            self._tx_keys, self._tx_new, self._tx_ends = {}, set(), set()
            self._tx_touched, self._tx_patch = {}, None
            self._deferred, self._tx_used = [], False
            try:
                with self.conn.transaction():
                    self._begin_write(wait)
                    if self.on_begin is not None:
                        self.on_begin(self._tx_seq)
                    conn = self.conn  # (at depth 0: not a use of the connection by a statement)
                    self._depth = 1
                    try:
                        yield conn
                    except BaseException:
                        self._settle_quietly()
                        raise
                    finally:
                        self._depth = 0
                    seq = self._end_write()  # reads a pending COPY's reply first (``conn``)
            except psycopg.Error as exc:
                raise self._store_error(exc) from exc
            finally:
                self._deferred = []  # not sent when the transaction failed: nothing of them happened
            if seq is not None:
                self._committed(seq)

    def _begin_write(self, wait: bool) -> None:
        """Take the writer lock (waiting at most the busy timeout), then name the change-sequence
        value this transaction will commit (under the lock the next value is ours; the change-log
        triggers record it): one round trip, several statements in one simple query."""
        key = pg_sql.SQL("{}, hashtext({})").format(pg_sql.Literal(LOCK_NAMESPACE), pg_sql.Literal(self.schema))
        if wait:
            lock = pg_sql.SQL("SET LOCAL lock_timeout = {}; SELECT pg_advisory_xact_lock({}); "
                              "SET LOCAL lock_timeout = 0; ").format(
                pg_sql.Literal(max(1, self.busy_timeout_ms)), key)
        else:
            lock = pg_sql.SQL("SELECT set_config('causalmem.busy', CASE WHEN pg_try_advisory_xact_lock({}) "
                              "THEN 'no' ELSE 'yes' END, true); ").format(key)
        cur = self.conn.execute(lock + pg_sql.SQL(
            "SELECT seq + 1, set_config('causalmem.seq', (seq + 1)::text, true), "
            f"current_setting('causalmem.busy', true), {'NULL, NULL' if self._migrating else NEXT_KEYS} "
            "FROM causalmem_state"))
        while cur.nextset():
            pass
        seq, _, busy, nid, eid = cur.fetchone()
        if busy == "yes":
            raise StoreError(f"memory {self.path!r} is locked by another writer (not waiting)")
        self._tx_seq = int(seq)
        if nid is not None:  # read under the writer lock: ours to count (not while the tables are made)
            self._tx_keys = {"nid": int(nid), "eid": int(eid)}

    def _end_write(self) -> int | None:
        """Just before COMMIT, in one round trip: advance the change sequence if the transaction
        changed a row (it then has a transaction id), NOTIFY listeners (delivered at commit), read
        what the transaction changed for the row cache (chunk keys; of edges the kinds are enough).
        Prunes the change log now and then. The new value, or None."""
        keys = ("SELECT unnest(keys) FROM changes WHERE seq = current_setting('causalmem.seq')::bigint "
                "AND kind IN ({})")
        few = ("(SELECT COALESCE(SUM(cardinality(keys)), 0) FROM changes WHERE seq = "
               f"current_setting('causalmem.seq')::bigint AND kind IN ({{}})) <= {REFRESH_MAX}")
        updated, co = "'cu'", "'oi', 'ou', 'od'"
        # the chunk updates of this transaction were the reinforcement's alone (its one deferred access
        # count update, which changed rows, and no other statement's change-log row): their rows are
        # known from what the update returned, none is read back
        deferred, self._deferred = self._deferred, []
        only_touched = ("(current_setting('causalmem.touched', true) = 'yes' AND (SELECT COUNT(*) FROM changes "
                        "WHERE seq = current_setting('causalmem.seq')::bigint AND kind = 'cu') = 1)")
        main = pg_sql.SQL(
            "WITH s AS (UPDATE causalmem_state SET seq = seq + 1 WHERE pg_current_xact_id_if_assigned() IS NOT NULL "
            "RETURNING seq) SELECT s.seq, pg_notify({}, s.seq::text), "
            "ARRAY(SELECT DISTINCT kind FROM changes WHERE seq = s.seq), "
            "ARRAY(SELECT unnest(keys) FROM changes WHERE seq = s.seq AND kind = 'ci'), "
            f"CASE WHEN {only_touched} THEN '{{{{}}}}'::bigint[] "
            "ELSE ARRAY(SELECT unnest(keys) FROM changes WHERE seq = s.seq AND kind = 'cu') END, "
            "ARRAY(SELECT unnest(keys) FROM changes WHERE seq = s.seq AND kind = 'cd'), "
            "ARRAY(SELECT DISTINCT unnest(keys) FROM changes WHERE seq = s.seq AND kind IN ('oi', 'ou', 'od')), "
            f"{few.format(co)}, {only_touched} FROM s; "
            # the new state of the rows it updated (a few), for the row cache
            f"SELECT {CHUNK_COLS}, text_hash FROM chunks WHERE nid IN ({keys.format(updated)}) "
            f"AND {few.format(updated)} AND NOT {only_touched}; "
            f"SELECT a, b, weight FROM cooccurrence WHERE a IN ({keys.format(co)}) AND {few.format(co)}"
        ).format(pg_sql.Literal(self.channel))
        cur = self.conn.execute(pg_sql.SQL("; ").join([*(st for _, st in deferred), main]))
        if deferred:
            self._deferred_results(deferred, cur)
            cur.nextset()
        row = cur.fetchone()
        cur.nextset()
        refreshed = cur.fetchall()
        cur.nextset()
        co_rows = cur.fetchall()
        if row is None:
            return None
        seq = int(row[0])
        self._tx_changes = {k: [] for k in row[2]}
        self._tx_changes.update((k, v) for k, v in zip(("ci", "cu", "cd"), row[3:6]) if v)
        self._tx_refresh = (refreshed, row[6] if row[7] else None, co_rows)
        self._tx_patch = self._tx_touched if row[8] else None
        if seq % 256 == 0:  # keep the change log short
            floor = seq - LOG_KEEP
            self.conn.execute("DELETE FROM changes WHERE seq <= %s", (floor,))
            self.conn.execute("DELETE FROM tenant_changes WHERE seq <= %s", (floor,))
            self.conn.execute("UPDATE causalmem_state SET log_floor = GREATEST(log_floor, %s)", (floor,))
        return seq

    def _committed(self, seq: int) -> None:
        self.committed_seq = seq
        cache, changes = self._cache, self._tx_changes or {}
        rows, co_keys, co_rows = self._tx_refresh
        if self._tx_patch:  # the rows only the reinforcement updated, their access columns alone: the
            cached = cache.rows  # cached ones patched in place (same text, same liveness)
            for n, v in self._tx_patch.items():
                row = cached.get(n)
                if row is not None:
                    cached[n] = touched_row(row, *v)
            changes = {k: v for k, v in changes.items() if k != "cu"}
        # the superseded set depends on edges and on chunks' liveness: a write that changed neither
        # (the access counts of a reinforcement write, read back here) leaves it as it is
        superseded = cache.superseded
        if superseded is not None and not any(k[0] == "e" or k == "cd" for k in changes):
            new = {r[0]: r[15] for r in rows}
            if any(n not in new or n not in cache.rows or full_row(cache.rows[n])[15] != new[n]
                   for n in changes.get("cu", ())):
                superseded = None
        else:
            superseded = None
        cache.invalidate(changes)
        cache.superseded = superseded
        inserted = set(changes.get("ci", ())) - set(changes.get("cu", ()))
        if self._hashes is not None:
            self._hashes_committed(seq, changes, rows)
        # inserted and untouched since: the row as written (the last one per nid)
        cache.put_all([row for row in self._staged if row[0] in inserted])
        for r in rows:  # updated by this transaction, read back before the commit
            cache.put(r)
        if co_keys is None:  # too many pairs changed to read back: the mirror is re-read when needed
            cache.co, cache.co_missing = None, set()
        else:
            cache.co_replace(co_keys, co_rows)
        self.last_write = (seq, self._tx_touched, co_keys, co_rows)
        self._staged, self._tx_changes, self._tx_refresh = [], None, ([], [], [])
        self._tx_touched, self._tx_patch = {}, None
        if cache.upto == seq - 1:
            cache.upto = seq
        # writers are serialized and each advances the sequence by one: a gap means another
        # connection committed since we last looked
        if not self._ours(self._seen_seq + 1, seq - 1):
            self._foreign += 1
        self._seen_seq = max(self._seen_seq, seq)
        self._own.add(seq)

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        """A read-only repeatable-read transaction: several SELECTs see one state."""
        self._ensure_open()
        if self._depth > 0:
            yield
            return
        with self.conn.transaction():
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._pending = None
                for c in (self._conn, self._listener):
                    if c is not None:
                        try:
                            c.close()
                        except psycopg.Error:  # pragma: no cover
                            pass

    @property
    def conn(self) -> Any:
        """The psycopg connection, with any change check sent ahead (``read_once``) answered first:
        every use of the connection goes through here, so the check's reply is always read before
        the next statement is sent."""
        if self._pending:
            with self._lock:
                if self._pending:
                    self._settle()
        if self._depth:
            self._tx_used = True
            if self._deferred:
                with self._lock:
                    self._send_deferred()
        return self._conn

    @conn.setter
    def conn(self, conn: Any) -> None:  # the tests' PostgreSQL pass wraps it (tests/pg_site)
        self._conn = conn

    def _defer(self, kind: str, statement: Any) -> bool:
        """Keep ``statement`` (no parameters: values as literals) to go out in one round trip with
        the transaction's last one (``_end_write``), or before any other statement that uses the
        connection first (``conn``). Only at the outermost level of a write transaction (a
        savepoint could roll back what was sent with it) and one statement of a kind; False:
        the caller sends it now."""
        if self._depth != 1 or any(k == kind for k, _ in self._deferred):
            return False
        self._deferred.append((kind, statement))
        return True

    def _send_deferred(self) -> None:
        """Send the deferred statements now, in one round trip (the connection is needed before the
        transaction's last statement)."""
        deferred, self._deferred = self._deferred, []
        cur = self._conn.execute(pg_sql.SQL("; ").join([st for _, st in deferred]))
        self._deferred_results(deferred, cur)
        while cur.nextset():
            pass

    def _deferred_results(self, deferred: Sequence[tuple[str, Any]], cur: Any) -> None:
        """Read the results of ``deferred`` from ``cur`` (positioned on the first), leaving it on the
        last one: the deferred access-count update's rows are remembered for the row cache."""
        for i, (kind, _) in enumerate(deferred):
            if i:
                cur.nextset()
            if kind == "touch":
                self._tx_touched.update((r[0], (r[1], r[2], r[3])) for r in cur.fetchall())

    def read_once(self, fn: Callable[[], R]) -> R:
        """Run the read-only query ``fn`` with this call's change check in flight instead of before
        it: the check goes out as ``fn`` starts (``data_version``), ``fn`` answers from the views as
        they are, and the check's reply is read when ``fn`` is done (or earlier, if ``fn`` needs
        the connection). Had another connection committed since this object last looked, ``fn``
        runs again, in step with the store (its first answer is dropped): a write on another host
        is visible to the very next query, as with the check in front, and the round trip overlaps
        the query's own work. ``fn`` must not write."""
        tls = self._tls
        if self._depth > 0 or getattr(tls, "ahead", None) is not None or not getattr(tls, "calls", 0):
            return fn()
        tls.ahead = False  # no check sent yet in this call
        try:
            result = fn()
        finally:
            sent, tls.ahead = tls.ahead, None
            with self._lock:
                if self._pending:
                    self._settle()
                moved, self._moved = self._moved, False
        if sent and moved:
            return fn()  # data_version checks in front now: the views catch up first
        return result

    def _send_check(self) -> None:
        """Send ``SELECT seq`` without waiting for its reply (read by ``_settle``)."""
        pg = self._conn.pgconn
        pg.send_query(b"SELECT seq FROM causalmem_state")
        self._pending, self._moved = "check", False
        self._flush(pg)  # a few bytes: sent at once
        self.checks_sent += 1

    def _settle_quietly(self) -> None:
        """A transaction or savepoint ends with an error: the reply still unread is read before
        psycopg rolls back (the COPY's own error, if any, is the lesser news)."""
        if self._pending is not None:
            try:
                self._settle()
            except psycopg.Error:
                pass

    @staticmethod
    def _flush(pg: Any) -> None:
        """Send what libpq still holds for the server (reading what the server sends meanwhile)."""
        while pg.flush():
            readable, _, _ = select.select([pg.socket], [pg.socket], [])
            if readable:
                pg.consume_input()

    def _settle(self) -> None:
        """Read the reply to what was sent without waiting for it: the change check sent ahead (a new
        sequence value counts as a foreign commit, as in ``data_version``, and marks the read that
        sent it to run again), or a bulk ``COPY`` the server is still inserting (its error, if
        any, is raised here as psycopg would have raised it)."""
        kind, self._pending = self._pending, None
        pg = self._conn.pgconn
        self._flush(pg)
        value, failed = None, None
        while True:
            pg.consume_input()
            while pg.is_busy():
                select.select([pg.socket], [], [])
                pg.consume_input()
            res = pg.get_result()
            if res is None:
                break
            if res.status == psycopg.pq.ExecStatus.TUPLES_OK and res.ntuples == 1:
                value = res.get_value(0, 0)
            elif res.status != psycopg.pq.ExecStatus.COMMAND_OK and failed is None:
                failed = res
        if failed is not None:
            state = failed.error_field(psycopg.pq.DiagnosticField.SQLSTATE)
            message = (failed.error_field(psycopg.pq.DiagnosticField.MESSAGE_PRIMARY) or failed.error_message
                       or b"").decode("utf-8", "replace").strip()
            if state is None:
                raise psycopg.OperationalError(message or "the server sent no reply")
            raise psycopg.errors.lookup(state.decode())(message)
        if kind != "check":
            return
        if value is None:
            raise StoreError(f"memory {self.path!r}: the change check got no answer")
        seq = int(value)
        if seq != self._seen_seq:
            if not self._ours(self._seen_seq + 1, seq):  # (a twin's commit for this process is not news)
                self._foreign += 1
                self._moved = True
            self._seen_seq = seq

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
        """Run one SELECT and fetch every row (for this backend and its tests only)."""
        with self._lock:
            self._ensure_open()
            try:
                return self.conn.execute(sql, params if params else None).fetchall()
            except psycopg.Error as exc:
                raise self._store_error(exc) from exc

    # the dialect of the statements ``SharedStore`` writes once
    _SCOPE_EQ = SCOPE.replace("%s", "?")
    _TRUE = "TRUE"
    _NO_LIMIT = None
    _ARRAYS = True

    def _q(self, sql: str) -> str:
        return _placeholders(sql)

    def _order(self, by: str) -> str:
        return f" ORDER BY {by}"  # SQLite's plans return these in index order; PostgreSQL's need not

    def _select_in(self, sql: str, ids: Iterable[Any], *, before: Sequence[Any] = (), after: Sequence[Any] = (),
                   size: int = 0) -> list[tuple]:
        """``sql`` with each ``IN ({ids})`` bound to the whole list at once (``= ANY(array)``)."""
        ids = list(ids)
        return self.query(_placeholders(sql).replace("IN ({ids})", "= ANY(%s)"),
                          (*before, *([ids] * sql.count("{ids}")), *after))

    def _x(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        """Execute a write statement (inside the caller's transaction); returns the cursor."""
        return self.conn.execute(sql, params if params else None)

    def _many(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        rows = list(rows)
        if not rows:
            return 0
        with self.conn.cursor() as cur:
            cur.executemany(sql, rows)
            return max(cur.rowcount, 0)

    def _many_count(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        """executemany, returning the total number of rows changed."""
        total = 0
        rows = list(rows)
        if not rows:
            return 0
        with self.conn.cursor() as cur:
            cur.executemany(sql, rows, returning=True)
            while True:
                total += sum(1 for _ in cur.fetchall())
                if not cur.nextset():
                    break
        return total

    def _one(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        rows = self.query(sql, params)
        return rows[0][0] if rows else None

    # ------------------------------------------------------------------ a twin connection
    def writer_twin(self) -> "PostgresStore":
        """A second connection to the same memory, for writes made off the caller's thread (the
        search reinforcement, ``reinforce_flush.py``): its commits are this store's own once
        adopted, so they are never read back from the change log as another host's."""
        twin = type(self)(self._given_dsn, busy_timeout_ms=self.busy_timeout_ms, schema=self.schema)
        twin.on_begin = self.expect_own
        return twin

    def user_version(self) -> int:
        return int(self._one("SELECT schema_version FROM causalmem_state"))

    def integrity_check(self) -> str:
        """``"ok"``, or what is inconsistent (rows pointing at missing chunks, duplicate keys)."""
        problems = []
        for what, sql in (
                ("co-occurrence pairs of missing chunks",
                 "SELECT COUNT(*) FROM cooccurrence o WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.nid = o.a) "
                 "OR NOT EXISTS (SELECT 1 FROM chunks c WHERE c.nid = o.b)"),
                ("history events of missing chunks",
                 "SELECT COUNT(*) FROM chunk_history h WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.nid = h.nid)"),
                ("unordered co-occurrence pairs", "SELECT COUNT(*) FROM cooccurrence WHERE a >= b"),
                ("state rows", "SELECT COUNT(*) - 1 FROM causalmem_state")):
            n = self._one(sql)
            if n:
                problems.append(f"{n} {what}")
        return "ok" if not problems else "; ".join(problems)

    def set_meta(self, key: str, value: str) -> None:
        self._x(META_UPSERT, (key, value))

    # ------------------------------------------------------------------ chunks: reads
    def chunk_rows_by_nid(self, nids: Sequence[int]) -> dict[int, ChunkRow]:
        with self._lock:
            cache = self._cached()
            if cache is None:
                rows = self.query(f"SELECT {CHUNK_COLS}, text_hash FROM chunks WHERE nid = ANY(%s) ORDER BY nid",
                                  ([int(n) for n in nids],))
                if self._depth == 0:  # committed rows: the cache may keep them
                    for r in rows:
                        self._cache.put(r)
                return {r[0]: ChunkRow._make(r) for r in rows}
            got = self._rows_from(cache, sorted({int(n) for n in nids}))
            return {n: ChunkRow._make(full_row(r)) for n, r in got.items()}

    def _rows_from(self, cache: RowCache, nids: list[int]) -> dict[int, tuple]:
        """Cached rows of ascending ``nids``, reading the ones the cache lacks in one round trip."""
        rows = cache.rows
        want = [n for n in nids if n not in rows and (not cache.complete or n in cache.missing)]
        if want:
            for r in self.query(f"SELECT {CHUNK_COLS}, text_hash FROM chunks WHERE nid = ANY(%s)", (want,)):
                cache.put(r)
            cache.missing.difference_update(want)  # the ones not returned are gone for good
        return {n: rows[n] for n in nids if n in rows}

    def find_reusable_chunk(self, text: str, user_id: str | None, agent_id: str | None,
                            run_id: str | None) -> ChunkKey | None:
        with self._lock:
            cache = self._cached()
            if cache is not None and cache.complete:
                if cache.missing:
                    self._rows_from(cache, sorted(cache.missing))
                for nid in cache.by_hash.get(text_hash(text), ()):
                    r = full_row(cache.rows[nid])  # CHUNK_COLS order: text 2, kind 3, scope 8-10, valid_to 15
                    if (r[2] == text and r[3] != "turn" and r[15] is None and r[8] == user_id
                            and r[9] == agent_id and r[10] == run_id):
                        return ChunkKey(nid, r[1])
                return None
        rows = self.query(
            f"SELECT nid, id, text FROM chunks WHERE text_hash = %s AND {SCOPE} AND kind <> 'turn' "
            "AND valid_to IS NULL ORDER BY nid LIMIT 4", (text_hash(text), user_id, agent_id, run_id))
        return same_text(rows, text)

    def _reusable_rows(self, hashes: Sequence[int], scope: tuple, turns: bool = False) -> list[tuple]:
        known = self._known_hashes()
        if known is not None:  # only the texts a stored chunk may have: most of a batch's are new
            hashes = [h for h in hashes if h in known]
            if not hashes:
                return []
        kinds = "" if turns else "AND kind <> 'turn' "
        return self.query(f"SELECT nid, id, text FROM chunks WHERE text_hash = ANY(%s::bigint[]) AND {SCOPE} "
                          f"{kinds}AND valid_to IS NULL ORDER BY nid", (int_array(hashes), *scope))

    def _known_hashes(self) -> set[int] | None:
        """The set of stored text hashes when it is exact at this write transaction's writer lock
        and the transaction has sent nothing that could insert or change a chunk yet (else None:
        the server answers). Built here, under the lock, at this object's second lookup."""
        with self._lock:
            if self._depth != 1 or self._tx_used or any(k not in ("touch", "credit") for k, _ in self._deferred):
                return None
            self._reuse_lookups += 1
            if self._hashes is not None and self._hashes_upto < self._tx_seq - 1:
                self._fold_hashes()  # other connections committed since: what the change log lists
            if self._hashes is not None and self._hashes_upto == self._tx_seq - 1:
                return self._hashes
            if self._reuse_lookups < 2:
                return None
            self.hash_rebuilds += 1
            # every committed row as of the lock (no other writer commits while we hold it)
            got = self.conn.execute(f"SELECT text_hash FROM chunks LIMIT {ROW_CACHE_MAX + 1}").fetchall()
            if len(got) > ROW_CACHE_MAX:  # too many to keep here: the server answers (not tried again)
                self._reuse_lookups = -(1 << 62)
                return None
            self._hashes = {h for (h,) in got}
            self._hashes_upto = self._tx_seq - 1
            return self._hashes

    def _fold_hashes(self) -> None:
        """Bring the text-hash set from ``_hashes_upto`` to the writer lock's sequence: the hashes of
        the chunks the change log lists as inserted or updated since (one round trip), instead of
        every stored hash again. The set is a superset filter (a hash in it only means: ask the
        server), so deleted chunks need not leave it. Left behind when the log no longer reaches back."""
        upto, tx_seq = self._hashes_upto, self._tx_seq
        floor, new = self.conn.execute(
            "SELECT (SELECT log_floor FROM causalmem_state), ARRAY(SELECT text_hash FROM chunks WHERE nid IN "
            "(SELECT unnest(keys) FROM changes WHERE seq > %s AND seq < %s AND kind IN ('ci', 'cu')))",
            (upto, tx_seq)).fetchone()
        if floor is None or upto < floor or self._hashes is None:
            return
        self._hashes.update(int(h) for h in new)
        self._hashes_upto = tx_seq - 1

    def chunk_columns(self, *, with_text: bool = True, batch: int = 50000) -> Iterator[ChunkColumns]:
        sql = ("SELECT nid, kind, created_at, event_time, q_value, importance, user_id, agent_id, run_id, "
               f"session_id, (valid_to IS NULL)::int{', text' if with_text else ''} FROM chunks ORDER BY nid")
        with self._lock:
            self._ensure_open()
            if with_text and self._depth == 0:  # the whole table is read anyway: mirror the rows too
                rows_all = self._mirror_chunks()
            else:
                rows_all = self.conn.execute(sql).fetchall()
        for i in range(0, len(rows_all), batch):
            rows = rows_all[i:i + batch]
            yield chunk_columns_of(rows, with_text)

    def _mirror_chunks(self) -> list[tuple]:
        """Every chunk's ``chunk_columns`` fields (the caller reads the whole table): when the store
        is small enough, read with the rest of each row in one snapshot, and the row cache becomes
        a complete mirror as of that snapshot's change sequence."""
        cols = ("SELECT nid, kind, created_at, event_time, q_value, importance, user_id, agent_id, run_id, "
                "session_id, (valid_to IS NULL)::int, text")
        with self._snapshot():
            seq, n = self.conn.execute(
                "SELECT seq, (SELECT COUNT(*) FROM chunks) FROM causalmem_state").fetchone()
            if n > ROW_CACHE_MAX:
                return self.conn.execute(cols + " FROM chunks ORDER BY nid").fetchall()
            full = self.conn.execute(
                f"SELECT {CHUNK_COLS}, text_hash FROM chunks ORDER BY nid").fetchall()
        cache = self._cache
        cache.clear(int(seq))
        for r in full:
            cache.put(r)
        cache.complete = True
        # nid, kind, created_at, event_time, q_value, importance, user_id, agent_id, run_id, session_id, alive, text
        return [(r[0], r[3], r[6], r[7], r[4], r[5], r[8], r[9], r[10], r[11], int(r[15] is None), r[2])
                for r in full]

    def texts_of(self, nids: Sequence[int]) -> list[tuple[int, str]]:
        with self._lock:
            cache = self._cached()
            if cache is not None:
                return [(n, r[2]) for n, r in self._rows_from(cache, sorted({int(x) for x in nids})).items()]
        return self.query("SELECT nid, text FROM chunks WHERE nid = ANY(%s) ORDER BY nid", ([int(n) for n in nids],))

    def last_update_event(self) -> int:
        with self._lock:
            pre = self._prefetch()
            if pre is not None:
                return pre[1]
        return int(self._one("SELECT COALESCE(MAX(hid), 0) FROM chunk_history WHERE event = 'update'"))

    def chunk_rows_for_mining(self, nids: Sequence[int]) -> Iterator[MiningChunkRow]:
        wanted = sorted({int(n) for n in nids})
        for row in self.query(
                "SELECT nid, text, user_id, agent_id, run_id, created_at FROM chunks WHERE valid_to IS NULL "
                "AND nid = ANY(%s) ORDER BY nid", (wanted,)):
            yield MiningChunkRow._make(row)

    def sleep_chunk_arrays(self) -> np.ndarray:
        rows = self.query(
            "SELECT nid, q_value, (valid_to IS NULL)::int, COALESCE(last_accessed_at, -1e300) FROM chunks "
            "ORDER BY nid")
        return np.fromiter(rows, dtype=CHUNK_DTYPE, count=len(rows))

    # ------------------------------------------------------------------ chunks: writes
    def _next_key(self, table: str, column: str, n: int = 1) -> int:
        """The first of ``n`` fresh keys: MAX + 1, above every purged key too. Read with the writer
        lock for both tables (``_begin_write``: under the lock no other writer inserts), then
        counted here: every insert of chunks or edges goes through this method."""
        keys = self._tx_keys
        if not keys:  # pragma: no cover - _begin_write reads them
            row = self.conn.execute(f"SELECT {NEXT_KEYS}").fetchone()
            keys["nid"], keys["eid"] = int(row[0]), int(row[1])
        first = keys[column]
        keys[column] = first + n
        return first

    def _new_chunks(self, first: int, n: int) -> None:
        self._tx_new.update(range(first, first + n))

    def _new_edge_ends(self, ends: Iterable[int] | None) -> None:
        if ends is None or self._tx_ends is None:
            self._tx_ends = None
        else:
            self._tx_ends.update(ends)

    def _edgeless(self, nid: int) -> bool:
        """Whether chunk ``nid`` certainly has no edge yet: inserted by this transaction, and no edge
        this transaction inserted names it."""
        return self._depth > 0 and nid in self._tx_new and self._tx_ends is not None and nid not in self._tx_ends

    def insert_chunk(self, *, text: str, kind: str, created_at: float, q_value: float,
                     event_time: float | None = None, user_id: str | None = None, agent_id: str | None = None,
                     run_id: str | None = None, session_id: str | None = None,
                     metadata: Mapping[str, Any] | None = None, importance: float = 5.0,
                     chunk_id: str | None = None) -> ChunkKey:
        cid = chunk_id or new_id()
        nid = self._next_key("chunks", "nid")
        self._new_chunks(nid, 1)
        values = (nid, cid, text, text_hash(text), kind, created_at, event_time, q_value, importance, user_id,
                  agent_id, run_id, session_id, json.dumps(dict(metadata or {}), ensure_ascii=False))
        self._x(f"INSERT INTO chunks ({INSERT_COLS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", values)
        self._staged.append(values)
        return ChunkKey(nid, cid)

    def _copy_in(self, table: str, columns: str, rows: Iterable[Sequence[Any]],
                 types: Sequence[str] | None = None) -> None:
        """``COPY ... FROM STDIN``; with the columns' ``types``, in binary: no text formatting here and
        no parsing on the server (a 4,000-row chunk batch: 7 -> 3 ms of client CPU)."""
        if isinstance(rows, list) and not rows:
            return
        with self.conn.cursor() as cur:
            with cur.copy(f"COPY {table} ({columns}) FROM STDIN" + (" (FORMAT BINARY)" if types else "")) as cp:
                if types:
                    cp.set_types(types)
                for r in rows:
                    cp.write_row(r)

    def _copy_sent(self) -> None:
        """A ``COPY FROM``'s end is with libpq: its reply is read before the connection's next statement."""
        self._pending = "copy"

    def _copy_ahead(self, table: str, columns: str, rows: Iterable[Sequence[Any]], types: Sequence[str]) -> None:
        """A binary ``COPY`` whose end is sent without waiting for the server to insert the rows: the
        caller goes on with its own work while the server inserts, and the reply is read before
        the connection's next statement (``conn``, ``_settle``). Inside a write transaction only."""
        with self.conn.cursor() as cur:
            writer = CopyAhead(cur, self._copy_sent)
            with cur.copy(f"COPY {table} ({columns}) FROM STDIN (FORMAT BINARY)", writer=writer) as cp:
                cp.set_types(types)
                for r in rows:
                    cp.write_row(r)

    def insert_chunks_bulk(self, rows: Sequence[Mapping[str, Any]]) -> list[ChunkKey]:
        if not rows:
            return []
        base = self._next_key("chunks", "nid", len(rows)) - 1
        self._new_chunks(base + 1, len(rows))
        ids = new_ids(len(rows))
        values = [(base + 1 + i, ids[i], r["text"], r.get("text_hash") or text_hash(r["text"]), r["kind"],
                   r["created_at"], r.get("event_time"), r["q_value"], r.get("importance", 5.0), r.get("user_id"),
                   r.get("agent_id"), r.get("run_id"), r.get("session_id"),
                   json.dumps(r["metadata"], ensure_ascii=False) if r.get("metadata") else "{}")
                  for i, r in enumerate(rows)]
        # the edge-end check may skip these keys (schema 6): named in this (sub)transaction, so an
        # error of the COPY rolls the setting back with it
        self._x(f"SELECT set_config('{OWN_NIDS}', %s, true)", (f"{base + 1}:{base + len(rows)}",))
        self._copy_ahead("chunks", INSERT_COLS, values, INSERT_TYPES)
        self._staged.extend(values)  # the row cache takes them at commit
        return [ChunkKey(base + 1 + i, ids[i]) for i in range(len(rows))]

    def chunk_metadata_json(self, nids: Sequence[int] | None) -> list[tuple[int, str]]:
        if nids is not None:
            with self._lock:
                cache = self._cached()
                if cache is not None:
                    got = self._rows_from(cache, sorted({int(x) for x in nids}))
                    return [(n, full_row(r)[12]) for n, r in got.items()]
            return self.query("SELECT nid, metadata FROM chunks WHERE nid = ANY(%s)", ([int(n) for n in nids],))
        return self.query("SELECT nid, metadata FROM chunks")

    def touch_chunks(self, nids: Sequence[int], now: float) -> None:
        ids = [int(n) for n in nids]
        if not ids:
            return
        # one statement; a nid listed twice counts twice, as the per-row updates of the SQLite backend do
        self._x(
            "UPDATE chunks c SET access_count = c.access_count + t.n, "
            "importance = LEAST(10.0, c.importance + 0.1 * t.n), last_accessed_at = %s "
            "FROM (SELECT u AS nid, COUNT(*) AS n FROM unnest(%s::bigint[]) u GROUP BY u) t WHERE c.nid = t.nid",
            (now, ids))

    def touch_chunks_batch(self, touches: Sequence[tuple[Sequence[int], float]]) -> None:
        """One statement for the whole queue: per chunk, the accesses added up and the time of the
        last search that returned it (``touch_chunks`` per search, summed)."""
        count: dict[int, int] = {}
        last: dict[int, float] = {}
        for nids, now in touches:
            for n in nids:
                n = int(n)
                count[n] = count.get(n, 0) + 1
                last[n] = now
        if not count:
            return
        keys = list(count)
        # probe the chunks by key (``nid = ANY``: an index scan): with a join on the key alone and a
        # few hundred keys, the planner's estimate preferred a hash join over a scan of every chunk
        # (8 of a 10 ms update on 20,000 chunks, and growing with the store)
        update = ("UPDATE chunks c SET access_count = c.access_count + t.n, "
                  "importance = LEAST(10.0, c.importance + 0.1 * t.n), last_accessed_at = t.at "
                  "FROM unnest({}::bigint[], {}::bigint[], {}::float8[]) AS t(nid, n, at) "
                  "WHERE c.nid = ANY({}::bigint[]) AND c.nid = t.nid")
        values = (keys, [count[n] for n in keys], [float(last[n]) for n in keys], keys)
        # the queue's write at the start of a write transaction: sent with its last statement, its
        # rows' new counts returned (they patch the cached rows: ``_end_write`` reads none back);
        # ``causalmem.touched`` says it changed rows
        deferred = pg_sql.SQL(
            "WITH u AS (" + update + " RETURNING c.nid, c.access_count, c.importance, c.last_accessed_at) "
            "SELECT u.*, set_config('causalmem.touched', 'yes', true) FROM u").format(*map(array_literal, values))
        if not self._defer("touch", deferred):
            self._x(update.replace("{}", "%s"), values)

    def update_q_values(self, rows: Iterable[tuple[float, int]]) -> None:
        rows = list(rows)
        if rows:
            self._x("UPDATE chunks c SET q_value = t.q FROM unnest(%s::float8[], %s::bigint[]) AS t(q, nid) "
                    "WHERE c.nid = t.nid", ([float(r[0]) for r in rows], [int(r[1]) for r in rows]))

    # ------------------------------------------------------------------ edges: reads
    def _prefetch(self) -> tuple[dict[int, tuple], int] | None:
        """What ``foreign_changes`` read along (edge states, newest update event), while nothing
        was committed since (by anyone this object has heard of) and outside a transaction."""
        got = self._prefetched
        if got is None or got[0] != self._seen_seq or self._depth > 0:
            return None
        return got[1], got[2]

    def edge_states(self, eids: Sequence[int]) -> list[tuple[int, int, int, int, float, bool]]:
        """(eid, src, dst, rel_code, confidence, valid) of the given edges, ascending eid (the
        catch-up of another host's edge changes)."""
        with self._lock:
            pre = self._prefetch()
            if pre is not None and all(int(e) in pre[0] for e in eids):
                return [pre[0][e] for e in sorted({int(e) for e in eids})]
        return self.query("SELECT eid, src, dst, rel_code, confidence, valid_to IS NULL FROM edges "
                          "WHERE eid = ANY(%s) ORDER BY eid", ([int(e) for e in eids],))

    def negative_excitatory_out_edges(self, srcs: Sequence[int]) -> dict[int, list[OutEdge]]:
        out: dict[int, list[OutEdge]] = {}
        wanted = sorted({int(s) for s in srcs if not self._edgeless(int(s))})
        if not wanted:
            return out
        for eid, eid_s, src, dst in self.query(
                "SELECT eid, id, src, dst FROM edges WHERE src = ANY(%s) AND valid_to IS NULL AND "
                "relation IN ('caused', 'enabled') AND polarity = 'negative' ORDER BY eid", (wanted,)):
            out.setdefault(src, []).append(OutEdge(eid, eid_s, dst))
        return out

    def superseded_chunks(self, nids: Sequence[int]) -> dict[int, str]:
        ids = [int(n) for n in nids]
        with self._lock:
            cache = self._cached()
            if cache is not None:  # the whole (small) superseded set, read once per change of the edges
                if cache.superseded is None:
                    cache.superseded = self._superseded(None)
                sup = cache.superseded
                return {n: sup[n] for n in ids if n in sup}
        return self._superseded(ids)

    def _superseded(self, ids: list[int] | None) -> dict[int, str]:
        if ids is None:
            return superseded_of(self.query(SUPERSEDED_SQL.format(where="")))
        return superseded_of(self.query(SUPERSEDED_SQL.format(where="e.dst = ANY(%s) AND "), (ids, ids)))

    def _columns(self, table: str, columns: Sequence[tuple[str, str]], where: str = "TRUE") -> list[np.ndarray]:
        """Columns of ``table`` as numpy arrays in one round trip: the server aggregates each column
        into an array (``array_agg``, one group per 2^26 rows, under the 1 GB value limit) that
        arrives in its binary form and is read in place; no Python object per row.
        ``columns``: (SQL column, big-endian numpy type code) pairs."""
        key = columns[0][0]
        with self.conn.cursor(binary=True) as cur:
            for oid in RAW_ARRAY_OIDS:
                cur.adapters.register_loader(oid, RawArrayLoader)
            groups = cur.execute(
                "SELECT " + ", ".join(f"array_agg({c})" for c, _ in columns) + f" FROM {table} WHERE {where} "
                f"GROUP BY {key} >> 26 ORDER BY {key} >> 26").fetchall()
        if not groups:
            return [np.empty(0, dtype=code) for _, code in columns]
        out = []
        for i, (_, code) in enumerate(columns):
            parts = [array_values(g[i], code) for g in groups]
            out.append(np.concatenate(parts) if len(parts) != 1 else parts[0])
        return out

    def projection_arrays(self) -> dict[str, Any]:
        with self._lock, self._snapshot():
            try:
                max_nid = self.conn.execute("SELECT COALESCE(MAX(nid), 0) FROM chunks").fetchone()[0]
                eid, src, dst, rel, conf = self._columns(
                    "edges", (("eid", ">i8"), ("src", ">i8"), ("dst", ">i8"), ("rel_code", ">i4"),
                              ("confidence", ">f8")), "valid_to IS NULL")
                a, b, w = self._columns("cooccurrence", (("a", ">i8"), ("b", ">i8"), ("weight", ">f8")))
            except psycopg.Error as exc:
                raise self._store_error(exc, "reading the graph") from exc
        arr = np.empty(len(eid), dtype=PROJECTION_EDGE_DTYPE)
        arr["eid"], arr["src"], arr["dst"], arr["rel"], arr["conf"] = eid, src, dst, rel, conf
        co = np.empty(len(a), dtype=PROJECTION_CO_DTYPE)
        co["a"], co["b"], co["w"] = a, b, w
        return {"n_nodes": int(max_nid) + 1, "edges": arr, "co": co}

    def sleep_edge_arrays(self, *, relations: Sequence[str] | None = None) -> np.ndarray:
        sql, params = SLEEP_EDGE_SELECT, []
        if relations:
            sql += " AND relation = ANY(%s)"
            params = [list(relations)]
        rows = self.query(sql + " ORDER BY eid", params)
        return np.fromiter(rows, dtype=EDGE_DTYPE, count=len(rows))

    # ------------------------------------------------------------------ edges: writes
    def insert_edges_bulk(self, rows: Sequence[Mapping[str, Any]]) -> list[tuple[int, str]]:
        if not rows:
            return []
        base = self._next_key("edges", "eid", len(rows)) - 1
        self._new_edge_ends([int(r["src"]) for r in rows] + [int(r["dst"]) for r in rows])
        ids = new_ids(len(rows))
        self._copy_ahead(  # the rows are read here: the caller may change its row dicts afterwards
            "edges", EDGE_INSERT_COLS,
            ((base + 1 + i, ids[i], int(r["src"]), int(r["dst"]), r["relation"].value, r["relation"].code,
              r.get("subtype"), r["confidence"], r["source"], r.get("polarity"),
              r.get("polarity_origin") or ("unknown" if r.get("polarity") is None else "given"),
              r.get("task_tag"), r.get("event_time"), r["discovered_at"]) for i, r in enumerate(rows)),
            EDGE_INSERT_TYPES)
        return [(base + 1 + i, ids[i]) for i in range(len(rows))]

    def update_edge_confidences(self, rows: Iterable[tuple[float, int]]) -> None:
        rows = list(rows)
        if rows:
            self._x("UPDATE edges e SET confidence = t.c FROM unnest(%s::float8[], %s::bigint[]) AS t(c, eid) "
                    "WHERE e.eid = t.eid", ([float(r[0]) for r in rows], [int(r[1]) for r in rows]))

    def retire_edges(self, rows: Iterable[tuple[float, str, float, int]]) -> None:
        rows = list(rows)
        if rows:
            self._x("UPDATE edges e SET valid_to = t.v, invalid_reason = t.r, confidence = t.c "
                    "FROM unnest(%s::float8[], %s::text[], %s::float8[], %s::bigint[]) AS t(v, r, c, eid) "
                    "WHERE e.eid = t.eid AND e.valid_to IS NULL",
                    ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [int(r[3]) for r in rows]))

    def annotate_superseded(self, rows: Iterable[tuple[str, int]]) -> int:
        n = 0
        for by, eid in rows:
            n += self._x("UPDATE edges SET superseded_by = %s WHERE eid = %s AND valid_to IS NULL "
                         "AND superseded_by IS NULL", (by, int(eid))).rowcount
        return n

    def retire_superseded(self, rows: Iterable[tuple[float, str, str, int]]) -> int:
        n = 0
        for v, reason, by, eid in rows:
            n += self._x("UPDATE edges SET valid_to = %s, invalid_reason = %s, superseded_by = %s "
                         "WHERE eid = %s AND valid_to IS NULL", (v, reason, by, int(eid))).rowcount
        return n

    # ------------------------------------------------------------------ repeated evidence
    def valid_edges_for_pairs(self, keys: Sequence[tuple[int, int, str, str | None]]) -> dict[tuple, EvidenceEdge]:
        wanted = {k for k in keys if not (self._edgeless(int(k[0])) or self._edgeless(int(k[1])))}
        if not wanted:
            return {}
        srcs = sorted({int(k[0]) for k in wanted})
        return evidence_edges(self.query(
            "SELECT eid, id, src, dst, relation, subtype, confidence, evidence, polarity, polarity_origin "
            "FROM edges WHERE src = ANY(%s) AND valid_to IS NULL ORDER BY eid", (srcs,)), wanted)

    # ------------------------------------------------------------------ purge, export, import
    def purge_chunks(self, nids: Sequence[int]) -> int:
        """Delete the chunks and everything derived from them (see the SQLite backend); the rows are
        gone for every reader at commit, ``compact()`` then rewrites the tables (``VACUUM FULL``)."""
        ids = sorted({int(n) for n in nids})
        if not ids:
            return 0
        top_nid = self.conn.execute("SELECT COALESCE(MAX(nid), 0) FROM chunks").fetchone()[0]
        top_eid = self.conn.execute("SELECT COALESCE(MAX(eid), 0) FROM edges").fetchone()[0]
        for key, top in (("purged_max_nid", top_nid), ("purged_max_eid", top_eid)):
            self._x("INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET "
                    "value = GREATEST(meta.value::bigint, EXCLUDED.value::bigint)::text", (key, str(int(top))))
        edge_ids = [r[0] for r in self.conn.execute(
            "SELECT id FROM edges WHERE src = ANY(%s) OR dst = ANY(%s)", (ids, ids)).fetchall()]
        if edge_ids:
            self._x("UPDATE edges SET superseded_by = NULL WHERE superseded_by = ANY(%s)", (edge_ids,))
            for eid in edge_ids:
                self._x("DELETE FROM meta WHERE key LIKE %s", (f"judged:%{eid}%",))
        self._x("DELETE FROM edges WHERE src = ANY(%s) OR dst = ANY(%s)", (ids, ids))
        self._x("DELETE FROM cooccurrence WHERE a = ANY(%s) OR b = ANY(%s)", (ids, ids))
        self._x("DELETE FROM facts WHERE nid = ANY(%s)", (ids,))
        self._x("DELETE FROM embeddings WHERE nid = ANY(%s)", (ids,))
        self._x("DELETE FROM chunk_history WHERE nid = ANY(%s)", (ids,))
        return int(self._x("DELETE FROM chunks WHERE nid = ANY(%s)", (ids,)).rowcount)

    def compact(self) -> bool:
        """``VACUUM FULL`` of the memory's tables, so deleted rows leave the table files (outside
        transactions). The server's write-ahead log keeps them until its next checkpoint recycles
        it; returns False when this role may not run ``CHECKPOINT`` to hasten that."""
        with self._lock:
            self._ensure_open()
            if self._depth:
                raise RuntimeError("compact() cannot run inside a transaction")
            try:
                self.conn.execute("VACUUM (FULL) chunks, edges, cooccurrence, facts, embeddings, chunk_history, meta")
            except psycopg.Error as exc:
                raise self._store_error(exc, "compacting after a purge") from exc
            try:
                self.conn.execute("CHECKPOINT")
            except psycopg.Error:
                return False
            return True

    def export_records(self, *, vectors: bool = False) -> Iterator[tuple[str, dict[str, Any]]]:
        with self._lock, self._snapshot():
            for key, value in self.conn.execute("SELECT key, value FROM meta ORDER BY key").fetchall():
                if not key.startswith("purged_max_"):
                    yield "meta", {"key": key, "value": value}
            for kind, sql, keys in EXPORTS:
                if kind == "embedding" and not vectors:
                    continue
                for row in self.conn.execute(sql).fetchall():
                    yield kind, export_record(kind, keys, row)

    def import_records(self, records: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, int]:
        rows = import_rows(records, self._next_key("chunks", "nid", 0) - 1, self._next_key("edges", "eid", 0) - 1)
        self._next_key("chunks", "nid", len(rows.chunks))
        self._next_key("edges", "eid", len(rows.edges))
        self._new_edge_ends(None)
        self._copy_in("chunks", IMPORT_COLS["chunks"], rows.chunks)
        self._copy_in("chunk_history", IMPORT_COLS["chunk_history"], rows.history)
        self._copy_in("edges", IMPORT_COLS["edges"], rows.edges)
        self._copy_in("cooccurrence", IMPORT_COLS["cooccurrence"], rows.cooccurrence)
        self._copy_in("facts", IMPORT_COLS["facts"], rows.facts)
        self.put_embeddings(rows.embeddings)  # an upsert, as the SQLite backend's INSERT OR REPLACE
        self._many(META_UPSERT, rows.meta)
        return {k: len(v) for k, v in records.items()}

    # ------------------------------------------------------------------ co-occurrence (Hebbian)
    def _co_mirror(self) -> dict[int, dict[int, float]] | None:
        """The co-occurrence pairs as a -> {b: weight}, exact as of this call's sequence check (see
        ``_cached``), read whole the first time (one round trip) and kept exact from then on by
        the change log, like the chunk rows; None where the row cache may not answer, or the
        table is larger than ``CO_CACHE_MAX``."""
        cache = self._cached()
        if cache is None or cache.co_too_big:
            return None
        if cache.co is None:
            rows = self.query(f"SELECT a, b, weight FROM cooccurrence LIMIT {CO_CACHE_MAX + 1}")
            if len(rows) > CO_CACHE_MAX:
                cache.co_too_big = True
                return None
            cache.co, cache.co_missing = {}, set()
            cache.co_replace((), rows)
        elif cache.co_missing:
            keys = sorted(cache.co_missing)
            cache.co_replace(keys, self.query("SELECT a, b, weight FROM cooccurrence WHERE a = ANY(%s)", (keys,)))
        return cache.co

    def _co_at_lock(self) -> dict[int, dict[int, float]] | None:
        """Inside a write transaction that has sent nothing yet but its start (and deferred
        statements, none of which writes pairs before it is sent): the mirrored pairs when they are
        exact as of the sequence value read under the writer lock, which is then the table's state
        (the queue write reads the weights it credits here: no round trip)."""
        cache = self._cache
        if (self._depth != 1 or self._tx_used or any(k != "touch" for k, _ in self._deferred)
                or cache.upto != self._tx_seq - 1 or cache.co is None or cache.co_missing or cache.co_too_big):
            return None
        return cache.co

    def cooccurrence_weights(self, nids: Sequence[int]) -> dict[tuple[int, int], float]:
        ids = [int(n) for n in nids]
        if len(ids) < 2:
            return {}
        with self._lock:
            co = self._co_mirror() if self._depth == 0 else self._co_at_lock()
            if co is not None:  # the learned-link overlay of every search: no round trip
                want = set(ids)
                return {(a, b): w for a in sorted(want) if a in co for b, w in co[a].items() if b in want}
        rows = self.query("SELECT a, b, weight FROM cooccurrence WHERE a = ANY(%s) AND b = ANY(%s)", (ids, ids))
        return {(a, b): w for a, b, w in rows}

    def credit_cooccurrence(self, rows: Sequence[tuple[int, int, float, int, float]]) -> None:
        rows = list(rows)
        if rows:  # one statement for the whole queue (sent with the transaction's last one: ``_defer``)
            upsert = ("INSERT INTO cooccurrence (a, b, weight, hits, updated_at) "
                      "SELECT * FROM unnest({}::bigint[], {}::bigint[], {}::float8[], {}::bigint[], {}::float8[]) "
                      "ON CONFLICT (a, b) DO UPDATE SET weight = EXCLUDED.weight, hits = cooccurrence.hits + "
                      "EXCLUDED.hits, updated_at = EXCLUDED.updated_at")
            values = ([int(r[0]) for r in rows], [int(r[1]) for r in rows], [float(r[2]) for r in rows],
                      [int(r[3]) for r in rows], [float(r[4]) for r in rows])
            if not self._defer("credit", pg_sql.SQL(upsert).format(*map(array_literal, values))):
                self._x(upsert.replace("{}", "%s"), values)

    def upsert_cooccurrence(self, rows: Sequence[tuple[int, int, float, float]]) -> None:
        self._many(
            "INSERT INTO cooccurrence (a, b, weight, hits, updated_at) VALUES (%s, %s, %s, 1, %s) "
            "ON CONFLICT (a, b) DO UPDATE SET weight = EXCLUDED.weight, hits = cooccurrence.hits + 1, "
            "updated_at = EXCLUDED.updated_at", [(int(a), int(b), w, t) for a, b, w, t in rows])

    def sleep_cooccurrence_arrays(self) -> np.ndarray:
        rows = self.query("SELECT a, b, weight, updated_at FROM cooccurrence ORDER BY a, b")
        return np.fromiter(rows, dtype=COOC_DTYPE, count=len(rows))

    def set_cooccurrence_weights(self, rows: Iterable[tuple[float, int, int]]) -> None:
        rows = list(rows)
        if rows:
            self._x("UPDATE cooccurrence o SET weight = t.w FROM unnest(%s::float8[], %s::bigint[], %s::bigint[]) "
                    "AS t(w, a, b) WHERE o.a = t.a AND o.b = t.b",
                    ([float(r[0]) for r in rows], [int(r[1]) for r in rows], [int(r[2]) for r in rows]))

    def delete_cooccurrence(self, rows: Iterable[tuple[int, int]]) -> None:
        rows = list(rows)
        if rows:
            self._x("DELETE FROM cooccurrence o USING unnest(%s::bigint[], %s::bigint[]) AS t(a, b) "
                    "WHERE o.a = t.a AND o.b = t.b", ([int(r[0]) for r in rows], [int(r[1]) for r in rows]))

    # ------------------------------------------------------------------ facts
    def insert_fact(self, *, key: str, value: str, nid: int, user_id: str | None, agent_id: str | None,
                    run_id: str | None, confidence: float, now: float) -> int:
        return int(self._x(
            "INSERT INTO facts (key, value, nid, user_id, agent_id, run_id, confidence, created_at) "
            "VALUES (%s,%s,%s,%s,%s,%s,%s,%s) RETURNING fid",
            (key, value, int(nid), user_id, agent_id, run_id, confidence, now)).fetchone()[0])

    # ------------------------------------------------------------------ embeddings
    def embeddings_for(self, model: str) -> Iterator[StoredVector]:
        rows = self.query(
            "SELECT e.nid, e.text_hash, e.vector FROM embeddings e JOIN chunks c ON c.nid = e.nid "
            "WHERE e.model = %s AND c.valid_to IS NULL AND e.text_hash = c.text_hash ORDER BY e.nid", (model,))
        for nid, th, vec in rows:
            yield StoredVector(nid, th, bytes(vec))

    def embedding_rows(self, model: str, *, after_nid: int = 0, limit: int | None = None,
                       nids: Sequence[int] | None = None, with_vectors: bool = True) -> list[tuple]:
        """(nid, text_hash[, vector]) of live chunks' current vectors for ``model``, ascending nid: a
        page after ``after_nid`` (``limit`` rows), or those of ``nids`` (the vector index keeper's paging)."""
        cols = "e.nid, e.text_hash, e.vector" if with_vectors else "e.nid, e.text_hash"
        where = "e.model = %s AND c.valid_to IS NULL AND e.text_hash = c.text_hash"
        if nids is not None:
            rows = self.query(f"SELECT {cols} FROM embeddings e JOIN chunks c ON c.nid = e.nid "
                              f"WHERE e.nid = ANY(%s) AND {where} ORDER BY e.nid", ([int(n) for n in nids], model))
        else:
            rows = self.query(f"SELECT {cols} FROM embeddings e JOIN chunks c ON c.nid = e.nid "
                              f"WHERE e.nid > %s AND {where} ORDER BY e.nid LIMIT %s",
                              (int(after_nid), model, None if limit is None else int(limit)))
        return [(r[0], r[1], bytes(r[2])) if with_vectors else tuple(r) for r in rows]

    def put_embeddings(self, rows: Iterable[EmbeddingRow | tuple[int, str, int, int, bytes]]) -> None:
        latest: dict[int, tuple] = {}
        for r in rows:  # one row per nid (the last wins), as INSERT OR REPLACE would leave it
            latest[int(r[0])] = (int(r[0]), r[1], int(r[2]), int(r[3]), bytes(r[4]))
        self._many(
            "INSERT INTO embeddings (nid, model, dim, text_hash, vector) VALUES (%s,%s,%s,%s,%s) "
            "ON CONFLICT (nid) DO UPDATE SET model = EXCLUDED.model, dim = EXCLUDED.dim, "
            "text_hash = EXCLUDED.text_hash, vector = EXCLUDED.vector", list(latest.values()))

    # ------------------------------------------------------------------ sleep bookkeeping
    def remember_judged(self, keys: Iterable[str], verdict: str = "decided") -> None:
        self._many(META_UPSERT, [(k, verdict) for k in dict.fromkeys(keys)])
