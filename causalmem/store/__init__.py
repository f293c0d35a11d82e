"""The truth layer: store backends behind one contract (``base.StoreBackend``).

``Store`` is the default backend (SQLite, embedded). Row types, array layouts and the
backend-independent helpers (``text_hash``, ``new_ids``) live in ``base``.
"""
from __future__ import annotations

from .base import (
    ChunkKey, ChunkRow, EdgeRow, StoreBackend, new_id, new_ids, text_hash,
)
from .sqlite import MIGRATIONS, SCHEMA_VERSION, SQLiteStore

Store = SQLiteStore

__all__ = ["Store", "SQLiteStore", "StoreBackend", "ChunkRow", "EdgeRow", "ChunkKey", "MIGRATIONS",
           "SCHEMA_VERSION", "text_hash", "new_id", "new_ids"]
