"""pytest-benchmark suite of the spreading kernels.

Run: ``pytest benchmarks/bench_spread.py --benchmark-only`` (add ``--benchmark-autosave`` /
``--benchmark-compare`` to track regressions).  ``python benchmarks/spread_table.py`` prints the
side-by-side table with ratios and targets.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import frontiers
from causalmem import _spread_py
from causalmem.graph import CausalGraph
from causalmem.spreading import CSR

from conftest import N_SEEDS, PRESETS, graph, hub_seeds, peer_ratio, random_seed_sets

ENERGY = np.full(N_SEEDS, 0.75, np.float32)


def _seed_cycle(csr, kind):
    sets = [hub_seeds(csr)] if kind == "hub" else random_seed_sets(csr.n_nodes, 64)
    return itertools.cycle(sets)


@pytest.mark.parametrize("kind", ["random", "hub"])
@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("size", ["100k", "1M"])
def test_spread_compiled(benchmark, size, preset, kind):
    csr, _ = graph(size)
    seeds = _seed_cycle(csr, kind)
    params = PRESETS[preset]
    benchmark.group = f"spread {size} {preset} {kind}"
    benchmark.extra_info["impl"] = "compiled"
    nodes, _ = benchmark(lambda: csr.spread(next(seeds), ENERGY, **params))
    assert len(nodes) >= 1


@pytest.mark.parametrize("kind", ["random", "hub"])
@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("size", ["100k", "1M"])
def test_spread_numpy_frontier(benchmark, size, preset, kind):
    csr, _ = graph(size)
    seeds = _seed_cycle(csr, kind)
    params = PRESETS[preset]
    benchmark.group = f"spread {size} {preset} {kind}"
    benchmark.extra_info["impl"] = "numpy frontier"

    def run():
        return frontiers.spread_vectorized(csr.indptr, csr.indices, csr.weights, next(seeds),
                                            ENERGY, inhibitory=csr.inhibitory, **params)

    benchmark.pedantic(run, rounds=10, iterations=1, warmup_rounds=1)


@pytest.mark.parametrize("impl", ["compiled", "reference"])
def test_spread_small_graph_vs_reference(benchmark, impl):
    from conftest import powerlaw_edges

    n, e = 2_000, 20_000
    src, dst, val, inh = powerlaw_edges(n, e, seed=7)
    csr = CSR.from_coo(n, src, dst, val, inhibitory=inh)
    seeds = random_seed_sets(n, 16)
    it = itertools.cycle(seeds)
    params = PRESETS["causal"]
    benchmark.group = "spread 2k/20k causal: compiled vs reference twin"
    if impl == "compiled":
        benchmark(lambda: csr.spread(next(it), ENERGY, **params))
    else:
        benchmark.pedantic(lambda: _spread_py.spread(csr.indptr, csr.indices, csr.weights,
                                                     next(it), ENERGY,
                                                     inhibitory=csr.inhibitory, **params),
                           rounds=3, iterations=1)


def test_csr_build_from_10M_edges(benchmark):
    _, (src, dst, val, inh) = graph("1M")
    benchmark.group = "build"
    csr = benchmark.pedantic(lambda: CSR.from_coo(1_000_000, src, dst, val, inhibitory=inh),
                             rounds=3, iterations=1)
    assert csr.n_edges == 10_000_000


def test_causal_graph_build_and_bytes_per_edge(benchmark):
    _, (src, dst, val, inh) = graph("1M")
    keys = np.arange(len(src), dtype=np.int64)
    benchmark.group = "build"
    g = benchmark.pedantic(lambda: CausalGraph.from_arrays(1_000_000, src, dst, val,
                                                           inhibitory=inh, edge_keys=keys),
                           rounds=1, iterations=1)
    benchmark.extra_info["bytes_per_edge"] = g.nbytes / g.n_edges


# -- regression gate: the compiled kernel against the numpy frontier, same process -------------

@pytest.mark.gate
@pytest.mark.parametrize(("preset", "kind"), [("causal", "random"), ("causal", "hub"), ("pedsa", "hub")])
def test_gate_kernel_vs_numpy_frontier(benchmark, preset, kind):
    """8 queries a round (the hub set 8 times, or 8 random seed sets) on the 100k-node graph."""
    csr, _ = graph("100k")
    params = PRESETS[preset]
    sets = [hub_seeds(csr)] * 8 if kind == "hub" else random_seed_sets(csr.n_nodes, 8)

    def ours():
        for s in sets:
            csr.spread(s, ENERGY, **params)

    def peer():
        for s in sets:
            frontiers.spread_vectorized(csr.indptr, csr.indices, csr.weights, s, ENERGY,
                                        inhibitory=csr.inhibitory, **params)

    benchmark.group = f"gate: spread 100k {preset} {kind}"
    peer_ratio(benchmark, ours, peer, peer_name="numpy frontier", rounds=15)
