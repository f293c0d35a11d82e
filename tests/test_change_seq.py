"""The store's persistent change counter (``change_seq``): what derived files (the sidecar indexes)
compare against to know whether they still match the database."""
from __future__ import annotations

from causalmem import Memory
from causalmem.store.sqlite import SQLiteStore


def test_every_committed_write_advances_it_and_reads_do_not(tmp_path):
    path = tmp_path / "a.db"
    mem = Memory(path, embedder=None)
    store = mem._store
    s0 = store.change_seq()
    assert s0 > 0  # the creating migration set a random start
    mem.record_decision("raised the cache size", "latency dropped")
    s1 = store.change_seq()
    assert s1 > s0
    mem.search("cache", reinforce=False)
    assert store.change_seq() == s1  # a read changes nothing
    with store.transaction():
        pass  # a transaction that changed no row does not advance it
    assert store.change_seq() == s1
    try:
        with store.transaction():
            store.set_meta("x", "1")
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    assert store.change_seq() == s1
    mem.close()


def test_another_process_write_is_seen_and_the_value_persists(tmp_path):
    path = tmp_path / "a.db"
    a = Memory(path, embedder=None)
    b = Memory(path, embedder=None)
    before = a._store.change_seq()
    b.record_decision("rolled back the deploy", "errors stopped")
    assert a._store.change_seq() > before
    after = a._store.change_seq()
    a.close()
    b.close()
    ro = SQLiteStore(path, read_only=True)
    assert ro.change_seq() == after
    ro.close()


def test_two_databases_start_apart_and_import_does_not_copy_it(tmp_path):
    a = Memory(tmp_path / "a.db", embedder=None)
    b = Memory(tmp_path / "b.db", embedder=None)
    assert a._store.change_seq() != b._store.change_seq()
    a.record_decision("pinned the dependency", "build passed")
    a.export(tmp_path / "dump.jsonl")
    before = b._store.change_seq()
    b.import_(tmp_path / "dump.jsonl")
    assert b._store.change_seq() > before  # one transaction, its own counter
    assert SQLiteStore(":memory:").change_seq() >= 0
    a.close()
    b.close()


def test_two_copies_of_one_file_part_ways(tmp_path):
    """A database restored from an older copy, then written, must not match index files made from
    the other history that left the same copy (the counter advances by a random step)."""
    import shutil
    a = Memory(tmp_path / "a.db", embedder=None)
    a.record_decision("pinned the dependency", "build passed")
    a.close()
    shutil.copyfile(tmp_path / "a.db", tmp_path / "b.db")
    seqs = []
    for name in ("a.db", "b.db"):
        m = Memory(tmp_path / name, embedder=None)
        m.record_decision("rolled back the deploy", "errors stopped")  # the same write on both
        seqs.append(m._store.change_seq())
        m.close()
    assert seqs[0] != seqs[1]
