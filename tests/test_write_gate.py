"""The background embedding worker steps aside while writes stream in (``write_gate``), still makes
progress, and lets go of its pauses as soon as someone waits for the vectors.

The gate's own rules are checked with real waits (lower bounds only: a loaded machine makes waits
longer, never shorter); the worker's use of it with the real model on a real SQLite file, by the
order of events in the worker thread (beside a write that stays in flight, every encode comes right
after a gate wait that ran to its time limit; after a flush, the waits let go at once), not by timing."""
from __future__ import annotations

import threading
import time


from causalmem import Memory
from causalmem.write_gate import WriteGate


def test_no_write_no_wait():
    gate = WriteGate()
    t = time.monotonic()
    assert gate.wait_quiet(idle=5.0, max_wait=10.0)
    assert time.monotonic() - t < 5.0 and gate.forced == 0


def test_waits_for_a_quiet_moment_after_the_last_write():
    gate = WriteGate()
    t = time.monotonic()  # before the write ends: the quiet moment is counted from its end, never earlier
    gate.begin()
    gate.end()
    assert gate.wait_quiet(idle=0.3, max_wait=30.0)
    assert time.monotonic() - t >= 0.3 and gate.waits == 1 and gate.forced == 0


def test_a_write_in_flight_holds_it_until_the_time_limit():
    gate = WriteGate()
    gate.begin()
    t = time.monotonic()
    assert gate.wait_quiet(idle=0.05, max_wait=0.4) is False  # gave up waiting: one sub-batch goes anyway
    assert time.monotonic() - t >= 0.4 and gate.forced == 1
    assert gate.quiet_for() == 0.0
    gate.end()
    assert gate.in_flight == 0


def test_release_lets_go_at_once():
    gate = WriteGate()
    gate.begin()
    flag = threading.Event()
    out = []

    def waiter():
        out.append(gate.wait_quiet(flag.is_set, idle=60.0, max_wait=120.0))

    th = threading.Thread(target=waiter)
    th.start()
    time.sleep(0.1)
    assert th.is_alive()
    flag.set()
    gate.wake()
    th.join(30)
    assert not th.is_alive() and out == [True] and gate.forced == 0
    gate.end()


def test_worker_steps_aside_for_writes_yet_embeds_and_a_flush_releases_it(tmp_path, embedder):
    """A write that never ends (the gate held open) lets the worker through one sub-batch per time
    limit only — still progress — and a ``flush()`` releases it at once. (``embedder``: skips
    where the packaged model is not installed.)"""
    mem = Memory(tmp_path / "m.db")  # the default: model installed, background embedding
    views = mem._views
    gate = views.write_gate
    events: list[tuple] = []
    real_wait = gate.wait_quiet

    def wait_quiet(*a, **k):
        got = real_wait(*a, **k)
        events.append(("wait", threading.current_thread().name, got))
        return got

    gate.wait_quiet = wait_quiet  # type: ignore[method-assign]
    emb = mem.embedder
    real_encode = emb.encode

    def encode(texts):
        events.append(("encode", threading.current_thread().name, len(texts)))
        return real_encode(texts)

    emb.encode = encode  # type: ignore[method-assign]
    try:
        mem.record_many([(f"we changed setting {i}", f"the queue {i} drained") for i in range(300)])
        gate.begin()  # a write in flight from now on
        deadline = time.monotonic() + 300
        while views.embedding._worker is None or views.embedding._worker.embedded == 0:
            assert time.monotonic() < deadline, "the worker made no progress beside a write in flight"
            time.sleep(0.05)
        held = list(events)
        # a pass is left for the flush to release whatever the open-time and deferred-start timers did:
        # one more pair written while the worker is kept out of its embedding pass (embed_lock), and
        # the flush registered as a waiter before the worker may go on
        with views.embed_lock:
            mem.record_many([("we changed setting x", "the queue x drained")])
            flusher = threading.Thread(target=mem.flush)
            flusher.start()  # someone waits for the vectors: no more stepping aside, the write still in flight
            while views.embedding._worker._waiters == 0:
                assert time.monotonic() < deadline, "the flush never waited"
                time.sleep(0.01)
            mark = len(events)
        flusher.join(300)
        assert not flusher.is_alive()
        released = events[mark:]
        assert gate.in_flight == 1
        gate.end()
        assert mem.stats()["embeddings"] == mem.stats()["chunks"] == 602
    finally:
        mem.close()
    worker = [e for e in held if e[1] == "causalmem-embed"]
    encodes = [i for i, e in enumerate(worker) if e[0] == "encode"]
    assert len(encodes) >= 4, worker  # a batch of 256 texts in sub-batches of 64
    for i in encodes:  # each encode right after a gate wait that ran to its time limit
        assert i > 0 and worker[i - 1] == ("wait", "causalmem-embed", False), worker[max(0, i - 3): i + 1]
    assert gate.forced >= len(encodes)
    after = [e for e in released if e[1] == "causalmem-embed"]
    waits = [e for e in after if e[0] == "wait"]
    assert waits and all(e[2] for e in waits), after  # released, with the write still in flight
