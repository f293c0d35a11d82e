"""Repeated evidence (the same decision -> outcome recorded again) changes an edge's confidence: the
projection sets that edge's weight in place instead of rebuilding the whole graph at the next query,
and answers exactly as a rebuild from the store does. Real SQLite file, no model."""
from __future__ import annotations

import numpy as np
import pytest

from causalmem import Memory


def _answers(mem: Memory, query: str) -> dict[str, float]:
    return {a.text: round(float(a.energy), 6) for a in mem.search_causal(query, limit=20, include_seeds=True)}


def _rebuilt(mem: Memory, query: str) -> dict[str, float]:
    mem._projection.mark_stale()
    return _answers(mem, query)


@pytest.mark.parametrize("where", ["graph", "overlay"])
def test_repeated_evidence_reweights_in_place_and_answers_as_a_rebuild(db_path, where):
    with Memory(db_path, embedder=None) as mem:
        mem.record_many([(f"deploy service {i} on friday", f"service {i} outage on saturday") for i in range(40)])
        if where == "overlay":
            mem.search_causal("deploy service 1", limit=1)  # the graph is built; the next pair lives in the overlay
        mem.record_decision("skip the canary for checkout", "checkout errors for an hour", confidence=0.4)
        mem.search_causal("deploy service 1", limit=1)
        built = mem._projection.rebuilds
        before = _answers(mem, "skip the canary for checkout")
        edge = mem.record_decision("skip the canary for checkout", "checkout errors for an hour", confidence=0.4)
        assert edge.confidence > 0.4  # the evidence added up
        after = _answers(mem, "skip the canary for checkout")
        assert mem._projection.rebuilds == built  # no rebuild for one changed weight
        assert after["checkout errors for an hour"] > before["checkout errors for an hour"]
        assert after == _rebuilt(mem, "skip the canary for checkout")
        assert mem._projection.rebuilds == built + 1


def test_reweighted_graph_is_saved_and_reloaded_as_it_answers(db_path):
    with Memory(db_path, embedder=None) as mem:
        mem.record_many([(f"decision {i}", f"outcome {i}") for i in range(30)]
                        + [("retry the flaky job", "the build went green", )])
        mem.search_causal("decision 1", limit=1)
        for _ in range(3):
            mem.record_decision("retry the flaky job", "the build went green", confidence=0.3)
        live = _answers(mem, "retry the flaky job")
    with Memory(db_path, embedder=None) as mem2:
        assert _answers(mem2, "retry the flaky job") == live
        assert _rebuilt(mem2, "retry the flaky job") == live


def test_graph_reweight_sets_both_directions_and_checks_its_input():
    from causalmem.graph import CausalGraph

    g = CausalGraph.from_arrays(4, np.array([2, 0, 1]), np.array([3, 1, 2]), np.array([0.5, 1.0, 0.25], np.float32),
                                edge_keys=np.array([30, 10, 20]))
    assert g.reweight(30, 0.75)
    fwd = dict(zip(zip(np.repeat(np.arange(4), np.diff(g.forward.indptr)).tolist(), g.forward.indices.tolist()),
                   g.forward.weights.tolist()))
    rev = dict(zip(zip(np.repeat(np.arange(4), np.diff(g.reverse.indptr)).tolist(), g.reverse.indices.tolist()),
                   g.reverse.weights.tolist()))
    assert fwd == {(0, 1): 1.0, (1, 2): 0.25, (2, 3): 0.75} and rev == {(1, 0): 1.0, (2, 1): 0.25, (3, 2): 0.75}
    assert not g.forward.weights.flags.writeable  # the CSR's view stays read-only
    with pytest.raises(KeyError):
        g.reweight(99, 0.5)
    with pytest.raises(ValueError, match="finite"):
        g.reweight(10, float("nan"))
