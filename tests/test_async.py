"""AsyncMemory: awaitable Memory calls on a bounded pool, safe under cancellation, one Memory shared."""
from __future__ import annotations

import asyncio
import inspect
import threading

import numpy as np
import pytest

from causalmem import Memory
from causalmem.async_memory import AsyncMemory


class GateEmbedder:
    """A real Embedder whose encode blocks until the test opens the gate (and records its threads)."""

    model_name = "gate-test"
    dim = 8

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.threads: set[str] = set()
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()

    def encode(self, texts):
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.threads.add(threading.current_thread().name)
        self.entered.set()
        try:
            assert self.gate.wait(30), "test never opened the gate"
            out = np.zeros((len(texts), self.dim), dtype=np.float32)
            for i, t in enumerate(texts):
                out[i, hash(t) % self.dim] = 1.0
            return out
        finally:
            with self._lock:
                self.active -= 1


def test_every_public_memory_method_is_awaitable():
    public = {n for n, v in inspect.getmembers(Memory, inspect.isfunction) if not n.startswith("_")}
    assert public, "Memory has public methods"
    for name in public - {"now"}:
        assert inspect.iscoroutinefunction(getattr(AsyncMemory, name)), name
    assert not inspect.iscoroutinefunction(AsyncMemory.now)


def test_round_trip_on_a_file(db_path):
    async def main():
        async with AsyncMemory(db_path, embedder=None) as mem:
            edge = await mem.record_decision("deploy without tests", "production crash", confidence=0.9)
            assert edge.relation == "caused"
            acts = await mem.search_causal("deploy without tests")
            assert [a.text for a in acts] == ["production crash"]
            chunks = await mem.add("the cache layer hides slow queries", user_id="ann")
            hits = await mem.search("slow queries", user_id="ann")
            assert hits[0].id == chunks[0].id
            assert (await mem.get(chunks[0].id)).text == "the cache layer hides slow queries"
            assert mem.path == str(db_path)
            return (await mem.stats())["chunks"]

    n = asyncio.run(main())
    with Memory(db_path, embedder=None) as again:  # everything was committed and the file closed
        assert again.stats()["chunks"] == n == 3


def test_errors_propagate_unchanged(db_path):
    async def main():
        async with AsyncMemory(db_path, embedder=None) as mem:
            with pytest.raises(ValueError, match="relation"):
                await mem.record_decision("a", "b", relation="explode")
            with pytest.raises(KeyError):
                await mem.get("no-such-id")

    asyncio.run(main())


def test_constructor_validation(db_path):
    with pytest.raises(ValueError, match="max_workers"):
        AsyncMemory(db_path, embedder=None, max_workers=0)
    with pytest.raises(TypeError, match="memory"):
        AsyncMemory(memory="agent.db")
    with Memory(db_path, embedder=None) as mem:
        with pytest.raises(ValueError, match="either"):
            AsyncMemory(db_path, memory=mem)


def test_pool_is_bounded_and_concurrent_writes_all_land(db_path):
    emb = GateEmbedder()

    async def main():
        mem = AsyncMemory(db_path, embedder=emb, max_workers=2)
        tasks = [asyncio.create_task(mem.add(f"note number {i}", user_id="u")) for i in range(8)]
        await asyncio.sleep(0.05)
        await asyncio.get_running_loop().run_in_executor(None, emb.entered.wait, 10)
        emb.gate.set()
        results = await asyncio.gather(*tasks)
        everything = await mem.get_all(user_id="u")
        await mem.aclose()
        return results, everything

    results, everything = asyncio.run(main())
    assert len(results) == 8 and len(everything) == 8
    assert sorted(c.text for c in everything) == sorted(f"note number {i}" for i in range(8))
    assert emb.max_active <= 2 and len(emb.threads) <= 2


class GateDistiller:
    """A real distiller (returns no items) whose ``distill`` blocks until the test opens the gate.

    Writes no longer encode (vectors are computed by the background worker), so the call that
    blocks inside ``add`` is ``add(..., infer=True)``'s distillation, before its transaction."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()

    def distill(self, turns):
        self.entered.set()
        assert self.gate.wait(30), "test never opened the gate"
        return []


def test_cancelled_await_leaves_no_half_done_write(db_path):
    """One worker: call A is running (blocked in distill), call B waits in the queue. Cancelling both
    awaits: B never starts; A still completes as a whole (its chunk exists, its embedding follows)."""
    gate = GateDistiller()
    emb = GateEmbedder()
    emb.gate.set()

    async def main():
        mem = AsyncMemory(db_path, embedder=emb, max_workers=1, distiller=gate)
        running = asyncio.create_task(mem.add("running write", user_id="u", infer=True))
        await asyncio.get_running_loop().run_in_executor(None, gate.entered.wait, 10)
        queued = asyncio.create_task(mem.add("queued write", user_id="u", infer=True))
        await asyncio.sleep(0.05)
        running.cancel()
        queued.cancel()
        for t in (running, queued):
            with pytest.raises(asyncio.CancelledError):
                await t
        gate.gate.set()
        await mem.aclose()  # waits for the started call to finish

    asyncio.run(main())
    with Memory(db_path, embedder=emb) as mem:
        texts = [c.text for c in mem.get_all(user_id="u")]
        assert texts == ["running write"]
        mem.flush()  # the next open resumes the embedding queue
        assert mem.stats()["embeddings"] == 1
        assert mem.history(mem.get_all(user_id="u")[0].id)[0]["event"] == "create"


def test_two_wrappers_share_one_memory(db_path):
    with Memory(db_path, embedder=None) as shared:
        async def main():
            a = AsyncMemory(memory=shared, max_workers=2)
            b = AsyncMemory(memory=shared, max_workers=2)
            await asyncio.gather(*(a.record_decision(f"cause {i}", f"effect {i}") for i in range(5)),
                                 *(b.add(f"turn {i}", user_id="x") for i in range(5)))
            await a.aclose()
            await b.aclose()
            with pytest.raises(RuntimeError, match="closed"):
                await a.stats()

        asyncio.run(main())
        # the caller owns the shared Memory: still open, and it sees every write
        assert shared.stats()["chunks"] == 15
        assert len(shared.get_all(user_id="x")) == 5
