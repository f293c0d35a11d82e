"""The inspector's JSON API over a real HTTP server on 127.0.0.1 (no browser here; see test_viz_browser)."""
from __future__ import annotations

import hashlib
import http.client
import json
import sqlite3
import urllib.parse

import pytest

from causalmem import Memory
from causalmem.viz.server import InspectorServer
from viz_helpers import XSS, build_demo


def db_digest(path) -> str:
    """Every row of the database, in order: any write by the inspector changes it."""
    con = sqlite3.connect(path)
    try:
        return hashlib.sha256("\n".join(con.iterdump()).encode("utf-8")).hexdigest()
    finally:
        con.close()


@pytest.fixture()
def demo(tmp_path):
    db = tmp_path / "agent.db"
    ids = build_demo(db)
    return db, ids


class Client:
    def __init__(self, srv: InspectorServer) -> None:
        self.port = srv.server_address[1]

    def request(self, method: str, path: str, params=None, *, body=None, headers=None):
        if params:
            path += "?" + urllib.parse.urlencode(params)
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            hdrs = {"Host": f"127.0.0.1:{self.port}"}
            hdrs.update(headers or {})
            conn.request(method, path, body=body, headers=hdrs)
            r = conn.getresponse()
            data = r.read()
            return r.status, dict(r.getheaders()), data
        finally:
            conn.close()

    def get(self, path, **params):
        status, headers, data = self.request("GET", path, params)
        return status, json.loads(data) if headers.get("Content-Type", "").startswith("application/json") else data

    def post(self, path, payload, headers=None):
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        status, _, data = self.request("POST", path, body=json.dumps(payload), headers=h)
        return status, json.loads(data)


@pytest.fixture()
def server(demo):
    db, ids = demo
    mem = Memory(db, embedder=None)
    srv = InspectorServer(mem)
    srv.start()
    try:
        yield srv, Client(srv), ids, db
    finally:
        srv.shutdown()
        srv.server_close()
        mem.close()


def test_binds_loopback_only_and_sends_a_strict_policy(server):
    srv, client, _, _ = server
    assert srv.server_address[0] == "127.0.0.1"
    assert srv.url.startswith("http://127.0.0.1:")
    status, headers, body = client.request("GET", "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    csp = headers["Content-Security-Policy"]
    assert "'sha256-" in csp and "unsafe-inline" not in csp and "connect-src 'self'" in csp
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert b"causalmem inspector" in body


def test_api_answers_search_what_if_scopes_memories_history_and_sleep(server):
    _, client, ids, _ = server
    status, s = client.get("/api/search", q="production crash", top_k=5)
    assert status == 200 and s["hits"][0]["text"] == "production crash"
    signals = s["hits"][0]["signals"]
    assert {"lexical_rank", "cosine", "activation", "seed_energy", "q_value", "importance", "path"} <= set(signals)

    status, w = client.get("/api/what-if", action="deploy without tests")
    assert status == 200 and w["report"]["label"] == "DANGER"
    assert {n["text"] for n in w["picture"]["graph"]["nodes"]} >= {"deploy without tests", "production crash"}
    assert any(e["highlighted"] for e in w["picture"]["graph"]["edges"])
    assert set(w["picture"]["layout"]["nodes"]) == {n["id"] for n in w["picture"]["graph"]["nodes"]}

    status, g = client.get("/api/graph", q="production crash", direction="reverse", depth=2)
    assert status == 200 and {n["text"] for n in g["picture"]["graph"]["nodes"]} >= {"hidden bugs", "skip code review"}
    status, g = client.get("/api/graph", q="production crash", direction="reverse", user_id="eve")
    assert {n["text"] for n in g["picture"]["graph"]["nodes"]} == {"production crash", XSS}

    status, sc = client.get("/api/scopes")
    scopes = {(r["user_id"], r["agent_id"]): r["memories"] for r in sc["scopes"]}
    assert scopes[("eve", None)] == 4 and scopes[(None, None)] == 14

    status, m = client.get("/api/memories", user_id="eve")
    assert status == 200 and m["total"] == 4 and all(r["user_id"] == "eve" for r in m["memories"])
    qs = [r["q_value"] for r in m["memories"]]
    assert qs == sorted(qs, reverse=True)
    status, m_none = client.get("/api/memories", user_id="")
    assert m_none["total"] == 14 and all(r["user_id"] is None for r in m_none["memories"])

    status, d = client.get("/api/memory", id=ids["edited"])
    assert status == 200 and d["memory"]["text"] == "pin the base image digest"
    events = [(h["event"], h["old_text"], h["new_text"]) for h in d["history"]]
    assert events == [("create", None, "pin the base image"),
                      ("update", "pin the base image", "pin the base image digest")]
    assert d["edges"][0]["other_text"] == "reproducible builds" and d["edges"][0]["direction"] == "out"

    status, last = client.get("/api/sleep")
    assert status == 200 and last["report"]["protected"] > 0 and last["report"]["dry_run"] is False
    status, sl = client.get("/api/sleep", preview=1)
    assert status == 200 and sl["preview"] and sl["report"]["dry_run"] is True


def test_parallel_requests_share_one_memory(server):
    from concurrent.futures import ThreadPoolExecutor

    _, client, ids, _ = server
    calls = [("/api/search", {"q": "production crash"}), ("/api/what-if", {"action": "deploy without tests"}),
             ("/api/memory", {"id": ids["edited"]}), ("/api/graph", {"q": "hidden bugs", "direction": "both"}),
             ("/api/scopes", {})] * 8
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda c: client.get(c[0], **c[1]), calls))
    assert all(status == 200 for status, _ in results)
    labels = {body["report"]["label"] for (path, _), (_, body) in zip(calls, results) if path == "/api/what-if"}
    assert labels == {"DANGER"}


def test_bad_requests_name_the_parameter(server):
    _, client, _, _ = server
    assert client.get("/api/search") == (400, {"error": "missing query parameter 'q'"})
    status, body = client.get("/api/search", q="x", top_k="many")
    assert status == 400 and "top_k" in body["error"]
    status, body = client.get("/api/graph", q="x", direction="sideways")
    assert status == 400 and "direction" in body["error"]
    status, body = client.get("/api/what-if", action="x", max_depth=99)
    assert status == 400 and "max_depth" in body["error"]
    status, body = client.get("/api/memory", id="no-such-id")
    assert status == 404 and "no-such-id" in body["error"]
    status, body = client.get("/api/nothing")
    assert status == 404


def test_foreign_host_header_is_refused(server):
    _, client, _, _ = server
    status, _, body = client.request("GET", "/api/stats", headers={"Host": "attacker.example:80"})
    assert status == 403 and b"Host" in body


def test_read_only_by_default_nothing_is_written(server):
    _, client, ids, db = server
    before = db_digest(db)
    for path, params in [("/", {}), ("/api/stats", {}), ("/api/search", {"q": "production crash"}),
                         ("/api/search", {"q": "deploy without tests production crash", "top_k": 20}),
                         ("/api/what-if", {"action": "deploy without tests"}),
                         ("/api/graph", {"q": "production crash", "direction": "both", "depth": 3}),
                         ("/api/scopes", {}), ("/api/memories", {}), ("/api/memory", {"id": ids["xss"]}),
                         ("/api/sleep", {}), ("/api/sleep", {"preview": "1"})]:
        status, _, _ = client.request("GET", path, params)
        assert status == 200, path
    assert client.post("/api/feedback", {"id": ids["xss"], "reward": 1.0})[0] == 403
    assert client.post("/api/sleep", {"dry_run": False})[0] == 403
    assert db_digest(db) == before


def test_writable_inspector_takes_same_origin_json_only(demo):
    db, ids = demo
    with Memory(db, embedder=None) as mem:
        srv = InspectorServer(mem, writable=True)
        srv.start()
        try:
            client = Client(srv)
            origin = f"http://127.0.0.1:{client.port}"
            status, body = client.post("/api/feedback", {"id": ids["edited"], "reward": 1.0}, {"Origin": origin})
            assert status == 200 and body["q_value"] > 0.5
            assert mem.get(ids["edited"]).q_value == pytest.approx(body["q_value"])
            status, body = client.post("/api/feedback", {"id": ids["edited"], "reward": 1.0},
                                       {"Origin": "http://evil.example"})
            assert status == 403
            status, _, _ = client.request("POST", "/api/feedback", body="id=x&reward=1",
                                          headers={"Content-Type": "application/x-www-form-urlencoded"})
            assert status == 415
            status, body = client.post("/api/feedback", {"id": ids["edited"], "reward": 5})
            assert status == 400 and "reward" in body["error"]
            status, body = client.post("/api/sleep", {"dry_run": True})
            assert status == 200 and body["report"]["dry_run"] is True
        finally:
            srv.shutdown()
            srv.server_close()


def test_server_arguments_are_checked(demo):
    db, _ = demo
    with Memory(db, embedder=None) as mem:
        with pytest.raises(ValueError, match="port"):
            InspectorServer(mem, port=70000)
        with pytest.raises(TypeError, match="writable"):
            InspectorServer(mem, writable="yes")
        with pytest.raises(TypeError, match="mem"):
            InspectorServer(object())
