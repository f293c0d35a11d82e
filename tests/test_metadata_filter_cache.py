"""The metadata filter cache (``metadata_filter.FilterCache``, held by the views): a filtered search or
``get_all`` answers from it, and every change of a chunk's metadata — by this process, by another
process, an add, a delete, a purge — is in the very next answer. Runs on SQLite and (the suite's
PostgreSQL pass) on PostgreSQL: the second process is a real one writing to the same store."""
from __future__ import annotations

import random
import subprocess
import sys
import textwrap

from causalmem import Memory, metadata_filter


def _ids(hits) -> set[str]:
    return {h.id for h in hits}


def _search(mem: Memory, spec, user: str = "u") -> set[str]:
    return _ids(mem.search("alpha", user_id=user, metadata=spec, top_k=50, reinforce=False))


def _listed(mem: Memory, spec, user: str = "u") -> set[str]:
    return {c.id for c in mem.get_all(user_id=user, metadata=spec, limit=1000)}


def _store(mem: Memory, n: int = 12) -> list[str]:
    return [mem.add(f"alpha note {i}", user_id="u", metadata={"team": "red" if i % 3 == 0 else "blue", "n": i})[0].id
            for i in range(n)]


def _child(db_path, body: str) -> None:
    """``body`` run by a second Python process on the same store (``mem`` open there)."""
    code = "import sys\nfrom causalmem import Memory\nmem = Memory(sys.argv[1], embedder=None)\n" + \
        textwrap.dedent(body) + "\nmem.close()\n"
    res = subprocess.run([sys.executable, "-c", code, str(db_path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_update_metadata_is_in_the_next_filtered_search(db_path):
    with Memory(db_path, embedder=None) as mem:
        ids = _store(mem)
        red = {ids[i] for i in range(12) if i % 3 == 0}
        assert _search(mem, {"team": "red"}) == red == _listed(mem, {"team": "red"})
        mem.update(ids[1], metadata={"team": "red"})  # joins
        mem.update(ids[0], metadata={"team": None})  # leaves (key removed)
        want = (red | {ids[1]}) - {ids[0]}
        assert _search(mem, {"team": "red"}) == want
        assert _listed(mem, {"team": "red"}) == want
        assert _search(mem, {"team": {"$exists": False}}) == {ids[0]}
        mem.update(ids[1], metadata={"n": 100})  # another key of a cached chunk: the filter on it sees it
        assert _search(mem, {"n": {"$gte": 100}}) == {ids[1]} == _listed(mem, {"n": {"$gte": 100}})


def test_a_filter_object_changed_after_a_search_does_not_change_the_cached_answer(db_path):
    """The cache keys an entry by the filter's text at the time of the search; the entry must not keep
    the caller's (mutable) objects, or chunks read later are judged by the changed filter."""
    with Memory(db_path, embedder=None) as mem:
        one = mem.add("alpha one", user_id="u", metadata={"tier": 1})[0].id
        spec = {"tier": {"$in": [1]}}
        assert _search(mem, spec) == {one}
        spec["tier"]["$in"].append(2)  # the caller reuses its filter object
        two = mem.add("alpha two", user_id="u", metadata={"tier": 2})[0].id
        assert _search(mem, spec) == {one, two}
        assert _search(mem, {"tier": {"$in": [1]}}) == {one} == _listed(mem, {"tier": {"$in": [1]}})


def test_add_and_delete_are_in_the_next_filtered_search(db_path):
    with Memory(db_path, embedder=None) as mem:
        ids = _store(mem)
        red = {ids[i] for i in range(12) if i % 3 == 0}
        assert _search(mem, {"team": "red"}) == red
        new = mem.add("alpha fresh", user_id="u", metadata={"team": "red"})[0].id
        assert _search(mem, {"team": "red"}) == red | {new} == _listed(mem, {"team": "red"})
        mem.delete(ids[0])
        assert _search(mem, {"team": "red"}) == (red | {new}) - {ids[0]} == _listed(mem, {"team": "red"})


def test_another_process_update_add_delete_is_in_the_next_filtered_search(db_path):
    with Memory(db_path, embedder=None) as mem:
        ids = _store(mem)
        red = {ids[i] for i in range(12) if i % 3 == 0}
        assert _search(mem, {"team": "red"}) == red == _listed(mem, {"team": "red"})
        _child(db_path, f"""
            mem.update({ids[1]!r}, metadata={{"team": "red"}})
            mem.update({ids[3]!r}, metadata={{"team": "green"}})
            """)
        want = (red | {ids[1]}) - {ids[3]}
        assert _search(mem, {"team": "red"}) == want
        assert _listed(mem, {"team": "red"}) == want
        _child(db_path, f"""
            mem.update({ids[4]!r}, metadata={{"team": "red"}})
            """)
        assert _listed(mem, {"team": "red"}) == want | {ids[4]}  # get_all first this time
        assert _search(mem, {"team": "red"}) == want | {ids[4]}
        _child(db_path, f"""
            print(mem.add("alpha from the child", user_id="u", metadata={{"team": "red"}})[0].id)
            mem.delete({ids[6]!r})
            """)
        got = _search(mem, {"team": "red"})
        assert ids[6] not in got and len(got - want - {ids[4]}) == 1  # the child's chunk came in
        assert _listed(mem, {"team": "red"}) == got


def test_purge_drops_the_cached_metadata(db_path):
    with Memory(db_path, embedder=None) as mem:
        mem.add("alpha secret", user_id="gone", metadata={"ssn": "123-45-6789"})
        kept = mem.add("alpha kept", user_id="u", metadata={"ssn": "000"})[0].id
        assert len(_search(mem, {"ssn": {"$exists": True}}, user=None)) == 2
        assert len(_listed(mem, {"ssn": {"$exists": True}}, user="gone")) == 1
        assert any("123-45-6789" in t for t in mem._views.meta_cache.texts)
        mem.delete_all(user_id="gone", purge=True)
        assert not any("123-45-6789" in t for t in mem._views.meta_cache.texts)
        assert _search(mem, {"ssn": {"$exists": True}}, user=None) == {kept}


def test_another_process_purge_drops_the_cached_metadata(db_path):
    with Memory(db_path, embedder=None) as mem:
        mem.add("alpha secret", user_id="gone", metadata={"ssn": "123-45-6789"})
        kept = mem.add("alpha kept", user_id="u", metadata={"ssn": "000"})[0].id
        assert len(_search(mem, {"ssn": {"$exists": True}}, user=None)) == 2
        _child(db_path, 'mem.delete_all(user_id="gone", purge=True)')
        mem.search("alpha", reinforce=False)  # any read notices the purge: the cache drops what it held
        assert not any("123-45-6789" in t for t in mem._views.meta_cache.texts)
        assert _search(mem, {"ssn": {"$exists": True}}, user=None) == {kept}
        assert not any("123-45-6789" in t for t in mem._views.meta_cache.texts)


def test_purge_by_another_host_behind_the_change_log_drops_the_cached_metadata(db_path, monkeypatch):
    """PostgreSQL: another host purges and writes on until the change log no longer reaches back to this
    one's position (LOG_KEEP transactions); this one then re-reads everything. The purged metadata must
    not stay in its filter cache (the sidecar purge token is local to a host: it tells nothing here)."""
    import os

    import pytest

    if os.environ.get("CAUSALMEM_TEST_BACKEND", "sqlite") != "postgres":
        pytest.skip("PostgreSQL's change log (the suite's PostgreSQL pass)")
    from causalmem.store import postgres

    monkeypatch.setattr(postgres, "LOG_KEEP", 8)  # the log keeps 8 transactions instead of 4096
    with Memory(db_path, embedder=None) as one, Memory(db_path, embedder=None) as two:
        one.add("alpha secret", user_id="gone", metadata={"ssn": "123-45-6789"})
        kept = one.add("alpha kept", user_id="u", metadata={"ssn": "000"})[0].id
        assert len(_search(one, {"ssn": {"$exists": True}}, user=None)) == 2
        two.delete_all(user_id="gone", purge=True)
        for i in range(300):  # the log is pruned every 256 transactions
            two.add_fact("k", f"v{i}", user_id="u")
        one.search("alpha", reinforce=False)  # any read: one catches up by a full re-read
        assert not any("123-45-6789" in t for t in one._views.meta_cache.texts)
        assert _search(one, {"ssn": {"$exists": True}}, user=None) == {kept}


def test_random_changes_match_an_uncached_evaluation(db_path):
    """Random updates, adds, deletes and searches with a few filters: every answer equals the
    store's metadata evaluated afresh (``list_chunks`` without views)."""
    rng = random.Random(5)
    specs = [{"k": 1}, {"k": {"$in": [0, 2]}}, {"tags": {"$contains": "x"}}, {"$or": [{"k": 3}, {"z": True}]},
             {"k": {"$in": {1, 3}}}]  # (a set: no JSON form, evaluated without the cache)
    with Memory(db_path, embedder=None) as mem:
        ids = [mem.add(f"alpha {i}", user_id="u", metadata={"k": i % 4})[0].id for i in range(30)]
        for step in range(120):
            r = rng.random()
            if r < 0.5:
                meta = {"k": rng.randrange(4), "tags": rng.sample(["x", "y", "w"], rng.randrange(3)),
                        "z": rng.choice([True, None])}
                mem.update(rng.choice(ids), metadata=meta)
            elif r < 0.6:
                ids.append(mem.add(f"alpha new {step}", user_id="u", metadata={"k": rng.randrange(4)})[0].id)
            elif r < 0.65 and len(ids) > 5:
                mem.delete(ids.pop(rng.randrange(len(ids))))
            spec = rng.choice(specs)
            # the filter evaluated on every live chunk's stored metadata, no cache
            want = {c.id for c in mem.get_all(user_id="u", limit=1000) if metadata_filter.matches(c.metadata, spec)}
            assert _search(mem, spec) == want, (step, spec)
            assert _listed(mem, spec) == want, (step, spec)


def test_cache_bounds():
    """At most ``CACHED_FILTERS`` filters; texts no chunk has any more are dropped."""
    import numpy as np

    cache = metadata_filter.FilterCache()
    stored = {n: f'{{"v": {n}}}' for n in range(10)}

    def read(nids):
        return [(n, stored[n]) for n in (stored if nids is None else nids) if n in stored]

    scope = np.ones(10, dtype=bool)
    for k in range(metadata_filter.CACHED_FILTERS + 5):
        assert cache.mask({"v": {"$gte": k}}, scope, read).sum() == max(0, 10 - k)
    assert len(cache.filters) == metadata_filter.CACHED_FILTERS
    for r in range(600):  # chunk 3's metadata changes 600 times
        stored[3] = f'{{"v": {1000 + r}}}'
        cache.forget([3])
        assert cache.mask({"v": {"$gte": 1000}}, scope, read).tolist() == [n == 3 for n in range(10)]
    assert len(cache.texts) <= 2 * len(cache.code) + 1024
    cache.forget_all()
    stored[3] = '{"v": 3}'
    assert cache.mask({"v": {"$gte": 1000}}, scope, read).sum() == 0
    assert len(cache.texts) == 10  # a full re-read keeps only the texts chunks have


def test_filters_that_differ_are_cached_apart():
    """``True`` and ``1`` (and ``[1]``, ``{"$in": [1]}``) are different filters: none answers from another's entry."""
    import numpy as np

    stored = {0: '{"a": 1}', 1: '{"a": true}', 2: '{"a": [1]}', 3: '{"a": 1.0}'}
    cache = metadata_filter.FilterCache()
    scope = np.ones(4, dtype=bool)
    read = lambda nids: [(n, stored[n]) for n in (stored if nids is None else nids)]  # noqa: E731
    for _ in range(2):  # the second round answers from the cache
        assert cache.mask({"a": 1}, scope, read).tolist() == [True, False, False, True]
        assert cache.mask({"a": True}, scope, read).tolist() == [False, True, False, False]
        assert cache.mask({"a": [1]}, scope, read).tolist() == [False, False, True, False]
        assert cache.mask({"a": {"$in": [1]}}, scope, read).tolist() == [True, False, False, True]
        assert cache.mask({"a": {"$in": [True]}}, scope, read).tolist() == [False, True, False, False]
    assert metadata_filter.canonical({"b": 2, "a": 1}) == metadata_filter.canonical({"a": 1, "b": 2})


def test_a_non_string_key_inside_a_value_is_another_filter(db_path):
    """``{"m": {1: "x"}}`` and ``{"m": {"1": "x"}}`` have one JSON text but match differently (stored
    metadata has string keys only): neither answers from the other's cache entry."""
    with Memory(db_path, embedder=None) as mem:
        cid = mem.add("alpha note", user_id="u", metadata={"m": {"1": "x"}})[0].id
        assert _listed(mem, {"m": {1: "x"}}) == set() == _search(mem, {"m": {1: "x"}})
        assert _listed(mem, {"m": {"1": "x"}}) == {cid} == _search(mem, {"m": {"1": "x"}})
