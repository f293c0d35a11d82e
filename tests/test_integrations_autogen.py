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


# ---------------------------------------------------------------------------- learning from the caller
PAYMENTS_Q = "When does the payments service deploy?"
PAIR = ("The payments service deploys on Fridays.", "The payments service deploys on Mondays.")
OTHERS = ("Lunch is at noon.", "Kim is on call for search this week.")


def test_feedback_on_a_recalled_memory_ranks_it_first_in_the_next_run(db_path):
    """A real AssistantAgent (default MiniLM): the agent's MemoryQueryEvent carries the recalled
    MemoryContents; feedback on the second makes the next run recall it first. Bob's memory (same
    texts, other user_id, same database) does not move; negative feedback hurts."""
    async def main():
        memory = CausalMemory(str(db_path), user_id="alice", top_k=3)
        bob = CausalMemory(memory=memory.memory, user_id="bob", top_k=3)
        for text in (*PAIR, *OTHERS):
            await memory.add(_text(text))
            await bob.add(_text(text))
        bob_before = [r.content for r in (await bob.query(PAYMENTS_Q)).results]
        client = ReplayChatCompletionClient(["Fridays.", "Mondays.", "Fridays."])
        agent = AssistantAgent("assistant", model_client=client, memory=[memory])

        async def recalled() -> list[MemoryContent]:
            result = await agent.run(task=PAYMENTS_Q)
            events = [m for m in result.messages if isinstance(m, MemoryQueryEvent)]
            assert len(events) == 1
            return list(events[0].content)

        first = await recalled()
        assert {c.content for c in first[:2]} == set(PAIR)
        q = await memory.feedback(first[1], 1.0)
        assert q > memory.memory.config.q_init
        second = await recalled()
        assert [c.content for c in second[:2]] == [first[1].content, first[0].content]
        assert [r.content for r in (await bob.query(PAYMENTS_Q)).results] == bob_before
        # by id, as query() results carry it; it hurt after all
        assert await memory.feedback(second[0].metadata["id"], -1.0) < memory.memory.config.q_init
        third = [r.content for r in (await memory.query(PAYMENTS_Q)).results]
        assert third[:2] == [first[0].content, first[1].content]
        assert [r.content for r in (await bob.query(PAYMENTS_Q)).results] == bob_before
        await bob.close()
        await memory.close()

    asyncio.run(main())


def test_confirm_links_results_for_the_next_query(db_path):
    """Lexical + graph (no model): "alpha release" finds A only; after confirm([A, B]) the next query
    reaches B over the learned link, and not C."""
    async def main():
        mem = CausalMemory(str(db_path), user_id="alice", embedder=None, top_k=5)
        for text in ("alpha release of the kafka consumer", "beta rollout finished on friday",
                     "gamma lunch is at noon"):
            await mem.add(_text(text))
        res = (await mem.query("alpha release")).results
        assert [r.content for r in res] == ["alpha release of the kafka consumer"]
        b = (await mem.query("beta rollout")).results[0]
        assert await mem.confirm([res[0], b]) == 1
        after = (await mem.query("alpha release")).results
        assert [r.content for r in after] == ["alpha release of the kafka consumer", "beta rollout finished on friday"]
        assert after[1].metadata["score"] > 0
        await mem.close()

    asyncio.run(main())


def test_feedback_and_confirm_bad_arguments_and_scope_wall(db_path):
    async def main():
        shared = Memory(db_path, embedder=None)
        alice = CausalMemory(memory=shared, user_id="alice")
        bob = CausalMemory(memory=shared, user_id="bob")
        everyone = CausalMemory(memory=shared)
        await alice.add(_text("alice deploys on fridays"))
        await bob.add(_text("bob deploys on mondays"))
        a = (await alice.query("deploys")).results[0]
        b = (await bob.query("deploys")).results[0]
        assert a.content == "alice deploys on fridays" and b.content == "bob deploys on mondays"
        for bad in (1.5, -2, float("nan")):
            with pytest.raises(ValueError, match="reward"):
                await alice.feedback(a, bad)
        with pytest.raises(TypeError, match="reward"):
            await alice.feedback(a, "good")  # type: ignore[arg-type]
        with pytest.raises(KeyError, match="content"):
            await alice.feedback(b, 1.0)  # bob's memory: unknown in alice's scope
        with pytest.raises(KeyError, match="content"):
            await alice.feedback(b.metadata["id"], 1.0)
        with pytest.raises(KeyError, match="content.*'no-such-id'"):
            await alice.feedback("no-such-id", 1.0)
        with pytest.raises(ValueError, match="content.*metadata"):
            await alice.feedback(_text("never stored"), 1.0)
        with pytest.raises(TypeError, match="content"):
            await alice.feedback(42, 1.0)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="contents"):
            await alice.confirm(a)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="contents"):
            await alice.confirm([])
        with pytest.raises(KeyError, match="contents"):
            await alice.confirm([a, b])
        with pytest.raises(ValueError, match="contents.*different scopes"):
            await everyone.confirm([a, b])  # an unscoped memory reaches both, but no link joins two scopes
        assert shared.stats()["cooccurrence"] == 0
        assert {c.q_value for c in shared.get_all()} == {shared.config.q_init}
        await everyone.feedback(b, 1.0)  # the unscoped memory may reward bob's
        assert shared.get(b.metadata["id"]).q_value > shared.get(a.metadata["id"]).q_value
        shared.delete(a.metadata["id"])
        with pytest.raises(KeyError, match="content"):
            await alice.feedback(a, 1.0)  # deleted: unknown
        for m in (alice, bob, everyone):
            await m.close()
        shared.close()

    asyncio.run(main())


def test_json_content_must_be_a_json_object(db_path):
    """AutoGen's JSON MIME type holds a dict (its ChromaDB memory raises "JSON content must be a dict"):
    a plain string typed JSON is refused, nothing is stored; a string holding a JSON object is stored as
    that object and comes back as a dict typed JSON; a dict round-trips."""
    async def main():
        mem = CausalMemory(str(db_path), user_id="u", embedder=None)
        for bad in ("the payments team is on call", "[1, 2, 3]", "42", '"quoted"', "{not json"):
            with pytest.raises(ValueError, match="JSON content must be a dict"):
                await mem.add(MemoryContent(content=bad, mime_type=MemoryMimeType.JSON))
        assert mem.memory.get_all(user_id="u") == []
        await mem.add(MemoryContent(content='{"team": "payments", "oncall": "Kim"}', mime_type=MemoryMimeType.JSON))
        await mem.add(MemoryContent(content={"team": "search", "oncall": "Ana"}, mime_type="application/json"))
        res = (await mem.query("payments oncall")).results
        got = {r.content["team"]: r for r in res}
        assert set(got) == {"payments", "search"}
        for r in res:
            assert isinstance(r.content, dict)
            assert r.mime_type == MemoryMimeType.JSON.value or r.mime_type == MemoryMimeType.JSON
        assert got["payments"].content == {"team": "payments", "oncall": "Kim"}
        await mem.close()

    asyncio.run(main())
