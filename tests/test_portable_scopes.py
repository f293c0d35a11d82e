"""``import_`` keeps scope a wall: a dump edited so that an edge, a co-occurrence pair or a fact
joins two scopes is refused with its line number, and nothing of it is stored (``link`` and
``confirm`` refuse the same joins)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from causalmem import Memory


def _dump(db: Path, out: Path) -> list[dict]:
    with Memory(db, embedder=None) as m:
        m.record_decision("deploy on friday", "pager went off", user_id="alice")
        m.record_decision("bob rolled back", "errors dropped", user_id="bob")
        hits = m.search("deploy friday pager", user_id="alice")
        m.confirm([h.id for h in hits[:2]])
        m.add_fact("city", "Lyon", user_id="alice")
        m.export(out)
    return [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]


def _write(path: Path, recs: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")


def _empty(m: Memory) -> bool:
    s = m.stats()
    return s["chunks_total"] == 0 and s["edges_total"] == 0


def test_an_edge_whose_ends_are_in_two_scopes_is_refused_with_its_line(tmp_path):
    recs = _dump(tmp_path / "a.db", tmp_path / "x.jsonl")
    bob = next(r["id"] for r in recs if r["type"] == "chunk" and r["user_id"] == "bob")
    no, edge = next((i, r) for i, r in enumerate(recs, start=1) if r["type"] == "edge"
                    and any(c["id"] == r["dst"] and c["user_id"] == "alice" for c in recs if c["type"] == "chunk"))
    edge["dst"] = bob  # one end is now another user's memory
    _write(tmp_path / "edited.jsonl", recs)
    with Memory(tmp_path / "b.db", embedder=None) as b:
        with pytest.raises(ValueError, match=rf"line {no}: edge: .*different scopes"):
            b.import_(tmp_path / "edited.jsonl")
        assert _empty(b)
        assert b.edges() == []
    # the unedited dump still imports whole
    with Memory(tmp_path / "c.db", embedder=None) as c:
        counts = c.import_(tmp_path / "x.jsonl")
        assert counts["edge"] >= 2 and not _empty(c)


def test_a_cooccurrence_pair_across_scopes_is_refused_with_its_line(tmp_path):
    recs = _dump(tmp_path / "a.db", tmp_path / "x.jsonl")
    bob = next(r["id"] for r in recs if r["type"] == "chunk" and r["user_id"] == "bob")
    pairs = [(i, r) for i, r in enumerate(recs, start=1) if r["type"] == "cooccurrence"]
    assert pairs, "confirm made no co-occurrence pair to edit"
    no, pair = pairs[0]
    pair["b"] = bob if pair["a"] != bob else pair["b"]
    _write(tmp_path / "edited.jsonl", recs)
    with Memory(tmp_path / "b.db", embedder=None) as b:
        with pytest.raises(ValueError, match=rf"line {no}: cooccurrence: .*different scopes"):
            b.import_(tmp_path / "edited.jsonl")
        assert _empty(b)


def test_a_fact_in_another_scope_than_its_chunk_is_refused_with_its_line(tmp_path):
    recs = _dump(tmp_path / "a.db", tmp_path / "x.jsonl")
    no, fact = next((i, r) for i, r in enumerate(recs, start=1) if r["type"] == "fact")
    fact["user_id"] = "bob"
    _write(tmp_path / "edited.jsonl", recs)
    with Memory(tmp_path / "b.db", embedder=None) as b:
        with pytest.raises(ValueError, match=rf"line {no}: fact: .*not the scope of its 'chunk'"):
            b.import_(tmp_path / "edited.jsonl")
        assert _empty(b)
