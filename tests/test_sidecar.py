"""Sidecar index files (``<db>.idx/``): the views a fresh process loads instead of re-reading and
re-tokenizing the store must answer exactly like views rebuilt from the database, after any
sequence of writes; a file that does not match the database (another state, another database, a
crash before the refresh, truncation, damage) is detected and rebuilt, never trusted, never fatal."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from causalmem import Config, Memory
from causalmem import sidecar
from causalmem import view_files as views_module
from causalmem import views as views_coordinator
from causalmem.chunks import ChunkTable
from causalmem.lexical import BM25Index
from causalmem.projection import build_graph

REPO = Path(__file__).resolve().parents[1]
WORDS = ["cache", "deploy", "latency", "rollback", "schema", "index", "timeout", "retry", "memory", "build",
         "failed", "passed", "slow", "fast", "migration", "kernel", "queue", "worker", "disk", "ünïcode", "naïve"]
QUERIES = ["cache latency", "deploy failed", "rollback schema migration", "retry timeout queue", "ünïcode",
           "memory disk worker build", "fast passed", "kernel"]


def _fresh_views(store):
    """Chunk table and BM25 index built from the database now (what a store without sidecars gets)."""
    table, index = ChunkTable(), BM25Index()
    for cols in store.chunk_columns():
        table.load(cols)
        index.add_many([(n, t) for n, t, a in zip(cols.nid, cols.text, cols.alive) if a])
    return table, index


def _assert_same_as_rebuild(mem: Memory) -> None:
    views = mem._views
    table, index = views.tables()
    fresh_table, fresh_index = _fresh_views(mem._store)
    assert np.array_equal(index.doc_ids(), fresh_index.doc_ids())
    assert index.n_docs == fresh_index.n_docs and index.avgdl == pytest.approx(fresh_index.avgdl, rel=1e-12)
    for q in QUERIES:
        ids, scores = index.search(q, top_k=20)
        f_ids, f_scores = fresh_index.search(q, top_k=20)
        assert ids.tolist() == f_ids.tolist(), q
        assert scores.tolist() == f_scores.tolist(), q
    n = fresh_table.n
    assert table.n >= n
    live = np.flatnonzero(fresh_table.alive[:n])
    assert np.array_equal(np.flatnonzero(table.alive[: table.n]), live)
    for col in ("created_at", "q", "importance"):
        assert np.array_equal(getattr(table, col)[live], getattr(fresh_table, col)[live]), col
    for user in ("alice", "bob", None):
        assert np.array_equal(table.scope_mask(user_id=user)[:n], fresh_table.scope_mask(user_id=user)[:n])
    assert np.array_equal(table.scope_mask(kinds=("decision",))[:n], fresh_table.scope_mask(kinds=("decision",))[:n])
    proj = views.projection
    if proj.is_clean():  # a graph without overlay must be the store's graph
        fresh = build_graph(mem._store.projection_arrays())
        mine = proj.graph
        fw, ff = mine.forward, fresh.forward
        m = min(fw.n_nodes, ff.n_nodes)
        assert np.array_equal(fw.indptr[: m + 1], ff.indptr[: m + 1])
        assert np.array_equal(fw.indices, ff.indices) and np.array_equal(fw.weights, ff.weights)
        assert np.array_equal(fw.valid, ff.valid)


def _crash(mem: Memory) -> None:
    """Drop a Memory the way a killed process does: nothing saved, nothing flushed."""
    views = mem._views
    views.embedding.stop()
    views.reinforcement.queued = []
    mem._store.close()


text_st = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)


class SidecarMachine(RuleBasedStateMachine):
    """Random writes, edits, deletes, purges, sleeps, searches, other-process writes, crashes and
    reopenings; after each step the views in use answer exactly like a fresh rebuild."""

    @initialize()
    def open(self):
        import tempfile

        self.dir = Path(tempfile.mkdtemp(prefix="causalmem-sidecar-"))
        self.path = self.dir / "m.db"
        self.mem = Memory(self.path, embedder=None, clock=self.clock)
        self.now = 1.8e9
        self.n = 0
        self.chunks: list[str] = []

    def clock(self):
        return self.now

    def teardown(self):
        try:
            self.mem.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    @rule(a=text_st, b=text_st, user=st.sampled_from(["alice", "bob", None]))
    def record(self, a, b, user):
        self.n += 1
        e = self.mem.record_decision(f"{a} {self.n}", f"{b} outcome {self.n}", user_id=user)
        self.chunks += [e.src, e.dst]

    @rule(items=st.lists(st.tuples(text_st, text_st), min_size=2, max_size=70))
    def record_many(self, items):
        self.n += 1
        edges = self.mem.record_many([(f"{a} m{self.n} d{i}", f"{b} m{self.n} o{i}") for i, (a, b) in enumerate(items)])
        for e in edges:
            self.chunks += [e.src, e.dst]

    @rule(text=text_st, user=st.sampled_from(["alice", "bob"]))
    def add_turn(self, text, user):
        self.n += 1
        self.mem.add(f"{text} turn {self.n}", user_id=user, session_id="s")

    @precondition(lambda self: self.chunks)
    @rule(i=st.integers(0, 10_000), text=text_st)
    def update(self, i, text):
        cid = self.chunks[i % len(self.chunks)]
        if self.mem.get(cid).valid:
            self.mem.update(cid, f"{text} edited")

    @precondition(lambda self: self.chunks)
    @rule(i=st.integers(0, 10_000))
    def delete(self, i):
        cid = self.chunks[i % len(self.chunks)]
        if self.mem.get(cid).valid:
            self.mem.delete(cid)

    @rule(user=st.sampled_from(["alice", "bob"]), purge=st.booleans())
    def delete_all(self, user, purge):
        self.mem.delete_all(user_id=user, purge=purge)
        if purge:
            self._forget_purged()

    def _forget_purged(self):
        """Drop the ids a purge removed for good from the ids the rules pick from."""
        alive = set()
        for cid in self.chunks:
            try:
                self.mem.get(cid)
                alive.add(cid)
            except Exception:
                pass
        self.chunks = [c for c in self.chunks if c in alive]

    @rule(q=st.sampled_from(QUERIES), reinforce=st.booleans())
    def search(self, q, reinforce):
        self.mem.search(q, reinforce=reinforce)

    @rule()
    def sleep(self):
        self.now += 3 * 86400
        self.mem.sleep()

    @rule(a=text_st, b=text_st)
    def other_process_writes(self, a, b):
        other = Memory(self.path, embedder=None)
        self.n += 1
        other.record_decision(f"{a} other {self.n}", f"{b} other outcome {self.n}")
        other.close()

    @rule(ops=st.lists(st.tuples(st.sampled_from(["record", "record_many", "update", "delete", "feedback",
                                                   "invalidate", "restore", "search", "add", "import_", "sleep",
                                                   "purge", "exit_without_close"]),
                                  st.integers(0, 10_000), text_st), min_size=1, max_size=5))
    def one_shot_writers_while_closed(self, ops):
        """This process closes; short processes (a CLI call each) write — their commits go to the
        journal, or, when the next open could not use the files any more (a sleep, a purge, a long
        journal), the writer's close saves them — and the next open loads the files (catching up
        from the journal) without rebuilding any view."""
        seq_before = self.mem._views.files.read_seq()
        self.mem.close()
        self.edges = getattr(self, "edges", [])
        for op, i, text in ops:
            other = Memory(self.path, embedder=None, clock=self.clock)
            with contextlib.ExitStack() as stack:
                if op == "exit_without_close":  # what the interpreter's exit hook does
                    stack.callback(lambda o=other: views_coordinator.close_at_exit(o._views))
                else:
                    stack.enter_context(other)
                self.n += 1
                if op in ("record", "exit_without_close"):
                    e = other.record_decision(f"{text} once {self.n}", f"{text} once outcome {self.n}", user_id="bob")
                    self.chunks += [e.src, e.dst]
                    self.edges.append(e.id)
                elif op == "record_many":
                    es = other.record_many([(f"{text} batch {self.n} {k}", f"{text} batch outcome {k}") for k in range(3)])
                    self.chunks += [c for e in es for c in (e.src, e.dst)]
                    self.edges += [e.id for e in es]
                elif op == "search":  # a reader: loads (catches up), reinforces, saves at close
                    other.search(text, reinforce=True)
                elif op == "add":
                    other.add(f"{text} turn once {self.n}", user_id="bob", session_id="s")
                elif op == "import_":
                    dump = self.dir / f"dump{self.n}.jsonl"
                    with Memory(":memory:", embedder=None) as src:
                        src.record_decision(f"{text} imported {self.n}", f"{text} imported outcome {self.n}")
                        src.export(dump)
                    other.import_(dump)
                elif op == "sleep":
                    self.now += 3 * 86400
                    other.sleep()
                elif op == "purge":
                    other.delete_all(user_id="bob", purge=True)
                elif op in ("invalidate", "restore") and self.edges:
                    eid = self.edges[i % len(self.edges)]
                    try:
                        other.invalidate(eid) if op == "invalidate" else other.restore(eid)
                    except (ValueError, KeyError):
                        pass
                elif self.chunks:
                    cid = self.chunks[i % len(self.chunks)]
                    try:
                        if not other.get(cid).valid:
                            continue
                    except KeyError:
                        continue
                    if op == "update":
                        other.update(cid, f"{text} rewritten")
                    elif op == "delete":
                        other.delete(cid)
                    else:
                        other.feedback(cid, 1.0)
        self.mem = Memory(self.path, embedder=None, clock=self.clock)
        self.mem._views.tables()
        seq = self.mem._views.files.read_seq()
        if seq is not None and seq != seq_before:  # written: every view from its file, none rebuilt
            assert self.mem._views.files.rebuilt == {"chunks": 0, "lexical": 0}, ops
            self.mem._views.projection.current()
            assert self.mem._projection.rebuilds == 0, ops
        if any(op == "purge" for op, _i, _text in ops):
            self._forget_purged()  # the other process's purge removed bob's chunks for good
        # every channel (the graph's too: loaded and patched from the journal, or rebuilt) answers
        # as views built from a copy of the database without index files
        import sqlite3

        copy = self.dir / "rebuilt.db"
        for suffix in ("", "-wal", "-shm"):
            Path(str(copy) + suffix).unlink(missing_ok=True)
        shutil.rmtree(str(copy) + ".idx", ignore_errors=True)
        src, dst = sqlite3.connect(self.path), sqlite3.connect(copy)
        src.backup(dst)
        src.close()
        dst.close()
        with Memory(copy, embedder=None, clock=self.clock) as fresh:
            for q in QUERIES:
                # learned links saved in the graph's overlay sum their weights in another order than
                # a graph rebuilt from the store: equal up to float32 rounding
                got = {h.id: h.score for h in self.mem.search(q, reinforce=False)}
                want = {h.id: h.score for h in fresh.search(q, reinforce=False)}
                assert got.keys() == want.keys(), q
                assert all(got[k] == pytest.approx(want[k], rel=1e-5, abs=1e-9) for k in got), q

    def _answers(self):
        return [[(h.id, h.score) for h in self.mem.search(q, reinforce=False)] for q in QUERIES]

    @rule()
    def reopen(self):
        before = self._answers()
        self.mem.close()
        self.mem = Memory(self.path, embedder=None, clock=self.clock)
        self.mem._views.tables()
        # what close saved is what this open uses (the invariant then compares it with a rebuild),
        # and every answer is the one the closing process gave
        assert {"chunks", "lexical"} <= set(self.mem._views.files.file_seq)
        assert self._answers() == before

    @rule(a=text_st, b=text_st)
    def crash_after_a_write(self, a, b):
        self.n += 1
        self.mem.record_decision(f"{a} lost {self.n}", f"{b} lost outcome {self.n}")
        _crash(self.mem)
        self.mem = Memory(self.path, embedder=None, clock=self.clock)

    @invariant()
    def answers_like_a_rebuild(self):
        if hasattr(self, "mem"):
            _assert_same_as_rebuild(self.mem)


SidecarMachine.TestCase.settings = settings(max_examples=int(os.environ.get('SIDECAR_EXAMPLES', 12)), stateful_step_count=14, deadline=None,
                                            suppress_health_check=list(HealthCheck))
test_sidecar_views_answer_like_a_rebuild = SidecarMachine.TestCase


# ------------------------------------------------------------------------------ fixed cases
def _store(path: Path, n: int = 120) -> None:
    with Memory(path, embedder=None) as m:
        m.record_many([(f"{WORDS[i % len(WORDS)]} decision {i}", f"{WORDS[(i * 7) % len(WORDS)]} outcome {i}")
                       for i in range(n)])
        m.search("cache latency", reinforce=False)


def _answers(path: Path) -> list:
    with Memory(path, embedder=None) as m:
        return [[(h.id, round(h.score, 9)) for h in m.search(q, reinforce=False)] for q in QUERIES]


def test_close_writes_the_files_and_a_fresh_open_uses_them(tmp_path):
    path = tmp_path / "m.db"
    _store(path)
    idx = Path(str(path) + ".idx")
    assert sorted(p.name for p in idx.iterdir() if p.name != "index.lock") == ["chunks.cmx", "lexical.cmx", "projection.cmx"]
    with Memory(path, embedder=None) as m:
        m.search("deploy failed", reinforce=False)
        assert set(m._views.files.file_seq) == {"chunks", "lexical", "projection"}  # loaded, not rebuilt
        assert m._projection.rebuilds == 0
        _assert_same_as_rebuild(m)


def test_memory_store_has_no_sidecar(tmp_path):
    with Memory(":memory:", embedder=None) as m:
        m.record_decision("a", "b")
        m.search("a")
        assert m._views.sidecar_dir is None


def _damage(idx: Path, how: str, other: Path) -> None:
    f = idx / "lexical.cmx"
    data = bytearray(f.read_bytes())
    if how == "truncated":
        f.write_bytes(bytes(data[: len(data) // 2]))
    elif how == "empty":
        f.write_bytes(b"")
    elif how == "flipped byte":
        data[-100] ^= 0x5A
        f.write_bytes(bytes(data))
    elif how == "garbage":
        f.write_bytes(os.urandom(len(data)))
    elif how == "bad header":
        f.write_bytes(data[:12] + b"{not json" + data[21:])
    elif how == "another database's file":
        shutil.copy(Path(str(other) + ".idx") / "lexical.cmx", f)
    elif how == "directory instead of file":
        f.unlink()
        f.mkdir()


@pytest.mark.parametrize("how", ["truncated", "empty", "flipped byte", "garbage", "bad header",
                                 "another database's file", "directory instead of file"])
def test_a_damaged_or_foreign_file_is_rebuilt_never_trusted(tmp_path, how, caplog):
    path, other = tmp_path / "m.db", tmp_path / "other.db"
    _store(path)
    _store(other, n=60)
    want = _answers(path)
    _damage(Path(str(path) + ".idx"), how, other)
    with caplog.at_level(logging.INFO, logger="causalmem"):
        with Memory(path, embedder=None) as m:
            got = [[(h.id, round(h.score, 9)) for h in m.search(q, reinforce=False)] for q in QUERIES]
            assert "lexical" not in m._views.files.file_seq
            _assert_same_as_rebuild(m)
    assert got == want
    if how != "directory instead of file":
        assert "not used" in caplog.text
        # rewritten at close: the next open uses it again
        with Memory(path, embedder=None) as m:
            m.search("cache", reinforce=False)
            assert "lexical" in m._views.files.file_seq


@pytest.mark.parametrize("journal", [True, False])
def test_a_crash_after_writes_is_detected_at_the_next_open(tmp_path, journal):
    """A process killed (SIGKILL) after committing writes never refreshed the files: the next open
    sees the change counter moved on and answers with the new rows — caught up from the journal
    line the commit appended, or (no journal: a crash before the append) rebuilt from the database."""
    path = tmp_path / "m.db"
    _store(path)
    code = f"""
import os, signal, sys
sys.path.insert(0, {str(REPO)!r})
from causalmem import Config, Memory
m = Memory({str(path)!r}, embedder=None)
m.search("cache", reinforce=False)
m.record_decision("zebra migration crashed", "unicorn outcome")
os.kill(os.getpid(), signal.SIGKILL)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert p.returncode == -9
    idx = Path(str(path) + ".idx")
    if not journal:
        (idx / sidecar.JOURNAL).unlink()
    with Memory(path, embedder=None) as m:
        hits = m.search("zebra unicorn", reinforce=False)
        assert "zebra migration crashed" in [h.text for h in hits]
        if journal:  # the files of the earlier state, patched with the journal's rows
            assert m._views.files.caught_up is not None and m._views.files.file_seq["lexical"] != m._store.change_seq()
            assert m._projection.rebuilds == 0
        else:
            assert "lexical" not in m._views.files.file_seq and m._views.files.caught_up is None
        _assert_same_as_rebuild(m)


def test_purge_removes_the_index_files_and_the_purged_words(tmp_path):
    path = tmp_path / "m.db"
    secret = "qzxsecretword"
    with Memory(path, embedder=None) as m:
        m.record_decision(f"share {secret}", "leaked", user_id="alice")
        m.record_decision("bob keeps this", "bob outcome", user_id="bob")
        m.search("bob", reinforce=False)
    idx = Path(str(path) + ".idx")
    assert secret.encode() in (idx / "lexical.cmx").read_bytes()
    with Memory(path, embedder=None) as m:
        m.search("bob", reinforce=False)
        m.delete_all(user_id="alice", purge=True)
        assert not (idx / "lexical.cmx").exists()
        m.search("bob", reinforce=False)
    for f in idx.iterdir():
        assert secret.encode() not in f.read_bytes(), f.name
    # a purge by another process: this one's index still held the word in its vocabulary
    with Memory(path, embedder=None) as m:
        m.record_decision(f"again {secret}", "x", user_id="carol")
    with Memory(path, embedder=None) as a:
        a.search("bob", reinforce=False)
        with Memory(path, embedder=None) as b:
            b.delete_all(user_id="carol", purge=True)
        a.search("bob", reinforce=False)
    for f in idx.iterdir():
        assert secret.encode() not in f.read_bytes(), f.name


def test_deleting_the_directory_is_safe_and_an_unwritable_one_does_not_fail_close(tmp_path):
    path = tmp_path / "m.db"
    _store(path)
    want = _answers(path)
    shutil.rmtree(Path(str(path) + ".idx"))
    assert _answers(path) == want
    assert (Path(str(path) + ".idx") / "lexical.cmx").exists()
    shutil.rmtree(Path(str(path) + ".idx"))
    Path(str(path) + ".idx").write_text("a file where the directory should be")
    with Memory(path, embedder=None) as m:
        m.record_decision("new decision", "new outcome")
        assert m.search("new decision", reinforce=False)
    # close logged the failure and returned


def test_read_only_open_loads_but_never_writes(tmp_path):
    path = tmp_path / "m.db"
    _store(path)
    idx = Path(str(path) + ".idx")
    before = {p.name: p.stat().st_mtime_ns for p in idx.iterdir()}
    with Memory(path, embedder=None, read_only=True) as m:
        assert m.search("cache", reinforce=False)
        assert "lexical" in m._views.files.file_seq
    assert {p.name: p.stat().st_mtime_ns for p in idx.iterdir()} == before


def test_unchanged_views_are_restamped_not_rewritten(tmp_path):
    path = tmp_path / "m.db"
    _store(path)
    idx = Path(str(path) + ".idx")
    inode = (idx / "lexical.cmx").stat().st_ino
    with Memory(path, embedder=None) as m:
        hits = m.search("cache", reinforce=False)
        m.feedback(hits[0].id, 1.0)  # changes a Q value: the chunk table is written, the index is not
    assert (idx / "lexical.cmx").stat().st_ino == inode
    with Memory(path, embedder=None) as m:
        m.search("cache", reinforce=False)
        assert {"chunks", "lexical"} <= set(m._views.files.file_seq)
        _assert_same_as_rebuild(m)


def test_save_load_round_trip_of_the_file_format(tmp_path):
    arrays = {"a": np.arange(10, dtype=np.int64), "b": np.zeros(0, dtype=np.float32),
              "c": np.array([True, False]), "d": np.arange(7, dtype=np.int32)}
    sidecar.save_arrays(tmp_path, "t", 42, arrays, {"x": 1})
    snap = sidecar.load_arrays(tmp_path, "t", 42)
    assert snap is not None and snap.meta == {"x": 1}
    for k, v in arrays.items():
        assert np.array_equal(snap.arrays[k], v) and snap.arrays[k].dtype == v.dtype
    assert sidecar.load_arrays(tmp_path, "t", 43) is None
    assert sidecar.restamp(tmp_path, "t", 42, 43)
    assert sidecar.load_arrays(tmp_path, "t", 43) is not None
    assert sidecar.load_arrays(tmp_path, "u", 43) is None
    snap.arrays["a"][0] = 99  # copy-on-write: the file does not change
    assert sidecar.load_arrays(tmp_path, "t", 43).arrays["a"][0] == 0
    assert sidecar.sidecar_dir(":memory:") is None
    assert sidecar.sidecar_dir(tmp_path / "x.db") is None  # no such file
    (tmp_path / "x.db").write_bytes(b"")
    assert sidecar.sidecar_dir(tmp_path / "x.db") == Path(str(tmp_path / "x.db") + ".idx")
    assert sidecar.sidecar_dir("postgresql://user@localhost/db") is None
    assert sidecar.sidecar_dir("host=localhost dbname=db") is None


def test_a_write_only_process_appends_to_the_journal_and_the_next_open_catches_up(tmp_path, monkeypatch):
    """A short process that only writes (a CLI ``record``) neither loads nor rewrites the index
    files: each commit appends one journal line. The next process that reads loads the files of
    the earlier state, re-reads only the journal's rows (no rebuild of any view), answers as views
    rebuilt from the database; after a small catch-up its close leaves the files and the journal
    as they are (the next reader catches up again), after a larger one it saves the files at the
    current state and empties the journal."""
    path = tmp_path / "m.db"
    _store(path)
    idx = Path(str(path) + ".idx")
    before = {f.name: f.read_bytes() for f in idx.glob("*.cmx")}
    with Memory(path, embedder=None) as m:
        m.record_decision("zebra decision", "zebra outcome")
        edges = m.record_many([("zebra batch one", "giraffe outcome"), ("zebra batch two", "okapi outcome")])
        assert not m._views.files.file_seq and m._views.chunks is None  # nothing loaded
    with Memory(path, embedder=None) as m:
        m.delete(edges[1].src)
    assert {f.name: f.read_bytes() for f in idx.glob("*.cmx")} == before  # not rewritten
    assert len((idx / sidecar.JOURNAL).read_bytes().splitlines()) == 3
    with Memory(path, embedder=None) as m:
        texts = {h.text for h in m.search("zebra", reinforce=False)}
        assert {"zebra decision", "zebra outcome", "zebra batch one"} <= texts
        assert "zebra batch two" not in texts
        views = m._views
        assert views.files.caught_up is not None and views.files.caught_up[0] == views.files.file_seq["lexical"]
        assert m._projection.rebuilds == 0  # the graph came from its file, patched
        got = [[(h.id, round(h.score, 9)) for h in m.search(q, reinforce=False)] for q in QUERIES + ["zebra"]]
        _assert_same_as_rebuild(m)
    assert {f.name: f.read_bytes() for f in idx.glob("*.cmx")} == before  # a small catch-up: left as is
    assert len((idx / sidecar.JOURNAL).read_bytes().splitlines()) == 3
    monkeypatch.setattr(views_module, "CATCH_UP_KEEP", 2)
    with Memory(path, embedder=None) as m:
        assert got == [[(h.id, round(h.score, 9)) for h in m.search(q, reinforce=False)] for q in QUERIES + ["zebra"]]
        assert m._views.files.caught_up is not None and m._projection.rebuilds == 0
    assert not (idx / sidecar.JOURNAL).exists()  # this reader's close saved the current state
    with Memory(path, embedder=None) as m:
        m.search("zebra", reinforce=False)
        assert m._views.files.caught_up is None and m._views.files.file_seq["lexical"] == m._store.change_seq()
    shutil.rmtree(idx)
    with Memory(path, embedder=None) as m:  # views rebuilt from the database answer the same
        assert got == [[(h.id, round(h.score, 9)) for h in m.search(q, reinforce=False)] for q in QUERIES + ["zebra"]]


def test_a_broken_chain_is_never_trusted(tmp_path):
    """Any gap between the files and the database — a commit without a journal line (a sleep
    cycle, a crash before the append), a damaged line, a journal of another state — means a
    rebuild, never a catch-up that would miss rows."""
    path = tmp_path / "m.db"
    _store(path)
    idx = Path(str(path) + ".idx")
    journal = idx / sidecar.JOURNAL
    with Memory(path, embedder=None) as m:
        m.record_decision("first zebra", "first outcome")
    with Memory(path, embedder=None) as m:
        m.record_decision("second zebra", "second outcome")
    lines = journal.read_bytes().splitlines(keepends=True)
    assert len(lines) == 2
    for broken in ([lines[1]], [lines[0]], [lines[0], lines[1].replace(b'"f"', b'"F"')],
                   [lines[0], lines[1][:-12] + b"0000000\n"], [lines[0], lines[1][:-1]]):
        journal.write_bytes(b"".join(broken))
        with Memory(path, embedder=None) as m:
            m._views.save_sidecars = lambda: []  # keep the files of the earlier state for the next case
            texts = {h.text for h in m.search("zebra", reinforce=False)}
            assert {"first zebra", "second zebra"} <= texts
            assert m._views.files.caught_up is None and "lexical" not in m._views.files.file_seq
            _assert_same_as_rebuild(m)
    journal.write_bytes(b"".join(lines))
    with Memory(path, embedder=None) as m:  # intact: caught up
        m.search("zebra", reinforce=False)
        assert m._views.files.caught_up is not None
        m._views.save_sidecars = lambda: []
    with Memory(path, embedder=None) as m:  # a sleep cycle commits without a journal line: a gap
        m.sleep()
        m._views.save_sidecars = lambda: []
    with Memory(path, embedder=None) as m:
        m.search("zebra", reinforce=False)
        assert m._views.files.caught_up is None
        _assert_same_as_rebuild(m)


def _foreign_insert(path: Path, what: str) -> None:
    """A plain sqlite3 client adds a chunk (``okapi from another client``) or an edge between two
    existing chunks, without advancing the change counter."""
    import sqlite3

    con = sqlite3.connect(path)
    if what == "chunk":
        con.execute("INSERT INTO chunks (id, text, text_hash, kind, created_at, q_value) "
                    "SELECT 'foreign-chunk', 'okapi from another client', 12345, kind, created_at, q_value "
                    "FROM chunks WHERE nid = 1")
    else:
        cols = [r[1] for r in con.execute("PRAGMA table_info(edges)")]
        row = dict(zip(cols, con.execute("SELECT * FROM edges ORDER BY eid LIMIT 1").fetchone()))
        src, dst = con.execute("SELECT MIN(nid), MAX(nid) FROM chunks").fetchone()
        row.update(eid=None, id="foreign-edge", src=src, dst=dst)
        del row["eid"]
        con.execute(f"INSERT INTO edges ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
    con.commit()
    con.close()


@pytest.mark.parametrize("what", ["chunk", "edge"])
@pytest.mark.parametrize("then_journal", [False, True])
def test_rows_inserted_by_another_sqlite_client_are_noticed(tmp_path, what, then_journal):
    """A plain sqlite3 client inserts a row without advancing the change counter — with the files
    current, or followed by a causalmem write that the journal covers (the new row's id is then
    below the journal's ids): the rows above the ids the files recorded do not match what the
    journal names, so the views are rebuilt and the row is found (review finding R1)."""
    path = tmp_path / "m.db"
    _store(path)
    with Memory(path, embedder=None) as m:
        m.search_causal("cache decision 3")  # every file saved, the graph's too
    _foreign_insert(path, what)
    if then_journal:
        with Memory(path, embedder=None) as m:
            m.record_decision("zebra decision", "zebra outcome")
    with Memory(path, embedder=None) as m:
        if what == "chunk":
            assert "okapi from another client" in {h.text for h in m.search("okapi", reinforce=False)}
            assert m._views.files.caught_up is None and "lexical" not in m._views.files.file_seq
            _assert_same_as_rebuild(m)
        else:
            m.search_causal("cache decision 3")
            assert "projection" not in m._views.files.file_seq and m._projection.rebuilds == 1
            ids = m._projection.graph.to_arrays()
            assert ids  # rebuilt from the database: the foreign edge is in it
            eid = m._store.query("SELECT eid FROM edges WHERE id = 'foreign-edge'")[0][0]
            m._projection.graph._ordinal(eid)


def test_a_session_that_searched_saves_its_graph_with_the_learned_links(tmp_path):
    """Reinforcing searches put learned links in the projection's overlay; close saves the graph
    with that overlay, so the next process answers as the closing one did, without a rebuild."""
    path = tmp_path / "m.db"
    _store(path)
    cfg = Config(hebbian_search=True)  # the opt-in search-time rule: a search learns links
    with Memory(path, embedder=None, config=cfg) as m:
        for q in QUERIES * 2:
            m.search(q, reinforce=True)
        assert m._projection._overlay.learned  # learned links in the overlay
        m.flush()
        want = [[(h.id, h.score) for h in m.search(q, reinforce=False)] for q in QUERIES]
    with Memory(path, embedder=None, config=cfg) as m:
        got = [[(h.id, h.score) for h in m.search(q, reinforce=False)] for q in QUERIES]
        assert m._projection.rebuilds == 0 and "projection" in m._views.files.file_seq
        assert m._projection._overlay.learned
        assert m._store.query("SELECT COUNT(*) FROM cooccurrence")[0][0] > 0
    assert got == want


def test_a_projection_file_without_its_overlay_arrays_is_rebuilt(tmp_path):
    """A file holding only the graph (an older layout, or a partial write by other code) at the right
    change_seq and with a valid checksum is still refused: the graph is rebuilt from the database."""
    path = tmp_path / "m.db"
    _store(path)
    want = _answers(path)
    idx = Path(str(path) + ".idx")
    with Memory(path, embedder=None) as m:
        seq = m._store.change_seq()
        snap = sidecar.load_arrays(idx, "projection", seq)
        assert snap is not None
        graph_only = {k: np.array(v) for k, v in snap.arrays.items() if not k.startswith(("ov_", "co_deg"))}
    sidecar.save_arrays(idx, "projection", seq, graph_only, {})
    with Memory(path, embedder=None) as m:
        assert [[(h.id, round(h.score, 9)) for h in m.search(q, reinforce=False)] for q in QUERIES] == want
        assert m._projection.rebuilds == 1


def test_a_database_without_the_change_counter_gets_no_files_until_written(tmp_path):
    """A database last written by a version without the counter (change_seq 0) cannot say which
    state a file holds: nothing is trusted or saved until a write starts the counter."""
    import sqlite3

    path = tmp_path / "m.db"
    _store(path)
    shutil.rmtree(Path(str(path) + ".idx"))
    con = sqlite3.connect(path)
    con.execute("DELETE FROM meta WHERE key = 'change_seq'")
    con.commit()
    con.close()
    with Memory(path, embedder=None) as m:
        assert m._store.change_seq() == 0
        m.search("cache", reinforce=False)
    assert not Path(str(path) + ".idx").exists()
    with Memory(path, embedder=None) as m:
        m.record_decision("first counted write", "counter started")
    with Memory(path, embedder=None) as m:
        m.search("cache", reinforce=False)
        assert m._store.change_seq() > 0
    with Memory(path, embedder=None) as m:  # written by the previous close, used now
        m.search("counted", reinforce=False)
        assert {"chunks", "lexical"} <= set(m._views.files.file_seq)
        _assert_same_as_rebuild(m)


def test_a_graph_file_with_a_non_finite_weight_is_refused(tmp_path):
    """A checksum-valid graph file written by a buggy build must not feed NaN/inf to the kernel."""
    from causalmem.graph import CausalGraph

    with Memory(tmp_path / "a.db", embedder=None) as mem:
        mem.record_decision("raised the cache size", "latency dropped")
        mem.search_causal("raised the cache size")
        arrays = {k: np.array(v, copy=True) for k, v in mem._views.projection.graph.to_arrays().items()}
    CausalGraph.from_state_arrays(arrays)  # intact: accepted
    for side in ("fwd", "rev"):
        for bad in (np.nan, np.inf):
            broken = {k: v.copy() for k, v in arrays.items()}
            broken[f"{side}_weights"][0] = bad
            with pytest.raises(ValueError, match="finite"):
                CausalGraph.from_state_arrays(broken)


def test_a_commit_by_another_process_around_an_own_write_is_not_swallowed(tmp_path):
    """Another connection's commit landing inside this process's write window (after the views
    synced, before BEGIN) must still reach this process's views (regression: the views re-read
    PRAGMA data_version after their own commit and took the foreign commit as seen)."""
    db = tmp_path / "agent.db"
    a = Memory(db, embedder=None)
    b = Memory(db, embedder=None)
    try:
        a.record_decision("use redis cache", "faster response")
        a.search("redis")
        views = a._views
        orig = views._before_write

        def foreign_commit_in_the_window() -> None:
            b.record_decision("enable zebra mode", "giraffe outage")
            orig()

        views._before_write = foreign_commit_in_the_window
        try:
            a.record_decision("deploy on friday", "weekend pager storm")
        finally:
            views._before_write = orig
        assert "enable zebra mode" in [h.text for h in a.search("zebra", reinforce=False)]
    finally:
        a.close()
        b.close()


def test_chunk_code_tables_live_in_arrays_not_the_header(tmp_path):
    """400,000 distinct session ids (a UUID per chat is common) must still give a loadable file:
    the code tables are arrays, the header stays small."""
    import uuid

    table = ChunkTable()
    sessions = [str(uuid.UUID(int=i)) for i in range(400_000)] + ["sessión ünïcode", "line\nbreak"]
    for s in sessions:
        table._code_or_new("session", s)
    table._code_or_new("user", "alice")
    arrays, meta = table.to_arrays()
    sidecar.save_arrays(tmp_path, "chunks", 7, arrays, meta)
    snap = sidecar.load_arrays(tmp_path, "chunks", 7)
    assert snap is not None
    back = ChunkTable.from_arrays(snap.arrays, snap.meta)
    assert back is not None
    assert back._codes == table._codes  # None keeps code 0, every value its code
    assert back.code("session", "line\nbreak") == table.code("session", "line\nbreak")
