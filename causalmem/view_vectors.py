"""The vector side of the views: the embedder, query vectors, the vector index and its searches.

``VectorView`` owns the embedder (resolved on first use), the LRU of query vectors and the query
thread (``encode_query_later``), and the in-process vector index (``VectorIndex``: loaded, folded
and saved by the keeper thread, ``vector_index.IndexKeeper``); it answers the semantic channel
(``search``, ``cosines``, ``vectors_of``, ``coverage``) — exactly from the stored vectors while
the index still loads — takes new vectors in after a commit (``vectors_stored``) and stamps the
index files at close (``stamp``). Its host (:class:`VectorHost`, the views) gives the store, the
lock, the chunk table, the keeper and the change sequence.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from . import sidecar
from .config import Config
from .embedding import query_encoder_ready
from .onnx_embedder import QueryVectorCache
from .semantic import Embedder, resolve_embedder, vector_to_blob
from .store.base import EmbeddingRow, text_hash
from .vector_codec import normalise_rows
from .vector_index import UNKNOWN_HASH, VectorIndex, decode_rows, stamp_sidecar

log = logging.getLogger("causalmem")

__all__ = ["VectorView", "VectorHost", "PendingQuery", "SCOPE_FROM_STORE", "FAST_LOAD_WAIT_S"]

#: while the vector index loads, a scope of at most this many chunks is searched exactly from the store
SCOPE_FROM_STORE = 4096
#: a search waits this long (outside the lock) for a vector index being mapped from current files
FAST_LOAD_WAIT_S = 2.0

Effects = list[Callable[[], None]]


class VectorHost(Protocol):
    """What the vector side reads of its host (``Views``)."""

    store: Any
    config: Config
    lock: threading.RLock
    chunks: Any
    keeper: Any
    background: Any
    sidecar_dir: Path | None

    def sync_external(self) -> None: ...

    def read_seq(self) -> int | None: ...

    def vector_seq_now(self) -> int | None: ...

    def note(self, kind: str, ids: Sequence[int] | np.ndarray) -> None: ...

    def encode_query(self, query: str) -> np.ndarray | None: ...


class PendingQuery:
    """A query vector being computed on the query thread (``Views.encode_query_later``), and optionally
    the vector search the caller handed it (``offer``): run on that thread right after the encode,
    while the caller — holding the lock, so nothing changes the index meanwhile — does the rest."""

    def __init__(self, qvec: np.ndarray | None) -> None:
        self.qvec = qvec
        self.future: Any = None
        self.pool: Any = None  # the query thread's executor (set with ``future``)
        self._lock = threading.Lock()
        self._job: Callable[[np.ndarray], Any] | None = None
        self._claimed = False
        self._search: Any = None  # the job's own future when it was offered after the encode finished
        self.searched: Any = None

    def run(self, encode: Callable[[], np.ndarray]) -> np.ndarray:
        vec = encode()[None, :]
        with self._lock:
            self._claimed = True
            job = self._job
        if job is not None:
            self.searched = job(vec[0])
        return vec

    def offer(self, job: Callable[[np.ndarray], Any]) -> None:
        """``job(qvec)`` to run on the query thread after the encode: picked up by the encode's task,
        or, when the encode finished first (the caller was slow to get here), queued on the query
        thread as a task of its own, still beside the caller's lexical channel. Ignored for a vector
        answered at once (no query thread): then the caller runs it and ``searched`` stays None."""
        if self.future is None:
            return
        with self._lock:
            if not self._claimed:
                self._job = job
                return
        future = self.future
        self._search = self.pool.submit(lambda: job(future.result()[0]))

    def result(self) -> np.ndarray | None:
        if self.future is not None:
            self.qvec = self.future.result()
        if self._search is not None:
            self.searched = self._search.result()
            self._search = None
        return self.qvec


class VectorView:
    """Embedder, query vectors and vector index of one store (see the module docstring)."""

    def __init__(self, host: VectorHost, embedder: Any = "auto") -> None:
        self.host = host
        self.store = host.store
        self.config = host.config
        self.lock = host.lock
        self.index: VectorIndex | None = None
        self._embedder_spec = embedder
        self._embedder: Embedder | None = None
        self._embedder_resolved = embedder is None
        self.query_cache = QueryVectorCache(1024)
        self._qpool: ThreadPoolExecutor | None = None  # the query thread (``encode_query_later``)
        self._qpool_lock = threading.Lock()

    @property
    def resolved(self) -> Embedder | None:
        """The embedder if it was resolved already (never resolves nor loads)."""
        return self._embedder

    def release(self) -> None:
        """After close: drop the vector index; an embedder this view made from a name (``"auto"``)
        stops its helper threads (one passed in by the caller is the caller's, maybe shared: left alone)."""
        self.index = None
        stop = getattr(self._embedder, "stop_helpers", None)
        if isinstance(self._embedder_spec, str) and callable(stop):
            stop()

    def stop_query_thread(self, timeout: float | None = None) -> None:
        with self._qpool_lock:
            pool, self._qpool = self._qpool, None
        if pool is not None:
            pool.shutdown(wait=True)

    @property
    def embedder(self) -> Embedder | None:
        """The resolved embedder (``None`` when the semantic channel is off)."""
        if not self._embedder_resolved:
            self._embedder = resolve_embedder(self._embedder_spec)
            self._embedder_resolved = True
        return self._embedder

    @property
    def embedder_name(self) -> str | None:
        """Model name of the embedder if it was already resolved (never loads a model)."""
        return None if self._embedder is None else self._embedder.model_name

    def encode(self, texts: Sequence[str]) -> np.ndarray | None:
        emb = self.embedder
        if emb is None or not texts:
            return None
        return np.asarray(emb.encode(list(texts)), dtype=np.float32)

    def encode_query(self, query: str) -> np.ndarray | None:
        """The query's vector (1 x dim) from the LRU of query vectors; None without an embedder, and
        None while no vector of the model is stored (a fresh store's first search loads no model)."""
        emb = self.embedder
        if emb is None:
            return None
        vi = self.index
        if vi is None or not len(vi):
            with self.lock:
                if not self.store.has_embeddings(emb.model_name):
                    return None
                vi = self.get_index()  # the keeper starts loading while the query is encoded
        qvec = self.query_cache.get(emb, query)[None, :]
        if vi is not None and not vi.ready:  # index files current: mapped in moments, worth a short wait
            vi.wait_fast_load(FAST_LOAD_WAIT_S)
        return qvec

    def encode_query_later(self, query: str) -> "PendingQuery":
        """Start encoding ``query`` on this store's query thread (the encoder releases the GIL: on 2
        cores the caller runs the lexical channel meanwhile) and return its :class:`PendingQuery`: the
        caller may hand it the vector search (``offer``) once it holds the lock and knows the scope, so
        the query thread searches the index right after encoding; ``result()`` waits for both. Never
        needs the lock to finish. An LRU hit, a missing model and a first search whose index is still
        being mapped are answered at once, as :meth:`encode_query` does."""
        emb = self.embedder
        vi = self.index
        if emb is None or not isinstance(query, str) or vi is None or not len(vi) or not vi.ready \
                or not query_encoder_ready(emb):  # a session load: here, before the caller takes the lock
            return PendingQuery(self.host.encode_query(query))  # the views' entry (tests wrap it)
        hit = self.query_cache.peek(emb, query)
        if hit is not None:
            return PendingQuery(hit[None, :])
        pending = PendingQuery(None)
        with self._qpool_lock:
            if self._qpool is None:
                self._qpool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="causalmem-query")
                self.host.background.add("query", self.stop_query_thread)
            pending.pool = self._qpool
            pending.future = self._qpool.submit(pending.run, lambda: self.query_cache.get(emb, query))
        return pending

    def store_vectors(self, items: Sequence[tuple[int, str, np.ndarray]]) -> None:
        """Persist (nid, text, vector) rows for the current embedder, in the caller's transaction."""
        emb = self.embedder
        if emb is None or not items:
            return
        # a chunk purged (by any process) while its text was being encoded gets no vector: the row
        # would bring the purged vector back (and break the chunks reference)
        present = self.store.chunk_rows_by_nid([nid for nid, _, _ in items])
        items = [it for it in items if it[0] in present]
        if not items:
            return
        self.store.put_embeddings(EmbeddingRow(nid, emb.model_name, emb.dim, text_hash(t), vector_to_blob(v))
                                  for nid, t, v in items)
        self.host.note("v", [nid for nid, _, _ in items])  # the vector index files catch up from these


    def coverage(self, mask: np.ndarray | None = None) -> tuple[int, int]:
        """(chunks with a vector in the loaded index, chunks) within ``mask`` (a scope mask)."""
        vindex = self.index
        if mask is None:
            table = self.host.chunks
            mask = table.alive[: table.n] if table is not None else np.zeros(0, dtype=bool)
        total = int(np.count_nonzero(mask))
        if vindex is None or not total:
            return 0, total
        if not vindex.ready:  # still loading: what the store holds
            emb = self.embedder
            nids = np.flatnonzero(mask)
            if emb is None or nids.shape[0] > SCOPE_FROM_STORE:
                return vindex.count_in(mask), total
            return len(self.store.embeddings_of(nids.tolist(), emb.model_name)), total
        return vindex.count_in(mask), total

    def vectors_stored(self, fx: Effects, nids: Sequence[int], model: str, dim: int,
                       hashes: Sequence[int] | None = None) -> None:
        """Vectors of ``nids`` (computed from texts with ``hashes``) were stored: after commit the loaded
        index takes the still-current ones."""
        def apply() -> None:
            if self.index is None:
                return
            got = self.store.embeddings_of(list(nids), model)
            if got:
                ids, vecs = decode_rows(got, dim)
                hmap = dict(zip(nids, hashes)) if hashes is not None else {}
                alive = self.host.chunks.alive if self.host.chunks is not None else None
                if alive is not None:
                    keep = (ids < alive.shape[0]) & alive[np.minimum(ids, max(alive.shape[0] - 1, 0))]
                    ids, vecs = ids[keep], vecs[keep]
                if len(ids):
                    self.index.add(ids, vecs, None if not hmap else [hmap.get(int(i), UNKNOWN_HASH) for i in ids])
                    if self.index.needs_fold():
                        self.host.keeper.kick()

        fx.append(apply)


    def stamp(self) -> bool:
        """At close: when the vector index holds the store's current state, record it in the index
        files' header (with a small delta file), so the next open maps them without reading the store."""
        vi, directory = self.index, self.host.sidecar_dir
        if vi is None or directory is None or getattr(self.store, "read_only", False):
            return False
        with self.lock:
            try:
                self.host.sync_external()
                seq = vi.seq
                if seq is None or self.host.read_seq() != seq or not vi.ready or vi is not self.index:
                    return False
                with sidecar.index_lock(directory):  # checked again there: see ``_save_locked``
                    self.host.sync_external()
                    if vi.seq != seq or self.host.read_seq() != seq or vi is not self.index:
                        return False
                    return stamp_sidecar(directory, vi, seq)
            except Exception as exc:  # a full disk or a read-only directory must not fail close()
                log.warning("causalmem: could not stamp the vector index in %s: %s", directory, exc)
                return False

    def wait_loaded(self, timeout: float | None = None, *, folded: bool = False) -> bool:
        """Block until the vector index holds every stored vector (loaded: searchable, exact or not);
        ``folded=True`` also waits for the keeper's pending folds / saves. False on timeout."""
        if self.embedder is None:
            return True
        with self.host.lock:
            vi = self.get_index()
        if vi is None:
            return True
        if not vi.ready_event.wait(timeout):
            return False
        return self.host.keeper.wait_idle(timeout) if folded else True

    def get_index(self) -> VectorIndex | None:
        """The vector index (created empty: the keeper thread loads the stored vectors into it).

        Never embeds nor loads here: chunks without vectors are the background worker's queue, the
        stored vectors are read by the keeper; until it is ``ready`` :meth:`vector_search` answers
        small scopes from the store (explain=True shows the coverage)."""
        emb = self.embedder
        if emb is None:
            return None
        self.host.sync_external()
        if self.index is None:
            cfg = self.config
            index = VectorIndex(emb.dim, ann_min=cfg.vector_ann_min, quantization=cfg.vector_quantization,
                                exact_scope=cfg.vector_exact_scope)
            self.index = index
            if self.store.has_embeddings(emb.model_name):
                index.mark_loading()
                self.host.keeper.kick()
            else:  # nothing to load: the empty index is the store's state
                index.seq = self.host.vector_seq_now()
        return self.index

    def search(self, qvec: np.ndarray, top_k: int, mask: np.ndarray | None, *,
                      on_query_thread: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The semantic channel's candidates (ids, cosines) within ``mask``; the caller holds the lock
        (``on_query_thread``: the searching thread holds it and waits for this one, which then only
        searches a ready index — nothing else — and returns None otherwise).

        While the index is still loading, a scope of at most ``SCOPE_FROM_STORE`` chunks is scored
        exactly from the stored vectors and a larger one gets no semantic candidates yet."""
        empty = (np.empty(0, np.int64), np.empty(0, np.float32))
        if on_query_thread:  # no sync with the store here: the searching thread did it under the lock
            vi = self.index
            if vi is None or not vi.ready:
                return None  # type: ignore[return-value]
            return vi.search(qvec, top_k=top_k, allowed=mask) if len(vi) else empty
        vi = self.get_index()
        if vi is None:
            return empty
        if vi.ready:
            return vi.search(qvec, top_k=top_k, allowed=mask) if len(vi) else empty
        emb = self.embedder
        table = self.host.chunks
        if mask is None:
            mask = table.alive[: table.n] if table is not None else np.zeros(0, dtype=bool)
        nids = np.flatnonzero(mask)
        if emb is None or nids.shape[0] == 0 or nids.shape[0] > SCOPE_FROM_STORE:
            return empty
        got = self.store.embeddings_of(nids.tolist(), emb.model_name)
        if not got:
            return empty
        ids, vecs = decode_rows(got, emb.dim)
        q = np.asarray(qvec, dtype=np.float32).reshape(-1)
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        scores = (vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)) @ q
        order = np.lexsort((ids, -scores))[:top_k]
        return ids[order], scores[order].astype(np.float32)

    def cosines(self, qvec: np.ndarray, nids: Sequence[int]) -> dict[int, float]:
        """Cosine of ``qvec`` with each chunk's vector (chunks without one left out)."""
        vi = self.index
        if vi is None or not nids:
            return {}
        ids = np.asarray(nids, dtype=np.int64)
        got = vi.cosine(qvec, ids)
        out = {int(n): float(c) for n, c in zip(ids.tolist(), got.tolist()) if c == c}
        emb = self.embedder
        if not vi.ready and emb is not None:  # loading: the store has the rest
            rest = [int(n) for n in ids.tolist() if int(n) not in out]
            rows = self.store.embeddings_of(rest, emb.model_name) if rest else []
            if rows:
                rid, vecs = decode_rows(rows, emb.dim)
                q = np.asarray(qvec, dtype=np.float32).reshape(-1)
                q = q / max(float(np.linalg.norm(q)), 1e-12)
                sc = (vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)) @ q
                out.update(zip(rid.tolist(), sc.tolist()))
        return out

    def vectors_of(self, nids: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(chunk nids that have a vector, their vectors): from the loaded index, while it loads (or before
        anything asked for it: a tenant's views that served lexical and graph queries only) from the store."""
        vi = self.index
        ids = np.asarray(nids, dtype=np.int64)
        if self.embedder is None or not len(ids):
            return np.empty(0, np.int64), np.empty((0, 0), np.float32)
        if vi is None:
            return self._stored_vectors(ids)
        got, mat = vi.vectors_of(ids)
        if not vi.ready and len(got) < len(ids):  # loading: the store has the rest
            rid, vecs = self._stored_vectors(np.setdiff1d(ids, got))
            if len(rid):
                got, mat = np.concatenate([got, rid]), np.vstack([mat, vecs])
        return got, mat

    def _stored_vectors(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The stored vectors of ``ids`` under this model, unit-normalised as the index holds them."""
        emb = self.embedder
        assert emb is not None  # vectors_of answers without a model before asking
        rows = self.store.embeddings_of(ids.tolist(), emb.model_name)
        if not rows:
            return np.empty(0, np.int64), np.empty((0, 0), np.float32)
        rid, vecs = decode_rows(rows, emb.dim)
        return rid, normalise_rows(vecs)

