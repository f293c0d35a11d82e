"""The compiled helpers of the search path:
``CSR.links_among`` (the seed colouring's adjacency), ``bm25_segments`` (BM25 sums of several
terms' postings), ``bm25_top`` (the allowed docs' best scores),
``bonus_sum`` (what the graph bonus's spreads send each node), ``BM25Index.doc_terms`` (the second pass's feedback words from the forward
index) — each against a plain oracle: the code they replaced, or a brute force over the same data."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from causalmem import Memory, _kernels, _spread_py, retrieval
from causalmem.lexical import BM25Index
from causalmem.spreading import CSR
from causalmem.tokenizer import tokenize

IMPLS = [pytest.param(_spread_py, id="reference")]
if _kernels.compiled is not None:
    IMPLS.insert(0, pytest.param(_kernels.compiled, id="compiled"))


def brute_links(n, src, dst, valid, nodes):
    """(k, j) for every valid edge nodes[k] -> nodes[j], k != j, by k then CSR (= stable src) order."""
    order = sorted(range(len(src)), key=lambda e: src[e])  # the CSR's stable counting sort
    out = []
    for k, a in enumerate(nodes):
        for e in order:
            if src[e] == a and valid[e]:
                out += [(k, j) for j, b in enumerate(nodes) if b == dst[e] and j != k]
    return out


@st.composite
def graph_and_nodes(draw):
    n = draw(st.integers(1, 25))
    m = draw(st.integers(0, 60))
    src = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    dst = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    valid = draw(st.lists(st.booleans(), min_size=m, max_size=m))
    nodes = draw(st.lists(st.integers(0, n + 3), min_size=0, max_size=12))  # beyond n: no row
    return n, src, dst, valid, nodes


@settings(max_examples=150, deadline=None)
@given(g=graph_and_nodes())
def test_links_among_matches_brute_force(g):
    n, src, dst, valid, nodes = g
    csr = CSR.from_coo(n, np.array(src, np.int64), np.array(dst, np.int64), np.ones(len(src), np.float32),
                       valid=np.array(valid, bool))
    got = csr.links_among(np.array(nodes, np.int64))
    assert got.dtype == np.int64 and got.shape == (len(got), 2)
    assert got.tolist() == [list(p) for p in brute_links(n, src, dst, valid, nodes)]
    # the twin answers the same, pair for pair
    view = _spread_py.GraphView(csr.indptr, csr.indices, csr.weights, csr.valid, csr.inhibitory)
    assert _spread_py.links_among(view, np.array(nodes, np.int32)).tolist() == got.tolist()


@pytest.mark.parametrize("impl", IMPLS)
def test_links_among_golden(impl):
    # 0 -> 1 -> 2 -> 0 (invalid), 3 -> 3 (self loop), 3 -> 4 twice
    csr = CSR.from_coo(5, [0, 1, 2, 3, 3, 3], [1, 2, 0, 3, 4, 4], np.ones(6), valid=[1, 1, 0, 1, 1, 1])
    view = impl.GraphView(csr.indptr, csr.indices, csr.weights, csr.valid, csr.inhibitory)
    assert impl.links_among(view, np.array([2, 1, 0], np.int32)).tolist() == [[1, 0], [2, 1]]
    assert impl.links_among(view, np.array([4, 3], np.int32)).tolist() == [[1, 0], [1, 0]]
    assert impl.links_among(view, np.array([3, 3], np.int32)).tolist() == [[0, 1], [1, 0]]  # a duplicate node
    assert impl.links_among(view, np.array([9], np.int32)).tolist() == []


@pytest.mark.parametrize("nodes, match", [
    ([-1, 2], "nodes must be in"),
    ([2**31, 0], "nodes must be in"),
    ([0.5, 1.0], "nodes must have an integer dtype"),
    ([[0, 1]], "nodes must be 1-D"),
    (["a"], "nodes must have a numeric dtype"),
])
def test_links_among_bad_nodes(nodes, match):
    csr = CSR.from_coo(3, [0], [1], [1.0])
    with pytest.raises(ValueError, match=match):
        csr.links_among(nodes)
    assert csr.links_among([]).shape == (0, 2)


def colours_oracle(views, seed_ids):
    """The colouring as it was written before (np.isin per seed row of the forward graph and its overlay)."""
    graph, extra = views.projection.current()
    parts = [graph.forward] + ([extra[0]] if extra is not None else [])
    pos = {int(n): k for k, n in enumerate(seed_ids.tolist())}
    adj: list[set[int]] = [set() for _ in range(len(seed_ids))]
    for csr in parts:
        ip, ix, valid = csr.indptr, csr.indices, csr.valid
        for k, n in enumerate(seed_ids.tolist()):
            if n >= len(ip) - 1:
                continue
            row = ix[ip[n]:ip[n + 1]]
            hit = np.isin(row, seed_ids)
            if valid is not None:
                hit &= valid[ip[n]:ip[n + 1]].astype(bool)
            for m in row[hit].tolist():
                j = pos[int(m)]
                if j != k:
                    adj[k].add(j)
                    adj[j].add(k)
    colour = np.full(len(seed_ids), -1, dtype=np.int64)
    for k in range(len(seed_ids)):
        used = {int(colour[j]) for j in adj[k]}
        c = 0
        while c in used:
            c += 1
        colour[k] = c
    return colour, adj


def test_seed_colours_on_a_real_store_with_overlay_and_invalidated_edges(db_path, clock):
    rng = np.random.default_rng(3)
    mem = Memory(db_path, embedder=None, clock=clock)
    try:
        for s in range(6):
            mem.add([f"turn {s} {i} about the deploy pipeline" for i in range(8)], user_id="u", session_id=f"s{s}")
        edges = mem.record_many([{"decision": f"decision {i}", "outcome": f"outcome {i % 7}", "relation": "caused"}
                                 for i in range(30)])
        mem.search("deploy", reinforce=False)  # the graph is built: later writes go to the overlay
        more = mem.record_many([{"decision": f"decision {i}", "outcome": f"outcome {i % 5}", "relation": "enabled"}
                                for i in range(20, 40)])
        mem.invalidate(edges[3].id)
        mem.invalidate(more[2].id)
        views = mem._views
        with views.lock:
            _, extra = views.projection.current()
            assert extra is not None  # the overlay is exercised
            n = views.projection.n_nodes
            seen_edges = 0
            for trial in range(200):
                seeds = rng.choice(n, size=int(rng.integers(1, 21)), replace=False).astype(np.int64)
                want, adj = colours_oracle(views, seeds)
                got = retrieval._seed_colours(views, seeds)
                assert got.tolist() == want.tolist()
                seen_edges += sum(len(a) for a in adj)
                for k, js in enumerate(adj):  # a proper colouring
                    assert all(got[k] != got[j] for j in js)
            assert seen_edges > 100  # the trials did join seeds
    finally:
        mem.close()


WORDS = ["deploy", "rollback", "cache", "latency", "outage", "alert", "schema", "migration", "index",
         "queue", "worker", "timeout", "retry", "budget", "review", "Deploying", "caches", "北京", "東京"]
doc_text = st.lists(st.sampled_from(WORDS + ["the", "and", "it's"]), min_size=0, max_size=12).map(" ".join)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 40), doc_text),
        st.tuples(st.just("remove"), st.integers(0, 40), st.just("")),
        st.tuples(st.just("bulk"), st.integers(0, 40), st.lists(doc_text, min_size=64, max_size=70)),
        st.tuples(st.just("reload"), st.just(0), st.just("")),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, compact=st.booleans())
def test_doc_terms_are_the_tokenized_texts(ops, compact):
    ix = BM25Index()
    if compact:
        ix.compact_min_dead = 0
    state: dict[int, str] = {}
    for op, doc, payload in ops:
        if op == "add":
            ix.add(doc, payload)
            state[doc] = payload
        elif op == "remove":
            ix.remove(doc)
            state.pop(doc, None)
        elif op == "bulk":
            pairs = [(doc + 3 * k, t) for k, t in enumerate(payload)]
            ix.add_many(pairs)
            state.update(pairs)
        else:  # saved and loaded (the index files' path), then written to again
            loaded = BM25Index.from_arrays(*ix.to_arrays())
            assert loaded is not None
            ix = loaded
    ids = list(range(0, 300))
    got = ix.doc_terms(ids)
    for d, terms in zip(ids, got):
        if d in state:
            assert terms is not None and len(terms) == len(set(terms))
            assert set(terms) == set(tokenize(state[d]))
        else:
            assert terms is None
    assert ix.doc_terms([-1, 10**9]) == [None, None]
    vocab = sorted({w for terms in got if terms for w in terms}) + ["never-seen"]
    assert ix.document_frequencies(vocab).tolist() == [ix.document_frequency(w) for w in vocab]


def second_pass_oracle(views, lexical, query, mask, nids, scores, lex_ids, depth, p):
    """``_second_pass`` as it was written before: the best hits' texts read from the store and tokenized."""
    if len(lex_ids) < depth:  # every lexical match is a candidate: no second pass (the repro of prf8)
        return nids, scores
    order = np.lexsort((nids, -scores))
    matched = np.isin(nids[order], lex_ids)
    top = order[matched][: p.prf_docs]
    if not len(top):
        return nids, scores
    texts = [t for _, t in views.store.texts_of(nids[top].tolist())]
    tok = lexical.tokenizer
    q = set(tok.tokenize(query))
    tf: dict[str, int] = {}
    for t in texts:
        for w in set(tok.tokenize(t)):
            if w not in q:
                tf[w] = tf.get(w, 0) + 1
    n = max(lexical.n_docs, 1)

    def idf(w):
        df = lexical.document_frequency(w)
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    terms = sorted(tf, key=lambda w: (-tf[w] * idf(w), w))[: p.prf_terms]
    if not terms:
        return nids, scores
    e_ids, e_sc = lexical.search(terms, top_k=depth, allowed=mask)
    if not len(e_ids):
        return nids, scores
    add = p.prf_weight * float(scores.max()) * e_sc.astype(np.float64) / float(e_sc[0])
    keep = np.isin(e_ids, nids)
    e_ids, add = e_ids[keep], add[keep]
    order = np.argsort(nids)
    pos = order[np.searchsorted(nids[order], e_ids)]
    scores = scores.copy()
    scores[pos] += add
    return nids, scores


def test_second_pass_equals_the_text_oracle_bit_for_bit(db_path, clock, monkeypatch):
    rng = np.random.default_rng(5)
    vocab = [f"w{i}" for i in range(300)] + WORDS
    mem = Memory(db_path, embedder=None, clock=clock)
    try:
        for s in range(20):
            # "memo" in every other text: a query with it has more matches than the candidate depth (the pass runs)
            mem.add([" ".join(rng.choice(vocab, size=int(rng.integers(3, 12)))) + " memo" * (k % 2) for k in range(10)],
                    user_id="u", session_id=f"s{s}")
        chunks = mem.get_all(limit=500)
        mem.update(chunks[7].id, "rewritten text about deploy caches and w1 w2")  # the index follows updates
        mem.delete(chunks[9].id)
        calls = []
        real = retrieval._second_pass

        def checked(*args):
            got = real(*args)
            want = second_pass_oracle(*args)
            assert got[0].tolist() == want[0].tolist()
            assert got[1].tolist() == want[1].tolist()  # same floats, not approximately
            calls.append(bool(np.any(got[1] != args[5])))
            return got

        monkeypatch.setattr(retrieval, "_second_pass", checked)
        for _ in range(150):
            q = " ".join(rng.choice(vocab, size=int(rng.integers(1, 5)))) + " memo" * int(rng.integers(0, 2))
            mem.search(q, reinforce=False, top_k=int(rng.integers(1, 30)))
        assert len(calls) > 100 and sum(calls) > 50  # the feedback did change scores
    finally:
        mem.close()


@st.composite
def postings(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = int(rng.integers(1, 41))
    # sometimes a slot in more than 129 terms: numpy's recursive pairwise sum
    big = draw(st.booleans()) and n < 8
    nt = int(rng.integers(130, 300)) if big else int(rng.integers(1, 13))
    terms = [np.arange(n) if big else np.sort(rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False))
             for _ in range(nt)]
    tfs = [rng.integers(1, 10, size=len(t)) for t in terms]
    weights = (rng.random(nt) * 10.0 ** rng.uniform(-6, 6, size=nt)).tolist()
    norm = (rng.random(n) * 20 + 0.05).tolist()
    return n, [t.tolist() for t in terms], [f.tolist() for f in tfs], weights, norm


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=postings())
def test_bm25_segments_equal_the_numpy_path_bit_for_bit(impl, data):
    n, terms, tfs, weights, norm = data
    norm = np.array(norm)
    # the numpy path lexical._accumulate took before: per-term scores, stable sort, reduceat
    parts_s = [np.array(t, np.int32) for t in terms]
    parts_c = []
    for t, f, w in zip(terms, tfs, weights):
        tf = np.array(f, np.int32).astype(np.float64)
        c = norm[np.array(t, np.int64)]
        c += tf
        np.divide(tf, c, out=c)
        c *= w
        parts_c.append(c)
    all_s = np.concatenate(parts_s)
    got = impl.bm25_segments(norm, all_s, np.concatenate([np.array(f, np.int32) for f in tfs]),
                             np.array([len(t) for t in terms], np.int64), np.array(weights))
    if not len(all_s):
        assert got[0].tolist() == [] and got[1].tolist() == []
        return
    order = np.argsort(all_s, kind="stable")
    s_sorted = all_s[order]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(s_sorted)) + 1))
    assert got[0].tolist() == s_sorted[starts].tolist()
    assert got[1].tolist() == np.add.reduceat(np.concatenate(parts_c)[order], starts).tolist()
    # and against a plain sum (within rounding): the scores are BM25 sums
    want = {}
    for t, f, w in zip(terms, tfs, weights):
        for s, tf in zip(t, f):
            want[s] = want.get(s, 0.0) + w * tf / (tf + norm[s])
    assert got[0].tolist() == sorted(want)
    np.testing.assert_allclose(got[1], [want[s] for s in sorted(want)], rtol=1e-12)


@pytest.mark.parametrize("impl", IMPLS)
def test_bm25_segments_bad_input(impl):
    norm = np.ones(4)
    one = np.ones(1, np.int32)
    with pytest.raises(ValueError, match="out of range"):
        impl.bm25_segments(norm, np.array([4], np.int32), one, np.array([1], np.int64), np.ones(1))
    with pytest.raises(ValueError, match="out of range"):
        impl.bm25_segments(norm, np.array([-1], np.int32), one, np.array([1], np.int64), np.ones(1))
    with pytest.raises(ValueError, match="add up"):
        impl.bm25_segments(norm, np.array([1], np.int32), one, np.array([2], np.int64), np.ones(1))
    with pytest.raises(ValueError, match="matching lengths"):
        impl.bm25_segments(norm, np.array([1], np.int32), one, np.array([1], np.int64), np.ones(2))
    with pytest.raises(ValueError, match=">= 0"):
        impl.bm25_segments(norm, np.array([1], np.int32), one, np.array([2, -1], np.int64), np.ones(2))


def top_oracle(slot_doc, slots, scores, allowed, top_k):
    """lexical.search's numpy selection as it was: allowed docs, float32 scores, partition, lexsort."""
    docs = slot_doc[slots]
    if allowed is not None:
        ok = docs < allowed.shape[0]
        ok[ok] = allowed[docs[ok]]
        docs, scores = docs[ok], scores[ok]
    s32 = scores.astype(np.float32)
    if s32.shape[0] > top_k:
        kth = np.partition(s32, s32.shape[0] - top_k)[s32.shape[0] - top_k]
        sel = s32 >= kth
        docs, s32 = docs[sel], s32[sel]
    order = np.lexsort((docs, -s32))[:top_k]
    return docs[order].astype(np.int64), s32[order]


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), top_k=st.integers(1, 60), masked=st.booleans(), ties=st.booleans())
def test_bm25_top_equals_the_numpy_selection(impl, seed, top_k, masked, ties):
    rng = np.random.default_rng(seed)
    n_slots = int(rng.integers(1, 200))
    slot_doc = rng.permutation(2 * n_slots + 5)[:n_slots].astype(np.int64)
    slots = np.sort(rng.choice(n_slots, size=int(rng.integers(0, n_slots + 1)), replace=False)).astype(np.int64)
    scores = rng.random(len(slots)) * 20
    if ties:  # many equal float32 scores (and float64 scores that round to one float32)
        scores = np.round(scores) + rng.integers(0, 2, size=len(slots)) * 1e-12
    allowed = rng.random(int(rng.integers(0, 2 * n_slots + 10))) < 0.7 if masked else None
    got = impl.bm25_top(slot_doc, slots, scores, None if allowed is None else allowed.view(np.uint8), top_k)
    want = top_oracle(slot_doc, slots, scores, allowed, top_k)
    assert got[0].dtype == np.int64 and got[1].dtype == np.float32
    assert got[0].tolist() == want[0].tolist()
    assert got[1].tolist() == want[1].tolist()


@pytest.mark.parametrize("impl", IMPLS)
def test_bm25_top_bad_input(impl):
    slot_doc = np.array([5, 2**31, 7], np.int64)
    with pytest.raises(ValueError, match="out of range"):
        impl.bm25_top(slot_doc, np.array([3], np.int64), np.ones(1), None, 5)
    with pytest.raises(ValueError, match="out of range"):
        impl.bm25_top(slot_doc, np.array([-1], np.int64), np.ones(1), None, 5)
    with pytest.raises(ValueError, match="doc id"):
        impl.bm25_top(slot_doc, np.array([1], np.int64), np.ones(1), None, 5)
    with pytest.raises(ValueError, match="same length"):
        impl.bm25_top(slot_doc, np.array([0], np.int64), np.ones(2), None, 5)
    with pytest.raises(ValueError, match="top_k"):
        impl.bm25_top(slot_doc, np.array([0], np.int64), np.ones(1), None, -1)
    d, sc = impl.bm25_top(slot_doc, np.array([0, 2], np.int64), np.array([1.0, 3.0]), None, 5)
    assert d.tolist() == [7, 5] and sc.tolist() == [3.0, 1.0]


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_bonus_sum_equals_unique_and_bincount(impl, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    n_sp = int(rng.integers(0, 6))
    nodes = [rng.permutation(n)[: int(rng.integers(0, n + 1))].astype(np.int32) for _ in range(n_sp)]
    energy = [(rng.standard_normal(len(x)) * 10.0 ** rng.uniform(-3, 3)).astype(np.float32) for x in nodes]
    exclude = [np.sort(rng.choice(n, size=int(rng.integers(0, min(n, 5) + 1)), replace=False)).astype(np.int64)
               for _ in range(n_sp)]
    scales = rng.random(n_sp) * 7
    mask = rng.random(int(rng.integers(0, n + 5))) < 0.8
    got = impl.bonus_sum(nodes, energy, exclude, scales, mask.view(np.uint8))
    # the code _graph_bonus ran before, spread by spread
    ids, vals = [], []
    for x, e, ex, sc in zip(nodes, energy, exclude, scales):
        x = x.astype(np.int64)
        keep = (x < len(mask)) & ~np.isin(x, ex)
        keep[keep] = mask[x[keep]]
        ids.append(x[keep])
        vals.append(e[keep].astype(np.float64) * sc)
    all_ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    if not len(all_ids):
        assert got[0].tolist() == [] and got[1].tolist() == []
        return
    keys, inv = np.unique(all_ids, return_inverse=True)
    assert got[0].tolist() == keys.tolist()
    assert got[1].tolist() == np.bincount(inv, weights=np.concatenate(vals), minlength=len(keys)).tolist()


@pytest.mark.parametrize("impl", IMPLS)
def test_bonus_sum_bad_input(impl):
    mask = np.ones(4, np.uint8)
    one = [np.array([1], np.int32)]
    with pytest.raises(ValueError, match="negative"):
        impl.bonus_sum([np.array([-1], np.int32)], [np.ones(1, np.float32)], [np.zeros(0, np.int64)],
                       np.ones(1), mask)
    with pytest.raises(ValueError, match="same length"):
        impl.bonus_sum(one, [np.ones(2, np.float32)], [np.zeros(0, np.int64)], np.ones(1), mask)
    with pytest.raises(ValueError, match="per spread"):
        impl.bonus_sum(one, [np.ones(1, np.float32)], [], np.ones(1), mask)
    keys, val = impl.bonus_sum([np.array([3, 1, 9], np.int32), np.array([1], np.int32)],
                               [np.array([1, 2, 4], np.float32), np.array([0.5], np.float32)],
                               [np.array([3], np.int64), np.zeros(0, np.int64)], np.array([1.0, 2.0]), mask)
    assert keys.tolist() == [1] and val.tolist() == [3.0]  # 3: own seed; 9: beyond the mask
