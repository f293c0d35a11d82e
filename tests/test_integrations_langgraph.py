"""LangGraph: CausalMemStore against LangGraph's own store contract, and inside a real StateGraph.

The contract tests below are our own adaptation of the implementation-independent cases of
LangGraph's store test suites (langgraph repository: ``libs/checkpoint/tests/test_store.py`` and
``libs/checkpoint-sqlite/tests/test_store.py``), rewritten against ``CausalMemStore``: same data
and the same expectations, except where noted in a case's docstring. Each adapted case names its
source as ``[checkpoint] name`` or ``[sqlite] name``. Cases left out, and why, are listed in
``LEFT_OUT`` at the end of this file. Count: the two suites hold 61 test functions (24 + 37); 51 are
adapted here (19 + 32) and pass, 10 are left out (5 + 5) because they test LangGraph's or SqliteStore's
internals or per-field raw-cosine scores.

Where the source uses a deterministic fake embedding, these tests use ``CharCountEmbeddings``
(character counts hashed into ``dims`` buckets: written here, not LangGraph's). Without an
``index`` the store uses causalmem's own embedder; the fast cases pass ``embedder=None``
(lexical + graph) and one case runs the default packaged MiniLM.
"""
from __future__ import annotations

import asyncio
import math
from typing import Any

import numpy as np
import pytest

pytest.importorskip("langgraph")

from langchain_core.embeddings import Embeddings  # noqa: E402
from langgraph.store.base import (  # noqa: E402
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchItem,
    SearchOp,
)

from causalmem import Memory  # noqa: E402
from causalmem.integrations.langgraph import CausalMemStore  # noqa: E402


class CharCountEmbeddings(Embeddings):
    """Deterministic embeddings: counts of characters and character pairs, hashed into ``dims`` buckets."""

    def __init__(self, dims: int = 64) -> None:
        self.dims = dims

    def _one(self, text: str) -> list[float]:
        v = [0.0] * self.dims
        for c in text.lower():
            v[(ord(c) * 2654435761) % self.dims] += 1.0
        for a, b in zip(text.lower(), text.lower()[1:]):
            v[((ord(a) * 31 + ord(b)) * 40503) % self.dims] += 0.5
        n = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / n for x in v]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


@pytest.fixture(params=["file", "memory"])
def store(request, tmp_path):
    path = tmp_path / "lg.db" if request.param == "file" else ":memory:"
    s = CausalMemStore(path, embedder=None)
    yield s
    s.close()


@pytest.fixture
def fake_embeddings() -> CharCountEmbeddings:
    return CharCountEmbeddings(dims=64)


@pytest.fixture
def vstore(tmp_path, fake_embeddings):
    def make(fields: list[str] | None = None, path: Any = None) -> CausalMemStore:
        index: dict[str, Any] = {"dims": fake_embeddings.dims, "embed": fake_embeddings}
        if fields is not None:
            index["fields"] = fields
        s = CausalMemStore(path or (tmp_path / f"v{len(made)}.db"), index=index)
        made.append(s)
        return s

    made: list[CausalMemStore] = []
    yield make
    for s in made:
        s.close()


# ---------------------------------------------------------------------------- list_namespaces
def test_list_namespaces_basic(store):
    """[checkpoint] test_list_namespaces_basic"""
    namespaces = [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f"),
                  ("b", "a", "f"), ("users", "123"), ("users", "456", "settings"), ("admin", "users", "789")]
    for i, ns in enumerate(namespaces):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces(prefix=("a", "b"))) == [
        ("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]
    assert sorted(store.list_namespaces(suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert sorted(store.list_namespaces(prefix=("a",), suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f")]
    assert sorted(store.list_namespaces(prefix=("a", "b"), max_depth=3)) == [
        ("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert store.list_namespaces(prefix=("a", "b"), limit=2) == [("a", "b", "c"), ("a", "b", "d", "e")]
    assert store.list_namespaces(prefix=("a", "b"), offset=2) == [("a", "b", "d", "i"), ("a", "b", "f")]
    assert sorted(store.list_namespaces(prefix=("a", "*", "f"))) == [("a", "b", "f"), ("a", "c", "f")]
    assert sorted(store.list_namespaces(suffix=("*", "f"))) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("nonexistent",)) == []
    assert store.list_namespaces(prefix=("users", "123")) == [("users", "123")]


def test_list_namespaces_with_wildcards(store):
    """[checkpoint] test_list_namespaces_with_wildcards"""
    namespaces = [("users", "123"), ("users", "456"), ("users", "789", "settings"), ("admin", "users", "789"),
                  ("guests", "123"), ("guests", "456", "preferences")]
    for i, ns in enumerate(namespaces):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces(prefix=("users", "*"))) == [
        ("users", "123"), ("users", "456"), ("users", "789", "settings")]
    assert store.list_namespaces(suffix=("*", "preferences")) == [("guests", "456", "preferences")]
    assert store.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []
    store.put(namespace=("admin", "users", "settings", "789"), key="foo", value={"data": "some_val"})
    assert store.list_namespaces(prefix=("*", "users"), suffix=("settings", "*")) == [
        ("admin", "users", "settings", "789")]


def test_list_namespaces_pagination(store):
    """[checkpoint] test_list_namespaces_pagination"""
    for i in range(20):
        store.put(namespace=("namespace", f"sub_{i:02d}"), key=f"id_{i:02d}", value={"data": f"value_{i:02d}"})
    for off in (0, 5, 15):
        assert store.list_namespaces(prefix=("namespace",), limit=5, offset=off) == [
            ("namespace", f"sub_{i:02d}") for i in range(off, off + 5)]


def test_list_namespaces_max_depth(store):
    """[checkpoint] test_list_namespaces_max_depth"""
    for i, ns in enumerate([("a", "b", "c", "d"), ("a", "b", "c", "e"), ("a", "b", "f"), ("a", "g"),
                            ("h", "i", "j", "k")]):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces(max_depth=2)) == [("a", "b"), ("a", "g"), ("h", "i")]


def test_list_namespaces_no_conditions_and_empty(store):
    """[checkpoint] test_list_namespaces_no_conditions + test_list_namespaces_empty_store"""
    assert store.list_namespaces() == []
    namespaces = [("a", "b"), ("c", "d"), ("e", "f", "g")]
    for i, ns in enumerate(namespaces):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces()) == sorted(namespaces)


def test_cannot_put_empty_namespace(store):
    """[checkpoint] test_cannot_put_empty_namespace (sync and async paths of this store; the part that
    exercises LangGraph's own AsyncBatchedBaseStore mock is left out)."""
    doc = {"foo": "bar"}
    for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "foo", doc)
        with pytest.raises(InvalidNamespaceError):
            asyncio.run(store.aput(bad, "foo", doc))

    async def async_part():
        await store.aput(("foo", "langgraph", "foo"), "bar", doc)
        assert (await store.aget(("foo", "langgraph", "foo"), "bar")).value == doc
        assert (await store.asearch(("foo", "langgraph", "foo"), query="bar"))[0].value == doc
        await store.adelete(("foo", "langgraph", "foo"), "bar")
        assert await store.aget(("foo", "langgraph", "foo"), "bar") is None
        # past the public put API, a "langgraph" root label is accepted
        await store.abatch([PutOp(("langgraph", "foo"), "bar", doc)])
        assert (await store.aget(("langgraph", "foo"), "bar")).value == doc
        assert (await store.asearch(("langgraph", "foo")))[0].value == doc
        await store.adelete(("langgraph", "foo"), "bar")
        assert await store.aget(("langgraph", "foo"), "bar") is None

    asyncio.run(async_part())
    store.put(("foo", "langgraph", "foo"), "bar", doc)
    assert store.get(("foo", "langgraph", "foo"), "bar").value == doc
    assert store.search(("foo", "langgraph", "foo"), query="bar")[0].value == doc
    store.delete(("foo", "langgraph", "foo"), "bar")
    assert store.get(("foo", "langgraph", "foo"), "bar") is None
    store.batch([PutOp(("langgraph", "foo"), "bar", doc)])
    assert store.get(("langgraph", "foo"), "bar").value == doc
    assert store.search(("langgraph", "foo"))[0].value == doc
    store.delete(("langgraph", "foo"), "bar")
    assert store.get(("langgraph", "foo"), "bar") is None


def test_async_cancellation_does_not_break_the_store(store):
    """[checkpoint] test_async_batch_store_handles_cancellation (adapted: a real store, not a mock)"""
    store.put(("c",), "d", {"v": 1})

    async def main():
        task = asyncio.create_task(store.aget(namespace=("a",), key="b"))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.sleep(0)
        return await store.aget(namespace=("c",), key="d")

    result = asyncio.run(main())
    assert isinstance(result, Item) and result.value == {"v": 1} and result.namespace == ("c",)


# ---------------------------------------------------------------------------- batch
def test_batch_order(store):
    """[sqlite] test_batch_order"""
    store.put(("test", "foo"), "key1", {"data": "value1"})
    store.put(("test", "bar"), "key2", {"data": "value2"})
    results = store.batch([
        GetOp(namespace=("test", "foo"), key="key1"),
        PutOp(namespace=("test", "bar"), key="key2", value={"data": "value2"}),
        SearchOp(namespace_prefix=("test",), filter={"data": "value1"}, limit=10, offset=0),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        GetOp(namespace=("test",), key="key3"),
    ])
    assert len(results) == 5
    assert isinstance(results[0], Item) and results[0].value == {"data": "value1"}
    assert results[0].key == "key1" and results[0].namespace == ("test", "foo")
    assert results[1] is None
    assert [(r.key, r.value) for r in results[2]] == [("key1", {"data": "value1"})]
    assert ("test", "foo") in results[3] and ("test", "bar") in results[3]
    assert results[4] is None

    again = store.batch([
        SearchOp(namespace_prefix=("test",), filter=None, limit=5, offset=0),
        GetOp(namespace=("test", "bar"), key="key2"),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=5, offset=0),
        PutOp(namespace=("test",), key="key3", value={"data": "value3"}),
        GetOp(namespace=("test", "foo"), key="key1"),
    ])
    assert len(again[0]) >= 2
    assert again[1].value == {"data": "value2"} and again[1].namespace == ("test", "bar")
    assert len(again[2]) > 0 and again[3] is None
    assert again[4].value == {"data": "value1"}
    assert store.get(("test",), "key3").value == {"data": "value3"}


def test_batch_get_ops(store):
    """[sqlite] test_batch_get_ops"""
    store.put(("test",), "key1", {"data": "value1"})
    store.put(("test",), "key2", {"data": "value2"})
    r = store.batch([GetOp(namespace=("test",), key=k) for k in ("key1", "key2", "key3")])
    assert [x.key if x else None for x in r] == ["key1", "key2", None]


def test_batch_put_ops(store):
    """[sqlite] test_batch_put_ops"""
    r = store.batch([PutOp(namespace=("test",), key="key1", value={"data": "value1"}),
                     PutOp(namespace=("test",), key="key2", value={"data": "value2"}),
                     PutOp(namespace=("test",), key="key3", value=None)])
    assert r == [None, None, None]
    assert store.get(("test",), "key1").value == {"data": "value1"}
    assert store.get(("test",), "key2").value == {"data": "value2"}
    assert store.get(("test",), "key3") is None


def test_batch_search_ops(store):
    """[sqlite] test_batch_search_ops"""
    for ns, key, value in [(("test", "foo"), "key1", {"data": "value1", "tag": "a"}),
                           (("test", "bar"), "key2", {"data": "value2", "tag": "a"}),
                           (("test", "baz"), "key3", {"data": "value3", "tag": "b"})]:
        store.put(ns, key, value)
    r = store.batch([SearchOp(namespace_prefix=("test",), filter={"tag": "a"}, limit=10, offset=0),
                     SearchOp(namespace_prefix=("test",), filter=None, limit=2, offset=0),
                     SearchOp(namespace_prefix=("test", "foo"), filter=None, limit=10, offset=0)])
    assert len(r[0]) == 2 and all(i.value["tag"] == "a" for i in r[0])
    assert len(r[1]) == 2
    assert [i.namespace for i in r[2]] == [("test", "foo")]


def test_batch_list_namespaces_ops(store):
    """[sqlite] test_batch_list_namespaces_ops"""
    data = [(("test", "documents", "public"), "doc1", {"content": "public doc"}),
            (("test", "documents", "private"), "doc2", {"content": "private doc"}),
            (("test", "images", "public"), "img1", {"content": "public image"}),
            (("prod", "documents", "public"), "doc3", {"content": "prod doc"})]
    for ns, key, value in data:
        store.put(ns, key, value)
    r = store.batch([
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        ListNamespacesOp(match_conditions=None, max_depth=2, limit=10, offset=0),
        ListNamespacesOp(match_conditions=(MatchCondition("suffix", ("public",)),), max_depth=None, limit=10,
                         offset=0)])
    assert len(r[0]) == len(data)
    assert r[1] and all(len(ns) <= 2 for ns in r[1])
    assert len(r[2]) == 3 and all(ns[-1] == "public" for ns in r[2])


# ---------------------------------------------------------------------------- basic operations
def test_basic_store_ops(clock_store):
    """[sqlite] TestSqliteStore.test_basic_store_ops + test_basic_store_operations (updated_at checked with
    an injected clock instead of a sleep)."""
    s, clock = clock_store
    ns = ("test", "documents")
    assert s.search(("test",)) == []
    s.put(ns, "doc1", {"title": "Test Document", "content": "Hello, World!"})
    item = s.get(ns, "doc1")
    assert item.namespace == ns and item.key == "doc1"
    assert item.value == {"title": "Test Document", "content": "Hello, World!"}
    assert item.created_at == item.updated_at and item.created_at.tzinfo is not None
    clock.advance(60)
    s.put(ns, "doc1", {"title": "Updated Document", "content": "Hello, Updated!"})
    updated = s.get(ns, "doc1")
    assert updated.value == {"title": "Updated Document", "content": "Hello, Updated!"}
    assert updated.created_at == item.created_at and (updated.updated_at - item.updated_at).total_seconds() == 60
    assert s.get(("test", "other_documents"), "doc1") is None
    s.put(ns, "doc2", {"title": "Another Document", "content": "Greetings!"})
    assert {i.key for i in s.search(("test",), limit=10)} == {"doc1", "doc2"}
    assert ns in s.list_namespaces(prefix=("test",))
    s.delete(ns, "doc1")
    s.delete(ns, "doc2")
    assert s.get(ns, "doc1") is None and s.get(ns, "doc2") is None
    assert s.search(("test",), limit=10) == []
    assert s.list_namespaces() == []


@pytest.fixture
def clock_store(tmp_path):
    class Clock:
        t = 1_700_000_000.0

        def __call__(self):
            return self.t

        def advance(self, dt):
            self.t += dt

    clock = Clock()
    mem = Memory(tmp_path / "clock.db", embedder=None, clock=clock)
    s = CausalMemStore(memory=mem)
    yield s, clock
    mem.close()


def test_list_namespaces_sqlite_class(store):
    """[sqlite] TestSqliteStore.test_list_namespaces"""
    nss = [("test", "documents", "public"), ("test", "documents", "private"), ("test", "images", "public"),
           ("test", "images", "private"), ("prod", "documents", "public"), ("prod", "documents", "private")]
    for ns in nss:
        store.put(ns, "dummy", {"content": "dummy"})
    assert len(store.list_namespaces()) == 6
    t = store.list_namespaces(prefix=["test"])
    assert len(t) == 4 and all(ns[0] == "test" for ns in t)
    p = store.list_namespaces(suffix=["public"])
    assert len(p) == 3 and all(ns[-1] == "public" for ns in p)
    assert all(len(ns) <= 2 for ns in store.list_namespaces(max_depth=2))
    assert len(store.list_namespaces(limit=3)) == 3
    for ns in nss:
        store.delete(ns, "dummy")
    assert store.list_namespaces() == []


def test_search_sqlite_class(store):
    """[sqlite] TestSqliteStore.test_search"""
    data = [(("test", "docs"), "doc1", {"title": "First Doc", "author": "Alice", "tags": ["important"]}),
            (("test", "docs"), "doc2", {"title": "Second Doc", "author": "Bob", "tags": ["draft"]}),
            (("test", "images"), "img1", {"title": "Image 1", "author": "Alice", "tags": ["final"]})]
    for ns, key, value in data:
        store.put(ns, key, value)
    assert len(store.search(["test"])) == 3
    docs = store.search(["test", "docs"])
    assert len(docs) == 2 and all(i.namespace == ("test", "docs") for i in docs)
    alice = store.search(["test"], filter={"author": "Alice"})
    assert len(alice) == 2 and all(i.value["author"] == "Alice" for i in alice)
    assert len(store.search(["test"], limit=2)) == 2
    assert len(store.search(["test"], offset=2)) == 1


def test_list_namespaces_operations(store):
    """[sqlite] test_list_namespaces_operations"""
    p = "3f2a9c"
    nss = [(p, "test", "documents", "public", p), (p, "test", "documents", "private", p),
           (p, "test", "images", "public", p), (p, "test", "images", "private", p),
           (p, "prod", "documents", "public", p), (p, "prod", "documents", "some", "nesting", "public", p),
           (p, "prod", "documents", "private", p)]
    for ns in nss:
        store.put(ns, "dummy", {"content": "dummy"})
    r = store.list_namespaces(prefix=(p, "test"))
    assert len(r) == 4 and all(ns[1] == "test" for ns in r)
    r = store.list_namespaces(prefix=(p, "test", "documents"))
    assert len(r) == 2 and all(ns[1:3] == ("test", "documents") for ns in r)
    r = store.list_namespaces(suffix=("public", p))
    assert len(r) == 4 and all(ns[-2] == "public" for ns in r)
    r = store.list_namespaces(prefix=(p, "test"), suffix=("public", p))
    assert len(r) == 2
    r = store.list_namespaces(prefix=(p, "*", "documents"))
    assert len(r) == 5 and all(ns[2] == "documents" for ns in r)
    assert len(store.list_namespaces(suffix=("*", "public", p))) == 4
    assert store.list_namespaces(suffix=("some", "*", "public", p)) == [
        (p, "prod", "documents", "some", "nesting", "public", p)]
    assert all(len(ns) <= 3 for ns in store.list_namespaces(max_depth=3))
    r = store.list_namespaces(max_depth=4, prefix=(p, "*", "documents"))
    assert len(set(r)) == len(r) == 5
    assert len(store.list_namespaces(prefix=(p,), limit=3)) == 3
    assert len(store.list_namespaces(prefix=(p,), offset=3)) == len(nss) - 3
    assert set(store.list_namespaces(prefix=(p,))) == set(nss)


def test_search_items(store):
    """[sqlite] test_search_items"""
    base = "test_search_items"
    nss = [(base, "documents", "user1"), (base, "documents", "user2"), (base, "reports", "department1"),
           (base, "reports", "department2")]
    items = [{"title": "Doc 1", "author": "John Doe", "tags": ["important"]},
             {"title": "Doc 2", "author": "Jane Smith", "tags": ["draft"]},
             {"title": "Report A", "author": "John Doe", "tags": ["final"]},
             {"title": "Report B", "author": "Alice Johnson", "tags": ["draft"]}]
    for ns, item in zip(nss, items):
        store.put(ns, f"item_{ns[-1]}", item)
    docs = store.search((base, "documents"))
    assert len(docs) == 2 and all(i.namespace[1] == "documents" for i in docs)
    assert len(store.search((base, "reports"))) == 2
    p1, p2 = store.search((base,), limit=2, offset=0), store.search((base,), limit=2, offset=2)
    assert len(p1) == len(p2) == 2 and {i.key for i in p1}.isdisjoint({i.key for i in p2})
    assert len(store.search((base,))) == 4
    john = store.search((base,), filter={"author": "John Doe"})
    assert len(john) == 2 and all(i.value["author"] == "John Doe" for i in john)
    draft = store.search((base,), filter={"tags": ["draft"]})
    assert len(draft) == 2 and all("draft" in i.value["tags"] for i in draft)


# ---------------------------------------------------------------------------- filters
def test_filter_keys_are_never_code(store):
    """[sqlite] test_sql_injection_vulnerability: a filter key that is not a field name (letters, digits,
    "_", "-", "." for nesting) is refused with ValueError("Invalid filter key ..."), as LangGraph's stores do,
    on search and in a batch; plain, dotted, hyphenated and non-ASCII field names still work."""
    store.put(("docs",), "public", {"access": "public", "data": "public info", "user": {"é-tag": "x"}})
    store.put(("docs",), "private", {"access": "private", "data": "secret", "password": "123"})
    normal = store.search(("docs",), filter={"access": "public"})
    assert [i.value["access"] for i in normal] == ["public"]
    for bad in ("access') = 'public' OR '1'='1' OR json_extract(value, '$.", "a b", "a'b", 'a"b', "a[0]",
                "a;b", "$.access", "access)"):
        with pytest.raises(ValueError, match="Invalid filter key"):
            store.search(("docs",), filter={bad: "dummy"})
        with pytest.raises(ValueError, match="Invalid filter key"):
            store.batch([SearchOp(("docs",), filter={bad: "dummy"})])
    assert [i.key for i in store.search(("docs",), filter={"user.é-tag": "x"})] == ["public"]


def test_filter_values_are_literal(store):
    """[sqlite] test_sql_injection_filter_values"""
    store.put(("docs",), "doc1", {"access": "public", "title": "Public Document"})
    store.put(("docs",), "doc2", {"access": "private", "title": "Private Document"})
    store.put(("docs",), "doc3", {"access": "secret", "title": "Secret Document"})
    for v in ["public' OR '1'='1", "public'; --", "public' UNION SELECT * FROM store --",
              "public\x00' OR '1'='1", "''''", "public' OR 'א'='א"]:
        assert store.search(("docs",), filter={"access": v}) == []
    store.put(("docs",), "doc4", {"title": "O'Brien's Document", "access": "public"})
    r = store.search(("docs",), filter={"title": "O'Brien's Document"})
    assert len(r) == 1 and r[0].value["title"] == "O'Brien's Document"


def test_numeric_filter_safety(store):
    """[sqlite] test_numeric_filter_safety"""
    for k, price, q in (("item1", 10, 5), ("item2", 20, 3), ("item3", 30, 1)):
        store.put(("items",), k, {"price": price, "quantity": q})
    r = store.search(("items",), filter={"price": {"$gt": 15}})
    assert len(r) == 2 and all(i.value["price"] > 15 for i in r)
    assert len(store.search(("items",), filter={"price": {"$lt": float("inf")}})) == 3
    assert len(store.search(("items",), filter={"price": {"$gt": float("-inf")}})) == 3
    assert store.search(("items",), filter={"price": {"$eq": float("nan")}}) == []
    assert len(store.search(("items",), filter={"price": {"$lt": 10**100}})) == 3
    store.put(("items",), "item4", {"price": -10, "quantity": 0})
    assert [i.key for i in store.search(("items",), filter={"price": {"$lt": 0}})] == ["item4"]


def test_boolean_filter_safety(store):
    """[sqlite] test_boolean_filter_safety"""
    store.put(("flags",), "flag1", {"active": True, "name": "Feature A"})
    store.put(("flags",), "flag2", {"active": False, "name": "Feature B"})
    store.put(("flags",), "flag3", {"active": True, "name": "Feature C"})
    r = store.search(("flags",), filter={"active": True})
    assert len(r) == 2 and all(i.value["active"] is True for i in r)
    r = store.search(("flags",), filter={"active": False})
    assert len(r) == 1 and r[0].value["active"] is False


def test_filter_keys_with_hyphens_and_digits(store):
    """[sqlite] test_filter_keys_with_hyphens_and_digits"""
    store.put(("docs",), "hyphen", {"access-level": "public", "user": {"access-level": "nested"}})
    store.put(("docs",), "digit", {"123abc": "ok", "user": {"123abc": "ok2"}})
    assert [r.key for r in store.search(("docs",), filter={"access-level": "public"})] == ["hyphen"]
    assert [r.key for r in store.search(("docs",), filter={"user.access-level": "nested"})] == ["hyphen"]
    assert [r.key for r in store.search(("docs",), filter={"123abc": "ok"})] == ["digit"]
    assert [r.key for r in store.search(("docs",), filter={"user.123abc": "ok2"})] == ["digit"]


def test_unknown_filter_operator_is_an_error(store):
    """Not from LangGraph: an operator this store does not know is an error naming it."""
    store.put(("a",), "k", {"n": 1})
    with pytest.raises(ValueError, match=r"\$regex"):
        store.search(("a",), filter={"n": {"$regex": "1"}})


# ---------------------------------------------------------------------------- namespace matching
def test_search_namespace_segment_boundary(store):
    """[sqlite] test_search_namespace_segment_boundary"""
    for ns in [("foo",), ("foo", "child"), ("foo", "child", "deep"), ("foobar",), ("foobar", "baz"), ("foo2",)]:
        store.put(ns, "k", {"v": 1})

    def nss(prefix):
        return {i.namespace for i in store.search(prefix, limit=100)}

    assert nss(("foo",)) == {("foo",), ("foo", "child"), ("foo", "child", "deep")}
    assert nss(("foobar",)) == {("foobar",), ("foobar", "baz")}
    assert nss(("foo2",)) == {("foo2",)}
    assert nss(("fo",)) == set()


def test_search_namespace_wildcard_chars_are_literal(store):
    """[sqlite] test_search_namespace_wildcard_chars_are_literal"""
    for ns in [("user_1",), ("user_1", "child"), ("userX1",), ("a%b",), ("axxb",), ("star*",), ("starX",)]:
        store.put(ns, "k", {"v": 1})

    def nss(prefix):
        return {i.namespace for i in store.search(prefix, limit=100)}

    assert nss(("user_1",)) == {("user_1",), ("user_1", "child")}
    assert nss(("a%b",)) == {("a%b",)}
    assert nss(("star*",)) == {("star*",)}


def test_search_namespace_is_case_sensitive(store):
    """[sqlite] test_search_namespace_is_case_sensitive"""
    store.put(("Foo",), "k", {"v": "upper"})
    store.put(("foo",), "k", {"v": "lower"})
    assert {i.namespace for i in store.search(("foo",), limit=100)} == {("foo",)}
    assert {i.namespace for i in store.search(("Foo",), limit=100)} == {("Foo",)}


def test_list_namespaces_segment_boundary(store):
    """[sqlite] test_list_namespaces_segment_boundary"""
    for ns in [("foo",), ("foo", "child"), ("foobar",), ("foobar", "baz"), ("uid", "users", "alice"),
               ("uid", "users", "malice"), ("uid", "a", "b", "alice")]:
        store.put(ns, "k", {"v": 1})
    assert set(store.list_namespaces(prefix=["foo"], limit=100)) == {("foo",), ("foo", "child")}
    assert set(store.list_namespaces(suffix=["alice"], limit=100)) == {("uid", "users", "alice"),
                                                                       ("uid", "a", "b", "alice")}
    assert set(store.list_namespaces(prefix=["uid", "*", "alice"], limit=100)) == {("uid", "users", "alice")}
    assert set(store.list_namespaces(prefix=["uid"], limit=100)) == {
        ("uid", "users", "alice"), ("uid", "users", "malice"), ("uid", "a", "b", "alice")}


def test_search_empty_prefix_is_unconstrained(store):
    """[sqlite] test_search_empty_prefix_is_unconstrained"""
    for ns in [("a",), ("b", "c"), ("d", "e", "f")]:
        store.put(ns, "k", {"v": 1})
    assert {i.namespace for i in store.search((), limit=100)} == {("a",), ("b", "c"), ("d", "e", "f")}


def test_namespace_labels_with_trailing_newline(store):
    """[sqlite] test_namespace_labels_with_trailing_newline"""
    store.put(("users", "alice"), "k", {"v": 1})
    store.put(("users", "alice\n"), "k", {"v": 2})
    assert set(store.list_namespaces(suffix=["alice"], limit=100)) == {("users", "alice")}
    assert set(store.list_namespaces(prefix=["users", "alice"], limit=100)) == {("users", "alice")}


def test_list_namespaces_metacharacter_labels(store):
    """[sqlite] test_list_namespaces_metacharacter_labels"""
    pairs = [("star*", "starX"), ("q?m", "qXm"), ("br[ack]et", "brXacXket"), ("user_1", "userX1"),
             ("a%b", "axxb"), ("plus+", "plusX")]
    for label, decoy in pairs:
        store.put((label,), "k", {"v": 1})
        store.put((decoy,), "k", {"v": 1})
        store.put((label, "child"), "k", {"v": 1})
    for label, decoy in pairs:
        found = set(store.list_namespaces(prefix=[label], limit=100))
        assert found == {(label,), (label, "child")} and (decoy,) not in found
        assert set(store.list_namespaces(prefix=[label, "child"], limit=100)) == {(label, "child")}


# ---------------------------------------------------------------------------- query search (index)
def test_vector_store_initialization(vstore, fake_embeddings):
    """[checkpoint] + [sqlite] test_vector_store_initialization (the sqlite_master check is left out)"""
    s = vstore()
    assert s.index_config["dims"] == fake_embeddings.dims and s.index_config["embed"] is fake_embeddings
    assert s.memory.embedder.dim == fake_embeddings.dims
    s2 = vstore(fields=["content", "title"])
    assert s2.index_config["fields"] == ["content", "title"]


@pytest.mark.parametrize("use_async", [False, True])
def test_vector_insert_with_auto_embedding(vstore, use_async):
    """[checkpoint] test_vector_insert_with_auto_embedding + test_async_... ; [sqlite] same name"""
    s = vstore()
    docs = [("doc1", {"text": "short text"}), ("doc2", {"text": "longer text document"}),
            ("doc3", {"text": "longest text document here"}), ("doc4", {"description": "text in description field"}),
            ("doc5", {"content": "text in content field"}), ("doc6", {"body": "text in body field"})]

    async def run():
        for k, v in docs:
            await s.aput(("test",), k, v)
        return await s.asearch(("test",), query="long text")

    if use_async:
        results = asyncio.run(run())
    else:
        for k, v in docs:
            s.put(("test",), k, v)
        results = s.search(("test",), query="long text")
    keys = [r.key for r in results]
    assert "doc2" in keys and "doc3" in keys
    assert all(isinstance(r, SearchItem) and r.score is not None for r in results)


@pytest.mark.parametrize("use_async", [False, True])
def test_vector_update_with_embedding(vstore, use_async):
    """[checkpoint] test_vector_update_with_embedding + async; [sqlite] same name"""
    s = vstore()

    async def run():
        for k, t in (("doc1", "zany zebra Xerxes"), ("doc2", "something about dogs"), ("doc3", "text about birds")):
            await s.aput(("test",), k, {"text": t})
        first = await s.asearch(("test",), query="Zany Xerxes")
        await s.aput(("test",), "doc1", {"text": "new text about dogs"})
        after = await s.asearch(("test",), query="Zany Xerxes")
        new = await s.asearch(("test",), query="new text about dogs")
        await s.aput(("test",), "doc4", {"text": "new text about dogs"}, index=False)
        limited = await s.asearch(("test",), query="new text about dogs", limit=3)
        return first, after, new, limited

    if use_async:
        first, after, new, limited = asyncio.run(run())
    else:
        for k, t in (("doc1", "zany zebra Xerxes"), ("doc2", "something about dogs"), ("doc3", "text about birds")):
            s.put(("test",), k, {"text": t})
        first = s.search(("test",), query="Zany Xerxes")
        s.put(("test",), "doc1", {"text": "new text about dogs"})
        after = s.search(("test",), query="Zany Xerxes")
        new = s.search(("test",), query="new text about dogs")
        s.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
        limited = s.search(("test",), query="new text about dogs", limit=3)
    assert first[0].key == "doc1"
    after_score = next((r.score for r in after if r.key == "doc1"), 0.0)
    assert after_score < first[0].score
    assert all(r.score > after_score for r in new if r.key == "doc1")
    assert not any(r.key == "doc4" for r in limited)


@pytest.mark.parametrize("use_async", [False, True])
def test_vector_search_with_filters(vstore, use_async):
    """[checkpoint] test_vector_search_with_filters + async; [sqlite] same name"""
    s = vstore()
    docs = [("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
            ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
            ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
            ("doc4", {"text": "blue car", "color": "blue", "score": 3.5})]
    queries = [("apple", {"color": "red"}), ("car", {"color": "red"}), ("bbbbluuu", {"score": {"$gt": 3.2}}),
               ("apple", {"score": {"$gte": 4.0}, "color": "green"})]

    async def run():
        for k, v in docs:
            await s.aput(("test",), k, v)
        return [await s.asearch(("test",), query=q, filter=f) for q, f in queries]

    if use_async:
        r = asyncio.run(run())
    else:
        for k, v in docs:
            s.put(("test",), k, v)
        r = [s.search(("test",), query=q, filter=f) for q, f in queries]
    assert [i.key for i in r[0]] == ["doc1", "doc2"]
    assert r[1][0].key == "doc2" and len(r[1]) == 2
    assert len(r[2]) == 3 and r[2][0].key == "doc4" and {"doc1", "doc3"} <= {i.key for i in r[2]}
    assert [i.key for i in r[3]] == ["doc3"]


def test_concurrent_async_writes_and_filtered_searches(vstore):
    """[checkpoint] test_async_batched_vector_search_concurrent (adapted: CausalMemStore itself, no mock)"""
    s = vstore()
    colors, things, scores = ["red", "blue", "green", "yellow", "purple"], ["apple", "car", "house", "book",
                                                                              "phone"], [3.0, 3.5, 4.0, 4.5, 5.0]
    docs = [(f"doc{i}", {"text": f"{colors[i % 5]} {things[i % 5]}", "color": colors[i % 5], "score": scores[i % 5],
                         "index": i}) for i in range(50)]
    queries = [("apple", {"color": "red"}), ("car", {"color": "blue"}), ("house", {"color": "green"}),
               ("phone", {"score": {"$gt": 4.99}}), ("book", {"score": {"$lte": 3.5}}),
               ("apple", {"score": {"$gte": 3.0}, "color": "red"}), ("car", {"score": {"$lt": 5.1}, "color": "blue"}),
               ("house", {"index": {"$gt": 25}}), ("phone", {"index": {"$lte": 10}})]

    async def run():
        await asyncio.gather(*[s.aput(("test",), k, v) for k, v in docs],
                             *[s.adelete(("test",), k) for k, _ in docs],
                             *[s.aput(("test",), k, v) for k, v in docs])
        return await asyncio.gather(*[s.asearch(("test",), query=q, filter=f) for q, f in queries])

    all_results = asyncio.run(run())
    assert len(s.search(("test",), limit=100)) == 50  # the last gather step (put) won for every key
    ops = {"$gt": float.__gt__, "$gte": float.__ge__, "$lt": float.__lt__, "$lte": float.__le__}
    for results, (q, f) in zip(all_results, queries):
        assert results, (q, f)
        for r in results:
            if "color" in f:
                assert r.value["color"] == f["color"]
            for field in ("score", "index"):
                for op, arg in f.get(field, {}).items():
                    assert ops[op](float(r.value[field]), float(arg))


@pytest.mark.parametrize("use_async", [False, True])
def test_vector_search_pagination(vstore, use_async):
    """[checkpoint] test_vector_search_pagination + async; [sqlite] same name (scores descending)"""
    s = vstore()
    for i in range(5):
        s.put(("test",), f"doc{i}", {"text": f"test document number {i}"})
    if use_async:
        async def run():
            return (await s.asearch(("test",), query="test", limit=2),
                    await s.asearch(("test",), query="test", limit=2, offset=2),
                    await s.asearch(("test",), query="test", limit=10))
        p1, p2, everything = asyncio.run(run())
    else:
        p1 = s.search(("test",), query="test", limit=2)
        p2 = s.search(("test",), query="test", limit=2, offset=2)
        everything = s.search(("test",), query="test", limit=10)
    assert len(p1) == len(p2) == 2 and {r.key for r in p1}.isdisjoint({r.key for r in p2})
    assert p1[0].score >= p1[1].score and p2[0].score >= p2[1].score
    assert len(everything) == 5 and everything[0].score >= everything[2].score


def test_vector_search_edge_cases(vstore):
    """[sqlite] test_vector_search_edge_cases"""
    s = vstore()
    s.put(("test",), "doc1", {"text": "test document"})
    for q in ("", None, "test " * 100, "test!@#$%^&*()"):
        assert len(s.search(("test",), query=q)) == 1, q


def test_embed_with_path(vstore):
    """[sqlite] test_embed_with_path: with an index, every indexed field has its own vector and an item's
    score is its best field's cosine similarity to the query: an exact match of one field scores > 0.9
    whatever the item's other fields; an unindexed field's text scores < 0.9 for both items."""
    s = vstore(fields=["key0", "key1", "key3"])
    s.put(("test",), "doc1", {"key1": "xxx", "key2": "yyy", "key3": "zzz"})
    s.put(("test",), "doc2", {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"})
    r = s.search(("test",), query="xxx")
    assert len(r) == 2 and r[0].key != r[1].key
    assert r[0].score > 0.9 and r[1].score > 0.9
    r = s.search(("test",), query="uuu")
    assert len(r) == 2 and r[0].key == "doc2" and r[0].score > r[1].score
    r = s.search(("test",), query="zzz")
    assert len(r) == 2 and r[0].key == "doc1" and r[0].score > r[1].score
    r = s.search(("test",), query="www")  # key2 is not indexed
    assert len(r) == 2 and all(h.score < 0.9 for h in r)


@pytest.mark.parametrize("query", ["aaa", "bbb", "abcd", "zebra crossing"])
def test_index_score_is_the_cosine_of_query_and_field(vstore, fake_embeddings, query, tmp_path):
    """[sqlite] test_scores: the score is the cosine similarity of the query's vector and the indexed
    field's vector (to 1e-3), whether similar or not; it holds after the store is reopened."""
    s = vstore(fields=["key0"], path=tmp_path / "scores.db")
    s.put(("test",), "doc", {"key0": "aaa", "other": "zzz"})
    q = np.asarray(fake_embeddings.embed_query(query))
    d = np.asarray(fake_embeddings.embed_documents(["aaa"])[0])
    expected = float(q @ d / (np.linalg.norm(q) * np.linalg.norm(d)))
    r = s.search((), query=query)
    assert len(r) == 1 and r[0].score == pytest.approx(expected, abs=1e-3)
    s.close()
    again = CausalMemStore(tmp_path / "scores.db", index={"dims": fake_embeddings.dims, "embed": fake_embeddings,
                                                          "fields": ["key0"]})
    try:
        assert again.search((), query=query)[0].score == pytest.approx(expected, abs=1e-3)
    finally:
        again.close()


def test_embed_with_path_operation_config(vstore):
    """[sqlite] test_embed_with_path_operation_config (same adaptation as test_embed_with_path)"""
    s = vstore(fields=["key17"])
    s.put(("test",), "doc3", {"key0": "aaa", "key1": "bbb", "key2": "ccc", "key3": "ddd"}, index=["key0", "key1"])
    s.put(("test",), "doc4", {"key0": "eee", "key1": "bbb", "key2": "fff", "key3": "ggg"}, index=["key1", "key3"])
    r = s.search(("test",), query="aaa")
    assert r[0].key == "doc3" and (len(r) == 1 or r[0].score > r[1].score)
    r = s.search(("test",), query="ggg")
    assert r[0].key == "doc4" and (len(r) == 1 or r[0].score > r[1].score)
    r = s.search(("test",), query="bbb")
    assert {h.key for h in r} == {"doc3", "doc4"}
    s.put(("test",), "doc5", {"key0": "hhh", "key1": "iii"}, index=False)
    r = s.search(("test",))
    assert len(r) == 3 and any(h.key == "doc5" for h in r)
    r = s.search(("test",), query="hhh")
    assert [h.score for h in r if h.key == "doc5"] == [None]  # unindexed: listed after the ranked ones


def test_non_ascii(vstore):
    """[checkpoint] + [sqlite] test_non_ascii"""
    s = vstore()
    texts = ["这是中文", "これは日本語です", "이건 한국어야", "Это русский", "यह रूसी है"]
    for i, t in enumerate(texts, 1):
        s.put(("user_123", "memories"), str(i), {"text": t})
    for i, t in enumerate(texts, 1):
        assert s.search(("user_123", "memories"), query=t)[0].key == str(i)


# ---------------------------------------------------------------------------- causalmem specifics
def test_default_embedder_semantic_search_and_reopen(tmp_path):
    """causalmem's own embedder (the packaged MiniLM) by default; everything survives a reopen."""
    path = tmp_path / "agent.db"
    with CausalMemStore(path) as s:
        assert s.memory.embedder is not None
        s.put(("alice", "memories"), "food", {"text": "I love eating pizza with my friends"})
        s.put(("alice", "memories"), "job", {"text": "I work as a backend engineer on payments"})
        s.put(("bob", "memories"), "food", {"text": "Bob only eats sushi"})
        top = s.search(("alice", "memories"), query="what meal does she enjoy?", limit=1)
        assert [t.key for t in top] == ["food"] and top[0].namespace == ("alice", "memories")
        created = s.get(("alice", "memories"), "food").created_at
    with CausalMemStore(path, embedder=None) as again:
        item = again.get(("alice", "memories"), "food")
        assert item.value == {"text": "I love eating pizza with my friends"} and item.created_at == created
        assert sorted(again.list_namespaces()) == [("alice", "memories"), ("bob", "memories")]
        # the items are causalmem chunks in the "langgraph" scope, with their namespace in metadata
        chunks = again.memory.get_all(agent_id="langgraph")
        assert len(chunks) == 3
        assert {tuple(c.metadata["langgraph"]["namespace"]) for c in chunks} == {("alice", "memories"),
                                                                                ("bob", "memories")}


def test_bad_arguments(store):
    with pytest.raises(ValueError, match="limit"):
        store.search(("a",), limit=0)
    with pytest.raises(ValueError, match="offset"):
        store.search(("a",), offset=-1)
    with pytest.raises(TypeError, match="value"):
        store.put(("a",), "k", ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="JSON"):
        store.put(("a",), "k", {"when": object()})
    with pytest.raises(NotImplementedError):
        store.put(("a",), "k", {"v": 1}, ttl=5.0)
    with pytest.raises(ValueError, match="index"):
        CausalMemStore(index={"dims": 4, "embed": CharCountEmbeddings(4), "metric": "l2"})
    with pytest.raises(TypeError, match="memory"):
        CausalMemStore(memory="x")  # type: ignore[arg-type]
    assert isinstance(store, BaseStore)


def _chain(state: Any, *nodes: Any) -> Any:
    """A StateGraph builder running ``nodes`` (named by their functions) one after the other."""
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(state)
    names = [node.__name__ for node in nodes]
    for node in nodes:
        builder.add_node(node.__name__, node)
    for a, b in zip([START, *names], [*names, END]):
        builder.add_edge(a, b)
    return builder


def test_state_graph_two_threads_share_long_term_memory(tmp_path):
    """A real StateGraph compiled with store=CausalMemStore(...): thread 1 writes a memory from a node,
    thread 2 (a different conversation, its own checkpoint) reads it back in another node. No LLM."""
    from typing import TypedDict

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.config import get_store

    class State(TypedDict, total=False):
        user: str
        message: str
        recalled: list[str]

    def remember(state: State, config) -> dict:
        store = get_store()
        msg = state["message"]
        if msg.startswith("remember:"):
            fact = msg.removeprefix("remember:").strip()
            key = f"{config['configurable']['thread_id']}-{len(store.search((state['user'], 'memories'), limit=100))}"
            store.put((state["user"], "memories"), key, {"text": fact, "thread": config["configurable"]["thread_id"]})
        return {}

    def recall(state: State) -> dict:
        store = get_store()
        hits = store.search((state["user"], "memories"), query=state["message"], limit=3)
        return {"recalled": [h.value["text"] for h in hits]}

    builder = _chain(State, remember, recall)

    with CausalMemStore(tmp_path / "graph.db") as store:
        graph = builder.compile(checkpointer=InMemorySaver(), store=store)
        t1 = {"configurable": {"thread_id": "thread-1"}}
        t2 = {"configurable": {"thread_id": "thread-2"}}
        graph.invoke({"user": "alice", "message": "remember: my favourite editor is vim"}, t1)
        graph.invoke({"user": "alice", "message": "remember: I deploy the payments service on Fridays"}, t1)
        graph.invoke({"user": "bob", "message": "remember: my favourite editor is emacs"}, t1)
        out = graph.invoke({"user": "alice", "message": "which editor do I like?"}, t2)
        assert out["recalled"][0] == "my favourite editor is vim"
        assert "my favourite editor is emacs" not in out["recalled"]  # bob's namespace is not alice's
        # thread 2 has its own conversation state; the memory came from the store, not the checkpoint
        assert graph.get_state(t2).values["message"] == "which editor do I like?"
        assert graph.get_state(t1).values["message"].startswith("remember: my favourite editor is emacs")

        async def arun():
            return await graph.ainvoke({"user": "alice", "message": "when do I deploy payments?"},
                                       {"configurable": {"thread_id": "thread-3"}})

        aout = asyncio.run(arun())
        assert aout["recalled"][0] == "I deploy the payments service on Fridays"
        items = store.search(("alice", "memories"), limit=10)
        assert {i.value["thread"] for i in items} == {"thread-1"}



# ---------------------------------------------------------------------------- learning from the caller
PAYMENTS_Q = "when does the payments service deploy?"
PAIR = {"fri": "The payments service deploys on Fridays.", "mon": "The payments service deploys on Mondays."}
OTHERS = {"lunch": "Lunch is at noon.", "oncall": "Kim is on call for search this week."}


def _keys(hits) -> list[str]:
    return [h.key for h in hits]


def _fill(s: CausalMemStore, ns: tuple[str, ...]) -> None:
    for key, text in {**PAIR, **OTHERS}.items():
        s.put(ns, key, {"text": text})


def test_feedback_on_a_lower_result_ranks_it_higher_in_its_namespace_only(tmp_path):
    """The default store (packaged MiniLM): two near-equal answers; feedback on the second makes the
    next search through the store rank it first. Bob's namespace holds the same keys and texts: his
    ranking does not move (the (namespace, key) reaches alice's item only). Negative feedback hurts."""
    alice, bob = ("alice", "memories"), ("bob", "memories")
    with CausalMemStore(tmp_path / "fb.db") as s:
        assert s.memory.embedder is not None and s.memory.config.q_rank
        _fill(s, alice)
        _fill(s, bob)
        hits = s.search(alice, query=PAYMENTS_Q, limit=4)
        assert set(_keys(hits[:2])) == set(PAIR)
        top, low = hits[0], hits[1]
        bob_before = _keys(s.search(bob, query=PAYMENTS_Q, limit=4))
        assert _keys(s.search(alice, query=PAYMENTS_Q, limit=4)) == _keys(hits)  # a search alone moves nothing
        q = s.feedback(low.namespace, low.key, 1.0)
        assert q > s.memory.config.q_init
        after = s.search(alice, query=PAYMENTS_Q, limit=4)
        assert _keys(after)[:2] == [low.key, top.key]
        assert _keys(s.search(bob, query=PAYMENTS_Q, limit=4)) == bob_before
        # it hurt after all: back below the other answer
        assert s.feedback(alice, low.key, -1.0) < s.memory.config.q_init
        assert _keys(s.search(alice, query=PAYMENTS_Q, limit=4))[:2] == [top.key, low.key]
        assert _keys(s.search(bob, query=PAYMENTS_Q, limit=4)) == bob_before


def test_afeedback_from_a_state_graph_node(tmp_path):
    """In a real StateGraph: one node recalls, the next rewards the hit the user picked
    (``get_store().afeedback``); the next run of the graph recalls it first."""
    from typing import TypedDict

    from langgraph.config import get_store

    class State(TypedDict, total=False):
        question: str
        picked: int
        recalled: list[str]

    async def recall(state: State) -> dict:
        hits = await get_store().asearch(("alice", "memories"), query=state["question"], limit=3)
        return {"recalled": [h.key for h in hits]}

    async def learn(state: State) -> dict:
        if state.get("picked") is not None:
            await get_store().afeedback(("alice", "memories"), state["recalled"][state["picked"]], 1.0)
        return {}

    builder = _chain(State, recall, learn)

    async def main(store: CausalMemStore) -> tuple[list[str], list[str]]:
        graph = builder.compile(store=store)
        first = (await graph.ainvoke({"question": PAYMENTS_Q, "picked": 1}))["recalled"]
        second = (await graph.ainvoke({"question": PAYMENTS_Q}))["recalled"]
        return first, second

    with CausalMemStore(tmp_path / "graph_fb.db") as store:
        _fill(store, ("alice", "memories"))
        first, second = asyncio.run(main(store))
    assert set(first[:2]) == set(PAIR)
    assert second[:2] == [first[1], first[0]]


def test_confirm_links_items_of_one_namespace_for_the_next_search(tmp_path):
    """Lexical + graph (no model): "alpha release" finds A only; after confirm(ns, [A, B]) the next
    search through the store reaches B over the learned link, and not C."""
    ns = ("team", "notes")
    with CausalMemStore(tmp_path / "confirm.db", embedder=None) as s:
        s.put(ns, "A", {"text": "alpha release of the kafka consumer"})
        s.put(ns, "B", {"text": "beta rollout finished on friday"})
        s.put(ns, "C", {"text": "gamma lunch is at noon"})
        s.put(("other",), "A", {"text": "alpha release of the kafka consumer"})
        assert _keys(s.search(ns, query="alpha release")) == ["A"]
        assert s.confirm(ns, ["A", "B"]) == 1
        hits = s.search(ns, query="alpha release")
        assert _keys(hits) == ["A", "B"] and hits[1].score > 0
        assert _keys(s.search(("other",), query="alpha release")) == ["A"]  # the other namespace's A: no link

        async def again() -> int:
            return await s.aconfirm(ns, ["A", "C"])

        assert asyncio.run(again()) == 1
        assert set(_keys(s.search(ns, query="alpha release"))) == {"A", "B", "C"}


def test_feedback_and_confirm_bad_arguments(store):
    ns = ("alice", "memories")
    store.put(ns, "a", {"text": "the staging database runs postgres 16"})
    store.put(ns, "b", {"text": "lunch is at noon"})
    store.put(("bob", "memories"), "c", {"text": "bob's note"})
    for bad in (1.5, -1.01, float("nan"), float("inf"), 10 ** 400):
        with pytest.raises(ValueError, match="reward"):
            store.feedback(ns, "a", bad)
    for bad in ("1.0", None, True):
        with pytest.raises(TypeError, match="reward"):
            store.feedback(ns, "a", bad)  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="key.*'nope'"):
        store.feedback(ns, "nope", 1.0)
    with pytest.raises(KeyError, match="key.*'c'"):
        store.feedback(ns, "c", 1.0)  # bob's key, asked under alice's namespace
    with pytest.raises(KeyError, match="'a'"):
        store.feedback(("alice",), "a", 1.0)  # a prefix is not the item's namespace
    with pytest.raises(InvalidNamespaceError):
        store.feedback(("alice", "mem.ories"), "a", 1.0)
    with pytest.raises(TypeError, match="key"):
        store.feedback(ns, 3, 1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="keys"):
        store.confirm(ns, "ab")
    with pytest.raises(ValueError, match="keys"):
        store.confirm(ns, [])
    with pytest.raises(KeyError, match="keys.*'c'"):
        store.confirm(ns, ["a", "c"])
    with pytest.raises(KeyError, match="keys"):
        asyncio.run(store.aconfirm(ns, ["a", "zz"]))
    with pytest.raises(ValueError, match="reward"):
        asyncio.run(store.afeedback(ns, "a", 2))
    assert store.memory.stats()["cooccurrence"] == 0  # no failed call wrote a link
    qs = {c.metadata["langgraph"]["key"]: c.q_value for c in store.memory.get_all(agent_id="langgraph")}
    assert set(qs.values()) == {store.memory.config.q_init}  # nor moved a Q-value

LEFT_OUT = {
    "[checkpoint] test_async_batch_store_resilience": "tests the background task of LangGraph's own "
    "AsyncBatchedBaseStore class; CausalMemStore is not built on it",
    "[checkpoint] test_get_text_at_path": "a LangGraph utility function, not a store",
    "[checkpoint] test_async_batch_store": "mocks AsyncBatchedBaseStore internals",
    "[checkpoint] test_async_batch_store_deduplication": "spies on AsyncBatchedBaseStore's op deduplication",
    "[checkpoint] test_embed_with_path": "asserts per-field vectors (two items with equal max-field "
    "cosine scoring equal, an unindexed item scoring None among scored ones); causalmem indexes one chunk "
    "per item and ranks by its fused score. The [sqlite] variant's ranking assertions are adapted above",
    "[sqlite] test_scores": "asserts score == raw cosine; causalmem's score is its fused hybrid score",
    "[sqlite] test_nonnull_migrations": "SqliteStore's migration list",
    "[sqlite] test_escape_glob_literal": "SqliteStore private helper",
    "[sqlite] test_namespace_match_pattern": "SqliteStore private helper",
    "[sqlite] test_list_namespaces_prefix_uses_indexable_condition": "SqliteStore's SQL query plan",
}
