"""Writes before background embedding: the worker steps aside while writes stream in.

On a machine of few cores the embedding worker's encoder (a thread pool on every core) and a bulk
write compete for the same CPU: ``record_many`` at the default configuration ran at half the speed
of ``embedder=None`` while the worker encoded a backlog. A write is what a caller waits for; the
backlog is what nobody waits for (a search never waits for it). So the worker asks the gate before
each encode (and before it loads the model): it goes on once no write has been in flight for
``IDLE_S``, and in any case after ``MAX_WAIT_S`` — one sub-batch at a time, so a process that writes
without pause still gets its vectors, only later. Someone waiting for the vectors (``flush()``,
``wait_embedded``, ``close(drain=True)``) or a stop releases the worker at once.

Views layer: ``Views.write`` counts its public writes here (the worker's own transaction that
stores vectors does not count).
"""
from __future__ import annotations

import threading
import time
from typing import Callable

__all__ = ["WriteGate", "IDLE_S", "MAX_WAIT_S"]

#: quiet time after the last write before the worker encodes again (a stream of batches, each one
#: followed by a search or by the caller's own work, keeps the gate closed)
IDLE_S = 0.2
#: longest a worker waits for a quiet moment before it encodes one sub-batch anyway
MAX_WAIT_S = 1.0


class WriteGate:
    """How many writes are in flight and when the last one ended."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._cond = threading.Condition()
        self._clock = clock
        self.in_flight = 0
        self.last_end = float("-inf")
        self.waits = 0  # waits that ended by a quiet moment (tests look at these)
        self.forced = 0  # waits that ended at MAX_WAIT_S with writes still streaming

    def begin(self) -> None:
        with self._cond:
            self.in_flight += 1

    def end(self) -> None:
        with self._cond:
            self.in_flight -= 1
            self.last_end = self._clock()
            self._cond.notify_all()

    def wake(self) -> None:
        """Re-check the release condition of a waiting worker now (a stop, a flush)."""
        with self._cond:
            self._cond.notify_all()

    def quiet_for(self) -> float:
        """Seconds since the last write ended (0 while one is in flight)."""
        with self._cond:
            return 0.0 if self.in_flight else max(0.0, self._clock() - self.last_end)

    def wait_quiet(self, release: Callable[[], bool] = lambda: False, *, idle: float = IDLE_S,
                   max_wait: float = MAX_WAIT_S) -> bool:
        """Block until no write has been in flight for ``idle`` seconds, ``release()`` is true or
        ``max_wait`` seconds passed; True unless it gave up waiting at ``max_wait``."""
        with self._cond:
            start = self._clock()
            while True:
                if release():
                    return True
                now = self._clock()
                quiet = 0.0 if self.in_flight else now - self.last_end
                if quiet >= idle:
                    if now > start:
                        self.waits += 1
                    return True
                if now - start >= max_wait:
                    self.forced += 1
                    return False
                self._cond.wait(min(idle - quiet, max_wait - (now - start)) + 0.001)
