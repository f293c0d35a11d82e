"""AutoGen: CausalMemory inside a real AssistantAgent driven by autogen's replay chat-completion client."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("autogen_agentchat")

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_agentchat.messages import MemoryQueryEvent  # noqa: E402
from autogen_core import CancellationToken  # noqa: E402
from autogen_core.memory import MemoryContent, MemoryMimeType  # noqa: E402
from autogen_core.model_context import UnboundedChatCompletionContext  # noqa: E402
from autogen_core.models import SystemMessage, UserMessage  # noqa: E402
from autogen_ext.models.replay import ReplayChatCompletionClient  # noqa: E402

from causalmem import Memory  # noqa: E402
from causalmem.integrations.autogen import CausalMemory  # noqa: E402


def _text(s: str) -> MemoryContent:
    return MemoryContent(content=s, mime_type=MemoryMimeType.TEXT)


def test_assistant_agent_reads_memory_into_its_model_call(db_path):
    async def main():
        memory = CausalMemory(str(db_path), user_id="alice", embedder="auto")
        await memory.add(_text("The production database is PostgreSQL 16 on a dedicated host."))
        await memory.add(_text("Alice prefers answers in metric units."))
        await memory.add(MemoryContent(content={"team": "payments", "oncall": "Kim"}, mime_type=MemoryMimeType.JSON,
                                       metadata={"source": "roster"}))
        other = CausalMemory(memory=memory.memory, user_id="bob")
        await other.add(_text("Bob's production database is MySQL 8."))

        client = ReplayChatCompletionClient(["Production runs PostgreSQL 16."])
        agent = AssistantAgent("assistant", model_client=client, memory=[memory])
        result = await agent.run(task="Which production database do we run?")
        await memory.close()
        return result, client

    result, client = asyncio.run(main())
    assert result.messages[-1].content == "Production runs PostgreSQL 16."
    events = [m for m in result.messages if isinstance(m, MemoryQueryEvent)]
    assert len(events) == 1
    recalled = [c.content for c in events[0].content]
    assert recalled[0] == "The production database is PostgreSQL 16 on a dedicated host."
    assert not any("MySQL" in str(c) for c in recalled)  # bob's scope is not alice's
    assert events[0].content[0].metadata["score"] > 0 and events[0].content[0].metadata["id"]
    # the model was called with the memory in its context, as a system message
    sent = client.create_calls[0]["messages"]
    systems = [m.content for m in sent if isinstance(m, SystemMessage)]
    assert any("Relevant memory content" in s and "PostgreSQL 16" in s for s in systems)
    # persisted: a new process (here: a new Memory) sees the same memories
    with Memory(db_path, embedder=None) as mem:
        assert len(mem.get_all(user_id="alice")) == 3


def test_query_update_context_json_and_threshold(db_path):
    async def main():
        mem = CausalMemory(str(db_path), agent_id="ops", embedder=None, top_k=3)
        await mem.add(MemoryContent(content={"service": "billing", "owner": "Kim"}, mime_type="application/json",
                                    metadata={"source": "roster"}))
        await mem.add(_text("billing deploys happen on Tuesdays"))
        res = await mem.query("billing")
        assert len(res.results) == 2
        js = [r for r in res.results if r.mime_type == "application/json"][0]
        assert js.content == {"owner": "Kim", "service": "billing"}
        assert js.metadata["source"] == "roster"
        none = await mem.query("billing", score_threshold=1e9)
        assert none.results == []
        with pytest.raises(TypeError, match="limit"):
            await mem.query("billing", limit=3)

        ctx = UnboundedChatCompletionContext()
        empty = await mem.update_context(ctx)
        assert empty.memories.results == [] and await ctx.get_messages() == []
        await ctx.add_message(UserMessage(content="when do billing deploys happen?", source="user"))
        upd = await mem.update_context(ctx)
        msgs = await ctx.get_messages()
        assert len(msgs) == 2 and isinstance(msgs[1], SystemMessage)
        assert "Tuesdays" in msgs[1].content and upd.memories.results
        await mem.close()

    asyncio.run(main())


def test_clear_scope_and_everything(db_path):
    async def main():
        shared = Memory(db_path, embedder=None)
        a = CausalMemory(memory=shared, user_id="a", embedder=None)
        b = CausalMemory(memory=shared, user_id="b", embedder=None)
        everyone = CausalMemory(memory=shared, embedder=None)
        for m, t in ((a, "apples are red"), (b, "bananas are yellow"), (everyone, "grapes are green")):
            await m.add(_text(t))
        await a.clear()
        assert (await a.query("apples")).results == []
        assert [r.content for r in (await b.query("bananas")).results] == ["bananas are yellow"]
        await everyone.clear()
        assert shared.get_all() == []
        for m in (a, b, everyone):
            await m.close()
        assert shared.stats()["chunks"] >= 0  # the shared Memory is still open: close() left it alone
        shared.close()

    asyncio.run(main())


def test_bad_content_and_arguments(db_path):
    async def main():
        mem = CausalMemory(str(db_path), embedder=None)
        with pytest.raises(ValueError, match="mime_type"):
            await mem.add(MemoryContent(content=b"\x00\x01", mime_type=MemoryMimeType.BINARY))
        with pytest.raises(TypeError, match="content"):
            await mem.add(42)  # type: ignore[arg-type]
        await mem.close()

    asyncio.run(main())
    with pytest.raises(ValueError, match="top_k"):
        CausalMemory(str(db_path), top_k=0)
    with pytest.raises(TypeError, match="memory"):
        CausalMemory(memory="x")  # type: ignore[arg-type]


def test_cancellation_token_cancels_the_call(db_path):
    async def main():
        mem = CausalMemory(str(db_path), embedder=None)
        token = CancellationToken()
        token.cancel()
        with pytest.raises(asyncio.CancelledError):
            await mem.add(_text("never stored"), cancellation_token=token)
        await mem.close()

    asyncio.run(main())
    with Memory(db_path, embedder=None) as m:
        assert m.get_all() == []


def test_component_config_round_trip(db_path):
    mem = CausalMemory(str(db_path), name="notes", user_id="alice", top_k=7, embedder=None)
    model = mem.dump_component()
    assert model.provider == "causalmem.integrations.autogen.CausalMemory"
    assert model.config["user_id"] == "alice" and model.config["top_k"] == 7
    again = CausalMemory.load_component(model)
    assert isinstance(again, CausalMemory) and again.top_k == 7 and again.name == "notes"

    async def main():
        await again.add(_text("loaded from config"))
        assert [r.content for r in (await again.query("config")).results] == ["loaded from config"]
        await again.close()
        await mem.close()

    asyncio.run(main())
