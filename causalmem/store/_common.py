"""What the SQLite and PostgreSQL backends share: SQL that reads the same in both dialects (counts,
export reads), and the dialect-independent assembly of rows and records around it (scope
conditions, import rows from dump records, export records from rows, chunk columns, bulk reuse
grouping, repeated-evidence matching), and ``SharedStore``: the store methods whose statements
read the same in both dialects once each backend has put in its placeholders, written once. Each
backend keeps its own connection, transactions, error mapping and the statements that differ; the
functions here talk to no database, ``SharedStore`` only through its backend's hooks.
"""
from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, NamedTuple, Sequence, TypeVar

from ..errors import StoreError
from ..types import Relation
from .base import (
    POLARITY_CODES, SOURCE_CODES, SUBTYPE_CODES, ChainEdge, ChunkColumns, ChunkKey, ChunkRow, CooccurrencePair,
    CooccurrenceRow, EdgeRow, EvidenceEdge, FactRow, HistoryRow, JudgeEdgeRow, PathEdge, TaggedEdgeRow, new_id,
    text_hash,
)

__all__ = [
    "CHUNK_COLS", "CHUNK_FILTERS", "COUNTS_SQL", "COUNT_KEYS", "EDGE_COLS", "EDGE_FROM", "EXPORTS", "IMPORT_COLS",
    "ImportRows", "SharedStore",
    "chunk_columns_of", "count_dict", "edge_conditions", "evidence_edges", "export_record", "filter_conditions",
    "import_rows", "reuse_groups", "same_text", "scoped_counts_sql", "sleep_edge_select",
]

#: a chunk row's columns in ``ChunkRow`` order
CHUNK_COLS = (
    "nid, id, text, kind, q_value, importance, created_at, event_time, user_id, agent_id, "
    "run_id, session_id, metadata, access_count, last_accessed_at, valid_to"
)
EDGE_COLS = (
    "e.eid, e.id, s.id, d.id, e.relation, e.confidence, e.source, e.polarity, e.task_tag, "
    "e.event_time, e.valid_to, e.superseded_by, e.discovered_at, e.subtype, e.invalid_reason, e.src, e.dst, "
    "e.polarity_origin, e.evidence"
)
EDGE_FROM = "edges e JOIN chunks s ON s.nid = e.src JOIN chunks d ON d.nid = e.dst"

#: the columns ``chunk_nids`` filters on
CHUNK_FILTERS = ("user_id", "agent_id", "run_id", "session_id", "kind")
_SCOPE_FILTERS = ("user_id", "agent_id", "run_id")

COUNT_KEYS = ("chunks", "chunks_total", "edges", "edges_total", "cooccurrence", "facts", "embeddings")
COUNTS_SQL = (
    "SELECT (SELECT COUNT(*) FROM chunks WHERE valid_to IS NULL), (SELECT COUNT(*) FROM chunks), "
    "(SELECT COUNT(*) FROM edges WHERE valid_to IS NULL), (SELECT COUNT(*) FROM edges), "
    "(SELECT COUNT(*) FROM cooccurrence), (SELECT COUNT(*) FROM facts WHERE valid_to IS NULL), "
    "(SELECT COUNT(*) FROM embeddings)")

_CHUNK_EXPORT = ("id", "text", "kind", "q_value", "importance", "created_at", "event_time", "user_id", "agent_id",
                 "run_id", "session_id", "metadata", "access_count", "last_accessed_at", "valid_to")
#: what ``export_records`` reads after the meta rows: (record type, query, record keys in column order)
EXPORTS = (
    ("chunk", f"SELECT {', '.join(_CHUNK_EXPORT)} FROM chunks ORDER BY nid", _CHUNK_EXPORT),
    ("history", "SELECT c.id, h.event, h.old_text, h.new_text, h.at FROM chunk_history h "
                "JOIN chunks c ON c.nid = h.nid ORDER BY h.hid", ("chunk", "event", "old_text", "new_text", "at")),
    ("edge", "SELECT e.id, s.id, d.id, e.relation, e.subtype, e.confidence, e.source, e.polarity, e.polarity_origin, "
             "e.evidence, e.task_tag, e.event_time, e.discovered_at, e.valid_to, e.invalid_reason, e.superseded_by "
             f"FROM {EDGE_FROM} ORDER BY e.eid",
     ("id", "src", "dst", "relation", "subtype", "confidence", "source", "polarity", "polarity_origin", "evidence",
      "task_tag", "event_time", "discovered_at", "valid_to", "invalid_reason", "superseded_by")),
    ("cooccurrence", "SELECT ca.id, cb.id, o.weight, o.hits, o.updated_at FROM cooccurrence o "
                     "JOIN chunks ca ON ca.nid = o.a JOIN chunks cb ON cb.nid = o.b ORDER BY o.a, o.b",
     ("a", "b", "weight", "hits", "updated_at")),
    ("fact", "SELECT f.key, f.value, c.id, f.user_id, f.agent_id, f.run_id, f.confidence, f.created_at, f.valid_to "
             "FROM facts f JOIN chunks c ON c.nid = f.nid ORDER BY f.fid",
     ("key", "value", "chunk", "user_id", "agent_id", "run_id", "confidence", "created_at", "valid_to")),
    ("embedding", "SELECT c.id, e.model, e.dim, e.text_hash, e.vector FROM embeddings e "
                  "JOIN chunks c ON c.nid = e.nid ORDER BY e.nid", ("chunk", "model", "dim", "text_hash", "vector")),
)


def _case(column: str, codes: dict[str, int], other: int = 0) -> str:
    whens = " ".join(f"WHEN {column} = '{k}' THEN {v}" for k, v in codes.items())
    return f"CASE WHEN {column} IS NULL THEN 0 {whens} ELSE {other} END"


def sleep_edge_select(flag: str) -> str:
    """The sleep cycle's read of the valid edges as codes; ``flag`` turns a condition into 0/1 in the dialect."""
    return ("SELECT eid, src, dst, rel_code, " + _case("subtype", SUBTYPE_CODES, 7) + ", confidence, "
            + _case("source", SOURCE_CODES) + ", " + _case("polarity", POLARITY_CODES) + ", discovered_at, "
            + flag.format("superseded_by IS NOT NULL") + " FROM edges WHERE valid_to IS NULL")


def edge_conditions(nid: int | None, direction: str, valid_only: bool, placeholder: str) -> tuple[str, list[Any]]:
    """`` WHERE ...`` (or nothing) for ``edge_rows``: edges at ``nid`` (out, in or both), valid only."""
    conds: list[str] = []
    params: list[Any] = []
    if nid is not None:
        if direction == "out":
            conds.append(f"e.src = {placeholder}")
            params.append(int(nid))
        elif direction == "in":
            conds.append(f"e.dst = {placeholder}")
            params.append(int(nid))
        else:
            conds.append(f"(e.src = {placeholder} OR e.dst = {placeholder})")
            params += [int(nid), int(nid)]
    if valid_only:
        conds.append("e.valid_to IS NULL")
    return (" WHERE " + " AND ".join(conds)) if conds else "", params


def count_dict(row: Sequence[Any]) -> dict[str, int]:
    return {k: int(v) for k, v in zip(COUNT_KEYS, row)}


def filter_conditions(filters: Mapping[str, str | None], placeholder: str, *, allowed: Sequence[str] = _SCOPE_FILTERS,
                      prefix: str = "", what: str = "scope filter") -> tuple[list[str], list[Any]]:
    """Equality conditions for ``filters`` (``None``: IS NULL) in a dialect's ``placeholder``, and
    their parameters; an unknown key is a ValueError naming it."""
    conds: list[str] = []
    params: list[Any] = []
    for k, v in filters.items():
        if k not in allowed:
            if what == "chunk filter":
                raise ValueError(f"unknown chunk filter {k!r}; allowed: {list(allowed)}")
            raise ValueError(f"unknown {what} {k!r}")
        conds.append(f"{prefix}{k} = {placeholder}" if v is not None else f"{prefix}{k} IS NULL")
        if v is not None:
            params.append(v)
    return conds, params


def scoped_counts_sql(where: str) -> str:
    """``COUNTS_SQL`` restricted to chunks ``c`` matching ``where`` (edges and pairs counted by their
    source chunk, which shares its scope with the other end); its parameters repeat 7 times."""
    return (
        f"SELECT (SELECT COUNT(*) FROM chunks c WHERE {where} AND c.valid_to IS NULL), "
        f"(SELECT COUNT(*) FROM chunks c WHERE {where}), "
        f"(SELECT COUNT(*) FROM edges e JOIN chunks c ON c.nid = e.src WHERE {where} AND e.valid_to IS NULL), "
        f"(SELECT COUNT(*) FROM edges e JOIN chunks c ON c.nid = e.src WHERE {where}), "
        f"(SELECT COUNT(*) FROM cooccurrence o JOIN chunks c ON c.nid = o.a WHERE {where}), "
        f"(SELECT COUNT(*) FROM facts f JOIN chunks c ON c.nid = f.nid WHERE {where} AND f.valid_to IS NULL), "
        f"(SELECT COUNT(*) FROM embeddings m JOIN chunks c ON c.nid = m.nid WHERE {where})")


def chunk_columns_of(rows: Sequence[Sequence[Any]], with_text: bool) -> ChunkColumns:
    """Rows of (nid, kind, created_at, event_time, q_value, importance, user_id, agent_id, run_id,
    session_id, alive[, text]) as one column batch."""
    c = list(zip(*rows))
    return ChunkColumns(nid=c[0], kind=c[1], created_at=c[2], event_time=c[3], q_value=c[4], importance=c[5],
                        user_id=c[6], agent_id=c[7], run_id=c[8], session_id=c[9], alive=c[10],
                        text=c[11] if with_text else None)


def same_text(rows: Iterable[Sequence[Any]], text: str) -> ChunkKey | None:
    """The first of (nid, id, text) ``rows`` whose text is exactly ``text`` (a hash lookup's check)."""
    for nid, cid, t in rows:
        if t == text:
            return ChunkKey(nid, cid)
    return None


def reuse_groups(keys: Sequence[tuple[str, tuple]], hashes: dict[str, int]) -> dict[tuple, dict[int, str]]:
    """(text, scope) keys grouped by scope as text_hash -> text (``hashes`` is filled text -> hash)."""
    by_scope: dict[tuple, dict[int, str]] = {}
    for text, scope in keys:
        h = hashes.get(text)
        if h is None:
            h = hashes[text] = text_hash(text)
        by_scope.setdefault(scope, {})[h] = text
    return by_scope


def evidence_edges(rows: Iterable[Sequence[Any]], wanted: set[tuple]) -> dict[tuple, EvidenceEdge]:
    """The first (oldest) edge per wanted (src, dst, relation, subtype) among ``rows`` in eid order."""
    out: dict[tuple, EvidenceEdge] = {}
    for row in rows:
        e = EvidenceEdge._make(row)
        key = (e.src, e.dst, e.relation, e.subtype)
        if key in wanted:
            out.setdefault(key, e)
    return out


def export_record(kind: str, keys: Sequence[str], row: Sequence[Any]) -> dict[str, Any]:
    """One export record from a row of ``EXPORTS``: a chunk's metadata parsed, a vector as bytes."""
    rec = dict(zip(keys, row))
    if kind == "chunk":
        rec["metadata"] = json.loads(rec["metadata"]) if rec["metadata"] else {}
    elif kind == "embedding":
        rec["vector"] = bytes(rec["vector"])
    return rec


class ImportRows(NamedTuple):
    """The rows ``import_records`` inserts, table by table, in the column orders of ``IMPORT_COLS``."""

    chunks: list[tuple]
    history: list[tuple]
    edges: list[tuple]
    cooccurrence: list[tuple]
    facts: list[tuple]
    embeddings: list[tuple]
    meta: list[tuple]


#: table -> the columns ``ImportRows`` fills, in order (the tables in ``ImportRows`` order)
IMPORT_COLS = {
    "chunks": "nid, id, text, text_hash, kind, created_at, event_time, q_value, importance, access_count, "
              "last_accessed_at, user_id, agent_id, run_id, session_id, metadata, valid_to",
    "chunk_history": "nid, event, old_text, new_text, at",
    "edges": "eid, id, src, dst, relation, rel_code, subtype, confidence, source, polarity, polarity_origin, "
             "evidence, task_tag, event_time, discovered_at, valid_to, invalid_reason, superseded_by",
    "cooccurrence": "a, b, weight, hits, updated_at",
    "facts": "key, value, nid, user_id, agent_id, run_id, confidence, created_at, valid_to",
    "embeddings": "nid, model, dim, text_hash, vector",
    "meta": "key, value",
}


assert tuple(IMPORT_COLS) == ("chunks", "chunk_history", "edges", "cooccurrence", "facts", "embeddings", "meta")
assert len(IMPORT_COLS) == len(ImportRows._fields)


def import_rows(records: Mapping[str, Sequence[Mapping[str, Any]]], nid_base: int, eid_base: int,
                skip_meta: Iterable[str] = ()) -> ImportRows:
    """Checked dump records (``portable.read_dump``) as rows: chunk and edge keys assigned in dump
    order after ``nid_base`` / ``eid_base``; meta keys starting ``purged_max_`` or in ``skip_meta``
    left out (they describe the source store, not the memory)."""
    chunks = records.get("chunk", ())
    nid_of = {c["id"]: nid_base + 1 + i for i, c in enumerate(chunks)}
    co = []
    for o in records.get("cooccurrence", ()):
        a, b = nid_of[o["a"]], nid_of[o["b"]]
        co.append((min(a, b), max(a, b), o["weight"], o["hits"], o["updated_at"]))
    skip = set(skip_meta)
    return ImportRows(
        chunks=[(nid_of[c["id"]], c["id"], c["text"], text_hash(c["text"]), c["kind"], c["created_at"],
                 c["event_time"], c["q_value"], c["importance"], c["access_count"], c["last_accessed_at"],
                 c["user_id"], c["agent_id"], c["run_id"], c["session_id"],
                 c["metadata"] if isinstance(c["metadata"], str) else json.dumps(c["metadata"], ensure_ascii=False),
                 c["valid_to"]) for c in chunks],
        history=[(nid_of[h["chunk"]], h["event"], h["old_text"], h["new_text"], h["at"])
                 for h in records.get("history", ())],
        edges=[(eid_base + 1 + i, e["id"], nid_of[e["src"]], nid_of[e["dst"]], e["relation"].value,
                e["relation"].code, e["subtype"], e["confidence"], e["source"], e["polarity"], e["polarity_origin"],
                e["evidence"], e["task_tag"], e["event_time"], e["discovered_at"], e["valid_to"],
                e["invalid_reason"], e["superseded_by"]) for i, e in enumerate(records.get("edge", ()))],
        cooccurrence=co,
        facts=[(f["key"], f["value"], nid_of[f["chunk"]], f["user_id"], f["agent_id"], f["run_id"], f["confidence"],
                f["created_at"], f["valid_to"]) for f in records.get("fact", ())],
        embeddings=[(nid_of[v["chunk"]], v["model"], v["dim"], v["text_hash"], v["vector"])
                    for v in records.get("embedding", ())],
        meta=[(m["key"], m["value"]) for m in records.get("meta", ())
              if not m["key"].startswith("purged_max_") and m["key"] not in skip],
    )


R = TypeVar("R")
_IN_LIST = re.compile(r"IN \(\{(\w+)\}\)")


class SharedStore:
    """The store methods both backends implement alike (``base.StoreBackend``), written once.

    Statements are written with ``?`` placeholders; a backend whose driver wants another style
    rewrites them in ``_q``. A list parameter is written ``IN ({ids})`` and bound by the backend's
    ``_select_in`` (SQLite: one ``IN (?, ...)`` per slice; PostgreSQL: ``= ANY(array)``). The
    backend supplies ``query``/``_one`` (reads), ``_x``/``_many`` (writes inside its transaction),
    ``_next_key`` and ``texts_of``; ``_order`` is the ``ORDER BY`` that PostgreSQL states where
    SQLite's plan already returns its index order (kept as each backend had it)."""

    #: the scope columns equal, NULL to NULL, to three parameters
    _SCOPE_EQ = "user_id IS ? AND agent_id IS ? AND run_id IS ?"
    #: a condition that always holds
    _TRUE = "1"
    #: the LIMIT parameter that means no limit
    _NO_LIMIT: Any = -1
    #: a list parameter is bound as one array (PostgreSQL), not one placeholder per value (SQLite)
    _ARRAYS = False

    if TYPE_CHECKING:
        _closed: bool
        _depth: int

        def query(self, sql: str, params: Any = ...) -> list[tuple]: ...

        def _one(self, sql: str, params: Any = ...) -> Any: ...

        def _x(self, sql: str, params: Any = ...) -> Any: ...

        def _many(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any: ...

        def _select_in(self, sql: str, ids: Iterable[Any], *, before: Sequence[Any] = (), after: Sequence[Any] = (),
                       size: int = ...) -> list[tuple]: ...

        def _next_key(self, table: str, column: str) -> int: ...

        def texts_of(self, nids: Sequence[int]) -> list[tuple[int, str]]: ...

    def _q(self, sql: str) -> str:
        """A statement written with ``?`` placeholders, in this backend's style."""
        return sql

    def _order(self, by: str) -> str:
        return ""

    def _in_lists(self, sql: str, lists: Mapping[str, list[int]]) -> tuple[str, list[Any]]:
        """``sql`` with each ``IN ({name})`` bound to ``lists[name]`` (a whole list per occurrence, not
        sliced: for the short lists of a query's nodes), and its parameters in order."""
        params: list[Any] = []

        def bind(m: re.Match) -> str:
            values = lists[m.group(1)]
            if self._ARRAYS:
                params.append(values)
                return "= ANY(?)"
            params.extend(values)
            return "IN (" + ",".join("?" * len(values)) + ")"

        return self._q(_IN_LIST.sub(bind, sql)), params

    def read_once(self, fn: Callable[[], R]) -> R:
        """Run the read-only query ``fn`` (a backend with a server overlaps its change check with it)."""
        return fn()

    def _new_edge_ends(self, ends: Iterable[int] | None) -> None:
        """The ends of edges the open transaction inserts (a backend that tracks them overrides)."""

    # ------------------------------------------------------------------ plumbing
    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreError("this memory is closed")

    @property
    def in_transaction(self) -> bool:
        return self._depth > 0

    def counts(self) -> dict[str, int]:
        return count_dict(self.query(COUNTS_SQL)[0])

    def edge_count(self) -> int:
        return int(self._one("SELECT COUNT(*) FROM edges"))

    def get_meta(self, key: str) -> str | None:
        return self._one(self._q("SELECT value FROM meta WHERE key = ?"), (key,))

    def existing_ids(self, ids: Sequence[str], kind: str) -> set[str]:
        """Which of ``ids`` (chunk or edge ids, ``kind`` says which) exist already."""
        table = {"chunk": "chunks", "edge": "edges"}[kind]
        return {r[0] for r in self._select_in(f"SELECT id FROM {table} WHERE id IN ({{ids}})", list(ids))}

    def scoped_counts(self, filters: Mapping[str, str | None]) -> dict[str, int]:
        """``counts()`` restricted to the chunks whose scope columns equal ``filters`` (edges and
        pairs counted by their source chunk, which shares its scope with the other end)."""
        conds, params = filter_conditions(filters, "?", prefix="c.")
        return count_dict(self.query(self._q(scoped_counts_sql(" AND ".join(conds) or "1 = 1")), params * 7)[0])

    def judged_pairs(self) -> set[str]:
        return {r[0] for r in self.query(self._q("SELECT key FROM meta WHERE key LIKE ?"), ("judged:%",))}

    # ------------------------------------------------------------------ chunks
    def chunk_row(self, chunk_id: str) -> ChunkRow | None:
        rows = self.query(self._q(f"SELECT {CHUNK_COLS} FROM chunks WHERE id = ?"), (chunk_id,))
        return ChunkRow._make(rows[0]) if rows else None

    def nid_of(self, chunk_id: str) -> int | None:
        return self._one(self._q("SELECT nid FROM chunks WHERE id = ?"), (chunk_id,))

    def chunk_keys_by_id(self, chunk_ids: Sequence[str]) -> dict[str, ChunkKey]:
        rows = self._select_in("SELECT nid, id FROM chunks WHERE id IN ({ids})", list(chunk_ids))
        return {r[1]: ChunkKey._make(r) for r in rows}

    def chunk_alive(self, nid: int) -> bool:
        return bool(self._one(self._q("SELECT valid_to IS NULL FROM chunks WHERE nid = ?"), (int(nid),)))

    def chunk_nids(self, *, filters: Mapping[str, str | None], limit: int | None = None,
                   live_only: bool = True) -> list[int]:
        conds, params = filter_conditions(filters, "?", allowed=CHUNK_FILTERS, what="chunk filter")
        conds.insert(0, "valid_to IS NULL" if live_only else self._TRUE)
        sql = f"SELECT nid FROM chunks WHERE {' AND '.join(conds)} ORDER BY nid"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [r[0] for r in self.query(self._q(sql), params)]

    def _reusable_rows(self, hashes: Sequence[int], scope: tuple, turns: bool = False) -> list[tuple]:
        """(nid, id, text) of the live non-turn chunks (every kind with ``turns``) of ``scope`` with one
        of the text ``hashes``, by nid (how each backend reaches its reuse index is its own)."""
        raise NotImplementedError

    def find_reusable_chunks(self, keys: Sequence[tuple[str, tuple]], hashes: dict[str, int] | None = None,
                             *, turns: bool = False) -> dict[tuple[str, tuple], ChunkKey]:
        """Bulk form of ``find_reusable_chunk``: {(text, scope): (nid, id)} for the keys that exist.

        ``hashes``, when given, is filled with text -> text_hash for reuse by ``insert_chunks_bulk``."""
        hashes = {} if hashes is None else hashes
        out: dict[tuple[str, tuple], ChunkKey] = {}
        for scope, by_hash in reuse_groups(keys, hashes).items():
            for nid, cid, t in self._reusable_rows(list(by_hash), scope, turns):
                out.setdefault((t, scope), ChunkKey(nid, cid))
        return out

    def chunk_texts(self, nids: Sequence[int]) -> dict[int, str]:
        return dict(self.texts_of(nids))

    def recent_chunk_texts(self, limit: int = 64) -> list[str]:
        return [r[0] for r in self.query(self._q(
            "SELECT text FROM chunks WHERE valid_to IS NULL ORDER BY created_at DESC, nid DESC LIMIT ?"),
            (int(limit),))]

    def previous_turn(self, session_id: str, user_id: str | None, agent_id: str | None,
                      run_id: str | None) -> int | None:
        return self._one(self._q(
            f"SELECT nid FROM chunks WHERE session_id = ? AND {self._SCOPE_EQ} AND kind = 'turn' "
            "AND valid_to IS NULL ORDER BY nid DESC LIMIT 1"), (session_id, user_id, agent_id, run_id))

    def history(self, nid: int) -> list[HistoryRow]:
        return [HistoryRow._make(r) for r in self.query(self._q(
            "SELECT event, old_text, new_text, at FROM chunk_history WHERE nid = ? ORDER BY hid"), (int(nid),))]

    def q_value_of(self, nid: int) -> float:
        rows = self.query(self._q("SELECT q_value FROM chunks WHERE nid = ?"), (int(nid),))
        if not rows:
            raise KeyError(f"unknown chunk nid {nid}")
        return float(rows[0][0])

    def max_successor_q(self, nid: int) -> float | None:
        value = self._one(self._q(
            "SELECT MAX(c.q_value) FROM edges e JOIN chunks c ON c.nid = e.dst "
            "WHERE e.src = ? AND e.valid_to IS NULL AND c.valid_to IS NULL"), (int(nid),))
        return None if value is None else float(value)

    def set_chunk_deleted(self, nid: int, now: float) -> None:
        nid, q = int(nid), self._q
        self._x(q("UPDATE chunks SET valid_to = ? WHERE nid = ?"), (now, nid))
        self._x(q("UPDATE edges SET valid_to = ?, invalid_reason = 'chunk deleted' "
                  "WHERE (src = ? OR dst = ?) AND valid_to IS NULL"), (now, nid, nid))
        self._x(q("DELETE FROM cooccurrence WHERE a = ? OR b = ?"), (nid, nid))
        self._x(q("UPDATE facts SET valid_to = ? WHERE nid = ? AND valid_to IS NULL"), (now, nid))
        self._x(q("INSERT INTO chunk_history (nid, event, old_text, new_text, at) "
                  "SELECT nid, 'delete', text, NULL, ? FROM chunks WHERE nid = ?"), (now, nid))

    def set_chunk_metadata(self, nid: int, metadata: Mapping[str, Any]) -> None:
        self._x(self._q("UPDATE chunks SET metadata = ? WHERE nid = ?"),
                (json.dumps(dict(metadata), ensure_ascii=False), int(nid)))

    def set_chunk_text(self, nid: int, text: str, now: float) -> None:
        nid = int(nid)
        self._x(self._q("INSERT INTO chunk_history (nid, event, old_text, new_text, at) "
                        "SELECT nid, 'update', text, ?, ? FROM chunks WHERE nid = ?"), (text, now, nid))
        self._x(self._q("UPDATE chunks SET text = ?, text_hash = ? WHERE nid = ?"), (text, text_hash(text), nid))

    def set_q_value(self, nid: int, q: float) -> None:
        self._x(self._q("UPDATE chunks SET q_value = ? WHERE nid = ?"), (q, int(nid)))

    # ------------------------------------------------------------------ edges
    def edge_rows_by_ids(self, edge_ids: Sequence[str]) -> list[EdgeRow]:
        rows = self._select_in(f"SELECT {EDGE_COLS} FROM {EDGE_FROM} WHERE e.id IN ({{ids}})", list(edge_ids))
        return [EdgeRow._make(r) for r in rows]

    def edge_row(self, edge_id: str) -> EdgeRow | None:
        rows = self.query(self._q(f"SELECT {EDGE_COLS} FROM {EDGE_FROM} WHERE e.id = ?"), (edge_id,))
        return EdgeRow._make(rows[0]) if rows else None

    def edge_rows(self, *, nid: int | None = None, valid_only: bool = True,
                  direction: str = "both") -> list[EdgeRow]:
        where, params = edge_conditions(nid, direction, valid_only, "?")
        return [EdgeRow._make(r) for r in self.query(
            self._q(f"SELECT {EDGE_COLS} FROM {EDGE_FROM}{where} ORDER BY e.eid"), params)]

    def edge_ids(self, eids: Sequence[int]) -> dict[int, str]:
        return dict(self._select_in("SELECT eid, id FROM edges WHERE eid IN ({ids})", [int(e) for e in eids]))

    def edge_judge_rows(self, eids: Sequence[int]) -> dict[int, JudgeEdgeRow]:
        rows = self._select_in(
            "SELECT eid, id, relation, confidence, source, polarity, task_tag, discovered_at, subtype, src, dst "
            "FROM edges WHERE eid IN ({ids})" + self._order("eid"), [int(e) for e in eids])
        return {r[0]: JudgeEdgeRow._make(r[1:]) for r in rows}

    def chain_out_edges(self, srcs: Sequence[int]) -> list[ChainEdge]:
        return [ChainEdge._make(r) for r in self._select_in(
            "SELECT src, dst, relation, confidence, polarity FROM edges WHERE src IN ({ids}) AND "
            "valid_to IS NULL AND relation NOT IN ('no_effect', 'temporal')" + self._order("eid"),
            [int(s) for s in srcs])]

    def task_tag_nodes(self, task_tag: str) -> list[int]:
        return [r[0] for r in self.query(self._q(
            "SELECT src FROM edges WHERE task_tag = ? AND valid_to IS NULL UNION "
            "SELECT dst FROM edges WHERE task_tag = ? AND valid_to IS NULL" + self._order("1")), (task_tag, task_tag))]

    def tagged_edge_rows(self) -> list[TaggedEdgeRow]:
        return [TaggedEdgeRow._make(r) for r in self.query(
            "SELECT src, dst, discovered_at, task_tag FROM edges WHERE valid_to IS NULL AND task_tag IS NOT NULL "
            "AND relation IN ('caused', 'enabled', 'prevented')" + self._order("eid"))]

    def has_new_tagged_decisions(self, since: float) -> bool:
        if since == float("-inf"):
            since = -1e308
        return bool(self.query(self._q(
            "SELECT 1 FROM edges e JOIN chunks s ON s.nid = e.src WHERE e.valid_to IS NULL AND e.task_tag IS NOT NULL "
            "AND e.relation IN ('caused', 'enabled', 'prevented') AND (e.discovered_at > ? OR s.created_at > ?) "
            "LIMIT 1"), (since, since)))

    def insert_edge(self, *, src: int, dst: int, relation: Relation, subtype: str | None, confidence: float,
                    source: str, polarity: str | None, task_tag: str | None, event_time: float | None,
                    discovered_at: float, polarity_origin: str | None = None) -> tuple[int, str]:
        eid_str = new_id()
        eid = self._next_key("edges", "eid")
        src, dst = int(src), int(dst)
        self._new_edge_ends((src, dst))
        self._x(self._q(
            "INSERT INTO edges (eid, id, src, dst, relation, rel_code, subtype, confidence, source, polarity, "
            "polarity_origin, task_tag, event_time, discovered_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
            (eid, eid_str, src, dst, relation.value, relation.code, subtype, confidence, source, polarity,
             polarity_origin or ("unknown" if polarity is None else "given"), task_tag, event_time, discovered_at))
        return eid, eid_str

    def edges_between(self, a: Sequence[int], b: Sequence[int]) -> list[PathEdge]:
        a, b = [int(x) for x in a], [int(x) for x in b]
        if not a or not b:
            return []
        return [PathEdge._make(r) for r in self.query(*self._in_lists(
            f"SELECT e.src, e.dst, e.relation, e.confidence, e.id, s.id, d.id FROM {EDGE_FROM} "
            "WHERE e.valid_to IS NULL AND ((e.src IN ({a}) AND e.dst IN ({b})) OR "
            "(e.dst IN ({a}) AND e.src IN ({b})))" + self._order("e.eid"), {"a": a, "b": b}))]

    def set_edge_invalid(self, eid: int, now: float, reason: str | None, superseded_by: str | None = None) -> None:
        self._x(self._q("UPDATE edges SET valid_to = ?, invalid_reason = ?, superseded_by = COALESCE(?, superseded_by) "
                        "WHERE eid = ?"), (now, reason, superseded_by, int(eid)))

    def restore_edge(self, eid: int) -> None:
        self._x(self._q("UPDATE edges SET valid_to = NULL, invalid_reason = NULL, superseded_by = NULL WHERE eid = ?"),
                (int(eid),))

    def add_edge_evidence(self, rows: Iterable[tuple[float, int, str | None, str | None, int]]) -> None:
        """rows of (confidence, added evidence, polarity, polarity_origin, eid); a ``None`` polarity
        keeps the stored one."""
        self._many(self._q(
            "UPDATE edges SET confidence = ?, evidence = evidence + ?, "
            "polarity = COALESCE(?, polarity), polarity_origin = COALESCE(?, polarity_origin) WHERE eid = ?"),
            [(c, n, p, o if p is not None else None, int(e)) for c, n, p, o, e in rows])

    # ------------------------------------------------------------------ co-occurrence, facts, vectors
    def cooccurrence_row(self, a: int, b: int) -> CooccurrenceRow | None:
        a, b = (int(a), int(b)) if a < b else (int(b), int(a))
        rows = self.query(self._q("SELECT a, b, weight, hits, updated_at FROM cooccurrence WHERE a = ? AND b = ?"),
                          (a, b))
        return CooccurrenceRow._make(rows[0]) if rows else None

    def cooccurrence_between(self, a: Sequence[int], b: Sequence[int]) -> list[CooccurrencePair]:
        a, b = [int(x) for x in a], [int(x) for x in b]
        if not a or not b:
            return []
        return [CooccurrencePair._make(r) for r in self.query(*self._in_lists(
            "SELECT a, b, weight FROM cooccurrence WHERE (a IN ({a}) AND b IN ({b})) OR "
            "(b IN ({a}) AND a IN ({b}))" + self._order("a, b"), {"a": a, "b": b}))]

    def facts_with_key(self, key: str, user_id: str | None, agent_id: str | None,
                       run_id: str | None) -> list[FactRow]:
        return [FactRow._make(r) for r in self.query(self._q(
            f"SELECT fid, nid, value FROM facts WHERE key = ? AND {self._SCOPE_EQ} AND valid_to IS NULL ORDER BY fid"),
            (key, user_id, agent_id, run_id))]

    def retire_fact(self, fid: int, now: float) -> None:
        self._x(self._q("UPDATE facts SET valid_to = ? WHERE fid = ?"), (now, int(fid)))

    def embeddings_of(self, nids: Sequence[int], model: str) -> list[tuple[int, bytes]]:
        return [(nid, bytes(v)) for nid, v in self._select_in(
            "SELECT e.nid, e.vector FROM embeddings e JOIN chunks c ON c.nid = e.nid WHERE e.nid IN ({ids}) "
            "AND e.model = ? AND e.text_hash = c.text_hash" + self._order("e.nid"), [int(n) for n in nids],
            after=(model,))]

    def chunks_missing_embedding(self, model: str, *, limit: int | None = None,
                                 after_nid: int = 0) -> list[tuple[int, str]]:
        return self.query(self._q(
            "SELECT c.nid, c.text FROM chunks c LEFT JOIN embeddings e ON e.nid = c.nid "
            "WHERE c.nid > ? AND c.valid_to IS NULL AND (e.nid IS NULL OR e.model <> ? OR e.text_hash <> c.text_hash) "
            "ORDER BY c.nid LIMIT ?"), (int(after_nid), model, self._NO_LIMIT if limit is None else int(limit)))

    def max_chunk_nid(self) -> int:
        return int(self._one("SELECT COALESCE(MAX(nid), 0) FROM chunks"))

    def has_embeddings(self, model: str) -> bool:
        return bool(self._one(self._q("SELECT EXISTS (SELECT 1 FROM embeddings WHERE model = ?)"), (model,)))

    def embedding_backlog(self, model: str) -> tuple[int, int]:
        row = self.query(self._q(
            "SELECT COUNT(*), COUNT(e.nid) FROM chunks c LEFT JOIN embeddings e ON e.nid = c.nid "
            "AND e.model = ? AND e.text_hash = c.text_hash WHERE c.valid_to IS NULL"), (model,))[0]
        return int(row[0]), int(row[1])
