"""The vector index itself: cosine search over an exact delta and at most one binary-HNSW segment.

:class:`VectorIndex` (described in :mod:`causalmem.vector_index`, its public face) keeps normalised
float32 rows keyed by integer chunk ids in two disjoint parts, the delta
(:class:`~causalmem.vector_segments.ExactRows`) and a segment
(:class:`~causalmem.vector_segments.AnnSegment`), merges their answers, and offers the keeper
(:class:`causalmem.vector_keeper.IndexKeeper`) the snapshot / install protocol it loads and folds with.
"""
from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from . import vector_segments as segments
from .vector_codec import UNKNOWN_HASH, normalise_rows
from .vector_files import fold_segment
from .vector_segments import EMPTY, QUANTIZATIONS, AnnSegment, ExactRows, best_k, mask_of

__all__ = ["VectorIndex"]


class VectorIndex:
    """Cosine search over L2-normalised float32 rows keyed by int doc ids (see :mod:`causalmem.vector_index`).

    Ids are ints in [0, 2**31). Not thread-safe: the caller holds a lock (``Views.lock``).
    ``ann_min``: the delta size at which the keeper builds a segment (None: always exact);
    ``quantization``: storage type of segments (``"f32"``, ``"f16"``, ``"i8"``); ``exact_scope``: a
    scope with at most this many live segment vectors is scored exactly.
    """

    def __init__(self, dim: int, *, ann_min: int | None = 20_000, quantization: str = "f32",
                 connectivity: int = 8, expansion_add: int = 128, expansion_search: int = 64,
                 exact_scope: int = 2048, rescore: int = 400) -> None:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        if ann_min is not None and (isinstance(ann_min, bool) or not isinstance(ann_min, (int, np.integer))
                                    or ann_min < 1):
            raise ValueError(f"ann_min must be a positive int or None, got {ann_min!r}")
        if quantization not in QUANTIZATIONS:
            raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}")
        for name, v in (("connectivity", connectivity), ("expansion_add", expansion_add),
                        ("expansion_search", expansion_search), ("exact_scope", exact_scope),
                        ("rescore", rescore)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        self.dim = int(dim)
        self.ann_min = None if ann_min is None else int(ann_min)
        self.quantization = quantization
        self.connectivity, self.expansion_add, self.expansion_search = connectivity, expansion_add, expansion_search
        self.exact_scope = exact_scope
        self.rescore = rescore
        self.delta = ExactRows(self.dim)
        self.segment: AnnSegment | None = None
        self.ready = True  # False while the keeper loads a store's vectors into a fresh index
        self._dirty: set[int] | None = None  # ids changed since a snapshot began (None: no snapshot)
        self.ready_event = threading.Event()
        self.ready_event.set()
        # set once the keeper knows how it loads: from files that hold the database's current state
        # (``loading_fast``: ready in moments, a first search may wait for it) or by reading the store
        self.plan_event = threading.Event()
        self.plan_event.set()
        self.loading_fast = False
        #: the store's change_seq at which this index holds exactly the store's vectors (None: unknown);
        #: set by the keeper's load, carried through own commits by ``Views``, saved in the files at close
        self.seq: int | None = None
        self.builds = 0  # segments installed

    # ------------------------------------------------------------------ shape
    def __len__(self) -> int:
        return self.delta.n + (self.segment.n_live if self.segment is not None else 0)

    def __contains__(self, doc_id: object) -> bool:
        if isinstance(doc_id, (bool, np.bool_)) or not isinstance(doc_id, (int, np.integer)):
            return False
        d = np.asarray([int(doc_id)], dtype=np.int64)
        if d[0] < 0:
            return False
        return bool(self.delta.rows_of(d)[0] >= 0 or (self.segment is not None and self.segment.has(d)[0]))

    def __repr__(self) -> str:
        seg = f", segment={self.segment.n_live}/{self.segment.n_total} {self.quantization}" if self.segment else ""
        return f"VectorIndex(dim={self.dim}, n={len(self)}, delta={self.delta.n}{seg}, ready={self.ready})"

    def ids(self) -> np.ndarray:
        """Indexed doc ids, ascending."""
        own = self.delta.ids()
        if self.segment is None:
            return np.sort(own)
        return np.union1d(own, self.segment.live_keys())

    def count_in(self, mask: np.ndarray) -> int:
        """How many indexed ids ``mask`` (boolean, by id) admits."""
        n = int(np.count_nonzero(mask_of(mask, self.delta.ids())))
        if self.segment is not None:
            live = self.segment.live
            k = min(live.shape[0], mask.shape[0])
            n += int(np.count_nonzero(live[:k] & mask[:k]))
        return n

    # ------------------------------------------------------------------ checks
    @staticmethod
    def _check_ids(ids: Any) -> np.ndarray:
        arr = np.atleast_1d(np.asarray(ids))
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise TypeError("ids must be ints or a 1-D integer array")
        arr = arr.astype(np.int64, copy=False)
        if arr.size and (arr.min() < 0 or arr.max() >= 1 << 31):
            raise ValueError("ids must be in [0, 2**31)")
        return arr

    def _check_vecs(self, vecs: Any, n: int) -> np.ndarray:
        m = np.asarray(vecs, dtype=np.float32)
        if m.ndim == 1:
            m = m.reshape(1, -1)
        if m.ndim != 2 or m.shape != (n, self.dim):
            raise ValueError(f"vectors must have shape ({n}, {self.dim}), got {np.shape(vecs)}")
        if not np.isfinite(m).all():
            raise ValueError("vectors must be finite")
        return normalise_rows(m)

    def _query(self, qvec: Any) -> np.ndarray:
        q = np.asarray(qvec, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise ValueError(f"query vector must have {self.dim} dims, got {q.shape[0]}")
        if not np.isfinite(q).all():
            raise ValueError("query vector must be finite")
        norm = float(np.linalg.norm(q))
        return q / norm if norm > 0 else q

    # ------------------------------------------------------------------ changes
    def add(self, ids: Any, vecs: Any, hashes: Any = None) -> None:
        """Store ``vecs`` (shape (n, dim), or (dim,) for one id) under ``ids``; re-adding replaces.

        ``hashes``: the text hash each vector was computed from (kept for the sidecar)."""
        ids = self._check_ids(ids)
        if ids.size == 0:
            return
        m = self._check_vecs(vecs, ids.shape[0])
        h = np.full(ids.shape[0], UNKNOWN_HASH, dtype=np.int64) if hashes is None else \
            np.asarray(hashes, dtype=np.int64).reshape(-1)
        if h.shape[0] != ids.shape[0]:
            raise ValueError(f"hashes must have {ids.shape[0]} entries, got {h.shape[0]}")
        if np.unique(ids).shape[0] != ids.shape[0]:  # keep the last vector of a repeated id
            _, first_rev = np.unique(ids[::-1], return_index=True)
            keep = np.sort(ids.shape[0] - 1 - first_rev)
            ids, m, h = ids[keep], m[keep], h[keep]
        if self.segment is not None:
            self.segment.tombstone(ids)
        self.delta.add(ids, m, h)
        if self._dirty is not None:
            self._dirty.update(ids.tolist())

    def remove(self, doc_id: int) -> bool:
        """Drop ``doc_id``; returns False when it was not indexed."""
        if isinstance(doc_id, (bool, np.bool_)) or not isinstance(doc_id, (int, np.integer)):
            return False
        d = int(doc_id)
        if self._dirty is not None:
            self._dirty.add(d)
        if d < 0:
            return False
        hit = self.delta.remove(d)
        if self.segment is not None:
            hit = bool(self.segment.tombstone(np.asarray([d], dtype=np.int64))) or hit
        return hit

    discard = remove

    # ------------------------------------------------------------------ reads
    def get(self, doc_id: int) -> np.ndarray:
        """The stored (normalised) vector of ``doc_id``; ``KeyError`` when absent."""
        if doc_id not in self:
            raise KeyError(f"no vector for doc id {doc_id!r}")
        d = np.asarray([int(doc_id)], dtype=np.int64)
        r = self.delta.rows_of(d)[0]
        if r >= 0:
            return self.delta.mat[r].copy()
        assert self.segment is not None
        return self.segment.vectors(d)[0]

    def cosine(self, qvec: Any, ids: Any) -> np.ndarray:
        """Cosine of ``qvec`` with each id's vector (float32; NaN for ids without a vector)."""
        q = self._query(qvec)
        ids = self._check_ids(ids)
        out = np.full(ids.shape[0], np.nan, dtype=np.float32)
        rows = self.delta.rows_of(ids)
        have = rows >= 0
        if have.any():
            out[have] = self.delta.mat[rows[have]] @ q
        if self.segment is not None:
            seg = ~have & self.segment.has(ids)
            if seg.any():
                out[seg] = self.segment.vectors(ids[seg]) @ q
        return out

    def vectors_of(self, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        """(ids that have a vector, their stored vectors as float32 rows), in the order given."""
        ids = self._check_ids(ids)
        out = np.zeros((ids.shape[0], self.dim), dtype=np.float32)
        rows = self.delta.rows_of(ids)
        have = rows >= 0
        if have.any():
            out[have] = self.delta.mat[rows[have]]
        if self.segment is not None:
            seg = ~have & self.segment.has(ids)
            if seg.any():
                out[seg] = self.segment.vectors(ids[seg])
                have |= seg
        return ids[have], out[have]

    def search(self, qvec: Any, *, top_k: int = 10, allowed: np.ndarray | None = None,
               exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Best ``top_k`` (doc ids int64, cosines float32), best first, ties to the lower id.

        ``allowed`` is a boolean mask indexed by doc id; ids beyond its end are not allowed.
        The segment part is approximate (HNSW) unless ``exact=True``."""
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)):
            raise TypeError(f"top_k must be an int, got {type(top_k).__name__}")
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        q = self._query(qvec)
        if allowed is not None:
            allowed = np.asarray(allowed)
            if allowed.ndim != 1 or allowed.dtype != np.bool_:
                raise ValueError("allowed must be a 1-D boolean array indexed by doc id")
        if top_k == 0 or len(self) == 0:
            return EMPTY
        ids, scores = self.delta.search(q, int(top_k), allowed)
        if self.segment is not None and self.segment.n_live:
            si, ss = self.segment.search(q, int(top_k), allowed, self.exact_scope, exact, self.rescore,
                                         self.expansion_search)
            ids, scores = best_k(np.concatenate([ids, si]), np.concatenate([scores, ss]), int(top_k))
        return ids, scores

    # ------------------------------------------------------------------ keeper protocol (under the lock)
    def begin_snapshot(self) -> None:
        """From now on every changed id is remembered, so an index built from a snapshot taken after
        this call can be reconciled when it is installed."""
        self._dirty = set()

    def mark_loading(self) -> None:
        """A fresh index whose store vectors are being loaded by the keeper."""
        self.ready = False
        self.ready_event.clear()
        self.plan_event.clear()
        self.loading_fast = False
        self.begin_snapshot()

    def needs_fold(self) -> str | None:
        """'fold' when the delta should go into a (new) segment, 'fresh' for a full rebuild."""
        if self.ann_min is None or not self.ready or not segments.usearch_available():
            return None
        seg = self.segment
        if seg is not None and seg.n_total - seg.n_live > 0.2 * seg.n_total and seg.n_total >= self.ann_min:
            return "fresh"
        limit = self.ann_min if seg is None else max(self.ann_min, seg.n_live // 10)
        return "fold" if self.delta.n >= limit else None

    def install(self, segment: AnnSegment | None, extra: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                snapshot_delta: np.ndarray | None = None) -> None:
        """Swap in ``segment`` (built from a snapshot taken after ``begin_snapshot``) and ``extra``
        vectors (ids, vectors, hashes) read from the store; ids changed since the snapshot began keep
        their in-memory state. ``snapshot_delta``: delta ids the segment was built from."""
        dirty = np.fromiter(self._dirty or (), dtype=np.int64, count=len(self._dirty or ()))
        if segment is not None:
            segment.tombstone(dirty)
            for d in (snapshot_delta if snapshot_delta is not None else np.zeros(0, np.int64)).tolist():
                if segment.has(np.asarray([d], dtype=np.int64))[0]:
                    self.delta.remove(d)
            self.segment = segment
            self.builds += 1
        if extra is not None and extra[0].shape[0]:
            ids, vecs, hashes = extra
            keep = ~np.isin(ids, dirty)
            if keep.any():
                ids, vecs, hashes = ids[keep], vecs[keep], hashes[keep]
                if self.segment is not None:
                    self.segment.tombstone(ids)
                self.delta.add(ids, normalise_rows(np.asarray(vecs, dtype=np.float32)), hashes)
        self._dirty = None
        self.ready = True
        self.ready_event.set()
        self.plan_event.set()

    def plan(self, fast: bool) -> None:
        """The keeper's load plan (see ``plan_event``)."""
        self.loading_fast = fast
        self.plan_event.set()

    def wait_fast_load(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a load from current files (never for a load from the store)."""
        if self.ready:
            return True
        deadline = time.monotonic() + timeout
        if not self.plan_event.wait(timeout) or not self.loading_fast:
            return self.ready
        return self.ready_event.wait(max(0.0, deadline - time.monotonic()))

    def abandon_snapshot(self) -> None:
        self._dirty = None if self.ready else self._dirty

    def fold_now(self) -> None:
        """Fold the delta into an in-memory segment in the calling thread (tests, benchmarks, tools;
        ``Views`` leaves this to its keeper thread)."""
        if not segments.usearch_available():
            raise ImportError("an approximate segment needs usearch: pip install usearch")
        self.begin_snapshot()
        ids, mat, hashes = self.delta.snapshot()
        seg = fold_segment(self, self.segment, ids, mat, hashes, _NoLock(), None)
        assert seg is not None
        self.install(seg, snapshot_delta=ids)


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None
