"""The chunk table: a columnar cache of chunk attributes indexed by nid (scope masks, times, Q,
importance), the in-memory view the retrieval and causal pipelines filter and score with."""
from __future__ import annotations

import numpy as np

from .store.base import ChunkColumns

__all__ = ["ChunkTable"]


class ChunkTable:
    """Columnar cache of chunk attributes indexed by nid (scope masks, times, Q, importance)."""

    _GROW = 1.5

    def __init__(self) -> None:
        self._cap = 0
        self.n = 0
        self.alive = np.zeros(0, bool)
        self.created_at = np.zeros(0, np.float64)
        self.event_time = np.zeros(0, np.float64)
        self.q = np.zeros(0, np.float32)
        self.importance = np.zeros(0, np.float32)
        self.user = np.zeros(0, np.int32)
        self.agent = np.zeros(0, np.int32)
        self.run = np.zeros(0, np.int32)
        self.session = np.zeros(0, np.int32)
        self.kind = np.zeros(0, np.int8)
        self._codes: dict[str, dict[str | None, int]] = {
            "user": {None: 0}, "agent": {None: 0}, "run": {None: 0}, "session": {None: 0}, "kind": {}}
        self._mask_cache: dict[tuple, np.ndarray] = {}
        self.version = 0

    def _ensure(self, size: int) -> None:
        if size <= self._cap:
            return
        cap = max(size, int(self._cap * self._GROW) + 1024)
        for name in ("alive", "created_at", "event_time", "q", "importance", "user", "agent", "run",
                     "session", "kind"):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            if name == "event_time":
                new[:] = np.nan
            new[: len(old)] = old
            setattr(self, name, new)
        self._cap = cap

    def code(self, column: str, value: str | None) -> int | None:
        """Integer code of ``value`` in ``column`` (``None`` if never seen)."""
        return self._codes[column].get(value)

    def _code_or_new(self, column: str, value: str | None) -> int:
        table = self._codes[column]
        c = table.get(value)
        if c is None:
            c = table[value] = len(table)
        return c

    def set(self, nid: int, *, kind: str, created_at: float, event_time: float | None, q: float,
            importance: float, user_id: str | None, agent_id: str | None, run_id: str | None,
            session_id: str | None, alive: bool = True) -> None:
        self._ensure(nid + 1)
        self.n = max(self.n, nid + 1)
        self.alive[nid] = alive
        self.created_at[nid] = created_at
        self.event_time[nid] = np.nan if event_time is None else event_time
        self.q[nid] = q
        self.importance[nid] = importance
        self.user[nid] = self._code_or_new("user", user_id)
        self.agent[nid] = self._code_or_new("agent", agent_id)
        self.run[nid] = self._code_or_new("run", run_id)
        self.session[nid] = self._code_or_new("session", session_id)
        self.kind[nid] = self._code_or_new("kind", kind)
        self._changed()

    def _codes_of(self, column: str, values: list) -> np.ndarray | int:
        """Codes of ``values`` (new values coded in order of first appearance, as ``set`` one by
        one would); one int when every value is the same."""
        table = self._codes[column]
        first = values[0]
        if values.count(first) == len(values):
            return self._code_or_new(column, first)
        for v in dict.fromkeys(values):
            if v not in table:
                table[v] = len(table)
        return np.fromiter(map(table.__getitem__, values), dtype=np.int64, count=len(values))

    def set_many(self, nids: list[int], *, kind: list[str], created_at: list[float],
                 event_time: list[float | None], q: list[float], user_id: list[str | None],
                 agent_id: list[str | None], run_id: list[str | None], session_id: list[str | None],
                 importance: float = 5.0) -> None:
        """``set`` of many new live chunks at once (the same table as calling it for each in order)."""
        if not nids:
            return
        # codes first, in the order ``set`` gives them (per row: user, agent, run, session, kind —
        # the columns' code tables are independent, so column by column is the same)
        codes = [(name, self._codes_of(column, values)) for name, column, values in (
            ("user", "user", user_id), ("agent", "agent", agent_id), ("run", "run", run_id),
            ("session", "session", session_id), ("kind", "kind", kind))]
        ids = np.asarray(nids, dtype=np.int64)
        top = int(ids.max()) + 1
        self._ensure(top)
        self.n = max(self.n, top)
        self.alive[ids] = True
        self.created_at[ids] = np.asarray(created_at, dtype=np.float64)
        self.event_time[ids] = (np.nan if event_time.count(None) == len(event_time) else
                                np.asarray([np.nan if v is None else v for v in event_time], dtype=np.float64))
        self.q[ids] = np.asarray(q, dtype=np.float32)
        self.importance[ids] = importance
        for name, c in codes:
            getattr(self, name)[ids] = c
        self._changed()

    def load(self, cols: ChunkColumns) -> None:
        """Bulk fill from one column batch of the store."""
        if not cols.nid:
            return
        nids = np.asarray(cols.nid, dtype=np.int64)
        self._ensure(int(nids.max()) + 1)
        self.n = max(self.n, int(nids.max()) + 1)
        self.created_at[nids] = np.asarray(cols.created_at, dtype=np.float64)
        self.event_time[nids] = np.asarray([np.nan if v is None else v for v in cols.event_time], dtype=np.float64)
        self.q[nids] = np.asarray(cols.q_value, dtype=np.float32)
        self.importance[nids] = np.asarray(cols.importance, dtype=np.float32)
        self.alive[nids] = np.asarray(cols.alive, dtype=bool)
        for column, values in (("kind", cols.kind), ("user", cols.user_id), ("agent", cols.agent_id),
                               ("run", cols.run_id), ("session", cols.session_id)):
            table = self._codes[column]
            for v in set(values) - table.keys():
                table[v] = len(table)
            getattr(self, column)[nids] = np.fromiter((table[v] for v in values), dtype=np.int64, count=len(values))
        self._changed()

    _COLUMNS = ("alive", "created_at", "event_time", "q", "importance", "user", "agent", "run", "session", "kind")

    def to_arrays(self) -> tuple[dict[str, np.ndarray], dict]:
        """The columns (first ``n`` rows) and the code tables, for a sidecar file.

        The code tables are arrays too (a UTF-8 blob, offsets, a None flag per code), not header
        JSON: a store with hundreds of thousands of distinct session or run ids would otherwise
        outgrow the file header's size limit."""
        arrays = {name: getattr(self, name)[: self.n] for name in self._COLUMNS}
        for col, table in self._codes.items():
            values: list[str | None] = [None] * len(table)
            for v, c in table.items():
                values[c] = v  # codes are dense: each new value takes the next one
            encoded = [b"" if v is None else v.encode("utf-8") for v in values]
            arrays[f"codes_{col}_blob"] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
            arrays[f"codes_{col}_off"] = np.concatenate(
                ([0], np.cumsum([len(b) for b in encoded], dtype=np.int64))).astype(np.int64)
            arrays[f"codes_{col}_none"] = np.asarray([v is None for v in values], dtype=np.uint8)
        return arrays, {"n": self.n, "code_columns": list(self._codes)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict) -> "ChunkTable | None":
        """A table from ``to_arrays`` output; None when the shapes or code tables disagree."""
        self = cls()
        n = int(meta["n"])
        for name in cls._COLUMNS:
            a = arrays.get(name)
            if a is None or a.shape != (n,) or a.dtype != getattr(self, name).dtype:
                return None
            setattr(self, name, a)
        if set(meta.get("code_columns", ())) != set(self._codes):
            return None
        codes: dict[str, dict[str | None, int]] = {}
        for col in self._codes:
            blob, off, none = (arrays.get(f"codes_{col}_{part}") for part in ("blob", "off", "none"))
            if blob is None or off is None or none is None or off.ndim != 1 or none.shape != (off.shape[0] - 1,):
                return None
            if off.shape[0] and (int(off[0]) != 0 or int(off[-1]) != blob.shape[0]
                                 or bool((np.diff(off) < 0).any())):
                return None
            raw = blob.tobytes()
            try:
                values = [None if none[i] else raw[off[i]:off[i + 1]].decode("utf-8") for i in range(none.shape[0])]
            except UnicodeDecodeError:
                return None
            table = {v: i for i, v in enumerate(values)}
            if len(table) != len(values):
                return None
            codes[col] = table
        self._codes = codes
        self.n = self._cap = n
        return self

    def kill(self, nid: int) -> None:
        if nid < self.n:
            self.alive[nid] = False
            self._changed()

    def _changed(self) -> None:
        self.version += 1
        if self._mask_cache:
            self._mask_cache.clear()

    def scope_mask(self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None,
                   session_id: str | None = None,
                   since: float | None = None, until: float | None = None,
                   kinds: tuple[str, ...] | None = None) -> np.ndarray:
        """Boolean mask over nids of live chunks matching every given filter (``None`` = any)."""
        key = (user_id, agent_id, run_id, session_id, since, until, kinds)
        cached = self._mask_cache.get(key)
        if cached is not None:
            return cached
        mask = self.alive[: self.n].copy()
        for column, value in (("user", user_id), ("agent", agent_id), ("run", run_id), ("session", session_id)):
            if value is None:
                continue
            c = self.code(column, value)
            if c is None:
                mask[:] = False
                break
            mask &= getattr(self, column)[: self.n] == c
        if since is not None or until is not None:
            t = np.where(np.isnan(self.event_time[: self.n]), self.created_at[: self.n], self.event_time[: self.n])
            if since is not None:
                mask &= t >= since
            if until is not None:
                mask &= t <= until
        if kinds is not None:
            codes = [self.code("kind", k) for k in kinds]
            mask &= np.isin(self.kind[: self.n], [c for c in codes if c is not None])
        if len(self._mask_cache) > 64:
            self._mask_cache.clear()
        self._mask_cache[key] = mask
        return mask
