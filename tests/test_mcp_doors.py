"""Every door of an MCP server pinned to one user (``causalmem mcp --user-id alice``), through the MCP SDK's
real client over stdio, with the embedding model on (the default): no tool reads, writes or reveals anything
of another scope. One session drives every tool against a store that also holds bob's memories (same words,
so an unscoped query would find them); each test below judges one tool."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

from mcp import Client, StdioServerParameters, stdio_client  # noqa: E402

from causalmem import Memory  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ENV = {"PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
       "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": os.environ.get("PATH", ""),
       "CAUSALMEM_EMBED_HANDOFF": "0",
       **{k: v for k, v in os.environ.items() if k.startswith("CAUSALMEM_TEST_")}}
TIMEOUT = 300.0
NO_SUCH = "c-no-such-chunk"


def _data(result):
    assert not result.is_error, result.content
    data = result.structured_content
    return data["result"] if set(data) == {"result"} else data


def _text(result) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def _error(result) -> str:
    assert result.is_error, result.structured_content
    return _text(result)


@pytest.fixture(scope="module")
def doors(tmp_path_factory):
    """(store path, bob's ids, every tool's answers to a server pinned to alice)."""
    db = tmp_path_factory.mktemp("doors") / "shared.db"
    with Memory(db, embedder=None) as mem:
        a_edge = mem.record_decision("alice deploys on friday", "the pager went off at night", user_id="alice")
        b_edge = mem.record_decision("bob deploys on friday", "the pager went off at night again", user_id="bob")
        mem.record_decision("bob skips the canary", "bob's outage on friday", user_id="bob")
        b_turn = mem.add([{"role": "user", "content": "bob's deploy key is hunter2"}], user_id="bob",
                         session_id="shared-session")[0]
        b_fact = mem.add_fact("city", "Paris", user_id="bob")
        bob = {"edge": b_edge.id, "src": b_edge.src, "dst": b_edge.dst, "turn": b_turn.id, "fact": b_fact.id,
               "q": mem.get(b_edge.src).q_value, "text": mem.get(b_edge.src).text}
        alice = {"edge": a_edge.id, "src": a_edge.src, "dst": a_edge.dst}
        stats_alice = {k: v for k, v in mem.stats(user_id="alice").items() if k.endswith("_total") or k in (
            "chunks", "edges", "facts")}

    async def session():
        out: dict = {}
        params = StdioServerParameters(command=sys.executable, cwd=str(REPO), env=ENV, args=[
            "-m", "causalmem", "mcp", "--db", str(db), "--user-id", "alice"])
        with anyio.fail_after(TIMEOUT):
            async with Client(stdio_client(params, errlog=sys.stderr), read_timeout_seconds=240) as c:
                call = c.call_tool
                out["tools"] = {t.name: t for t in (await c.list_tools()).tools}
                out["remember"] = _data(await call("remember_decision", {"decision": "alice adds a canary",
                                                                         "outcome": "no pager on friday"}))
                out["remember_as_bob"] = _error(await call("remember_decision", {
                    "decision": "x", "outcome": "y", "user_id": "bob"}))
                out["search"] = _data(await call("search", {"query": "deploys on friday pager", "top_k": 50,
                                                            "explain": True}))
                out["search_key"] = _data(await call("search", {"query": "deploy key hunter2", "top_k": 50}))
                out["search_as_bob"] = _error(await call("search", {"query": "friday", "user_id": "bob"}))
                out["search_causal"] = _data(await call("search_causal", {"query": "deploys on friday",
                                                                          "limit": 50}))
                out["trace_cause"] = _data(await call("trace_cause", {"outcome": "pager went off outage",
                                                                      "limit": 50}))
                out["what_if"] = _data(await call("what_if", {"action": "deploys on friday skips the canary",
                                                              "limit": 50}))
                out["add_messages"] = _data(await call("add_messages", {
                    "messages": [{"role": "user", "content": "alice's note on the deploy"}],
                    "session_id": "shared-session"}))
                out["add_fact"] = _data(await call("add_fact", {"key": "city", "value": "Lyon",
                                                                "replace_same_key": True}))
                out["feedback"] = _error(await call("feedback", {"chunk_id": bob["src"], "reward": 1.0}))
                out["feedback_none"] = _error(await call("feedback", {"chunk_id": NO_SUCH, "reward": 1.0}))
                out["confirm"] = _error(await call("confirm", {"chunk_ids": [alice["src"], bob["src"]]}))
                out["confirm_none"] = _error(await call("confirm", {"chunk_ids": [alice["src"], NO_SUCH]}))
                out["get"] = _error(await call("get", {"chunk_id": bob["turn"]}))
                out["get_none"] = _error(await call("get", {"chunk_id": NO_SUCH}))
                out["get_all"] = _data(await call("get_all", {"limit": 1000}))
                out["get_all_session"] = _data(await call("get_all", {"session_id": "shared-session"}))
                out["update"] = _error(await call("update", {"chunk_id": bob["src"], "text": "rewritten"}))
                out["update_none"] = _error(await call("update", {"chunk_id": NO_SUCH, "text": "rewritten"}))
                out["delete"] = _error(await call("delete", {"chunk_id": bob["turn"]}))
                out["delete_none"] = _error(await call("delete", {"chunk_id": NO_SUCH}))
                out["history"] = _error(await call("history", {"chunk_id": bob["turn"]}))
                out["history_none"] = _error(await call("history", {"chunk_id": NO_SUCH}))
                out["invalidate"] = _error(await call("invalidate", {"edge_id": bob["edge"]}))
                out["invalidate_none"] = _error(await call("invalidate", {"edge_id": "e-no-such-edge"}))
                out["link"] = _error(await call("link", {"src_chunk_id": alice["src"], "dst_chunk_id": bob["dst"]}))
                out["link_none"] = _error(await call("link", {"src_chunk_id": alice["src"], "dst_chunk_id": NO_SUCH}))
                out["sleep"] = await call("sleep", {"dry_run": True})
                out["export"] = await call("export", {})
                out["stats"] = await call("stats", {})
        return out

    out = anyio.run(session)
    return db, bob, alice, stats_alice, out


def _scopes(db: Path, ids) -> set:
    with Memory(db, embedder=None) as mem:
        return {mem.get(str(i)).user_id for i in ids}


def _same_words(out: dict, door: str, other_id: str, none_id: str = NO_SUCH) -> None:
    """Another scope's id is refused in exactly the words of an id that does not exist."""
    assert "unknown" in out[door] and other_id in out[door], out[door]
    assert out[door].replace(other_id, "ID") == out[door + "_none"].replace(none_id, "ID"), (
        out[door], out[door + "_none"])


def test_door_remember_decision(doors):
    db, _bob, _alice, _s, out = doors
    assert _scopes(db, [out["remember"]["src"], out["remember"]["dst"]]) == {"alice"}
    assert "fixed by the server" in out["remember_as_bob"] and "user_id" in out["remember_as_bob"]


def test_door_search(doors):
    db, bob, _alice, _s, out = doors
    assert out["search"], "alice's own memories match"
    assert {h["user_id"] for h in out["search"] + out["search_key"]} <= {"alice"}
    assert all("hunter2" not in h["text"] for h in out["search_key"])
    assert "fixed by the server" in out["search_as_bob"]


def test_door_search_causal(doors):
    db, _bob, _alice, _s, out = doors
    assert out["search_causal"]
    assert _scopes(db, [a["node_id"] for a in out["search_causal"]]) == {"alice"}


def test_door_trace_cause(doors):
    db, _bob, _alice, _s, out = doors
    assert out["trace_cause"]
    assert _scopes(db, [a["node_id"] for a in out["trace_cause"]]) == {"alice"}


def test_door_what_if(doors):
    db, _bob, _alice, _s, out = doors
    rep = out["what_if"]
    assert rep["outcomes"], rep
    texts = json.dumps(rep)
    assert "bob" not in texts and "again" not in texts, texts
    assert _scopes(db, rep["seeds"]) <= {"alice"}


def test_door_add_messages(doors):
    db, bob, _alice, _s, out = doors
    new = out["add_messages"][0]
    assert new["user_id"] == "alice"
    with Memory(db, embedder=None) as mem:  # the shared session id chains nothing to bob's turn
        ends = {e.src for e in mem.edges(new["id"])} | {e.dst for e in mem.edges(new["id"])}
        assert bob["turn"] not in ends


def test_door_add_fact(doors):
    db, bob, _alice, _s, out = doors
    assert out["add_fact"]["user_id"] == "alice"
    with Memory(db, embedder=None) as mem:  # replace_same_key retired nothing of bob's
        assert mem.get(bob["fact"]).valid


def test_door_feedback(doors):
    db, bob, _alice, _s, out = doors
    _same_words(out, "feedback", bob["src"])
    with Memory(db, embedder=None) as mem:
        assert mem.get(bob["src"]).q_value == bob["q"]


def test_door_confirm(doors):
    db, bob, _alice, _s, out = doors
    _same_words(out, "confirm", bob["src"])


def test_door_get(doors):
    _db, bob, _alice, _s, out = doors
    _same_words(out, "get", bob["turn"])
    assert "hunter2" not in out["get"]


def test_door_get_all(doors):
    _db, _bob, _alice, _s, out = doors
    assert out["get_all"] and {c["user_id"] for c in out["get_all"]} == {"alice"}
    assert {c["user_id"] for c in out["get_all_session"]} == {"alice"}


def test_door_update(doors):
    db, bob, _alice, _s, out = doors
    _same_words(out, "update", bob["src"])
    with Memory(db, embedder=None) as mem:
        assert mem.get(bob["src"]).text == bob["text"]


def test_door_delete(doors):
    db, bob, _alice, _s, out = doors
    _same_words(out, "delete", bob["turn"])
    with Memory(db, embedder=None) as mem:
        assert mem.get(bob["turn"]).valid


def test_door_history(doors):
    _db, bob, _alice, _s, out = doors
    _same_words(out, "history", bob["turn"])
    assert "hunter2" not in out["history"]


def test_door_invalidate(doors):
    db, bob, _alice, _s, out = doors
    _same_words(out, "invalidate", bob["edge"], "e-no-such-edge")
    with Memory(db, embedder=None) as mem:
        assert mem.get_edge(bob["edge"]).valid


def test_door_link(doors):
    db, bob, _alice, _s, out = doors
    _same_words(out, "link", bob["dst"])
    with Memory(db, embedder=None) as mem:
        assert all(e.dst != bob["dst"] or e.src == bob["src"] for e in mem.edges(bob["dst"]))


def test_door_sleep_is_withheld(doors):
    """sleep consolidates every user's memories (decay, supersession, merges): not on alice's request."""
    _db, _bob, _alice, _s, out = doors
    assert "sleep" not in out["tools"]
    assert out["sleep"].is_error and "unknown tool 'sleep'" in _text(out["sleep"])


def test_door_export_is_withheld(doors):
    _db, _bob, _alice, _s, out = doors
    assert "export" not in out["tools"]
    assert out["export"].is_error and "unknown tool 'export'" in _text(out["export"])


def test_door_stats_is_the_pinned_scope_without_the_path(doors):
    db, _bob, _alice, before, out = doors
    res = out["stats"]
    assert not res.is_error, _text(res)
    data = res.structured_content
    assert "path" not in data and str(db) not in _text(res) and db.name not in _text(res)
    with Memory(db, embedder=None) as mem:
        mine = mem.stats(user_id="alice")
        whole = mem.stats()
    for key in ("chunks_total", "edges_total"):
        assert data[key] == mine[key] < whole[key], (key, data[key], mine[key], whole[key])
    assert "Counts" in out["tools"]["stats"].description and "pinned" in out["tools"]["stats"].description


def test_every_listed_tool_has_a_door_test(doors):
    """A tool added to the server without a door test here fails this test."""
    _db, _bob, _alice, _s, out = doors
    judged = {name[len("test_door_"):].split("_is_")[0] for name in globals() if name.startswith("test_door_")}
    judged = {"stats" if n.startswith("stats") else n for n in judged}
    assert set(out["tools"]) <= judged, set(out["tools"]) - judged
