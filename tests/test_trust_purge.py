"""Issue 9, finding 5: deletion that deletes. ``delete_all(..., purge=True)`` is the
right-to-be-forgotten path: the text and everything derived from it leave every table, index
and vector, and the bytes leave the file."""
from __future__ import annotations

import sqlite3
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
