"""The vector files' stamped state: the delta file written at close and read at open; the catch-up kinds.

At close, when the index holds exactly the store's vectors at its ``change_seq``, :func:`stamp_sidecar`
records that ``seq`` in the header and names a small delta file (the in-memory delta and the segment
ids masked since the save). The next open reads it back with :func:`read_delta`; a header of an
earlier ``seq`` is caught up along the change journal (``sidecar.read_chain``) over the kinds in
``CATCH_UP_KINDS``, at most ``CATCH_UP_MAX_IDS`` ids (the keeper does this,
:class:`causalmem.vector_keeper.IndexKeeper`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from . import vector_files as files
from .vector_core import VectorIndex

__all__ = ["CATCH_UP_KINDS", "CATCH_UP_MAX_IDS", "stamp_sidecar", "read_delta"]

#: journal kinds that change which vector a chunk has in the index (inserted, updated — e.g. deleted —,
#: retexted, vector stored) and the most ids a catch-up of the index files re-reads
CATCH_UP_KINDS = ("ci", "cu", "ct", "v")
CATCH_UP_MAX_IDS = 200_000


def stamp_sidecar(directory: Path, vi: VectorIndex, seq: int) -> bool:
    """Record in the header that the files + a small delta file hold exactly the vectors of the database
    at ``change_seq == seq`` (at close): the next open then uses them without reading the database.
    The delta file holds the in-memory delta and the segment ids masked since the segment was saved."""
    seg = vi.segment
    if seg is None or seg.gen is None or not vi.ready:
        return False
    head = files.read_header(directory)
    if head is None or head.get("gen") != seg.gen:
        return False
    if head.get("seq") == int(seq):  # the files describe this very state already: nothing to write
        return True
    gone = seg.keys[~seg.live[seg.keys]]
    ids, mat, hashes = vi.delta.snapshot()
    old = files.named_files({"delta": head.get("delta")})
    if gone.shape[0] or ids.shape[0]:
        name = f"vectors-{seg.gen}.delta-{os.urandom(4).hex()}.npz"
        path = directory / name
        with open(path, "wb") as fh:
            np.savez(fh, ids=ids, vectors=mat.astype("<f4"), hashes=hashes, gone=gone)
        head["delta"] = [name, path.stat().st_size, files.checksum(path)]
    else:
        head["delta"] = None
    head["seq"] = int(seq)
    files.write_header(directory, head)
    files.tidy(directory, files.named_files(head), old - files.named_files(head))
    return True


def read_delta(directory: Path, head: dict[str, Any], dim: int
               ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None:
    """((ids, vectors, hashes), gone ids) of a stamped header's delta file; None when damaged."""
    delta = head.get("delta")
    if not delta:
        return (np.zeros(0, np.int64), np.zeros((0, dim), np.float32), np.zeros(0, np.int64)), np.zeros(0, np.int64)
    try:
        path = directory / str(delta[0])
        if path.stat().st_size != int(delta[1]) or files.checksum(path) != int(delta[2]):
            return None
        with np.load(path, allow_pickle=False) as z:
            ids, vecs, hashes, gone = (np.asarray(z[k]) for k in ("ids", "vectors", "hashes", "gone"))
        if vecs.shape != (ids.shape[0], dim) or hashes.shape != ids.shape or not np.isfinite(vecs).all():
            return None
        return (ids.astype(np.int64), vecs.astype(np.float32), hashes.astype(np.int64)), gone.astype(np.int64)
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
