"""AutoGen memory backed by causalmem: ``CausalMemory``, an ``autogen_core.memory.Memory``.

    from autogen_agentchat.agents import AssistantAgent
    from causalmem.integrations.autogen import CausalMemory

    memory = CausalMemory("agent.db", user_id="alice")
    agent = AssistantAgent("assistant", model_client=client, memory=[memory])

Before each model call the agent calls ``update_context``: the last message of the model context
is the query of a causalmem hybrid search (lexical + semantic + graph) in the memory's scope, and
the hits are added to the context as one system message. Needs ``pip install 'causalmem-engine[autogen]'``.

Learning from the caller: ``await memory.feedback(content, reward)`` says a ``MemoryContent`` of a query
result (or of the agent's ``MemoryQueryEvent``) helped (reward > 0) or hurt (< 0), in [-1, 1]: the next
queries rank it higher or lower. ``await memory.confirm(contents)`` links results used together.
"""
from __future__ import annotations

import json
from typing import Any

from autogen_core import CancellationToken, Component
from autogen_core.memory import Memory as _AutogenMemory
from autogen_core.memory import MemoryContent, MemoryMimeType, MemoryQueryResult, UpdateContextResult
from autogen_core.model_context import ChatCompletionContext
from autogen_core.models import SystemMessage
from pydantic import BaseModel, Field
from typing_extensions import Self

from ..async_memory import AsyncMemory
from ..memory import Memory
from ..types import Chunk
from ._learning import check_many, check_reward, live_chunk, one_scope

__all__ = ["CausalMemory", "CausalMemoryConfig"]

_TEXT_TYPES = {MemoryMimeType.TEXT.value, MemoryMimeType.MARKDOWN.value, MemoryMimeType.JSON.value}


class CausalMemoryConfig(BaseModel):
    """Declarative configuration of :class:`CausalMemory` (AutoGen's component config)."""

    path: str = Field(":memory:", description="SQLite file of the memory (':memory:' for a throwaway one)")
    name: str | None = Field(None, description="optional identifier of this memory")
    user_id: str | None = Field(None, description="scope: every add is stored under it, every query filtered by it")
    agent_id: str | None = Field(None, description="scope, as user_id")
    run_id: str | None = Field(None, description="scope, as user_id")
    top_k: int = Field(5, ge=1, le=1000, description="hits returned by query / added by update_context")
    score_threshold: float = Field(0.0, ge=0.0, description="drop hits whose causalmem score is below this")
    embedder: str | None = Field("auto", description="'auto' (the packaged MiniLM), a model name/path, or None")


class CausalMemory(_AutogenMemory, Component[CausalMemoryConfig]):
    """An AutoGen ``Memory`` on a causalmem database.

    ``CausalMemory(path, user_id=..., agent_id=..., run_id=..., top_k=5, score_threshold=0.0)`` opens its
    own database (closed by :meth:`close`); ``CausalMemory(memory=mem)`` shares a ``causalmem.Memory`` or
    ``causalmem.AsyncMemory`` the caller keeps owning. Calls run on ``AsyncMemory``'s bounded pool, so the
    event loop never blocks on SQLite or the embedder.
    """

    component_type = "memory"
    component_config_schema = CausalMemoryConfig
    component_provider_override = "causalmem.integrations.autogen.CausalMemory"

    def __init__(self, path: str = ":memory:", *, memory: Memory | AsyncMemory | None = None,
                 name: str | None = None, user_id: str | None = None, agent_id: str | None = None,
                 run_id: str | None = None, top_k: int = 5, score_threshold: float = 0.0,
                 embedder: Any = "auto") -> None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
        if isinstance(score_threshold, bool) or not isinstance(score_threshold, (int, float)) or score_threshold < 0:
            raise ValueError(f"score_threshold must be a number >= 0, got {score_threshold!r}")
        if memory is None:
            self._amem = AsyncMemory(path, embedder=embedder)
            self._owns = True
        elif isinstance(memory, AsyncMemory):
            self._amem, self._owns = memory, False
        elif isinstance(memory, Memory):
            self._amem, self._owns = AsyncMemory(memory=memory), True  # owns the wrapper, not the Memory
        else:
            raise TypeError(f"memory must be a causalmem.Memory or AsyncMemory, got {type(memory).__name__}")
        self._path = str(path) if memory is None else str(self._amem.memory.path)
        self._embedder_spec = embedder if isinstance(embedder, str) or embedder is None else "auto"
        self._name = name or "causalmem"
        self._scope = {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}
        self.top_k = top_k
        self.score_threshold = float(score_threshold)

    @property
    def name(self) -> str:
        return self._name

    @property
    def memory(self) -> Memory:
        """The underlying ``causalmem.Memory``."""
        return self._amem.memory

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _text_of(content: str | MemoryContent) -> str:
        if isinstance(content, str):
            return content
        if not isinstance(content, MemoryContent):
            raise TypeError(f"content must be a MemoryContent or a string, got {type(content).__name__}")
        mime = content.mime_type.value if isinstance(content.mime_type, MemoryMimeType) else str(content.mime_type)
        if mime not in _TEXT_TYPES:
            raise ValueError(f"content.mime_type {mime!r} is not supported; causalmem stores text: "
                             f"{sorted(_TEXT_TYPES)}")
        value: Any = content.content
        if mime == MemoryMimeType.JSON.value and isinstance(value, str):
            # AutoGen's JSON content is a dict; a string is taken only when it holds a JSON object
            raw = value
            try:
                value = json.loads(raw)
            except ValueError:
                value = None
            if not isinstance(value, dict):
                raise ValueError("JSON content must be a dict (or a string holding a JSON object), got "
                                 f"{raw[:80]!r}; use MemoryMimeType.TEXT for plain text")
        if isinstance(value, dict):
            return json.dumps(value, ensure_ascii=False, sort_keys=True)
        if isinstance(value, str):
            return value
        raise TypeError(f"content.content must be a string or a dict for {mime!r}, got {type(value).__name__}")

    async def _run(self, coro: Any, cancellation_token: CancellationToken | None) -> Any:
        import asyncio

        task = asyncio.ensure_future(coro)
        if cancellation_token is not None:
            cancellation_token.link_future(task)
        return await task

    # ------------------------------------------------------------------ autogen_core.memory.Memory
    async def add(self, content: MemoryContent, cancellation_token: CancellationToken | None = None) -> None:
        """Store ``content`` (text, markdown or JSON) as one memory chunk with its metadata and MIME type."""
        text = self._text_of(content)
        metadata: dict[str, Any] = {}
        if isinstance(content, MemoryContent):
            metadata.update(content.metadata or {})
            metadata["mime_type"] = (content.mime_type.value if isinstance(content.mime_type, MemoryMimeType)
                                     else str(content.mime_type))
        await self._run(self._amem.add(text, metadata=metadata, **self._scope), cancellation_token)

    async def query(self, query: str | MemoryContent = "", cancellation_token: CancellationToken | None = None,
                    **kwargs: Any) -> MemoryQueryResult:
        """Hybrid search for ``query`` in this memory's scope; ``top_k`` and ``score_threshold`` may be overridden.

        Each result's metadata carries causalmem's ``id``, ``score`` and ``created_at`` besides what was stored.
        """
        unknown = set(kwargs) - {"top_k", "score_threshold"}
        if unknown:
            raise TypeError(f"unknown query arguments {sorted(unknown)}; allowed: ['score_threshold', 'top_k']")
        top_k = kwargs.get("top_k", self.top_k)
        threshold = float(kwargs.get("score_threshold", self.score_threshold))
        text = self._text_of(query)
        if not text.strip():
            return MemoryQueryResult(results=[])

        def run() -> list[MemoryContent]:
            mem = self._amem.memory
            mem.wait_embedded()  # AutoGen memories embed on add: a query sees every vector written before it
            sc = self._scope
            hits = mem.search(text, top_k=top_k, user_id=sc["user_id"], agent_id=sc["agent_id"], run_id=sc["run_id"])
            out = []
            for h in hits:
                if h.score < threshold:
                    continue
                meta = dict(getattr(h, "metadata", None) or mem.get(h.id).metadata)
                mime = meta.pop("mime_type", MemoryMimeType.TEXT.value)
                meta.update({"id": h.id, "score": float(h.score), "created_at": h.created_at})
                content: Any = h.text
                if mime == MemoryMimeType.JSON.value:
                    try:
                        content = json.loads(h.text)
                    except ValueError:
                        mime = MemoryMimeType.TEXT.value
                out.append(MemoryContent(content=content, mime_type=mime, metadata=meta))
            return out

        results = await self._run(self._amem.run(run), cancellation_token)
        return MemoryQueryResult(results=results)

    async def update_context(self, model_context: ChatCompletionContext) -> UpdateContextResult:
        """Search with the context's last message and add the hits to it as one system message."""
        messages = await model_context.get_messages()
        if not messages:
            return UpdateContextResult(memories=MemoryQueryResult(results=[]))
        last = messages[-1]
        query = last.content if isinstance(last.content, str) else str(last.content)
        result = await self.query(query)
        if result.results:
            lines = [f"{i}. {m.content if isinstance(m.content, str) else json.dumps(m.content)}"
                     for i, m in enumerate(result.results, 1)]
            await model_context.add_message(SystemMessage(content="\nRelevant memory content:\n" + "\n".join(lines)))
        return UpdateContextResult(memories=result)

    # ------------------------------------------------------------------ learning
    def _chunk(self, item: Any, name: str) -> Chunk:
        """The causalmem chunk behind a query result (its ``metadata["id"]``) or an id string, in this scope."""
        if isinstance(item, MemoryContent):
            cid = (item.metadata or {}).get("id")
            if not isinstance(cid, str) or not cid:
                raise ValueError(f"{name}: this MemoryContent has no metadata['id']; pass a result of query() "
                                 "or update_context() (they carry the causalmem id)")
        elif isinstance(item, str):
            cid = item
        else:
            raise TypeError(f"{name} must be a MemoryContent returned by query() or its metadata['id'], "
                            f"got {type(item).__name__}")
        return live_chunk(self._amem.memory, cid, self._scope, name)

    async def feedback(self, content: MemoryContent | str, reward: float,
                       cancellation_token: CancellationToken | None = None) -> float:
        """``content`` (a ``MemoryContent`` of a query result, or its ``metadata["id"]``) helped
        (``reward`` > 0) or hurt (< 0), ``reward`` in [-1, 1]: its Q-value moves, and the next queries rank
        it higher (or lower). Returns the new Q-value, in [0, 1]. A memory outside this memory's scope
        is unknown: KeyError naming ``content``."""
        r = check_reward(reward)

        def run() -> float:
            return self._amem.memory.feedback(self._chunk(content, "content").id, r)

        return float(await self._run(self._amem.run(run), cancellation_token))

    async def confirm(self, contents: list[MemoryContent | str],
                      cancellation_token: CancellationToken | None = None) -> int:
        """These query results were used together: causalmem links every pair of them (capped, faded at
        sleep, visible to the next query). Returns how many pairs were credited (0 for one result).
        KeyError naming ``contents`` for one outside this memory's scope (nothing is written then)."""
        items = check_many(contents, "contents")

        def run() -> int:
            chunks = [self._chunk(c, "contents") for c in items]
            return self._amem.memory.confirm(one_scope(chunks, "contents"))

        return int(await self._run(self._amem.run(run), cancellation_token))

    async def clear(self) -> None:
        """Delete every memory of this scope (every memory of the database when no scope is set)."""
        if any(v is not None for v in self._scope.values()):
            await self._amem.delete_all(**self._scope)
            return

        def delete_everything() -> None:
            mem = self._amem.memory
            while True:
                chunks = mem.get_all(limit=1000)
                if not chunks:
                    return
                for c in chunks:
                    mem.delete(c.id)

        await self._amem.run(delete_everything)

    async def close(self) -> None:
        """Close the database when this object opened it (a shared Memory stays open)."""
        if self._owns:
            await self._amem.aclose()

    # ------------------------------------------------------------------ component config
    def _to_config(self) -> CausalMemoryConfig:
        return CausalMemoryConfig(path=self._path, name=self._name, top_k=self.top_k,
                                  score_threshold=self.score_threshold, embedder=self._embedder_spec,
                                  **self._scope)

    @classmethod
    def _from_config(cls, config: CausalMemoryConfig) -> Self:
        return cls(config.path, name=config.name, user_id=config.user_id, agent_id=config.agent_id,
                   run_id=config.run_id, top_k=config.top_k, score_threshold=config.score_threshold,
                   embedder=config.embedder)
