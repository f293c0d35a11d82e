"""``causalmem --version`` and the -v/-q logging switches, run as a real subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import causalmem

REPO = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "causalmem", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_version_names_the_distribution_and_the_kernel():
    r = run("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (f"causalmem-engine {causalmem.__version__} (import causalmem; "
                                "kernel: compiled)")


def test_verbose_levels_log_to_stderr_and_quiet_silences(tmp_path):
    # creating a store logs its migration at INFO; a causal query loads the graph the writer's close
    # left in the index files (DEBUG)
    plain = run("--db", str(tmp_path / "a.db"), "record", "enable caching", "faster response")
    assert plain.returncode == 0 and plain.stderr == ""

    info = run("-v", "--db", str(tmp_path / "b.db"), "record", "enable caching", "faster response")
    assert info.returncode == 0, info.stderr
    assert "INFO causalmem: applying migration 1" in info.stderr
    assert "DEBUG" not in info.stderr
    assert "applying migration" not in info.stdout  # logging never goes to stdout

    debug = run("--db", str(tmp_path / "b.db"), "search-causal", "enable caching", "-vv")
    assert debug.returncode == 0, debug.stderr
    if os.environ.get("CAUSALMEM_TEST_BACKEND") == "postgres":
        # the suite's PostgreSQL pass maps the path to a schema: no index files, the graph is built
        assert "DEBUG causalmem: graph rebuilt (3 nodes, 1 edges)" in debug.stderr
    else:
        assert "DEBUG causalmem: graph loaded from its sidecar" in debug.stderr
    assert "faster response" in debug.stdout

    quiet = run("-q", "--db", str(tmp_path / "c.db"), "record", "enable caching", "faster response")
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert "recorded edge" in quiet.stdout


def test_verbose_and_quiet_together_is_a_usage_error():
    r = run("-q", "-v", "stats")
    assert r.returncode == 2
    assert "not allowed with argument" in r.stderr
