"""Sidecar files: snapshots of the in-process views next to the database, so a fresh process opens
a big store without re-reading and re-tokenizing every row.

``agent.db`` keeps its sidecars in ``agent.db.idx/`` (one file per view: ``lexical.cmx``,
``chunks.cmx``, ``projection.cmx``; other indexes put their own files there with their own
headers). A ``:memory:`` store has none. Deleting the directory is always safe: the next open
rebuilds from the database and writes it again at ``close()``.

File layout (little-endian)::

    magic  b"CMSIDE1\\n"             8 bytes
    u32    header length             then the header: UTF-8 JSON
    pad    to 64 bytes
    payload                          the arrays, each at a 64-byte aligned offset

The header names the view (``kind``), the format version, the store's ``change_seq`` the
snapshot matches, each array's name / dtype / shape / offset, a small JSON ``meta`` and a
checksum of the payload (the wrapping sum of its 64-bit words, plus its length). A file is used
only when all of that agrees: right kind and version, the current ``change_seq``, the exact
file size and the checksum; anything else — another database's file, a crash between a write
and the refresh, a truncated or damaged file — is reported as ``None`` (the caller rebuilds from
the database) and never raises.

Loading maps the file copy-on-write (``np.memmap`` mode ``"c"``): arrays are usable at once,
pages are read on first touch, and an in-place update after the load stays private to the
process (the file never changes under another reader). Saving writes a new file and renames it
over the old one, so a reader that mapped the old file keeps it.
"""
from __future__ import annotations

import json
import logging
import os
import struct
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np

log = logging.getLogger("causalmem")

__all__ = ["MAGIC", "FORMAT", "KINDS", "sidecar_dir", "save_arrays", "load_arrays", "restamp", "remove", "Snapshot"]

MAGIC = b"CMSIDE1\n"
#: the views saved by ``Views.save_sidecars``
KINDS = ("chunks", "lexical", "projection")
FORMAT = 1
_ALIGN = 64
_SUFFIX = ".cmx"


class Snapshot:
    """Arrays and meta of one loaded sidecar file."""

    __slots__ = ("kind", "change_seq", "arrays", "meta", "path")

    def __init__(self, kind: str, change_seq: int, arrays: dict[str, np.ndarray], meta: dict[str, Any],
                 path: Path) -> None:
        self.kind = kind
        self.change_seq = change_seq
        self.arrays = arrays
        self.meta = meta
        self.path = path


def sidecar_dir(db_path: str | os.PathLike[str] | None) -> Path | None:
    """``<db>.idx`` next to a database file; None for ``:memory:``, no path, or anything that is not
    an existing file (a server database's connection string never gets a directory)."""
    if db_path is None:
        return None
    p = str(db_path)
    if p == ":memory:" or p.startswith("file::memory:") or not p or "://" in p or not Path(p).is_file():
        return None
    return Path(p + ".idx")


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _checksum(buf: np.ndarray) -> int:
    """Wrapping sum of the payload's 64-bit words (the payload length is a multiple of 64)."""
    words = buf.view(np.uint64) if buf.dtype != np.uint64 else buf
    # chunked: no temporary of the payload's size
    total = 0
    step = 1 << 22
    for lo in range(0, words.shape[0], step):
        total = (total + int(np.add.reduce(words[lo:lo + step], dtype=np.uint64))) & 0xFFFFFFFFFFFFFFFF
    return total


def save_arrays(directory: Path, kind: str, change_seq: int, arrays: Mapping[str, np.ndarray],
                meta: Mapping[str, Any] | None = None) -> Path:
    """Write one sidecar file atomically (temporary file, fsync, rename); returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    specs = []
    offset = 0
    prepared = []
    for name, arr in arrays.items():
        a = np.ascontiguousarray(arr)
        if a.dtype.byteorder == ">" or a.dtype.hasobject:
            raise ValueError(f"array {name!r}: dtype {a.dtype} cannot go into a sidecar")
        specs.append({"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "offset": offset,
                      "nbytes": int(a.nbytes)})
        prepared.append((offset, a))
        offset = _aligned(offset + a.nbytes)
    payload_len = offset
    payload = np.zeros(payload_len, dtype=np.uint8)
    for off, a in prepared:
        if a.nbytes:
            payload[off:off + a.nbytes] = a.reshape(-1).view(np.uint8)
    header = {"format": FORMAT, "kind": kind, "change_seq": _seq_text(change_seq), "arrays": specs,
              "meta": dict(meta or {}), "payload": payload_len, "checksum": _checksum(payload)}
    head = json.dumps(header, separators=(",", ":")).encode()
    prefix = MAGIC + struct.pack("<I", len(head)) + head
    prefix += b"\0" * (_aligned(len(prefix)) - len(prefix))
    target = directory / f"{kind}{_SUFFIX}"
    fd, tmp = tempfile.mkstemp(prefix=f".{kind}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(prefix)
            payload.tofile(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target


def load_arrays(directory: Path | None, kind: str, change_seq: int) -> Snapshot | None:
    """The sidecar ``kind`` if it matches ``change_seq`` and is intact; None otherwise (never raises
    for a bad file: the reason is logged at debug level and the caller rebuilds)."""
    if directory is None:
        return None
    path = directory / f"{kind}{_SUFFIX}"
    try:
        return _load(path, kind, change_seq)
    except FileNotFoundError:
        return None
    except Exception as exc:  # a damaged file is never trusted and never fatal
        log.info("causalmem: sidecar %s not used (%s: %s); rebuilding from the database", path,
                 type(exc).__name__, exc)
        return None


class SidecarMismatch(Exception):
    pass


def _load(path: Path, kind: str, change_seq: int) -> Snapshot:
    with open(path, "rb") as f:
        start = f.read(12)
        if len(start) < 12 or start[:8] != MAGIC:
            raise SidecarMismatch("not a causalmem sidecar file")
        (hlen,) = struct.unpack("<I", start[8:12])
        if hlen > 1 << 24:
            raise SidecarMismatch("header length out of range")
        head = f.read(hlen)
        if len(head) != hlen:
            raise SidecarMismatch("truncated header")
        size = os.fstat(f.fileno()).st_size
    header = json.loads(head.decode())
    if header.get("format") != FORMAT or header.get("kind") != kind:
        raise SidecarMismatch(f"format {header.get('format')!r} / kind {header.get('kind')!r}")
    if header.get("change_seq") != _seq_text(change_seq):
        raise SidecarMismatch(f"made at change {header.get('change_seq')}, the database is at {change_seq}")
    base = _aligned(12 + hlen)
    payload_len = int(header["payload"])
    if size != base + payload_len:
        raise SidecarMismatch(f"file size {size}, expected {base + payload_len}")
    if payload_len == 0:
        raw = np.zeros(0, dtype=np.uint8)
    else:
        raw = np.memmap(path, dtype=np.uint8, mode="c", offset=base, shape=(payload_len,))
    if payload_len % 8 or _checksum(raw) != int(header["checksum"]):
        raise SidecarMismatch("checksum mismatch")
    arrays: dict[str, np.ndarray] = {}
    for spec in header["arrays"]:
        dtype = np.dtype(spec["dtype"])
        shape = tuple(int(s) for s in spec["shape"])
        off, nbytes = int(spec["offset"]), int(spec["nbytes"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if off < 0 or off + nbytes > payload_len or count * dtype.itemsize != nbytes:
            raise SidecarMismatch(f"array {spec['name']!r} out of bounds")
        arrays[spec["name"]] = np.ndarray(shape, dtype=dtype, buffer=raw, offset=off)
    meta = header.get("meta")
    if not isinstance(meta, dict):
        raise SidecarMismatch("meta is not an object")
    return Snapshot(kind, int(change_seq), arrays, meta, path)


def _seq_text(change_seq: int) -> str:
    """Fixed width, so ``restamp`` can rewrite it in place."""
    return f"{int(change_seq):020d}"


def restamp(directory: Path, kind: str, old_seq: int, new_seq: int) -> bool:
    """Move an unchanged view's file from ``old_seq`` to ``new_seq`` by rewriting the 20 digits in
    its header in place (the payload is untouched). False when the file is not the expected one."""
    path = directory / f"{kind}{_SUFFIX}"
    old = f'"change_seq":"{_seq_text(old_seq)}"'.encode()
    new = f'"change_seq":"{_seq_text(new_seq)}"'.encode()
    try:
        with open(path, "r+b") as f:
            start = f.read(12)
            if len(start) < 12 or start[:8] != MAGIC:
                return False
            (hlen,) = struct.unpack("<I", start[8:12])
            head = f.read(min(hlen, 1 << 24))
            at = head.find(old)
            if at < 0 or head.find(b'"kind":"' + kind.encode() + b'"') < 0:
                return False
            f.seek(12 + at)
            f.write(new)
            f.flush()
            os.fsync(f.fileno())
        return True
    except OSError:
        return False


def remove(directory: Path | None, kind: str) -> None:
    """Delete one sidecar file (a view that cannot be saved must not leave an older one behind)."""
    if directory is None:
        return
    try:
        (directory / f"{kind}{_SUFFIX}").unlink()
    except OSError:
        pass
