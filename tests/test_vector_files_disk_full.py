"""A vector segment build on a full disk: the failure is reported, its files are removed and no
descriptor of them stays open (closing the rows file fails its last flush there), and the keeper's
record of a failure holds no frame alive. A real full disk: a small tmpfs (root)."""
from __future__ import annotations

import contextlib
import errno
import gc
import os
from pathlib import Path

import numpy as np
import pytest

from disk_full import fill, tmpfs

from causalmem.errors import without_traceback
from causalmem.vector_core import VectorIndex
from causalmem.vector_files import SegmentWriter, fold_segment
from causalmem.vector_segments import usearch_available

DIM = 16


def _open_under(d: Path) -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(d)):
                out.append(target)
    return out


def _rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    m = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return np.arange(seed * 1000, seed * 1000 + n, dtype=np.int64), m, np.arange(n, dtype=np.int64)


def test_abort_on_a_full_disk_removes_the_files_and_does_not_raise(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "2m") as disk:
        d = disk / "m.db.idx"
        w = SegmentWriter(VectorIndex(DIM), d) if usearch_available() else pytest.skip("no usearch")
        fill(disk)
        ids, m, h = _rows(8, 1)
        with contextlib.suppress(OSError):
            w.add(ids, m, h)  # buffered: the write itself may not reach the disk yet
        w.abort()  # the close's flush finds the disk full
        assert not list(d.glob("vectors-*")), list(d.iterdir())
        assert _open_under(disk) == []


def test_a_fold_on_a_full_disk_fails_and_leaves_neither_files_nor_descriptors(tmp_path: Path) -> None:
    if not usearch_available():
        pytest.skip("no usearch")
    with tmpfs(tmp_path / "disk", "4m") as disk:
        d = disk / "m.db.idx"
        vi = VectorIndex(DIM, ann_min=10)
        w = SegmentWriter(vi, d)
        ids, m, h = _rows(200, 1)
        assert w.add(ids, m, h)
        seg = w.finish("model")
        assert seg.path is not None and seg.gen is not None
        before = sorted(p.name for p in d.iterdir())
        fill(disk)
        ids2, m2, h2 = _rows(3000, 2)
        gc.disable()
        try:
            with pytest.raises(OSError) as info:
                fold_segment(vi, seg, ids2, m2, h2, contextlib.nullcontext(), d, "model")
            assert info.value.errno == errno.ENOSPC
            del info
            assert sorted(p.name for p in d.iterdir()) == before  # the failed generation's files are gone
            held = [p for p in _open_under(disk) if seg.gen not in p]
            assert held == [], held  # nothing of the failed build stays open, without the collector's help
        finally:
            gc.enable()
        seg.rows.close()


def test_a_kept_failure_holds_no_frames() -> None:
    class Big:
        pass

    def inner(obj: Big) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def outer() -> BaseException:
        big = Big()
        try:
            try:
                inner(big)
            except OSError as first:
                raise RuntimeError("step failed") from first
        except RuntimeError as exc:
            return without_traceback(exc)
        raise AssertionError("unreachable")

    gc.disable()
    try:
        err = outer()
        assert err.__traceback__ is None and err.__cause__ is not None and err.__cause__.__traceback__ is None
        assert not [o for o in gc.get_objects() if type(o) is Big]  # freed by reference counting alone
    finally:
        gc.enable()
