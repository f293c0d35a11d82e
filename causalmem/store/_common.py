"""What the SQLite and PostgreSQL backends share: SQL that reads the same in both dialects (counts,
export reads), and the dialect-independent assembly of rows and records around it (scope
conditions, import rows from dump records, export records from rows, chunk columns, bulk reuse
grouping, repeated-evidence matching). Each backend keeps its own statements, placeholders,
transactions and error mapping; nothing here talks to a database.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from .base import POLARITY_CODES, SOURCE_CODES, SUBTYPE_CODES, ChunkColumns, EvidenceEdge, text_hash

__all__ = [
    "CHUNK_FILTERS", "COUNTS_SQL", "COUNT_KEYS", "EDGE_COLS", "EDGE_FROM", "EXPORTS", "IMPORT_COLS", "ImportRows",
    "chunk_columns_of", "count_dict", "edge_conditions", "evidence_edges", "export_record", "filter_conditions",
    "import_rows", "reuse_groups", "scoped_counts_sql", "sleep_edge_select",
]

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
