"""One tenant's window on a PostgreSQL store: what a per-scope ``Views`` reads.

``ScopedStore`` wraps the process's one ``PostgresStore`` (one connection) and presents only the
rows of one ``user_id``: the chunk columns and texts the chunk table and BM25 index are built from,
the chunk rows and edge states the follower patches in, and the edges and co-occurrence pairs of
the projection. Everything else (writes, lookups by nid, the transaction) goes to the wrapped store
unchanged: nids are the store's own, so a hit, an edge or a write means the same row everywhere.

The change stream is not the wrapped store's (its ``foreign_changes`` is consumed once per process
and leaves out the process's own commits): ``view_pool.ViewPool`` reads the change log once per
call and hands each tenant's views the keys of its own rows (``deliver``); ``data_version`` and
``foreign_changes`` here report what was handed over. ``close`` leaves the wrapped store open.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np

from ._common import chunk_columns_of
from .base import PROJECTION_CO_DTYPE, PROJECTION_EDGE_DTYPE, ChunkColumns, ChunkRow

__all__ = ["ScopedStore", "tenant_changes"]


class ScopedStore:
    """The rows of one ``user_id`` of a PostgreSQL store (see the module docstring)."""

    def __init__(self, base: Any, user_id: str) -> None:
        self.base = base
        self.user_id = user_id
        self._version = 0
        self._pending: dict[str, set[int]] | None = {}
        self.closed = False

    def __getattr__(self, name: str) -> Any:
        if name == "writer_twin":  # searches' reinforcement is written by the next write of the scope
            raise AttributeError(name)
        return getattr(self.base, name)

    # ------------------------------------------------------------------ the change stream (the pool's)
    def deliver(self, delta: dict[str, set[int]] | None) -> None:
        """Changes to this scope's rows by another connection or another view of this process
        (``None``: not known which; the views re-read the scope)."""
        if delta is not None and not delta:
            return
        self._version += 1
        if delta is None or self._pending is None:
            self._pending = None
            return
        for kind, keys in delta.items():
            self._pending.setdefault(kind, set()).update(keys)

    def data_version(self) -> int:
        return self._version

    def foreign_changes(self) -> dict[str, list[int]] | None:
        got, self._pending = self._pending, {}
        if got is None:
            return None
        return {k: sorted(v) for k, v in got.items()}

    def close(self) -> None:
        self.closed = True

    # ------------------------------------------------------------------ the scope's rows
    def _in_scope(self, nids: Sequence[int]) -> set[int]:
        if not nids:
            return set()
        return {int(n) for (n,) in self.base.query(
            "SELECT nid FROM chunks WHERE nid = ANY(%s) AND user_id = %s", ([int(n) for n in nids], self.user_id))}

    def chunk_columns(self, *, with_text: bool = True, batch: int = 50000) -> Iterator[ChunkColumns]:
        sql = ("SELECT nid, kind, created_at, event_time, q_value, importance, user_id, agent_id, run_id, "
               f"session_id, (valid_to IS NULL)::int{', text' if with_text else ''} FROM chunks "
               "WHERE user_id = %s ORDER BY nid")
        rows_all = self.base.query(sql, (self.user_id,))
        for i in range(0, len(rows_all), batch):
            yield chunk_columns_of(rows_all[i:i + batch], with_text)

    def chunk_rows_by_nid(self, nids: Sequence[int]) -> dict[int, ChunkRow]:
        rows = self.base.chunk_rows_by_nid(nids)
        return {n: r for n, r in rows.items() if r.user_id == self.user_id}

    def texts_of(self, nids: Sequence[int]) -> list[tuple[int, str]]:
        rows = self.chunk_rows_by_nid(nids)
        return [(n, rows[n].text) for n in sorted(rows)]

    def edge_states(self, eids: Sequence[int]) -> list[tuple[int, int, int, int, float, bool]]:
        states = self.base.edge_states(eids)
        keep = self._in_scope(sorted({int(s[1]) for s in states}))
        return [s for s in states if int(s[1]) in keep]

    def embeddings_of(self, nids: Sequence[int], model: str) -> Any:
        keep = self._in_scope(list(nids))
        return self.base.embeddings_of([n for n in nids if int(n) in keep], model) if keep else []

    def embeddings_for(self, model: str) -> Iterator[Any]:
        mine = {int(n) for (n,) in self.base.query("SELECT nid FROM chunks WHERE user_id = %s", (self.user_id,))}
        for v in self.base.embeddings_for(model):
            if int(v[0]) in mine:
                yield v

    def projection_arrays(self) -> dict[str, Any]:
        q = self.base.query
        uid = (self.user_id,)
        (max_nid,), = q("SELECT COALESCE(MAX(nid), 0) FROM chunks WHERE user_id = %s", uid)
        edges = q("SELECT e.eid, e.src, e.dst, e.rel_code, e.confidence FROM edges e JOIN chunks c ON c.nid = e.src "
                  "WHERE e.valid_to IS NULL AND c.user_id = %s ORDER BY e.eid", uid)
        co = q("SELECT o.a, o.b, o.weight FROM cooccurrence o JOIN chunks c ON c.nid = o.a "
               "WHERE c.user_id = %s ORDER BY o.a, o.b", uid)
        arr = np.empty(len(edges), dtype=PROJECTION_EDGE_DTYPE)
        if edges:
            cols = list(zip(*edges))
            arr["eid"], arr["src"], arr["dst"], arr["rel"], arr["conf"] = cols
        carr = np.empty(len(co), dtype=PROJECTION_CO_DTYPE)
        if co:
            a, b, w = zip(*co)
            carr["a"], carr["b"], carr["w"] = a, b, w
        # (three statements, three states: a chunk committed between them may be an end of an edge read)
        top = max([int(max_nid)] + [int(x.max()) for x in (arr["src"], arr["dst"], carr["a"], carr["b"]) if len(x)])
        return {"n_nodes": top + 1, "edges": arr, "co": carr}



def tenant_changes(base: Any, after: int) -> tuple[int, int | None, list[tuple[int, str, int, str | None]]]:
    """The change log after sequence value ``after``, in one round trip: the newest value, the log's
    floor, and each (seq, kind, key, ``user_id`` of the key's row: a chunk's own, an edge's source's;
    None when the row is gone for good or has no user)."""
    rows = base.query(
        "SELECT s.seq, s.log_floor, ch.seq, ch.kind, ch.key, COALESCE(c.user_id, ce.user_id) "
        "FROM causalmem_state s LEFT JOIN LATERAL (SELECT seq, kind, unnest(keys) AS key FROM changes "
        "WHERE seq > %s AND seq <= s.seq) ch ON TRUE "
        "LEFT JOIN chunks c ON ch.kind NOT IN ('ei', 'eu', 'ed') AND c.nid = ch.key "
        "LEFT JOIN edges e ON ch.kind IN ('ei', 'eu', 'ed') AND e.eid = ch.key "
        "LEFT JOIN chunks ce ON ce.nid = e.src", (int(after),))
    if not rows:
        return int(after), None, []
    upto, floor = int(rows[0][0]), rows[0][1]
    return upto, None if floor is None else int(floor), [
        (int(r[2]), str(r[3]), int(r[4]), r[5]) for r in rows if r[2] is not None]
