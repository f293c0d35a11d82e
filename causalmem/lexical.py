"""Lexical channel (SPEC §4.1): an incremental Okapi BM25 index over ``tokenizer`` terms.

Engine layer: pure Python + numpy, no SQL. The store feeds chunk texts in under its own
integer row ids; the retrieval pipeline asks for the best ids of a query, optionally
restricted by a boolean scope mask indexed by id.

Index layout
    every ``add`` takes a fresh internal *slot*; a slot is never reused, so removing a doc
    only flips its ``alive`` flag and decrements the live document frequencies (O(terms of
    the doc)). Postings hold slots. A bulk build (``add_many`` of many docs, or a compaction
    once half the slots are dead) lays all postings out in one term-major array ("base");
    a term written to afterwards gets its own growable array (amortised doubling) that
    starts as a copy of its base slice; every posting list stays sorted by slot. Scoring
    computes the BM25 contributions of each query term vectorised and adds them into a
    reused dense buffer (or, for few postings, sorts and segment-sums them), then selects
    the top k with ``np.partition``; a lower bound from the rarest terms' docs skips the
    scan of low scores. Queries that touch many postings first try MaxScore pruning:
    very common terms whose summed upper bounds cannot reach that lower bound only
    contribute to candidates found through the other terms (by binary search). Results
    are exact either way, and contributions are always summed in query-term order so a
    score does not depend on how the index was built.

Not thread-safe: the caller holds a lock.
"""
from __future__ import annotations

import hashlib
import math
from typing import Any, Iterable, Sequence

import numpy as np

from . import _kernels
from .tokenizer import DEFAULT_TOKENIZER, RUN_SEPARATOR, Tokenizer, ascii_runs

__all__ = ["BM25Index", "K1", "B"]

K1 = 1.2
B = 0.75

# --------------------------------------------------------------------------- helpers


def _grow(arr: np.ndarray, need: int, fill: int | float | None = None) -> np.ndarray:
    """Return ``arr`` with capacity >= need (amortised doubling), new tail set to ``fill``."""
    cap = arr.shape[0]
    if need <= cap:
        return arr
    new_cap = max(need, 2 * cap, 16)
    out = np.empty(new_cap, dtype=arr.dtype)
    out[:cap] = arr
    if fill is not None:
        out[cap:] = fill
    return out


def _check_doc_id(doc_id: int) -> int:
    if isinstance(doc_id, (bool, np.bool_)) or not isinstance(doc_id, (int, np.integer)):
        raise TypeError(f"doc_id must be a non-negative int, got {type(doc_id).__name__}")
    doc_id = int(doc_id)
    if doc_id < 0 or doc_id >= 1 << 31:
        raise ValueError(f"doc_id must be in [0, 2**31), got {doc_id}")
    return doc_id


class _Surface(dict):
    """ASCII run (bytes) -> term id; -1 no term, -2 doc separator, -3 several words."""

    def __init__(self, index: "BM25Index") -> None:
        super().__init__()
        self._index = index
        self[b"\x01"] = -2

    def __missing__(self, run: bytes) -> int:
        terms = self._index.tokenizer.run_terms(run.decode("ascii"))
        if not terms:
            tid = -1
        elif len(terms) > 1:
            tid = -3
        else:
            known = self._index._term_id.get(terms[0])
            tid = known if known is not None else self._index._new_term(terms[0])
        self[run] = tid
        return tid


_EMPTY_IDS = np.zeros(0, dtype=np.int64)
_EMPTY_SCORES = np.zeros(0, dtype=np.float32)


# --------------------------------------------------------------------------- index


def _term_scores(norm: np.ndarray, slots: np.ndarray, tfs: np.ndarray, w: float) -> np.ndarray:
    """BM25 contribution of one query term to its postings: w·tf / (tf + norm[slot])."""
    tf = tfs.astype(np.float64)
    c = norm[slots]
    c += tf
    np.divide(tf, c, out=c)
    c *= w
    return c


class BM25Index:
    """Incremental Okapi BM25 (k1 1.2, b 0.75, IDF ln(1 + (N - df + .5)/(df + .5))).

    ``N`` and ``avgdl`` are taken over live documents; a document whose text has no token
    still counts as a live document of length 0 (rank-bm25 does the same). Doc ids are
    ints in [0, 2**31); the id -> slot map is a dense array, so memory grows with the
    largest id (8 bytes per id), which suits SQLite row ids.
    """

    #: dead slots are dropped once they outnumber the live ones and exceed this count
    compact_min_dead = 1024
    _BULK_CHUNK = 100_000
    #: queries touching at least this many postings try MaxScore pruning first. With the compiled
    #: dense accumulation (``_kernels.bm25_dense``) pruning measured slower at every size tried
    #: (mean CPU per first-pass query 1.16 -> 0.49 ms on the 100k real-model store, 2.5 -> 1.1-1.35 ms
    #: at 1M, and 9.4 -> 8.7 ms for the 8 most frequent terms of the 1M store, 314k postings; same
    #: answers), so it is kept for far larger queries only; the pure-Python twin prunes from 50k
    prune_min_postings = 2_000_000 if _kernels.HAVE_EXTENSION else 50_000
    _prune_always = False  # tests: prune even when it would not pay off

    def __init__(self, *, tokenizer: Tokenizer | None = None, k1: float = K1, b: float = B) -> None:
        self.tokenizer = tokenizer if tokenizer is not None else DEFAULT_TOKENIZER
        self.k1 = float(k1)
        self.b = float(b)
        # vocabulary: term -> id, and surface word -> id (-1 = dropped) for the batch path
        self._term_id: dict[str, int] = {}
        self._term_names: list[str] = []  # term id -> term (ids are given in insertion order)
        self._surface: _Surface | None = None  # ASCII word run (bytes) -> term id, batch path
        self._df = np.zeros(0, dtype=np.int64)  # live document frequency per term
        # slots
        self._n_slots = 0
        self._slot_doc = np.zeros(0, dtype=np.int64)
        self._slot_len = np.zeros(0, dtype=np.int64)  # tokens in the doc (with repeats)
        self._slot_alive = np.zeros(0, dtype=bool)
        self._slot_start = np.zeros(0, dtype=np.int64)  # forward index offsets
        self._slot_nterms = np.zeros(0, dtype=np.int64)
        self._doc_slot = np.zeros(0, dtype=np.int64)  # doc id -> slot, -1 = absent
        # forward index (distinct terms of each slot with their tf), append-only
        self._fwd_n = 0
        self._fwd_term = np.zeros(0, dtype=np.int32)
        self._fwd_tf = np.zeros(0, dtype=np.int32)
        # postings: base CSR + per-term growable overrides
        self._base_ptr = np.zeros(1, dtype=np.int64)
        self._base_slot = np.zeros(0, dtype=np.int32)
        self._base_tf = np.zeros(0, dtype=np.int32)
        self._dyn: dict[int, list] = {}  # term -> [slots array, tf array, length]
        self._n_live = 0
        self._total_len = 0
        self._n_dead = 0
        self._norm_key: tuple[int, int, int] | None = None
        self._norm = np.zeros(0, dtype=np.float64)
        self._norm_min = 0.0
        self._buf = np.zeros(0, dtype=np.float64)  # score accumulator, all zeros between calls

    # ------------------------------------------------------------------ introspection

    def __len__(self) -> int:
        return self._n_live

    @property
    def n_docs(self) -> int:
        return self._n_live

    @property
    def avgdl(self) -> float:
        return self._total_len / self._n_live if self._n_live else 0.0

    def __contains__(self, doc_id: object) -> bool:
        if isinstance(doc_id, (bool, np.bool_)) or not isinstance(doc_id, (int, np.integer)):
            return False
        d = int(doc_id)
        return 0 <= d < self._doc_slot.shape[0] and self._doc_slot[d] >= 0

    def doc_ids(self) -> np.ndarray:
        """Live doc ids, ascending (read off the doc -> slot map: no sort, so loading a saved index
        of a million documents does not pay one)."""
        return np.flatnonzero(self._doc_slot >= 0)

    def __repr__(self) -> str:
        return f"BM25Index(n_docs={self._n_live}, n_terms={len(self._term_id)}, tokenizer={self.tokenizer!r})"

    # ------------------------------------------------------------------ persistence

    def tokenizer_key(self) -> str:
        """What must match for saved postings to be reused: the tokenizer and k1, b."""
        tok = self.tokenizer
        words = ",".join(sorted(tok.stop_words)) if hasattr(tok, "stop_words") else ""
        digest = hashlib.blake2b(words.encode(), digest_size=8).hexdigest()
        return f"{tok!r}|{getattr(tok, 'stem', '')}|{digest}|k1={self.k1!r}|b={self.b!r}"

    def to_arrays(self) -> tuple[dict[str, np.ndarray], dict] | None:
        """The index as flat arrays + meta (``from_arrays`` inverts it); None if it cannot be saved.

        Lays the postings out first (drops dead slots), so the saved form is one term-major
        array; scores do not depend on the layout (see ``_accumulate``)."""
        terms = list(self._term_id)
        blob = "\n".join(terms).encode("utf-8")
        if len(terms) and blob.count(b"\n") != len(terms) - 1:
            return None  # a term with a newline (custom tokenizer): not saved, rebuilt at open
        if self._dyn or self._n_dead or self._base_ptr.shape[0] != len(terms) + 1:
            self._rebuild()
        n, f, v = self._n_slots, self._fwd_n, len(terms)
        df, fwd_term, ptr = self._df[:v], self._fwd_term[:f], self._base_ptr
        keep = df > 0
        if not keep.all():
            # terms no live document has (removed or purged texts) are left out of the file
            remap = np.cumsum(keep) - 1
            terms = [t for t, k in zip(terms, keep.tolist()) if k]
            blob = "\n".join(terms).encode("utf-8")
            df, fwd_term = df[keep], remap[fwd_term].astype(np.int32)
            ptr = np.concatenate(([0], ptr[1:][keep])).astype(np.int64)
            v = len(terms)
        arrays: dict[str, np.ndarray] = {
            "terms": np.frombuffer(blob, dtype=np.uint8), "df": df,
            "slot_doc": self._slot_doc[:n], "slot_len": self._slot_len[:n], "slot_alive": self._slot_alive[:n],
            "slot_start": self._slot_start[:n], "slot_nterms": self._slot_nterms[:n], "doc_slot": self._doc_slot,
            "fwd_term": fwd_term, "fwd_tf": self._fwd_tf[:f],
            "base_ptr": ptr, "base_slot": self._base_slot, "base_tf": self._base_tf,
        }
        meta: dict[str, Any] = {"tokenizer": self.tokenizer_key(), "n_terms": v, "n_live": self._n_live,
                "total_len": self._total_len}
        return arrays, meta

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict, *,
                    tokenizer: Tokenizer | None = None) -> "BM25Index | None":
        """An index from ``to_arrays`` output (arrays may be copy-on-write maps); None when the
        tokenizer or the shapes disagree (the caller rebuilds from the texts)."""
        self = cls(tokenizer=tokenizer)
        if meta.get("tokenizer") != self.tokenizer_key():
            return None
        v = int(meta["n_terms"])
        blob = bytes(arrays["terms"])
        terms = blob.decode("utf-8").split("\n") if v else []
        n = arrays["slot_doc"].shape[0]
        f = arrays["fwd_term"].shape[0]
        ptr = arrays["base_ptr"]
        if (len(terms) != v or arrays["df"].shape[0] != v or ptr.shape[0] != v + 1
                or any(arrays[k].shape[0] != n for k in ("slot_len", "slot_alive", "slot_start", "slot_nterms"))
                or arrays["fwd_tf"].shape[0] != f or arrays["base_slot"].shape[0] != arrays["base_tf"].shape[0]
                or (v and int(ptr[-1]) != arrays["base_slot"].shape[0])):
            return None
        self._term_id = dict(zip(terms, range(v)))
        if len(self._term_id) != v:
            return None
        self._term_names = terms
        self._df = arrays["df"]
        self._slot_doc, self._slot_len = arrays["slot_doc"], arrays["slot_len"]
        self._slot_alive, self._slot_start = arrays["slot_alive"], arrays["slot_start"]
        self._slot_nterms, self._doc_slot = arrays["slot_nterms"], arrays["doc_slot"]
        self._fwd_term, self._fwd_tf, self._fwd_n = arrays["fwd_term"], arrays["fwd_tf"], f
        self._base_ptr, self._base_slot, self._base_tf = ptr, arrays["base_slot"], arrays["base_tf"]
        self._n_slots = n
        self._n_live = int(meta["n_live"])
        self._total_len = int(meta["total_len"])
        self._n_dead = n - int(np.count_nonzero(self._slot_alive))
        if self._n_live != n - self._n_dead:
            return None
        return self

    # ------------------------------------------------------------------ writes

    def add(self, doc_id: int, text: str | None = None, *, tokens: Sequence[str] | None = None) -> None:
        """Index ``doc_id`` (re-adding an indexed id replaces it). Give ``text`` or ``tokens``."""
        doc_id = _check_doc_id(doc_id)
        if tokens is None:
            if text is not None and not isinstance(text, str):
                raise TypeError(f"text must be a str or None, got {type(text).__name__}")
            tokens = self.tokenizer.tokenize(text)
        elif text is not None:
            raise ValueError("give either text or tokens, not both")
        if doc_id in self:
            self.remove(doc_id)
        counts: dict[int, int] = {}
        term_id = self._term_id
        for tok in tokens:
            tid = term_id.get(tok)
            if tid is None:
                tid = self._new_term(tok)
            counts[tid] = counts.get(tid, 0) + 1
        terms = np.fromiter(counts.keys(), dtype=np.int32, count=len(counts))
        tfs = np.fromiter(counts.values(), dtype=np.int32, count=len(counts))
        slot = self._new_slots(np.array([doc_id], dtype=np.int64), np.array([len(tokens)], dtype=np.int64),
                               np.array([len(counts)], dtype=np.int64))[0]
        self._append_forward(terms, tfs)
        self._df[terms] += 1
        for t, f in zip(counts.keys(), counts.values()):
            self._append_posting(t, slot, f)
        self._maybe_compact()

    def update(self, doc_id: int, text: str | None = None, *, tokens: Sequence[str] | None = None) -> None:
        """Replace the text of ``doc_id`` (adds it when absent)."""
        self.add(doc_id, text, tokens=tokens)

    def remove(self, doc_id: int) -> bool:
        """Forget ``doc_id``; returns False when it was not indexed."""
        doc_id = _check_doc_id(doc_id)
        if doc_id not in self:
            return False
        slot = int(self._doc_slot[doc_id])
        self._doc_slot[doc_id] = -1
        self._slot_alive[slot] = False
        s = int(self._slot_start[slot])
        e = s + int(self._slot_nterms[slot])
        self._df[self._fwd_term[s:e]] -= 1
        self._n_live -= 1
        self._total_len -= int(self._slot_len[slot])
        self._n_dead += 1
        self._maybe_compact()
        return True

    discard = remove

    def add_many(self, pairs: Iterable[tuple[int, str | None]]) -> None:
        """Index many ``(doc_id, text)`` pairs; a later pair for the same id wins.

        Large batches are tokenized in bulk (one byte-translate + split over the joined
        ASCII texts, one dictionary pass over the words) and laid out with integer sorts,
        which is what opening a big store needs.
        """
        items = pairs if isinstance(pairs, list) else list(pairs)
        if not items:
            return
        if len(items) < 64:
            for doc_id, text in items:
                self.add(doc_id, text)
            return
        id_list = [d for d, _ in items]
        ids = np.asarray(id_list)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            for d in id_list:  # names the offending id
                _check_doc_id(d)
            raise TypeError("doc ids must be ints")
        ids = ids.astype(np.int64, copy=False)
        if ids.shape[0] and (ids.min() < 0 or ids.max() >= 1 << 31):
            bad = int(ids[(ids < 0) | (ids >= 1 << 31)][0])
            raise ValueError(f"doc_id must be in [0, 2**31), got {bad}")
        texts = [t for _, t in items]
        uniq, first_rev = np.unique(ids[::-1], return_index=True)
        if uniq.shape[0] != ids.shape[0]:  # duplicates: keep the last occurrence
            keep = np.sort(ids.shape[0] - 1 - first_rev)
            ids = ids[keep]
            texts = [texts[i] for i in keep.tolist()]
        present = ids[ids < self._doc_slot.shape[0]]
        if present.size:
            for d in present[self._doc_slot[present] >= 0].tolist():
                self.remove(d)
        doc_idx, terms, tfs, lengths = self._bulk_tokenize(texts)
        n = ids.shape[0]
        nterms = np.bincount(doc_idx, minlength=n).astype(np.int64)
        slot0 = self._n_slots
        self._new_slots(ids, lengths, nterms)
        self._append_forward(terms, tfs)
        if terms.shape[0]:
            self._df[: len(self._term_id)] += np.bincount(terms, minlength=len(self._term_id))
        # a big batch relative to what is indexed: lay everything out again in one sort
        if terms.shape[0] * 4 >= self._fwd_n or terms.shape[0] > 200_000:
            self._rebuild()
        else:
            slots = (doc_idx + slot0).astype(np.int32)
            order = np.argsort(terms, kind="stable")
            t_sorted = terms[order]
            bounds = np.flatnonzero(np.diff(t_sorted)) + 1
            starts = np.concatenate(([0], bounds)).tolist()
            ends = np.concatenate((bounds, [t_sorted.shape[0]])).tolist()
            s_sorted = slots[order]
            f_sorted = tfs[order]
            for a, z in zip(starts, ends):
                if z > a:
                    self._append_postings(int(t_sorted[a]), s_sorted[a:z], f_sorted[a:z])
            self._maybe_compact()

    # ------------------------------------------------------------------ internals: writes

    def _new_term(self, tok: str) -> int:
        tid = len(self._term_id)
        self._term_id[tok] = tid
        self._term_names.append(tok)
        self._df = _grow(self._df, tid + 1, 0)
        return tid

    def _new_slots(self, doc_ids: np.ndarray, lengths: np.ndarray, nterms: np.ndarray) -> np.ndarray:
        n = doc_ids.shape[0]
        s0 = self._n_slots
        s1 = s0 + n
        self._slot_doc = _grow(self._slot_doc, s1)
        self._slot_len = _grow(self._slot_len, s1)
        self._slot_alive = _grow(self._slot_alive, s1, False)
        self._slot_start = _grow(self._slot_start, s1)
        self._slot_nterms = _grow(self._slot_nterms, s1)
        self._slot_doc[s0:s1] = doc_ids
        self._slot_len[s0:s1] = lengths
        self._slot_alive[s0:s1] = True
        self._slot_nterms[s0:s1] = nterms
        starts = np.empty(n, dtype=np.int64)
        starts[0] = self._fwd_n
        if n > 1:
            np.cumsum(nterms[:-1], out=starts[1:])
            starts[1:] += self._fwd_n
        self._slot_start[s0:s1] = starts
        max_doc = int(doc_ids.max()) + 1
        if max_doc > self._doc_slot.shape[0]:
            self._doc_slot = _grow(self._doc_slot, max_doc, -1)
        slots = np.arange(s0, s1, dtype=np.int64)
        self._doc_slot[doc_ids] = slots
        self._n_slots = s1
        self._n_live += n
        self._total_len += int(lengths.sum())
        return slots

    def _append_forward(self, terms: np.ndarray, tfs: np.ndarray) -> None:
        n0 = self._fwd_n
        n1 = n0 + terms.shape[0]
        self._fwd_term = _grow(self._fwd_term, n1)
        self._fwd_tf = _grow(self._fwd_tf, n1)
        self._fwd_term[n0:n1] = terms
        self._fwd_tf[n0:n1] = tfs
        self._fwd_n = n1

    def _dyn_entry(self, term: int, extra: int) -> list:
        entry = self._dyn.get(term)
        if entry is None:
            if term + 1 < self._base_ptr.shape[0]:
                a, z = int(self._base_ptr[term]), int(self._base_ptr[term + 1])
            else:
                a = z = 0
            n = z - a
            cap = max(4, 2 * (n + extra))
            slots = np.empty(cap, dtype=np.int32)
            tfs = np.empty(cap, dtype=np.int32)
            slots[:n] = self._base_slot[a:z]
            tfs[:n] = self._base_tf[a:z]
            entry = [slots, tfs, n]
            self._dyn[term] = entry
        else:
            need = entry[2] + extra
            if need > entry[0].shape[0]:
                entry[0] = _grow(entry[0], need)
                entry[1] = _grow(entry[1], need)
        return entry

    def _append_posting(self, term: int, slot: int, tf: int) -> None:
        entry = self._dyn_entry(term, 1)
        n = entry[2]
        entry[0][n] = slot
        entry[1][n] = tf
        entry[2] = n + 1

    def _append_postings(self, term: int, slots: np.ndarray, tfs: np.ndarray) -> None:
        entry = self._dyn_entry(term, slots.shape[0])
        n = entry[2]
        m = n + slots.shape[0]
        entry[0][n:m] = slots
        entry[1][n:m] = tfs
        entry[2] = m

    def _maybe_compact(self) -> None:
        if self._n_dead > self.compact_min_dead and self._n_dead > self._n_live:
            self._rebuild()

    def _rebuild(self) -> None:
        """Drop dead slots, renumber the live ones densely and lay all postings out term-major."""
        n_slots = self._n_slots
        alive = self._slot_alive[:n_slots]
        live = np.flatnonzero(alive)
        nterms = self._slot_nterms[live]
        starts = self._slot_start[live]
        total = int(nterms.sum())
        # gather forward entries of live slots, in slot order
        if live.shape[0] == n_slots and total == self._fwd_n:
            fwd_term = self._fwd_term[: self._fwd_n].copy()
            fwd_tf = self._fwd_tf[: self._fwd_n].copy()
        else:
            new_starts = np.zeros(live.shape[0], dtype=np.int64)
            if live.shape[0] > 1:
                np.cumsum(nterms[:-1], out=new_starts[1:])
            idx = np.arange(total, dtype=np.int64) - np.repeat(new_starts - starts, nterms)
            fwd_term = self._fwd_term[idx]
            fwd_tf = self._fwd_tf[idx]
        new_n = live.shape[0]
        new_starts = np.zeros(new_n, dtype=np.int64)
        if new_n > 1:
            np.cumsum(nterms[:-1], out=new_starts[1:])
        self._slot_doc = self._slot_doc[live].copy()
        self._slot_len = self._slot_len[live].copy()
        self._slot_alive = np.ones(new_n, dtype=bool)
        self._slot_start = new_starts
        self._slot_nterms = nterms.copy()
        self._n_slots = new_n
        self._n_dead = 0
        self._doc_slot[:] = -1
        self._doc_slot[self._slot_doc] = np.arange(new_n, dtype=np.int64)
        self._fwd_term = fwd_term
        self._fwd_tf = fwd_tf
        self._fwd_n = total
        # term-major postings, slots ascending within a term
        n_terms = len(self._term_id)
        max_tf = int(fwd_tf.max()) + 1 if total else 1
        if n_terms * max(new_n, 1) * max_tf < (1 << 62):
            # pack (term, slot, tf) into one int64 and use numpy's fast integer sort
            key = fwd_term.astype(np.int64)
            key *= new_n
            key += np.repeat(np.arange(new_n, dtype=np.int64), nterms)
            key *= max_tf
            key += fwd_tf
            key.sort()
            self._base_tf = (key % max_tf).astype(np.int32)
            key //= max_tf
            self._base_slot = (key % max(new_n, 1)).astype(np.int32)
            del key
        else:
            slot_col = np.repeat(np.arange(new_n, dtype=np.int32), nterms)
            order = np.argsort(fwd_term, kind="stable")
            self._base_slot = slot_col[order]
            self._base_tf = fwd_tf[order]
        counts = np.bincount(fwd_term, minlength=n_terms)
        ptr = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        self._base_ptr = ptr
        self._dyn = {}
        self._norm_key = None

    def _bulk_tokenize(self, texts: list[str | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Tokenize many texts -> (doc index, term id, tf) per distinct (doc, term), doc lengths.

        Gives exactly ``self.tokenizer.tokenize`` per text: ASCII texts are lowered and cut
        into runs of ``[a-z0-9']`` by one ``bytes.translate`` + ``split``; the regex of the
        single-text path only ever matches inside such runs, so each distinct run is
        resolved once (``_Surface``) to the term it yields. Runs yielding several words
        ("a''b") and non-ASCII texts take the single-text path.
        """
        n = len(texts)
        clean = ["" if t is None else t for t in texts]
        term_id = self._term_id
        doc_parts: list[np.ndarray] = []
        term_parts: list[np.ndarray] = []
        slow: list[int] = []
        surface = self._surface
        if surface is None:
            surface = self._surface = _Surface(self)
        # chunks bound the peak memory of the word lists (~50 bytes per word)
        for c0 in range(0, n, self._BULK_CHUNK):
            chunk = clean[c0 : c0 + self._BULK_CHUNK]
            joined = RUN_SEPARATOR.join(chunk)
            if joined.isascii() and joined.count("\x01") == len(chunk) - 1:
                fast = np.arange(c0, c0 + len(chunk), dtype=np.int64)
            else:
                fast_list: list[int] = []
                for i, t in enumerate(chunk, start=c0):
                    (fast_list if t.isascii() and "\x01" not in t else slow).append(i)
                if not fast_list:
                    continue
                fast = np.asarray(fast_list, dtype=np.int64)
                joined = RUN_SEPARATOR.join([clean[i] for i in fast_list])
            words = ascii_runs(joined)
            del joined
            wid = np.fromiter(map(surface.__getitem__, words), dtype=np.int64, count=len(words))
            del words
            local = np.cumsum(wid == -2)
            complex_mask = wid == -3
            if complex_mask.any():
                bad_docs = np.unique(local[complex_mask])
                slow.extend(fast[bad_docs].tolist())
                wid[np.isin(local, bad_docs)] = -1
            keep = wid >= 0
            doc_parts.append(fast[local[keep]])
            term_parts.append(wid[keep])
            del wid, local, keep
        for i in sorted(slow):
            toks = self.tokenizer.tokenize(clean[i])
            if not toks:
                continue
            ids = []
            for tok in toks:
                tid = term_id.get(tok)
                if tid is None:
                    tid = self._new_term(tok)
                ids.append(tid)
            doc_parts.append(np.full(len(ids), i, dtype=np.int64))
            term_parts.append(np.asarray(ids, dtype=np.int64))
        if not doc_parts or sum(p.shape[0] for p in doc_parts) == 0:
            z = np.zeros(0, dtype=np.int64)
            return z, z.astype(np.int32), z.astype(np.int32), np.zeros(n, dtype=np.int64)
        doc = np.concatenate(doc_parts) if len(doc_parts) > 1 else doc_parts[0]
        term = np.concatenate(term_parts) if len(term_parts) > 1 else term_parts[0]
        lengths = np.bincount(doc, minlength=n).astype(np.int64)
        v = max(len(term_id), 1)
        key = doc * v
        key += term
        del doc, term
        key.sort()
        starts = np.flatnonzero(np.diff(key)) + 1
        starts = np.concatenate(([0], starts))
        tf = np.diff(np.concatenate((starts, [key.shape[0]])))
        uk = key[starts]
        return uk // v, (uk % v).astype(np.int32), tf.astype(np.int32), lengths

    # ------------------------------------------------------------------ reads

    def _postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        entry = self._dyn.get(term)
        if entry is not None:
            n = entry[2]
            return entry[0][:n], entry[1][:n]
        if term + 1 < self._base_ptr.shape[0]:
            a, z = self._base_ptr[term], self._base_ptr[term + 1]
            return self._base_slot[a:z], self._base_tf[a:z]
        return self._base_slot[:0], self._base_tf[:0]

    def _query_terms(self, query: str | Sequence[str]) -> dict[int, int]:
        toks = self.tokenizer.tokenize(query) if isinstance(query, str) or query is None else list(query)
        counts: dict[int, int] = {}
        for tok in toks:
            tid = self._term_id.get(tok)
            if tid is not None and self._df[tid] > 0:
                counts[tid] = counts.get(tid, 0) + 1
        return counts

    def _norms(self) -> np.ndarray:
        """Per-slot ``k1·(1 − b + b·dl/avgdl)``, recomputed when N or the total length changed."""
        key = (self._n_live, self._total_len, self._n_slots)
        if self._norm_key != key:
            avgdl = self._total_len / self._n_live if self._n_live else 1.0
            coef = self.k1 * self.b / avgdl if avgdl > 0 else 0.0
            norm = self._slot_len[: self._n_slots].astype(np.float64)
            norm *= coef
            norm += self.k1 * (1.0 - self.b)
            self._norm = norm
            self._norm_min = float(norm.min()) if norm.shape[0] else 0.0
            self._norm_key = key
        return self._norm

    def _term_weights(self, query: str | Sequence[str]) -> list[tuple[np.ndarray, np.ndarray, float]]:
        """(slots, tfs, idf·qtf·(k1+1)) per matched query term, in query order."""
        qterms = self._query_terms(query)
        if not qterms or self._n_live == 0:
            return []
        n_live = self._n_live
        out = []
        for tid, qtf in qterms.items():
            slots, tfs = self._postings(tid)
            if slots.shape[0] == 0:
                continue
            df = int(self._df[tid])
            idf = math.log(1.0 + (n_live - df + 0.5) / (df + 0.5))
            out.append((slots, tfs, idf * qtf * (self.k1 + 1.0)))
        return out

    def _accumulate(self, query: str | Sequence[str], keep=None, terms=None) -> tuple[np.ndarray, np.ndarray]:
        """(slots ascending, float64 scores) of live docs matching ``query``.

        Per term, ``buf[slots] += w·tf/(tf + norm)`` (a term's slots are distinct, so plain
        fancy-index addition is exact); contributions are added in query-term order, so a
        doc's score does not depend on how the index was built. ``keep(slots, scores)``
        may return a lower bound below which callers do not need docs (top-k pruning).
        """
        if terms is None:
            terms = self._term_weights(query)
        if not terms:
            return _EMPTY_IDS, np.zeros(0, dtype=np.float64)
        n_slots = self._n_slots
        total = sum(t[0].shape[0] for t in terms)
        norm = self._norms()
        if len(terms) == 1 or total * 8 < n_slots:
            # few postings: no dense buffer, sort + segment sums
            if len(terms) == 1:
                slots = terms[0][0].astype(np.int64)
                scores = _term_scores(norm, terms[0][0], terms[0][1], terms[0][2])
                if slots.shape[0] > 1 and not (slots[1:] > slots[:-1]).all():
                    order = np.argsort(slots, kind="stable")
                    slots, scores = slots[order], scores[order]
            else:
                # compiled: w·tf / (tf + norm) per posting, summed per slot in query-term order
                # exactly as a stable sort + np.add.reduceat sums them (the twin does just that)
                slots, scores = _kernels.bm25_segments(
                    norm, np.concatenate([t[0] for t in terms]).astype(np.int32, copy=False),
                    np.concatenate([t[1] for t in terms]).astype(np.int32, copy=False),
                    np.array([t[0].shape[0] for t in terms], dtype=np.int64),
                    np.array([t[2] for t in terms], dtype=np.float64))
        else:
            if self._buf.shape[0] < n_slots:
                self._buf = np.zeros(max(n_slots, 2 * self._buf.shape[0]), dtype=np.float64)
            buf = self._buf
            # compiled: buf[slots] += w·tf / (tf + norm) term after term (the numpy operations, same bits)
            _kernels.bm25_dense(buf, norm, [t[0].astype(np.int32, copy=False) for t in terms],
                                [t[1].astype(np.int32, copy=False) for t in terms],
                                np.array([t[2] for t in terms], dtype=np.float64))
            view = buf[:n_slots]
            lower = keep(terms, view) if keep is not None else 0.0
            slots = np.flatnonzero(view >= lower) if lower > 0.0 else np.flatnonzero(view)
            scores = view[slots]
            if total > n_slots // 2:
                view[:] = 0.0
            else:
                for t_slots, _, _ in terms:
                    buf[t_slots] = 0.0
        live = self._slot_alive[slots]
        if not live.all():
            slots, scores = slots[live], scores[live]
        return slots, scores

    def _score_by_lookup(self, cand: np.ndarray, terms, norm: np.ndarray) -> np.ndarray:
        """Exact scores of the (sorted, distinct) slots ``cand``, by binary search in each
        term's slot-sorted postings; same float operations and term order as ``_accumulate``."""
        acc = np.zeros(cand.shape[0], dtype=np.float64)
        nc = norm[cand]
        for t_slots, t_tfs, w in terms:
            pos = np.searchsorted(t_slots, cand)
            np.minimum(pos, t_slots.shape[0] - 1, out=pos)
            hit = t_slots[pos] == cand
            tf = np.where(hit, t_tfs[pos], 0).astype(np.float64)
            c = nc + tf
            np.divide(tf, c, out=c)
            c *= w
            c[~hit] = 0.0
            acc += c
        return acc

    def _sample_slots(self, terms, top_k: int, allowed: np.ndarray | None) -> np.ndarray | None:
        """A few valid slots (sorted, distinct) whose exact scores bound the top_k-th from below:
        all docs of the rarest terms (likely high scorers) topped up with the first docs of
        the next terms. None when fewer than top_k valid docs turn up."""
        want = 4 * top_k
        parts: list[np.ndarray] = []
        size = 0
        for t_slots, _, _ in sorted(terms, key=lambda t: t[0].shape[0]):
            n_i = t_slots.shape[0]
            take = n_i if (size + n_i <= want or not parts) and n_i <= 64 * want else want
            parts.append(t_slots[:take])
            size += take
            if size >= want:
                break
        sample = np.unique(np.concatenate(parts)) if len(parts) > 1 else parts[0].astype(np.int64)
        sample = sample[self._valid_mask(sample, allowed)]
        return sample if sample.shape[0] >= top_k else None

    def _search_pruned(self, terms, top_k: int, allowed: np.ndarray | None):
        """MaxScore-style candidate pruning for queries that touch many postings.

        A lower bound θ on the top_k-th score comes from exactly scoring the docs of the
        rarest terms. Terms whose summed upper bounds stay below θ ("non-essential",
        typically very common words) cannot lift a doc into the top k on their own, so
        candidates are the docs of the other terms only; every candidate is then scored
        exactly over all terms. Returns None when pruning would not pay off.
        """
        norm = self._norms()
        n_slots = self._n_slots
        sample = self._sample_slots(terms, top_k, allowed)
        if sample is None:
            return None
        sample_scores = self._score_by_lookup(sample, terms, norm)
        kth = float(np.partition(sample_scores, sample.shape[0] - top_k)[sample.shape[0] - top_k])
        theta = float(np.nextafter(np.float32(kth), np.float32(0))) * (1 - 1e-6)
        if theta <= 0.0:
            return None
        min_norm = self._norm_min
        bounds = []
        for i, (t_slots, t_tfs, w) in enumerate(terms):
            mt = float(t_tfs.max())
            bounds.append((w * mt / (mt + min_norm) * (1 + 1e-9) if mt + min_norm > 0 else w, i))
        bounds.sort()
        cum = 0.0
        essential = []
        for k, (ub, i) in enumerate(bounds):
            if cum + ub < theta:
                cum += ub
            else:
                essential = [j for _, j in bounds[k:]]
                break
        if len(essential) == len(terms):
            return None
        ess_total = sum(terms[i][0].shape[0] for i in essential)
        if ess_total > n_slots // 4 and not self._prune_always:
            return None
        if not essential:  # cannot happen (sample docs score >= θ), kept for safety
            return None
        if len(essential) == 1:
            cand = terms[essential[0]][0].astype(np.int64)
        else:
            cand = np.unique(np.concatenate([terms[i][0] for i in essential])).astype(np.int64)
        cand = cand[self._valid_mask(cand, allowed)]
        return cand, self._score_by_lookup(cand, terms, norm)

    def _valid_mask(self, slots: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
        ok = self._slot_alive[slots]
        if allowed is not None:
            docs = self._slot_doc[slots]
            inside = docs < allowed.shape[0]
            ok &= inside
            ok[inside] &= allowed[docs[inside]]
        return ok

    def doc_terms(self, doc_ids: Sequence[int]) -> list[list[str] | None]:
        """The distinct terms of each doc, from the forward index (what ``set(tokenizer.tokenize(text))``
        gives for its text, in first-occurrence order; no re-tokenizing); None for a doc not indexed."""
        names = self._term_names
        out: list[list[str] | None] = []
        n = self._doc_slot.shape[0]
        for d in doc_ids:
            d = int(d)
            slot = int(self._doc_slot[d]) if 0 <= d < n else -1
            if slot < 0:
                out.append(None)
                continue
            s = int(self._slot_start[slot])
            out.append([names[t] for t in self._fwd_term[s:s + int(self._slot_nterms[slot])].tolist()])
        return out

    def document_frequencies(self, terms: Sequence[str]) -> np.ndarray:
        """``document_frequency`` of each term (int64; 0 for an unknown term), in one lookup."""
        tid = self._term_id
        ids = np.fromiter((tid.get(t, -1) for t in terms), dtype=np.int64, count=len(terms))
        out = np.zeros(len(ids), dtype=np.int64)
        known = ids >= 0
        out[known] = self._df[ids[known]]
        return out

    def document_frequency(self, term: str) -> int:
        """Live documents containing ``term`` (a token as the tokenizer produces it); 0 if unknown."""
        tid = self._term_id.get(term)
        return 0 if tid is None else int(self._df[tid])

    def scores(self, query: str | Sequence[str]) -> dict[int, float]:
        """BM25 score of every live doc matching ``query`` (doc id -> score)."""
        slots, scores = self._accumulate(query)
        return dict(zip(self._slot_doc[slots].tolist(), scores.tolist()))

    def search(
        self,
        query: str | Sequence[str],
        *,
        top_k: int = 10,
        allowed: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Best ``top_k`` docs for ``query``: (doc ids int64, scores float32), best first.

        Ties (equal float32 scores) go to the lower doc id. ``allowed`` is a boolean mask
        indexed by doc id; ids beyond its end are not allowed.
        """
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)):
            raise TypeError(f"top_k must be an int, got {type(top_k).__name__}")
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        if allowed is not None:
            allowed = np.asarray(allowed)
            if allowed.ndim != 1 or allowed.dtype != np.bool_:
                raise ValueError("allowed must be a 1-D boolean array indexed by doc id")
        if top_k == 0:
            return _EMPTY_IDS.copy(), _EMPTY_SCORES.copy()
        def lower_bound(terms, view: np.ndarray) -> float:
            # the top_k-th best exact score among a few valid docs bounds the answer from below
            sample = self._sample_slots(terms, top_k, allowed)
            if sample is None:
                return 0.0
            vals = view[sample]
            # a float64 bound just under the float32 value keeps float32 ties at the cut
            kth = float(np.partition(vals, vals.shape[0] - top_k)[vals.shape[0] - top_k])
            return float(np.nextafter(np.float32(kth), np.float32(0))) * (1 - 1e-6)

        terms = self._term_weights(query)
        if not terms:
            return _EMPTY_IDS.copy(), _EMPTY_SCORES.copy()
        pruned = None
        if len(terms) > 1 and sum(t[0].shape[0] for t in terms) >= self.prune_min_postings:
            pruned = self._search_pruned(terms, top_k, allowed)
        if pruned is not None:
            slots, scores = pruned
        else:
            slots, scores = self._accumulate(query, keep=lower_bound, terms=terms)
        if slots.shape[0] == 0:
            return _EMPTY_IDS.copy(), _EMPTY_SCORES.copy()
        # compiled: the allowed docs' float32 scores, best top_k by (score desc, doc id asc)
        return _kernels.bm25_top(self._slot_doc, np.ascontiguousarray(slots, dtype=np.int64),
                                 np.ascontiguousarray(scores, dtype=np.float64),
                                 None if allowed is None else np.ascontiguousarray(allowed).view(np.uint8),
                                 int(top_k))
