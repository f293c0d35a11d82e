"""One tenant's window on a PostgreSQL store, with its own dense node ids: what a pooled ``Views`` reads.

``ScopedStore`` wraps the process's one ``PostgresStore`` (one connection) and presents only the
rows of one ``user_id``, renumbered: the tenant's chunks get local ids ``0 .. n-1`` in the order of
their stored nids (so ties, which break by lower node index, break as in a store holding only that
tenant), and every nid that crosses this class is translated (``local`` / ``glob``). The chunk
table, BM25 index, projection CSR and vector index of the tenant are then sized to the tenant, not
to the database. Public ids (``Hit.id``, edge ids) are the stored ones: nothing above the views
ever sees a local id.

Only the reads a search or causal query makes, the follower's patch reads and the queued search
reinforcement's write are offered; any other store method raises ``AttributeError`` naming it (a
pooled views never writes anything else: ``Memory`` writes through the whole-store views, and the
pool hears of the commit from the change log like of any other).

The change stream is the pool's: ``view_pool.ViewPool`` reads this tenant's change log
(``tenant_log``, up to ``cursor``) before each call on it and hands over the stored keys
(``deliver``); ``data_version`` and ``foreign_changes`` report what was handed over, in local ids. The
rows and superseded marks a search reads are kept here until the log names them (rows) or anything
(marks), so a warm search with nothing new for its tenant makes one round trip, the log's.
``close`` leaves the wrapped store open.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np

from ._common import CHUNK_COLS, chunk_columns_of
from .base import PROJECTION_CO_DTYPE, PROJECTION_EDGE_DTYPE, ChunkColumns, ChunkRow, StoredVector

__all__ = ["ScopedStore", "tenant_log"]

_EDGE_KINDS = ("ei", "eu", "ed")
#: the wrapped store's attributes a pooled views may use as they are (no node ids in or out)
_PASS = frozenset((
    "path", "read_only", "transaction", "in_transaction", "read_once", "errors", "change_seq", "committed_seq",
    "user_version", "last_update_event", "has_embeddings", "query", "edge_ids", "edge_judge_rows", "get_meta",
    "scoped_counts", "counts"))


def _row_as(row: ChunkRow, nid: int) -> ChunkRow:
    obj = object.__new__(ChunkRow)
    object.__setattr__(obj, "__dict__", {**row.__dict__, "nid": nid})
    return obj


class ScopedStore:
    """The rows of one ``user_id`` of a PostgreSQL store, renumbered densely (see the module docstring)."""

    embeds = False  # the whole-store views' worker embeds every tenant's rows; a pooled views has none
    # a tenant's store in a ``ViewPool``: it writes through the whole store's connection, and its views have
    # no flusher thread (``Reinforcement.defer_refused``) and close before the whole store's (``view_exit``)
    pooled = True

    def __init__(self, base: Any, user_id: str) -> None:
        self.base = base
        self.user_id = user_id
        self.l2g: list[int] = []  # local id -> the stored nid
        self.g2l: dict[int, int] = {}
        self._version = 0
        self._pending: dict[str, set[int]] | None = {}
        self.closed = False
        self.cursor = 0  # the change sequence this tenant's log was read up to (set by the pool)
        # rows and superseded marks read for this tenant, by stored nid (None: no such row of the tenant),
        # kept until the tenant's log names the key (rows) or anything at all (superseded marks)
        self.rows: dict[int, ChunkRow | None] = {}
        self.superseded: dict[int, str | None] = {}

    def __getattr__(self, name: str) -> Any:
        if name in _PASS:
            return getattr(self.base, name)
        raise AttributeError(f"{name}: not offered by a tenant's renumbered store (postgres_scoped)")

    # ------------------------------------------------------------------ the id maps
    def _adopt(self, nids: Sequence[int]) -> None:
        """Local ids for stored nids of this tenant not seen yet (in ascending nid order)."""
        for g in sorted({int(n) for n in nids} - self.g2l.keys()):
            self.g2l[g] = len(self.l2g)
            self.l2g.append(g)

    def glob(self, nids: Sequence[int] | np.ndarray) -> list[int]:
        n = len(self.l2g)
        return [self.l2g[int(x)] for x in nids if 0 <= int(x) < n]

    def local(self, nid: int) -> int | None:
        return self.g2l.get(int(nid))

    @property
    def n_local(self) -> int:
        return len(self.l2g)

    def _mine(self, nids: Sequence[int]) -> list[int]:
        """Those of the stored ``nids`` that are this tenant's (known, or asked for and adopted)."""
        unknown = [int(n) for n in nids if int(n) not in self.g2l]
        if unknown:
            self._adopt([int(n) for (n,) in self.base.query(
                "SELECT nid FROM chunks WHERE nid = ANY(%s) AND user_id = %s", (unknown, self.user_id))])
        return [int(n) for n in nids if int(n) in self.g2l]

    # ------------------------------------------------------------------ the change stream (the pool's)
    def deliver(self, delta: dict[str, set[int]] | None) -> None:
        """Changes to this scope's rows (stored keys: nids, eids) by any connection (``None``: not known
        which; the views re-read the scope)."""
        if delta is not None and not delta:
            return
        self._version += 1
        self.superseded.clear()
        if delta is None or self._pending is None:
            self._pending = None
            self.rows.clear()
            return
        for kind in ("ci", "cu", "cd"):
            for key in delta.get(kind, ()):
                self.rows.pop(key, None)
        for kind, keys in delta.items():
            self._pending.setdefault(kind, set()).update(keys)

    def data_version(self) -> int:
        return self._version

    def foreign_changes(self) -> dict[str, list[int]] | None:
        got, self._pending = self._pending, {}
        if got is None:
            return None
        out: dict[str, list[int]] = {}
        for kind, keys in got.items():
            if kind in _EDGE_KINDS:
                out[kind] = sorted(keys)
                continue
            self._mine(sorted(keys))  # a new chunk of this tenant gets the next local id
            out[kind] = sorted(self.g2l[k] for k in keys if k in self.g2l)
        return out

    def close(self) -> None:
        self.closed = True

    # ------------------------------------------------------------------ builds
    def chunk_columns(self, *, with_text: bool = True, batch: int = 50000) -> Iterator[ChunkColumns]:
        sql = ("SELECT nid, kind, created_at, event_time, q_value, importance, user_id, agent_id, run_id, "
               f"session_id, (valid_to IS NULL)::int{', text' if with_text else ''} FROM chunks "
               "WHERE user_id = %s ORDER BY nid")
        rows = self.base.query(sql, (self.user_id,))
        self._adopt([r[0] for r in rows])
        g2l = self.g2l
        rows = [(g2l[int(r[0])], *r[1:]) for r in rows]
        for i in range(0, len(rows), batch):
            yield chunk_columns_of(rows[i:i + batch], with_text)

    def projection_arrays(self) -> dict[str, Any]:
        q, uid = self.base.query, (self.user_id,)
        self._adopt([int(n) for (n,) in q("SELECT nid FROM chunks WHERE user_id = %s", uid)])
        edges = q("SELECT e.eid, e.src, e.dst, e.rel_code, e.confidence FROM edges e JOIN chunks c ON c.nid = e.src "
                  "WHERE e.valid_to IS NULL AND c.user_id = %s ORDER BY e.eid", uid)
        co = q("SELECT o.a, o.b, o.weight FROM cooccurrence o JOIN chunks c ON c.nid = o.a "
               "WHERE c.user_id = %s ORDER BY o.a, o.b", uid)
        # (three statements, three states: an end committed between them is looked up and adopted)
        self._mine([int(e[2]) for e in edges] + [int(c[1]) for c in co])
        g2l = self.g2l
        edges = [(e[0], g2l[e[1]], g2l[e[2]], e[3], e[4]) for e in edges if e[1] in g2l and e[2] in g2l]
        co = [(g2l[a], g2l[b], w) for a, b, w in co if a in g2l and b in g2l]
        arr = np.empty(len(edges), dtype=PROJECTION_EDGE_DTYPE)
        if edges:
            arr["eid"], arr["src"], arr["dst"], arr["rel"], arr["conf"] = zip(*edges)
        carr = np.empty(len(co), dtype=PROJECTION_CO_DTYPE)
        if co:
            carr["a"], carr["b"], carr["w"] = zip(*co)
        return {"n_nodes": len(self.l2g), "edges": arr, "co": carr}

    def embeddings_for(self, model: str) -> Iterator[Any]:
        rows = self.base.query(
            "SELECT e.nid, e.text_hash, e.vector FROM embeddings e JOIN chunks c ON c.nid = e.nid WHERE e.model = %s "
            "AND c.user_id = %s AND c.valid_to IS NULL AND e.text_hash = c.text_hash ORDER BY e.nid",
            (model, self.user_id))
        self._mine([int(r[0]) for r in rows])
        for nid, th, vec in rows:
            if int(nid) in self.g2l:
                yield StoredVector(self.g2l[int(nid)], th, bytes(vec))

    def max_chunk_nid(self) -> int:
        return len(self.l2g) - 1

    # ------------------------------------------------------------------ reads by local id
    def chunk_rows_by_nid(self, nids: Sequence[int]) -> dict[int, ChunkRow]:
        """The rows of local ``nids``: cached ones as they are, the others in one read."""
        cache, want = self.rows, self.glob(nids)
        if any(g not in cache for g in want):  # every row of the tenant not cached, in the one read
            missing = sorted({*want, *self.l2g} - cache.keys())
            # read here, not through the wrapped store's row cache: that one is the whole store's, and
            # would keep every tenant's rows this worker ever served outside the pool's budget
            got = {int(r[0]): ChunkRow._make(r) for r in self.base.query(
                f"SELECT {CHUNK_COLS}, text_hash FROM chunks WHERE nid = ANY(%s)", (missing,))}
            for g in missing:
                r = got.get(g)
                cache[g] = r if r is not None and r.user_id == self.user_id else None
        g2l = self.g2l
        return {g2l[g]: _row_as(r, g2l[g]) for g in want if (r := cache[g]) is not None}

    def chunk_texts(self, nids: Sequence[int]) -> dict[int, str]:
        return {n: r.text for n, r in self.chunk_rows_by_nid(nids).items()}

    def texts_of(self, nids: Sequence[int]) -> list[tuple[int, str]]:
        rows = self.chunk_rows_by_nid(nids)
        return [(n, rows[n].text) for n in sorted(rows)]

    def chunk_alive(self, nid: int) -> bool:
        row = self.chunk_rows_by_nid([nid]).get(int(nid))
        return row is not None and row.valid_to is None

    def superseded_chunks(self, nids: Sequence[int]) -> dict[int, str]:
        cache, want = self.superseded, self.glob(nids)
        if any(g not in cache for g in want):  # the marks of every row of the tenant, in the one read
            missing = sorted({*want, *self.l2g} - cache.keys())
            got = self.base.superseded_chunks(missing)
            cache.update((g, got.get(g)) for g in missing)
        g2l = self.g2l
        return {g2l[g]: v for g in want if (v := cache[g]) is not None}

    def chunk_metadata_json(self, nids: Sequence[int] | None) -> list[tuple[int, str]]:
        want = list(self.l2g) if nids is None else self.glob(nids)
        return [(self.g2l[g], j) for g, j in self.base.chunk_metadata_json(want) if g in self.g2l]

    def embeddings_of(self, nids: Sequence[int], model: str) -> list[tuple[int, bytes]]:
        return [(self.g2l[int(g)], b) for g, b in self.base.embeddings_of(self.glob(nids), model)
                if int(g) in self.g2l]

    def edge_states(self, eids: Sequence[int]) -> list[tuple[int, int, int, int, float, bool]]:
        states = self.base.edge_states(eids)
        self._mine([int(s[1]) for s in states] + [int(s[2]) for s in states])
        g2l = self.g2l
        return [(s[0], g2l[int(s[1])], g2l[int(s[2])], *s[3:]) for s in states
                if int(s[1]) in g2l and int(s[2]) in g2l]

    def edges_between(self, a: Sequence[int], b: Sequence[int]) -> list[Any]:
        g2l = self.g2l
        return [e._replace(src=g2l[e.src], dst=g2l[e.dst]) for e in self.base.edges_between(self.glob(a), self.glob(b))
                if e.src in g2l and e.dst in g2l]

    def chain_out_edges(self, srcs: Sequence[int]) -> list[Any]:
        got = self.base.chain_out_edges(self.glob(srcs))
        self._mine([e.dst for e in got])
        g2l = self.g2l
        return [e._replace(src=g2l[e.src], dst=g2l[e.dst]) for e in got if e.src in g2l and e.dst in g2l]

    def negative_excitatory_out_edges(self, srcs: Sequence[int]) -> dict[int, list[Any]]:
        got = self.base.negative_excitatory_out_edges(self.glob(srcs))
        self._mine([e.dst for es in got.values() for e in es])
        g2l = self.g2l
        return {g2l[s]: [e._replace(dst=g2l[e.dst]) for e in es if e.dst in g2l] for s, es in got.items() if s in g2l}

    def task_tag_nodes(self, task_tag: str) -> list[int]:
        return [self.g2l[g] for g in self._mine(self.base.task_tag_nodes(task_tag))]

    def chunk_keys_by_id(self, chunk_ids: Sequence[str]) -> dict[str, Any]:
        got = self.base.chunk_keys_by_id(chunk_ids)
        self._mine([k.nid for k in got.values()])
        return {i: k._replace(nid=self.g2l[k.nid]) for i, k in got.items() if k.nid in self.g2l}

    def nid_of(self, chunk_id: str) -> int | None:
        g = self.base.nid_of(chunk_id)
        return None if g is None or not self._mine([g]) else self.g2l[int(g)]

    def find_reusable_chunk(self, text: str, user_id: str | None, agent_id: str | None, *args: Any,
                            **kwargs: Any) -> Any:
        got = self.base.find_reusable_chunk(text, user_id, agent_id, *args, **kwargs)
        if got is None:
            return None
        nid = got if isinstance(got, int) else got.nid
        if not self._mine([nid]):
            return None
        return self.g2l[nid] if isinstance(got, int) else got._replace(nid=self.g2l[nid])

    def history(self, nid: int) -> list[Any]:
        return self.base.history(self.l2g[int(nid)])

    def cooccurrence_weights(self, nids: Sequence[int]) -> dict[tuple[int, int], float]:
        g2l = self.g2l
        return {(g2l[a], g2l[b]): w for (a, b), w in self.base.cooccurrence_weights(self.glob(nids)).items()
                if a in g2l and b in g2l}

    def cooccurrence_between(self, a: Sequence[int], b: Sequence[int]) -> list[Any]:
        g2l = self.g2l
        return [p._replace(a=g2l[p.a], b=g2l[p.b]) for p in self.base.cooccurrence_between(self.glob(a), self.glob(b))
                if p.a in g2l and p.b in g2l]

    # ------------------------------------------------------------------ the queued search reinforcement
    def touch_chunks_batch(self, touches: Sequence[tuple[Sequence[int], float]]) -> None:
        self.base.touch_chunks_batch([(self.glob(nids), t) for nids, t in touches])

    def credit_cooccurrence(self, rows: Sequence[tuple[int, int, float, int, float]]) -> None:
        l2g = self.l2g
        self.base.credit_cooccurrence([(l2g[a], l2g[b], *rest) for a, b, *rest in rows])


def tenant_log(base: Any, user_id: str, after: int) -> tuple[int, int | None, list[tuple[int, str, list[int]]]]:
    """The change log of one tenant after sequence value ``after``, in one round trip: the newest value,
    the log's floor, and each (seq, kind, keys) row of the per-tenant log (schema 8) that names
    ``user_id`` or no user (keys whose chunk is gone for good). Read through the ``(user_id, seq)``
    index: its cost is the tenant's own changes, not every tenant's."""
    rows = base.query(
        "SELECT s.seq, s.log_floor, t.seq, t.kind, t.keys FROM causalmem_state s LEFT JOIN LATERAL ("
        "SELECT seq, kind, keys FROM tenant_changes WHERE user_id = %s AND seq > %s AND seq <= s.seq "
        "UNION ALL SELECT seq, kind, keys FROM tenant_changes WHERE user_id IS NULL AND seq > %s AND seq <= s.seq"
        ") t ON true", (user_id, int(after), int(after)))
    upto, floor = int(rows[0][0]), rows[0][1]
    return upto, None if floor is None else int(floor), [
        (int(r[2]), str(r[3]), [int(k) for k in r[4]]) for r in rows if r[2] is not None]
