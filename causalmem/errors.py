"""Domain errors. Argument errors use the built-in ValueError/TypeError/KeyError."""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, ContextManager


class CausalMemError(Exception):
    """Base class of causalmem's own errors."""


class SchemaVersionError(CausalMemError):
    """The database was written by a newer causalmem schema; it is left untouched."""


class StoreError(CausalMemError):
    """The database file cannot be opened or is not a causalmem/SQLite database."""


class LLMError(CausalMemError):
    """An OpenAI-compatible endpoint failed or answered something unusable."""


class ConfigurationError(CausalMemError, ValueError):
    """A feature was asked for that is not configured (e.g. infer=True without an LLM)."""


def guard_public_methods(cls: type, guard: Callable[[Any], ContextManager[Any]]) -> type:
    """Run every public method of ``cls`` inside ``guard(self)`` (the facade: a raw backend error
    such as disk full, a damaged page or a lock surfaces as a ``StoreError`` naming the file)."""
    for name, fn in list(vars(cls).items()):
        if name.startswith("_") or not inspect.isfunction(fn):
            continue

        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(fn)
            def method(self: Any, *args: Any, **kwargs: Any) -> Any:
                with guard(self):
                    return fn(self, *args, **kwargs)
            return method

        setattr(cls, name, wrap(fn))
    return cls
