"""Numpy "frontier" implementations of SPEC §3: the baselines of the kernel benchmarks.

Not part of the package (``causalmem`` never imports this file).  Both are vectorised: per
step one gather over the sources' edges and an in-order float32 scatter-add (``np.add.at``),
with dense O(N) state arrays, which is what a straightforward numpy implementation does.

- :func:`spread_vectorized` computes re-emission by deltas, as the compiled kernel does, and
  agrees with it bit for bit;
- :func:`spread_vectorized_recompute` re-emits every active node every step (the literal
  algorithm, as the reference twin ``causalmem._spread_py`` does).

``benchmarks/spread_table.py`` and ``benchmarks/bench_spread.py`` time both against the kernel.
"""
from __future__ import annotations

import numpy as np

F32 = np.float32


def _graph(arrays):
    """(indptr, indices, weights, valid, inhibitory) with empty flag arrays as None."""
    if arrays is None:
        return (np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32), None, None)
    indptr, indices, weights, valid, inhib = arrays
    if valid is not None and len(valid) == 0:
        valid = None
    if inhib is not None and len(inhib) == 0:
        inhib = None
    return indptr, indices, weights, valid, inhib


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
    """The numpy frontier without delta re-emission: with ``reemit`` every active node
    re-scans its edges every step and the step sums are recomputed from scratch (the literal
    algorithm).  The same semantics in exact arithmetic; float32 results may differ from the
    kernel's delta re-emission in the last bits (without ``reemit`` they agree bit for bit).
    ``benchmarks/spread_table.py`` times it next to :func:`spread_vectorized` and compares the
    kernel with the faster of the two.
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
