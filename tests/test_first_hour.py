"""What a new user meets in the first hour of the core API: bulk notes, duplicates, emoji, paths,
sizes, where a hand-recorded edge came from, a bad embedder argument."""
from __future__ import annotations

import pytest

from causalmem import Memory
from causalmem.ingest import MAX_TEXT_CHARS
from causalmem.tokenizer import tokenize


@pytest.fixture
def mem(tmp_path):
    m = Memory(tmp_path / "first.db", embedder=None)
    yield m
    m.close()


def _temporal(m: Memory) -> int:
    return sum(1 for e in m.edges() if e.relation == "temporal")


# ---------------------------------------------------------------------------- bulk notes
def test_a_list_of_plain_strings_is_separate_memories(mem):
    notes = [f"note number {i} about topic {i}" for i in range(200)]
    chunks = mem.add(notes)
    assert len(chunks) == 200 and _temporal(mem) == 0
    assert mem.add(["first step", "second step", "third step"], link=True) and _temporal(mem) == 2
    # a conversation (role/content dicts) is still a conversation: its turns are linked in order
    mem.add([{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "hello, how can I help?"},
             {"role": "user", "content": "book a table"}])
    assert _temporal(mem) == 4
    mem.add([{"role": "user", "content": "one more"}, {"role": "assistant", "content": "done"}], link=False)
    assert _temporal(mem) == 4
    with pytest.raises(TypeError, match="link"):
        mem.add(["x"], link="yes")


# ---------------------------------------------------------------------------- duplicates
def test_an_exact_duplicate_in_the_same_scope_is_the_same_memory(mem, tmp_path):
    first = mem.add("The staging database runs Postgres 16", user_id="alex")[0]
    again = mem.add("The staging database runs Postgres 16", user_id="alex")[0]
    assert again.id == first.id
    assert len(mem.get_all(user_id="alex")) == 1
    got = mem.get(first.id)
    assert got.access_count == 1 and got.last_accessed_at is not None  # evidence counted, time updated
    mem.add(["The staging database runs Postgres 16", "The staging database runs Postgres 16"], user_id="alex")
    assert len(mem.get_all(user_id="alex")) == 1 and mem.get(first.id).access_count == 3
    # another scope is another memory; the caller can ask for a second copy
    assert mem.add("The staging database runs Postgres 16", user_id="sam")[0].id != first.id
    assert mem.add("The staging database runs Postgres 16", user_id="alex", dedupe=False)[0].id != first.id
    assert len(mem.get_all(user_id="alex")) == 2
    # a turn of a conversation is an event: saying "ok" twice is two turns
    conv = [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "ok"}]
    assert len({c.id for c in mem.add(conv, user_id="alex")}) == 2


# ---------------------------------------------------------------------------- emoji
def test_emoji_are_indexed_and_found(mem):
    assert tokenize("ship it 🚀 now") == ["ship", "🚀", "now"]
    assert tokenize("👍🏽 done") == ["👍", "done"]  # a skin-tone modifier is not a term of its own
    mem.add("launch day 🚀 went well")
    mem.add("lunch was pizza 🍕")
    assert [h.text for h in mem.search("🚀")] == ["launch day 🚀 went well"]
    assert [h.text for h in mem.search("🍕")] == ["lunch was pizza 🍕"]


# ---------------------------------------------------------------------------- paths and sizes
def test_a_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="typo.*does not exist"):
        Memory(tmp_path / "typo" / "dir" / "agent.db", embedder=None)
    assert not (tmp_path / "typo").exists()
    with Memory(tmp_path / "ok.db", embedder=None) as m:  # an existing directory is fine
        m.add("x")


def test_text_size_limit_is_documented_and_enforced(mem):
    assert MAX_TEXT_CHARS == 1_048_576
    fits = "y" * MAX_TEXT_CHARS
    assert mem.get(mem.add(fits)[0].id).text == fits
    too_big = "z" * (MAX_TEXT_CHARS + 1)
    before = mem.stats()["chunks"]
    for call in (lambda: mem.add(too_big), lambda: mem.add(["ok", too_big]),
                 lambda: mem.record_decision(too_big, "outcome")):
        with pytest.raises(ValueError, match="1,048,576 characters"):
            call()
    assert mem.stats()["chunks"] == before


# ---------------------------------------------------------------------------- embedder argument
def test_a_bad_embedder_fails_at_construction_without_network(tmp_path, monkeypatch):
    import socket

    attempts: list = []

    def no_network(*args, **kwargs):
        attempts.append(args)
        raise OSError("network attempted")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(TypeError, match=r"embedder.*'auto'.*local model directory.*encode"):
        Memory(tmp_path / "a.db", embedder=123)
    with pytest.raises(ValueError, match=r"embedder='minilm'.*not a local model directory.*accepted: 'auto'"):
        Memory(tmp_path / "b.db", embedder="minilm")
    with pytest.raises(ValueError, match="embedder"):
        Memory(tmp_path / "c.db", embedder="")

    class HalfEmbedder:
        def encode(self, texts):
            return []

    with pytest.raises(TypeError, match="model_name / dim"):
        Memory(tmp_path / "d.db", embedder=HalfEmbedder())
    assert attempts == [] and not any((tmp_path / n).exists() for n in ("a.db", "b.db", "c.db", "d.db"))
    # what is accepted still opens: None, a backend name, a local model directory, an object
    from toy_embedder import BagOfWordsEmbedder

    for spec in (None, "auto", BagOfWordsEmbedder()):
        with Memory(tmp_path / "ok.db", embedder=spec) as m:
            m.add("fine")


def test_a_session_id_still_chains_single_texts(mem):
    mem.add("first turn of the session", session_id="s1")
    mem.add("second turn of the session", session_id="s1")
    assert _temporal(mem) == 1


# ---------------------------------------------------------------------------- hand-recorded edges
def test_hand_recorded_edges_say_where_they_came_from(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    db = tmp_path / "src.db"
    with Memory(db, embedder=None) as m:
        assert m.record_decision("deploy on friday", "weekend outage").source == "manual"
        m.record_many([("cache the config", "stale config served"),
                       {"decision": "add retries", "outcome": "fewer timeouts"}])
        assert {e.source for e in m.edges()} == {"manual"}
        assert m.record_decision("a", "b", source="user_feedback").source == "user_feedback"
        assert m.record_decision("c", "d").confidence == pytest.approx(0.6)  # unchanged
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH")) if p),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    out = subprocess.run([sys.executable, "-m", "causalmem", "--db", str(db), "record", "restart kafka",
                          "consumers caught up"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    with Memory(db, embedder=None) as m:
        by_dst = {m.get(e.dst).text: e.source for e in m.edges()}
        assert by_dst["consumers caught up"] == "cli"

    anyio = pytest.importorskip("anyio")
    mcp = pytest.importorskip("mcp")

    async def session():
        params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "causalmem.mcp_server", "--db",
                                                                        str(db), "--no-semantic"], env=env)
        async with mcp.Client(mcp.stdio_client(params), read_timeout_seconds=60) as c:
            r = await c.call_tool("remember_decision", {"decision": "scale the pool", "outcome": "latency fell"})
            assert not r.is_error, r.content

    anyio.run(session)
    with Memory(db, embedder=None) as m:
        by_dst = {m.get(e.dst).text: e.source for e in m.edges()}
        assert by_dst["latency fell"] == "mcp"


# ---------------------------------------------------------------------------- what-if follows causal edges
def test_what_if_on_two_unrelated_consecutive_turns_is_unknown(mem):
    mem.add([{"role": "user", "content": "restarted kafka"},
             {"role": "user", "content": "the lunch order errors crashed the app"}])
    assert _temporal(mem) == 1  # the turns are linked as a conversation ...
    report = mem.intervention_query("restarted kafka")
    assert report.label == "UNKNOWN" and report.outcomes == ()  # ... but "next turn" is not a consequence
    mem.record_decision("restarted kafka", "consumers crashed again")
    report = mem.intervention_query("restarted kafka")
    assert report.label == "DANGER"
    assert [o.text for o in report.outcomes] == ["consumers crashed again"]


def test_a_duplicate_text_with_other_metadata_is_another_memory(mem):
    a = mem.add("deploy checklist", metadata={"team": "a"})[0]
    b = mem.add("deploy checklist", metadata={"team": "b"})[0]
    assert a.id != b.id and mem.add("deploy checklist", metadata={"team": "a"})[0].id == a.id
    assert {c.metadata["team"] for c in mem.get_all()} == {"a", "b"}


def test_mcp_write_then_search_finds_the_write(tmp_path):
    """Over a real MCP stdio client, with the semantic channel on: add_messages then search at once finds
    the write through the semantic channel only (no word of the query is in the text)."""
    import os
    import sys
    from pathlib import Path

    anyio = pytest.importorskip("anyio")
    mcp = pytest.importorskip("mcp")
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH")) if p),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    found = []

    async def session():
        params = mcp.StdioServerParameters(command=sys.executable, env=env,
                                           args=["-m", "causalmem.mcp_server", "--db", str(tmp_path / "w.db")])
        async with mcp.Client(mcp.stdio_client(params), read_timeout_seconds=120) as c:
            for i in range(3):
                text = f"My manager is Tomás, he runs the platform team {i}"
                r = await c.call_tool("add_messages", {"messages": [{"role": "user", "content": text}],
                                                       "user_id": f"u{i}"})
                assert not r.is_error, r.content
                r = await c.call_tool("search", {"query": "who is my boss?", "user_id": f"u{i}"})
                assert not r.is_error, r.content
                data = r.structured_content
                hits = data["result"] if set(data) == {"result"} else data
                found.append([h["text"] for h in hits])

    anyio.run(session)
    assert all(any("Tomás" in t for t in hits) for hits in found), found



def _boss_store(db):
    """A store where only the semantic channel connects "who is my boss?" to its answer."""
    m = Memory(db)
    m.add("My manager is Tomás, he runs the platform team")
    m.add("Lunch is at noon")
    m.wait_embedded()
    return m


def _subprocess_env():
    """The environment of a CLI subprocess: this checkout first on the path (and the suite's own
    PYTHONPATH, the PostgreSQL shim), offline model hub."""
    import os
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    path = os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def _cli_on(db):
    """``cli(*args)``: the command line on ``db`` in a subprocess; its stdout, asserting success."""
    import subprocess
    import sys

    env = _subprocess_env()

    def cli(*args):
        out = subprocess.run([sys.executable, "-m", "causalmem", "--db", str(db), *args], capture_output=True,
                             text=True, env=env, timeout=180)
        assert out.returncode == 0, out.stderr
        return out.stdout

    return cli


def test_cli_search_uses_the_semantic_channel_by_default(tmp_path):
    db = tmp_path / "cli.db"
    with _boss_store(db) as m:
        assert "Tomás" in m.search("who is my boss?")[0].text  # Python's default
    cli = _cli_on(db)
    assert "Tomás" in cli("search", "who is my boss?").splitlines()[0]
    assert "(no match)" in cli("search", "who is my boss?", "--no-semantic")


def test_the_inspector_searches_with_the_semantic_channel_by_default(tmp_path):
    import json
    import subprocess
    import sys
    import urllib.parse
    import urllib.request

    db = tmp_path / "ui.db"
    _boss_store(db).close()
    env = _subprocess_env()

    def texts(*extra):
        proc = subprocess.Popen([sys.executable, "-m", "causalmem", "--db", str(db), "ui", *extra],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            line = proc.stdout.readline()
            url = line.split(" on ")[1].split()[0]
            q = urllib.parse.urlencode({"q": "who is my boss?"})
            with urllib.request.urlopen(f"{url}api/search?{q}", timeout=120) as r:
                return json.dumps(json.loads(r.read()), ensure_ascii=False)
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    assert "Tomás" in texts()
    assert "Tomás" not in texts("--no-semantic")


def test_polarity_covers_operational_phrasing_and_negation():
    from causalmem.polarity import guess_polarity

    for text in ("pager went off", "dashboards went stale", "stale config served", "queue backed up",
                 "disk filled up", "pods kept restarting", "build went red", "certificates expired"):
        assert guess_polarity(text) == "negative", text
    for text in ("errors dropped to zero", "build went green", "queue drained", "no more timeouts"):
        assert guess_polarity(text) == "positive", text
    assert guess_polarity("the team met at noon") is None


def _readme_caching_store(db):
    """The README's command-line example: one decision, a caused and a prevented outcome."""
    cli = _cli_on(db)
    cli("record", "enable caching", "faster response", "--confidence", "0.8")
    cli("record", "enable caching", "timeout errors", "--relation", "prevented", "--confidence", "0.85")
    return cli


@pytest.mark.parametrize("channels", [(), ("--no-semantic",)], ids=["default", "no-semantic"])
def test_cli_search_scores_rank_and_mark_the_prevented_outcome(tmp_path, channels):
    cli = _readme_caching_store(tmp_path / "ops.db")
    lines = [ln for ln in cli("search", "caching", *channels).splitlines() if ln.strip()]
    by_text = {}
    for ln in lines:
        score, rest = ln.split(None, 1)
        text = rest.split("] ", 1)[1].split("  ")[0]
        by_text[text] = (float(score), ln)
    assert set(by_text) == {"enable caching", "faster response", "timeout errors"}, lines
    scores = [s for s, _ in by_text.values()]
    assert len(set(scores)) == 3, lines  # distinct evidence, distinct scores (was 1.0000 three times)
    assert scores == sorted(scores, reverse=True), lines  # printed best first
    # the caused outcome is not outranked by the outcome the decision prevented, and they do not tie
    assert by_text["faster response"][0] > by_text["timeout errors"][0], lines
    assert "WARNING (prevented)" in by_text["timeout errors"][1], lines
    assert "WARNING" not in by_text["faster response"][1] and "WARNING" not in by_text["enable caching"][1]


def test_search_scores_follow_the_documented_scale(tmp_path):
    """docs/python.md, "Scores": a direct match scores its own relevance, a graph neighbour gains a
    bonus below the best seed's energy that still grows with what arrives (no tie at the cap), a
    prevented outcome counts by its own (smaller) activation and carries a negative activation."""
    with Memory(str(tmp_path / "s.db"), embedder=None) as m:
        m.record_decision("enable caching", "faster response", confidence=0.8)
        m.record_decision("enable caching", "timeout errors", relation="prevented", confidence=0.85)
        hits = {h.text: h for h in m.search("caching", explain=True)}
    best = hits["enable caching"]
    assert best.score == pytest.approx(1.0)  # the only lexical match: BM25 / best BM25 = 1, nothing above
    caused, prevented = hits["faster response"], hits["timeout errors"]
    assert best.score > caused.score > prevented.score > 0
    assert caused.signals["activation"] > 0 > prevented.signals["activation"]
    assert caused.score == pytest.approx(caused.signals["activation"])
    assert prevented.score == pytest.approx(-prevented.signals["activation"])


def test_what_if_summary_names_every_outcome_and_labels_prevented_ones(devops):
    """The summary line lists every outcome the report (and the inspector's table and graph) shows,
    and a prevented outcome is labelled by what blocking it means: a positive one blocked is a
    WARNING, a negative one blocked is SAFE (never UNKNOWN)."""
    rep = devops.intervention_query("deploy without tests")
    assert len(rep.outcomes) >= 4
    head, names = rep.summary.split(": ", 1)
    assert head == rep.label == "DANGER"
    for o in rep.outcomes:
        assert o.text in names, (o.text, rep.summary)
    assert "safe release (WARNING)" in names  # prevented, positive: a good outcome blocked
    assert "(UNKNOWN)" not in names
    caching = devops.intervention_query("enable caching")
    assert caching.label == "SAFE"
    assert "timeout errors (SAFE)" in caching.summary  # prevented, negative: a bad outcome blocked
