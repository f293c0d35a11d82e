"""Judges, distillers and the OpenAI-compatible client against a real local HTTP server."""
from __future__ import annotations

import json
import threading
import time

import pytest
from llm_server import FakeLLM

from causalmem.errors import ConfigurationError, LLMError
from causalmem.judges import (
    DistilledItem,
    Distiller,
    EdgeInfo,
    Judge,
    LLMDistiller,
    LLMJudge,
    RuleJudge,
    Verdict,
    parse_distilled,
    parse_verdict,
)
from causalmem.llm import ChatClient, extract_json
from causalmem.memory import Memory

SLACK = 4.0  # seconds of scheduling slack on a loaded 2-core machine (as in test_llm_client.py)
STALL = 6.0  # a stalled answer outlasts every bound below, so a wait for it cannot pass

T = 1_700_000_000.0
DAY = 86400.0

OLD = EdgeInfo(id="e1", relation="caused", confidence=0.6, source="llm_inferred", polarity="negative",
               decision_text="set the pool size to 5", outcome_text="connections ran out")
NEW = EdgeInfo(id="e2", relation="caused", confidence=0.6, source="llm_inferred", polarity="positive",
               decision_text="set the pool size to 5", outcome_text="the pool held")
TEXTS = dict(decision_text="set the pool size to 5", old_outcome_text="connections ran out",
             new_outcome_text="the pool held")


@pytest.fixture
def llm():
    with FakeLLM() as server:
        yield server


@pytest.fixture(autouse=True)
def _no_llm_env(monkeypatch):
    for key in ("CAUSALMEM_LLM_BASE_URL", "CAUSALMEM_LLM_MODEL", "CAUSALMEM_LLM_API_KEY"):
        monkeypatch.delenv(key, raising=False)


def _judge(llm, **kw):
    kw.setdefault("timeout", 2.0)
    kw.setdefault("retries", 2)
    kw.setdefault("backoff", 0.01)
    return LLMJudge(llm.base_url, model="fake-model", **kw)


# ------------------------------------------------------------------------------ rule judge


def test_rule_judge():
    j = RuleJudge()
    assert isinstance(j, Judge)
    assert j.decide(OLD, NEW, **TEXTS).supersedes
    assert not j.decide(NEW, OLD, **TEXTS).supersedes
    neutral = EdgeInfo(**{**NEW.__dict__, "polarity": "neutral"})
    assert not j.decide(OLD, neutral, **TEXTS).supersedes
    meta = EdgeInfo(**{**NEW.__dict__, "relation": "meta", "subtype": "invalidates", "polarity": None})
    assert j.decide(NEW, meta, **TEXTS).supersedes
    assert j.might_supersede("negative", "positive") and not j.might_supersede("positive", "negative")


# ------------------------------------------------------------------------------ JSON extraction


@pytest.mark.parametrize("text, value", [
    ('{"supersedes": true, "reasoning": "x"}', {"supersedes": True, "reasoning": "x"}),
    ('```json\n{"supersedes": false, "reasoning": "y"}\n```', {"supersedes": False, "reasoning": "y"}),
    ('Sure! Here it is:\n{"supersedes": true, "reasoning": "z",}\nHope that helps.',
     {"supersedes": True, "reasoning": "z"}),
    ("[{'kind': 'fact', 'text': 'a'},]", [{"kind": "fact", "text": "a"}]),
    ('```\n[1, 2, 3,]\n```', [1, 2, 3]),
])
def test_extract_json_tolerates_llm_wrapping(text, value):
    assert extract_json(text) == value


@pytest.mark.parametrize("text", ["", "no json here", "{broken", "```json\n{]\n```"])
def test_extract_json_rejects_garbage(text):
    with pytest.raises(ValueError):
        extract_json(text)


def test_parse_verdict_validates_fields():
    assert parse_verdict('{"supersedes": "true", "reasoning": 3}') == Verdict(True, "3")
    for bad in ('{"reasoning": "no verdict"}', '{"supersedes": "maybe"}', '{"supersedes": 1}', "[]", "garbage"):
        with pytest.raises(LLMError):
            parse_verdict(bad)


# ------------------------------------------------------------------------------ LLM judge over HTTP


def test_llm_judge_good_json(llm):
    llm.reply('{"supersedes": true, "reasoning": "the newer run fixed it"}')
    v = _judge(llm, api_key="sk-test").decide(OLD, NEW, **TEXTS)
    assert v == Verdict(True, "the newer run fixed it")
    req = llm.requests[-1]
    assert req["model"] == "fake-model" and req["temperature"] == 0
    assert "connections ran out" in req["messages"][-1]["content"]
    assert llm.headers[-1].get("Authorization") == "Bearer sk-test"


def test_llm_judge_fenced_json(llm):
    llm.reply('Here is my answer:\n```json\n{"supersedes": false, "reasoning": "both hold"}\n```')
    assert _judge(llm).decide(OLD, NEW, **TEXTS) == Verdict(False, "both hold")


def test_llm_judge_garbage_raises(llm):
    llm.reply("I think so, probably.")
    with pytest.raises(LLMError, match="not JSON"):
        _judge(llm).decide(OLD, NEW, **TEXTS)
    assert len(llm.requests) == 1  # a malformed answer is not retried


def test_llm_judge_timeout_raises(llm):
    # timeout bounds the whole call: a stalled first attempt leaves no time for a retry
    llm.stall(STALL).stall(STALL)
    t0 = time.monotonic()
    with pytest.raises(LLMError, match="timed out"):
        _judge(llm, timeout=0.3, retries=1).decide(OLD, NEW, **TEXTS)
    assert time.monotonic() - t0 < 0.3 + SLACK
    assert len(llm.requests) == 1


def test_llm_judge_attempt_timeout_leaves_time_to_retry(llm):
    llm.stall(STALL).stall(STALL)
    t0 = time.monotonic()
    with pytest.raises(LLMError, match="timed out"):
        _judge(llm, timeout=3.0, attempt_timeout=0.3, retries=1).decide(OLD, NEW, **TEXTS)
    assert time.monotonic() - t0 < 0.6 + SLACK
    assert len(llm.requests) == 2  # the first attempt was cut at 0.3 s, not at the whole timeout
    llm.stall(STALL).reply('{"supersedes": true, "reasoning": "second try"}')
    assert _judge(llm, timeout=STALL, attempt_timeout=1.0, retries=1).decide(OLD, NEW, **TEXTS).supersedes


def test_llm_judge_retries_5xx_then_succeeds(llm):
    llm.fail(500).fail(503).reply('{"supersedes": true, "reasoning": "ok"}')
    assert _judge(llm, retries=2).decide(OLD, NEW, **TEXTS).supersedes
    assert len(llm.requests) == 3


def test_llm_judge_http_500_exhausts_retries(llm):
    llm.fail(500).fail(500).fail(500)
    with pytest.raises(LLMError, match="HTTP 500"):
        _judge(llm, retries=2).decide(OLD, NEW, **TEXTS)
    assert len(llm.requests) == 3


def test_llm_judge_4xx_is_not_retried(llm):
    llm.fail(401, "bad key")
    with pytest.raises(LLMError, match="HTTP 401"):
        _judge(llm).decide(OLD, NEW, **TEXTS)
    assert len(llm.requests) == 1


def test_llm_judge_not_a_chat_completion(llm):
    llm.raw(b'{"unexpected": true}')
    with pytest.raises(LLMError, match="chat/completions"):
        _judge(llm).decide(OLD, NEW, **TEXTS)


def test_connection_refused_is_retried_then_fails():
    with FakeLLM() as server:
        url = server.base_url
    client = ChatClient(url, timeout=0.5, retries=1, backoff=0.01)
    with pytest.raises(LLMError, match="cannot reach|failed"):
        client.chat([{"role": "user", "content": "hi"}])


def test_configuration_from_env_and_errors(llm, monkeypatch):
    with pytest.raises(ConfigurationError, match="CAUSALMEM_LLM_BASE_URL"):
        LLMJudge()
    with pytest.raises(ConfigurationError):
        LLMDistiller.from_env()
    with pytest.raises(ConfigurationError, match="http"):
        LLMJudge("ftp://example")
    with pytest.raises(ValueError, match="timeout"):
        LLMJudge(llm.base_url, timeout=0)
    monkeypatch.setenv("CAUSALMEM_LLM_BASE_URL", llm.base_url + "/")
    monkeypatch.setenv("CAUSALMEM_LLM_MODEL", "env-model")
    monkeypatch.setenv("CAUSALMEM_LLM_API_KEY", "env-key")
    judge = LLMJudge.from_env(retries=0)
    assert judge.client.base_url == llm.base_url and judge.client.model == "env-model"
    llm.reply('{"supersedes": false, "reasoning": "-"}')
    judge.decide(OLD, NEW, **TEXTS)
    assert llm.requests[-1]["model"] == "env-model"
    assert llm.headers[-1].get("Authorization") == "Bearer env-key"


# ------------------------------------------------------------------------------ LLM judge in sleep


def _two_outcomes(mem, i=0):
    """A decision recorded again with a different outcome (neutral polarities: only an LLM can tell)."""
    old = mem.record_decision(f"switched the cache backend {i}", f"latency stayed flat {i}", polarity="neutral")
    other = mem.record_decision(f"tuned the cache ttl {i}", f"hit rate went up {i}", polarity="neutral")
    new = mem.link(old.src, other.dst, "caused", polarity="neutral")
    return old, new


def test_sleep_with_llm_judge_annotates(tmp_path, llm):
    llm.reply('{"supersedes": true, "reasoning": "newer measurement"}')
    with Memory(tmp_path / "m.db", clock=lambda: T, embedder=None, judge=_judge(llm)) as mem:
        old, new = _two_outcomes(mem)
        r = mem.sleep(now=T + DAY)
        assert r.superseded == 1 and r.judge_failures == 0
        assert mem.get_edge(old.id).superseded_by == new.id
        n = len(llm.requests)
        assert mem.sleep(now=T + 2 * DAY).superseded == 0
        assert len(llm.requests) == n  # a decided pair is never asked again


def test_sleep_remembers_keep_verdicts(tmp_path, llm):
    llm.default = '{"supersedes": false, "reasoning": "both true"}'
    with Memory(tmp_path / "m.db", clock=lambda: T, embedder=None) as mem:
        old, _new = _two_outcomes(mem)
        r = mem.sleep(now=T + DAY, judge=_judge(llm))
        assert r.superseded == 0 and r.judge_failures == 0 and len(llm.requests) == 1
        mem.sleep(now=T + 2 * DAY, judge=_judge(llm))
        assert len(llm.requests) == 1
        assert mem.get_edge(old.id).superseded_by is None


@pytest.mark.parametrize("script", ["garbage", "500", "timeout"])
def test_sleep_counts_judge_failures_and_keeps_the_edge(tmp_path, llm, script):
    if script == "garbage":
        llm.reply("yes!!")
    elif script == "500":
        llm.fail(500).fail(500)
    else:
        llm.stall(1.0).stall(1.0)
    judge = _judge(llm, timeout=0.3, retries=1)
    with Memory(tmp_path / "m.db", clock=lambda: T, embedder=None) as mem:
        old, _new = _two_outcomes(mem)
        r = mem.sleep(now=T + DAY, judge=judge)
        assert r.judge_failures == 1 and r.superseded == 0
        e = mem.get_edge(old.id)
        assert e.valid and e.superseded_by is None
        # a failure is not remembered: the next cycle asks again (and now succeeds)
        llm.script.clear()
        llm.reply('{"supersedes": true, "reasoning": "later"}')
        r2 = mem.sleep(now=T + 2 * DAY, judge=judge)
        assert r2.judge_failures == 0 and r2.superseded == 1


def test_sleep_with_a_broken_custom_judge(tmp_path):
    class Broken:
        def decide(self, old, new, **kw):
            raise RuntimeError("boom")

    class Liar:
        def decide(self, old, new, **kw):
            return "yes"

    with Memory(tmp_path / "m.db", clock=lambda: T, embedder=None) as mem:
        _two_outcomes(mem)
        assert mem.sleep(now=T + DAY, judge=Broken(), dry_run=True).judge_failures == 1
        assert mem.sleep(now=T + DAY, judge=Liar()).judge_failures == 1


def test_llm_judge_is_called_outside_the_write_transaction(tmp_path, llm):
    seen = {}

    def answer(body):
        import sqlite3

        con = sqlite3.connect(str(tmp_path / "m.db"), timeout=0.2)
        try:  # another connection can write while the judge thinks
            con.execute("INSERT INTO meta (key, value) VALUES ('probe', '1')")
            con.commit()
            seen["wrote"] = True
        finally:
            con.close()
        return '{"supersedes": true, "reasoning": "-"}'

    llm.default = answer
    with Memory(tmp_path / "m.db", clock=lambda: T, embedder=None) as mem:
        _two_outcomes(mem)
        r = mem.sleep(now=T + DAY, judge=_judge(llm))
        assert seen.get("wrote") and r.superseded == 1


# ------------------------------------------------------------------------------ distiller


GOOD = """[
  {"kind": "fact", "text": "Mel works on the payments team"},
  {"kind": "lesson", "text": "Always drain the queue before restarting a consumer"},
  {"kind": "causal", "decision": "restarted the consumer without draining", "text": "orders were lost",
   "relation": "caused", "task_tag": "payments"}
]"""


def test_parse_distilled_good_fenced_broken():
    items = parse_distilled(GOOD)
    assert [i.kind for i in items] == ["fact", "lesson", "causal"]
    assert items[2] == DistilledItem(kind="causal", text="orders were lost",
                                     decision="restarted the consumer without draining", relation="caused",
                                     task_tag="payments")
    assert parse_distilled("```json\n" + GOOD + "\n```") == items
    broken = GOOD.replace('"payments"}\n]', '"payments"},\n]')  # trailing comma
    assert parse_distilled("Here you go:\n" + broken) == items
    assert parse_distilled('{"items": ' + GOOD + "}") == items


def test_parse_distilled_skips_bad_items():
    text = """[
      {"kind": "fact", "text": "ok"},
      {"kind": "opinion", "text": "unknown kind"},
      {"kind": "fact", "text": ""},
      {"kind": "causal", "text": "no decision"},
      {"kind": "causal", "decision": "x", "text": "y", "relation": "teleported"},
      {"kind": "lesson", "text": "bad tag", "task_tag": 5},
      "not an object",
      {"kind": "Lesson", "text": "  keep me  "}
    ]"""
    assert parse_distilled(text) == [DistilledItem("fact", "ok"), DistilledItem("lesson", "keep me")]
    with pytest.raises(LLMError):
        parse_distilled("nothing to see")
    with pytest.raises(LLMError):
        parse_distilled('"just a string"')


def test_distiller_over_http_wired_into_add(tmp_path, llm):
    llm.reply("```json\n" + GOOD + "\n```")
    distiller = LLMDistiller(llm.base_url, model="fake-model", retries=0)
    assert isinstance(distiller, Distiller)
    with Memory(tmp_path / "m.db", clock=lambda: T, embedder=None, distiller=distiller) as mem:
        turns = mem.add([{"role": "user", "content": "I restarted the consumer without draining"},
                         {"role": "assistant", "content": "Orders were lost, drain first next time."}],
                        user_id="mel", infer=True)
        assert len(turns) == 2
        prompt = llm.requests[-1]["messages"][-1]["content"]
        assert "restarted the consumer without draining" in prompt
        causal = [e for e in mem.edges() if e.relation == "caused"]
        assert len(causal) == 1 and causal[0].source == "distill" and causal[0].task_tag == "payments"
        assert mem.get(causal[0].src).text == "restarted the consumer without draining"
        kinds = {c.kind for c in mem.get_all(user_id="mel")}
        assert {"turn", "fact", "lesson", "decision", "outcome"} <= kinds
        # broken JSON from the model: bad items dropped, the rest stored
        llm.reply('Sure: [{"kind": "fact", "text": "Mel likes Kafka"}, {"kind": 7},]')
        mem.add("I like Kafka", user_id="mel", infer=True)
        assert any(c.text == "Mel likes Kafka" for c in mem.get_all(user_id="mel", kind="fact"))
        # an unusable answer: the turn is stored all the same, the failure reported
        before = mem.stats()["chunks"]
        llm.reply("no idea")
        stored = mem.add("something else", user_id="mel", infer=True)
        assert [c.text for c in stored] == ["something else"] and stored.distilled == 0
        assert "not JSON" in stored.distill_error
        assert mem.stats()["chunks"] == before + 1


def test_infer_without_distiller_is_a_configuration_error(tmp_path):
    with Memory(tmp_path / "m.db", embedder=None) as mem:
        with pytest.raises(ConfigurationError):
            mem.add("hello", infer=True)
        assert mem.stats()["chunks"] == 0


# ------------------------------------------------------------------------------ add(infer=True) never loses turns


@pytest.mark.parametrize("answer", ["no idea", "[" * 50_000 + "]" * 50_000, '{"items": "not a list"}', "500"],
                         ids=["prose", "nested-too-deep", "wrong-shape", "http-500"])
def test_distiller_garbage_still_stores_the_turns(tmp_path, llm, answer):
    if answer == "500":
        llm.fail(500).fail(500)
    else:
        llm.reply(answer)
    distiller = LLMDistiller(llm.base_url, retries=1, backoff=0.01)
    with Memory(tmp_path / "m.db", clock=lambda: T, embedder=None, distiller=distiller) as mem:
        out = mem.add([{"role": "user", "content": "we rolled back the deploy"},
                       {"role": "assistant", "content": "noted, the error rate dropped"}], user_id="u", infer=True)
        assert len(out) == 2 and "rolled back the deploy" in out[0].text and "error rate dropped" in out[1].text
        assert out.distilled == 0 and out.distill_error and "LLMError" in out.distill_error
        assert [c.kind for c in mem.get_all(user_id="u")] == ["turn", "turn"]
        assert mem.search("rolled back deploy", user_id="u", reinforce=False)


def test_bad_distilled_items_are_skipped_and_reported(tmp_path, llm):
    items = [{"kind": "fact", "text": "Ana owns the billing service"},
             {"kind": "fact", "text": "lone \ud800 surrogate"},
             {"kind": "causal", "text": "no decision here"},
             {"kind": "lesson", "text": "check the queue depth before scaling down"}]
    items += [{"kind": "fact", "text": f"filler fact {i}"} for i in range(500)]
    llm.reply(json.dumps(items))
    with Memory(tmp_path / "m.db", clock=lambda: T, embedder=None,
                distiller=LLMDistiller(llm.base_url, retries=0, max_items=10)) as mem:
        out = mem.add("Ana: I own billing; check the queue before scaling down", user_id="ana", infer=True)
        assert len(out) == 1 and out.distill_error is None
        assert out.distilled == 10
        assert len(out.distill_skipped) == 3 and "beyond max_items=10" in out.distill_skipped[-1]
        kinds = [c.kind for c in mem.get_all(user_id="ana", limit=1000)]
        assert kinds.count("turn") == 1 and kinds.count("fact") + kinds.count("lesson") == 10


def test_custom_distillers_that_misbehave(tmp_path):
    class Raises:
        def distill(self, turns):
            raise RuntimeError("model crashed")

    class Junk:
        max_items = 2

        def distill(self, turns):
            return [DistilledItem("fact", "kept one"), "junk", DistilledItem("fact", "bad\x00nul"),
                    DistilledItem("lesson", "kept two"), DistilledItem("fact", "over the cap")]

    class NotAList:
        def distill(self, turns):
            return 42

    with Memory(tmp_path / "m.db", clock=lambda: T, embedder=None, distiller=Raises()) as mem:
        out = mem.add("first turn", user_id="a", infer=True)
        assert len(out) == 1 and out.distill_error == "RuntimeError: model crashed"
        mem.distiller = Junk()
        out = mem.add("second turn", user_id="a", infer=True)
        assert out.distilled == 2 and len(out.distill_skipped) == 3
        assert {c.text for c in mem.get_all(user_id="a", kind="fact")} == {"kept one"}
        mem.distiller = NotAList()
        out = mem.add("third turn", user_id="a", infer=True)
        assert out.distilled == 0 and out.distill_skipped == ["distiller returned int, not a list of items"]
        assert len(mem.get_all(user_id="a", kind="turn")) == 3


def test_a_distilled_item_the_store_refuses_is_rolled_back_alone(tmp_path):
    from causalmem import write as w

    with Memory(tmp_path / "m.db", clock=lambda: T, embedder=None) as mem:
        views = mem._views
        with views.write() as fx:
            skipped = w.apply_distilled(views, fx, [DistilledItem("fact", "good fact"),
                                                    DistilledItem("causal", "outcome", decision="bad\x00decision"),
                                                    DistilledItem("lesson", "good lesson")], (None, None, None), None)
        assert len(skipped) == 1 and "item 1" in skipped[0]
        texts = {c.text for c in mem.get_all(limit=100)}
        assert texts == {"good fact", "good lesson"}
        assert mem.search("good fact", reinforce=False)[0].text == "good fact"


# ------------------------------------------------------------------------------ sleep: the judge outside the lock


class _Watched:
    """A judge wrapper that says when the inner judge's call has returned."""

    remember_negative = True

    def __init__(self, inner):
        self.inner = inner
        self.returned = threading.Event()

    def decide(self, *args, **kwargs):
        try:
            return self.inner.decide(*args, **kwargs)
        finally:
            self.returned.set()


def _stalled_endpoint(llm):
    asked, release = threading.Event(), threading.Event()

    def answer(body):
        asked.set()
        release.wait(30)  # fail-safe only: the test releases it
        return '{"supersedes": true, "reasoning": "late but sure"}'

    llm.default = answer
    return asked, release


def test_search_does_not_wait_for_an_unresponsive_judge(tmp_path, llm):
    asked, release = _stalled_endpoint(llm)
    judge = _Watched(_judge(llm, timeout=60.0, retries=0))
    with Memory(tmp_path / "m.db", clock=lambda: T, embedder=None) as mem:
        old, new = _two_outcomes(mem)
        done = {}
        sleeper = threading.Thread(target=lambda: done.setdefault("report", mem.sleep(now=T + DAY, judge=judge)))
        sleeper.start()
        try:
            assert asked.wait(30), "the judge endpoint was never called"
            hits = mem.search("switched the cache backend")     # same Memory, another thread
            edge = mem.record_decision("warmed the cache", "cold starts vanished")
            stats = mem.stats()
            assert not judge.returned.is_set(), "search waited for the judge call"
        finally:
            release.set()
            sleeper.join(60)
        assert hits and hits[0].text == "switched the cache backend 0"
        assert edge.valid and stats["edges"] >= 3
        report = done["report"]
        assert report.superseded == 1 and mem.get_edge(old.id).superseded_by == new.id


def test_a_verdict_on_edges_changed_meanwhile_is_not_applied(tmp_path, llm):
    asked, release = _stalled_endpoint(llm)
    judge = _judge(llm, timeout=60.0, retries=0)
    with Memory(tmp_path / "m.db", clock=lambda: T, embedder=None) as mem:
        old, new = _two_outcomes(mem)
        done = {}
        sleeper = threading.Thread(target=lambda: done.setdefault("report", mem.sleep(now=T + DAY, judge=judge)))
        sleeper.start()
        try:
            assert asked.wait(30)
            mem.invalidate(new.id, "turned out to be a measuring error")  # while the judge thinks
        finally:
            release.set()
            sleeper.join(60)
        report = done["report"]
        assert report.superseded == 0 and report.judge_deferred == 1
        assert mem.get_edge(old.id).superseded_by is None and mem.get_edge(old.id).valid
        # not remembered as decided: once the newer edge is back, the pair is asked again
        mem.restore(new.id)
        llm.default = '{"supersedes": true, "reasoning": "asked again"}'
        assert mem.sleep(now=T + 2 * DAY, judge=judge).superseded == 1


def test_sleep_llm_budget_leaves_pairs_for_the_next_sleep(tmp_path, llm):
    llm.reply('{"supersedes": true, "reasoning": "quick"}')  # the first pair answered at once
    release = threading.Event()

    def blocked(body):  # every later call outlasts the budget (no race with the machine's load)
        release.wait(30)
        return '{"supersedes": true, "reasoning": "far too late"}'

    llm.default = blocked
    judge = _judge(llm, timeout=60.0, retries=0)
    with Memory(tmp_path / "m.db", clock=lambda: T, embedder=None) as mem:
        pairs = [_two_outcomes(mem, i) for i in range(4)]
        try:
            r = mem.sleep(now=T + DAY, judge=judge, llm_budget=SLACK)
        finally:
            release.set()
        assert r.superseded == 1 and r.judge_deferred == 3
        assert r.judge_failures == 0
        llm.default = '{"supersedes": true, "reasoning": "fast now"}'
        r2 = mem.sleep(now=T + 2 * DAY, judge=judge)
        assert r2.superseded == r.judge_deferred and r2.judge_deferred == 0
        assert all(mem.get_edge(o.id).superseded_by == n.id for o, n in pairs)
    with pytest.raises(ValueError, match="llm_budget"):
        Memory(tmp_path / "b.db", embedder=None).sleep(llm_budget=0)
    from causalmem.config import Config

    with pytest.raises(ValueError, match="sleep_llm_budget"):
        Config(sleep_llm_budget=-1)


def test_sleep_llm_budget_cuts_a_call_to_an_unresponsive_judge(tmp_path, llm):
    asked, release = threading.Event(), threading.Event()
    answered = threading.Event()

    def answer(body):
        asked.set()
        release.wait(30)  # fail-safe only
        answered.set()
        return '{"supersedes": true, "reasoning": "far too late"}'

    llm.default = answer
    judge = _judge(llm, timeout=60.0, retries=0)  # the judge alone would wait a minute per pair
    with Memory(tmp_path / "m.db", clock=lambda: T, embedder=None) as mem:
        pairs = [_two_outcomes(mem, i) for i in range(3)]
        try:
            r = mem.sleep(now=T + DAY, judge=judge, llm_budget=0.5)
            assert asked.is_set() and not answered.is_set(), "sleep waited for the judge beyond its budget"
        finally:
            release.set()
        assert r.judge_deferred == 3 and r.judge_failures == 0 and r.superseded == 0
        assert len(llm.requests) == 1
        assert all(mem.get_edge(o.id).superseded_by is None for o, _n in pairs)


def test_chat_timeout_argument_only_shortens_the_deadline(llm):
    llm.stall(STALL).stall(STALL)
    client = ChatClient(llm.base_url, timeout=0.3, retries=0)
    t0 = time.monotonic()
    with pytest.raises(LLMError, match="deadline 0.3 s"):
        client.chat([{"role": "user", "content": "hi"}], timeout=100.0)  # never longer than the client's
    with pytest.raises(LLMError, match="deadline 0.1 s"):
        ChatClient(llm.base_url, timeout=60, retries=0).chat([{"role": "user", "content": "hi"}], timeout=0.1)
    assert time.monotonic() - t0 < 0.4 + SLACK
    with pytest.raises(ValueError, match="timeout"):
        client.chat([], timeout=0)


def test_reads_and_writes_do_not_wait_for_a_slow_distiller(tmp_path, llm):
    asked, release, answered = threading.Event(), threading.Event(), threading.Event()

    def answer(body):
        asked.set()
        release.wait(30)  # fail-safe only
        answered.set()
        return '[{"kind": "fact", "text": "the slow answer arrived"}]'

    llm.default = answer
    distiller = LLMDistiller(llm.base_url, timeout=60.0, retries=0)
    with Memory(tmp_path / "m.db", clock=lambda: T, embedder=None, distiller=distiller) as mem:
        mem.record_decision("pinned the base image", "builds became reproducible")
        done = {}
        adder = threading.Thread(target=lambda: done.setdefault("out", mem.add("tell me later", infer=True)))
        adder.start()
        try:
            assert asked.wait(30)
            hits = mem.search("pinned the base image", reinforce=False)
            mem.record_decision("cached the wheels", "installs got faster")
            assert not answered.is_set(), "the search waited for the distiller"
        finally:
            release.set()
            adder.join(60)
        assert hits and hits[0].text == "pinned the base image"
        assert done["out"].distilled == 1
        assert [c.text for c in mem.get_all(kind="fact")] == ["the slow answer arrived"]
