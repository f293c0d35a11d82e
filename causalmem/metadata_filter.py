"""Metadata filters: which chunks' ``metadata`` match a filter (``Memory.search``/``get_all(metadata=...)``).

A filter is a dict. ``{"field": value}`` matches when the field equals the value (``True`` is not
``1``); a dotted field (``"user.tier"``) reaches into nested dicts. An operator dict compares::

    {"field": {"$eq" | "$ne" | "$gt" | "$gte" | "$lt" | "$lte": value,
               "$in" | "$nin": [values], "$contains": value, "$icontains": "text", "$exists": bool}}

``$gt``..``$lte`` compare numbers with numbers and strings with strings (ISO dates order correctly),
anything else does not match; ``$contains`` is a substring of a string field or a member of a list
field; ``$ne`` and ``$nin`` match a missing field. ``{"$and": [f, ...]}``, ``{"$or": [f, ...]}`` and
``{"$not": [f, ...]}`` (none matches) combine filters; the keys of one dict are ANDed.
"""
from __future__ import annotations

import copy
import json
import math
from collections import OrderedDict
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

__all__ = ["OPERATORS", "validate", "matches", "FilterCache"]

OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$contains", "$icontains", "$exists")
_LOGICAL = ("$and", "$or", "$not")
_MISSING = object()


def validate(spec: Any, name: str = "metadata") -> dict[str, Any]:
    """The filter as a plain dict, or TypeError/ValueError naming what is wrong."""
    if not isinstance(spec, Mapping):
        raise TypeError(f"{name} filter must be a dict, got {type(spec).__name__}")
    for key, cond in spec.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{name} filter keys must be non-empty field names, got {key!r}")
        if key.startswith("$"):
            if key not in _LOGICAL:
                raise ValueError(f"unknown {name} filter operator {key!r} at the top level; "
                                 f"allowed: {list(_LOGICAL)} (or a field name)")
            if not isinstance(cond, (list, tuple)) or not cond:
                raise ValueError(f"{name} filter {key!r} needs a non-empty list of filters")
            for i, sub in enumerate(cond):
                validate(sub, f"{name}[{key!r}][{i}]")
        elif isinstance(cond, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in cond):
            bad = [k for k in cond if k not in OPERATORS]
            if bad:
                raise ValueError(f"unknown {name} filter operator(s) {bad} on {key!r}; allowed: {list(OPERATORS)}")
            for op in ("$in", "$nin"):
                if op in cond and not isinstance(cond[op], (list, tuple, set, frozenset)):
                    raise ValueError(f"{name} filter {op} on {key!r} needs a list, got {type(cond[op]).__name__}")
            if "$exists" in cond and not isinstance(cond["$exists"], bool):
                raise ValueError(f"{name} filter $exists on {key!r} needs true or false")
            if "$icontains" in cond and not isinstance(cond["$icontains"], str):
                raise ValueError(f"{name} filter $icontains on {key!r} needs a string")
    return dict(spec)


def _field(meta: Mapping[str, Any], path: str) -> Any:
    if path in meta:
        return meta[path]
    cur: Any = meta
    for part in path.split("."):
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        else:
            return _MISSING
    return cur


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, float) and math.isnan(a) or isinstance(b, float) and math.isnan(b):
        return False
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


def _comparable(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return not (isinstance(a, float) and math.isnan(a) or isinstance(b, float) and math.isnan(b))
    return isinstance(a, str) and isinstance(b, str)


def _op(value: Any, op: str, arg: Any) -> bool:
    present = value is not _MISSING
    if op == "$exists":
        return present == arg
    if op == "$eq":
        return present and _equal(value, arg)
    if op == "$ne":
        return not (present and _equal(value, arg))
    if op == "$in":
        return present and any(_equal(value, a) for a in arg)
    if op == "$nin":
        return not (present and any(_equal(value, a) for a in arg))
    if op == "$contains":
        if isinstance(value, str) and isinstance(arg, str):
            return arg in value
        return isinstance(value, (list, tuple)) and any(_equal(v, arg) for v in value)
    if op == "$icontains":
        if isinstance(value, str):
            return arg.casefold() in value.casefold()
        return isinstance(value, (list, tuple)) and any(isinstance(v, str) and v.casefold() == arg.casefold()
                                                        for v in value)
    if not present or not _comparable(value, arg):
        return False
    if op == "$gt":
        return value > arg
    if op == "$gte":
        return value >= arg
    if op == "$lt":
        return value < arg
    return value <= arg  # $lte


def matches(meta: Mapping[str, Any] | None, spec: Mapping[str, Any]) -> bool:
    """Whether a chunk's metadata matches a (validated) filter."""
    meta = meta or {}
    for key, cond in spec.items():
        if key == "$and":
            if not all(matches(meta, s) for s in cond):
                return False
        elif key == "$or":
            if not any(matches(meta, s) for s in cond):
                return False
        elif key == "$not":
            if any(matches(meta, s) for s in cond):
                return False
        else:
            value = _field(meta, key)
            if isinstance(cond, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in cond):
                if not all(_op(value, op, arg) for op, arg in cond.items()):
                    return False
            elif value is _MISSING or not _equal(value, cond):
                return False
    return True


#: distinct filters whose results a ``FilterCache`` keeps (least recently used dropped first)
CACHED_FILTERS = 32
#: a ``FilterCache`` keeps parsed metadata only while it holds at most this many distinct metadata
#: texts; beyond, a filter not seen before parses the texts again (benchmarks/search_metadata_filter.py,
#: 100k chunks of distinct metadata: the cache held 78 MB with their parsed values, 17 MB without)
PARSED_MAX = 50_000


def _encode(o: Any) -> Any:
    if isinstance(o, (set, frozenset)):
        return {"$set": sorted(json.dumps(x, sort_keys=True, default=_encode) for x in o)}
    raise TypeError(type(o).__name__)


def _str_keys(o: Any) -> bool:
    """Every dict inside ``o`` has string keys only (JSON writes a key ``1`` or ``True`` as a string)."""
    if isinstance(o, Mapping):
        return all(isinstance(k, str) and _str_keys(v) for k, v in o.items())
    if isinstance(o, (list, tuple, set, frozenset)):
        return all(_str_keys(v) for v in o)
    return True


def canonical(spec: Mapping[str, Any]) -> str | None:
    """A text equal for equal filters (keys sorted; ``True`` and ``1`` differ), or None when the
    filter has no JSON form that tells it from every other filter (a value with a non-string dict
    key: ``{1: "x"}`` and ``{"1": "x"}`` have one JSON text) — then it is evaluated every time."""
    if not _str_keys(spec):
        return None
    try:
        return json.dumps(spec, sort_keys=True, default=_encode)
    except (TypeError, ValueError):
        return None


class _Entry:
    """One filter's results: ``hits[i]``: the i-th distinct metadata text matches (the last element,
    for a chunk whose text is unknown, is False); ``nids``: the chunks that match, as of ``version``."""

    __slots__ = ("spec", "hits", "nids", "version")

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec
        self.hits = np.zeros(1, dtype=bool)
        self.nids: np.ndarray | None = None
        self.version = -1


class FilterCache:
    """Which chunks match a metadata filter, kept between searches (``Views.meta_cache``).

    Per chunk (nid): the index of its metadata text among the distinct texts read so far (-1: not
    known — never read, or changed since). Per distinct text: the text and, up to ``PARSED_MAX``
    texts, its parsed value. Per filter (the ``CACHED_FILTERS`` used last): which texts match, and
    the boolean nid mask of the chunks that match while no chunk's text index changed since. A
    repeated filter costs two array operations; a new one is evaluated once per distinct text (chunks
    that share a metadata text share the work). The owner keeps it exact: ``forget`` the nids whose
    metadata may have changed, ``forget_all`` when it cannot tell which (the next fill reads every
    chunk's metadata again and drops the texts no chunk has any more), ``clear`` on a purge.

    Memory: 4 bytes per nid, one byte per nid per cached filter, the distinct texts and their parsed
    values (the bulk: see ``benchmarks/search_metadata_filter.py`` for the RSS at 100k chunks);
    texts no chunk has any more are dropped once they outnumber the nids (``_compact``).
    """

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget everything (a purge: no purged metadata stays in memory)."""
        self.code = np.full(0, -1, dtype=np.int32)
        self.texts: list[str] = []
        self.index: dict[str, int] = {}
        self.parsed: list[Any] = []
        self.filters: OrderedDict[str, _Entry] = OrderedDict()
        self.version = 0
        self.stale_all = False

    def forget(self, nids: Iterable[int]) -> None:
        """These chunks' metadata may have changed (or they are new): read again when next needed."""
        ids = np.fromiter((int(n) for n in nids), dtype=np.int64)
        ids = ids[(ids >= 0) & (ids < len(self.code))]
        if len(ids):
            self.code[ids] = -1
            self.version += 1

    def forget_all(self) -> None:
        """Any chunk's metadata may have changed: the next fill reads them all again."""
        if len(self.code) or self.texts:
            self.code[:] = -1
            self.version += 1
            self.stale_all = True

    def mask(self, spec: Mapping[str, Any], scope: np.ndarray,
             read: Callable[[Sequence[int] | None], Iterable[tuple[int, str]]]) -> np.ndarray:
        """``scope`` (a boolean nid mask) narrowed to the chunks whose metadata matches ``spec`` (a
        validated filter), as a new array. ``read(nids)`` gives ``(nid, metadata JSON)`` of those
        chunks from the store (``None``: of every chunk); called only for chunks not known here."""
        n = len(scope)
        if len(self.code) < n:
            self._grow(n)
        unknown = scope & (self.code[:n] < 0)
        if unknown.any():
            ids = np.flatnonzero(unknown)
            if self.stale_all:  # every chunk's text again (texts no chunk has any more are dropped)
                self._fill(read(None), scan=True)
            else:
                self._fill(read(ids.tolist()), scan=False)
        key = canonical(spec)
        entry = self.filters.get(key) if key is not None else None
        if entry is None:
            # a cached entry keeps its own copy: the caller may change its filter object after this call
            entry = _Entry(copy.deepcopy(spec) if key is not None else spec)
            if key is not None:
                self.filters[key] = entry
                while len(self.filters) > CACHED_FILTERS:
                    self.filters.popitem(last=False)
        elif key is not None:
            self.filters.move_to_end(key)
        if entry.version != self.version or entry.nids is None or len(entry.nids) < n:
            self._evaluate(entry)
            # a chunk whose text is unknown (-1) takes hits' last element: False
            entry.nids = entry.hits[self.code]
            entry.version = self.version
        assert entry.nids is not None
        return scope & entry.nids[:n]

    def _grow(self, n: int) -> None:
        code = np.full(max(n, 2 * len(self.code)), -1, dtype=np.int32)
        code[: len(self.code)] = self.code
        self.code = code

    def _fill(self, rows: Iterable[tuple[int, str]], *, scan: bool) -> None:
        """Text indexes of the chunks in ``rows``; ``scan``: ``rows`` are every stored chunk."""
        if scan:  # every chunk's text again: start from those texts only
            self._compact(rows)
            return
        self._intern(rows)
        if len(self.texts) > 2 * len(self.code) + 1024:  # texts no chunk has any more outnumber the chunks
            self._compact(None)

    def _intern(self, rows: Iterable[tuple[int, str]], old_index: Mapping[str, int] | None = None,
                old_parsed: Sequence[Any] = ()) -> list[int]:
        """Set the text index of each chunk of ``rows``, adding the texts not known yet; a text that
        ``old_index`` holds takes its parsed value from ``old_parsed``. Returns, per text added, its
        index in ``old_index`` (-1: not there)."""
        index, texts, parsed = self.index, self.texts, self.parsed
        nids: list[int] = []
        codes: list[int] = []
        moved: list[int] = []
        for nid, text in rows:
            text = text or "{}"
            i = index.get(text)
            if i is None:
                i = index[text] = len(texts)
                texts.append(text)
                o = old_index.get(text, -1) if old_index is not None else -1
                moved.append(o)
                parsed.append(old_parsed[o] if o >= 0 else None)
            nids.append(nid)
            codes.append(i)
        if nids:
            ids = np.asarray(nids, dtype=np.int64)
            top = int(ids.max()) + 1
            if top > len(self.code):
                self._grow(top)
            self.code[ids] = np.asarray(codes, dtype=np.int32)
            self.version += 1
        return moved

    def _compact(self, rows: Iterable[tuple[int, str]] | None) -> None:
        """Keep only the texts chunks have: those of ``rows`` (every chunk, read again; the other codes
        are unknown) or, for None, those the known codes name. Parsed values and filter results of
        the texts kept are kept."""
        old_texts, old_parsed = self.texts, self.parsed
        if rows is None:
            known = self.code >= 0
            pairs: Iterable[tuple[int, str]] = zip(np.flatnonzero(known).tolist(),
                                                   (old_texts[i] for i in self.code[known].tolist()))
        else:
            pairs = rows
        old_index = self.index
        self.texts, self.index, self.parsed = [], {}, []
        self.code[:] = -1
        self.stale_all = False
        moved = self._intern(pairs, old_index, old_parsed)  # new index -> old index (-1: a text not seen before)
        texts = self.texts
        self.version += 1
        src = np.asarray(moved, dtype=np.int64)
        for entry in self.filters.values():
            # the results of the texts kept carry over; the others are evaluated now
            done = len(entry.hits) - 1
            carried = (src >= 0) & (src < done)
            hits = np.zeros(len(texts) + 1, dtype=bool)
            hits[:-1][carried] = entry.hits[src[carried]]
            for k in np.flatnonzero(~carried).tolist():
                hits[k] = matches(self._value(k), entry.spec)
            entry.hits = hits
            entry.nids = None

    def _value(self, k: int) -> Any:
        """The parsed metadata of distinct text ``k`` (kept while there are at most ``PARSED_MAX`` texts)."""
        value = self.parsed[k]
        if value is None:
            value = json.loads(self.texts[k])
            if len(self.texts) <= PARSED_MAX:
                self.parsed[k] = value
        return value

    def _evaluate(self, entry: _Entry) -> None:
        """``entry.hits`` for every distinct text (only the texts added since it was last evaluated)."""
        done = len(entry.hits) - 1
        texts = self.texts
        if done >= len(texts):
            return
        spec, value = entry.spec, self._value
        new = np.zeros(len(texts) - done + 1, dtype=bool)
        for k in range(done, len(texts)):
            new[k - done] = matches(value(k), spec)
        entry.hits = np.concatenate([entry.hits[:done], new])
