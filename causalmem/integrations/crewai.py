"""CrewAI memory storage backed by causalmem: ``CausalMemStorage``, a ``crewai.memory`` ``StorageBackend``.

    from crewai import Memory
    from causalmem.integrations.crewai import CausalMemStorage

    storage = CausalMemStorage("crew.db")
    memory = Memory(storage=storage, embedder=storage.embedder, llm=...)

CrewAI hands its storage a query *vector*, not the query text. ``storage.embedder`` is the callable
CrewAI should embed with: it encodes with causalmem's embedder and remembers which text each vector
came from, so ``search`` runs causalmem's full hybrid search (lexical + semantic + graph) on the text.
A vector this embedder did not produce cannot be searched (a ``ValueError`` says so).

Each record is one causalmem chunk in the scope ``agent_id="crewai"``; the record (scope path,
categories, metadata, importance, times, source, privacy) is kept in the chunk's metadata. Needs
``crewai`` (which requires ``mcp<2``, so it cannot share an environment with causalmem's MCP server).
Scores are causalmem's fused search score (docs/python.md, "Scores") on [0, 1]: as they are when the
search's best is <= 1, else divided by the best (CrewAI re-sorts by score: a clip to 1 would tie every
hit above 1).

Learning from the caller: ``storage.feedback(match, reward)`` says a recalled memory (a ``MemoryMatch``
of ``Memory.recall``, a ``MemoryRecord`` of ``search``, or its record id) helped (reward > 0) or hurt
(< 0), in [-1, 1]: the next searches rank it higher or lower. ``storage.confirm([match, ...])`` links
memories used together. ``afeedback`` / ``aconfirm`` are the async twins.
"""
from __future__ import annotations

import datetime as _dt
import os
import threading
from collections import OrderedDict
from typing import Any, Sequence

import numpy as np
from crewai.memory.types import MemoryRecord, ScopeInfo

from ..async_memory import AsyncMemory
from ..memory import Memory
from ..retrieval import unit_scores
from ..types import Chunk
from ._learning import check_many, check_reward

__all__ = ["CausalMemStorage", "CausalMemEmbedder"]

_KEY = "crewai"
_PREFIXES = "crewai_scopes"


def _scope_prefixes(scope: str) -> list[str]:
    parts = [p for p in (scope or "/").split("/") if p]
    return ["/"] + ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _norm_scope(scope: str | None) -> str | None:
    if scope is None:
        return None
    parts = [p for p in scope.split("/") if p]
    return "/" + "/".join(parts)


def _vec_key(vec: Any) -> bytes:
    return np.round(np.asarray(vec, dtype=np.float64), 5).astype(np.float32).tobytes()


class CausalMemEmbedder:
    """The embedder to give CrewAI: causalmem's encoder, remembering the text behind each vector."""

    def __init__(self, memory: Memory, capacity: int = 10000) -> None:
        if memory.embedder is None:
            raise ValueError("CausalMemStorage needs a Memory with an embedder (embedder='auto' or an Embedder)")
        self._memory = memory
        self._texts: OrderedDict[bytes, str] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        texts = list(texts)
        encoder = self._memory.embedder
        assert encoder is not None  # checked in __init__
        vecs = encoder.encode(texts) if texts else np.zeros((0, 1))
        out = [[float(x) for x in v] for v in vecs]
        with self._lock:
            for text, vec in zip(texts, out):
                key = _vec_key(vec)
                self._texts[key] = text
                self._texts.move_to_end(key)
            while len(self._texts) > self._capacity:
                self._texts.popitem(last=False)
        return out

    def text_for(self, vec: Sequence[float]) -> str | None:
        with self._lock:
            return self._texts.get(_vec_key(vec))


class CausalMemStorage:
    """A CrewAI ``StorageBackend`` on a causalmem database (``path``) or a shared ``memory=``."""

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, memory: Memory | None = None,
                 embedder: Any = "auto", agent_id: str = _KEY) -> None:
        if memory is not None:
            if not isinstance(memory, Memory):
                raise TypeError(f"memory must be a causalmem.Memory, got {type(memory).__name__}")
            self.memory, self._owns = memory, False
        else:
            self.memory, self._owns = Memory(path, embedder=embedder), True
        self.agent_id = agent_id
        self.embedder = CausalMemEmbedder(self.memory)
        self._amem = AsyncMemory(memory=self.memory)

    # ------------------------------------------------------------------ mapping
    def _meta(self, r: MemoryRecord) -> dict[str, Any]:
        scope = _norm_scope(r.scope) or "/"
        rec = r.model_dump(mode="json", exclude={"embedding", "content"})
        rec["scope"] = scope
        return {_KEY: rec, _PREFIXES: _scope_prefixes(scope)}

    @staticmethod
    def _record(chunk: Any) -> MemoryRecord:
        rec = dict(chunk.metadata[_KEY])
        rec["content"] = chunk.text
        return MemoryRecord.model_validate(rec)

    def _spec(self, scope_prefix: str | None = None, categories: list[str] | None = None,
              metadata_filter: dict[str, Any] | None = None, record_ids: list[str] | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {f"{_KEY}.id": {"$exists": True}}
        scope = _norm_scope(scope_prefix)
        if scope:
            spec[_PREFIXES] = {"$contains": scope}
        if categories:
            spec["$or"] = [{f"{_KEY}.categories": {"$contains": c}} for c in categories]
        for k, v in (metadata_filter or {}).items():
            spec[f"{_KEY}.metadata.{k}"] = v
        if record_ids is not None:
            spec[f"{_KEY}.id"] = {"$in": list(record_ids)}
        return spec

    def _chunks(self, spec: dict[str, Any]) -> list[Any]:
        return self.memory.get_all(agent_id=self.agent_id, metadata=spec, limit=2**62)

    # ------------------------------------------------------------------ StorageBackend
    def save(self, records: list[MemoryRecord]) -> None:
        for r in records:
            self.memory.add(r.content, agent_id=self.agent_id, metadata=self._meta(r), dedupe=False)

    def search(self, query_embedding: list[float], scope_prefix: str | None = None,
               categories: list[str] | None = None, metadata_filter: dict[str, Any] | None = None,
               limit: int = 10, min_score: float = 0.0) -> list[tuple[MemoryRecord, float]]:
        text = self.embedder.text_for(query_embedding)
        if text is None:
            raise ValueError("CausalMemStorage.search got a vector its embedder did not produce: give CrewAI "
                             "embedder=storage.embedder so the query text reaches causalmem's hybrid search")
        self.memory.wait_embedded()  # CrewAI embeds on save: a search sees every vector saved before it
        hits = self.memory.search(text, top_k=max(1, min(int(limit), self.memory.config.max_top_k)),
                                  agent_id=self.agent_id,
                                  metadata=self._spec(scope_prefix, categories, metadata_filter))
        # CrewAI re-sorts by score (its composite of score, recency and importance): a clip to 1 would tie
        # every hit above 1 (graph bonuses pass it) and lose causalmem's order, and with it what feedback
        # taught. Scores stay as they are when the best is <= 1, else are divided by the best.
        out = []
        for h, score in zip(hits, unit_scores([h.score for h in hits])):
            if score >= min_score:
                rec = dict(h.metadata[_KEY])
                rec["content"] = h.text
                out.append((MemoryRecord.model_validate(rec), score))
        return out

    def delete(self, scope_prefix: str | None = None, categories: list[str] | None = None,
               record_ids: list[str] | None = None, older_than: _dt.datetime | None = None,
               metadata_filter: dict[str, Any] | None = None) -> int:
        n = 0
        for c in self._chunks(self._spec(scope_prefix, categories, metadata_filter, record_ids)):
            if older_than is not None and self._record(c).created_at >= older_than:
                continue
            self.memory.delete(c.id)
            n += 1
        return n

    def update(self, record: MemoryRecord) -> None:
        found = self._chunks(self._spec(record_ids=[record.id]))
        if not found:
            raise KeyError(f"unknown record id {record.id!r}")
        chunk = found[0]
        text = record.content if record.content != chunk.text else None
        self.memory.update(chunk.id, text, metadata=self._meta(record))

    def get_record(self, record_id: str) -> MemoryRecord | None:
        found = self._chunks(self._spec(record_ids=[record_id]))
        return self._record(found[0]) if found else None

    def list_records(self, scope_prefix: str | None = None, limit: int = 200, offset: int = 0) -> list[MemoryRecord]:
        records = [self._record(c) for c in self._chunks(self._spec(scope_prefix))]
        records.sort(key=lambda r: r.created_at, reverse=True)
        return records[offset:offset + limit]

    def get_scope_info(self, scope: str) -> ScopeInfo:
        records = [self._record(c) for c in self._chunks(self._spec(scope))]
        path = _norm_scope(scope) or "/"
        times = [r.created_at for r in records]
        return ScopeInfo(path=path, record_count=len(records),
                         categories=sorted({c for r in records for c in r.categories}),
                         oldest_record=min(times) if times else None, newest_record=max(times) if times else None,
                         child_scopes=self.list_scopes(path))

    def list_scopes(self, parent: str = "/") -> list[str]:
        base = _norm_scope(parent) or "/"
        depth = 0 if base == "/" else base.count("/")
        children = set()
        for c in self._chunks(self._spec(base)):
            prefixes = c.metadata.get(_PREFIXES, [])
            if len(prefixes) > depth + 1:
                children.add(prefixes[depth + 1])
        return sorted(children)

    def list_categories(self, scope_prefix: str | None = None) -> dict[str, int]:
        counts: dict[str, int] = {}
        for c in self._chunks(self._spec(scope_prefix)):
            for cat in c.metadata[_KEY].get("categories", []):
                counts[cat] = counts.get(cat, 0) + 1
        return counts

    def count(self, scope_prefix: str | None = None) -> int:
        return len(self._chunks(self._spec(scope_prefix)))

    def reset(self, scope_prefix: str | None = None) -> None:
        self.delete(scope_prefix=scope_prefix)

    # ------------------------------------------------------------------ learning
    def _chunk(self, item: Any, name: str, scope_prefix: str | None) -> Chunk:
        """The chunk of a recalled memory: a ``MemoryMatch`` (its ``record``), a ``MemoryRecord`` or a record id."""
        record = getattr(item, "record", item)  # crewai's MemoryMatch wraps the record
        record_id = record.id if isinstance(record, MemoryRecord) else record
        if not isinstance(record_id, str) or not record_id:
            raise TypeError(f"{name} must be a MemoryMatch, a MemoryRecord or a record id string, "
                            f"got {type(item).__name__}")
        found = self._chunks(self._spec(scope_prefix, record_ids=[record_id]))  # this storage's records only
        if not found:
            where = f"under scope {_norm_scope(scope_prefix)!r}" if scope_prefix is not None else "in this storage"
            raise KeyError(f"{name}: no record with id {record_id!r} {where}")
        return found[0]

    def feedback(self, record: Any, reward: float, scope_prefix: str | None = None) -> float:
        """A recalled memory (``MemoryMatch``, ``MemoryRecord`` or record id) helped (``reward`` > 0) or
        hurt (< 0), ``reward`` in [-1, 1]: its Q-value moves, and the next searches rank it higher (or
        lower). Returns the new Q-value, in [0, 1]. KeyError naming ``record`` for a record this storage
        does not hold (or, with ``scope_prefix``, one outside that scope path)."""
        r = check_reward(reward)
        return self.memory.feedback(self._chunk(record, "record", scope_prefix).id, r)

    def confirm(self, records: Sequence[Any], scope_prefix: str | None = None) -> int:
        """These recalled memories were used together: causalmem links every pair of them (capped, faded
        at sleep, visible to the next search). Returns how many pairs were credited (0 for one record).
        KeyError naming ``records`` for a record this storage does not hold (or, with ``scope_prefix``, one
        outside that scope path); nothing is written then."""
        items = check_many(records, "records")
        return self.memory.confirm([self._chunk(r, "records", scope_prefix).id for r in items])

    async def afeedback(self, record: Any, reward: float, scope_prefix: str | None = None) -> float:
        return await self._amem.run(self.feedback, record, reward, scope_prefix)

    async def aconfirm(self, records: Sequence[Any], scope_prefix: str | None = None) -> int:
        return await self._amem.run(self.confirm, records, scope_prefix)

    async def asave(self, records: list[MemoryRecord]) -> None:
        await self._amem.run(self.save, records)

    async def asearch(self, query_embedding: list[float], scope_prefix: str | None = None,
                      categories: list[str] | None = None, metadata_filter: dict[str, Any] | None = None,
                      limit: int = 10, min_score: float = 0.0) -> list[tuple[MemoryRecord, float]]:
        return await self._amem.run(self.search, query_embedding, scope_prefix, categories, metadata_filter,
                                    limit, min_score)

    async def adelete(self, scope_prefix: str | None = None, categories: list[str] | None = None,
                      record_ids: list[str] | None = None, older_than: _dt.datetime | None = None,
                      metadata_filter: dict[str, Any] | None = None) -> int:
        return await self._amem.run(self.delete, scope_prefix, categories, record_ids, older_than, metadata_filter)

    def close(self) -> None:
        if self._owns:
            self.memory.close()
