"""The vector index of the semantic channel (issue 10, item 4): an exact delta + a binary-HNSW segment.

Views layer helper, numpy at import; ``usearch`` is imported when an approximate segment is built or
opened (the ``[semantic]``/``[onnx]`` extras install it; without it every search is exact). Also the
one codec of stored vectors (:func:`vector_to_blob`, :func:`blob_to_vector`, :func:`decode_rows`).

:class:`VectorIndex` keeps normalised float32 rows keyed by the store's integer chunk ids in two
disjoint parts:

* the **delta** (:class:`ExactRows`): a dense matrix searched exactly (one matrix-vector product);
  every vector added in this process goes here first;
* at most one **segment** (:class:`AnnSegment`): an immutable usearch HNSW graph over the *sign bits*
  of ``vector - center`` (``b1``, Hamming distance: 48 bytes a vector at 384 dims) that proposes
  ``rescore`` (400) candidates, which are then scored exactly from the segment's **rows** (f32, or
  f16 / i8 with ``quantization``), read by row with ``pread`` from ``vectors-<gen>.rows.npy``. Only
  the small graph is memory-mapped; the rows never are, so the process's RSS holds the graph at most
  (about 200 MB at 1M vectors) and the rows stay in the page cache. A removed or replaced id is
  masked out (a tombstone) by a live mask.

A search asks both parts and merges (best first, equal scores to the lower id). A scope filter
(``allowed``, a boolean mask by id) is applied inside the segment: a scope holding at most
``exact_scope`` live segment vectors is scored exactly (its rows read); a larger one is over-fetched
from the graph by ``rescore / share`` (share = the scope's fraction of the segment), grown 4x while
fewer than ``top_k`` survive the mask, and scanned exactly when the over-fetch would exceed a quarter
of the segment — so a tiny scope still gets its top-k.

Nothing here runs on the query path but the searches: :class:`IndexKeeper` (one daemon thread per
``Views``) loads the index at first use, folds the delta into a new segment when it grows past
``max(ann_min, 10% of the segment)`` (or the tombstones pass 20%), saves it next to the database
and swaps it in under the lock. Until a freshly created index is *ready*, ``Views.vector_search``
answers small scopes exactly from the stored vectors and large ones without the semantic channel;
a first search waits (outside the lock, at most ``views.FAST_LOAD_WAIT_S``) only for a load that is
known to be quick (current files, or at most ``FAST_STORE_READ`` vectors in the store).

Sidecar (file stores only), in ``<db>.idx/``: ``vectors-<gen>.usearch`` (the graph, usearch's own
format), ``vectors-<gen>.rows.npy`` ((n, dim) rows in key order), ``vectors-<gen>.keys.npy`` ((n, 2)
int64: chunk id, hash of the text the vector was computed from) and the header ``vectors.json``
(format, model, dim, dtype, center, count, each file's name, size and checksum; ``seq``/``delta``
below). A new generation is written under new names and the header replaced last, so a reader never
sees a mixed set. At close, when the index holds exactly the store's vectors at its ``change_seq``,
the header records that ``seq`` and names a small delta file (the in-memory delta and the ids masked
since the save). The next open then checks the header, the sizes, the keys and the graph checksums
(read, not mapped) and the delta file, and maps the graph without reading the store (near-instant);
the rows file's checksum is verified by the keeper right after. A header of another ``seq`` makes
the keeper compare every (id, text hash) pair with the database's current vectors instead: an entry
the database no longer has is masked out, a current vector the file lacks is read from the store.
A missing, corrupt or mismatched file is logged and rebuilt, never trusted. Deleting the directory
is safe.
"""
from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import logging
import os
import threading
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from . import _kernels
from .sidecar import index_lock, purge_token, read_chain

# Positional reads: ``os.pread`` where the platform has it. Windows has none (and the compiled gather
# reports ENOSYS there): a rows file is then read by seek + read under the file's lock, row by row.
_HAVE_PREAD = hasattr(os, "pread")

if TYPE_CHECKING:  # pragma: no cover
    from .views import Views

__all__ = ["VectorIndex", "ExactRows", "AnnSegment", "Rows", "SegmentWriter", "IndexKeeper", "usearch_available",
           "sidecar_dir", "QUANTIZATIONS", "UNKNOWN_HASH", "vector_to_blob", "blob_to_vector", "decode_rows"]

log = logging.getLogger("causalmem")

#: storage types of a segment: float32, float16, int8 (usearch scales unit vectors by 127)
QUANTIZATIONS = ("f32", "f16", "i8")
#: text hash of a vector whose source text is not known here (re-validated at the next load)
UNKNOWN_HASH = -(1 << 63)
FORMAT = "causalmem-vectors-2"
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


def vector_to_blob(v: np.ndarray) -> bytes:
    """A 1-D vector as float32 little-endian bytes (the SQLite BLOB format)."""
    a = np.asarray(v)
    if a.ndim != 1:
        raise ValueError(f"vector must be 1-D, got shape {a.shape}")
    return a.astype("<f4", copy=False).tobytes()


def blob_to_vector(b: bytes | bytearray | memoryview, dim: int) -> np.ndarray:
    """Inverse of :func:`vector_to_blob`; a BLOB of the wrong size is a ``ValueError``."""
    raw = bytes(b)
    if len(raw) != 4 * dim:
        raise ValueError(f"vector blob has {len(raw)} bytes, expected {4 * dim} for dim {dim}")
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def decode_rows(rows: Sequence[Sequence[Any]], dim: int, blob: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(nids, float32 vectors) of stored rows: the nid in column 0, the BLOB in column ``blob``."""
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros((0, dim), dtype=np.float32)
    nids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    raw = b"".join(bytes(r[blob]) for r in rows)
    if len(raw) != 4 * dim * len(rows):  # some BLOB has the wrong size: name it
        return nids, np.vstack([blob_to_vector(r[blob], dim) for r in rows])
    return nids, np.frombuffer(raw, dtype="<f4").reshape(len(rows), dim).astype(np.float32)


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


def _dequantised(raw: np.ndarray) -> np.ndarray:
    """Stored rows (f32 / f16 / i8 scaled by 127) as float32; a non-finite value (a damaged file) reads 0."""
    out = raw.astype(np.float32) / np.float32(127.0) if raw.dtype == np.int8 else raw.astype(np.float32, copy=False)
    if not np.isfinite(out).all():
        out = np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0)
    return out


def _quantised(m: np.ndarray, dtype: str) -> np.ndarray:
    """Normalised float32 rows in the storage type of a segment's rows."""
    if dtype == "i8":
        return np.clip(np.rint(m * 127.0), -127, 127).astype(np.int8)
    return m.astype(np.float16 if dtype == "f16" else "<f4")


def _bits(m: np.ndarray, center: np.ndarray) -> np.ndarray:
    """Sign bits of (row - center), packed 8 per byte: what the binary HNSW graph indexes."""
    return np.packbits(np.asarray(m, dtype=np.float32) > center, axis=-1)


class Rows:
    """A segment's vectors in key order, read by row: an array in memory, or a ``.npy`` file read with
    ``pread`` (never memory-mapped, so reading a few hundred rows per search adds nothing to the RSS;
    the file's pages stay in the page cache). The rows a search rescores are read with one ``pread``
    each into one buffer (0.6 ms for 400 rows at 100k; numpy arrays per row and a concatenation cost
    ~6 ms; a mapping released after each gather ~5 ms, its page faults mapping 16 pages each)."""

    def __init__(self, dim: int, dtype: str, *, array: np.ndarray | None = None, path: Path | None = None) -> None:
        self.dim, self.dtype = dim, dtype
        self.array = array
        self.path = path
        self._np = np.dtype({"f32": "<f4", "f16": "<f2", "i8": "i1"}[dtype])
        self.rowbytes = dim * self._np.itemsize
        self.fd = -1
        self.offset = 0
        if array is not None:
            self.n = int(array.shape[0])
            return
        assert path is not None
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            shape, fortran, dt = (np.lib.format.read_array_header_1_0(fh) if version == (1, 0)
                                  else np.lib.format.read_array_header_2_0(fh))
            self.offset = fh.tell()
        if fortran or np.dtype(dt) != self._np or len(shape) != 2 or shape[1] != dim:
            raise ValueError(f"rows file has shape {shape} / {dt}, expected (n, {dim}) {self._np}")
        self.n = int(shape[0])
        if os.path.getsize(path) != self.offset + self.n * self.rowbytes:
            raise ValueError("rows file size does not match its header")
        self._seek_lock = threading.Lock()
        self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter teardown
            pass

    def _pread(self, size: int, at: int) -> bytes:
        """``size`` bytes at byte ``at`` (fewer at the end of the file), without moving a shared offset."""
        if _HAVE_PREAD:
            return os.pread(self.fd, size, at)
        parts: list[bytes] = []
        got = 0
        with self._seek_lock:  # the seek and the reads of one call are not interleaved with another's
            os.lseek(self.fd, at, os.SEEK_SET)
            while got < size:
                part = os.read(self.fd, size - got)
                if not part:
                    break
                parts.append(part)
                got += len(part)
        return b"".join(parts)

    def _read(self, lo: int, count: int) -> np.ndarray:
        want = count * self.rowbytes
        buf = self._pread(want, self.offset + lo * self.rowbytes)
        if len(buf) != want:
            raise OSError(f"short read from {self.path}")
        return np.frombuffer(buf, dtype=self._np).reshape(count, self.dim)

    def take(self, pos: np.ndarray) -> np.ndarray:
        """float32 rows at positions ``pos`` (any order, repeats allowed)."""
        pos = np.asarray(pos, dtype=np.int64)
        if pos.shape[0] == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.array is not None:
            return _dequantised(self.array[pos])
        rb, off, fd = self.rowbytes, self.offset, self.fd
        if int(pos.min()) < 0 or int(pos.max()) >= self.n:
            raise IndexError(f"row positions outside 0..{self.n - 1}")
        buf = np.empty(rb * pos.shape[0], dtype=np.uint8)
        if not _HAVE_PREAD:
            for i, p in enumerate(pos.tolist()):
                row = self._pread(rb, off + p * rb)
                if len(row) != rb:
                    raise OSError(f"short or failed read from {self.path}")
                buf[i * rb: (i + 1) * rb] = np.frombuffer(row, dtype=np.uint8)
            return _dequantised(buf.view(self._np).reshape(pos.shape[0], self.dim))
        try:  # compiled: one pread per row with the GIL released for the whole gather (0.87 -> ~0.3 ms / 400 rows)
            _kernels.pread_rows(fd, np.ascontiguousarray(pos), rb, off, buf)
        except OSError as exc:
            raise OSError(f"short or failed read from {self.path}: {exc}") from exc
        return _dequantised(buf.view(self._np).reshape(pos.shape[0], self.dim))

    def blocks(self, size: int = 32768) -> Iterable[tuple[int, np.ndarray]]:
        """(first position, float32 rows) over every row, in order."""
        for lo in range(0, self.n, size):
            count = min(size, self.n - lo)
            yield lo, (_dequantised(self.array[lo: lo + count]) if self.array is not None else
                       _dequantised(self._read(lo, count)))


class AnnSegment:
    """An immutable segment: a binary HNSW graph (usearch ``b1``, Hamming distance over the sign bits of
    ``row - center``) that proposes candidates, the rows that rescore them exactly, sorted ``keys`` with
    their text ``hashes``, and a live mask by id (a removed or replaced id is masked out)."""

    def __init__(self, index: Any, keys: np.ndarray, hashes: np.ndarray, rows: Rows, center: np.ndarray, *,
                 path: Path | None = None, gen: str | None = None) -> None:
        self.index = index
        self.keys = keys
        self.hashes = hashes
        self.rows = rows
        self.center = center
        self.path = path  # the usearch file it is viewed from (None: in memory)
        self.gen = gen  # the generation tag of its files
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
        """Stored vectors of ``ids`` (every one must be in the segment), float32."""
        return self.rows.take(np.searchsorted(self.keys, ids))

    def search(self, q: np.ndarray, top_k: int, allowed: np.ndarray | None, exact_scope: int,
               exact: bool = False, rescore: int = 400, expansion: int = 64) -> tuple[np.ndarray, np.ndarray]:
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
            return self._exact(q, top_k, ok, m)
        share = m / self.n_total
        # candidates to rescore: ``rescore``, and one in 1,250 of a big segment (800 at 1M: on 1M
        # vectors recall@10 was 0.894 with 400 and 0.970 with 800, vector_index_targets_1000000_f32.md)
        want = max(rescore, 4 * top_k, self.n_total // 1250)
        fetch = min(self.n_total, int(np.ceil(want / share)))
        qbits = _bits(q, self.center)
        while True:
            self.index.expansion_search = max(expansion, fetch)
            res = self.index.search(qbits, fetch, threads=1)
            keys = np.asarray(res.keys, dtype=np.int64)
            keys = keys[keys >= 0] if keys.shape[0] and keys.min() < 0 else keys
            if filtered:
                keys = keys[_mask_of(ok, keys)]
            if keys.shape[0] >= top_k:
                return _top_k(keys, self.vectors(keys) @ q, top_k)
            if fetch >= self.n_total:
                # asked for every key, the graph still may not reach them all (an HNSW over sign bits
                # has many equal codes; usearch returned 15 of 16 in CI): then score exactly
                if keys.shape[0] < min(top_k, m):
                    return self._exact(q, top_k, ok, m)
                return _top_k(keys, self.vectors(keys) @ q, top_k)
            fetch *= 4
            if fetch > max(self.n_total // 4, exact_scope):
                return self._exact(q, top_k, ok, m)

    def _exact(self, q: np.ndarray, top_k: int, ok: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
        best_i, best_s = [], []
        if m * 8 < self.n_total:  # a small part: read its rows
            ids = np.flatnonzero(ok)
            for s in range(0, ids.shape[0], 65536):  # bounded temporary memory on huge scopes
                part = ids[s: s + 65536]
                i, sc = _top_k(part, self.vectors(part) @ q, top_k)
                best_i.append(i)
                best_s.append(sc)
        else:  # most of it: one sequential pass over the rows
            for lo, block in self.rows.blocks():
                keys = self.keys[lo: lo + block.shape[0]]
                sel = _mask_of(ok, keys)
                if sel.any():
                    i, sc = _top_k(keys[sel], block[sel] @ q, top_k)
                    best_i.append(i)
                    best_s.append(sc)
        if not best_i:
            return _EMPTY
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
            return _EMPTY
        ids, scores = self.delta.search(q, int(top_k), allowed)
        if self.segment is not None and self.segment.n_live:
            si, ss = self.segment.search(q, int(top_k), allowed, self.exact_scope, exact, self.rescore,
                                         self.expansion_search)
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
        self.plan_event.clear()
        self.loading_fast = False
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
        if not usearch_available():
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


# --------------------------------------------------------------------------- usearch + sidecar files


def _new_usearch(vi: VectorIndex) -> Any:
    """An empty binary HNSW graph: ``dim`` sign bits per vector, Hamming distance."""
    Index = _usearch_index()
    return Index(ndim=vi.dim, metric="hamming", dtype="b1", connectivity=vi.connectivity,
                 expansion_add=vi.expansion_add, expansion_search=vi.expansion_search)


def _checksum(path: Path, stopping: Any = lambda: False) -> int | None:
    """Wrapping sum of the file's little-endian 64-bit words (the tail zero-padded) plus its length,
    read with ``read`` (page cache only, nothing mapped); None when stopped."""
    total = 0
    size = 0
    with open(path, "rb", buffering=0) as fh:
        buf = bytearray(1 << 23)
        view = memoryview(buf)
        while True:
            if stopping():
                return None
            got = fh.readinto(buf)
            if not got:
                break
            size += got
            words = got // 8 * 8
            total += int(np.frombuffer(view[:words], dtype="<u8").sum(dtype=np.uint64))
            if got > words:
                total += int.from_bytes(bytes(view[words:got]).ljust(8, b"\0"), "little")
    return (total + size) & 0xFFFFFFFFFFFFFFFF


def _npy_header(n: int, dim: int, dtype: np.dtype) -> bytes:
    """A version 1.0 ``.npy`` header of a fixed 128 bytes (rewritten with the final row count)."""
    text = repr({"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (n, dim)})
    body = text.encode("latin1")
    size = 128 - 10
    return b"\x93NUMPY\x01\x00" + size.to_bytes(2, "little") + body + b" " * (size - len(body) - 1) + b"\n"


HEADER = "vectors.json"
#: threads usearch builds a segment with (the graph differs run to run above 1; tests that measure recall set 1)
BUILD_THREADS = 2
_OLD_FILES = ("vectors.usearch", "vectors.keys.npy")  # format 1 (an HNSW over the vectors themselves)
#: files of a replaced generation not named by the header are removed once this old (another
#: process may be between writing its files and its header)
_STALE_S = 600.0


def _gen_files(directory: Path, gen: str) -> dict[str, Path]:
    return {"usearch": directory / f"vectors-{gen}.usearch", "rows": directory / f"vectors-{gen}.rows.npy",
            "keys": directory / f"vectors-{gen}.keys.npy"}


def _read_header(directory: Path) -> dict[str, Any] | None:
    try:
        head = json.loads((directory / HEADER).read_text())
    except (OSError, ValueError):
        return None
    return head if isinstance(head, dict) else None


def _write_header(directory: Path, head: dict[str, Any]) -> None:
    tmp = directory / f"{HEADER}.tmp{os.getpid()}.{threading.get_ident()}"
    tmp.write_text(json.dumps(head, sort_keys=True))
    os.replace(tmp, directory / HEADER)


def _named(head: dict[str, Any] | None) -> set[str]:
    """File names a header refers to."""
    if not head:
        return set()
    names = {str(v[0]) for v in (head.get("files") or {}).values() if isinstance(v, list) and v}
    delta = head.get("delta")
    if isinstance(delta, list) and delta:
        names.add(str(delta[0]))
    return names


def _tidy(directory: Path, keep: set[str], drop: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Remove vector files not in ``keep``: those in ``drop`` at once, others when stale."""
    now = time.time()
    for p in directory.glob("vectors*"):
        if p.name == HEADER or p.name in keep:
            continue
        try:
            if p.name in drop or p.name in _OLD_FILES or now - p.stat().st_mtime > _STALE_S:
                p.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("causalmem: cannot remove %s: %s", p, exc)


class PurgedMeanwhile(Exception):
    """A segment build started before a purge (it may hold purged vectors): its files are dropped."""


def remove_sidecar(directory: Path) -> None:
    """Remove every vector index file (the header first: a half-removed set is never used)."""
    for p in [directory / HEADER, *sorted(directory.glob("vectors*"))]:
        try:
            p.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("causalmem: cannot remove %s: %s", p, exc)


class SegmentWriter:
    """Builds a segment from blocks in ascending key order (normalised float32 rows): the binary graph
    takes their sign bits, the rows go to ``vectors-<gen>.rows.npy`` in ``directory`` (written as they
    come: a 1M build never holds its vectors in memory) or to memory when ``directory`` is None."""

    def __init__(self, vi: VectorIndex, directory: Path | None, center: np.ndarray | None = None,
                 index: Any = None, stopping: Any = lambda: False, guard: Any = None) -> None:
        self.vi = vi
        # a context manager yielding whether the files may be kept (held while the header is written):
        # the keeper's check that no purge ran since the snapshot (``IndexKeeper._guard``)
        self.guard = guard
        self.directory = directory
        self.center = center
        self.index = index if index is not None else _new_usearch(vi)
        self.stopping = stopping
        self.gen = f"{int(time.time() * 1000):x}{os.urandom(4).hex()}"
        self.keys: list[np.ndarray] = []
        self.hashes: list[np.ndarray] = []
        self.parts: list[np.ndarray] = []
        self.n = 0
        self._dtype = np.dtype({"f32": "<f4", "f16": "<f2", "i8": "i1"}[vi.quantization])
        self.files = _gen_files(directory, self.gen) if directory is not None else None
        self._fh: Any = None
        if self.files is not None:
            assert directory is not None
            directory.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.files["rows"], "wb")
            self._fh.write(_npy_header(0, vi.dim, self._dtype))

    def add(self, ids: np.ndarray, mat: np.ndarray, hashes: np.ndarray, new: np.ndarray | None = None) -> bool:
        """Rows ``mat`` of ``ids`` (above every id added before); ``new`` marks the rows the graph does not
        hold yet (default: all). False when stopped."""
        if ids.shape[0] == 0:
            return True
        if self.center is None:  # the sign bits are taken around the first block's mean
            self.center = mat.mean(axis=0).astype(np.float32)
        graph_ids = ids if new is None else ids[new]
        graph_mat = mat if new is None else mat[new]
        for s in range(0, graph_ids.shape[0], 4096):  # a stop request waits for one slice only
            if self.stopping():
                return False
            self.index.add(graph_ids[s: s + 4096].astype(np.uint64), _bits(graph_mat[s: s + 4096], self.center),
                           threads=BUILD_THREADS)
        q = _quantised(mat, self.vi.quantization)
        if self._fh is not None:
            self._fh.write(np.ascontiguousarray(q).tobytes())
        else:
            self.parts.append(q)
        self.keys.append(ids.astype(np.int64))
        self.hashes.append(hashes.astype(np.int64))
        self.n += int(ids.shape[0])
        return True

    def abort(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        for p in (self.files or {}).values():
            try:
                p.unlink()
            except FileNotFoundError:
                pass

    def finish(self, model: str) -> AnnSegment:
        """The segment: saved and reopened as a view from its files (then its header names them and the
        previous generation's files are removed), or in memory without a directory / when saving fails."""
        vi = self.vi
        keys = np.concatenate(self.keys) if self.keys else np.zeros(0, np.int64)
        hashes = np.concatenate(self.hashes) if self.hashes else np.zeros(0, np.int64)
        if keys.shape[0] > 1 and np.any(np.diff(keys) <= 0):
            self.abort()
            raise ValueError("segment rows must come in ascending key order")
        center = self.center if self.center is not None else np.zeros(vi.dim, np.float32)
        if self.files is not None and self.directory is not None:
            try:
                with self.guard() if self.guard is not None else contextlib.nullcontext(True) as keep:
                    if not keep:
                        raise PurgedMeanwhile(f"a purge ran while the vector index in {self.directory} was built")
                    return self._save(model, keys, hashes, center)
            except (OSError, ValueError, RuntimeError) as exc:
                log.warning("causalmem: cannot save the vector index in %s: %s (kept in memory)", self.directory, exc)
                rows = Rows(vi.dim, vi.quantization, path=self.files["rows"])
                rows_arr = rows.take(np.arange(rows.n))
                rows.close()
                self.abort()
                return AnnSegment(self.index, keys, hashes, Rows(vi.dim, vi.quantization,
                                                                 array=_quantised(rows_arr, vi.quantization)), center)
        arr = np.concatenate(self.parts) if self.parts else np.zeros((0, vi.dim), self._dtype)
        return AnnSegment(self.index, keys, hashes, Rows(vi.dim, vi.quantization, array=arr), center)

    def _save(self, model: str, keys: np.ndarray, hashes: np.ndarray, center: np.ndarray) -> AnnSegment:
        vi, files, directory = self.vi, self.files, self.directory
        assert files is not None and directory is not None and self._fh is not None
        fh, self._fh = self._fh, None
        fh.seek(0)
        fh.write(_npy_header(self.n, vi.dim, self._dtype))
        fh.close()
        self.index.save(str(files["usearch"]))
        with open(files["keys"], "wb") as kf:
            np.save(kf, np.ascontiguousarray(np.stack([keys, hashes], axis=1).astype("<i8")))
        head = {"format": FORMAT, "model": model, "dim": vi.dim, "dtype": vi.quantization, "graph": "b1-hamming",
                "connectivity": vi.connectivity, "count": int(keys.shape[0]), "gen": self.gen,
                "center": [float(c) for c in center], "seq": None, "delta": None, "saved_at": time.time(),
                "files": {k: [p.name, p.stat().st_size, _checksum(p)] for k, p in files.items()},
                "rows_stat": _stat_sig(files["rows"])}
        before = _read_header(directory)
        _write_header(directory, head)
        _tidy(directory, _named(head), _named(before))
        seg, why = open_sidecar(directory, model, vi)
        if seg is None:
            raise ValueError(f"the vector index just saved is not readable ({why})")
        return seg


def open_sidecar(directory: Path, model: str, vi: VectorIndex, head: dict[str, Any] | None = None
                 ) -> tuple[AnnSegment | None, str]:
    """The persisted segment (its graph a memory-mapped view, its rows read by row), or (None, why not).

    Checked here: the header against the embedder and the settings, every file's exact size, the keys
    file's checksum and the graph file's checksum (native code reads the graph: it is never opened
    unverified); the rows file's checksum is verified by the keeper after the load (:func:`verify_rows`)."""
    if head is None:
        if not (directory / HEADER).exists():
            return None, "no index file"
        head = _read_header(directory)
        if head is None:
            return None, "unreadable header"
    try:
        want = {"format": FORMAT, "model": model, "dim": vi.dim, "dtype": vi.quantization, "graph": "b1-hamming"}
        for k, v in want.items():
            if head.get(k) != v:
                return None, f"header {k}={head.get(k)!r}, expected {v!r}"
        files = {k: directory / str(head["files"][k][0]) for k in ("usearch", "rows", "keys")}
        for k, p in files.items():
            if p.parent != directory or p.stat().st_size != int(head["files"][k][1]):
                return None, f"{k} file size differs from the header (truncated or replaced)"
        if _checksum(files["keys"]) != int(head["files"]["keys"][2]):
            return None, "checksum mismatch in the keys file (corrupt file)"
        if _checksum(files["usearch"]) != int(head["files"]["usearch"][2]):
            return None, "checksum mismatch in the graph file (corrupt file)"
        with open(files["keys"], "rb") as fh:
            pairs = np.load(fh, allow_pickle=False)
        if pairs.ndim != 2 or pairs.shape != (head["count"], 2) or pairs.dtype.kind != "i":
            return None, "keys file has the wrong shape"
        keys, hashes = pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
        if keys.shape[0] and (np.any(np.diff(keys) <= 0) or keys[0] < 0):
            return None, "keys are not strictly ascending"
        center = np.asarray(head["center"], dtype=np.float32)
        if center.shape != (vi.dim,) or not np.isfinite(center).all():
            return None, "header center has the wrong shape"
        rows = Rows(vi.dim, vi.quantization, path=files["rows"])
        if rows.n != keys.shape[0]:
            rows.close()
            return None, "rows file does not match its keys"
        index = _usearch_index().restore(str(files["usearch"]), view=True)
        if index is None or index.ndim != vi.dim or index.size != keys.shape[0]:
            rows.close()
            return None, "graph file does not match its keys"
        index.expansion_search = vi.expansion_search
    except (OSError, ValueError, KeyError, TypeError, IndexError, RuntimeError) as exc:
        return None, f"unreadable ({type(exc).__name__}: {exc})"
    return AnnSegment(index, keys, hashes, rows, center, path=files["usearch"], gen=str(head["gen"])), "ok"


def _stat_sig(path: Path) -> list[int]:
    """(inode, mtime ns, size) of a file: a rows file is written once per generation and never in place,
    so a write to it (a damaged or replaced file) changes this."""
    st = path.stat()
    return [int(st.st_ino), int(st.st_mtime_ns), int(st.st_size)]


def verify_rows(directory: Path, seg: AnnSegment, stopping: Any = lambda: False) -> bool | None:
    """Whether the segment's rows file still has the checksum its header recorded (None: stopped, or the
    header names another generation now). The whole file (1.5 GB at 1M f32) is read only when its
    (inode, mtime, size) differs from the one recorded when it was written and checksummed — not on
    every open; damage that leaves all three unchanged (bit rot under the file system) goes unseen."""
    head = _read_header(directory)
    if head is None or head.get("gen") != seg.gen or seg.rows.path is None:
        return None
    try:
        if head.get("rows_stat") == _stat_sig(seg.rows.path):
            return True
    except OSError:
        return False
    got = _checksum(seg.rows.path, stopping)
    return None if got is None else got == int(head["files"]["rows"][2])


def stamp_sidecar(directory: Path, vi: VectorIndex, seq: int) -> bool:
    """Record in the header that the files + a small delta file hold exactly the vectors of the database
    at ``change_seq == seq`` (at close): the next open then uses them without reading the database.
    The delta file holds the in-memory delta and the segment ids masked since the segment was saved."""
    seg = vi.segment
    if seg is None or seg.gen is None or not vi.ready:
        return False
    head = _read_header(directory)
    if head is None or head.get("gen") != seg.gen:
        return False
    if head.get("seq") == int(seq):  # the files describe this very state already: nothing to write
        return True
    gone = seg.keys[~seg.live[seg.keys]]
    ids, mat, hashes = vi.delta.snapshot()
    old = _named({"delta": head.get("delta")})
    if gone.shape[0] or ids.shape[0]:
        name = f"vectors-{seg.gen}.delta-{os.urandom(4).hex()}.npz"
        path = directory / name
        with open(path, "wb") as fh:
            np.savez(fh, ids=ids, vectors=mat.astype("<f4"), hashes=hashes, gone=gone)
        head["delta"] = [name, path.stat().st_size, _checksum(path)]
    else:
        head["delta"] = None
    head["seq"] = int(seq)
    _write_header(directory, head)
    _tidy(directory, _named(head), old - _named(head))
    return True


def read_delta(directory: Path, head: dict[str, Any], dim: int
               ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None:
    """((ids, vectors, hashes), gone ids) of a stamped header's delta file; None when damaged."""
    delta = head.get("delta")
    if not delta:
        return (np.zeros(0, np.int64), np.zeros((0, dim), np.float32), np.zeros(0, np.int64)), np.zeros(0, np.int64)
    try:
        path = directory / str(delta[0])
        if path.stat().st_size != int(delta[1]) or _checksum(path) != int(delta[2]):
            return None
        with np.load(path, allow_pickle=False) as z:
            ids, vecs, hashes, gone = (np.asarray(z[k]) for k in ("ids", "vectors", "hashes", "gone"))
        if vecs.shape != (ids.shape[0], dim) or hashes.shape != ids.shape or not np.isfinite(vecs).all():
            return None
        return (ids.astype(np.int64), vecs.astype(np.float32), hashes.astype(np.int64)), gone.astype(np.int64)
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def fold_segment(vi: VectorIndex, seg: AnnSegment | None, ids: np.ndarray, mat: np.ndarray, hashes: np.ndarray,
                 lock: Any, directory: Path | None, model: str = "", stopping: Any = lambda: False,
                 guard: Any = None) -> AnnSegment | None:
    """A new segment holding ``seg``'s live vectors plus (ids, mat): the graph is a copy of the segment's
    (loaded from its file when it is a view) with the masked ids removed and the new bits added; the
    rows are merged in key order. None when stopped."""
    if seg is not None:
        index = _usearch_index().restore(str(seg.path), view=False) if seg.path is not None else seg.index.copy()
        with lock:  # the live mask changes under the lock
            live = seg.live[seg.keys].copy()
        gone = seg.keys[~live]
        if gone.shape[0]:
            index.remove(gone.astype(np.uint64))
        index.expansion_add = vi.expansion_add
        index.expansion_search = vi.expansion_search
        old_pos = np.flatnonzero(live)
        old_keys, old_hashes = seg.keys[old_pos], seg.hashes[old_pos]
        writer = SegmentWriter(vi, directory, seg.center, index, stopping, guard)
    else:
        old_pos = old_keys = old_hashes = np.zeros(0, np.int64)
        writer = SegmentWriter(vi, directory, None, None, stopping, guard)
    n_old = old_keys.shape[0]
    all_keys = np.concatenate([old_keys, ids.astype(np.int64)])
    all_hashes = np.concatenate([old_hashes, hashes.astype(np.int64)])
    order = np.argsort(all_keys, kind="stable")
    try:
        for s in range(0, order.shape[0], 32768):
            o = order[s: s + 32768]
            old = o < n_old
            block = np.empty((o.shape[0], vi.dim), dtype=np.float32)
            if old.any():
                assert seg is not None
                block[old] = seg.rows.take(old_pos[o[old]])
            block[~old] = mat[o[~old] - n_old]
            if not writer.add(all_keys[o], block, all_hashes[o], new=~old):
                writer.abort()
                return None
        return writer.finish(model)
    except BaseException:
        writer.abort()
        raise


# --------------------------------------------------------------------------- the keeper thread

#: rows per store read (each read holds the in-process lock briefly)
_PAGE = 20_000
#: a load reading at most this many vectors from the store is quick enough for a first search to wait
FAST_STORE_READ = 30_000
#: journal kinds that change which vector a chunk has in the index (inserted, updated — e.g. deleted —,
#: retexted, vector stored) and the most ids a catch-up of the index files re-reads
CATCH_UP_KINDS = ("ci", "cu", "ct", "v")
CATCH_UP_MAX_IDS = 200_000
#: a store with at least this many vectors and no usable sidecar gets its segment built straight from
#: the store (its vectors never sit in the exact delta); smaller ones are loaded exact, then folded
DIRECT_BUILD = 200_000


#: live background threads' owners (embedding workers, index keepers), stopped at interpreter exit:
#: a daemon thread killed inside native code (usearch, onnxruntime, torch) can abort the process
#: instead of exiting cleanly. Workers stop first: a worker's last batch feeds its keeper.
_AT_EXIT: dict[str, "weakref.WeakSet[Any]"] = {"worker": weakref.WeakSet(), "keeper": weakref.WeakSet()}


def stop_at_exit(owner: Any, kind: str) -> None:
    """Have ``owner.stop(timeout=30)`` called at interpreter exit (``kind``: "worker" or "keeper")."""
    _AT_EXIT[kind].add(owner)


@atexit.register
def _stop_background_threads() -> None:
    for kind in ("worker", "keeper"):
        for owner in list(_AT_EXIT[kind]):
            owner.stop(timeout=30)


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
        self.catch_ups = 0  # loads from files of an earlier state, caught up along the journal
        self.dropped = 0  # builds whose files were dropped because a purge ran meanwhile
        self._token: bytes | None = None  # the purge token the snapshot of the current step reflects
        stop_at_exit(self, "keeper")

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
            self._token = getattr(views, "purge_seen", None)
            if kind != "load":
                vi.begin_snapshot()
            snap = (vi.segment, *vi.delta.snapshot()) if kind == "fold" else None
        try:
            if kind == "load":
                self._load(vi, emb.model_name)
            elif kind == "fresh" or snap is None:
                self._fresh(vi, emb.model_name)
            else:
                self._fold(vi, emb.model_name, snap)
        except PurgedMeanwhile as exc:
            # built from vectors a purge may have removed: not saved, not installed; the views see
            # the purge at their next call (and drop those vectors), the next kick builds again
            log.info("causalmem: %s", exc)
            self.dropped += 1
            with views.lock:
                if views.vectors is vi:
                    vi.abandon_snapshot()
                views._data_version = -1  # the next call re-reads the store (and the token)
            return False
        return True

    @contextlib.contextmanager
    def _guard(self) -> Any:
        """Held while a new segment's header is written: the index directory's lock, yielding whether
        the purge token is still the one the snapshot reflected (a purge replaces it before its commit
        under the same lock and deletes every file after it, so a build either lands before the
        purge's deletion or is dropped)."""
        directory = self._sidecar()
        with index_lock(directory):
            yield purge_token(directory) == self._token

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
        ids, vecs = decode_rows(rows, dim, blob=2)
        hashes = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
        return ids, vecs, hashes

    def _install(self, vi: VectorIndex, *args: Any, loaded: bool = False, **kw: Any) -> bool:
        """Swap under the lock; ``loaded``: a load made the index equal to the store's vectors now."""
        with self.views.lock:
            if self.views.vectors is not vi:  # reset meanwhile: the work is dropped
                return False
            vi.install(*args, **kw)
            if loaded:
                vi.seq = self.views.vector_seq_now()
            return True

    def _load(self, vi: VectorIndex, model: str) -> None:
        t0 = time.perf_counter()
        dim = vi.dim
        directory = self._sidecar()
        seg, why = (None, "no sidecar for this store")
        head = None
        if directory is not None and vi.ann_min is not None:
            head = _read_header(directory) if (directory / HEADER).exists() else None
            seq = head.get("seq") if head is not None else None
            chain: dict[str, np.ndarray] | None = None
            if seq is not None:
                with self.views.lock:
                    current = self.views._read_seq()
                if seq == current:
                    chain = {}
                elif current is not None:  # files of an earlier state: caught up along the journal
                    chain = read_chain(directory, int(seq), current, max_ids=CATCH_UP_MAX_IDS, kinds=CATCH_UP_KINDS,
                                       vectors=True)
                if chain is not None:
                    vi.plan(fast=True)
            seg, why = open_sidecar(directory, model, vi, head) if head is not None else (
                (None, "no index file") if not (directory / HEADER).exists() else (None, "unreadable header"))
            if seg is None and why != "no index file":
                log.warning("causalmem: vector index %s not used (%s): rebuilding it", directory, why)
                remove_sidecar(directory)
            if seg is not None and chain is not None and head is not None:
                got = read_delta(directory, head, dim)
                if got is not None:  # the files hold the database's vectors at the header's change_seq
                    extra, gone = got
                    seg.tombstone(gone)
                    n_caught = 0
                    if chain:
                        extra, n_caught = self._caught_up(seg, extra, chain, model, dim)
                    if self._install(vi, seg, extra, loaded=True):
                        self.loads += 1
                        self.catch_ups += bool(chain)
                        log.info("causalmem: vector index mapped in %.3f s (files %s; %d in the delta)",
                                 time.perf_counter() - t0, f"caught up: {n_caught} rows re-read" if chain else
                                 "current", extra[0].shape[0])
                        self._verify(vi, seg, directory)
                    return
                log.warning("causalmem: vector index delta file in %s is damaged: checking every vector", directory)
        self._plan_store_read(vi, model)
        # the database's current (id, text hash) pairs decide which persisted vectors are still valid
        keys = [np.asarray(p, dtype=np.int64).reshape(-1, 2) for p in self._pages(model, with_vectors=False)]
        cur = np.concatenate(keys) if keys else np.zeros((0, 2), dtype=np.int64)
        del keys
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
        if self._install(vi, seg, extra, loaded=True):
            self.loads += 1
            log.info("causalmem: vector index ready in %.2f s (%s; %d from the store)",
                     time.perf_counter() - t0, "persisted segment" if seg is not None else why, extra[0].shape[0])
            if seg is not None and directory is not None:
                self._verify(vi, seg, directory)

    def _caught_up(self, seg: AnnSegment, extra: tuple[np.ndarray, np.ndarray, np.ndarray],
                   chain: dict[str, np.ndarray], model: str, dim: int
                   ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], int]:
        """The stamped files patched with the journal's rows: every chunk inserted, updated, retexted or
        given a vector since the stamp is masked in the segment and the delta, and its current vector
        (a live chunk's, of its current text) re-read from the store."""
        ids = np.unique(np.concatenate([chain.get(k, np.zeros(0, np.int64)) for k in CATCH_UP_KINDS]))
        seg.tombstone(ids)
        keep = ~np.isin(extra[0], ids)
        got = self._read_vectors(model, ids, dim)
        return tuple(np.concatenate([a[keep], b]) for a, b in zip(extra, got)), int(ids.shape[0])  # type: ignore

    def _plan_store_read(self, vi: VectorIndex, model: str) -> None:
        """A load that reads the store: quick (a first search may wait for it) up to ``FAST_STORE_READ``
        vectors, told by reading at most that many (id, hash) pairs."""
        paged = getattr(self.views.store, "embedding_rows", None)
        small = False
        if paged is not None:
            with self.views.lock:
                small = len(paged(model, after_nid=0, limit=FAST_STORE_READ + 1, with_vectors=False)) <= FAST_STORE_READ
        vi.plan(fast=small)

    def _verify(self, vi: VectorIndex, seg: AnnSegment, directory: Path) -> None:
        """After a load from the files: the rows file's checksum (read with ``read``, not mapped); a
        damaged file is dropped and the index rebuilt from the store."""
        ok = verify_rows(directory, seg, lambda: self._stop)
        if ok is not False:
            return
        log.warning("causalmem: vector index %s not used (checksum mismatch in the rows file): rebuilding it",
                    directory)
        remove_sidecar(directory)
        with self.views.lock:
            if self.views.vectors is vi:
                self.views.vectors = None  # the next search creates a new index, which the keeper builds

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

    def _fresh(self, vi: VectorIndex, model: str, loading: bool = False) -> None:
        """A new segment from every current vector in the store (paged reads, ascending ids)."""
        t0 = time.perf_counter()
        writer = SegmentWriter(vi, self._sidecar(), stopping=lambda: self._stop, guard=self._guard)
        try:
            for rows in self._pages(model, with_vectors=True):
                ids, vecs, h = self._decode(rows, vi.dim)
                if not writer.add(ids, _normalise_rows(vecs), h):
                    writer.abort()
                    return
            if self._stop:
                writer.abort()
                return
            seg = writer.finish(model)
        except BaseException:
            writer.abort()
            raise
        with self.views.lock:
            if self.views.vectors is not vi:
                return
            # delta ids older than the snapshot are in the store read; newer ones are dirty (kept)
            vi.install(seg, None, snapshot_delta=vi.delta.ids().copy())
            if loading:
                vi.seq = self.views.vector_seq_now()
        log.info("causalmem: vector index built from the store in %.1f s (%d vectors)", time.perf_counter() - t0,
                 seg.n_total)

    def _fold(self, vi: VectorIndex, model: str, snap: tuple) -> None:
        """The delta folded into a copy of the segment (usearch adds: no rebuild of the graph)."""
        t0 = time.perf_counter()
        seg, ids, mat, hashes = snap
        new = fold_segment(vi, seg, ids, mat, hashes, self.views.lock, self._sidecar(), model, lambda: self._stop,
                           self._guard)
        if new is None:
            return
        if self._install(vi, new, None, snapshot_delta=ids):
            log.info("causalmem: %d vectors folded into the index in %.1f s (%d live)", ids.shape[0],
                     time.perf_counter() - t0, new.n_live)
