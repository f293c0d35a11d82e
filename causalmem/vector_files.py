"""The vector index's files: one generation's graph, rows and keys, its header, checksums, build and open.

In ``<db>.idx/`` (:func:`sidecar_dir`): ``vectors-<gen>.usearch`` (the binary graph, usearch's own
format), ``vectors-<gen>.rows.npy`` ((n, dim) rows in key order), ``vectors-<gen>.keys.npy`` ((n, 2)
int64: chunk id, text hash) and the header ``vectors.json`` (``FORMAT``, model, dim, dtype, center,
count, each file's name, size and :func:`checksum`). :class:`SegmentWriter` writes a new generation
under new names and replaces the header last, so a reader never sees a mixed set;
:func:`open_sidecar` checks a generation before its graph is mapped, :func:`verify_rows` checks the
rows file after; :func:`fold_segment` builds the next generation from a segment and new rows. The
stamped state written at close (the delta file) is :mod:`causalmem.vector_journal`'s.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .vector_segments import AnnSegment, Rows, quantised, sign_bits, usearch_index

__all__ = ["FORMAT", "HEADER", "BUILD_THREADS", "IndexSettings", "sidecar_dir", "checksum", "read_header",
           "write_header", "named_files", "tidy", "PurgedMeanwhile", "remove_sidecar", "SegmentWriter",
           "open_sidecar", "verify_rows", "fold_segment"]

log = logging.getLogger("causalmem")

FORMAT = "causalmem-vectors-2"


class IndexSettings(Protocol):
    """The settings of a vector index that its files are built and opened with (``VectorIndex`` has them)."""

    @property
    def dim(self) -> int: ...
    @property
    def quantization(self) -> str: ...
    @property
    def connectivity(self) -> int: ...
    @property
    def expansion_add(self) -> int: ...
    @property
    def expansion_search(self) -> int: ...


def sidecar_dir(db_path: str | os.PathLike[str]) -> Path:
    """``agent.db`` -> ``agent.db.idx`` (the directory the persisted indexes live in)."""
    return Path(os.fspath(db_path) + ".idx")

def _new_usearch(vi: IndexSettings) -> Any:
    """An empty binary HNSW graph: ``dim`` sign bits per vector, Hamming distance."""
    Index = usearch_index()
    return Index(ndim=vi.dim, metric="hamming", dtype="b1", connectivity=vi.connectivity,
                 expansion_add=vi.expansion_add, expansion_search=vi.expansion_search)


def checksum(path: Path, stopping: Any = lambda: False) -> int | None:
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


def read_header(directory: Path) -> dict[str, Any] | None:
    try:
        head = json.loads((directory / HEADER).read_text())
    except (OSError, ValueError):
        return None
    return head if isinstance(head, dict) else None


def write_header(directory: Path, head: dict[str, Any]) -> None:
    tmp = directory / f"{HEADER}.tmp{os.getpid()}.{threading.get_ident()}"
    tmp.write_text(json.dumps(head, sort_keys=True))
    os.replace(tmp, directory / HEADER)


def named_files(head: dict[str, Any] | None) -> set[str]:
    """File names a header refers to."""
    if not head:
        return set()
    names = {str(v[0]) for v in (head.get("files") or {}).values() if isinstance(v, list) and v}
    delta = head.get("delta")
    if isinstance(delta, list) and delta:
        names.add(str(delta[0]))
    return names


def tidy(directory: Path, keep: set[str], drop: set[str] = frozenset()) -> None:  # type: ignore[assignment]
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

    def __init__(self, vi: IndexSettings, directory: Path | None, center: np.ndarray | None = None,
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
            self.index.add(graph_ids[s: s + 4096].astype(np.uint64), sign_bits(graph_mat[s: s + 4096], self.center),
                           threads=BUILD_THREADS)
        q = quantised(mat, self.vi.quantization)
        if self._fh is not None:
            self._fh.write(np.ascontiguousarray(q).tobytes())
        else:
            self.parts.append(q)
        self.keys.append(ids.astype(np.int64))
        self.hashes.append(hashes.astype(np.int64))
        self.n += int(ids.shape[0])
        return True

    def abort(self) -> None:
        """Close and remove this build's files. Never raises: it runs on failure paths, a full disk
        among them, where closing the rows file fails its last flush (its descriptor is closed all the
        same) and must not keep the files from being removed."""
        fh, self._fh = self._fh, None
        if fh is not None:
            with contextlib.suppress(OSError):
                fh.close()
        for p in (self.files or {}).values():
            try:
                p.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("causalmem: cannot remove %s: %s", p, exc)

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
                                                                 array=quantised(rows_arr, vi.quantization)), center)
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
                "files": {k: [p.name, p.stat().st_size, checksum(p)] for k, p in files.items()},
                "rows_stat": _stat_sig(files["rows"])}
        before = read_header(directory)
        write_header(directory, head)
        tidy(directory, named_files(head), named_files(before))
        seg, why = open_sidecar(directory, model, vi)
        if seg is None:
            raise ValueError(f"the vector index just saved is not readable ({why})")
        return seg


def open_sidecar(directory: Path, model: str, vi: IndexSettings, head: dict[str, Any] | None = None
                 ) -> tuple[AnnSegment | None, str]:
    """The persisted segment (its graph a memory-mapped view, its rows read by row), or (None, why not).

    Checked here: the header against the embedder and the settings, every file's exact size, the keys
    file's checksum and the graph file's checksum (native code reads the graph: it is never opened
    unverified); the rows file's checksum is verified by the keeper after the load (:func:`verify_rows`)."""
    if head is None:
        if not (directory / HEADER).exists():
            return None, "no index file"
        head = read_header(directory)
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
        if checksum(files["keys"]) != int(head["files"]["keys"][2]):
            return None, "checksum mismatch in the keys file (corrupt file)"
        if checksum(files["usearch"]) != int(head["files"]["usearch"][2]):
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
        index = usearch_index().restore(str(files["usearch"]), view=True)
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
    head = read_header(directory)
    if head is None or head.get("gen") != seg.gen or seg.rows.path is None:
        return None
    try:
        if head.get("rows_stat") == _stat_sig(seg.rows.path):
            return True
    except OSError:
        return False
    got = checksum(seg.rows.path, stopping)
    return None if got is None else got == int(head["files"]["rows"][2])


def fold_segment(vi: IndexSettings, seg: AnnSegment | None, ids: np.ndarray, mat: np.ndarray, hashes: np.ndarray,
                 lock: Any, directory: Path | None, model: str = "", stopping: Any = lambda: False,
                 guard: Any = None) -> AnnSegment | None:
    """A new segment holding ``seg``'s live vectors plus (ids, mat): the graph is a copy of the segment's
    (loaded from its file when it is a view) with the masked ids removed and the new bits added; the
    rows are merged in key order. None when stopped."""
    if seg is not None:
        index = usearch_index().restore(str(seg.path), view=False) if seg.path is not None else seg.index.copy()
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
