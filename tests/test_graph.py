"""CausalGraph: build from typed edges or arrays, golden values, validity flips, overlay."""
from __future__ import annotations

import numpy as np
import pytest

from causalmem import CausalGraph, SpreadParams
from causalmem.config import CAUSAL, PEDSA
from causalmem.spreading import CSR
from causalmem.types import Activation

GRAPH_A_IDS = ["d1", "o1", "d2", "o2", "d3", "o3"]
GRAPH_A_EDGES = [("d1", "o1", "caused", 0.9), ("d2", "o2", "caused", 0.85),
                 ("d3", "o3", "caused", 0.95), ("d2", "o3", "prevented", 0.6)]

from causalmem.cli import DEVOPS_EDGES  # noqa: E402  (the DevOps graph of SPEC §3, one copy)


def devops_graph():
    ids = []
    for s, d, _, _ in DEVOPS_EDGES:
        for x in (s, d):
            if x not in ids:
                ids.append(x)
    return CausalGraph(ids, DEVOPS_EDGES)


def as_dict(acts):
    return {a.node_id: a.energy for a in acts}


def check(got, expected, tol=1e-4):
    assert set(got) == set(expected), (got, expected)
    for k, v in expected.items():
        assert got[k] == pytest.approx(v, abs=tol), k


def test_graph_a_golden():
    g = CausalGraph(GRAPH_A_IDS, GRAPH_A_EDGES)
    acts = g.spread({"d2": 0.5 + 0.5 * 0.7})
    assert all(isinstance(a, Activation) for a in acts)
    assert [a.node_id for a in acts] == ["d2", "o2", "o3"]
    check(as_dict(acts), {"d2": 0.85, "o2": 0.50575, "o3": -0.1071})
    assert acts[-1].is_warning
    check(as_dict(g.spread([("o2", 0.85)], reverse=True)), {"o2": 0.85, "d2": 0.50575})


def test_devops_golden():
    g = devops_graph()
    check(as_dict(g.spread({"deploy without tests": 0.75})),
          {"deploy without tests": 0.75, "production crash": 0.4725, "user complaints": 0.2646,
           "safe release": -0.1339, "rollback needed": 0.1158})
    check(as_dict(g.spread({"enable caching": 0.75})),
          {"enable caching": 0.75, "faster response": 0.42, "timeout errors": -0.1339})
    check(as_dict(g.spread({"production crash": 0.75}, reverse=True)),
          {"production crash": 0.75, "deploy without tests": 0.4725, "hidden bugs": 0.3675,
           "skip code review": 0.2187})


def test_pedsa_presets_on_chain():
    g = CausalGraph("abc", [("a", "b", "fact", 1.0), ("b", "c", "fact", 1.0)])  # 0.8 each
    check(as_dict(g.spread({"a": 1.0}, preset="pedsa")), {"a": 1.0, "b": 0.48, "c": 0.2304})
    check(as_dict(g.spread({"a": 1.0}, preset="pedsa_retrieval")),
          {"a": 1.0, "b": 0.408, "c": 0.166464})
    check(as_dict(g.spread({"a": 1.0}, preset=PEDSA, teleport=0.15)),
          {"a": 1.0, "b": 0.408, "c": 0.166464})
    # inhibitory edge with the PEDSA multiplier: 5/3 confidence * -0.3 = weight -0.5
    g2 = CausalGraph("ab", [("a", "b", "prevented", 1.0, 5.0 / 3.0)])
    check(as_dict(g2.spread({"a": 1.0}, preset="pedsa")), {"a": 1.0, "b": -0.6})


def test_weight_multiplies_and_texts():
    g = CausalGraph(["x", "y"], [("x", "y", "co_occurrence", 1.0, 0.2)])
    acts = g.spread({"x": 1.0}, texts={"x": "used Redis", "y": "fast"}, threshold=0.01)
    assert as_dict(acts)["y"] == pytest.approx(0.14)
    assert [a.text for a in acts] == ["used Redis", "fast"]


def test_overrides_and_presets():
    g = devops_graph()
    acts = g.spread({"deploy without tests": 0.75}, max_steps=1)
    assert "user complaints" not in as_dict(acts)
    acts = g.spread({"deploy without tests": 0.75}, preset=SpreadParams(**CAUSAL.as_kwargs()))
    assert len(acts) == 5
    with pytest.raises(ValueError, match="preset"):
        g.spread({"deploy without tests": 0.75}, preset="nope")
    with pytest.raises(TypeError, match="bogus"):
        g.spread({"deploy without tests": 0.75}, bogus=1)
    with pytest.raises(ValueError, match="decay"):
        g.spread({"deploy without tests": 0.75}, decay=-1)


def test_spread_indices_raw():
    g = CausalGraph(GRAPH_A_IDS, GRAPH_A_EDGES)
    nodes, energy = g.spread_indices([g.index_of("d2")], [0.85])
    assert [g.node_id(i) for i in nodes] == ["d2", "o2", "o3"]
    assert nodes.dtype == np.int32 and energy.dtype == np.float32
    nodes, _ = g.spread_indices([g.index_of("o2")], [0.85], reverse=True, params="causal")
    assert [g.node_id(i) for i in nodes] == ["o2", "d2"]


def test_invalidate_edge_both_directions():
    g = CausalGraph(GRAPH_A_IDS, GRAPH_A_EDGES)
    g.invalidate(3)  # d2 -prevented-> o3
    assert "o3" not in as_dict(g.spread({"d2": 0.85}))
    assert "d2" not in as_dict(g.spread({"o3": 0.95}, reverse=True))
    assert not g.is_valid(3)
    g.invalidate(3, valid=True)
    assert "o3" in as_dict(g.spread({"d2": 0.85}))
    with pytest.raises(KeyError, match="99"):
        g.invalidate(99)


def test_invalidate_node():
    g = devops_graph()
    g.invalidate_node("production crash")
    got = as_dict(g.spread({"deploy without tests": 0.75}))
    assert set(got) == {"deploy without tests", "safe release"}
    got = as_dict(g.spread({"production crash": 0.75}, reverse=True))
    assert set(got) == {"production crash"}
    got = as_dict(g.spread({"skip code review": 0.75}))
    assert "production crash" not in got and "hidden bugs" in got
    g.invalidate_node("production crash", valid=True)
    assert len(g.spread({"deploy without tests": 0.75})) == 5
    with pytest.raises(KeyError, match="nobody"):
        g.invalidate_node("nobody")


def test_from_arrays_with_edge_keys():
    # unsorted src and unsorted (store row id) keys
    src = np.array([2, 0, 2, 4], np.int64)
    dst = np.array([3, 1, 5, 5], np.int64)
    val = np.array([0.85, 0.9, -0.18, 0.95], np.float32)
    inh = np.array([0, 0, 1, 0], np.uint8)
    keys = np.array([40, 10, 30, 20], np.int64)
    g = CausalGraph.from_arrays(6, src, dst, val, inhibitory=inh, edge_keys=keys)
    nodes, energy = g.spread_indices([2], [0.85])
    assert list(nodes) == [2, 3, 5]
    np.testing.assert_allclose(energy, [0.85, 0.50575, -0.1071], atol=1e-4)
    g.invalidate(30)
    assert list(g.spread_indices([2], [0.85])[0]) == [2, 3]
    assert list(g.spread_indices([5], [0.85], reverse=True)[0]) == [5, 4]
    with pytest.raises(KeyError):
        g.invalidate(31)
    # ids default to indices
    assert g.index_of(3) == 3 and g.node_id(3) == 3
    with pytest.raises(KeyError):
        g.index_of(6)
    acts = g.spread({2: 0.85})
    assert [a.node_id for a in acts] == [2, 3]
    with pytest.raises(ValueError, match="unique"):
        CausalGraph.from_arrays(6, src, dst, val, edge_keys=[1, 2, 1, 3])
    # node ids given
    g2 = CausalGraph.from_arrays(3, [0, 1], [1, 2], [1.0, 1.0], node_ids=["a", "b", "c"])
    assert [a.node_id for a in g2.spread({"a": 1.0})] == ["a", "b", "c"]


def test_from_arrays_sorted_src_skips_position_map():
    g = CausalGraph.from_arrays(4, [0, 0, 1, 2], [1, 2, 3, 3], [0.5, 0.5, 0.5, 0.5],
                                edge_keys=[5, 6, 7, 8])
    assert g._fwd_pos is None and g._key_order is None
    g.invalidate(7)
    assert not g.forward.valid[2]
    assert g.reverse.valid.sum() == 3


def test_sizes():
    g = devops_graph()
    assert g.n_nodes == 14 and g.n_edges == 11
    assert g.nbytes >= 2 * (11 * (4 + 4 + 1 + 1) + 15 * 8)
    assert isinstance(g.forward, CSR) and isinstance(g.reverse, CSR)
    empty = CausalGraph([], [])
    assert empty.n_nodes == 0 and empty.n_edges == 0 and empty.spread({}) == []


def test_bad_edges():
    with pytest.raises(ValueError, match="valid relations"):
        CausalGraph(["a", "b"], [("a", "b", "causes", 0.5)])
    with pytest.raises(KeyError, match="zz"):
        CausalGraph(["a", "b"], [("a", "zz", "caused", 0.5)])
    with pytest.raises(ValueError, match="confidence"):
        CausalGraph(["a", "b"], [("a", "b", "caused", 1.5)])
    with pytest.raises(ValueError, match="confidence"):
        CausalGraph(["a", "b"], [("a", "b", "caused", float("nan"))])
    with pytest.raises(ValueError, match="confidence"):
        CausalGraph(["a", "b"], [("a", "b", "caused", -0.1)])
    with pytest.raises(ValueError, match="weight"):
        CausalGraph(["a", "b"], [("a", "b", "caused", 0.5, float("inf"))])
    with pytest.raises(ValueError, match="fields"):
        CausalGraph(["a", "b"], [("a", "b", "caused")])
    with pytest.raises(ValueError, match="duplicate"):
        CausalGraph(["a", "a"], [])
    # meta sub-kinds parse to meta
    g = CausalGraph(["a", "b"], [("a", "b", "similar_to", 1.0)])
    assert g.forward.weights[0] == pytest.approx(0.6)


def test_bad_seeds():
    g = CausalGraph(GRAPH_A_IDS, GRAPH_A_EDGES)
    with pytest.raises(KeyError, match="nope"):
        g.spread({"nope": 1.0})
    with pytest.raises(ValueError, match="energy"):
        g.spread({"d2": float("nan")})
    with pytest.raises(ValueError, match="seeds"):
        g.spread(["d2"])
    with pytest.raises(IndexError):
        g.node_id(6)


def test_overlay_graph_with_new_nodes():
    base = CausalGraph.from_arrays(3, [0], [1], [0.9], node_ids=["a", "b", "c"])
    # overlay in the same index space, one new node "d" and two new edges
    overlay = CausalGraph.from_arrays(4, [1, 2], [3, 3], [1.0, 1.0],
                                      node_ids=["a", "b", "c", "d"])
    got = as_dict(base.spread({"a": 1.0}, extra=overlay))
    assert got == pytest.approx({"a": 1.0, "b": 0.63, "d": 0.441}, abs=1e-5)
    got = as_dict(base.spread({"d": 1.0}, extra=overlay, reverse=True))
    assert set(got) == {"d", "b", "c", "a"}
    # the same through the raw CSR overlay
    nodes, energy = base.spread_indices([0], [1.0], extra=overlay.forward)
    assert list(nodes) == [0, 1, 3]
