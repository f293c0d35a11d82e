"""Run the test suite on PostgreSQL: every store a test opens by file path (or ``":memory:"``)
becomes a schema of the session's PostgreSQL database.

Installed by ``tests/conftest.py`` when ``CAUSALMEM_TEST_BACKEND=postgres``, and in every Python
subprocess a test starts (CLI, MCP server, worker processes) through the ``sitecustomize`` next to
this file, which conftest puts on ``PYTHONPATH``. A file path maps to a schema named after a hash
of its absolute path, so reopening the same path reopens the same memory (as with a file);
``":memory:"`` maps to a fresh schema each time. ``Memory.path`` keeps showing the path the test gave.
"""
from __future__ import annotations

import hashlib
import os
import uuid
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

ENV_DSN = "CAUSALMEM_TEST_PG_DB_DSN"
_MAPPED: set[str] = set()  # the paths whose memories live in PostgreSQL


def with_schema(dsn: str, schema: str) -> str:
    parts = urlsplit(dsn)
    q = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "schema"]
    q.append(("schema", schema))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(q), parts.fragment))


def schema_for(path: str) -> str:
    if path == ":memory:":
        return "m_" + uuid.uuid4().hex[:24]
    full = os.path.abspath(path)
    return "f_" + hashlib.blake2b(full.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def qmark(sql: str, params: Any) -> str:
    """The tests' direct SQL uses SQLite's ``?`` placeholders: psycopg's are ``%s``."""
    if params is None or "?" not in sql:
        return sql
    return sql.replace("%", "%%").replace(" IS ?", " IS NOT DISTINCT FROM ?").replace("?", "%s")


class _QmarkConnection:
    """The store's psycopg connection, accepting ``?`` placeholders in ``execute``/``executemany``."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Any = None, **kw: Any) -> Any:
        return self._conn.execute(qmark(sql, params), params, **kw)

    def executemany(self, sql: str, rows: Any) -> Any:
        rows = list(rows)
        cur = self._conn.cursor()
        cur.executemany(qmark(sql, rows[0] if rows else None), rows)
        return cur

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _adapt(store: Any) -> None:
    store.conn = _QmarkConnection(store.conn)
    query = store.query
    store.query = lambda sql, params=None: query(qmark(sql, params or None), params)


def install(dsn: str | None = None) -> None:
    """Substitute ``causalmem.store.open_store`` (idempotent)."""
    import causalmem.store as st
    from causalmem.store.base import check_path

    dsn = dsn or os.environ[ENV_DSN]
    if getattr(st.open_store, "_pg_shim", False):
        return
    original = st.open_store

    def open_store(target: Any = ":memory:", *, backend: str | None = None, **kwargs: Any) -> Any:
        if backend is not None or st.is_dsn(target):
            return original(target, backend=backend, **kwargs)
        path = check_path(target)  # the same TypeError/ValueError as the SQLite backend
        if path != ":memory:":
            # the file stands for the memory: code that checks a path exists (the CLI's read-only
            # commands, tests) sees it as it would see the SQLite file
            if not os.path.exists(path):
                if kwargs.get("read_only"):
                    from causalmem.errors import StoreError

                    raise StoreError(f"no database at {path!r} (read-only open creates nothing)")
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                open(path, "ab").close()
        _MAPPED.add(path)
        store = original(with_schema(dsn, schema_for(path)), **kwargs)
        store.path = path
        _adapt(store)
        return store

    open_store._pg_shim = True  # type: ignore[attr-defined]
    st.open_store = open_store

    # a PostgreSQL memory has no sidecar index files (they live next to a SQLite file): the file
    # standing in for the memory must not get any either
    import causalmem.sidecar as sc

    sidecar_dir = sc.sidecar_dir
    sc.sidecar_dir = lambda db_path: None if db_path is not None and str(db_path) in _MAPPED else sidecar_dir(db_path)
