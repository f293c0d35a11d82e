"""Plain-Python reference twin of ``_spread.pyx``: the test oracle.

The literal algorithm of SPEC §3, written to be checked by eye: every step, every active node
(re-emission) or every node that received energy in the previous step emits along its valid
out-edges; the contributions of a step add up; teleport, clamp, threshold, top-k; merge into
``act`` by absolute maximum.  No delta re-emission, no workspace, no stamps: dictionaries and
``numpy.float32`` scalars.  Same names and signatures as the compiled module, so
``causalmem._kernels`` can fall back to it.

The compiled kernel computes re-emission by deltas, so with ``reemit`` the two agree within
float32 rounding (without ``reemit`` they evaluate the same float32 expressions in the same
order: sources by node index, base edges before overlay edges, CSR order, and agree bit for
bit).  To let tests tell a rounding difference from a bug, the twin records on its workspace
how close any decision came to flipping (``margin``) and the largest unclamped sum
(``max_abs_sum``).
"""
from __future__ import annotations

import numpy as np

F32 = np.float32


class SpreadWorkspace:
    """Twin of the compiled workspace; holds only the statistics of the last call."""

    def __init__(self, n_nodes: int = 0) -> None:
        self.n_nodes = -1
        self.edges_scanned = 0
        self.steps = 0
        self.margin = float("inf")   # smallest distance of a threshold / top-k decision
        self.max_abs_sum = 0.0       # largest |unclamped step sum|
        self.ensure(n_nodes)

    def ensure(self, n_nodes: int) -> None:
        if n_nodes > self.n_nodes:
            self.n_nodes = int(n_nodes)

    @property
    def nbytes(self) -> int:
        return 0


def spread(indptr, indices, weights, seed_nodes, seed_energy, *, valid=None, inhibitory=None,
           decay=0.7, threshold=0.1, lo=-1.0, hi=1.0, max_steps=5, reemit=True, top_k=0,
           teleport=0.0, inhibit_multiplier=1.0, extra=None, workspace=None):
    """Spreading activation (SPEC §3), literally; see ``_spread.pyx`` for the parameters."""
    graphs = [(indptr, indices, weights, valid, inhibitory)]
    if extra is not None:
        graphs.append(extra)
    n = max(len(g[0]) - 1 for g in graphs)
    if len(seed_nodes) != len(seed_energy):
        raise ValueError("seed_nodes and seed_energy must have the same length")
    for s in seed_nodes:
        if not 0 <= s < n:
            raise ValueError(f"seed node {s} out of range [0, {n})")
    # parameters in float32, as the kernel receives them; the factors of step 2 and 3 are
    # computed in double from those and rounded once (as the kernel does)
    decay, thr, lo, hi, tel, mult = (F32(v) for v in (decay, threshold, lo, hi, teleport,
                                                      inhibit_multiplier))
    scale = F32(float(decay) * (1.0 - float(tel)))
    scale_inh = F32(float(decay) * float(mult))
    keep = F32(1.0 - float(tel))
    inhibit = mult != F32(1.0)
    ws = workspace if workspace is not None else SpreadWorkspace(n)
    ws.ensure(n)
    ws.edges_scanned, ws.steps, ws.margin, ws.max_abs_sum = 0, 0, float("inf"), 0.0

    def clamp(x):
        return hi if x > hi else lo if x < lo else x

    def active(x):
        return bool(abs(x) >= thr and x != 0)

    def near(x):                     # how far x is from flipping the test active(x)
        d = abs(abs(float(x)) - float(thr)) if thr > 0 else abs(float(x))
        ws.margin = min(ws.margin, d)

    # seeds: duplicates add (in input order), then clamp
    act = {}
    for s, e in zip((int(s) for s in seed_nodes), (F32(e) for e in seed_energy)):
        act[s] = act[s] + e if s in act else e
    for s in act:
        act[s] = clamp(act[s])
    seed_e = dict(act)
    cur = dict(act)                  # what arrived in the last step (step 0: the seeds)

    with np.errstate(over="ignore", invalid="ignore"):
        for step in range(1, int(max_steps) + 1):
            ws.steps = step
            # 1. sources: |e| >= threshold, e = act (re-emission) or what arrived last step
            emit = act if reemit else cur
            for e in emit.values():
                near(e)
            sources = sorted(j for j, e in emit.items() if active(e))
            # 2. every valid out-edge of every source; the contributions of a step add up
            nxt = {}
            for i in sources:
                e = emit[i]
                for g_indptr, g_indices, g_weights, g_valid, g_inhib in graphs:
                    if i >= len(g_indptr) - 1:
                        continue
                    start, end = int(g_indptr[i]), int(g_indptr[i + 1])
                    ws.edges_scanned += end - start
                    for p in range(start, end):
                        if g_valid is not None and not g_valid[p]:
                            continue
                        j, w = int(g_indices[p]), g_weights[p]
                        if inhibit and g_inhib is not None and g_inhib[p]:
                            c = -((abs(e) * abs(w)) * scale_inh)
                        else:
                            c = (e * w) * scale
                        nxt[j] = nxt[j] + c if j in nxt else F32(0.0) + c
            # 3. teleport back to the seeds
            if tel > 0:
                for s, e0 in seed_e.items():
                    nxt[s] = keep * nxt.get(s, F32(0.0)) + tel * e0
            # 4. clamp, drop below threshold
            for v in nxt.values():
                ws.max_abs_sum = max(ws.max_abs_sum, abs(float(v)))
                near(clamp(v))
            nxt = {j: clamp(v) for j, v in nxt.items()}
            nxt = {j: v for j, v in nxt.items() if active(v)}
            # 5. top-k by |energy|, ties: lower node index
            if 0 < top_k < len(nxt):
                ranked = sorted(nxt, key=lambda j: (-abs(float(nxt[j])), j))
                cut = abs(float(nxt[ranked[top_k - 1]])) - abs(float(nxt[ranked[top_k]]))
                ws.margin = min(ws.margin, cut)
                nxt = {j: nxt[j] for j in ranked[:top_k]}
            # 6. merge by absolute maximum
            newly = sum(1 for j in nxt if not active(act.get(j, F32(0.0))))
            for j, v in nxt.items():
                if j not in act or abs(v) > abs(act[j]):
                    act[j] = v
            cur = nxt
            # 7. stop when nothing newly crossed the threshold (re-emission) or nothing arrived
            if (newly == 0) if reemit else not nxt:
                break

    result = sorted((j for j, v in act.items() if active(v)), key=lambda j: (-abs(float(act[j])), j))
    return (np.array(result, dtype=np.int32),
            np.array([act[j] for j in result], dtype=np.float32))


class GraphView:
    """Twin of the compiled view: just keeps the five arrays."""

    def __init__(self, indptr, indices, weights, valid=None, inhibitory=None) -> None:
        self.arrays = (indptr, indices, weights, valid, inhibitory)

    @property
    def n_nodes(self) -> int:
        return len(self.arrays[0]) - 1


def validate_seeds(seed_nodes, seed_energy, n) -> int:
    """Index of the first seed that is out of [0, n) or not finite, else -1."""
    if len(seed_nodes) != len(seed_energy):
        return 0
    for i, (s, e) in enumerate(zip(seed_nodes, seed_energy)):
        if not 0 <= s < n or not np.isfinite(e):
            return i
    return -1


def spread_view(graph, extra, seed_nodes, seed_energy, decay, threshold, lo, hi, max_steps,
                reemit, top_k, teleport, inhibit_multiplier, workspace):
    """:func:`spread` over :class:`GraphView` objects (same signature as the compiled one)."""
    indptr, indices, weights, valid, inhibitory = graph.arrays
    return spread(indptr, indices, weights, seed_nodes, seed_energy, valid=valid,
                  inhibitory=inhibitory, decay=decay, threshold=threshold, lo=lo, hi=hi,
                  max_steps=max_steps, reemit=reemit, top_k=top_k, teleport=teleport,
                  inhibit_multiplier=inhibit_multiplier,
                  extra=None if extra is None else extra.arrays, workspace=workspace)


def links_among(graph, nodes):
    """Edges joining two of ``nodes``: int64[M, 2] rows (k, j) with a valid edge
    nodes[k] -> nodes[j], k != j, by k then CSR order (see the compiled twin)."""
    indptr, indices, _, valid, _ = graph.arrays
    nodes = [int(x) for x in nodes]
    if any(x < 0 for x in nodes):
        raise ValueError(f"nodes must be >= 0, got {min(nodes)}")
    where: dict[int, list[int]] = {}
    for k, x in enumerate(nodes):
        where.setdefault(x, []).append(k)
    out = []
    for k, x in enumerate(nodes):
        if x >= len(indptr) - 1:
            continue
        for p in range(int(indptr[x]), int(indptr[x + 1])):
            if valid is not None and not valid[p]:
                continue
            for j in where.get(int(indices[p]), ()):
                if j != k:
                    out.append((k, j))
    return np.array(out, dtype=np.int64).reshape(-1, 2)


def bm25_segments(norm, slots, tfs, lengths, weights):
    """BM25 contributions of several terms' postings summed per slot (see the compiled twin):
    a stable sort by slot and ``np.add.reduceat``."""
    slots = np.asarray(slots)
    if len(tfs) != len(slots) or len(weights) != len(lengths):
        raise ValueError("slots / tfs and lengths / weights must have matching lengths")
    if any(n < 0 for n in lengths):
        raise ValueError("lengths must be >= 0")
    if int(np.sum(lengths)) != len(slots):
        raise ValueError(f"lengths must add up to len(slots) = {len(slots)}, got {int(np.sum(lengths))}")
    if len(slots) and (slots.min() < 0 or slots.max() >= len(norm)):
        raise ValueError(f"slot out of range [0, {len(norm)})")
    tf = np.asarray(tfs).astype(np.float64)
    c = norm[slots]
    c += tf
    np.divide(tf, c, out=c)
    c *= np.repeat(np.asarray(weights, dtype=np.float64), lengths)
    if not len(slots):
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    order = np.argsort(slots, kind="stable")
    s_sorted = slots[order]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(s_sorted)) + 1))
    return s_sorted[starts].astype(np.int64), np.add.reduceat(c[order], starts)


def bm25_top(slot_doc, slots, scores, allowed, top_k):
    """The best ``top_k`` docs of a BM25 query by float32 score, then doc id (see the compiled twin)."""
    slots = np.asarray(slots, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float64)
    if len(scores) != len(slots):
        raise ValueError("slots and scores must have the same length")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k}")
    if len(slots) and (slots.min() < 0 or slots.max() >= len(slot_doc)):
        raise ValueError(f"slot out of range [0, {len(slot_doc)})")
    docs = np.asarray(slot_doc)[slots]
    if len(docs) and (docs.min() < 0 or docs.max() >= 2**31):
        raise ValueError("doc id out of range [0, 2**31)")
    if allowed is not None:
        allowed = np.asarray(allowed).astype(bool)
        ok = docs < allowed.shape[0]
        ok[ok] = allowed[docs[ok]]
        docs, scores = docs[ok], scores[ok]
    s32 = scores.astype(np.float32)
    if s32.shape[0] > top_k:
        kth = np.partition(s32, s32.shape[0] - top_k)[s32.shape[0] - top_k] if top_k else np.inf
        sel = s32 >= kth
        docs, s32 = docs[sel], s32[sel]
    order = np.lexsort((docs, -s32))[:top_k]
    return docs[order].astype(np.int64, copy=False), s32[order]


def bonus_sum(nodes_list, energy_list, exclude_list, scales, mask):
    """What several spreads send each node, summed (see the compiled twin): the kept entries
    concatenated, ``np.unique(return_inverse=True)`` + ``np.bincount``."""
    if not len(energy_list) == len(exclude_list) == len(scales) == len(nodes_list):
        raise ValueError("one energy array, one exclude array and one scale per spread")
    mask = np.asarray(mask).astype(bool)
    ids, vals = [], []
    for nodes, en, ex, sc in zip(nodes_list, energy_list, exclude_list, scales):
        if len(en) != len(nodes):
            raise ValueError("nodes and energies of a spread must have the same length")
        nodes = np.asarray(nodes).astype(np.int64)
        if len(nodes) and nodes.min() < 0:
            raise ValueError(f"node {nodes.min()} is negative")
        keep = (nodes < len(mask)) & ~np.isin(nodes, ex)
        keep[keep] = mask[nodes[keep]]
        ids.append(nodes[keep])
        vals.append(np.asarray(en)[keep].astype(np.float64) * float(sc))
    all_ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    if not len(all_ids):
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    keys, inv = np.unique(all_ids, return_inverse=True)
    return keys, np.bincount(inv, weights=np.concatenate(vals), minlength=len(keys))


def coo_to_csr(n_nodes, src, dst, weights, valid=None, inhibitory=None):
    """COO -> CSR, stable by (src, original position); see the compiled twin."""
    src = np.asarray(src)
    if len(dst) != len(src) or len(weights) != len(src):
        raise ValueError("src, dst and weights must have the same length")
    for name, arr in (("valid", valid), ("inhibitory", inhibitory)):
        if arr is not None and len(arr) != len(src):
            raise ValueError(f"{name} must have one entry per edge")
    if len(src) and (src.min() < 0 or src.max() >= n_nodes):
        raise ValueError(f"src out of range [0, {n_nodes})")
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n_nodes), out=indptr[1:])
    pos = np.empty(len(src), dtype=np.int64)
    pos[order] = np.arange(len(src))
    return (indptr, np.asarray(dst, np.int32)[order], np.asarray(weights, np.float32)[order],
            None if valid is None else np.asarray(valid, np.uint8)[order],
            None if inhibitory is None else np.asarray(inhibitory, np.uint8)[order], pos)


def transpose_csr(n_nodes, indptr, indices, weights, valid=None, inhibitory=None):
    """Reverse CSR (stable by target, then CSR position) plus the two position maps."""
    e = len(indices)
    if len(indptr) != n_nodes + 1 or len(weights) != e:
        raise ValueError("inconsistent CSR arrays")
    rows = np.repeat(np.arange(n_nodes, dtype=np.int32), np.diff(indptr))
    order = np.argsort(indices, kind="stable")            # reverse position -> forward position
    r_indptr = np.zeros(n_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(indices, minlength=n_nodes), out=r_indptr[1:])
    idx_type = np.int32 if e < 2**31 - 1 else np.int64
    rev_of_fwd = np.empty(e, dtype=idx_type)
    rev_of_fwd[order] = np.arange(e, dtype=idx_type)
    return (r_indptr, rows[order], np.asarray(weights, np.float32)[order],
            None if valid is None else np.asarray(valid, np.uint8)[order],
            None if inhibitory is None else np.asarray(inhibitory, np.uint8)[order],
            rev_of_fwd, order.astype(idx_type))


def pread_rows(fd, pos, rowbytes, offset, out):
    """Rows ``pos`` of ``rowbytes`` bytes each from file ``fd`` (row ``p`` at ``offset + p * rowbytes``)
    into ``out`` (see the compiled twin): ``os.pread`` per row."""
    import os

    pos = np.asarray(pos, dtype=np.int64)
    n = pos.shape[0]
    if rowbytes <= 0:
        raise ValueError(f"rowbytes must be positive, got {rowbytes}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    if out.shape[0] != n * rowbytes:
        raise ValueError(f"out has {out.shape[0]} bytes, expected {n * rowbytes} ({n} rows of {rowbytes})")
    if n and int(pos.min()) < 0:
        raise ValueError(f"row position {int(pos.min())} is negative")
    for i, p in enumerate(pos.tolist()):
        buf = os.pread(fd, rowbytes, offset + p * rowbytes)
        if len(buf) != rowbytes:
            raise OSError("short read: a row is past the end of the file")
        out[i * rowbytes: (i + 1) * rowbytes] = np.frombuffer(buf, dtype=np.uint8)
    return n


def bm25_dense(buf, norm, slots_list, tfs_list, weights):
    """``buf[slots] += w·tf / (tf + norm[slots])`` term after term (see the compiled twin)."""
    if not len(slots_list) == len(tfs_list) == len(weights):
        raise ValueError("one tfs array and one weight per term")
    limit = min(buf.shape[0], norm.shape[0])
    for slots, tfs in zip(slots_list, tfs_list):
        if len(slots) != len(tfs):
            raise ValueError("slots and tfs of a term must have the same length")
        if len(slots) and (int(np.min(slots)) < 0 or int(np.max(slots)) >= limit):
            bad = int(np.min(slots)) if int(np.min(slots)) < 0 else int(np.max(slots))
            raise ValueError(f"slot {bad} out of range [0, {limit})")
    for slots, tfs, w in zip(slots_list, tfs_list, weights):
        tf = np.asarray(tfs).astype(np.float64)
        c = norm[slots]
        c += tf
        np.divide(tf, c, out=c)
        c *= float(w)
        buf[slots] += c
