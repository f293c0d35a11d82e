"""Every raw error becomes a
ValueError / TypeError / StoreError naming the argument or the file."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from causalmem import Memory, StoreError

LONE = "bad \ud800 text"
HUGE = 10 ** 400


@pytest.fixture
def mem(db_path):
    m = Memory(db_path, embedder=None)
    m.record_decision("deploy without tests", "production crash")
    yield m
    m.close()


@pytest.mark.parametrize("call,name", [
    (lambda m: m.record_decision(LONE, "x"), "decision"),
    (lambda m: m.record_decision("x", LONE), "outcome"),
    (lambda m: m.record_decision("x", "y", user_id=LONE), "user_id"),
    (lambda m: m.record_decision("x", "y", task_tag=LONE), "task_tag"),
    (lambda m: m.record_many([("x", LONE)]), "outcome"),
    (lambda m: m.add(LONE), "messages"),
    (lambda m: m.add("hi", session_id=LONE), "session_id"),
    (lambda m: m.add("hi", metadata={"k": LONE}), "metadata"),
    (lambda m: m.add_fact("k", LONE), "value"),
    (lambda m: m.search(LONE), "query"),
    (lambda m: m.search("x", user_id=LONE), "user_id"),
    (lambda m: m.search_causal(LONE), "query"),
    (lambda m: m.trace_cause(LONE), "outcome"),
    (lambda m: m.intervention_query(LONE), "action"),
    (lambda m: m.get(LONE), "chunk_id"),
    (lambda m: m.get_edge(LONE), "edge_id"),
    (lambda m: m.history(LONE), "chunk_id"),
    (lambda m: m.feedback(LONE, 1.0), "chunk_id"),
    (lambda m: m.delete_all(user_id=LONE), "user_id"),
    (lambda m: m.get_all(user_id=LONE), "user_id"),
])
def test_lone_surrogate_is_a_value_error_naming_the_argument(mem, call, name):
    with pytest.raises(ValueError, match=name):
        call(mem)


@pytest.mark.parametrize("call,name", [
    (lambda m: m.record_decision("x", "y", confidence=HUGE), "confidence"),
    (lambda m: m.record_decision("x", "y", event_time=HUGE), "event_time"),
    (lambda m: m.record_decision("x", "y", event_time=-HUGE), "event_time"),
    (lambda m: m.add("hi", event_time=HUGE), "event_time"),
    (lambda m: m.feedback(m.get_all()[0].id, HUGE), "reward"),
    (lambda m: m.search("x", since=HUGE), "since"),
    (lambda m: m.sleep(now=HUGE), "now"),
    (lambda m: m.add_fact("k", "v", confidence=HUGE), "confidence"),
    (lambda m: m.link(m.get_all()[0].id, m.get_all()[1].id, "fact", confidence=HUGE), "confidence"),
])
def test_huge_integers_are_value_errors(mem, call, name):
    with pytest.raises(ValueError, match=name):
        call(mem)


@pytest.mark.parametrize("limit", [2 ** 63, 2 ** 64, 10 ** 30, 0, -1])
def test_get_all_limit_is_bounded(mem, limit):
    with pytest.raises(ValueError, match="limit"):
        mem.get_all(limit=limit)


def test_get_all_limit_type(mem):
    with pytest.raises(TypeError, match="limit"):
        mem.get_all(limit=2.5)
    with pytest.raises(TypeError, match="limit"):
        mem.get_all(limit=True)


@pytest.mark.parametrize("bad", [None, 5, 3.5, b"bytes.db", ["x"]])
def test_memory_path_of_the_wrong_type(tmp_path, bad, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match="path"):
        Memory(bad, embedder=None)
    assert list(tmp_path.iterdir()) == []


def test_memory_path_empty_string(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="path"):
        Memory("", embedder=None)


def test_delete_all_with_an_empty_scope_value(mem):
    with pytest.raises(ValueError, match="user_id"):
        mem.delete_all(user_id="")
    with pytest.raises(TypeError, match="agent_id"):
        mem.delete_all(agent_id=5)


# ------------------------------------------------------------------ unbounded knobs (finding 3)
@pytest.mark.parametrize("call,name", [
    (lambda m: m.search_causal("deploy without tests", max_steps=2 ** 31 - 1), "max_steps"),
    (lambda m: m.trace_cause("production crash", max_steps=10 ** 6), "max_steps"),
    (lambda m: m.search_causal("deploy without tests", top_k=2 ** 40), "top_k"),
    (lambda m: m.search_causal("deploy without tests", limit=2 ** 40), "limit"),
    (lambda m: m.intervention_query("deploy without tests", max_depth=10 ** 9), "max_depth"),
    (lambda m: m.search("deploy", top_k=10 ** 9), "top_k"),
    (lambda m: m.search_causal("deploy without tests", nonsense=1), "nonsense"),
])
def test_knobs_have_sane_upper_bounds(mem, call, name):
    with pytest.raises((ValueError, TypeError), match=name):
        call(mem)


def test_max_steps_within_bounds_still_works(mem):
    assert mem.search_causal("deploy without tests", max_steps=50)[0].text == "production crash"


# ------------------------------------------------------------------ damaged files → StoreError
def _filled(path: Path) -> None:
    with Memory(path, embedder=None) as m:
        m.record_many([(f"decision number {i} " + "x" * 200, f"outcome number {i} " + "y" * 200) for i in range(400)])
        m.add([f"turn {i} " + "z" * 300 for i in range(100)], user_id="u")


def test_corrupted_pages_give_a_store_error(db_path):
    _filled(db_path)
    data = bytearray(db_path.read_bytes())
    page = 4096
    for off in range(2 * page, len(data) - page, 3 * page):  # trash every third page after the schema
        data[off:off + page] = os.urandom(page)
    db_path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=str(db_path.name)):
        m = Memory(db_path, embedder=None)
        try:
            m.search("decision number")
            m.search_causal("decision number 7 " + "x" * 200)
            m.get_all(limit=1000)
            m.record_decision("new", "thing")
            m.sleep()
        finally:
            m.close()


def test_truncated_file_gives_a_store_error(db_path):
    _filled(db_path)
    data = db_path.read_bytes()
    db_path.write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError, match=str(db_path.name)):
        m = Memory(db_path, embedder=None)
        try:
            m.search("decision number")
            m.search_causal("decision number 7 " + "x" * 200)
            m.sleep()
        finally:
            m.close()


DISK_FULL = textwrap.dedent("""
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    from causalmem import Memory, StoreError
    m = Memory(sys.argv[1], embedder=None)
    m.record_decision("first", "write")
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
    try:
        for i in range(2000):
            m.record_many([(f"d{i} {j} " + "x" * 500, f"o{i} {j} " + "y" * 500) for j in range(20)])
    except StoreError as exc:
        print("StoreError:", exc)
        sys.exit(0)
    except BaseException as exc:
        print("RAW:", type(exc).__name__, exc)
        sys.exit(1)
    print("no error")
    sys.exit(1)
""")


def test_disk_full_is_a_store_error(db_path):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    r = subprocess.run([sys.executable, "-c", DISK_FULL, str(db_path)], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert db_path.name in r.stdout
    with Memory(db_path, embedder=None) as m:  # what committed before is intact
        assert m.get_all(limit=1)[0].text == "first"
