"""PostgreSQL binary wire formats: a binary array read into numpy, array literals, a ``COPY`` sent ahead.

Used by ``postgres.PostgresStore``'s bulk paths: the projection's ``COPY ... TO STDOUT (FORMAT
BINARY)`` leaves array columns as raw bytes (``RawArrayLoader``) and ``array_values`` parses them
without a Python object per cell; ``CopyAhead`` ends a ``COPY FROM`` without waiting for the
server's reply.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from ..errors import StoreError

try:  # optional dependency: causalmem-engine[postgres]
    import psycopg
    from psycopg import sql as pg_sql
except ImportError:  # pragma: no cover - exercised only without the extra
    psycopg = None  # type: ignore[assignment]
    pg_sql = None  # type: ignore[assignment]

# binary array types read as raw bytes by ``_columns``: int8[], int4[], float8[]
RAW_ARRAY_OIDS = (1016, 1007, 1022)


if psycopg is not None:
    from psycopg.adapt import Loader
    from psycopg.copy import LibpqWriter
    from psycopg.pq import Format

    class RawArrayLoader(Loader):
        """An array column left as its binary wire form (parsed by ``array_values``)."""

        format = Format.BINARY

        def load(self, data: Any) -> Any:
            return data


    class CopyAhead(LibpqWriter):
        """Ends a ``COPY FROM`` without waiting for the server's reply (``postgres.PostgresStore._copy_ahead``);
        on an error while writing, ends it at once as psycopg does."""

        def __init__(self, cursor: Any, on_sent: Callable[[], None]) -> None:
            super().__init__(cursor)
            self.on_sent = on_sent  # called once the end is handed to libpq, before the flush

        def finish(self, exc: BaseException | None = None) -> None:
            if exc is not None:
                super().finish(exc)
                return
            self._pgconn.put_copy_end()
            self.on_sent()
            self._pgconn.flush()  # whatever the socket takes now; the rest goes out when settled


def array_values(data: Any, code: str) -> np.ndarray:
    """The elements of a one-dimensional binary array without NULLs (header: ndim, flags, element
    type, then size and lower bound per dimension; each element: 4-byte length, value)."""
    buf = bytes(data)
    ndim = int.from_bytes(buf[0:4], "big")
    if ndim == 0:
        return np.empty(0, dtype=code)
    if ndim != 1 or int.from_bytes(buf[4:8], "big"):
        raise StoreError("unexpected array layout from the server")
    n = int.from_bytes(buf[12:16], "big")
    cells = np.frombuffer(buf, dtype=np.dtype([("len", ">i4"), ("v", code)]), offset=20)
    if len(cells) != n or bool((cells["len"] != np.dtype(code).itemsize).any()):
        raise StoreError("unexpected array layout from the server")
    return cells["v"]


def array_literal(values: Any) -> Any:
    """A list of ints or floats as an array literal (untyped; the statement casts it): numbers
    only, each as Python writes it (``repr`` of a float reads back as the same double)."""
    return pg_sql.SQL("'{" + ",".join(map(repr, values)) + "}'")


def int_array(values: Iterable[int]) -> str:
    """An integer array as its text literal: bound once as text, parsed by the server (psycopg
    adapts a Python list element by element)."""
    return "{" + ",".join(str(int(v)) for v in values) + "}"
