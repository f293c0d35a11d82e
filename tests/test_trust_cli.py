"""Every flag the command line accepts is honoured."""
from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "causalmem", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def _stat(out: str, key: str) -> int:
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == key:
            return int(parts[1])
    raise AssertionError(f"{key} not in {out!r}")


def test_stats_user_id_counts_only_that_user(tmp_path):
    db = str(tmp_path / "s.db")
    for user, n in (("alice", 1), ("bob", 3)):
        for i in range(n):
            assert _cli("--db", db, "record", f"{user} decision {i}", f"{user} outcome {i}",
                        "--user-id", user).returncode == 0
    alice = _cli("--db", db, "stats", "--user-id", "alice")
    bob = _cli("--db", db, "stats", "--user-id", "bob")
    every = _cli("--db", db, "stats")
    assert _stat(alice.stdout, "chunks") == 2 and _stat(alice.stdout, "edges") == 1
    assert _stat(bob.stdout, "chunks") == 6 and _stat(bob.stdout, "edges") == 3
    assert _stat(every.stdout, "chunks") == 8 and _stat(every.stdout, "edges") == 4


def test_demo_db_writes_the_demo_into_that_file(tmp_path):
    db = tmp_path / "demo.db"
    r = _cli("demo", "--db", str(db))
    assert r.returncode == 0, r.stderr
    assert db.exists()
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM edges").fetchone()[0] == 11
    con.close()
    r = _cli("--db", str(db), "what-if", "deploy without tests")
    assert "DANGER" in r.stdout


def test_user_id_is_honoured_by_every_query_command(tmp_path):
    db = str(tmp_path / "q.db")
    _cli("--db", db, "record", "rotate keys", "alice outcome", "--user-id", "alice")
    _cli("--db", db, "record", "rotate keys", "bob outcome", "--user-id", "bob")
    for cmd in (["search", "rotate"], ["search-causal", "rotate keys"], ["what-if", "rotate keys"],
                ["trace", "bob outcome"]):
        r = _cli("--db", db, *cmd, "--user-id", "alice")
        assert r.returncode == 0, r.stderr
        body = r.stdout.split("\n", 1)[1]  # the first line echoes the query
        assert "bob" not in body, (cmd, r.stdout)


def _options(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for name, sp in sub.choices.items():
        out[name] = sorted({a.dest for a in sp._actions if a.dest not in ("help",) and a.option_strings})
    return out


class SpyArgs(argparse.Namespace):
    """Records which attributes the command read."""

    def __init__(self, **kw):
        super().__init__(**kw)
        object.__setattr__(self, "_read", set())

    def __getattribute__(self, name):
        if not name.startswith("_"):
            object.__getattribute__(self, "_read").add(name)
        return object.__getattribute__(self, name)


COMMAND_ARGS = {
    "record": ["d", "o"], "search": ["q"], "search-causal": ["q"], "trace": ["q"], "what-if": ["q"],
    "stats": [], "sleep": [], "demo": [], "export": ["OUT"], "import": ["IN"],
}


@pytest.mark.parametrize("command", sorted(COMMAND_ARGS))
def test_every_accepted_flag_is_read_by_its_command(tmp_path, command):
    """A flag that parses but is never read is a flag that is silently ignored."""
    import io

    from causalmem import Memory
    from causalmem.cli import build_parser

    db = tmp_path / "f.db"
    with Memory(db, embedder=None) as m:
        m.record_decision("d", "o")
        m.export(tmp_path / "in.jsonl")
    parser = build_parser()
    opts = _options(parser)[command]
    positional = [str(tmp_path / ("out.jsonl" if a == "OUT" else "in.jsonl")) if a in ("OUT", "IN") else a
                  for a in COMMAND_ARGS[command]]
    target = tmp_path / "g.db" if command in ("import", "demo") else db
    ns = parser.parse_args([command, *positional, "--db", str(target)])
    spy = SpyArgs(**vars(ns))
    assert ns.func(spy, io.StringIO()) == 0
    read_by_main = {"verbose", "quiet"}  # main() configures logging from them before dispatching
    unread = set(opts) - object.__getattribute__(spy, "_read") - read_by_main
    assert not unread, f"{command} accepts {sorted(unread)} but never reads them"
