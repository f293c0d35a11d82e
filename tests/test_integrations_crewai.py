"""CrewAI: CausalMemStorage behind a real ``crewai.Memory`` (no LLM: fields given, no near-duplicates).

crewai requires ``mcp<2`` while causalmem's MCP server needs ``mcp>=2``, so crewai is not in the
``test`` extra: this file runs in an environment that has crewai (it is skipped elsewhere).
"""
from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

pytest.importorskip("crewai")

from crewai.memory.types import MemoryRecord  # noqa: E402
from crewai.memory.unified_memory import Memory as CrewMemory  # noqa: E402

from causalmem import Memory  # noqa: E402
from causalmem.integrations.crewai import CausalMemStorage  # noqa: E402


class WordHashEmbedder:
    """A deterministic causalmem Embedder: words hashed into 64 buckets, L2-normalised."""

    model_name = "word-hash-64"
    dim = 64

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, sum(map(ord, w.strip(".,?!"))) % self.dim] += 1.0
            n = math.sqrt(float((out[i] ** 2).sum())) or 1.0
            out[i] /= n
        return out


@pytest.fixture
def storage(tmp_path):
    s = CausalMemStorage(tmp_path / "crew.db", embedder=WordHashEmbedder())
    yield s
    s.close()


def test_crewai_memory_remembers_and_recalls_through_causalmem(storage, tmp_path):
    mem = CrewMemory(storage=storage, embedder=storage.embedder, consolidation_threshold=0.999)
    mem.remember("The payments service deploys on Fridays after the freeze", scope="/team/payments",
                 categories=["process"], importance=0.8)
    mem.remember("Kim is on call for the search cluster this week", scope="/team/search",
                 categories=["people"], importance=0.6)
    mem.remember("Never restart the payments consumer without draining the queue", scope="/team/payments",
                 categories=["lessons"], importance=0.9, metadata={"severity": "high"})
    found = mem.recall("when does payments deploy?", scope="/team/payments", depth="shallow", limit=2)
    assert found and found[0].record.content == "The payments service deploys on Fridays after the freeze"
    assert all(m.record.scope == "/team/payments" for m in found)
    assert 0.0 <= found[0].score <= 1.0
    assert sorted(storage.list_scopes("/team")) == ["/team/payments", "/team/search"]
    assert storage.count("/team/payments") == 2 and storage.count() == 3
    assert storage.list_categories() == {"process": 1, "people": 1, "lessons": 1}
    info = storage.get_scope_info("/team/payments")
    assert info.record_count == 2 and info.categories == ["lessons", "process"]
    lesson = [r for r in storage.list_records("/team/payments") if "lessons" in r.categories][0]
    assert lesson.metadata == {"severity": "high"} and storage.get_record(lesson.id).content == lesson.content
    # the records are causalmem chunks: the causal engine and plain searches see them
    with Memory(tmp_path / "crew.db", embedder=None) as plain:
        assert len(plain.get_all(agent_id="crewai")) == 3
    if hasattr(mem, "close"):
        mem.close()


def test_storage_update_delete_filters_and_async(storage):
    recs = [MemoryRecord(content="staging runs postgres 16", scope="/infra/db", categories=["facts"]),
            MemoryRecord(content="prod runs postgres 15", scope="/infra/db", categories=["facts"],
                         metadata={"env": "prod"}),
            MemoryRecord(content="the CDN caches images for a day", scope="/infra/cdn", categories=["facts"])]
    storage.save(recs)
    q = storage.embedder(["which postgres runs in prod?"])[0]
    hits = storage.search(q, scope_prefix="/infra/db", metadata_filter={"env": "prod"})
    assert [r.content for r, _ in hits] == ["prod runs postgres 15"]
    assert {r.scope for r, _ in storage.search(q, scope_prefix="/infra/cdn")} == {"/infra/cdn"}  # scope is a wall
    updated = recs[1].model_copy(update={"content": "prod runs postgres 16"})
    storage.update(updated)
    assert storage.get_record(recs[1].id).content == "prod runs postgres 16"
    with pytest.raises(ValueError, match="embedder"):
        storage.search([0.5] * 64)
    assert asyncio.run(storage.adelete(record_ids=[recs[0].id])) == 1
    assert storage.get_record(recs[0].id) is None
    q2 = storage.embedder(["CDN images"])[0]
    assert [r.content for r, _ in asyncio.run(storage.asearch(q2))][0] == "the CDN caches images for a day"
    storage.reset("/infra/cdn")
    assert storage.count() == 1


# ---------------------------------------------------------------------------- learning from the caller
DB_Q = "Which PostgreSQL does the staging database run?"
PAIR = ("The staging database runs PostgreSQL 16.", "The staging database runs PostgreSQL 15.")
OTHERS = ("Lunch is at noon.", "Kim is on call for search this week.")


def _recall(mem, query: str, **kw):
    return mem.recall(query, depth="shallow", limit=3, **kw)


def test_feedback_on_a_recalled_memory_ranks_it_first_in_the_next_recall(storage):
    """crewai's own Memory.recall: feedback on the second of two equally matching answers (its
    MemoryMatch) makes the next recall rank it first; the same texts in another scope path keep their
    scores. A negative reward (async) sends it back. (The two answers tie exactly before the feedback,
    so only orders that feedback decided are asserted: CrewAI breaks such ties by recency, microseconds.)"""
    mem = CrewMemory(storage=storage, embedder=storage.embedder, consolidation_threshold=0.999)
    for scope in ("/team/db", "/team/other"):
        storage.save([MemoryRecord(content=t, scope=scope, categories=["facts"]) for t in (*PAIR, *OTHERS)])
    q = storage.embedder([DB_Q])[0]

    def other_scores() -> dict[str, float]:
        return {r.content: s for r, s in storage.search(q, scope_prefix="/team/other", limit=4)}

    first = _recall(mem, DB_Q, scope="/team/db")
    assert {m.record.content for m in first[:2]} == set(PAIR) and all(m.record.scope == "/team/db" for m in first)
    other_before = other_scores()
    assert storage.feedback(first[1], 1.0) > storage.memory.config.q_init
    second = _recall(mem, DB_Q, scope="/team/db")
    assert [m.record.id for m in second[:2]] == [first[1].record.id, first[0].record.id]
    assert second[0].score > second[1].score
    assert other_scores() == pytest.approx(other_before)
    twins = [c for c in storage.memory.get_all(agent_id="crewai") if c.metadata["crewai"]["scope"] == "/team/other"]
    assert len(twins) == 4 and {c.q_value for c in twins} == {storage.memory.config.q_init}
    assert asyncio.run(storage.afeedback(first[1].record.id, -1.0, scope_prefix="/team")) < storage.memory.config.q_init
    third = _recall(mem, DB_Q, scope="/team/db")
    assert [m.record.id for m in third[:2]] == [first[0].record.id, first[1].record.id]
    assert other_scores() == pytest.approx(other_before)
    if hasattr(mem, "close"):
        mem.close()


def test_confirm_links_records_for_the_next_search(storage):
    """Lexical + graph over the storage's search: "alpha release" scores A only; after confirm([A, B])
    the next search reaches B over the learned link, and not C."""
    recs = [MemoryRecord(content=t, scope="/notes") for t in
            ("alpha release of the kafka consumer", "beta rollout finished on friday", "gamma lunch is at noon")]
    storage.save(recs)
    q = storage.embedder(["alpha release"])[0]

    def scores() -> dict[str, float]:
        return {r.content.split()[0]: s for r, s in storage.search(q, limit=5)}

    before = scores()
    assert asyncio.run(storage.aconfirm([recs[0], recs[1].id])) == 1
    after = scores()
    assert after["alpha"] > 0
    assert after.get("beta", 0.0) > before.get("beta", 0.0)
    assert after.get("gamma", 0.0) <= before.get("gamma", 0.0)


def test_feedback_and_confirm_bad_arguments_and_scope_wall(storage):
    a, b = (MemoryRecord(content="alpha notes", scope="/team/a"), MemoryRecord(content="beta notes", scope="/team/b"))
    storage.save([a, b])
    other = CausalMemStorage(memory=storage.memory, agent_id="other-crew")
    c = MemoryRecord(content="gamma notes", scope="/team/a")
    other.save([c])
    for bad in (1.5, -1.01, float("nan")):
        with pytest.raises(ValueError, match="reward"):
            storage.feedback(a, bad)
    with pytest.raises(TypeError, match="reward"):
        storage.feedback(a, "1")
    with pytest.raises(KeyError, match="record.*'no-such-id'"):
        storage.feedback("no-such-id", 1.0)
    with pytest.raises(TypeError, match="record"):
        storage.feedback(42, 1.0)
    with pytest.raises(KeyError, match="record"):
        storage.feedback(c, 1.0)  # another storage's record (another agent_id) is unknown here
    with pytest.raises(KeyError, match="record.*/team/b"):
        storage.feedback(a, 1.0, scope_prefix="/team/b")
    with pytest.raises(TypeError, match="records"):
        storage.confirm(a)
    with pytest.raises(ValueError, match="records"):
        storage.confirm([])
    with pytest.raises(KeyError, match="records"):
        storage.confirm([a, c])
    with pytest.raises(KeyError, match="records"):
        storage.confirm([a, b], scope_prefix="/team/a")
    assert storage.memory.stats()["cooccurrence"] == 0
    assert {ch.q_value for ch in storage.memory.get_all()} == {storage.memory.config.q_init}
    assert storage.confirm([a, b], scope_prefix="/team") == 1
    storage.delete(record_ids=[a.id])
    with pytest.raises(KeyError, match="record"):
        storage.feedback(a, 1.0)  # deleted: unknown


def test_scores_above_one_keep_causalmems_order_in_recall(storage):
    """causalmem's fused score passes 1 with graph support (docs/python.md, "Scores"); CrewAI re-sorts
    recall by its composite of the score, recency and importance. Scores are divided by the best (not
    clipped to a tie at 1), so recall keeps causalmem's order; a clip would let recency put the newer
    record first."""
    mem = CrewMemory(storage=storage, embedder=storage.embedder, consolidation_threshold=0.999)
    for text in ("The payments service deploys on Fridays.", "The payments service deploys on Mondays.", *OTHERS):
        mem.remember(text, scope="/team/payments", categories=["process"], importance=0.5)
    # the two matching records support each other over a causal edge: both pass 1
    ids = {c.text: c.id for c in storage.memory.get_all(agent_id="crewai")}
    storage.memory.link(ids["The payments service deploys on Mondays."],
                        ids["The payments service deploys on Fridays."], relation="caused", confidence=0.9)
    query = "When does the payments service deploy?"
    storage.memory.wait_embedded()  # as storage.search does
    raw = storage.memory.search(query, top_k=3, agent_id="crewai")
    assert raw[0].score > raw[1].score > 1.0  # the case a clip ties
    got = storage.search(storage.embedder([query])[0], limit=3)
    assert [r.content for r, _ in got] == [h.text for h in raw]
    assert got[0][1] == 1.0 and got[1][1] == pytest.approx(raw[1].score / raw[0].score)
    assert [m.record.content for m in _recall(mem, query)][:2] == [h.text for h in raw[:2]]
    if hasattr(mem, "close"):
        mem.close()
