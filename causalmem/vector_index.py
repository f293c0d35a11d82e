"""The vector index of the semantic channel (issue 10, item 4): an exact delta + a usearch HNSW segment.

Views layer helper, numpy at import; ``usearch`` is imported when an approximate segment is built or
opened (the ``[semantic]``/``[onnx]`` extras install it; without it every search is exact).

:class:`VectorIndex` keeps normalised float32 rows keyed by the store's integer chunk ids in two
disjoint parts:

* the **delta** (:class:`ExactRows`): a dense matrix searched exactly (one matrix-vector product);
  every vector added in this process goes here first;
* at most one **segment** (:class:`AnnSegment`): an immutable usearch HNSW index (cosine metric,
  f32 / f16 / i8 storage), usually memory-mapped from the sidecar file (``view``: pages are read on
  demand, nothing is loaded), with a live mask by id: a removed or replaced id is masked out
  (a tombstone), never searched again.

A search asks both parts and merges (best first, equal scores to the lower id). A scope filter
(``allowed``, a boolean mask by id) is applied inside the segment: a scope holding at most
``exact_scope`` live segment vectors is scored exactly (its vectors read from the segment); a larger
one is over-fetched from the HNSW graph by ``2 * top_k / share`` (share = the scope's fraction of
the segment), grown 4x while fewer than ``top_k`` survive the mask, and scanned exactly when the
over-fetch would exceed a quarter of the segment — so a tiny scope still gets its top-k.

Nothing here runs on the query path but the searches: :class:`IndexKeeper` (one daemon thread per
``Views``) loads the index at first use (validating the sidecar against the database, or reading
the vectors from the store), folds the delta into a new segment when it grows past
``max(ann_min, 10% of the segment)`` (or the tombstones pass 20%), saves it next to the database
and swaps it in under the lock. Until a freshly created index is *ready*, ``Views.vector_search``
answers small scopes exactly from the stored vectors and large ones without the semantic channel.

Sidecar (file stores only): ``<db>.idx/vectors.usearch`` (usearch's own format),
``vectors.keys.npy`` ((n, 2) int64: chunk id, hash of the text the vector was computed from) and
``vectors.json`` (the header: format, model, dim, dtype, metric, count, sizes and CRC-32 of both
files). At load the header must match the embedder and the files their CRCs, and every (id, text
hash) pair is compared with the database's current vectors: an entry the database no longer has is
masked out, a current vector the file lacks is read from the store into the delta. A missing,
corrupt or mismatched file is logged and rebuilt, never trusted. Deleting the directory is safe.
"""
from __future__ import annotations

import atexit
import importlib.util
import json
import logging
import os
import threading
import time
import weakref
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .views import Views

__all__ = ["VectorIndex", "ExactRows", "AnnSegment", "IndexKeeper", "usearch_available", "sidecar_dir",
           "QUANTIZATIONS", "UNKNOWN_HASH"]

log = logging.getLogger("causalmem")

#: storage types of a segment: float32, float16, int8 (usearch scales unit vectors by 127)
QUANTIZATIONS = ("f32", "f16", "i8")
#: text hash of a vector whose source text is not known here (re-validated at the next load)
UNKNOWN_HASH = -(1 << 63)
FORMAT = "causalmem-vectors-1"
_EMPTY = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))


def usearch_available() -> bool:
    return importlib.util.find_spec("usearch") is not None


def _usearch_index() -> Any:
    """``usearch.index.Index``. onnxruntime (the ONNX encoder) is imported first when installed: with
    usearch 2.26 / onnxruntime 1.32 importing onnxruntime *after* usearch's compiled module crashes
    the process (segmentation fault); the other order works."""
    if importlib.util.find_spec("onnxruntime") is not None:
        try:
            import onnxruntime  # noqa: F401
        except Exception:  # pragma: no cover - a broken onnxruntime is the encoder's problem
            pass
    from usearch.index import Index

    return Index


def sidecar_dir(db_path: str | os.PathLike[str]) -> Path:
    """``agent.db`` -> ``agent.db.idx`` (the directory the persisted indexes live in)."""
    return Path(os.fspath(db_path) + ".idx")


def _normalise_rows(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)  # a zero row stays zero instead of NaN
    return (m / norms).astype(np.float32, copy=False)


def _top_k(ids: np.ndarray, scores: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best ``top_k`` of (ids, scores), best first, equal scores to the lower id."""
    if scores.shape[0] > top_k:
        kth = np.partition(scores, scores.shape[0] - top_k)[scores.shape[0] - top_k]
        sel = np.flatnonzero(scores >= kth)
        ids, scores = ids[sel], scores[sel]
    order = np.lexsort((ids, -scores))[:top_k]
    return ids[order].copy(), scores[order].astype(np.float32, copy=False)


def _mask_of(allowed: np.ndarray | None, ids: np.ndarray) -> np.ndarray:
    """allowed[ids] with ids beyond the mask's end not allowed."""
    if allowed is None:
        return np.ones(ids.shape[0], dtype=bool)
    ok = ids < allowed.shape[0]
    out = np.zeros(ids.shape[0], dtype=bool)
    out[ok] = allowed[ids[ok]]
    return out


# --------------------------------------------------------------------------- exact rows


class ExactRows:
    """Dense rows searched exactly; removing a row moves the last row into its place."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.n = 0
        self.mat = np.zeros((0, dim), dtype=np.float32)
        self.ids_ = np.zeros(0, dtype=np.int64)
        self.hashes = np.zeros(0, dtype=np.int64)
        self.row = np.zeros(0, dtype=np.int64)  # id -> row, -1 = absent

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        out = np.full(ids.shape[0], -1, dtype=np.int64)
        inside = ids < self.row.shape[0]
        out[inside] = self.row[ids[inside]]
        return out

    def add(self, ids: np.ndarray, m: np.ndarray, hashes: np.ndarray) -> None:
        top = int(ids.max()) + 1
        if top > self.row.shape[0]:
            grown = np.full(max(top, 2 * self.row.shape[0], 16), -1, dtype=np.int64)
            grown[: self.row.shape[0]] = self.row
            self.row = grown
        rows = self.row[ids]
        old = rows >= 0
        if old.any():
            self.mat[rows[old]] = m[old]
            self.hashes[rows[old]] = hashes[old]
        new = ~old
        k = int(new.sum())
        if k:
            need = self.n + k
            if need > self.mat.shape[0]:
                cap = max(need, 2 * self.mat.shape[0], 16)
                for name, shape in (("mat", (cap, self.dim)), ("ids_", (cap,)), ("hashes", (cap,))):
                    cur = getattr(self, name)
                    arr = np.empty(shape, dtype=cur.dtype)
                    arr[: self.n] = cur[: self.n]
                    setattr(self, name, arr)
            self.mat[self.n: need] = m[new]
            self.ids_[self.n: need] = ids[new]
            self.hashes[self.n: need] = hashes[new]
            self.row[ids[new]] = np.arange(self.n, need, dtype=np.int64)
            self.n = need

    def remove(self, d: int) -> bool:
        if not (0 <= d < self.row.shape[0]) or self.row[d] < 0:
            return False
        r = int(self.row[d])
        self.row[d] = -1
        last = self.n - 1
        if r != last:
            moved = int(self.ids_[last])
            self.mat[r] = self.mat[last]
            self.ids_[r] = moved
            self.hashes[r] = self.hashes[last]
            self.row[moved] = r
        self.n = last
        return True

    def ids(self) -> np.ndarray:
        return self.ids_[: self.n]

    def snapshot(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.ids_[: self.n].copy(), self.mat[: self.n].copy(), self.hashes[: self.n].copy()

    def search(self, q: np.ndarray, top_k: int, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        if self.n == 0:
            return _EMPTY
        ids = self.ids_[: self.n]
        if allowed is None:
            return _top_k(ids, self.mat[: self.n] @ q, top_k)
        rows = np.flatnonzero(_mask_of(allowed, ids))
        if rows.shape[0] == 0:
            return _EMPTY
        scores = self.mat[rows] @ q if rows.shape[0] * 4 < self.n else (self.mat[: self.n] @ q)[rows]
        return _top_k(ids[rows], scores, top_k)


# --------------------------------------------------------------------------- approximate segment


class AnnSegment:
    """An immutable usearch index over ``keys`` (sorted chunk ids) with a live mask by id."""

    def __init__(self, index: Any, keys: np.ndarray, hashes: np.ndarray, *, path: Path | None = None) -> None:
        self.index = index
        self.keys = keys
        self.hashes = hashes
        self.path = path  # the file it is viewed from (None: in memory)
        top = int(keys[-1]) + 1 if keys.shape[0] else 0
        self.live = np.zeros(top, dtype=bool)
        self.live[keys] = True
        self.n_total = int(keys.shape[0])
        self.n_live = self.n_total

    def has(self, ids: np.ndarray) -> np.ndarray:
        return _mask_of(self.live, ids)

    def tombstone(self, ids: np.ndarray) -> int:
        ids = ids[ids < self.live.shape[0]]
        hit = ids[self.live[ids]]
        self.live[hit] = False
        self.n_live -= int(hit.shape[0])
        return int(hit.shape[0])

    def live_keys(self) -> np.ndarray:
        return self.keys[self.live[self.keys]]

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        """Stored (dequantised) vectors of ``ids`` (every one must be in the index)."""
        if ids.shape[0] == 0:
            return np.zeros((0, self.index.ndim), dtype=np.float32)
        got = self.index.get(ids.astype(np.uint64), dtype=np.float32)
        if isinstance(got, tuple):
            got = np.vstack(got)
        return np.asarray(got, dtype=np.float32).reshape(ids.shape[0], -1)

    def search(self, q: np.ndarray, top_k: int, allowed: np.ndarray | None, exact_scope: int,
               exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        if self.n_live == 0:
            return _EMPTY
        filtered = allowed is not None or self.n_live < self.n_total
        if filtered:
            ok = self.live
            if allowed is not None:
                ok = ok.copy()
                k = min(ok.shape[0], allowed.shape[0])
                ok[:k] &= allowed[:k]
                ok[k:] = False
            m = int(np.count_nonzero(ok))
            if m == 0:
                return _EMPTY
        else:
            ok, m = self.live, self.n_live
        if exact or m <= exact_scope:
            return self._exact(q, top_k, np.flatnonzero(ok))
        share = m / self.n_total
        fetch = min(self.n_total, int(np.ceil(2 * top_k / share)) + top_k)
        while True:
            res = self.index.search(q, fetch, threads=1)
            keys = np.asarray(res.keys, dtype=np.int64)
            scores = (1.0 - np.asarray(res.distances, dtype=np.float32)).astype(np.float32)
            if filtered:
                keep = _mask_of(ok, keys)
                keys, scores = keys[keep], scores[keep]
            if keys.shape[0] >= top_k or fetch >= self.n_total:
                return _top_k(keys, scores, top_k)
            fetch *= 4
            if fetch > max(self.n_total // 4, exact_scope):
                return self._exact(q, top_k, np.flatnonzero(ok))

    def _exact(self, q: np.ndarray, top_k: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        best_i, best_s = [], []
        for s in range(0, ids.shape[0], 65536):  # bounded temporary memory on huge scopes
            part = ids[s: s + 65536]
            i, sc = _top_k(part, self.vectors(part) @ q, top_k)
            best_i.append(i)
            best_s.append(sc)
        return _top_k(np.concatenate(best_i), np.concatenate(best_s), top_k)


# --------------------------------------------------------------------------- the facade


class VectorIndex:
    """Cosine search over L2-normalised float32 rows keyed by int doc ids (see the module docstring).

    Ids are ints in [0, 2**31). Not thread-safe: the caller holds a lock (``Views.lock``).
    ``ann_min``: the delta size at which the keeper builds a segment (None: always exact);
    ``quantization``: storage type of segments (``"f32"``, ``"f16"``, ``"i8"``); ``exact_scope``: a
    scope with at most this many live segment vectors is scored exactly.
    """

    def __init__(self, dim: int, *, ann_min: int | None = 20_000, quantization: str = "f32",
                 connectivity: int = 16, expansion_add: int = 128, expansion_search: int = 64,
                 exact_scope: int = 2048) -> None:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        if ann_min is not None and (isinstance(ann_min, bool) or not isinstance(ann_min, (int, np.integer))
                                    or ann_min < 1):
            raise ValueError(f"ann_min must be a positive int or None, got {ann_min!r}")
        if quantization not in QUANTIZATIONS:
            raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}")
        for name, v in (("connectivity", connectivity), ("expansion_add", expansion_add),
                        ("expansion_search", expansion_search), ("exact_scope", exact_scope)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        self.dim = int(dim)
        self.ann_min = None if ann_min is None else int(ann_min)
        self.quantization = quantization
        self.connectivity, self.expansion_add, self.expansion_search = connectivity, expansion_add, expansion_search
        self.exact_scope = exact_scope
        self.delta = ExactRows(self.dim)
        self.segment: AnnSegment | None = None
        self.ready = True  # False while the keeper loads a store's vectors into a fresh index
        self._dirty: set[int] | None = None  # ids changed since a snapshot began (None: no snapshot)
        self.ready_event = threading.Event()
        self.ready_event.set()
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
        n = int(np.count_nonzero(_mask_of(mask, self.delta.ids())))
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
        return _normalise_rows(m)

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
            return _EMPTY
        ids, scores = self.delta.search(q, int(top_k), allowed)
        if self.segment is not None and self.segment.n_live:
            si, ss = self.segment.search(q, int(top_k), allowed, self.exact_scope, exact)
            ids, scores = _top_k(np.concatenate([ids, si]), np.concatenate([scores, ss]), int(top_k))
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
        self.begin_snapshot()

    def needs_fold(self) -> str | None:
        """'fold' when the delta should go into a (new) segment, 'fresh' for a full rebuild."""
        if self.ann_min is None or not self.ready or not usearch_available():
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
                self.delta.add(ids, _normalise_rows(np.asarray(vecs, dtype=np.float32)), hashes)
        self._dirty = None
        self.ready = True
        self.ready_event.set()

    def abandon_snapshot(self) -> None:
        self._dirty = None if self.ready else self._dirty

    def fold_now(self) -> None:
        """Fold the delta into an in-memory segment in the calling thread (tests, benchmarks, tools;
        ``Views`` leaves this to its keeper thread)."""
        if not usearch_available():
            raise ImportError("an approximate segment needs usearch: pip install usearch")
        self.begin_snapshot()
        ids, mat, hashes = self.delta.snapshot()
        got = folded_index(self, self.segment, ids, mat, hashes, _NoLock())
        assert got is not None
        index, keys, khashes = got
        self.install(AnnSegment(index, keys, khashes), snapshot_delta=ids)


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


# --------------------------------------------------------------------------- usearch + sidecar files


def _new_usearch(vi: VectorIndex) -> Any:
    Index = _usearch_index()
    return Index(ndim=vi.dim, metric="cos", dtype=vi.quantization, connectivity=vi.connectivity,
                 expansion_add=vi.expansion_add, expansion_search=vi.expansion_search)


def _crc(path: Path) -> int:
    crc = 0
    with open(path, "rb") as fh:
        while True:
            block = fh.read(1 << 23)
            if not block:
                return crc
            crc = zlib.crc32(block, crc)


_FILES = ("vectors.usearch", "vectors.keys.npy", "vectors.json")


def remove_sidecar(directory: Path) -> None:
    for name in _FILES:
        try:
            (directory / name).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("causalmem: cannot remove %s: %s", directory / name, exc)


def save_sidecar(directory: Path, index: Any, keys: np.ndarray, hashes: np.ndarray, model: str,
                 vi: VectorIndex) -> Path:
    """Write the three files (temporary names, then renamed; the header last); returns the index path."""
    directory.mkdir(parents=True, exist_ok=True)
    tag = f".tmp{os.getpid()}.{threading.get_ident()}"
    upath, kpath, hpath = (directory / (n + tag) for n in _FILES)
    try:
        index.save(str(upath))
        pairs = np.ascontiguousarray(np.stack([keys, hashes], axis=1).astype("<i8"))
        with open(kpath, "wb") as fh:
            np.save(fh, pairs)
        head = {"format": FORMAT, "model": model, "dim": vi.dim, "dtype": vi.quantization, "metric": "cos",
                "connectivity": vi.connectivity, "count": int(keys.shape[0]),
                "usearch_bytes": upath.stat().st_size, "usearch_crc32": _crc(upath),
                "keys_bytes": kpath.stat().st_size, "keys_crc32": _crc(kpath), "saved_at": time.time()}
        hpath.write_text(json.dumps(head, sort_keys=True))
        try:
            (directory / _FILES[2]).unlink()  # no header while the pair is swapped: never a mixed pair
        except FileNotFoundError:
            pass
        os.replace(upath, directory / _FILES[0])
        os.replace(kpath, directory / _FILES[1])
        os.replace(hpath, directory / _FILES[2])
    finally:
        for p in (upath, kpath, hpath):
            if p.exists():
                p.unlink()
    return directory / _FILES[0]


def open_sidecar(directory: Path, model: str, vi: VectorIndex) -> tuple[AnnSegment | None, str]:
    """The persisted segment as a memory-mapped view, or (None, why it is not usable)."""
    upath, kpath, hpath = (directory / n for n in _FILES)
    if not hpath.exists():
        return None, "no index file"
    try:
        head = json.loads(hpath.read_text())
        want = {"format": FORMAT, "model": model, "dim": vi.dim, "dtype": vi.quantization, "metric": "cos"}
        for k, v in want.items():
            if head.get(k) != v:
                return None, f"header {k}={head.get(k)!r}, expected {v!r}"
        if upath.stat().st_size != head["usearch_bytes"] or kpath.stat().st_size != head["keys_bytes"]:
            return None, "file size differs from the header (truncated or replaced)"
        if _crc(kpath) != head["keys_crc32"] or _crc(upath) != head["usearch_crc32"]:
            return None, "checksum mismatch (corrupt file)"
        with open(kpath, "rb") as fh:
            pairs = np.load(fh, allow_pickle=False)
        if pairs.ndim != 2 or pairs.shape != (head["count"], 2) or pairs.dtype.kind != "i":
            return None, "keys file has the wrong shape"
        keys, hashes = pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
        if keys.shape[0] and (np.any(np.diff(keys) <= 0) or keys[0] < 0):
            return None, "keys are not strictly ascending"
        index = _usearch_index().restore(str(upath), view=True)
        if index is None or index.ndim != vi.dim or index.size != keys.shape[0]:
            return None, "usearch file does not match its keys"
        index.expansion_search = vi.expansion_search
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        return None, f"unreadable ({type(exc).__name__}: {exc})"
    return AnnSegment(index, keys, hashes, path=upath), "ok"


def _add(index: Any, ids: np.ndarray, mat: np.ndarray, stopping: Any = lambda: False) -> bool:
    """Add in slices of 4,096 (a stop request waits for one slice only); False when stopped."""
    for s in range(0, ids.shape[0], 4096):
        if stopping():
            return False
        index.add(ids[s: s + 4096].astype(np.uint64), mat[s: s + 4096], threads=2)
    return True


def folded_index(vi: VectorIndex, seg: AnnSegment | None, ids: np.ndarray, mat: np.ndarray, hashes: np.ndarray,
                 lock: Any, stopping: Any = lambda: False) -> tuple[Any, np.ndarray, np.ndarray] | None:
    """A usearch index holding ``seg``'s live vectors plus (ids, mat): a copy of the segment (loaded from
    its file when it is a view) with the tombstones removed and the new vectors added."""
    if seg is not None:
        index = _usearch_index().restore(str(seg.path), view=False) if seg.path is not None else seg.index.copy()
        with lock:  # the live mask changes under the lock
            live = seg.live[seg.keys]
        gone = seg.keys[~live]
        if gone.shape[0]:
            index.remove(gone.astype(np.uint64))
        index.expansion_add = vi.expansion_add
        index.expansion_search = vi.expansion_search
        live_keys, live_hashes = seg.keys[live], seg.hashes[live]
    else:
        index = _new_usearch(vi)
        live_keys = live_hashes = np.zeros(0, np.int64)
    if not _add(index, ids, mat, stopping):
        return None
    keys = np.concatenate([live_keys, ids])
    khashes = np.concatenate([live_hashes, hashes])
    order = np.argsort(keys)
    return index, keys[order], khashes[order]


# --------------------------------------------------------------------------- the keeper thread

#: rows per store read (each read holds the in-process lock briefly)
_PAGE = 20_000
#: a store with at least this many vectors and no usable sidecar gets its segment built straight from
#: the store (its vectors never sit in the exact delta); smaller ones are loaded exact, then folded
DIRECT_BUILD = 200_000


#: live keepers, stopped at interpreter exit (a daemon thread killed inside usearch's native code
#: can abort the process instead of exiting cleanly)
_KEEPERS: "weakref.WeakSet[IndexKeeper]" = weakref.WeakSet()


@atexit.register
def _stop_all_keepers() -> None:
    for keeper in list(_KEEPERS):
        keeper.stop(timeout=30)


class IndexKeeper:
    """One daemon thread per ``Views``: loads, folds, rebuilds and persists the vector index.

    Never holds ``Views.lock`` while it reads many rows, builds or writes files: store reads are
    paged (the lock per page), the build runs on a private usearch index, the swap takes the lock."""

    def __init__(self, views: "Views") -> None:
        self.views = views
        self._cond = threading.Condition()
        self._kicks = 0
        self._done = 0
        self._stop = False
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.loads = 0
        _KEEPERS.add(self)

    def kick(self) -> None:
        with self._cond:
            if self._stop:
                return
            self._kicks += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="causalmem-vectors", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def stop(self, timeout: float | None = 30) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every kick so far was handled."""
        with self._cond:
            want = self._kicks
            return self._cond.wait_for(lambda: self._done >= want or self._stop or
                                       not (self._thread and self._thread.is_alive()), timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._done >= self._kicks and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                seen = self._kicks
            try:
                for _ in range(8):  # a bounded number of steps per kick
                    if self._stop or not self.step():
                        break
            except Exception as exc:  # keep the thread: the next kick retries
                log.warning("causalmem: vector index maintenance failed: %s", exc, exc_info=True)
                self.error = exc
                with self.views.lock:
                    vi = self.views.vectors
                    if vi is not None:
                        vi.abandon_snapshot()
            with self._cond:
                self._done = max(self._done, seen)
                self._cond.notify_all()

    # ------------------------------------------------------------------ steps
    def _sidecar(self) -> Path | None:
        """``<db>.idx`` (shared with the other index files, see ``sidecar.py``); None for a non-file store."""
        if not usearch_available():
            return None
        return getattr(self.views, "sidecar_dir", None)

    def step(self) -> bool:
        """One unit of work; False when there is nothing to do."""
        views = self.views
        emb = views.embedder
        with views.lock:
            vi = views.vectors
            if vi is None or emb is None:
                return False
            kind: str | None = "load" if not vi.ready else vi.needs_fold()
            if kind is None:
                return False
            if kind != "load":
                vi.begin_snapshot()
            snap = (vi.segment, *vi.delta.snapshot()) if kind == "fold" else None
        if kind == "load":
            self._load(vi, emb.model_name)
        elif kind == "fresh" or snap is None:
            self._fresh(vi, emb.model_name)
        else:
            self._fold(vi, emb.model_name, snap)
        return True

    def _pages(self, model: str, with_vectors: bool) -> Iterable[list[tuple]]:
        """Pages of (nid, text_hash[, blob]) of the current vectors, each read under the lock."""
        store = self.views.store
        paged = getattr(store, "embedding_rows", None)
        if paged is None:  # a backend without paging: one read
            with self.views.lock:
                rows = [tuple(r) if with_vectors else (r[0], r[1]) for r in store.embeddings_for(model)]
            yield rows
            return
        after = 0
        while not self._stop:
            with self.views.lock:
                rows = paged(model, after_nid=after, limit=_PAGE, with_vectors=with_vectors)
            if not rows:
                return
            yield rows
            after = rows[-1][0]

    def _decode(self, rows: list[tuple], dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        hashes = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
        vecs = np.frombuffer(b"".join(r[2] for r in rows), dtype="<f4").reshape(len(rows), dim)
        return ids, vecs.astype(np.float32), hashes

    def _install(self, vi: VectorIndex, *args: Any, **kw: Any) -> bool:
        with self.views.lock:
            if self.views.vectors is not vi:  # reset meanwhile: the work is dropped
                return False
            vi.install(*args, **kw)
            return True

    def _load(self, vi: VectorIndex, model: str) -> None:
        t0 = time.perf_counter()
        dim = vi.dim
        directory = self._sidecar()
        seg, why = (None, "no sidecar for this store")
        if directory is not None and vi.ann_min is not None:
            seg, why = open_sidecar(directory, model, vi)
            if seg is None and why != "no index file":
                log.warning("causalmem: vector index %s not used (%s): rebuilding it", directory, why)
                remove_sidecar(directory)
        # the database's current (id, text hash) pairs decide which persisted vectors are still valid
        keys = [np.asarray(p, dtype=np.int64).reshape(-1, 2) for p in self._pages(model, with_vectors=False)]
        cur = np.concatenate(keys) if keys else np.zeros((0, 2), dtype=np.int64)
        if seg is not None:
            pos = np.searchsorted(seg.keys, cur[:, 0])
            pos = np.minimum(pos, max(seg.keys.shape[0] - 1, 0))
            same = (seg.keys.shape[0] > 0) & (seg.keys[pos] == cur[:, 0]) & (seg.hashes[pos] == cur[:, 1])
            valid = np.zeros(seg.live.shape[0], dtype=bool)
            valid[cur[same, 0]] = True
            seg.tombstone(seg.keys[~valid[seg.keys]])
            missing = cur[~same, 0]
        else:
            missing = cur[:, 0]
        big = seg is None and vi.ann_min is not None and usearch_available() and \
            missing.shape[0] >= max(vi.ann_min, DIRECT_BUILD)
        if big:  # build the segment straight from the store: the vectors never sit in the delta
            self._fresh(vi, model, loading=True)
            return
        extra = self._read_vectors(model, missing, dim)
        if self._install(vi, seg, extra):
            self.loads += 1
            log.info("causalmem: vector index ready in %.2f s (%s; %d from the store)",
                     time.perf_counter() - t0, "persisted segment" if seg is not None else why, extra[0].shape[0])

    def _read_vectors(self, model: str, nids: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        out = []
        store = self.views.store
        paged = getattr(store, "embedding_rows", None)
        if nids.shape[0] and paged is not None and nids.shape[0] > _PAGE:
            want = np.zeros(int(nids.max()) + 1, dtype=bool)
            want[nids] = True
            for rows in self._pages(model, with_vectors=True):
                rows = [r for r in rows if r[0] < want.shape[0] and want[r[0]]]
                if rows:
                    out.append(self._decode(rows, dim))
        elif nids.shape[0]:
            for s in range(0, nids.shape[0], 5000):
                part = nids[s: s + 5000].tolist()
                with self.views.lock:
                    if paged is not None:
                        rows = paged(model, nids=part, with_vectors=True)
                    else:
                        got = dict(store.embeddings_of(part, model))
                        rows = [(n, UNKNOWN_HASH, got[n]) for n in part if n in got]
                if rows:
                    out.append(self._decode(rows, dim))
        if not out:
            return np.zeros(0, np.int64), np.zeros((0, dim), np.float32), np.zeros(0, np.int64)
        return (np.concatenate([o[0] for o in out]), np.vstack([o[1] for o in out]),
                np.concatenate([o[2] for o in out]))

    def _persist(self, vi: VectorIndex, index: Any, keys: np.ndarray, hashes: np.ndarray,
                 model: str) -> AnnSegment:
        """Save ``index`` next to the database and reopen it as a view (RAM freed); in memory otherwise."""
        order = np.argsort(keys)
        keys, hashes = keys[order], hashes[order]
        directory = self._sidecar()
        if directory is not None:
            try:
                save_sidecar(directory, index, keys, hashes, model, vi)
                seg, why = open_sidecar(directory, model, vi)
                if seg is not None:
                    return seg
                log.warning("causalmem: vector index just saved in %s is not readable (%s)", directory, why)
            except OSError as exc:
                log.warning("causalmem: cannot save the vector index in %s: %s (kept in memory)", directory, exc)
        return AnnSegment(index, keys, hashes)

    def _fresh(self, vi: VectorIndex, model: str, loading: bool = False) -> None:
        """A new segment from every current vector in the store (paged reads)."""
        t0 = time.perf_counter()
        index = _new_usearch(vi)
        keys, hashes = [], []
        for rows in self._pages(model, with_vectors=True):
            ids, vecs, h = self._decode(rows, vi.dim)
            if not _add(index, ids, vecs, lambda: self._stop):
                return
            keys.append(ids)
            hashes.append(h)
        if self._stop:
            return
        k = np.concatenate(keys) if keys else np.zeros(0, np.int64)
        h = np.concatenate(hashes) if hashes else np.zeros(0, np.int64)
        seg = self._persist(vi, index, k, h, model)
        del index
        with self.views.lock:
            if self.views.vectors is not vi:
                return
            # delta ids older than the snapshot are in the store read; newer ones are dirty (kept)
            vi.install(seg, None, snapshot_delta=vi.delta.ids().copy())
        log.info("causalmem: vector index built from the store in %.1f s (%d vectors)", time.perf_counter() - t0,
                 k.shape[0])

    def _fold(self, vi: VectorIndex, model: str, snap: tuple) -> None:
        """The delta folded into a copy of the segment (usearch adds: no rebuild of the graph)."""
        t0 = time.perf_counter()
        seg, ids, mat, hashes = snap
        got = folded_index(vi, seg, ids, mat, hashes, self.views.lock, lambda: self._stop)
        if got is None:
            return
        index, keys, khashes = got
        new = self._persist(vi, index, keys, khashes, model)
        del index
        if self._install(vi, new, None, snapshot_delta=ids):
            log.info("causalmem: %d vectors folded into the index in %.1f s (%d live)", ids.shape[0],
                     time.perf_counter() - t0, new.n_live)
