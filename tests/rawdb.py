"""Look inside a memory's tables directly, on whichever backend the suite runs on.

Some tests check what is stored (counts of vectors, rows of other scopes, meta keys) without going
through ``Memory``. On the SQLite run that is the file, opened with the ``sqlite3`` module; on the
PostgreSQL run (``CAUSALMEM_TEST_BACKEND=postgres``) it is the schema the test shim maps that file
path to, opened with psycopg. SQL is written once, in the dialect both accept (``?`` placeholders
are translated; use ``IS [NOT] DISTINCT FROM`` rather than SQLite's ``IS NOT``).
"""
from __future__ import annotations

import os
import sqlite3
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

PG_MODE = os.environ.get("CAUSALMEM_TEST_BACKEND", "sqlite") == "postgres"


class _PGConnection:
    """The few sqlite3.Connection methods the tests use, over psycopg on the mapped schema."""

    def __init__(self, path: str, read_only: bool) -> None:
        import psycopg
        from causalmem_pg_shim import ENV_DSN, qmark, schema_for
        from psycopg import sql

        parts = urlsplit(os.environ[ENV_DSN])
        query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "schema"])
        self._qmark = qmark
        self._conn = psycopg.connect(urlunsplit(parts._replace(query=query)))
        self._conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema_for(path))))
        if read_only:
            self._conn.execute("SET TRANSACTION READ ONLY")

    def execute(self, sql: str, params: Any = ()) -> Any:
        params = tuple(params)
        return self._conn.execute(self._qmark(sql, params or None), params or None)

    def commit(self) -> None:
        self._conn.commit()

    def close(self) -> None:
        self._conn.close()


def connect(path: Any, *, read_only: bool = False) -> Any:
    """A connection to the memory stored at ``path`` (``execute``/``commit``/``close``)."""
    if PG_MODE:
        return _PGConnection(str(path), read_only)
    if read_only:
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    return sqlite3.connect(path)
