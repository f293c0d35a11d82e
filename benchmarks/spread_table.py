"""Side-by-side benchmark of the spreading kernels; prints a Markdown table and writes it to
``benchmarks/results/spread.md``.

    python benchmarks/spread_table.py            # both graph sizes (~1-2 min)
    python benchmarks/spread_table.py --quick    # 100k-node graph only
    python benchmarks/spread_table.py --baseline REV   # + kernel before/after: the kernel of git
                                                 # revision REV, built into a temporary dir

Compiled ``CSR.spread`` (arrays validated once, outside the timing) against the vectorised
numpy frontier implementation of the same semantics (``benchmarks/frontiers.py``, bit-for-
bit equal results) in one run, medians over many repetitions; "edges/s" counts the out-edges
scanned by the kernel per query (``CSR.spread_with_stats``) divided by the median latency.
"""
from __future__ import annotations

import argparse
import importlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from conftest import (N_SEEDS, PRESETS, SIZES, hub_seeds, powerlaw_edges,  # noqa: E402
                      random_seed_sets)

import frontiers  # noqa: E402  (the numpy baselines; not part of the package)
from causalmem import _kernels, _spread_py  # noqa: E402
from causalmem.graph import CausalGraph  # noqa: E402
from causalmem.spreading import CSR  # noqa: E402

ENERGY = np.full(N_SEEDS, 0.75, np.float32)
TARGETS = {"pedsa": 1.0, "causal": 3.0}  # ms, on the 1M/10M graph


NOTES = """## Notes

- Re-emission (causal preset) is computed by *delta re-emission* in the kernel and in the
  first numpy frontier (`benchmarks/frontiers.py`; the reference twin `_spread_py.py` is the
  literal algorithm and recomputes every step, as the second frontier does): the step sum is linear in the
  sources' energies, so the unclamped sums persist across the steps of a query and a step
  scans only the sources whose emitted energy changed, adding the change (a node newly
  active changes from 0; inhibitory edges follow the change of |e|).  A hub seed whose act
  does not change is scanned once per query instead of once per step: "edges scanned"
  counts what is actually scanned (before: 213k per causal hub query on 1M/10M, now ~50k),
  so edges/s no longer measures the same work as before.  Sums accumulated by deltas may
  differ from a fresh recomputation in the last float32 bits (golden values unchanged; the
  Hypothesis tests compare kernel and literal twin within a float32 rounding bound).
  The kernel also caches the clamped key of every sum entry and refreshes only the entries
  changed in a step; the top-k comes from that cache.
- The kernel and the numpy frontier return bit-identical results (float32, same summation
  order); the numpy baseline is a strong one (one vectorised gather + in-order `np.add.at`
  scatter per step, no O(N) work per step), so the ratios are conservative.  With
  re-emission two numpy frontiers are timed side by side (delta re-emission, as the kernel;
  recompute, as before it) and the kernel is compared with the faster one: delta
  re-emission does not make the numpy frontier faster (its per-step cost is dominated by
  whole-array passes, not by the edges), so a ratio against it alone would flatter the
  kernel.
- Per edge the compiled kernel is bound by one random access into per-node state (8-byte
  slots, 8 MB at 1M nodes): on a cache-resident 2k-node graph it scans ~2.5 ns/edge, on the
  1M-node graph 10-35 ns/edge, on a VM shared with other jobs (see load average).  Small
  queries (PEDSA, random seeds, ~2k edges) also pay ~9 µs of Python validation per call.
- One edge-contribution body (`_emit`): the flags (fresh step sum or delta re-emission,
  validity flags present, inhibitory scaling on) are fused-type tags, so Cython emits one
  specialisation per combination with the dead tests removed; the per-step loop over the
  sources (`_propagate`) is specialised the same way for the base graph, so the edge loop is
  inlined into it; the overlay dispatches per source.  Parameters and workspace travel as
  structs (`Params`, `Work`, `Acc`).  The kernel clips every row to the edge arrays and
  skips targets outside the node space (memory safety whatever the arrays hold): one
  compare per edge, within noise in the before/after table.
- Tried, kept: stamped per-node slots (no per-call reset), step sums in a dense first-touch
  array (sequential clamp pass), split scatter/act slots, histogram + nth_element top-k on
  the boundary bucket only, radix sorts of packed (node, value) keys, 3-stage software
  prefetch across sources, parameter-validation cache.  Tried, removed: sort-based
  accumulation (collect (target, contribution) pairs, radix by target, reduce; ~120 lines,
  off by default) - slower than the scatter at every size measured (the "sort path forced"
  column of the before/after table times it in the baseline kernel).
  Tried, dropped: branch-free first-touch, larger prefetch distance, introsort for small key
  sets (all within noise); branch-free clamp pass (9% slower); rows of `CSR.from_coo`
  sorted by destination for locality (1-2% on 1M/10M, within noise: not worth changing the
  documented (src, input position) order); a full sequential key refresh when most of the
  sums changed (no gain).
- Not tried: relabelling nodes by in-degree for cache locality (it changes nothing in the
  results but needs id translation at the API boundary and for the overlay).
"""


def timed(fn, reps):
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def bench_graph(size, compiled_reps, numpy_reps):
    n, e = SIZES[size]
    src, dst, val, inh = powerlaw_edges(n, e)
    build = timed(lambda: CSR.from_coo(n, src, dst, val, inhibitory=inh), 3)
    csr = CSR.from_coo(n, src, dst, val, inhibitory=inh)
    t = time.perf_counter()
    g = CausalGraph.from_arrays(n, src, dst, val, inhibitory=inh,
                                edge_keys=np.arange(e, dtype=np.int64))
    graph_build = time.perf_counter() - t
    rows = []
    for preset, params in PRESETS.items():
        for kind in ("random", "hub"):
            if kind == "hub":
                sets = [hub_seeds(csr)]
            else:
                sets = random_seed_sets(n, compiled_reps, seed=11)
            # warm up (workspace allocation, page faults)
            for s in sets[:3]:
                csr.spread(s, ENERGY, **params)
            it = iter(range(10**9))
            lat = timed(lambda: csr.spread(sets[next(it) % len(sets)], ENERGY, **params),
                        compiled_reps)
            edges = [csr.spread_with_stats(s, ENERGY, **params)[2] for s in sets[:50]]
            # two numpy baselines, interleaved: the frontier with delta re-emission (bit-equal
            # to the kernel) and the frontier that recomputes every step (the one before
            # delta re-emission); the speed-up is against the faster of the two
            lat_nps = {}
            for fn in (frontiers.spread_vectorized, frontiers.spread_vectorized_recompute):
                fn(csr.indptr, csr.indices, csr.weights, sets[0], ENERGY,
                   inhibitory=csr.inhibitory, **params)
                lat_nps[fn] = []
            for rep in range(numpy_reps):
                s = sets[rep % len(sets)]
                for fn in lat_nps:
                    t = time.perf_counter()
                    fn(csr.indptr, csr.indices, csr.weights, s, ENERGY,
                       inhibitory=csr.inhibitory, **params)
                    lat_nps[fn].append(time.perf_counter() - t)
            np_delta = statistics.median(lat_nps[frontiers.spread_vectorized])
            np_recompute = statistics.median(lat_nps[frontiers.spread_vectorized_recompute])
            # same answer (bit for bit) on one seed set
            a = csr.spread(sets[0], ENERGY, **params)
            b = frontiers.spread_vectorized(csr.indptr, csr.indices, csr.weights, sets[0],
                                             ENERGY, inhibitory=csr.inhibitory, **params)
            same = np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
            med = statistics.median(lat)
            med_np = min(np_delta, np_recompute)
            rows.append(dict(size=size, preset=preset, kind=kind, med_ms=med * 1e3,
                             p95_ms=float(np.percentile(lat, 95)) * 1e3,
                             numpy_ms=med_np * 1e3, ratio=med_np / med,
                             np_delta_ms=np_delta * 1e3, np_recompute_ms=np_recompute * 1e3,
                             edges=float(np.mean(edges)), eps=float(np.mean(edges)) / med,
                             results=len(a[0]), same=same))
    return dict(size=size, n=n, e=e, build_s=statistics.median(build), graph_build_s=graph_build,
                csr_bytes_per_edge=csr.nbytes / e, graph_bytes_per_edge=g.nbytes / e, rows=rows)


def bench_small():
    n, e = 2_000, 20_000
    src, dst, val, inh = powerlaw_edges(n, e, seed=7)
    csr = CSR.from_coo(n, src, dst, val, inhibitory=inh)
    sets = random_seed_sets(n, 200, seed=3)
    out = {}
    for preset, params in PRESETS.items():
        it = iter(range(10**9))
        comp = statistics.median(timed(lambda: csr.spread(sets[next(it) % 200], ENERGY,
                                                          **params), 200))
        it2 = iter(range(10**9))
        ref = statistics.median(timed(lambda: _spread_py.spread(
            csr.indptr, csr.indices, csr.weights, sets[next(it2) % 200], ENERGY,
            inhibitory=csr.inhibitory, **params), 5))
        out[preset] = (comp * 1e3, ref * 1e3, ref / comp)
    return out


# ---------------------------------------------------------------------------------------------
# kernel before/after in one run: the kernel of another git revision, built aside
# ---------------------------------------------------------------------------------------------

_BASELINE_SETUP = """
import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
ext = Extension("_spread_base", ["_spread_base.pyx"], include_dirs=[np.get_include()],
                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")], language="c++",
                extra_compile_args=["-O3", "-ffp-contract=off", "-std=c++11"])
setup(ext_modules=cythonize([ext], language_level=3, quiet=True, compiler_directives={
    "boundscheck": False, "wraparound": False, "cdivision": True, "initializedcheck": False,
    "nonecheck": False}))
"""


def build_baseline(rev: str, where: Path):
    """Compile ``causalmem/_spread.pyx`` of git revision ``rev`` as module ``_spread_base`` in
    ``where`` (the flags of setup.py) and import it.  Nothing is written into the repository."""
    pyx = subprocess.check_output(["git", "-C", str(HERE.parent), "show",
                                   f"{rev}:causalmem/_spread.pyx"])
    (where / "_spread_base.pyx").write_bytes(pyx)
    (where / "setup_base.py").write_text(_BASELINE_SETUP)
    subprocess.run([sys.executable, "setup_base.py", "build_ext", "--inplace", "-q"], cwd=where,
                   check=True, capture_output=True)
    sys.path.insert(0, str(where))
    return importlib.import_module("_spread_base")


def bench_before_after(base, rev, sizes, reps):
    """Median kernel latency, baseline vs current, on the same graph, seeds, parameters and
    workspace size (the ``spread_view`` call: no Python validation).  The calls rotate
    through the implementations (each goes first, second, ... equally often), so none
    profits more than another from what an earlier call left in the caches."""
    from causalmem.spreading import _param_tuple

    rows = []
    for size in sizes:
        n, e = SIZES[size]
        src, dst, val, inh = powerlaw_edges(n, e)
        csr = CSR.from_coo(n, src, dst, val, inhibitory=inh)
        arrays = (csr.indptr, csr.indices, csr.weights, csr.valid, csr.inhibitory)
        # every implementation has its own workspace (per-node state), so none finds another's
        # state in the caches
        views = {"before": (base, base.GraphView(*arrays), base.SpreadWorkspace(n)),
                 "after": (_kernels.compiled, _kernels.compiled.GraphView(*arrays),
                           _kernels.compiled.SpreadWorkspace(n)),
                 "before, sort path forced": (base, base.GraphView(*arrays),
                                              base.SpreadWorkspace(n)),
                 # the current kernel once more, on its own view and workspace: how far two
                 # runs of the same code drift apart here (the noise floor of the comparison)
                 "after, again": (_kernels.compiled, _kernels.compiled.GraphView(*arrays),
                                  _kernels.compiled.SpreadWorkspace(n))}

        def call(name, seeds, p):
            mod, gv, ws = views[name]
            if name != "before, sort path forced":
                return mod.spread_view(gv, None, seeds, ENERGY, *p, ws)
            old = base.set_strategy(0, 0)
            try:
                return mod.spread_view(gv, None, seeds, ENERGY, *p, ws)
            finally:
                base.set_strategy(*old)

        names = ["before", "after", "after, again"]
        if hasattr(base, "set_strategy"):
            names.append("before, sort path forced")
        for preset, params in PRESETS.items():
            p = _param_tuple(params)
            for kind in ("random", "hub"):
                sets = [hub_seeds(csr)] if kind == "hub" else random_seed_sets(n, reps, seed=11)
                for name in names:                                   # warm up
                    for s in sets[:3]:
                        call(name, s, p)
                lat = {k: [] for k in names}
                same = True
                for rep in range(reps):
                    s = sets[rep % len(sets)]
                    r = rep % len(names)
                    out = {}
                    for name in names[r:] + names[:r]:
                        t = time.perf_counter()
                        out[name] = call(name, s, p)
                        lat[name].append(time.perf_counter() - t)
                    for name in names[1:]:
                        same = same and np.array_equal(out["before"][0], out[name][0]) and \
                            np.array_equal(out["before"][1].view(np.uint32), out[name][1].view(np.uint32))
                med = {k: statistics.median(v) for k, v in lat.items()}
                # noise band: the after/before ratio of the medians in 5 interleaved subsets
                blocks = [statistics.median(lat["after"][i::5]) / statistics.median(lat["before"][i::5])
                          for i in range(5)]
                rows.append(dict(size=size, preset=preset, kind=kind, before=med["before"] * 1e3,
                                 after=med["after"] * 1e3, ratio=med["after"] / med["before"],
                                 aa=med["after, again"] / med["after"],
                                 band=(min(blocks), max(blocks)), same=same,
                                 sort=med.get("before, sort path forced", float("nan")) * 1e3))
    return rows


def render_before_after(rev, rows, reps, elapsed):
    lines = ["## Kernel before/after (one run)", "",
             f"`python benchmarks/spread_table.py --baseline {rev}`: the kernel of `{rev}` "
             "compiled with the flags of setup.py into a temporary directory as `_spread_base`, "
             "timed call by call against the current kernel in the same process (the calls "
             f"rotate through the implementations, {reps} calls each, same graphs, seeds and "
             "parameters; the `spread_view` call, i.e. kernel only, no Python validation). "
             "Ratio < 1: the current kernel is faster. Band = the after/before ratio of the "
             "medians of 5 interleaved subsets of the calls. A/A = the current kernel timed a "
             "second time in the same rotation on its own view and workspace, over the first: "
             "how far identical code drifts apart on this machine (the noise floor). The last "
             "column times the baseline's sort-based accumulation forced on "
             "(`set_strategy(0, 0)`), in the same rotation; bit-identical compares all columns. "
             f"Took {elapsed:.0f} s.", "",
             "| graph | preset | seeds | before median ms | after median ms | after/before | "
             "band | A/A | bit-identical | before, sort path forced (ms) |",
             "|---|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        sort = "" if r["sort"] != r["sort"] else f"{r['sort']:.3f}"
        lines.append(f"| {r['size']} | {r['preset']} | {r['kind']} | {r['before']:.3f} | "
                     f"{r['after']:.3f} | {r['ratio']:.3f} | {r['band'][0]:.2f}–{r['band'][1]:.2f} | "
                     f"{r['aa']:.3f} | {'yes' if r['same'] else '**no**'} | {sort} |")
    return "\n".join(lines)


def verdict(ok):
    return "met" if ok else "**not met**"


def render(graphs, small, elapsed, load):
    lines = []
    lines.append("# Spreading kernel benchmark")
    lines.append("")
    lines.append(f"`python benchmarks/spread_table.py` — {platform.processor() or platform.machine()}, "
                 f"{os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}, "
                 f"compiled extension: {_kernels.HAVE_EXTENSION}. Load average at start/end: "
                 f"{load[0]:.2f} / {load[1]:.2f} (other jobs shared the machine). Total run "
                 f"{elapsed:.0f} s.")
    lines.append("")
    lines.append("Synthetic power-law graphs (seeded; out- and in-degree heavy-tailed, 5% "
                 "inhibitory edges), 10 seeds at energy 0.75: *random* = uniformly drawn nodes "
                 "(new draw every repetition), *hub* = the 10 highest out-degree nodes. Presets: "
                 "PEDSA = decay 0.6, threshold 0.01, ±2, 3 steps, no re-emission, top_k 100, "
                 "teleport 0.15, inhibit ×2; causal = decay 0.7, threshold 0.1, ±1, 5 steps, "
                 "re-emission, top_k 1000. Latency = median wall time of the public "
                 "`CSR.spread` call (seed + parameter validation included); numpy = vectorised "
                 "frontier implementation of the same semantics: *delta* = with delta "
                 "re-emission like the kernel (bit-identical results), *recompute* = every "
                 "active node re-emits every step (the frontier before delta re-emission; "
                 "results equal up to the last float32 bit); the speed-up is against the "
                 "faster of the two.")
    lines.append("")
    lines.append("| graph | preset | seeds | compiled median ms | p95 ms | numpy median ms "
                 "(delta / recompute) | speed-up vs faster numpy | edges scanned / query | "
                 "edges/s | results |")
    lines.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for gr in graphs:
        for r in gr["rows"]:
            lines.append(f"| {gr['size']} nodes / {gr['e'] // 1_000_000}M edges | {r['preset']} | "
                         f"{r['kind']} | {r['med_ms']:.3f} | {r['p95_ms']:.3f} | "
                         f"{r['np_delta_ms']:.2f} / {r['np_recompute_ms']:.2f} | "
                         f"{r['ratio']:.1f}× | {r['edges']:,.0f} | "
                         f"{r['eps'] / 1e6:.0f} M | {r['results']} |")
    lines.append("")
    lines.append("| graph | CSR.from_coo build (median of 3) | CausalGraph.from_arrays build | "
                 "CSR bytes/edge | CausalGraph bytes/edge (fwd+rev+maps) |")
    lines.append("|---|---:|---:|---:|---:|")
    for gr in graphs:
        lines.append(f"| {gr['size']} / {gr['e'] // 1_000_000}M | {gr['build_s']:.2f} s | "
                     f"{gr['graph_build_s']:.2f} s | {gr['csr_bytes_per_edge']:.1f} | "
                     f"{gr['graph_bytes_per_edge']:.1f} |")
    lines.append("")
    lines.append("Compiled vs the plain-Python reference twin (2k nodes / 20k edges, random seeds):")
    lines.append("")
    lines.append("| preset | compiled ms | reference ms | speed-up |")
    lines.append("|---|---:|---:|---:|")
    for preset, (c, r, ratio) in small.items():
        lines.append(f"| {preset} | {c:.3f} | {r:.1f} | {ratio:.0f}× |")
    big = [gr for gr in graphs if gr["size"] == "1M"]
    if big:
        gr = big[0]
        lines.append("")
        lines.append("Targets (1M nodes / 10M edges):")
        lines.append("")
        lines.append("| target | measured | verdict |")
        lines.append("|---|---|---|")
        for preset, limit in TARGETS.items():
            rs = [r for r in gr["rows"] if r["preset"] == preset]
            worst = max(r["med_ms"] for r in rs)
            lines.append(f"| {preset} ≤ {limit:g} ms median per query | "
                         + ", ".join(f"{r['kind']} {r['med_ms']:.2f} ms" for r in rs)
                         + f" | {verdict(worst <= limit)} |")
            ratio = min(r["ratio"] for r in rs)
            lines.append(f"| {preset} ≥ 30× numpy frontier | "
                         + ", ".join(f"{r['kind']} {r['ratio']:.0f}×" for r in rs)
                         + f" | {verdict(ratio >= 30)} |")
        hubs = [r for r in gr["rows"] if r["kind"] == "hub"]
        lines.append("| ≥ 300M touched edges/s on hub seeds | "
                     + ", ".join(f"{r['preset']} {r['eps'] / 1e6:.0f} M/s" for r in hubs)
                     + f" | {verdict(min(r['eps'] for r in hubs) >= 300e6)} |")
        lines.append(f"| CSR build from 10M edge arrays ≤ 2 s | {gr['build_s']:.2f} s | "
                     f"{verdict(gr['build_s'] <= 2.0)} |")
    lines.append("")
    lines.append(NOTES)
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="100k-node graph only")
    ap.add_argument("--out", default=str(HERE / "results" / "spread.md"))
    ap.add_argument("--baseline", metavar="REV",
                    help="also time the kernel of git revision REV against the current one")
    ap.add_argument("--baseline-only", action="store_true",
                    help="with --baseline: only the before/after table (printed, not written)")
    ap.add_argument("--baseline-reps", type=int, default=400)
    args = ap.parse_args(argv)
    before_after = None
    if args.baseline:
        with tempfile.TemporaryDirectory(prefix="causalmem-baseline-") as tmp:
            t0 = time.perf_counter()
            base = build_baseline(args.baseline, Path(tmp))
            t1 = time.perf_counter()
            sizes = ["100k"] if args.quick else ["100k", "1M"]
            rows = bench_before_after(base, args.baseline, sizes, args.baseline_reps)
            before_after = render_before_after(args.baseline, rows, args.baseline_reps,
                                               time.perf_counter() - t1)
            print(f"(baseline build {t1 - t0:.0f} s)", file=sys.stderr)
        print(before_after)
        if args.baseline_only:
            return
    if not _kernels.HAVE_EXTENSION:
        print("warning: compiled extension not loaded; timing the Python fallback",
              file=sys.stderr)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    graphs = [bench_graph("100k", 300, 20)]
    if not args.quick:
        graphs.append(bench_graph("1M", 300, 20))
    small = bench_small()
    text = render(graphs, small, time.perf_counter() - t0, (load0, os.getloadavg()[0]))
    if before_after is not None:
        text += "\n" + before_after + "\n"
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
