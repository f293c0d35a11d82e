"""Backup and move: a versioned JSON-lines dump of a whole memory, and its import.

One JSON object per line. The first line is the header::

    {"type": "header", "format": "causalmem-export", "version": 1, "schema_version": 4,
     "exported_at": ..., "vectors": false, "counts": {...}}

then ``meta`` lines (decay bookkeeping, judged supersession pairs), ``chunk`` lines (in the
order of their internal keys, deleted chunks included), ``history``, ``edge`` (validity,
supersession, evidence and polarity origin included), ``cooccurrence`` (Hebbian pairs by chunk
id), ``fact`` and, when asked for, ``embedding`` lines (base64 float32). Chunks and edges keep
their public ids, so a memory imported into an empty database answers every query as the
original did.

Import reads and checks the whole file first (an error names the line, nothing is written),
refuses ids that already exist in the target, then writes everything in one transaction.
"""
from __future__ import annotations

import base64
import binascii
import io
import json
import math
import os
import time
from typing import IO, TYPE_CHECKING, Any, Callable, Iterator, Mapping

from .types import POLARITIES, Relation

if TYPE_CHECKING:  # pragma: no cover
    from .views import Views

__all__ = ["FORMAT", "VERSION", "write_dump", "read_dump", "DumpError"]

FORMAT = "causalmem-export"
VERSION = 1

RECORD_TYPES = ("header", "meta", "chunk", "history", "edge", "cooccurrence", "fact", "embedding")
POLARITY_ORIGINS = ("given", "guessed", "unknown")


class DumpError(ValueError):
    """A line of a dump is not what the format says (the message names the line)."""


# ----------------------------------------------------------------------------------- export
def write_dump(records: Iterator[tuple[str, dict]], fh: IO[str], *, header: Mapping[str, Any]) -> int:
    """Write the header and every (type, record) as one JSON line; returns the number of lines."""
    n = 0
    fh.write(json.dumps({"type": "header", "format": FORMAT, "version": VERSION, **header}, ensure_ascii=False,
                        allow_nan=False) + "\n")
    n += 1
    for kind, rec in records:
        if kind == "embedding" and isinstance(rec.get("vector"), (bytes, bytearray, memoryview)):
            rec = dict(rec, vector=base64.b64encode(bytes(rec["vector"])).decode("ascii"))
        fh.write(json.dumps({"type": kind, **rec}, ensure_ascii=False, allow_nan=False) + "\n")
        n += 1
    return n


# ----------------------------------------------------------------------------------- import
def _num(rec: dict, key: str, *, optional: bool = False, lo: float | None = None, hi: float | None = None) -> Any:
    v = rec.get(key)
    if v is None:
        if optional:
            return None
        raise DumpError(f"{key!r} is missing")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise DumpError(f"{key!r} must be a finite number, got {v!r}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise DumpError(f"{key!r} must be in [{lo}, {hi}], got {v!r}")
    return float(v)


def _int(rec: dict, key: str, *, lo: int = 0) -> int:
    v = rec.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or v > 2 ** 62:
        raise DumpError(f"{key!r} must be an integer >= {lo}, got {v!r}")
    return v


def _str(rec: dict, key: str, *, optional: bool = False, choices: tuple[str, ...] | None = None) -> Any:
    v = rec.get(key)
    if v is None and optional:
        return None
    if not isinstance(v, str) or (not v and not optional):
        raise DumpError(f"{key!r} must be a {'string or null' if optional else 'non-empty string'}, got {v!r}")
    if "\x00" in v:
        raise DumpError(f"{key!r} contains a NUL character")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise DumpError(f"{key!r} is not valid Unicode text (lone surrogate)") from None
    if choices is not None and v not in choices:
        raise DumpError(f"{key!r} must be one of {', '.join(choices)}, got {v!r}")
    return v


def _chunk(rec: dict) -> dict:
    meta = rec.get("metadata", {})
    if not isinstance(meta, dict):
        raise DumpError(f"'metadata' must be an object, got {type(meta).__name__}")
    return {
        "id": _str(rec, "id"), "text": _str(rec, "text"), "kind": _str(rec, "kind"),
        "q_value": _num(rec, "q_value", lo=0.0, hi=1.0), "importance": _num(rec, "importance", lo=0.0, hi=10.0),
        "created_at": _num(rec, "created_at"), "event_time": _num(rec, "event_time", optional=True),
        "user_id": _str(rec, "user_id", optional=True), "agent_id": _str(rec, "agent_id", optional=True),
        "run_id": _str(rec, "run_id", optional=True), "session_id": _str(rec, "session_id", optional=True),
        "metadata": json.dumps(meta, ensure_ascii=False), "access_count": _int(rec, "access_count"),
        "last_accessed_at": _num(rec, "last_accessed_at", optional=True),
        "valid_to": _num(rec, "valid_to", optional=True),
    }


def _edge(rec: dict) -> dict:
    rel = _str(rec, "relation")
    try:
        relation = Relation.parse(rel)
    except ValueError as exc:
        raise DumpError(str(exc)) from None
    if relation.value != rel:
        raise DumpError(f"'relation' must be a stored relation name, got {rel!r}")
    return {
        "id": _str(rec, "id"), "src": _str(rec, "src"), "dst": _str(rec, "dst"), "relation": relation,
        "subtype": _str(rec, "subtype", optional=True), "confidence": _num(rec, "confidence", lo=0.0, hi=1.0),
        "source": _str(rec, "source"), "polarity": _str(rec, "polarity", optional=True, choices=POLARITIES),
        "polarity_origin": _str(rec, "polarity_origin", choices=POLARITY_ORIGINS),
        "evidence": _int(rec, "evidence", lo=1), "task_tag": _str(rec, "task_tag", optional=True),
        "event_time": _num(rec, "event_time", optional=True), "discovered_at": _num(rec, "discovered_at"),
        "valid_to": _num(rec, "valid_to", optional=True), "invalid_reason": _str(rec, "invalid_reason", optional=True),
        "superseded_by": _str(rec, "superseded_by", optional=True),
    }


def _history(rec: dict) -> dict:
    return {"chunk": _str(rec, "chunk"), "event": _str(rec, "event"),
            "old_text": _str(rec, "old_text", optional=True), "new_text": _str(rec, "new_text", optional=True),
            "at": _num(rec, "at")}


def _cooc(rec: dict) -> dict:
    a, b = _str(rec, "a"), _str(rec, "b")
    if a == b:
        raise DumpError("a co-occurrence pair needs two different chunks")
    return {"a": a, "b": b, "weight": _num(rec, "weight", lo=0.0, hi=1.0), "hits": _int(rec, "hits", lo=1),
            "updated_at": _num(rec, "updated_at")}


def _fact(rec: dict) -> dict:
    return {"key": _str(rec, "key"), "value": _str(rec, "value"), "chunk": _str(rec, "chunk"),
            "user_id": _str(rec, "user_id", optional=True), "agent_id": _str(rec, "agent_id", optional=True),
            "run_id": _str(rec, "run_id", optional=True), "confidence": _num(rec, "confidence", lo=0.0, hi=1.0),
            "created_at": _num(rec, "created_at"), "valid_to": _num(rec, "valid_to", optional=True)}


def _embedding(rec: dict) -> dict:
    dim = _int(rec, "dim", lo=1)
    th = rec.get("text_hash")
    if isinstance(th, bool) or not isinstance(th, int) or not -2 ** 63 <= th < 2 ** 63:
        raise DumpError(f"'text_hash' must be a 64-bit integer, got {th!r}")
    try:
        blob = base64.b64decode(_str(rec, "vector"), validate=True)
    except (binascii.Error, ValueError):
        raise DumpError("'vector' is not base64") from None
    if len(blob) != 4 * dim:
        raise DumpError(f"'vector' has {len(blob)} bytes, expected {4 * dim} for dim {dim}")
    return {"chunk": _str(rec, "chunk"), "model": _str(rec, "model"), "dim": dim, "text_hash": th, "vector": blob}


def _meta(rec: dict) -> dict:
    return {"key": _str(rec, "key"), "value": _str(rec, "value", optional=True)}


_PARSERS: dict[str, Callable[[dict], dict]] = {
    "meta": _meta, "chunk": _chunk, "history": _history, "edge": _edge, "cooccurrence": _cooc, "fact": _fact,
    "embedding": _embedding,
}


def read_dump(fh: IO[str], *, existing_ids: Callable[[list[str], str], set[str]]) -> dict[str, list[dict]]:
    """Parse and check a whole dump; ``existing_ids(ids, kind)`` says which ids the target already has.

    Returns records by type; raises ``DumpError`` naming the line of the first problem."""
    out: dict[str, list[dict]] = {k: [] for k in _PARSERS}
    lines: dict[str, dict[str, int]] = {"chunk": {}, "edge": {}}  # id -> line number
    refs: list[tuple[int, str, str]] = []  # (line, kind, id) to check once every chunk/edge is known
    header_seen = False
    for no, raw in enumerate(fh, start=1):
        line = raw.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise DumpError(f"line {no}: not valid JSON ({exc})") from None
        if not isinstance(rec, dict):
            raise DumpError(f"line {no}: expected a JSON object, got {type(rec).__name__}")
        kind = rec.get("type")
        if not header_seen:
            if kind != "header" or rec.get("format") != FORMAT:
                raise DumpError(f"line {no}: not a causalmem export (the first line must be its header)")
            v = rec.get("version")
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= VERSION:
                raise DumpError(f"line {no}: export format version {v!r} is not supported (this causalmem reads "
                                f"1..{VERSION})")
            header_seen = True
            continue
        if kind not in _PARSERS:
            raise DumpError(f"line {no}: unknown record type {kind!r}; expected one of {', '.join(_PARSERS)}")
        try:
            item = _PARSERS[kind](rec)
        except DumpError as exc:
            raise DumpError(f"line {no}: {kind}: {exc}") from None
        if kind in lines:
            if item["id"] in lines[kind]:
                first = lines[kind][item["id"]]
                raise DumpError(f"line {no}: {kind} id {item['id']!r} already defined on line {first}")
            lines[kind][item["id"]] = no
        if kind == "edge":
            refs += [(no, "chunk", item["src"]), (no, "chunk", item["dst"])]
            if item["superseded_by"] is not None:
                refs.append((no, "edge", item["superseded_by"]))
        elif kind in ("history", "fact", "embedding"):
            refs.append((no, "chunk", item["chunk"]))
        elif kind == "cooccurrence":
            refs += [(no, "chunk", item["a"]), (no, "chunk", item["b"])]
        item["_line"] = no
        out[kind].append(item)
    if not header_seen:
        raise DumpError("line 1: empty file, not a causalmem export")
    for no, kind, ref in refs:
        if ref not in lines[kind]:
            raise DumpError(f"line {no}: refers to {kind} {ref!r}, which the dump does not define")
    _check_scopes(out)
    for kind in ("chunk", "edge"):
        ids = list(lines[kind])
        for i in range(0, len(ids), 900):
            clash = existing_ids(ids[i:i + 900], kind)
            if clash:
                taken = min(clash, key=lambda x: lines[kind][x])
                raise DumpError(f"line {lines[kind][taken]}: {kind} id {taken!r} already exists in the target "
                                f"database (import into an empty or different memory)")
    return out


def _scope(rec: dict) -> tuple[str | None, str | None, str | None]:
    return rec["user_id"], rec["agent_id"], rec["run_id"]


def _check_scopes(out: dict[str, list[dict]]) -> None:
    """Scope is a wall: no edge or co-occurrence pair joins two scopes, and a fact has its chunk's scope
    (``link``, ``confirm`` and ``add_fact`` never make anything else; a dump edited by hand could)."""
    scope = {c["id"]: _scope(c) for c in out["chunk"]}
    for kind, a, b in (("edge", "src", "dst"), ("cooccurrence", "a", "b")):
        for rec in out[kind]:
            if scope[rec[a]] != scope[rec[b]]:
                raise DumpError(f"line {rec['_line']}: {kind}: {a!r} {rec[a]!r} and {b!r} {rec[b]!r} are in different "
                                f"scopes (user_id/agent_id/run_id {scope[rec[a]]!r} vs {scope[rec[b]]!r}); scope is a "
                                "wall: nothing joins two scopes")
    for rec in out["fact"]:
        if _scope(rec) != scope[rec["chunk"]]:
            raise DumpError(f"line {rec['_line']}: fact: its scope (user_id/agent_id/run_id {_scope(rec)!r}) is not "
                            f"the scope of its 'chunk' {rec['chunk']!r} ({scope[rec['chunk']]!r})")


def open_text(target: Any, mode: str) -> tuple[IO[str], bool]:
    """(file object, whether we opened it) for a path or an already open text stream."""
    if isinstance(target, (str, os.PathLike)):
        if isinstance(target, str) and not target:
            raise ValueError("path must be a non-empty file path")
        try:
            return open(target, mode, encoding="utf-8", newline="\n"), True
        except OSError as exc:
            raise ValueError(f"cannot open {os.fspath(target)!r}: {exc.strerror or exc}") from None
    if isinstance(target, io.TextIOBase) or (hasattr(target, "write" if "w" in mode else "read")):
        return target, False
    raise TypeError(f"path must be a file path or a text stream, got {type(target).__name__}")


def export_memory(views: Views, path: str | os.PathLike[str] | IO[str], *, vectors: bool) -> int:
    """``Memory.export``: queued reinforcement first, then one header line and every record."""
    if not isinstance(vectors, bool):
        raise TypeError(f"vectors must be True or False, got {type(vectors).__name__}")
    if vectors:  # the vectors of every chunk written so far (the background worker needs the lock)
        views.wait_embedded(None)
    fh, owned = open_text(path, "w")
    try:
        with views.lock:
            views.flush_reinforcement(wait=False)
            header = {"schema_version": views.store.user_version(), "exported_at": time.time(),
                      "vectors": vectors, "counts": views.store.counts()}
            return write_dump(views.store.export_records(vectors=vectors), fh, header=header)
    finally:
        if owned:
            fh.close()


def import_memory(views: Views, path: str | os.PathLike[str] | IO[str]) -> dict[str, int]:
    """``Memory.import_``: check every line, then load all in one transaction and rebuild the views."""
    fh, owned = open_text(path, "r")
    try:
        records = read_dump(fh, existing_ids=views.store.existing_ids)
    finally:
        if owned:
            fh.close()
    with views.write() as fx:
        counts = views.store.import_records(records)
        views.effects.purged(fx)  # rebuild every view from the store
        views.effects.count_write(fx)
    return counts
