"""Whatever wrote the store leaves index files (``<db>.idx/``) a fresh process opens from.

Each writer runs in a process of its own that never searches (``record_many``, ``add``, ``import_``,
the CLI, the MCP server, ``sleep``, a purge), closes or just exits, and a second fresh process must
find every view in the files: its rebuild counters stay at zero (``IndexFiles.rebuilt``,
``Projection.rebuilds``) and its views answer exactly like views rebuilt from the database. A
SIGKILL in the middle of the save leaves files that are either valid or ignored. After ``close``
nothing of ``<db>.idx/`` stays mapped or open, even without a garbage collection."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), str(TESTS), os.environ.get("PYTHONPATH")) if p)}

pytestmark = pytest.mark.skipif(os.environ.get("CAUSALMEM_TEST_BACKEND") == "postgres",
                                reason="index files exist only next to a SQLite file")

WORDS = ["cache", "deploy", "latency", "rollback", "schema", "index", "timeout", "retry", "memory", "build"]

#: a fresh process: what it loaded from the files, what it rebuilt, and the check against a rebuild
READER = r"""
import json, sys
from causalmem import Memory
from test_sidecar import _assert_same_as_rebuild
with Memory(sys.argv[1], embedder=None) as m:
    views = m._views
    views.tables()
    views.projection.current()
    out = {"rebuilt": dict(views.files.rebuilt), "graph_rebuilds": views.projection.rebuilds,
           "loaded": sorted(views.files.file_seq), "seq": views.files.read_seq(),
           "chunks": m.stats()["chunks"]}
    _assert_same_as_rebuild(m)
print(json.dumps(out))
"""


def _py(code: str, *args: object, check: bool = True, timeout: float = 240) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], env=ENV, cwd=str(REPO),
                          capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _reader(path: Path) -> dict:
    return json.loads(_py(READER, path).stdout.strip().splitlines()[-1])


def _assert_no_rebuild(path: Path) -> dict:
    got = _reader(path)
    assert got["rebuilt"] == {"chunks": 0, "lexical": 0}, got
    assert got["graph_rebuilds"] == 0, got
    assert got["loaded"] == ["chunks", "lexical", "projection"], got
    return got


def _pairs(n: int, tag: str = "") -> list[tuple[str, str]]:
    return [(f"{WORDS[i % 10]} {tag} decision {i}", f"{WORDS[(i * 3) % 10]} {tag} outcome {i}") for i in range(n)]


WRITE_ONLY = r"""
import sys
from causalmem import Memory
from test_cold_start import _pairs
with Memory(sys.argv[1], embedder=None) as m:
    m.record_many(_pairs(int(sys.argv[2]), sys.argv[3]))
"""


def _written(path: Path, n: int = 300, tag: str = "a") -> None:
    _py(WRITE_ONLY, path, n, tag)


# ------------------------------------------------------------------------------ each writer
def test_record_many_only_leaves_files_a_fresh_process_opens_from(tmp_path):
    path = tmp_path / "m.db"
    _written(path)
    got = _assert_no_rebuild(path)
    assert got["chunks"] == 600


def test_a_writer_on_a_store_with_files_and_a_long_journal_leaves_them_current(tmp_path, monkeypatch):
    """Files of an older state plus a journal longer than a reader would fold cheaply: the writer's
    close brings them to its state (here with ``CATCH_UP_KEEP`` as shipped: 6,000 new chunks)."""
    path = tmp_path / "m.db"
    _written(path, 50)
    _assert_no_rebuild(path)
    _written(path, 3_000, "b")
    _assert_no_rebuild(path)
    from causalmem import sidecar

    idx = Path(str(path) + ".idx")
    seq = _reader(path)["seq"]
    assert all(sidecar.header_seq(idx, kind) == seq for kind in sidecar.KINDS)


@pytest.mark.parametrize("writer", ["add", "import_", "cli_record", "sleep", "purge", "delete", "update",
                                    "feedback", "invalidate"])
def test_every_writer_leaves_files_a_fresh_process_opens_from(tmp_path, writer):
    path = tmp_path / "m.db"
    if writer == "add":
        _py(r"""
        import sys
        from causalmem import Memory
        with Memory(sys.argv[1], embedder=None) as m:
            for i in range(40):
                m.add([{"role": "user", "content": f"cache latency turn {i}"},
                       {"role": "assistant", "content": f"deploy rollback reply {i}"}], user_id="ann", session_id="s")
        """, path)
    elif writer == "import_":
        src = tmp_path / "src.db"
        _written(src, 120)
        dump = tmp_path / "dump.jsonl"
        _py(r"""
        import sys
        from causalmem import Memory
        with Memory(sys.argv[1], embedder=None) as m:
            m.export(sys.argv[2])
        with Memory(sys.argv[3], embedder=None) as m:
            m.import_(sys.argv[2])
        """, src, dump, path)
    elif writer == "cli_record":
        for i in range(3):
            proc = subprocess.run([sys.executable, "-m", "causalmem", "--db", str(path), "record",
                                   f"deploy without tests {i}", f"production crash {i}"],
                                  env=ENV, cwd=str(REPO), capture_output=True, text=True, timeout=240)
            assert proc.returncode == 0, proc.stderr
    else:
        _written(path, 150)
        _reader(path)  # a reader leaves files (and learned nothing: its searches do not reinforce)
        _py(r"""
        import sys
        from causalmem import Memory
        writer = sys.argv[2]
        with Memory(sys.argv[1], embedder=None) as m:
            chunks = m.get_all(limit=20)
            if writer == "sleep":
                m.sleep()
            elif writer == "purge":
                m.record_decision("purged secret", "purged outcome", user_id="bob")
                m.delete_all(user_id="bob", purge=True)
            elif writer == "delete":
                m.delete(chunks[3].id)
            elif writer == "update":
                m.update(chunks[4].id, "rewritten schema text")
            elif writer == "feedback":
                m.feedback(chunks[5].id, 1.0)
            elif writer == "invalidate":
                e = m.edges(chunks[0].id)[0]
                m.invalidate(e.id)
                m.restore(e.id)
        """, path, writer)
    _assert_no_rebuild(path)


def test_the_mcp_write_tools_leave_files_a_fresh_process_opens_from(tmp_path):
    pytest.importorskip("mcp")
    anyio = pytest.importorskip("anyio")
    from mcp import Client, StdioServerParameters, stdio_client

    path = tmp_path / "agent.db"
    params = StdioServerParameters(command=sys.executable, args=["-m", "causalmem.mcp_server", "--db", str(path),
                                                                 "--no-semantic"], cwd=str(REPO), env=ENV)

    async def session():
        with anyio.fail_after(180):
            async with Client(stdio_client(params, errlog=sys.stderr), read_timeout_seconds=60) as c:
                for i in range(3):
                    r = await c.call_tool("remember_decision", {"decision": f"deploy without tests {i}",
                                                                "outcome": f"production crash {i}"})
                    assert not r.is_error
                r = await c.call_tool("add_messages", {"messages": [{"role": "user", "content": "cache on staging"}]})
                assert not r.is_error

    anyio.run(session)
    _assert_no_rebuild(path)


# ------------------------------------------------------------------------------ exit, kill
def test_an_exit_without_close_saves_as_close_would(tmp_path):
    path = tmp_path / "m.db"
    _py(r"""
    import sys
    from causalmem import Memory
    from test_cold_start import _pairs
    m = Memory(sys.argv[1], embedder=None)  # never closed: the interpreter's exit does it
    m.record_many(_pairs(200))
    """, path)
    assert _assert_no_rebuild(path)["chunks"] == 400


def test_an_exit_in_a_forked_child_leaves_the_parents_store_alone(tmp_path):
    """A child forked with an open Memory exits (normally) without closing or saving anything of the
    parent's; the parent's own exit then saves."""
    path = tmp_path / "m.db"
    out = _py(r"""
    import os, sys
    from causalmem import Memory, sidecar
    from test_cold_start import _pairs
    m = Memory(sys.argv[1], embedder=None)
    m.record_many(_pairs(100))
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # a normal exit: the atexit hooks run in the child
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), sidecar.header_seq(sidecar.sidecar_dir(sys.argv[1]), "lexical"))
    """, path).stdout.split()
    assert out == ["0", "None"]  # the child saved nothing
    _assert_no_rebuild(path)


KILL_DURING_SAVE = r"""
import os, signal, sys
from causalmem import Memory, sidecar
from test_cold_start import _pairs
where, calls, saving = sys.argv[2], [0], [False]
real_save, real_fsync = sidecar.save_arrays, os.fsync

def save(directory, kind, *a, **k):
    calls[0] += 1
    if where == "second_file" and calls[0] == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    saving[0] = True
    try:
        return real_save(directory, kind, *a, **k)
    finally:
        saving[0] = False

def fsync(fd):  # inside save_arrays: the temporary file is written, not yet renamed
    if where == "before_rename" and saving[0]:
        os.kill(os.getpid(), signal.SIGKILL)
    return real_fsync(fd)

sidecar.save_arrays = save
sidecar.os.fsync = fsync
with Memory(sys.argv[1], embedder=None) as m:
    m.record_many(_pairs(int(sys.argv[3]), "k"))
"""


@pytest.mark.parametrize("where", ["before_rename", "second_file"])
@pytest.mark.parametrize("had_files", [False, True])
def test_a_sigkill_during_the_save_leaves_a_readable_store_and_a_correct_next_open(tmp_path, where, had_files):
    path = tmp_path / "m.db"
    if had_files:
        _written(path, 50)
    proc = _py(KILL_DURING_SAVE, path, where, 3_000, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    idx = Path(str(path) + ".idx")
    first = _reader(path)  # readable, answers like a rebuild (checked in the reader), nothing lost
    assert first["chunks"] == 6_000 + (100 if had_files else 0)
    if where == "before_rename":
        assert list(idx.glob("*.tmp"))  # left behind, never read
    if had_files:  # the older files (or the one renamed before the kill) caught up from the journal
        assert first["rebuilt"] == {"chunks": 0, "lexical": 0}
    elif where == "second_file":  # the file renamed before the kill is valid and used; the next is built
        assert first["rebuilt"] == {"chunks": 0, "lexical": 1}
    else:  # the temporary file is ignored, the views built from the database
        assert first["rebuilt"] == {"chunks": 1, "lexical": 1}
    _assert_no_rebuild(path)  # the reader's close saved what it built


# ------------------------------------------------------------------------------ nothing held after close
def test_close_leaves_nothing_of_the_index_directory_mapped_or_open(tmp_path):
    """Views loaded from the files map them copy-on-write; ``close`` drops them, so with the
    garbage collector off and the ``Memory`` still referenced nothing under ``<db>.idx/`` stays
    in ``/proc/self/maps`` or ``/proc/self/fd`` (a file replaced by another process's save would
    otherwise stay mapped, deleted, for the life of the process)."""
    if not Path("/proc/self/maps").exists():
        pytest.skip("needs /proc")
    path = tmp_path / "m.db"
    _written(path, 200)
    out = _py(r"""
    import gc, os, sys
    gc.disable()
    from causalmem import Memory
    idx = sys.argv[1] + ".idx/"

    def held():
        maps = [line for line in open("/proc/self/maps") if idx in line]
        fds = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                fds.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass
        return maps + [f for f in fds if idx in f]

    m = Memory(sys.argv[1], embedder=None)
    m.search("cache latency", reinforce=False)
    other = Memory(sys.argv[1], embedder=None)  # another writer replaces the files
    other.record_many([("replaced cache", "replaced latency")] * 3)
    other.close()
    loaded = held()
    m.search("deploy", reinforce=True)
    m.close()
    print(len(loaded) > 0, held())
    """, path).stdout.strip()
    assert out == "True []"
