"""Bounded kernel fuzz test: thousands of random malformed and valid array
combinations through ``CSR``, ``spread``, ``CSR.from_coo`` and ``CausalGraph``, plus arrays
scribbled on after validation (forced writable) and kernel-typed garbage handed straight to the
compiled module, run in a child process so that a crash (SIGSEGV, abort) fails the test instead
of killing pytest.

The child asserts that every rejection is a ``ValueError``/``TypeError`` (``KeyError`` only
where the API documents it: unknown node ids and edge keys of a ``CausalGraph``), that every
accepted query returns in-range nodes and finite energies within the clamp, and it exits 0.

Run by hand: ``python tests/test_kernel_fuzz.py CASES SEED`` (prints a JSON summary).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

import numpy as np

CASES = 5000
SEED = 20261201

DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64, np.float16,
          np.float32, np.float64, np.bool_, np.complex64, object, "<U2", ">i4", ">f8"]
RELATIONS = ["caused", "fact", "meta", "enabled", "temporal", "co_occurrence", "prevented",
             "no_effect", "CAUSED", "causes", "", 3, None]


# ---------------------------------------------------------------------------------------------
# random inputs
# ---------------------------------------------------------------------------------------------

def weird_value(rng, n):
    """One scalar likely to be interesting for an index or a weight."""
    pick = rng.integers(0, 12)
    if pick == 0:
        return int(rng.choice([-1, n, n + 1, 2**31 - 1, -2**31, 2**31, 2**40, 2**63 - 1]))
    if pick == 1:
        return float(rng.choice([np.nan, np.inf, -np.inf, 1e300, -1e300, 3.5e38, -0.0, 1e-45]))
    if pick == 2:
        return float(rng.uniform(-2, 2))
    return int(rng.integers(-1, max(n, 1) + 1))


def mangle(rng, arr, n, p=0.15):
    """With probability ``p``, turn a good array into a bad or oddly laid-out one."""
    if rng.random() >= p:
        return arr
    if arr is None:
        return [1, 0]
    pick = rng.integers(6, 16)
    a = np.array(arr)
    if pick == 6 and len(a):                              # one weird value
        a = a.astype(object) if rng.random() < 0.2 else a.astype(np.float64)
        a[rng.integers(0, len(a))] = weird_value(rng, n)
        return a
    if pick == 7:                                         # another dtype
        dt = DTYPES[rng.integers(0, len(DTYPES))]
        try:
            with np.errstate(all="ignore"):
                return a.astype(dt)
        except (ValueError, TypeError, OverflowError):
            return a
    if pick == 8:                                         # wrong length
        return a[:-1] if len(a) and rng.random() < 0.5 else np.append(a, a[:1])
    if pick == 9:                                         # 2-D
        return a.reshape(1, -1)
    if pick == 10:                                        # non-contiguous view
        b = np.repeat(a, 2)
        return b[::2]
    if pick == 11:                                        # read-only
        a.setflags(write=False)
        return a
    if pick == 12:                                        # a plain list
        return a.tolist()
    if pick == 13:                                        # a scalar or a string
        return rng.choice([0, "0", 1.5])
    if pick == 14 and len(a):                             # shuffled (breaks monotone indptr)
        rng.shuffle(a)
        return a
    return np.zeros(0, a.dtype)                           # empty


def good_graph(rng):
    n = int(rng.integers(0, 40))
    e = int(rng.integers(0, 100)) if n else 0
    src = np.sort(rng.integers(0, max(n, 1), e))
    indptr = np.zeros(n + 1, np.int64)
    if n:
        np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    indices = rng.integers(0, max(n, 1), e).astype(np.int32)
    weights = rng.uniform(-1.5, 1.5, e).astype(np.float32)
    valid = (rng.random(e) < 0.8).astype(np.uint8) if rng.random() < 0.5 else None
    inhib = (rng.random(e) < 0.2).astype(np.uint8) if rng.random() < 0.5 else None
    return n, indptr, indices, weights, valid, inhib


PARAM_VALUES = {  # name -> (good values, bad values)
    "decay": ([0.0, 0.6, 0.7, 1.5], [-0.1, np.nan, "fast"]),
    "threshold": ([0.0, 0.01, 0.1, 0.5], [-1.0, np.inf]),
    "lo": ([-1.0, -2.0, 0.0, -3e38], [np.nan]),
    "hi": ([1.0, 2.0, 0.1, 3e38], [1e300, -np.inf]),
    "max_steps": ([0, 1, 2, 5, 30], [-1, 2.5, 2**40]),
    "reemit": ([True, False, 0, 1], ["yes", 2]),
    "top_k": ([0, 1, 2, 5, 100], [-3, 1.5]),
    "teleport": ([0.0, 0.15, 1.0], [1.5, -0.1]),
    "inhibit_multiplier": ([1.0, 2.0, 0.0, 0.5], [-1.0, np.nan]),
    "bogus": ([], [1]),
}


def rand_params(rng):
    p = {}
    for name, (good, bad) in PARAM_VALUES.items():
        if rng.random() < (0.01 if not good else 0.4):
            pool = bad if (not good or rng.random() < 0.03) else good
            v = pool[rng.integers(0, len(pool))]
            p[name] = v.item() if isinstance(v, np.generic) else v
    return p


def rand_seeds(rng, n):
    k = int(rng.integers(0, 8))
    nodes = rng.integers(0, max(n, 1), k)
    energy = rng.uniform(-1.5, 1.5, k)
    return mangle(rng, nodes, n, 0.05), mangle(rng, energy, n, 0.05)


def check_result(out, n, params):
    nodes, energy = out[0], out[1]
    assert nodes.dtype == np.int32 and energy.dtype == np.float32, (nodes.dtype, energy.dtype)
    assert len(nodes) == len(energy)
    assert ((nodes >= 0) & (nodes < max(n, 1))).all(), nodes
    assert np.isfinite(energy).all(), energy
    lo, hi = float(params.get("lo", -1.0)), float(params.get("hi", 1.0))
    assert ((energy >= np.float32(lo)) & (energy <= np.float32(hi))).all(), (energy, lo, hi)
    assert len(set(nodes.tolist())) == len(nodes)


# ---------------------------------------------------------------------------------------------
# cases: each returns "accepted" or raises; the driver sorts out what is allowed
# ---------------------------------------------------------------------------------------------

def case_csr(rng):
    from causalmem.spreading import CSR
    n, indptr, indices, weights, valid, inhib = good_graph(rng)
    args = [mangle(rng, a, n) for a in (indptr, indices, weights, valid, inhib)]
    csr = CSR(args[0], args[1], args[2], valid=args[3], inhibitory=args[4],
              copy=bool(rng.random() < 0.7))
    extra = None
    if rng.random() < 0.3:
        n2, *arrs = good_graph(rng)
        extra = CSR(*arrs[:3], valid=arrs[3], inhibitory=arrs[4]) if rng.random() < 0.9 else "x"
    n_all = max(csr.n_nodes, extra.n_nodes if isinstance(extra, CSR) else 0)
    seeds, energy = rand_seeds(rng, n_all)
    params = rand_params(rng)
    check_result(csr.spread(seeds, energy, extra=extra, **params), n_all, params)


def case_spread(rng):
    from causalmem.spreading import spread
    n, indptr, indices, weights, valid, inhib = good_graph(rng)
    args = [mangle(rng, a, n) for a in (indptr, indices, weights, valid, inhib)]
    seeds, energy = rand_seeds(rng, n)
    params = rand_params(rng)
    check_result(spread(args[0], args[1], args[2], seeds, energy, valid=args[3],
                        inhibitory=args[4], **params), n, params)


def case_from_coo(rng):
    from causalmem.spreading import CSR
    n = int(rng.integers(0, 40))
    e = int(rng.integers(0, 80))
    src = mangle(rng, rng.integers(0, max(n, 1), e), n)
    dst = mangle(rng, rng.integers(0, max(n, 1), e), n)
    w = mangle(rng, rng.uniform(-1, 1, e), n)
    valid = mangle(rng, (rng.random(e) < 0.8).astype(np.uint8) if rng.random() < 0.5 else None, n)
    inhib = mangle(rng, (rng.random(e) < 0.2) if rng.random() < 0.5 else None, n)
    n_arg = n if rng.random() < 0.95 else [-1, 2.5, "3", None, 2**40][rng.integers(0, 5)]
    csr = CSR.from_coo(n_arg, src, dst, w, valid=valid, inhibitory=inhib)
    seeds, energy = rand_seeds(rng, csr.n_nodes)
    params = rand_params(rng)
    check_result(csr.spread(seeds, energy, **params), csr.n_nodes, params)


def case_copy_false_then_write(rng):
    """Arrays taken over (copy=False) cannot be written by the caller any more."""
    from causalmem.spreading import CSR
    n, indptr, indices, weights, valid, inhib = good_graph(rng)
    csr = CSR(indptr, indices, weights, valid=valid, inhibitory=inhib, copy=False)
    for a in (indptr, indices, weights, valid, inhib):
        if a is None or not len(a):
            continue
        try:
            a[0] = 2_000_000_000 if a.dtype.kind in "iu" else np.nan
        except ValueError:
            pass
        else:
            raise AssertionError("a taken-over array stayed writable")
    for name in ("indptr", "indices", "weights", "valid", "inhibitory"):
        try:
            setattr(csr, name, np.zeros(3, np.int32))
        except AttributeError:
            pass
        else:
            raise AssertionError(f"csr.{name} could be reassigned")
    seeds, energy = rand_seeds(rng, n)
    params = rand_params(rng)
    check_result(csr.spread(seeds, energy, **params), n, params)


def case_graph(rng):
    from causalmem.graph import CausalGraph
    n = int(rng.integers(0, 12))
    ids = [f"n{i}" for i in range(n)]
    if n and rng.random() < 0.05:
        ids.append(ids[0])                                  # duplicate id
    edges = []
    for _ in range(int(rng.integers(0, 20))):
        s = ids[rng.integers(0, n)] if n and rng.random() < 0.99 else "nobody"
        d = ids[rng.integers(0, n)] if n and rng.random() < 0.99 else "nobody"
        rel = RELATIONS[rng.integers(0, len(RELATIONS))] if rng.random() < 0.1 else "caused"
        conf = float(rng.uniform(0, 1)) if rng.random() < 0.97 else weird_value(rng, 2)
        edge = (s, d, rel, conf)
        if rng.random() < 0.3:
            edge = edge + (weird_value(rng, 2) if rng.random() < 0.1 else 0.5,)
        if rng.random() < 0.02:
            edge = edge[:2]
        edges.append(edge)
    g = CausalGraph(ids, edges)
    for _ in range(int(rng.integers(0, 3))):
        key = int(rng.integers(-1, len(edges) + 1)) if rng.random() < 0.1 else \
            int(rng.integers(0, max(len(edges), 1)))
        g.invalidate(key, valid=bool(rng.random() < 0.3))
    if n and rng.random() < 0.3:
        g.invalidate_node(ids[rng.integers(0, n)], valid=bool(rng.random() < 0.5))
    seeds = {ids[rng.integers(0, n)] if n and rng.random() < 0.98 else "nobody":
             float(rng.uniform(-1, 1))
             for _ in range(int(rng.integers(0, 4)))}
    if rng.random() < 0.05:
        seeds = {"n0": float("nan")}
    acts = g.spread(seeds, reverse=bool(rng.random() < 0.5),
                    preset=str(rng.choice(["causal", "pedsa", "pedsa_retrieval"])))
    for a in acts:
        assert a.node_id in ids and np.isfinite(a.energy)


def case_graph_arrays(rng):
    from causalmem.graph import CausalGraph
    n = int(rng.integers(0, 40))
    e = int(rng.integers(0, 80))
    src = mangle(rng, rng.integers(0, max(n, 1), e), n)
    dst = mangle(rng, rng.integers(0, max(n, 1), e), n)
    val = mangle(rng, rng.uniform(-1, 1, e).astype(np.float32), n)
    inhib = mangle(rng, (rng.random(e) < 0.2).astype(np.uint8), n)
    keys = mangle(rng, rng.permutation(e) * 3 + 1, n) if rng.random() < 0.5 else None
    g = CausalGraph.from_arrays(n, src, dst, val, inhibitory=inhib, edge_keys=keys)
    for _ in range(int(rng.integers(0, 3))):
        k = int(rng.integers(0, max(e, 1)))
        g.invalidate(k if keys is None or rng.random() < 0.1 else 3 * k + 1)
    if g.n_nodes and rng.random() < 0.3:
        g.invalidate_node(int(rng.integers(0, g.n_nodes)))
    seeds, energy = rand_seeds(rng, g.n_nodes)
    params = rand_params(rng)
    check_result(g.forward.spread(seeds, energy, **params), g.n_nodes, params)
    check_result(g.reverse.spread(seeds, energy, **params), g.n_nodes, params)


def scribble(rng, arr, n):
    """Force ``arr`` writable (behind the CSR's back) and write garbage into it."""
    if arr is None or not len(arr):
        return
    base = arr
    while isinstance(base.base, np.ndarray):
        base = base.base
    base.flags.writeable = True          # numpy allows it on an owner array: deliberate abuse
    arr.flags.writeable = True
    for _ in range(int(rng.integers(1, 4))):
        i = int(rng.integers(0, len(arr)))
        if arr.dtype.kind in "iu":
            info = np.iinfo(arr.dtype)
            arr[i] = int(rng.choice([info.min, info.max, -1, n, n + 1, 2**31 - 1,
                                     int(rng.integers(-n - 2, n + 3))]).clip(info.min, info.max))
        else:
            arr[i] = rng.choice([np.nan, np.inf, -np.inf, 3e38, -3e38, 0.0, 1e-40])


def case_hostile_mutation(rng):
    """Arrays changed after validation by forcing them writable: wrong answers are allowed,
    a crash or an out-of-range node is not (the kernel clips rows and skips bad targets)."""
    from causalmem.spreading import CSR
    n, indptr, indices, weights, valid, inhib = good_graph(rng)
    csr = CSR(indptr, indices, weights, valid=valid, inhibitory=inhib,
              copy=bool(rng.random() < 0.5))
    if rng.random() < 0.5:
        csr.spread([0] if n else [], [1.0] if n else [])   # a kernel view exists already
    for arr in (csr.indptr, csr.indices, csr.weights, csr.valid, csr.inhibitory):
        if rng.random() < 0.5:
            scribble(rng, arr, n)
    seeds, energy = rand_seeds(rng, n)
    params = rand_params(rng)
    check_result(csr.spread(seeds, energy, **params), n, params)


def case_raw_kernel(rng):
    """Kernel-typed garbage straight into the compiled module (no CSR validation at all)."""
    from causalmem import _kernels
    n = int(rng.integers(1, 40))
    e = int(rng.integers(0, 100))
    indptr = rng.integers(-5, e + 5, n + 1).astype(np.int64)
    if rng.random() < 0.2:
        indptr[rng.integers(0, n + 1)] = rng.choice([2**62, -2**62])
    indices = rng.integers(-2**31, 2**31 - 1, e, dtype=np.int64).astype(np.int32)
    if rng.random() < 0.5:
        indices = rng.integers(-2, n + 2, e).astype(np.int32)
    weights = rng.uniform(-3, 3, e + (1 if rng.random() < 0.05 else 0)).astype(np.float32)
    valid = rng.integers(0, 256, e).astype(np.uint8) if rng.random() < 0.5 else None
    inhib = rng.integers(0, 256, e).astype(np.uint8) if rng.random() < 0.5 else None
    seeds = rng.integers(0, n, int(rng.integers(0, 6))).astype(np.int32)
    energy = rng.uniform(-1.5, 1.5, len(seeds)).astype(np.float32)
    params = {k: v for k, v in rand_params(rng).items() if k != "bogus"}
    try:
        from causalmem.spreading import _check_params
        kw = _check_params(params)
    except (ValueError, TypeError):
        kw = _check_params({})
    extra = None
    if rng.random() < 0.3:
        extra = (np.array([0, 2], np.int64), np.array([n + 7, -1], np.int32),
                 np.ones(2, np.float32), None, None)
    out = _kernels.compiled.spread(indptr, indices, weights, seeds, energy, valid=valid,
                                   inhibitory=inhib, extra=extra, **kw)
    check_result(out, n + (1 if extra is not None and n < 1 else 0), kw)


CASE_KINDS = {
    # kind -> (function, exceptions a rejection may raise)
    "csr": (case_csr, (ValueError, TypeError)),
    "spread": (case_spread, (ValueError, TypeError)),
    "from_coo": (case_from_coo, (ValueError, TypeError)),
    "copy_false_then_write": (case_copy_false_then_write, (ValueError, TypeError)),
    "graph": (case_graph, (ValueError, TypeError, KeyError)),   # KeyError: unknown ids / keys
    "graph_arrays": (case_graph_arrays, (ValueError, TypeError, KeyError)),
    "hostile_mutation": (case_hostile_mutation, (ValueError, TypeError)),
    "raw_kernel": (case_raw_kernel, (ValueError, TypeError)),
}


def fuzz(cases: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    kinds = list(CASE_KINDS)
    outcome: Counter = Counter()
    rejected_by: Counter = Counter()
    t0 = time.perf_counter()
    for i in range(cases):
        kind = kinds[i % len(kinds)]
        fn, allowed = CASE_KINDS[kind]
        try:
            with np.errstate(all="ignore"):
                fn(rng)
            outcome[f"{kind}:accepted"] += 1
        except allowed as exc:
            outcome[f"{kind}:rejected"] += 1
            rejected_by[type(exc).__name__] += 1
        except Exception:
            print(f"case {i} ({kind}) raised an exception outside the contract:", file=sys.stderr)
            traceback.print_exc()
            sys.exit(3)
    return {"cases": cases, "seed": seed, "seconds": round(time.perf_counter() - t0, 2),
            "outcomes": dict(sorted(outcome.items())), "rejected_by": dict(rejected_by)}


# ---------------------------------------------------------------------------------------------
# the test (parent side)
# ---------------------------------------------------------------------------------------------

def test_kernel_fuzz_in_a_subprocess():
    import causalmem

    root = str(Path(causalmem.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, __file__, str(CASES), str(SEED)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["cases"] == CASES
    for kind in CASE_KINDS:
        # both sides of every kind are exercised: some inputs accepted, some refused
        assert summary["outcomes"].get(f"{kind}:accepted", 0) > 0, summary
        if kind not in ("copy_false_then_write", "hostile_mutation", "raw_kernel"):
            assert summary["outcomes"].get(f"{kind}:rejected", 0) > 0, summary


if __name__ == "__main__":
    n_cases = int(sys.argv[1]) if len(sys.argv) > 1 else CASES
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else SEED
    print(json.dumps(fuzz(n_cases, seed)))
