"""No silent change of data.

Polarity is guessed by whole words from an explicit bilingual lexicon with a negation scope,
its origin is stored (given / guessed / unknown), the write-time contradiction fast path never
retires an edge (it annotates; retirement is sleep's judge's call), and recording the same
decision -> outcome again updates the existing edge instead of adding a parallel one.
"""
from __future__ import annotations

import pytest

from causalmem import Memory

# (outcome text, expected guess). None = no signal. Checked through the public write path:
# record_decision(...).polarity with no polarity given.
PHRASES = [
    # --- English: the prefix traps of the adversarial pass (none of them is a failure)
    ("download finished", "positive"),
    ("downstream service ok", "positive"),
    ("bugfix released", "positive"),
    ("error-free rollout", "positive"),
    ("queue drained and no jobs lost", "positive"),
    ("hotfix shipped", "positive"),
    ("downloaded the report", None),
    ("failover tested", None),
    ("errand completed", "positive"),
    # --- English: negation scope
    ("without errors", "positive"),
    ("zero downtime", "positive"),
    ("no regressions", "positive"),
    ("no longer crashes", "positive"),
    ("never failed again", "positive"),
    ("not fixed", "negative"),
    ("did not pass", "negative"),
    ("tests didn't pass", "negative"),
    ("never recovered", "negative"),
    ("no success", "negative"),
    ("not bad at all", "positive"),
    ("is not stable", "negative"),
    # --- English: repair words neutralise the failure they name
    ("fixed the login bug", "positive"),
    ("login bug fixed", "positive"),
    ("crash resolved", "positive"),
    ("memory leak patched", "positive"),
    ("prevented a data loss", "positive"),
    ("avoided downtime", "positive"),
    # --- English: plain negatives
    ("production crash", "negative"),
    ("deploy failed", "negative"),
    ("build failure", "negative"),
    ("request timed out", "negative"),
    ("connection timeout", "negative"),
    ("database deadlock", "negative"),
    ("major outage", "negative"),
    ("memory leak in the worker", "negative"),
    ("performance regression", "negative"),
    ("null pointer exception", "negative"),
    ("data corruption", "negative"),
    ("service is down", "negative"),
    ("pages load slower", "negative"),
    ("users complained", "negative"),
    ("sql injection", "negative"),
    ("rollback needed", "negative"),
    ("api unavailable", "negative"),
    # --- English: plain positives
    ("tests passed", "positive"),
    ("pages load faster", "positive"),
    ("latency improved", "positive"),
    ("deploy succeeded", "positive"),
    ("cluster healthy", "positive"),
    ("security audit passed", "positive"),
    # --- English: mixed, and no signal at all
    ("fixed but still crashing", "mixed"),
    ("moved the meeting to tuesday", None),
    ("renamed the variable", None),
    # --- Chinese
    ("下载完成", "positive"),
    ("部署失败", "negative"),
    ("服务宕机", "negative"),
    ("测试通过", "positive"),
    ("问题已修复", "positive"),
    ("没有报错", "positive"),
    ("未修复", "negative"),
    ("不稳定", "negative"),
    ("无异常", "positive"),
    ("零停机", "positive"),
    ("没有丢失数据", "positive"),
    ("接口超时", "negative"),
    ("内存泄漏", "negative"),
    ("响应变慢", "negative"),
    ("构建成功", "positive"),
    ("修复了登录错误", "positive"),
    ("未通过审核", "negative"),
    ("不再崩溃", "positive"),
    ("异常已解决", "positive"),
    ("非常稳定", "positive"),
    ("效果不错", "positive"),
    ("无法启动", "negative"),
    ("修复了但是还在崩溃", "mixed"),
    ("把会议改到周二", None),
]


def test_phrase_table_is_big_enough():
    en = [p for p, _ in PHRASES if p.isascii()]
    zh = [p for p, _ in PHRASES if not p.isascii()]
    assert len(PHRASES) >= 60 and len(en) >= 30 and len(zh) >= 20


@pytest.fixture(scope="module")
def mem(tmp_path_factory):
    m = Memory(tmp_path_factory.mktemp("pol") / "p.db", embedder=None)
    yield m
    m.close()


@pytest.mark.parametrize("outcome,expected", PHRASES, ids=[p for p, _ in PHRASES])
def test_guessed_polarity_by_whole_words(mem, outcome, expected):
    e = mem.record_decision(f"decision for {outcome}", outcome)
    assert e.polarity == expected, outcome
    assert e.polarity_origin == ("unknown" if expected is None else "guessed")
    # what is stored is what was returned
    assert mem.get_edge(e.id).polarity == expected
    assert mem.get_edge(e.id).polarity_origin == e.polarity_origin


def test_given_polarity_is_stored_as_given(db_path):
    with Memory(db_path, embedder=None) as m:
        e = m.record_decision("switch the CDN", "download finished", polarity="negative")
        assert (e.polarity, e.polarity_origin) == ("negative", "given")
        assert m.get_edge(e.id).polarity_origin == "given"
    with Memory(db_path, embedder=None) as m:  # persisted
        assert m.get_edge(e.id).polarity_origin == "given"


def test_success_does_not_retire_an_unrelated_success_guessed_as_failure(db_path):
    """The reported case: 'download finished' was guessed negative and then retired."""
    with Memory(db_path, embedder=None) as m:
        old = m.record_decision("switch the CDN", "download finished")
        m.record_decision("switch the CDN", "pages load faster")
        got = m.get_edge(old.id)
        assert got.valid
        assert got.superseded_by is None


def test_write_time_fast_path_annotates_and_never_retires(db_path):
    """A success after a failure of the same decision annotates the failure; nothing is retired
    at write time, whether the polarity was guessed or given."""
    with Memory(db_path, embedder=None) as m:
        f1 = m.record_decision("restart the cache", "checkout crashed")            # guessed negative
        f2 = m.record_decision("restart the cache", "orders lost", polarity="negative")  # given
        ok = m.record_decision("restart the cache", "checkout works again")        # guessed positive
        for f in (f1, f2):
            got = m.get_edge(f.id)
            assert got.valid, f"{f.dst} was retired at write time"
            assert got.superseded_by == ok.id
        # still returned by the causal queries, flagged as superseded
        acts = {a.text: a for a in m.search_causal("restart the cache", limit=10)}
        assert "checkout crashed" in acts and acts["checkout crashed"].superseded_by is not None


def test_same_evidence_twice_updates_the_edge(db_path):
    with Memory(db_path, embedder=None) as m:
        e1 = m.record_decision("enable caching", "faster response", confidence=0.6)
        e2 = m.record_decision("enable caching", "faster response", confidence=0.6)
        assert e2.id == e1.id
        edges = m.edges(m.get(e1.src).id)
        assert len([e for e in edges if e.dst == e1.dst and e.relation == "caused"]) == 1
        got = m.get_edge(e1.id)
        assert got.evidence == 2
        assert got.confidence == pytest.approx(1 - 0.4 * 0.4)  # noisy-or of two independent 0.6s
        for _ in range(20):
            m.record_decision("enable caching", "faster response", confidence=0.6)
        got = m.get_edge(e1.id)
        assert got.evidence == 22
        assert got.confidence <= 0.99  # combined and capped
        assert got.confidence >= 0.95


def test_script_run_three_times_does_not_triple_energies(db_path):
    """A script that records the same three facts on each run: 3 edges, not 3 -> 6 -> 9."""
    pairs = [("deploy without tests", "production crash"), ("production crash", "user complaints"),
             ("enable caching", "faster response")]
    with Memory(db_path, embedder=None) as m:
        m.record_many(pairs)
        first = {a.text: a.energy for a in m.search_causal("deploy without tests", limit=10)}
        m.record_many(pairs)
        m.record_many(pairs)
        assert len(m.edges()) == 3
        assert {e.evidence for e in m.edges()} == {3}
        again = {a.text: a.energy for a in m.search_causal("deploy without tests", limit=10)}
        assert set(again) == set(first)


def test_same_pair_twice_in_one_batch_is_one_edge(db_path):
    with Memory(db_path, embedder=None) as m:
        out = m.record_many([("a decision", "an outcome"), ("a decision", "an outcome")])
        assert out[0].id == out[1].id
        assert len(m.edges()) == 1 and m.edges()[0].evidence == 2


def test_repeated_evidence_stays_within_its_scope_and_relation(db_path):
    with Memory(db_path, embedder=None) as m:
        a = m.record_decision("d", "o", user_id="alice")
        b = m.record_decision("d", "o", user_id="bob")
        c = m.record_decision("d", "o", user_id="alice", relation="enabled")
        assert len({a.id, b.id, c.id}) == 3
        assert all(m.get_edge(x.id).evidence == 1 for x in (a, b, c))


def test_retired_edge_is_not_revived_by_new_evidence(db_path):
    with Memory(db_path, embedder=None) as m:
        e = m.record_decision("d1", "o1")
        m.invalidate(e.id, "wrong")
        e2 = m.record_decision("d1", "o1")
        assert e2.id != e.id and e2.evidence == 1
        assert not m.get_edge(e.id).valid
