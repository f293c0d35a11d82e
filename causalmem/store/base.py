"""What a store backend provides: the complete contract, its named row types and shared helpers.

The store is the single source of truth (SPEC §1). A backend (``sqlite.SQLiteStore``, the
embedded default; a PostgreSQL backend for many machines) implements :class:`StoreBackend`;
nothing above the store speaks SQL or sees a positional row. Every read returns one of the
named row types below (``NamedTuple``: cheap, and still a tuple for the callers that unpack
it) or a numpy structured array of one of the ``*_DTYPE`` layouts for the bulk reads.

Keys: chunks and edges carry a stable public string ``id`` and an internal integer key
(``nid`` / ``eid``) that the graph projection and the indexes use as array positions, so a
backend must hand out small, dense, increasing integers (``insert_*_bulk`` take consecutive
ones). Writes happen inside ``transaction()``; nested calls are savepoints.

Write methods never commit on their own: the caller holds ``transaction()``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
import time
from typing import (TYPE_CHECKING, Any, Callable, ContextManager, Iterable, Iterator, Mapping, NamedTuple,
                    Protocol, Sequence, TypeVar)

import numpy as np

from ..types import Chunk, ChunkFields, Edge, new_edge

if TYPE_CHECKING:  # pragma: no cover
    from ..types import Relation

__all__ = [
    "StoreBackend", "ChunkRow", "EdgeRow", "EDGE_ROW_COLUMNS", "ChunkKey", "ChunkColumns", "FactRow", "HistoryRow",
    "CooccurrenceRow", "EmbeddingRow", "StoredVector", "OutEdge", "EvidenceEdge", "ChainEdge", "PathEdge",
    "CooccurrencePair", "JudgeEdgeRow", "MiningChunkRow", "TaggedEdgeRow", "EDGE_DTYPE", "CHUNK_DTYPE",
    "COOC_DTYPE", "PROJECTION_EDGE_DTYPE", "PROJECTION_CO_DTYPE", "SOURCE_CODES", "POLARITY_CODES",
    "POLARITY_NAMES", "SUBTYPE_CODES", "BATCH", "text_hash", "new_id", "new_ids", "batched", "check_path", "is_dsn",
]


# ---------------------------------------------------------------------------------- row types
@dataclasses.dataclass(frozen=True)
class ChunkRow(ChunkFields):
    """One chunk as stored: the chunk's fields, its metadata as JSON text, its node id; ``valid_to``
    set = soft-deleted."""

    metadata: str
    access_count: int
    last_accessed_at: float | None
    valid_to: float | None
    nid: int

    @classmethod
    def _make(cls, row: Sequence[Any]) -> ChunkRow:
        """From the stored columns (``CHUNK_COLS``): ``nid`` first, then the fields in order. Fills
        the instance at once (a frozen dataclass's ``__init__`` sets one field at a time: ~8x the
        cost of a named tuple, on every row a search or an export reads)."""
        obj = object.__new__(cls)
        values = dict(zip(_CHUNK_ROW_ORDER, row))
        object.__setattr__(obj, "__dict__", values)
        return obj

    def to_chunk(self) -> Chunk:
        shared = {f.name: getattr(self, f.name) for f in _CHUNK_FIELDS}
        return Chunk(**shared, metadata=json.loads(self.metadata) if self.metadata else {},
                     access_count=self.access_count, last_accessed_at=self.last_accessed_at,
                     valid=self.valid_to is None)


_CHUNK_FIELDS = dataclasses.fields(ChunkFields)
#: the stored column order of a chunk row
_CHUNK_ROW_ORDER = ("nid", *(f.name for f in dataclasses.fields(ChunkRow) if f.name != "nid"))


@dataclasses.dataclass(frozen=True)
class EdgeRow(Edge):
    """One edge as stored: the public edge's fields (``src``/``dst``: the endpoints' public ids)
    plus its key ``eid``, the endpoints' nids and ``valid_to`` (set = invalid)."""

    _: dataclasses.KW_ONLY
    eid: int
    src_nid: int
    dst_nid: int
    valid_to: float | None

    @classmethod
    def _make(cls, row: Sequence[Any]) -> EdgeRow:
        """From the stored columns in ``EDGE_ROW_COLUMNS`` order (filled at once, as ``ChunkRow``)."""
        obj = object.__new__(cls)
        values = dict(zip(EDGE_ROW_COLUMNS, row))
        values["valid"] = values["valid_to"] is None
        object.__setattr__(obj, "__dict__", values)
        return obj

    def to_edge(self) -> Edge:
        """The public ``Edge`` (the row without its storage keys)."""
        d = self.__dict__
        return new_edge(*[d[k] for k in _EDGE_FIELD_NAMES])


#: the order of the stored edge columns a backend selects for an ``EdgeRow`` (sqlite's ``EDGE_COLS``)
EDGE_ROW_COLUMNS = ("eid", "id", "src", "dst", "relation", "confidence", "source", "polarity", "task_tag",
                    "event_time", "valid_to", "superseded_by", "discovered_at", "subtype", "invalid_reason",
                    "src_nid", "dst_nid", "polarity_origin", "evidence")
#: Edge's fields in order: ``new_edge``'s parameters
_EDGE_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(Edge))


class ChunkKey(NamedTuple):
    """The two keys of a chunk."""

    nid: int
    id: str


class ChunkColumns(NamedTuple):
    """A batch of chunks column by column (parallel tuples), as the in-memory chunk table loads them.

    ``text`` is ``None`` when the texts were not asked for."""

    nid: tuple[int, ...]
    kind: tuple[str, ...]
    created_at: tuple[float, ...]
    event_time: tuple[float | None, ...]
    q_value: tuple[float, ...]
    importance: tuple[float, ...]
    user_id: tuple[str | None, ...]
    agent_id: tuple[str | None, ...]
    run_id: tuple[str | None, ...]
    session_id: tuple[str | None, ...]
    alive: tuple[int, ...]
    text: tuple[str, ...] | None


class FactRow(NamedTuple):
    fid: int
    nid: int
    value: str


class HistoryRow(NamedTuple):
    event: str
    old_text: str | None
    new_text: str | None
    at: float


class CooccurrenceRow(NamedTuple):
    a: int
    b: int
    weight: float
    hits: int
    updated_at: float


class EmbeddingRow(NamedTuple):
    """A vector to store for chunk ``nid`` (``text_hash`` of the text it was computed from)."""

    nid: int
    model: str
    dim: int
    text_hash: int
    vector: bytes


class StoredVector(NamedTuple):
    nid: int
    text_hash: int
    vector: bytes


class OutEdge(NamedTuple):
    """A valid out-edge of a decision: its keys and its destination nid."""

    eid: int
    id: str
    dst: int


class EvidenceEdge(NamedTuple):
    """A valid edge as repeated evidence updates it."""

    eid: int
    id: str
    src: int
    dst: int
    relation: str
    subtype: str | None
    confidence: float
    evidence: int
    polarity: str | None
    polarity_origin: str | None


class ChainEdge(NamedTuple):
    src: int
    dst: int
    relation: str
    confidence: float
    polarity: str | None


class PathEdge(NamedTuple):
    """A valid edge between two node sets, with the public ids of the edge and its endpoints."""

    src: int
    dst: int
    relation: str
    confidence: float
    id: str
    src_id: str
    dst_id: str


class CooccurrencePair(NamedTuple):
    a: int
    b: int
    weight: float


class JudgeEdgeRow(NamedTuple):
    """What a supersession judge is told about an edge."""

    id: str
    relation: str
    confidence: float
    source: str
    polarity: str | None
    task_tag: str | None
    discovered_at: float
    subtype: str | None
    src: int
    dst: int


class MiningChunkRow(NamedTuple):
    nid: int
    text: str
    user_id: str | None
    agent_id: str | None
    run_id: str | None
    created_at: float


class TaggedEdgeRow(NamedTuple):
    src: int
    dst: int
    discovered_at: float
    task_tag: str


# ---------------------------------------------------------------------------------- array layouts
# Small integer codes used by the sleep arrays (0 = NULL / other).
SOURCE_CODES = {"user_feedback": 1, "llm_inferred": 2, "temporal": 3, "manual": 4, "cli": 5, "mcp": 6}
POLARITY_CODES = {"negative": 1, "positive": 2, "mixed": 3, "neutral": 4}
POLARITY_NAMES: dict[int, str | None] = {0: None, 1: "negative", 2: "positive", 3: "mixed", 4: "neutral"}
SUBTYPE_CODES = {"similar_to": 1, "repeated": 2, "refines": 3, "contradicts": 4, "invalidates": 5,
                 "supersedes": 6}

#: every valid edge for a sleep cycle; ``sub`` 7 = a subtype not in SUBTYPE_CODES, ``sup`` 1 = annotated
#: ``superseded_by`` (edges keep no access time: access is recorded on chunks)
EDGE_DTYPE = np.dtype([
    ("eid", "i8"), ("src", "i8"), ("dst", "i8"), ("rel", "i4"), ("sub", "i1"), ("conf", "f8"),
    ("source", "i1"), ("pol", "i1"), ("disc", "f8"), ("sup", "i1"),
])
#: every chunk for a sleep cycle, ordered by nid; ``acc`` = last access time or -1e300
CHUNK_DTYPE = np.dtype([("nid", "i8"), ("q", "f8"), ("alive", "i1"), ("acc", "f8")])
COOC_DTYPE = np.dtype([("a", "i8"), ("b", "i8"), ("w", "f8"), ("upd", "f8")])
#: valid edges for the CSR projection (``rel`` = ``Relation.code``)
PROJECTION_EDGE_DTYPE = np.dtype([("eid", "i8"), ("src", "i8"), ("dst", "i8"), ("rel", "i4"), ("conf", "f8")])
PROJECTION_CO_DTYPE = np.dtype([("a", "i8"), ("b", "i8"), ("w", "f8")])


# ---------------------------------------------------------------------------------- the contract
_R = TypeVar("_R")


class StoreBackend(Protocol):
    """Everything the pipelines and the views ask of a store. Implemented by ``SQLiteStore``.

    Conventions: ``nids``/``eids`` arguments are any sequence of ints (order and duplicates
    irrelevant unless said); dict results are keyed by the integer key; a scope is the triple
    ``(user_id, agent_id, run_id)`` compared with SQL ``IS`` semantics (``None`` matches only
    ``None``); a chunk is *live* when its ``valid_to`` is ``NULL``, an edge is *valid* likewise.
    """

    path: str
    #: opened read-only: reads work, ``transaction()`` raises ``StoreError``
    read_only: bool

    # -- lifecycle, transactions, versions ------------------------------------------------
    def close(self) -> None:
        """Close the connection; later calls raise ``StoreError``."""

    def errors(self) -> ContextManager[None]:
        """Backend errors raised inside become a ``StoreError`` naming the database."""

    def transaction(self, *, wait: bool = True) -> ContextManager[Any]:
        """One write transaction; nested calls are savepoints; an exception rolls back. The write
        lock is waited for at most the busy timeout (``wait=False``: not at all), then ``StoreError``."""

    @property
    def in_transaction(self) -> bool:
        """Whether a write transaction is open on this store object."""

    def data_version(self) -> int:
        """A number that changes when *another* connection commits."""

    def read_once(self, fn: Callable[[], _R]) -> _R:
        """Run the read-only query ``fn`` (which calls ``data_version`` first, as every read does);
        a backend may overlap its change check with ``fn`` and run ``fn`` again if the check finds
        another connection's commit."""

    def change_seq(self) -> int:
        """A persistent counter of committed changes: every committed write transaction that changed
        a row advances it (by this or any other process), so a file derived from the database (the
        sidecar indexes in ``<db>.idx/``) can say which state it matches. It starts at a random value
        per database (a copy made before a write differs from the original after it), never
        goes back, is left out of export/import, and is 0 for a database never written."""

    def user_version(self) -> int:
        """The schema version of the database."""

    def integrity_check(self) -> str:
        """``"ok"`` when the database is consistent."""

    def counts(self) -> dict[str, int]:
        """Keys chunks, chunks_total, edges, edges_total, cooccurrence, facts, embeddings."""

    def edge_count(self) -> int:
        """Number of edges, valid or not."""

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...

    # -- chunks: reads ------------------------------------------------------------------------
    def chunk_row(self, chunk_id: str) -> ChunkRow | None: ...

    def chunk_rows_by_nid(self, nids: Sequence[int]) -> dict[int, ChunkRow]: ...

    def nid_of(self, chunk_id: str) -> int | None: ...

    def chunk_keys_by_id(self, chunk_ids: Sequence[str]) -> dict[str, ChunkKey]:
        """Public id -> (nid, id) for the ids that exist."""

    def chunk_alive(self, nid: int) -> bool:
        """Whether chunk ``nid`` exists and is not deleted."""

    def find_reusable_chunk(self, text: str, user_id: str | None, agent_id: str | None,
                            run_id: str | None) -> ChunkKey | None:
        """The oldest live non-turn chunk with exactly ``text`` in the scope."""

    def find_reusable_chunks(self, keys: Sequence[tuple[str, tuple]], hashes: dict[str, int] | None = None,
                             *, turns: bool = False) -> dict[tuple[str, tuple], ChunkKey]:
        """Bulk ``find_reusable_chunk`` over (text, scope) keys; ``hashes`` is filled text -> text_hash;
        ``turns``: turns are candidates too (``Memory.add(dedupe=True)``)."""

    def chunk_nids(self, *, filters: Mapping[str, str | None], limit: int | None = None,
                   live_only: bool = True) -> list[int]:
        """Live (``live_only=False``: also deleted) chunks whose columns equal ``filters`` (keys user_id,
        agent_id, run_id, session_id, kind; a ``None`` value = the column is NULL), ascending nid, at most
        ``limit``."""

    def chunk_columns(self, *, with_text: bool = True, batch: int = 50000) -> Iterator[ChunkColumns]:
        """Every chunk (deleted ones with alive 0) in ascending nid, in column batches."""

    def texts_of(self, nids: Sequence[int]) -> list[tuple[int, str]]:
        """(nid, text) of the given chunks."""

    def chunk_texts(self, nids: Sequence[int]) -> dict[int, str]: ...

    def recent_chunk_texts(self, limit: int = 64) -> list[str]:
        """Texts of the newest live chunks (by created_at, then nid), newest first."""

    def previous_turn(self, session_id: str, user_id: str | None, agent_id: str | None,
                      run_id: str | None) -> int | None:
        """nid of the last live turn of a session in the scope."""

    def history(self, nid: int) -> list[HistoryRow]:
        """update/delete events of a chunk, oldest first."""

    def last_update_event(self) -> int:
        """Id of the newest text-update event (0 if none)."""

    def q_value_of(self, nid: int) -> float:
        """Raises ``KeyError`` for an unknown nid."""

    def max_successor_q(self, nid: int) -> float | None:
        """Max Q over the live destinations of the chunk's valid out-edges (``None`` if none)."""

    def chunk_rows_for_mining(self, nids: Sequence[int]) -> Iterable[MiningChunkRow]:
        """The live chunks among ``nids``, any order."""

    def sleep_chunk_arrays(self) -> np.ndarray:
        """Every chunk as a ``CHUNK_DTYPE`` array ordered by nid."""

    # -- chunks: writes -----------------------------------------------------------------------
    def insert_chunk(self, *, text: str, kind: str, created_at: float, q_value: float,
                     event_time: float | None = None, user_id: str | None = None, agent_id: str | None = None,
                     run_id: str | None = None, session_id: str | None = None,
                     metadata: Mapping[str, Any] | None = None, importance: float = 5.0,
                     chunk_id: str | None = None) -> ChunkKey: ...

    def insert_chunks_bulk(self, rows: Sequence[Mapping[str, Any]]) -> list[ChunkKey]:
        """Insert chunks with consecutive nids. Row keys: text, kind, created_at, q_value and optionally
        text_hash, event_time, importance, user_id, agent_id, run_id, session_id, metadata."""

    def set_chunk_deleted(self, nid: int, now: float) -> None:
        """Soft-delete: the chunk, its valid edges, its facts; co-occurrence pairs dropped; history event."""

    def chunk_metadata_json(self, nids: Sequence[int] | None) -> list[tuple[int, str]]:
        """``(nid, metadata JSON text)`` of the given chunks (missing nids are left out), of every
        stored chunk (live or deleted) for ``None``; unparsed (``metadata_filter.FilterCache``)."""

    def set_chunk_metadata(self, nid: int, metadata: Mapping[str, Any]) -> None:
        """Replace a chunk's metadata (a JSON object)."""

    def set_chunk_text(self, nid: int, text: str, now: float) -> None:
        """Replace the text, keeping the old one as an ``update`` history event."""

    def touch_chunks(self, nids: Sequence[int], now: float) -> None:
        """Access reinforcement: access_count + 1, importance + 0.1 (cap 10), last_accessed_at = now."""

    def touch_chunks_batch(self, touches: Sequence[tuple[Sequence[int], float]]) -> None:
        """``touch_chunks(nids, now)`` for each ``(nids, now)`` in order (the queued searches of one
        reinforcement write; a backend may apply them in one statement)."""

    def set_q_value(self, nid: int, q: float) -> None: ...

    def update_q_values(self, rows: Iterable[tuple[float, int]]) -> None:
        """rows of (q_value, nid)."""

    # -- edges: reads ---------------------------------------------------------------------------
    def edge_row(self, edge_id: str) -> EdgeRow | None: ...

    def edge_rows(self, *, nid: int | None = None, valid_only: bool = True,
                  direction: str = "both") -> list[EdgeRow]:
        """Edges (of chunk ``nid`` if given: direction out / in / both), ascending eid."""

    def edge_rows_by_ids(self, edge_ids: Sequence[str]) -> list[EdgeRow]:
        """The edges with these public ids (any order)."""

    def edge_states(self, eids: Sequence[int]) -> list[tuple[int, int, int, int, float, bool]]:
        """(eid, src, dst, rel_code, confidence, valid) of the given edges, ascending eid."""

    def edge_ids(self, eids: Sequence[int]) -> dict[int, str]: ...

    def edge_judge_rows(self, eids: Sequence[int]) -> dict[int, JudgeEdgeRow]: ...

    def negative_excitatory_out_edges(self, srcs: Sequence[int]) -> dict[int, list[OutEdge]]:
        """src -> its valid caused/enabled edges with a negative polarity, ascending eid."""

    def chain_out_edges(self, srcs: Sequence[int]) -> list[ChainEdge]:
        """Valid out-edges of ``srcs`` except no_effect and temporal ones."""

    def task_tag_nodes(self, task_tag: str) -> list[int]:
        """Endpoints of the valid edges carrying ``task_tag``."""

    def edges_between(self, a: Sequence[int], b: Sequence[int]) -> list[PathEdge]:
        """Valid edges with one end in ``a`` and the other in ``b`` (either direction)."""

    def superseded_chunks(self, nids: Sequence[int]) -> dict[int, str]:
        """nid -> id of the chunk that supersedes it: (a) a valid edge into it annotated ``superseded_by``
        a newer edge (whose destination supersedes it) or (b) a valid meta edge of subtype
        invalidates/supersedes from a live chunk into it."""

    def tagged_edge_rows(self) -> list[TaggedEdgeRow]:
        """Every valid caused/enabled/prevented edge with a task tag."""

    def has_new_tagged_decisions(self, since: float) -> bool:
        """Whether a valid tagged caused/enabled/prevented edge or its decision is newer than ``since``."""

    def projection_arrays(self) -> dict[str, Any]:
        """One consistent snapshot for the CSR projection: ``n_nodes`` (max nid + 1), ``edges`` (valid
        edges, ``PROJECTION_EDGE_DTYPE``), ``co`` (co-occurrence pairs, ``PROJECTION_CO_DTYPE``)."""

    def sleep_edge_arrays(self, *, relations: Sequence[str] | None = None) -> np.ndarray:
        """Every valid edge (of the given relations) as an ``EDGE_DTYPE`` array ordered by eid."""

    # -- edges: writes ------------------------------------------------------------------------
    def insert_edge(self, *, src: int, dst: int, relation: "Relation", subtype: str | None, confidence: float,
                    source: str, polarity: str | None, task_tag: str | None, event_time: float | None,
                    discovered_at: float, polarity_origin: str | None = None) -> tuple[int, str]:
        """Returns (eid, id). ``polarity_origin`` given/guessed/unknown (default: given if a polarity)."""

    def insert_edges_bulk(self, rows: Sequence[Mapping[str, Any]]) -> list[tuple[int, str]]:
        """Insert edges with consecutive eids. Row keys: src, dst, relation (``Relation``), confidence,
        source, discovered_at and optionally subtype, polarity, polarity_origin, task_tag, event_time."""

    def set_edge_invalid(self, eid: int, now: float, reason: str | None,
                         superseded_by: str | None = None) -> None: ...

    def restore_edge(self, eid: int) -> None:
        """Clear valid_to, invalid_reason and superseded_by."""

    def update_edge_confidences(self, rows: Iterable[tuple[float, int]]) -> None:
        """rows of (confidence, eid)."""

    def retire_edges(self, rows: Iterable[tuple[float, str, float, int]]) -> None:
        """rows of (valid_to, invalid_reason, confidence, eid); already-invalid edges are left alone."""

    def annotate_superseded(self, rows: Iterable[tuple[str, int]]) -> int:
        """rows of (superseded_by edge id, eid); only valid, unannotated edges change; returns how many."""

    def retire_superseded(self, rows: Iterable[tuple[float, str, str, int]]) -> int:
        """rows of (valid_to, reason, superseded_by edge id, eid); only valid edges; returns how many."""

    # -- co-occurrence (Hebbian) ------------------------------------------------------------------
    def cooccurrence_weights(self, nids: Sequence[int]) -> dict[tuple[int, int], float]:
        """Weights of the known pairs among ``nids`` (keys (a, b), a < b)."""

    def cooccurrence_row(self, a: int, b: int) -> CooccurrenceRow | None: ...

    def cooccurrence_between(self, a: Sequence[int], b: Sequence[int]) -> list[CooccurrencePair]:
        """Pairs with one member in ``a`` and the other in ``b``."""

    def upsert_cooccurrence(self, rows: Sequence[tuple[int, int, float, float]]) -> None:
        """rows of (a, b, weight, now), a < b: insert new pairs; set weight and bump hits of known ones."""

    def credit_cooccurrence(self, rows: Sequence[tuple[int, int, float, int, float]]) -> None:
        """rows of (a, b, weight, credits, now), one per pair, a < b: the end state of ``credits``
        successive ``upsert_cooccurrence`` calls (weight and updated_at set, hits + credits)."""

    def sleep_cooccurrence_arrays(self) -> np.ndarray:
        """Every pair as a ``COOC_DTYPE`` array."""

    def set_cooccurrence_weights(self, rows: Iterable[tuple[float, int, int]]) -> None:
        """rows of (weight, a, b); updated_at is left alone."""

    def delete_cooccurrence(self, rows: Iterable[tuple[int, int]]) -> None: ...

    # -- facts --------------------------------------------------------------------------------------
    def insert_fact(self, *, key: str, value: str, nid: int, user_id: str | None, agent_id: str | None,
                    run_id: str | None, confidence: float, now: float) -> int: ...

    def facts_with_key(self, key: str, user_id: str | None, agent_id: str | None,
                       run_id: str | None) -> list[FactRow]:
        """Valid facts of a key in the scope, oldest first."""

    def retire_fact(self, fid: int, now: float) -> None: ...

    # -- embeddings -------------------------------------------------------------------------------
    def embeddings_for(self, model: str) -> Iterator[StoredVector]:
        """Current vectors (text unchanged since embedding) of live chunks for ``model``."""

    def embeddings_of(self, nids: Sequence[int], model: str) -> list[tuple[int, bytes]]:
        """(nid, vector) of the given chunks' current vectors for ``model``."""

    def chunks_missing_embedding(self, model: str, *, limit: int | None = None,
                                 after_nid: int = 0) -> list[tuple[int, str]]:
        """(nid, text) of live chunks without a current vector for ``model``, ascending nid.

        This *is* the background embedding queue: a write commits chunks without vectors,
        so a crash never loses queued work. ``limit``/``after_nid`` page through it."""

    def max_chunk_nid(self) -> int:
        """The highest chunk id stored, live or not (0 for none): a chunk written later gets a higher one."""

    def has_embeddings(self, model: str) -> bool:
        """True when at least one vector of ``model`` is stored (an indexed existence check)."""

    def embedding_backlog(self, model: str) -> tuple[int, int]:
        """(live chunks, live chunks with a current vector for ``model``)."""

    def put_embeddings(self, rows: Iterable[EmbeddingRow | tuple[int, str, int, int, bytes]]) -> None:
        """Insert or replace vectors."""

    # -- sleep bookkeeping ----------------------------------------------------------------------------
    def judged_pairs(self) -> set[str]:
        """Keys 'judged:...' of supersession pairs already decided."""

    def remember_judged(self, keys: Iterable[str], verdict: str = "decided") -> None: ...

    # -- repeated evidence --------------------------------------------------------------------------
    def valid_edges_for_pairs(self, keys: Sequence[tuple[int, int, str, str | None]]) -> dict[tuple, EvidenceEdge]:
        """(src, dst, relation, subtype) -> the oldest valid edge with exactly those, for the keys given."""

    def add_edge_evidence(self, rows: Iterable[tuple[float, int, str | None, str | None, int]]) -> None:
        """rows of (new confidence, evidence to add, polarity or None = keep, polarity_origin, eid)."""

    # -- purge, export, import, scoped counts ------------------------------------------------------
    def purge_chunks(self, nids: Sequence[int]) -> int:
        """Delete the chunks and everything derived from them from every table, freed bytes zeroed;
        integer keys are never handed out again. In the caller's transaction; returns how many."""

    def compact(self) -> bool:
        """Rewrite the file so deleted bytes leave the disk (outside transactions); False if another
        connection prevented emptying the write-ahead log."""

    def export_records(self, *, vectors: bool = False) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every row as (type, record) with public ids (meta, chunk, history, edge, cooccurrence,
        fact[, embedding]), in key order, from one consistent snapshot."""

    def existing_ids(self, ids: Sequence[str], kind: str) -> set[str]:
        """Which of the chunk (``kind='chunk'``) or edge ids exist already."""

    def import_records(self, records: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, int]:
        """Insert checked dump records in the caller's transaction (keys after the current ones, in
        dump order); returns counts by type."""

    def scoped_counts(self, filters: Mapping[str, str | None]) -> dict[str, int]:
        """``counts()`` of the chunks whose user_id/agent_id/run_id equal ``filters``."""


# ---------------------------------------------------------------------------------- shared helpers
#: ids per ``IN (...)`` list: below SQLite's default limit of 999 host parameters
BATCH = 900

T = TypeVar("T")


def batched(ids: Iterable[T], size: int = BATCH) -> Iterator[list[T]]:
    """Consecutive slices of at most ``size`` items (the batched ``IN (...)`` pattern)."""
    items = list(ids)
    for i in range(0, len(items), size):
        yield items[i:i + size]


def text_hash(text: str) -> int:
    """64-bit hash of the text as a signed integer: a compact key for exact-reuse lookups
    (the text itself is compared after the lookup, so a collision cannot merge two texts)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


_id_lock = threading.Lock()
_id_last = [0]


def new_ids(n: int) -> list[str]:
    """``n`` unique 32-hex-digit ids, time-ordered like UUIDv7 (64-bit ns clock + 64 random bits).

    Time order keeps inserts at the end of the UNIQUE index instead of scattering them across it,
    which is what makes bulk writes fast on a large store."""
    with _id_lock:
        start = max(time.time_ns(), _id_last[0] + 1)
        _id_last[0] = start + n
    if n == 1:
        return [f"{start:016x}{os.urandom(8).hex()}"]
    # (clock + i, 8 random bytes) big-endian, hex-encoded at once: the same text as
    # f"{start + i:016x}{random:016x}" per id, without formatting each one in Python
    raw = np.empty((n, 2), dtype=">u8")
    raw[:, 0] = np.arange(start, start + n, dtype=np.uint64)
    raw[:, 1] = np.frombuffer(os.urandom(8 * n), dtype=">u8")
    text = raw.tobytes().hex()
    return [text[i:i + 32] for i in range(0, 32 * n, 32)]


def new_id() -> str:
    return new_ids(1)[0]


def is_dsn(target: Any) -> bool:
    """Whether ``target`` names a PostgreSQL database (a ``postgresql://`` / ``postgres://`` URL)."""
    return isinstance(target, str) and target.lstrip().lower().startswith(("postgresql://", "postgres://"))


def check_path(path: Any) -> str:
    """A database path as a string: ``TypeError`` for anything that is not a path (``None``, ``5``,
    bytes), ``ValueError`` for an empty one; never a file named ``None``."""
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file path (str or os.PathLike) or ':memory:', got {type(path).__name__}")
    p = os.fspath(path)
    if not isinstance(p, str):
        raise TypeError(f"path must be a text path, got {type(p).__name__}")
    if not p.strip():
        raise ValueError("path must be a non-empty file path or ':memory:'")
    if "\x00" in p:
        raise ValueError("path must not contain NUL characters")
    return p
