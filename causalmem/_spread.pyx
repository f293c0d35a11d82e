# cython: language_level=3
# distutils: language = c++
"""Compiled spreading-activation kernels (SPEC §3).

Every ``def`` here is a thin shell: it takes typed ``const`` memoryviews, releases the GIL and
calls a ``cdef ... noexcept nogil`` work-horse over raw pointers.  Nothing here validates the
graph arrays (``causalmem.spreading.CSR`` does that once); the shells only check what is
O(1) or O(len(seeds)) so that a misuse cannot write out of bounds of the workspace.

Float semantics are part of the contract: every quantity is float32 and every expression is
evaluated in the same order as in the reference twin ``_spread_py.py`` (sources by ascending
node index, each source's base edges then its overlay edges in CSR order).  setup.py compiles
with ``-ffp-contract=off`` so no FMA changes a rounding; the twin therefore matches bit for bit.
"""
from libc.stdint cimport int64_t, int32_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy
from libc.math cimport fabsf
from libcpp.vector cimport vector
from libcpp.pair cimport pair

import numpy as np

cdef extern from "<algorithm>" namespace "std" nogil:
    void sort[Iter](Iter first, Iter last)
    void nth_element[Iter](Iter first, Iter nth, Iter last)


ctypedef struct CSRView:
    const int64_t* indptr
    const int32_t* indices
    const float* weights
    const uint8_t* valid       # NULL: every edge valid
    const uint8_t* inhib       # NULL: no inhibitory edge
    int64_t n                  # number of rows (nodes with an indptr entry)


cdef const int64_t[::1] _EMPTY_INDPTR = np.zeros(1, dtype=np.int64)
cdef const int32_t[::1] _EMPTY_I32 = np.zeros(1, dtype=np.int32)
cdef const float[::1] _EMPTY_F32 = np.zeros(1, dtype=np.float32)


cdef class SpreadWorkspace:
    """Reusable scratch memory for :func:`spread` over graphs of up to ``n_nodes`` nodes.

    Dense per-node arrays are allocated once and kept all-zero between calls: a call resets
    only the entries it touched.  A workspace must not be used by two calls at the same time
    (``causalmem.spreading.CSR`` keeps a lock-protected pool of them).
    """

    cdef float[::1] act, nxt, src_energy
    cdef uint8_t[::1] act_mark, nxt_mark
    cdef int32_t[::1] act_list, nxt_list, src_nodes
    cdef uint64_t[::1] keys
    cdef readonly Py_ssize_t n_nodes
    cdef public int64_t edges_scanned
    cdef public int64_t steps

    def __init__(self, Py_ssize_t n_nodes=0):
        self.n_nodes = -1
        self.ensure(n_nodes)

    def ensure(self, Py_ssize_t n_nodes):
        """Grow the workspace to hold ``n_nodes`` nodes (never shrinks)."""
        if n_nodes <= self.n_nodes:
            return
        n = max(n_nodes, 1)
        self.act = np.zeros(n, dtype=np.float32)
        self.nxt = np.zeros(n, dtype=np.float32)
        self.src_energy = np.zeros(n, dtype=np.float32)
        self.act_mark = np.zeros(n, dtype=np.uint8)
        self.nxt_mark = np.zeros(n, dtype=np.uint8)
        self.act_list = np.zeros(n, dtype=np.int32)
        self.nxt_list = np.zeros(n, dtype=np.int32)
        self.src_nodes = np.zeros(n, dtype=np.int32)
        self.keys = np.zeros(n, dtype=np.uint64)
        self.n_nodes = n_nodes
        self.edges_scanned = 0
        self.steps = 0

    @property
    def nbytes(self):
        return 0 if self.n_nodes <= 0 else max(self.n_nodes, 1) * (4 * 3 + 1 * 2 + 4 * 3 + 8)


# ---------------------------------------------------------------------------------------------
# small pieces
# ---------------------------------------------------------------------------------------------

cdef inline float _clampf(float x, float lo, float hi) noexcept nogil:
    # NaN passes through unchanged and is then dropped by _active (comparisons are false).
    if x > hi:
        return hi
    if x < lo:
        return lo
    return x


cdef inline bint _active(float x, float thr) noexcept nogil:
    return fabsf(x) >= thr and x != 0.0


cdef inline uint64_t _key(float x, int32_t node) noexcept nogil:
    """Sort key: ascending key == |x| descending, then node ascending."""
    cdef float a = fabsf(x)
    cdef uint32_t bits
    memcpy(&bits, &a, 4)
    return ((<uint64_t>(0xFFFFFFFFu - bits)) << 32) | <uint64_t>(<uint32_t>node)


cdef inline int32_t _key_node(uint64_t k) noexcept nogil:
    return <int32_t>(<uint32_t>(k & 0xFFFFFFFFu))


cdef inline void _emit(const CSRView* g, int32_t s, float e, float scale_pos, float scale_inh,
                       bint use_inh, float* nxt, uint8_t* mark, int32_t* nlist,
                       Py_ssize_t* nn, int64_t* scanned) noexcept nogil:
    """Add the contributions of source ``s`` (energy ``e``) over its out-edges in ``g``."""
    cdef int64_t p, start, end
    cdef int32_t j
    cdef float w, c, ae
    cdef const uint8_t* valid = g.valid
    cdef const uint8_t* inhib = g.inhib
    cdef const int32_t* indices = g.indices
    cdef const float* weights = g.weights
    cdef Py_ssize_t m = nn[0]
    if s >= g.n:
        return
    start = g.indptr[s]
    end = g.indptr[s + 1]
    scanned[0] += end - start
    if use_inh and inhib != NULL:
        ae = fabsf(e)
        for p in range(start, end):
            if valid != NULL and valid[p] == 0:
                continue
            j = indices[p]
            w = weights[p]
            if inhib[p]:
                c = -((ae * fabsf(w)) * scale_inh)
            else:
                c = (e * w) * scale_pos
            if mark[j] == 0:
                mark[j] = 1
                nlist[m] = j
                m += 1
            nxt[j] += c
    elif valid != NULL:
        for p in range(start, end):
            if valid[p] == 0:
                continue
            j = indices[p]
            c = (e * weights[p]) * scale_pos
            if mark[j] == 0:
                mark[j] = 1
                nlist[m] = j
                m += 1
            nxt[j] += c
    else:
        for p in range(start, end):
            j = indices[p]
            c = (e * weights[p]) * scale_pos
            if mark[j] == 0:
                mark[j] = 1
                nlist[m] = j
                m += 1
            nxt[j] += c
    nn[0] = m


cdef Py_ssize_t _select_top_k(int32_t* nodes, const float* values, Py_ssize_t m, Py_ssize_t k,
                              uint64_t* keys, int dense) noexcept nogil:
    """Move the top ``k`` of ``nodes[:m]`` (by |value| desc, node asc) to the front, sorted.

    ``dense``: values are indexed by node (``values[nodes[i]]``), else parallel to ``nodes``.
    Returns the kept count.  Partial selection: O(m) + O(k log k).
    """
    cdef Py_ssize_t i
    if k > m:
        k = m
    for i in range(m):
        keys[i] = _key(values[nodes[i]] if dense else values[i], nodes[i])
    if k < m:
        nth_element(keys, keys + k, keys + m)
    sort(keys, keys + k)
    for i in range(k):
        nodes[i] = _key_node(keys[i])
    return k


cdef Py_ssize_t _spread_kernel(
        const CSRView* g, const CSRView* x,
        const int32_t* seed_nodes, const float* seed_energy, Py_ssize_t n_seeds,
        int32_t* useeds, float* useed_e,
        float decay, float thr, float lo, float hi, int64_t max_steps, bint reemit,
        int64_t top_k, float teleport, float inhibit_multiplier,
        float* act, uint8_t* act_mark, int32_t* act_list,
        float* nxt, uint8_t* nxt_mark, int32_t* nlist,
        int32_t* src_nodes, float* src_energy, uint64_t* keys,
        int64_t* scanned, int64_t* steps_run, Py_ssize_t* n_act_out) noexcept nogil:
    """The whole spread; leaves the result keys sorted in ``keys[:r]`` and returns r.

    ``act`` keeps the merged energies until :func:`_finish` copied them out and reset them.
    """
    cdef Py_ssize_t i, k, n_act = 0, nu = 0, n_src = 0, nn, m, newly, r
    cdef int32_t s, j
    cdef float e, val, old
    cdef int64_t step
    # float32 factors, computed exactly as the twin computes them (double, then rounded)
    cdef float scale_pos = <float>(<double>decay * (1.0 - <double>teleport))
    cdef float scale_inh = <float>(<double>decay * <double>inhibit_multiplier)
    cdef float omt = <float>(1.0 - <double>teleport)
    cdef float tel = teleport
    cdef bint use_inh = inhibit_multiplier != 1.0

    scanned[0] = 0
    steps_run[0] = 0
    # seeds: duplicates add (in input order), then clamp
    for i in range(n_seeds):
        s = seed_nodes[i]
        if act_mark[s] == 0:
            act_mark[s] = 1
            act_list[n_act] = s
            n_act += 1
            act[s] = seed_energy[i]
            useeds[nu] = s
            nu += 1
        else:
            act[s] = act[s] + seed_energy[i]
    for i in range(nu):
        s = useeds[i]
        act[s] = _clampf(act[s], lo, hi)
        useed_e[i] = act[s]
    # first sources (non-reemit): the active seeds, by node index
    if not reemit:
        for i in range(nu):
            if _active(useed_e[i], thr):
                src_nodes[n_src] = useeds[i]
                n_src += 1
        sort(src_nodes, src_nodes + n_src)
        for i in range(n_src):
            src_energy[i] = act[src_nodes[i]]

    step = 0
    while step < max_steps:
        step += 1
        # 1. sources
        if reemit:
            n_src = 0
            for i in range(n_act):
                j = act_list[i]
                if _active(act[j], thr):
                    src_nodes[n_src] = j
                    n_src += 1
            sort(src_nodes, src_nodes + n_src)
            for i in range(n_src):
                src_energy[i] = act[src_nodes[i]]
        steps_run[0] = step
        # 2. propagate: sources ascending, base edges then overlay edges
        nn = 0
        for i in range(n_src):
            s = src_nodes[i]
            e = src_energy[i]
            _emit(g, s, e, scale_pos, scale_inh, use_inh, nxt, nxt_mark, nlist, &nn, scanned)
            _emit(x, s, e, scale_pos, scale_inh, use_inh, nxt, nxt_mark, nlist, &nn, scanned)
        # 3. teleport back to the seeds
        if teleport > 0.0:
            for i in range(nu):
                s = useeds[i]
                if nxt_mark[s] == 0:
                    nxt_mark[s] = 1
                    nlist[nn] = s
                    nn += 1
                nxt[s] = omt * nxt[s] + tel * useed_e[i]
        # 4. clamp, drop below threshold
        m = 0
        for i in range(nn):
            j = nlist[i]
            val = _clampf(nxt[j], lo, hi)
            if _active(val, thr):
                nxt[j] = val
                nlist[m] = j
                m += 1
            else:
                nxt[j] = 0.0
                nxt_mark[j] = 0
        # 5. top-k by partial selection over the touched nodes only
        if top_k > 0 and m > top_k:
            _select_top_k(nlist, nxt, m, <Py_ssize_t>top_k, keys, 1)
            for i in range(top_k, m):
                j = _key_node(keys[i])
                nxt[j] = 0.0
                nxt_mark[j] = 0
            m = <Py_ssize_t>top_k
        # 6. merge by absolute maximum
        newly = 0
        for i in range(m):
            j = nlist[i]
            val = nxt[j]
            if act_mark[j]:
                old = act[j]
            else:
                act_mark[j] = 1
                act_list[n_act] = j
                n_act += 1
                act[j] = 0.0
                old = 0.0
            if not _active(old, thr):
                newly += 1
            if fabsf(val) > fabsf(old):
                act[j] = val
        # next sources (non-reemit): what arrived this step, by node index
        if not reemit:
            for i in range(m):
                src_nodes[i] = nlist[i]
            sort(src_nodes, src_nodes + m)
            for i in range(m):
                src_energy[i] = nxt[src_nodes[i]]
            n_src = m
        for i in range(m):
            j = nlist[i]
            nxt[j] = 0.0
            nxt_mark[j] = 0
        # 7. early stop
        if reemit:
            if newly == 0:
                break
        elif m == 0:
            break

    r = 0
    for i in range(n_act):
        j = act_list[i]
        if _active(act[j], thr):
            keys[r] = _key(act[j], j)
            r += 1
    sort(keys, keys + r)
    n_act_out[0] = n_act
    return r


cdef void _finish(const uint64_t* keys, Py_ssize_t r, float* act, uint8_t* act_mark,
                  const int32_t* act_list, Py_ssize_t n_act,
                  int32_t* out_nodes, float* out_energy) noexcept nogil:
    """Copy the sorted result out, then reset every touched workspace entry."""
    cdef Py_ssize_t i
    cdef int32_t j
    for i in range(r):
        j = _key_node(keys[i])
        out_nodes[i] = j
        out_energy[i] = act[j]
    for i in range(n_act):
        j = act_list[i]
        act[j] = 0.0
        act_mark[j] = 0


cdef int _view(CSRView* v, object arrays) except -1:
    """Fill ``v`` from (indptr, indices, weights, valid, inhibitory); None -> empty graph."""
    cdef const int64_t[::1] indptr
    cdef const int32_t[::1] indices
    cdef const float[::1] weights
    cdef const uint8_t[::1] valid
    cdef const uint8_t[::1] inhib
    if arrays is None:
        v.indptr = &_EMPTY_INDPTR[0]
        v.indices = &_EMPTY_I32[0]
        v.weights = &_EMPTY_F32[0]
        v.valid = NULL
        v.inhib = NULL
        v.n = 0
        return 0
    a_indptr, a_indices, a_weights, a_valid, a_inhib = arrays
    indptr = a_indptr
    if indptr.shape[0] < 1:
        raise ValueError("indptr must have at least one entry")
    indices = a_indices if a_indices.shape[0] > 0 else _EMPTY_I32
    weights = a_weights if a_weights.shape[0] > 0 else _EMPTY_F32
    v.indptr = &indptr[0]
    v.indices = &indices[0]
    v.weights = &weights[0]
    v.n = indptr.shape[0] - 1
    v.valid = NULL
    v.inhib = NULL
    if a_valid is not None and a_valid.shape[0] > 0:
        valid = a_valid
        v.valid = &valid[0]
    if a_inhib is not None and a_inhib.shape[0] > 0:
        inhib = a_inhib
        v.inhib = &inhib[0]
    return 0


def spread(indptr, indices, weights, seed_nodes, seed_energy, *, valid=None, inhibitory=None,
           float decay=0.7, float threshold=0.1, float lo=-1.0, float hi=1.0,
           int64_t max_steps=5, bint reemit=True, int64_t top_k=0, float teleport=0.0,
           float inhibit_multiplier=1.0, extra=None, SpreadWorkspace workspace=None):
    """Spreading activation over raw CSR arrays (SPEC §3); unchecked fast path.

    Parameters
    ----------
    indptr, indices, weights : int64[N+1], int32[E], float32[E]
        The graph; must already be valid (``causalmem.spreading.CSR`` checks it).
    seed_nodes, seed_energy : int32[S], float32[S]
        Seeds; duplicates add, then clamp.
    valid, inhibitory : uint8[E] or None
        Edge flags (None: all valid / none inhibitory).
    extra : tuple (indptr, indices, weights, valid, inhibitory) or None
        Overlay graph whose edges are traversed as part of the same step.
    workspace : SpreadWorkspace or None
        Reused scratch memory; a fresh one is made when None.

    Returns
    -------
    nodes : int32[K], energy : float32[K]
        Nodes with |energy| >= threshold, by |energy| descending then node index.
    """
    cdef CSRView g, x
    cdef const int32_t[::1] sn = seed_nodes
    cdef const float[::1] se = seed_energy
    cdef Py_ssize_t n_seeds = sn.shape[0], i, n, r, n_act = 0
    cdef int64_t scanned = 0, steps_run = 0
    _view(&g, (indptr, indices, weights, valid, inhibitory))
    _view(&x, extra)
    if se.shape[0] != n_seeds:
        raise ValueError("seed_nodes and seed_energy must have the same length")
    n = <Py_ssize_t>max(g.n, x.n)
    for i in range(n_seeds):
        if sn[i] < 0 or sn[i] >= n:
            raise ValueError(f"seed node {sn[i]} out of range [0, {n})")
    if workspace is None:
        workspace = SpreadWorkspace(n)
    else:
        workspace.ensure(n)
    cdef int32_t[::1] useeds = np.empty(max(n_seeds, 1), dtype=np.int32)
    cdef float[::1] useed_e = np.empty(max(n_seeds, 1), dtype=np.float32)
    cdef const int32_t* sn_p = &sn[0] if n_seeds > 0 else NULL
    cdef const float* se_p = &se[0] if n_seeds > 0 else NULL
    cdef SpreadWorkspace ws = workspace
    with nogil:
        r = _spread_kernel(&g, &x, sn_p, se_p, n_seeds, &useeds[0], &useed_e[0],
                           decay, threshold, lo, hi, max_steps, reemit, top_k, teleport,
                           inhibit_multiplier,
                           &ws.act[0], &ws.act_mark[0], &ws.act_list[0],
                           &ws.nxt[0], &ws.nxt_mark[0], &ws.nxt_list[0],
                           &ws.src_nodes[0], &ws.src_energy[0], &ws.keys[0],
                           &scanned, &steps_run, &n_act)
    out_nodes = np.empty(r, dtype=np.int32)
    out_energy = np.empty(r, dtype=np.float32)
    cdef int32_t[::1] on = out_nodes
    cdef float[::1] oe = out_energy
    cdef int32_t dummy_n = 0
    cdef float dummy_e = 0
    with nogil:
        _finish(&ws.keys[0], r, &ws.act[0], &ws.act_mark[0], &ws.act_list[0], n_act,
                &on[0] if r > 0 else &dummy_n, &oe[0] if r > 0 else &dummy_e)
    ws.edges_scanned = scanned
    ws.steps = steps_run
    return out_nodes, out_energy


def clamp(float[::1] values, float lo, float hi):
    """Clamp ``values`` to [lo, hi] in place (NaN is left as is)."""
    cdef Py_ssize_t i, n = values.shape[0]
    with nogil:
        for i in range(n):
            values[i] = _clampf(values[i], lo, hi)


def absmax_merge(float[::1] act, const int32_t[::1] nodes, const float[::1] values):
    """``act[n] = v`` where ``|v| > |act[n]|`` (in order); returns how many entries changed.

    ``nodes`` must be in range of ``act`` (unchecked beyond a length test).
    """
    cdef Py_ssize_t i, changed = 0, n = nodes.shape[0]
    cdef int32_t j
    if values.shape[0] != n:
        raise ValueError("nodes and values must have the same length")
    for i in range(n):
        if nodes[i] < 0 or nodes[i] >= act.shape[0]:
            raise ValueError(f"node {nodes[i]} out of range [0, {act.shape[0]})")
    with nogil:
        for i in range(n):
            j = nodes[i]
            if fabsf(values[i]) > fabsf(act[j]):
                act[j] = values[i]
                changed += 1
    return changed


def select_top_k(const int32_t[::1] nodes, const float[::1] energy, Py_ssize_t k):
    """Positions (into ``nodes``) of the top ``k`` entries by |energy| desc, node asc, position asc.

    Partial selection (introselect) over the given entries only, then a sort of the k kept.
    """
    cdef Py_ssize_t n = nodes.shape[0], i, kk
    if energy.shape[0] != n:
        raise ValueError("nodes and energy must have the same length")
    if k < 0:
        raise ValueError("k must be >= 0")
    kk = min(k, n)
    cdef vector[pair[uint64_t, int64_t]] keys
    keys.resize(n)
    out = np.empty(kk, dtype=np.int64)
    cdef int64_t[::1] o = out
    with nogil:
        for i in range(n):
            keys[i].first = _key(energy[i], nodes[i])
            keys[i].second = i
        if kk < n:
            nth_element(keys.begin(), keys.begin() + kk, keys.end())
        sort(keys.begin(), keys.begin() + kk)
        for i in range(kk):
            o[i] = keys[i].second
    return out


def coo_to_csr(Py_ssize_t n_nodes, const int32_t[::1] src, const int32_t[::1] dst,
               const float[::1] weights, valid=None, inhibitory=None):
    """Counting sort of COO edges into CSR, stable by (src, original position).

    Returns ``(indptr, indices, weights, valid, inhibitory, pos)`` where ``pos[e]`` is the CSR
    position of input edge ``e``.  ``src``/``dst`` must be in range (checked by the caller).
    """
    cdef Py_ssize_t e, E = src.shape[0]
    cdef int32_t s
    cdef int64_t p
    cdef bint has_valid = valid is not None, has_inhib = inhibitory is not None
    cdef const uint8_t[::1] v_in
    cdef const uint8_t[::1] h_in
    if dst.shape[0] != E or weights.shape[0] != E:
        raise ValueError("src, dst and weights must have the same length")
    indptr_a = np.zeros(n_nodes + 1, dtype=np.int64)
    indices_a = np.empty(E, dtype=np.int32)
    weights_a = np.empty(E, dtype=np.float32)
    pos_a = np.empty(E, dtype=np.int64)
    cursor_a = np.empty(max(n_nodes, 1), dtype=np.int64)
    valid_a = np.empty(E, dtype=np.uint8) if has_valid else None
    inhib_a = np.empty(E, dtype=np.uint8) if has_inhib else None
    cdef int64_t[::1] indptr = indptr_a
    cdef int32_t[::1] out_idx = indices_a
    cdef float[::1] out_w = weights_a
    cdef int64_t[::1] pos = pos_a
    cdef int64_t[::1] cursor = cursor_a
    cdef uint8_t[::1] out_v
    cdef uint8_t[::1] out_h
    cdef uint8_t* out_v_p = NULL
    cdef uint8_t* out_h_p = NULL
    cdef const uint8_t* v_p = NULL
    cdef const uint8_t* h_p = NULL
    if has_valid:
        v_in = valid
        if v_in.shape[0] != E:
            raise ValueError("valid must have one entry per edge")
        out_v = valid_a
        if E > 0:
            v_p = &v_in[0]
            out_v_p = &out_v[0]
    if has_inhib:
        h_in = inhibitory
        if h_in.shape[0] != E:
            raise ValueError("inhibitory must have one entry per edge")
        out_h = inhib_a
        if E > 0:
            h_p = &h_in[0]
            out_h_p = &out_h[0]
    for e in range(E):
        if src[e] < 0 or src[e] >= n_nodes:
            raise ValueError(f"src[{e}] = {src[e]} out of range [0, {n_nodes})")
    with nogil:
        for e in range(E):
            indptr[src[e] + 1] += 1
        for e in range(n_nodes):
            indptr[e + 1] += indptr[e]
        for e in range(n_nodes):
            cursor[e] = indptr[e]
        for e in range(E):
            s = src[e]
            p = cursor[s]
            cursor[s] = p + 1
            out_idx[p] = dst[e]
            out_w[p] = weights[e]
            pos[e] = p
            if out_v_p != NULL:
                out_v_p[p] = v_p[e]
            if out_h_p != NULL:
                out_h_p[p] = h_p[e]
    return indptr_a, indices_a, weights_a, valid_a, inhib_a, pos_a
