"""``causalmem show`` / ``causalmem ui``, ``Memory.subgraph`` / ``last_sleep_report`` and the README picture."""
from __future__ import annotations

import json
import re
import os
import subprocess
import sys
import time
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from causalmem import Memory
from causalmem.cli import DEVOPS_EDGES, main
from causalmem.viz import SubGraph, dot_binary
from causalmem.viz.readme_picture import main as readme_main
from viz_helpers import build_demo

ROOT = Path(__file__).resolve().parent.parent
SVG = "{http://www.w3.org/2000/svg}"
needs_dot = pytest.mark.skipif(dot_binary() is None, reason="Graphviz dot not installed")


def svg_texts(path: Path) -> list[str]:
    return [t.text for t in ET.parse(path).getroot().iter(f"{SVG}text") if t.text]


@pytest.fixture()
def db(tmp_path):
    path = tmp_path / "agent.db"
    build_demo(path)
    return path


def test_memory_subgraph_delegates_and_last_sleep_report(tmp_path):
    with Memory(tmp_path / "m.db", embedder=None) as mem:
        mem.record_many([{"decision": d, "outcome": o, "relation": r, "confidence": c} for d, o, r, c in DEVOPS_EDGES])
        assert mem.last_sleep_report() is None
        sg = mem.subgraph("deploy without tests", depth=1, direction="forward")
        assert isinstance(sg, SubGraph) and sg.label == "DANGER"
        assert {n.text for n in sg.nodes} == {"deploy without tests", "production crash", "safe release"}
        with pytest.raises(ValueError, match="direction"):
            mem.subgraph("x", direction="up")
        t = float(int(time.time())) + 86400.0  # a day ahead: sleep refuses clocks beyond now + 1 year
        report = mem.sleep(now=t)
        last = mem.last_sleep_report()
        assert last["now"] == t and last["protected"] == report.protected > 0
        mem.sleep(dry_run=True, now=t + 100_000.0)
        assert mem.last_sleep_report()["now"] == t  # a dry run leaves no report


@needs_dot
def test_show_writes_svg_html_and_dot(db, tmp_path, capsys):
    svg = tmp_path / "chain.svg"
    assert main(["--db", str(db), "show", "deploy without tests", "--mode", "what-if", "--out", str(svg)]) == 0
    assert "5 memories, 4 edges, label DANGER" in capsys.readouterr().out
    texts = " ".join(svg_texts(svg))
    for name in ("deploy without tests", "production crash", "safe release", "user complaints", "DANGER"):
        assert name in texts
    html = tmp_path / "chain.html"
    assert main(["--db", str(db), "show", "production crash", "--mode", "reverse", "--depth", "1",
                 "--out", str(html)]) == 0
    page = html.read_text(encoding="utf-8")
    assert "hidden bugs" in page
    # nothing fetched at view time: no external references, and the page's policy forbids them
    assert re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", page) is None and "default-src 'none'" in page
    dot = tmp_path / "chain.dot"
    assert main(["show", "production crash", "--db", str(db), "--mode", "both", "--user-id", "eve",
                 "--out", str(dot)]) == 0
    assert "digraph causalmem" in dot.read_text(encoding="utf-8")


def test_show_errors_are_clear(db, tmp_path, capsys):
    assert main(["--db", str(db), "show", "x", "--out", str(tmp_path / "x.png")]) == 2
    assert "--out must end in .svg, .html or .dot" in capsys.readouterr().err
    assert main(["--db", str(tmp_path / "missing.db"), "show", "x", "--out", str(tmp_path / "x.svg")]) == 2
    assert "no database" in capsys.readouterr().err
    assert not (tmp_path / "missing.db").exists()
    assert main(["--db", str(db), "show", "x", "--depth", "99", "--out", str(tmp_path / "x.html")]) == 2
    assert "depth" in capsys.readouterr().err


def test_show_without_graphviz_says_what_to_install(db, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("CAUSALMEM_DOT", raising=False)
    monkeypatch.setattr("causalmem.viz.export.shutil.which", lambda name: None)
    assert main(["--db", str(db), "show", "deploy without tests", "--out", str(tmp_path / "x.svg")]) == 2
    assert "graphviz" in capsys.readouterr().err.lower()


def test_ui_command_serves_the_inspector(db):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "causalmem", "--db", str(db), "ui"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert "read-only" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        url = line.split(" on ")[1].split()[0]
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "api/sleep", timeout=30) as r:
            body = json.loads(r.read())
        assert body["report"]["protected"] > 0 and body["preview"] is False
        with urllib.request.urlopen(url, timeout=30) as r:
            assert b"causalmem inspector" in r.read()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@needs_dot
def test_readme_picture_regenerates_the_committed_one(tmp_path):
    committed = ROOT / "docs" / "demo_chain.svg"
    out = tmp_path / "demo_chain.svg"
    assert readme_main(["--out", str(out)]) == 0
    assert sorted(svg_texts(out)) == sorted(svg_texts(committed))
