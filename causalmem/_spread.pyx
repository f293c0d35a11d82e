# cython: language_level=3
# distutils: language = c++
"""Compiled spreading-activation kernels (SPEC §3).

Every ``def`` here is a thin shell: it takes typed ``const`` memoryviews, releases the GIL and
calls a ``cdef ... noexcept nogil`` work-horse over raw pointers.  The graph arrays are
validated once by ``causalmem.spreading.CSR``; the shells check what is O(1) or
O(len(seeds)).  The kernel is memory-safe whatever the arrays hold: a row is clipped to the
edge arrays and an edge whose target is outside the node space of the call is skipped, so
arrays changed behind the validation's back (or handed straight to this module) give
meaningless energies, never a read or write out of bounds.

Float semantics: every quantity is float32; with ``-ffp-contract=off`` (setup.py) no FMA changes
a rounding.  The reference twin ``_spread_py.py`` is the literal algorithm of SPEC §3; this
kernel computes re-emission by deltas (below), so the two agree within float32 rounding.
"""
from libc.stdint cimport int64_t, int32_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset
from libc.stdlib cimport malloc, calloc, free
from libcpp.vector cimport vector
from libc.math cimport fabsf, isfinite

import numpy as np

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define CM_PREFETCH(p) __builtin_prefetch((const void*)(p), 1, 3)
    #else
    #define CM_PREFETCH(p) ((void)0)
    #endif
    #define CM_KNONE (~(uint64_t)0)
    #if defined(__GNUC__) || defined(__clang__)
    #define CM_UNLIKELY(x) __builtin_expect(!!(x), 0)
    #else
    #define CM_UNLIKELY(x) (x)
    #endif
    """
    void CM_PREFETCH(const void* p) noexcept nogil
    bint CM_UNLIKELY(bint x) noexcept nogil
    const uint64_t CM_KNONE     # cached key of an inactive step-sum entry

DEF PF = 16  # prefetch distance (edges) for the random slot accesses

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
    int64_t e                  # number of edges (length of indices/weights/valid/inhib)


# Per-node state, versioned by stamps: a stamp equal to the current step (call) stamp marks
# ``nidx`` (``act``) as set; anything else reads as unset / 0, so nothing is ever zeroed between
# steps or calls.  The edge scatter only needs ``Slot`` (8 bytes: a smaller array, more of it in
# cache); ``ASlot`` is read for sources and kept nodes only.  The running sums of a step live
# in a dense array ``vals`` indexed by first-touch order, so the clamp pass reads them in order.
ctypedef struct Slot:
    uint32_t nstamp
    int32_t nidx            # position of the node in this step's touched list / sums


ctypedef struct ASlot:
    float act
    uint32_t astamp
    float em                # reemit: the energy this node emitted last (0: never a source)


# Scratch memory of the calls (owned by a SpreadWorkspace, used by one call at a time).
ctypedef struct Work:
    Slot* slots
    ASlot* aslots
    float* vals             # step sums (reemit: the persistent sums S of the call)
    int32_t* act_list       # nodes with an act entry, in first-touch order
    int32_t* nlist          # node of every step-sum entry
    uint64_t* keys          # packed (node, value) keys: sources, kept entries, the result
    uint64_t* tmp
    uint64_t* kc            # reemit: cached key of every step-sum entry (CM_KNONE: inactive)
    int32_t* dlist          # reemit: older step-sum entries changed in this step
    uint64_t* sel           # reemit: keys kept by the previous step's top-k
    int32_t* useeds         # distinct seeds, first-occurrence order
    float* useed_e          # their clamped energies
    uint32_t stamp
    int64_t n


ctypedef struct Params:
    float thr, lo, hi, tel
    float scale_pos         # decay·(1 − teleport): ordinary edges
    float scale_inh         # decay·inhibit_multiplier: inhibitory edges
    float omt               # 1 − teleport
    int64_t max_steps, top_k
    bint reemit, use_inh, do_tel


# Where the edge body adds its contributions (see _emit).
ctypedef struct Acc:
    Slot* slots
    float* vals
    int32_t* nlist
    int32_t* dlist
    Py_ssize_t nn           # step-sum entries so far
    Py_ssize_t nd           # entries of dlist so far
    uint32_t cst            # a slot stamped >= cst holds an entry of the sums
    uint32_t st             # this step's stamp
    uint32_t n_nodes        # node space of the call: targets >= n_nodes are skipped
    int64_t scanned


cdef const int64_t[::1] _EMPTY_INDPTR = np.zeros(1, dtype=np.int64)
cdef const int32_t[::1] _EMPTY_I32 = np.zeros(1, dtype=np.int32)
cdef const float[::1] _EMPTY_F32 = np.zeros(1, dtype=np.float32)

cdef uint32_t _STAMP_LIMIT = 0x7FFFFFFF


cdef class SpreadWorkspace:
    """Reusable scratch memory for :func:`spread` over graphs of up to ``n_nodes`` nodes.

    Allocated once (about 70 bytes per node) and never cleared per call: entries are versioned by
    stamps, so a call costs only what it touches.  A workspace must not be used by two calls at
    the same time (``causalmem.spreading.CSR`` keeps a lock-protected pool of them).
    """

    cdef Work w
    cdef Py_ssize_t seeds_cap
    cdef readonly Py_ssize_t n_nodes
    cdef public int64_t edges_scanned
    cdef public int64_t steps

    def __cinit__(self, Py_ssize_t n_nodes=0):
        memset(&self.w, 0, sizeof(Work))
        self.seeds_cap = 0
        self.n_nodes = -1

    def __init__(self, Py_ssize_t n_nodes=0):
        self.ensure(n_nodes)

    def __dealloc__(self):
        self._free_nodes()
        self._free_seeds()

    cdef void _free_nodes(self) noexcept:
        free(self.w.slots)
        free(self.w.aslots)
        free(self.w.vals)
        free(self.w.act_list)
        free(self.w.nlist)
        free(self.w.keys)
        free(self.w.tmp)
        free(self.w.kc)
        free(self.w.dlist)
        free(self.w.sel)
        self.w.slots = NULL
        self.w.aslots = NULL
        self.w.vals = NULL
        self.w.act_list = NULL
        self.w.nlist = NULL
        self.w.keys = NULL
        self.w.tmp = NULL
        self.w.kc = NULL
        self.w.dlist = NULL
        self.w.sel = NULL

    cdef void _free_seeds(self) noexcept:
        free(self.w.useeds)
        free(self.w.useed_e)
        self.w.useeds = NULL
        self.w.useed_e = NULL
        self.seeds_cap = 0

    def ensure(self, Py_ssize_t n_nodes):
        """Grow the workspace to hold ``n_nodes`` nodes (never shrinks)."""
        if n_nodes <= self.n_nodes:
            return
        if n_nodes < 0:
            raise ValueError("n_nodes must be >= 0")
        cdef size_t n = <size_t>max(n_nodes, 1)
        self._free_nodes()
        self.w.slots = <Slot*>calloc(n, sizeof(Slot))
        self.w.aslots = <ASlot*>calloc(n, sizeof(ASlot))
        self.w.vals = <float*>malloc((n + 1) * sizeof(float))
        self.w.act_list = <int32_t*>malloc(n * sizeof(int32_t))
        self.w.nlist = <int32_t*>malloc((n + 1) * sizeof(int32_t))
        self.w.keys = <uint64_t*>malloc(n * sizeof(uint64_t))
        self.w.tmp = <uint64_t*>malloc(n * sizeof(uint64_t))
        self.w.kc = <uint64_t*>malloc((n + 1) * sizeof(uint64_t))
        self.w.dlist = <int32_t*>malloc((n + 1) * sizeof(int32_t))
        self.w.sel = <uint64_t*>malloc((n + 1) * sizeof(uint64_t))
        if (self.w.slots == NULL or self.w.aslots == NULL or self.w.vals == NULL
                or self.w.act_list == NULL or self.w.nlist == NULL or self.w.keys == NULL
                or self.w.tmp == NULL or self.w.kc == NULL or self.w.dlist == NULL
                or self.w.sel == NULL):
            self._free_nodes()
            self.n_nodes = -1
            self.w.n = 0
            raise MemoryError(f"cannot allocate a spreading workspace for {n_nodes} nodes")
        self.n_nodes = n_nodes
        self.w.n = n_nodes
        self.w.stamp = 0
        self.edges_scanned = 0
        self.steps = 0

    cdef int _ensure_seeds(self, Py_ssize_t n_seeds) except -1:
        """Scratch for the (deduplicated) seeds; grows, never shrinks."""
        cdef size_t cap
        if n_seeds <= self.seeds_cap and self.w.useeds != NULL:
            return 0
        cap = <size_t>max(n_seeds, 16)
        self._free_seeds()
        self.w.useeds = <int32_t*>malloc(cap * sizeof(int32_t))
        self.w.useed_e = <float*>malloc(cap * sizeof(float))
        if self.w.useeds == NULL or self.w.useed_e == NULL:
            self._free_seeds()
            raise MemoryError("cannot allocate seed scratch")
        self.seeds_cap = <Py_ssize_t>cap
        return 0

    cdef void _next_call(self, int64_t max_steps) noexcept:
        """Make room for 1 + max_steps fresh stamps (clear once every ~2^31 steps)."""
        if <uint64_t>self.w.stamp + <uint64_t>max_steps + 2 >= <uint64_t>_STAMP_LIMIT:
            memset(self.w.slots, 0, <size_t>max(self.n_nodes, 1) * sizeof(Slot))
            memset(self.w.aslots, 0, <size_t>max(self.n_nodes, 1) * sizeof(ASlot))
            self.w.stamp = 0

    @property
    def nbytes(self):
        """Bytes of scratch memory held."""
        if self.n_nodes < 0:
            return 0
        return (max(self.n_nodes, 1) * (sizeof(Slot) + sizeof(ASlot) + 4 + 4 + 4 + 8 + 8 + 8 + 4 + 8)
                + self.seeds_cap * 8)


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
    """Sort key: ascending key == |x| descending, then node ascending; x is recoverable.

    Layout: (0x7FFFFFFF - bits(|x|)) << 33 | node << 1 | sign(x): 31 + 31 + 1 bits.
    """
    cdef uint32_t bits
    memcpy(&bits, &x, 4)
    return (((<uint64_t>(0x7FFFFFFFu - (bits & 0x7FFFFFFFu))) << 33)
            | ((<uint64_t>(<uint32_t>node)) << 1) | <uint64_t>(bits >> 31))


cdef inline int32_t _key_node(uint64_t k) noexcept nogil:
    return <int32_t>((k >> 1) & 0x7FFFFFFFu)


cdef inline float _key_value(uint64_t k) noexcept nogil:
    cdef uint32_t bits = (0x7FFFFFFFu - <uint32_t>(k >> 33)) | (<uint32_t>(k & 1u) << 31)
    cdef float x
    memcpy(&x, &bits, 4)
    return x


cdef inline uint64_t _src_key(int32_t node, float e) noexcept nogil:
    """(node, energy) packed so that sorting by the high half orders sources by node."""
    cdef uint32_t bits
    memcpy(&bits, &e, 4)
    return ((<uint64_t>(<uint32_t>node)) << 32) | <uint64_t>bits


cdef inline float _src_energy(uint64_t k) noexcept nogil:
    cdef uint32_t bits = <uint32_t>(k & 0xFFFFFFFFu)
    cdef float e
    memcpy(&e, &bits, 4)
    return e


cdef void _radix_sort(uint64_t* a, uint64_t* tmp, Py_ssize_t n, int byte_lo,
                      int byte_hi) noexcept nogil:
    """Sort ``a[:n]`` ascending (stable LSD radix over bytes byte_lo..byte_hi of the key).

    Keys equal in those bytes keep their input order.  Passes whose byte is constant are
    skipped.  ``byte_hi`` must be 7.
    """
    cdef Py_ssize_t counts[8 * 256]
    cdef Py_ssize_t i, total, c
    cdef int b, shift
    cdef uint64_t k
    cdef uint64_t* src = a
    cdef uint64_t* dst = tmp
    cdef uint64_t* sw
    cdef Py_ssize_t* cnt
    cdef uint64_t cur
    cdef Py_ssize_t jj
    cdef int lo_shift = 8 * byte_lo
    if n < 64:
        # stable insertion sort on the selected bytes
        for i in range(1, n):
            cur = a[i]
            jj = i - 1
            while jj >= 0 and (a[jj] >> lo_shift) > (cur >> lo_shift):
                a[jj + 1] = a[jj]
                jj -= 1
            a[jj + 1] = cur
        return
    memset(counts, 0, sizeof(counts))
    for i in range(n):
        k = a[i]
        for b in range(byte_lo, byte_hi + 1):
            counts[b * 256 + ((k >> (8 * b)) & 0xFF)] += 1
    for b in range(byte_lo, byte_hi + 1):
        shift = 8 * b
        cnt = &counts[b * 256]
        if cnt[(src[0] >> shift) & 0xFF] == n:
            continue
        total = 0
        for i in range(256):
            c = cnt[i]
            cnt[i] = total
            total += c
        for i in range(n):
            k = src[i]
            c = (k >> shift) & 0xFF
            dst[cnt[c]] = k
            cnt[c] += 1
        sw = src
        src = dst
        dst = sw
    if src != a:
        memcpy(a, src, n * sizeof(uint64_t))


cdef Py_ssize_t _select_keys(uint64_t* keys, Py_ssize_t m, Py_ssize_t k, Py_ssize_t* hist,
                             uint64_t* tmp) noexcept nogil:
    """Move the ``k`` smallest of ``keys[:m]`` to the front (unordered); returns k.

    Partial selection: ``hist`` (2048 buckets of the key's top 11 bits, filled by the caller)
    gives the boundary bucket; ``nth_element`` runs on that bucket alone.  The compaction is
    branch-free (``tmp`` must hold ``m`` keys).
    """
    cdef Py_ssize_t i, cum = 0, above = 0, nb = 0, need
    cdef uint64_t kk
    cdef int B = 0
    cdef uint64_t bucket
    for B in range(2048):
        if cum + hist[B] >= k:
            break
        cum += hist[B]
    need = k - cum
    for i in range(m):
        kk = keys[i]
        bucket = kk >> 53
        keys[above] = kk            # above <= i: in-place compaction is safe
        above += bucket < <uint64_t>B
        tmp[nb] = kk
        nb += bucket == <uint64_t>B
    if need < nb:
        nth_element(tmp, tmp + need, tmp + nb)
    memcpy(keys + above, tmp, need * sizeof(uint64_t))
    return k


# ---------------------------------------------------------------------------------------------
# the edge loop: one body
# ---------------------------------------------------------------------------------------------

cdef inline bint _row(const CSRView* g, int32_t s, int64_t* start, int64_t* end) noexcept nogil:
    """The edge range of source ``s`` clipped to the edge arrays; False when empty.

    For a validated graph the clipping never changes anything; it is what keeps the kernel
    inside the arrays whatever they hold.
    """
    cdef int64_t a, b
    if s >= g.n:
        return False
    a = g.indptr[s]
    b = g.indptr[s + 1]
    if a < 0:
        a = 0
    if b > g.e:
        b = g.e
    start[0] = a
    end[0] = b
    return a < b


cdef inline void _prefetch_row(const CSRView* g, int32_t s, const Slot* slots) noexcept nogil:
    """Prefetch the first target slots of source ``s`` (rows are short on average, so the
    in-row prefetch of _emit rarely covers the start of a row)."""
    cdef int64_t p, start, end
    if not _row(g, s, &start, &end):
        return
    if end - start > PF:
        end = start + PF
    for p in range(start, end):
        CM_PREFETCH(&slots[<uint32_t>g.indices[p]])   # a prefetch never faults


cdef inline void _prefetch_edges(const CSRView* g, int32_t s) noexcept nogil:
    """Prefetch the start of the edge rows of source ``s``."""
    cdef int64_t start
    if s >= g.n:
        return
    start = g.indptr[s]
    CM_PREFETCH(&g.indices[start])
    CM_PREFETCH(&g.weights[start])
    if g.valid != NULL:
        CM_PREFETCH(&g.valid[start])
    if g.inhib != NULL:
        CM_PREFETCH(&g.inhib[start])


# Compile-time flags of the edge body: a fused type per flag over two empty tag structs.  Cython
# generates one specialisation of _emit per combination and drops the branches of the other
# value (``if Fresh is On``), so the machine code has no per-edge flag tests.
ctypedef struct On:
    char unused
ctypedef struct Off:
    char unused
ctypedef fused Fresh:      # On: a step sum of its own (no delta re-emission)
    On
    Off
ctypedef fused Valid:      # On: the graph has validity flags
    On
    Off
ctypedef fused Inhib:      # On: inhibitory edges are scaled apart (multiplier != 1)
    On
    Off


cdef inline void _emit(const CSRView* g, int32_t s, float e, float ae, const Params* p, Acc* a,
                       const Fresh* fresh, const Valid* valid_flag,
                       const Inhib* inhib_flag) noexcept nogil:
    """Add the contributions of source ``s`` over its out-edges in ``g`` to the sums in ``a``.

    The one edge-contribution body.  SPEC §3 step 2: an ordinary edge adds
    ``(e·w)·scale_pos``, an inhibitory one (when the multiplier is not 1)
    ``-(ae·|w|)·scale_inh``; ``e`` is the source's energy and ``ae`` its magnitude, or, for
    delta re-emission, the change of the energy and of its magnitude.

    A target's first touch in this step (slot stamp != ``st``) opens a new entry of the sums
    when the sums are fresh (a step of its own) or the slot is not in them yet (stamp <
    ``cst``); otherwise (delta re-emission) it adds to the older entry and records it in
    ``dlist`` (its cached key must be refreshed).  The three tag pointers are never read: their
    types select the specialisation.
    """
    cdef int64_t q, start, end
    cdef int32_t j, k
    cdef float c
    cdef float zero = 0.0
    cdef Slot* sl
    cdef Slot* slots = a.slots
    cdef float* vals = a.vals
    cdef int32_t* nlist = a.nlist
    cdef int32_t* dlist = a.dlist
    cdef const uint8_t* valid = g.valid
    cdef const uint8_t* inhib = g.inhib
    cdef const int32_t* indices = g.indices
    cdef const float* weights = g.weights
    cdef uint32_t cst = a.cst, st = a.st, n = a.n_nodes
    cdef float scale_pos = p.scale_pos, scale_inh = p.scale_inh
    cdef Py_ssize_t m = a.nn, d = a.nd
    if not _row(g, s, &start, &end):
        return
    a.scanned += end - start
    for q in range(start, end):
        if q + PF < end:
            CM_PREFETCH(&slots[<uint32_t>indices[q + PF]])
        if Valid is On:
            if valid[q] == 0:
                continue
        j = indices[q]
        if CM_UNLIKELY(<uint32_t>j >= n):
            continue              # only a graph changed after validation gets here
        if Inhib is On:
            if inhib[q]:
                c = -((ae * fabsf(weights[q])) * scale_inh)
            else:
                c = (e * weights[q]) * scale_pos
        else:
            c = (e * weights[q]) * scale_pos
        sl = &slots[j]
        if sl.nstamp != st:
            if Fresh is On:
                sl.nidx = <int32_t>m
                nlist[m] = j
                vals[m] = zero + c
                m += 1
            else:
                if sl.nstamp < cst:
                    sl.nidx = <int32_t>m
                    nlist[m] = j
                    vals[m] = zero + c
                    m += 1
                else:
                    k = sl.nidx
                    vals[k] += c
                    dlist[d] = k
                    d += 1
            sl.nstamp = st
        else:
            vals[sl.nidx] += c
    a.nn = m
    a.nd = d


cdef void _emit_graph(const CSRView* g, int32_t s, float e, float ae, const Params* p, Acc* a,
                      const Fresh* fresh) noexcept nogil:
    """``_emit`` with the flags of graph ``g`` chosen at run time (the overlay's edges)."""
    if g.valid != NULL:
        if p.use_inh and g.inhib != NULL:
            _emit(g, s, e, ae, p, a, fresh, <On*>NULL, <On*>NULL)
        else:
            _emit(g, s, e, ae, p, a, fresh, <On*>NULL, <Off*>NULL)
    elif p.use_inh and g.inhib != NULL:
        _emit(g, s, e, ae, p, a, fresh, <Off*>NULL, <On*>NULL)
    else:
        _emit(g, s, e, ae, p, a, fresh, <Off*>NULL, <Off*>NULL)


cdef void _propagate(const CSRView* g, const CSRView* x, const uint64_t* src_keys,
                     Py_ssize_t n_src, ASlot* aslots, const Params* p, Acc* a,
                     const Fresh* fresh, const Valid* valid_flag,
                     const Inhib* inhib_flag) noexcept nogil:
    """SPEC §3 step 2 for one step: every source's contributions, by node index, base edges
    then overlay edges.  ``src_keys``: the sources as packed (node, energy), sorted.

    Specialised (fused tags) for the base graph's flags, so its edge loop is ``_emit`` inlined
    with the dead tests removed; the overlay, small and rare, dispatches per source.
    Delta re-emission (``fresh`` Off): a source emits the change of its energy since it last
    emitted (``ASlot.em``), and of the magnitude for inhibitory edges.
    """
    cdef Py_ssize_t i
    cdef int32_t s
    cdef float e, ae, old
    cdef ASlot* asl
    for i in range(n_src):
        s = <int32_t>(src_keys[i] >> 32)
        e = _src_energy(src_keys[i])
        # software pipelining across sources: rows of later sources are random
        # three stages: indptr (i+12), edge rows (i+6), target slots (i+2)
        if i + 12 < n_src:
            CM_PREFETCH(&g.indptr[<int32_t>(src_keys[i + 12] >> 32)])
        if i + 6 < n_src:
            _prefetch_edges(g, <int32_t>(src_keys[i + 6] >> 32))
        if i + 2 < n_src:
            _prefetch_row(g, <int32_t>(src_keys[i + 2] >> 32), a.slots)
        if Fresh is On:
            ae = fabsf(e)
        else:
            asl = &aslots[s]
            old = asl.em
            asl.em = e
            ae = fabsf(e) - fabsf(old)
            e = e - old
        _emit(g, s, e, ae, p, a, fresh, valid_flag, inhib_flag)
        if x.n > 0:
            _emit_graph(x, s, e, ae, p, a, fresh)


cdef void _propagate_step(const CSRView* g, const CSRView* x, const uint64_t* src_keys,
                          Py_ssize_t n_src, ASlot* aslots, const Params* p, Acc* a,
                          const Fresh* fresh) noexcept nogil:
    """Dispatch to the specialisation of ``_propagate`` for the base graph's flags."""
    if g.valid != NULL:
        if p.use_inh and g.inhib != NULL:
            _propagate(g, x, src_keys, n_src, aslots, p, a, fresh, <On*>NULL, <On*>NULL)
        else:
            _propagate(g, x, src_keys, n_src, aslots, p, a, fresh, <On*>NULL, <Off*>NULL)
    elif p.use_inh and g.inhib != NULL:
        _propagate(g, x, src_keys, n_src, aslots, p, a, fresh, <Off*>NULL, <On*>NULL)
    else:
        _propagate(g, x, src_keys, n_src, aslots, p, a, fresh, <Off*>NULL, <Off*>NULL)


# ---------------------------------------------------------------------------------------------
# the spread
# ---------------------------------------------------------------------------------------------

cdef Py_ssize_t _spread_kernel(const CSRView* g, const CSRView* x, const int32_t* seed_nodes,
                               const float* seed_energy, Py_ssize_t n_seeds, Py_ssize_t n_nodes,
                               const Params* p, Work* w, int64_t* steps_run,
                               int64_t* scanned) noexcept nogil:
    """The whole spread; leaves the result keys sorted in ``w.keys[:r]`` and returns r.

    Per step the contributions are scattered into the per-node slots (``_emit``); afterwards
    every pass works on a sequential list of packed keys (node, value); the per-node slots are
    only touched again for the kept nodes (merge into ``act``).

    Re-emission (``reemit``) is computed by *delta re-emission*: the step sums are linear in
    the sources' energies, so the unclamped sums ``S`` persist across the steps of a call
    (``vals``, slots stamped with the call stamp) and a step only adds, for the sources whose
    emitted energy changed since the previous step (``ASlot.em``; a node newly crossing the
    threshold changes from 0), ``(e_new - e_old)·w·scale`` on ordinary edges and
    ``-(|e_new| - |e_old|)·|w|·scale_inh`` on inhibitory ones.  Then the whole of ``S`` is
    processed as a fresh step sum (teleport on a copy, clamp, threshold, top-k, merge).  A hub
    seed whose energy does not change is scanned once per call instead of once per step.
    Processing the whole of ``S`` stays cheap: the clamped key of every entry is cached
    (``kc``, with a histogram ``dh`` of the active ones), only the entries changed in a step
    (``dlist``) are recomputed, and the top-k is selected from the cache.  Sums built by
    deltas may differ from a fresh recomputation in the last float32 bits.

    ``keys`` doubles as the source list of a step ((node, energy) packed, sorted by node): the
    sources are consumed by the propagation before the next pass reuses the buffer.
    """
    cdef Slot* slots = w.slots
    cdef ASlot* aslots = w.aslots
    cdef float* vals = w.vals
    cdef int32_t* act_list = w.act_list
    cdef int32_t* nlist = w.nlist
    cdef uint64_t* keys = w.keys
    cdef uint64_t* tmp = w.tmp
    cdef uint64_t* kc = w.kc
    cdef int32_t* dlist = w.dlist
    cdef uint64_t* sel = w.sel
    cdef int32_t* useeds = w.useeds
    cdef float* useed_e = w.useed_e
    cdef float thr = p.thr, lo = p.lo, hi = p.hi, tel = p.tel, omt = p.omt
    cdef int64_t top_k = p.top_k
    cdef bint reemit = p.reemit, do_tel = p.do_tel
    cdef Py_ssize_t i, q, n_act = 0, nu = 0, n_src = 0, m, newly, r
    cdef Py_ssize_t n_tel = 0, n_on = 0, above, nb, need, cum, nn0
    cdef Py_ssize_t nn = 0, nd = 0     # entries of the sums / of dlist (locals: registers)
    cdef uint32_t st = 0
    cdef Py_ssize_t hist[2048]
    cdef int32_t dh[2048]          # reemit: buckets of the active cached keys, whole call
    cdef uint64_t oldk, newk, kprev = 0
    cdef Py_ssize_t n_sel = 0, nc, c_le
    cdef int B
    cdef bint prev_cut = False     # reemit: the previous step's top-k dropped active entries
    cdef int32_t s, j
    cdef float val, old
    cdef int64_t step
    cdef uint64_t kk
    cdef Slot* sl
    cdef ASlot* asl
    cdef uint32_t cst
    cdef Acc a

    w.stamp += 1
    cst = w.stamp
    a.slots = slots
    a.vals = vals
    a.nlist = nlist
    a.dlist = dlist
    a.n_nodes = <uint32_t>n_nodes
    a.scanned = 0
    steps_run[0] = 0
    # seeds: duplicates add (in input order), then clamp
    for i in range(n_seeds):
        s = seed_nodes[i]
        asl = &aslots[s]
        if asl.astamp != cst:
            asl.astamp = cst
            asl.act = seed_energy[i]
            asl.em = 0.0
            act_list[n_act] = s
            n_act += 1
            useeds[nu] = s
            nu += 1
        else:
            asl.act = asl.act + seed_energy[i]
    for i in range(nu):
        asl = &aslots[useeds[i]]
        asl.act = _clampf(asl.act, lo, hi)
        useed_e[i] = asl.act
    if not reemit:
        # first sources: the active seeds, by node index
        for i in range(nu):
            if _active(useed_e[i], thr):
                keys[n_src] = _src_key(useeds[i], useed_e[i])
                n_src += 1
        _radix_sort(keys, tmp, n_src, 4, 7)
    else:
        memset(dh, 0, sizeof(dh))
        if do_tel:
            # with teleport the seeds own the first entries of the sums S (value 0 until an
            # edge reaches them), in the order of useeds / useed_e
            for i in range(nu):
                sl = &slots[useeds[i]]
                sl.nstamp = cst
                sl.nidx = <int32_t>i
                nlist[i] = useeds[i]
                vals[i] = 0.0
                kc[i] = CM_KNONE
            nn = nu
            n_tel = nu

    step = 0
    while step < p.max_steps:
        step += 1
        w.stamp += 1
        st = w.stamp
        nd = 0
        if not reemit:
            nn = 0                        # a fresh step sum; reemit: S persists
        nn0 = nn
        # 1. sources (reemit: the nodes whose emitted energy changed -- every active node of
        #    act emits its act, an inactive one 0 -- by node index)
        if reemit:
            n_src = 0
            for i in range(n_act):
                j = act_list[i]
                asl = &aslots[j]
                val = asl.act
                if not _active(val, thr):
                    val = 0.0
                if val != asl.em:
                    keys[n_src] = _src_key(j, val)
                    n_src += 1
            _radix_sort(keys, tmp, n_src, 4, 7)
        steps_run[0] = step
        m = 0
        # 2. propagate: scatter every source's contributions into the sums
        a.nn = nn
        a.nd = nd
        a.st = st
        a.cst = cst
        if reemit:
            _propagate_step(g, x, keys, n_src, aslots, p, &a, <Off*>NULL)
        else:
            _propagate_step(g, x, keys, n_src, aslots, p, &a, <On*>NULL)
        nn = a.nn
        nd = a.nd
        if not reemit:
            memset(hist, 0, sizeof(hist))
            # 3. teleport back to the seeds
            if do_tel:
                for i in range(nu):
                    s = useeds[i]
                    sl = &slots[s]
                    if sl.nstamp != st:
                        sl.nstamp = st
                        sl.nidx = <int32_t>nn
                        nlist[nn] = s
                        vals[nn] = 0.0
                        nn += 1
                    vals[sl.nidx] = omt * vals[sl.nidx] + tel * useed_e[i]
            # 4. clamp, drop below threshold
            for i in range(nn):
                j = nlist[i]
                val = _clampf(vals[i], lo, hi)
                if _active(val, thr):
                    kk = _key(val, j)
                    keys[m] = kk
                    hist[kk >> 53] += 1
                    m += 1
            # 5. top-k by partial selection over this step's entries only
            if top_k > 0 and m > top_k:
                m = _select_keys(keys, m, <Py_ssize_t>top_k, hist, tmp)
        else:
            # 3. teleport (on a copy of S: the seeds are its first n_tel entries), 4. clamp,
            #    drop below threshold: refresh the cached keys of the entries that changed
            #    (older entries in dlist, the seeds' every step: their teleport term; the
            #    new ones are nn0..nn-1), the others keep theirs
            for i in range(n_tel + nd):
                q = <Py_ssize_t>i if i < n_tel else <Py_ssize_t>dlist[i - n_tel]
                if q < n_tel:
                    if i >= n_tel:
                        continue          # a seed reached by an edge: done above
                    val = _clampf(omt * vals[q] + tel * useed_e[q], lo, hi)
                else:
                    val = _clampf(vals[q], lo, hi)
                newk = _key(val, nlist[q]) if _active(val, thr) else CM_KNONE
                oldk = kc[q]
                if newk != oldk:
                    if oldk != CM_KNONE:
                        dh[oldk >> 53] -= 1
                        n_on -= 1
                    if newk != CM_KNONE:
                        dh[newk >> 53] += 1
                        n_on += 1
                    kc[q] = newk
            for q in range(nn0, nn):
                val = _clampf(vals[q], lo, hi)
                if _active(val, thr):
                    kk = _key(val, nlist[q])
                    kc[q] = kk
                    dh[kk >> 53] += 1
                    n_on += 1
                else:
                    kc[q] = CM_KNONE
            # 5. top-k by partial selection over the cached keys of all of S
            if top_k > 0 and n_on > top_k:
                m = 0
                if prev_cut and n_tel == 0:
                    # every entry neither kept last step nor changed now has a key above
                    # kprev (the last kept key): if the kept-and-unchanged entries plus the
                    # changed ones hold top_k keys <= kprev, the top_k are among them
                    nc = 0
                    c_le = 0
                    for i in range(n_sel):
                        kk = sel[i]
                        if slots[_key_node(kk)].nstamp != st:
                            tmp[nc] = kk
                            nc += 1
                    c_le = nc
                    for i in range(nd):
                        kk = kc[dlist[i]]
                        if kk != CM_KNONE:
                            tmp[nc] = kk
                            nc += 1
                            c_le += kk <= kprev
                    for q in range(nn0, nn):
                        kk = kc[q]
                        if kk != CM_KNONE:
                            tmp[nc] = kk
                            nc += 1
                            c_le += kk <= kprev
                    if c_le >= top_k:
                        nth_element(tmp, tmp + (top_k - 1), tmp + nc)
                        memcpy(keys, tmp, <size_t>top_k * sizeof(uint64_t))
                        m = <Py_ssize_t>top_k
            if top_k > 0 and n_on > top_k and m == 0:
                cum = 0
                for B in range(2048):
                    if cum + dh[B] >= top_k:
                        break
                    cum += dh[B]
                need = <Py_ssize_t>top_k - cum
                above = 0
                nb = 0
                for q in range(nn):
                    # branch-free: keys above the boundary bucket, the boundary bucket apart
                    # (above, nb <= q < nn: in bounds)
                    kk = kc[q]
                    keys[above] = kk
                    above += (kk >> 53) < <uint64_t>B
                    tmp[nb] = kk
                    nb += ((kk >> 53) == <uint64_t>B) & (kk != CM_KNONE)
                if need < nb:
                    nth_element(tmp, tmp + need, tmp + nb)
                memcpy(keys + above, tmp, need * sizeof(uint64_t))
                m = above + need
            if top_k > 0 and n_on > top_k:
                # remember the kept keys and the largest of them for the next step
                kprev = 0
                for i in range(m):
                    if keys[i] > kprev:
                        kprev = keys[i]
                memcpy(sel, keys, m * sizeof(uint64_t))
                n_sel = m
                prev_cut = True
            elif prev_cut:
                for q in range(nn):
                    kk = kc[q]
                    if kk != CM_KNONE:
                        keys[m] = kk
                        m += 1
                prev_cut = False
            else:
                # every active entry is kept, and so were the unchanged ones last step: they
                # are merged already (same value), so only the changed entries need merging
                for i in range(n_tel + nd):
                    q = <Py_ssize_t>i if i < n_tel else <Py_ssize_t>dlist[i - n_tel]
                    kk = kc[q]
                    if kk != CM_KNONE and (i < n_tel or q >= n_tel):
                        keys[m] = kk
                        m += 1
                for q in range(nn0, nn):
                    kk = kc[q]
                    if kk != CM_KNONE:
                        keys[m] = kk
                        m += 1
        # 6. merge by absolute maximum; collect the next sources (non-reemit)
        newly = 0
        for i in range(m):
            kk = keys[i]
            j = _key_node(kk)
            val = _key_value(kk)
            asl = &aslots[j]
            if asl.astamp != cst:
                asl.astamp = cst
                asl.act = val
                asl.em = 0.0
                act_list[n_act] = j
                n_act += 1
                newly += 1
            else:
                old = asl.act
                if not _active(old, thr):
                    newly += 1
                if fabsf(val) > fabsf(old):
                    asl.act = val
            if not reemit:
                keys[i] = _src_key(j, val)
        if not reemit:
            n_src = m
            _radix_sort(keys, tmp, n_src, 4, 7)
        # 7. early stop
        if reemit:
            if newly == 0:
                break
        elif m == 0:
            break

    scanned[0] = a.scanned
    r = 0
    for i in range(n_act):
        j = act_list[i]
        val = aslots[j].act
        if _active(val, thr):
            keys[r] = _key(val, j)
            r += 1
    _radix_sort(keys, tmp, r, 0, 7)
    return r


cdef void _finish(const uint64_t* keys, Py_ssize_t r, int32_t* out_nodes,
                  float* out_energy) noexcept nogil:
    """Copy the sorted result out (nothing to reset: entries are versioned by stamps)."""
    cdef Py_ssize_t i
    for i in range(r):
        out_nodes[i] = _key_node(keys[i])
        out_energy[i] = _key_value(keys[i])


# ---------------------------------------------------------------------------------------------
# Python shells
# ---------------------------------------------------------------------------------------------

cdef class GraphView:
    """The raw pointers of one CSR (``CSR`` keeps one per graph).

    Holds the buffers of the five arrays (typed memoryviews), so the memory stays valid and an
    array cannot be resized while the view lives.  Checks the lengths (O(1)); the values are
    the ``CSR``'s business, and the kernel stays in bounds whatever they are.  Flipping
    entries of ``valid`` in place is seen by later calls.
    """

    cdef CSRView v
    cdef const int64_t[::1] _indptr
    cdef const int32_t[::1] _indices
    cdef const float[::1] _weights
    cdef const uint8_t[::1] _valid
    cdef const uint8_t[::1] _inhib

    def __init__(self, indptr, indices, weights, valid=None, inhibitory=None):
        self._indptr = indptr
        self._indices = indices
        self._weights = weights
        cdef Py_ssize_t e = self._indices.shape[0]
        if self._indptr.shape[0] < 1:
            raise ValueError("indptr must have at least one entry")
        if self._indptr.shape[0] - 1 > 0x7FFFFFFF:
            raise ValueError("too many nodes for int32 indices")
        if self._weights.shape[0] != e:
            raise ValueError("weights must have one entry per edge")
        self.v.indptr = &self._indptr[0]
        self.v.indices = &self._indices[0] if e > 0 else &_EMPTY_I32[0]
        self.v.weights = &self._weights[0] if e > 0 else &_EMPTY_F32[0]
        self.v.n = self._indptr.shape[0] - 1
        self.v.e = e
        self.v.valid = NULL
        self.v.inhib = NULL
        if valid is not None:
            self._valid = valid
            if self._valid.shape[0] != e:
                raise ValueError("valid must have one entry per edge")
            if e > 0:
                self.v.valid = &self._valid[0]
        if inhibitory is not None:
            self._inhib = inhibitory
            if self._inhib.shape[0] != e:
                raise ValueError("inhibitory must have one entry per edge")
            if e > 0:
                self.v.inhib = &self._inhib[0]

    @property
    def n_nodes(self):
        return self.v.n


cdef GraphView _EMPTY_VIEW = GraphView(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32),
                                       np.zeros(0, dtype=np.float32))


def validate_seeds(const int32_t[::1] seed_nodes, const float[::1] seed_energy, Py_ssize_t n):
    """Index of the first seed that is out of [0, n) or not finite, else -1 (O(len(seeds)))."""
    cdef Py_ssize_t i
    if seed_energy.shape[0] != seed_nodes.shape[0]:
        return 0
    for i in range(seed_nodes.shape[0]):
        if seed_nodes[i] < 0 or seed_nodes[i] >= n or not isfinite(seed_energy[i]):
            return i
    return -1


def spread_view(GraphView graph, GraphView extra, seed_nodes, seed_energy, float decay,
                float threshold, float lo, float hi, int64_t max_steps, bint reemit,
                int64_t top_k, float teleport, float inhibit_multiplier,
                SpreadWorkspace workspace):
    """:func:`spread` over pre-built :class:`GraphView` objects (the per-query hot call).

    ``extra`` may be None.  Seeds must be int32/float32 contiguous arrays.
    """
    if graph is None:
        raise TypeError("graph must be a GraphView")
    return _run(graph, _EMPTY_VIEW if extra is None else extra, seed_nodes, seed_energy, decay,
                threshold, lo, hi, max_steps, reemit, top_k, teleport, inhibit_multiplier,
                workspace)


cdef object _run(GraphView graph, GraphView extra, const int32_t[::1] sn, const float[::1] se,
                 float decay, float threshold, float lo, float hi, int64_t max_steps,
                 bint reemit, int64_t top_k, float teleport, float inhibit_multiplier,
                 SpreadWorkspace ws):
    cdef Py_ssize_t n_seeds = sn.shape[0], i, n, r
    cdef int64_t scanned = 0, steps_run = 0
    cdef Params p
    cdef const CSRView* g = &graph.v
    cdef const CSRView* x = &extra.v
    if se.shape[0] != n_seeds:
        raise ValueError("seed_nodes and seed_energy must have the same length")
    if max_steps < 0 or max_steps > 0x7FFFFFFF:
        raise ValueError("max_steps must be in [0, 2**31 - 1]")
    n = <Py_ssize_t>max(g.n, x.n)
    for i in range(n_seeds):
        if sn[i] < 0 or sn[i] >= n:
            raise ValueError(f"seed node {sn[i]} out of range [0, {n})")
    if ws is None:
        ws = SpreadWorkspace(n)
    else:
        ws.ensure(n)
    ws._next_call(max_steps)
    ws._ensure_seeds(n_seeds)
    # float32 factors, computed exactly as the twin computes them (double, then rounded)
    p.thr = threshold
    p.lo = lo
    p.hi = hi
    p.tel = teleport
    p.scale_pos = <float>(<double>decay * (1.0 - <double>teleport))
    p.scale_inh = <float>(<double>decay * <double>inhibit_multiplier)
    p.omt = <float>(1.0 - <double>teleport)
    p.max_steps = max_steps
    p.top_k = top_k
    p.reemit = reemit
    p.use_inh = inhibit_multiplier != 1.0
    p.do_tel = teleport > 0.0
    cdef const int32_t* sn_p = &sn[0] if n_seeds > 0 else NULL
    cdef const float* se_p = &se[0] if n_seeds > 0 else NULL
    with nogil:
        r = _spread_kernel(g, x, sn_p, se_p, n_seeds, n, &p, &ws.w, &steps_run, &scanned)
    out_nodes = np.empty(r, dtype=np.int32)
    out_energy = np.empty(r, dtype=np.float32)
    cdef int32_t[::1] on = out_nodes
    cdef float[::1] oe = out_energy
    if r > 0:
        with nogil:
            _finish(ws.w.keys, r, &on[0], &oe[0])
    ws.edges_scanned = scanned
    ws.steps = steps_run
    return out_nodes, out_energy


def spread(indptr, indices, weights, seed_nodes, seed_energy, *, valid=None, inhibitory=None,
           float decay=0.7, float threshold=0.1, float lo=-1.0, float hi=1.0,
           int64_t max_steps=5, bint reemit=True, int64_t top_k=0, float teleport=0.0,
           float inhibit_multiplier=1.0, extra=None, SpreadWorkspace workspace=None):
    """Spreading activation over raw CSR arrays (SPEC §3); the unvalidated fast path.

    Parameters
    ----------
    indptr, indices, weights : int64[N+1], int32[E], float32[E]
        The graph; meant to be valid already (``causalmem.spreading.CSR`` checks it).  Values
        that are not (rows outside the edge arrays, targets out of range) give meaningless
        energies but no out-of-bounds access; wrong lengths raise ``ValueError``.
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
    graph = GraphView(indptr, indices, weights, valid, inhibitory)
    overlay = _EMPTY_VIEW if extra is None else GraphView(*extra)
    return _run(graph, overlay, seed_nodes, seed_energy, decay, threshold, lo, hi, max_steps,
                reemit, top_k, teleport, inhibit_multiplier, workspace)


def links_among(GraphView graph, const int32_t[::1] nodes):
    """Edges of ``graph`` joining two of ``nodes``: ``int64[M, 2]`` rows ``(k, j)`` with a valid
    edge ``nodes[k] -> nodes[j]``, ``k != j`` (positions in ``nodes``), by ``k`` then CSR order.

    Scans the out-rows of the given nodes once (O(sum of their out-degrees · log len(nodes))):
    what the retrieval's seed colouring needs, without a Python loop per seed.  Nodes outside
    the graph have no row; a target is matched by binary search in the sorted (node, position)
    keys of ``nodes``, so duplicates in ``nodes`` each get their pair.
    """
    if graph is None:
        raise TypeError("graph must be a GraphView")
    cdef Py_ssize_t m = nodes.shape[0], k, lo, hi, mid, q
    cdef const CSRView* g = &graph.v
    cdef int64_t a, b, p
    cdef int32_t t
    cdef uint64_t key
    cdef vector[uint64_t] keys
    cdef vector[int64_t] out
    for k in range(m):
        if nodes[k] < 0:
            raise ValueError(f"nodes must be >= 0, got {nodes[k]}")
    with nogil:
        keys.resize(m)
        for k in range(m):
            keys[k] = (<uint64_t><uint32_t>nodes[k] << 32) | <uint64_t>k
        sort(keys.begin(), keys.end())
        for k in range(m):
            if not _row(g, nodes[k], &a, &b):
                continue
            for p in range(a, b):
                if g.valid != NULL and not g.valid[p]:
                    continue
                t = g.indices[p]
                if t < 0:
                    continue
                key = <uint64_t><uint32_t>t << 32
                lo = 0
                hi = m
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if keys[mid] < key:
                        lo = mid + 1
                    else:
                        hi = mid
                q = lo
                while q < m and (keys[q] >> 32) == <uint64_t><uint32_t>t:
                    if <Py_ssize_t>(keys[q] & 0xFFFFFFFFu) != k:
                        out.push_back(k)
                        out.push_back(<int64_t>(keys[q] & 0xFFFFFFFFu))
                    q += 1
    res = np.empty((out.size() // 2, 2), dtype=np.int64)
    cdef int64_t[:, ::1] rv = res
    for q in range(<Py_ssize_t>(out.size() // 2)):
        rv[q, 0] = out[2 * q]
        rv[q, 1] = out[2 * q + 1]
    return res


cdef double _pairwise_sum(const double* a, Py_ssize_t n) noexcept nogil:
    """numpy's pairwise summation of ``a[:n]`` (``DOUBLE_pairwise_sum``: 8 accumulators, blocks
    of 128 split in halves), so a sum here rounds exactly as ``np.add.reduce`` / ``reduceat``."""
    cdef Py_ssize_t i, n2
    cdef double res
    cdef double r[8]
    if n < 8:
        res = -0.0
        for i in range(n):
            res += a[i]
        return res
    elif n <= 128:
        for i in range(8):
            r[i] = a[i]
        i = 8
        while i < n - (n % 8):
            r[0] += a[i]
            r[1] += a[i + 1]
            r[2] += a[i + 2]
            r[3] += a[i + 3]
            r[4] += a[i + 4]
            r[5] += a[i + 5]
            r[6] += a[i + 6]
            r[7] += a[i + 7]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        while i < n:
            res += a[i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise_sum(a, n2) + _pairwise_sum(a + n2, n - n2)


def bm25_segments(const double[::1] norm, const int32_t[::1] slots, const int32_t[::1] tfs,
                  const int64_t[::1] lengths, const double[::1] weights):
    """BM25 scores of the postings of several query terms, summed per slot.

    ``slots`` / ``tfs`` are the terms' postings one after the other (``lengths[t]`` entries of
    term ``t``, weight ``weights[t]``).  Each posting contributes ``w·tf / (tf + norm[slot])``
    (the float64 operations of ``lexical._term_scores``); a slot's contributions are summed in
    term order as ``np.add.reduceat`` over a stable sort by slot sums them (first term, plus the
    pairwise sum of the others), so the scores are the numpy path's to the last bit.  Returns
    ``(slots int64 ascending, scores float64)``.  A slot outside ``norm`` raises ``ValueError``.
    """
    cdef Py_ssize_t m = slots.shape[0], nt = lengths.shape[0], t, i, k, pos = 0, r = 0, a, b
    cdef int64_t total = 0
    cdef int32_t sl
    cdef double tf, c, w
    cdef vector[uint64_t] keys
    cdef vector[uint64_t] tmp
    cdef vector[double] contrib
    cdef vector[double] seg
    if tfs.shape[0] != m or weights.shape[0] != nt:
        raise ValueError("slots / tfs and lengths / weights must have matching lengths")
    for t in range(nt):
        if lengths[t] < 0:
            raise ValueError("lengths must be >= 0")
        total += lengths[t]
    if total != m:
        raise ValueError(f"lengths must add up to len(slots) = {m}, got {total}")
    if m >= 0xFFFFFFFF:
        raise ValueError("too many postings")
    for i in range(m):
        if slots[i] < 0 or slots[i] >= norm.shape[0]:
            raise ValueError(f"slot {slots[i]} out of range [0, {norm.shape[0]})")
    out_s = np.empty(m, dtype=np.int64)
    out_v = np.empty(m, dtype=np.float64)
    cdef int64_t[::1] os = out_s
    cdef double[::1] ov = out_v
    with nogil:
        keys.resize(m)
        contrib.resize(m)
        for t in range(nt):
            w = weights[t]
            for k in range(lengths[t]):
                sl = slots[pos]
                tf = <double>tfs[pos]
                c = norm[sl] + tf
                c = tf / c
                c = c * w
                contrib[pos] = c
                keys[pos] = (<uint64_t><uint32_t>sl << 32) | <uint64_t>pos
                pos += 1
        seg.resize(0)
        tmp.resize(m)
        # stable by slot (the keys are made in posting order): a slot's postings stay in term order
        _radix_sort(keys.data(), tmp.data(), m, 4, 7)
        a = 0
        while a < m:
            sl = <int32_t>(keys[a] >> 32)
            b = a + 1
            while b < m and <int32_t>(keys[b] >> 32) == sl:
                b += 1
            if b - a == 1:
                c = contrib[keys[a] & 0xFFFFFFFFu]
            else:
                seg.resize(b - a)
                for k in range(b - a):
                    seg[k] = contrib[keys[a + k] & 0xFFFFFFFFu]
                c = seg[0]
                c += _pairwise_sum(&seg[1], b - a - 1)
            os[r] = sl
            ov[r] = c
            r += 1
            a = b
    return out_s[:r], out_v[:r]


def bm25_top(const int64_t[::1] slot_doc, const int64_t[::1] slots, const double[::1] scores,
             const uint8_t[::1] allowed, Py_ssize_t top_k):
    """The best ``top_k`` docs of a BM25 query: ``(doc ids int64, scores float32)``, by float32
    score descending then doc id ascending (what ``np.lexsort((docs, -scores32))`` orders).

    ``slots`` / ``scores`` are the matched index slots and their float64 scores; ``slot_doc``
    maps a slot to its doc id (``[0, 2**31)``); ``allowed`` (None: every doc) is a byte per doc
    id, a doc at or beyond its end not allowed.  A slot or doc id out of range raises
    ``ValueError``.
    """
    cdef Py_ssize_t n = slots.shape[0], i, m = 0, k
    cdef Py_ssize_t n_docs = slot_doc.shape[0]
    cdef Py_ssize_t n_allowed = allowed.shape[0] if allowed is not None else 0
    cdef bint has_allowed = allowed is not None
    cdef int64_t d, sl
    cdef float f
    cdef uint32_t bits, u
    cdef vector[uint64_t] keys
    if scores.shape[0] != n:
        raise ValueError("slots and scores must have the same length")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k}")
    cdef Py_ssize_t bad = -1
    with nogil:
        keys.resize(n)
        for i in range(n):
            sl = slots[i]
            if sl < 0 or sl >= n_docs:
                bad = i
                break
            d = slot_doc[sl]
            if d < 0 or d >= <int64_t>0x80000000:
                bad = i
                break
            if has_allowed and (d >= n_allowed or not allowed[d]):
                continue
            f = <float>scores[i]
            f = f + <float>0.0          # -0.0 -> 0.0: numpy compares them equal
            memcpy(&bits, &f, 4)
            u = bits ^ (0xFFFFFFFFu if (bits >> 31) else 0x80000000u)   # ascending with f
            keys[m] = ((<uint64_t>(0xFFFFFFFFu - u)) << 32) | <uint64_t>d
            m += 1
        k = top_k if top_k < m else m
        if bad >= 0:
            k = 0
        elif k < m:
            nth_element(keys.begin(), keys.begin() + k, keys.begin() + m)
        sort(keys.begin(), keys.begin() + k)
    if bad >= 0:
        if slots[bad] < 0 or slots[bad] >= n_docs:
            raise ValueError(f"slot {slots[bad]} out of range [0, {n_docs})")
        raise ValueError(f"doc id {slot_doc[slots[bad]]} out of range [0, 2**31)")
    out_d = np.empty(k, dtype=np.int64)
    out_s = np.empty(k, dtype=np.float32)
    cdef int64_t[::1] od = out_d
    cdef float[::1] osc = out_s
    for i in range(k):
        od[i] = <int64_t>(keys[i] & 0xFFFFFFFFu)
        u = 0xFFFFFFFFu - <uint32_t>(keys[i] >> 32)
        bits = (u ^ 0x80000000u) if (u >> 31) else ~u
        memcpy(&f, &bits, 4)
        osc[i] = f
    return out_d, out_s


def bonus_sum(list nodes_list, list energy_list, list exclude_list, const double[::1] scales,
              const uint8_t[::1] mask):
    """What several spreads send each node, summed: ``(nodes int64 ascending, sums float64)``.

    Spread ``i`` gave ``nodes_list[i]`` (int32) / ``energy_list[i]`` (float32); a node counts when
    it is inside ``mask`` (a byte per node, beyond its end: no) and not in ``exclude_list[i]``
    (int64, ascending: that spread's own seeds), with ``energy · scales[i]`` in float64.  A node's
    contributions are summed from 0.0 in the order the spreads and their entries come, which is
    what ``np.unique(..., return_inverse=True)`` + ``np.bincount(weights=...)`` over the
    concatenated kept entries gives.  A negative node raises ``ValueError``.
    """
    cdef Py_ssize_t n_sp = len(nodes_list), i, j, k, lo, hi, mid, total = 0, m = 0, a, b, r = 0
    cdef Py_ssize_t n_mask = mask.shape[0], n_ex
    cdef const int32_t[::1] nd
    cdef const float[::1] en
    cdef const int64_t[::1] ex
    cdef int32_t x
    cdef double sc, acc
    cdef vector[uint64_t] keys
    cdef vector[uint64_t] tmp
    cdef vector[double] contrib
    if len(energy_list) != n_sp or len(exclude_list) != n_sp or scales.shape[0] != n_sp:
        raise ValueError("one energy array, one exclude array and one scale per spread")
    for i in range(n_sp):
        nd = nodes_list[i]
        en = energy_list[i]
        if en.shape[0] != nd.shape[0]:
            raise ValueError("nodes and energies of a spread must have the same length")
        total += nd.shape[0]
    if total >= 0xFFFFFFFF:
        raise ValueError("too many entries")
    keys.resize(total)
    contrib.resize(total)
    for i in range(n_sp):
        nd = nodes_list[i]
        en = energy_list[i]
        ex = exclude_list[i]
        n_ex = ex.shape[0]
        sc = scales[i]
        for j in range(nd.shape[0]):
            x = nd[j]
            if x < 0:
                raise ValueError(f"node {x} is negative")
            if x >= n_mask or not mask[x]:
                continue
            lo = 0
            hi = n_ex
            while lo < hi:
                mid = (lo + hi) >> 1
                if ex[mid] < x:
                    lo = mid + 1
                else:
                    hi = mid
            if lo < n_ex and ex[lo] == x:
                continue
            contrib[m] = <double>en[j] * sc
            keys[m] = (<uint64_t><uint32_t>x << 32) | <uint64_t>m
            m += 1
    out_n = np.empty(m, dtype=np.int64)
    out_v = np.empty(m, dtype=np.float64)
    cdef int64_t[::1] on = out_n
    cdef double[::1] ov = out_v
    with nogil:
        tmp.resize(m)
        _radix_sort(keys.data(), tmp.data(), m, 4, 7)
        a = 0
        while a < m:
            x = <int32_t>(keys[a] >> 32)
            acc = 0.0
            b = a
            while b < m and <int32_t>(keys[b] >> 32) == x:
                acc += contrib[keys[b] & 0xFFFFFFFFu]
                b += 1
            on[r] = x
            ov[r] = acc
            r += 1
            a = b
    return out_n[:r], out_v[:r]


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


def transpose_csr(Py_ssize_t n_nodes, const int64_t[::1] indptr, const int32_t[::1] indices,
                  const float[::1] weights, valid=None, inhibitory=None):
    """Reverse CSR of a CSR (counting sort of its edges by target, stable in CSR order).

    Returns ``(indptr, indices, weights, valid, inhibitory, rev_of_fwd, fwd_of_rev)``; the two
    int32 position maps link each forward edge to its reverse twin.  Needs E < 2**31.
    """
    cdef Py_ssize_t e, E = indices.shape[0], s
    cdef int64_t p, q
    cdef int32_t d
    cdef const uint8_t[::1] v_in
    cdef const uint8_t[::1] h_in
    cdef const uint8_t* v_p = NULL
    cdef const uint8_t* h_p = NULL
    cdef uint8_t* ov_p = NULL
    cdef uint8_t* oh_p = NULL
    cdef uint8_t[::1] ov
    cdef uint8_t[::1] oh
    if E >= 0x7FFFFFFF:
        raise ValueError("transpose_csr needs fewer than 2**31 edges")
    if n_nodes < 0 or indptr.shape[0] != n_nodes + 1 or weights.shape[0] != E:
        raise ValueError("inconsistent CSR arrays")
    r_indptr_a = np.zeros(n_nodes + 1, dtype=np.int64)
    r_indices_a = np.empty(E, dtype=np.int32)
    r_weights_a = np.empty(E, dtype=np.float32)
    rof_a = np.empty(E, dtype=np.int32)
    for_a = np.empty(E, dtype=np.int32)
    cursor_a = np.empty(max(n_nodes, 1), dtype=np.int64)
    r_valid_a = None
    r_inhib_a = None
    if valid is not None:
        v_in = valid
        if v_in.shape[0] != E:
            raise ValueError("valid must have one entry per edge")
        r_valid_a = np.empty(E, dtype=np.uint8)
        ov = r_valid_a
        if E > 0:
            v_p = &v_in[0]
            ov_p = &ov[0]
    if inhibitory is not None:
        h_in = inhibitory
        if h_in.shape[0] != E:
            raise ValueError("inhibitory must have one entry per edge")
        r_inhib_a = np.empty(E, dtype=np.uint8)
        oh = r_inhib_a
        if E > 0:
            h_p = &h_in[0]
            oh_p = &oh[0]
    if indptr[0] != 0 or indptr[n_nodes] != E:
        raise ValueError("indptr must start at 0 and end at len(indices)")
    for s in range(n_nodes):
        if indptr[s + 1] < indptr[s]:
            raise ValueError("indptr must be non-decreasing (monotone)")
    for e in range(E):
        if indices[e] < 0 or indices[e] >= n_nodes:
            raise ValueError(f"indices[{e}] = {indices[e]} out of range [0, {n_nodes})")
    cdef int64_t[::1] rip = r_indptr_a
    cdef int32_t[::1] rix = r_indices_a
    cdef float[::1] rw = r_weights_a
    cdef int32_t[::1] rof = rof_a
    cdef int32_t[::1] fo = for_a
    cdef int64_t[::1] cursor = cursor_a
    with nogil:
        for e in range(E):
            rip[indices[e] + 1] += 1
        for s in range(n_nodes):
            rip[s + 1] += rip[s]
        for s in range(n_nodes):
            cursor[s] = rip[s]
        for s in range(n_nodes):
            for p in range(indptr[s], indptr[s + 1]):
                d = indices[p]
                q = cursor[d]
                cursor[d] = q + 1
                rix[q] = <int32_t>s
                rw[q] = weights[p]
                rof[p] = <int32_t>q
                fo[q] = <int32_t>p
                if ov_p != NULL:
                    ov_p[q] = v_p[p]
                if oh_p != NULL:
                    oh_p[q] = h_p[p]
    return r_indptr_a, r_indices_a, r_weights_a, r_valid_a, r_inhib_a, rof_a, for_a


cdef extern from *:
    """
    #include <errno.h>
    #if defined(_WIN32)
    static Py_ssize_t cm_pread_rows(int fd, const int64_t* pos, Py_ssize_t n, Py_ssize_t rowbytes,
                                    int64_t offset, char* out) { errno = ENOSYS; return -1; }
    #else
    #include <unistd.h>
    /* rows pos[0..n) of rowbytes each, starting at byte offset, into out: one pread per row (a
       short read continues where it stopped, EINTR retries); n, or -1 (errno) / -2 (end of file) */
    static Py_ssize_t cm_pread_rows(int fd, const int64_t* pos, Py_ssize_t n, Py_ssize_t rowbytes,
                                    int64_t offset, char* out) {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t done = 0;
            while (done < rowbytes) {
                ssize_t r = pread(fd, out + i * rowbytes + done, (size_t)(rowbytes - done),
                                  (off_t)(offset + pos[i] * rowbytes + done));
                if (r < 0) {
                    if (errno == EINTR) continue;
                    return -1;
                }
                if (r == 0) return -2;
                done += r;
            }
        }
        return n;
    }
    #endif
    """
    Py_ssize_t cm_pread_rows(int fd, const int64_t* pos, Py_ssize_t n, Py_ssize_t rowbytes,
                             int64_t offset, char* out) noexcept nogil


def pread_rows(int fd, const int64_t[::1] pos, Py_ssize_t rowbytes, int64_t offset, uint8_t[::1] out):
    """Read rows ``pos`` (any order, repeats allowed) of ``rowbytes`` bytes each from file ``fd``,
    whose row ``p`` starts at byte ``offset + p * rowbytes``, into ``out`` (``len(pos) * rowbytes``
    bytes), one ``pread`` per row with the GIL released for the whole gather (``os.pread`` per row
    takes and drops it for each: ~2 us a row). ``OSError`` for a failed or short read."""
    cdef Py_ssize_t n = pos.shape[0], i, got
    cdef int err
    if rowbytes <= 0:
        raise ValueError(f"rowbytes must be positive, got {rowbytes}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    if out.shape[0] != n * rowbytes:
        raise ValueError(f"out has {out.shape[0]} bytes, expected {n * rowbytes} ({n} rows of {rowbytes})")
    for i in range(n):
        if pos[i] < 0:
            raise ValueError(f"row position {pos[i]} is negative")
    if n == 0:
        return 0
    with nogil:
        got = cm_pread_rows(fd, &pos[0], n, rowbytes, offset, <char*>&out[0])
    if got == -2:
        raise OSError("short read: a row is past the end of the file")
    if got < 0:
        err = errno_value()
        raise OSError(err, os_strerror(err))
    return got


cdef extern from "<errno.h>":
    int errno


cdef int errno_value() noexcept:
    return errno


def os_strerror(int err):
    import os
    return os.strerror(err)


def bm25_dense(double[::1] buf, const double[::1] norm, list slots_list, list tfs_list,
               const double[::1] weights):
    """Add each query term's BM25 contributions into the dense per-slot buffer ``buf``: for term
    ``t`` (postings ``slots_list[t]`` / ``tfs_list[t]``, int32, a term's slots distinct, weight
    ``weights[t]``) ``buf[slot] += w·tf / (tf + norm[slot])``, term after term — the float64
    operations of ``lexical._term_scores`` and numpy's ``buf[slots] += ...`` in the same order, so
    ``buf`` ends bit-identical. A slot outside ``buf`` or ``norm`` raises ``ValueError`` (nothing added)."""
    cdef Py_ssize_t nt = len(slots_list), t, k, n
    cdef Py_ssize_t limit = min(buf.shape[0], norm.shape[0])
    cdef const int32_t[::1] sl
    cdef const int32_t[::1] tf
    cdef vector[const int32_t*] sp
    cdef vector[const int32_t*] tp
    cdef vector[Py_ssize_t] lens
    cdef double c, x, w
    cdef int32_t s
    if len(tfs_list) != nt or weights.shape[0] != nt:
        raise ValueError("one tfs array and one weight per term")
    for t in range(nt):
        sl = slots_list[t]
        tf = tfs_list[t]
        n = sl.shape[0]
        if tf.shape[0] != n:
            raise ValueError("slots and tfs of a term must have the same length")
        for k in range(n):
            if sl[k] < 0 or sl[k] >= limit:
                raise ValueError(f"slot {sl[k]} out of range [0, {limit})")
        sp.push_back(&sl[0] if n else NULL)
        tp.push_back(&tf[0] if n else NULL)
        lens.push_back(n)
    with nogil:
        for t in range(nt):
            w = weights[t]
            for k in range(lens[t]):
                s = sp[t][k]
                x = <double>tp[t][k]
                c = norm[s] + x
                c = x / c
                c = c * w
                buf[s] += c
