"""The MCP server end to end: a real MCP client (the SDK's stdio client) talks to
``python -m causalmem.mcp_server`` in a subprocess, then the same file is read back with ``Memory``."""
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
TOOLS = {"remember_decision", "search", "search_causal", "trace_cause", "what_if", "add_messages", "feedback",
         "sleep", "stats"}
MINI_DEVOPS = [
    ("deploy without tests", "production crash", "caused", 0.9),
    ("deploy without tests", "safe release", "prevented", 0.85),
    ("production crash", "user complaints", "caused", 0.8),
]
CALL_TIMEOUT = 20.0  # per request; the whole session is bounded by SESSION_TIMEOUT
SESSION_TIMEOUT = 60.0


def _payload(result):
    """The structured result of a successful tool call (lists come wrapped as {"result": [...]})."""
    assert not result.is_error, result.content
    data = result.structured_content
    assert data is not None
    assert json.loads(json.dumps(data)) == data  # plain JSON all the way down
    return data["result"] if set(data) == {"result"} else data


def _energies(acts):
    return {a["text"]: a["energy"] for a in acts}


async def _session(db: Path, errlog) -> dict:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "causalmem.mcp_server", "--db", str(db), "--no-semantic"], cwd=str(REPO),
        env={"PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
             "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
             **{k: v for k, v in os.environ.items() if k.startswith("CAUSALMEM_TEST_")}})  # the PostgreSQL run
    seen: dict = {}
    with anyio.fail_after(SESSION_TIMEOUT):
        async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=CALL_TIMEOUT) as client:
            listed = await client.list_tools()
            seen["tools"] = {t.name: t for t in listed.tools}

            for d, o, rel, conf in MINI_DEVOPS:
                edge = _payload(await client.call_tool(
                    "remember_decision", {"decision": d, "outcome": o, "relation": rel, "confidence": conf}))
                assert (edge["relation"], edge["confidence"], edge["valid"]) == (rel, pytest.approx(conf), True)
                seen.setdefault("edge_ids", []).append(edge["id"])

            seen["forward"] = _payload(await client.call_tool("search_causal", {"query": "deploy without tests"}))
            seen["what_if"] = _payload(await client.call_tool("what_if", {"action": "deploy without tests"}))
            seen["trace"] = _payload(await client.call_tool("trace_cause", {"outcome": "user complaints"}))

            bad = await client.call_tool("remember_decision", {"decision": "deploy on friday",
                                                               "outcome": "weekend pager", "relation": "causes"})
            seen["bad"] = (bad.is_error, " ".join(getattr(c, "text", "") for c in bad.content))
            seen["stats"] = _payload(await client.call_tool("stats", {}))  # still serving after the error
    return seen


def test_mcp_stdio_end_to_end(tmp_path):
    db = tmp_path / "agent.db"
    log = tmp_path / "server.stderr"
    with open(log, "w") as errlog:
        try:
            seen = anyio.run(_session, db, errlog)
        except BaseException as exc:  # show what the server said; a bare transport error says little
            raise AssertionError(f"MCP session failed: {exc!r}\n--- server stderr ---\n{log.read_text()}") from exc

    assert TOOLS <= set(seen["tools"])
    schema = seen["tools"]["remember_decision"].input_schema
    assert set(schema["required"]) == {"decision", "outcome"}
    assert schema["properties"]["relation"]["default"] == "caused"

    assert [a["text"] for a in seen["forward"]] == ["production crash", "user complaints", "safe release"]
    assert _energies(seen["forward"]) == pytest.approx(
        {"production crash": 0.4725, "user complaints": 0.2646, "safe release": -0.1339}, abs=1e-4)

    report = seen["what_if"]
    assert report["label"] == "DANGER" and report["has_precedent"] is True
    crash = next(o for o in report["outcomes"] if o["text"] == "production crash")
    assert crash["chain_texts"] == ["deploy without tests", "production crash"]
    assert crash["relations"] == ["caused"] and crash["chain_confidence"] == pytest.approx(0.9)

    assert [a["text"] for a in seen["trace"]] == ["production crash", "deploy without tests"]
    assert all(a["energy"] > 0 for a in seen["trace"])

    is_error, message = seen["bad"]
    assert is_error
    assert "causes" in message and "valid relations" in message
    for name in ("caused", "enabled", "prevented", "no_effect"):
        assert name in message
    assert seen["stats"]["edges"] == 3 and seen["stats"]["path"] == str(db)

    # The server has exited; its writes are in the file.
    with Memory(db, embedder=None) as mem:
        edges = {(mem.get(e.src).text, e.relation, mem.get(e.dst).text, round(e.confidence, 4))
                 for e in mem.edges()}
        assert edges == {(d, r, o, c) for d, o, r, c in MINI_DEVOPS}
        assert {e.id for e in mem.edges()} == set(seen["edge_ids"])
        assert _energies(seen["trace"]) == pytest.approx(
            {a.text: a.energy for a in mem.trace_cause("user complaints")}, abs=1e-6)
