"""A local inspector for one memory: ``causalmem ui --db agent.db``.

Standard library only (``http.server.ThreadingHTTPServer``), bound to 127.0.0.1 and nothing
else. One HTML page (inline script and style, allowed by hash in its Content-Security-Policy)
and a small JSON API over the public ``Memory`` API. Read-only by default: searches run with
``reinforce=False`` (no Hebbian links), the sleep preview is a dry run; feedback and a real
sleep need ``writable=True``. Requests whose ``Host`` is not this server's loopback address
are refused (DNS rebinding), and writes need a same-origin JSON POST (no cross-site form can
send one). Stored text is user input: the page puts it on screen with ``textContent`` only.
"""
from __future__ import annotations

import json
import logging
import math
import threading
from dataclasses import asdict
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping
from urllib.parse import parse_qs, urlsplit

from ..retrieval import is_prevented
from .html import asset, csp_hash, palette, picture_data
from .subgraph import DIRECTIONS, subgraph, what_if_graph

log = logging.getLogger("causalmem.viz")

HOST = "127.0.0.1"
MAX_BODY = 64 * 1024
_MEMORY_LIMIT = 5000


class _ApiError(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _clean(value: Any) -> Any:
    """JSON-ready: NaN/inf become None, tuples lists, dataclasses dicts."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return _clean(asdict(value))
    return value


class _Params:
    """Query-string access with typed, named errors."""

    def __init__(self, query: str) -> None:
        self.raw = parse_qs(query, keep_blank_values=True)

    def has(self, name: str) -> bool:
        return name in self.raw

    def text(self, name: str, default: str | None = None, *, required: bool = False) -> str | None:
        if name not in self.raw:
            if required:
                raise ValueError(f"missing query parameter {name!r}")
            return default
        return self.raw[name][-1]

    def required_text(self, name: str) -> str:
        """A parameter that must be present (missing: ValueError naming it)."""
        if name not in self.raw:
            raise ValueError(f"missing query parameter {name!r}")
        return self.raw[name][-1]

    def scope(self, name: str) -> str | None:
        """A scope value: absent or empty means no filter (None)."""
        v = self.text(name)
        return v if v else None

    def integer(self, name: str, default: int, lo: int, hi: int) -> int:
        v = self.text(name)
        if v is None or v == "":
            return default
        try:
            n = int(v)
        except ValueError:
            raise ValueError(f"{name} must be an integer between {lo} and {hi}, got {v!r}") from None
        if not lo <= n <= hi:
            raise ValueError(f"{name} must be between {lo} and {hi}, got {n}")
        return n


class Inspector:
    """The JSON API: each method takes parsed parameters and returns JSON-ready data."""

    def __init__(self, mem: Any, *, writable: bool = False) -> None:
        if not callable(getattr(mem, "search", None)) or not callable(getattr(mem, "get_all", None)):
            raise TypeError(f"mem must be a causalmem.Memory, got {type(mem).__name__}")
        if not isinstance(writable, bool):
            raise TypeError(f"writable must be a bool, got {type(writable).__name__}")
        self.mem = mem
        self.writable = writable
        self.get_routes: dict[str, Callable[[_Params], Any]] = {
            "/api/stats": self.stats, "/api/search": self.search, "/api/what-if": self.what_if,
            "/api/graph": self.graph, "/api/scopes": self.scopes, "/api/memories": self.memories,
            "/api/memory": self.memory, "/api/sleep": self.sleep_report,
        }
        self.post_routes: dict[str, Callable[[Mapping[str, Any]], Any]] = {
            "/api/feedback": self.feedback, "/api/sleep": self.run_sleep,
        }

    # ---------------------------------------------------------------- reads
    def stats(self, p: _Params) -> Any:
        s = dict(self.mem.stats())
        s["writable"] = self.writable
        return s

    def _scope(self, p: _Params) -> dict[str, Any]:
        return {"user_id": p.scope("user_id"), "agent_id": p.scope("agent_id"), "run_id": p.scope("run_id")}

    def search(self, p: _Params) -> Any:
        q = p.required_text("q")
        top_k = p.integer("top_k", 10, 1, 200)
        if not q.strip():
            return {"query": q, "hits": []}
        # reinforce=False: looking at the memory must not teach it (no Hebbian links from the inspector)
        hits = self.mem.search(q, top_k=top_k, explain=True, reinforce=False, **self._scope(p))
        # "prevented": the hit came in as an outcome the match prevented, shown as a warning
        return {"query": q, "hits": [dict(_clean(asdict(h)), prevented=is_prevented(h)) for h in hits]}

    def what_if(self, p: _Params) -> Any:
        action = p.required_text("action")
        if not action.strip():
            raise ValueError("action must be a non-empty string")
        max_depth = p.integer("max_depth", 3, 1, 20)
        limit = p.integer("limit", 5, 1, 100)
        scope = self._scope(p)
        report = self.mem.intervention_query(action, max_depth=max_depth, limit=limit, **scope)
        sg = what_if_graph(self.mem, action, max_depth=max_depth, limit=limit, **scope)
        return {"report": _clean(asdict(report)), "picture": _clean(picture_data(sg))}

    def graph(self, p: _Params) -> Any:
        q = p.text("q", required=True)
        direction = p.text("direction", "both")
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
        ids = [i for i in (p.text("ids") or "").split(",") if i]
        target: Any = ids if ids else q
        sg = subgraph(self.mem, target, depth=p.integer("depth", 2, 0, 6), direction=direction,
                      limit=p.integer("limit", 40, 1, 300), **self._scope(p))
        return {"picture": _clean(picture_data(sg))}

    def _all_chunks(self, **filters: Any) -> list:
        return list(self.mem.get_all(filters or None, limit=_MEMORY_LIMIT))

    def scopes(self, p: _Params) -> Any:
        counts: dict[tuple, dict[str, Any]] = {}
        for c in self._all_chunks():
            key = (c.user_id, c.agent_id)
            row = counts.setdefault(key, {"user_id": c.user_id, "agent_id": c.agent_id, "memories": 0,
                                          "mean_q": 0.0})
            row["memories"] += 1
            row["mean_q"] += c.q_value
        out = []
        for row in counts.values():
            row["mean_q"] = row["mean_q"] / row["memories"]
            out.append(row)
        out.sort(key=lambda r: (-r["memories"], str(r["user_id"]), str(r["agent_id"])))
        return {"scopes": out, "limit": _MEMORY_LIMIT}

    def memories(self, p: _Params) -> Any:
        filters: dict[str, Any] = {}
        for key in ("user_id", "agent_id"):
            if p.has(key):
                filters[key] = p.scope(key)  # present but empty: the memories without that scope
        kind = p.text("kind")
        if kind:
            filters["kind"] = kind
        limit = p.integer("limit", 200, 1, _MEMORY_LIMIT)
        order = p.text("order", "q")
        if order not in ("q", "recent"):
            raise ValueError(f"order must be 'q' (by Q, the default) or 'recent' (newest first), got {order!r}")
        chunks = self._all_chunks(**filters)
        if order == "recent":
            chunks.sort(key=lambda c: (-c.created_at, c.id))
        else:
            chunks.sort(key=lambda c: (-c.q_value, -c.importance, c.created_at))
        return {"filters": filters, "order": order, "total": len(chunks),
                "memories": [{"id": c.id, "text": c.text, "kind": c.kind, "q_value": c.q_value,
                              "importance": c.importance, "access_count": c.access_count,
                              "created_at": c.created_at, "user_id": c.user_id, "agent_id": c.agent_id,
                              "session_id": c.session_id} for c in chunks[:limit]]}

    def memory(self, p: _Params) -> Any:
        cid = p.text("id", required=True)
        chunk = self.mem.get(cid)
        edges = []
        for e in self.mem.edges(cid, valid_only=False):
            other = e.dst if e.src == cid else e.src
            try:
                other_text = self.mem.get(other).text
            except KeyError:
                other_text = None
            d = _clean(asdict(e))
            d.update({"direction": "out" if e.src == cid else "in", "other_id": other, "other_text": other_text})
            edges.append(d)
        edges.sort(key=lambda d: (not d["valid"], d["direction"], -d["confidence"]))
        return {"memory": _clean(asdict(chunk)), "history": _clean(self.mem.history(cid)), "edges": edges}

    def sleep_report(self, p: _Params) -> Any:
        if p.text("preview") in ("1", "true", "yes"):
            report = self.mem.sleep(dry_run=True)  # one transaction, rolled back: nothing written
            return {"report": _clean(asdict(report)), "preview": True}
        report = self.mem.last_sleep_report()
        return {"report": _clean(report), "preview": False,
                "note": None if report is not None else "no sleep has run on this memory yet"}

    # ---------------------------------------------------------------- writes (writable=True only)
    def feedback(self, body: Mapping[str, Any]) -> Any:
        cid, reward = body.get("id"), body.get("reward")
        if not isinstance(cid, str):
            raise TypeError("id must be a chunk id string")
        return {"id": cid, "q_value": self.mem.feedback(cid, reward)}

    def run_sleep(self, body: Mapping[str, Any]) -> Any:
        dry = body.get("dry_run", False)
        if not isinstance(dry, bool):
            raise TypeError("dry_run must be a boolean")
        return {"report": _clean(asdict(self.mem.sleep(dry_run=dry))), "preview": dry}


_PAGE_CSS_NAMES = ("graph.css", "inspector.css")
_PAGE_JS_NAMES = ("graph.js", "inspector.js")


def inspector_page() -> tuple[str, str]:
    """The page and its Content-Security-Policy (inline script and style allowed by hash only)."""
    css = "\n".join(asset(n) for n in _PAGE_CSS_NAMES)
    script = "\n".join(asset(n) for n in _PAGE_JS_NAMES)
    palette_json = json.dumps(palette(), sort_keys=True).replace("<", "\\u003c")
    html = asset("inspector.html").replace("/*CSS*/", css).replace("/*PALETTE*/", palette_json) \
        .replace("/*JS*/", script)
    csp = (f"default-src 'none'; script-src {csp_hash(script)}; style-src {csp_hash(css)}; connect-src 'self'; "
           "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    return html, csp


class _Handler(BaseHTTPRequestHandler):
    server: "InspectorServer"
    server_version = "causalmem-inspector"
    sys_version = ""

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet: through logging, not stderr
        log.debug("%s " + fmt, self.address_string(), *args)

    def _send(self, status: HTTPStatus, body: bytes, ctype: str, csp: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Content-Security-Policy", csp or "default-src 'none'; frame-ancestors 'none'")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: HTTPStatus, data: Any) -> None:
        body = json.dumps(data, ensure_ascii=False, allow_nan=False).encode("utf-8")
        self._send(status, body, "application/json; charset=utf-8")

    def _host_ok(self) -> bool:
        host = (self.headers.get("Host") or "").lower()
        port = self.server.server_address[1]
        return host in (f"127.0.0.1:{port}", f"localhost:{port}")

    def _dispatch(self, fn: Callable[[], Any]) -> None:
        try:
            self._json(HTTPStatus.OK, fn())
        except _ApiError as exc:
            self._json(exc.status, {"error": exc.message})
        except KeyError as exc:
            msg = exc.args[0] if exc.args else "not found"
            self._json(HTTPStatus.NOT_FOUND, {"error": str(msg)})
        except (ValueError, TypeError) as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
        except Exception:  # the server keeps serving; the details go to the log, not the page
            log.exception("inspector request failed: %s", self.path)
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error (see the server log)"})

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if not self._host_ok():
            self._json(HTTPStatus.FORBIDDEN, {"error": "unexpected Host header"})
            return
        url = urlsplit(self.path)
        if url.path in ("/", "/index.html"):
            html, csp = self.server.page
            self._send(HTTPStatus.OK, html.encode("utf-8"), "text/html; charset=utf-8", csp)
            return
        route = self.server.inspector.get_routes.get(url.path)
        if route is None:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {url.path}"})
            return
        params = _Params(url.query)
        self._dispatch(lambda: route(params))

    do_HEAD = do_GET

    def do_POST(self) -> None:  # noqa: N802
        if not self._host_ok():
            self._json(HTTPStatus.FORBIDDEN, {"error": "unexpected Host header"})
            return
        url = urlsplit(self.path)
        route = self.server.inspector.post_routes.get(url.path)
        if route is None:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {url.path}"})
            return
        if not self.server.inspector.writable:
            self._json(HTTPStatus.FORBIDDEN, {"error": "the inspector is read-only (start it with --writable)"})
            return
        origin = self.headers.get("Origin")
        port = self.server.server_address[1]
        if origin is not None and origin not in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
            self._json(HTTPStatus.FORBIDDEN, {"error": "cross-origin request refused"})
            return
        if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/json":
            self._json(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, {"error": "send application/json"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self._json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": f"body must be at most {MAX_BODY} bytes"})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._json(HTTPStatus.BAD_REQUEST, {"error": "body is not valid JSON"})
            return
        if not isinstance(body, dict):
            self._json(HTTPStatus.BAD_REQUEST, {"error": "body must be a JSON object"})
            return
        self._dispatch(lambda: route(body))


class InspectorServer(ThreadingHTTPServer):
    """The inspector's HTTP server (127.0.0.1 only); ``url`` is where to point a browser."""

    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, mem: Any, *, port: int = 0, writable: bool = False) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an integer between 0 and 65535 (0: any free port), got {port!r}")
        self.inspector = Inspector(mem, writable=writable)
        self.page = inspector_page()
        super().__init__((HOST, port), _Handler)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}/"

    def start(self) -> threading.Thread:
        """Serve on a background thread (tests, notebooks); stop with ``shutdown()`` + ``server_close()``."""
        t = threading.Thread(target=self.serve_forever, name="causalmem-inspector", daemon=True)
        t.start()
        return t


def serve(mem: Any, *, port: int = 0, writable: bool = False, ready: Callable[[str], None] | None = None) -> None:
    """Serve the inspector until interrupted (Ctrl-C). ``ready(url)`` is called once it listens."""
    srv = InspectorServer(mem, port=port, writable=writable)
    try:
        if ready is not None:
            ready(srv.url)
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
