"""The README and the documentation pages against reality.

* the MCP tool count and tool names the pages give are what a real MCP client lists from the server
  (unpinned and pinned to a scope);
* the command list the pages give is what ``causalmem --help`` offers;
* install hints name the distribution ``causalmem-engine``, and the README says plainly that it is
  not yet on the package index;
* no process words (work items, sessions of work, helpers) in the README, the documentation pages,
  the results pages or the package's docstrings: pages name commits and commands.

(The Python examples and ``$ causalmem`` sessions of every page are run by tests/test_readme_examples.py;
the Layout page is checked against the tree by tests/test_layout.py.)
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
MCP_PAGE = DOCS / "mcp.md"
CLI_PAGE = DOCS / "cli.md"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# ----------------------------------------------------------------------------- MCP tools
def _listed_tools(**pin: str) -> list[str]:
    """The tool names a real MCP client (the SDK's ``Client``, in-memory transport) lists from the server."""
    anyio = pytest.importorskip("anyio")
    mcp = pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install -e '.[mcp]')")
    from causalmem import Memory
    from causalmem.mcp_server import build_server

    mem = Memory(":memory:", embedder=None)
    try:
        async def main() -> list[str]:
            async with mcp.Client(build_server(mem, **pin)) as client:
                return [t.name for t in (await client.list_tools()).tools]
        return anyio.run(main)
    finally:
        mem.close()


def _stated_counts(text: str) -> tuple[int, int]:
    """(unpinned, pinned) from a page's ``N tools (M ... pinned ...)``."""
    m = re.search(r"\b(\d+) tools \((\d+) (?:when the server is pinned|on a server pinned)", text)
    assert m, "the page no longer says how many tools the server lists (and how many when pinned)"
    return int(m.group(1)), int(m.group(2))


def test_mcp_tool_counts_on_the_pages_are_what_the_server_lists():
    unpinned, pinned = _listed_tools(), _listed_tools(user_id="bob")
    assert "export" in unpinned and "export" not in pinned
    for page in (README, MCP_PAGE):
        assert _stated_counts(_read(page)) == (len(unpinned), len(pinned)), page.name


def test_mcp_page_names_every_tool_the_server_lists():
    text = _read(MCP_PAGE)
    para = text[text.index(" tools ("): text.index("Every argument is described")]
    named = re.findall(r"`([a-z_]+)`", para)
    assert sorted(set(named)) == sorted(_listed_tools()), para


def test_the_shown_client_session_prints_the_pinned_count():
    """The MCP example runs a server pinned to bob: its shown output is the pinned count."""
    pinned = len(_listed_tools(user_id="bob"))
    for page in (README, MCP_PAGE):
        assert f"\n{pinned} tools\n" in _read(page), page.name


# ----------------------------------------------------------------------------- CLI commands
def _cli_commands() -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "causalmem", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"\{([a-z,-]+)\}", proc.stdout)
    assert m, proc.stdout
    return m.group(1).split(",")


def _listed_commands(text: str, after: str) -> list[str]:
    i = text.index(after)
    para = text[i: text.index("\n\n", i)]
    return re.findall(r"`([a-z][a-z-]*)`", para.split(":", 1)[1])


def test_cli_command_lists_are_what_causalmem_help_offers():
    commands = _cli_commands()
    assert {"embed", "export", "import"} <= set(commands)
    for page, after in ((README, "**Command line**"), (CLI_PAGE, "user's data directory:")):
        listed = [c for c in _listed_commands(_read(page), after) if c in commands or not c.startswith("causalmem")]
        assert sorted(set(listed) & set(commands)) == sorted(commands), (page.name, listed)


# ----------------------------------------------------------------------------- install hints
_OLD_FORM = re.compile(r"(?<![\w-])causalmem\[")


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md")), *sorted((DOCS / "reference").glob("*.md"))]


def test_install_hints_name_the_distribution():
    offenders = [f"{p.relative_to(REPO)}:{k}: {ln.strip()}" for p in _pages()
                 for k, ln in enumerate(_read(p).splitlines(), 1) if _OLD_FORM.search(ln)]
    assert not offenders, "install hints naming causalmem[...] (an unrelated project):\n" + "\n".join(offenders)


def test_readme_says_the_distribution_is_not_yet_published():
    text = _read(README)
    assert "not yet published on the package index" in text
    # the install command shown first is one that works today: from a checkout
    first = re.search(r"```bash\n(.*)\n", text).group(1)
    assert first.startswith("pip install -e . "), first


# ----------------------------------------------------------------------------- process words
#: words of the work process, meaningless to a user: work items by number, sessions or rounds of work,
#: helpers. (Conversation sessions, ONNX sessions and round trips are not matched.)
PROCESS = re.compile(
    r"\bissues?[- ]?#?\d+"
    r"|\bsession \d+\b"
    r"|\b(?:last|next|previous|this|the following|earlier) (?:session|round)(?:'s|s)?\b(?! trip)"
    r"|\bother helpers\b|\bhelper [A-Za-z]*\d+\b|\b(?:this|another|the) helper's\b",
    re.I)


def _process_words(text: str) -> list[str]:
    return [m.group(0) for m in PROCESS.finditer(text)]


def test_the_pattern_finds_process_words_and_spares_ordinary_ones():
    assert _process_words("fixed in issue 10; issue-14 too; last session's runs; helper H4's file") == [
        "issue 10", "issue-14", "last session's", "helper H4"]
    assert _process_words("the change check is one round trip; each session of a conversation; "
                          "the ONNX session; a turn of a session") == []


def test_no_process_words_in_readme_docs_and_results_pages():
    pages = [*_pages(), *sorted((REPO / "benchmarks" / "results").glob("*.md"))]
    if (REPO / "CHANGELOG.md").exists():
        pages.append(REPO / "CHANGELOG.md")
    offenders = [f"{p.relative_to(REPO)}:{k}: {w!r}" for p in pages
                 for k, ln in enumerate(_read(p).splitlines(), 1) for w in _process_words(ln)]
    assert not offenders, "process words in the pages (name commits and commands instead):\n" + "\n".join(offenders)


def test_no_process_words_in_docstrings():
    offenders = []
    paths = [*(REPO / "causalmem").rglob("*.py"), *(REPO / "benchmarks").glob("*.py"), *(REPO / "tests").glob("*.py")]
    for path in sorted(paths):
        tree = ast.parse(_read(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                for w in _process_words(doc or ""):
                    offenders.append(f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 1)}: {w!r}")
    assert not offenders, "process words in docstrings:\n" + "\n".join(offenders)
