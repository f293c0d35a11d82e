"""A small OpenAI-compatible chat client (``POST {base_url}/chat/completions``) on urllib.

No third-party dependency. Used by ``judges.LLMJudge`` and ``judges.LLMDistiller``.

Configuration comes from arguments or the environment:

- ``CAUSALMEM_LLM_BASE_URL`` e.g. ``http://127.0.0.1:8000/v1`` (required)
- ``CAUSALMEM_LLM_MODEL`` (default ``"gpt-4o-mini"``)
- ``CAUSALMEM_LLM_API_KEY`` (optional; sent as ``Authorization: Bearer …``)

Transient failures (HTTP 5xx / 429, timeouts, refused or reset connections) are retried with
exponential backoff (``backoff · 2^attempt`` seconds); anything else, or running out of retries,
raises ``causalmem.errors.LLMError``.
"""
from __future__ import annotations

import ast
import json
import logging
import os
import re
import socket
import time
import urllib.error
import urllib.request
from typing import Any, Mapping, Sequence

from .errors import ConfigurationError, LLMError

log = logging.getLogger("causalmem")

ENV_BASE_URL = "CAUSALMEM_LLM_BASE_URL"
ENV_MODEL = "CAUSALMEM_LLM_MODEL"
ENV_API_KEY = "CAUSALMEM_LLM_API_KEY"
DEFAULT_MODEL = "gpt-4o-mini"

__all__ = ["ChatClient", "extract_json", "ENV_BASE_URL", "ENV_MODEL", "ENV_API_KEY"]


class ChatClient:
    """Minimal OpenAI-compatible chat-completions client.

    >>> client = ChatClient("http://127.0.0.1:8000/v1", model="local")  # doctest: +SKIP
    >>> client.chat([{"role": "user", "content": "hi"}])  # doctest: +SKIP
    'hello'
    """

    def __init__(self, base_url: str | None = None, model: str | None = None, api_key: str | None = None, *,
                 timeout: float = 10.0, retries: int = 2, backoff: float = 0.5) -> None:
        base_url = base_url if base_url is not None else os.environ.get(ENV_BASE_URL)
        if not base_url or not str(base_url).strip():
            raise ConfigurationError(
                f"no LLM endpoint configured: pass base_url=... or set {ENV_BASE_URL} "
                "(an OpenAI-compatible base URL such as http://127.0.0.1:8000/v1)")
        base_url = str(base_url).strip()
        if not base_url.startswith(("http://", "https://")):
            raise ConfigurationError(f"base_url must start with http:// or https://, got {base_url!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an integer >= 0, got {retries!r}")
        if isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or backoff < 0:
            raise ValueError(f"backoff must be a number >= 0, got {backoff!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model or os.environ.get(ENV_MODEL) or DEFAULT_MODEL
        self.api_key = api_key if api_key is not None else os.environ.get(ENV_API_KEY)
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff = float(backoff)

    def __repr__(self) -> str:
        return f"ChatClient({self.base_url!r}, model={self.model!r})"

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def chat(self, messages: Sequence[Mapping[str, str]], *, temperature: float = 0.0,
             max_tokens: int | None = None, json_mode: bool = False) -> str:
        """Send ``messages``; return the first choice's ``message.content``."""
        body: dict[str, Any] = {"model": self.model, "messages": list(messages), "temperature": temperature}
        if max_tokens is not None:
            body["max_tokens"] = int(max_tokens)
        if json_mode:
            body["response_format"] = {"type": "json_object"}
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * (2 ** (attempt - 1)))
            req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    raw = resp.read()
            except urllib.error.HTTPError as exc:
                detail = _safe_body(exc)
                if exc.code >= 500 or exc.code == 429:
                    last = LLMError(f"LLM endpoint {self.url} answered HTTP {exc.code}: {detail}")
                    log.warning("causalmem: %s (attempt %d/%d)", last, attempt + 1, self.retries + 1)
                    continue
                raise LLMError(f"LLM endpoint {self.url} answered HTTP {exc.code}: {detail}") from None
            except (socket.timeout, TimeoutError):
                last = LLMError(f"LLM endpoint {self.url} timed out after {self.timeout:g} s")
                log.warning("causalmem: %s (attempt %d/%d)", last, attempt + 1, self.retries + 1)
                continue
            except urllib.error.URLError as exc:
                reason = exc.reason
                if isinstance(reason, (socket.timeout, TimeoutError)):
                    last = LLMError(f"LLM endpoint {self.url} timed out after {self.timeout:g} s")
                else:
                    last = LLMError(f"cannot reach LLM endpoint {self.url}: {reason}")
                log.warning("causalmem: %s (attempt %d/%d)", last, attempt + 1, self.retries + 1)
                continue
            except (ConnectionError, OSError) as exc:
                last = LLMError(f"connection to LLM endpoint {self.url} failed: {exc}")
                log.warning("causalmem: %s (attempt %d/%d)", last, attempt + 1, self.retries + 1)
                continue
            return _content_of(raw, self.url)
        assert last is not None
        raise LLMError(f"{last} (gave up after {self.retries + 1} attempts)")


def _safe_body(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read()[:200].decode("utf-8", "replace")
    except Exception:  # pragma: no cover - best effort only
        return exc.reason or ""


def _content_of(raw: bytes, url: str) -> str:
    try:
        payload = json.loads(raw.decode("utf-8"))
        content = payload["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError, UnicodeDecodeError) as exc:
        raise LLMError(f"LLM endpoint {url} did not answer like /chat/completions: {raw[:200]!r}") from exc
    if not isinstance(content, str):
        raise LLMError(f"LLM endpoint {url} answered a non-text message content: {content!r}")
    return content


_FENCE_RE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_TRAILING_COMMA_RE = re.compile(r",(\s*[}\]])")


def extract_json(text: str) -> Any:
    """Parse the JSON value in an LLM answer, tolerating what models commonly wrap around it.

    Accepts: plain JSON; JSON inside a ```json fence; one JSON object/array with prose before
    and after; trailing commas; Python-style literals (single quotes, True/False/None).
    Raises ``ValueError`` when nothing parseable is found.
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
    for cand in candidates:
        if not cand or cand in seen:
            continue
        seen.add(cand)
        for fixed in (cand, _TRAILING_COMMA_RE.sub(r"\1", cand)):
            try:
                return json.loads(fixed)
            except ValueError:
                pass
            try:
                value = ast.literal_eval(fixed)
            except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
                continue
            if isinstance(value, (dict, list)):
                return value
    raise ValueError(f"no JSON value found in LLM answer: {text[:120]!r}")
