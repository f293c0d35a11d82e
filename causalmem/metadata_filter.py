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

import math
from typing import Any, Mapping

__all__ = ["OPERATORS", "validate", "matches"]

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
