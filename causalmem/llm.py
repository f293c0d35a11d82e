"""A small OpenAI-compatible chat client (``POST {base_url}/chat/completions``) on the standard library.

No third-party dependency. Used by ``judges.LLMJudge`` and ``judges.LLMDistiller``.

Configuration comes from arguments or the environment:

- ``CAUSALMEM_LLM_BASE_URL`` e.g. ``http://127.0.0.1:8000/v1`` (required)
- ``CAUSALMEM_LLM_MODEL`` (default ``"gpt-4o-mini"``)
- ``CAUSALMEM_LLM_API_KEY`` (optional; sent as ``Authorization: Bearer …``)

What the client promises (the endpoint is not trusted):

- **One deadline per call.** ``timeout`` bounds the whole ``chat()`` call — connecting, sending,
  the status line, the headers, every byte of the body, all retries and their back-off pauses —
  not each socket read: an endpoint that trickles a byte a second cannot hold a ``timeout=2``
  call for longer than about 2 s. ``attempt_timeout`` (default: all of ``timeout``) bounds one
  attempt, so that a stalled attempt can leave time for a retry.
- **No redirect leaves the origin.** A ``307``/``308`` to the same scheme, host and port (a
  trailing-slash redirect, say) is followed, at most 3 times, with the same body and headers.
  Every other redirect — another host, another port, another scheme, or a ``301``/``302``/``303``
  (which would turn the POST into a GET) — is refused with ``LLMError`` before anything is sent
  to the new location, so the API key never travels to a host it was not configured for, and
  that host's answer never becomes a verdict. Configure the final URL instead.
- **Bounded answers.** A body larger than ``max_response_bytes`` (default 4 MiB) is refused, by
  its ``Content-Length`` before reading or while streaming; JSON nested deeper than
  ``MAX_JSON_DEPTH`` (64) is refused before parsing.
- **One error type.** Every failure — HTTP status, timeout, refused or reset connection, a
  truncated or malformed HTTP answer, undecodable or deeply nested JSON, TLS — surfaces as
  ``causalmem.errors.LLMError``.

Transient failures (HTTP 5xx / 429, timeouts, refused, reset or truncated connections) are retried
with exponential back-off (``backoff · 2^attempt`` seconds) while the deadline allows; anything
else raises at once. HTTP(S) proxies from the environment are honoured as by ``urllib``.
"""
from __future__ import annotations

import ast
import functools
import http.client
import io
import json
import logging
import os
import re
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Mapping, Sequence

from .errors import ConfigurationError, LLMError

log = logging.getLogger("causalmem")

ENV_BASE_URL = "CAUSALMEM_LLM_BASE_URL"
ENV_MODEL = "CAUSALMEM_LLM_MODEL"
ENV_API_KEY = "CAUSALMEM_LLM_API_KEY"
DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
MAX_JSON_DEPTH = 64
MAX_REDIRECTS = 3
_ERROR_BODY_BYTES = 2048
_READ_BLOCK = 64 * 1024

__all__ = ["ChatClient", "extract_json", "check_json_depth", "ENV_BASE_URL", "ENV_MODEL", "ENV_API_KEY",
           "DEFAULT_MAX_RESPONSE_BYTES", "MAX_JSON_DEPTH"]


class _Transient(Exception):
    """One attempt failed in a way worth retrying (message only)."""


# ---------------------------------------------------------------------------- transport with a deadline


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("deadline reached")
    return left


class _DeadlineReader(io.RawIOBase):
    """Raw reader over a socket file whose every read may only use what is left of the deadline."""

    def __init__(self, raw: io.RawIOBase, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._raw, self._sock, self._deadline = raw, sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int | None:
        self._sock.settimeout(_remaining(self._deadline))
        return self._raw.readinto(buf)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class _DeadlineResponse(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, debuglevel: int = 0, method: str | None = None,
                 url: str | None = None, *, deadline: float) -> None:
        super().__init__(sock, debuglevel, method, url)
        raw = self.fp.detach()  # the socket file (keeps the socket open after the connection lets go)
        self.fp = io.BufferedReader(_DeadlineReader(raw, sock, deadline))


class _DeadlineConnectionMixin:
    """``http.client`` connection whose connect, TLS handshake, send and reads share one deadline."""

    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        self._deadline = deadline
        self._create_connection = self._open_socket
        # an instance attribute (http.client looks it up on self): the response reads under the same deadline
        setattr(self, "response_class", functools.partial(_DeadlineResponse, deadline=deadline))

    def _open_socket(self, address: Any, timeout: Any = None, source_address: Any = None) -> socket.socket:
        sock = socket.create_connection(address, _remaining(self._deadline), source_address)
        sock.settimeout(_remaining(self._deadline))  # handshake, proxy tunnel and send get what is left
        return sock


class _DeadlineHTTPConnection(_DeadlineConnectionMixin, http.client.HTTPConnection):
    pass


class _DeadlineHTTPSConnection(_DeadlineConnectionMixin, http.client.HTTPSConnection):
    pass


class _DeadlineRequest(urllib.request.Request):
    deadline: float = 0.0


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: Any) -> Any:
        return self.do_open(functools.partial(_DeadlineHTTPConnection, deadline=req.deadline), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__(context=context)
        self._tls = context

    def https_open(self, req: Any) -> Any:
        return self.do_open(functools.partial(_DeadlineHTTPSConnection, deadline=req.deadline), req,
                            context=self._tls)


def _opener() -> urllib.request.OpenerDirector:
    """Proxies and error statuses as urllib does them, but no redirect handler: redirects are ours."""
    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.ProxyHandler(), urllib.request.UnknownHandler(), _HTTPHandler(),
                    _HTTPSHandler(context=ssl.create_default_context()),
                    urllib.request.HTTPDefaultErrorHandler(), urllib.request.HTTPErrorProcessor()):
        opener.add_handler(handler)
    return opener


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


# ---------------------------------------------------------------------------- the client


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value != value \
            or value == float("inf"):
        raise ValueError(f"{name} must be a positive finite number of seconds, got {value!r}")
    return float(value)


class ChatClient:
    """Minimal OpenAI-compatible chat-completions client (see the module docstring for its limits).

    >>> client = ChatClient("http://127.0.0.1:8000/v1", model="local")  # doctest: +SKIP
    >>> client.chat([{"role": "user", "content": "hi"}])  # doctest: +SKIP
    'hello'
    """

    def __init__(self, base_url: str | None = None, model: str | None = None, api_key: str | None = None, *,
                 timeout: float = 10.0, retries: int = 2, backoff: float = 0.5,
                 attempt_timeout: float | None = None,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> None:
        base_url = base_url if base_url is not None else os.environ.get(ENV_BASE_URL)
        if not base_url or not str(base_url).strip():
            raise ConfigurationError(
                f"no LLM endpoint configured: pass base_url=... or set {ENV_BASE_URL} "
                "(an OpenAI-compatible base URL such as http://127.0.0.1:8000/v1)")
        base_url = str(base_url).strip()
        if not base_url.startswith(("http://", "https://")):
            raise ConfigurationError(f"base_url must start with http:// or https://, got {base_url!r}")
        try:
            host = urllib.parse.urlsplit(base_url).hostname
            urllib.parse.urlsplit(base_url).port
        except ValueError as exc:
            raise ConfigurationError(f"base_url is not a valid URL: {base_url!r} ({exc})") from None
        if not host:
            raise ConfigurationError(f"base_url names no host: {base_url!r}")
        self.timeout = _positive("timeout", timeout)
        self.attempt_timeout = None if attempt_timeout is None else _positive("attempt_timeout", attempt_timeout)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an integer >= 0, got {retries!r}")
        if isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or not 0 <= backoff < float("inf"):
            raise ValueError(f"backoff must be a finite number >= 0, got {backoff!r}")
        if isinstance(max_response_bytes, bool) or not isinstance(max_response_bytes, int) \
                or max_response_bytes < 1024:
            raise ValueError(f"max_response_bytes must be an integer >= 1024, got {max_response_bytes!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model or os.environ.get(ENV_MODEL) or DEFAULT_MODEL
        self.api_key = api_key if api_key is not None else os.environ.get(ENV_API_KEY)
        self.retries = retries
        self.backoff = float(backoff)
        self.max_response_bytes = max_response_bytes
        self._opener = _opener()

    def __repr__(self) -> str:
        return f"ChatClient({self.base_url!r}, model={self.model!r})"

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def chat(self, messages: Sequence[Mapping[str, str]], *, temperature: float = 0.0,
             max_tokens: int | None = None, json_mode: bool = False, timeout: float | None = None) -> str:
        """Send ``messages``; return the first choice's ``message.content``.

        Returns or raises ``LLMError`` within ``timeout`` seconds (plus scheduling slack): the
        client's own ``timeout``, or the smaller one given here (a caller's remaining budget).
        """
        limit = self.timeout if timeout is None else min(self.timeout, _positive("timeout", timeout))
        body: dict[str, Any] = {"model": self.model, "messages": list(messages), "temperature": temperature}
        if max_tokens is not None:
            body["max_tokens"] = int(max_tokens)
        if json_mode:
            body["response_format"] = {"type": "json_object"}
        try:
            data = json.dumps(body, ensure_ascii=True).encode("ascii")
        except (TypeError, ValueError) as exc:
            raise LLMError(f"cannot encode the request for {self.url}: {exc}") from None
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        deadline = time.monotonic() + limit
        attempts = self.retries + 1
        last = "no attempt made"
        made = 0
        for attempt in range(attempts):
            if attempt:
                pause = self.backoff * (2 ** (attempt - 1))
                if time.monotonic() + pause >= deadline:
                    break
                time.sleep(pause)
            now = time.monotonic()
            if now >= deadline:
                break
            attempt_deadline = min(deadline, now + self.attempt_timeout) if self.attempt_timeout else deadline
            made += 1
            try:
                raw = self._post(data, headers, attempt_deadline)
            except _Transient as exc:
                last = str(exc)
                log.warning("causalmem: %s (attempt %d/%d)", last, attempt + 1, attempts)
                continue
            return _content_of(raw, self.url)
        raise LLMError(f"{last} (gave up after {made} of {attempts} attempts, deadline {limit:g} s)")

    # -- one attempt, with same-origin redirects --------------------------------------------
    def _post(self, data: bytes, headers: dict[str, str], deadline: float) -> bytes:
        url = self.url
        for _hop in range(MAX_REDIRECTS + 1):
            status, location, body = self._exchange(url, data, headers, deadline)
            if status is None:
                return body
            target = urllib.parse.urljoin(url, location) if location else ""
            if not target:
                raise LLMError(f"LLM endpoint {url} answered HTTP {status} without a Location")
            if status not in (307, 308) or _origin(target) != _origin(url):
                raise LLMError(
                    f"LLM endpoint {url} answered HTTP {status} redirecting to {target}: refused (only a "
                    f"307/308 to the same scheme, host and port is followed, so the API key never goes "
                    f"elsewhere); configure the final URL as base_url")
            log.info("causalmem: LLM endpoint %s redirects (HTTP %d) to %s", url, status, target)
            url = target
        raise LLMError(f"LLM endpoint {self.url} redirected more than {MAX_REDIRECTS} times")

    def _exchange(self, url: str, data: bytes, headers: dict[str, str],
                  deadline: float) -> tuple[int | None, str | None, bytes]:
        """(None, None, body) for a 2xx; (status, location, b"") for a redirect; raises otherwise."""
        req = _DeadlineRequest(url, data=data, headers=headers, method="POST")
        req.deadline = deadline
        try:
            try:
                left = _remaining(deadline)
                with self._opener.open(req, timeout=left) as resp:
                    return None, None, self._read_capped(resp, url)
            except urllib.error.HTTPError as exc:
                try:
                    if 300 <= exc.code < 400:
                        return exc.code, exc.headers.get("Location"), b""
                    detail = _error_detail(exc)
                finally:
                    exc.close()
                message = f"LLM endpoint {url} answered HTTP {exc.code}: {detail}"
                if exc.code >= 500 or exc.code in (408, 429):
                    raise _Transient(message) from None
                raise LLMError(message) from None
            except urllib.error.URLError as exc:
                reason = exc.reason
                if isinstance(reason, BaseException):
                    raise reason from None
                raise _Transient(f"cannot reach LLM endpoint {url}: {reason}") from None
        except (LLMError, _Transient):
            raise
        except (socket.timeout, TimeoutError):
            raise _Transient(f"LLM endpoint {url} timed out") from None
        except ssl.SSLCertVerificationError as exc:
            raise LLMError(f"TLS certificate of LLM endpoint {url} not accepted: {exc}") from None
        except http.client.IncompleteRead as exc:
            raise _Transient(f"LLM endpoint {url} closed the connection mid-answer "
                             f"({len(exc.partial)} bytes read)") from None
        except http.client.RemoteDisconnected:
            raise _Transient(f"LLM endpoint {url} closed the connection without answering") from None
        except http.client.HTTPException as exc:
            raise LLMError(f"LLM endpoint {url} sent a malformed HTTP answer: "
                           f"{type(exc).__name__}: {str(exc)[:200]}") from None
        except (ConnectionError, OSError) as exc:
            raise _Transient(f"cannot reach LLM endpoint {url}: {exc}") from None
        except (ValueError, UnicodeError) as exc:
            raise LLMError(f"cannot talk to LLM endpoint {url}: {type(exc).__name__}: {str(exc)[:200]}") from None
        except Exception as exc:  # the endpoint is untrusted: nothing but LLMError leaves this method
            raise LLMError(f"LLM endpoint {url} failed: {type(exc).__name__}: {str(exc)[:200]}") from None

    def _read_capped(self, resp: Any, url: str) -> bytes:
        cap = self.max_response_bytes
        declared = resp.headers.get("Content-Length")
        length: int | None = None
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                length = None
            if length is not None and length > cap:
                raise LLMError(f"LLM endpoint {url} announced a {length}-byte answer, more than "
                               f"max_response_bytes={cap}")
        chunks: list[bytes] = []
        total = 0
        while True:
            block = resp.read(min(_READ_BLOCK, cap + 1 - total))
            if not block:
                break
            chunks.append(block)
            total += len(block)
            if total > cap:
                raise LLMError(f"LLM endpoint {url} answered more than max_response_bytes={cap} bytes")
        if length is not None and total < length:
            raise _Transient(f"LLM endpoint {url} closed the connection after {total} of {length} bytes")
        return b"".join(chunks)


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read(_ERROR_BODY_BYTES)[:200].decode("utf-8", "replace")
    except Exception:  # best effort only: the status already says what failed
        return str(exc.reason or "")


def _clean_text(text: str) -> str:
    """Lone surrogates (legal in JSON escapes, not in UTF-8) become '?'."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def _content_of(raw: bytes, url: str) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise LLMError(f"LLM endpoint {url} answered bytes that are not UTF-8: {raw[:200]!r}") from None
    try:
        check_json_depth(text)
        payload = json.loads(text)
        content = payload["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError, RecursionError) as exc:
        raise LLMError(f"LLM endpoint {url} did not answer like /chat/completions "
                       f"({type(exc).__name__}): {raw[:200]!r}") from None
    if not isinstance(content, str):
        raise LLMError(f"LLM endpoint {url} answered a non-text message content: {str(content)[:200]!r}")
    return _clean_text(content)


# ---------------------------------------------------------------------------- JSON in answers

_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_ANY_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', re.DOTALL)
_NOT_BRACKET_RE = re.compile(r"[^\[\]{}()]+")


def check_json_depth(text: str, limit: int = MAX_JSON_DEPTH, *, python_strings: bool = False) -> None:
    """``ValueError`` when the brackets of ``text`` (outside strings) nest deeper than ``limit``.

    Linear, no recursion: run before ``json.loads``/``ast.literal_eval`` so that a hostile answer
    cannot raise ``RecursionError`` (or recurse anywhere downstream).
    """
    if text.count("[") + text.count("{") + text.count("(") <= limit:
        return
    brackets = _NOT_BRACKET_RE.sub("", (_ANY_STRING_RE if python_strings else _STRING_RE).sub('""', text))
    depth = 0
    for c in brackets:  # stops at the first level too deep: a hostile answer costs little
        if c in "[{(":
            depth += 1
            if depth > limit:
                raise ValueError(f"JSON nested deeper than {limit} levels")
        elif depth:
            depth -= 1


_MAX_LITERAL_CHARS = 100_000  # the Python-literal fallback (single quotes, True/None) is for short answers
_FENCE_RE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_TRAILING_COMMA_RE = re.compile(r",(\s*[}\]])")


def extract_json(text: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse the JSON value in an LLM answer, tolerating what models commonly wrap around it.

    Accepts: plain JSON; JSON inside a ```json fence; one JSON object/array with prose before
    and after; trailing commas; Python-style literals (single quotes, True/False/None) in answers
    up to 100,000 characters.
    Raises ``ValueError`` when nothing parseable is found or the value nests deeper than
    ``max_depth``.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected text, got {type(text).__name__}")
    candidates: list[str] = []
    stripped = text.strip()
    candidates.append(stripped)
    for m in _FENCE_RE.finditer(text):
        candidates.append(m.group(1).strip())
    for open_, close in (("{", "}"), ("[", "]")):
        i, j = stripped.find(open_), stripped.rfind(close)
        if i != -1 and j > i:
            candidates.append(stripped[i:j + 1])
    seen: set[str] = set()
    too_deep: ValueError | None = None
    for cand in candidates:
        if not cand or cand in seen:
            continue
        seen.add(cand)
        for fixed in dict.fromkeys((cand, _TRAILING_COMMA_RE.sub(r"\1", cand))):  # the same text once
            try:
                check_json_depth(fixed, max_depth)
                return json.loads(fixed)
            except RecursionError:
                too_deep = ValueError(f"JSON nested too deeply in LLM answer: {text[:120]!r}")
            except ValueError as exc:
                if "nested deeper" in str(exc):
                    too_deep = exc
                    continue
            if len(fixed) > _MAX_LITERAL_CHARS:  # Python-literal parsing of megabytes costs minutes of CPU
                continue
            try:
                check_json_depth(fixed, max_depth, python_strings=True)
                value = ast.literal_eval(fixed)
            except ValueError as exc:
                if "nested deeper" in str(exc):
                    too_deep = exc
                continue
            except (SyntaxError, MemoryError, RecursionError, TypeError):
                continue
            if isinstance(value, (dict, list)):
                return value
    if too_deep is not None:
        raise ValueError(f"{too_deep} in LLM answer: {text[:120]!r}")
    raise ValueError(f"no JSON value found in LLM answer: {text[:120]!r}")
