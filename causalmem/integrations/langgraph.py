"""LangGraph long-term memory store backed by causalmem: ``CausalMemStore``, a ``BaseStore``.

    from langgraph.graph import StateGraph
    from causalmem.integrations.langgraph import CausalMemStore

    store = CausalMemStore("agent.db")                     # causalmem's own embedder (MiniLM) by default
    graph = builder.compile(store=store)

Each item is one causalmem chunk: its text (the item's ``fields``, or every string in the value) is
indexed by causalmem's lexical, semantic and graph channels, and the chunk's metadata keeps the item
losslessly: the namespace as a list of labels, the key, the value, ``created_at`` and ``updated_at``.
``search(prefix, query=...)`` is causalmem's hybrid search restricted to the prefix (score: the fused
score); without a query it lists the prefix, newest first. With an ``index`` configured, a query search
follows LangGraph's stores instead: each indexed text has its own vector (embedded on put), an item's
score is its best field's cosine similarity to the query (an exact match scores ~1), and items rank by
it. Filters use LangGraph's operators on value fields (``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``,
``$lte``; dotted keys reach nested fields; a list or dict filter matches by containment, as
PostgreSQL's JSONB does); a filter key must be a field name (letters, digits, ``_``, ``-``, ``.``),
anything else is ``ValueError("Invalid filter key ...")``.

Learning from the caller: ``store.feedback(item.namespace, item.key, reward)`` says a search result
helped (reward > 0) or hurt (< 0), in [-1, 1]; its Q-value moves and it ranks higher (or lower) in the
next searches. ``store.confirm(namespace, [key, ...])`` links items of one namespace used together
(causalmem's learned links: the next query spreads over them). ``afeedback`` / ``aconfirm`` are the
async twins.

Items live in the causalmem scope ``agent_id="langgraph"`` (``CausalMemStore(agent_id=...)``), so
plain ``Memory.search`` calls can include or leave them out. The key index is held in process and
loaded from the database when the store opens: use one store object per database per process (two
processes writing the same file through two stores do not see each other's new keys until reopened).
Needs ``pip install 'causalmem-engine[langgraph]'``.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    ensure_embeddings,
    get_text_at_path,
)

from ..async_memory import AsyncMemory
from ..memory import Memory
from ._learning import check_many, check_reward

__all__ = ["CausalMemStore"]

_META = "langgraph"
_PREFIXES = "langgraph_prefixes"


def _ns_key(ns: Sequence[str]) -> str:
    # Labels cannot contain "." (LangGraph's rule, checked on every operation): joining is lossless.
    return ".".join(ns)
_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
# A filter key is a field name, dotted for nested fields: letters, digits, "_", "-" and "." only (as
# LangGraph's stores require; anything else, e.g. quotes or brackets, is refused, never interpreted).
_FILTER_KEY = re.compile(r"[\w.-]+")


@dataclass
class _Record:
    chunk_id: str
    value: dict[str, Any]
    created_at: float
    updated_at: float
    indexed: bool
    fields: list[str] | None = None  # the index fields of its put (None: the store's)
    vecs: np.ndarray | None = None  # with an index: one unit vector per indexed text (computed lazily)


class _LangChainEmbedder:
    """A LangChain ``Embeddings`` (LangGraph's ``index["embed"]``) as a causalmem Embedder."""

    def __init__(self, embeddings: Any, dims: int) -> None:
        self.embeddings = embeddings
        self.dim = int(dims)
        self.model_name = f"langgraph-index:{type(embeddings).__name__}:{self.dim}"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = np.asarray(self.embeddings.embed_documents(list(texts)), dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[1] != self.dim:
            raise ValueError(f"index['embed'] returned vectors of shape {vecs.shape}; index['dims'] is {self.dim}")
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        return vecs / np.where(norms > 0, norms, 1.0)


def _utc(ts: float) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(ts, tz=_dt.timezone.utc)


def _leaf_texts(value: Any) -> list[str]:
    """Every string and number in a JSON value, in order (the text of the whole-value field "$")."""
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)):
        return [str(value)]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _leaf_texts(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _leaf_texts(v)]
    return []


def _lookup(value: Any, dotted: str) -> tuple[bool, Any]:
    """The field at a dotted path of a value: (found, field)."""
    cur = value
    for part in dotted.split("."):
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        else:
            return False, None
    return True, cur


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return None if math.isnan(f) else f


def _contains(item: Any, wanted: Any) -> bool:
    """JSONB containment: ``item @> wanted``."""
    if isinstance(wanted, Mapping):
        return isinstance(item, Mapping) and all(k in item and _contains(item[k], v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        if not isinstance(item, (list, tuple)):
            return False
        return all(any(_contains(i, w) for i in item) for w in wanted)
    if isinstance(wanted, bool) or isinstance(item, bool):
        return type(wanted) is type(item) and wanted == item
    return item == wanted


def _check_filter(flt: Any) -> dict[str, Any]:
    if flt is None:
        return {}
    if not isinstance(flt, Mapping):
        raise TypeError(f"filter must be a dict of value fields, got {type(flt).__name__}")
    for k, cond in flt.items():
        if not isinstance(k, str) or not k:
            raise ValueError(f"filter keys must be non-empty field names (dotted for nested fields), got {k!r}")
        if not _FILTER_KEY.fullmatch(k):
            raise ValueError(f"Invalid filter key: {k!r}. Filter keys are field names (dotted for nested "
                             "fields) of letters, digits, underscores, hyphens and dots only")
        if isinstance(cond, Mapping) and any(isinstance(o, str) and o.startswith("$") for o in cond):
            bad = [o for o in cond if o not in _OPERATORS]
            if bad:
                raise ValueError(f"unknown filter operator(s) {bad} on {k!r}; allowed: {list(_OPERATORS)}")
    return dict(flt)


def _matches(value: Mapping[str, Any], flt: Mapping[str, Any]) -> bool:
    for key, cond in flt.items():
        found, field = _lookup(value, key)
        if isinstance(cond, Mapping) and any(o in _OPERATORS for o in cond):
            for op, arg in cond.items():
                if op == "$eq":
                    ok = found and _contains(field, arg) and _contains(arg, field)
                elif op == "$ne":
                    ok = not (found and _contains(field, arg) and _contains(arg, field))
                else:
                    a, b = _number(field), _number(arg)
                    if a is None or b is None:
                        ok = False
                    elif op == "$gt":
                        ok = a > b
                    elif op == "$gte":
                        ok = a >= b
                    elif op == "$lt":
                        ok = a < b
                    else:
                        ok = a <= b
                if not ok:
                    return False
        elif not found or not _contains(field, cond):
            return False
    return True


def _ns_matches(ns: tuple[str, ...], cond: MatchCondition) -> bool:
    path = tuple(cond.path)
    if len(ns) < len(path):
        return False
    if cond.match_type == "prefix":
        part = ns[: len(path)]
    elif cond.match_type == "suffix":
        part = ns[len(ns) - len(path):]
    else:
        raise ValueError(f"match_type must be 'prefix' or 'suffix', got {cond.match_type!r}")
    return all(p == "*" or p == k for p, k in zip(path, part))


def _validate_labels(labels: Sequence[Any], what: str) -> tuple[str, ...]:
    if isinstance(labels, str) or not isinstance(labels, (tuple, list)):
        raise InvalidNamespaceError(f"{what} must be a tuple of strings, got {type(labels).__name__}")
    for label in labels:
        if not isinstance(label, str):
            raise InvalidNamespaceError(f"{what} labels must be strings, got {type(label).__name__} in {labels!r}")
        if not label:
            raise InvalidNamespaceError(f"{what} labels cannot be empty strings: {labels!r}")
        if "." in label:
            raise InvalidNamespaceError(f"{what} labels cannot contain periods ('.'): {label!r} in {labels!r}")
    return tuple(labels)


def _check_page(limit: Any, offset: Any) -> tuple[int, int]:
    for name, v, lo in (("limit", limit, 1), ("offset", offset, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    return limit, offset


class CausalMemStore(BaseStore):
    """A LangGraph ``BaseStore`` on a causalmem database.

    ``CausalMemStore("agent.db")`` opens (and ``close`` closes) its own ``causalmem.Memory``;
    ``CausalMemStore(memory=mem)`` shares one the caller owns. ``index={"dims": ..., "embed": ...,
    "fields": [...]}`` as LangGraph's stores take it replaces causalmem's embedder by the given
    embeddings and chooses the value fields that are indexed (default ``["$"]``: the whole value).
    """

    supports_ttl = False

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, memory: Memory | None = None,
                 index: Mapping[str, Any] | None = None, agent_id: str = "langgraph",
                 embedder: Any = "auto", max_workers: int | None = None) -> None:
        if not isinstance(agent_id, str) or not agent_id:
            raise ValueError(f"agent_id must be a non-empty string, got {agent_id!r}")
        self.index_config: dict[str, Any] | None = None
        self.fields: list[str] = ["$"]
        if index is not None:
            if not isinstance(index, Mapping):
                raise TypeError(f"index must be a dict with 'dims', 'embed' and optional 'fields', "
                                f"got {type(index).__name__}")
            unknown = set(index) - {"dims", "embed", "fields", "text_fields", "distance_type"}
            if unknown:
                raise ValueError(f"unknown index keys {sorted(unknown)}; allowed: ['dims', 'embed', 'fields']")
            fields = index.get("fields", index.get("text_fields")) or ["$"]
            if isinstance(fields, str) or not all(isinstance(f, str) and f for f in fields):
                raise ValueError(f"index['fields'] must be a list of field paths, got {fields!r}")
            self.fields = list(fields)
            self.index_config = dict(index)
            self.index_config["fields"] = self.fields
            if index.get("embed") is not None:
                dims = index.get("dims")
                if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
                    raise ValueError(f"index['dims'] must be a positive integer, got {dims!r}")
                self.embeddings = ensure_embeddings(index["embed"])
                embedder = _LangChainEmbedder(self.embeddings, dims)
        if memory is not None:
            if not isinstance(memory, Memory):
                raise TypeError(f"memory must be a causalmem.Memory, got {type(memory).__name__}")
            if index is not None and index.get("embed") is not None:
                raise ValueError("index['embed'] sets the embedder of a Memory this store opens; "
                                 "with memory= pass Memory(embedder=...) instead")
            self.memory, self._owns = memory, False
        else:
            self.memory, self._owns = Memory(path, embedder=embedder), True
        self.agent_id = agent_id
        self._amem = AsyncMemory(memory=self.memory, max_workers=max_workers)
        self._lock = threading.RLock()
        self._items: dict[tuple[str, ...], dict[str, _Record]] = {}
        self._loop_locks: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
        self._load()

    # ------------------------------------------------------------------ index of keys
    def _load(self) -> None:
        for chunk in self.memory.get_all(agent_id=self.agent_id, limit=2**62):
            meta = chunk.metadata.get(_META) if isinstance(chunk.metadata, Mapping) else None
            if not isinstance(meta, Mapping):
                continue
            ns = tuple(meta["namespace"])
            fields = meta.get("fields")
            self._items.setdefault(ns, {})[meta["key"]] = _Record(
                chunk.id, meta["value"], float(meta["created_at"]), float(meta["updated_at"]),
                bool(meta.get("indexed", True)), list(fields) if isinstance(fields, list) else None)

    def _fields_of(self, index: Any) -> list[str]:
        if index is False:
            return []
        if index is None:
            return self.fields
        if isinstance(index, str) or not all(isinstance(f, str) for f in index):
            raise ValueError(f"index must be False, None or a list of field paths, got {index!r}")
        return list(index)

    @staticmethod
    def _parts(value: Mapping[str, Any], fields: Sequence[str]) -> list[str]:
        parts: list[str] = []
        for f in fields:
            parts.extend(_leaf_texts(value) if f == "$" else
                         [t for t in get_text_at_path(value, f) if isinstance(t, str) and t.strip()])
        return parts

    def _text(self, key: str, value: Mapping[str, Any], index: Any) -> tuple[str, bool]:
        parts = self._parts(value, self._fields_of(index))
        if parts:
            return "\n".join(parts), True
        # A chunk needs text: an unindexed (or empty) item is stored under its key and never ranked.
        return key, False

    # ------------------------------------------------------------------ per-field vectors (index configured)
    def _field_encoder(self) -> Any:
        """With an ``index`` configured: the encoder of the indexed fields (LangGraph's semantics: each
        indexed text has its own vector, an item's score is its best field's cosine similarity to the
        query). None without an index (then the score is causalmem's fused score)."""
        if self.index_config is None:
            return None
        if getattr(self, "embeddings", None) is not None:
            return self.embeddings
        return self.memory.embedder

    @staticmethod
    def _unit(vecs: Any) -> np.ndarray:
        a = np.asarray(vecs, dtype=np.float64)
        if a.ndim == 1:
            a = a[None, :]
        n = np.linalg.norm(a, axis=1, keepdims=True)
        return a / np.where(n > 0, n, 1.0)

    def _encode_docs(self, enc: Any, texts: list[str]) -> np.ndarray:
        if hasattr(enc, "embed_documents"):
            return self._unit(enc.embed_documents(texts))
        return self._unit(enc.encode(texts))

    def _encode_query(self, enc: Any, text: str) -> np.ndarray:
        if hasattr(enc, "embed_query"):
            return self._unit(enc.embed_query(text))[0]
        return self._unit(enc.encode([text]))[0]

    def _vectors(self, enc: Any, recs: Sequence[_Record]) -> None:
        """Fill ``vecs`` of the records that have none, with one batched call."""
        todo = [(r, self._parts(r.value, r.fields if r.fields is not None else self.fields))
                for r in recs if r.vecs is None]
        texts = [t for _, parts in todo for t in parts]
        if not texts:
            return
        mat = self._encode_docs(enc, texts)
        i = 0
        for r, parts in todo:
            r.vecs = mat[i:i + len(parts)]
            i += len(parts)

    # ------------------------------------------------------------------ operations
    def _get(self, op: GetOp) -> Item | None:
        rec = self._items.get(tuple(op.namespace), {}).get(op.key)
        if rec is None:
            return None
        return Item(value=rec.value, key=op.key, namespace=tuple(op.namespace), created_at=_utc(rec.created_at),
                    updated_at=_utc(rec.updated_at))

    def _put(self, op: PutOp) -> None:
        ns = tuple(op.namespace)
        if not isinstance(op.key, str):
            raise TypeError(f"key must be a string, got {type(op.key).__name__}")
        if getattr(op, "ttl", None) is not None:
            raise NotImplementedError("CausalMemStore does not support ttl (supports_ttl is False)")
        bucket = self._items.get(ns, {})
        old = bucket.get(op.key)
        if op.value is None:
            if old is not None:
                self.memory.delete(old.chunk_id)
                del bucket[op.key]
                if not bucket:
                    self._items.pop(ns, None)
            return
        if not isinstance(op.value, Mapping):
            raise TypeError(f"value must be a dict (or None to delete), got {type(op.value).__name__}")
        value = dict(op.value)
        try:
            json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"value must be JSON-serialisable: {exc}") from None
        text, indexed = self._text(op.key, value, op.index)
        now = self.memory.now()
        created = old.created_at if old is not None else now
        fields = self._fields_of(op.index)
        meta = {_META: {"namespace": list(ns), "key": op.key, "value": value, "created_at": created,
                        "updated_at": now, "indexed": indexed, "fields": fields},
                # every prefix of the namespace, so a search inside a prefix is one metadata filter
                _PREFIXES: [_ns_key(ns[:i]) for i in range(1, len(ns) + 1)]}
        if old is None:
            chunk_id = self.memory.add(text, agent_id=self.agent_id, metadata=meta, dedupe=False)[0].id
        else:  # an upsert keeps the chunk (its Q-value and links); the old text stays in its history
            chunk_id = old.chunk_id
            current = self.memory.get(chunk_id).text
            self.memory.update(chunk_id, text if text != current else None, metadata=meta)
        rec = _Record(chunk_id, value, created, now, indexed, fields)
        enc = self._field_encoder() if indexed else None
        if enc is not None:  # as LangGraph's stores: embedded on put
            self._vectors(enc, [rec])
        self._items.setdefault(ns, {})[op.key] = rec

    def _in_prefix(self, prefix: tuple[str, ...], flt: dict[str, Any]) -> list[tuple[tuple[str, ...], str, _Record]]:
        out = []
        n = len(prefix)
        for ns, bucket in self._items.items():
            if ns[:n] != prefix:
                continue
            for key, rec in bucket.items():
                if not flt or _matches(rec.value, flt):
                    out.append((ns, key, rec))
        return out

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = _validate_labels(op.namespace_prefix, "namespace_prefix") if op.namespace_prefix else ()
        flt = _check_filter(op.filter)
        limit, offset = _check_page(op.limit, op.offset)
        cands = self._in_prefix(prefix, flt)
        query = op.query
        if query is not None and not isinstance(query, str):
            raise TypeError(f"query must be a string or None, got {type(query).__name__}")
        if not query or not query.strip():
            cands.sort(key=lambda c: (-c[2].updated_at, c[0], c[1]))
            return [self._search_item(ns, key, rec, None) for ns, key, rec in cands[offset:offset + limit]]
        by_chunk = {rec.chunk_id: (ns, key, rec) for ns, key, rec in cands if rec.indexed}
        ranked: list[SearchItem] = []
        enc = self._field_encoder()
        if by_chunk and enc is not None:
            # an index is configured: LangGraph's score, the best indexed field's cosine similarity
            recs = [c[2] for c in by_chunk.values()]
            self._vectors(enc, recs)
            q = self._encode_query(enc, query)
            scored = []
            for ns, key, rec in by_chunk.values():
                vecs = rec.vecs if rec.vecs is not None else np.zeros((0, q.shape[0]))
                score = float(np.max(vecs @ q)) if len(vecs) else 0.0
                scored.append((-score, ns, key, rec))
            scored.sort(key=lambda t: (t[0], t[1], t[2]))
            ranked = [self._search_item(ns, key, rec, -neg) for neg, ns, key, rec in scored]
        elif by_chunk:
            # LangGraph's stores embed on put (read-your-writes for vector search); causalmem embeds
            # in the background, so a query search waits for the items written so far
            self.memory.wait_embedded()
            need = offset + limit
            max_k = self.memory.config.max_top_k
            top_k = min(max_k, max(50, 4 * need))
            inside = {_PREFIXES: {"$contains": _ns_key(prefix)}} if prefix else None
            while True:
                hits = self.memory.search(query, top_k=top_k, agent_id=self.agent_id, metadata=inside)
                ranked = [self._search_item(*by_chunk[h.id], float(h.score)) for h in hits if h.id in by_chunk]
                if len(ranked) >= need or len(hits) < top_k or top_k >= max_k:
                    break
                top_k = min(max_k, top_k * 4)
        # Unindexed items take part in a query search after the ranked ones, without a score.
        rest = sorted(((ns, key, rec) for ns, key, rec in cands if not rec.indexed),
                      key=lambda c: (-c[2].updated_at, c[0], c[1]))
        ranked += [self._search_item(ns, key, rec, None) for ns, key, rec in rest]
        return ranked[offset:offset + limit]

    @staticmethod
    def _search_item(ns: tuple[str, ...], key: str, rec: _Record, score: float | None) -> SearchItem:
        return SearchItem(namespace=ns, key=key, value=rec.value, created_at=_utc(rec.created_at),
                          updated_at=_utc(rec.updated_at), score=score)

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conds = tuple(op.match_conditions or ())
        for c in conds:
            _validate_labels(c.path, f"{c.match_type} path")
        if op.max_depth is not None and (isinstance(op.max_depth, bool) or not isinstance(op.max_depth, int)
                                         or op.max_depth < 1):
            raise ValueError(f"max_depth must be a positive integer or None, got {op.max_depth!r}")
        limit, offset = _check_page(op.limit, op.offset)
        found = set()
        for ns in self._items:
            if all(_ns_matches(ns, c) for c in conds):
                found.add(ns if op.max_depth is None else ns[: op.max_depth])
        return sorted(found)[offset:offset + limit]

    # ------------------------------------------------------------------ BaseStore
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order; one result per operation (``None`` for a put)."""
        ops = list(ops)
        results: list[Result] = []
        with self._lock:
            for op in ops:
                if isinstance(op, GetOp):
                    _validate_labels(op.namespace, "namespace")
                    results.append(self._get(op))
                elif isinstance(op, PutOp):
                    ns = _validate_labels(op.namespace, "namespace")
                    if not ns:
                        raise InvalidNamespaceError("namespace cannot be empty")
                    self._put(op)
                    results.append(None)
                elif isinstance(op, SearchOp):
                    results.append(self._search(op))
                elif isinstance(op, ListNamespacesOp):
                    results.append(self._list_namespaces(op))
                else:
                    raise TypeError(f"unknown store operation {type(op).__name__}; expected GetOp, PutOp, "
                                    "SearchOp or ListNamespacesOp")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` on causalmem's bounded pool (``causalmem.AsyncMemory``): the event loop never blocks."""
        return await self._agated(self.batch, list(ops))

    # ------------------------------------------------------------------ learning
    def _chunk_id(self, ns: tuple[str, ...], key: Any, name: str) -> str:
        if not isinstance(key, str):
            raise TypeError(f"{name} must hold strings, got {type(key).__name__}" if name == "keys"
                            else f"{name} must be a string, got {type(key).__name__}")
        rec = self._items.get(ns, {}).get(key)
        if rec is None:  # an item of another namespace is not reachable under this one
            raise KeyError(f"{name}: no item {key!r} in namespace {ns!r}")
        return rec.chunk_id

    def feedback(self, namespace: tuple[str, ...], key: str, reward: float) -> float:
        """The item at ``namespace`` / ``key`` (a ``SearchItem``'s ``namespace`` and ``key``) helped
        (``reward`` > 0) or hurt (< 0), ``reward`` in [-1, 1]: its Q-value moves, and the next searches
        rank it higher (or lower). Returns the new Q-value, in [0, 1].

        KeyError naming ``key`` when the namespace holds no such item (an item of another namespace
        with the same key is never reached); ValueError / TypeError naming the bad argument."""
        r = check_reward(reward)
        with self._lock:
            ns = _validate_labels(namespace, "namespace")
            return self.memory.feedback(self._chunk_id(ns, key, "key"), r)

    def confirm(self, namespace: tuple[str, ...], keys: Sequence[str]) -> int:
        """The items ``keys`` of ``namespace`` were used together: causalmem links every pair of them
        (capped, faded at sleep, visible to the next query). One namespace per call: items of two
        namespaces are never linked. Returns how many pairs were credited (0 for one key).

        KeyError naming ``keys`` for a key the namespace does not hold (nothing is written then)."""
        wanted = check_many(keys, "keys")
        with self._lock:
            ns = _validate_labels(namespace, "namespace")
            ids = [self._chunk_id(ns, k, "keys") for k in wanted]
            return self.memory.confirm(ids)

    async def _agated(self, fn: Any, *args: Any) -> Any:
        import asyncio

        loop = asyncio.get_running_loop()
        with self._lock:
            gate = self._loop_locks.get(loop)
            if gate is None:
                gate = self._loop_locks[loop] = asyncio.Lock()
        # asyncio.Lock wakes its waiters first-come first-served: concurrent calls of one event loop
        # (aput, afeedback, ...) reach the database in the order they were made.
        async with gate:
            return await self._amem.run(fn, *args)

    async def afeedback(self, namespace: tuple[str, ...], key: str, reward: float) -> float:
        """``feedback`` on causalmem's bounded pool, in order with this event loop's other store calls."""
        return await self._agated(self.feedback, namespace, key, reward)

    async def aconfirm(self, namespace: tuple[str, ...], keys: Sequence[str]) -> int:
        """``confirm`` on causalmem's bounded pool, in order with this event loop's other store calls."""
        return await self._agated(self.confirm, namespace, keys)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close the database when this store opened it."""
        if self._owns:
            self.memory.close()

    def __enter__(self) -> "CausalMemStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
