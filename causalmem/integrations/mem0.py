"""mem0's Python API on causalmem: ``Memory`` and ``AsyncMemory`` with mem0's method names, arguments
and return shapes, so a script written against mem0 runs after swapping the import::

    # from mem0 import Memory
    from causalmem.integrations.mem0 import Memory

    m = Memory()
    m.add([{"role": "user", "content": "Hi, I'm Alex. I love basketball and gaming."}], user_id="alex")
    m.search("What do you know about me?", filters={"user_id": "alex"})
    # {"results": [{"id": ..., "memory": "Hi, I'm Alex. I love basketball and gaming.", "score": 0.71, ...}]}

Both of mem0's call styles are accepted: the 0.x one (``search(query, user_id=..., limit=...)``,
``get_all(user_id=...)``) and the current one (``search(query, filters={"user_id": ...}, top_k=...)``).
Filters other than ``user_id``/``agent_id``/``run_id`` are metadata filters with mem0's operators
(``eq``, ``ne``, ``gt``, ``gte``, ``lt``, ``lte``, ``in``, ``nin``, ``contains``, ``icontains``, ``"*"``,
and ``AND``/``OR``/``NOT`` lists).

``score`` is causalmem's fused search score (docs/python.md, "Scores") brought to mem0's [0, 1]: as it
is when the search's best is <= 1, else divided by the best (graph support and rewarded memories pass 1;
a clip would tie them), so order and distinct values are kept. Higher is more relevant; 0 means "in
scope but matched nothing better than a typical non-match". ``threshold`` gates each hit's semantic
similarity (the cosine of query and memory), as mem0 gates its semantic score before mixing in keywords:
with the same embedding model, the same memories pass (``tests/test_mem0_side_by_side.py``). Without the
semantic channel (``embedder=None``) it gates ``score``.

Where mem0 2.x and causalmem's core differ, this adapter follows mem0: ``search`` drops hits whose
similarity to the query is under ``threshold`` (default 0.1, mem0's); ``search`` and ``get_all``
without any user_id, agent_id or run_id raise mem0's ValueError instead of reading every user's
memories, and ``add`` without any raises mem0's ``ValidationError``; user_id / agent_id / run_id /
actor_id inside ``metadata`` are dropped with a warning (scope comes from the id arguments only); a
metadata-only ``update`` writes an UPDATE history entry (old text == new text); ``get`` has ``score:
None``; ``top_k`` defaults to 20 (mem0 2.x's) in ``search`` and ``get_all``, and ``top_k=0`` returns
nothing; ``rerank=True`` is ignored (no reranker to configure). ``tests/test_mem0_side_by_side.py``
compares these with a record of real mem0ai 2.2.1 (``benchmarks/mem0_record.py``).

Intended differences from mem0 2.2.1: ``search`` / ``get_all`` take ``user_id=`` (etc.) as keyword
arguments, mem0 0.x's style, where mem0 2.x refuses them; ``get_all(top_k=0)`` returns nothing (mem0
2.2.1 returns one memory); ``ValidationError`` is also a ValueError; ``expiration_date`` and
``timestamp`` are not supported. ``Memory()``'s default embedder is the same model on ONNX Runtime in
int8 (where the ``[onnx]`` extra is installed), whose cosines are within about 0.01 of mem0's
sentence-transformers ones: a memory that close to ``threshold`` may land on the other side of it.
``embedder="torch"`` (or mem0's ``huggingface`` embedder config) gives mem0's values.

No LLM is needed: ``infer`` defaults to False unless the memory has a distiller (``llm`` in
``from_config``), and then to True, mem0's default. No mem0 package is needed either.

Learning: ``feedback(memory_id, "POSITIVE" | "NEGATIVE" | "VERY_NEGATIVE")`` as mem0's platform client
takes it (or ``reward=`` in [-1, 1]) moves the memory's Q-value, and the next searches rank it higher or
lower; ``confirm([memory_id, ...])`` links memories used together. Both take ``user_id``/``agent_id``/
``run_id``: a memory outside that scope is unknown to them.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import os
from typing import Any, Mapping, Sequence

from .. import memory as _memory
from ..async_memory import AsyncMemory as _AsyncCore
from ..retrieval import unit_scores
from ._learning import check_many, check_reward, live_chunk, one_scope

__all__ = ["Memory", "AsyncMemory", "ValidationError"]

logger = logging.getLogger("causalmem")

_SCOPE = ("user_id", "agent_id", "run_id")
_IDENTITY = (*_SCOPE, "actor_id")  # mem0 drops these from caller metadata: scope comes from the id arguments
_NO_SCOPE = ("filters must contain at least one of: user_id, agent_id, run_id. "
             "Example: filters={'user_id': 'u1'}")  # mem0 2.x's ValueError, word for word
DEFAULT_THRESHOLD = 0.1  # mem0's default for search()
DEFAULT_TOP_K = 20  # mem0 2.x's default for search() and get_all()
_MEM0_OPS = {"eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "icontains"}
_PROMOTED = ("role", "actor_id")
# mem0's feedback values (its platform client's ``feedback``) as causalmem rewards in [-1, 1]
FEEDBACK_REWARDS = {"POSITIVE": 1.0, "NEGATIVE": -0.5, "VERY_NEGATIVE": -1.0}


class ValidationError(ValueError):
    """mem0's ``mem0.exceptions.ValidationError`` (``Mem0ValidationError`` in its code): the same name,
    message and ``error_code`` / ``details`` / ``suggestion`` attributes. Unlike mem0's it is also a
    ValueError, as every other argument error of this adapter is."""

    def __init__(self, message: str, error_code: str, details: Mapping[str, Any] | None = None,
                 suggestion: str | None = None) -> None:
        self.message, self.error_code, self.suggestion = message, error_code, suggestion
        self.details = dict(details or {})
        super().__init__(message)


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return _dt.datetime.fromtimestamp(ts, tz=_dt.timezone.utc).isoformat()


def _translate_condition(field: str, cond: Any) -> Any:
    if cond == "*":
        return {"$exists": True}
    if isinstance(cond, Mapping) and cond and all(isinstance(k, str) for k in cond):
        if all(k in _MEM0_OPS or k.startswith("$") for k in cond):
            out = {}
            for op, arg in cond.items():
                name = op if op.startswith("$") else f"${op}"
                out[name] = arg
            return out
        bad = [k for k in cond if k not in _MEM0_OPS]
        raise ValueError(f"unsupported metadata filter operator(s) {bad} on {field!r}; "
                         f"allowed: {sorted(_MEM0_OPS)}")
    return cond


def _translate(filters: Mapping[str, Any]) -> dict[str, Any]:
    """mem0 metadata filters -> causalmem metadata filter (``$``-operators, ``$and``/``$or``/``$not``)."""
    spec: dict[str, Any] = {}
    for key, cond in filters.items():
        if key in ("AND", "OR", "NOT", "$and", "$or", "$not"):
            if not isinstance(cond, Sequence) or isinstance(cond, (str, bytes)) or not cond:
                raise ValueError(f"filters[{key!r}] must be a non-empty list of filter dicts")
            spec["$" + key.lower().lstrip("$")] = [_translate(_check_mapping(c, f"filters[{key!r}] item"))
                                                   for c in cond]
        else:
            spec[key] = _translate_condition(key, cond)
    return spec


def _strip_identity(metadata: Mapping[str, Any] | None, context: str) -> dict[str, Any] | None:
    """``metadata`` without user_id / agent_id / run_id / actor_id, logging each key dropped (as mem0 does)."""
    if metadata is None:
        return None
    clean = {}
    for key, value in metadata.items():
        if key in _IDENTITY:
            logger.warning("%s: ignoring metadata[%r] - identity fields cannot be set through metadata", context, key)
        else:
            clean[key] = value
    return clean


def _check_mapping(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict, got {type(value).__name__}")
    return value


def _split_filters(filters: Mapping[str, Any] | None, user_id: Any, agent_id: Any,
                   run_id: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    scope = {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}
    meta: dict[str, Any] = {}
    if filters is not None:
        for key, val in _check_mapping(filters, "filters").items():
            if key in _SCOPE:
                if scope[key] is not None and val is not None and scope[key] != val:
                    raise ValueError(f"{key} given twice with different values ({scope[key]!r} and {val!r})")
                scope[key] = scope[key] if val is None else val
            else:
                meta[key] = val
    for key, val in scope.items():
        if val is not None:
            if isinstance(val, bool) or not isinstance(val, (str, int)):
                raise TypeError(f"{key} must be a string, got {type(val).__name__}")
            val = str(val).strip()
            if not val:
                raise ValueError(f"{key} must be a non-empty string")
            scope[key] = val
    return scope, (_translate(meta) if meta else None)


def _count(top_k: Any, limit: Any, default: int) -> int:
    if top_k is not None and limit is not None and top_k != limit:
        raise ValueError(f"top_k ({top_k!r}) and limit ({limit!r}) disagree; pass one of them")
    n = top_k if top_k is not None else limit if limit is not None else default
    if isinstance(n, bool) or not isinstance(n, int):  # mem0 2.x's messages
        raise ValueError(f"top_k must be a valid integer, got {n!r}")
    if n < 0:
        raise ValueError(f"Invalid top_k: {n}. Must be a non-negative integer.")
    return n


def _require_scope(scope: Mapping[str, Any]) -> None:
    if all(v is None for v in scope.values()):
        raise ValueError(_NO_SCOPE)


def _item(chunk_or_hit: Any, metadata: Mapping[str, Any], updated_at: float | None = None,
          score: float | None = None, *, keep_score: bool = False) -> dict[str, Any]:
    meta = dict(metadata or {})
    out: dict[str, Any] = {
        "id": chunk_or_hit.id,
        "memory": chunk_or_hit.text,
        "hash": hashlib.md5(chunk_or_hit.text.encode("utf-8")).hexdigest(),
        "metadata": None,
        "score": None,
        "created_at": _iso(chunk_or_hit.created_at),
        "updated_at": _iso(updated_at if updated_at is not None else chunk_or_hit.created_at),
    }
    for key in _SCOPE:
        value = getattr(chunk_or_hit, key, None)
        if value is not None:
            out[key] = value
    for key in _PROMOTED:
        if key in meta:
            out[key] = meta.pop(key)
    out["metadata"] = meta or None
    if score is None and not keep_score:
        out.pop("score")
    else:
        out["score"] = score
    return out


class Memory:
    """mem0's ``Memory`` on a causalmem database (``path``; default ``$CAUSALMEM_DB``, else the file in the
    user's data directory that the CLI uses; ``":memory:"`` for a throwaway one)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, memory: Any = None, embedder: Any = "auto",
                 distiller: Any = None) -> None:
        if memory is not None:
            if not isinstance(memory, _memory.Memory):
                raise TypeError(f"memory must be a causalmem.Memory, got {type(memory).__name__}")
            self.memory, self._owns = memory, False
        else:
            if path is None:  # like mem0's Memory(), a persistent store by default
                from ..config import default_db

                path = default_db()
            self.memory, self._owns = _memory.Memory(path, embedder=embedder, distiller=distiller), True

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, config_dict: Mapping[str, Any]) -> "Memory":
        """Build from a mem0-style config dict.

        Read: ``path`` (or ``vector_store.config.path``), ``embedder`` (``{"provider": "huggingface",
        "config": {"model": ...}}`` or a causalmem spec: ``"auto"``, ``None``, a model name), ``llm``
        (``{"provider": "openai", "config": {"model", "api_key", "openai_base_url" | "base_url"}}``: the
        distiller used by ``add(infer=True)``). Sections of mem0 that causalmem replaces (the vector store
        provider, the history database) are ignored with a log line.
        """
        cfg = dict(_check_mapping(config_dict, "config_dict"))
        known = {"path", "vector_store", "embedder", "llm", "history_db_path", "version", "custom_prompt",
                 "custom_fact_extraction_prompt", "custom_update_memory_prompt", "graph_store", "reranker"}
        unknown = set(cfg) - known
        if unknown:
            raise ValueError(f"unknown config keys {sorted(unknown)}; known: {sorted(known)}")
        path = cfg.get("path")
        vs = cfg.get("vector_store")
        if path is None and isinstance(vs, Mapping):
            path = (vs.get("config") or {}).get("path")
            logger.info("mem0 config: vector_store %r is replaced by causalmem's store", vs.get("provider"))
        embedder: Any = "auto"
        emb = cfg.get("embedder", "auto")
        if isinstance(emb, Mapping):
            provider = emb.get("provider")
            model = (emb.get("config") or {}).get("model")
            if provider in ("huggingface", "sentence_transformers", "sentence-transformers") and model:
                embedder = model
            else:
                logger.info("mem0 config: embedder provider %r is not used; causalmem's default embedder is",
                            provider)
        elif emb is None or isinstance(emb, str):
            embedder = emb
        distiller = None
        llm = cfg.get("llm")
        if isinstance(llm, Mapping):
            from ..judges import LLMDistiller

            c = dict(llm.get("config") or {})
            distiller = LLMDistiller(c.get("openai_base_url") or c.get("base_url"), c.get("model"), c.get("api_key"))
        return cls(path, embedder=embedder, distiller=distiller)

    def close(self) -> None:
        if self._owns:
            self.memory.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ writes
    def add(self, messages: Any, *, user_id: str | None = None, agent_id: str | None = None,
            run_id: str | None = None, metadata: Mapping[str, Any] | None = None, infer: bool | None = None,
            memory_type: str | None = None, prompt: str | None = None) -> dict[str, Any]:
        """Store each message (system messages are skipped, as mem0 does); ``{"results": [{"id", "memory",
        "event": "ADD", "actor_id", "role"}]}``."""
        if memory_type is not None:
            raise ValueError("memory_type (procedural memory) is not supported by causalmem")
        if prompt is not None:
            raise ValueError("prompt is not supported: causalmem's distiller has its own instructions")
        scope, _ = _split_filters(None, user_id, agent_id, run_id)
        if all(v is None for v in scope.values()):  # mem0 2.x's error, word for word
            raise ValidationError("At least one of 'user_id', 'agent_id', or 'run_id' must be provided.",
                                  "VALIDATION_001", {"provided_ids": scope},
                                  "Please provide at least one identifier to scope the memory operation.")
        if metadata is not None:
            metadata = _strip_identity(_check_mapping(metadata, "metadata"), "add()")
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        elif isinstance(messages, Mapping):
            messages = [messages]
        elif not isinstance(messages, list):
            raise TypeError(f"messages must be a string, a dict or a list of dicts, got {type(messages).__name__}")
        turns = []
        for i, m in enumerate(messages):
            if not isinstance(m, Mapping) or m.get("role") is None or m.get("content") is None:
                raise ValueError(f"messages[{i}] must be a dict with 'role' and 'content'")
            if m["role"] == "system":
                continue
            turn = {"role": m["role"], "content": m["content"]}
            if m.get("name"):
                turn["actor_id"] = m["name"]
            turns.append(turn)
        if not turns:
            return {"results": []}
        if infer is None:
            infer = self.memory.distiller is not None
        chunks = self.memory.add(turns, metadata=metadata, infer=bool(infer), **scope)
        return {"results": [{"id": c.id, "memory": c.text, "event": "ADD",
                             "actor_id": c.metadata.get("actor_id"), "role": c.metadata.get("role")}
                            for c in chunks]}

    def update(self, memory_id: str, data: str | None = None, metadata: Mapping[str, Any] | None = None, *,
               text: str | None = None) -> dict[str, str]:
        """New text (``data``, or ``text`` as mem0 2.x names it) and/or metadata for a memory."""
        if data is not None and text is not None and data != text:
            raise ValueError("pass the new text as data or as text, not both")
        new_text = text if text is not None else data
        if new_text is None and metadata is None:
            # mem0's message, less its expiration_date (not supported here)
            raise ValueError("At least one of text or metadata must be provided.")
        chunk = self._require(memory_id)
        if metadata is not None:
            metadata = _strip_identity(_check_mapping(metadata, "metadata"), "update()")
        if new_text is None:
            # as mem0: a metadata-only update rewrites the memory with its own text, so the history has an
            # UPDATE entry (old text == new text) and updated_at moves
            new_text = chunk.text
        self.memory.update(memory_id, new_text, metadata=metadata)
        return {"message": "Memory updated successfully!"}

    def delete(self, memory_id: str) -> dict[str, str]:
        self._require(memory_id)
        self.memory.delete(memory_id)
        return {"message": "Memory deleted successfully!"}

    def delete_all(self, user_id: str | None = None, agent_id: str | None = None,
                   run_id: str | None = None) -> dict[str, str]:
        scope, _ = _split_filters(None, user_id, agent_id, run_id)
        if all(v is None for v in scope.values()):
            raise ValueError("delete_all needs user_id, agent_id or run_id; use reset() to delete everything")
        self.memory.delete_all(**scope)
        return {"message": "Memories deleted successfully!"}

    def reset(self) -> None:
        """Delete every memory of the database."""
        while True:
            chunks = self.memory.get_all(limit=1000)
            if not chunks:
                return
            for c in chunks:
                self.memory.delete(c.id)

    # ------------------------------------------------------------------ reads
    def _require(self, memory_id: Any) -> Any:
        if not isinstance(memory_id, str) or not memory_id:
            raise ValueError(f"memory_id must be a non-empty string, got {memory_id!r}")
        try:
            chunk = self.memory.get(memory_id)
        except KeyError:
            chunk = None
        if chunk is None or not chunk.valid:
            raise ValueError(f"Memory with id {memory_id} not found")
        return chunk

    def _updated_at(self, memory_id: str, created_at: float) -> float:
        events = [e for e in self.memory.history(memory_id) if e["event"] == "update"]
        return events[-1]["at"] if events else created_at

    def get(self, memory_id: str) -> dict[str, Any] | None:
        """One memory as mem0 returns it, or None when there is none with this id."""
        try:
            chunk = self._require(memory_id)
        except ValueError:
            return None
        return _item(chunk, chunk.metadata, self._updated_at(chunk.id, chunk.created_at), keep_score=True)

    def get_all(self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None,
                filters: Mapping[str, Any] | None = None, top_k: int | None = None,
                limit: int | None = None) -> dict[str, Any]:
        """Memories of a scope (and metadata filters), oldest first: ``{"results": [...]}``. As in mem0 2.x,
        a call without user_id, agent_id or run_id (arguments or ``filters``) is a ValueError."""
        scope, meta = _split_filters(filters, user_id, agent_id, run_id)
        _require_scope(scope)
        n = _count(top_k, limit, DEFAULT_TOP_K)
        if n == 0:
            return {"results": []}
        chunks = self.memory.get_all({k: v for k, v in scope.items() if v is not None}, limit=n, metadata=meta)
        return {"results": [_item(c, c.metadata, self._updated_at(c.id, c.created_at)) for c in chunks]}

    def search(self, query: str, *, user_id: str | None = None, agent_id: str | None = None,
               run_id: str | None = None, filters: Mapping[str, Any] | None = None, top_k: int | None = None,
               limit: int | None = None, threshold: float | None = DEFAULT_THRESHOLD, rerank: bool = False,
               explain: bool = False) -> dict[str, Any]:
        """Hybrid search (lexical + semantic + graph): ``{"results": [{..., "score": 0..1}]}``, best first.

        As mem0: ``threshold`` (default 0.1; ``None`` means the default) gates each hit's cosine similarity
        to the query (its ``score`` without a semantic channel); pass 0 to see every hit with a non-negative
        similarity, ``top_k=0`` returns no results, ``rerank`` is accepted and ignored (there is no reranker
        to configure; causalmem's fusion already ranks), and a call without user_id, agent_id or run_id
        (arguments or ``filters``) is a ValueError."""
        scope, meta = _split_filters(filters, user_id, agent_id, run_id)
        _require_scope(scope)
        n = _count(top_k, limit, DEFAULT_TOP_K)
        if threshold is None:
            threshold = DEFAULT_THRESHOLD
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):  # mem0 2.x's messages
            raise ValueError(f"threshold must be a valid number, got {threshold!r}")
        if not 0.0 <= float(threshold) <= 1.0:
            raise ValueError(f"Invalid threshold: {threshold}. Must be between 0 and 1 (inclusive).")
        if not isinstance(rerank, bool):
            raise TypeError(f"rerank must be True or False, got {type(rerank).__name__}")
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        if n == 0:
            return {"results": []}
        self.memory.wait_embedded()  # mem0 embeds on add: a search sees every vector written before it
        # explain: each hit's cosine, which the threshold gates (mem0 gates its semantic score, not its mix)
        hits = self.memory.search(query, top_k=min(n, self.memory.config.max_top_k), metadata=meta,
                                  explain=True, **scope)
        out = []
        for h, s in zip(hits, unit_scores([h.score for h in hits])):
            cosine = (h.signals or {}).get("cosine")
            if (s if cosine is None else cosine) < threshold:
                continue
            item = _item(h, h.metadata, score=s)
            item["updated_at"] = _iso(self._updated_at(h.id, h.created_at))
            if explain and h.signals is not None:
                item["score_details"] = dict(h.signals)
            out.append(item)
        return {"results": out}

    def history(self, memory_id: str) -> list[dict[str, Any]]:
        """Changes of a memory, oldest first, in mem0's shape (event ADD / UPDATE / DELETE)."""
        if not isinstance(memory_id, str) or not memory_id:
            raise ValueError(f"memory_id must be a non-empty string, got {memory_id!r}")
        try:
            chunk = self.memory.get(memory_id)
        except KeyError:
            return []
        names = {"create": "ADD", "update": "UPDATE", "delete": "DELETE"}
        out = []
        for i, e in enumerate(self.memory.history(memory_id)):
            out.append({"id": f"{memory_id}:{i}", "memory_id": memory_id, "old_memory": e["old_text"],
                        "new_memory": e["new_text"], "event": names.get(e["event"], e["event"].upper()),
                        "created_at": _iso(chunk.created_at), "updated_at": _iso(e["at"]),
                        "is_deleted": e["event"] == "delete", "actor_id": chunk.metadata.get("actor_id"),
                        "role": chunk.metadata.get("role")})
        return out

    # ------------------------------------------------------------------ learning
    def feedback(self, memory_id: str, feedback: str | None = None, feedback_reason: str | None = None, *,
                 reward: float | None = None, user_id: str | None = None, agent_id: str | None = None,
                 run_id: str | None = None) -> dict[str, Any]:
        """Say a memory (an ``id`` of ``search``'s results) helped or hurt, as mem0's platform client does:
        ``feedback`` is ``"POSITIVE"`` (reward +1), ``"NEGATIVE"`` (-0.5) or ``"VERY_NEGATIVE"`` (-1), or pass
        ``reward`` in [-1, 1] instead. The memory's Q-value moves and the next searches rank it higher (or
        lower). With ``user_id``/``agent_id``/``run_id``, a memory outside that scope is unknown (KeyError
        naming ``memory_id``, as for an id that does not exist).

        Returns ``{"memory_id", "feedback", "feedback_reason", "reward", "q_value"}``. ``feedback_reason`` is
        returned, not stored. mem0 removes earlier feedback when ``feedback`` is None; a Q-value keeps no
        record per call to remove, so ``feedback=None`` without ``reward`` is a ValueError."""
        if feedback is not None and reward is not None:
            raise ValueError("pass feedback (POSITIVE / NEGATIVE / VERY_NEGATIVE) or reward, not both")
        if reward is not None:
            r = check_reward(reward)
        elif feedback is None:
            raise ValueError("feedback is None: removing earlier feedback is not supported (a Q-value keeps no "
                             f"record per call); pass feedback={sorted(FEEDBACK_REWARDS)} or reward in [-1, 1]")
        else:
            if not isinstance(feedback, str) or feedback.upper() not in FEEDBACK_REWARDS:
                raise ValueError(f"feedback must be one of {sorted(FEEDBACK_REWARDS)}, got {feedback!r}")
            feedback = feedback.upper()
            r = FEEDBACK_REWARDS[feedback]
        if feedback_reason is not None and not isinstance(feedback_reason, str):
            raise TypeError(f"feedback_reason must be a string or None, got {type(feedback_reason).__name__}")
        scope, _ = _split_filters(None, user_id, agent_id, run_id)
        chunk = live_chunk(self.memory, memory_id, scope, "memory_id")
        q = self.memory.feedback(chunk.id, r)
        return {"memory_id": chunk.id, "feedback": feedback, "feedback_reason": feedback_reason, "reward": r,
                "q_value": q}

    def confirm(self, memory_ids: Sequence[str], *, user_id: str | None = None, agent_id: str | None = None,
                run_id: str | None = None) -> dict[str, Any]:
        """These memories (``id``s of ``search``'s results) were used together: causalmem links every pair
        of them (capped, faded at sleep, visible to the next search). They must share one user_id /
        agent_id / run_id scope (ValueError otherwise: no link joins two scopes); with ``user_id`` etc.
        given, a memory outside that scope is unknown (KeyError naming ``memory_ids``).
        Returns ``{"message", "pairs"}`` (pairs credited; 0 for a single memory)."""
        ids = check_many(memory_ids, "memory_ids")
        scope, _ = _split_filters(None, user_id, agent_id, run_id)
        chunks = [live_chunk(self.memory, mid, scope, "memory_ids") for mid in ids]
        pairs = self.memory.confirm(one_scope(chunks, "memory_ids"))
        return {"message": "Memories confirmed successfully!", "pairs": pairs}


class AsyncMemory:
    """mem0's ``AsyncMemory``: the same methods as :class:`Memory`, awaitable, run on
    ``causalmem.AsyncMemory``'s bounded pool (one shared ``causalmem.Memory`` underneath)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, memory: Any = None, embedder: Any = "auto",
                 distiller: Any = None, max_workers: int | None = None) -> None:
        self._sync = Memory(path, memory=memory, embedder=embedder, distiller=distiller)
        self.memory = self._sync.memory
        self._core = _AsyncCore(memory=self.memory, max_workers=max_workers)

    @classmethod
    def from_config(cls, config_dict: Mapping[str, Any]) -> "AsyncMemory":
        sync = Memory.from_config(config_dict)
        out = cls(memory=sync.memory)
        out._sync = sync  # owns (and closes) the Memory it built
        return out

    async def add(self, messages: Any, **kwargs: Any) -> dict[str, Any]:
        return await self._core.run(self._sync.add, messages, **kwargs)

    async def search(self, query: str, **kwargs: Any) -> dict[str, Any]:
        return await self._core.run(self._sync.search, query, **kwargs)

    async def get(self, memory_id: str) -> dict[str, Any] | None:
        return await self._core.run(self._sync.get, memory_id)

    async def get_all(self, **kwargs: Any) -> dict[str, Any]:
        return await self._core.run(self._sync.get_all, **kwargs)

    async def update(self, memory_id: str, data: str | None = None, metadata: Mapping[str, Any] | None = None,
                     **kwargs: Any) -> dict[str, str]:
        return await self._core.run(self._sync.update, memory_id, data, metadata, **kwargs)

    async def delete(self, memory_id: str) -> dict[str, str]:
        return await self._core.run(self._sync.delete, memory_id)

    async def delete_all(self, **kwargs: Any) -> dict[str, str]:
        return await self._core.run(self._sync.delete_all, **kwargs)

    async def history(self, memory_id: str) -> list[dict[str, Any]]:
        return await self._core.run(self._sync.history, memory_id)

    async def feedback(self, memory_id: str, feedback: str | None = None, feedback_reason: str | None = None,
                       **kwargs: Any) -> dict[str, Any]:
        return await self._core.run(self._sync.feedback, memory_id, feedback, feedback_reason, **kwargs)

    async def confirm(self, memory_ids: Sequence[str], **kwargs: Any) -> dict[str, Any]:
        return await self._core.run(self._sync.confirm, memory_ids, **kwargs)

    async def reset(self) -> None:
        await self._core.run(self._sync.reset)

    async def aclose(self) -> None:
        await self._core.aclose()
        self._sync.close()

    async def __aenter__(self) -> "AsyncMemory":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
