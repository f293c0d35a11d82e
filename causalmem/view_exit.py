"""The views' interpreter-exit hook: a normal exit closes every ``Views`` still open as
``Memory.close()`` would (index files saved, reinforcement written), without a thread and not in a
forked child.

Imported after :mod:`causalmem.background`, so its ``atexit`` hook is registered later and runs
first (``atexit`` runs hooks last-in, first-out): the views close, then the owner of the background
threads stops what is left.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from typing import Any

from . import background as _background  # noqa: F401 - its exit hook must be registered before this one

log = logging.getLogger("causalmem")

__all__ = ["EXIT_LOCK_S", "close_at_exit", "register_open"]

_OPEN: "weakref.WeakSet[Any]" = weakref.WeakSet()
_OPEN_LOCK = threading.Lock()
#: seconds the exit hook waits for a views lock a background thread holds before it gives up the save
EXIT_LOCK_S = 10.0


def register_open(views: Any) -> None:
    """``views`` (a ``Views``: ``closed``, ``pid``, ``lock``, ``store``, ``close()``) is closed at exit."""
    with _OPEN_LOCK:
        _OPEN.add(views)


@atexit.register  # registered after ``background``'s hook, so it runs first: close, then stop what is left
def _close_at_exit() -> None:
    """A normal interpreter exit closes every ``Views`` still open as ``Memory.close()`` would (the
    index files saved, the reinforcement written). Not in a forked child (the parent owns the store
    and its files) and not while another thread holds the views lock past ``EXIT_LOCK_S`` (a daemon
    thread stuck in a native call: the files stay as they are, valid or ignored by their header)."""
    with _OPEN_LOCK:
        todo = [v for v in _OPEN if not v.closed]
    # a tenant's views (``ScopedStore.pooled``) first: it writes its queued reinforcement through the
    # connection the whole store's views close
    todo.sort(key=lambda v: not getattr(v.store, "pooled", False))
    for views in todo:
        close_at_exit(views)


def close_at_exit(views: Any) -> bool:
    """What the exit hook does for one ``Views`` still open; True when it closed it."""
    if views.closed or views.pid != os.getpid():
        return False
    # probed, not held: close stops the embedding worker outside the lock (its last batch needs it)
    if not views.lock.acquire(timeout=EXIT_LOCK_S):
        log.warning("causalmem: %s not closed at exit (its lock is held by another thread)", views.store.path)
        return False
    views.lock.release()
    try:
        views.close()
    except Exception as exc:  # exit goes on
        log.warning("causalmem: closing %s at exit: %s", views.store.path, exc)
        return False
    return True
