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
import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import numpy as np

from ..errors import SchemaVersionError, StoreError
from ..types import Relation
from .base import (
    CHUNK_DTYPE, COOC_DTYPE, EDGE_DTYPE, POLARITY_CODES, PROJECTION_CO_DTYPE, PROJECTION_EDGE_DTYPE, SOURCE_CODES,
    SUBTYPE_CODES, ChainEdge, ChunkColumns, ChunkKey, ChunkRow, CooccurrencePair, CooccurrenceRow, EdgeRow,
    EmbeddingRow, FactRow, HistoryRow, JudgeEdgeRow, MiningChunkRow, OutEdge, PathEdge, StoredVector, TaggedEdgeRow,
    batched, new_id, new_ids, text_hash,
)

log = logging.getLogger("causalmem")

R = TypeVar("R")

SCHEMA_VERSION = 1

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
]
assert len(MIGRATIONS) == SCHEMA_VERSION
assert len(Relation) <= 8, "projection_arrays packs the relation code into 3 bits"

CHUNK_COLS = (
    "nid, id, text, kind, q_value, importance, created_at, event_time, user_id, agent_id, "
    "run_id, session_id, metadata, access_count, last_accessed_at, valid_to"
)
EDGE_COLS = (
    "e.eid, e.id, s.id, d.id, e.relation, e.confidence, e.source, e.polarity, e.task_tag, "
    "e.event_time, e.valid_to, e.superseded_by, e.discovered_at, e.subtype, e.invalid_reason, e.src, e.dst"
)
EDGE_FROM = "edges e JOIN chunks s ON s.nid = e.src JOIN chunks d ON d.nid = e.dst"
_CHUNK_FILTERS = ("user_id", "agent_id", "run_id", "session_id", "kind")


def _case(column: str, codes: dict[str, int], other: int = 0) -> str:
    whens = " ".join(f"WHEN {column} = '{k}' THEN {v}" for k, v in codes.items())
    return f"CASE WHEN {column} IS NULL THEN 0 {whens} ELSE {other} END"


_SLEEP_EDGE_SELECT = (
    "SELECT eid, src, dst, rel_code, " + _case("subtype", SUBTYPE_CODES, 7) + ", confidence, "
    + _case("source", SOURCE_CODES) + ", " + _case("polarity", POLARITY_CODES) + ", discovered_at, "
    "superseded_by IS NOT NULL FROM edges WHERE valid_to IS NULL"
)


class SQLiteStore:
    """One SQLite connection with nested transactions (savepoints) and schema migrations."""

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, busy_timeout_ms: int = 30000):
        self.path = str(path)
        self._lock = threading.RLock()
        self._depth = 0
        self._closed = False
        if self.path != ":memory:":
            p = Path(self.path)
            if p.exists() and p.is_dir():
                raise StoreError(f"path {self.path!r} is a directory, expected a database file")
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the directory for {self.path!r}: {exc}") from exc
            if p.exists():
                _check_sqlite_header(p)
        try:
            self.conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open database {self.path!r}: {exc}") from exc
        try:
            self.conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            self._check_version_before_write()
            if self.path != ":memory:":
                self._retrying(lambda: self.conn.execute("PRAGMA journal_mode = WAL"))
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self.conn.execute("PRAGMA foreign_keys = ON")
            self.conn.execute("PRAGMA temp_store = MEMORY")
            self.conn.execute("PRAGMA cache_size = -65536")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise StoreError(f"{self.path!r} is not a usable SQLite database: {exc}") from exc
        except Exception:
            self.conn.close()
            raise

    # ------------------------------------------------------------------ plumbing
    def _check_version_before_write(self) -> None:
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"database {self.path!r} has schema version {version}, newer than this causalmem "
                f"understands ({SCHEMA_VERSION}); upgrade causalmem. The file was not modified."
            )

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

    def _retrying(self, fn: Callable[[], R], attempts: int = 50) -> R:
        """Run ``fn``; retry on 'database is locked' beyond what busy_timeout absorbed."""
        delay = 0.01
        for attempt in range(attempts):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                msg = str(exc).lower()
                if ("locked" not in msg and "busy" not in msg) or attempt == attempts - 1:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; nested calls become savepoints."""
        with self._lock:
            self._ensure_open()
            if self._depth == 0:
                self._retrying(lambda: self.conn.execute("BEGIN IMMEDIATE"))
                self._depth = 1
                try:
                    yield self.conn
                except BaseException:
                    self._depth = 0
                    self.conn.execute("ROLLBACK")
                    raise
                else:
                    self._depth = 0
                    try:
                        self._retrying(lambda: self.conn.execute("COMMIT"))
                    except BaseException:
                        if self.conn.in_transaction:
                            self.conn.execute("ROLLBACK")
                        raise
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

    @property
    def in_transaction(self) -> bool:
        return self._depth > 0

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreError("this memory is closed")

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
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

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """First column of the first row (``None`` if no row)."""
        rows = self.query(sql, params)
        return rows[0][0] if rows else None

    def data_version(self) -> int:
        """Changes when another connection commits (PRAGMA data_version)."""
        with self._lock:
            self._ensure_open()
            return self.conn.execute("PRAGMA data_version").fetchone()[0]

    def integrity_check(self) -> str:
        return self._one("PRAGMA integrity_check")

    def user_version(self) -> int:
        return self._one("PRAGMA user_version")

    def counts(self) -> dict[str, int]:
        row = self.query(
            "SELECT (SELECT COUNT(*) FROM chunks WHERE valid_to IS NULL), (SELECT COUNT(*) FROM chunks), "
            "(SELECT COUNT(*) FROM edges WHERE valid_to IS NULL), (SELECT COUNT(*) FROM edges), "
            "(SELECT COUNT(*) FROM cooccurrence), (SELECT COUNT(*) FROM facts WHERE valid_to IS NULL), "
            "(SELECT COUNT(*) FROM embeddings)")[0]
        keys = ("chunks", "chunks_total", "edges", "edges_total", "cooccurrence", "facts", "embeddings")
        return dict(zip(keys, row))

    def edge_count(self) -> int:
        return self._one("SELECT COUNT(*) FROM edges")

    def get_meta(self, key: str) -> str | None:
        return self._one("SELECT value FROM meta WHERE key = ?", (key,))

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # ------------------------------------------------------------------ chunks: reads
    def chunk_row(self, chunk_id: str) -> ChunkRow | None:
        rows = self.query(f"SELECT {CHUNK_COLS} FROM chunks WHERE id = ?", (chunk_id,))
        return ChunkRow._make(rows[0]) if rows else None

    def chunk_rows_by_nid(self, nids: Sequence[int]) -> dict[int, ChunkRow]:
        rows = self._select_in(f"SELECT {CHUNK_COLS} FROM chunks WHERE nid IN ({{ids}})", [int(n) for n in nids])
        return {r[0]: ChunkRow._make(r) for r in rows}

    def nid_of(self, chunk_id: str) -> int | None:
        return self._one("SELECT nid FROM chunks WHERE id = ?", (chunk_id,))

    def chunk_keys_by_id(self, chunk_ids: Sequence[str]) -> dict[str, ChunkKey]:
        rows = self._select_in("SELECT nid, id FROM chunks WHERE id IN ({ids})", list(chunk_ids))
        return {r[1]: ChunkKey._make(r) for r in rows}

    def chunk_alive(self, nid: int) -> bool:
        return bool(self._one("SELECT valid_to IS NULL FROM chunks WHERE nid = ?", (int(nid),)))

    def find_reusable_chunk(self, text: str, user_id: str | None, agent_id: str | None,
                            run_id: str | None) -> ChunkKey | None:
        rows = self.query(
            "SELECT nid, id, text FROM chunks WHERE text_hash = ? AND user_id IS ? AND agent_id IS ? "
            "AND run_id IS ? AND kind != 'turn' AND valid_to IS NULL ORDER BY nid LIMIT 4",
            (text_hash(text), user_id, agent_id, run_id),
        )
        for nid, cid, t in rows:
            if t == text:
                return ChunkKey(nid, cid)
        return None

    def find_reusable_chunks(self, keys: Sequence[tuple[str, tuple]],
                             hashes: dict[str, int] | None = None) -> dict[tuple[str, tuple], ChunkKey]:
        """Bulk form of ``find_reusable_chunk``: {(text, scope): (nid, id)} for the keys that exist.

        ``hashes``, when given, is filled with text -> text_hash for reuse by ``insert_chunks_bulk``."""
        hashes = {} if hashes is None else hashes
        by_scope: dict[tuple, dict[int, str]] = {}
        for text, scope in keys:
            h = hashes.get(text)
            if h is None:
                h = hashes[text] = text_hash(text)
            by_scope.setdefault(scope, {})[h] = text
        out: dict[tuple[str, tuple], ChunkKey] = {}
        for scope, by_hash in by_scope.items():
            rows = self._select_in(
                "SELECT nid, id, text FROM chunks INDEXED BY chunks_reuse WHERE text_hash IN ({ids}) AND "
                "user_id IS ? AND agent_id IS ? AND run_id IS ? AND kind != 'turn' AND valid_to IS NULL ORDER BY nid",
                list(by_hash), after=scope, size=500)
            for nid, cid, t in rows:
                out.setdefault((t, scope), ChunkKey(nid, cid))
        return out

    def chunk_nids(self, *, filters: Mapping[str, str | None], limit: int | None = None) -> list[int]:
        conds, params = ["valid_to IS NULL"], []
        for k, v in filters.items():
            if k not in _CHUNK_FILTERS:
                raise ValueError(f"unknown chunk filter {k!r}; allowed: {list(_CHUNK_FILTERS)}")
            conds.append(f"{k} = ?" if v is not None else f"{k} IS NULL")
            if v is not None:
                params.append(v)
        sql = f"SELECT nid FROM chunks WHERE {' AND '.join(conds)} ORDER BY nid"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [r[0] for r in self.query(sql, params)]

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
                c = list(zip(*rows))
                yield ChunkColumns(nid=c[0], kind=c[1], created_at=c[2], event_time=c[3], q_value=c[4],
                                   importance=c[5], user_id=c[6], agent_id=c[7], run_id=c[8], session_id=c[9],
                                   alive=c[10], text=c[11] if with_text else None)

    def texts_of(self, nids: Sequence[int]) -> list[tuple[int, str]]:
        return self._select_in("SELECT nid, text FROM chunks WHERE nid IN ({ids})", [int(n) for n in nids])

    def chunk_texts(self, nids: Sequence[int]) -> dict[int, str]:
        return dict(self.texts_of(nids))

    def recent_chunk_texts(self, limit: int = 64) -> list[str]:
        return [r[0] for r in self.query(
            "SELECT text FROM chunks WHERE valid_to IS NULL ORDER BY created_at DESC, nid DESC LIMIT ?",
            (int(limit),))]

    def previous_turn(self, session_id: str, user_id: str | None, agent_id: str | None,
                      run_id: str | None) -> int | None:
        return self._one(
            "SELECT nid FROM chunks WHERE session_id = ? AND user_id IS ? AND agent_id IS ? AND run_id IS ? "
            "AND kind = 'turn' AND valid_to IS NULL ORDER BY nid DESC LIMIT 1",
            (session_id, user_id, agent_id, run_id))

    def history(self, nid: int) -> list[HistoryRow]:
        return [HistoryRow._make(r) for r in self.query(
            "SELECT event, old_text, new_text, at FROM chunk_history WHERE nid = ? ORDER BY hid", (nid,))]

    def last_update_event(self) -> int:
        return self._one("SELECT COALESCE(MAX(hid), 0) FROM chunk_history WHERE event = 'update'")

    def q_value_of(self, nid: int) -> float:
        rows = self.query("SELECT q_value FROM chunks WHERE nid = ?", (int(nid),))
        if not rows:
            raise KeyError(f"unknown chunk nid {nid}")
        return float(rows[0][0])

    def max_successor_q(self, nid: int) -> float | None:
        value = self._one(
            "SELECT MAX(c.q_value) FROM edges e JOIN chunks c ON c.nid = e.dst "
            "WHERE e.src = ? AND e.valid_to IS NULL AND c.valid_to IS NULL", (int(nid),))
        return None if value is None else float(value)

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
        cur = self.conn.execute(
            "INSERT INTO chunks (id, text, text_hash, kind, created_at, event_time, q_value, importance, "
            "user_id, agent_id, run_id, session_id, metadata) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (cid, text, text_hash(text), kind, created_at, event_time, q_value, importance, user_id,
             agent_id, run_id, session_id, json.dumps(dict(metadata or {}), ensure_ascii=False)),
        )
        return ChunkKey(int(cur.lastrowid or 0), cid)

    def insert_chunks_bulk(self, rows: Sequence[Mapping[str, Any]]) -> list[ChunkKey]:
        if not rows:
            return []
        base = self.conn.execute("SELECT COALESCE(MAX(nid), 0) FROM chunks").fetchone()[0]
        ids = new_ids(len(rows))
        self.conn.executemany(
            "INSERT INTO chunks (nid, id, text, text_hash, kind, created_at, event_time, q_value, importance, "
            "user_id, agent_id, run_id, session_id, metadata) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [(base + 1 + i, ids[i], r["text"], r.get("text_hash") or text_hash(r["text"]), r["kind"], r["created_at"],
              r.get("event_time"),
              r["q_value"], r.get("importance", 5.0), r.get("user_id"), r.get("agent_id"), r.get("run_id"),
              r.get("session_id"), json.dumps(r["metadata"], ensure_ascii=False) if r.get("metadata") else "{}")
             for i, r in enumerate(rows)])
        return [ChunkKey(base + 1 + i, ids[i]) for i in range(len(rows))]

    def set_chunk_deleted(self, nid: int, now: float) -> None:
        self.conn.execute("UPDATE chunks SET valid_to = ? WHERE nid = ?", (now, nid))
        self.conn.execute(
            "UPDATE edges SET valid_to = ?, invalid_reason = 'chunk deleted' "
            "WHERE (src = ? OR dst = ?) AND valid_to IS NULL",
            (now, nid, nid),
        )
        self.conn.execute("DELETE FROM cooccurrence WHERE a = ? OR b = ?", (nid, nid))
        self.conn.execute("UPDATE facts SET valid_to = ? WHERE nid = ? AND valid_to IS NULL", (now, nid))
        self.conn.execute(
            "INSERT INTO chunk_history (nid, event, old_text, new_text, at) "
            "SELECT nid, 'delete', text, NULL, ? FROM chunks WHERE nid = ?", (now, nid))

    def chunk_metadata(self, nids: Sequence[int]) -> dict[int, dict[str, Any]]:
        rows = self._select_in("SELECT nid, metadata FROM chunks WHERE nid IN ({ids})", [int(n) for n in nids])
        return {r[0]: json.loads(r[1]) if r[1] else {} for r in rows}

    def set_chunk_metadata(self, nid: int, metadata: Mapping[str, Any]) -> None:
        self.conn.execute("UPDATE chunks SET metadata = ? WHERE nid = ?",
                          (json.dumps(dict(metadata), ensure_ascii=False), int(nid)))

    def set_chunk_text(self, nid: int, text: str, now: float) -> None:
        self.conn.execute(
            "INSERT INTO chunk_history (nid, event, old_text, new_text, at) "
            "SELECT nid, 'update', text, ?, ? FROM chunks WHERE nid = ?", (text, now, nid))
        self.conn.execute("UPDATE chunks SET text = ?, text_hash = ? WHERE nid = ?", (text, text_hash(text), nid))

    def touch_chunks(self, nids: Sequence[int], now: float) -> None:
        self.conn.executemany(
            "UPDATE chunks SET access_count = access_count + 1, importance = MIN(10.0, importance + 0.1), "
            "last_accessed_at = ? WHERE nid = ?", [(now, int(n)) for n in nids])

    def set_q_value(self, nid: int, q: float) -> None:
        self.conn.execute("UPDATE chunks SET q_value = ? WHERE nid = ?", (q, nid))

    def update_q_values(self, rows: Iterable[tuple[float, int]]) -> None:
        self.conn.executemany("UPDATE chunks SET q_value = ? WHERE nid = ?", rows)

    # ------------------------------------------------------------------ edges: reads
    def edge_row(self, edge_id: str) -> EdgeRow | None:
        rows = self.query(f"SELECT {EDGE_COLS} FROM {EDGE_FROM} WHERE e.id = ?", (edge_id,))
        return EdgeRow._make(rows[0]) if rows else None

    def edge_rows(self, *, nid: int | None = None, valid_only: bool = True,
                  direction: str = "both") -> list[EdgeRow]:
        conds: list[str] = []
        params: list[Any] = []
        if nid is not None:
            if direction == "out":
                conds.append("e.src = ?")
                params.append(nid)
            elif direction == "in":
                conds.append("e.dst = ?")
                params.append(nid)
            else:
                conds.append("(e.src = ? OR e.dst = ?)")
                params += [nid, nid]
        if valid_only:
            conds.append("e.valid_to IS NULL")
        where = (" WHERE " + " AND ".join(conds)) if conds else ""
        return [EdgeRow._make(r) for r in self.query(f"SELECT {EDGE_COLS} FROM {EDGE_FROM}{where} ORDER BY e.eid",
                                                     params)]

    def edge_ids(self, eids: Sequence[int]) -> dict[int, str]:
        return dict(self._select_in("SELECT eid, id FROM edges WHERE eid IN ({ids})", [int(e) for e in eids]))

    def edge_judge_rows(self, eids: Sequence[int]) -> dict[int, JudgeEdgeRow]:
        rows = self._select_in(
            "SELECT eid, id, relation, confidence, source, polarity, task_tag, discovered_at, subtype, src, dst "
            "FROM edges WHERE eid IN ({ids})", [int(e) for e in eids])
        return {r[0]: JudgeEdgeRow._make(r[1:]) for r in rows}

    def negative_excitatory_out_edges(self, srcs: Sequence[int]) -> dict[int, list[OutEdge]]:
        out: dict[int, list[OutEdge]] = {}
        for eid, eid_s, src, dst in self._select_in(
                "SELECT eid, id, src, dst FROM edges WHERE src IN ({ids}) AND valid_to IS NULL AND "
                "relation IN ('caused', 'enabled') AND polarity = 'negative' ORDER BY eid",
                sorted({int(s) for s in srcs}), size=500):
            out.setdefault(src, []).append(OutEdge(eid, eid_s, dst))
        return out

    def chain_out_edges(self, srcs: Sequence[int]) -> list[ChainEdge]:
        return [ChainEdge._make(r) for r in self._select_in(
            "SELECT src, dst, relation, confidence, polarity FROM edges WHERE src IN ({ids}) AND "
            "valid_to IS NULL AND relation NOT IN ('no_effect', 'temporal')", [int(s) for s in srcs])]

    def task_tag_nodes(self, task_tag: str) -> list[int]:
        return [r[0] for r in self.query(
            "SELECT src FROM edges WHERE task_tag = ? AND valid_to IS NULL UNION "
            "SELECT dst FROM edges WHERE task_tag = ? AND valid_to IS NULL", (task_tag, task_tag))]

    def edges_between(self, a: Sequence[int], b: Sequence[int]) -> list[PathEdge]:
        a, b = [int(x) for x in a], [int(x) for x in b]
        if not a or not b:
            return []
        qa, qb = ",".join("?" * len(a)), ",".join("?" * len(b))
        return [PathEdge._make(r) for r in self.query(
            f"SELECT e.src, e.dst, e.relation, e.confidence, e.id, s.id, d.id FROM {EDGE_FROM} "
            f"WHERE e.valid_to IS NULL AND ((e.src IN ({qa}) AND e.dst IN ({qb})) OR "
            f"(e.dst IN ({qa}) AND e.src IN ({qb})))", a + b + a + b)]

    def superseded_chunks(self, nids: Sequence[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        rows = self._select_in(
            "SELECT e.dst, d.id FROM edges e JOIN edges n ON n.id = e.superseded_by "
            "JOIN chunks d ON d.nid = n.dst WHERE e.dst IN ({ids}) AND e.valid_to IS NULL "
            "AND e.superseded_by IS NOT NULL AND n.dst != e.dst AND n.relation != 'meta' "
            "UNION ALL SELECT e.dst, s.id FROM edges e JOIN chunks s ON s.nid = e.src "
            "WHERE e.dst IN ({ids}) AND e.valid_to IS NULL AND e.subtype IN ('invalidates', 'supersedes') "
            "AND s.valid_to IS NULL", [int(n) for n in nids], size=400)
        for nid, by in rows:
            out.setdefault(nid, by)
        return out

    def tagged_edge_rows(self) -> list[TaggedEdgeRow]:
        return [TaggedEdgeRow._make(r) for r in self.query(
            "SELECT src, dst, discovered_at, task_tag FROM edges WHERE valid_to IS NULL AND task_tag IS NOT NULL "
            "AND relation IN ('caused', 'enabled', 'prevented')")]

    def has_new_tagged_decisions(self, since: float) -> bool:
        if since == float("-inf"):
            since = -1e308
        return bool(self.query(
            "SELECT 1 FROM edges e JOIN chunks s ON s.nid = e.src WHERE e.valid_to IS NULL AND e.task_tag IS NOT NULL "
            "AND e.relation IN ('caused', 'enabled', 'prevented') AND (e.discovered_at > ? OR s.created_at > ?) "
            "LIMIT 1", (since, since)))

    def projection_arrays(self) -> dict[str, Any]:
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
    def insert_edge(self, *, src: int, dst: int, relation: Relation, subtype: str | None, confidence: float,
                    source: str, polarity: str | None, task_tag: str | None, event_time: float | None,
                    discovered_at: float) -> tuple[int, str]:
        eid_str = new_id()
        cur = self.conn.execute(
            "INSERT INTO edges (id, src, dst, relation, rel_code, subtype, confidence, source, polarity, "
            "task_tag, event_time, discovered_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (eid_str, src, dst, relation.value, relation.code, subtype, confidence, source, polarity,
             task_tag, event_time, discovered_at),
        )
        return int(cur.lastrowid or 0), eid_str

    def insert_edges_bulk(self, rows: Sequence[Mapping[str, Any]]) -> list[tuple[int, str]]:
        if not rows:
            return []
        base = self.conn.execute("SELECT COALESCE(MAX(eid), 0) FROM edges").fetchone()[0]
        ids = new_ids(len(rows))
        self.conn.executemany(
            "INSERT INTO edges (eid, id, src, dst, relation, rel_code, subtype, confidence, source, polarity, "
            "task_tag, event_time, discovered_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [(base + 1 + i, ids[i], r["src"], r["dst"], r["relation"].value, r["relation"].code, r.get("subtype"),
              r["confidence"], r["source"], r.get("polarity"), r.get("task_tag"), r.get("event_time"),
              r["discovered_at"]) for i, r in enumerate(rows)])
        return [(base + 1 + i, ids[i]) for i in range(len(rows))]

    def set_edge_invalid(self, eid: int, now: float, reason: str | None, superseded_by: str | None = None) -> None:
        self.conn.execute(
            "UPDATE edges SET valid_to = ?, invalid_reason = ?, superseded_by = COALESCE(?, superseded_by) "
            "WHERE eid = ?", (now, reason, superseded_by, eid))

    def restore_edge(self, eid: int) -> None:
        self.conn.execute(
            "UPDATE edges SET valid_to = NULL, invalid_reason = NULL, superseded_by = NULL WHERE eid = ?", (eid,))

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

    def cooccurrence_row(self, a: int, b: int) -> CooccurrenceRow | None:
        a, b = (int(a), int(b)) if a < b else (int(b), int(a))
        rows = self.query("SELECT a, b, weight, hits, updated_at FROM cooccurrence WHERE a = ? AND b = ?", (a, b))
        return CooccurrenceRow._make(rows[0]) if rows else None

    def cooccurrence_between(self, a: Sequence[int], b: Sequence[int]) -> list[CooccurrencePair]:
        a, b = [int(x) for x in a], [int(x) for x in b]
        if not a or not b:
            return []
        qa, qb = ",".join("?" * len(a)), ",".join("?" * len(b))
        return [CooccurrencePair._make(r) for r in self.query(
            f"SELECT a, b, weight FROM cooccurrence WHERE (a IN ({qa}) AND b IN ({qb})) OR "
            f"(b IN ({qa}) AND a IN ({qb}))", a + b + a + b)]

    def upsert_cooccurrence(self, rows: Sequence[tuple[int, int, float, float]]) -> None:
        self.conn.executemany(
            "INSERT INTO cooccurrence (a, b, weight, hits, updated_at) VALUES (?, ?, ?, 1, ?) "
            "ON CONFLICT(a, b) DO UPDATE SET weight = excluded.weight, hits = hits + 1, "
            "updated_at = excluded.updated_at", rows)

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

    def facts_with_key(self, key: str, user_id: str | None, agent_id: str | None,
                       run_id: str | None) -> list[FactRow]:
        return [FactRow._make(r) for r in self.query(
            "SELECT fid, nid, value FROM facts WHERE key = ? AND user_id IS ? AND agent_id IS ? AND run_id IS ? "
            "AND valid_to IS NULL ORDER BY fid", (key, user_id, agent_id, run_id))]

    def retire_fact(self, fid: int, now: float) -> None:
        self.conn.execute("UPDATE facts SET valid_to = ? WHERE fid = ?", (now, fid))

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

    def embeddings_of(self, nids: Sequence[int], model: str) -> list[tuple[int, bytes]]:
        return self._select_in(
            "SELECT e.nid, e.vector FROM embeddings e JOIN chunks c ON c.nid = e.nid WHERE e.nid IN ({ids}) "
            "AND e.model = ? AND e.text_hash = c.text_hash", [int(n) for n in nids], after=(model,))

    def chunks_missing_embedding(self, model: str) -> list[tuple[int, str]]:
        return self.query(
            "SELECT c.nid, c.text FROM chunks c LEFT JOIN embeddings e ON e.nid = c.nid "
            "WHERE c.valid_to IS NULL AND (e.nid IS NULL OR e.model != ? OR e.text_hash != c.text_hash) "
            "ORDER BY c.nid", (model,))

    def put_embeddings(self, rows: Iterable[EmbeddingRow | tuple[int, str, int, int, bytes]]) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO embeddings (nid, model, dim, text_hash, vector) VALUES (?,?,?,?,?)", rows)

    # ------------------------------------------------------------------ sleep bookkeeping
    def judged_pairs(self) -> set[str]:
        return {r[0] for r in self.query("SELECT key FROM meta WHERE key LIKE 'judged:%'")}

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
