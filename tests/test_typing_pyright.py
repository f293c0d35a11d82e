"""pyright sees the public API's real types: ``from causalmem import Memory`` is the class, and a
wrong argument type is reported.  pyright (from PyPI, the ``test`` extra) runs on the machine's
node; the package is resolved from the checkout when the tests sit in one, else from the
interpreter running the tests (an installed wheel, through its ``py.typed``)."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("pyright") is None, reason="pyright is not installed"),
    pytest.mark.skipif(shutil.which("node") is None,
                       reason="pyright needs node on PATH (it would try to download one)"),
]

SNIPPET = """\
from causalmem import Memory

mem = Memory("agent.db", embedder=None)
reveal_type(Memory)
edge = mem.record_decision("deploy without tests", "production crash", confidence=0.9)
reveal_type(edge)
mem.record_decision(123, "production crash")
"""


def test_pyright_reports_the_wrong_argument_type(tmp_path):
    (tmp_path / "snippet.py").write_text(SNIPPET)
    config = {"pythonVersion": f"{sys.version_info.major}.{sys.version_info.minor}"}
    if (REPO / "causalmem" / "__init__.py").is_file():
        config["extraPaths"] = [str(REPO)]
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(config))
    res = subprocess.run(
        [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable, "snippet.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert res.stdout.strip().startswith("{"), res.stdout[-2000:] + res.stderr[-2000:]
    diags = json.loads(res.stdout)["generalDiagnostics"]
    errors = [d for d in diags if d["severity"] == "error"]
    infos = {d["range"]["start"]["line"]: d["message"] for d in diags if d["severity"] == "information"}
    # the one error: line 7 (0-based 6), the int passed as the decision text
    assert len(errors) == 1, errors
    assert errors[0]["range"]["start"]["line"] == 6
    assert '"decision"' in errors[0]["message"] and '"str"' in errors[0]["message"]
    assert infos[3] == 'Type of "Memory" is "type[Memory]"'
    assert infos[5] == 'Type of "edge" is "Edge"'
    assert res.returncode == 1
