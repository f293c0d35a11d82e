"""Sleep stage 4b — structural transfer: meta ``similar_to`` links between decisions of different
tasks that share the *structure* of what happened, so spreading from one task reaches the other
task's lesson (CausalEval category 16).

Stage 4's REM links need the two decisions' words to overlap (pattern Jaccard ≥ 0.65). Lessons
transfer between tasks whose words do not: "pointed DNS at the new cluster before it was ready →
(caused) an outage (negative)" and "skipped the flaky tests to make CI green → (caused) a
regression in production (negative)" share no content word and have a MiniLM cosine of 0.07-0.3,
yet both are *a first step that directly caused a failure*. This stage matches on that shape:

* **signature** of a decision (a chunk with a valid, task-tagged caused/enabled/prevented
  out-edge): the set of (relation, outcome polarity) of its valid causal out-edges, and whether
  it is itself the outcome of a valid caused/enabled edge (a root cause vs a link in a chain).
  Only signatures with at least one valenced outcome (polarity negative or positive) take part:
  without a known good or bad outcome there is no lesson to transfer.
* **candidates**: two decisions with the same signature, in the same scope (SPEC §7: scope is a
  wall), with disjoint task-tag sets (a different task), at least one of them new since the last
  sleep (incremental, like stage 4).
* **ranking and bound**: candidates are ranked by the token Jaccard of their patterns (decision ∪
  outcome words; ties by node ids), and each decision keeps at most ``Config.transfer_links``
  ``similar_to`` links in all (earlier ones count), so a large group of same-shaped decisions
  gives each a few best partners, not a clique. Work is bounded: in a group of more than
  ``MAX_TRANSFER_GROUP`` same-shaped decisions only the newest ``MAX_TRANSFER_GROUP`` take part,
  groups are taken smallest first, and at most ``MAX_TRANSFER_PAIRS`` pairs are scored per cycle;
  what is left out is logged (and, like stage 4, not retried: it is no longer new).
* **edge**: meta ``similar_to`` (SPEC §3: coefficient +0.6), confidence 0.7 (as stage 4's links), source ``rule``,
  older → newer node. Idempotent: a pair already joined by any valid meta edge is never linked
  again, and a decision at its bound gets no more.
"""
from __future__ import annotations

import logging

import numpy as np

from ..store.base import POLARITY_CODES, SUBTYPE_CODES, StoreBackend
from ..types import Relation
from .mining import Docs, unique

log = logging.getLogger("causalmem")

__all__ = ["transfer_links", "signatures", "MAX_TRANSFER_GROUP", "MAX_TRANSFER_PAIRS", "TRANSFER_CONFIDENCE"]

MAX_TRANSFER_GROUP = 500
MAX_TRANSFER_PAIRS = 300_000
TRANSFER_CONFIDENCE = 0.7
_CAUSAL = np.array([Relation.CAUSED.code, Relation.ENABLED.code, Relation.PREVENTED.code], np.int64)
_CHAIN = np.array([Relation.CAUSED.code, Relation.ENABLED.code], np.int64)
_VALENCED = np.array([POLARITY_CODES["negative"], POLARITY_CODES["positive"]], np.int64)
_SIMILAR = SUBTYPE_CODES["similar_to"]


def signatures(docs: Docs, edges: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """A group code per decision of ``docs`` (-1: takes no part), equal for equal (scope,
    signature)."""
    n = len(docs.nids)
    out = np.full(n, -1, np.int64)
    if n == 0:
        return out
    rel = edges["rel"].astype(np.int64)
    m = valid & np.isin(rel, _CAUSAL)
    src, pol = edges["src"][m], edges["pol"].astype(np.int64)[m]
    key = rel[m] * 8 + pol
    valenced = np.isin(pol, _VALENCED)
    inc = np.isin(docs.nids, edges["dst"][valid & np.isin(rel, _CHAIN)])
    pos = np.searchsorted(docs.nids, src)
    ok = (pos < n) & (docs.nids[np.minimum(pos, n - 1)] == src)
    pos, key, valenced = pos[ok], key[ok], valenced[ok]
    has_valence = np.zeros(n, bool)
    has_valence[pos[valenced]] = True
    pairs = unique(pos * 64 + key)  # distinct (doc, relation x polarity), sorted by doc
    d, k = pairs // 64, pairs % 64
    bounds = np.r_[0, np.cumsum(np.bincount(d, minlength=n))]
    codes: dict[tuple, int] = {}
    kl = k.tolist()
    for i in np.flatnonzero(has_valence).tolist():
        sig = (int(docs.scope[i]), bool(inc[i]), tuple(kl[bounds[i]:bounds[i + 1]]))
        out[i] = codes.setdefault(sig, len(codes))
    return out


def _pair_jaccard(docs: Docs, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if not len(a):
        return np.zeros(0)
    from scipy import sparse  # imported here: only sleep's mining needs it

    indptr, cols = docs.pattern
    lens = np.diff(indptr)
    x = sparse.csr_matrix((np.ones(len(cols), dtype=np.float32), cols, indptr), shape=(len(lens), docs.n_vocab))
    inter = np.asarray(x[a].multiply(x[b]).sum(axis=1)).ravel()
    union = lens[a] + lens[b] - inter
    return np.where(union > 0, inter / np.maximum(union, 1), 0.0)


def transfer_links(store: StoreBackend, docs: Docs, edges: np.ndarray, valid: np.ndarray,
                   linked: set[tuple[int, int]], now: float, *, per_node: int) -> int:
    """Write stage 4b's ``similar_to`` edges (see the module docstring); returns how many."""
    n = len(docs.nids)
    if per_node <= 0 or n < 2 or not docs.new.any():
        return 0
    group = signatures(docs, edges, valid)
    # links each decision already has (stage 4's and earlier cycles' similar_to edges count)
    sim = valid & (edges["rel"] == Relation.META.code) & (edges["sub"] == _SIMILAR)
    ends = np.concatenate([edges["src"][sim], edges["dst"][sim]])
    have = np.zeros(n, np.int64)
    if len(ends):
        p = np.searchsorted(docs.nids, ends)
        ok = (p < n) & (docs.nids[np.minimum(p, n - 1)] == ends)
        np.add.at(have, p[ok], 1)
    pa: list[np.ndarray] = []
    pb: list[np.ndarray] = []
    budget = MAX_TRANSFER_PAIRS
    truncated = skipped = 0
    order = np.lexsort((np.arange(n), group))
    g_sorted = group[order]
    starts = np.flatnonzero(np.r_[True, g_sorted[1:] != g_sorted[:-1]])
    spans = [(s, e) for s, e in zip(starts.tolist(), np.r_[starts[1:], n].tolist()) if g_sorted[s] >= 0 and e - s >= 2]
    spans.sort(key=lambda se: se[1] - se[0])  # the most selective shapes first
    for s, e in spans:
        members = order[s:e]  # in nid order
        new = members[docs.new[members]]
        if not len(new):
            continue
        if len(members) > MAX_TRANSFER_GROUP:  # compare only the newest of a large group
            truncated += len(members) - MAX_TRANSFER_GROUP
            members = members[-MAX_TRANSFER_GROUP:]
            new = new[-MAX_TRANSFER_GROUP:]
        cost = len(new) * len(members)
        if cost > budget:
            skipped += cost
            continue
        budget -= cost
        a = np.repeat(new, len(members))
        b = np.tile(members, len(new))
        keep = a != b
        pa.append(np.minimum(a[keep], b[keep]))
        pb.append(np.maximum(a[keep], b[keep]))
    if truncated or skipped:
        log.info("causalmem: structural transfer left %d decisions of large groups out (newest %d kept) and skipped "
                 "%d candidate pairs over the budget of %d", truncated, MAX_TRANSFER_GROUP, skipped, MAX_TRANSFER_PAIRS)
    if not pa:
        return 0
    key = unique(np.concatenate(pa) * n + np.concatenate(pb))
    a, b = key // n, key % n
    # disjoint task-tag sets, vectorised: does any tag of a's set belong to b's set?
    t_ptr, t_val = docs.tags
    n_tags = int(t_val.max()) + 1 if len(t_val) else 1
    doc_tag = np.sort(np.repeat(np.arange(n, dtype=np.int64), np.diff(t_ptr)) * n_tags + t_val)
    owner, tag = _explode(t_ptr, t_val, a)
    probe = b[owner] * n_tags + tag
    at = np.minimum(np.searchsorted(doc_tag, probe), max(len(doc_tag) - 1, 0))
    shared = np.zeros(len(a), bool)
    if len(doc_tag):
        shared[owner[doc_tag[at] == probe]] = True
    a, b = a[~shared], b[~shared]
    score = _pair_jaccard(docs, a, b)
    # best pattern overlap first, ties by node order; only each decision's few best candidates go
    # on to the greedy pass (a pair ranked lower on either side would find that side full)
    order = np.lexsort((b, a, -score))
    a, b = a[order], b[order]
    keep = (_rank_within(a) < 4 * per_node) & (_rank_within(b) < 4 * per_node)
    a, b = a[keep], b[keep]
    rows = []
    for i, j in zip(a.tolist(), b.tolist()):
        if have[i] >= per_node or have[j] >= per_node:
            continue
        x, y = int(docs.nids[i]), int(docs.nids[j])
        pair = (min(x, y), max(x, y))
        if pair in linked:
            continue
        linked.add(pair)
        have[i] += 1
        have[j] += 1
        rows.append({"src": pair[0], "dst": pair[1], "relation": Relation.META, "subtype": "similar_to",
                     "confidence": TRANSFER_CONFIDENCE, "source": "rule", "discovered_at": now})
    if rows:
        store.insert_edges_bulk(rows)
    return len(rows)


def _explode(ptr: np.ndarray, val: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index into ``rows``, value) of every CSR entry of the rows ``rows`` (rows may repeat)."""
    lens = ptr[rows + 1] - ptr[rows]
    owner = np.repeat(np.arange(len(rows)), lens)
    offs = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
    return owner, val[np.repeat(ptr[rows], lens) + offs]


def _rank_within(x: np.ndarray) -> np.ndarray:
    """For each position, how many earlier positions hold the same value (a stable rank per value)."""
    if not len(x):
        return np.zeros(0, np.int64)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    first = np.r_[True, xs[1:] != xs[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(xs)), 0))
    rank = np.empty(len(x), np.int64)
    rank[order] = np.arange(len(xs)) - start
    return rank
