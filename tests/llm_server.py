"""A real HTTP server on 127.0.0.1 standing in for an OpenAI-compatible ``/chat/completions``.

Usage::

    with FakeLLM() as llm:
        llm.reply('{"supersedes": true, "reasoning": "newer fix"}')   # one scripted answer
        llm.fail(500)                                                 # next answer: HTTP 500
        llm.stall(2.0)                                                # next answer after 2 s
        judge = LLMJudge(llm.base_url, model="fake", timeout=0.5, retries=1, backoff=0.01)

Answers are consumed in order; when the script is empty the ``default`` answer is used (a
callable ``default(request_json) -> str`` or a string). Every request body is recorded in
``llm.requests``, its headers in ``llm.headers`` and ``(method, Host header, path)`` in
``llm.seen``.

Hostile endpoints for the client's limits::

    llm.redirect("http://localhost:%d/v1/chat/completions" % llm.port, 302)  # next answer: a redirect
    llm.stream(lambda: iter([b"HTTP/1.1 200 OK\r\n", ...]), delay=0.1)      # raw bytes, paced

``stream`` writes whatever the iterable yields straight to the socket (status line and headers
included), sleeping ``delay`` seconds between pieces, until it is exhausted, the client hangs up
or the server stops; ``llm.sent_bytes`` counts what reached the socket.
"""
from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


class FakeLLM:
    def __init__(self, default: str | Callable[[dict], str] | None = None,
                 tls: tuple[str, str] | None = None) -> None:
        """``tls=(certfile, keyfile)`` serves HTTPS instead of HTTP."""
        self.tls = tls
        self.default = default if default is not None else '{"supersedes": false, "reasoning": "default"}'
        self.script: deque[tuple[str, Any]] = deque()
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.seen: list[tuple[str, str, str]] = []
        self.sent_bytes = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting ---------------------------------------------------------------
    def reply(self, content: str) -> "FakeLLM":
        self.script.append(("reply", content))
        return self

    def fail(self, status: int = 500, body: str = "internal error") -> "FakeLLM":
        self.script.append(("fail", (status, body)))
        return self

    def stall(self, seconds: float, content: str = '{"supersedes": true, "reasoning": "late"}') -> "FakeLLM":
        self.script.append(("stall", (seconds, content)))
        return self

    def redirect(self, location: str, status: int = 302) -> "FakeLLM":
        self.script.append(("redirect", (status, location)))
        return self

    def stream(self, pieces: Callable[[], Any], delay: float = 0.0) -> "FakeLLM":
        """Next answer: the raw bytes yielded by ``pieces()``, ``delay`` seconds apart."""
        self.script.append(("stream", (pieces, delay)))
        return self

    def raw(self, body: bytes, status: int = 200) -> "FakeLLM":
        """Send ``body`` as is (not wrapped in a chat-completions envelope)."""
        self.script.append(("raw", (status, body)))
        return self

    # -- lifecycle ---------------------------------------------------------------
    @property
    def base_url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host}:{port}/v1"

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def __enter__(self) -> "FakeLLM":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - a client that turned a redirected POST into a GET
                self.do_POST()

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                with fake._lock:
                    fake.requests.append(body)
                    fake.headers.append(dict(self.headers))
                    fake.seen.append((self.command, self.headers.get("Host", ""), self.path))
                    step = fake.script.popleft() if fake.script else None
                if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                    return self._send(404, b'{"error": "not found"}')
                if step is None:
                    d = fake.default
                    content = d(body) if callable(d) else d
                    return self._chat(content)
                kind, arg = step
                if kind == "reply":
                    return self._chat(arg)
                if kind == "fail":
                    status, text = arg
                    return self._send(status, json.dumps({"error": text}).encode())
                if kind == "redirect":
                    status, location = arg
                    return self._send(status, b'{"moved": true}', {"Location": location})
                if kind == "stream":
                    pieces, delay = arg
                    return self._stream(pieces(), delay)
                if kind == "stall":
                    seconds, content = arg
                    time.sleep(seconds)
                    return self._chat(content)
                status, payload = arg
                return self._send(status, payload)

            def _chat(self, content: str) -> None:
                payload = {
                    "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "fake",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                }
                self._send(200, json.dumps(payload).encode())

            def _stream(self, pieces: Any, delay: float) -> None:
                self.close_connection = True
                try:
                    for piece in pieces:
                        if fake._stop.is_set():
                            break
                        self.wfile.write(piece)
                        self.wfile.flush()
                        with fake._lock:
                            fake.sent_bytes += len(piece)
                        if delay:
                            fake._stop.wait(delay)
                except OSError:  # the client hung up (what the limit tests expect)
                    pass

            def _send(self, status: int, data: bytes, extra: dict | None = None) -> None:
                try:
                    self.send_response(status)
                    for name, value in (extra or {}).items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # client gave up (timeout test)
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if self.tls:
            import ssl

            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*self.tls)
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
