"""Shared fixtures of the benchmark suites: seeded synthetic power-law graphs."""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # idle BLAS threads steal a core

import numpy as np
import pytest

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
