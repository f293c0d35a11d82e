"""Plain-Python reference twin of ``_spread.pyx`` (the test oracle).

Same names, signatures and semantics as the compiled module, written for obviousness rather
than speed: dictionaries and loops over ``numpy.float32`` scalars.  Every float32 expression is
evaluated in the same order as in the compiled kernel (sources by ascending node index, each
source's base edges then its overlay edges in CSR order), so both agree bit for bit.

``spread_vectorized`` is a third implementation of the same semantics, a numpy "frontier"
algorithm (one vectorised gather/scatter per step).  It is the baseline of the benchmarks.
"""
from __future__ import annotations

import numpy as np

F32 = np.float32
_ZERO = F32(0.0)


class SpreadWorkspace:
    """Twin of the compiled workspace (the reference needs no scratch memory)."""

    def __init__(self, n_nodes: int = 0) -> None:
        self.n_nodes = -1
        self.edges_scanned = 0
        self.steps = 0
        self.ensure(n_nodes)

    def ensure(self, n_nodes: int) -> None:
        if n_nodes > self.n_nodes:
            self.n_nodes = int(n_nodes)

    @property
    def nbytes(self) -> int:
        return 0


def _clampf(x, lo, hi):
    if x > hi:
        return hi
    if x < lo:
        return lo
    return x


def _active(x, thr) -> bool:
    return bool(abs(x) >= thr and x != 0)


def _order_key(x, node):
    return (-abs(float(x)), int(node))


def _graph(arrays):
    if arrays is None:
        return (np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32), None, None)
    indptr, indices, weights, valid, inhib = arrays
    if valid is not None and len(valid) == 0:
        valid = None
    if inhib is not None and len(inhib) == 0:
        inhib = None
    return indptr, indices, weights, valid, inhib


def spread(indptr, indices, weights, seed_nodes, seed_energy, *, valid=None, inhibitory=None,
           decay=0.7, threshold=0.1, lo=-1.0, hi=1.0, max_steps=5, reemit=True, top_k=0,
           teleport=0.0, inhibit_multiplier=1.0, extra=None, workspace=None):
    """Reference spreading activation (SPEC §3); see ``_spread.pyx`` for the parameters."""
    graphs = [_graph((indptr, indices, weights, valid, inhibitory)), _graph(extra)]
    n = max(len(g[0]) - 1 for g in graphs)
    seed_nodes = np.asarray(seed_nodes)
    seed_energy = np.asarray(seed_energy, dtype=np.float32)
    if len(seed_nodes) != len(seed_energy):
        raise ValueError("seed_nodes and seed_energy must have the same length")
    for s in seed_nodes:
        if not 0 <= s < n:
            raise ValueError(f"seed node {s} out of range [0, {n})")
    decay, thr, lo, hi, tel, mult = (F32(v) for v in (decay, threshold, lo, hi, teleport,
                                                      inhibit_multiplier))
    scale_pos = F32(float(decay) * (1.0 - float(tel)))
    scale_inh = F32(float(decay) * float(mult))
    omt = F32(1.0 - float(tel))
    use_inh = mult != F32(1.0)

    ws = workspace if workspace is not None else SpreadWorkspace(n)
    ws.ensure(n)
    scanned = 0
    steps_run = 0

    act: dict[int, np.float32] = {}
    seeds: dict[int, np.float32] = {}
    for s, e in zip(seed_nodes.tolist(), seed_energy):
        if s in act:
            act[s] = act[s] + e
        else:
            act[s] = e
            seeds[s] = e
    for s in seeds:
        act[s] = _clampf(act[s], lo, hi)
        seeds[s] = act[s]
    cur = {s: e for s, e in seeds.items() if _active(e, thr)}
    # reemit: delta re-emission.  The step sum is linear in the sources' energies, so the
    # unclamped sums S persist across steps and a step adds only the change of the sources
    # whose emitted energy changed (``emitted``: what each node emitted last, 0 if never).
    sums: dict[int, np.float32] = {}
    emitted: dict[int, np.float32] = {}

    with np.errstate(over="ignore", invalid="ignore"):
        for step in range(1, int(max_steps) + 1):
            steps_run = step
            if reemit:
                # sources: nodes whose emitted energy (act if active, else 0) changed
                cur = {}
                for j, v in act.items():
                    e = v if _active(v, thr) else _ZERO
                    if e != emitted.get(j, _ZERO):
                        cur[j] = e
                nxt = sums
            else:
                nxt = {}
            for s in sorted(cur):
                e = cur[s]
                ae = abs(e)
                if reemit:
                    old = emitted.get(s, _ZERO)
                    emitted[s] = e
                    e, ae = e - old, abs(e) - abs(old)
                for g_indptr, g_indices, g_weights, g_valid, g_inhib in graphs:
                    if s >= len(g_indptr) - 1:
                        continue
                    start, end = int(g_indptr[s]), int(g_indptr[s + 1])
                    scanned += end - start
                    for p in range(start, end):
                        if g_valid is not None and not g_valid[p]:
                            continue
                        j = int(g_indices[p])
                        w = g_weights[p]
                        if use_inh and g_inhib is not None and g_inhib[p]:
                            c = -((ae * abs(w)) * scale_inh)
                        else:
                            c = (e * w) * scale_pos
                        nxt[j] = nxt.get(j, _ZERO) + c
            if reemit:
                nxt = dict(sums)  # teleport and clamp work on a copy of the sums
            if tel > 0:
                for s, e0 in seeds.items():
                    nxt[s] = omt * nxt.get(s, _ZERO) + tel * e0
            kept = {}
            for j, v in nxt.items():
                v = _clampf(v, lo, hi)
                if _active(v, thr):
                    kept[j] = v
            if top_k > 0 and len(kept) > top_k:
                best = sorted(kept, key=lambda j: _order_key(kept[j], j))[: int(top_k)]
                kept = {j: kept[j] for j in best}
            newly = 0
            for j, v in kept.items():
                old = act.get(j, _ZERO)
                if not _active(old, thr):
                    newly += 1
                if abs(v) > abs(old):
                    act[j] = v
                elif j not in act:
                    act[j] = old
            cur = kept
            if reemit:
                if newly == 0:
                    break
            elif not kept:
                break

    result = sorted((j for j, v in act.items() if _active(v, thr)),
                    key=lambda j: _order_key(act[j], j))
    ws.edges_scanned = scanned
    ws.steps = steps_run
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


# -------------------------------------------------------------------------------------------
# vectorised numpy frontier implementation (benchmark baseline, same semantics)
# -------------------------------------------------------------------------------------------

def _gather(graph, src_nodes, src_energy):
    """Edges of the given sources as flat arrays (source order, CSR order within a source)."""
    indptr, indices, weights, valid, inhib = graph
    n = len(indptr) - 1
    sel = src_nodes < n
    nodes = src_nodes[sel]
    starts = indptr[nodes]
    counts = indptr[nodes + 1] - starts
    total = int(counts.sum())
    if total == 0:
        return None
    owner = np.repeat(np.arange(len(nodes)), counts)
    offs = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    pos = np.repeat(starts, counts) + offs
    # sort key = (source rank, graph id, position) is restored by the caller
    return owner, np.flatnonzero(sel)[owner], pos, total


def _finish_step(nodes, acc, tel, omt, useeds, seed_e, lo, hi, active, top_k, act, touched, tlist):
    """Steps 3-6 of SPEC §3 for the numpy frontiers: teleport, clamp, threshold, top-k, abs-max
    merge into ``act`` (in place). Returns the kept (nodes, energies), how many of them newly
    crossed the threshold, and the grown touched list."""
    if tel > 0 and len(useeds):
        nodes_all = np.union1d(nodes, useeds)
        acc_all = np.zeros(len(nodes_all), dtype=np.float32)
        acc_all[np.searchsorted(nodes_all, nodes)] = acc
        at = np.searchsorted(nodes_all, useeds)
        acc_all[at] = omt * acc_all[at] + tel * seed_e
        nodes, acc = nodes_all, acc_all
    acc = np.where(acc > hi, hi, np.where(acc < lo, lo, acc)).astype(np.float32)
    keep = active(acc)
    nodes, acc = nodes[keep], acc[keep]
    if top_k > 0 and len(nodes) > top_k:
        absv = np.abs(acc)
        kth = np.partition(absv, len(absv) - top_k)[len(absv) - top_k]
        cand = np.flatnonzero(absv >= kth)
        order = np.lexsort((nodes[cand], -absv[cand].astype(np.float64)))[: int(top_k)]
        sel = np.sort(cand[order])
        nodes, acc = nodes[sel], acc[sel]
    old = act[nodes]
    was = touched[nodes] & active(old)
    newly = int((~was).sum())
    upd = np.abs(acc) > np.abs(old)
    act[nodes[upd]] = acc[upd]
    new_nodes = nodes[~touched[nodes]]
    touched[new_nodes] = True
    tlist = np.concatenate([tlist, new_nodes])
    return nodes, acc, newly, tlist


def spread_vectorized(indptr, indices, weights, seed_nodes, seed_energy, *, valid=None,
                      inhibitory=None, decay=0.7, threshold=0.1, lo=-1.0, hi=1.0, max_steps=5,
                      reemit=True, top_k=0, teleport=0.0, inhibit_multiplier=1.0, extra=None,
                      workspace=None):
    """Numpy frontier spread: per step one vectorised gather over the sources' edges and an
    in-order float32 scatter-add (``np.add.at``), so it agrees bit for bit with the kernels.

    Uses dense O(N) state arrays (what a straightforward numpy implementation does).
    """
    graphs = [_graph((indptr, indices, weights, valid, inhibitory)), _graph(extra)]
    n = max(len(g[0]) - 1 for g in graphs)
    seed_nodes = np.asarray(seed_nodes, dtype=np.int64)
    seed_energy = np.asarray(seed_energy, dtype=np.float32)
    decay, thr, lo, hi, tel, mult = (F32(v) for v in (decay, threshold, lo, hi, teleport,
                                                      inhibit_multiplier))
    scale_pos = F32(float(decay) * (1.0 - float(tel)))
    scale_inh = F32(float(decay) * float(mult))
    omt = F32(1.0 - float(tel))
    use_inh = mult != F32(1.0)
    scanned = 0

    act = np.zeros(n, dtype=np.float32)
    touched = np.zeros(n, dtype=bool)
    useeds, first = np.unique(seed_nodes, return_index=True)
    useeds = useeds[np.argsort(first, kind="stable")]
    np.add.at(act, seed_nodes, seed_energy) if len(seed_nodes) else None
    act[useeds] = np.clip(act[useeds], lo, hi)
    touched[useeds] = True
    tlist = useeds.copy()  # touched nodes, so no step costs O(N)
    seed_e = act[useeds].copy()

    def active(x):
        return (np.abs(x) >= thr) & (x != 0)

    cur_nodes = np.sort(useeds[active(seed_e)])
    cur_e = act[cur_nodes]
    cur_ae = np.abs(cur_e)
    if reemit:  # delta re-emission (see ``spread``): persistent sums, last emitted energies
        sums = np.zeros(n, dtype=np.float32)
        in_sums = np.zeros(n, dtype=bool)
        slist = np.zeros(0, dtype=np.int64)
        emitted = np.zeros(n, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for _step in range(int(max_steps)):
            if reemit:
                a = act[tlist]
                e_now = np.where(active(a), a, np.float32(0)).astype(np.float32)
                ch = e_now != emitted[tlist]
                order = np.argsort(tlist[ch], kind="stable")
                cur_nodes = tlist[ch][order]
                e_now = e_now[ch][order]
                e_old = emitted[cur_nodes]
                emitted[cur_nodes] = e_now
                cur_e = e_now - e_old
                cur_ae = np.abs(e_now) - np.abs(e_old)
            parts = []
            for gid, g in enumerate(graphs):
                got = _gather(g, cur_nodes, cur_e)
                if got is None:
                    continue
                owner, src_rank, pos, total = got
                scanned += total
                g_indices, g_weights, g_valid, g_inhib = g[1], g[2], g[3], g[4]
                ok = np.ones(total, bool) if g_valid is None else g_valid[pos] != 0
                e = cur_e[src_rank][ok]
                ae = cur_ae[src_rank][ok]
                w = g_weights[pos][ok]
                c = (e * w) * scale_pos
                if use_inh and g_inhib is not None:
                    inh = g_inhib[pos][ok] != 0
                    c[inh] = -((ae[inh] * np.abs(w[inh])) * scale_inh)
                parts.append((src_rank[ok], np.full(int(ok.sum()), gid), pos[ok],
                              g_indices[pos][ok], c))
            if parts:
                rank = np.concatenate([p[0] for p in parts])
                gid = np.concatenate([p[1] for p in parts])
                pos = np.concatenate([p[2] for p in parts])
                tgt = np.concatenate([p[3] for p in parts])
                con = np.concatenate([p[4] for p in parts])
                order = np.lexsort((pos, gid, rank))
                tgt, con = tgt[order], con[order]
            else:
                tgt = np.zeros(0, np.int64)
                con = np.zeros(0, np.float32)
            if reemit:
                np.add.at(sums, tgt, con)          # in order: S[j] = S[j] + c
                fresh = np.unique(tgt[~in_sums[tgt]])
                in_sums[fresh] = True
                slist = np.concatenate([slist, fresh])
                nodes = np.sort(slist)
                acc = sums[nodes].copy()
            else:
                nodes, inv = np.unique(tgt, return_inverse=True)
                acc = np.zeros(len(nodes), dtype=np.float32)
                np.add.at(acc, inv, con)
            nodes, acc, newly, tlist = _finish_step(nodes, acc, tel, omt, useeds, seed_e, lo, hi, active, top_k,
                                                    act, touched, tlist)
            cur_nodes, cur_e, cur_ae = nodes, acc, np.abs(acc)
            if reemit:
                if newly == 0:
                    break
            elif len(nodes) == 0:
                break

    res = tlist[active(act[tlist])]
    e = act[res]
    order = np.lexsort((res, -np.abs(e).astype(np.float64)))
    if workspace is not None:
        workspace.edges_scanned = scanned
    return res[order].astype(np.int32), e[order].astype(np.float32)


def spread_vectorized_recompute(indptr, indices, weights, seed_nodes, seed_energy, *, valid=None,
                      inhibitory=None, decay=0.7, threshold=0.1, lo=-1.0, hi=1.0, max_steps=5,
                      reemit=True, top_k=0, teleport=0.0, inhibit_multiplier=1.0, extra=None,
                      workspace=None):
    """The numpy frontier as it was before delta re-emission (benchmark baseline only).

    With ``reemit`` every active node re-scans its edges every step and the step sums are
    recomputed from scratch: the same semantics in exact arithmetic, but float32 results may
    differ from the kernels in the last bit (without ``reemit`` it agrees bit for bit).
    ``benchmarks/spread_table.py`` times it next to :func:`spread_vectorized` and compares
    the kernel with the faster of the two.
    """
    graphs = [_graph((indptr, indices, weights, valid, inhibitory)), _graph(extra)]
    n = max(len(g[0]) - 1 for g in graphs)
    seed_nodes = np.asarray(seed_nodes, dtype=np.int64)
    seed_energy = np.asarray(seed_energy, dtype=np.float32)
    decay, thr, lo, hi, tel, mult = (F32(v) for v in (decay, threshold, lo, hi, teleport,
                                                      inhibit_multiplier))
    scale_pos = F32(float(decay) * (1.0 - float(tel)))
    scale_inh = F32(float(decay) * float(mult))
    omt = F32(1.0 - float(tel))
    use_inh = mult != F32(1.0)
    scanned = 0

    act = np.zeros(n, dtype=np.float32)
    touched = np.zeros(n, dtype=bool)
    useeds, first = np.unique(seed_nodes, return_index=True)
    useeds = useeds[np.argsort(first, kind="stable")]
    np.add.at(act, seed_nodes, seed_energy) if len(seed_nodes) else None
    act[useeds] = np.clip(act[useeds], lo, hi)
    touched[useeds] = True
    tlist = useeds.copy()  # touched nodes, so no step costs O(N)
    seed_e = act[useeds].copy()

    def active(x):
        return (np.abs(x) >= thr) & (x != 0)

    cur_nodes = np.sort(useeds[active(seed_e)])
    cur_e = act[cur_nodes]
    with np.errstate(over="ignore", invalid="ignore"):
        for _step in range(int(max_steps)):
            if reemit:
                cur_nodes = np.sort(tlist[active(act[tlist])])
                cur_e = act[cur_nodes]
            parts = []
            for gid, g in enumerate(graphs):
                got = _gather(g, cur_nodes, cur_e)
                if got is None:
                    continue
                owner, src_rank, pos, total = got
                scanned += total
                g_indices, g_weights, g_valid, g_inhib = g[1], g[2], g[3], g[4]
                ok = np.ones(total, bool) if g_valid is None else g_valid[pos] != 0
                e = cur_e[src_rank][ok]
                w = g_weights[pos][ok]
                c = (e * w) * scale_pos
                if use_inh and g_inhib is not None:
                    inh = g_inhib[pos][ok] != 0
                    c[inh] = -((np.abs(e[inh]) * np.abs(w[inh])) * scale_inh)
                parts.append((src_rank[ok], np.full(int(ok.sum()), gid), pos[ok],
                              g_indices[pos][ok], c))
            if parts:
                rank = np.concatenate([p[0] for p in parts])
                gid = np.concatenate([p[1] for p in parts])
                pos = np.concatenate([p[2] for p in parts])
                tgt = np.concatenate([p[3] for p in parts])
                con = np.concatenate([p[4] for p in parts])
                order = np.lexsort((pos, gid, rank))
                tgt, con = tgt[order], con[order]
            else:
                tgt = np.zeros(0, np.int64)
                con = np.zeros(0, np.float32)
            nodes, inv = np.unique(tgt, return_inverse=True)
            acc = np.zeros(len(nodes), dtype=np.float32)
            np.add.at(acc, inv, con)
            nodes, acc, newly, tlist = _finish_step(nodes, acc, tel, omt, useeds, seed_e, lo, hi, active, top_k,
                                                    act, touched, tlist)
            cur_nodes, cur_e = nodes, acc
            if reemit:
                if newly == 0:
                    break
            elif len(nodes) == 0:
                break

    res = tlist[active(act[tlist])]
    e = act[res]
    order = np.lexsort((res, -np.abs(e).astype(np.float64)))
    if workspace is not None:
        workspace.edges_scanned = scanned
    return res[order].astype(np.int32), e[order].astype(np.float32)


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
