"""The truth layer: store backends behind one contract (``base.StoreBackend``).

``open_store`` picks the backend: a ``postgresql://`` DSN opens the PostgreSQL backend
(``postgres.PostgresStore``, many processes on many hosts), anything else a SQLite file or
``":memory:"`` (``sqlite.SQLiteStore``, the embedded default). Row types, array layouts and the
backend-independent helpers (``text_hash``, ``new_ids``) live in ``base``.
"""
from __future__ import annotations

import os
from typing import Any

from .base import (
    ChunkKey, ChunkRow, EdgeRow, StoreBackend, is_dsn, new_id, new_ids, text_hash,
)
from .sqlite import MIGRATIONS, SCHEMA_VERSION, SQLiteStore

BACKENDS = ("sqlite", "postgres")


def open_store(target: str | os.PathLike[str] = ":memory:", *, backend: str | None = None,
               busy_timeout_ms: int = 30000, read_only: bool = False) -> StoreBackend:
    """Open the store named by ``target``: a ``postgresql://`` DSN selects PostgreSQL, a file path or
    ``":memory:"`` SQLite. ``backend`` ("sqlite" / "postgres") forces one and checks the target fits."""
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)} or None, got {backend!r}")
    if backend == "postgres" or (backend is None and is_dsn(target)):
        if not is_dsn(target):
            raise ValueError(f"backend='postgres' needs a postgresql:// DSN as the path, got {target!r}")
        from .postgres import PostgresStore  # imported on use: psycopg only for PostgreSQL users

        return PostgresStore(str(target), busy_timeout_ms=busy_timeout_ms, read_only=read_only)
    if is_dsn(target):
        raise ValueError("backend='sqlite' needs a file path or ':memory:', got a postgresql:// DSN")
    return SQLiteStore(target, busy_timeout_ms=busy_timeout_ms, read_only=read_only)


def Store(target: Any = ":memory:", **kwargs: Any) -> StoreBackend:  # noqa: N802 - the facade's historic name
    """``open_store`` (looked up at call time, so a test harness may substitute it)."""
    return open_store(target, **kwargs)


__all__ = ["Store", "open_store", "is_dsn", "BACKENDS", "SQLiteStore", "StoreBackend", "ChunkRow", "EdgeRow",
           "ChunkKey", "MIGRATIONS", "SCHEMA_VERSION", "text_hash", "new_id", "new_ids"]
