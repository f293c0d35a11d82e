"""Shared fixtures of the benchmark suites: seeded synthetic power-law graphs, the collection of
``bench_*.py`` files and the peer-ratio helper of the regression gate (``benchmarks/gate.py``)."""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # idle BLAS threads steal a core

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # suites import their sibling helpers

# -- collection: the suites are named bench_*.py (pytest's default only collects test_*.py) --------


def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".py" and file_path.name.startswith("bench_"):
        if parent.session.isinitpath(file_path):  # named on the command line: pytest collects it
            return None
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "gate: a peer-ratio benchmark read by benchmarks/gate.py (kept quick)")


# -- the regression gate's figure: a ratio against a peer timed in the same process ------------


def _gate_clock():
    """CPU time of this process by default: time spent waiting for a core (2 cores shared by many
    jobs) is not counted, so the ratio no longer depends on how often each side was preempted.
    ``CAUSALMEM_GATE_CLOCK=wall`` measures wall-clock time instead."""
    if os.environ.get("CAUSALMEM_GATE_CLOCK", "cpu") == "wall":
        return time.perf_counter, "wall clock"
    return time.process_time, "process CPU time"


def peer_ratio(benchmark, ours, peer, *, peer_name: str, rounds: int = 15, warmup: int = 2) -> float | None:
    """Time ``ours`` and ``peer`` (the same work done by a reference implementation) alternately
    in the same process, and record ``peer median / ours median`` in
    ``benchmark.extra_info["ratio"]`` (higher = ours faster relative to the peer).

    ``ours`` runs under pytest-benchmark (its table shows ours' wall-clock statistics); the peer
    runs as pytest-benchmark's untimed ``setup`` of every round, so the two alternate round by
    round and a load change on the machine hits both.  The ratio uses the process's CPU time of
    each call (see ``_gate_clock``).  Absolute medians on a shared machine move by about ±30%
    from run to run; their ratio moves much less, which is what ``benchmarks/gate.py`` compares
    with the committed baseline.  Each side should do a few milliseconds of work or more per call.
    """
    clock, clock_name = _gate_clock()
    ours_times: list[float] = []
    peer_times: list[float] = []

    def timed(fn, acc):
        def run():
            t = clock()
            fn()
            acc.append(clock() - t)
        return run

    for _ in range(warmup):
        ours()
        peer()
    benchmark.extra_info.update(peer=peer_name, clock=clock_name)
    benchmark.pedantic(timed(ours, ours_times), setup=timed(peer, peer_times), rounds=rounds,
                       iterations=1)
    if benchmark.stats is None or not peer_times:  # --benchmark-disable: nothing was timed
        return None
    ours_median = statistics.median(ours_times)
    peer_median = statistics.median(peer_times)
    ratio = peer_median / ours_median
    benchmark.extra_info.update(ratio=ratio, peer_median_s=peer_median, ours_median_s=ours_median)
    return ratio

SIZES = {"100k": (100_000, 1_000_000), "1M": (1_000_000, 10_000_000)}
N_SEEDS = 10
PEDSA_BENCH = dict(decay=0.6, threshold=0.01, lo=-2.0, hi=2.0, max_steps=3, reemit=False,
                   top_k=100, teleport=0.15, inhibit_multiplier=2.0)
CAUSAL_BENCH = dict(decay=0.7, threshold=0.1, lo=-1.0, hi=1.0, max_steps=5, reemit=True,
                    top_k=1000, teleport=0.0, inhibit_multiplier=1.0)
PRESETS = {"pedsa": PEDSA_BENCH, "causal": CAUSAL_BENCH}


def powerlaw_edges(n_nodes: int, n_edges: int, seed: int = 0):
    """Seeded synthetic power-law graph as COO arrays.

    Sources and targets are drawn independently as ``N·U²`` (so P(degree > d) ∝ d⁻², out- and
    in-degree both heavy-tailed) under two random relabelings.  Values are confidence
    U(0.05, 1) × relation coefficient; 5% of the edges are ``prevented`` (× −0.3, inhibitory).
    """
    rng = np.random.default_rng(seed)
    perm_s = rng.permutation(n_nodes).astype(np.int32)
    perm_d = rng.permutation(n_nodes).astype(np.int32)
    src = perm_s[(n_nodes * rng.random(n_edges) ** 2).astype(np.int64)]
    dst = perm_d[(n_nodes * rng.random(n_edges) ** 2).astype(np.int64)]
    values = rng.uniform(0.05, 1.0, n_edges).astype(np.float32)
    inhibitory = rng.random(n_edges) < 0.05
    values[inhibitory] *= np.float32(-0.3)
    return src, dst, values, inhibitory.astype(np.uint8)


def hub_seeds(csr, k: int = N_SEEDS) -> np.ndarray:
    deg = np.diff(csr.indptr)
    return np.argsort(-deg, kind="stable")[:k].astype(np.int32)


def random_seed_sets(n_nodes: int, reps: int, k: int = N_SEEDS, seed: int = 1):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, n_nodes, k).astype(np.int32) for _ in range(reps)]


_CACHE: dict = {}


def graph(size: str):
    """(csr, coo arrays) for a size key, built once per process."""
    if size not in _CACHE:
        from causalmem.spreading import CSR

        n, e = SIZES[size]
        src, dst, val, inh = powerlaw_edges(n, e)
        _CACHE[size] = (CSR.from_coo(n, src, dst, val, inhibitory=inh), (src, dst, val, inh))
    return _CACHE[size]


@pytest.fixture(scope="session", params=list(SIZES))
def sized_graph(request):
    csr, coo = graph(request.param)
    return request.param, csr, coo
