"""The owner of a ``Memory``'s background threads and child processes: start, stop, join, exit, fork.

One :class:`Background` per open ``Memory`` (``Views.background``). Every thread of that memory is
started here (:meth:`Background.thread`, :meth:`Background.timer`) or registered here with the
callable that stops it (:meth:`Background.add`: the vector keeper, whose thread its own module
starts); the detached hand-off process is started here (:meth:`Background.spawn`). The owner:

* **stops** the parts by name, in the order the caller needs (``Views.close``: query thread,
  embedding worker, vector keeper, then — under the views lock, after the queue is written — the
  reinforcement flusher; the store's close ends the WAL checkpointer), and at :meth:`close` stops
  what is left and joins every thread it started;
* **at interpreter exit** closes every owner still open (a thread killed inside a native encoder
  aborts the process; a daemon thread is killed, so it is stopped first);
* **after** ``os.fork()`` marks every owner *forked* in the child: the parent's threads do not exist
  there, so the child's close stops and joins nothing of them (and starts no hand-off);
* **after an exception in a thread** logs it with its traceback and counts it (``crashes``): the
  thread ends, its owner stays usable (each part starts a new thread at its next kick).

``docs/threads.md`` lists each thread, its lock, and what a crash at any point leaves behind.
"""
from __future__ import annotations

import atexit
import logging
import os
import subprocess
import threading
import weakref
from typing import Any, Callable, Sequence

log = logging.getLogger("causalmem")

__all__ = ["Background", "live_owners", "start_thread", "wait_for_work"]

_LIVE: "weakref.WeakSet[Background]" = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()

#: seconds ``close`` waits for each thread at the end (a thread inside a long native call)
JOIN_S = 30.0
#: seconds ``spawn`` waits for the launcher shell (it only forks the detached command)
SPAWN_WAIT_S = 10.0


def live_owners() -> list["Background"]:
    """Every owner not yet garbage-collected (tests)."""
    with _LIVE_LOCK:
        return list(_LIVE)


def _guarded(owner: "Background | None", name: str, target: Callable[..., Any], args: Sequence[Any]) -> None:
    try:
        target(*args)
    except BaseException as exc:  # noqa: BLE001 - the thread's last word: logged, counted, not re-raised
        if owner is not None:
            with owner._lock:
                owner.crashes[name] = owner.crashes.get(name, 0) + 1
        log.error("causalmem: background thread %s ended by an exception: %r", name, exc, exc_info=True)


def start_thread(name: str, target: Callable[..., Any], *args: Any,
                 owner: "Background | None" = None) -> threading.Thread:
    """A started daemon thread ``name`` running ``target(*args)``; an exception ends it, logged."""
    thread = threading.Thread(target=_guarded, args=(owner, name, target, args), name=name, daemon=True)
    thread.start()
    return thread


def wait_for_work(cond: threading.Condition, has_work: Callable[[], bool], stopped: Callable[[], bool]) -> bool:
    """The loop head of a kicked worker thread (embedding worker, vector keeper): with ``cond`` held,
    wait until ``has_work()`` or ``stopped()``. True when there is work to do and no stop came."""
    while not has_work() and not stopped():
        cond.wait()
    return not stopped()


class Background:
    """The threads and child processes of one ``Memory`` (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._parts: dict[str, Callable[..., Any]] = {}  # name -> stop(timeout=...)
        self._threads: list[threading.Thread] = []
        self.children: list[subprocess.Popen] = []  # only a launcher shell that did not exit in time
        self.spawned = 0  # detached commands started (``spawn``)
        self.crashes: dict[str, int] = {}
        self.closed = False
        self.forked = False
        self.pid = os.getpid()
        with _LIVE_LOCK:
            _LIVE.add(self)

    # ------------------------------------------------------------------ starting
    def add(self, name: str, stop: Callable[..., Any]) -> None:
        """Register a part whose thread its own module starts: ``stop(timeout=...)`` ends and joins it."""
        with self._lock:
            self._parts[name] = stop

    def thread(self, name: str, target: Callable[..., Any], *args: Any) -> threading.Thread:
        """Start daemon thread ``name`` (``target(*args)``), joined at :meth:`close`."""
        thread = start_thread(name, target, *args, owner=self)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        return thread

    def timer(self, name: str, delay: float, target: Callable[[], Any]) -> threading.Timer:
        """``target()`` after ``delay`` seconds on daemon thread ``name`` (``cancel()`` stops it)."""
        timer = threading.Timer(delay, _guarded, args=(self, name, target, ()))
        timer.name = name
        timer.daemon = True
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [timer]
        timer.start()
        return timer

    def spawn(self, argv: Sequence[str], **popen: Any) -> bool:
        """Start ``argv`` detached (the hand-off ``causalmem embed``: it outlives this ``Memory`` on
        purpose): a shell in a session of its own starts it in the background and exits at once; the
        shell is waited for here, so the command is not a child of this process (no zombie when it
        ends, nothing to join) and belongs to init. False in a forked child (its parent owns the work)."""
        if self.forked or os.getpid() != self.pid:
            return False
        shell = subprocess.Popen(["/bin/sh", "-c", '"$@" &', "causalmem-handoff", *argv], start_new_session=True,
                                 **popen)
        self.spawned += 1
        try:
            shell.wait(SPAWN_WAIT_S)
        except subprocess.TimeoutExpired:  # pragma: no cover - a stuck shell: reaped at exit
            self.children.append(shell)
        return True

    # ------------------------------------------------------------------ stopping
    def threads(self) -> list[threading.Thread]:
        """The threads started here that are still alive."""
        with self._lock:
            return [t for t in self._threads if t.is_alive()]

    def stop(self, *names: str, timeout: float | None = JOIN_S) -> None:
        """Stop the named parts (in that order) now; unknown or stopped names are skipped."""
        if self._forked_here():
            return
        for name in names:
            with self._lock:
                stop = self._parts.pop(name, None)
            if stop is not None:
                stop(timeout=timeout)

    def close(self, timeout: float | None = JOIN_S) -> None:
        """Stop every part left and join every thread started here (timers are cancelled first)."""
        if self._forked_here():
            self.closed = True
            return
        with self._lock:
            names = list(self._parts)
        self.stop(*names, timeout=timeout)
        with self._lock:
            threads, self._threads = self._threads, []
        for t in threads:
            if isinstance(t, threading.Timer):
                t.cancel()
        current = threading.current_thread()
        for t in threads:
            if t is not current:
                t.join(timeout)
        self.closed = True

    def _forked_here(self) -> bool:
        if os.getpid() != self.pid:
            self.forked = True
        return self.forked


@atexit.register
def _close_all_at_exit() -> None:
    for owner in live_owners():
        if not owner.closed:
            try:
                owner.close(timeout=JOIN_S)
            except Exception as exc:  # pragma: no cover - exit goes on
                log.debug("causalmem: stopping background work at exit: %s", exc)
        for child in owner.children:
            child.poll()  # reap a hand-off that ended (it runs on by itself otherwise)


def _after_fork_in_child() -> None:
    for owner in live_owners():
        owner.forked = True
        owner._lock = threading.Lock()  # it may have been held by a thread that does not exist here
        owner._threads = []
        owner._parts = {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
