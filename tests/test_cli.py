"""The command line, run as a real subprocess (`python -m causalmem`)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "causalmem", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_demo_prints_forward_reverse_and_what_if():
    r = run("demo")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "+0.4725  production crash" in out
    assert "-0.1339  safe release  WARNING (prevented)" in out
    assert "+0.3675  hidden bugs" in out and "+0.2187  skip code review" in out
    assert "what if: 'deploy without tests' -> DANGER" in out
    assert "what if: 'enable caching' -> SAFE" in out
    assert "no precedent" in out


def test_record_query_and_stats_on_a_file(tmp_path):
    db = str(tmp_path / "cli.db")
    assert run("--db", db, "record", "enable caching", "faster response", "--confidence", "0.8").returncode == 0
    r = run("--db", db, "record", "enable caching", "timeout errors", "--relation", "prevented",
            "--confidence", "0.85")
    assert r.returncode == 0 and "prevented" in r.stdout
    r = run("--db", db, "search-causal", "enable caching")
    assert "+0.4200  faster response" in r.stdout and "-0.1339  timeout errors" in r.stdout
    r = run("--db", db, "trace", "faster response")
    assert "enable caching" in r.stdout
    r = run("--db", db, "what-if", "enable caching")
    assert "-> SAFE" in r.stdout
    r = run("search", "caching", "--db", db)  # --db after the subcommand works too
    assert "enable caching" in r.stdout
    r = run("stats", env_extra={"CAUSALMEM_DB": db})
    assert r.returncode == 0 and "edges" in r.stdout and " 2" in r.stdout


def test_bad_input_is_a_clear_error_with_exit_code_2(tmp_path):
    db = str(tmp_path / "cli.db")
    r = run("--db", db, "record", "x", "y", "--relation", "causes")
    assert r.returncode == 2
    assert "unknown relation 'causes'" in r.stderr and "Traceback" not in r.stderr
    r = run("--db", db, "record", "", "y")
    assert r.returncode == 2 and "decision" in r.stderr
    bad = tmp_path / "notes.txt"
    bad.write_text("not a database")
    r = run("--db", str(bad), "stats")
    assert r.returncode == 2 and "not a SQLite database" in r.stderr


def test_sleep_prints_the_report_table(tmp_path):
    db = str(tmp_path / "cli.db")
    run("--db", db, "record", "skip code review", "hidden bugs crashed production", "--confidence", "0.9")
    dry = run("--db", db, "sleep", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "dry run" in dry.stdout.lower() and "protected" in dry.stdout
    wet = run("--db", db, "sleep")
    assert wet.returncode == 0 and "retired" in wet.stdout
