"""The LLM client against a hostile endpoint: a real HTTP server on 127.0.0.1 (tests/llm_server.py).

Each limit of ``causalmem.llm`` has a test here: redirects that leave the
origin, one deadline per call, a response-size cap, bounded JSON depth, and nothing but
``LLMError`` escaping; plus the distiller's per-answer cap and item-by-item validation.
"""
from __future__ import annotations

import json
import time

import pytest
from llm_server import FakeLLM

from causalmem.errors import LLMError
from causalmem.judges import (
    MAX_DISTILLED_ITEMS,
    DistilledItem,
    EdgeInfo,
    LLMDistiller,
    LLMJudge,
    parse_distilled,
    parse_verdict,
    validate_distilled,
)
from causalmem.llm import ChatClient, check_json_depth, extract_json

OLD = EdgeInfo(id="e1", relation="caused", confidence=0.6, source="llm_inferred", polarity="negative")
NEW = EdgeInfo(id="e2", relation="caused", confidence=0.6, source="llm_inferred", polarity="positive")
TEXTS = dict(decision_text="set the pool size to 5", old_outcome_text="connections ran out",
             new_outcome_text="the pool held")
YES = '{"supersedes": true, "reasoning": "from wherever the client went"}'
SLACK = 4.0  # seconds of scheduling slack on a loaded 2-core machine; the hostile streams last >= 15 s


@pytest.fixture
def llm():
    with FakeLLM(default=YES) as server:
        yield server


@pytest.fixture(autouse=True)
def _no_llm_env(monkeypatch):
    for key in ("CAUSALMEM_LLM_BASE_URL", "CAUSALMEM_LLM_MODEL", "CAUSALMEM_LLM_API_KEY",
                "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(key, raising=False)


def _judge(llm, **kw):
    kw.setdefault("timeout", 2.0)
    kw.setdefault("retries", 2)
    kw.setdefault("backoff", 0.01)
    return LLMJudge(llm.base_url, model="fake-model", **kw)


def _chat_body(content: str) -> bytes:
    return json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}).encode()


def _head(length: int | None, *, chunked: bool = False) -> bytes:
    lines = ["HTTP/1.1 200 OK", "Content-Type: application/json", "Connection: close"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# ------------------------------------------------------------------------------ redirects


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirect_to_another_host_gets_no_key_and_no_verdict(llm, status):
    # same server, same port, another host name: only the host differs
    llm.redirect(f"http://localhost:{llm.port}/v1/chat/completions", status)
    with pytest.raises(LLMError, match="redirect"):
        _judge(llm, api_key="sk-secret").decide(OLD, NEW, **TEXTS)
    assert [host for _m, host, _p in llm.seen] == [f"127.0.0.1:{llm.port}"]  # nothing reached 'localhost'
    assert all(h.get("Authorization") is None for h in llm.headers if not h.get("Host", "").startswith("127."))


def test_redirect_to_another_port_is_refused(llm):
    with FakeLLM(default=YES) as other:
        llm.redirect(other.base_url + "/chat/completions", 307)
        with pytest.raises(LLMError, match="refused"):
            _judge(llm, api_key="sk-secret").decide(OLD, NEW, **TEXTS)
        assert other.requests == [] and other.headers == []


def test_same_origin_307_is_followed_with_the_key(llm):
    llm.redirect("/v1/chat/completions/", 307).reply('{"supersedes": false, "reasoning": "after the slash"}')
    verdict = _judge(llm, api_key="sk-secret").decide(OLD, NEW, **TEXTS)
    assert verdict.reasoning == "after the slash" and not verdict.supersedes
    assert [p for _m, _h, p in llm.seen] == ["/v1/chat/completions", "/v1/chat/completions/"]
    assert [m for m, _h, _p in llm.seen] == ["POST", "POST"]
    assert llm.headers[-1]["Authorization"] == "Bearer sk-secret"


def test_redirect_loop_is_bounded(llm):
    for _ in range(10):
        llm.redirect("/v1/chat/completions", 308)
    with pytest.raises(LLMError, match="redirected more than 3"):
        _judge(llm).decide(OLD, NEW, **TEXTS)
    assert len(llm.requests) == 4  # one request and three followed hops; never retried


# ------------------------------------------------------------------------------ one deadline per call


def _trickle(where: str):
    body = _chat_body('{"supersedes": true, "reasoning": "trickled in, one byte at a time"}')
    head = _head(len(body))
    if where == "headers":
        return lambda: (bytes([b]) for b in head + body)
    return lambda: iter([head] + [bytes([b]) for b in body])


@pytest.mark.parametrize("where", ["headers", "body"])
def test_trickling_endpoint_is_cut_at_the_deadline(llm, where):
    # one byte every 0.1 s: each socket read is quick, the whole answer would take >= 15 s
    llm.stream(_trickle(where), delay=0.1)
    t0 = time.monotonic()
    with pytest.raises(LLMError, match="timed out"):
        _judge(llm, timeout=1.0, retries=2).decide(OLD, NEW, **TEXTS)
    assert time.monotonic() - t0 < 1.0 + SLACK


def test_retries_and_backoff_stay_within_the_deadline(llm):
    llm.fail(500).fail(500).fail(500).fail(500)
    t0 = time.monotonic()
    with pytest.raises(LLMError, match="HTTP 500"):
        _judge(llm, timeout=0.5, retries=3, backoff=1.0).decide(OLD, NEW, **TEXTS)  # back-off alone: 7 s
    assert time.monotonic() - t0 < 0.5 + SLACK
    assert len(llm.requests) == 1


# ------------------------------------------------------------------------------ response size


def _huge(mode: str, total: int = 200 * 1024 * 1024):
    """A valid chat completion whose content is ``total`` bytes, streamed (never held in memory)."""
    prefix, suffix = b'{"choices": [{"message": {"content": "', b'"}}]}'
    block = b"a" * (1024 * 1024)
    n = total // len(block)

    def pieces():
        if mode == "content-length":
            yield _head(len(prefix) + n * len(block) + len(suffix))
            yield prefix
            for _ in range(n):
                yield block
            yield suffix
        else:
            yield _head(None, chunked=True)
            for piece in [prefix] + [block] * n + [suffix]:
                yield b"%x\r\n" % len(piece) + piece + b"\r\n"
            yield b"0\r\n\r\n"
    return pieces


@pytest.mark.parametrize("mode", ["content-length", "chunked"])
def test_200mb_answer_is_refused_without_reading_it(llm, mode):
    llm.stream(_huge(mode))
    with pytest.raises(LLMError, match="max_response_bytes"):
        _judge(llm, timeout=30.0).decide(OLD, NEW, **TEXTS)
    assert len(llm.requests) == 1  # not retried
    # what the server got into the socket before the client hung up: socket buffers, not 200 MB
    time.sleep(0.2)
    assert llm.sent_bytes < 48 * 1024 * 1024


def test_max_response_bytes_is_configurable(llm):
    small = '{"supersedes": true, "reasoning": "%s"}' % ("x" * 100)
    big = '{"supersedes": true, "reasoning": "%s"}' % ("x" * 5000)
    llm.reply(small).reply(big)
    judge = _judge(llm, max_response_bytes=2048)
    assert judge.decide(OLD, NEW, **TEXTS).supersedes
    with pytest.raises(LLMError, match="max_response_bytes=2048"):
        judge.decide(OLD, NEW, **TEXTS)
    with pytest.raises(ValueError, match="max_response_bytes"):
        ChatClient(llm.base_url, max_response_bytes=10)


# ------------------------------------------------------------------------------ JSON depth

DEEP = "[" * 100_000 + "]" * 100_000


def test_deeply_nested_answer_content_is_an_llm_error(llm):
    llm.reply(DEEP).reply('{"supersedes": ' + DEEP + "}")
    for _ in range(2):
        with pytest.raises(LLMError, match="nested"):
            _judge(llm).decide(OLD, NEW, **TEXTS)


def test_deeply_nested_envelope_is_an_llm_error(llm):
    llm.raw(b'{"choices": ' + DEEP.encode() + b"}")
    with pytest.raises(LLMError, match="chat/completions"):
        _judge(llm).decide(OLD, NEW, **TEXTS)


def test_deeply_nested_distiller_answer_is_an_llm_error(llm):
    llm.reply('{"items": ' + DEEP + "}")
    with pytest.raises(LLMError, match="nested"):
        LLMDistiller(llm.base_url, retries=0).distill([{"speaker": "u", "text": "hi"}])


def test_a_large_non_json_answer_is_refused_without_minutes_of_parsing(llm):
    # 2 MB of "[1]," is no single JSON value; parsing it as a Python literal took minutes of CPU
    llm.reply("[1]," * 500_000)
    t0 = time.monotonic()
    with pytest.raises(LLMError, match="no JSON value"):
        _judge(llm, timeout=30.0).decide(OLD, NEW, **TEXTS)
    assert time.monotonic() - t0 < 20.0


def test_depth_check_is_linear_and_ignores_strings():
    with pytest.raises(ValueError, match="nested deeper than 64"):
        extract_json("[" * 65 + "]" * 65)
    assert extract_json("[" * 64 + "]" * 64) is not None
    with pytest.raises(ValueError, match="nested"):
        extract_json("(" * 300 + ")" * 300)  # Python-literal fallback is bounded too
    brackets_in_text = '{"supersedes": true, "reasoning": "' + "[{" * 500 + '"}'
    assert parse_verdict(brackets_in_text).supersedes
    check_json_depth('"' + "[" * 10_000 + '"')  # inside a string: depth 0
    with pytest.raises(ValueError):
        check_json_depth("[" * 10_000)


# ------------------------------------------------------------------------------ only LLMError escapes


def _closing(data: bytes):
    return lambda: iter([data])


HOSTILE = {
    "truncated body": _closing(_head(500) + b'{"choices": [{"mess'),
    "garbage status line": _closing(b"HELLO THERE\r\n\r\n"),
    "header line too long": _closing(b"HTTP/1.1 200 OK\r\nX-Junk: " + b"j" * 70_000 + b"\r\n\r\n{}"),
    "bad chunk size": _closing(_head(None, chunked=True) + b"zz\r\n{}\r\n0\r\n\r\n"),
    "chunked stream cut": _closing(_head(None, chunked=True) + b"100\r\n{\"choices\""),
    "no answer at all": _closing(b""),
    "not utf-8": _closing(_head(4) + b"\xff\xfe\xfa\xfb"),
    "bad content-length": _closing(b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n{}"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_malformed_http_answers_are_llm_errors(llm, case):
    for _ in range(3):
        llm.stream(HOSTILE[case])
    with pytest.raises(LLMError):
        _judge(llm, timeout=5.0).decide(OLD, NEW, **TEXTS)


def test_lone_surrogates_in_answers_are_made_storable(llm):
    llm.reply('{"supersedes": true, "reasoning": "bad \\ud800 text"}')
    verdict = _judge(llm).decide(OLD, NEW, **TEXTS)
    verdict.reasoning.encode("utf-8")  # would raise UnicodeEncodeError in SQLite otherwise
    assert verdict.supersedes and verdict.reasoning.startswith("bad ")


# ------------------------------------------------------------------------------ distiller answers


def test_distiller_answer_is_capped_and_the_rest_reported(llm):
    items = [{"kind": "fact", "text": f"fact number {i}"} for i in range(5000)]
    llm.reply(json.dumps(items))
    out = LLMDistiller(llm.base_url, retries=0).distill([{"speaker": "u", "text": "tell me everything"}])
    assert len(out) == MAX_DISTILLED_ITEMS
    assert out[0] == DistilledItem("fact", "fact number 0")
    assert out.skipped == [f"{5000 - MAX_DISTILLED_ITEMS} item(s) beyond max_items={MAX_DISTILLED_ITEMS}"]
    llm.reply(json.dumps(items[:10]))
    assert len(LLMDistiller(llm.base_url, retries=0, max_items=3).distill([{"text": "x"}])) == 3
    with pytest.raises(ValueError, match="max_items"):
        LLMDistiller(llm.base_url, max_items=0)


def test_distilled_items_are_validated_one_by_one():
    answer = json.dumps([
        {"kind": "fact", "text": "kept"},
        {"kind": "fact", "text": "lone \ud800 surrogate"},
        {"kind": "fact", "text": "x" * 100_000},
        {"kind": "lesson", "text": "nul \x00 inside"},
        {"kind": "causal", "decision": ["not", "a", "string"], "text": "y"},
        {"kind": 7},
        [1, 2],
        {"kind": "lesson", "text": "also kept", "task_tag": "ops"},
    ])
    out = parse_distilled(answer)
    assert out == [DistilledItem("fact", "kept"), DistilledItem("lesson", "also kept", task_tag="ops")]
    assert len(out.skipped) == 6
    assert any("surrogate" in why for why in out.skipped) and any("longer than" in why for why in out.skipped)
    # objects a custom distiller returns go through the same check
    again = validate_distilled([DistilledItem("fact", "ok"), DistilledItem("causal", "no decision"), "junk"])
    assert again == [DistilledItem("fact", "ok")] and len(again.skipped) == 2
    assert validate_distilled("not a list") == [] and validate_distilled(None).skipped


# ------------------------------------------------------------------------------ HTTPS


@pytest.fixture
def tls_files(tmp_path):
    """A self-signed certificate for 127.0.0.1 (made with the openssl command line)."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return str(cert), str(key)


def test_https_endpoint_answers_and_keeps_the_deadline(tls_files, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", tls_files[0])  # trust the test certificate (default context reads it)
    with FakeLLM(default=YES, tls=tls_files) as llm:
        assert llm.base_url.startswith("https://127.0.0.1:")
        assert _judge(llm, api_key="sk-tls").decide(OLD, NEW, **TEXTS).supersedes
        assert llm.headers[-1]["Authorization"] == "Bearer sk-tls"
        llm.stream(_trickle("body"), delay=0.1)
        t0 = time.monotonic()
        with pytest.raises(LLMError, match="timed out"):
            _judge(llm, timeout=1.0).decide(OLD, NEW, **TEXTS)
        assert time.monotonic() - t0 < 1.0 + SLACK


def test_untrusted_certificate_is_an_llm_error(tls_files, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with FakeLLM(default=YES, tls=tls_files) as llm:
        with pytest.raises(LLMError, match="certificate"):
            _judge(llm, api_key="sk-tls").decide(OLD, NEW, **TEXTS)
