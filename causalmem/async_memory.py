"""AsyncMemory: every public ``Memory`` call as a coroutine, run on a bounded thread pool.

An interface over the facade, for asyncio agents (LangGraph ``abatch``, AutoGen, mem0's
``AsyncMemory``). ``Memory`` is thread-safe (one in-process lock, one transaction per public write),
so several event loops, threads and ``AsyncMemory`` wrappers may share one ``Memory``.

Cancellation: a coroutine cancelled while its call waits in the pool's queue cancels the call (it
never starts); once started, the call runs to its end in its worker thread and commits or rolls
back as one transaction, whatever happens to the awaiting task. A cancelled ``await`` therefore
never leaves a half-done write behind: the write happened entirely, or not at all.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import os
import threading
from typing import Any, Callable

from .memory import Memory

__all__ = ["AsyncMemory"]

# Public methods of Memory that are cheap and touch no I/O stay synchronous on AsyncMemory.
_SYNC_ONLY = frozenset({"now"})


def _public_methods() -> list[str]:
    return sorted(name for name, value in inspect.getmembers(Memory, inspect.isfunction)
                  if not name.startswith("_") and name not in _SYNC_ONLY)


class AsyncMemory:
    """Awaitable facade over one :class:`causalmem.Memory`.

    >>> async with AsyncMemory("agent.db", embedder=None) as mem:
    ...     await mem.record_decision("deploy without tests", "production crash")
    ...     hits = await mem.search("crash")

    ``AsyncMemory(path, **memory_kwargs)`` opens (and on ``aclose`` closes) its own ``Memory``;
    ``AsyncMemory(memory=mem)`` shares an existing one (the caller keeps ownership and closes it).
    ``max_workers`` bounds the threads running memory calls (default ``min(4, cpu count)``);
    calls beyond it wait in the pool's queue.
    """

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, memory: Memory | None = None,
                 max_workers: int | None = None, **memory_kwargs: Any) -> None:
        if memory is not None:
            if not isinstance(memory, Memory):
                raise TypeError(f"memory must be a causalmem.Memory, got {type(memory).__name__}")
            if memory_kwargs or path != ":memory:":
                raise ValueError("pass either memory= or a path and Memory keyword arguments, not both")
            self._owns = False
            self.memory = memory
        else:
            self._owns = True
            self.memory = Memory(path, **memory_kwargs)
        if max_workers is None:
            max_workers = max(1, min(4, os.cpu_count() or 1))
        if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"max_workers must be a positive integer, got {max_workers!r}")
        self.max_workers = max_workers
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="causalmem")
        self._closed = False
        self._close_lock = threading.Lock()

    # ------------------------------------------------------------------ plumbing
    async def run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` on the pool and await its result (the path every method takes)."""
        if self._closed:
            raise RuntimeError("this AsyncMemory is closed")
        loop = asyncio.get_running_loop()
        # run_in_executor's future is chained to the pool's: cancelling the await cancels a call that
        # has not started; a started call cannot be cancelled and finishes in its thread.
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        # Non-callable public attributes (path, config, embedder, judge, distiller) read through.
        if name.startswith("_"):
            raise AttributeError(name)
        value = getattr(self.memory, name)
        if callable(value):
            raise AttributeError(f"AsyncMemory has no method {name!r}")
        return value

    def now(self) -> float:
        return self.memory.now()

    def __repr__(self) -> str:
        return f"AsyncMemory({self.memory!r}, max_workers={self.max_workers})"

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> "AsyncMemory":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Wait for calls already submitted, stop the pool, and close the Memory if this object opened it."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._shutdown)

    def _shutdown(self) -> None:
        self._executor.shutdown(wait=True)
        if self._owns:
            self.memory.close()

    async def close(self) -> None:  # type: ignore[override]
        """Same as :meth:`aclose` (``Memory.close`` under its own name)."""
        await self.aclose()


def _make_async(name: str) -> Callable[..., Any]:
    target = getattr(Memory, name)

    @functools.wraps(target)
    async def method(self: AsyncMemory, *args: Any, **kwargs: Any) -> Any:
        return await self.run(getattr(self.memory, name), *args, **kwargs)

    method.__doc__ = f"Awaitable :meth:`causalmem.Memory.{name}`.\n\n{target.__doc__ or ''}"
    return method


for _name in _public_methods():
    if _name in ("close",):
        continue
    setattr(AsyncMemory, _name, _make_async(_name))
del _name
