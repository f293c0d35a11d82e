"""Checks of ``Memory(...)``'s arguments made before anything is opened or loaded: the database
path's directory and the ``embedder=`` setting (no model is loaded, no network is touched)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .config import Config

__all__ = ["check_db_path", "check_embedder_spec", "EMBEDDER_ACCEPTED"]

EMBEDDER_ACCEPTED = ("'auto' (the packaged all-MiniLM-L6-v2), None (semantic channel off), 'torch', 'onnx', "
                     "'onnx-fp32', 'onnx-int8', a local model directory, the name of a sentence-transformers "
                     "model already in the local Hugging Face cache, or an object with encode/model_name/dim")


def check_db_path(path: Any, backend: str | None) -> None:
    """A SQLite file path whose directory does not exist is a FileNotFoundError naming it (a typo in
    the directory must not silently create a new tree); causalmem's default data directory is created."""
    if backend not in (None, "sqlite") or not isinstance(path, (str, os.PathLike)):
        return
    text = os.fspath(path)
    if not isinstance(text, str) or text == ":memory:" or text.startswith(("file:", "postgres:", "postgresql:")) \
            or "://" in text or not text.strip():
        return
    parent = Path(text).expanduser().parent
    if parent.exists():
        return
    from .config import default_db

    if Path(text).expanduser().resolve() == Path(default_db()).expanduser().resolve():
        return  # the default location (CLI, MCP server, adapters): its directory is created on first use
    raise FileNotFoundError(f"path: the directory {str(parent)!r} of {text!r} does not exist "
                            "(create it first, or pass an existing directory)")


def _in_hub_cache(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - comes with sentence-transformers
        return False
    for repo in {name, f"sentence-transformers/{name}"}:
        try:
            if isinstance(try_to_load_from_cache(repo, "config.json"), str):
                return True
        except Exception:  # an invalid repo id: not cached
            continue
    return False


def check_embedder_spec(spec: Any) -> None:
    """A clear error, at construction, for an ``embedder=`` that could never work (wrong type, a
    name that is neither a backend, a local directory nor a cached model); never a network call."""
    if spec is None:
        return
    from .semantic import BACKENDS, resolve_model

    if isinstance(spec, (str, os.PathLike)):
        text = os.fspath(spec)
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"embedder must be one of: {EMBEDDER_ACCEPTED}; got {spec!r}")
        low = text.strip().lower()
        if low == "auto" or low in BACKENDS:
            return
        _name, target, local = resolve_model(text)
        if local:
            return
        name = target[len("sentence-transformers/"):] if target.startswith("sentence-transformers/") else target
        if _in_hub_cache(name) or _in_hub_cache(text.strip()):
            return
        raise ValueError(f"embedder={spec!r} is not a backend, not a local model directory and not a model in "
                         f"the local Hugging Face cache (causalmem does not download models); accepted: "
                         f"{EMBEDDER_ACCEPTED}")
    if all(hasattr(spec, attr) for attr in ("encode", "model_name", "dim")):
        return
    if hasattr(spec, "encode"):
        missing = [a for a in ("model_name", "dim") if not hasattr(spec, a)]
        raise TypeError(f"embedder object {type(spec).__name__} has encode but no {' / '.join(missing)}; "
                        f"accepted: {EMBEDDER_ACCEPTED}")
    raise TypeError(f"embedder must be one of: {EMBEDDER_ACCEPTED}; got {type(spec).__name__} {spec!r}"[:400])


def check_memory_args(path: Any, *, config: Any, clock: Any, embedder: Any, read_only: Any,
                      backend: str | None, views_budget_mb: Any = None) -> None:
    """``Memory(...)``'s arguments, checked before anything is opened: each error names the argument."""
    if views_budget_mb is not None:
        if isinstance(views_budget_mb, bool) or not isinstance(views_budget_mb, (int, float)):
            raise TypeError("views_budget_mb must be a positive number of megabytes, got "
                            f"{type(views_budget_mb).__name__}")
        if not 0 < views_budget_mb < float("inf"):
            raise ValueError(f"views_budget_mb must be a positive number of megabytes, got {views_budget_mb!r}")
    if config is not None and not isinstance(config, Config):
        raise TypeError(f"config must be a causalmem.Config, got {type(config).__name__}")
    if clock is not None and not callable(clock):
        raise TypeError("clock must be a zero-argument callable returning POSIX seconds")
    if not isinstance(read_only, bool):
        raise TypeError(f"read_only must be True or False, got {type(read_only).__name__}")
    check_embedder_spec(embedder)
    if not read_only:
        check_db_path(path, backend)
