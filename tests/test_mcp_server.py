"""The complete MCP server through the MCP SDK's real client: every tool, schemas, errors, pinned scopes,
invalid JSON-RPC, and both transports (stdio and streamable HTTP on 127.0.0.1)."""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

from mcp import Client, StdioServerParameters, stdio_client  # noqa: E402

from causalmem import Memory  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ENV = {"PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
       "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": os.environ.get("PATH", ""),
       # the PostgreSQL run of the suite (tests/conftest.py): the server opens its --db there too
       **{k: v for k, v in os.environ.items() if k.startswith("CAUSALMEM_TEST_")}}
ALL_TOOLS = {"remember_decision", "search", "search_causal", "trace_cause", "what_if", "add_messages", "add_fact",
             "feedback", "confirm", "get", "get_all", "update", "delete", "history", "invalidate", "link", "sleep",
             "stats"}
HAVE_EXPORT = hasattr(Memory, "export")
if HAVE_EXPORT:  # the export tool is offered when Memory has an export API (and the server is not pinned)
    ALL_TOOLS = ALL_TOOLS | {"export"}
TIMEOUT = 180.0


def _data(result):
    assert not result.is_error, result.content
    data = result.structured_content
    assert data is not None and json.loads(json.dumps(data)) == data
    return data["result"] if set(data) == {"result"} else data


def _error(result) -> str:
    assert result.is_error, result.structured_content
    return " ".join(getattr(c, "text", "") for c in result.content)


def _stdio(db: Path, *extra: str, module: str = "causalmem.mcp_server") -> StdioServerParameters:
    args = ["-m", module] + (["mcp"] if module == "causalmem" else []) + ["--db", str(db), *extra]
    return StdioServerParameters(command=sys.executable, args=args, cwd=str(REPO), env=ENV)


def _run(session, *args):
    return anyio.run(session, *args)


# ---------------------------------------------------------------------------- every tool over stdio
def test_every_tool_over_stdio(tmp_path):
    db = tmp_path / "agent.db"

    async def session():
        out = {}
        with anyio.fail_after(TIMEOUT):
            async with Client(stdio_client(_stdio(db, "--no-semantic"), errlog=sys.stderr),
                              read_timeout_seconds=60) as c:
                tools = {t.name: t for t in (await c.list_tools()).tools}
                out["tools"] = tools
                e1 = _data(await c.call_tool("remember_decision", {"decision": "deploy without tests",
                                                                   "outcome": "production crash",
                                                                   "confidence": 0.9, "user_id": "ann"}))
                out["what_if"] = _data(await c.call_tool("what_if", {"action": "deploy without tests",
                                                                     "user_id": "ann"}))
                out["forward"] = _data(await c.call_tool("search_causal", {"query": "deploy without tests",
                                                                           "user_id": "ann"}))
                out["trace"] = _data(await c.call_tool("trace_cause", {"outcome": "production crash",
                                                                       "user_id": "ann"}))
                turns = _data(await c.call_tool("add_messages", {
                    "messages": [{"role": "user", "content": "the staging database runs postgres 16"},
                                 {"role": "assistant", "content": "noted: postgres 16 on staging"}],
                    "user_id": "ann", "metadata": {"topic": "infra"}}))
                out["turns"] = turns
                fact = _data(await c.call_tool("add_fact", {"key": "editor", "value": "vim", "user_id": "ann"}))
                out["fact"] = fact
                out["search"] = _data(await c.call_tool("search", {"query": "which postgres on staging",
                                                                   "user_id": "ann", "top_k": 3, "explain": True,
                                                                   "fusion": "rrf"}))
                out["search_meta"] = _data(await c.call_tool("search", {"query": "postgres", "user_id": "ann",
                                                                        "metadata": {"topic": "infra"}}))
                cid = turns[0]["id"]
                out["get"] = _data(await c.call_tool("get", {"chunk_id": cid}))
                out["get_all"] = _data(await c.call_tool("get_all", {"user_id": "ann", "kind": "turn"}))
                out["update"] = _data(await c.call_tool("update", {"chunk_id": cid, "text":
                                                                   "the staging database runs postgres 17",
                                                                   "metadata": {"checked": True}}))
                out["history"] = _data(await c.call_tool("history", {"chunk_id": cid}))
                out["feedback"] = _data(await c.call_tool("feedback", {"chunk_id": cid, "reward": 0.5}))
                out["confirm"] = _data(await c.call_tool("confirm", {"chunk_ids": [t["id"] for t in turns[:2]]}))
                out["confirm_bad"] = [_error(await c.call_tool("confirm", a)) for a in (
                    {"chunk_ids": "x"}, {"chunk_ids": [turns[0]["id"], fact["id"], "no-such-chunk"]})]
                out["link"] = _data(await c.call_tool("link", {"src_chunk_id": turns[0]["id"],
                                                               "dst_chunk_id": fact["id"], "relation": "enabled",
                                                               "confidence": 0.7}))
                out["invalidate"] = _data(await c.call_tool("invalidate", {"edge_id": e1["id"],
                                                                           "reason": "wrong"}))
                out["after_invalidate"] = _data(await c.call_tool("what_if", {"action": "deploy without tests",
                                                                              "user_id": "ann"}))
                out["delete"] = _data(await c.call_tool("delete", {"chunk_id": turns[1]["id"]}))
                out["sleep"] = _data(await c.call_tool("sleep", {"dry_run": True}))
                out["stats"] = _data(await c.call_tool("stats", {}))
                # errors, in plain words, and the server keeps serving
                out["errors"] = [_error(await c.call_tool(name, args)) for name, args in [
                    ("sleep", {"action": "explode"}),
                    ("remember_decision", {"decision": "a", "outcome": "b", "relation": "causes"}),
                    ("search", {"query": "x", "top_k": 0}),
                    ("feedback", {"chunk_id": cid, "reward": 3}),
                    ("remember_decision", {"decision": "a", "outcome": "b", "confidence": 1.5}),
                    ("search", {"query": "x", "fusion": "magic"}),
                    ("search", {"top_k": 3}),
                    ("search", {"query": 42}),
                    ("get", {"chunk_id": "no-such-chunk"}),
                    ("search", {"query": "x", "metadata": {"topic": {"$regex": "i"}}}),
                    ("remember_decision", {"decision": "a", "outcome": "b", "polarity": "great"}),
                ]]
                out["stats_after"] = _data(await c.call_tool("stats", {}))
        return out

    out = _run(session)
    tools = out["tools"]
    assert set(tools) == ALL_TOOLS
    assert out["confirm"] == {"pairs": 1}
    assert "chunk_ids" in out["confirm_bad"][0] and "a list" in out["confirm_bad"][0]
    assert "chunk_ids" in out["confirm_bad"][1] and "no-such-chunk" in out["confirm_bad"][1]
    for t in tools.values():  # every argument described; no unknown arguments; an output schema
        assert t.description and t.output_schema and t.output_schema["type"] == "object"
        assert t.input_schema["additionalProperties"] is False
        for name, prop in t.input_schema["properties"].items():
            assert prop.get("description"), (t.name, name)
    rd = tools["remember_decision"].input_schema["properties"]
    assert "prevented" in rd["relation"]["enum"] and rd["polarity"]["enum"] == ["positive", "negative", "mixed",
                                                                               "neutral"]
    assert (rd["confidence"]["minimum"], rd["confidence"]["maximum"]) == (0.0, 1.0)
    assert tools["search"].input_schema["properties"]["fusion"]["enum"] == ["auto", "blend", "rrf", "hybrid"]
    assert tools["search"].input_schema["properties"]["top_k"]["maximum"] == 1000
    assert tools["feedback"].input_schema["properties"]["reward"]["minimum"] == -1.0
    # remember_decision guesses an omitted polarity from the outcome's words; link never does
    assert "guessed" in rd["polarity"]["description"]
    lp = tools["link"].input_schema["properties"]["polarity"]
    assert lp["enum"] == rd["polarity"]["enum"] and "guessed" not in lp["description"]
    assert out["link"]["polarity"] is None

    assert out["what_if"]["label"] == "DANGER"
    assert [a["text"] for a in out["forward"]] == ["production crash"]
    assert [a["text"] for a in out["trace"]] == ["deploy without tests"]
    assert out["turns"][0]["metadata"] == {"topic": "infra", "role": "user"}
    assert out["fact"]["text"] == "editor: vim" and out["fact"]["kind"] == "fact"
    assert "postgres 16" in out["search"][0]["text"] and out["search"][0]["signals"]["fusion"] == "rrf"
    assert {h["metadata"]["topic"] for h in out["search_meta"]} == {"infra"}
    assert out["get"]["id"] == out["turns"][0]["id"]
    assert len(out["get_all"]) == 2
    assert out["update"]["text"].endswith("postgres 17") and out["update"]["metadata"]["checked"] is True
    assert [e["event"] for e in out["history"]] == ["create", "update"]
    assert out["feedback"]["q_value"] > out["turns"][0]["q_value"]
    assert out["link"]["relation"] == "enabled" and out["link"]["confidence"] == pytest.approx(0.7)
    assert out["invalidate"]["valid"] is False and out["invalidate"]["invalid_reason"] == "wrong"
    assert out["after_invalidate"]["label"] == "UNKNOWN"
    assert out["delete"] == {"deleted": out["turns"][1]["id"]}
    assert out["sleep"]["dry_run"] is True
    errors = out["errors"]
    assert "sleep does not take argument 'action'" in errors[0] and "dry_run" in errors[0]
    assert "causes" in errors[1] and "valid relations" in errors[1] and "prevented" in errors[1]
    assert "top_k" in errors[2] and "from 1 to 1000" in errors[2]
    assert "reward" in errors[3] and "from -1.0 to 1.0" in errors[3]
    assert "confidence" in errors[4] and "from 0.0 to 1.0" in errors[4]
    assert "fusion" in errors[5] and "rrf" in errors[5]
    assert "search needs 'query'" in errors[6]
    assert "query" in errors[7] and "a string" in errors[7]
    assert "no-such-chunk" in errors[8]
    assert "$regex" in errors[9]
    assert "polarity" in errors[10] and "neutral" in errors[10]
    assert not any("pydantic" in e or "errors.pydantic.dev" in e for e in errors)
    assert out["stats_after"] == out["stats"]  # the bad calls changed nothing (sleep did not run)

    with Memory(db, embedder=None) as mem:  # the server's writes are in the file
        assert mem.get(out["turns"][0]["id"]).text.endswith("postgres 17")
        assert mem.get_edge(out["link"]["id"]).relation == "enabled"


# ---------------------------------------------------------------------------- pinned scope
def test_user_id_pins_every_tool_call(tmp_path):
    """`causalmem mcp --user-id bob` was ignored (bob's search returned alice's chunks)."""
    db = tmp_path / "shared.db"
    with Memory(db, embedder=None) as mem:
        alice = mem.add("alice's production database password rotation is on mondays", user_id="alice")[0]
        bob = mem.add("bob's production database runs mysql", user_id="bob")[0]
        alice_edge = mem.record_decision("alice skips review", "alice ships a bug", user_id="alice")

    async def session():
        out = {}
        with anyio.fail_after(TIMEOUT):
            params = _stdio(db, "--no-semantic", "--user-id", "bob", module="causalmem")  # the CLI entry point
            async with Client(stdio_client(params, errlog=sys.stderr), read_timeout_seconds=60) as c:
                tools = {t.name: t for t in (await c.list_tools()).tools}
                out["tools"] = set(tools)
                out["search_props"] = set(tools["search"].input_schema["properties"])
                out["search"] = _data(await c.call_tool("search", {"query": "production database"}))
                out["get_all"] = _data(await c.call_tool("get_all", {}))
                out["get_alice"] = _error(await c.call_tool("get", {"chunk_id": alice.id}))
                out["delete_alice"] = _error(await c.call_tool("delete", {"chunk_id": alice.id}))
                out["feedback_alice"] = _error(await c.call_tool("feedback", {"chunk_id": alice.id, "reward": 1}))
                out["confirm_alice"] = _error(await c.call_tool("confirm", {"chunk_ids": [bob.id, alice.id]}))
                out["link_alice"] = _error(await c.call_tool("link", {"src_chunk_id": bob.id,
                                                                      "dst_chunk_id": alice.id}))
                out["invalidate_alice"] = _error(await c.call_tool("invalidate", {"edge_id": alice_edge.id}))
                out["as_alice"] = _error(await c.call_tool("search", {"query": "password", "user_id": "alice"}))
                out["trace"] = _data(await c.call_tool("trace_cause", {"outcome": "alice ships a bug"}))
                out["written"] = _data(await c.call_tool("remember_decision", {"decision": "bob adds an index",
                                                                               "outcome": "faster queries"}))
                out["get_bob"] = _data(await c.call_tool("get", {"chunk_id": bob.id}))
        return out

    out = _run(session)
    assert "user_id" not in out["search_props"] and "agent_id" in out["search_props"]
    assert [h["text"] for h in out["search"]] == ["bob's production database runs mysql"]
    assert {c["user_id"] for c in out["get_all"]} == {"bob"}
    for key in ("get_alice", "delete_alice", "feedback_alice", "link_alice", "confirm_alice"):
        assert "unknown" in out[key] and alice.id in out[key], key
    assert "unknown edge_id" in out["invalidate_alice"]
    assert "user_id" in out["as_alice"] and "fixed by the server" in out["as_alice"] and "bob" in out["as_alice"]
    assert out["trace"] == []
    assert out["get_bob"]["text"] == "bob's production database runs mysql"
    assert "export" not in out["tools"]  # a pinned server never dumps the whole database
    with Memory(db, embedder=None) as mem:
        assert mem.get(alice.id).valid  # untouched
        src = mem.get(out["written"]["src"])
        assert src.user_id == "bob"


# ---------------------------------------------------------------------------- invalid JSON-RPC
def test_invalid_jsonrpc_requests_get_error_replies(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "causalmem.mcp_server", "--db", str(tmp_path / "x.db"),
                             "--no-semantic"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=str(REPO), env=ENV)

    def send(line: str) -> None:
        proc.stdin.write(line + "\n")
        proc.stdin.flush()

    def recv(timeout: float = 30.0):
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        return json.loads(proc.stdout.readline()) if ready else None

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}))
        assert recv()["id"] == 1
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        cases = [
            (json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": "garbage"}), 2, -32600),
            ('{"jsonrpc": "2.0", "id": 3, "method": "tools/list"', None, -32700),
            (json.dumps({"jsonrpc": "1.0", "id": 4, "method": "tools/list"}), 4, -32600),
            (json.dumps({"jsonrpc": "2.0", "id": "five", "method": 5}), "five", -32600),
            (json.dumps([{"jsonrpc": "2.0", "id": 6, "method": "tools/list"}]), None, -32600),
            (json.dumps({"jsonrpc": "2.0", "id": 7, "method": "no/such"}), 7, -32601),
        ]
        for line, want_id, code in cases:
            send(line)
            reply = recv()
            assert reply is not None, f"no reply to {line}"
            assert reply["id"] == want_id and reply["error"]["code"] == code, (line, reply)
        send(json.dumps({"jsonrpc": "2.0", "id": 8, "method": "tools/list"}))  # still serving
        assert len(recv()["result"]["tools"]) == len(ALL_TOOLS)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


# ---------------------------------------------------------------------------- streamable HTTP
def _start_http(db: Path, *extra: str):
    proc = subprocess.Popen([sys.executable, "-m", "causalmem.mcp_server", "--db", str(db), "--transport", "http",
                             "--port", "0", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=str(REPO), env=ENV)
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 1.0)
        if ready:
            line = proc.stderr.readline()
            if "serving http://" in line:
                return proc, line.split("serving ", 1)[1].strip()
            if not line and proc.poll() is not None:
                break
    proc.kill()
    raise AssertionError(f"the HTTP server did not start: {proc.stderr.read()}")


def test_streamable_http_on_loopback_with_default_semantic_channel(tmp_path):
    db = tmp_path / "http.db"
    proc, url = _start_http(db)
    try:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")

        async def session():
            out = {}
            with anyio.fail_after(TIMEOUT):
                async with Client(url, read_timeout_seconds=TIMEOUT) as c:
                    out["tools"] = {t.name for t in (await c.list_tools()).tools}
                    await c.call_tool("add_messages", {"messages": "I pointed DNS at the new cluster too early",
                                                       "user_id": "nate"})
                    # vectors are computed in the background: wait until the stats show them
                    while True:
                        st = _data(await c.call_tool("stats", {}))
                        if st["embeddings"] >= st["chunks"]:
                            break
                        await anyio.sleep(0.1)
                    out["search"] = _data(await c.call_tool("search", {"query": "why did the outage happen?",
                                                                       "user_id": "nate", "explain": True}))
                    out["stats"] = _data(await c.call_tool("stats", {}))
                    out["bad"] = _error(await c.call_tool("stats", {"verbose": True}))
            return out

        out = _run(session)
        assert out["tools"] == ALL_TOOLS
        assert out["stats"]["embedder"]  # the semantic channel is on by default, as in Python
        assert out["search"][0]["signals"]["cosine"] is not None
        assert "stats does not take argument 'verbose'" in out["bad"]

        import urllib.error
        import urllib.request

        req = urllib.request.Request(url, data=b'{"jsonrpc": "2.0", "id": 9, "method": "tools/list"',
                                     headers={"content-type": "application/json",
                                              "accept": "application/json, text/event-stream"}, method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=TIMEOUT)
        assert err.value.code == 400 and json.loads(err.value.read())["error"]["code"] == -32700
        for body, want_id in ((b'{"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": "garbage"}', 10),
                              (b'{"jsonrpc": "1.0", "id": "eleven", "method": "tools/list"}', "eleven")):
            req = urllib.request.Request(url, data=body, method="POST", headers={
                "content-type": "application/json", "accept": "application/json, text/event-stream"})
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(req, timeout=TIMEOUT)
            reply = json.loads(err.value.read())
            assert reply["id"] == want_id and reply["error"]["code"] == -32600
            assert "pydantic" not in reply["error"]["message"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    with Memory(db, embedder=None) as mem:
        assert len(mem.get_all(user_id="nate")) == 1


def test_http_refuses_a_non_loopback_host(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "causalmem.mcp_server", "--db", str(tmp_path / "h.db"),
                           "--transport", "http", "--host", "0.0.0.0", "--no-semantic"], capture_output=True,
                          text=True, cwd=str(REPO), env=ENV, timeout=120)
    assert proc.returncode == 2 and "loopback" in proc.stderr


@pytest.mark.skipif(not HAVE_EXPORT, reason="Memory has no export API in this tree")
def test_export_tool_round_trips_through_import(tmp_path):
    db = tmp_path / "src.db"
    with Memory(db, embedder=None) as mem:
        mem.record_decision("deploy without tests", "production crash", confidence=0.9)
        mem.add("the staging database runs postgres 16", user_id="ann", metadata={"topic": "infra"})

    async def session():
        with anyio.fail_after(TIMEOUT):
            async with Client(stdio_client(_stdio(db, "--no-semantic"), errlog=sys.stderr),
                              read_timeout_seconds=60) as c:
                return _data(await c.call_tool("export", {}))

    dump = _run(session)
    assert dump["lines"] == len(dump["jsonl"].splitlines()) and dump["bytes"] == len(dump["jsonl"].encode())
    (tmp_path / "dump.jsonl").write_text(dump["jsonl"])
    with Memory(tmp_path / "copy.db", embedder=None) as copy:
        copy.import_(tmp_path / "dump.jsonl")
        assert copy.intervention_query("deploy without tests").label == "DANGER"
        assert [c.metadata for c in copy.get_all(user_id="ann")] == [{"topic": "infra"}]
