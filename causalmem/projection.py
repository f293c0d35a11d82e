"""The in-memory projection of the store: CSR graph with lazy rebuild and a write overlay (SPEC §2).

Node index in every array = the chunk's integer key ``nid``. Edge keys = the edge's ``eid``;
co-occurrence pairs get negative keys (they have no row id of their own).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

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

    def __init__(self, load: Callable[[], dict[str, Any]], config: Config, clock: Callable[[], float]):
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


def build_graph(data: dict[str, Any]) -> CausalGraph:
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
