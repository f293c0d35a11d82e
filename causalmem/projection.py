"""The in-memory projection of the store: CSR graph with lazy rebuild and a write overlay,
plus a columnar cache of chunk attributes used for scope filters and scoring (SPEC §2).

Node index in every array = the chunk's integer key ``nid``. Edge keys = the edge's ``eid``;
co-occurrence pairs get negative keys (they have no row id of their own).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .config import Config
from .graph import CausalGraph
from .spreading import CSR
from .types import Relation

log = logging.getLogger("causalmem")

_COEF = np.array([Relation.from_code(i).coefficient for i in range(len(Relation))], dtype=np.float64)
_INHIB = np.array([Relation.from_code(i).inhibitory for i in range(len(Relation))], dtype=bool)


def edge_value(relation: Relation, confidence: float, weight: float = 1.0) -> float:
    return float(confidence) * relation.coefficient * float(weight)


@dataclass
class _Overlay:
    """Edges written since the last rebuild (both directions), as COO lists."""

    keys: list[int] = field(default_factory=list)
    src: list[int] = field(default_factory=list)
    dst: list[int] = field(default_factory=list)
    val: list[float] = field(default_factory=list)
    inh: list[bool] = field(default_factory=list)
    dead: set[int] = field(default_factory=set)
    dead_nodes: set[int] = field(default_factory=set)
    cache: tuple[CSR, CSR] | None = None

    def add(self, key: int, src: int, dst: int, val: float, inh: bool) -> None:
        self.keys.append(key)
        self.src.append(src)
        self.dst.append(dst)
        self.val.append(val)
        self.inh.append(inh)
        self.cache = None

    def __len__(self) -> int:
        return len(self.keys)

    def csr_pair(self, n_nodes: int) -> tuple[CSR, CSR] | None:
        if not self.keys:
            return None
        if self.cache is not None and self.cache[0].n_nodes >= n_nodes:
            return self.cache
        keys = np.asarray(self.keys, dtype=np.int64)
        src = np.asarray(self.src, dtype=np.int64)
        dst = np.asarray(self.dst, dtype=np.int64)
        val = np.asarray(self.val, dtype=np.float32)
        inh = np.asarray(self.inh, dtype=np.uint8)
        valid = np.ones(len(keys), dtype=np.uint8)
        if self.dead:
            valid[np.isin(keys, np.fromiter(self.dead, dtype=np.int64))] = 0
        if self.dead_nodes:
            dn = np.fromiter(self.dead_nodes, dtype=np.int64)
            valid[np.isin(src, dn) | np.isin(dst, dn)] = 0
        n = max(n_nodes, int(max(src.max(), dst.max())) + 1)
        fwd = CSR.from_coo(n, src, dst, val, valid=valid, inhibitory=inh)
        rev = CSR.from_coo(n, dst, src, val, valid=valid, inhibitory=inh)
        self.cache = (fwd, rev)
        return self.cache


class Projection:
    """Lazily rebuilt CSR projection of the store's valid edges and co-occurrence pairs."""

    def __init__(self, load: Callable[[], dict], config: Config, clock: Callable[[], float]):
        self._load = load
        self._config = config
        self._clock = clock
        self.graph: CausalGraph | None = None
        self._overlay = _Overlay()
        self._pending = 0
        self._built_at = 0.0
        self._stale = True
        self._soft = False
        self.n_nodes = 0
        self.rebuilds = 0
        self.last_rebuild_seconds = 0.0

    # -- write notifications (called after the transaction committed) --------
    def count_write(self, n: int = 1) -> None:
        self._pending += n

    def learning_change(self) -> None:
        """Hebbian pairs created or strengthened by a search: picked up by the next timed rebuild
        (``Config.learning_rebuild_seconds``). Learned links are not user writes, and keeping them
        out of the overlay keeps every search from re-projecting the overlay."""
        self._soft = True

    def mark_stale(self) -> None:
        """Force a full rebuild at the next query (external writer, sleep, bulk change)."""
        self._stale = True

    def edge_added(self, eid: int, src: int, dst: int, relation: Relation, confidence: float,
                   weight: float = 1.0) -> None:
        if self.graph is None or self._stale:
            return
        self._overlay.add(eid, src, dst, edge_value(relation, confidence, weight), relation.inhibitory)
        self.n_nodes = max(self.n_nodes, src + 1, dst + 1)

    def edge_invalidated(self, eid: int) -> None:
        if self.graph is None or self._stale:
            return
        try:
            self.graph.invalidate(eid)
        except KeyError:
            pass
        self._overlay.dead.add(eid)
        self._overlay.cache = None

    def edge_restored(self, eid: int) -> None:
        # Restoring is rare; a rebuild is the simplest exact answer.
        self.mark_stale()

    def node_deleted(self, nid: int) -> None:
        if self.graph is None or self._stale:
            return
        if nid < self.graph.n_nodes:
            self.graph.invalidate_node(nid)
        self._overlay.dead_nodes.add(nid)
        self._overlay.cache = None

    # -- reads ------------------------------------------------------------------
    def needs_rebuild(self) -> bool:
        if self._stale or self.graph is None:
            return True
        if self._pending >= self._config.rebuild_writes:
            return True
        elapsed = self._clock() - self._built_at
        if self._pending > 0 and elapsed >= self._config.rebuild_seconds:
            return True
        if self._soft and elapsed >= self._config.learning_rebuild_seconds:
            return True
        return False

    def current(self) -> tuple[CausalGraph, tuple[CSR, CSR] | None]:
        if self.needs_rebuild():
            self.rebuild()
        assert self.graph is not None
        return self.graph, self._overlay.csr_pair(self.graph.n_nodes)

    def rebuild(self) -> None:
        t0 = time.perf_counter()
        graph = build_graph(self._load())
        # Swap in one step: readers see either the old graph+overlay or the new graph.
        self.graph, self._overlay = graph, _Overlay()
        self.n_nodes = graph.n_nodes
        self._pending = 0
        self._soft = False
        self._stale = False
        self._built_at = self._clock()
        self.rebuilds += 1
        self.last_rebuild_seconds = time.perf_counter() - t0
        log.debug("causalmem: graph rebuilt (%d nodes, %d edges) in %.3fs",
                  graph.n_nodes, graph.n_edges, self.last_rebuild_seconds)

    def spread(self, seed_nodes: np.ndarray, seed_energy: np.ndarray, *, reverse: bool,
               params: dict) -> tuple[np.ndarray, np.ndarray]:
        graph, extra = self.current()
        ex = None if extra is None else (extra[1] if reverse else extra[0])
        n = max(graph.n_nodes, ex.n_nodes if ex is not None else 0)
        keep = (seed_nodes >= 0) & (seed_nodes < n)
        if not keep.all():
            seed_nodes, seed_energy = seed_nodes[keep], seed_energy[keep]
        if len(seed_nodes) == 0:
            return np.empty(0, np.int32), np.empty(0, np.float32)
        csr = graph.reverse if reverse else graph.forward
        return csr.spread(seed_nodes, seed_energy, extra=ex, **params)


def build_graph(data: dict) -> CausalGraph:
    """CausalGraph over nid indices from the store's projection arrays."""
    edges = data["edges"]
    co = data["co"]
    n_nodes = int(data["n_nodes"])
    rel = edges["rel"].astype(np.int64)
    values = edges["conf"] * _COEF[rel]
    inhib = _INHIB[rel]
    # Co-occurrence pairs are undirected: project both directions.
    co_keys = -(np.arange(len(co), dtype=np.int64) + 1)
    src = np.concatenate([edges["src"], co["a"], co["b"]])
    dst = np.concatenate([edges["dst"], co["b"], co["a"]])
    val = np.concatenate([values, co["w"], co["w"]]).astype(np.float32)
    inh = np.concatenate([inhib, np.zeros(2 * len(co), dtype=bool)]).astype(np.uint8)
    keys = np.concatenate([edges["eid"], co_keys, co_keys - len(co)])
    return CausalGraph.from_arrays(max(n_nodes, 1), src, dst, val, inhibitory=inh, edge_keys=keys)


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

    def code(self, column: str, value: str | None, *, create: bool = False) -> int | None:
        table = self._codes[column]
        c = table.get(value)
        if c is None and create:
            c = len(table) + (0 if column == "kind" else 0)
            table[value] = c
        return c

    def set(self, nid: int, *, kind: str, created_at: float, event_time: float | None, q: float,
            importance: float, user_id, agent_id, run_id, session_id, alive: bool = True) -> None:
        self._ensure(nid + 1)
        self.n = max(self.n, nid + 1)
        self.alive[nid] = alive
        self.created_at[nid] = created_at
        self.event_time[nid] = np.nan if event_time is None else event_time
        self.q[nid] = q
        self.importance[nid] = importance
        self.user[nid] = self.code("user", user_id, create=True)
        self.agent[nid] = self.code("agent", agent_id, create=True)
        self.run[nid] = self.code("run", run_id, create=True)
        self.session[nid] = self.code("session", session_id, create=True)
        self.kind[nid] = self.code("kind", kind, create=True)
        self._changed()

    def load(self, rows: list[tuple]) -> None:
        """Bulk fill from (nid, kind, created, event, q, importance, user, agent, run, session, alive) rows."""
        if not rows:
            return
        cols = list(zip(*rows))
        nids = np.asarray(cols[0], dtype=np.int64)
        self._ensure(int(nids.max()) + 1)
        self.n = max(self.n, int(nids.max()) + 1)
        self.created_at[nids] = np.asarray(cols[2], dtype=np.float64)
        self.event_time[nids] = np.asarray([np.nan if v is None else v for v in cols[3]], dtype=np.float64)
        self.q[nids] = np.asarray(cols[4], dtype=np.float32)
        self.importance[nids] = np.asarray(cols[5], dtype=np.float32)
        self.alive[nids] = np.asarray(cols[10], dtype=bool)
        for column, values in (("kind", cols[1]), ("user", cols[6]), ("agent", cols[7]), ("run", cols[8]),
                               ("session", cols[9])):
            table = self._codes[column]
            for v in set(values) - table.keys():
                table[v] = len(table)
            getattr(self, column)[nids] = np.fromiter((table[v] for v in values), dtype=np.int64, count=len(values))
        self._changed()

    def kill(self, nid: int) -> None:
        if nid < self.n:
            self.alive[nid] = False
            self._changed()

    def _changed(self) -> None:
        self.version += 1
        if self._mask_cache:
            self._mask_cache.clear()

    def kind_name(self, nid: int) -> str:
        code = int(self.kind[nid])
        for name, c in self._codes["kind"].items():
            if c == code:
                return name
        return "turn"

    def scope_mask(self, *, user_id=None, agent_id=None, run_id=None, session_id=None,
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
