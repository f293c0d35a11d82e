"""SQLite store: the single source of truth (SPEC §1).

Only this module (and its mixin ``store_learning``) speaks SQL. Chunks and edges carry a
stable public string ``id`` and an internal integer key (``nid`` / ``eid``) that the graph
projection and the indexes use as array positions.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from .errors import SchemaVersionError, StoreError
from .store_learning import LearningStoreMixin
from .types import Chunk, Edge, Relation

log = logging.getLogger("causalmem")

SCHEMA_VERSION = 1

# Ordered, idempotent migrations: MIGRATIONS[i] brings user_version i -> i+1.
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
    "e.event_time, e.valid_to, e.superseded_by, e.discovered_at, e.subtype, e.access_count, "
    "e.last_accessed_at, e.invalid_reason, e.src, e.dst"
)
EDGE_FROM = "edges e JOIN chunks s ON s.nid = e.src JOIN chunks d ON d.nid = e.dst"


def text_hash(text: str) -> int:
    """64-bit hash of the text as a signed integer: a compact key for exact-reuse lookups
    (the text itself is compared after the lookup, so a collision cannot merge two texts)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


def new_id() -> str:
    return new_ids(1)[0]


_id_lock = threading.Lock()
_id_last = [0]


def new_ids(n: int) -> list[str]:
    """``n`` unique 32-hex-digit ids, time-ordered like UUIDv7 (64-bit ns clock + 64 random bits).

    Time order keeps inserts at the end of the UNIQUE index instead of scattering them across it,
    which is what makes bulk writes fast on a large store."""
    with _id_lock:
        start = max(time.time_ns(), _id_last[0] + 1)
        _id_last[0] = start + n
    raw = os.urandom(8 * n).hex()
    return [f"{start + i:016x}{raw[16 * i: 16 * (i + 1)]}" for i in range(n)]


def row_to_chunk(row: Sequence[Any]) -> Chunk:
    return Chunk(
        id=row[1], text=row[2], kind=row[3], q_value=row[4], importance=row[5],
        created_at=row[6], event_time=row[7], user_id=row[8], agent_id=row[9], run_id=row[10],
        session_id=row[11], metadata=json.loads(row[12]) if row[12] else {},
        access_count=row[13], last_accessed_at=row[14], valid=row[15] is None,
    )


def row_to_edge(row: Sequence[Any]) -> Edge:
    return Edge(
        id=row[1], src=row[2], dst=row[3], relation=row[4], confidence=row[5], source=row[6],
        polarity=row[7], task_tag=row[8], event_time=row[9], valid=row[10] is None,
        superseded_by=row[11], discovered_at=row[12], subtype=row[13], access_count=row[14],
        last_accessed_at=row[15], invalid_reason=row[16],
    )


class Store(LearningStoreMixin):
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

    def _retrying(self, fn, attempts: int = 50):
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
        with self._lock:
            self._ensure_open()
            return self._retrying(lambda: self.conn.execute(sql, params).fetchall())

    def data_version(self) -> int:
        """Changes when another connection commits (PRAGMA data_version)."""
        with self._lock:
            self._ensure_open()
            return self.conn.execute("PRAGMA data_version").fetchone()[0]

    def integrity_check(self) -> str:
        return self.query("PRAGMA integrity_check")[0][0]

    def user_version(self) -> int:
        return self.query("PRAGMA user_version")[0][0]

    # ------------------------------------------------------------------ chunks
    def find_reusable_chunk(self, text: str, user_id, agent_id, run_id) -> tuple[int, str] | None:
        rows = self.query(
            "SELECT nid, id, text FROM chunks WHERE text_hash = ? AND user_id IS ? AND agent_id IS ? "
            "AND run_id IS ? AND kind != 'turn' AND valid_to IS NULL ORDER BY nid LIMIT 4",
            (text_hash(text), user_id, agent_id, run_id),
        )
        for nid, cid, t in rows:
            if t == text:
                return nid, cid
        return None

    def insert_chunk(
        self, *, text: str, kind: str, created_at: float, q_value: float, event_time: float | None = None,
        user_id=None, agent_id=None, run_id=None, session_id=None, metadata: dict | None = None,
        importance: float = 5.0, chunk_id: str | None = None,
    ) -> tuple[int, str]:
        cid = chunk_id or new_id()
        cur = self.conn.execute(
            "INSERT INTO chunks (id, text, text_hash, kind, created_at, event_time, q_value, importance, "
            "user_id, agent_id, run_id, session_id, metadata) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (cid, text, text_hash(text), kind, created_at, event_time, q_value, importance, user_id,
             agent_id, run_id, session_id, json.dumps(metadata or {}, ensure_ascii=False)),
        )
        return cur.lastrowid, cid

    def find_reusable_chunks(self, keys: Sequence[tuple[str, tuple]],
                             hashes: dict[str, int] | None = None) -> dict[tuple[str, tuple], tuple[int, str]]:
        """Bulk form of ``find_reusable_chunk``: {(text, scope): (nid, id)} for the keys that exist.

        ``hashes``, when given, is filled with text -> text_hash for reuse by ``insert_chunks_bulk``."""
        hashes = {} if hashes is None else hashes
        by_scope: dict[tuple, dict[int, str]] = {}
        for text, scope in keys:
            h = hashes.get(text)
            if h is None:
                h = hashes[text] = text_hash(text)
            by_scope.setdefault(scope, {})[h] = text
        out: dict[tuple[str, tuple], tuple[int, str]] = {}
        for scope, hashes in by_scope.items():
            hs = list(hashes)
            for i in range(0, len(hs), 500):
                part = hs[i:i + 500]
                q = ",".join("?" * len(part))
                rows = self.query(
                    f"SELECT nid, id, text FROM chunks INDEXED BY chunks_reuse WHERE text_hash IN ({q}) AND user_id IS ? AND agent_id IS ? "
                    f"AND run_id IS ? AND kind != 'turn' AND valid_to IS NULL ORDER BY nid", (*part, *scope))
                for nid, cid, t in rows:
                    out.setdefault((t, scope), (nid, cid))
        return out

    def insert_chunks_bulk(self, rows: Sequence[dict]) -> list[tuple[int, str]]:
        """Insert chunks with consecutive nids (caller holds the write transaction)."""
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
        return [(base + 1 + i, ids[i]) for i in range(len(rows))]

    def insert_edges_bulk(self, rows: Sequence[dict]) -> list[tuple[int, str]]:
        """Insert edges with consecutive eids (caller holds the write transaction)."""
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

    def negative_excitatory_out_edges(self, srcs: Sequence[int]) -> dict[int, list[tuple[int, str, int]]]:
        """src -> [(eid, id, dst)] of its valid caused/enabled edges with a negative outcome."""
        out: dict[int, list[tuple[int, str, int]]] = {}
        srcs = sorted({int(s) for s in srcs})
        for i in range(0, len(srcs), 500):
            part = srcs[i:i + 500]
            q = ",".join("?" * len(part))
            for eid, eid_s, src, dst in self.query(
                    f"SELECT eid, id, src, dst FROM edges WHERE src IN ({q}) AND valid_to IS NULL AND "
                    f"relation IN ('caused', 'enabled') AND polarity = 'negative' ORDER BY eid", part):
                out.setdefault(src, []).append((eid, eid_s, dst))
        return out

    def chunk_row(self, chunk_id: str) -> tuple | None:
        rows = self.query(f"SELECT {CHUNK_COLS} FROM chunks WHERE id = ?", (chunk_id,))
        return rows[0] if rows else None

    def chunk_rows_by_nid(self, nids: Sequence[int]) -> dict[int, tuple]:
        out: dict[int, tuple] = {}
        nids = [int(n) for n in nids]
        for i in range(0, len(nids), 900):
            part = nids[i:i + 900]
            q = ",".join("?" * len(part))
            for row in self.query(f"SELECT {CHUNK_COLS} FROM chunks WHERE nid IN ({q})", part):
                out[row[0]] = row
        return out

    def nid_of(self, chunk_id: str) -> int | None:
        rows = self.query("SELECT nid FROM chunks WHERE id = ?", (chunk_id,))
        return rows[0][0] if rows else None

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

    def set_chunk_text(self, nid: int, text: str, now: float) -> None:
        self.conn.execute(
            "INSERT INTO chunk_history (nid, event, old_text, new_text, at) "
            "SELECT nid, 'update', text, ?, ? FROM chunks WHERE nid = ?", (text, now, nid))
        self.conn.execute("UPDATE chunks SET text = ?, text_hash = ? WHERE nid = ?", (text, text_hash(text), nid))

    def add_history(self, nid: int, event: str, new_text: str | None, now: float) -> None:
        self.conn.execute(
            "INSERT INTO chunk_history (nid, event, old_text, new_text, at) VALUES (?,?,?,?,?)",
            (nid, event, None, new_text, now))

    def history(self, nid: int) -> list[tuple]:
        return self.query(
            "SELECT event, old_text, new_text, at FROM chunk_history WHERE nid = ? ORDER BY hid", (nid,))

    def chunk_nids_where(self, where: str, params: Sequence[Any], *, limit: int | None = None) -> list[int]:
        sql = f"SELECT nid FROM chunks WHERE {where} ORDER BY nid"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [r[0] for r in self.query(sql, params)]

    def iter_chunk_columns(self, *, with_text: bool = True) -> Iterator[tuple]:
        """(nid, kind, created_at, event_time, q, importance, user, agent, run, session, valid[, text]) rows."""
        with self._lock:
            self._ensure_open()
            cur = self.conn.execute(
                "SELECT nid, kind, created_at, event_time, q_value, importance, user_id, agent_id, run_id, "
                f"session_id, valid_to IS NULL{', text' if with_text else ''} FROM chunks ORDER BY nid")
            while True:
                rows = cur.fetchmany(50000)
                if not rows:
                    break
                yield from rows

    def last_update_event(self) -> int:
        """Id of the newest text-update event (0 if none): tells whether a text changed elsewhere."""
        return self.query("SELECT COALESCE(MAX(hid), 0) FROM chunk_history WHERE event = 'update'")[0][0]

    def texts_of(self, nids: Sequence[int]) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        nids = [int(n) for n in nids]
        for i in range(0, len(nids), 900):
            part = nids[i:i + 900]
            q = ",".join("?" * len(part))
            out += self.query(f"SELECT nid, text FROM chunks WHERE nid IN ({q})", part)
        return out

    def embeddings_of(self, nids: Sequence[int], model: str) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        nids = [int(n) for n in nids]
        for i in range(0, len(nids), 900):
            part = nids[i:i + 900]
            q = ",".join("?" * len(part))
            out += self.query(
                f"SELECT e.nid, e.vector FROM embeddings e JOIN chunks c ON c.nid = e.nid WHERE e.nid IN ({q}) "
                f"AND e.model = ? AND e.text_hash = c.text_hash", (*part, model))
        return out

    def previous_turn(self, session_id: str, user_id, agent_id, run_id) -> int | None:
        rows = self.query(
            "SELECT nid FROM chunks WHERE session_id = ? AND user_id IS ? AND agent_id IS ? AND run_id IS ? "
            "AND kind = 'turn' AND valid_to IS NULL ORDER BY nid DESC LIMIT 1",
            (session_id, user_id, agent_id, run_id))
        return rows[0][0] if rows else None

    def touch_chunks(self, nids: Sequence[int], now: float) -> None:
        self.conn.executemany(
            "UPDATE chunks SET access_count = access_count + 1, importance = MIN(10.0, importance + 0.1), "
            "last_accessed_at = ? WHERE nid = ?", [(now, int(n)) for n in nids])

    def q_values(self, nids: Sequence[int]) -> dict[int, float]:
        out: dict[int, float] = {}
        nids = [int(n) for n in nids]
        for i in range(0, len(nids), 900):
            part = nids[i:i + 900]
            q = ",".join("?" * len(part))
            out.update(self.query(f"SELECT nid, q_value FROM chunks WHERE nid IN ({q})", part))
        return out

    def set_q_value(self, nid: int, q: float) -> None:
        self.conn.execute("UPDATE chunks SET q_value = ? WHERE nid = ?", (q, nid))

    # ------------------------------------------------------------------ edges
    def insert_edge(
        self, *, src: int, dst: int, relation: Relation, subtype: str | None, confidence: float, source: str,
        polarity: str | None, task_tag: str | None, event_time: float | None, discovered_at: float,
    ) -> tuple[int, str]:
        eid_str = new_id()
        cur = self.conn.execute(
            "INSERT INTO edges (id, src, dst, relation, rel_code, subtype, confidence, source, polarity, "
            "task_tag, event_time, discovered_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (eid_str, src, dst, relation.value, relation.code, subtype, confidence, source, polarity,
             task_tag, event_time, discovered_at),
        )
        return cur.lastrowid, eid_str

    def edge_row(self, edge_id: str) -> tuple | None:
        rows = self.query(f"SELECT {EDGE_COLS} FROM {EDGE_FROM} WHERE e.id = ?", (edge_id,))
        return rows[0] if rows else None

    def edge_rows(self, *, nid: int | None = None, valid_only: bool = True,
                  direction: str = "both") -> list[tuple]:
        conds, params = [], []
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
        return self.query(f"SELECT {EDGE_COLS} FROM {EDGE_FROM}{where} ORDER BY e.eid", params)

    def edge_rows_by_eid(self, eids: Sequence[int]) -> dict[int, tuple]:
        out: dict[int, tuple] = {}
        eids = [int(e) for e in eids]
        for i in range(0, len(eids), 900):
            part = eids[i:i + 900]
            q = ",".join("?" * len(part))
            for row in self.query(f"SELECT {EDGE_COLS} FROM {EDGE_FROM} WHERE e.eid IN ({q})", part):
                out[row[0]] = row
        return out

    def set_edge_invalid(self, eid: int, now: float, reason: str | None, superseded_by: str | None = None) -> None:
        self.conn.execute(
            "UPDATE edges SET valid_to = ?, invalid_reason = ?, superseded_by = COALESCE(?, superseded_by) "
            "WHERE eid = ?", (now, reason, superseded_by, eid))

    def set_edge_superseded(self, eid: int, superseded_by: str | None) -> None:
        self.conn.execute("UPDATE edges SET superseded_by = ? WHERE eid = ?", (superseded_by, eid))

    def restore_edge(self, eid: int) -> None:
        self.conn.execute(
            "UPDATE edges SET valid_to = NULL, invalid_reason = NULL, superseded_by = NULL WHERE eid = ?", (eid,))

    def valid_out_edges_with_polarity(self, src: int, relations: Sequence[str]) -> list[tuple]:
        q = ",".join("?" * len(relations))
        return self.query(
            f"SELECT eid, id, dst, polarity, relation FROM edges WHERE src = ? AND valid_to IS NULL "
            f"AND relation IN ({q}) ORDER BY eid", (src, *relations))

    def superseded_chunks(self, nids: Sequence[int]) -> dict[int, str]:
        """nid -> id of the chunk that supersedes it, for the given nids.

        A chunk is superseded when (a) a valid edge into it is annotated ``superseded_by`` a newer
        edge (the newer edge's outcome supersedes it), or (b) a valid meta edge of subtype
        ``invalidates``/``supersedes`` points at it (its source supersedes it)."""
        out: dict[int, str] = {}
        nids = [int(n) for n in nids]
        for i in range(0, len(nids), 400):
            part = nids[i:i + 400]
            q = ",".join("?" * len(part))
            rows = self.query(
                f"SELECT e.dst, d.id FROM edges e JOIN edges n ON n.id = e.superseded_by "
                f"JOIN chunks d ON d.nid = n.dst WHERE e.dst IN ({q}) AND e.valid_to IS NULL "
                f"AND e.superseded_by IS NOT NULL AND n.dst != e.dst AND n.relation != 'meta' "
                f"UNION ALL SELECT e.dst, s.id FROM edges e JOIN chunks s ON s.nid = e.src "
                f"WHERE e.dst IN ({q}) AND e.valid_to IS NULL AND e.subtype IN ('invalidates', 'supersedes') "
                f"AND s.valid_to IS NULL", part + part)
            for nid, by in rows:
                out.setdefault(nid, by)
        return out

    def projection_arrays(self) -> dict[str, np.ndarray]:
        """Valid edges and co-occurrence pairs as arrays for the CSR projection."""
        with self._lock, self._snapshot():
            max_nid = self.conn.execute("SELECT COALESCE(MAX(nid), 0) FROM chunks").fetchone()[0]
            n_edges = self.conn.execute("SELECT COUNT(*) FROM edges WHERE valid_to IS NULL").fetchone()[0]
            # Three packed integer/real columns instead of five: row construction in the sqlite3
            # module dominates, so fewer values per row is what makes a 1M-edge rebuild fast.
            cur = self.conn.execute(
                "SELECT (eid << 3) | rel_code, (src << 32) | dst, confidence FROM edges WHERE valid_to IS NULL")
            packed = np.fromiter(cur, dtype=np.dtype([("er", "i8"), ("sd", "i8"), ("conf", "f8")]), count=n_edges)
            arr = np.empty(n_edges, dtype=[("eid", "i8"), ("src", "i8"), ("dst", "i8"), ("rel", "i4"), ("conf", "f8")])
            arr["eid"] = packed["er"] >> 3
            arr["rel"] = packed["er"] & 7
            arr["src"] = packed["sd"] >> 32
            arr["dst"] = packed["sd"] & 0xFFFFFFFF
            arr["conf"] = packed["conf"]
            n_co = self.conn.execute("SELECT COUNT(*) FROM cooccurrence").fetchone()[0]
            cur = self.conn.execute("SELECT a, b, weight FROM cooccurrence")
            co = np.fromiter(cur, dtype=np.dtype([("a", "i8"), ("b", "i8"), ("w", "f8")]), count=n_co)
        return {"n_nodes": max_nid + 1, "edges": arr, "co": co}

    def counts(self) -> dict[str, int]:
        row = self.query(
            "SELECT (SELECT COUNT(*) FROM chunks WHERE valid_to IS NULL), (SELECT COUNT(*) FROM chunks), "
            "(SELECT COUNT(*) FROM edges WHERE valid_to IS NULL), (SELECT COUNT(*) FROM edges), "
            "(SELECT COUNT(*) FROM cooccurrence), (SELECT COUNT(*) FROM facts WHERE valid_to IS NULL), "
            "(SELECT COUNT(*) FROM embeddings)")[0]
        keys = ("chunks", "chunks_total", "edges", "edges_total", "cooccurrence", "facts", "embeddings")
        return dict(zip(keys, row))

    # ------------------------------------------------------------------ facts
    def insert_fact(self, *, key: str, value: str, nid: int, user_id, agent_id, run_id,
                    confidence: float, now: float) -> int:
        cur = self.conn.execute(
            "INSERT INTO facts (key, value, nid, user_id, agent_id, run_id, confidence, created_at) "
            "VALUES (?,?,?,?,?,?,?,?)", (key, value, nid, user_id, agent_id, run_id, confidence, now))
        return cur.lastrowid

    def facts_with_key(self, key: str, user_id, agent_id, run_id) -> list[tuple]:
        return self.query(
            "SELECT fid, nid, value FROM facts WHERE key = ? AND user_id IS ? AND agent_id IS ? AND run_id IS ? "
            "AND valid_to IS NULL ORDER BY fid", (key, user_id, agent_id, run_id))

    def retire_fact(self, fid: int, now: float) -> None:
        self.conn.execute("UPDATE facts SET valid_to = ? WHERE fid = ?", (now, fid))

    # ------------------------------------------------------------------ embeddings
    def embeddings_for(self, model: str) -> Iterator[tuple[int, str, bytes]]:
        with self._lock:
            self._ensure_open()
            cur = self.conn.execute(
                "SELECT e.nid, e.text_hash, e.vector FROM embeddings e JOIN chunks c ON c.nid = e.nid "
                "WHERE e.model = ? AND c.valid_to IS NULL AND e.text_hash = c.text_hash", (model,))
            while True:
                rows = cur.fetchmany(20000)
                if not rows:
                    break
                yield from rows

    def chunks_missing_embedding(self, model: str) -> list[tuple[int, str]]:
        return self.query(
            "SELECT c.nid, c.text FROM chunks c LEFT JOIN embeddings e ON e.nid = c.nid "
            "WHERE c.valid_to IS NULL AND (e.nid IS NULL OR e.model != ? OR e.text_hash != c.text_hash) "
            "ORDER BY c.nid", (model,))

    def put_embeddings(self, rows: Iterable[tuple[int, str, int, str, bytes]]) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO embeddings (nid, model, dim, text_hash, vector) VALUES (?,?,?,?,?)", rows)

    def embedding_models(self) -> list[str]:
        return [r[0] for r in self.query("SELECT DISTINCT model FROM embeddings")]

    # ------------------------------------------------------------------ meta
    def get_meta(self, key: str) -> str | None:
        rows = self.query("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))


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
