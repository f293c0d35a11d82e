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

Change journal (``journal.log``): a process that commits a write appends one line naming the
change (``change_seq`` before and after its transaction) and the ids of the rows it changed, by
kind, instead of loading and rewriting the index files: a one-shot writer (a CLI ``record``)
costs one small append. A process that opens the files later finds them behind the database and
*catches up*: when the journal holds an unbroken chain of entries from the files' ``change_seq``
to the database's, it re-reads just those rows and patches the loaded views (``Views``); any gap
(a commit by a process that wrote no entry: a crash before the append, a sleep cycle, a purge,
another SQLite client, an older version) means no chain, and the views are rebuilt from the
database as before. Each line carries a CRC-32 of itself; a torn or damaged line breaks the
chain and is never trusted.

Loading maps the file copy-on-write (``np.memmap`` mode ``"c"``): arrays are usable at once,
pages are read on first touch, and an in-place update after the load stays private to the
process (the file never changes under another reader). Saving writes a new file and renames it
over the old one, so a reader that mapped the old file keeps it.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import struct
import tempfile
import zlib
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

log = logging.getLogger("causalmem")

__all__ = ["MAGIC", "FORMAT", "KINDS", "sidecar_dir", "save_arrays", "load_arrays", "load_latest", "restamp",
           "remove", "Snapshot", "append_journal", "read_chain", "prune_journal", "JOURNAL", "index_lock",
           "purge_token", "new_purge_token", "purge_files"]

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


def load_latest(directory: Path | None, kind: str) -> Snapshot | None:
    """The sidecar ``kind`` whatever ``change_seq`` it names (intact, else None): the base a
    catch-up from the journal starts from (``Snapshot.change_seq`` says which state it holds)."""
    return _try_load(directory, kind, None)


def load_arrays(directory: Path | None, kind: str, change_seq: int) -> Snapshot | None:
    """The sidecar ``kind`` if it matches ``change_seq`` and is intact; None otherwise (never raises
    for a bad file: the reason is logged at debug level and the caller rebuilds)."""
    return _try_load(directory, kind, change_seq)


def _try_load(directory: Path | None, kind: str, change_seq: int | None) -> Snapshot | None:
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


def _load(path: Path, kind: str, change_seq: int | None) -> Snapshot:
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
    if change_seq is None:
        text = header.get("change_seq")
        if not isinstance(text, str) or not text.isdigit():
            raise SidecarMismatch("no change_seq in the header")
        change_seq = int(text)
    elif header.get("change_seq") != _seq_text(change_seq):
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


# ------------------------------------------------------------------------------ change journal
JOURNAL = "journal.log"
#: appends stop once the journal is this big (the next reader rebuilds and saves, which empties it)
JOURNAL_MAX_BYTES = 8 << 20
#: the kinds of ids an entry names (``Views`` defines what each means for the views); ``v``: chunks
#: whose vector rows were stored (the vector index files catch up from these, ``vector_index.py``)
JOURNAL_KINDS = ("ci", "cu", "ct", "ei", "ex", "eu", "o", "v")
#: what the text views and the graph read from a chain (stored vectors are not their business: a
#: backfill of a million vectors must not make their catch-up look too big)
VIEW_KINDS = ("ci", "cu", "ct", "ei", "ex", "eu", "o")


def _ranges(ids: Any) -> list[list[int]]:
    """Sorted distinct ids as inclusive ``[lo, hi]`` runs (a batch insert is one run)."""
    if isinstance(ids, list) and ids:
        lo, hi = int(min(ids)), int(max(ids))
        if hi - lo + 1 == len(ids) and len(set(ids)) == len(ids):  # distinct and as many as the span: one run
            return [[lo, hi]]
    a = np.unique(np.asarray(list(ids), dtype=np.int64))
    if a.size == 0:
        return []
    cut = np.flatnonzero(np.diff(a) != 1) + 1
    starts = np.concatenate(([0], cut))
    ends = np.concatenate((cut - 1, [a.size - 1]))
    return [[int(a[i]), int(a[j])] for i, j in zip(starts, ends)]


def _unranges(runs: Any) -> np.ndarray:
    if not isinstance(runs, list):
        raise SidecarMismatch("journal ids are not a list")
    parts = []
    for run in runs:
        lo, hi = (int(run[0]), int(run[1])) if isinstance(run, list) and len(run) == 2 else (-1, -2)
        if lo < 0 or hi < lo or hi - lo > 1 << 26:
            raise SidecarMismatch("journal id run out of range")
        parts.append(np.arange(lo, hi + 1, dtype=np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def append_journal(directory: Path | None, from_seq: int, to_seq: int, delta: Mapping[str, Any]) -> bool:
    """Append the entry "the transaction from ``from_seq`` to ``to_seq`` changed these rows" (ids by
    kind). Only when the index directory exists (without files there is nothing to catch up from)
    and the journal is under ``JOURNAL_MAX_BYTES``; one ``write`` of one line in append mode, so
    concurrent writers never interleave within a line. Never raises; False when not written."""
    if directory is None:
        return False
    path = directory / JOURNAL
    # "w": this writer names its stored vectors (kind ``v``); an entry without it (an earlier
    # version's) is no link of a chain the vector index catches up along
    body = {"f": _seq_text(from_seq), "t": _seq_text(to_seq),
            "d": {k: _ranges(v) for k, v in delta.items() if k in JOURNAL_KINDS and len(v)}, "w": 1}
    text = json.dumps(body, separators=(",", ":"))
    line = f"{text} {zlib.crc32(text.encode()):08x}\n".encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:  # no directory (no files yet) or not writable: nothing to keep in step
        return False
    try:
        if os.fstat(fd).st_size + len(line) > JOURNAL_MAX_BYTES:
            return False
        return os.write(fd, line) == len(line)
    except OSError:
        return False
    finally:
        os.close(fd)


def _journal_entries(directory: Path) -> list[tuple[int, int, dict, int]]:
    """The intact entries (from, to, ids by kind, "w" flag) of the journal, in file order (a damaged
    line is left out)."""
    try:
        raw = (directory / JOURNAL).read_bytes()
    except OSError:
        return []
    out = []
    for line in raw.split(b"\n")[:-1]:  # a last line without its newline is an append in progress
        text, _, crc = line.rpartition(b" ")
        try:
            if int(crc, 16) != zlib.crc32(text):
                continue
            body = json.loads(text.decode())
            out.append((int(body["f"]), int(body["t"]), dict(body["d"]), int(body.get("w", 0))))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            continue
    return out


def read_chain(directory: Path | None, from_seq: int, to_seq: int, *,
               max_ids: int | None = None, kinds: tuple[str, ...] = VIEW_KINDS,
               vectors: bool = False) -> dict[str, np.ndarray] | None:
    """The rows changed between ``from_seq`` and ``to_seq`` (sorted distinct ids by kind, of
    ``kinds`` only), from an unbroken chain of journal entries; None when the journal has no such
    chain (a gap: rebuild), or when the chain names more than ``max_ids`` ids of ``kinds`` (a rebuild
    is cheaper). ``vectors``: only entries whose writer named its stored vectors are links. An empty
    dict when ``from_seq == to_seq``."""
    if from_seq == to_seq:
        return {}
    if directory is None or to_seq < from_seq:
        return None
    by_from: dict[int, list[tuple[int, dict]]] = {}
    for f, t, d, w in _journal_entries(directory):
        if from_seq <= f < t <= to_seq and (w or not vectors):
            by_from.setdefault(f, []).append((t, d))
    # the counter only grows, so the path is found by walking forward; a branch (an entry of a
    # commit lost with a crash of the database, a restored copy) is a dead end tried and left
    prev: dict[int, tuple[int, dict]] = {}
    todo, seen = [from_seq], {from_seq}
    while todo and to_seq not in seen:
        f = todo.pop()
        for t, d in by_from.get(f, ()):
            if t not in seen:
                seen.add(t)
                prev[t] = (f, d)
                todo.append(t)
    if to_seq not in seen:
        return None
    parts: dict[str, list[np.ndarray]] = {}
    at, total = to_seq, 0
    try:
        while at != from_seq:
            f, d = prev[at]
            for k, runs in d.items():
                if k not in JOURNAL_KINDS:
                    raise SidecarMismatch(f"unknown journal kind {k!r}")
                if k not in kinds:
                    continue
                ids = _unranges(runs)
                total += ids.size
                if max_ids is not None and total > max_ids:
                    return None
                parts.setdefault(k, []).append(ids)
            at = f
    except SidecarMismatch as exc:
        log.info("causalmem: journal in %s not used (%s)", directory, exc)
        return None
    return {k: np.unique(np.concatenate(v)) for k, v in parts.items()}


def header_seq(directory: Path | None, kind: str) -> int | None:
    """The ``change_seq`` a file's header names (header only: no checksum, not a trust decision)."""
    if directory is None:
        return None
    try:
        with open(directory / f"{kind}{_SUFFIX}", "rb") as f:
            start = f.read(12)
            if len(start) < 12 or start[:8] != MAGIC:
                return None
            (hlen,) = struct.unpack("<I", start[8:12])
            text = json.loads(f.read(min(hlen, 1 << 24)).decode()).get("change_seq")
        return int(text) if isinstance(text, str) and text.isdigit() else None
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return None


def prune_journal(directory: Path | None, keep_from: int) -> None:
    """Drop the entries every index file is past (``to <= keep_from``): after a save at
    ``keep_from``. Rewritten through a temporary file and a rename; an entry another process
    appends meanwhile may be lost, which only breaks a chain (a rebuild, never a wrong answer)."""
    if directory is None:
        return
    path = directory / JOURNAL
    entries = _journal_entries(directory)
    if not entries and not path.exists():
        return
    keep = [(f, t, d, w) for f, t, d, w in entries if t > keep_from]
    try:
        if not keep:
            path.unlink(missing_ok=True)
            return
        fd, tmp = tempfile.mkstemp(prefix=".journal.", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "wb") as fh:
            for f, t, d, w in keep:
                body = {"f": _seq_text(f), "t": _seq_text(t), "d": d, **({"w": 1} if w else {})}
                text = json.dumps(body, separators=(",", ":"))
                fh.write(f"{text} {zlib.crc32(text.encode()):08x}\n".encode())
        os.replace(tmp, path)
    except OSError as exc:
        log.info("causalmem: could not prune the journal in %s: %s", directory, exc)


# ------------------------------------------------------------------------------ purge and the files
#: the lock every writer of index files holds from its last check of the database's state to its
#: last rename, and a purge holds from before its commit until the files are gone (``index_lock``)
LOCK = "index.lock"
#: a random token a purge replaces before its commit: a vector index build that started from an
#: earlier token (it may hold purged vectors) is dropped instead of saved (``vector_index``)
TOKEN = "purge.token"
#: files a purge leaves: the locks (held by other processes: recreating them would split the lock)
#: and the token; none of them holds a text or a vector
_KEPT = (LOCK, TOKEN, "embed.lock")


@contextlib.contextmanager
def index_lock(directory: Path | None) -> Iterator[None]:
    """Exclusive ``flock`` on ``<db>.idx/index.lock`` (the directory is created), between processes
    and between threads (each call opens the file anew). Nothing on a platform without ``fcntl`` or
    a store without a directory."""
    if directory is None:
        yield
        return
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock on this platform (README: purge)
        yield
        return
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def purge_token(directory: Path | None) -> bytes | None:
    """The current purge token (None: no purge ever ran here, or no directory)."""
    if directory is None:
        return None
    try:
        return (directory / TOKEN).read_bytes()
    except OSError:
        return None


def new_purge_token(directory: Path | None) -> bytes | None:
    """Replace the purge token (under ``index_lock``, before the purge commits); returns it."""
    if directory is None:
        return None
    token = os.urandom(16).hex().encode()
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".token.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(token)
        os.replace(tmp, directory / TOKEN)
    except OSError:  # a full disk: no token at all is a change every holder of the old one notices too
        for path in (Path(tmp), directory / TOKEN):
            with contextlib.suppress(OSError):
                path.unlink()
        raise
    return token


def purge_files(directory: Path | None) -> list[str]:
    """Delete every file in the index directory but the locks and the token — the named index
    files, the journal, the vector index's generations and delta files, and whatever a crashed save
    left (``.<kind>.*.tmp``, a generation its header never named); returns the names removed."""
    if directory is None:
        return []
    gone = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return []
    for p in entries:
        if p.name in _KEPT:
            continue
        try:
            if p.is_dir() and not p.is_symlink():
                continue  # never ours
            p.unlink()
            gone.append(p.name)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("causalmem: cannot remove %s after a purge: %s", p, exc)
    return gone
