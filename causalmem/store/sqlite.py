"""SQLite backend: the embedded default store (SPEC §1). Implements ``base.StoreBackend``.

One connection per ``SQLiteStore`` (WAL, ``BEGIN IMMEDIATE`` writes, savepoints for nested
transactions, ordered named migrations). This module is the only place in the package that
speaks SQLite's SQL.

Bulk reads build numpy structured arrays straight from the cursor (``np.fromiter``); string
columns (source, polarity, subtype) become small integer codes through SQL ``CASE`` so that a
million-edge table loads without a Python object per cell. Writes are ``executemany`` over only
the rows that changed.
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import operator
import os
import secrets
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import numpy as np

from ..background import start_thread
from ..errors import SchemaVersionError, StoreError
from ..types import Relation
from ._common import (
    CHUNK_COLS, EXPORTS, IMPORT_COLS, SharedStore, chunk_columns_of, evidence_edges, export_record, import_rows,
    same_text, sleep_edge_select,
)
from .base import (
    CHUNK_DTYPE, COOC_DTYPE, EDGE_DTYPE, PROJECTION_CO_DTYPE, PROJECTION_EDGE_DTYPE, ChunkColumns, ChunkKey,
    ChunkRow, EmbeddingRow, EvidenceEdge, MiningChunkRow, OutEdge, StoredVector,
    batched, check_path, new_id, new_ids, text_hash,
)

log = logging.getLogger("causalmem")

R = TypeVar("R")

SCHEMA_VERSION = 4
#: PRAGMA application_id of a causalmem database ("CMem"): a file carrying another id, or
#: holding tables of its own without ours, belongs to another application and is refused.
APPLICATION_ID = 0x434D656D

# Ordered, idempotent migrations: MIGRATIONS[i] brings user_version i -> i+1.
# edges.access_count / edges.last_accessed_at are retired: never written and never read (access is
# recorded on chunks). They stay in version 1 so that existing files need no table rebuild (DROP COLUMN
# needs SQLite >= 3.35); the next migration that rebuilds the edges table drops them.
MIGRATIONS: list[tuple[str, str]] = [
    (
        "initial schema",
        """
        CREATE TABLE IF NOT EXISTS chunks (
            nid INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            text TEXT NOT NULL,
            text_hash INTEGER NOT NULL,
            kind TEXT NOT NULL,
            created_at REAL NOT NULL,
            event_time REAL,
            q_value REAL NOT NULL,
            importance REAL NOT NULL DEFAULT 5.0,
            access_count INTEGER NOT NULL DEFAULT 0,
            last_accessed_at REAL,
            user_id TEXT,
            agent_id TEXT,
            run_id TEXT,
            session_id TEXT,
            metadata TEXT NOT NULL DEFAULT '{}',
            valid_to REAL
        );
        CREATE INDEX IF NOT EXISTS chunks_reuse ON chunks(text_hash, user_id, agent_id, run_id);
        CREATE INDEX IF NOT EXISTS chunks_scope ON chunks(user_id, agent_id, run_id);
        CREATE INDEX IF NOT EXISTS chunks_session ON chunks(session_id, nid);
        CREATE TABLE IF NOT EXISTS edges (
            eid INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            src INTEGER NOT NULL REFERENCES chunks(nid),
            dst INTEGER NOT NULL REFERENCES chunks(nid),
            relation TEXT NOT NULL,
            rel_code INTEGER NOT NULL,
            subtype TEXT,
            confidence REAL NOT NULL,
            source TEXT NOT NULL,
            polarity TEXT,
            task_tag TEXT,
            event_time REAL,
            discovered_at REAL NOT NULL,
            valid_to REAL,
            invalid_reason TEXT,
            superseded_by TEXT,
            access_count INTEGER NOT NULL DEFAULT 0,
            last_accessed_at REAL
        );
        CREATE INDEX IF NOT EXISTS edges_src ON edges(src);
        CREATE INDEX IF NOT EXISTS edges_dst ON edges(dst);
        CREATE TABLE IF NOT EXISTS cooccurrence (
            a INTEGER NOT NULL,
            b INTEGER NOT NULL,
            weight REAL NOT NULL,
            hits INTEGER NOT NULL DEFAULT 1,
            updated_at REAL NOT NULL,
            PRIMARY KEY (a, b)
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS facts (
            fid INTEGER PRIMARY KEY,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            nid INTEGER NOT NULL REFERENCES chunks(nid),
            user_id TEXT,
            agent_id TEXT,
            run_id TEXT,
            confidence REAL NOT NULL,
            created_at REAL NOT NULL,
            valid_to REAL
        );
        CREATE INDEX IF NOT EXISTS facts_key ON facts(key, user_id, agent_id, run_id);
        CREATE TABLE IF NOT EXISTS embeddings (
            nid INTEGER PRIMARY KEY REFERENCES chunks(nid),
            model TEXT NOT NULL,
            dim INTEGER NOT NULL,
            text_hash INTEGER NOT NULL,
            vector BLOB NOT NULL
        );
        CREATE TABLE IF NOT EXISTS chunk_history (
            hid INTEGER PRIMARY KEY,
            nid INTEGER NOT NULL,
            event TEXT NOT NULL,
            old_text TEXT,
            new_text TEXT,
            at REAL NOT NULL
        );
        CREATE INDEX IF NOT EXISTS chunk_history_nid ON chunk_history(nid);
        CREATE INDEX IF NOT EXISTS chunk_history_event ON chunk_history(event, hid);
        CREATE TABLE IF NOT EXISTS meta (
            key TEXT PRIMARY KEY,
            value TEXT
        );
        """,
    ),
    (
        "polarity origin, evidence count, edge pair index",
        """
        ALTER TABLE edges ADD COLUMN polarity_origin TEXT;
        ALTER TABLE edges ADD COLUMN evidence INTEGER NOT NULL DEFAULT 1;
        UPDATE edges SET polarity_origin = CASE WHEN polarity IS NULL THEN 'unknown' ELSE 'guessed' END;
        CREATE INDEX IF NOT EXISTS edges_pair ON edges(src, dst, relation);
        """,
    ),
    (
        "leaner write-path indexes: session index partial, edges_src dropped",
        # Most chunks (decisions, outcomes, facts) have no session: only turns need the session
        # index, and ``session_id = ?`` implies the partial index's condition. edges_pair starts
        # with src, so a separate src index only doubled the work of every edge insert.
        """
        DROP INDEX IF EXISTS chunks_session;
        CREATE INDEX IF NOT EXISTS chunks_session ON chunks(session_id, nid) WHERE session_id IS NOT NULL;
        DROP INDEX IF EXISTS edges_src;
        """,
    ),
    (
        "partial indexes of the superseding edges",
        # What ``superseded_chunks`` looks for: a valid edge annotated ``superseded_by`` and a valid
        # invalidates/supersedes meta edge. Few edges are either, so the lookup of a search (and its
        # whole-store read, cached between commits) probes two small indexes instead of ``edges_dst``
        # (0.29 -> 0.08 ms CPU of a 1.3-1.7 ms search at 100k chunks). Index-only: the derived files
        # (chunk table, BM25, projection, vectors) stay valid.
        """
        CREATE INDEX IF NOT EXISTS edges_superseded ON edges(dst) WHERE valid_to IS NULL AND superseded_by IS NOT NULL;
        CREATE INDEX IF NOT EXISTS edges_invalidating ON edges(dst)
            WHERE valid_to IS NULL AND subtype IN ('invalidates', 'supersedes');
        """,
    ),
]
#: user_versions reached by a migration that only adds indexes: the store's logical content, and so
#: the index files made from it (``<db>.idx/``), are the same before and after (no change_seq step)
INDEX_ONLY_MIGRATIONS = frozenset({4})
#: most (nid -> superseding chunk id) entries ``superseded_chunks`` keeps in memory (more: a query per search)
SUPERSEDED_CACHE_MAX = 50_000
#: searches in a row on an unchanged database before ``superseded_chunks`` reads the whole map (at least;
#: one more per 100 rows the last read returned): a map read costs ~2 ms per 1,000 rows, a lookup of a
#: search's own chunks ~0.3 ms, so the map is read only where it pays for itself
SUPERSEDED_MAP_AFTER = 16
#: the tables a causalmem database may hold (a file with any other table is someone else's)
OWN_TABLES = frozenset({"chunks", "edges", "cooccurrence", "facts", "embeddings", "chunk_history", "meta"})
assert len(MIGRATIONS) == SCHEMA_VERSION
assert len(Relation) <= 8, "projection_arrays packs the relation code into 3 bits"

#: relation -> (relation, rel_code) columns (an enum's ``.value`` is a property call per access)
_REL_COLUMNS = {r: (r.value, r.code) for r in Relation}
#: optional chunk / edge columns of the bulk inserts -> the value a row gives (left out of the
#: INSERT when no row of the batch sets it: the column's default, or NULL, is the same value)
_CHUNK_OPTIONAL: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "event_time": lambda r: r.get("event_time"), "importance": lambda r: r.get("importance", 5.0),
    "user_id": lambda r: r.get("user_id"), "agent_id": lambda r: r.get("agent_id"), "run_id": lambda r: r.get("run_id"),
    "session_id": lambda r: r.get("session_id"),
    "metadata": lambda r: json.dumps(r["metadata"], ensure_ascii=False) if r.get("metadata") else "{}"}
_EDGE_OPTIONAL: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "subtype": lambda r: r.get("subtype"), "polarity": lambda r: r.get("polarity"),
    "task_tag": lambda r: r.get("task_tag"), "event_time": lambda r: r.get("event_time")}
#: C-level getters of the bulk inserts' required row keys (an optional one: ``row.get``, ``None`` when left out)
_get_text, _get_kind, _get_created, _get_q = (operator.itemgetter(k) for k in ("text", "kind", "created_at", "q_value"))
_get_src, _get_dst, _get_relation, _get_confidence, _get_source, _get_discovered = (operator.itemgetter(k) for k in (
    "src", "dst", "relation", "confidence", "source", "discovered_at"))
#: optional chunk columns whose stored value is the row's own (the others: ``_CHUNK_OPTIONAL``'s conversion)
_AS_GIVEN = frozenset({"event_time", "user_id", "agent_id", "run_id", "session_id"})
#: ChunkKey from a (nid, id) pair in C (a NamedTuple's ``_make`` is a Python-level classmethod)
_new_chunk_key = functools.partial(tuple.__new__, ChunkKey)
_SLEEP_EDGE_SELECT = sleep_edge_select("{}")


#: the chunks superseded by a newer edge or invalidated by a meta edge (``{where}``: a condition on ``e``
#: ending in AND, or empty for the whole store); both halves are read through their partial indexes
_SUPERSEDED_SQL = (
    "SELECT e.dst, d.id FROM edges e JOIN edges n ON n.id = e.superseded_by "
    "JOIN chunks d ON d.nid = n.dst WHERE {where}e.valid_to IS NULL "
    "AND e.superseded_by IS NOT NULL AND n.dst != e.dst AND n.relation != 'meta' "
    "UNION ALL SELECT e.dst, s.id FROM edges e JOIN chunks s ON s.nid = e.src "
    "WHERE {where}e.valid_to IS NULL AND e.subtype IN ('invalidates', 'supersedes') AND s.valid_to IS NULL "
    "ORDER BY 1, 2")  # "the first" superseding chunk is the lowest id, on every path

#: meta key of the persistent change counter (``SQLiteStore.change_seq``)
CHANGE_SEQ_KEY = "change_seq"
#: pages in the write-ahead log after which a commit asks the checkpointer thread to copy them into
#: the database file (SQLite's own auto-checkpoint size)
CHECKPOINT_PAGES = 1000
#: the writing connection's own auto-checkpoint: only a safety net for when the checkpointer cannot
#: keep up (a checkpoint cannot pass a reader's snapshot)
AUTO_CHECKPOINT_PAGES = 20000


class _Checkpointer:
    """Checkpoints of a file's write-ahead log on a thread of their own.

    With SQLite's auto-checkpoint, the commit that fills the log past its size copies every page
    into the database file and syncs both (``synchronous=NORMAL``) before it returns: every fifth
    1,000-pair ``record_many`` waited 5-40 ms longer, most of it for the disk. Here the commit only
    wakes this thread, which runs a passive checkpoint on its own connection (never blocking the
    writer; what a reader still needs stays in the log for the next one). Durability and crash
    safety are SQLite's WAL guarantees either way: a commit is in the log, the log is replayed at
    the next open."""

    def __init__(self, path: str, busy_timeout_ms: int) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._wake = threading.Event()
        self._stop = False
        self.lock = threading.Lock()  # held while a checkpoint runs (``compact`` and ``close`` wait)
        self._thread: threading.Thread | None = None
        self.done = 0  # checkpoints run (tests look at it)
        self.last: tuple[int, int, int] | None = None  # the last one's (busy, log frames, frames copied)

    def request(self) -> None:
        if self._stop:
            return
        if self._thread is None:
            self._thread = start_thread("causalmem-checkpoint", self._run)  # an exception: logged, ends it
        self._wake.set()

    def _run(self) -> None:
        conn = None
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                with self.lock:
                    if self._stop:
                        return
                    try:
                        if conn is None:
                            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                                   timeout=self.busy_timeout_ms / 1000)
                        self.last = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                        self.done += 1
                    except sqlite3.Error as exc:  # the writer's own auto-checkpoint is the safety net
                        log.debug("causalmem: background checkpoint of %s failed: %s", self.path, exc)
        finally:
            if conn is not None:
                conn.close()

    def stop(self) -> None:
        """End the thread (after a checkpoint in progress) and close its connection."""
        with self.lock:
            self._stop = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()


class SQLiteStore(SharedStore):
    """One SQLite connection with nested transactions (savepoints) and schema migrations.

    Opening never writes to a file that is already a current causalmem database (no write lock
    taken, so an open never waits on another process's writer); a file that belongs to another
    application is refused before anything in it changes. ``read_only=True`` opens the file
    with SQLite's ``mode=ro``: every read works, every write raises ``StoreError``.
    """

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, busy_timeout_ms: int = 30000,
                 read_only: bool = False):
        self.path = check_path(path)
        self.read_only = bool(read_only)
        self.busy_timeout_ms = int(busy_timeout_ms)
        self._lock = threading.RLock()
        self._depth = 0
        #: ``change_seq`` as this connection's last write transaction committed it (None: that
        #: transaction changed nothing); lets the views know exactly which state they hold
        self.committed_seq: int | None = None
        #: the counter's value just before that commit advanced it (None: it was not set yet)
        self.committed_from: int | None = None
        self._closed = False
        self._checkpointer: _Checkpointer | None = None  # a writable file's background checkpoints
        self._wal_path = ""
        self._checkpoint_bytes = 0
        self._ck_base = 0  # the -wal size when a checkpoint was last requested
        # ``superseded_chunks``' whole-store map and the state it was read at: (PRAGMA data_version,
        # total_changes) — another connection's commit changes the first, any change of this one the second
        self._sup_key: tuple[int, int] | None = None
        self._sup: dict[int, str] | None = None
        #: the state the last search saw and for how many searches in a row: the map is read again only
        #: after a stretch without a change (a write-then-search loop keeps asking for its chunks only)
        self._sup_seen: tuple[int, int] | None = None
        self._sup_streak = 0
        self._sup_rows = 0  # rows of the last map read (its cost sets the stretch)
        memory = self.path == ":memory:"
        exists = not memory and Path(self.path).exists()
        if not memory:
            p = Path(self.path)
            if exists and p.is_dir():
                raise StoreError(f"path {self.path!r} is a directory, expected a database file")
            if self.read_only and not exists:
                raise StoreError(f"no database at {self.path!r} (read-only open creates nothing)")
            if not exists:
                try:
                    p.parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise StoreError(f"cannot create the directory for {self.path!r}: {exc}") from exc
            if exists:
                _check_sqlite_header(p)
                if not self.read_only and not os.access(self.path, os.W_OK):
                    # a file we may not write: serve reads (searches work, reinforcement off)
                    log.warning("causalmem: %s is not writable: opened read-only", self.path)
                    self.read_only = True
        try:
            if self.read_only and not memory:
                self.conn = sqlite3.connect(f"{Path(self.path).resolve().as_uri()}?mode=ro", uri=True,
                                            isolation_level=None, check_same_thread=False,
                                            timeout=self.busy_timeout_ms / 1000)
            else:
                self.conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                            timeout=self.busy_timeout_ms / 1000)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open database {self.path!r}: {exc}") from exc
        try:
            self.conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
            needs_upgrade = self._inspect()  # reads only: refuses foreign and newer files untouched
            self.conn.execute("PRAGMA foreign_keys = ON")
            self.conn.execute("PRAGMA temp_store = MEMORY")
            self.conn.execute("PRAGMA cache_size = -65536")
            if not self.read_only:
                self.conn.execute("PRAGMA synchronous = NORMAL")
                if not memory and self.conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    self._write_retrying(lambda: self.conn.execute("PRAGMA journal_mode = WAL"))
                if not memory:
                    self.conn.execute(f"PRAGMA wal_autocheckpoint = {AUTO_CHECKPOINT_PAGES}")
                    self.conn.execute("PRAGMA journal_size_limit = 0")
                    self._checkpointer = _Checkpointer(self.path, self.busy_timeout_ms)
                    self._wal_path = self.path + "-wal"
                    self._checkpoint_bytes = CHECKPOINT_PAGES * int(self.conn.execute("PRAGMA page_size").fetchone()[0])
                if needs_upgrade:
                    self._migrate()
            elif needs_upgrade and not self._index_only_behind():
                raise StoreError(f"database {self.path!r} has an older schema that needs an upgrade; open it once "
                                 "without read_only=True")
        except sqlite3.Error as exc:
            self.conn.close()
            raise self._store_error(exc, "open") from exc
        except Exception:
            self.conn.close()
            raise

    # ------------------------------------------------------------------ plumbing
    def _inspect(self) -> bool:
        """Whether the file needs a migration. Refuses (``StoreError``/``SchemaVersionError``), without
        writing a byte, a file of another application or of a newer schema."""
        app_id = self.conn.execute("PRAGMA application_id").fetchone()[0]
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
        if app_id not in (0, APPLICATION_ID):
            raise StoreError(f"{self.path!r} belongs to another application (PRAGMA application_id = {app_id}); "
                             "refusing to open it as a causalmem database. The file was not modified.")
        if app_id == 0 and tables and not ("chunks" in tables and version >= 1 and tables <= OWN_TABLES):
            other = ", ".join(sorted(tables - OWN_TABLES)[:5]) or ", ".join(sorted(tables)[:5])
            raise StoreError(f"{self.path!r} is another application's SQLite database (tables: {other}); "
                             "refusing to open it as a causalmem database. The file was not modified.")
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"database {self.path!r} has schema version {version}, newer than this causalmem "
                f"understands ({SCHEMA_VERSION}); upgrade causalmem. The file was not modified."
            )
        return version < SCHEMA_VERSION or app_id != APPLICATION_ID

    def _index_only_behind(self) -> bool:
        """A causalmem file whose missing migrations only add indexes: a read-only open serves it as it
        is (the same answers, the lookups those indexes speed up just scan), and leaves it unmodified."""
        app_id = self.conn.execute("PRAGMA application_id").fetchone()[0]
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        return app_id == APPLICATION_ID and version >= 1 and all(
            v in INDEX_ONLY_MIGRATIONS for v in range(version + 1, SCHEMA_VERSION + 1))

    def _migrate(self) -> None:
        with self.transaction():
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:  # re-check under the write lock
                raise SchemaVersionError(
                    f"database {self.path!r} has schema version {version}, newer than {SCHEMA_VERSION}"
                )
            for i in range(version, SCHEMA_VERSION):
                name, sql = MIGRATIONS[i]
                log.info("causalmem: applying migration %d (%s)", i + 1, name)
                for statement in _split_sql(sql):
                    self.conn.execute(statement)
                self.conn.execute(f"PRAGMA user_version = {i + 1}")
            self.conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            if version == 0 or any(v not in INDEX_ONLY_MIGRATIONS for v in range(version + 1, SCHEMA_VERSION + 1)):
                self._advance_change_seq()  # a schema change changes what derived files would hold

    def _store_error(self, exc: BaseException, doing: str = "") -> StoreError:
        """A ``StoreError`` naming the file for a raw sqlite3 error."""
        msg = str(exc)
        low = msg.lower()
        where = f" ({doing})" if doing else ""
        if "locked" in low or "busy" in low:
            return StoreError(f"database {self.path!r} is locked by another writer{where}; gave up after the busy "
                              f"timeout of {self.busy_timeout_ms} ms ({msg})")
        if "readonly" in low or "read-only" in low:
            return StoreError(f"database {self.path!r} is read-only{where}: cannot write ({msg})")
        if "full" in low:
            return StoreError(f"cannot write to {self.path!r}: disk or file-size limit full{where} ({msg}); "
                              "nothing of this call was saved")
        if "malformed" in low or "not a database" in low or "corrupt" in low:
            return StoreError(f"database {self.path!r} is damaged{where}: {msg}. Restore a backup or an export.")
        if isinstance(exc, sqlite3.Error):
            return StoreError(f"database {self.path!r}: {msg}{where}")
        return StoreError(f"database {self.path!r} could not be read{where}: {type(exc).__name__}: {msg}")

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Raw sqlite3 errors raised inside become a ``StoreError`` naming the file."""
        try:
            yield
        except sqlite3.Error as exc:
            raise self._store_error(exc) from exc

    def _write_retrying(self, fn: Callable[[], R]) -> R:
        """Run a statement that needs the write lock; a lock held longer than busy_timeout is a StoreError."""
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            raise self._store_error(exc) from exc

    def _retrying(self, fn: Callable[[], R], attempts: int = 3) -> R:
        """Run a read; retry briefly on a transient 'locked' (WAL recovery), then a StoreError."""
        delay = 0.01
        for attempt in range(attempts):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                low = str(exc).lower()
                if ("locked" not in low and "busy" not in low) or attempt == attempts - 1:
                    raise self._store_error(exc) from exc
                time.sleep(delay)
                delay *= 4
            except sqlite3.Error as exc:
                raise self._store_error(exc) from exc
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def transaction(self, *, wait: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction; nested calls become savepoints.

        The write lock is waited for at most busy_timeout (``wait=False``: not at all), then a
        ``StoreError`` says the file is locked. Any sqlite3 error inside rolls back and becomes a
        ``StoreError`` naming the file."""
        with self._lock:
            self._ensure_open()
            if self.read_only:
                raise StoreError(f"database {self.path!r} was opened read-only: cannot write")
            if self._depth == 0:
                if not wait:
                    self.conn.execute("PRAGMA busy_timeout = 0")
                try:
                    self._write_retrying(lambda: self.conn.execute("BEGIN IMMEDIATE"))
                finally:
                    if not wait:
                        self.conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
                self._depth = 1
                self.committed_seq = None
                changes_before = self.conn.total_changes
                try:
                    yield self.conn
                except BaseException as exc:
                    self._depth = 0
                    if self.conn.in_transaction:
                        try:
                            self.conn.execute("ROLLBACK")
                        except sqlite3.Error:  # pragma: no cover - rolled back by SQLite already
                            pass
                    if isinstance(exc, sqlite3.Error):
                        raise self._store_error(exc) from exc
                    raise
                else:
                    self._depth = 0
                    try:
                        if self.conn.total_changes != changes_before:
                            self._advance_change_seq()
                        self._write_retrying(lambda: self.conn.execute("COMMIT"))
                    except BaseException:
                        if self.conn.in_transaction:
                            self.conn.execute("ROLLBACK")
                        raise
                    self._maybe_checkpoint()
            else:
                name = f"sp{self._depth}"
                self.conn.execute(f"SAVEPOINT {name}")
                self._depth += 1
                try:
                    yield self.conn
                except BaseException:
                    self._depth -= 1
                    self.conn.execute(f"ROLLBACK TO {name}")
                    self.conn.execute(f"RELEASE {name}")
                    raise
                else:
                    self._depth -= 1
                    self.conn.execute(f"RELEASE {name}")

    def _maybe_checkpoint(self) -> None:
        """After a commit: a log past ``CHECKPOINT_PAGES`` is checkpointed by the background thread."""
        ck = self._checkpointer
        if ck is None:
            return
        try:
            size = os.stat(self._wal_path).st_size
        except OSError:
            return
        if size < self._ck_base:  # the log was restarted and truncated (journal_size_limit)
            self._ck_base = 0
        if size >= self._ck_base + self._checkpoint_bytes:
            self._ck_base = size
            ck.request()

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        """A read transaction, so several SELECTs see one consistent state of the file."""
        self._ensure_open()
        if self._depth > 0 or self.conn.in_transaction:
            yield
            return
        self._retrying(lambda: self.conn.execute("BEGIN"))
        try:
            yield
        finally:
            self.conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                if self._checkpointer is not None:
                    self._checkpointer.stop()  # first: the last connection to close checkpoints the log
                try:
                    self.conn.close()
                except sqlite3.Error:  # pragma: no cover
                    pass

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Run one SELECT and fetch every row (for this backend and its tests only)."""
        with self._lock:
            self._ensure_open()
            return self._retrying(lambda: self.conn.execute(sql, params).fetchall())

    def _select_in(self, sql: str, ids: Iterable[Any], *, before: Sequence[Any] = (), after: Sequence[Any] = (),
                   size: int = 900) -> list[tuple]:
        """The batched ``IN (...)`` pattern: run ``sql`` once per slice of ``ids``.

        Each ``{ids}`` in ``sql`` becomes the slice's placeholders (the slice is bound once per
        occurrence), between the ``before`` and ``after`` parameters."""
        out: list[tuple] = []
        times = sql.count("{ids}")
        for part in batched(ids, size):
            q = ",".join("?" * len(part))
            out += self.query(sql.replace("{ids}", q), [*before, *(part * times), *after])
        return out

    def _x(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Execute a write statement (inside the caller's transaction)."""
        return self.conn.execute(sql, params)

    def _many(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        return self.conn.executemany(sql, rows)

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """First column of the first row (``None`` if no row)."""
        rows = self.query(sql, params)
        return rows[0][0] if rows else None

    def data_version(self) -> int:
        """Changes when another connection commits (PRAGMA data_version)."""
        with self._lock:
            self._ensure_open()
            return self.conn.execute("PRAGMA data_version").fetchone()[0]

    def change_seq(self) -> int:
        """The persistent change counter (see ``StoreBackend.change_seq``); one read of ``meta``."""
        value = self._one("SELECT value FROM meta WHERE key = ?", (CHANGE_SEQ_KEY,))
        return int(value) if value is not None else 0

    def _advance_change_seq(self) -> None:
        """Inside the outermost write transaction, just before COMMIT: one statement."""
        # a random step, not +1: two copies of one database file (a restore from a backup, a copied
        # file) that each commit afterwards end at different values, so index files made from one
        # are never taken for the other's (steps < 2^24 leave room for ~2^37 commits in 63 bits)
        start, step = secrets.randbits(40) << 20, 1 + secrets.randbits(24)
        row = self.conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
            "value = CAST(value AS INTEGER) + ? RETURNING value",
            (CHANGE_SEQ_KEY, str(start), step)).fetchone()
        self.committed_seq = int(row[0])
        self.committed_from = None if self.committed_seq == start else self.committed_seq - step

    def integrity_check(self) -> str:
        return self._one("PRAGMA integrity_check")

    def user_version(self) -> int:
        return self._one("PRAGMA user_version")

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # ------------------------------------------------------------------ chunks: reads
    def chunk_rows_by_nid(self, nids: Sequence[int]) -> dict[int, ChunkRow]:
        rows = self._select_in(f"SELECT {CHUNK_COLS} FROM chunks WHERE nid IN ({{ids}})", [int(n) for n in nids])
        return {r[0]: ChunkRow._make(r) for r in rows}

    def find_reusable_chunk(self, text: str, user_id: str | None, agent_id: str | None,
                            run_id: str | None) -> ChunkKey | None:
        rows = self.query(
            "SELECT nid, id, text FROM chunks WHERE text_hash = ? AND user_id IS ? AND agent_id IS ? "
            "AND run_id IS ? AND kind != 'turn' AND valid_to IS NULL ORDER BY nid LIMIT 4",
            (text_hash(text), user_id, agent_id, run_id),
        )
        return same_text(rows, text)

    def _reusable_rows(self, hashes: Sequence[int], scope: tuple, turns: bool = False) -> list[tuple]:
        kinds = "" if turns else "AND kind != 'turn' "
        return self._select_in(
            "SELECT nid, id, text FROM chunks INDEXED BY chunks_reuse WHERE text_hash IN ({ids}) AND "
            f"user_id IS ? AND agent_id IS ? AND run_id IS ? {kinds}AND valid_to IS NULL ORDER BY nid",
            hashes, after=scope, size=500)

    def chunk_columns(self, *, with_text: bool = True, batch: int = 50000) -> Iterator[ChunkColumns]:
        with self._lock:
            self._ensure_open()
            cur = self.conn.execute(
                "SELECT nid, kind, created_at, event_time, q_value, importance, user_id, agent_id, run_id, "
                f"session_id, valid_to IS NULL{', text' if with_text else ''} FROM chunks ORDER BY nid")
            while True:
                rows = cur.fetchmany(batch)
                if not rows:
                    break
                yield chunk_columns_of(rows, with_text)

    def texts_of(self, nids: Sequence[int]) -> list[tuple[int, str]]:
        return self._select_in("SELECT nid, text FROM chunks WHERE nid IN ({ids})", [int(n) for n in nids])

    def last_update_event(self) -> int:
        return self._one("SELECT COALESCE(MAX(hid), 0) FROM chunk_history WHERE event = 'update'")

    def chunk_rows_for_mining(self, nids: Sequence[int]) -> Iterator[MiningChunkRow]:
        wanted = set(int(n) for n in nids)
        total = self.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        cols = "SELECT nid, text, user_id, agent_id, run_id, created_at FROM chunks WHERE valid_to IS NULL"
        if len(wanted) * 4 < total:  # few: indexed lookups
            for part in batched(sorted(wanted)):
                for row in self.conn.execute(f"{cols} AND nid IN ({','.join('?' * len(part))})", part):
                    yield MiningChunkRow._make(row)
            return
        cur = self.conn.execute(cols)
        while True:
            rows = cur.fetchmany(50000)
            if not rows:
                break
            for row in rows:
                if row[0] in wanted:
                    yield MiningChunkRow._make(row)

    def sleep_chunk_arrays(self) -> np.ndarray:
        n = self.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        cur = self.conn.execute(
            "SELECT nid, q_value, valid_to IS NULL, COALESCE(last_accessed_at, -1e300) FROM chunks ORDER BY nid")
        return np.fromiter(cur, dtype=CHUNK_DTYPE, count=n)

    # ------------------------------------------------------------------ chunks: writes
    def insert_chunk(self, *, text: str, kind: str, created_at: float, q_value: float,
                     event_time: float | None = None, user_id: str | None = None, agent_id: str | None = None,
                     run_id: str | None = None, session_id: str | None = None,
                     metadata: Mapping[str, Any] | None = None, importance: float = 5.0,
                     chunk_id: str | None = None) -> ChunkKey:
        cid = chunk_id or new_id()
        nid = self._next_key("chunks", "nid")
        self.conn.execute(
            "INSERT INTO chunks (nid, id, text, text_hash, kind, created_at, event_time, q_value, importance, "
            "user_id, agent_id, run_id, session_id, metadata) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (nid, cid, text, text_hash(text), kind, created_at, event_time, q_value, importance, user_id,
             agent_id, run_id, session_id, json.dumps(dict(metadata or {}), ensure_ascii=False)),
        )
        return ChunkKey(nid, cid)

    def _next_key(self, table: str, column: str) -> int:
        """The next integer key: above every live row *and* every purged one, so that no in-memory
        view (here or in another process) ever mistakes a new chunk or edge for a purged one."""
        top = self.conn.execute(f"SELECT COALESCE(MAX({column}), 0) FROM {table}").fetchone()[0]
        floor = self.conn.execute("SELECT value FROM meta WHERE key = ?", (f"purged_max_{column}",)).fetchone()
        return max(int(top), int(floor[0]) if floor else 0) + 1

    def insert_chunks_bulk(self, rows: Sequence[Mapping[str, Any]]) -> list[ChunkKey]:
        if not rows:
            return []
        n = len(rows)
        base = self._next_key("chunks", "nid") - 1
        ids = new_ids(n)
        # built column by column in C (``map`` of a getter), the rows zipped from the columns; the
        # columns every row leaves at their default stay out of the statement: binding a parameter
        # costs about as much as storing it, and most rows carry no scope, session, event time or metadata
        text = list(map(_get_text, rows))
        given = [r.get("text_hash") for r in rows]
        hashes = given if None not in given and 0 not in given else [
            h or text_hash(t) for h, t in zip(given, text)]
        cols: list[Any] = [range(base + 1, base + 1 + n), ids, text, hashes, list(map(_get_kind, rows)),
                           list(map(_get_created, rows)), list(map(_get_q, rows))]
        names = []
        for c, get in _CHUNK_OPTIONAL.items():
            present = [r.get(c) for r in rows]  # (5x faster than ``map`` of an ``operator.methodcaller``)
            if present.count(None) != n:
                names.append(c)
                cols.append(present if c in _AS_GIVEN else list(map(get, rows)))
        self.conn.executemany(
            "INSERT INTO chunks (nid, id, text, text_hash, kind, created_at, q_value"
            f"{''.join(', ' + c for c in names)}) VALUES ({', '.join('?' * (7 + len(names)))})", zip(*cols))
        return list(map(_new_chunk_key, zip(range(base + 1, base + 1 + n), ids)))

    def chunk_metadata_json(self, nids: Sequence[int] | None) -> list[tuple[int, str]]:
        if nids is None:
            return self.query("SELECT nid, metadata FROM chunks")
        return self._select_in("SELECT nid, metadata FROM chunks WHERE nid IN ({ids})", [int(n) for n in nids])

    def touch_chunks(self, nids: Sequence[int], now: float) -> None:
        self.conn.executemany(
            "UPDATE chunks SET access_count = access_count + 1, importance = MIN(10.0, importance + 0.1), "
            "last_accessed_at = ? WHERE nid = ?", [(now, int(n)) for n in nids])

    def touch_chunks_batch(self, touches: Sequence[tuple[Sequence[int], float]]) -> None:
        for nids, now in touches:  # in process: the per-search statements cost no round trip
            self.touch_chunks(nids, now)

    def update_q_values(self, rows: Iterable[tuple[float, int]]) -> None:
        self.conn.executemany("UPDATE chunks SET q_value = ? WHERE nid = ?", rows)

    # ------------------------------------------------------------------ edges: reads
    def edge_states(self, eids: Sequence[int]) -> list[tuple[int, int, int, int, float, bool]]:
        """(eid, src, dst, rel_code, confidence, valid) of the given edges, ascending eid (the
        catch-up of index files from their journal)."""
        rows = self._select_in("SELECT eid, src, dst, rel_code, confidence, valid_to IS NULL FROM edges "
                               "WHERE eid IN ({ids})", [int(e) for e in eids])
        return sorted((r[0], r[1], r[2], r[3], r[4], bool(r[5])) for r in rows)

    def row_tops(self) -> tuple[int, int]:
        """(highest chunk nid, highest edge eid), -1 for none: two index lookups (what a saved index
        file records, so a later open can count the rows it does not know)."""
        with self._lock, self._snapshot():
            row = self.conn.execute("SELECT (SELECT MAX(nid) FROM chunks), (SELECT MAX(eid) FROM edges)").fetchone()
        return (-1 if row[0] is None else int(row[0]), -1 if row[1] is None else int(row[1]))

    def rows_above(self, nid: int, eid: int) -> tuple[int, int]:
        """(chunks with a nid above ``nid``, edges with an eid above ``eid``): range scans of the
        rowid, as cheap as the number of such rows."""
        row = self.query("SELECT (SELECT COUNT(*) FROM chunks WHERE nid > ?), "
                         "(SELECT COUNT(*) FROM edges WHERE eid > ?)", (int(nid), int(eid)))[0]
        return int(row[0]), int(row[1])

    def negative_excitatory_out_edges(self, srcs: Sequence[int]) -> dict[int, list[OutEdge]]:
        out: dict[int, list[OutEdge]] = {}
        for eid, eid_s, src, dst in self._select_in(
                "SELECT eid, id, src, dst FROM edges WHERE src IN ({ids}) AND valid_to IS NULL AND "
                "relation IN ('caused', 'enabled') AND polarity = 'negative' ORDER BY eid",
                sorted({int(s) for s in srcs}), size=500):
            out.setdefault(src, []).append(OutEdge(eid, eid_s, dst))
        return out

    def superseded_chunks(self, nids: Sequence[int]) -> dict[int, str]:
        ids = [int(n) for n in nids]
        with self._lock:
            self._ensure_open()
            if self._depth == 0 and not self.conn.in_transaction:  # a write sees its own uncommitted rows
                sup = self._superseded_map()
                if sup is not None:
                    return {n: sup[n] for n in ids if n in sup}
        out: dict[int, str] = {}
        for nid, by in self._select_in(_SUPERSEDED_SQL.format(where="e.dst IN ({ids}) AND "), ids, size=400):
            out.setdefault(nid, by)
        return out

    def _superseded_map(self) -> dict[int, str] | None:
        """Every superseded chunk (nid -> id of the first chunk superseding it), read again only when the
        database changed since (two reads of the connection's state, no query); None when there are more
        than ``SUPERSEDED_CACHE_MAX``, and until the database has stayed unchanged for a stretch of searches
        (``SUPERSEDED_MAP_AFTER``, or one per 100 rows the last read returned): then the caller asks for
        its chunks only, so searches between writes never pay for whole-map reads they do not amortise.
        The caller holds the lock."""
        key = (self._retrying(lambda: self.conn.execute("PRAGMA data_version").fetchone()[0]),
               self.conn.total_changes)
        if key != self._sup_key:
            if key != self._sup_seen:  # changed since the last search: this one asks for its chunks only
                self._sup_seen, self._sup_streak = key, 0
                return None
            self._sup_streak += 1
            if self._sup_streak < max(SUPERSEDED_MAP_AFTER, self._sup_rows // 100):
                return None
            rows = self._retrying(lambda: self.conn.execute(
                _SUPERSEDED_SQL.format(where="") + " LIMIT ?", (SUPERSEDED_CACHE_MAX + 1,)).fetchall())
            sup: dict[int, str] | None = None
            if len(rows) <= SUPERSEDED_CACHE_MAX:
                sup = {}
                for nid, by in rows:
                    sup.setdefault(nid, by)
            self._sup, self._sup_key, self._sup_rows = sup, key, len(rows)
        return self._sup

    def projection_arrays(self) -> dict[str, Any]:
        try:
            return self._projection_arrays()
        except (TypeError, ValueError) as exc:  # a damaged file yields rows of the wrong shape or count
            raise self._store_error(exc, "reading the graph") from exc

    def _projection_arrays(self) -> dict[str, Any]:
        with self._lock, self._snapshot():
            max_nid = self.conn.execute("SELECT COALESCE(MAX(nid), 0) FROM chunks").fetchone()[0]
            n_edges = self.conn.execute("SELECT COUNT(*) FROM edges WHERE valid_to IS NULL").fetchone()[0]
            # Three packed integer/real columns instead of five: row construction in the sqlite3
            # module dominates, so fewer values per row is what makes a 1M-edge rebuild fast.
            cur = self.conn.execute(
                "SELECT (eid << 3) | rel_code, (src << 32) | dst, confidence FROM edges WHERE valid_to IS NULL")
            packed = np.fromiter(cur, dtype=np.dtype([("er", "i8"), ("sd", "i8"), ("conf", "f8")]), count=n_edges)
            arr = np.empty(n_edges, dtype=PROJECTION_EDGE_DTYPE)
            arr["eid"] = packed["er"] >> 3
            arr["rel"] = packed["er"] & 7
            arr["src"] = packed["sd"] >> 32
            arr["dst"] = packed["sd"] & 0xFFFFFFFF
            arr["conf"] = packed["conf"]
            n_co = self.conn.execute("SELECT COUNT(*) FROM cooccurrence").fetchone()[0]
            cur = self.conn.execute("SELECT a, b, weight FROM cooccurrence")
            co = np.fromiter(cur, dtype=PROJECTION_CO_DTYPE, count=n_co)
        return {"n_nodes": max_nid + 1, "edges": arr, "co": co}

    def sleep_edge_arrays(self, *, relations: Sequence[str] | None = None) -> np.ndarray:
        sql, params = _SLEEP_EDGE_SELECT, []
        if relations:
            sql += f" AND relation IN ({','.join('?' * len(relations))})"
            params = list(relations)
        count_sql = "SELECT COUNT(*) FROM edges WHERE valid_to IS NULL" + sql[len(_SLEEP_EDGE_SELECT):]
        n = self.conn.execute(count_sql, params).fetchone()[0]
        cur = self.conn.execute(sql + " ORDER BY eid", params)
        return np.fromiter(cur, dtype=EDGE_DTYPE, count=n)

    # ------------------------------------------------------------------ edges: writes
    def insert_edges_bulk(self, rows: Sequence[Mapping[str, Any]]) -> list[tuple[int, str]]:
        if not rows:
            return []
        n = len(rows)
        base = self._next_key("edges", "eid") - 1
        ids = new_ids(n)
        rel = list(map(_REL_COLUMNS.__getitem__, map(_get_relation, rows)))
        origin = [r.get("polarity_origin") for r in rows]
        if not all(origin):
            origin = [o or ("unknown" if r.get("polarity") is None else "given") for o, r in zip(origin, rows)]
        cols: list[Any] = [range(base + 1, base + 1 + n), ids, list(map(_get_src, rows)), list(map(_get_dst, rows)),
                           [r[0] for r in rel], [r[1] for r in rel], list(map(_get_confidence, rows)),
                           list(map(_get_source, rows)), origin, list(map(_get_discovered, rows))]
        names = []
        for c in _EDGE_OPTIONAL:  # as for chunks
            present = [r.get(c) for r in rows]
            if present.count(None) != n:
                names.append(c)
                cols.append(present)
        self.conn.executemany(
            "INSERT INTO edges (eid, id, src, dst, relation, rel_code, confidence, source, polarity_origin, "
            f"discovered_at{''.join(', ' + c for c in names)}) VALUES ({', '.join('?' * (10 + len(names)))})",
            zip(*cols))
        return list(zip(range(base + 1, base + 1 + n), ids))

    # ------------------------------------------------------------------ repeated evidence
    def valid_edges_for_pairs(self, keys: Sequence[tuple[int, int, str, str | None]]) -> dict[tuple, EvidenceEdge]:
        """(src, dst, relation, subtype) -> the oldest valid edge with exactly those, for the keys given."""
        wanted = set(keys)
        srcs = sorted({k[0] for k in wanted})
        return evidence_edges(self._select_in(
            "SELECT eid, id, src, dst, relation, subtype, confidence, evidence, polarity, polarity_origin "
            "FROM edges WHERE src IN ({ids}) AND valid_to IS NULL ORDER BY eid", srcs), wanted)

    # ------------------------------------------------------------------ purge (right to be forgotten)
    def purge_chunks(self, nids: Sequence[int]) -> int:
        """Delete the chunks and everything derived from them: edges touching them (and the
        supersession notes and judged pairs that name those edges), co-occurrence pairs, facts,
        vectors, history. Runs in the caller's transaction with ``secure_delete`` on, so the freed
        bytes are zeroed; ``compact()`` afterwards rewrites the file. Returns how many chunks."""
        ids = sorted({int(n) for n in nids})
        if not ids:
            return 0
        self.conn.execute("PRAGMA secure_delete = ON")
        top_nid = self.conn.execute("SELECT COALESCE(MAX(nid), 0) FROM chunks").fetchone()[0]
        top_eid = self.conn.execute("SELECT COALESCE(MAX(eid), 0) FROM edges").fetchone()[0]
        for key, top in (("purged_max_nid", top_nid), ("purged_max_eid", top_eid)):
            self.conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
                "value = MAX(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))", (key, str(int(top))))
        edge_ids: list[str] = []
        for part in batched(ids):
            q = ",".join("?" * len(part))
            edge_ids += [r[0] for r in self.conn.execute(
                f"SELECT id FROM edges WHERE src IN ({q}) OR dst IN ({q})", part + part)]
        for id_part in batched(edge_ids):
            q = ",".join("?" * len(id_part))
            self.conn.execute(f"UPDATE edges SET superseded_by = NULL WHERE superseded_by IN ({q})", id_part)
        for eid in edge_ids:
            self.conn.execute("DELETE FROM meta WHERE key LIKE ?", (f"judged:%{eid}%",))
        n = 0
        for part in batched(ids):
            q = ",".join("?" * len(part))
            self.conn.execute(f"DELETE FROM edges WHERE src IN ({q}) OR dst IN ({q})", part + part)
            self.conn.execute(f"DELETE FROM cooccurrence WHERE a IN ({q}) OR b IN ({q})", part + part)
            self.conn.execute(f"DELETE FROM facts WHERE nid IN ({q})", part)
            self.conn.execute(f"DELETE FROM embeddings WHERE nid IN ({q})", part)
            self.conn.execute(f"DELETE FROM chunk_history WHERE nid IN ({q})", part)
            n += self.conn.execute(f"DELETE FROM chunks WHERE nid IN ({q})", part).rowcount
        return n

    def compact(self) -> bool:
        """Rewrite the file without free pages (``VACUUM``) and empty the WAL, so deleted bytes leave
        the disk. Outside any transaction. False if another connection kept the WAL in use."""
        with self._lock:
            self._ensure_open()
            if self._depth:
                raise RuntimeError("compact() cannot run inside a transaction")
            try:
                self.conn.execute("PRAGMA secure_delete = ON")
                self.conn.execute("VACUUM")
                with self._checkpointer.lock if self._checkpointer is not None else contextlib.nullcontext():
                    busy, _log, _done = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            except sqlite3.Error as exc:
                raise self._store_error(exc, "compacting after a purge") from exc
            finally:
                self.conn.execute("PRAGMA secure_delete = OFF")
            return not busy

    # ------------------------------------------------------------------ export / import
    def export_records(self, *, vectors: bool = False) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every row of the memory as (type, record) with public ids instead of integer keys, in
        key order, from one consistent snapshot (see ``portable``)."""
        with self._lock, self._snapshot():
            for key, value in self.conn.execute("SELECT key, value FROM meta ORDER BY key").fetchall():
                if not key.startswith("purged_max_") and key != CHANGE_SEQ_KEY:
                    yield "meta", {"key": key, "value": value}
            for kind, sql, keys in EXPORTS:
                if kind == "embedding" and not vectors:
                    continue
                cur = self.conn.execute(sql)
                for rows in iter(lambda: cur.fetchmany(2000 if kind == "embedding" else 5000), []):
                    for row in rows:
                        yield kind, export_record(kind, keys, row)

    def import_records(self, records: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, int]:
        """Insert checked dump records (``portable.read_dump``) in the caller's transaction; chunk and
        edge keys are assigned in dump order after the current ones. Returns counts by type."""
        rows = import_rows(records, self._next_key("chunks", "nid") - 1, self._next_key("edges", "eid") - 1,
                           skip_meta=(CHANGE_SEQ_KEY,))
        for table, values in zip(IMPORT_COLS, rows):  # embeddings and meta replace, as their upserts do
            verb = "INSERT OR REPLACE" if table in ("embeddings", "meta") else "INSERT"
            cols = IMPORT_COLS[table]
            self.conn.executemany(f"{verb} INTO {table} ({cols}) VALUES ({','.join('?' * (cols.count(',') + 1))})",
                                  values)
        return {k: len(v) for k, v in records.items()}

    def update_edge_confidences(self, rows: Iterable[tuple[float, int]]) -> None:
        self.conn.executemany("UPDATE edges SET confidence = ? WHERE eid = ?", rows)

    def retire_edges(self, rows: Iterable[tuple[float, str, float, int]]) -> None:
        self.conn.executemany(
            "UPDATE edges SET valid_to = ?, invalid_reason = ?, confidence = ? WHERE eid = ? AND valid_to IS NULL",
            rows)

    def annotate_superseded(self, rows: Iterable[tuple[str, int]]) -> int:
        before = self.conn.total_changes
        self.conn.executemany(
            "UPDATE edges SET superseded_by = ? WHERE eid = ? AND valid_to IS NULL AND superseded_by IS NULL", rows)
        return self.conn.total_changes - before

    def retire_superseded(self, rows: Iterable[tuple[float, str, str, int]]) -> int:
        before = self.conn.total_changes
        self.conn.executemany(
            "UPDATE edges SET valid_to = ?, invalid_reason = ?, superseded_by = ? WHERE eid = ? AND valid_to IS NULL",
            rows)
        return self.conn.total_changes - before

    # ------------------------------------------------------------------ co-occurrence (Hebbian)
    def cooccurrence_weights(self, nids: Sequence[int]) -> dict[tuple[int, int], float]:
        ids = [int(n) for n in nids]
        if len(ids) < 2:
            return {}
        q = ",".join("?" * len(ids))
        rows = self.query(f"SELECT a, b, weight FROM cooccurrence WHERE a IN ({q}) AND b IN ({q})", ids + ids)
        return {(a, b): w for a, b, w in rows}

    def upsert_cooccurrence(self, rows: Sequence[tuple[int, int, float, float]]) -> None:
        self.conn.executemany(
            "INSERT INTO cooccurrence (a, b, weight, hits, updated_at) VALUES (?, ?, ?, 1, ?) "
            "ON CONFLICT(a, b) DO UPDATE SET weight = excluded.weight, hits = hits + 1, "
            "updated_at = excluded.updated_at", rows)

    def credit_cooccurrence(self, rows: Sequence[tuple[int, int, float, int, float]]) -> None:
        self.conn.executemany(
            "INSERT INTO cooccurrence (a, b, weight, hits, updated_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(a, b) DO UPDATE SET weight = excluded.weight, hits = hits + excluded.hits, "
            "updated_at = excluded.updated_at", [(int(a), int(b), w, int(n), t) for a, b, w, n, t in rows])

    def sleep_cooccurrence_arrays(self) -> np.ndarray:
        n = self.conn.execute("SELECT COUNT(*) FROM cooccurrence").fetchone()[0]
        cur = self.conn.execute("SELECT a, b, weight, updated_at FROM cooccurrence")
        return np.fromiter(cur, dtype=COOC_DTYPE, count=n)

    def set_cooccurrence_weights(self, rows: Iterable[tuple[float, int, int]]) -> None:
        self.conn.executemany("UPDATE cooccurrence SET weight = ? WHERE a = ? AND b = ?", rows)

    def delete_cooccurrence(self, rows: Iterable[tuple[int, int]]) -> None:
        self.conn.executemany("DELETE FROM cooccurrence WHERE a = ? AND b = ?", rows)

    # ------------------------------------------------------------------ facts
    def insert_fact(self, *, key: str, value: str, nid: int, user_id: str | None, agent_id: str | None,
                    run_id: str | None, confidence: float, now: float) -> int:
        cur = self.conn.execute(
            "INSERT INTO facts (key, value, nid, user_id, agent_id, run_id, confidence, created_at) "
            "VALUES (?,?,?,?,?,?,?,?)", (key, value, nid, user_id, agent_id, run_id, confidence, now))
        return int(cur.lastrowid or 0)

    # ------------------------------------------------------------------ embeddings
    def embeddings_for(self, model: str) -> Iterator[StoredVector]:
        with self._lock:
            self._ensure_open()
            cur = self.conn.execute(
                "SELECT e.nid, e.text_hash, e.vector FROM embeddings e JOIN chunks c ON c.nid = e.nid "
                "WHERE e.model = ? AND c.valid_to IS NULL AND e.text_hash = c.text_hash", (model,))
            while True:
                rows = cur.fetchmany(20000)
                if not rows:
                    break
                yield from map(StoredVector._make, rows)

    def embedding_rows(self, model: str, *, after_nid: int = 0, limit: int | None = None,
                       nids: Sequence[int] | None = None, with_vectors: bool = True) -> list[tuple]:
        """(nid, text_hash[, vector]) of live chunks' current vectors for ``model``, ascending nid:
        a page after ``after_nid`` (``limit`` rows), or those of ``nids``. The vector index keeper pages
        through the store with it (optional capability: a backend without it is read in one go)."""
        cols = "e.nid, e.text_hash, e.vector" if with_vectors else "e.nid, e.text_hash"
        where = "e.model = ? AND c.valid_to IS NULL AND e.text_hash = c.text_hash"
        if nids is not None:
            return self._select_in(f"SELECT {cols} FROM embeddings e JOIN chunks c ON c.nid = e.nid "
                                   f"WHERE e.nid IN ({{ids}}) AND {where} ORDER BY e.nid",
                                   [int(n) for n in nids], after=(model,))
        return self.query(f"SELECT {cols} FROM embeddings e JOIN chunks c ON c.nid = e.nid "
                          f"WHERE e.nid > ? AND {where} ORDER BY e.nid LIMIT ?",
                          (int(after_nid), model, -1 if limit is None else int(limit)))

    def put_embeddings(self, rows: Iterable[EmbeddingRow | tuple[int, str, int, int, bytes]]) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO embeddings (nid, model, dim, text_hash, vector) VALUES (?,?,?,?,?)", rows)

    # ------------------------------------------------------------------ sleep bookkeeping
    def remember_judged(self, keys: Iterable[str], verdict: str = "decided") -> None:
        self.conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", [(k, verdict) for k in keys])


def _check_sqlite_header(p: Path) -> None:
    try:
        with open(p, "rb") as fh:
            head = fh.read(16)
    except PermissionError as exc:
        raise StoreError(f"cannot read database file {str(p)!r}: permission denied") from exc
    except OSError as exc:
        raise StoreError(f"cannot read database file {str(p)!r}: {exc}") from exc
    if head and head != b"SQLite format 3\x00":
        raise StoreError(
            f"{str(p)!r} is not a SQLite database (bad header); refusing to open it as a causalmem store")


def _split_sql(sql: str) -> list[str]:
    return [s.strip() for s in sql.split(";") if s.strip()]
