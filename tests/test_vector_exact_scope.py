"""``Config.vector_exact_scope``: scoped searches past ``vector_ann_min`` score every vector of a scope
of at most that size exactly, so index files kept and a rebuild from the store answer alike."""
from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from causalmem import Config, Memory

WORDS = ("deploy cache config rollback database migration schema index query latency timeout retry queue "
         "worker memory leak crash alert monitor build test release branch merge review ticket customer "
         "invoice payment refund login password token session cookie server client network disk").split()
USERS = ("u0", "u1", "u2")
ANN = 120


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "10"])
def test_bad_value_is_refused_by_name(bad: object) -> None:
    with pytest.raises(ValueError, match="vector_exact_scope"):
        Config(vector_exact_scope=bad)  # type: ignore[arg-type]


def _top(db: Path, cfg: Config, queries: list[tuple[str, str]]) -> tuple[list[list[tuple[str, float]]], bool]:
    with Memory(db, config=cfg) as m:
        out = [[(h.id, round(h.score, 6)) for h in m.search(q, top_k=10, user_id=u, reinforce=False)]
               for q, u in queries]
        vi = m._views.vectors
        assert vi is not None and vi.exact_scope == cfg.vector_exact_scope
        return out, vi.segment is not None


@pytest.mark.skipif(os.environ.get("CAUSALMEM_TEST_BACKEND") == "postgres",
                    reason="index files beside a SQLite file (a PostgreSQL store keeps none)")
def test_kept_files_and_rebuild_answer_alike_when_scored_exactly(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    rng = random.Random(3)
    with Memory(db, config=Config(vector_ann_min=ANN)) as m:
        if m._views.embedder is None:
            pytest.skip("no offline sentence-transformers model installed")
        for u in USERS:
            texts = [" ".join(rng.sample(WORDS, rng.randint(4, 8))) + f" item {i}" for i in range(150)]
            m.add(texts, user_id=u, link=False)
        m.flush()
        assert m.search("deploy cache", user_id="u0")
        assert m._views.wait_vectors(120, folded=True)
    queries = [(" ".join(rng.sample(WORDS, 3)), rng.choice(USERS)) for _ in range(12)]
    exact = Config(vector_ann_min=ANN, vector_exact_scope=1 << 30)
    kept, had_segment = _top(db, exact, queries)
    assert had_segment  # the kept files' HNSW segment answered, scored exactly
    shutil.rmtree(str(db) + ".idx")
    rebuilt, _ = _top(db, exact, queries)
    assert kept == rebuilt
    assert all(len(r) == 10 for r in kept)
