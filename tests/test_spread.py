"""Spreading kernels: golden values (SPEC §3), edge cases, bad input, compiled vs reference."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import causalmem
from causalmem import _kernels, _spread_py
from causalmem.spreading import CSR, spread

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import frontiers  # noqa: E402  (the numpy baselines of the benchmarks, not part of the package)

IMPLS = [pytest.param(_spread_py, id="reference")]
if _kernels.compiled is not None:
    IMPLS.insert(0, pytest.param(_kernels.compiled, id="compiled"))

CAUSAL = dict(decay=0.7, threshold=0.1, lo=-1.0, hi=1.0, max_steps=5, reemit=True, top_k=1000)
PEDSA = dict(decay=0.6, threshold=0.01, lo=-2.0, hi=2.0, max_steps=2, reemit=False, top_k=100,
             inhibit_multiplier=2.0)


def test_compiled_extension_loaded():
    assert _kernels.HAVE_EXTENSION, f"compiled kernels failed to load: {_kernels._IMPORT_ERROR}"
    assert causalmem.HAVE_EXTENSION
    assert _kernels.spread is _kernels.compiled.spread


# ---------------------------------------------------------------------------------------------
# golden graphs
# ---------------------------------------------------------------------------------------------

def coo_graph(names, edges):
    """edges: (src, dst, value, inhibitory) by name -> CSR over the name order."""
    idx = {n: i for i, n in enumerate(names)}
    src = [idx[s] for s, _, _, _ in edges]
    dst = [idx[d] for _, d, _, _ in edges]
    val = [v for _, _, v, _ in edges]
    inh = [h for _, _, _, h in edges]
    fwd = CSR.from_coo(len(names), src, dst, val, inhibitory=inh)
    rev = CSR.from_coo(len(names), dst, src, val, inhibitory=inh)
    return idx, fwd, rev


GRAPH_A_NAMES = ["d1", "o1", "d2", "o2", "d3", "o3"]
GRAPH_A = [("d1", "o1", 0.9, False), ("d2", "o2", 0.85, False), ("d3", "o3", 0.95, False),
           ("d2", "o3", 0.6 * -0.3, True)]

DEVOPS_NAMES = ["deploy without tests", "production crash", "safe release", "user complaints",
                "rollback needed", "downtime", "add input validation", "sql injection",
                "security audit passed", "skip code review", "hidden bugs", "enable caching",
                "faster response", "timeout errors"]
from causalmem.cli import DEVOPS_EDGES as DEVOPS  # noqa: E402  (the DevOps graph of SPEC §3)
COEF = {"caused": 1.0, "enabled": 0.5, "prevented": -0.3}


def as_dict(names, nodes, energy):
    return {names[int(n)]: float(e) for n, e in zip(nodes, energy)}


def check(got: dict, expected: dict, tol=1e-4):
    assert set(got) == set(expected), (got, expected)
    for k, v in expected.items():
        assert got[k] == pytest.approx(v, abs=tol), (k, got[k], v)


def test_graph_a_forward_and_reverse():
    idx, fwd, rev = coo_graph(GRAPH_A_NAMES, GRAPH_A)
    nodes, energy = fwd.spread([idx["d2"]], [0.5 + 0.5 * 0.7], **CAUSAL)
    check(as_dict(GRAPH_A_NAMES, nodes, energy), {"d2": 0.85, "o2": 0.50575, "o3": -0.1071})
    assert list(nodes) == [idx["d2"], idx["o2"], idx["o3"]]
    nodes, energy = rev.spread([idx["o2"]], [0.5 + 0.5 * 0.7], **CAUSAL)
    check(as_dict(GRAPH_A_NAMES, nodes, energy), {"o2": 0.85, "d2": 0.50575})
    # the package-level function on raw arrays (CSR(...).spread(...))
    nodes, energy = causalmem.spread(fwd.indptr, fwd.indices, fwd.weights, [idx["d2"]], [0.85],
                                     inhibitory=fwd.inhibitory, **CAUSAL)
    assert nodes.dtype == np.int32 and energy.dtype == np.float32
    check(as_dict(GRAPH_A_NAMES, nodes, energy), {"d2": 0.85, "o2": 0.50575, "o3": -0.1071})
    nodes, energy = causalmem.spread(rev.indptr, rev.indices, rev.weights, [idx["o2"]], [0.85],
                                     inhibitory=rev.inhibitory, **CAUSAL)
    check(as_dict(GRAPH_A_NAMES, nodes, energy), {"o2": 0.85, "d2": 0.50575})


def devops():
    edges = [(s, d, c * COEF[r], r == "prevented") for s, d, r, c in DEVOPS]
    return coo_graph(DEVOPS_NAMES, edges)


def test_devops_forward_from_deploy_without_tests():
    idx, fwd, _ = devops()
    nodes, energy = fwd.spread([idx["deploy without tests"]], [0.75], **CAUSAL)
    got = as_dict(DEVOPS_NAMES, nodes, energy)
    check(got, {"deploy without tests": 0.75, "production crash": 0.4725,
                "user complaints": 0.2646, "safe release": -0.1339, "rollback needed": 0.1158})
    assert "downtime" not in got  # 0.0608 < threshold


def test_devops_forward_from_enable_caching():
    idx, fwd, _ = devops()
    nodes, energy = fwd.spread([idx["enable caching"]], [0.75], **CAUSAL)
    check(as_dict(DEVOPS_NAMES, nodes, energy),
          {"enable caching": 0.75, "faster response": 0.42, "timeout errors": -0.1339})


def test_devops_reverse_from_production_crash():
    idx, _, rev = devops()
    nodes, energy = rev.spread([idx["production crash"]], [0.75], **CAUSAL)
    check(as_dict(DEVOPS_NAMES, nodes, energy),
          {"production crash": 0.75, "deploy without tests": 0.4725, "hidden bugs": 0.3675,
           "skip code review": 0.2187})


@pytest.mark.parametrize("teleport, expected", [(0.0, [1.0, 0.48, 0.2304]),
                                                (0.15, [1.0, 0.408, 0.166464])])
def test_pedsa_chain(teleport, expected):
    nodes, energy = spread([0, 1, 2, 2], [1, 2], [0.8, 0.8], [0], [1.0],
                           **dict(PEDSA, teleport=teleport))
    assert list(nodes) == [0, 1, 2]
    np.testing.assert_allclose(energy, expected, atol=1e-4)


def test_pedsa_inhibitory_multiplier():
    nodes, energy = spread([0, 1, 1], [1], [0.5], [0], [1.0], inhibitory=[1], **PEDSA)
    assert list(nodes) == [0, 1]
    np.testing.assert_allclose(energy, [1.0, -0.6], atol=1e-5)
    # multiplier 1: the signed weight is used as is
    nodes, energy = spread([0, 1, 1], [1], [-0.5], [0], [1.0], inhibitory=[1],
                           **dict(PEDSA, inhibit_multiplier=1.0))
    np.testing.assert_allclose(energy, [1.0, -0.3], atol=1e-5)


@pytest.mark.parametrize("impl", IMPLS)
def test_golden_through_raw_kernels(impl):
    idx, fwd, _ = devops()
    for f in (impl.spread, frontiers.spread_vectorized, frontiers.spread_vectorized_recompute):
        nodes, energy = f(fwd.indptr, fwd.indices, fwd.weights,
                          np.array([idx["deploy without tests"]], np.int32),
                          np.array([0.75], np.float32), inhibitory=fwd.inhibitory, **CAUSAL)
        check(as_dict(DEVOPS_NAMES, nodes, energy),
              {"deploy without tests": 0.75, "production crash": 0.4725,
               "user complaints": 0.2646, "safe release": -0.1339, "rollback needed": 0.1158})


# ---------------------------------------------------------------------------------------------
# semantics and edge cases
# ---------------------------------------------------------------------------------------------

def test_defaults_match_spec_signature():
    idx, fwd, _ = devops()
    a = fwd.spread([idx["deploy without tests"]], [0.75])
    b = fwd.spread([idx["deploy without tests"]], [0.75], decay=0.7, threshold=0.1, lo=-1.0,
                   hi=1.0, max_steps=5, reemit=True, top_k=0, teleport=0.0,
                   inhibit_multiplier=1.0)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_empty_graph_and_empty_seeds():
    nodes, energy = spread([0], [], [], [], [])
    assert nodes.dtype == np.int32 and energy.dtype == np.float32
    assert len(nodes) == 0 and len(energy) == 0
    nodes, energy = spread([0, 0, 0], [], [], [], [])
    assert len(nodes) == 0
    # nodes without edges: only the seed itself
    nodes, energy = spread([0, 0, 0], [], [], [1], [0.5])
    assert list(nodes) == [1] and energy[0] == pytest.approx(0.5)


def test_duplicate_seeds_add_then_clamp():
    nodes, energy = spread([0, 0, 0], [], [], [0, 0, 1], [0.7, 0.6, 0.2])
    assert list(nodes) == [0, 1]
    assert energy[0] == pytest.approx(1.0)  # 1.3 clamped to hi
    assert energy[1] == pytest.approx(0.2)


def test_seed_below_threshold_not_reported_and_not_emitting():
    nodes, energy = spread([0, 1, 1], [1], [1.0], [0], [0.05])
    assert len(nodes) == 0


def test_self_loop_and_duplicate_edges_add_up():
    # 0 -> 1 twice (contributions of a step add), 1 -> 1 self loop
    nodes, energy = spread([0, 2, 3], [1, 1, 1], [0.5, 0.5, 0.1], [0], [1.0], max_steps=1)
    assert list(nodes) == [0, 1]
    assert energy[1] == pytest.approx(0.7)


@pytest.mark.parametrize("impl", [p for p in IMPLS if p.id == "compiled"])
def test_reemit_rescans_only_changed_sources(impl):
    """Delta re-emission (the kernel's): a source whose act did not change is not scanned
    again, yet every step still sees its contribution (same result as re-scanning it, which
    the literal twin does)."""
    # hub 0 -> 1..5 (0.5), 1 -> 6 (0.8); seed 0 keeps act 1.0 throughout
    indptr = np.array([0, 5, 6, 6, 6, 6, 6, 6], np.int64)
    indices = np.array([1, 2, 3, 4, 5, 6], np.int32)
    weights = np.array([0.5] * 5 + [0.8], np.float32)
    ws = impl.SpreadWorkspace(7)
    nodes, energy = impl.spread(indptr, indices, weights, np.array([0], np.int32),
                                np.array([1.0], np.float32), workspace=ws, **CAUSAL)
    got = dict(zip(nodes.tolist(), energy.tolist()))
    assert got == pytest.approx({0: 1.0, 1: 0.35, 2: 0.35, 3: 0.35, 4: 0.35, 5: 0.35,
                                 6: 0.196})
    # step 1: the hub (5 edges); step 2: the five new sources (1 edge); step 3: nothing changed
    assert ws.edges_scanned == 6
    assert ws.steps == 3
    # the literal twin re-scans every active node every step: same answer, more edges
    tw = _spread_py.SpreadWorkspace()
    ref = _spread_py.spread(indptr, indices, weights, np.array([0], np.int32),
                            np.array([1.0], np.float32), workspace=tw, **CAUSAL)
    assert dict(zip(ref[0].tolist(), ref[1].tolist())) == pytest.approx(got)
    assert tw.edges_scanned == 5 + 6 + 6 and tw.steps == 3


@pytest.mark.parametrize("impl", [p for p in IMPLS if p.id == "compiled"])
def test_reemit_growing_source_emits_its_change(impl):
    """A source whose act grows contributes only the change (ordinary and inhibitory edges);
    the sums then equal a fresh recomputation (exactly representable values here)."""
    # 0 -> 1 (1.0), 0 -> 2 (-1.0, inhibitory, multiplier 2), 1 -> 0 (6.0), 1 -> 3 (1.0)
    indptr = np.array([0, 2, 4, 4, 4], np.int64)
    indices = np.array([1, 2, 0, 3], np.int32)
    weights = np.array([1.0, -1.0, 6.0, 1.0], np.float32)
    inhib = np.array([0, 1, 0, 0], np.uint8)
    p = dict(decay=0.5, threshold=0.1, lo=-1.0, hi=1.0, max_steps=5, reemit=True, top_k=0,
             inhibit_multiplier=2.0)
    seeds, e0 = np.array([0], np.int32), np.array([0.5], np.float32)
    ws = impl.SpreadWorkspace(4)
    nodes, energy = impl.spread(indptr, indices, weights, seeds, e0, inhibitory=inhib,
                                workspace=ws, **p)
    # step 1: 1 <- 0.25, 2 <- -0.5; step 2: 0 <- 0.75 (grows), 3 <- 0.125 (new);
    # step 3: only 0 re-emits its change 0.25: 1 -> 0.375, 2 -> -0.75; nothing new: stop
    assert dict(zip(nodes.tolist(), energy.tolist())) == {0: 0.75, 2: -0.75, 1: 0.375,
                                                          3: 0.125}
    assert nodes.tolist() == [0, 2, 1, 3]
    assert ws.edges_scanned == 2 + 2 + 2 and ws.steps == 3
    for other in (frontiers.spread_vectorized, frontiers.spread_vectorized_recompute,
                  _spread_py.spread):
        ref = other(indptr, indices, weights, seeds, e0, inhibitory=inhib, **p)
        np.testing.assert_array_equal(nodes, ref[0])
        np.testing.assert_array_equal(energy.view(np.uint32), ref[1].view(np.uint32))


def test_recompute_frontier_baseline_agrees():
    """The pre-delta numpy frontier (benchmark baseline): bit-equal without re-emission,
    equal up to float32 rounding with it."""
    rng = np.random.default_rng(5)
    n, e = 300, 3000
    csr = CSR.from_coo(n, (n * rng.random(e) ** 2).astype(np.int64), rng.integers(0, n, e),
                       rng.uniform(-1, 1, e).astype(np.float32), inhibitory=rng.random(e) < 0.1)
    seeds = rng.integers(0, n, 8).astype(np.int32)
    energy = np.full(8, 0.75, np.float32)
    for p, exact in ((PEDSA, True), (dict(CAUSAL, top_k=0), False)):
        args = (csr.indptr, csr.indices, csr.weights, seeds, energy)
        a = frontiers.spread_vectorized(*args, inhibitory=csr.inhibitory, **p)
        b = frontiers.spread_vectorized_recompute(*args, inhibitory=csr.inhibitory, **p)
        if exact:
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1].view(np.uint32), b[1].view(np.uint32))
        else:
            da, db = dict(zip(a[0].tolist(), a[1])), dict(zip(b[0].tolist(), b[1]))
            # a node exactly at the threshold could flip; none does here
            assert da.keys() == db.keys()
            np.testing.assert_allclose([da[k] for k in da], [db[k] for k in da], atol=1e-6)


def test_invalid_edges_are_skipped():
    nodes, _ = spread([0, 2, 2, 2], [1, 2], [1.0, 1.0], [0], [1.0], valid=[0, 1])
    assert list(nodes) == [0, 2]


def test_absmax_merge_lets_a_warning_replace_weaker_positive():
    # 0 -> 1 (+0.2), 0 -> 2 (+1.0), 2 -> 1 (-1.0): step 1 gives 1 +0.14; step 2 gives -0.49
    nodes, energy = spread([0, 2, 2, 3], [1, 2, 1], [0.2, 1.0, -1.0], [0], [1.0],
                           max_steps=2, reemit=False)
    got = dict(zip(nodes.tolist(), energy.tolist()))
    assert got[1] == pytest.approx(-0.49, abs=1e-6)


def test_top_k_ties_break_by_lower_index():
    # star: 0 -> 1..6 all equal weight; top_k 3 keeps nodes 1, 2, 3
    nodes, energy = spread([0, 6] + [6] * 6, [1, 2, 3, 4, 5, 6], [0.5] * 6, [0], [1.0],
                           max_steps=1, top_k=3)
    assert list(nodes) == [0, 1, 2, 3]
    # result order: |energy| desc then index
    nodes, energy = spread([0, 3, 3, 3, 3], [3, 1, 2], [0.5, 0.5, 0.5], [0], [1.0], max_steps=1)
    assert list(nodes) == [0, 1, 2, 3]


def test_top_k_zero_keeps_everything():
    n = 50
    indptr = np.array([0] + [n - 1] * n)
    nodes, _ = spread(indptr, np.arange(1, n), np.full(n - 1, 0.5), [0], [1.0], max_steps=1)
    assert len(nodes) == n


def test_max_steps_zero_returns_seeds():
    nodes, energy = spread([0, 1, 1], [1], [1.0], [0], [0.9], max_steps=0)
    assert list(nodes) == [0]


def test_threshold_zero_never_reports_zero_energy():
    nodes, energy = spread([0, 2, 2, 2], [1, 2], [0.0, 0.5], [0], [1.0], threshold=0.0)
    assert list(nodes) == [0, 2]
    assert (energy != 0).all()


def test_read_only_arrays_accepted():
    idx, fwd, _ = devops()
    arrays = [a.copy() for a in (fwd.indptr, fwd.indices, fwd.weights, fwd.inhibitory)]
    for a in arrays:
        a.setflags(write=False)
    seeds = np.array([idx["deploy without tests"]], np.int32)
    energy = np.array([0.75], np.float32)
    seeds.setflags(write=False)
    energy.setflags(write=False)
    valid = np.ones(len(arrays[1]), np.uint8)
    valid.setflags(write=False)
    nodes, out = spread(arrays[0], arrays[1], arrays[2], seeds, energy, valid=valid,
                        inhibitory=arrays[3], **CAUSAL)
    assert len(nodes) == 5
    # and straight into the compiled kernel
    nodes2, out2 = _kernels.spread(arrays[0], arrays[1], arrays[2], seeds, energy, valid=valid,
                                   inhibitory=arrays[3], **CAUSAL)
    np.testing.assert_array_equal(nodes, nodes2)
    np.testing.assert_array_equal(out, out2)


def test_inputs_cast_once_and_copied_by_default():
    indptr = np.array([0, 1, 1], np.int64)
    indices = np.array([1], np.int32)
    weights = np.array([0.5], np.float32)
    csr = CSR(indptr, indices, weights)
    for mine, given in ((csr.indptr, indptr), (csr.indices, indices), (csr.weights, weights)):
        assert not np.shares_memory(mine, given)
        assert given.flags.writeable  # the caller's arrays are left alone
    csr2 = CSR([0, 1, 1], [1], [0.5])  # lists and other dtypes are cast
    assert csr2.indptr.dtype == np.int64 and csr2.indices.dtype == np.int32
    assert csr2.weights.dtype == np.float32
    assert csr.n_nodes == 2 and csr.n_edges == 1 and csr.nbytes == 8 * 3 + 4 + 4


# ---------------------------------------------------------------------------------------------
# the CSR owns what it validated
# ---------------------------------------------------------------------------------------------

SEGFAULT_REPRO = """
import numpy as np
from causalmem import CSR
indices = np.array([1, 0], np.int32)
csr = CSR(np.array([0, 1, 2]), indices, np.ones(2, np.float32))
indices[0] = 2_000_000_000
nodes, energy = csr.spread([0], [1.0])
assert nodes.tolist() == [0, 1], nodes   # the graph validated at construction is the one used
print("ok")
"""


def run_child(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter on this tree's ``causalmem``."""
    root = str(Path(causalmem.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_issue_reproduction_does_not_crash_in_a_subprocess():
    # before the fix the CSR kept the caller's array and this exited with SIGSEGV (rc -11/139)
    proc = run_child(SEGFAULT_REPRO)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "ok"


HOSTILE = """
import numpy as np
from causalmem import CSR, _kernels
csr = CSR(np.array([0, 1, 2]), np.array([1, 0], np.int32), np.ones(2, np.float32))
csr.spread([0], [1.0])
# deliberate abuse: numpy lets an owner array be made writable again
for arr, bad in ((csr.indices, 2_000_000_000), (csr.indptr, 2**62)):
    arr.flags.writeable = True
    arr[0] = bad
nodes, energy = csr.spread([0, 1], [1.0, 1.0])
assert ((nodes >= 0) & (nodes < 2)).all(), nodes
# kernel-typed garbage straight into the compiled module
for indptr, indices in (([0, 5, -3], [7, -9]), ([0, 2**40, 2], [1, 2**31 - 1])):
    nodes, energy = _kernels.spread(np.array(indptr, np.int64), np.array(indices, np.int32),
                                    np.ones(2, np.float32), np.array([0, 1], np.int32),
                                    np.ones(2, np.float32))
    assert ((nodes >= 0) & (nodes < 2)).all(), nodes
print("ok")
"""


def test_arrays_changed_behind_the_csr_never_crash_the_kernel():
    # the kernel clips every row to the edge arrays and skips targets outside the node space
    proc = run_child(HOSTILE)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "ok"


def test_graph_view_checks_lengths():
    for bad in (dict(weights=np.ones(3, np.float32)), dict(valid=np.ones(1, np.uint8)),
                dict(inhibitory=np.ones(5, np.uint8)), dict(indptr=np.zeros(0, np.int64))):
        kw = dict(indptr=np.array([0, 1, 2], np.int64), indices=np.array([1, 0], np.int32),
                  weights=np.ones(2, np.float32), valid=None, inhibitory=None)
        kw.update(bad)
        with pytest.raises(ValueError):
            _kernels.GraphView(kw["indptr"], kw["indices"], kw["weights"], kw["valid"],
                               kw["inhibitory"])


def test_package_does_not_import_the_benchmark_frontiers():
    code = """
import importlib, pkgutil, sys
import causalmem
for m in pkgutil.walk_packages(causalmem.__path__, "causalmem."):
    if m.name.endswith("__main__"):
        continue  # runs the CLI
    try:
        importlib.import_module(m.name)
    except ImportError:
        pass  # optional extras not installed
assert "frontiers" not in sys.modules
assert not hasattr(causalmem._spread_py, "spread_vectorized")
print("ok")
"""
    proc = run_child(code)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_later_writes_to_the_callers_arrays_change_nothing():
    idx, fwd, _ = devops()
    arrays = [np.array(a) for a in (fwd.indptr, fwd.indices, fwd.weights, fwd.inhibitory)]
    valid = np.ones(len(arrays[1]), np.uint8)
    csr = CSR(arrays[0], arrays[1], arrays[2], valid=valid, inhibitory=arrays[3])
    before = csr.spread([idx["deploy without tests"]], [0.75], **CAUSAL)
    arrays[0][1:] = 0
    arrays[1][:] = 10**9
    arrays[2][:] = np.nan
    valid[:] = 0
    arrays[3][:] = 7
    after = csr.spread([idx["deploy without tests"]], [0.75], **CAUSAL)
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])


@pytest.mark.parametrize("name", ["indptr", "indices", "weights", "valid", "inhibitory"])
def test_attributes_cannot_be_reassigned_or_written(name):
    csr = CSR([0, 1, 2], [1, 0], [0.5, 0.5], valid=[1, 1], inhibitory=[0, 1])
    with pytest.raises(AttributeError):
        setattr(csr, name, np.zeros(2, np.int32))
    with pytest.raises(AttributeError):
        delattr(csr, name)
    arr = getattr(csr, name)
    assert not arr.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        arr[0] = 1
    with pytest.raises(ValueError, match="read-only"):
        arr[...] = 0
    with pytest.raises(AttributeError):
        csr.something_new = 1  # no instance dict


def test_returned_arrays_of_from_coo_are_read_only():
    csr = CSR.from_coo(3, [0, 1], [1, 2], [0.5, 0.5], valid=[1, 1], inhibitory=[0, 1])
    for arr in (csr.indptr, csr.indices, csr.weights, csr.valid, csr.inhibitory):
        assert not arr.flags.writeable
        with pytest.raises(ValueError):
            arr[0] = 5


def test_copy_false_takes_over_kernel_typed_arrays():
    indptr = np.array([0, 1, 2], np.int64)
    indices = np.array([1, 0], np.int32)
    weights = np.array([0.5, 0.5], np.float32)
    valid = np.array([1, 1], np.uint8)
    csr = CSR(indptr, indices, weights, valid=valid, copy=False)
    for mine, given in ((csr.indptr, indptr), (csr.indices, indices), (csr.weights, weights),
                        (csr.valid, valid)):
        assert np.shares_memory(mine, given)
        assert not given.flags.writeable  # taken over: the caller's object is read-only now
    with pytest.raises(ValueError, match="read-only"):
        indices[0] = 2_000_000_000
    # arrays that need a cast are converted (a private array) and the caller's left writable
    f64 = np.array([0.5, 0.5])
    csr2 = CSR([0, 1, 2], np.array([1, 0], np.int64), f64, copy=False)
    assert not np.shares_memory(csr2.weights, f64) and f64.flags.writeable
    with pytest.raises(TypeError, match="copy"):
        CSR([0, 1, 2], [1, 0], [0.5, 0.5], copy="no")


def test_from_coo_stable_order():
    csr = CSR.from_coo(3, [2, 0, 2, 0], [0, 1, 1, 2], [0.1, 0.2, 0.3, 0.4])
    np.testing.assert_array_equal(csr.indptr, [0, 2, 2, 4])
    np.testing.assert_array_equal(csr.indices, [1, 2, 0, 1])
    np.testing.assert_allclose(csr.weights, [0.2, 0.4, 0.1, 0.3])


@pytest.mark.parametrize("impl", IMPLS)
def test_coo_to_csr_twins_agree(impl):
    rng = np.random.default_rng(3)
    src = rng.integers(0, 20, 200).astype(np.int32)
    dst = rng.integers(0, 20, 200).astype(np.int32)
    w = rng.random(200).astype(np.float32)
    v = (rng.random(200) < 0.8).astype(np.uint8)
    got = impl.coo_to_csr(20, src, dst, w, v, None)
    ref = _spread_py.coo_to_csr(20, src, dst, w, v, None)
    for a, b in zip(got, ref):
        if a is None:
            assert b is None
        else:
            np.testing.assert_array_equal(a, b)


def test_overlay_extra_with_more_nodes():
    base = CSR([0, 1, 1], [1], [1.0])            # 0 -> 1
    overlay = CSR.from_coo(4, [1, 0], [3, 2], [1.0, 0.5])  # 1 -> 3, 0 -> 2 (new nodes)
    nodes, energy = base.spread([0], [1.0], extra=overlay)
    got = dict(zip(nodes.tolist(), energy.tolist()))
    assert set(got) == {0, 1, 2, 3}
    assert got[1] == pytest.approx(0.7) and got[3] == pytest.approx(0.49)
    # seeds are validated against the combined node space
    nodes, _ = base.spread([3], [1.0], extra=overlay)
    assert list(nodes) == [3]
    with pytest.raises(ValueError, match="seed_nodes"):
        base.spread([4], [1.0], extra=overlay)
    with pytest.raises(TypeError, match="extra"):
        base.spread([0], [1.0], extra=(1, 2))


def test_concurrent_queries_share_a_csr():
    rng = np.random.default_rng(0)
    n, e = 2000, 20000
    csr = CSR.from_coo(n, rng.integers(0, n, e), rng.integers(0, n, e),
                       rng.uniform(-0.3, 1.0, e).astype(np.float32))
    seeds = [rng.integers(0, n, 5) for _ in range(40)]
    expected = [csr.spread(s, np.full(5, 0.75), **CAUSAL) for s in seeds]
    errors = []

    def worker(offset):
        for i in range(len(seeds)):
            j = (i + offset) % len(seeds)
            got = csr.spread(seeds[j], np.full(5, 0.75), **CAUSAL)
            if not (np.array_equal(got[0], expected[j][0])
                    and np.array_equal(got[1], expected[j][1])):
                errors.append(j)

    threads = [threading.Thread(target=worker, args=(k * 7,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_vectorized_frontier_matches_reference_on_random_graph():
    rng = np.random.default_rng(5)
    n, e = 300, 2000
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    w = rng.uniform(-0.5, 1.0, e).astype(np.float32)
    inh = (w < 0).astype(np.uint8)
    csr = CSR.from_coo(n, src, dst, w, inhibitory=inh, valid=rng.random(e) < 0.9)
    for params in (CAUSAL, dict(PEDSA, teleport=0.15, max_steps=3)):
        seeds = rng.integers(0, n, 6).astype(np.int32)
        energy = rng.uniform(0.2, 1.0, 6).astype(np.float32)
        args = (csr.indptr, csr.indices, csr.weights, seeds, energy)
        kw = dict(valid=csr.valid, inhibitory=csr.inhibitory, **params)
        # the delta frontier is the kernel's algorithm, the recompute one the twin's
        for impl, frontier in ((_kernels.spread, frontiers.spread_vectorized),
                               (_spread_py.spread, frontiers.spread_vectorized_recompute)):
            a, b = impl(*args, **kw), frontier(*args, **kw)
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1].view(np.uint32), b[1].view(np.uint32))


# ---------------------------------------------------------------------------------------------
# bad input: ValueError naming the argument, never a crash
# ---------------------------------------------------------------------------------------------

GOOD = dict(indptr=[0, 1, 2, 2], indices=[1, 2], weights=[0.5, 0.5])


def make(**changes):
    kw = dict(GOOD)
    kw.update(changes)
    return CSR(kw.pop("indptr"), kw.pop("indices"), kw.pop("weights"), **kw)


@pytest.mark.parametrize("changes, match", [
    (dict(indptr=[1, 1, 2, 2]), "indptr"),
    (dict(indptr=[0, 2, 1, 2]), "indptr"),
    (dict(indptr=[0, 1]), "indptr"),                # wrong length: last != len(indices)
    (dict(indptr=[0, 1, 2, 5]), "indptr"),
    (dict(indptr=[]), "indptr"),
    (dict(indptr=[[0, 1, 2, 2]]), "indptr"),         # ndim
    (dict(indptr=[0.0, 1.0, 2.0, 2.0]), "indptr"),   # float dtype
    (dict(indptr=np.array([0, 1, 2, 2], np.uint64) - np.uint64(1) + np.uint64(1)), None),
    (dict(indices=[1, 3]), "indices"),
    (dict(indices=[-1, 2]), "indices"),
    (dict(indices=[1, 2**40]), "indices"),
    (dict(indices=["a", "b"]), "indices"),
    (dict(indices=[True, False]), "indices"),
    (dict(weights=[0.5, np.nan]), "weights"),
    (dict(weights=[0.5, np.inf]), "weights"),
    (dict(weights=[0.5, 1e300]), "weights"),        # beyond float32
    (dict(weights=[0.5]), "weights"),
    (dict(weights=[0.5 + 1j, 0.5]), "weights"),
    (dict(weights=[[0.5, 0.5]]), "weights"),
    (dict(weights=np.array([object(), object()])), "weights"),
    (dict(valid=[1]), "valid"),
    (dict(inhibitory=[1, 0, 1]), "inhibitory"),
    (dict(valid=[[1, 1]]), "valid"),
    (dict(inhibitory=["x", "y"]), "inhibitory"),
])
def test_bad_graph_arrays(changes, match):
    if match is None:
        make(**changes)  # a valid unsigned indptr is fine
        return
    with pytest.raises(ValueError, match=match):
        make(**changes)


@pytest.mark.parametrize("seeds, energy, match", [
    ([0, 1], [1.0], "same length"),
    ([3], [1.0], "seed_nodes"),
    ([-1], [1.0], "seed_nodes"),
    ([2**40], [1.0], "seed_nodes"),
    ([0.5], [1.0], "seed_nodes"),
    ([True], [1.0], "seed_nodes"),
    ([0], [np.nan], "seed_energy"),
    ([0], [np.inf], "seed_energy"),
    ([[0]], [[1.0]], "seed_nodes"),
    (["a"], [1.0], "seed_nodes"),
    ([0], ["x"], "seed_energy"),
])
def test_bad_seeds(seeds, energy, match):
    csr = make()
    with pytest.raises(ValueError, match=match):
        csr.spread(seeds, energy)


@pytest.mark.parametrize("params, match", [
    (dict(decay=-0.1), "decay"),
    (dict(threshold=-0.1), "threshold"),
    (dict(lo=0.5, hi=0.1), "lo"),
    (dict(max_steps=-1), "max_steps"),
    (dict(max_steps=2.5), "max_steps"),
    (dict(max_steps=2**40), "max_steps"),
    (dict(top_k=-1), "top_k"),
    (dict(top_k="3"), "top_k"),
    (dict(teleport=1.5), "teleport"),
    (dict(teleport=-0.1), "teleport"),
    (dict(decay=float("nan")), "decay"),
    (dict(threshold=float("inf")), "threshold"),
    (dict(lo=float("-inf")), "lo"),
    (dict(hi=float("nan")), "hi"),
    (dict(teleport=float("nan")), "teleport"),
    (dict(inhibit_multiplier=float("inf")), "inhibit_multiplier"),
    (dict(inhibit_multiplier=-1.0), "inhibit_multiplier"),
    (dict(decay="fast"), "decay"),
    (dict(reemit="yes"), "reemit"),
    (dict(hi=1e300), "hi"),
])
def test_bad_params(params, match):
    csr = make()
    with pytest.raises(ValueError, match=match):
        csr.spread([0], [1.0], **params)


def test_unknown_param_is_type_error():
    with pytest.raises(TypeError, match="dcay"):
        make().spread([0], [1.0], dcay=0.5)
    with pytest.raises(TypeError):
        spread([0, 0], [], [], [0], [1.0], bogus=1)


def test_malformed_input_never_crashes():
    # huge / extreme seeds and weights saturate instead of overflowing into garbage
    nodes, energy = spread([0, 1, 1], [1], [3e38], [0, 0, 0], [1e300, 1e300, -1e10])
    assert np.isfinite(energy).all() and (np.abs(energy) <= 1.0).all()
    nodes, energy = spread([0, 1, 1], [1], [3e38], [0], [3e38], lo=-3e38, hi=3e38)
    assert np.isfinite(energy).all()
    # huge graphs of garbage indices are refused before the kernel
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError):
        spread(np.arange(11) * 3, rng.integers(-5, 50, 30), np.ones(30), [0], [1.0])
    with pytest.raises(ValueError):
        CSR.from_coo(5, [0, 7], [1, 1], [1.0, 1.0])
    with pytest.raises(ValueError):
        CSR.from_coo(5, [0, 1], [1, -1], [1.0, 1.0])
    with pytest.raises(ValueError):
        CSR.from_coo(-1, [], [], [])
    with pytest.raises(ValueError):
        CSR.from_coo(5, [0, 1], [1], [1.0, 1.0])
    # many seeds, all duplicates
    nodes, energy = spread([0, 1, 1], [1], [1.0], np.zeros(100_000, np.int64),
                           np.full(100_000, 0.5))
    assert list(nodes) == [0, 1]


@pytest.mark.parametrize("impl", IMPLS)
def test_transpose_csr_twins_agree(impl):
    rng = np.random.default_rng(4)
    n, e = 30, 300
    fwd = CSR.from_coo(n, rng.integers(0, n, e), rng.integers(0, n, e),
                       rng.random(e).astype(np.float32), valid=rng.random(e) < 0.7,
                       inhibitory=rng.random(e) < 0.2)
    got = impl.transpose_csr(n, fwd.indptr, fwd.indices, fwd.weights, fwd.valid,
                             fwd.inhibitory)
    ref = _spread_py.transpose_csr(n, fwd.indptr, fwd.indices, fwd.weights, fwd.valid,
                                   fwd.inhibitory)
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)
    r_indptr, r_indices, r_weights, r_valid, r_inhib, rev_of_fwd, fwd_of_rev = got
    rows = np.repeat(np.arange(n), np.diff(fwd.indptr))
    # the maps link twins: same endpoints, weight and flags
    np.testing.assert_array_equal(r_indices[rev_of_fwd], rows)
    np.testing.assert_array_equal(r_weights[rev_of_fwd], fwd.weights)
    np.testing.assert_array_equal(fwd_of_rev[rev_of_fwd], np.arange(e))
    np.testing.assert_array_equal(r_valid[rev_of_fwd], fwd.valid)
