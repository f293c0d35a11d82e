"""The in-memory parts of the vector index: the exact delta, a segment's rows, the binary-HNSW segment.

numpy at import; ``usearch`` is imported when an approximate segment is built or opened
(:func:`usearch_index`; without it every search is exact). :class:`ExactRows` is the delta searched
with one matrix-vector product; :class:`Rows` a segment's stored vectors, in memory or read by row
from a ``.npy`` file with ``pread``; :class:`AnnSegment` a usearch graph over sign bits whose
candidates are rescored exactly from its rows. The merge helpers (:func:`best_k`, :func:`mask_of`)
are shared with :class:`causalmem.vector_core.VectorIndex`.
"""
from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from . import _kernels

# Positional reads: ``os.pread`` where the platform has it. Windows has none (and the compiled gather
# reports ENOSYS there): a rows file is then read by seek + read under the file's lock, row by row.
_HAVE_PREAD = hasattr(os, "pread")

__all__ = ["QUANTIZATIONS", "EMPTY", "usearch_available", "usearch_index", "best_k", "mask_of", "ExactRows",
           "Rows", "AnnSegment", "quantised", "sign_bits"]

#: storage types of a segment: float32, float16, int8 (usearch scales unit vectors by 127)
QUANTIZATIONS = ("f32", "f16", "i8")
EMPTY = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))


def usearch_available() -> bool:
    return importlib.util.find_spec("usearch") is not None


def usearch_index() -> Any:
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


def best_k(ids: np.ndarray, scores: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best ``top_k`` of (ids, scores), best first, equal scores to the lower id."""
    if scores.shape[0] > top_k:
        kth = np.partition(scores, scores.shape[0] - top_k)[scores.shape[0] - top_k]
        sel = np.flatnonzero(scores >= kth)
        ids, scores = ids[sel], scores[sel]
    order = np.lexsort((ids, -scores))[:top_k]
    return ids[order].copy(), scores[order].astype(np.float32, copy=False)


def mask_of(allowed: np.ndarray | None, ids: np.ndarray) -> np.ndarray:
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
            return EMPTY
        ids = self.ids_[: self.n]
        if allowed is None:
            return best_k(ids, self.mat[: self.n] @ q, top_k)
        rows = np.flatnonzero(mask_of(allowed, ids))
        if rows.shape[0] == 0:
            return EMPTY
        scores = self.mat[rows] @ q if rows.shape[0] * 4 < self.n else (self.mat[: self.n] @ q)[rows]
        return best_k(ids[rows], scores, top_k)


# --------------------------------------------------------------------------- approximate segment


def _dequantised(raw: np.ndarray) -> np.ndarray:
    """Stored rows (f32 / f16 / i8 scaled by 127) as float32; a non-finite value (a damaged file) reads 0."""
    out = raw.astype(np.float32) / np.float32(127.0) if raw.dtype == np.int8 else raw.astype(np.float32, copy=False)
    if not np.isfinite(out).all():
        out = np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0)
    return out


def quantised(m: np.ndarray, dtype: str) -> np.ndarray:
    """Normalised float32 rows in the storage type of a segment's rows."""
    if dtype == "i8":
        return np.clip(np.rint(m * 127.0), -127, 127).astype(np.int8)
    return m.astype(np.float16 if dtype == "f16" else "<f4")


def sign_bits(m: np.ndarray, center: np.ndarray) -> np.ndarray:
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
        return mask_of(self.live, ids)

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
            return EMPTY
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
                return EMPTY
        else:
            ok, m = self.live, self.n_live
        if exact or m <= exact_scope:
            return self._exact(q, top_k, ok, m)
        share = m / self.n_total
        # candidates to rescore: ``rescore``, and one in 1,250 of a big segment (800 at 1M: on 1M
        # vectors recall@10 was 0.894 with 400 and 0.970 with 800, vector_index_targets_1000000_f32.md)
        want = max(rescore, 4 * top_k, self.n_total // 1250)
        fetch = min(self.n_total, int(np.ceil(want / share)))
        qbits = sign_bits(q, self.center)
        while True:
            self.index.expansion_search = max(expansion, fetch)
            res = self.index.search(qbits, fetch, threads=1)
            keys = np.asarray(res.keys, dtype=np.int64)
            keys = keys[keys >= 0] if keys.shape[0] and keys.min() < 0 else keys
            if filtered:
                keys = keys[mask_of(ok, keys)]
            if keys.shape[0] >= top_k:
                return best_k(keys, self.vectors(keys) @ q, top_k)
            if fetch >= self.n_total:
                # asked for every key, the graph still may not reach them all (an HNSW over sign bits
                # has many equal codes; usearch returned 15 of 16 in CI): then score exactly
                if keys.shape[0] < min(top_k, m):
                    return self._exact(q, top_k, ok, m)
                return best_k(keys, self.vectors(keys) @ q, top_k)
            fetch *= 4
            if fetch > max(self.n_total // 4, exact_scope):
                return self._exact(q, top_k, ok, m)

    def _exact(self, q: np.ndarray, top_k: int, ok: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
        best_i, best_s = [], []
        if m * 8 < self.n_total:  # a small part: read its rows
            ids = np.flatnonzero(ok)
            for s in range(0, ids.shape[0], 65536):  # bounded temporary memory on huge scopes
                part = ids[s: s + 65536]
                i, sc = best_k(part, self.vectors(part) @ q, top_k)
                best_i.append(i)
                best_s.append(sc)
        else:  # most of it: one sequential pass over the rows
            for lo, block in self.rows.blocks():
                keys = self.keys[lo: lo + block.shape[0]]
                sel = mask_of(ok, keys)
                if sel.any():
                    i, sc = best_k(keys[sel], block[sel] @ q, top_k)
                    best_i.append(i)
                    best_s.append(sc)
        if not best_i:
            return EMPTY
        return best_k(np.concatenate(best_i), np.concatenate(best_s), top_k)
