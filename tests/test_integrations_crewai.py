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
