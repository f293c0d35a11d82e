"""Conversation ingest and the mem0-style management calls: add, get_all, update, history, delete_all."""
from __future__ import annotations

import datetime as dt

import pytest

from causalmem import Memory


def test_add_accepts_every_message_shape_and_links_turns(db_path):
    with Memory(db_path, embedder=None) as mem:
        one = mem.add("just a note", user_id="u")
        assert len(one) == 1 and one[0].kind == "turn" and one[0].text == "just a note"
        turns = mem.add([{"role": "user", "content": "thanks!"}, {"role": "assistant", "content": "thanks!"},
                         {"speaker": "Caroline", "text": "I went to the support group."}],
                        user_id="u", session_id="s1", metadata={"source": "chat"})
        assert [t.text for t in turns] == ["thanks!", "thanks!", "Caroline: I went to the support group."]
        assert turns[0].id != turns[1].id  # turns are events: identical text, two chunks
        assert turns[0].metadata == {"source": "chat", "role": "user"}
        assert turns[2].metadata["speaker"] == "Caroline"
        rel = [(e.src, e.dst, e.relation) for e in mem.edges(turns[1].id)]
        assert (turns[0].id, turns[1].id, "temporal") in rel and (turns[1].id, turns[2].id, "temporal") in rel
        more = mem.add([{"role": "user", "content": "and then?"}], user_id="u", session_id="s1")
        assert [(e.src, e.relation) for e in mem.edges(more[0].id)] == [(turns[2].id, "temporal")]


def test_add_event_time_and_bad_input(db_path):
    when = dt.datetime(2023, 5, 8, 13, 56, tzinfo=dt.timezone.utc)
    with Memory(db_path, embedder=None) as mem:
        c = mem.add("hello", user_id="u", event_time=when)[0]
        assert c.event_time == pytest.approx(when.timestamp())
        with pytest.raises(ValueError, match="timezone-aware"):
            mem.add("x", event_time=dt.datetime(2023, 1, 1))
        with pytest.raises(ValueError, match="messages"):
            mem.add([])
        with pytest.raises(ValueError, match=r"messages\[1\]"):
            mem.add([{"role": "user", "content": "ok"}, {"role": "user", "content": "  "}])
        with pytest.raises(TypeError, match="messages"):
            mem.add(42)
        with pytest.raises(ValueError, match="needs 'content'"):
            mem.add([{"role": "user"}])
        assert mem.stats()["chunks"] == 1  # nothing of the failed calls was written


def test_get_all_update_history_delete_all(db_path, clock):
    with Memory(db_path, embedder=None, clock=clock) as mem:
        a = mem.add(["alpha one", "alpha two"], user_id="a", agent_id="bot")
        b = mem.add(["beta one"], user_id="b")
        assert [c.id for c in mem.get_all(user_id="a")] == [c.id for c in a]
        assert [c.id for c in mem.get_all({"user_id": "b"})] == [b[0].id]
        assert len(mem.get_all(agent_id="bot", limit=1)) == 1
        with pytest.raises(ValueError, match="unknown filter"):
            mem.get_all(colour="red")
        clock.advance(60)
        up = mem.update(a[0].id, "alpha uno")
        lex = {"user_id": "a", "channels": ("lexical",), "reinforce": False}
        assert up.text == "alpha uno" and [h.id for h in mem.search("uno", **lex)] == [a[0].id]
        assert mem.search("one", **lex) == []  # the old text is no longer indexed
        hist = mem.history(a[0].id)
        assert [h["event"] for h in hist] == ["create", "update"]
        assert hist[0]["new_text"] == "alpha one" and hist[1]["old_text"] == "alpha one"
        assert hist[1]["new_text"] == "alpha uno" and hist[1]["at"] == pytest.approx(clock.t)
        with pytest.raises(ValueError, match="refusing"):
            mem.delete_all()
        assert mem.delete_all(user_id="a") == 2
        assert mem.get_all(user_id="a") == [] and mem.search("alpha", user_id="a") == []
        assert [c.id for c in mem.get_all(user_id="b")] == [b[0].id]
        assert [h["event"] for h in mem.history(a[0].id)] == ["create", "update", "delete"]
