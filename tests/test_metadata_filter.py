"""Chunk metadata in the core: stored per chunk, returned on chunks and hits, filterable, updatable."""
from __future__ import annotations

import pytest

from causalmem import Memory
from causalmem.metadata_filter import matches, validate


def test_matches_operators_and_logic():
    meta = {"team": "billing", "n": 3, "tags": ["ops", "sec"], "flag": True, "user": {"tier": "gold"},
            "when": "2026-03-01"}
    yes = [{"team": "billing"}, {"n": 3}, {"flag": True}, {"user.tier": "gold"}, {"n": {"$gt": 2, "$lte": 3}},
           {"team": {"$in": ["a", "billing"]}}, {"team": {"$nin": ["a"]}}, {"missing": {"$ne": 1}},
           {"tags": {"$contains": "sec"}}, {"team": {"$icontains": "BILL"}}, {"tags": {"$exists": True}},
           {"missing": {"$exists": False}}, {"when": {"$gte": "2026-01-01"}},
           {"$or": [{"team": "x"}, {"n": 3}]}, {"$not": [{"team": "x"}]}, {"$and": [{"n": 3}, {"flag": True}]},
           {"tags": ["ops", "sec"]}]
    no = [{"team": "search"}, {"n": "3"}, {"flag": 1}, {"n": {"$gt": 3}}, {"team": {"$in": []}},
          {"missing": 1}, {"missing": {"$gt": 0}}, {"team": {"$gt": 1}}, {"tags": {"$contains": "x"}},
          {"$or": [{"team": "x"}, {"n": 4}]}, {"$not": [{"n": 3}]}, {"n": {"$eq": float("nan")}}]
    for spec in yes:
        assert matches(meta, validate(spec)), spec
    for spec in no:
        assert not matches(meta, validate(spec)), spec


@pytest.mark.parametrize("spec, err, word", [
    ({"n": {"$regex": "x"}}, ValueError, r"\$regex"),
    ({"$xor": [{"a": 1}]}, ValueError, r"\$xor"),
    ({"$or": []}, ValueError, r"\$or"),
    ({"n": {"$in": 3}}, ValueError, r"\$in"),
    ({"n": {"$exists": "yes"}}, ValueError, r"\$exists"),
    ("team=billing", TypeError, "dict"),
])
def test_validate_names_the_problem(spec, err, word):
    with pytest.raises(err, match=word):
        validate(spec)


def test_metadata_stored_returned_filtered_updated(db_path):
    with Memory(db_path, embedder=None) as mem:
        a = mem.add("rotate the billing database credentials", user_id="u", metadata={"team": "billing", "prio": 2})[0]
        b = mem.add("rotate the search cluster certificates", user_id="u", metadata={"team": "search", "prio": 5})[0]
        mem.add("rotate the billing api keys", user_id="v", metadata={"team": "billing", "prio": 9})
        hits = mem.search("rotate", user_id="u")
        assert {h.id: h.metadata["team"] for h in hits} == {a.id: "billing", b.id: "search"}
        assert [h.id for h in mem.search("rotate", user_id="u", metadata={"team": "billing"})] == [a.id]
        assert [h.id for h in mem.search("rotate", metadata={"prio": {"$gte": 5}}, top_k=5)] != []
        assert {h.user_id for h in mem.search("rotate", metadata={"team": "billing"})} == {"u", "v"}
        assert mem.search("rotate", user_id="u", metadata={"team": "nobody"}) == []
        assert [c.id for c in mem.get_all(user_id="u", metadata={"prio": {"$lt": 3}})] == [a.id]
        assert len(mem.get_all(metadata={"team": "billing"}, limit=1)) == 1

        updated = mem.update(a.id, metadata={"team": "payments", "prio": None, "owner": "kim"})
        assert updated.metadata == {"team": "payments", "owner": "kim"} and updated.text == a.text
        assert [e["event"] for e in mem.history(a.id)] == ["create"]  # metadata only: the text did not change
        assert [h.id for h in mem.search("rotate", user_id="u", metadata={"team": "payments"})] == [a.id]
        both = mem.update(b.id, "rotate the search cluster TLS certificates", metadata={"prio": 6})
        assert both.metadata == {"team": "search", "prio": 6}
        assert [e["event"] for e in mem.history(b.id)] == ["create", "update"]
        with pytest.raises(ValueError, match="needs text, metadata"):
            mem.update(a.id)
        with pytest.raises(ValueError, match="JSON"):
            mem.update(a.id, metadata={"x": float("nan")})
        with pytest.raises(TypeError, match="keys"):
            mem.add("x", metadata={1: "a"})
        with pytest.raises(ValueError, match=r"\$regex"):
            mem.search("rotate", metadata={"team": {"$regex": "b"}})
        mem.delete(a.id)
        with pytest.raises(ValueError, match="deleted"):
            mem.update(a.id, metadata={"x": 1})
    with Memory(db_path, embedder=None) as again:  # persisted
        assert again.get(b.id).metadata == {"team": "search", "prio": 6}
