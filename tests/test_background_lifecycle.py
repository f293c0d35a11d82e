"""Every background thread and child process of a ``Memory`` ends with it (``causalmem/background.py``).

200 ``Memory`` objects at the default configuration (the model installed: embedding worker, vector
keeper, query thread, WAL checkpointer, hand-off rule "auto"), each with writes and searches, opened
and closed one after the other: afterwards no thread of theirs is alive, no child process is left
and the process holds no more file descriptors than after the first few.
"""
from __future__ import annotations

import os
import threading
import time

import psutil
import pytest

from causalmem import Memory
from causalmem.background import Background, live_owners

N_MEMORIES = 200
HAND_OFF_EVERY = 40  # every 40th memory closes at once after its writes (its rows handed off)
WARM_UP = 5  # the model, tokenizer and kernel open their files once, in the first few


def _ours() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("causalmem") and t.is_alive()]


@pytest.mark.timeout(900)
def test_two_hundred_memories_leave_no_thread_child_or_descriptor(tmp_path, monkeypatch):
    monkeypatch.delenv("CAUSALMEM_EMBED_HANDOFF", raising=False)  # the default rule, not the suite's "off"
    proc = psutil.Process()
    children_before = {c.pid for c in proc.children(recursive=True)}
    threads_before = {t.ident for t in _ours()}
    fds_after_warm_up = None
    for i in range(N_MEMORIES):
        path = tmp_path / f"m{i}.db"
        with Memory(str(path)) as mem:  # the default configuration
            mem.record_decision(f"deploy build {i} without tests", f"production crash {i}")
            mem.add([f"note {i}: the cache was warmed before the release", f"note {i}: rotate the keys"])
            assert mem.search(f"deploy build {i}", top_k=3)
            model = mem.stats()["embedder"]
            if i % HAND_OFF_EVERY:  # the worker and the keeper run (the model loaded once, shared)
                assert mem.wait_embedded(60)
                assert mem.search("rotate the keys", top_k=2)
                if i % 7 == 0:
                    mem.add(f"note {i}: written just before close")  # embedded at close, not handed off
            # else: closed at once, the model not loaded by this memory: its rows are handed to a
            # detached `causalmem embed` (the default rule), which must end by itself
        left = [t for t in _ours() if t.ident not in threads_before]
        assert not left, f"after Memory {i}: threads still alive: {[t.name for t in left]}"
        if i + 1 == WARM_UP:
            fds_after_warm_up = proc.num_fds()
    assert fds_after_warm_up is not None
    assert not [o for o in live_owners() if not o.closed]
    children = [c for c in proc.children(recursive=True) if c.pid not in children_before]
    assert not children, f"child processes left: {[(c.pid, c.status()) for c in children]}"
    assert proc.num_fds() <= fds_after_warm_up, (fds_after_warm_up, proc.num_fds())
    # the detached hand-offs (not children of this process) end by themselves once their rows are embedded
    deadline = time.monotonic() + 300
    while _hand_offs(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _hand_offs(tmp_path)
    if os.environ.get("CAUSALMEM_TEST_BACKEND", "sqlite") == "postgres":
        return  # a PostgreSQL memory hands nothing off: its queue waits for the next long-lived opener
    assert any((tmp_path / f"m{i}.db").exists() for i in range(0, N_MEMORIES, HAND_OFF_EVERY))
    for i in range(0, N_MEMORIES, HAND_OFF_EVERY):  # and they did their work
        with Memory(str(tmp_path / f"m{i}.db"), embedder=None) as mem:
            assert mem._store.chunks_missing_embedding(model, limit=1) == []


def _hand_offs(directory) -> list[int]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info.get("cmdline") or []
        if any(str(directory) in part for part in cmd):
            found.append(p.pid)
    return found


def test_a_thread_that_raises_is_logged_and_counted_and_close_still_joins(caplog):
    owner = Background("test")
    release = threading.Event()

    def boom() -> None:
        release.wait(10)
        raise RuntimeError("a bug in a background thread")

    t = owner.thread("causalmem-test", boom)
    release.set()
    t.join(10)
    assert not t.is_alive()
    assert owner.crashes == {"causalmem-test": 1}
    assert any("a bug in a background thread" in r.getMessage() for r in caplog.records)
    owner.close()
    assert owner.closed and owner.threads() == []


def test_a_forked_child_does_not_stop_or_join_its_parents_threads():
    owner = Background("test")
    stop = threading.Event()
    stopped_in = []
    owner.add("part", lambda timeout=None: stopped_in.append(os.getpid()))
    owner.thread("causalmem-test", lambda: stop.wait(30))
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread does not exist here; close stops nothing of it
        try:
            owner.close()
            os._exit(0 if owner.forked and stopped_in == [] else 3)
        finally:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert [t.name for t in owner.threads()] == ["causalmem-test"]  # the parent's is still running
    stop.set()
    owner.close()
    assert stopped_in == [os.getpid()] and owner.threads() == []
