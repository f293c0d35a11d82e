"""Foreign SQLite files are refused untouched; read-only commands never
create a file; causalmem databases carry PRAGMA application_id."""
from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from causalmem import Memory, StoreError

REPO = Path(__file__).resolve().parents[1]


def _digest(p: Path) -> tuple:
    siblings = sorted(str(x.name) for x in p.parent.iterdir())
    return hashlib.sha256(p.read_bytes()).hexdigest(), siblings


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "causalmem", *args], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.fixture
def foreign(tmp_path):
    p = tmp_path / "app.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO users (name) VALUES ('someone else''s data')")
    con.commit()
    con.close()
    return p


def test_foreign_sqlite_file_is_refused_byte_identical(foreign):
    before = _digest(foreign)
    with pytest.raises(StoreError, match="app.sqlite") as err:
        Memory(foreign, embedder=None)
    assert "causalmem" in str(err.value)
    assert _digest(foreign) == before  # same bytes, no -wal/-shm left behind
    con = sqlite3.connect(foreign)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    con.close()


def test_foreign_file_refused_by_the_cli_too(foreign):
    before = _digest(foreign)
    for cmd in (["stats"], ["record", "a", "b"], ["search", "x"]):
        r = _cli("--db", str(foreign), *cmd)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert _digest(foreign) == before


def test_new_database_carries_the_application_id(db_path):
    Memory(db_path, embedder=None).close()
    con = sqlite3.connect(db_path)
    app_id = con.execute("PRAGMA application_id").fetchone()[0]
    con.close()
    assert app_id != 0
    # and a file with another application's id is refused even when it has no tables
    other = db_path.parent / "other.db"
    con = sqlite3.connect(other)
    con.execute("PRAGMA application_id = 1234")
    con.commit()
    con.close()
    before = _digest(other)
    with pytest.raises(StoreError):
        Memory(other, embedder=None)
    assert _digest(other) == before


def test_empty_sqlite_file_is_adopted(tmp_path):
    p = tmp_path / "empty.db"
    sqlite3.connect(p).close()  # zero bytes
    with Memory(p, embedder=None) as m:
        m.record_decision("a", "b")
    with Memory(p, embedder=None) as m:
        assert len(m.edges()) == 1


def test_older_causalmem_file_without_application_id_is_accepted(db_path):
    with Memory(db_path, embedder=None) as m:
        m.record_decision("a", "b")
    con = sqlite3.connect(db_path)
    con.execute("PRAGMA application_id = 0")  # as written by causalmem before this change
    con.commit()
    con.close()
    with Memory(db_path, embedder=None) as m:
        assert len(m.edges()) == 1


@pytest.mark.parametrize("cmd", [["stats"], ["search", "x"], ["search-causal", "x"], ["trace", "x"],
                                 ["what-if", "x"], ["export", "OUT"]])
def test_read_only_commands_never_create_a_file(tmp_path, cmd):
    db = tmp_path / "nothing-here.db"
    cmd = [str(tmp_path / "out.jsonl") if c == "OUT" else c for c in cmd]
    r = _cli("--db", str(db), *cmd)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "nothing-here.db" in r.stderr and "Traceback" not in r.stderr
    assert not db.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []
