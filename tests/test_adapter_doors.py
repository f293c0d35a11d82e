"""Every door of the framework adapters (``causalmem.integrations``) on one store shared with another
scope: reads, writes and learning calls of an adapter bound to alice (AutoGen ``CausalMemory(user_id=)``,
mem0 ``Memory`` calls with ``user_id=``, a LangGraph ``CausalMemStore`` with its own ``agent_id``) never
read, change or reveal bob's memories. Real parts: a SQLite file, the frameworks' own classes."""
from __future__ import annotations

import asyncio

import pytest

from causalmem import Memory

BOB_SECRET = "bob's deploy key is hunter2 for the friday deploy"


@pytest.fixture
def shared(db_path):
    mem = Memory(db_path, embedder=None)
    bob = mem.add(BOB_SECRET, user_id="bob")[0]
    edge = mem.record_decision("bob deploys on friday", "the friday pager went off", user_id="bob")
    yield mem, {"turn": bob.id, "src": edge.src, "dst": edge.dst, "q": mem.get(edge.src).q_value}
    mem.close()


def _bob_untouched(mem: Memory, bob: dict) -> None:
    assert mem.get(bob["turn"]).valid and mem.get(bob["turn"]).text == BOB_SECRET
    assert mem.get(bob["src"]).q_value == bob["q"]
    assert not any(e.src == bob["src"] and e.dst != bob["dst"] for e in mem.edges(bob["src"]))


# ------------------------------------------------------------------------------------------- AutoGen
def _autogen(mem: Memory):
    pytest.importorskip("autogen_core")
    from causalmem.integrations.autogen import CausalMemory

    return CausalMemory(memory=mem, user_id="alice")


def _content(text: str):
    from autogen_core.memory import MemoryContent, MemoryMimeType

    return MemoryContent(content=text, mime_type=MemoryMimeType.TEXT)


def test_autogen_door_add_and_query(shared):
    mem, bob = shared

    async def main():
        a = _autogen(mem)
        await a.add(_content("alice deploys on friday after the canary"))
        res = (await a.query("friday deploy key hunter2 pager")).results
        await a.close()
        return res

    res = asyncio.run(main())
    assert [r.content for r in res] == ["alice deploys on friday after the canary"]
    assert {mem.get(r.metadata["id"]).user_id for r in res} == {"alice"}
    _bob_untouched(mem, bob)


def test_autogen_door_update_context(shared):
    mem, bob = shared
    pytest.importorskip("autogen_core")
    from autogen_core.model_context import UnboundedChatCompletionContext
    from autogen_core.models import UserMessage

    async def main():
        a = _autogen(mem)
        await a.add(_content("alice deploys on friday after the canary"))
        ctx = UnboundedChatCompletionContext()
        await ctx.add_message(UserMessage(content="what about the friday deploy key?", source="user"))
        got = await a.update_context(ctx)
        msgs = await ctx.get_messages()
        await a.close()
        return got, msgs

    got, msgs = asyncio.run(main())
    assert got.memories.results and "hunter2" not in " ".join(str(m.content) for m in msgs)


def test_autogen_door_feedback_and_confirm(shared):
    mem, bob = shared

    async def main():
        a = _autogen(mem)
        await a.add(_content("alice deploys on friday"))
        mine = (await a.query("deploys friday")).results[0]
        for call in (lambda: a.feedback(bob["src"], 1.0), lambda: a.confirm([mine, bob["src"]])):
            with pytest.raises(KeyError, match="no memory with id"):
                await call()
        await a.close()

    asyncio.run(main())
    _bob_untouched(mem, bob)


def test_autogen_door_clear(shared):
    mem, bob = shared

    async def main():
        a = _autogen(mem)
        await a.add(_content("alice deploys on friday"))
        await a.clear()
        await a.close()

    asyncio.run(main())
    assert mem.get_all(user_id="alice") == []
    _bob_untouched(mem, bob)


# ---------------------------------------------------------------------------------------------- mem0
def _mem0(mem: Memory):
    from causalmem.integrations.mem0 import Memory as Mem0

    return Mem0(memory=mem)


def test_mem0_door_search_and_get_all(shared):
    mem, bob = shared
    m = _mem0(mem)
    m.add([{"role": "user", "content": "alice deploys on friday"}], user_id="alice")
    for res in (m.search("friday deploy key hunter2", user_id="alice", threshold=0.0),
                m.search("friday deploy key hunter2", filters={"user_id": "alice", "$or": [{"user_id": "bob"}]},
                         threshold=0.0),
                m.get_all(user_id="alice"), m.get_all(filters={"user_id": "alice"})):
        assert res["results"] is not None
        assert all("hunter2" not in r["memory"] and r.get("user_id") in (None, "alice") for r in res["results"])
        assert {mem.get(r["id"]).user_id for r in res["results"]} <= {"alice"}
    with pytest.raises(ValueError, match="user_id given twice"):
        m.search("friday", user_id="alice", filters={"user_id": "bob"})
    with pytest.raises(ValueError, match="user_id"):
        m.search("friday")  # no scope: refused, never every user's memories


def test_mem0_door_add_cannot_write_into_another_scope_through_metadata(shared):
    mem, bob = shared
    m = _mem0(mem)
    out = m.add([{"role": "user", "content": "alice note"}], user_id="alice", metadata={"user_id": "bob"})
    assert {mem.get(r["id"]).user_id for r in out["results"]} == {"alice"}


def test_mem0_door_feedback_and_confirm(shared):
    mem, bob = shared
    m = _mem0(mem)
    mine = m.add([{"role": "user", "content": "alice deploys on friday"}], user_id="alice")["results"][0]["id"]
    with pytest.raises(KeyError, match="memory_id"):
        m.feedback(bob["src"], "POSITIVE", user_id="alice")
    with pytest.raises(KeyError, match="memory_ids"):
        m.confirm([mine, bob["src"]], user_id="alice")
    _bob_untouched(mem, bob)


def test_mem0_door_delete_all(shared):
    mem, bob = shared
    m = _mem0(mem)
    m.add([{"role": "user", "content": "alice deploys on friday"}], user_id="alice")
    m.delete_all(user_id="alice")
    assert mem.get_all(user_id="alice") == []
    with pytest.raises(ValueError, match="delete_all needs"):
        m.delete_all()
    _bob_untouched(mem, bob)


# ----------------------------------------------------------------------------------------- LangGraph
def _lg(mem: Memory, agent_id: str = "langgraph"):
    pytest.importorskip("langgraph")
    from causalmem.integrations.langgraph import CausalMemStore

    return CausalMemStore(memory=mem, agent_id=agent_id)


def test_langgraph_door_search_get_and_list(shared):
    mem, bob = shared
    mine, other = _lg(mem), _lg(mem, "other-graph")
    mine.put(("users", "alice"), "deploy", {"text": "alice deploys on friday"})
    other.put(("users", "alice"), "secret", {"text": "the other graph's deploy key hunter2"})
    mine.put(("users", "bob"), "deploy", {"text": "bob's friday deploy note"})
    hits = mine.search(("users", "alice"), query="friday deploy key hunter2", limit=50)
    assert [(h.namespace, h.key) for h in hits] == [(("users", "alice"), "deploy")]
    everything = mine.search((), query="friday deploy key hunter2", limit=50)
    assert {h.key for h in everything} == {"deploy"} and all("hunter2" not in str(h.value) for h in everything)
    assert mine.get(("users", "alice"), "secret") is None
    assert mine.list_namespaces() == [("users", "alice"), ("users", "bob")]
    mine.close()
    other.close()
    _bob_untouched(mem, bob)


def test_langgraph_door_delete_feedback_confirm(shared):
    mem, bob = shared
    mine, other = _lg(mem), _lg(mem, "other-graph")
    mine.put(("ns",), "a", {"text": "alice deploys on friday"})
    other.put(("ns",), "b", {"text": "other graph item"})
    mine.delete(("ns",), "b")  # another store's key: nothing to delete here
    assert other.get(("ns",), "b") is not None
    for call in (lambda: mine.feedback(("ns",), "b", 1.0), lambda: mine.confirm(("ns",), ["a", "b"])):
        with pytest.raises(KeyError, match="no item 'b'"):
            call()
    mine.close()
    other.close()
    _bob_untouched(mem, bob)


# -------------------------------------------------------------------------------------------- CrewAI
def test_crewai_door_storage_reads_only_its_records(shared):
    pytest.importorskip("crewai", reason="CrewAI is not installed here; its storage's doors are untested")
    mem, bob = shared
    from causalmem.integrations.crewai import CausalMemStorage

    storage = CausalMemStorage(memory=mem)
    assert storage.count() == 0 and storage.list_records() == []
    assert storage.get_record(bob["turn"]) is None
    _bob_untouched(mem, bob)
