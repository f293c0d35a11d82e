"""Domain errors. Argument errors use the built-in ValueError/TypeError/KeyError."""
from __future__ import annotations

import functools
import inspect
import time
from typing import Any, Callable, ContextManager


class CausalMemError(Exception):
    """Base class of causalmem's own errors."""


class SchemaVersionError(CausalMemError):
    """The database was written by a newer causalmem schema; it is left untouched."""


class StoreError(CausalMemError):
    """The database file cannot be opened or is not a causalmem/SQLite database."""


class PurgeIncompleteError(StoreError):
    """A purge committed (the scope's rows are gone) but the compaction after it failed (the disk full,
    a lock): deleted bytes may remain in the store's free space until a later purge compacts.
    ``purged``: how many chunks the committed purge removed."""

    def __init__(self, purged: int, path: str, cause: str) -> None:
        self.purged = purged
        super().__init__(
            f"purged {purged} chunk(s) of the scope from {path!r}: committed, no search, export or index "
            f"returns them; but compacting the store afterwards failed ({cause}), so their deleted bytes may "
            "remain in its free space. Call delete_all(..., purge=True) again (the same, now empty, scope is "
            "enough) when the store has room: it compacts again")


class RetryableStoreError(StoreError):
    """The server rolled a whole transaction back (deadlock, serialization failure): the public
    call is run again by the facade; a caller sees it only after every retry failed."""


#: attempts of a public call whose transaction the server rolled back (``RetryableStoreError``)
RETRIES = 5


class LLMError(CausalMemError):
    """An OpenAI-compatible endpoint failed or answered something unusable."""


class ConfigurationError(CausalMemError, ValueError):
    """A feature was asked for that is not configured (e.g. infer=True without an LLM)."""


def without_traceback(exc: BaseException) -> BaseException:
    """``exc`` with its traceback, and those of the exceptions it chains to, dropped (after it was logged).

    A background thread keeps its last failure to report it later; with its traceback it would also keep
    every frame of the failed step alive, and their locals with them (a vector segment's mapped files,
    whole index snapshots) until the cyclic collector happens to run, past ``close()``."""
    todo: list[BaseException | None] = [exc]
    seen: set[int] = set()
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        e.__traceback__ = None
        todo.extend((e.__cause__, e.__context__))
    return exc


def run_retrying(once: Callable[[], Any], may_retry: Callable[[], bool] = lambda: True) -> Any:
    """``once()``, run again when the server rolled its transaction back (``RetryableStoreError``),
    up to ``RETRIES`` times with a short growing pause, while ``may_retry()`` allows it."""
    for attempt in range(RETRIES):
        try:
            return once()
        except RetryableStoreError:
            if attempt == RETRIES - 1 or not may_retry():
                raise
            time.sleep(0.01 * 2 ** attempt)
    raise AssertionError("unreachable")


def guard_public_methods(cls: type, guard: Callable[[Any], ContextManager[Any]],
                         may_retry: Callable[[Any], bool] | None = None) -> type:
    """Run every public method of ``cls`` inside ``guard(self)`` (the facade: a raw backend error
    such as disk full, a damaged page or a lock surfaces as a ``StoreError`` naming the file).

    A ``RetryableStoreError`` (the server rolled the transaction back) re-runs the whole call, up
    to ``RETRIES`` times with a short growing pause, when ``may_retry(self)`` says no outer
    transaction is open (a nested public call leaves the retry to the outermost one)."""
    for name, fn in list(vars(cls).items()):
        if name.startswith("_") or not inspect.isfunction(fn):
            continue

        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(fn)
            def method(self: Any, *args: Any, **kwargs: Any) -> Any:
                def once() -> Any:
                    with guard(self):
                        return fn(self, *args, **kwargs)
                return run_retrying(once, lambda: may_retry is not None and may_retry(self))
            return method

        setattr(cls, name, wrap(fn))
    return cls
