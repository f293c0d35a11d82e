"""Embedding off the write path: the queue is the store, a background thread fills it.

Real parts: real SQLite files, a real child process killed with SIGKILL, the real packaged
MiniLM for the end-to-end case; the deterministic bag-of-words embedder below is a complete
embedder (a second vector space), slowed down where a test needs a window to act in.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from causalmem import Memory
import rawdb
from toy_embedder import BagOfWordsEmbedder as BagEmbedder  # delay per batch; gate for batches of > 1 text

REPO = Path(__file__).resolve().parents[1]


def counts(path) -> tuple[int, int, int, int]:
    """(live chunks, edges, current vectors, rows of embeddings) read from the tables directly."""
    con = rawdb.connect(path, read_only=True)
    try:
        chunks = con.execute("SELECT COUNT(*) FROM chunks WHERE valid_to IS NULL").fetchone()[0]
        edges = con.execute("SELECT COUNT(*) FROM edges").fetchone()[0]
        current = con.execute("SELECT COUNT(*) FROM embeddings e JOIN chunks c ON c.nid = e.nid "
                              "WHERE e.text_hash = c.text_hash").fetchone()[0]
        rows = con.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]
        return chunks, edges, current, rows
    finally:
        con.close()


def pairs(n: int, tag: str = "") -> list[tuple[str, str]]:
    return [(f"deploy {tag}{i} without tests on friday", f"pager alert {tag}{i} database timeout") for i in range(n)]


def test_write_commits_without_vectors_and_flush_fills_them(db_path):
    emb = BagEmbedder()
    with Memory(db_path, embedder=emb) as mem:
        mem.record_many(pairs(300))
        mem.add_fact("owner", "team blue", user_id="u")
        mem.flush()
        assert counts(db_path)[:3] == (601, 300, 601)
        assert mem.wait_embedded(timeout=0) is True  # nothing left
        c = mem.add("a conversation turn about coffee", user_id="u")[0]
        mem.update(c.id, "a turn about tea instead")
        mem.flush()
        chunks, _, current, _ = counts(db_path)
        assert current == chunks == 602
        hits = mem.search("tea", user_id="u", channels=("semantic",), reinforce=False)
        assert hits and hits[0].id == c.id


def test_search_during_backlog_answers_at_once(db_path):
    emb = BagEmbedder(gated=True)  # the worker's batches block until the gate opens
    with Memory(db_path, embedder=emb) as mem:
        mem.record_many(pairs(200))
        assert emb.entered.wait(30), "the background worker never started a batch"
        assert counts(db_path)[2] == 0
        hits = mem.search("deploy 17 without tests", top_k=5, reinforce=False, explain=True)
        assert hits, "lexical + graph answer while the worker is blocked"
        assert "deploy 17 without tests on friday" in [h.text for h in hits]
        cov = hits[0].signals["semantic_coverage"]
        assert cov == {"with_vector": 0, "in_scope": 400, "fraction": 0.0}
        assert mem.wait_embedded(timeout=0.2) is False  # still blocked
        emb.gate.set()
        mem.flush()
        hits = mem.search("deploy 17 without tests", top_k=5, reinforce=False, explain=True)
        assert hits[0].signals["semantic_coverage"]["fraction"] == 1.0
        assert hits[0].signals["cosine"] is not None


def test_close_leaves_the_queue_and_the_next_open_resumes(db_path):
    emb = BagEmbedder(delay=0.3)
    mem = Memory(db_path, embedder=emb)
    mem.record_many(pairs(1500))  # 3000 chunks = 12 batches of 256 at >= 0.3 s each
    mem.close()  # does not wait for the backlog
    chunks, edges, current, _ = counts(db_path)
    assert (chunks, edges) == (3000, 1500) and current < 3000
    emb2 = BagEmbedder()
    with Memory(db_path, embedder=emb2) as mem:  # no write, no flush: the worker resumes by itself
        deadline = time.time() + 120
        while counts(db_path)[2] < 3000 and time.time() < deadline:
            time.sleep(0.1)
        assert counts(db_path)[2] == 3000
    with Memory(db_path, embedder=BagEmbedder(delay=0.05)) as mem:
        mem.record_many(pairs(300, tag="more "))
        mem.close(drain=True)
    assert counts(db_path)[2] == 3600


CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    sys.path.insert(0, {repo!r})
    from causalmem import Memory
    from test_background_embedding import BagEmbedder, pairs
    mem = Memory({db!r}, embedder=BagEmbedder(delay=0.25))
    mem.record_many(pairs(2000))
    print("written", flush=True)
    mem.flush()
    print("flushed", flush=True)
""")


def test_sigkill_during_background_embedding_loses_nothing(tmp_path):
    db = tmp_path / "killed.db"
    code = CHILD.format(tests=str(REPO / "tests"), repo=str(REPO), db=str(db))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip() == "written", child.stderr.read() if child.stderr else line
        deadline = time.time() + 120
        while counts(db)[2] == 0 and time.time() < deadline:  # some but not all vectors are in
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    chunks, edges, current, _ = counts(db)
    assert (chunks, edges) == (4000, 2000)  # every committed write survived
    assert 0 < current < 4000, current  # killed in the middle of the backlog
    if not rawdb.PG_MODE:  # the SQLite file survived the kill intact
        con = rawdb.connect(db)
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        con.close()
    emb = BagEmbedder()
    with Memory(db, embedder=emb) as mem:
        mem.flush()
        assert counts(db)[:3] == (4000, 2000, 4000)
        assert emb.texts == 4000 - current  # only the queue was encoded, nothing twice
        # the vectors are those of the texts (not of a half-written batch)
        nid, text = mem._store.query("SELECT nid, text FROM chunks ORDER BY nid DESC LIMIT 1")[0]
        assert np.allclose(mem._vector_index().get(nid), emb.encode([text])[0], atol=1e-6)


def test_reembed_reports_progress(db_path):
    with Memory(db_path, embedder=None) as mem:
        mem.record_many(pairs(400))
    seen = []
    with Memory(db_path, embedder=BagEmbedder()) as mem:
        n = mem.reembed(progress=lambda done, total: seen.append((done, total)))
        assert n + mem._views.worker.embedded == 800  # whoever embedded a row, nobody did it twice
        with pytest.raises(TypeError, match="progress"):
            mem.reembed(progress=5)
    if n:
        assert seen[0][0] == 0 and seen[-1] == (n, n) and len(seen) >= 2
    assert counts(db_path)[2] == 800


def test_wait_embedded_bad_timeout(db_path):
    with Memory(db_path, embedder=BagEmbedder()) as mem:
        with pytest.raises(ValueError, match="timeout"):
            mem.wait_embedded(timeout=-1)
    with Memory(db_path, embedder=None) as mem:  # no embedder: nothing to wait for
        assert mem.wait_embedded(timeout=0) is True
        mem.flush()


def test_default_model_end_to_end(db_path):
    """The real default encoder, in the background: a paraphrase is found once vectors exist."""
    with Memory(db_path) as mem:
        if mem.embedder is None:
            pytest.skip("no packaged model installed")
        mem.record_many([("restart the web server", "the site came back online"),
                         ("upgrade the kernel", "the machine failed to boot")])
        mem.flush()
        hits = mem.search("computer would not start up", channels=("semantic",), top_k=1, reinforce=False)
        assert hits[0].text == "the machine failed to boot"


def test_cli_embed_shows_progress_and_fills_the_queue(db_path, capsys):
    from causalmem.cli import main

    with Memory(db_path, embedder=None) as mem:
        mem.record_many(pairs(10))
    with Memory(db_path) as mem:
        if mem.embedder is None:
            pytest.skip("no packaged model installed")
    assert main(["--db", str(db_path), "embed"]) == 0
    captured = capsys.readouterr()
    assert "embedding [" in captured.err and "20/20" in captured.err
    assert counts(db_path)[2] == 20


def test_first_search_of_a_store_without_vectors_encodes_nothing(db_path, monkeypatch):
    from causalmem import view_embedding as views

    monkeypatch.setattr(views, "RESUME_DELAY_S", 60.0)  # the resumed queue must not start before the search
    emb = BagEmbedder()
    with Memory(db_path, embedder=None) as mem:
        mem.record_many(pairs(20))
    with Memory(db_path, embedder=emb) as mem:
        hits = mem.search("deploy 3 without tests", top_k=3, reinforce=False)
        assert hits and emb.texts == 0  # no vector stored yet: the query is not encoded
        mem.flush()
        n = emb.texts
        hits = mem.search("deploy 3 without tests", top_k=3, reinforce=False, explain=True)
        assert emb.texts == n + 1 and hits[0].signals["cosine"] is not None
