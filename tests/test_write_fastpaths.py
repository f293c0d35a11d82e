"""The write path's shortcuts give exactly what the plain constructions give: ``new_edge`` vs the
``Edge`` dataclass, ``new_ids`` vs per-id formatting, and ``record_many``'s edges vs what the
store reads back."""
from __future__ import annotations

import dataclasses
import re

from causalmem import Memory
from causalmem.store.base import new_id, new_ids
from causalmem.types import Edge, new_edge


def test_new_edge_equals_the_dataclass():
    values = dict(id="e1", src="a", dst="b", relation="caused", confidence=0.7, source="llm_inferred",
                  polarity="negative", task_tag="t", event_time=3.0, valid=True, superseded_by=None,
                  discovered_at=2.0, subtype="because", invalid_reason=None, polarity_origin="guessed", evidence=2)
    assert list(values) == [f.name for f in dataclasses.fields(Edge)]  # a new Edge field must reach new_edge
    fast, plain = new_edge(*values.values()), Edge(**values)
    assert type(fast) is Edge and fast == plain and hash(fast) == hash(plain) and repr(fast) == repr(plain)
    assert dataclasses.asdict(fast) == values
    try:
        fast.confidence = 0.1  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("new_edge must stay frozen")


def test_new_ids_are_unique_increasing_hex():
    batch = new_ids(1000) + new_ids(1) + [new_id()] + new_ids(7)
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in batch)
    assert batch == sorted(batch) and len(set(batch)) == len(batch)
    assert new_ids(0) == []
    # the clock half counts up by one per id inside a batch
    clocks = [int(i[:16], 16) for i in new_ids(5)]
    assert clocks == list(range(clocks[0], clocks[0] + 5))


def test_record_many_edges_match_the_stored_ones(tmp_path):
    with Memory(tmp_path / "m.db", embedder=None) as mem:
        mem.record_decision("restart the cache", "the deploy failed")
        items = [("restart the cache", "the deploy failed"), ("scale the pool", "latency improved"),
                 {"decision": "bump the lib", "outcome": "tests passed", "relation": "enabled", "polarity": "mixed"},
                 ("scale the pool", "latency improved"), ("drop the index", "nothing happened")]
        edges = mem.record_many(items)
        for e in edges:
            assert e == mem.get_edge(e.id), e
        assert [e.polarity for e in edges] == ["negative", "positive", "mixed", "positive", None]
        assert [e.polarity_origin for e in edges] == ["guessed", "guessed", "given", "guessed", "unknown"]
        assert edges[1] == edges[3] and edges[1].evidence == 2 and edges[0].evidence == 2
