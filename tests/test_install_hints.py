"""Every install hint names the distribution, ``causalmem-engine[...]``.

The import package is ``causalmem`` but the distribution on the package index is
``causalmem-engine``; ``pip install 'causalmem[mcp]'`` would install an unrelated project that
owns the old name. No file of the package (code, docstrings, messages, static pages) may print
or document the old form.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import causalmem

PACKAGE = Path(causalmem.__file__).resolve().parent
ROOT = PACKAGE.parent
OLD_FORM = re.compile(r"(?<![\w-])causalmem\[")


def _text_files():
    for path in sorted(PACKAGE.rglob("*")):
        if not path.is_file() or path.suffix in {".so", ".pyd", ".cpp", ".c", ".pyc", ".onnx"}:
            continue
        try:
            yield path, path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue


def test_no_install_hint_names_the_old_distribution():
    offenders = []
    for path, text in _text_files():
        for lineno, line in enumerate(text.splitlines(), 1):
            if OLD_FORM.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    pyproject = ROOT / "pyproject.toml"
    if pyproject.exists():
        for lineno, line in enumerate(pyproject.read_text(encoding="utf-8").splitlines(), 1):
            if OLD_FORM.search(line):
                offenders.append(f"pyproject.toml:{lineno}: {line.strip()}")
    assert not offenders, "install hints naming causalmem[...]:\n" + "\n".join(offenders)


def test_the_pattern_catches_the_old_form_and_spares_the_new():
    assert OLD_FORM.search("pip install 'causalmem[mcp]'")
    assert OLD_FORM.search("(needs causalmem[mcp])")
    assert not OLD_FORM.search("pip install 'causalmem-engine[mcp]'")


def test_cli_help_names_the_distribution():
    out = subprocess.run([sys.executable, "-m", "causalmem", "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "causalmem[" not in out.stdout.replace("causalmem-engine[", "")
    assert "causalmem-engine[mcp]" in out.stdout
