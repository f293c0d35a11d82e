"""What the benchmark scripts share: the offline model environment and import paths, the bulk
store builder, the export of an earlier revision to measure side by side, timing and the report.

    from _common import HERE, REPO, RESULTS, setup   # first: sets the environment, sys.path
"""
from __future__ import annotations

import io
import os
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"


def setup() -> None:
    """The model offline (as users with the packaged model run), this checkout first on sys.path."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for p in (str(HERE), str(REPO)):
        if p not in sys.path:
            sys.path.insert(0, p)


def bulk_store(target: Any, rng, words: Sequence[str], n_chunks: int, n_edges: int):
    """A ``Memory`` (``embedder=None``) of ``n_chunks`` chunks and ``n_edges`` random causal edges,
    written through the store's bulk API in 100k-row transactions (a file path or any backend's
    target): Zipf-word texts (``store_bench.texts``), power-law-ish out-degree. Returned open."""
    import numpy as np

    from causalmem import Memory
    from causalmem.types import Relation
    from store_bench import texts

    mem = Memory(target, embedder=None)
    now = time.time()
    rels = [Relation.CAUSED, Relation.ENABLED, Relation.PREVENTED, Relation.FACT]
    step = 100_000
    for lo in range(0, n_chunks, step):
        n = min(step, n_chunks - lo)
        with mem._store.transaction():
            mem._store.insert_chunks_bulk([{"text": t, "kind": "decision", "created_at": now, "q_value": 0.5}
                                           for t in texts(rng, words, n)])
    # power-law-ish out-degree: sources drawn from a Zipf over chunk ids
    for lo in range(0, n_edges, step):
        n = min(step, n_edges - lo)
        src = (rng.zipf(1.5, size=n) * 7919 + rng.integers(0, n_chunks, size=n)) % n_chunks + 1
        dst = rng.integers(1, n_chunks + 1, size=n)
        dst = np.where(dst == src, dst % n_chunks + 1, dst)
        conf = rng.uniform(0.3, 1.0, size=n)
        rel = rng.integers(0, len(rels), size=n)
        with mem._store.transaction():
            mem._store.insert_edges_bulk([{"src": int(s), "dst": int(d), "relation": rels[r], "confidence": float(c),
                                           "source": "llm_inferred", "discovered_at": now}
                                          for s, d, c, r in zip(src, dst, conf, rel)])
    return mem


def export_revision(rev: str, where: Path) -> Path:
    """The package of git revision ``rev`` (``git archive``) in ``where``, its kernel compiled in
    place; nothing is written into the repository."""
    data = subprocess.check_output(["git", "-C", str(REPO), "archive", "--format=tar", rev,
                                    "causalmem", "setup.py", "pyproject.toml"])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(where)
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-q"], cwd=where, check=True,
                   capture_output=True)
    return where


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """(result, wall seconds) of one call."""
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def median_ms(fn: Callable[[Any], Any], items: Iterable[Any]) -> float:
    """Median wall time of ``fn(item)`` over ``items``, in milliseconds."""
    lat = []
    for it in items:
        t = time.perf_counter()
        fn(it)
        lat.append((time.perf_counter() - t) * 1000)
    return statistics.median(lat)


def write_report(lines: Sequence[str], out: str) -> str:
    """Print the report and write it to ``out`` (``-``: print only); returns the text."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out != "-":
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
    return text


def load_text() -> str:
    """The load average now, for a report line."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"
