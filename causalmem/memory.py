"""``Memory``: the one public entry point. Orchestrates the store, the projection, the indexes,
retrieval, learning and sleep; owns no algorithm of its own."""
from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import math
import os
import threading
import time
import uuid
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from . import ingest
from .config import Config, SpreadParams
from .errors import ConfigurationError
from .lexical import BM25Index
from .projection import ChunkTable, Projection
from .store import Store, row_to_chunk, row_to_edge, text_hash
from .types import (
    SOURCES_CONFIDENCE,
    Activation,
    Chunk,
    Edge,
    Hit,
    InterventionReport,
    PredictedOutcome,
    Relation,
    SleepReport,
    to_timestamp,
)

log = logging.getLogger("causalmem")

_EXCITATORY = ("caused", "enabled")
_MAX_SEEDS = 3
_SEED_RATIO = 0.5


class Memory:
    """Long-term causal memory on one SQLite file (or ``":memory:"``).

    >>> with Memory("agent.db", embedder=None) as mem:
    ...     mem.record_decision("deploy without tests", "production crash")
    ...     mem.search_causal("deploy without tests")
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        config: Config | None = None,
        clock: Callable[[], float] | None = None,
        embedder: Any = "auto",
        judge: Any = None,
        distiller: Any = None,
    ) -> None:
        if config is not None and not isinstance(config, Config):
            raise TypeError(f"config must be a causalmem.Config, got {type(config).__name__}")
        if clock is not None and not callable(clock):
            raise TypeError("clock must be a zero-argument callable returning POSIX seconds")
        self.config = config or Config()
        self._clock = clock or time.time
        self._lock = threading.RLock()
        self._store = Store(path, busy_timeout_ms=self.config.busy_timeout_ms)
        self.path = self._store.path
        self._effects: list[Callable[[], None]] | None = None
        self._projection = Projection(self._store.projection_arrays, self.config, self._clock)
        self._chunks: ChunkTable | None = None
        self._lexical: BM25Index | None = None
        self._vectors = None
        self._embedder_spec = embedder
        self._embedder = None
        self._embedder_resolved = embedder is None
        self.judge = judge
        self.distiller = distiller
        self._data_version = self._store.data_version()
        self._updates_seen = self._store.last_update_event()

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the database. Everything written is already committed."""
        with self._lock:
            self._store.close()

    def now(self) -> float:
        return float(self._clock())

    def __repr__(self) -> str:
        return f"Memory({self.path!r})"

    # ------------------------------------------------------------------ internals
    @contextlib.contextmanager
    def _write(self) -> Iterator[list[Callable[[], None]]]:
        """One public write = one transaction; in-memory effects apply only after commit."""
        with self._lock:
            outer = self._effects is None
            if outer:
                self._sync_external()
                self._effects = []
            effects = self._effects
            try:
                with self._store.transaction():
                    yield effects
            except BaseException:
                if outer:
                    self._effects = None
                raise
            if outer:
                self._effects = None
                for fx in effects:
                    fx()
                self._data_version = self._store.data_version()

    def _sync_external(self) -> None:
        """Another connection committed: bring the in-memory views up to date with SQLite."""
        dv = self._store.data_version()
        if dv != self._data_version:
            self._data_version = dv
            self._resync()

    def _resync(self) -> None:
        """Re-read chunk columns and patch the text indexes by difference (new, deleted chunks).

        A text *changed* elsewhere (an ``update`` event we did not make) rebuilds them instead."""
        self._projection.mark_stale()
        if self._chunks is None or self._lexical is None:
            self._chunks = self._lexical = self._vectors = None
            return
        if self._store.last_update_event() != self._updates_seen:
            self._chunks = self._lexical = self._vectors = None
            return
        table = ChunkTable()
        lexical = self._lexical
        new_docs: list[tuple[int, str]] = []
        batch: list[tuple] = []
        for row in self._store.iter_chunk_columns(with_text=False):
            batch.append(row)
        table.load(batch)
        alive = np.flatnonzero(table.alive[: table.n])
        indexed = lexical.doc_ids()
        gone = np.setdiff1d(indexed, alive, assume_unique=True)
        fresh = np.setdiff1d(alive, indexed, assume_unique=True)
        for nid in gone.tolist():
            lexical.remove(nid)
        if len(fresh):
            new_docs = self._store.texts_of(fresh.tolist())
            lexical.add_many(new_docs)
        if self._vectors is not None:
            vids = self._vectors.ids()
            for nid in np.setdiff1d(vids, alive).tolist():
                self._vectors.remove(nid)
            want = np.setdiff1d(alive, vids).tolist()
            if want:
                from .semantic import blob_to_vector

                emb = self.embedder
                got = self._store.embeddings_of(want, emb.model_name)
                if got:
                    self._vectors.add(np.asarray([g[0] for g in got], dtype=np.int64),
                                      np.vstack([blob_to_vector(g[1], emb.dim) for g in got]))
                if len(got) < len(want):  # written elsewhere without our model: embed on next use
                    self._vectors = None
        self._chunks = table

    def _tables(self) -> tuple[ChunkTable, BM25Index]:
        """Chunk columns and the BM25 index, built from SQLite on first use."""
        self._sync_external()
        if self._chunks is None or self._lexical is None:
            self._updates_seen = self._store.last_update_event()
            table = ChunkTable()
            index = BM25Index()
            batch: list[tuple] = []
            for row in self._store.iter_chunk_columns():
                batch.append(row)
                if len(batch) == 50000:
                    table.load(batch)
                    index.add_many([(r[0], r[11]) for r in batch if r[10]])
                    batch = []
            table.load(batch)
            index.add_many([(r[0], r[11]) for r in batch if r[10]])
            self._chunks, self._lexical = table, index
        return self._chunks, self._lexical

    @property
    def embedder(self):
        """The resolved embedder (``None`` when the semantic channel is off)."""
        if not self._embedder_resolved:
            from .semantic import resolve_embedder

            self._embedder = resolve_embedder(self._embedder_spec)
            self._embedder_resolved = True
        return self._embedder

    def _vector_index(self):
        emb = self.embedder
        if emb is None:
            return None
        self._sync_external()
        if self._vectors is None:
            from .semantic import VectorIndex, blob_to_vector

            missing = self._store.chunks_missing_embedding(emb.model_name)
            if missing:
                self._embed_and_store([(nid, text) for nid, text in missing])
            index = VectorIndex(emb.dim)
            ids, vecs = [], []
            for nid, _h, blob in self._store.embeddings_for(emb.model_name):
                ids.append(nid)
                vecs.append(blob_to_vector(blob, emb.dim))
            if ids:
                index.add(np.asarray(ids, dtype=np.int64), np.vstack(vecs))
            self._vectors = index
        return self._vectors

    def _encode(self, texts: Sequence[str]) -> np.ndarray | None:
        emb = self.embedder
        if emb is None or not texts:
            return None
        return np.asarray(emb.encode(list(texts)), dtype=np.float32)

    def _embed_and_store(self, items: Sequence[tuple[int, str]]) -> None:
        from .semantic import vector_to_blob

        emb = self.embedder
        vecs = self._encode([t for _, t in items])
        if vecs is None:
            return
        with self._store.transaction():
            self._store.put_embeddings(
                (nid, emb.model_name, emb.dim, text_hash(t), vector_to_blob(v))
                for (nid, t), v in zip(items, vecs))

    def _after_chunk_insert(self, fx: list, nid: int, text: str, kind: str, created: float, event: float | None,
                            q: float, scope: tuple, session_id: str | None, vec: np.ndarray | None) -> None:
        if vec is not None:
            from .semantic import vector_to_blob

            emb = self.embedder
            self._store.put_embeddings([(nid, emb.model_name, emb.dim, text_hash(text), vector_to_blob(vec))])

        def apply() -> None:
            if self._chunks is not None:
                self._chunks.set(nid, kind=kind, created_at=created, event_time=event, q=q, importance=5.0,
                                 user_id=scope[0], agent_id=scope[1], run_id=scope[2], session_id=session_id)
            if self._lexical is not None:
                self._lexical.add(nid, text)
            if self._vectors is not None and vec is not None:
                self._vectors.add(np.asarray([nid], dtype=np.int64), vec[None, :])
            self._projection.n_nodes = max(self._projection.n_nodes, nid + 1)

        fx.append(apply)

    def _require_chunk(self, chunk_id: Any, name: str = "chunk_id") -> tuple:
        if not isinstance(chunk_id, str):
            raise TypeError(f"{name} must be a chunk id string, got {type(chunk_id).__name__}")
        row = self._store.chunk_row(chunk_id)
        if row is None:
            raise KeyError(f"unknown {name} {chunk_id!r}")
        return row

    def _require_edge(self, edge_id: Any) -> tuple:
        if not isinstance(edge_id, str):
            raise TypeError(f"edge_id must be an edge id string, got {type(edge_id).__name__}")
        row = self._store.edge_row(edge_id)
        if row is None:
            raise KeyError(f"unknown edge_id {edge_id!r}")
        return row

    # ------------------------------------------------------------------ write path
    def _get_or_create_chunk(self, fx: list, text: str, kind: str, scope: tuple, *, event_time: float | None,
                             session_id: str | None = None, metadata: dict | None = None,
                             vec: np.ndarray | None = None, reuse: bool = True) -> tuple[int, str, bool]:
        if reuse:
            found = self._store.find_reusable_chunk(text, *scope)
            if found is not None:
                return found[0], found[1], False
        now = self.now()
        q0 = self.config.q_init
        nid, cid = self._store.insert_chunk(
            text=text, kind=kind, created_at=now, q_value=q0, event_time=event_time, user_id=scope[0],
            agent_id=scope[1], run_id=scope[2], session_id=session_id, metadata=metadata)
        self._after_chunk_insert(fx, nid, text, kind, now, event_time, q0, scope, session_id, vec)
        return nid, cid, True

    def _insert_edge(self, fx: list, src: int, dst: int, relation: Relation, *, confidence: float, source: str,
                     polarity: str | None, task_tag: str | None, event_time: float | None,
                     subtype: str | None = None) -> tuple[int, str]:
        eid, edge_id = self._store.insert_edge(
            src=src, dst=dst, relation=relation, subtype=subtype, confidence=confidence, source=source,
            polarity=polarity, task_tag=task_tag, event_time=event_time, discovered_at=self.now())

        def apply() -> None:
            self._projection.edge_added(eid, src, dst, relation, confidence)

        fx.append(apply)
        return eid, edge_id

    def _invalidate_eid(self, fx: list, eid: int, reason: str | None, superseded_by: str | None = None) -> None:
        self._store.set_edge_invalid(eid, self.now(), reason, superseded_by)
        fx.append(lambda: self._projection.edge_invalidated(eid))

    def _count_write(self, fx: list, n: int = 1) -> None:
        fx.append(lambda: self._projection.count_write(n))

    def _validated_record(self, decision: Any, outcome: Any, relation: Any, source: Any, confidence: Any,
                          polarity: Any, task_tag: Any, event_time: Any, user_id: Any, agent_id: Any,
                          run_id: Any, _cache: dict | None = None) -> dict:
        ingest.check_text(decision, "decision")
        ingest.check_text(outcome, "outcome")
        if decision == outcome:
            raise ValueError("decision and outcome are the same text; an edge needs two different chunks")
        key = (relation, source, confidence, polarity, task_tag, event_time, user_id, agent_id, run_id)
        meta = None
        if _cache is not None:
            try:
                meta = _cache.get(key)
            except TypeError:  # unhashable argument: validated below, which names it
                _cache = None
        if meta is None:
            rel = Relation.parse(relation)
            source = ingest.check_source(source)
            conf = SOURCES_CONFIDENCE.get(source, 0.6) if confidence is None else confidence
            if task_tag is not None and not isinstance(task_tag, str):
                raise TypeError(f"task_tag must be a string or None, got {type(task_tag).__name__}")
            meta = dict(rel=rel, subtype=Relation.subtype_of(relation), source=source,
                        confidence=ingest.check_confidence(conf), polarity=ingest.check_polarity(polarity),
                        task_tag=task_tag, event_time=to_timestamp(event_time, name="event_time"),
                        scope=(ingest.check_scope_value(user_id, "user_id"),
                               ingest.check_scope_value(agent_id, "agent_id"),
                               ingest.check_scope_value(run_id, "run_id")))
            if _cache is not None:
                _cache[key] = meta
        return dict(meta, decision=decision, outcome=outcome)

    def _record_batch(self, fx: list, items: Sequence[dict], vecs: dict[str, np.ndarray] | None = None) -> list[Edge]:
        """Write validated decision→outcome items in the current transaction, in bulk."""
        vecs = vecs or {}
        now = self.now()
        q0 = self.config.q_init
        # 1. chunks: reuse by exact text within scope, create the rest in one statement
        keys: dict[tuple[str, tuple], str] = {}
        for a in items:
            keys.setdefault((a["decision"], a["scope"]), "decision")
            keys.setdefault((a["outcome"], a["scope"]), "outcome")
        hashes: dict[str, int] = {}
        found = self._store.find_reusable_chunks(list(keys), hashes)
        new_keys = [k for k in keys if k not in found]
        created = self._store.insert_chunks_bulk([
            {"text": t, "text_hash": hashes[t], "kind": keys[(t, sc)], "created_at": now, "event_time": None,
             "q_value": q0, "user_id": sc[0], "agent_id": sc[1], "run_id": sc[2]} for t, sc in new_keys])
        chunk_of = dict(found)
        chunk_of.update(zip(new_keys, created))
        emb_rows = []
        if self.embedder is not None:
            from .semantic import vector_to_blob

            emb = self.embedder
            emb_rows = [(nid, emb.model_name, emb.dim, text_hash(t), vector_to_blob(vecs[t]))
                        for (t, _sc), (nid, _cid) in zip(new_keys, created) if t in vecs]
            self._store.put_embeddings(emb_rows)
        # 2. edges
        rows = []
        guessed: dict[str, str | None] = {}
        for a in items:
            d_nid = chunk_of[(a["decision"], a["scope"])][0]
            o_nid = chunk_of[(a["outcome"], a["scope"])][0]
            polarity = a["polarity"]
            if polarity is None:
                polarity = guessed.get(a["outcome"], "?")
                if polarity == "?":
                    polarity = guessed[a["outcome"]] = ingest.guess_polarity(a["outcome"])
            rows.append({"src": d_nid, "dst": o_nid, "relation": a["rel"], "subtype": a["subtype"],
                         "confidence": a["confidence"], "source": a["source"], "polarity": polarity,
                         "task_tag": a["task_tag"], "event_time": a["event_time"], "discovered_at": now})
        inserted = self._store.insert_edges_bulk(rows)
        # 3. contradiction fast path (rule judge): a new success retires older failures of the same decision
        failures: dict[int, list[tuple[int, str, int]]] | None = None
        for r, (eid, edge_id) in zip(rows, inserted):
            if r["relation"].value not in _EXCITATORY:
                continue
            if failures is None:  # older failures only: this batch's own edges are added in order below
                first_new = inserted[0][0]
                failures = {src: [f for f in lst if f[0] < first_new] for src, lst in
                            self._store.negative_excitatory_out_edges(
                                [x["src"] for x in rows if x["relation"].value in _EXCITATORY
                                 and x["polarity"] == "positive"]).items()}
            if r["polarity"] == "positive":
                keep = []
                for old_eid, _old_id, old_dst in failures.get(r["src"], []):
                    if old_dst != r["dst"]:
                        self._invalidate_eid(fx, old_eid, f"superseded by {edge_id} (rule: new success)", edge_id)
                    else:
                        keep.append((old_eid, _old_id, old_dst))
                failures[r["src"]] = keep
            elif r["polarity"] == "negative":
                failures.setdefault(r["src"], []).append((eid, edge_id, r["dst"]))
        # 4. in-memory views, after commit
        new_chunks = [(nid, t, keys[(t, sc)], sc) for (t, sc), (nid, _c) in zip(new_keys, created)]
        new_vecs = {nid: vecs[t] for nid, t, _k, _sc in new_chunks if t in vecs}

        def apply() -> None:
            if self._chunks is not None:
                for nid, _t, kind, sc in new_chunks:
                    self._chunks.set(nid, kind=kind, created_at=now, event_time=None, q=q0, importance=5.0,
                                     user_id=sc[0], agent_id=sc[1], run_id=sc[2], session_id=None)
            if self._lexical is not None:
                self._lexical.add_many([(nid, t) for nid, t, _k, _sc in new_chunks])
            if self._vectors is not None and new_vecs:
                self._vectors.add(np.fromiter(new_vecs, dtype=np.int64, count=len(new_vecs)),
                                  np.vstack(list(new_vecs.values())))
            if new_chunks:
                self._projection.n_nodes = max(self._projection.n_nodes, new_chunks[-1][0] + 1)
            for r, (eid, _e) in zip(rows, inserted):
                self._projection.edge_added(eid, r["src"], r["dst"], r["relation"], r["confidence"])

        fx.append(apply)
        self._count_write(fx)
        ids = {nid: cid for nid, cid in chunk_of.values()}
        return [Edge(id=edge_id, src=ids[r["src"]], dst=ids[r["dst"]], relation=r["relation"].value,
                     confidence=r["confidence"], source=r["source"], polarity=r["polarity"], task_tag=r["task_tag"],
                     event_time=r["event_time"], valid=True, superseded_by=None, discovered_at=now,
                     subtype=r["subtype"]) for r, (_eid, edge_id) in zip(rows, inserted)]

    def record_decision(self, decision: str, outcome: str, *, relation: str = "caused",
                        source: str = "llm_inferred", confidence: float | None = None,
                        polarity: str | None = None, task_tag: str | None = None,
                        event_time: float | _dt.datetime | None = None, user_id: str | None = None,
                        agent_id: str | None = None, run_id: str | None = None) -> Edge:
        """Record that ``decision`` led to ``outcome`` (one transaction); returns the new edge."""
        a = self._validated_record(decision, outcome, relation, source, confidence, polarity, task_tag,
                                   event_time, user_id, agent_id, run_id)
        vecs = self._vectors_for([decision, outcome])
        with self._write() as fx:
            return self._record_batch(fx, [a], vecs)[0]

    def record_many(self, items: Iterable[Any]) -> list[Edge]:
        """Record many decision→outcome pairs in one transaction (all or nothing)."""
        parsed = []
        cache: dict = {}
        for i, item in enumerate(items):
            if isinstance(item, (tuple, list)) and len(item) in (2, 3):
                try:  # the common case: (decision, outcome[, relation]) with default metadata
                    parsed.append(self._validated_record(
                        item[0], item[1], item[2] if len(item) == 3 else "caused", "llm_inferred", None, None,
                        None, None, None, None, None, _cache=cache))
                except (ValueError, TypeError) as exc:
                    raise type(exc)(f"items[{i}]: {exc}") from None
                continue
            if isinstance(item, Mapping):
                kw = dict(item)
                unknown = set(kw) - {"decision", "outcome", "relation", "source", "confidence", "polarity",
                                     "task_tag", "event_time", "user_id", "agent_id", "run_id"}
                if unknown:
                    raise TypeError(f"items[{i}] has unknown keys {sorted(unknown)}")
                if "decision" not in kw or "outcome" not in kw:
                    raise ValueError(f"items[{i}] needs 'decision' and 'outcome'")
            else:
                raise TypeError(f"items[{i}] must be a dict or a (decision, outcome[, relation]) tuple")
            try:
                parsed.append(self._validated_record(
                    kw["decision"], kw["outcome"], kw.get("relation", "caused"), kw.get("source", "llm_inferred"),
                    kw.get("confidence"), kw.get("polarity"), kw.get("task_tag"), kw.get("event_time"),
                    kw.get("user_id"), kw.get("agent_id"), kw.get("run_id"), _cache=cache))
            except (ValueError, TypeError) as exc:
                raise type(exc)(f"items[{i}]: {exc}") from None
        texts = list(dict.fromkeys(t for a in parsed for t in (a["decision"], a["outcome"])))
        vecs = self._vectors_for(texts)
        with self._write() as fx:
            return self._record_batch(fx, parsed, vecs)

    def _vectors_for(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        if self.embedder is None or not texts:
            return {}
        vecs = self._encode(texts)
        return dict(zip(texts, vecs))

    def link(self, src_chunk_id: str, dst_chunk_id: str, relation: str, *, confidence: float | None = None,
             source: str = "rule", polarity: str | None = None, task_tag: str | None = None) -> Edge:
        """Add a typed edge between two existing chunks."""
        rel = Relation.parse(relation)
        source = ingest.check_source(source)
        conf = ingest.check_confidence(SOURCES_CONFIDENCE.get(source, 0.6) if confidence is None else confidence)
        polarity = ingest.check_polarity(polarity)
        with self._write() as fx:
            s = self._require_chunk(src_chunk_id, "src_chunk_id")
            d = self._require_chunk(dst_chunk_id, "dst_chunk_id")
            for row, name in ((s, "src_chunk_id"), (d, "dst_chunk_id")):
                if row[15] is not None:
                    raise ValueError(f"{name} {row[1]!r} was deleted")
            if s[0] == d[0]:
                raise ValueError("src_chunk_id and dst_chunk_id are the same chunk")
            _, edge_id = self._insert_edge(fx, s[0], d[0], rel, confidence=conf, source=source, polarity=polarity,
                                           task_tag=task_tag, event_time=None,
                                           subtype=Relation.subtype_of(relation))
            self._count_write(fx)
        return self.get_edge(edge_id)

    def add_fact(self, key: str, value: str, *, user_id: str | None = None, agent_id: str | None = None,
                 run_id: str | None = None, confidence: float = 0.8, replace_same_key: bool = False) -> Chunk:
        """Store a fact ``key: value`` as a searchable chunk; optionally retire older values of the key."""
        ingest.check_text(key, "key")
        ingest.check_text(value, "value")
        conf = ingest.check_confidence(confidence)
        scope = (ingest.check_scope_value(user_id, "user_id"), ingest.check_scope_value(agent_id, "agent_id"),
                 ingest.check_scope_value(run_id, "run_id"))
        text = f"{key}: {value}"
        vec = self._vectors_for([text]).get(text)
        with self._write() as fx:
            old = self._store.facts_with_key(key, *scope)
            nid, cid, _ = self._get_or_create_chunk(fx, text, "fact", scope, event_time=None,
                                                    metadata={"key": key, "value": value}, vec=vec)
            if replace_same_key:
                for fid, old_nid, _v in old:
                    if old_nid != nid:
                        self._store.retire_fact(fid, self.now())
                        self._delete_nid(fx, old_nid)
            if not any(o[1] == nid for o in old):
                self._store.insert_fact(key=key, value=value, nid=nid, user_id=scope[0], agent_id=scope[1],
                                        run_id=scope[2], confidence=conf, now=self.now())
            self._count_write(fx)
        return self.get(cid)

    def invalidate(self, edge_id: str, reason: str | None = None) -> Edge:
        """Soft-invalidate an edge: kept in the store, skipped by every query."""
        with self._write() as fx:
            row = self._require_edge(edge_id)
            if row[10] is not None:
                raise ValueError(
                    f"edge {edge_id!r} is already invalid (since {row[10]:.3f}, reason: {row[16] or 'none'})")
            self._invalidate_eid(fx, row[0], reason)
            self._count_write(fx)
        return self.get_edge(edge_id)

    def restore(self, edge_id: str) -> Edge:
        """Undo an invalidation or a supersession of an edge."""
        with self._write() as fx:
            row = self._require_edge(edge_id)
            if row[10] is None and row[11] is None:
                raise ValueError(f"edge {edge_id!r} is valid and not superseded; nothing to restore")
            for nid_col, name in ((17, "source"), (18, "destination")):
                alive = self._store.query("SELECT valid_to IS NULL FROM chunks WHERE nid = ?", (row[nid_col],))
                if not alive[0][0]:
                    raise ValueError(f"edge {edge_id!r} cannot be restored: its {name} chunk was deleted")
            self._store.restore_edge(row[0])
            fx.append(lambda: self._projection.edge_restored(row[0]))
            self._count_write(fx)
        return self.get_edge(edge_id)

    def _delete_nid(self, fx: list, nid: int) -> None:
        self._store.set_chunk_deleted(nid, self.now())

        def apply() -> None:
            if self._chunks is not None:
                self._chunks.kill(nid)
            if self._lexical is not None and nid in self._lexical:
                self._lexical.remove(nid)
            if self._vectors is not None:
                self._vectors.remove(nid)
            self._projection.node_deleted(nid)

        fx.append(apply)

    def delete(self, chunk_id: str) -> None:
        """Soft-delete a chunk: never returned again; its edges stop spreading at once."""
        with self._write() as fx:
            row = self._require_chunk(chunk_id)
            if row[15] is not None:
                raise ValueError(f"chunk {chunk_id!r} is already deleted")
            self._delete_nid(fx, row[0])
            self._count_write(fx)

    def delete_all(self, *, user_id: str | None = None, agent_id: str | None = None,
                   run_id: str | None = None) -> int:
        """Soft-delete every chunk of a scope (at least one scope filter is required)."""
        if user_id is None and agent_id is None and run_id is None:
            raise ValueError("delete_all needs user_id, agent_id or run_id (refusing to delete everything)")
        conds, params = ["valid_to IS NULL"], []
        for col, val in (("user_id", user_id), ("agent_id", agent_id), ("run_id", run_id)):
            if val is not None:
                conds.append(f"{col} = ?")
                params.append(val)
        with self._write() as fx:
            nids = self._store.chunk_nids_where(" AND ".join(conds), params)
            for nid in nids:
                self._delete_nid(fx, nid)
            self._count_write(fx, max(1, len(nids)))
        return len(nids)

    def update(self, chunk_id: str, text: str) -> Chunk:
        """Replace a chunk's text (re-indexed and re-embedded); the old text stays in ``history``."""
        ingest.check_text(text, "text")
        vec = self._vectors_for([text]).get(text)
        with self._write() as fx:
            row = self._require_chunk(chunk_id)
            if row[15] is not None:
                raise ValueError(f"chunk {chunk_id!r} was deleted")
            nid = row[0]
            self._store.set_chunk_text(nid, text, self.now())
            if vec is not None:
                from .semantic import vector_to_blob

                emb = self.embedder
                self._store.put_embeddings([(nid, emb.model_name, emb.dim, text_hash(text), vector_to_blob(vec))])

            def apply() -> None:
                self._updates_seen = self._store.last_update_event()
                if self._lexical is not None:
                    self._lexical.update(nid, text)
                if self._vectors is not None and vec is not None:
                    self._vectors.add(np.asarray([nid], dtype=np.int64), vec[None, :])

            fx.append(apply)
            self._count_write(fx)
        return self.get(chunk_id)

    def history(self, chunk_id: str) -> list[dict]:
        """Events of a chunk: create, update (old → new text), delete; oldest first."""
        row = self._require_chunk(chunk_id)
        events = [{"event": e, "old_text": o, "new_text": n, "at": at} for e, o, n, at in self._store.history(row[0])]
        first_text = next((e["old_text"] for e in events if e["event"] == "update"), row[2])
        return [{"event": "create", "old_text": None, "new_text": first_text, "at": row[6]}] + events

    # ------------------------------------------------------------------ conversation ingest
    def add(self, messages: Any, *, user_id: str | None = None, agent_id: str | None = None,
            run_id: str | None = None, session_id: str | None = None, metadata: Mapping | None = None,
            event_time: float | _dt.datetime | None = None, infer: bool = False) -> list[Chunk]:
        """Store each turn of a conversation as its own chunk, linked in order by temporal edges."""
        turns = ingest.normalize_messages(messages)
        scope = (ingest.check_scope_value(user_id, "user_id"), ingest.check_scope_value(agent_id, "agent_id"),
                 ingest.check_scope_value(run_id, "run_id"))
        if session_id is not None and (not isinstance(session_id, str) or not session_id):
            raise ValueError(f"session_id must be a non-empty string or None, got {session_id!r}")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise TypeError(f"metadata must be a mapping, got {type(metadata).__name__}")
        et = to_timestamp(event_time, name="event_time")
        if infer and self.distiller is None:
            raise ConfigurationError(
                "add(..., infer=True) needs an LLM distiller: pass Memory(distiller=LLMDistiller(...)) or set "
                "CAUSALMEM_LLM_BASE_URL and use causalmem.LLMDistiller.from_env()")
        distilled = self.distiller.distill([{"speaker": s, "text": t} for s, t, _ in turns]) if infer else []
        session = session_id or uuid.uuid4().hex
        texts = [t if s is None or t.startswith(f"{s}:") else f"{s}: {t}" for s, t, _ in turns]
        vecs = self._encode(texts)
        rows = []
        for i, ((speaker, _t, extra), text) in enumerate(zip(turns, texts)):
            meta = dict(metadata or {})
            meta.update({k: v for k, v in extra.items() if _jsonable(v)})
            if speaker is not None:
                meta.setdefault("speaker", speaker)
            turn_time = et
            for key in ("event_time", "timestamp", "time"):
                if key in extra:
                    turn_time = to_timestamp(extra[key], name=f"messages[{i}].{key}")
                    break
            rows.append({"text": text, "kind": "turn", "event_time": turn_time, "q_value": self.config.q_init,
                         "user_id": scope[0], "agent_id": scope[1], "run_id": scope[2], "session_id": session,
                         "metadata": meta})
        with self._write() as fx:
            now = self.now()
            for r in rows:
                r["created_at"] = now
            prev = self._store.previous_turn(session, *scope)
            created = self._store.insert_chunks_bulk(rows)
            nids = [nid for nid, _ in created]
            if vecs is not None:
                from .semantic import vector_to_blob

                emb = self.embedder
                self._store.put_embeddings((nid, emb.model_name, emb.dim, text_hash(r["text"]), vector_to_blob(v))
                                           for nid, r, v in zip(nids, rows, vecs))
            chain = ([prev] if prev is not None else []) + nids
            # source "session": turn adjacency is structure, not a learned temporal relation, so it
            # decays like rule edges (×0.99/day) instead of the 7-day half-life of "temporal" edges.
            edge_rows = [{"src": a, "dst": b, "relation": Relation.TEMPORAL, "confidence": 1.0, "source": "session",
                          "event_time": r["event_time"], "discovered_at": now}
                         for a, b, r in zip(chain, chain[1:], rows[len(rows) - len(chain) + 1:])]
            inserted = self._store.insert_edges_bulk(edge_rows)
            if distilled:
                self._apply_distilled(fx, distilled, scope, et)

            def apply() -> None:
                if self._chunks is not None:
                    for nid, r in zip(nids, rows):
                        self._chunks.set(nid, kind="turn", created_at=now, event_time=r["event_time"],
                                         q=r["q_value"], importance=5.0, user_id=scope[0], agent_id=scope[1],
                                         run_id=scope[2], session_id=session)
                if self._lexical is not None:
                    self._lexical.add_many([(nid, r["text"]) for nid, r in zip(nids, rows)])
                if self._vectors is not None and vecs is not None:
                    self._vectors.add(np.asarray(nids, dtype=np.int64), vecs)
                self._projection.n_nodes = max(self._projection.n_nodes, nids[-1] + 1)
                for er, (eid, _e) in zip(edge_rows, inserted):
                    self._projection.edge_added(eid, er["src"], er["dst"], Relation.TEMPORAL, 1.0)

            fx.append(apply)
            self._count_write(fx)
        return [Chunk(id=cid, text=r["text"], kind="turn", q_value=r["q_value"], importance=5.0, created_at=now,
                      event_time=r["event_time"], user_id=scope[0], agent_id=scope[1], run_id=scope[2],
                      session_id=session, metadata=r["metadata"]) for (_nid, cid), r in zip(created, rows)]

    def _apply_distilled(self, fx: list, items: Sequence[Any], scope: tuple, et: float | None) -> None:
        for item in items:
            kind = getattr(item, "kind", None)
            text = getattr(item, "text", None)
            if not isinstance(text, str) or not text.strip():
                continue
            decision = getattr(item, "decision", None)
            if kind == "causal" and isinstance(decision, str) and decision.strip() and decision != text:
                rel = getattr(item, "relation", None) or "caused"
                try:
                    Relation.parse(rel)
                except ValueError:
                    rel = "caused"
                a = self._validated_record(decision, text, rel, "distill", None, None, getattr(item, "task_tag", None),
                                           et, *scope)
                self._record_batch(fx, [a])
            elif kind in ("fact", "lesson"):
                self._get_or_create_chunk(fx, text, kind, scope, event_time=et, metadata={"source": "distill"})

    def get_all(self, filters: Mapping[str, Any] | None = None, *, limit: int = 100,
                **kwargs: Any) -> list[Chunk]:
        """Chunks matching exact-value filters (user_id, agent_id, run_id, session_id, kind), oldest first."""
        flt = dict(filters or {})
        flt.update(kwargs)
        allowed = {"user_id", "agent_id", "run_id", "session_id", "kind"}
        bad = set(flt) - allowed
        if bad:
            raise ValueError(f"unknown filter keys {sorted(bad)}; allowed: {sorted(allowed)}")
        if not isinstance(limit, int) or limit <= 0:
            raise ValueError(f"limit must be a positive integer, got {limit!r}")
        conds, params = ["valid_to IS NULL"], []
        for k, v in flt.items():
            conds.append(f"{k} = ?" if v is not None else f"{k} IS NULL")
            if v is not None:
                params.append(v)
        nids = self._store.chunk_nids_where(" AND ".join(conds), params, limit=limit)
        rows = self._store.chunk_rows_by_nid(nids)
        return [row_to_chunk(rows[n]) for n in nids if n in rows]

    # ------------------------------------------------------------------ reads
    def get(self, chunk_id: str) -> Chunk:
        return row_to_chunk(self._require_chunk(chunk_id))

    def get_edge(self, edge_id: str) -> Edge:
        return row_to_edge(self._require_edge(edge_id))

    def edges(self, chunk_id: str | None = None, *, valid_only: bool = True) -> list[Edge]:
        nid = None if chunk_id is None else self._require_chunk(chunk_id)[0]
        return [row_to_edge(r) for r in self._store.edge_rows(nid=nid, valid_only=valid_only)]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            c = self._store.counts()
            c["path"] = self.path
            c["schema_version"] = self._store.user_version()
            c["graph_rebuilds"] = self._projection.rebuilds
            c["embedder"] = None if self._embedder is None else self._embedder.model_name
            return c

    # ------------------------------------------------------------------ causal queries
    def _scope_args(self, user_id, agent_id, run_id) -> dict:
        return {"user_id": ingest.check_scope_value(user_id, "user_id"),
                "agent_id": ingest.check_scope_value(agent_id, "agent_id"),
                "run_id": ingest.check_scope_value(run_id, "run_id")}

    def _causal_seeds(self, query: str, scope: dict, task_tag: str | None) -> tuple[np.ndarray, list[int]]:
        """Chunks matching the query: the exact text if stored, else the best BM25 matches."""
        table, lexical = self._tables()
        mask = table.scope_mask(**scope)
        if task_tag is not None:
            tagged = self._store.query(
                "SELECT src FROM edges WHERE task_tag = ? AND valid_to IS NULL UNION "
                "SELECT dst FROM edges WHERE task_tag = ? AND valid_to IS NULL", (task_tag, task_tag))
            tmask = np.zeros_like(mask)
            idx = np.asarray([r[0] for r in tagged if r[0] < len(mask)], dtype=np.int64)
            tmask[idx] = True
            mask = mask & tmask
        exact = self._store.find_reusable_chunk(query.strip(), scope["user_id"], scope["agent_id"], scope["run_id"])
        if exact is not None and exact[0] < len(mask) and mask[exact[0]]:
            return mask, [exact[0]]
        ids, scores = lexical.search(query, top_k=_MAX_SEEDS, allowed=mask)
        if len(ids) == 0:
            return mask, []
        best = float(scores[0])
        return mask, [int(i) for i, s in zip(ids, scores) if s >= _SEED_RATIO * best]

    def _spread_from(self, seeds: list[int], *, reverse: bool, params: SpreadParams,
                     overrides: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        table, _ = self._tables()
        q = table.q[np.asarray(seeds, dtype=np.int64)]
        energy = (0.5 + 0.5 * q).astype(np.float32)
        kwargs = params.as_kwargs()
        kwargs.update(overrides)
        return self._projection.spread(np.asarray(seeds, dtype=np.int64), energy, reverse=reverse, params=kwargs)

    def _activations(self, nodes: np.ndarray, energy: np.ndarray, mask: np.ndarray, exclude: set[int],
                     limit: int) -> list[Activation]:
        keep = [(int(n), float(e)) for n, e in zip(nodes, energy)
                if int(n) not in exclude and int(n) < len(mask) and mask[int(n)]][:limit]
        if not keep:
            return []
        rows = self._store.chunk_rows_by_nid([n for n, _ in keep])
        sup = self._superseded_into([n for n, _ in keep])
        return [Activation(node_id=rows[n][1], text=rows[n][2], energy=e, superseded_by=sup.get(n))
                for n, e in keep if n in rows]

    def _superseded_into(self, nids: Sequence[int]) -> dict[int, str]:
        """nid → id of the chunk that supersedes it (see ``Store.superseded_chunks``)."""
        return self._store.superseded_chunks(nids) if nids else {}

    @staticmethod
    def _check_limit(limit: Any, name: str = "limit") -> int:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"{name} must be an integer, got {type(limit).__name__}")
        if limit <= 0 or limit > 10000:
            raise ValueError(f"{name} must be between 1 and 10000, got {limit}")
        return limit

    def search_causal(self, query: str, *, limit: int = 5, task_tag: str | None = None,
                      user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None,
                      include_seeds: bool = False, **spread_overrides: Any) -> list[Activation]:
        """What follows from ``query``: forward spreading (causal preset) from the chunks it names.

        Energy < 0 is a warning that arrived over a ``prevented`` edge."""
        return self._causal(query, reverse=False, limit=limit, task_tag=task_tag,
                            scope=self._scope_args(user_id, agent_id, run_id), include_seeds=include_seeds,
                            overrides=spread_overrides)

    def trace_cause(self, outcome: str, *, limit: int = 5, user_id: str | None = None,
                    agent_id: str | None = None, run_id: str | None = None, include_seeds: bool = False,
                    **spread_overrides: Any) -> list[Activation]:
        """What caused ``outcome``: reverse spreading (causal preset)."""
        return self._causal(outcome, reverse=True, limit=limit, task_tag=None,
                            scope=self._scope_args(user_id, agent_id, run_id), include_seeds=include_seeds,
                            overrides=spread_overrides)

    def _causal(self, query: Any, *, reverse: bool, limit: int, task_tag, scope: dict, include_seeds: bool,
                overrides: Mapping[str, Any]) -> list[Activation]:
        if not isinstance(query, str):
            raise TypeError(f"query must be a string, got {type(query).__name__}")
        limit = self._check_limit(limit)
        if not query.strip():
            return []
        with self._lock:
            mask, seeds = self._causal_seeds(query, scope, task_tag)
            if not seeds:
                return []
            nodes, energy = self._spread_from(seeds, reverse=reverse, params=self.config.causal,
                                              overrides=overrides)
            return self._activations(nodes, energy, mask, set() if include_seeds else set(seeds), limit)

    def intervention_query(self, action: str, *, max_depth: int = 3, limit: int = 5, user_id: str | None = None,
                           agent_id: str | None = None, run_id: str | None = None) -> InterventionReport:
        """Predict what doing ``action`` again leads to, with causal chains and a risk label."""
        if not isinstance(action, str):
            raise TypeError(f"action must be a string, got {type(action).__name__}")
        limit = self._check_limit(limit)
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or not 1 <= max_depth <= 20:
            raise ValueError(f"max_depth must be an integer between 1 and 20, got {max_depth!r}")
        empty = InterventionReport(action=action, label="UNKNOWN", outcomes=(), has_precedent=False,
                                   summary="no precedent: nothing in memory follows from this action "
                                           "(that does not mean it is safe)")
        if not action.strip():
            return empty
        scope = self._scope_args(user_id, agent_id, run_id)
        with self._lock:
            mask, seeds = self._causal_seeds(action, scope, None)
            if not seeds:
                return empty
            nodes, energy = self._spread_from(seeds, reverse=False, params=self.config.causal,
                                              overrides={"max_steps": max_depth})
            acts = self._activations(nodes, energy, mask, set(seeds), limit)
            seed_rows = self._store.chunk_rows_by_nid(seeds)
            if not acts:
                return InterventionReport(action=action, label="UNKNOWN", outcomes=(),
                                          seeds=tuple(seed_rows[s][1] for s in seeds if s in seed_rows),
                                          has_precedent=False, summary=empty.summary)
            outcomes = self._chains(seeds, acts, max_depth)
        label = _overall_label(outcomes)
        names = ", ".join(f"{o.text} ({_outcome_label(o)})" for o in outcomes[:3])
        return InterventionReport(
            action=action, label=label, outcomes=tuple(outcomes),
            seeds=tuple(seed_rows[s][1] for s in seeds if s in seed_rows), has_precedent=True,
            summary=f"{label}: {names}")

    def _chains(self, seeds: list[int], acts: list[Activation], max_depth: int) -> list[PredictedOutcome]:
        """Best (highest confidence-product) valid path from a seed to each activated node."""
        ids = [a.node_id for a in acts]
        q = ",".join("?" * len(ids))
        nid_rows = self._store.query(f"SELECT id, nid, text FROM chunks WHERE id IN ({q})", ids)
        nid_of = {r[0]: r[1] for r in nid_rows}
        text_of = {r[1]: r[2] for r in nid_rows}
        for s, row in self._store.chunk_rows_by_nid(seeds).items():
            text_of[s] = row[2]
        # best[node] = (confidence product, path nids, relations, last polarity)
        best: dict[int, tuple[float, list[int], list[str], str | None]] = {s: (1.0, [s], [], None) for s in seeds}
        frontier = list(seeds)
        for _ in range(max_depth):
            if not frontier:
                break
            fq = ",".join("?" * len(frontier))
            rows = self._store.query(
                f"SELECT src, dst, relation, confidence, polarity FROM edges WHERE src IN ({fq}) AND "
                f"valid_to IS NULL AND relation NOT IN ('no_effect', 'temporal')", frontier)
            nxt = []
            for src, dst, rel, conf, pol in rows:
                base = best[src]
                if dst in base[1]:
                    continue
                cand = (base[0] * conf, base[1] + [dst], base[2] + [rel], pol)
                if dst not in best or cand[0] > best[dst][0]:
                    if dst not in best:
                        nxt.append(dst)
                    best[dst] = cand
                    text_of.setdefault(dst, None)
            frontier = nxt
        missing = [n for n, t in text_of.items() if t is None]
        for n, row in self._store.chunk_rows_by_nid(missing).items():
            text_of[n] = row[2]
        out = []
        for a in acts:
            nid = nid_of.get(a.node_id)
            conf, path, rels, pol = best.get(nid, (0.0, [nid], [], None))
            if pol is None:
                pol = ingest.guess_polarity(a.text or "")
            out.append(PredictedOutcome(
                node_id=a.node_id, text=a.text or "", energy=a.energy, polarity=pol,
                chain=tuple(self._ids_of(path)), chain_texts=tuple(text_of.get(p) or "" for p in path),
                chain_confidence=conf, relations=tuple(rels), superseded_by=a.superseded_by))
        return out

    def _ids_of(self, nids: Sequence[int]) -> list[str]:
        rows = self._store.chunk_rows_by_nid(nids)
        return [rows[n][1] for n in nids if n in rows]

    # ------------------------------------------------------------------ retrieval
    def search(self, query: str, *, top_k: int = 10, user_id: str | None = None, agent_id: str | None = None,
               run_id: str | None = None, filters: Mapping[str, Any] | None = None,
               since: float | _dt.datetime | None = None, until: float | _dt.datetime | None = None,
               channels: Sequence[str] = ("lexical", "semantic", "graph"), fusion: str = "auto",
               explain: bool = False, reinforce: bool = True) -> list[Hit]:
        """What do I know about ``query``: lexical + semantic + graph spreading, fused (SPEC §4)."""
        from . import retrieval

        return retrieval.search(self, query, top_k=top_k, user_id=user_id, agent_id=agent_id, run_id=run_id,
                                filters=filters, since=since, until=until, channels=channels, fusion=fusion,
                                explain=explain, reinforce=reinforce)

    def reembed(self) -> int:
        """Compute vectors for every chunk whose text or model changed; returns how many."""
        emb = self.embedder
        if emb is None:
            raise ConfigurationError("reembed() needs an embedder; this Memory was opened with embedder=None")
        with self._lock:
            missing = self._store.chunks_missing_embedding(emb.model_name)
            for i in range(0, len(missing), 256):
                self._embed_and_store(missing[i:i + 256])
            self._vectors = None
            return len(missing)

    # ------------------------------------------------------------------ learning
    def feedback(self, chunk_id: str, reward: float) -> float:
        """Reward (in [-1, 1]) a memory that proved useful or harmful; returns its new Q-value."""
        from . import learning

        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            raise TypeError(f"reward must be a number in [-1, 1], got {type(reward).__name__}")
        if math.isnan(float(reward)) or not -1.0 <= float(reward) <= 1.0:
            raise ValueError(f"reward must be in [-1, 1], got {reward!r}")
        with self._write() as fx:
            if not isinstance(chunk_id, str):
                raise TypeError(f"chunk_id must be a chunk id string, got {type(chunk_id).__name__}")
            nid = self._store.nid_of(chunk_id)
            if nid is None:
                raise KeyError(f"unknown chunk_id {chunk_id!r}")
            q = learning.apply_feedback(self._store, nid, float(reward), self.config)

            def apply() -> None:
                if self._chunks is not None and nid < self._chunks.n:
                    self._chunks.q[nid] = q

            fx.append(apply)
        return q

    def sleep(self, *, dry_run: bool = False, now: float | _dt.datetime | None = None, judge: Any = None,
              min_diversity: float = 0.0, action: str = "annotate", progress: bool = False) -> SleepReport:
        """One consolidation cycle (SPEC §6), in one transaction; ``dry_run`` writes nothing."""
        from . import consolidation

        ts = to_timestamp(now, name="now") if now is not None else self.now()
        with self._lock:
            self._sync_external()
            report = consolidation.sleep(self._store, config=self.config, now=ts, dry_run=dry_run,
                                         judge=judge or self.judge, min_diversity=min_diversity, action=action,
                                         progress=progress)
            if not dry_run:
                self._resync()  # Q-values, retired edges, merged chunks: re-read, patch indexes by difference
                self._data_version = self._store.data_version()
            return report


def _jsonable(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool, type(None), list, dict))


def _outcome_label(o: PredictedOutcome) -> str:
    if o.energy < 0:
        return "UNKNOWN"  # reached over a prevented edge: blocked, not predicted
    return {"negative": "DANGER", "positive": "SAFE", "mixed": "WARNING"}.get(o.polarity or "", "UNKNOWN")


def _overall_label(outcomes: Sequence[PredictedOutcome]) -> str:
    labels = {_outcome_label(o) for o in outcomes}
    if "DANGER" in labels:
        return "DANGER"
    if "WARNING" in labels:
        return "WARNING"
    if "SAFE" in labels:
        return "SAFE"
    return "UNKNOWN"
