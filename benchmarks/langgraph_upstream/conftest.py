"""Run LangGraph's own SqliteStore test module, unchanged, against causalmem's CausalMemStore.

Not part of the test suite (LangGraph's module is not copied into this repository, and
``langgraph-checkpoint-sqlite`` is not a dependency). With a langgraph checkout and that package::

    cp <langgraph>/libs/checkpoint-sqlite/tests/test_store.py benchmarks/langgraph_upstream/
    pip install langgraph-checkpoint-sqlite      # in a venv with causalmem
    python -m pytest -q benchmarks/langgraph_upstream/test_store.py

The upstream module does `from langgraph.store.sqlite import SqliteStore`; this conftest is
imported first and rebinds that name to `SqliteStoreShim`, so every construction in the module
(`store` fixture, `create_vector_store`, `TestSqliteStore`) builds a CausalMemStore on a fresh
temporary SQLite file. The test module itself is unchanged.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from typing import Iterator

import langgraph.store.sqlite as _lg_sqlite

from causalmem.integrations.langgraph import CausalMemStore


class SqliteStoreShim(CausalMemStore):
    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: str, *, index: dict | None = None, ttl: object = None,
                         **kw: object) -> Iterator[CausalMemStore]:
        tmpdir = None
        if conn_string == ":memory:" and os.environ.get("CM_REAL_MEMORY"):
            path = ":memory:"  # optional: CausalMemStore's own in-memory mode
        elif conn_string == ":memory:":
            tmpdir = tempfile.mkdtemp(prefix="cm-lg-")
            path = os.path.join(tmpdir, "store.db")
        else:
            path = conn_string  # upstream passes an (empty) NamedTemporaryFile path
        if index is None:
            store = cls(path, embedder=None)  # lexical + graph, no model (fast)
        else:
            store = cls(path, index=index)
        try:
            yield store
        finally:
            store.close()
            if tmpdir:
                shutil.rmtree(tmpdir, ignore_errors=True)

    def setup(self) -> None:  # SqliteStore runs migrations here; nothing to do for CausalMemStore
        pass


_lg_sqlite.SqliteStore = SqliteStoreShim
