"""What ``close()`` does with a process's rows still without vectors, chosen in code
(``Memory(embed_handoff=...)`` / ``Config.embed_handoff``; ``CAUSALMEM_EMBED_HANDOFF`` overrides it), and
the bound of the detached ``causalmem embed``: it embeds the closing process's rows (and newer ones
written while it runs), never an older backlog, then exits.

Real parts: a real SQLite file, the packaged MiniLM (the default ``Memory(path)``), every writer a fresh
process (``python -c``) with the environment variable unset unless a test sets it, the real detached
child. "No child" is checked three ways: the store's embed lock file is never created (only a hand-off
creates it), no process running ``causalmem ... embed`` for this database exists, and the rows stay
without vectors.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from causalmem import Config, Memory
from causalmem.embedding import HANDOFF_ENV, LOCK_FD_ENV, LOCK_NAME, ROWS_ENV, try_lock

REPO = Path(__file__).resolve().parents[1]
MODEL = "all-MiniLM-L6-v2"

WRITER = """
import json, sys
from causalmem import Config, Memory
import causalmem.view_embedding as _v; _v.WORKER_START_DELAY_S = _v.RESUME_DELAY_S = _v.CLOSE_DRAIN_S = 3600.0  # no wall-clock window
mem = Memory({db!r}{kwargs})
for k in range(2):
    mem.record_decision("request {i} changed setting %d of the queue consumer" % k,
                        "request {i} saw the lag of consumer %d drop" % k)
{more}
views = mem._views
mem.close()
emb = views.vector_view.resolved
print(json.dumps({{"model_loaded": emb is not None and any(getattr(emb, a, None) is not None
                                                          for a in ("_sess", "_sess_one", "_model")),
                   "mode": views.embedding.handoff}}))
"""


def _env(handoff: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (HANDOFF_ENV, LOCK_FD_ENV, ROWS_ENV)}
    if handoff is not None:
        env[HANDOFF_ENV] = handoff
    env["PYTHONPATH"] = str(REPO)
    return env


def _write(db: Path, i: int, *, kwargs: str = "", more: str = "", handoff_env: str | None = None) -> dict:
    code = WRITER.format(db=str(db), i=i, kwargs=kwargs, more=more)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=_env(handoff_env), cwd=REPO)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _vectors(db: Path) -> tuple[set[int], set[int]]:
    """(live chunk ids with a current vector, live chunk ids), read without the model."""
    with Memory(db, embedder=None) as m:
        live = {r[0] for r in m._store.query("SELECT nid FROM chunks WHERE valid_to IS NULL")}
        have = {n for n, _ in m._store.embeddings_of(sorted(live), MODEL)}
    return have, live


def _nids(db: Path, like: str) -> set[int]:
    with Memory(db, embedder=None) as m:
        return {r[0] for r in m._store.query("SELECT nid FROM chunks WHERE text LIKE ?", (like,))}


def _lock_file(db: Path) -> Path:
    return Path(str(db) + ".idx") / LOCK_NAME


def _embed_children(db: Path) -> list[int]:
    """Pids of running ``causalmem ... embed`` processes for this database."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            args = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"causalmem" in args and b"embed" in args and str(db).encode() in args:
            found.append(int(d.name))
    return found


def _wait_children_gone(db: Path, timeout: float) -> bool:
    """The detached child exits (after releasing the lock it still closes its store)."""
    deadline = time.monotonic() + timeout
    while _embed_children(db):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _wait_lock_free(db: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fd = try_lock(Path(str(db) + ".idx"))
        if fd is not None:
            os.close(fd)
            return True
        time.sleep(0.2)
    return False


def _old_backlog(db: Path, n: int) -> set[int]:
    """``n`` decision/outcome pairs written without the model (an older backlog of 2n chunks)."""
    with Memory(db, embedder=None) as m:
        m.record_many([(f"old decision {i} about the cache size", f"old outcome {i} of the cache") for i in range(n)])
    return _nids(db, "old %")


@pytest.mark.parametrize("kwargs", [", embed_handoff='off'", ", embed_handoff=False",
                                    ", config=Config(embed_handoff='off')"])
def test_off_in_code_starts_no_child(tmp_path, kwargs):
    """``embed_handoff`` off (as a string, as False, through Config), environment variable unset: the
    one-shot writer closes, nothing is started, its rows stay queued for the next opener."""
    if not Path("/proc/self/cmdline").exists():
        pytest.skip("needs /proc to look for child processes")
    db = tmp_path / "agent.db"
    out = _write(db, 0, kwargs=kwargs)
    assert out == {"model_loaded": False, "mode": "off"}
    assert not _lock_file(db).exists()
    assert _embed_children(db) == []
    time.sleep(2.0)  # a child would have loaded the model and embedded 4 texts by now (~1 s)
    have, live = _vectors(db)
    assert len(live) == 4 and have == set()
    assert not _lock_file(db).exists() and _embed_children(db) == []


def test_the_environment_variable_overrides_the_code(tmp_path):
    """``CAUSALMEM_EMBED_HANDOFF=0`` wins over ``embed_handoff='auto'`` in code (an operator's switch)."""
    db = tmp_path / "agent.db"
    out = _write(db, 0, kwargs=", embed_handoff='auto'", handoff_env="0")
    assert out["mode"] == "off"
    assert not _lock_file(db).exists() and _embed_children(db) == []


@pytest.mark.parametrize("kwargs", [", embed_handoff='auto'", ", config=Config(embed_handoff=True)"])
def test_auto_in_code_gets_vectors_without_a_manual_step(tmp_path, kwargs):
    """``embed_handoff`` on in code, environment variable unset: the writer never loads the model, a
    detached child embeds its rows and exits; no flush, no ``causalmem embed`` by anyone."""
    db = tmp_path / "agent.db"
    out = _write(db, 0, kwargs=kwargs)
    assert out == {"model_loaded": False, "mode": "auto"}
    assert _lock_file(db).exists()  # the hand-off took the store's embed lock
    assert _wait_lock_free(db, 240), "the detached embedder did not finish"
    have, live = _vectors(db)
    assert len(live) == 4 and have == live
    assert _wait_children_gone(db, 60), "the detached embedder did not exit"


def test_drain_embeds_its_own_rows_before_close_returns_and_starts_no_child(tmp_path):
    """``embed_handoff='drain'``: close() loads the model and embeds this process's rows itself (all
    of them, however long), never a child; an older backlog written without the model is left alone."""
    db = tmp_path / "agent.db"
    old = _old_backlog(db, 40)
    out = _write(db, 0, kwargs=", embed_handoff='drain'")
    assert out == {"model_loaded": True, "mode": "drain"}
    have, live = _vectors(db)
    assert have == live - old and len(have) == 4  # the writer's 4 chunks, none of the 80 old ones
    assert not _lock_file(db).exists() and _embed_children(db) == []


def test_the_handed_off_child_embeds_only_the_writers_rows_and_exits(tmp_path):
    """A store with an older backlog (300 chunks written with ``embedder=None``); a one-shot writer at the
    default adds 4 chunks and changes the text of one old chunk. The child it hands off to embeds
    exactly those 5 and exits; the 299 others stay queued for a process that stays open."""
    db = tmp_path / "agent.db"
    old = _old_backlog(db, 150)
    assert len(old) == 300
    with Memory(db, embedder=None) as m:
        victim_nid = min(old)
        victim = m._store.query("SELECT id FROM chunks WHERE nid = ?", (victim_nid,))[0][0]
    out = _write(db, 0, more=f"mem.update({victim!r}, 'old decision about the queue consumer, rewritten')")
    assert out == {"model_loaded": False, "mode": "auto"}
    assert _lock_file(db).exists()
    assert _wait_lock_free(db, 240), "the detached embedder did not exit"
    have, live = _vectors(db)
    new = live - old
    assert len(new) == 4
    assert have == new | {victim_nid}, (sorted(have - new), len(have))
    assert len(live - have) == 299
    assert _wait_children_gone(db, 60), "the detached embedder did not exit"


def test_a_bounded_child_goes_on_with_rows_written_while_it_ran_but_not_the_old_backlog(tmp_path, monkeypatch):
    """The holder of the lock (what a handed-off child runs: the lock's descriptor and its rows in the
    environment) embeds the rows it was handed; writers closing meanwhile start nobody; rows committed
    after its pass and before it released the lock are found by its second look (they are newer than
    its floor); the older backlog below the floor is never touched. The holder never starts its own
    background worker (deterministic under load: no timer races the pass)."""
    from causalmem import view_embedding as views_mod

    db = tmp_path / "agent.db"
    old = _old_backlog(db, 10)
    fd = try_lock(Path(str(db) + ".idx"))
    assert fd is not None
    for i in range(2):
        _write(db, i, handoff_env="1")
    assert _vectors(db)[0] == set()  # nobody started: the lock is held
    floor = min(_nids(db, "request %"))
    assert floor > max(old)
    real = views_mod.embed_rows
    passes = []

    def first_pass_then_a_write(*a, **kw):
        n = real(*a, **kw)
        if not passes:  # rows committed after the holder's pass, before it released the lock
            _write(db, 9, handoff_env="1")  # finds the lock held: starts nobody
        passes.append(n)
        return n

    monkeypatch.setattr(views_mod, "embed_rows", first_pass_then_a_write)
    monkeypatch.setenv(LOCK_FD_ENV, str(fd))
    monkeypatch.setenv(ROWS_ENV, f"{floor};")
    with Memory(db) as m:
        assert m._views.embedding.handoff_child
        n = m.reembed()
        assert m._views.embedding._worker is None  # a handed-off child never starts a background worker
    assert passes == [(8, True)] and n == 12
    have, live = _vectors(db)
    assert have == live - old and len(live - have) == 20
    assert _wait_lock_free(db, 5)


def test_bad_values_are_refused_with_the_argument_named(tmp_path, monkeypatch):
    db = tmp_path / "agent.db"
    for bad in ("sometimes", 1, "OFF", None):
        with pytest.raises(ValueError, match="embed_handoff must be 'auto', 'drain', 'off', True or False"):
            Config(embed_handoff=bad)
    with pytest.raises(ValueError, match=r"embed_handoff .*got 'never'"):
        Memory(db, embed_handoff="never")
    assert not db.exists()  # refused before the file was created
    monkeypatch.setenv(HANDOFF_ENV, "maybe")
    with pytest.raises(ValueError, match=r"environment variable CAUSALMEM_EMBED_HANDOFF must be one of .*'maybe'"):
        Memory(db)
    monkeypatch.setenv(HANDOFF_ENV, "drain")
    with Memory(db, embed_handoff="off", embedder=None) as m:
        assert m._views.embedding.handoff == "drain" and m.config.embed_handoff == "off"


def test_a_writer_that_only_rewrote_an_old_text_hands_off_that_one_and_later_rows(tmp_path):
    """Only an older text changed (no new chunk): the child embeds it, and watches chunks from the
    store's next id up (``max_chunk_nid() + 1``) for writers closing while it runs, not the old backlog."""
    db = tmp_path / "agent.db"
    old = _old_backlog(db, 30)
    with Memory(db, embedder=None) as m:
        victim_nid = sorted(old)[7]
        victim = m._store.query("SELECT id FROM chunks WHERE nid = ?", (victim_nid,))[0][0]
    code = WRITER.replace('for k in range(2):', 'for k in range(0):')
    p = subprocess.run([sys.executable, "-c", code.format(db=str(db), i=0, kwargs="", more=(
        f"mem.update({victim!r}, 'old decision about the queue consumer, rewritten')"))],
        capture_output=True, text=True, timeout=300, env=_env(None), cwd=REPO)
    assert p.returncode == 0, p.stderr[-3000:]
    assert _lock_file(db).exists()
    assert _wait_lock_free(db, 240) and _wait_children_gone(db, 60)
    have, live = _vectors(db)
    assert live == old and have == {victim_nid}


def test_max_chunk_nid_counts_deleted_chunks_too(db_path):
    """The store method the hand-off's floor reads (both backends: the PostgreSQL pass runs this too)."""
    with Memory(db_path, embedder=None) as m:
        assert m._store.max_chunk_nid() == 0
        m.record_decision("first decision", "first outcome")
        top = m._store.max_chunk_nid()
        assert top == max(r[0] for r in m._store.query("SELECT nid FROM chunks"))
        last = m._store.query("SELECT id FROM chunks WHERE nid = %d" % top)[0][0]
        m.delete(last)
        assert m._store.max_chunk_nid() == top
        m.record_decision("second decision", "second outcome")
        assert m._store.max_chunk_nid() == top + 2
