"""``import causalmem`` stays lean: nothing heavy (scipy, the ONNX runtime, usearch, torch,
sentence-transformers) is imported before it is needed — not by the import, not by opening a
store, not by a write or a lexical-only search. Each check runs in a fresh interpreter, so a module
another test imported cannot hide one the package pulls in."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("scipy", "onnxruntime", "usearch", "torch", "sentence_transformers", "transformers")


def _modules_after(code: str, *args: str) -> list[str]:
    script = textwrap.dedent(code) + textwrap.dedent(f"""
    import json, sys
    print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))
    """)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=str(REPO), capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_check_sees_a_heavy_module_when_one_is_imported():
    assert _modules_after("import sys, types; sys.modules['usearch'] = types.ModuleType('usearch')") == ["usearch"]


def test_import_causalmem_imports_nothing_heavy():
    assert _modules_after("import causalmem; causalmem.Memory; causalmem.Config; causalmem.__version__") == []


def test_open_write_and_lexical_search_with_the_default_memory_import_nothing_heavy(tmp_path):
    db = str(tmp_path / "m.db")
    assert _modules_after("""
    import sys
    from causalmem import Memory, view_embedding
    # the background worker would load the model a moment after the write to embed it (needed then):
    # held off here, so the check does not depend on how fast this process runs
    view_embedding.RESUME_DELAY_S = view_embedding.WORKER_START_DELAY_S = 3600.0
    # the default embedder (loaded when a vector is needed, not before); no hand-off process at exit
    m = Memory(sys.argv[1], embed_handoff="off")
    m.record_many([("deploy without tests", "production crash"), ("cache warmed", "latency fell")])
    hits = m.search("production crash", channels=("lexical",), reinforce=False)
    assert hits, hits
    m.search_causal("deploy without tests")
    """, db) == []
