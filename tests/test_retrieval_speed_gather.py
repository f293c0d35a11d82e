"""Search with the model: the compiled row gather of the vector index's rescoring
(``pread_rows``: one ``pread`` per row with the GIL released for the whole gather) against its
plain-Python twin and numpy on real files, and the centred blend's reuse of the lexical
candidates' vectors read while the query is encoded (``_vectors_with``)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from causalmem import _kernels
from causalmem.retrieval import _vectors_with
from causalmem.vector_index import Rows

IMPLS = [pytest.param(_kernels.reference.pread_rows, id="python")]
if _kernels.compiled is not None:
    IMPLS.append(pytest.param(_kernels.compiled.pread_rows, id="compiled"))


@pytest.fixture
def rows_file(tmp_path):
    rng = np.random.default_rng(3)
    mat = rng.standard_normal((777, 48)).astype(np.float32)
    path = tmp_path / "rows.bin"
    path.write_bytes(b"H" * 80 + mat.tobytes())
    fd = os.open(path, os.O_RDONLY)
    yield fd, mat
    os.close(fd)


@pytest.mark.parametrize("gather", IMPLS)
def test_pread_rows_reads_exactly_the_rows_asked(rows_file, gather):
    fd, mat = rows_file
    rb = mat.shape[1] * 4
    rng = np.random.default_rng(9)
    for n in (0, 1, 2, 57, 400):
        pos = rng.integers(0, mat.shape[0], n).astype(np.int64)
        if n > 2:
            pos[1] = pos[0]  # repeats allowed
            pos[2] = mat.shape[0] - 1  # the last row
        out = np.full(n * rb, 0xAB, dtype=np.uint8)
        assert gather(fd, pos, rb, 80, out) == n
        np.testing.assert_array_equal(out.view(np.float32).reshape(n, mat.shape[1]), mat[pos])


@pytest.mark.parametrize("gather", IMPLS)
def test_pread_rows_refuses_bad_input(rows_file, gather):
    fd, mat = rows_file
    rb = mat.shape[1] * 4
    with pytest.raises(ValueError, match="out has"):
        gather(fd, np.array([1, 2], np.int64), rb, 80, np.empty(rb, np.uint8))
    with pytest.raises(ValueError, match="negative"):
        gather(fd, np.array([3, -1], np.int64), rb, 80, np.empty(2 * rb, np.uint8))
    with pytest.raises(ValueError, match="rowbytes"):
        gather(fd, np.array([1], np.int64), 0, 80, np.empty(0, np.uint8))
    with pytest.raises(ValueError, match="offset"):
        gather(fd, np.array([1], np.int64), rb, -8, np.empty(rb, np.uint8))
    with pytest.raises(OSError, match="short read"):  # a row past the end of the file
        gather(fd, np.array([0, mat.shape[0]], np.int64), rb, 80, np.empty(2 * rb, np.uint8))
    with pytest.raises(OSError):  # not an open file
        gather(-1, np.array([0], np.int64), rb, 80, np.empty(rb, np.uint8))


def test_rows_file_take_matches_the_array(tmp_path):
    """``Rows.take`` over a ``.npy`` rows file (the compiled gather) = the same rows held in memory."""
    rng = np.random.default_rng(4)
    for dtype, np_dtype in (("f32", "<f4"), ("f16", "<f2"), ("i8", "i1")):
        raw = (rng.standard_normal((300, 32)) * (40 if dtype == "i8" else 1)).astype(np_dtype)
        path = tmp_path / f"r-{dtype}.npy"
        np.save(path, raw)
        on_disk, in_memory = Rows(32, dtype, path=path), Rows(32, dtype, array=raw)
        try:
            pos = rng.integers(0, 300, 123)
            np.testing.assert_array_equal(on_disk.take(pos), in_memory.take(pos))
            with pytest.raises(IndexError):
                on_disk.take(np.array([300]))
        finally:
            on_disk.close()


def test_rows_file_without_pread_reads_by_seek_under_a_lock(tmp_path, monkeypatch):
    """Where the platform has no ``os.pread`` (Windows), a rows file is read by seek + read under the
    file's lock: the same rows as in memory, also with several threads gathering at once."""
    import threading

    from causalmem import vector_segments

    monkeypatch.setattr(vector_segments, "_HAVE_PREAD", False)
    monkeypatch.delattr(os, "pread")  # as on Windows: any use of it would fail
    rng = np.random.default_rng(5)
    raw = rng.standard_normal((500, 24)).astype("<f4")
    path = tmp_path / "r.npy"
    np.save(path, raw)
    on_disk, in_memory = Rows(24, "f32", path=path), Rows(24, "f32", array=raw)
    try:
        np.testing.assert_array_equal(np.concatenate([b for _, b in on_disk.blocks(size=64)]), raw)
        errors: list[BaseException] = []

        def gather(seed: int) -> None:
            r = np.random.default_rng(seed)
            try:
                for _ in range(50):
                    pos = r.integers(0, 500, int(r.integers(1, 80)))
                    np.testing.assert_array_equal(on_disk.take(pos), in_memory.take(pos))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=gather, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
        with pytest.raises(IndexError):
            on_disk.take(np.array([500]))
    finally:
        on_disk.close()


class _Views:
    """The one method ``_vectors_with`` calls: the vectors of a real index, in the order asked."""

    def __init__(self, ids: np.ndarray, mat: np.ndarray) -> None:
        self.ids, self.mat, self.calls = ids, mat, []

    def vectors_of(self, nids):
        nids = np.asarray(nids, np.int64)
        self.calls.append(nids)
        have = np.isin(nids, self.ids)
        pos = np.searchsorted(self.ids, nids[have])
        return nids[have], self.mat[pos]


def test_vectors_with_known_rows_is_vectors_of():
    rng = np.random.default_rng(6)
    ids = np.sort(rng.choice(5000, 900, replace=False)).astype(np.int64)  # chunks with a vector
    views = _Views(ids, rng.standard_normal((900, 16)).astype(np.float32))
    for _ in range(200):
        lex = rng.choice(5000, rng.integers(0, 60), replace=False).astype(np.int64)  # BM25 order
        vec = rng.choice(ids, rng.integers(0, 60), replace=False)
        nids = np.union1d(lex, vec).astype(np.int64)
        want = views.vectors_of(nids)
        known = (lex, *views.vectors_of(lex))
        views.calls.clear()
        got = _vectors_with(views, nids, known)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert len(views.calls) == 1 and not np.isin(views.calls[0], lex).any()  # only the rest is read
    got = _vectors_with(views, np.array([3, 7], np.int64), None)  # nothing known: one plain read
    np.testing.assert_array_equal(got[0], views.vectors_of(np.array([3, 7]))[0])


DENSE = [pytest.param(_kernels.reference.bm25_dense, id="python")]
if _kernels.compiled is not None:
    DENSE.append(pytest.param(_kernels.compiled.bm25_dense, id="compiled"))


@pytest.mark.parametrize("dense", DENSE)
def test_bm25_dense_is_the_numpy_accumulation_to_the_bit(dense):
    """The lexical index's dense accumulation: ``buf[slots] += w·tf/(tf + norm)`` term after term."""
    from causalmem.lexical import _term_scores

    rng = np.random.default_rng(12)
    n = 5000
    norm = rng.uniform(0.3, 3.0, n)
    for n_terms in (1, 2, 5, 11):
        slots = [np.sort(rng.choice(n, rng.integers(0, 3000), replace=False)).astype(np.int32) for _ in range(n_terms)]
        tfs = [rng.integers(1, 9, len(s)).astype(np.int32) for s in slots]
        w = rng.uniform(0.1, 7.0, n_terms)
        want = np.zeros(n + 7)
        for s, t, x in zip(slots, tfs, w):
            want[s] += _term_scores(norm, s, t, float(x))
        got = np.zeros(n + 7)
        dense(got, norm, slots, tfs, w)
        assert got.tobytes() == want.tobytes()  # bit for bit, zeros beyond the postings too


@pytest.mark.parametrize("dense", DENSE)
def test_bm25_dense_refuses_bad_input(dense):
    norm = np.ones(10)
    buf = np.zeros(10)
    ok = np.array([1, 2], np.int32)
    with pytest.raises(ValueError, match="out of range"):
        dense(buf, norm, [ok, np.array([3, 10], np.int32)], [ok, ok], np.ones(2))
    with pytest.raises(ValueError, match="out of range"):
        dense(buf, norm, [np.array([-1], np.int32)], [np.array([1], np.int32)], np.ones(1))
    with pytest.raises(ValueError, match="out of range"):  # norm shorter than buf
        dense(np.zeros(20), norm, [np.array([12], np.int32)], [np.array([1], np.int32)], np.ones(1))
    with pytest.raises(ValueError, match="same length"):
        dense(buf, norm, [ok], [np.array([1], np.int32)], np.ones(1))
    with pytest.raises(ValueError, match="one weight per term"):
        dense(buf, norm, [ok], [ok], np.ones(2))
    assert not buf.any()  # nothing added by a refused call


def test_lexical_search_without_pruning_answers_as_with_it():
    """MaxScore pruning is now kept for huge queries only (the compiled dense pass measured faster):
    both routes give the same top k, including ties, on a corpus with very common words."""
    from causalmem.lexical import BM25Index

    rng = np.random.default_rng(2)
    vocab = [f"w{i}" for i in range(300)]
    p = 1.0 / np.arange(1, 301)
    p /= p.sum()
    ix = BM25Index()
    ix.add_many([(d, " ".join(rng.choice(vocab, rng.integers(3, 30), p=p))) for d in range(6000)])
    allowed = rng.random(6000) < 0.7
    for _ in range(60):
        q = " ".join(rng.choice(vocab, rng.integers(2, 9), p=p))
        for mask in (None, allowed):
            ix.prune_min_postings, ix._prune_always = 0, True
            a = ix.search(q, top_k=25, allowed=mask)
            ix.prune_min_postings, ix._prune_always = 10**12, False
            b = ix.search(q, top_k=25, allowed=mask)
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])
