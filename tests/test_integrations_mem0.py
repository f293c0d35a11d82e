"""mem0-compatible API: method names, arguments and return shapes of mem0's Memory / AsyncMemory."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from causalmem.integrations.mem0 import AsyncMemory, Memory

REPO = Path(__file__).resolve().parents[1]

# A script in the style of mem0's documented Python quickstart (both its 0.x and current call forms).
QUICKSTART = textwrap.dedent('''
    import json
    from mem0 import Memory

    m = Memory()

    messages = [
        {"role": "user", "content": "Hi, I'm Alex. I love basketball and gaming."},
        {"role": "assistant", "content": "Hey Alex! I'll remember your interests."},
    ]
    added = m.add(messages, user_id="alex", metadata={"category": "hobbies"})
    m.add("I'm allergic to peanuts", user_id="alex", metadata={"category": "health"})
    m.add("Sam prefers tea over coffee", user_id="sam")

    results = m.search("What do you know about me?", filters={"user_id": "alex"})
    related = m.search(query="basketball", user_id="alex", limit=3)
    health = m.search("food allergy", filters={"user_id": "alex", "category": "health"})

    all_memories = m.get_all(user_id="alex")
    memory_id = related["results"][0]["id"]
    specific = m.get(memory_id)
    m.update(memory_id=memory_id, data="I love tennis now")
    history = m.history(memory_id=memory_id)
    after_update = m.get(memory_id)
    m.delete(memory_id=memory_id)
    gone = m.get(memory_id)
    m.delete_all(user_id="alex")
    left_alex = m.get_all(filters={"user_id": "alex"})
    m.reset()
    left_all = m.get_all(user_id="sam")
    print(json.dumps({"added": added, "results": results, "related": related, "health": health,
                      "all": all_memories, "specific": specific, "history": history, "after_update": after_update,
                      "gone": gone, "left_alex": left_alex, "left_all": left_all}))
''')


def test_quickstart_script_runs_unchanged_after_swapping_the_import(tmp_path):
    script = QUICKSTART.replace("from mem0 import Memory", "from causalmem.integrations.mem0 import Memory")
    assert script.count("\n") == QUICKSTART.count("\n") and script != QUICKSTART  # only the import changed
    (tmp_path / "quickstart.py").write_text(script)
    env = dict(os.environ, PYTHONPATH=str(REPO), CAUSALMEM_DB=str(tmp_path / "mem0.db"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([sys.executable, str(tmp_path / "quickstart.py")], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [r["event"] for r in out["added"]["results"]] == ["ADD", "ADD"]
    assert [r["role"] for r in out["added"]["results"]] == ["user", "assistant"]
    res = out["results"]["results"]
    assert res and all(r["user_id"] == "alex" for r in res)
    assert all(0.0 <= r["score"] <= 1.0 for r in res)
    assert [r["score"] for r in res] == sorted((r["score"] for r in res), reverse=True)
    assert {"id", "memory", "hash", "metadata", "score", "created_at", "updated_at", "user_id"} <= set(res[0])
    assert out["related"]["results"][0]["memory"] == "Hi, I'm Alex. I love basketball and gaming."
    assert len(out["related"]["results"]) <= 3
    assert [r["memory"] for r in out["health"]["results"]] == ["I'm allergic to peanuts"]
    assert out["health"]["results"][0]["metadata"] == {"category": "health"}
    assert len(out["all"]["results"]) == 3 and not any(r["memory"].startswith("Sam") for r in out["all"]["results"])
    assert out["specific"]["memory"] == "Hi, I'm Alex. I love basketball and gaming."
    assert out["specific"]["metadata"] == {"category": "hobbies"} and out["specific"]["role"] == "user"
    assert [h["event"] for h in out["history"]] == ["ADD", "UPDATE"]
    assert out["history"][1]["old_memory"].endswith("basketball and gaming.")
    assert out["history"][1]["new_memory"] == "I love tennis now"
    assert out["after_update"]["memory"] == "I love tennis now"
    assert out["after_update"]["updated_at"] >= out["after_update"]["created_at"]
    assert out["gone"] is None
    assert out["left_alex"] == {"results": []}
    assert out["left_all"] == {"results": []}


@pytest.fixture
def m(tmp_path):
    mem = Memory(str(tmp_path / "m.db"), embedder=None)
    yield mem
    mem.close()


def test_metadata_filters_with_mem0_operators(m):
    m.add("deploy the billing service", user_id="u", metadata={"team": "billing", "priority": 3, "tags": ["ops"]})
    m.add("deploy the search service", user_id="u", metadata={"team": "search", "priority": 1})
    m.add("deploy the auth service", user_id="u", metadata={"team": "auth", "priority": 5, "tags": ["sec", "ops"]})

    def ids(**kw):
        return sorted(r["metadata"]["team"] for r in m.search("deploy service", **kw)["results"])

    assert ids(filters={"user_id": "u", "team": "billing"}) == ["billing"]
    assert ids(filters={"user_id": "u", "priority": {"gte": 3}}) == ["auth", "billing"]
    assert ids(filters={"user_id": "u", "team": {"in": ["auth", "search"]}}) == ["auth", "search"]
    assert ids(filters={"user_id": "u", "team": {"nin": ["auth"]}}) == ["billing", "search"]
    assert ids(filters={"user_id": "u", "team": {"ne": "auth"}, "priority": {"lt": 3}}) == ["search"]
    assert ids(filters={"user_id": "u", "tags": {"contains": "sec"}}) == ["auth"]
    assert ids(filters={"user_id": "u", "team": {"icontains": "BILL"}}) == ["billing"]
    assert ids(filters={"user_id": "u", "tags": "*"}) == ["auth", "billing"]
    assert ids(filters={"user_id": "u", "OR": [{"team": "search"}, {"priority": {"gt": 4}}]}) == ["auth", "search"]
    assert ids(filters={"user_id": "u", "NOT": [{"team": "search"}]}) == ["auth", "billing"]
    assert ids(filters={"user_id": "u", "AND": [{"priority": {"gt": 1}}, {"priority": {"lt": 5}}]}) == ["billing"]
    got = m.get_all(filters={"user_id": "u", "priority": {"gt": 2}})["results"]
    assert sorted(r["metadata"]["team"] for r in got) == ["auth", "billing"]
    with pytest.raises(ValueError, match="regex"):
        m.search("deploy", filters={"user_id": "u", "team": {"regex": "b.*"}})


def test_scores_threshold_limits_and_validation(m):
    m.add("the staging database runs postgres 16", user_id="u")
    m.add("lunch is at noon", user_id="u")
    res = m.search("postgres database", user_id="u")["results"]
    assert res[0]["memory"] == "the staging database runs postgres 16"
    assert all(0.0 <= r["score"] <= 1.0 for r in res)
    # embedder=None: no cosine to gate, so threshold gates the score (with one, the cosine: test_threshold_gates_the_cosine_*)
    high = m.search("postgres database", user_id="u", threshold=0.99)["results"]
    assert all(r["score"] >= 0.99 for r in high)
    assert len(m.search("postgres database", user_id="u", top_k=1)["results"]) == 1
    with pytest.raises(ValueError, match="threshold"):
        m.search("x", user_id="u", threshold=2)
    with pytest.raises(ValueError, match="disagree"):
        m.search("x", user_id="u", top_k=2, limit=3)
    with pytest.raises(ValueError, match="user_id"):
        m.search("x", user_id="u", filters={"user_id": "v"})
    with pytest.raises(ValueError, match="delete_all"):
        m.delete_all()
    with pytest.raises(ValueError, match="not found"):
        m.delete("no-such-id")
    with pytest.raises(ValueError, match="not found"):
        m.update("no-such-id", "text")
    with pytest.raises(ValueError, match="role"):
        m.add([{"content": "no role"}], user_id="u")
    assert m.get("no-such-id") is None
    assert m.add([{"role": "system", "content": "you are helpful"}], user_id="u") == {"results": []}


def test_update_metadata_only_and_explain(m):
    mid = m.add("prefers dark mode", user_id="u", metadata={"category": "ui"})["results"][0]["id"]
    assert m.update(mid, metadata={"category": "preferences", "source": "settings"}) == {
        "message": "Memory updated successfully!"}
    got = m.get(mid)
    assert got["memory"] == "prefers dark mode"
    assert got["metadata"] == {"category": "preferences", "source": "settings"}
    assert [r["id"] for r in m.search("dark mode", filters={"user_id": "u", "category": "preferences"})["results"]] \
        == [mid]
    assert m.search("dark mode", filters={"user_id": "u", "category": "ui"})["results"] == []
    details = m.search("dark mode", user_id="u", explain=True)["results"][0]["score_details"]
    assert "lexical_rank" in details


def test_from_config_and_async(tmp_path):
    cfg = {"vector_store": {"provider": "qdrant", "config": {"path": str(tmp_path / "cfg.db")}},
           "embedder": None, "version": "v1.1"}
    mem = Memory.from_config(cfg)
    assert mem.memory.path == str(tmp_path / "cfg.db") and mem.memory.embedder is None
    mem.close()
    with pytest.raises(ValueError, match="unknown config keys"):
        Memory.from_config({"vectorstore": {}})

    async def main():
        am = AsyncMemory.from_config({"path": str(tmp_path / "async.db"), "embedder": None})
        added = await asyncio.gather(*(am.add(f"fact number {i}", user_id="a") for i in range(5)))
        assert all(a["results"][0]["event"] == "ADD" for a in added)
        res = await am.search("fact number 3", filters={"user_id": "a"}, top_k=1)
        mid = res["results"][0]["id"]
        assert res["results"][0]["memory"] == "fact number 3"
        await am.update(mid, "fact number three")
        assert (await am.get(mid))["memory"] == "fact number three"
        assert [h["event"] for h in await am.history(mid)] == ["ADD", "UPDATE"]
        assert len((await am.get_all(user_id="a"))["results"]) == 5
        await am.delete(mid)
        await am.delete_all(user_id="a")
        assert (await am.get_all(user_id="a"))["results"] == []
        await am.aclose()

    asyncio.run(main())


def test_from_config_llm_makes_infer_the_default(tmp_path, monkeypatch):
    """With an `llm` in the config, add() infers by default (mem0's default) through a real HTTP endpoint."""
    from llm_server import FakeLLM

    for var in ("CAUSALMEM_LLM_BASE_URL", "CAUSALMEM_LLM_MODEL", "CAUSALMEM_LLM_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with FakeLLM(default='[{"kind": "fact", "text": "Alex plays basketball on Sundays"}]') as llm:
        m = Memory.from_config({"path": str(tmp_path / "llm.db"), "embedder": None,
                                "llm": {"provider": "openai", "config": {"openai_base_url": llm.base_url,
                                                                         "model": "fake-model", "api_key": "k"}}})
        m.add("I play basketball every Sunday", user_id="alex")
        assert len(llm.requests) == 1 and "basketball every Sunday" in llm.requests[0]["messages"][-1]["content"]
        texts = {r["memory"] for r in m.get_all(user_id="alex")["results"]}
        assert texts == {"I play basketball every Sunday", "Alex plays basketball on Sundays"}
        m.add("no inference for this one", user_id="alex", infer=False)
        assert len(llm.requests) == 1
        m.close()
    plain = Memory(str(tmp_path / "plain.db"), embedder=None)
    with pytest.raises(Exception, match="distiller"):
        plain.add("x", user_id="alex", infer=True)
    plain.close()


# ---------------------------------------------------------------------------- learning from the caller
PAYMENTS_Q = "When does the payments service deploy?"
PAIR = ("The payments service deploys on Fridays.", "The payments service deploys on Mondays.")
OTHERS = ("Lunch is at noon.", "Kim is on call for search this week.")


def _memories(res: dict) -> list[str]:
    return [r["memory"] for r in res["results"]]


def test_feedback_on_a_lower_result_ranks_it_first_for_its_user_only(tmp_path):
    """Default embedder (the packaged MiniLM), mem0's platform idiom: feedback(memory_id, "POSITIVE") on
    the second of two near-equal answers ranks it first in the next search; sam holds the same texts
    and his ranking does not move. VERY_NEGATIVE sends it back; sync and async."""
    m = Memory(str(tmp_path / "fb.db"))
    assert m.memory.embedder is not None and m.memory.config.q_rank
    for text in (*PAIR, *OTHERS):
        m.add(text, user_id="alex")
        m.add(text, user_id="sam")
    res = m.search(PAYMENTS_Q, filters={"user_id": "alex"}, top_k=3)["results"]
    assert {r["memory"] for r in res[:2]} == set(PAIR)
    top, low = res[0], res[1]
    sam_before = _memories(m.search(PAYMENTS_Q, user_id="sam", top_k=3))
    assert _memories(m.search(PAYMENTS_Q, user_id="alex", top_k=3)) == [r["memory"] for r in res]
    out = m.feedback(low["id"], "POSITIVE", "it was the right day", user_id="alex")
    assert out["memory_id"] == low["id"] and out["feedback"] == "POSITIVE" and out["reward"] == 1.0
    assert out["feedback_reason"] == "it was the right day" and out["q_value"] > m.memory.config.q_init
    after = m.search(PAYMENTS_Q, filters={"user_id": "alex"}, top_k=3)["results"]
    assert [r["id"] for r in after[:2]] == [low["id"], top["id"]]
    assert _memories(m.search(PAYMENTS_Q, user_id="sam", top_k=3)) == sam_before
    m.close()

    async def main():
        am = AsyncMemory(str(tmp_path / "fb.db"))
        got = await am.feedback(low["id"], "VERY_NEGATIVE")
        assert got["reward"] == -1.0 and got["q_value"] < m.memory.config.q_init
        back = (await am.search(PAYMENTS_Q, user_id="alex", top_k=3))["results"]
        assert [r["id"] for r in back[:2]] == [top["id"], low["id"]]
        assert _memories(await am.search(PAYMENTS_Q, user_id="sam", top_k=3)) == sam_before
        await am.aclose()

    asyncio.run(main())


def test_confirm_links_memories_for_the_next_search(m):
    """Lexical + graph (no model): "alpha release" scores A only; after confirm([A, B]) the next search
    reaches B over the learned link (score > 0), and not C."""
    for text in ("alpha release of the kafka consumer", "beta rollout finished on friday", "gamma lunch is at noon"):
        m.add(text, user_id="alex")

    def scores() -> dict[str, float]:
        return {r["memory"].split()[0]: r["score"] for r in m.search("alpha release", user_id="alex")["results"]}

    before = scores()
    assert before["alpha"] > 0 and before.get("beta", 0.0) == 0.0 and before.get("gamma", 0.0) == 0.0
    ids = {r["memory"].split()[0]: r["id"] for r in m.get_all(user_id="alex")["results"]}
    assert m.confirm([ids["alpha"], ids["beta"]], user_id="alex") == {"message": "Memories confirmed successfully!",
                                                                       "pairs": 1}
    after = scores()
    assert after["beta"] > 0 and after.get("gamma", 0.0) == 0.0


def test_feedback_and_confirm_bad_arguments_and_scope_wall(m):
    a = m.add("alex deploys on fridays", user_id="alex")["results"][0]["id"]
    s = m.add("sam deploys on mondays", user_id="sam")["results"][0]["id"]
    for bad in (1.5, -1.01, float("nan")):
        with pytest.raises(ValueError, match="reward"):
            m.feedback(a, reward=bad)
    with pytest.raises(TypeError, match="reward"):
        m.feedback(a, reward="1")
    with pytest.raises(ValueError, match="feedback must be one of"):
        m.feedback(a, "GREAT")
    with pytest.raises(ValueError, match="feedback is None"):
        m.feedback(a)
    with pytest.raises(ValueError, match="not both"):
        m.feedback(a, "POSITIVE", reward=1.0)
    with pytest.raises(TypeError, match="feedback_reason"):
        m.feedback(a, "POSITIVE", 42)
    with pytest.raises(KeyError, match="memory_id.*'no-such-id'"):
        m.feedback("no-such-id", "POSITIVE")
    with pytest.raises(TypeError, match="memory_id"):
        m.feedback(None, "POSITIVE")
    with pytest.raises(KeyError, match="memory_id.*user_id"):
        m.feedback(s, "POSITIVE", user_id="alex")  # sam's memory is unknown to alex
    with pytest.raises(TypeError, match="memory_ids"):
        m.confirm(a)
    with pytest.raises(ValueError, match="memory_ids"):
        m.confirm([])
    with pytest.raises(KeyError, match="memory_ids"):
        m.confirm([a, s], user_id="alex")
    with pytest.raises(ValueError, match="memory_ids.*different scopes"):
        m.confirm([a, s])
    with pytest.raises(KeyError, match="memory_ids"):
        asyncio.run(_async_confirm(m, [a, "nope"]))
    assert m.memory.stats()["cooccurrence"] == 0
    assert {c.q_value for c in m.memory.get_all()} == {m.memory.config.q_init}  # no failed call moved a Q
    assert m.feedback(a, "negative", user_id="alex")["reward"] == -0.5  # mem0's values, any case
    m.delete(a)
    with pytest.raises(KeyError, match="memory_id"):
        m.feedback(a, "POSITIVE")  # deleted: unknown


async def _async_confirm(m: Memory, ids: list[str]) -> dict:
    am = AsyncMemory(memory=m.memory)
    try:
        return await am.confirm(ids)
    finally:
        await am.aclose()


# ---------------------------------------------------------------------------- mem0 2.x behaviour, side by side
# What mem0 2.x (mem0ai 2.2.1, ``mem0/memory/main.py``) does, as its docstrings and code say:
# * ``search(threshold=0.1)``: results whose semantic score (cosine) is under 0.1 are dropped by default;
# * identity keys (user_id / agent_id / run_id / actor_id) inside ``add(metadata=...)`` are dropped
#   (scope comes from the id arguments only);
# * ``search`` / ``get_all`` whose filters hold no user_id, agent_id or run_id raise ValueError
#   "filters must contain at least one of: user_id, agent_id, run_id. ...";
# * a metadata-only ``update`` still writes an UPDATE history row (old text == new text);
# * ``get`` returns a MemoryItem dump: ``score`` is present and None;
# * ``top_k`` must be a non-negative integer; 0 returns no results;
# * ``rerank=True`` without a configured reranker is ignored.
FOOD_FACTS = ("I love eating sushi and ramen", "I'm allergic to peanuts", "My favourite dessert is chocolate cake",
              "I work as a software engineer in Berlin", "I play tennis every Sunday")


@pytest.fixture(scope="module")
def food(tmp_path_factory):
    mem = Memory(str(tmp_path_factory.mktemp("food") / "food.db"))  # the packaged model: mem0 is semantic
    for fact in FOOD_FACTS:
        mem.add(fact, user_id="alex")
    yield mem
    mem.close()


def test_threshold_gates_the_cosine_not_the_fused_score(food):
    shown = food.search("food", filters={"user_id": "alex"}, threshold=0.2, explain=True)["results"]
    assert shown and all(r["score_details"]["cosine"] >= 0.2 for r in shown)
    every = food.search("food", filters={"user_id": "alex"}, threshold=0.0, explain=True)["results"]
    below = [r["memory"] for r in every if r["score_details"]["cosine"] < 0.2]
    assert below and not set(below) & {r["memory"] for r in shown}


def test_default_threshold_is_mem0s_on_a_relevant_and_an_unrelated_query(food):
    everything = food.search("food", filters={"user_id": "alex"}, threshold=0.0)["results"]
    assert len(everything) == 5  # every fact is in scope; the default threshold decides what is shown
    default = [r["memory"] for r in food.search("food", filters={"user_id": "alex"})["results"]]
    assert set(default) == {"I love eating sushi and ramen", "I'm allergic to peanuts",
                            "My favourite dessert is chocolate cake"}
    assert food.search("quantum chromodynamics lattice", filters={"user_id": "alex"})["results"] == []
    assert food.search("quantum chromodynamics lattice", filters={"user_id": "alex"},
                       threshold=None)["results"] == []  # None is mem0's default too


def test_identity_keys_inside_add_metadata_are_dropped_and_scope_holds(m, caplog):
    with caplog.at_level("WARNING", logger="causalmem"):
        mid = m.add("prefers window seats", user_id="alex",
                    metadata={"user_id": "sam", "agent_id": "a1", "run_id": "r1", "actor_id": "x",
                              "category": "travel"})["results"][0]["id"]
    assert "user_id" in caplog.text  # the caller is told the key was ignored, as mem0 logs it
    got = m.get(mid)
    assert got["metadata"] == {"category": "travel"}
    assert got["user_id"] == "alex" and "agent_id" not in got and "run_id" not in got
    assert [r["id"] for r in m.get_all(user_id="alex")["results"]] == [mid]
    assert m.get_all(user_id="sam")["results"] == [] and m.get_all(agent_id="a1")["results"] == []
    hit = m.search("window seats", filters={"user_id": "alex"})["results"][0]
    assert hit["metadata"] == {"category": "travel"}
    m.update(mid, metadata={"user_id": "sam", "seat": "aisle"})  # immutable after creation, as in mem0
    assert m.get(mid)["metadata"] == {"category": "travel", "seat": "aisle"} and m.get(mid)["user_id"] == "alex"


def test_search_and_get_all_without_any_id_are_refused_as_mem0_does(m):
    m.add("alex's secret", user_id="alex")
    m.add("sam's secret", user_id="sam")
    msg = "filters must contain at least one of: user_id, agent_id, run_id"
    with pytest.raises(ValueError, match=msg):
        m.search("secret")
    with pytest.raises(ValueError, match=msg):
        m.search("secret", filters={"category": "x"})
    with pytest.raises(ValueError, match=msg):
        m.get_all()
    with pytest.raises(ValueError, match=msg):
        m.get_all(filters={"category": "x"})
    assert [r["memory"] for r in m.search("secret", filters={"user_id": "sam"})["results"]] == ["sam's secret"]

    async def main():
        am = AsyncMemory(memory=m.memory)
        try:
            with pytest.raises(ValueError, match=msg):
                await am.search("secret")
            with pytest.raises(ValueError, match=msg):
                await am.get_all()
        finally:
            await am.aclose()

    asyncio.run(main())


def test_metadata_only_update_writes_a_history_entry(m):
    mid = m.add("prefers dark mode", user_id="u", metadata={"category": "ui"})["results"][0]["id"]
    m.update(mid, metadata={"category": "preferences"})
    hist = m.history(mid)
    assert [h["event"] for h in hist] == ["ADD", "UPDATE"]
    assert hist[1]["old_memory"] == hist[1]["new_memory"] == "prefers dark mode"
    got = m.get(mid)
    assert got["memory"] == "prefers dark mode" and got["metadata"] == {"category": "preferences"}
    assert got["updated_at"] >= got["created_at"]


def test_get_keys_top_k_zero_and_rerank_without_a_reranker(m):
    mid = m.add("the staging database runs postgres 16", user_id="u")["results"][0]["id"]
    got = m.get(mid)
    assert set(got) == {"id", "memory", "hash", "metadata", "score", "created_at", "updated_at", "user_id", "role"}
    assert got["score"] is None and got["metadata"] is None
    assert m.search("postgres", filters={"user_id": "u"}, top_k=0) == {"results": []}
    assert m.get_all(filters={"user_id": "u"}, top_k=0) == {"results": []}
    with pytest.raises(ValueError, match="top_k"):
        m.search("postgres", filters={"user_id": "u"}, top_k=-1)
    plain = m.search("postgres", filters={"user_id": "u"})["results"]
    assert m.search("postgres", filters={"user_id": "u"}, rerank=True)["results"] == plain


def test_scores_above_one_are_scaled_not_clipped_to_a_tie(m):
    """Graph support takes causalmem's fused score past 1 (docs/python.md, "Scores"); mem0 promises
    scores in [0, 1]. The adapter divides by the search's best when it passes 1, so two memories
    that support each other keep distinct scores and causalmem's order (a clip tied them at 1)."""
    m.add("enable caching for the api", user_id="u")
    m.add("caching made the api responses faster", user_id="u")
    m.add("lunch is at noon", user_id="u")
    a, b = (c for c in m.memory.get_all(user_id="u") if "caching" in c.text)
    m.memory.link(a.id, b.id, relation="caused", confidence=0.9)
    raw = m.memory.search("caching api", user_id="u")
    assert raw[0].score > raw[1].score > 1.0  # the case a clip ties
    res = m.search("caching api", user_id="u")["results"]
    assert [r["memory"] for r in res] == [h.text for h in raw]
    assert res[0]["score"] == 1.0
    assert res[1]["score"] == pytest.approx(raw[1].score / raw[0].score) and res[1]["score"] < 1.0
