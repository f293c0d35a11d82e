"""The layout's promises, checked on the source tree: no import cycle inside ``causalmem``, SQL only
in the store backends, no reach into a ``Memory``'s private parts outside the facade, and a typed
public API (mypy rejects a wrong argument type in user code)."""
from __future__ import annotations

import ast
import os
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The checkout's package; from a tests-only copy (the installed-wheel run of .ci/wheel_check.sh)
# the installed one, found without importing it.
PKG = (ROOT / "causalmem" if (ROOT / "causalmem").is_dir()
       else Path(importlib.util.find_spec("causalmem").origin).parent)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    """Python modules and compiled extensions (``*.pyx``) of the package."""
    return {_module_name(p): p for p in sorted([*PKG.rglob("*.py"), *PKG.rglob("*.pyx")])}


def _resolve(current: str, is_package: bool, level: int, module: str | None) -> str:
    """Absolute name of a (possibly relative) ``from ... import`` target."""
    if level == 0:
        return module or ""
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _runtime_nodes(tree: ast.AST):
    """Every node except the bodies of ``if TYPE_CHECKING:`` blocks (never executed)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                todo.extend(child.orelse)
                continue
            todo.append(child)


def import_graph(*, type_checking: bool = False) -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere in its body (lazy imports inside functions
    included); with ``type_checking`` also the imports for type checkers only, under
    ``if TYPE_CHECKING:`` (never run, but a dependency all the same), else those are left out."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        if path.suffix != ".py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in (ast.walk(tree) if type_checking else _runtime_nodes(tree)):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node.level, node.module)
                # "from . import x" / "from .pkg import mod" import submodules; else names of ``base``
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                while t and t not in mods:  # "causalmem.store.base.X" -> the module that defines it
                    t = t.rpartition(".")[0]
                if t and t != name:
                    graph[name].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path [a, b, ..., a], or None (iterative DFS, white/grey/black)."""
    colour = dict.fromkeys(graph, 0)
    for start in sorted(graph):
        if colour[start]:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        colour[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour[nxt] == 1:
                return path[path.index(nxt):] + [nxt]
            elif colour[nxt] == 0:
                colour[nxt] = 1
                stack.append((nxt, iter(sorted(graph[nxt]))))
                path.append(nxt)
    return None


def test_cycle_finder_finds_a_planted_cycle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(g) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_import_graph_sees_lazy_and_relative_imports():
    g = import_graph()
    assert "causalmem.store.sqlite" in g["causalmem.store"]
    assert "causalmem.store.base" in g["causalmem.views"]
    assert "causalmem.memory" in g["causalmem.cli"]  # imported inside a function
    assert "causalmem.retrieval" in g["causalmem.memory"]  # "from . import retrieval"
    assert "causalmem.memory" not in g["causalmem"]  # only under TYPE_CHECKING there


def test_causalmem_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_import_graph_with_type_checking_sees_imports_inside_functions_and_type_checking_blocks():
    g = import_graph(type_checking=True)
    assert "causalmem.memory" in g["causalmem.cli"]  # inside a function
    assert "causalmem.memory" in g["causalmem"]  # under TYPE_CHECKING only


def test_causalmem_has_no_import_cycle_counting_type_checking_imports():
    """No circle even among the imports a type checker follows: every module can be read (and
    typed) after the ones it names, and a background worker depends on the protocol it is given."""
    cycle = find_cycle(import_graph(type_checking=True))
    assert cycle is None, "import cycle (TYPE_CHECKING and function-level imports counted): " + " -> ".join(cycle or [])


def private_imports() -> list[str]:
    """``from .x import _name`` across modules: a module taking another module's private name (a
    private *submodule*, such as ``from . import _kernels``, and dunders such as ``__version__`` are
    not names of a module's own)."""
    mods = _modules()
    found = []
    for name, path in mods.items():
        if path.suffix != ".py":
            continue
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _resolve(name, is_package, node.level, node.module)
            if base != "causalmem" and not base.startswith("causalmem."):
                continue
            for a in node.names:
                private = a.name.startswith("_") and not (a.name.startswith("__") and a.name.endswith("__"))
                if private and f"{base}.{a.name}" not in mods:
                    found.append(f"{path.relative_to(PKG.parent).as_posix()}:{node.lineno}: from {base} import {a.name}")
    return found


def test_no_module_imports_another_modules_private_name():
    offenders = private_imports()
    assert not offenders, "private names imported across modules:\n" + "\n".join(offenders)


_SQL = re.compile(r"\b(SELECT\s+\S|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX)|"
                  r"PRAGMA\s+\w)", re.IGNORECASE)
# the backends: SQLite in one module, PostgreSQL in its module and the parts split from it by role
_SQL_HOMES = {"causalmem/store/sqlite.py", "causalmem/store/postgres.py", "causalmem/store/_common.py",
              *(f"causalmem/store/postgres_{part}.py" for part in ("schema", "cache", "wire", "follow", "scoped"))}


def test_sql_only_in_store_backends():
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).as_posix()
        if rel in _SQL_HOMES:
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _SQL.search(line):
                offenders.append(f"{rel}:{i}: {line.strip()}")
    assert not offenders, "SQL outside the store backends:\n" + "\n".join(offenders)


MEMORY_LINE_BUDGET = 400


def test_memory_facade_stays_within_its_line_budget():
    """The facade validates, locks and delegates; bodies live in the pipeline modules."""
    n = len((PKG / "memory.py").read_text(encoding="utf-8").splitlines())
    assert n <= MEMORY_LINE_BUDGET, (f"causalmem/memory.py has {n} lines (budget {MEMORY_LINE_BUDGET}): move method "
                                     "bodies into a pipeline module and delegate in one line")


_MEMORY_PRIVATE = re.compile(r"\b(mem|memory|self\.memory|self\._memory|self\._mem|m)\._[a-z]\w*")


def test_no_reach_into_memory_privates_outside_the_facade():
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).as_posix()
        if rel == "causalmem/memory.py":
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _MEMORY_PRIVATE.search(line):
                offenders.append(f"{rel}:{i}: {line.strip()}")
    assert not offenders, "private Memory attributes used outside memory.py:\n" + "\n".join(offenders)


_GOOD = """
from causalmem import CausalMemError, Hit, Memory

mem: Memory = Memory(":memory:", embedder=None)
hits: list[Hit] = mem.search("deploy", top_k=3)
edge = mem.record_decision("deploy without tests", "production crash")
confidence: float = edge.confidence
err: type[Exception] = CausalMemError
"""

_BAD = """
from causalmem import Memory

mem = Memory(":memory:", embedder=None)
mem.search(42)
"""


@pytest.mark.skipif(shutil.which("mypy") is None and subprocess.run(
    [sys.executable, "-c", "import mypy"], capture_output=True).returncode != 0, reason="mypy not installed")
def test_mypy_sees_the_public_api(tmp_path):
    (tmp_path / "good.py").write_text(_GOOD)
    (tmp_path / "bad.py").write_text(_BAD)
    # causalmem is followed silently (its own errors are ``mypy causalmem``'s business); numpy and
    # scipy are not followed at all, which keeps this check to seconds.
    (tmp_path / "mypy.ini").write_text("[mypy]\nfollow_imports = silent\nignore_missing_imports = True\n"
                                       "[mypy-numpy.*,scipy.*]\nfollow_imports = skip\n")
    env = dict(os.environ, MYPYPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--no-error-summary",
         "--cache-dir", str(tmp_path / ".mypy_cache"), "good.py", "bad.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert errors and all(line.startswith("bad.py:5:") for line in errors), out
    assert 'Argument 1 to "search" of "Memory" has incompatible type "int"; expected "str"' in out, out


def test_readme_layout_block_lists_every_module():
    text = "\n" + (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")  # the README's Layout block moved there
    start = text.index("\n# Layout\n")
    block_start = text.index("```\n", start) + 4
    block = text[block_start: text.index("```\n", block_start)]
    listed = re.findall(r"^\s*(causalmem/\S+\.(?:py|pyx))\s", block, re.M)
    actual = sorted(p.relative_to(PKG.parent).as_posix() for p in [*PKG.rglob("*.py"), *PKG.rglob("*.pyx")])
    assert len(listed) == len(set(listed)), "a module is listed twice in the README Layout block"
    missing = sorted(set(actual) - set(listed))
    stale = sorted(set(listed) - set(actual))
    assert not missing and not stale, f"README Layout block: missing {missing}, not in the tree {stale}"
