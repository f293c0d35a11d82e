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


#: spread coefficient of a learned co-occurrence link (value = weight x this, as a relation's
#: coefficient scales an edge's confidence): at the cap a learned link carries half of what a
#: ``caused`` edge of full confidence does. On LoCoMo-dev (one store, reinforcement on, questions in
#: a row) full-weight links cost recall@10 (0.756 vs 0.763 at 0.5; 0.754 at 0.25).
CO_OCCURRENCE_COEFFICIENT = 0.5
#: key of learned-link entries in the overlay (edge keys are positive eids)
LEARNED_KEY = -1
#: the overlay is folded into a rebuild once it holds more entries than this (or 1/8 of the graph's edges)
OVERLAY_MAX = 8192


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
    # learned pairs (a < b) -> positions of their two entries: one entry per direction per pair
    learned: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    # overlay entries per node that are learned links (two per pair at each end: forward + reverse)
    learned_deg: dict[int, int] = field(default_factory=dict)

    def add(self, key: int, src: int, dst: int, val: float, inh: bool) -> None:
        self.keys.append(key)
        self.src.append(src)
        self.dst.append(dst)
        self.val.append(val)
        self.inh.append(inh)
        self.cache = None

    def add_learned(self, a: int, b: int, delta: float) -> None:
        """Add ``delta`` to the weight of co-occurrence pair ``a < b`` (both directions)."""
        pos = self.learned.get((a, b))
        if pos is not None:
            for i in pos:
                self.val[i] += delta
            self.cache = None
            return
        self.learned[(a, b)] = (len(self.keys), len(self.keys) + 1)
        self.add(LEARNED_KEY, a, b, delta, False)
        self.add(LEARNED_KEY, b, a, delta, False)
        for n in (a, b):  # the two entries sit at each end in the forward and the reverse CSR
            self.learned_deg[n] = self.learned_deg.get(n, 0) + 2

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
        self.n_nodes = 0
        self._co_deg = np.zeros(0, np.int64)  # co-occurrence entries per node in the built graph
        #: learned-link weight not yet in the store, as (a, b, delta): re-applied after a rebuild
        self.pending_learned: Callable[[], list[tuple[int, int, float]]] | None = None
        self.rebuilds = 0
        self.last_rebuild_seconds = 0.0
        #: returns (graph, arrays, meta, patch) saved for the store's current state (a sidecar; ``patch``
        #: None, or a callable that brings an older file's graph up to date after ``adopt``), or None;
        #: tried once, instead of the first full rebuild
        self.restore: Callable[[], tuple[Any, ...] | None] | None = None
        #: advanced by every change of the graph, overlay or counters (what a saved copy compares)
        self.version = 0

    # -- write notifications (called after the transaction committed) --------
    def count_write(self, n: int = 1) -> None:
        self._pending += n
        self.version += 1

    def learned_links(self, deltas: list[tuple[int, int, float]]) -> None:
        """Co-occurrence weight learned by a search, ``(a, b, weight added)``: visible to the next
        query through the overlay (both directions; the contributions of a pair add up, so a
        delta on a pair the graph already holds gives exactly the new weight)."""
        if self.graph is None or self._stale or not deltas or self._config.hebbian_rerank:
            return  # the rebuild reads the store and ``pending_learned``; re-rank mode: not graph edges
        self.version += 1
        for a, b, d in deltas:
            a, b = (a, b) if a < b else (b, a)
            self._overlay.add_learned(a, b, d * CO_OCCURRENCE_COEFFICIENT)
            self.n_nodes = max(self.n_nodes, b + 1)

    def degrees(self, nodes: np.ndarray) -> np.ndarray:
        """Structural edges at each node (out + in, the overlay's included; learned co-occurrence
        links left out), as the retrieval's degree normalisation needs them: links a search
        learned must not dilute what a turn's own neighbours send it."""
        graph, extra = self.current()
        parts = [graph.forward.indptr, graph.reverse.indptr] + (
            [extra[0].indptr, extra[1].indptr] if extra is not None else [])
        # integer counts, exact in any order; nodes inside every part (the usual case) are read
        # without a mask
        deg = np.zeros(len(nodes), dtype=np.int64)
        top = int(nodes.max()) if len(nodes) else -1
        for ip in parts:
            if top < len(ip) - 1:
                deg += ip[nodes + 1] - ip[nodes]
            else:
                inside = nodes < len(ip) - 1
                idx = nodes[inside]
                deg[inside] += ip[idx + 1] - ip[idx]
        co = self._co_deg
        if top < len(co):
            deg -= co[nodes]
        else:
            inside = nodes < len(co)
            deg[inside] -= co[nodes[inside]]
        deg = deg.astype(np.float64)
        learned = self._overlay.learned_deg
        if learned:
            deg -= np.fromiter((learned.get(int(n), 0) for n in nodes), dtype=np.float64, count=len(nodes))
        return deg

    def mark_stale(self) -> None:
        """Force a full rebuild at the next query (external writer, sleep, bulk change)."""
        self._stale = True
        self.version += 1

    def edge_added(self, eid: int, src: int, dst: int, relation: Relation, confidence: float,
                   weight: float = 1.0) -> None:
        if self.graph is None or self._stale:
            return
        self._overlay.add(eid, src, dst, edge_value(relation, confidence, weight), relation.inhibitory)
        self.n_nodes = max(self.n_nodes, src + 1, dst + 1)
        self.version += 1

    def edge_invalidated(self, eid: int) -> None:
        if self.graph is None or self._stale:
            return
        try:
            self.graph.invalidate(eid)
        except KeyError:
            pass
        self._overlay.dead.add(eid)
        self._overlay.cache = None
        self.version += 1

    def edges_reweighted(self, edges: list[tuple[int, Relation, float]]) -> None:
        """Valid edges whose confidence changed (repeated evidence), ``(eid, relation, confidence)``:
        each weight is set in place, in the overlay when the edge was written since the last build,
        else in the graph (what a rebuild would compute: confidence x the relation's coefficient,
        float32). One pass over the overlay for the whole batch."""
        if self.graph is None or self._stale or not edges:
            return
        value = {eid: edge_value(rel, conf) for eid, rel, conf in edges}
        ov = self._overlay
        in_overlay = set()
        for i, k in enumerate(ov.keys):
            v = value.get(k)
            if v is not None:
                ov.val[i] = v
                in_overlay.add(k)
        if in_overlay:
            ov.cache = None
        for eid, v in value.items():
            if eid in in_overlay:
                continue
            try:
                done = self.graph.reweight(eid, v)
            except KeyError:
                done = False
            if not done:
                self.mark_stale()
                return
        self.version += 1

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
        self.version += 1

    # -- reads ------------------------------------------------------------------
    def needs_rebuild(self) -> bool:
        if self._stale or self.graph is None:
            return True
        if self._pending >= self._config.rebuild_writes:
            return True
        elapsed = self._clock() - self._built_at
        if self._pending > 0 and elapsed >= self._config.rebuild_seconds:
            return True
        return len(self._overlay) > max(OVERLAY_MAX, self.graph.n_edges // 8)

    def current(self) -> tuple[CausalGraph, tuple[CSR, CSR] | None]:
        if self.needs_rebuild():
            self.rebuild()
        assert self.graph is not None
        return self.graph, self._overlay.csr_pair(self.graph.n_nodes)

    def is_clean(self) -> bool:
        """The graph alone holds what the store held at the last notification: no overlay, no
        pending write, not stale."""
        ov = self._overlay
        return (self.graph is not None and not self._stale and self._pending == 0
                and not len(ov) and not ov.dead and not ov.dead_nodes)

    def savable(self) -> bool:
        """Whether ``state`` holds the store's current graph: built and not stale. Learned links in
        the overlay are saved with it (base + overlay): the loading process answers exactly as this
        one would have gone on answering; a graph rebuilt from the store sums the same weights in
        another order, so its scores can differ from both in the last float32 digits."""
        return self.graph is not None and not self._stale

    def state(self) -> tuple[dict[str, np.ndarray], dict] | None:
        """The graph, its write overlay (learned links included) and counters, for a sidecar file
        (``adopt`` restores them as they were: the loading process carries on as this one would);
        None when stale."""
        if self.graph is None or self._stale:
            return None
        ov = self._overlay
        arrays = dict(self.graph.to_arrays())
        pairs = list(ov.learned.items())
        deg = list(ov.learned_deg.items())
        arrays.update(
            co_deg=np.asarray(self._co_deg, dtype=np.int64),
            ov_keys=np.asarray(ov.keys, dtype=np.int64), ov_src=np.asarray(ov.src, dtype=np.int64),
            ov_dst=np.asarray(ov.dst, dtype=np.int64), ov_val=np.asarray(ov.val, dtype=np.float64),
            ov_inh=np.asarray(ov.inh, dtype=bool), ov_dead=np.asarray(sorted(ov.dead), dtype=np.int64),
            ov_dead_nodes=np.asarray(sorted(ov.dead_nodes), dtype=np.int64),
            ov_learned=np.asarray([[a, b, i, j] for (a, b), (i, j) in pairs], dtype=np.int64).reshape(-1, 4),
            ov_learned_deg=np.asarray(deg, dtype=np.int64).reshape(-1, 2))
        meta = {"n_nodes": int(self.n_nodes), "pending": int(self._pending), "built_at": float(self._built_at),
                "learned_in_graph": not self._config.hebbian_rerank}
        return arrays, meta

    def adopt(self, graph: CausalGraph, arrays: dict | None = None, meta: dict | None = None) -> None:
        """Take a graph (and the overlay and counters saved with it) that holds the store's current
        state, loaded from a sidecar, as if this process had built it."""
        self.restore = None
        overlay = _Overlay()
        co_deg = np.zeros(0, np.int64)
        if arrays is not None:
            missing = [name for name in ("co_deg", "ov_keys", "ov_src", "ov_dst", "ov_val", "ov_inh", "ov_dead",
                                         "ov_dead_nodes", "ov_learned", "ov_learned_deg") if name not in arrays]
            if missing:
                raise ValueError(f"projection file lacks {', '.join(missing)}")
            k = arrays["ov_keys"].shape[0]
            if any(arrays[f"ov_{c}"].shape != (k,) for c in ("src", "dst", "val", "inh")):
                raise ValueError("projection overlay arrays disagree")
            overlay.keys, overlay.src = arrays["ov_keys"].tolist(), arrays["ov_src"].tolist()
            overlay.dst, overlay.val = arrays["ov_dst"].tolist(), arrays["ov_val"].tolist()
            overlay.inh = arrays["ov_inh"].tolist()
            overlay.dead, overlay.dead_nodes = set(arrays["ov_dead"].tolist()), set(arrays["ov_dead_nodes"].tolist())
            overlay.learned = {(a, b): (i, j) for a, b, i, j in arrays["ov_learned"].tolist()}
            if any(not (0 <= i < k and 0 <= j < k) for i, j in overlay.learned.values()):
                raise ValueError("projection overlay: learned positions out of range")
            overlay.learned_deg = {n: c for n, c in arrays["ov_learned_deg"].tolist()}
            co_deg = np.array(arrays["co_deg"], dtype=np.int64)
        meta = meta or {}
        if bool(meta.get("learned_in_graph", True)) == self._config.hebbian_rerank:
            raise ValueError("projection file was saved with the other Config.hebbian_rerank")
        self.graph, self._overlay, self._co_deg = graph, overlay, co_deg
        self.n_nodes = max(self.n_nodes, graph.n_nodes, int(meta.get("n_nodes", 0)))
        self._pending = int(meta.get("pending", 0))
        self._stale = False
        self._built_at = float(meta["built_at"]) if "built_at" in meta else self._clock()
        self.version += 1

    def release(self) -> None:
        """Drop the graph (its arrays may map a sidecar file): the store was closed."""
        self.graph, self._overlay, self._co_deg = None, _Overlay(), np.zeros(0, np.int64)
        self.restore = None
        self._stale = True
        self.version += 1

    def rebuild(self) -> None:
        t0 = time.perf_counter()
        restore, self.restore = self.restore, None
        saved = restore() if restore is not None and self.graph is None else None
        if saved is not None:
            try:
                self.adopt(*saved[:3])
                if len(saved) > 3 and saved[3] is not None:
                    saved[3]()  # the catch-up of an older file (the journal's changes since)
            except (ValueError, KeyError, TypeError) as exc:  # a damaged file: build from the store
                log.info("causalmem: saved projection not used (%s); rebuilding", exc)
                saved = None
        if saved is not None:
            if self.pending_learned is not None:  # learned weight not in the store yet (none at close)
                self.learned_links(self.pending_learned())
            log.debug("causalmem: graph loaded from its sidecar (%d nodes, %d edges) in %.3fs",
                      saved[0].n_nodes, saved[0].n_edges, time.perf_counter() - t0)
            return
        data = self._load()
        if self._config.hebbian_rerank:  # learned links re-rank candidates only (retrieval), not graph edges
            data = dict(data, co=data["co"][:0])
        graph = build_graph(data)
        co = data["co"]
        co_deg = 2 * (np.bincount(co["a"], minlength=graph.n_nodes) + np.bincount(co["b"], minlength=graph.n_nodes))
        # Swap in one step: readers see either the old graph+overlay or the new graph.
        self.graph, self._overlay, self._co_deg = graph, _Overlay(), co_deg
        self.n_nodes = graph.n_nodes
        self._pending = 0
        self._stale = False
        if self.pending_learned is not None:
            self.learned_links(self.pending_learned())
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

    def links_among(self, nodes: np.ndarray) -> np.ndarray:
        """Edges joining two of ``nodes`` in the forward graph or its overlay (co-occurrence
        links and invalidated edges as ``spread`` sees them): ``int64[M, 2]`` position pairs
        ``(k, j)``, ``k != j``, base graph first (see ``CSR.links_among``)."""
        graph, extra = self.current()
        pairs = graph.forward.links_among(nodes)
        if extra is not None:
            more = extra[0].links_among(nodes)
            if len(more):
                pairs = np.concatenate([pairs, more]) if len(pairs) else more
        return pairs


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
    co_val = co["w"] * CO_OCCURRENCE_COEFFICIENT
    val = np.concatenate([values, co_val, co_val]).astype(np.float32)
    inh = np.concatenate([inhib, np.zeros(2 * len(co), dtype=bool)]).astype(np.uint8)
    keys = np.concatenate([edges["eid"], co_keys, co_keys - len(co)])
    return CausalGraph.from_arrays(max(n_nodes, 1), src, dst, val, inhibitory=inh, edge_keys=keys)
