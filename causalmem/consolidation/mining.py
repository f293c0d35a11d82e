"""Token statistics and pair mining for sleep: novelty (token diversity), cross-task patterns
(stage 2, meta ``repeated``) and REM transfer (stage 4, meta ``similar_to``)."""
from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any, Callable, Sequence

import numpy as np

from ..store.base import StoreBackend
from ..tokenizer import DEFAULT_TOKENIZER, ascii_words, tokenize
from ..types import Relation

log = logging.getLogger("causalmem")

__all__ = ["token_diversity", "jaccard_pairs", "decision_docs", "mine", "linked_pairs", "unique",
           "PATTERN_JACCARD", "MAX_PATTERN_GROUP", "MAX_PATTERN_CANDIDATES"]

PATTERN_JACCARD = 0.65
MAX_PATTERN_GROUP = 2000
MAX_PATTERN_CANDIDATES = 300_000
_R_META = Relation.META.code


def unique(a: np.ndarray) -> np.ndarray:
    """Sorted unique values (sort-based: numpy 2's hash-based ``np.unique`` is ~100× slower here)."""
    if len(a) == 0:
        return np.asarray(a).copy()
    b = np.sort(a)
    return b[np.r_[True, b[1:] != b[:-1]]]


def token_diversity(texts: Sequence[str]) -> float:
    """Normalised token entropy in [0, 1]: H(tokens) / log2(#tokens); 0 with fewer than 2 tokens."""
    counts: Counter[str] = Counter()
    for t in texts:
        counts.update(tokenize(t))
    n = sum(counts.values())
    if n < 2:
        return 0.0
    p = np.fromiter(counts.values(), dtype=np.float64, count=len(counts)) / n
    h = float(-(p * np.log2(p)).sum())
    return max(0.0, min(1.0, h / math.log2(n)))


def jaccard_pairs(docs: Sequence[frozenset], probe: Sequence[bool], threshold: float,
                  accept: Callable[[int, int], bool] | None = None, *,
                  max_group: int | None = None) -> list[tuple[int, int, float]]:
    """All pairs (i, j, J), i < j, with token Jaccard J ≥ ``threshold`` and at least one probe side.

    Prefix filtering (AllPairs), vectorised: tokens are ranked rare-first; two sets with
    Jaccard ≥ t share a token among the first ``|x| − ⌈t·|x|⌉ + 1`` of each, so candidates are
    the pairs sharing a prefix token; they are verified exactly with a sparse row product.
    Non-probe documents are only matched against probes (old×old pairs were compared in an
    earlier cycle). Work is bounded: prefix tokens are taken rarest-group first while the
    candidate count stays within ``MAX_PATTERN_CANDIDATES`` and a group within ``max_group``
    (default ``MAX_PATTERN_GROUP``) documents; pairs whose only shared prefix tokens are more
    frequent than that are missed (logged). Real text is Zipfian, so this rarely bites; it keeps a
    cycle on a million edges of near-uniform vocabulary from exploding quadratically.
    ``accept(i, j)`` filters the verified pairs.
    """
    vocab: dict[Any, int] = {}
    ids = [np.fromiter((vocab.setdefault(t, len(vocab)) for t in d), dtype=np.int64) for d in docs]
    lens = np.fromiter((len(d) for d in ids), dtype=np.int64, count=len(ids))
    cols = np.concatenate(ids) if ids else np.empty(0, np.int64)
    return _jaccard_csr(np.r_[0, np.cumsum(lens)], cols, len(vocab), probe, threshold, accept, max_group=max_group)


def _jaccard_csr(indptr: np.ndarray, cols: np.ndarray, n_vocab: int, probe: Sequence[bool] | np.ndarray,
                 threshold: float, accept: Callable[[int, int], bool] | None = None, *,
                 max_group: int | None = None) -> list[tuple[int, int, float]]:
    """``jaccard_pairs`` over documents in CSR form: doc i = distinct token ids cols[indptr[i]:indptr[i+1]]."""
    n = len(indptr) - 1
    probe = np.asarray(probe, dtype=bool)
    if n < 2 or not probe.any() or not len(cols):
        return []
    max_group = MAX_PATTERN_GROUP if max_group is None else max_group
    lens = np.diff(indptr)
    cols = np.asarray(cols, dtype=np.int64)
    col = cols
    row = np.repeat(np.arange(n, dtype=np.int64), lens)
    df = np.bincount(col, minlength=n_vocab)
    rank = np.empty(n_vocab, dtype=np.int64)
    rank[np.lexsort((np.arange(n_vocab), df))] = np.arange(n_vocab)
    tok_rank = rank[col]
    order = np.lexsort((tok_rank, row))  # per doc, rare tokens first
    pos = np.arange(len(col)) - indptr[row[order]]
    plen = lens - np.ceil(threshold * lens - 1e-9).astype(np.int64) + 1
    keep = pos < plen[row[order]]
    p_doc, p_rank = row[order][keep], tok_rank[order][keep]
    g_order = np.lexsort((p_doc, p_rank))
    p_doc, p_rank = p_doc[g_order], p_rank[g_order]
    starts = np.flatnonzero(np.r_[True, p_rank[1:] != p_rank[:-1]])
    sizes = np.diff(np.r_[starts, len(p_rank)])
    probe_arr = probe
    pa: list[np.ndarray] = []
    pb: list[np.ndarray] = []
    skipped = 0
    budget = MAX_PATTERN_CANDIDATES
    for g in unique(sizes):  # ascending: the most selective (rarest shared) tokens first
        g = int(g)
        if g < 2:
            continue
        n_groups = int((sizes == g).sum())
        cost = n_groups * g * (g - 1) // 2
        if g > max_group or cost > budget:
            skipped += int((sizes >= g).sum())
            break
        budget -= cost
        st = starts[sizes == g]
        members = p_doc[st[:, None] + np.arange(g)[None, :]]  # (groups, g)
        iu, ju = np.triu_indices(g, 1)
        a, b = members[:, iu].ravel(), members[:, ju].ravel()
        m = probe_arr[a] | probe_arr[b]
        pa.append(a[m])
        pb.append(b[m])
    if skipped:
        log.info("causalmem: pattern mining skipped %d frequent prefix tokens (candidate budget %d pairs, "
                 "max group %d)", skipped, MAX_PATTERN_CANDIDATES, max_group)
    if not pa:
        return []
    a = np.concatenate(pa)
    b = np.concatenate(pb)
    key = unique(np.minimum(a, b) * n + np.maximum(a, b))
    a, b = key // n, key % n
    la, lb = lens[a], lens[b]
    ok = (la >= threshold * lb - 1e-9) & (lb >= threshold * la - 1e-9)
    a, b = a[ok], b[ok]
    from scipy import sparse  # imported here: only pattern mining needs it

    x = sparse.csr_matrix((np.ones(len(col), dtype=np.float32), col, indptr), shape=(n, n_vocab))
    out: list[tuple[int, int, float]] = []
    step = 200_000
    for k in range(0, len(a), step):
        ca, cb = a[k:k + step], b[k:k + step]
        inter = np.asarray(x[ca].multiply(x[cb]).sum(axis=1)).ravel()
        jac = inter / (lens[ca] + lens[cb] - inter)
        hit = jac + 1e-12 >= threshold
        for i, j, v in zip(ca[hit].tolist(), cb[hit].tolist(), jac[hit].tolist()):
            if accept is None or accept(i, j):
                out.append((i, j, float(v)))
    return out


def linked_pairs(edges: np.ndarray, valid: np.ndarray) -> set[tuple[int, int]]:
    """Unordered chunk pairs already joined by a valid meta edge."""
    m = valid & (edges["rel"] == _R_META)
    a, b = edges["src"][m], edges["dst"][m]
    return set(zip(np.minimum(a, b).tolist(), np.maximum(a, b).tolist()))


class Docs:
    """Decisions with task tags, in CSR form: token ids of the text and of the pattern (text ∪
    outcome texts), tag codes, scope code, novelty."""

    def __init__(self) -> None:
        self.nids = np.empty(0, np.int64)
        self.text = (np.zeros(1, np.int64), np.empty(0, np.int64))
        self.pattern = (np.zeros(1, np.int64), np.empty(0, np.int64))
        self.tags = (np.zeros(1, np.int64), np.empty(0, np.int64))
        self.scope = np.empty(0, np.int64)
        self.new = np.empty(0, bool)
        self.n_vocab = 0

    def tag_set(self, i: int) -> frozenset:
        ptr, val = self.tags
        return frozenset(val[ptr[i]:ptr[i + 1]].tolist())


def _csr_from_pairs(doc: np.ndarray, val: np.ndarray, n_docs: int, n_vals: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (doc, value) pairs as CSR (values sorted within a doc)."""
    key = unique(doc.astype(np.int64) * max(n_vals, 1) + val)
    d, v = key // max(n_vals, 1), key % max(n_vals, 1)
    return np.r_[0, np.cumsum(np.bincount(d, minlength=n_docs))], v


def _gather(indptr: np.ndarray, cols: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner index, value) of every entry of the CSR rows ``rows`` (rows may repeat)."""
    lens = indptr[rows + 1] - indptr[rows]
    total = int(lens.sum())
    owner = np.repeat(np.arange(len(rows)), lens)
    offs = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
    return owner, cols[np.repeat(indptr[rows], lens) + offs]


class _WordIds(dict):
    """surface word -> term id (-1 = stop word), memoised; terms from the lexical tokenizer."""

    def __init__(self, vocab: dict[str, int]) -> None:
        super().__init__()
        self.vocab = vocab
        self.term_of = DEFAULT_TOKENIZER.term_of

    def __missing__(self, word: str) -> int:
        term = self.term_of(word)
        tid = -1 if term is None else self.vocab.setdefault(term, len(self.vocab))
        self[word] = tid
        return tid


def decision_docs(store: StoreBackend, last_sleep: float) -> Docs:
    docs = Docs()
    tag_code: dict[str, int] = {}
    tagged = store.tagged_edge_rows()
    if not tagged:
        return docs
    e_src = np.asarray([r.src for r in tagged], np.int64)
    e_dst = np.asarray([r.dst for r in tagged], np.int64)
    e_disc = np.asarray([r.discovered_at for r in tagged], np.float64)
    e_tag = np.asarray([tag_code.setdefault(r.task_tag, len(tag_code)) for r in tagged], np.int64)
    need = unique(np.concatenate([e_src, e_dst]))
    size = int(need[-1]) + 1
    pos = np.full(size, -1, np.int64)
    pos[need] = np.arange(len(need))
    vocab: dict[str, int] = {}
    scope_code: dict[tuple, int] = {}
    c_scope = np.full(len(need), -1, np.int64)
    c_created = np.zeros(len(need))
    tok_lens = np.zeros(len(need), np.int64)
    tok_cols: list[int] = []
    word_ids = _WordIds(vocab)
    for nid, text, user, agent, run, created in store.chunk_rows_for_mining(need.tolist()):
        i = pos[nid]
        c_scope[i] = scope_code.setdefault((user, agent, run), len(scope_code))
        c_created[i] = created
        ids: set[int]
        if text.isascii():  # fast path, same terms as tokenize()
            ids = set(map(word_ids.__getitem__, ascii_words(text)))
            ids.discard(-1)
        else:
            ids = {vocab.setdefault(t, len(vocab)) for t in tokenize(text)}
        tok_lens[i] = len(ids)
        tok_cols.extend(sorted(ids))
    tok_indptr = np.r_[0, np.cumsum(tok_lens)]
    tok_cols_arr = np.asarray(tok_cols, np.int64)
    live = (c_scope[pos[e_src]] >= 0) & (c_scope[pos[e_dst]] >= 0)  # both chunks alive
    e_src, e_dst, e_disc, e_tag = e_src[live], e_dst[live], e_disc[live], e_tag[live]
    if not len(e_src):
        return docs
    dnids = unique(e_src)
    dpos = np.searchsorted(dnids, e_src)  # doc index of every edge
    n_docs, n_vocab = len(dnids), max(len(vocab), 1)
    docs.nids = dnids
    docs.n_vocab = n_vocab
    cidx = pos[dnids]
    t_owner, t_val = _gather(tok_indptr, tok_cols_arr, cidx)
    docs.text = _csr_from_pairs(t_owner, t_val, n_docs, n_vocab)
    o_owner, o_val = _gather(tok_indptr, tok_cols_arr, pos[e_dst])
    docs.pattern = _csr_from_pairs(np.concatenate([t_owner, dpos[o_owner]]), np.concatenate([t_val, o_val]),
                                   n_docs, n_vocab)
    docs.tags = _csr_from_pairs(dpos, e_tag, n_docs, max(len(tag_code), 1))
    docs.scope = c_scope[cidx]
    newest = np.full(n_docs, -np.inf)
    np.maximum.at(newest, dpos, e_disc)
    docs.new = (c_created[cidx] > last_sleep) | (newest > last_sleep)
    return docs


def mine(store: StoreBackend, docs: Docs, linked: set[tuple[int, int]], now: float, *, kind: str) -> int:
    """Stage 2 patterns (kind='patterns', meta 'repeated') or stage 4 REM links (kind='rem', 'similar_to')."""
    if len(docs.nids) < 2 or not docs.new.any():
        return 0
    scope = docs.scope
    if kind == "patterns":
        (indptr, cols), subtype = docs.text, "repeated"

        def accept(i: int, j: int) -> bool:
            return scope[i] == scope[j] and docs.tag_set(i) != docs.tag_set(j)
    else:
        (indptr, cols), subtype = docs.pattern, "similar_to"

        def accept(i: int, j: int) -> bool:
            return scope[i] == scope[j] and not (docs.tag_set(i) & docs.tag_set(j))

    made = 0
    for i, j, _jac in _jaccard_csr(indptr, cols, docs.n_vocab, docs.new, PATTERN_JACCARD, accept):
        a, b = int(docs.nids[i]), int(docs.nids[j])
        key = (min(a, b), max(a, b))
        if key in linked:
            continue
        linked.add(key)
        store.insert_edge(src=key[0], dst=key[1], relation=Relation.META, subtype=subtype, confidence=0.7,
                          source="rule", polarity=None, task_tag=None, event_time=None, discovered_at=now)
        made += 1
    return made


