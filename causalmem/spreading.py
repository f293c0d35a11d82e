"""Validated wrappers around the spreading kernels (SPEC §3).

``CSR`` casts and validates the graph arrays once, at construction; ``CSR.spread`` then checks
only the seeds and the parameters (O(len(seeds))) before the compiled kernel runs, which is what
a graph that answers many queries needs.  ``spread(...)`` is ``CSR(...).spread(...)``.

Thread safety: a ``CSR`` may be queried from several threads at once.  Each call borrows a
scratch workspace from a small pool guarded by a ``threading.Lock`` (held only to pop/push, not
during the traversal), so concurrent calls run in parallel with the GIL released, each on its own
workspace; the pool grows to the peak number of concurrent callers.  The graph arrays themselves
are never written by a query.
"""
from __future__ import annotations

import math
import operator
import threading
from typing import Any

import numpy as np

from . import _kernels

__all__ = ["CSR", "spread", "DEFAULT_PARAMS"]

DEFAULT_PARAMS: dict[str, Any] = {
    "decay": 0.7,
    "threshold": 0.1,
    "lo": -1.0,
    "hi": 1.0,
    "max_steps": 5,
    "reemit": True,
    "top_k": 0,
    "teleport": 0.0,
    "inhibit_multiplier": 1.0,
}
_FLOAT_PARAMS = ("decay", "threshold", "lo", "hi", "teleport", "inhibit_multiplier")
_INT_PARAMS = ("max_steps", "top_k")
_INT32_MAX = 2**31 - 1
_F32_MAX = float(np.finfo(np.float32).max)
_EMPTY_I32 = np.zeros(0, dtype=np.int32)
_EMPTY_F32 = np.zeros(0, dtype=np.float32)


def _is_real_dtype(dtype: np.dtype) -> bool:
    return dtype.kind in "biuf"


def _as_1d(name: str, value: Any) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists, odd objects
        raise ValueError(f"{name} must be a 1-D numeric array: {exc}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got an array with ndim={arr.ndim}")
    if arr.size == 0 and arr.dtype.kind not in "biuf":
        arr = np.zeros(0, np.float64)  # an empty list is float64 already; [] of objects is fine
    if not _is_real_dtype(arr.dtype):
        raise ValueError(f"{name} must have a numeric dtype, got {arr.dtype}")
    return arr


def _int_array(name: str, value: Any) -> np.ndarray:
    arr = _as_1d(name, value)
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must have an integer dtype, got {arr.dtype}")
    return arr


def _flag_array(name: str, value: Any, n_edges: int) -> np.ndarray | None:
    if value is None:
        return None
    arr = _as_1d(name, value)
    if len(arr) != n_edges:
        raise ValueError(
            f"{name} must have one entry per edge: len({name})={len(arr)}, len(indices)={n_edges}"
        )
    if arr.dtype == np.uint8:
        return np.ascontiguousarray(arr)
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite")
    return np.ascontiguousarray(arr != 0, dtype=np.uint8)


def _weight_array(name: str, value: Any, n_edges: int | None = None) -> np.ndarray:
    arr = _as_1d(name, value)
    if n_edges is not None and len(arr) != n_edges:
        raise ValueError(
            f"{name} must have one entry per edge: len({name})={len(arr)}, len(indices)={n_edges}"
        )
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.ascontiguousarray(arr, dtype=np.float32)
    if out.size and not np.isfinite(out).all():
        raise ValueError(f"{name} must be finite (NaN/inf or a value beyond float32 range found)")
    return out


def real_number(name: str, value: Any) -> float:
    """``value`` as a finite float; ``ValueError`` naming ``name`` otherwise (bools refused)."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


def _check_param(name: str, value: Any) -> Any:
    if name == "reemit":
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if isinstance(value, (int, np.integer)) and value in (0, 1):
            return bool(value)
        raise ValueError(f"reemit must be a bool, got {value!r}")
    if name in _INT_PARAMS:
        if isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{name} must be an integer, got {value!r}")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        try:
            n = operator.index(value)
        except TypeError:
            raise ValueError(f"{name} must be an integer, got {value!r}") from None
        if n < 0:
            raise ValueError(f"{name} must be >= 0, got {n}")
        if n > _INT32_MAX:
            raise ValueError(f"{name} must be <= {_INT32_MAX}, got {n}")
        return n
    v = real_number(name, value)
    if abs(v) > _F32_MAX:
        raise ValueError(f"{name} must be within float32 range, got {value!r}")
    if name == "decay" and v < 0:
        raise ValueError(f"decay must be >= 0, got {v}")
    if name == "threshold" and v < 0:
        raise ValueError(f"threshold must be >= 0, got {v}")
    if name == "teleport" and not 0.0 <= v <= 1.0:
        raise ValueError(f"teleport must be in [0, 1], got {v}")
    if name == "inhibit_multiplier" and v < 0:
        raise ValueError(f"inhibit_multiplier must be >= 0, got {v}")
    return v


_PARAM_ORDER = tuple(DEFAULT_PARAMS)
_PARAM_CACHE: dict[tuple, tuple] = {}
_PARAM_CACHE_MAX = 256


def _param_tuple(params: dict[str, Any]) -> tuple:
    """Validated parameters in kernel order; repeated parameter sets hit a small cache."""
    if not params:
        key: tuple = ()
    else:
        try:
            key = tuple(sorted((k, type(v), v) for k, v in params.items()))
            hit = _PARAM_CACHE.get(key)
        except TypeError:  # unhashable or unorderable values: validate, no caching
            p = _check_params(params)
            return tuple(p[k] for k in _PARAM_ORDER)
        if hit is not None:
            return hit
    p = _check_params(params)
    out = tuple(p[k] for k in _PARAM_ORDER)
    if len(_PARAM_CACHE) >= _PARAM_CACHE_MAX:
        _PARAM_CACHE.clear()
    _PARAM_CACHE[key] = out
    return out


def _check_params(params: dict[str, Any]) -> dict[str, Any]:
    out = dict(DEFAULT_PARAMS)
    for name, value in params.items():
        if name not in DEFAULT_PARAMS:
            raise TypeError(
                f"spread() got an unexpected parameter {name!r}; valid: {', '.join(DEFAULT_PARAMS)}"
            )
        out[name] = _check_param(name, value)
    if out["lo"] > out["hi"]:
        raise ValueError(f"lo must be <= hi, got lo={out['lo']} > hi={out['hi']}")
    return out


def _may_alias(out: np.ndarray | None, given: Any) -> bool:
    """Whether the validated array ``out`` may share memory with what the caller passed."""
    if out is None:
        return False
    return not isinstance(given, np.ndarray) or np.may_share_memory(out, given)


def _validate(indptr: Any, indices: Any, weights: Any, valid: Any,
              inhibitory: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                        np.ndarray | None, np.ndarray | None]:
    """The five arrays cast to the kernel dtypes, contiguous and checked (SPEC §3)."""
    ip = _int_array("indptr", indptr)
    ix = _int_array("indices", indices)
    if len(ip) < 1:
        raise ValueError("indptr must have at least one entry (N+1 entries for N nodes)")
    n = len(ip) - 1
    if n > _INT32_MAX:
        raise ValueError(f"too many nodes for int32 indices: {n}")
    e = len(ix)
    if ip.dtype.kind == "u" and ip.size and ip.max() > np.iinfo(np.int64).max:
        raise ValueError("indptr values exceed int64")
    ip64 = np.ascontiguousarray(ip, dtype=np.int64)
    if ip64[0] != 0:
        raise ValueError(f"indptr[0] must be 0, got {ip64[0]}")
    if ip64[-1] != e:
        raise ValueError(
            f"indptr[-1] must equal len(indices) = {e}, got {ip64[-1]} "
            f"(indptr has the wrong length or values)"
        )
    if n > 0 and (np.diff(ip64) < 0).any():
        raise ValueError("indptr must be non-decreasing (monotone)")
    if e:
        lo_i, hi_i = ix.min(), ix.max()
        if lo_i < 0 or hi_i >= n:
            bad = lo_i if lo_i < 0 else hi_i
            raise ValueError(f"indices out of range: found {int(bad)}, must be in [0, {n})")
    ix32 = np.ascontiguousarray(ix, dtype=np.int32)
    w = _weight_array("weights", weights, e)
    return (ip64, ix32, w, _flag_array("valid", valid, e),
            _flag_array("inhibitory", inhibitory, e))


def _owned(arr: np.ndarray | None, copy: bool) -> np.ndarray | None:
    """``arr`` as an array the CSR owns, read-only: a private copy when ``copy``, else
    ``arr`` itself taken over (the caller's array object becomes read-only too)."""
    if arr is None:
        return None
    if copy:
        arr = arr.copy()
    arr.flags.writeable = False
    return arr


class CSR:
    """A validated compressed-sparse-row graph ready for many spreading queries.

    Parameters
    ----------
    indptr : int array, shape (N+1,)
        Row pointers; ``indptr[0] == 0``, non-decreasing, ``indptr[-1] == len(indices)``.
    indices : int array, shape (E,)
        Target node of every edge, in ``[0, N)``.
    weights : real array, shape (E,)
        Pre-multiplied edge values (finite).
    valid, inhibitory : array-like of shape (E,), optional
        Edge flags (nonzero = true).  ``None``: every edge valid / no edge inhibitory.
    copy : bool, default True
        The CSR owns what it validated (as ``scipy.sparse.csgraph`` copies in
        ``validate_graph``): by default every array is copied, so later writes to the caller's
        arrays change nothing here.  ``copy=False`` opts out explicitly: arrays that already
        have the kernel dtype (int64 / int32 / float32 / uint8) and are C-contiguous are
        *taken over* without a copy and made read-only, the caller's array objects included
        (writing to them then raises).  Memory safety does not rest on that: the compiled
        kernel never reads or writes outside the graph arrays or its workspace, whatever is
        written where (a graph changed behind its back gives meaningless energies, not a
        crash).

    The arrays are read-only properties holding read-only arrays: no attribute can be
    reassigned and no element written through them.  (``CausalGraph`` keeps a private
    writable handle on its ``valid`` arrays to flip edge validity without a rebuild.)
    """

    __slots__ = ("_indptr", "_indices", "_weights", "_valid", "_inhibitory", "_n", "_pool",
                 "_lock", "_gv", "__weakref__")

    def __init__(self, indptr: Any, indices: Any, weights: Any, *, valid: Any = None,
                 inhibitory: Any = None, copy: bool = True) -> None:
        if not isinstance(copy, (bool, np.bool_)):
            raise TypeError(f"copy must be a bool, got {copy!r}")
        arrays = _validate(indptr, indices, weights, valid, inhibitory)
        given = (indptr, indices, weights, valid, inhibitory)
        # an array the validation made itself (a cast) is private already: no second copy
        self._init(*(_owned(a, bool(copy) and _may_alias(a, g)) for a, g in zip(arrays, given)))

    @classmethod
    def _adopt(cls, indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray,
               valid: np.ndarray | None = None, inhibitory: np.ndarray | None = None) -> "CSR":
        """A CSR over kernel-typed arrays the caller has just built and nobody else holds
        (valid by construction): no checks, no copy; they are made read-only."""
        self = cls.__new__(cls)
        self._init(*(_owned(a, False) for a in (indptr, indices, weights, valid, inhibitory)))
        return self

    def _init(self, indptr, indices, weights, valid, inhibitory) -> None:
        self._indptr, self._indices, self._weights = indptr, indices, weights
        self._valid, self._inhibitory = valid, inhibitory
        self._n = len(indptr) - 1
        self._pool: list[Any] = []
        self._lock = threading.Lock()
        self._gv: Any = None  # kernel view (raw pointers), made at the first query

    # -- the arrays (read-only) -------------------------------------------------------------
    @property
    def indptr(self) -> np.ndarray:
        """Row pointers, int64[N+1] (read-only)."""
        return self._indptr

    @property
    def indices(self) -> np.ndarray:
        """Edge targets, int32[E] (read-only)."""
        return self._indices

    @property
    def weights(self) -> np.ndarray:
        """Pre-multiplied edge values, float32[E] (read-only)."""
        return self._weights

    @property
    def valid(self) -> np.ndarray | None:
        """Edge validity flags, uint8[E] (read-only), or None: every edge valid."""
        return self._valid

    @property
    def inhibitory(self) -> np.ndarray | None:
        """Inhibitory flags, uint8[E] (read-only), or None: no edge inhibitory."""
        return self._inhibitory

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_coo(cls, n_nodes: int, src: Any, dst: Any, weights: Any, *, valid: Any = None,
                 inhibitory: Any = None) -> "CSR":
        """CSR from edge lists, ordered by (src, original position) (a counting sort)."""
        return coo_to_csr(n_nodes, src, dst, weights, valid=valid, inhibitory=inhibitory)[0]

    # -- sizes ----------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return self._n

    @property
    def n_edges(self) -> int:
        return len(self.indices)

    @property
    def nbytes(self) -> int:
        """Bytes held by the graph arrays (not the per-query workspaces)."""
        return sum(a.nbytes for a in (self.indptr, self.indices, self.weights, self.valid,
                                      self.inhibitory) if a is not None)

    def __repr__(self) -> str:
        return f"CSR(n_nodes={self.n_nodes}, n_edges={self.n_edges})"

    # -- queries --------------------------------------------------------------------------
    def _view(self) -> Any:
        gv = self._gv
        if gv is None:
            gv = self._gv = _kernels.GraphView(self.indptr, self.indices, self.weights,
                                               self.valid, self.inhibitory)
        return gv

    def spread(self, seed_nodes: Any, seed_energy: Any, *, extra: "CSR | None" = None,
               **params: Any) -> tuple[np.ndarray, np.ndarray]:
        """Spreading activation from the seeds (SPEC §3).

        ``extra`` is an optional overlay ``CSR`` (it may have more nodes than this one) whose
        edges are traversed exactly as if they were part of this graph, in the same step.  The
        node space of the call is ``max(self.n_nodes, extra.n_nodes)``.  Returns
        ``(nodes int32, energy float32)`` sorted by |energy| descending, ties by lower index.
        Costs O(len(seeds)) of checks, then the traversal; never O(N) or O(E).
        """
        return self._spread(seed_nodes, seed_energy, extra, params)[:2]

    def spread_with_stats(self, seed_nodes: Any, seed_energy: Any, *, extra: "CSR | None" = None,
                          **params: Any) -> tuple[np.ndarray, np.ndarray, int]:
        """Like :meth:`spread`, also returning the number of edges scanned (benchmarks)."""
        return self._spread(seed_nodes, seed_energy, extra, params)

    def _spread(self, seed_nodes, seed_energy, extra, params):
        p = _param_tuple(params)
        if extra is not None and not isinstance(extra, CSR):
            raise TypeError(f"extra must be a CSR or None, got {type(extra).__name__}")
        n = self._n if extra is None else max(self._n, extra._n)
        nodes, energy = _check_seeds(seed_nodes, seed_energy, n)
        if len(nodes) == 0 or n == 0:
            return _EMPTY_I32.copy(), _EMPTY_F32.copy(), 0
        # Thread safety: each call borrows its own workspace from a lock-protected pool.
        with self._lock:
            ws = self._pool.pop() if self._pool else None
        if ws is None:
            ws = _kernels.SpreadWorkspace(n)
        try:
            out = _kernels.spread_view(self._view(), None if extra is None else extra._view(),
                                       nodes, energy, *p, ws)
            scanned = ws.edges_scanned
        finally:
            with self._lock:
                self._pool.append(ws)
        return out[0], out[1], scanned

    def links_among(self, nodes: Any) -> np.ndarray:
        """Valid edges of this graph joining two of ``nodes``: ``int64[M, 2]`` rows ``(k, j)``
        (positions in ``nodes``, ``k != j``) with an edge ``nodes[k] -> nodes[j]``, by ``k``
        then CSR order.  ``nodes`` are non-negative integers; one beyond the graph has no
        edges.  Costs the out-degrees of ``nodes`` (compiled), never O(N) or O(E)."""
        arr = _int_array("nodes", nodes)
        if arr.size and (arr.min() < 0 or arr.max() > _INT32_MAX):
            bad = arr.min() if arr.min() < 0 else arr.max()
            raise ValueError(f"nodes must be in [0, {_INT32_MAX}], found {int(bad)}")
        if arr.size == 0:
            return np.zeros((0, 2), dtype=np.int64)
        return _kernels.links_among(self._view(), np.ascontiguousarray(arr, dtype=np.int32))


def _check_seeds(seed_nodes: Any, seed_energy: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    if (type(seed_nodes) is np.ndarray and type(seed_energy) is np.ndarray
            and seed_nodes.dtype == np.int32 and seed_energy.dtype == np.float32
            and seed_nodes.ndim == 1 and seed_energy.ndim == 1
            and seed_nodes.flags.c_contiguous and seed_energy.flags.c_contiguous
            and len(seed_nodes) == len(seed_energy)):
        # fast path: already kernel-typed; one compiled O(len(seeds)) check
        if _kernels.validate_seeds(seed_nodes, seed_energy, n) < 0:
            return seed_nodes, seed_energy
    nodes = _as_1d("seed_nodes", seed_nodes)
    energy = _as_1d("seed_energy", seed_energy)
    if len(nodes) != len(energy):
        raise ValueError(
            f"seed_nodes and seed_energy must have the same length, got {len(nodes)} and "
            f"{len(energy)}"
        )
    if len(nodes) == 0:
        return _EMPTY_I32, _EMPTY_F32
    if nodes.dtype.kind not in "iu":
        raise ValueError(f"seed_nodes must be integers, got dtype {nodes.dtype}")
    lo_s, hi_s = nodes.min(), nodes.max()
    if lo_s < 0 or hi_s >= n:
        bad = lo_s if lo_s < 0 else hi_s
        raise ValueError(f"seed_nodes out of range: found {int(bad)}, graph has {n} nodes")
    if energy.dtype.kind == "f" and not np.isfinite(energy).all():
        raise ValueError("seed_energy must be finite")
    if energy.dtype != np.float32 or not energy.flags.c_contiguous:
        # beyond-float32 magnitudes saturate (they are clamped to [lo, hi] anyway)
        energy = np.clip(energy.astype(np.float64), -_F32_MAX, _F32_MAX)
    return (np.ascontiguousarray(nodes, dtype=np.int32),
            np.ascontiguousarray(energy, dtype=np.float32))


def coo_to_csr(n_nodes: Any, src: Any, dst: Any, weights: Any, *, valid: Any = None,
               inhibitory: Any = None) -> tuple[CSR, np.ndarray]:
    """Validated COO -> CSR; also returns ``pos`` (CSR position of every input edge)."""
    try:
        n = operator.index(n_nodes)
    except TypeError:
        raise ValueError(f"n_nodes must be an integer, got {n_nodes!r}") from None
    if n < 0 or n > _INT32_MAX:
        raise ValueError(f"n_nodes must be in [0, {_INT32_MAX}], got {n}")
    s = _int_array("src", src)
    d = _int_array("dst", dst)
    e = len(s)
    if len(d) != e:
        raise ValueError(f"src and dst must have the same length, got {e} and {len(d)}")
    for name, arr in (("src", s), ("dst", d)):
        if e and (arr.min() < 0 or arr.max() >= n):
            bad = arr.min() if arr.min() < 0 else arr.max()
            raise ValueError(f"{name} out of range: found {int(bad)}, must be in [0, {n})")
    w = _weight_array("weights", weights, e)
    v = _flag_array("valid", valid, e)
    h = _flag_array("inhibitory", inhibitory, e)
    s32 = np.ascontiguousarray(s, dtype=np.int32)
    d32 = np.ascontiguousarray(d, dtype=np.int32)
    indptr, indices, wts, vv, hh, pos = _kernels.coo_to_csr(n, s32, d32, w, v, h)
    return CSR._adopt(indptr, indices, wts, vv, hh), pos


def spread(indptr: Any, indices: Any, weights: Any, seed_nodes: Any, seed_energy: Any, *,
           valid: Any = None, inhibitory: Any = None, extra: CSR | None = None,
           **params: Any) -> tuple[np.ndarray, np.ndarray]:
    """Spreading activation over raw CSR arrays: ``CSR(...).spread(...)`` (SPEC §3).

    Parameters (keyword): decay=0.7, threshold=0.1, lo=-1.0, hi=1.0, max_steps=5, reemit=True,
    top_k=0, teleport=0.0, inhibit_multiplier=1.0.  Returns ``(nodes int32, energy float32)``
    sorted by |energy| descending, ties by lower node index.
    """
    return CSR(indptr, indices, weights, valid=valid, inhibitory=inhibitory).spread(
        seed_nodes, seed_energy, extra=extra, **params
    )
