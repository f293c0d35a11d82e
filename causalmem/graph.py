"""``CausalGraph``: the typed causal graph as a forward and a reverse CSR projection (SPEC §2).

Node ids (any hashables) map to dense indices ``0..N-1``; edge values are pre-multiplied
(confidence × relation coefficient × weight) at build time; ``prevented`` edges are flagged
inhibitory.  Validity flags live in the CSR ``valid`` arrays and can be flipped in place
(``invalidate``, ``invalidate_node``) without a rebuild: both directions are kept in step through
two position maps (forward position ↔ reverse position).  The graph owns its arrays: ``forward``
and ``reverse`` are read-only properties, their arrays read-only; only the graph keeps a
(private) writable handle on the two ``valid`` arrays, and no flip can move an index.

Thread safety: queries may run concurrently (see ``causalmem.spreading``).  ``invalidate*``
write single bytes of the ``valid`` arrays; a query running at the same moment sees the edge
either valid or invalid, never anything torn.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any, Hashable, Iterable, Mapping, Sequence, SupportsIndex, cast

import numpy as np

from .config import PRESETS, SpreadParams
from . import _kernels
from .spreading import CSR, coo_to_csr, real_number
from .types import Activation, Relation

__all__ = ["CausalGraph", "resolve_params"]

_INT32_MAX = 2**31 - 1


def resolve_params(preset: "str | SpreadParams | Mapping[str, Any]" = "causal",
                   overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Spread keyword arguments from a preset name / ``SpreadParams`` / mapping plus overrides."""
    if isinstance(preset, SpreadParams):
        params = preset.as_kwargs()
    elif isinstance(preset, str):
        key = preset.strip().lower()
        if key not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
        params = PRESETS[key].as_kwargs()
    elif isinstance(preset, Mapping):
        params = dict(PRESETS["causal"].as_kwargs())
        params.update(preset)
    else:
        raise TypeError(
            f"preset must be a preset name ({', '.join(PRESETS)}), a SpreadParams or a mapping, "
            f"got {type(preset).__name__}"
        )
    if overrides:
        valid = {f.name for f in dataclasses.fields(SpreadParams)}
        for name in overrides:
            if name not in valid:
                raise TypeError(
                    f"unknown spread parameter {name!r}; valid: {', '.join(sorted(valid))}"
                )
        params.update(overrides)
    return params


def _small_index(a: np.ndarray) -> np.ndarray:
    """int32 when it fits (halves the memory of the position maps), else int64."""
    return a.astype(np.int32) if len(a) <= _INT32_MAX else a.astype(np.int64)


class CausalGraph:
    """Forward + reverse CSR over typed causal edges, with id ↔ index mapping.

    ``CausalGraph(node_ids, edges)``: ``edges`` yields ``(src_id, dst_id, relation, confidence)``
    or ``(src_id, dst_id, relation, confidence, weight)``; the edge key of an edge (for
    :meth:`invalidate`) is its position in ``edges``.
    """

    def __init__(self, node_ids: Iterable[Hashable], edges: Iterable[Sequence[Any]]) -> None:
        ids = list(node_ids)
        index: dict[Hashable, int] = {}
        for i, nid in enumerate(ids):
            try:
                if nid in index:
                    raise ValueError(f"duplicate node id {nid!r} in node_ids")
            except TypeError:
                raise TypeError(f"node ids must be hashable, got {type(nid).__name__}") from None
            index[nid] = i
        src: list[int] = []
        dst: list[int] = []
        values: list[float] = []
        inhib: list[bool] = []
        for k, edge in enumerate(edges):
            try:
                n_fields = len(edge)
            except TypeError:
                raise ValueError(f"edge {k} must be a tuple, got {type(edge).__name__}") from None
            if n_fields == 4:
                s, d, rel, conf = edge
                weight: Any = 1.0
            elif n_fields == 5:
                s, d, rel, conf, weight = edge
            else:
                raise ValueError(
                    f"edge {k} must be (src, dst, relation, confidence[, weight]), "
                    f"got {n_fields} fields"
                )
            relation = Relation.parse(rel)
            c = real_number(f"confidence of edge {k}", conf)
            if not 0.0 <= c <= 1.0:
                raise ValueError(f"confidence of edge {k} must be in [0, 1], got {conf!r}")
            w = real_number(f"weight of edge {k}", weight)
            for name, nid in (("source", s), ("target", d)):
                try:
                    known = nid in index
                except TypeError:
                    known = False
                if not known:
                    raise KeyError(f"edge {k}: unknown {name} node id {nid!r}")
            src.append(index[s])
            dst.append(index[d])
            values.append(c * relation.coefficient * w)
            inhib.append(relation.inhibitory)
        self._build(
            len(ids), np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64),
            np.asarray(values, dtype=np.float64), np.asarray(inhib, dtype=np.uint8),
            None, None, ids, index,
        )

    @classmethod
    def from_arrays(cls, n_nodes: int, src: Any, dst: Any, values: Any, *,
                    inhibitory: Any = None, valid: Any = None, edge_keys: Any = None,
                    node_ids: Sequence[Hashable] | None = None) -> "CausalGraph":
        """Fast path for the store: int indices, pre-multiplied float32 values.

        ``edge_keys`` (int64, unique) are the keys :meth:`invalidate` accepts (store row ids);
        by default the position of the edge.  ``node_ids`` default to the indices themselves.
        Edges given sorted by ``src`` skip one position map (it is the identity).
        """
        self = cls.__new__(cls)
        index = None
        ids = None
        if node_ids is not None:
            ids = list(node_ids)
            if len(ids) != n_nodes:
                raise ValueError(
                    f"node_ids must have n_nodes={n_nodes} entries, got {len(ids)}"
                )
            index = {}
            for i, nid in enumerate(ids):
                if nid in index:
                    raise ValueError(f"duplicate node id {nid!r} in node_ids")
                index[nid] = i
        self._build(n_nodes, src, dst, values, inhibitory, valid, edge_keys, ids, index)
        return self

    def _build(self, n_nodes, src, dst, values, inhibitory, valid, edge_keys, ids, index) -> None:
        src_a = np.asarray(src)
        n_edges = len(src_a)
        inhib_a = None
        if inhibitory is not None:
            inhib_a = np.asarray(inhibitory)
            if inhib_a.ndim == 1 and len(inhib_a) == n_edges and not inhib_a.any():
                inhib_a = None  # no inhibitory edge: save a byte per edge and direction
        fwd, fwd_pos = coo_to_csr(n_nodes, src_a, dst, values, valid=valid,
                                   inhibitory=inhib_a)
        e = n_edges
        # every query reads valid and invalidate() writes it: the CSRs expose read-only views,
        # the graph keeps the only writable handles (private, fresh arrays nobody else holds)
        fwd_valid = np.ones(e, dtype=np.uint8) if fwd.valid is None else fwd.valid.copy()
        # weights too: ``reweight`` writes them (the kernel output is private; the CSR sees a read-only view)
        fwd_w = fwd.weights
        fwd_w.flags.writeable = True
        fwd = CSR._adopt(fwd.indptr, fwd.indices, fwd_w.view(), fwd_valid.view(), fwd.inhibitory)
        # the reverse CSR is the transpose of the forward one (stable by target, then forward
        # position); the same pass yields both position maps
        transpose = _kernels.transpose_csr if e < _INT32_MAX else _kernels.reference.transpose_csr
        r_indptr, r_indices, r_weights, r_valid, r_inhib, rev_of_fwd, fwd_of_rev = transpose(
            fwd.n_nodes, fwd.indptr, fwd.indices, fwd.weights, fwd_valid, fwd.inhibitory)
        rev = CSR._adopt(r_indptr, r_indices, r_weights.view(), r_valid.view(), r_inhib)
        self._fwd_w, self._rev_w = fwd_w, r_weights
        self._forward = fwd
        self._reverse = rev
        self._fwd_valid: np.ndarray = fwd_valid
        self._rev_valid: np.ndarray = r_valid
        self._rev_of_fwd = rev_of_fwd
        self._fwd_of_rev = fwd_of_rev
        identity = e < 2 or bool((src_a[1:] >= src_a[:-1]).all())
        self._fwd_pos = None if identity else _small_index(fwd_pos)
        # edge keys -> edge ordinal
        self._keys_sorted: np.ndarray | None = None
        self._key_order: np.ndarray | None = None
        if edge_keys is not None:
            keys = np.asarray(edge_keys)
            if keys.ndim != 1 or len(keys) != e:
                raise ValueError(f"edge_keys must be 1-D with one key per edge ({e})")
            if e and keys.dtype.kind not in "iu":
                raise ValueError(f"edge_keys must be integers, got dtype {keys.dtype}")
            keys = keys.astype(np.int64) if e else np.zeros(0, np.int64)
            if e > 1 and bool((np.diff(keys) > 0).all()):
                self._keys_sorted = keys
            else:
                order = np.argsort(keys, kind="stable")
                ks = keys[order]
                if e > 1 and not bool((np.diff(ks) > 0).all()):
                    dup = ks[np.flatnonzero(np.diff(ks) == 0)[0]]
                    raise ValueError(f"edge_keys must be unique, {int(dup)} appears twice")
                self._keys_sorted = ks
                self._key_order = _small_index(order)
        self._ids: list[Hashable] | None = ids
        self._index: dict[Hashable, int] | None = index

    # -- the two projections (read-only) ------------------------------------------------------
    @property
    def forward(self) -> CSR:
        """The forward CSR (edges src -> dst); read-only, like its arrays."""
        return self._forward

    @property
    def reverse(self) -> CSR:
        """The reverse CSR (edges dst -> src), for tracing causes; read-only."""
        return self._reverse

    # -- sizes and ids ----------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return self.forward.n_nodes

    @property
    def n_edges(self) -> int:
        return self.forward.n_edges

    # -- persistence (sidecar snapshots of the store's projection) ----------------------------
    _STATE_OPTIONAL = ("fwd_inhibitory", "rev_inhibitory", "fwd_pos", "keys_sorted", "key_order")

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Every array of the graph (absent optional ones left out), for ``from_state_arrays``.
        Only a graph over integer indices (``node_ids`` not given) can be saved."""
        if self._ids is not None:
            raise ValueError("only a graph built from arrays without node_ids can be saved")
        f, r = self._forward, self._reverse
        out = {"fwd_indptr": f.indptr, "fwd_indices": f.indices, "fwd_weights": f.weights,
               "fwd_valid": self._fwd_valid, "rev_indptr": r.indptr, "rev_indices": r.indices,
               "rev_weights": r.weights, "rev_valid": self._rev_valid, "rev_of_fwd": self._rev_of_fwd,
               "fwd_of_rev": self._fwd_of_rev, "fwd_inhibitory": f.inhibitory, "rev_inhibitory": r.inhibitory,
               "fwd_pos": self._fwd_pos, "keys_sorted": self._keys_sorted, "key_order": self._key_order}
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_state_arrays(cls, arrays: Mapping[str, np.ndarray]) -> "CausalGraph":
        """Inverse of ``to_arrays`` over arrays that nobody else holds (e.g. a copy-on-write map).

        Checks the structure the compiled kernels rely on (dtypes, lengths, pointers monotone,
        targets and positions in range) and raises ``ValueError`` when anything disagrees, so a
        damaged file can never reach a ``nogil`` kernel."""
        def get(name: str, kind: str | None = None) -> np.ndarray:
            a = arrays.get(name)
            if a is None or a.ndim != 1:
                raise ValueError(f"graph state: {name} missing or not 1-D")
            if kind is not None and a.dtype != np.dtype(kind):
                raise ValueError(f"graph state: {name} has dtype {a.dtype}, expected {kind}")
            return a

        fi, ri = get("fwd_indptr", "int64"), get("rev_indptr", "int64")
        n = fi.shape[0] - 1
        if n < 0 or ri.shape[0] != n + 1:
            raise ValueError("graph state: indptr lengths disagree")
        e = int(fi[-1])
        for side, ptr in (("fwd", fi), ("rev", ri)):
            if ptr[0] != 0 or int(ptr[-1]) != e or (n and bool((np.diff(ptr) < 0).any())):
                raise ValueError(f"graph state: {side}_indptr is not a valid row pointer")
            idx = get(f"{side}_indices", "int32")
            if idx.shape[0] != e or (e and (int(idx.min()) < 0 or int(idx.max()) >= n)):
                raise ValueError(f"graph state: {side}_indices out of range")
            weights = get(f"{side}_weights", "float32")
            if weights.shape[0] != e or get(f"{side}_valid", "uint8").shape[0] != e:
                raise ValueError(f"graph state: {side} weights/valid lengths disagree")
            if e and not bool(np.isfinite(weights).all()):  # SPEC §3: the kernels see finite weights only
                raise ValueError(f"graph state: {side}_weights not all finite")
            inh = arrays.get(f"{side}_inhibitory")
            if inh is not None and (inh.dtype != np.uint8 or inh.shape != (e,)):
                raise ValueError(f"graph state: {side}_inhibitory malformed")
        for name in ("rev_of_fwd", "fwd_of_rev", "fwd_pos", "key_order"):
            a = arrays.get(name)
            if a is None:
                if name in ("rev_of_fwd", "fwd_of_rev"):
                    raise ValueError(f"graph state: {name} missing")
                continue
            if a.dtype.kind != "i" or a.shape != (e,) or (e and (int(a.min()) < 0 or int(a.max()) >= e)):
                raise ValueError(f"graph state: {name} malformed")
        keys = arrays.get("keys_sorted")
        if keys is not None and (keys.dtype != np.int64 or keys.shape != (e,)
                                 or (e > 1 and not bool((np.diff(keys) > 0).all()))):
            raise ValueError("graph state: keys_sorted malformed")
        self = cls.__new__(cls)
        fwd_valid, rev_valid = arrays["fwd_valid"], arrays["rev_valid"]
        self._fwd_w, self._rev_w = arrays["fwd_weights"], arrays["rev_weights"]
        self._forward = CSR._adopt(fi, arrays["fwd_indices"], self._fwd_w.view(), fwd_valid.view(),
                                   arrays.get("fwd_inhibitory"))
        self._reverse = CSR._adopt(ri, arrays["rev_indices"], self._rev_w.view(), rev_valid.view(),
                                   arrays.get("rev_inhibitory"))
        self._fwd_valid, self._rev_valid = fwd_valid, rev_valid
        self._rev_of_fwd, self._fwd_of_rev = arrays["rev_of_fwd"], arrays["fwd_of_rev"]
        self._fwd_pos = arrays.get("fwd_pos")
        self._keys_sorted, self._key_order = keys, arrays.get("key_order")
        self._ids = self._index = None
        return self

    @property
    def nbytes(self) -> int:
        """Bytes of the projection: both CSRs, the position maps and the edge-key index."""
        total = self.forward.nbytes + self.reverse.nbytes
        for a in (self._rev_of_fwd, self._fwd_of_rev, self._fwd_pos, self._keys_sorted,
                  self._key_order):
            if a is not None:
                total += a.nbytes
        return total

    def __repr__(self) -> str:
        return f"CausalGraph(n_nodes={self.n_nodes}, n_edges={self.n_edges})"

    def index_of(self, node_id: Hashable) -> int:
        """Dense index of ``node_id``; unknown ids raise ``KeyError`` naming the id."""
        if self._index is not None:
            try:
                return self._index[node_id]
            except (KeyError, TypeError):
                raise KeyError(f"unknown node id {node_id!r}") from None
        try:  # an integer id (int, numpy integer: anything with __index__); others raise TypeError
            i = operator.index(cast(SupportsIndex, node_id))
        except TypeError:
            raise KeyError(f"unknown node id {node_id!r}") from None
        if not 0 <= i < self.n_nodes:
            raise KeyError(f"unknown node id {node_id!r}")
        return i

    def node_id(self, idx: int) -> Hashable:
        """Node id at dense index ``idx`` (``IndexError`` when out of range)."""
        i = operator.index(idx)
        if not 0 <= i < self.n_nodes:
            raise IndexError(f"node index {idx} out of range [0, {self.n_nodes})")
        return i if self._ids is None else self._ids[i]

    @property
    def node_ids(self) -> list[Hashable]:
        return list(range(self.n_nodes)) if self._ids is None else list(self._ids)

    # -- validity -----------------------------------------------------------------------------
    def _ordinal(self, edge_key: Any) -> int:
        try:
            k = operator.index(edge_key)
        except TypeError:
            raise KeyError(f"unknown edge key {edge_key!r}") from None
        if self._keys_sorted is None:
            if not 0 <= k < self.n_edges:
                raise KeyError(f"unknown edge key {edge_key!r}")
            return k
        i = int(np.searchsorted(self._keys_sorted, k))
        if i >= len(self._keys_sorted) or self._keys_sorted[i] != k:
            raise KeyError(f"unknown edge key {edge_key!r}")
        return i if self._key_order is None else int(self._key_order[i])

    def invalidate(self, edge_key: Any, valid: bool = False) -> None:
        """Set the validity of one edge in both directions (no rebuild)."""
        e = self._ordinal(edge_key)
        p = e if self._fwd_pos is None else int(self._fwd_pos[e])
        flag = 1 if valid else 0
        self._fwd_valid[p] = flag
        self._rev_valid[int(self._rev_of_fwd[p])] = flag

    def reweight(self, edge_key: Any, value: float) -> bool:
        """Set the (pre-multiplied) weight of one edge in both directions, in place (no rebuild): what a
        rebuild would store for it. False when this graph's weights cannot be written (then rebuild)."""
        e = self._ordinal(edge_key)
        if not (self._fwd_w.flags.writeable and self._rev_w.flags.writeable):
            return False
        w = np.float32(value)
        if not np.isfinite(w):
            raise ValueError(f"edge weight must be finite, got {value!r}")
        p = e if self._fwd_pos is None else int(self._fwd_pos[e])
        self._fwd_w[p] = w
        self._rev_w[int(self._rev_of_fwd[p])] = w
        return True

    def invalidate_node(self, node_id: Hashable, valid: bool = False) -> None:
        """Set the validity of every in- and out-edge of ``node_id`` in both directions."""
        i = self.index_of(node_id)
        flag = 1 if valid else 0
        a, b = int(self.forward.indptr[i]), int(self.forward.indptr[i + 1])
        self._fwd_valid[a:b] = flag
        self._rev_valid[self._rev_of_fwd[a:b]] = flag
        a, b = int(self.reverse.indptr[i]), int(self.reverse.indptr[i + 1])
        self._rev_valid[a:b] = flag
        self._fwd_valid[self._fwd_of_rev[a:b]] = flag

    def is_valid(self, edge_key: Any) -> bool:
        e = self._ordinal(edge_key)
        p = e if self._fwd_pos is None else int(self._fwd_pos[e])
        return bool(self._fwd_valid[p])

    # -- spreading ----------------------------------------------------------------------------
    def _overlay_csr(self, extra: Any, reverse: bool) -> CSR | None:
        if extra is None:
            return None
        if isinstance(extra, CausalGraph):
            return extra.reverse if reverse else extra.forward
        if isinstance(extra, CSR):
            return extra
        raise TypeError(f"extra must be a CausalGraph, a CSR or None, got {type(extra).__name__}")

    def spread_indices(self, seed_idx: Any, seed_energy: Any, *, reverse: bool = False,
                       params: "str | SpreadParams | Mapping[str, Any]" = "causal",
                       extra: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """Raw form of :meth:`spread`: dense indices in, ``(nodes int32, energy float32)`` out."""
        kwargs = resolve_params(params)
        csr = self.reverse if reverse else self.forward
        return csr.spread(seed_idx, seed_energy, extra=self._overlay_csr(extra, reverse),
                          **kwargs)

    def spread(self, seeds: "Mapping[Hashable, float] | Iterable[tuple[Hashable, float]]", *,
               reverse: bool = False, preset: "str | SpreadParams" = "causal",
               texts: Mapping[Hashable, str] | None = None, extra: Any = None,
               **overrides: Any) -> list[Activation]:
        """Spreading activation from ``seeds`` (id → energy); ``reverse`` traces causes.

        ``preset``: "causal" | "pedsa" | "pedsa_retrieval" or a ``SpreadParams``; keyword
        ``overrides`` replace single parameters.  ``extra``: overlay ``CausalGraph`` in the same
        index space (index i is the same node in both; it may have more nodes) or a ``CSR``.
        """
        params = resolve_params(preset, overrides)
        overlay = extra if isinstance(extra, CausalGraph) else None
        pairs = seeds.items() if isinstance(seeds, Mapping) else seeds
        idx: list[int] = []
        energy: list[float] = []
        for item in pairs:
            try:
                if isinstance(item, (str, bytes)):
                    raise TypeError
                nid, e = item
            except (TypeError, ValueError):
                raise ValueError(
                    f"seeds must be a mapping id -> energy or (id, energy) pairs, got {item!r}"
                ) from None
            idx.append(self._lookup(nid, overlay))
            energy.append(real_number(f"energy of seed {nid!r}", e))
        nodes, values = self.spread_indices(
            np.asarray(idx, dtype=np.int64), np.asarray(energy, dtype=np.float64),
            reverse=reverse, params=params, extra=extra,
        )
        out = []
        for j, v in zip(nodes.tolist(), values.tolist()):
            nid = self._id_at(j, overlay)
            text = None
            if texts is not None:
                try:
                    text = texts.get(nid) if hasattr(texts, "get") else texts[nid]
                except (KeyError, TypeError):
                    text = None
            out.append(Activation(node_id=nid, text=text, energy=v))
        return out

    def _lookup(self, nid: Hashable, overlay: "CausalGraph | None") -> int:
        try:
            return self.index_of(nid)
        except KeyError:
            if overlay is not None:
                return overlay.index_of(nid)
            raise

    def _id_at(self, j: int, overlay: "CausalGraph | None") -> Hashable:
        if j < self.n_nodes:
            return self.node_id(j)
        if overlay is not None:
            return overlay.node_id(j)
        return j


