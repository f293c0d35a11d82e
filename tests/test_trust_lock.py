"""Reads never take the write lock; opens never wait; lock waits are
bounded by busy_timeout and end in a clear StoreError."""
from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from causalmem import Config, Memory, StoreError

HOLDER = textwrap.dedent("""
    import sqlite3, sys, time
    con = sqlite3.connect(sys.argv[1], isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    con.execute("INSERT INTO meta (key, value) VALUES ('holder', 'x')")
    print("locked", flush=True)
    sys.stdin.readline()
    con.execute("ROLLBACK")
""")


@pytest.fixture
def filled(db_path):
    with Memory(db_path, embedder=None) as m:
        m.record_many([("deploy without tests", "production crash"), ("enable caching", "faster response")])
    return db_path


@pytest.fixture
def writer_holding_the_lock(filled):
    """Another process in the middle of a write transaction on the file."""
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(filled)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "locked"
        yield filled
    finally:
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait(timeout=30)


@pytest.mark.timeout(60)
def test_open_and_search_while_another_process_writes(writer_holding_the_lock):
    cfg = Config(busy_timeout_ms=300)
    with Memory(writer_holding_the_lock, embedder=None, config=cfg) as m:
        hits = m.search("deploy")  # reinforcement on (the default): queued, not written
        assert hits and hits[0].text == "deploy without tests"
        assert m.search_causal("deploy without tests")[0].text == "production crash"
        assert m.trace_cause("production crash")[0].text == "deploy without tests"
        assert m.get(hits[0].id).text == "deploy without tests"
        assert m.stats()["edges"] == 2
        with pytest.raises(StoreError, match="locked") as err:
            m.record_decision("x", "y")
        assert str(writer_holding_the_lock) in str(err.value)


def test_queued_reinforcement_is_written_at_close(filled):
    with Memory(filled, embedder=None) as m:
        hit = m.search("deploy")[0]
        m.search("deploy")
    with Memory(filled, embedder=None) as m:
        assert m.get(hit.id).access_count == 2


def test_queued_reinforcement_is_written_with_the_next_write(filled):
    with Memory(filled, embedder=None) as m:
        hit = m.search("deploy")[0]
        m.record_decision("a", "b")
        con = sqlite3.connect(filled)
        assert con.execute("SELECT access_count FROM chunks WHERE id = ?", (hit.id,)).fetchone()[0] == 1
        con.close()


@pytest.mark.timeout(60)
def test_reinforcement_waits_in_the_queue_while_the_lock_is_held(writer_holding_the_lock, caplog):
    with Memory(writer_holding_the_lock, embedder=None, config=Config(busy_timeout_ms=200)) as m:
        hit = m.search("caching")[0]
        for _ in range(300):  # beyond the batch size: the flush attempt must not block or fail the search
            m.search("caching")
    assert hit.text == "enable caching"
    # the close could not write either: no error escaped, and the loss was said in the log
    assert any("reinforcement" in r.getMessage() for r in caplog.records)


def test_search_on_a_read_only_database(filled, caplog):
    os.chmod(filled, 0o444)
    try:
        with caplog.at_level(logging.WARNING, logger="causalmem"):
            with Memory(filled, embedder=None, read_only=True) as m:
                for _ in range(3):
                    assert m.search("deploy")[0].text == "deploy without tests"
                m.flush()
                with pytest.raises(StoreError, match="read-only"):
                    m.record_decision("x", "y")
        notes = [r for r in caplog.records if "reinforcement" in r.getMessage()]
        assert len(notes) == 1, [r.getMessage() for r in caplog.records]
    finally:
        os.chmod(filled, 0o644)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores file permissions")
def test_search_on_a_file_without_write_permission(filled, caplog):
    os.chmod(filled, 0o444)
    os.chmod(filled.parent, 0o555)
    try:
        with Memory(filled, embedder=None) as m:
            assert m.search("deploy")[0].text == "deploy without tests"
    finally:
        os.chmod(filled.parent, 0o755)
        os.chmod(filled, 0o644)


def test_read_only_open_of_a_missing_file_creates_nothing(tmp_path):
    p = tmp_path / "missing.db"
    with pytest.raises(StoreError, match="missing.db"):
        Memory(p, embedder=None, read_only=True)
    assert not p.exists()


def test_opening_a_current_schema_file_takes_no_write_lock(writer_holding_the_lock):
    """Open with a busy timeout far below the holder's lifetime: it must not wait at all."""
    for _ in range(3):
        Memory(writer_holding_the_lock, embedder=None, config=Config(busy_timeout_ms=50)).close()
