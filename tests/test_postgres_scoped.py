"""Per-tenant views on PostgreSQL (``view_pool``): a search, causal query or write that names a
``user_id`` uses views holding only that user's rows. They must answer exactly as a single-process
``Memory`` holding only that tenant, under any budget, and never show another tenant's rows."""
from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from causalmem import Config, Memory

T0 = 1_700_000_000.0
WORDS = ("kafka lag deploy rollback cache redis index vacuum latency invoice refund ticket alert pager "
         "migration schema replica backup quota token login session checkout payment webhook retry").split()


SCOPED = Config(scoped_views=True)


def clock() -> float:
    return T0


def answer(mem: Memory, query: str, user: str, agent: str | None = None) -> list[tuple[str, float]]:
    hits = mem.search(query, user_id=user, agent_id=agent, top_k=8, reinforce=False)
    return [(h.text, round(h.score, 9)) for h in hits]


def causal_answer(mem: Memory, query: str, user: str) -> list[tuple[str, float]]:
    return [(a.text, round(a.energy, 9)) for a in mem.search_causal(query, user_id=user, limit=5)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tenant_views_answer_like_a_memory_holding_only_that_tenant(pg_dsn, tmp_path, seed):
    rng = random.Random(seed)
    tenants = [f"u{i}" for i in range(6)]
    a = Memory(pg_dsn, embedder=None, clock=clock, config=SCOPED)  # default budget
    b = Memory(pg_dsn, embedder=None, clock=clock, views_budget_mb=0.05, config=SCOPED)  # evicts almost every call
    refs = {u: Memory(str(tmp_path / f"{u}.db"), embedder=None, clock=clock) for u in tenants}
    try:
        compared = 0
        for step in range(120):
            user = rng.choice(tenants)

            writer = rng.choice((a, b))
            agent = rng.choice((None, "ag1", "ag2"))
            roll = rng.random()
            if roll < 0.3:
                texts = [f"{user} step {step} " + " ".join(rng.sample(WORDS, 4)) for _ in range(rng.randint(1, 3))]
                for m in (writer, refs[user]):
                    m.add(texts, user_id=user, agent_id=agent, link=False)
            elif roll < 0.4:
                d, o = " ".join(rng.sample(WORDS, 2)), " ".join(rng.sample(WORDS, 2))
                for m in (writer, refs[user]):
                    m.record_decision(f"{user} did {d}", f"{user} saw {o}", user_id=user, agent_id=agent)
            elif roll < 0.45:
                value = " ".join(rng.sample(WORDS, 2))
                for m in (writer, refs[user]):
                    m.add_fact(f"{user} key {step % 3}", value, user_id=user, replace_same_key=True)
            else:
                query = " ".join(rng.sample(WORDS, 2))
                reader = rng.choice((a, b))
                want = answer(refs[user], query, user, agent)
                assert answer(reader, query, user, agent) == want, (step, user, query)
                if rng.random() < 0.3:
                    assert causal_answer(reader, query, user) == causal_answer(refs[user], query, user)
                compared += 1
        assert compared > 40
        assert b._pool is not None and b._pool.evictions > 0  # the tiny budget did evict
        assert a._pool is not None and a._pool.evictions == 0
    finally:
        for m in (a, b, *refs.values()):
            m.close()


def test_a_tenant_never_sees_another_tenants_rows(pg_dsn):
    with Memory(pg_dsn, embedder=None, config=SCOPED) as a, \
            Memory(pg_dsn, embedder=None, views_budget_mb=0.01, config=SCOPED) as b:
        a.add(["only alice knows the vault code"], user_id="alice", link=False)
        b.add(["bob keeps the garden shed key"], user_id="bob", link=False)
        a.record_decision("alice opened the vault", "the alarm rang", user_id="alice")
        for m in (a, b):
            assert [h.text for h in m.search("vault code alarm", user_id="bob")] == []
            assert all(h.user_id == "alice" for h in m.search("vault alarm garden shed", user_id="alice"))
            assert [h.user_id for h in m.search("garden shed", user_id="bob")] == ["bob"]
            assert m.search_causal("alice opened the vault", user_id="bob") == []
            assert [x.text for x in m.search_causal("alice opened the vault", user_id="alice")] == ["the alarm rang"]
        # the whole-store views (no user_id) still see both, after the scoped writes
        assert {h.user_id for h in a.search("vault garden", top_k=5)} == {"alice", "bob"}


def test_another_connections_write_reaches_the_tenant_views(pg_dsn):
    with Memory(pg_dsn, embedder=None, config=SCOPED) as a, Memory(pg_dsn, embedder=None, config=SCOPED) as b:
        a.add(["first note about kafka"], user_id="t1", link=False)
        assert [h.text for h in b.search("kafka", user_id="t1")] == ["first note about kafka"]
        a.add(["second note about kafka"], user_id="t1", link=False)
        a.add(["a kafka note of t2"], user_id="t2", link=False)
        assert sorted(h.text for h in b.search("kafka", user_id="t1")) == ["first note about kafka",
                                                                            "second note about kafka"]
        hit = b.search("second", user_id="t1")[0]
        a.delete(hit.id)  # a write without a user_id (the whole-store views) reaches the tenant's views
        assert [h.text for h in b.search("kafka", user_id="t1")] == ["first note about kafka"]
        assert [h.text for h in a.search("kafka", user_id="t1")] == ["first note about kafka"]


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "64", True])
def test_a_bad_views_budget_is_refused_naming_the_argument(tmp_path, bad):
    with pytest.raises((TypeError, ValueError), match="views_budget_mb"):
        Memory(str(tmp_path / "m.db"), embedder=None, views_budget_mb=bad)


def test_without_scoped_views_every_call_uses_the_whole_store_views(pg_dsn):
    with Memory(pg_dsn, embedder=None, config=Config(scoped_views=False)) as m:
        m.add(["a note of t1"], user_id="t1", link=False)
        assert [h.text for h in m.search("note", user_id="t1")] == ["a note of t1"]
        assert m._pool.views == {} and m._views.chunks is not None


def test_tenant_views_are_sized_to_the_tenant_and_start_no_threads(pg_dsn):
    import threading

    with Memory(pg_dsn, embedder=None, config=SCOPED) as m:
        for i in range(40):  # interleaved: the small tenants' stored nids are spread over the whole range
            m.add([f"big tenant note {i} about kafka"], user_id="big", link=False)
            if i % 8 == 0:
                m.add([f"small tenant note {i} about kafka"], user_id="small", link=False)
        m.record_decision("small tenant rolled back", "small tenant latency fell", user_id="small")
        before = threading.active_count()
        assert len(m.search("kafka", user_id="small", top_k=20, reinforce=False)) == 5
        assert m.search_causal("small tenant rolled back", user_id="small")
        for u in range(20):
            m.search("kafka", user_id=f"nobody{u}", reinforce=False)
        assert threading.active_count() == before  # pooled views run nothing in the background
        v = m._pool.views["small"]
        assert v.chunks is not None and v.chunks.n == 7  # 5 notes, a decision and its outcome: local ids 0..6
        assert v.projection.n_nodes <= 7
        assert m._views.chunks is None  # the whole-store views were never built


def test_search_reinforcement_through_tenant_views_reaches_the_tenants_rows(pg_dsn, tmp_path):
    with Memory(pg_dsn, embedder=None, clock=clock, config=SCOPED) as m, \
            Memory(str(tmp_path / "ref.db"), embedder=None, clock=clock) as ref:
        m.add(["filler row of another tenant"] * 1, user_id="other", link=False)
        for mem in (m, ref):
            mem.add(["alpha kafka note", "beta kafka note", "gamma redis note"], user_id="u", link=False)
        for _ in range(3):
            for mem in (m, ref):
                mem.search("kafka note", user_id="u", top_k=2)
        for mem in (m, ref):
            mem.add(["delta later note"], user_id="u", link=False)  # writes the queued reinforcement first
        m.flush()
        ref.flush()
        assert answer(m, "kafka note", "u") == answer(ref, "kafka note", "u")
        got = {h.text: m.get(h.id).access_count for h in m.search("note", user_id="u", top_k=8, reinforce=False)}
        want = {h.text: ref.get(h.id).access_count for h in ref.search("note", user_id="u", top_k=8, reinforce=False)}
        assert got == want and max(got.values()) == 3
        assert [m.get(h.id).access_count for h in m.search("filler", user_id="other", reinforce=False)] == [0]


# ------------------------------------------------------------------ property: random sequences, many tenants
_OPS = st.lists(st.tuples(st.sampled_from(("add", "add", "decide", "fact", "search", "search", "search", "causal")),
                          st.integers(0, 11),  # tenant
                          st.integers(0, 1),  # connection
                          st.lists(st.sampled_from(WORDS), min_size=2, max_size=4)),
                min_size=5, max_size=40)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(ops=_OPS)
def test_any_sequence_over_many_tenants_and_two_connections_answers_like_one_memory_per_tenant(pg_dsn, ops):
    """Two connections on one PostgreSQL memory, one with a budget so small that it evicts on almost
    every call, against one SQLite ``Memory`` per tenant: every search and causal query agrees."""
    import tempfile
    import uuid

    run = uuid.uuid4().hex[:8]  # each example its own tenants: the fixture's database is shared by examples
    conns = (Memory(pg_dsn, embedder=None, clock=clock), Memory(pg_dsn, embedder=None, clock=clock,
                                                                  views_budget_mb=0.02))
    with tempfile.TemporaryDirectory() as d:
        refs: dict[str, Memory] = {}
        try:
            for step, (kind, t, c, words) in enumerate(ops):
                user, m = f"{run}u{t}", conns[c]
                ref = refs.get(user) or refs.setdefault(user, Memory(f"{d}/{t}.db", embedder=None, clock=clock))
                text = f"{user} {step} " + " ".join(words)
                if kind == "add":
                    for x in (m, ref):
                        x.add([text], user_id=user, link=False)
                elif kind == "decide":
                    for x in (m, ref):
                        x.record_decision(f"{user} did {words[0]} {words[1]}", f"{user} saw " + " ".join(words[1:]),
                                          user_id=user)
                elif kind == "fact":
                    for x in (m, ref):
                        x.add_fact(f"{user} key {t % 2}", " ".join(words), user_id=user, replace_same_key=True)
                elif kind == "search":
                    assert answer(m, " ".join(words), user) == answer(ref, " ".join(words), user), (step, user)
                else:
                    q = f"{user} did {words[0]} {words[1]}"
                    assert causal_answer(m, q, user) == causal_answer(ref, q, user), (step, user)
                # a scope never sees another's rows
                assert all(h.user_id == user for h in m.search(" ".join(words), user_id=user, reinforce=False))
        finally:
            for x in (*conns, *refs.values()):
                x.close()


def test_a_script_that_exits_without_close_writes_its_tenants_reinforcement(pg_dsn):
    """The exit hook closes a tenant's views before the whole store's: its queued reinforcement is
    written through the connection, not dropped with a warning."""
    import subprocess
    import sys

    with Memory(pg_dsn, embedder=None) as m:
        m.add(["exit hook note about kafka"], user_id="x1", link=False)
    script = ("from causalmem import Memory\n"
              f"m = Memory({pg_dsn!r}, embedder=None)\n"
              "for _ in range(3):\n"
              "    assert m.search('kafka', user_id='x1')\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "not written" not in run.stderr, run.stderr
    with Memory(pg_dsn, embedder=None) as m:
        hit = m.search("kafka", user_id="x1", reinforce=False)[0]
        assert m.get(hit.id).access_count == 3


def test_a_store_refusing_a_tenants_reinforcement_keeps_it_and_the_searches_answer(pg_dsn, caplog):
    """A tenant's views write the batch inside the search that fills it (no flusher thread). While the
    store refuses it (a CHECK constraint the access-count update violates, as a full disk would), the
    searches answer, the queue is kept, one warning for the episode; the next flush writes it all."""
    import logging

    import psycopg

    schema = pg_dsn.rsplit("schema=", 1)[1]
    base = pg_dsn.rsplit("schema=", 1)[0].rstrip("?&")
    with Memory(pg_dsn, embedder=None, config=Config(reinforce_batch=2, reinforce_seconds=3600)) as m:
        for i in range(4):
            m.add(f"kafka consumer lag alert number {i}", user_id="u")
        with psycopg.connect(base, autocommit=True) as con:
            con.execute(f'ALTER TABLE "{schema}".chunks ADD CONSTRAINT pool_refuse CHECK (access_count < 0) NOT VALID')
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="causalmem"):
                for _ in range(10):
                    assert len(m.search("kafka consumer lag", top_k=4, user_id="u")) == 4
            warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            con.execute(f'ALTER TABLE "{schema}".chunks DROP CONSTRAINT pool_refuse')
        assert len(warnings) == 1 and "refused" in warnings[0], warnings
        tenant = m._pool.views["u"]
        assert tenant.reinforcement.deferred >= 5 and len(tenant.reinforcement.queued) == 10
        assert m.flush() == 10
        assert m._store.query("SELECT SUM(access_count) FROM chunks")[0][0] == 40


def test_with_the_model_a_tenants_views_rank_like_the_whole_store_views(pg_dsn, embedder):
    """The semantic channel too: vectors stored by the whole store's embedding are read into the
    tenant's views on their first touch and after another connection's write, and rank exactly as the
    whole-store views of the same memory (same stored vectors; a SQLite memory embedding the same texts
    in other batches differs in the 4th decimal, the padding of a batch)."""
    texts = ["the kafka consumer lags behind the producer", "we rolled back the payment gateway deploy",
             "the novelist wrote about a castle", "redis cache misses grew after the release",
             "the on-call engineer paged the database team"]
    with Memory(pg_dsn, embedder=embedder, clock=clock) as a, Memory(pg_dsn, embedder=embedder, clock=clock) as b, \
            Memory(pg_dsn, embedder=embedder, clock=clock, config=Config(scoped_views=False)) as whole:
        a.add(["another tenant's note about kafka lag"], user_id="other", link=False)
        a.add(texts[:3], user_id="u", link=False)
        a.flush()
        queries = ("message queue falling behind", "undo a bad release", "a book by an author")

        def ranked(m: Memory, q: str) -> list[tuple[str, float]]:
            return [(h.text, round(h.score, 6)) for h in m.search(q, user_id="u", top_k=5, reinforce=False)]

        for q in queries:
            assert ranked(b, q) == ranked(whole, q), q
        assert ranked(b, "message queue falling behind")[0][0] == texts[0]  # found by meaning, no shared word
        a.add(texts[3:], user_id="u", link=False)  # another connection's write, then its vectors
        a.flush()
        for q in (*queries, "cache hit rate", "who was woken up at night"):
            assert ranked(b, q) == ranked(whole, q), q
        assert "u" in b._pool.views and not whole._pool.views
        assert len(b._pool.views["u"].vectors_of(range(5))[0]) == 5  # the later rows' vectors reached it
