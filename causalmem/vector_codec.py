"""The one codec of stored vectors: float32 little-endian BLOBs, rows decoded in bulk, rows normalised.

numpy only (no usearch): the embedding worker, the semantic channel and the vector index all read
and write stored vectors through these functions.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["UNKNOWN_HASH", "vector_to_blob", "blob_to_vector", "decode_rows", "normalise_rows"]

#: text hash of a vector whose source text is not known here (re-validated at the next load)
UNKNOWN_HASH = -(1 << 63)


def vector_to_blob(v: np.ndarray) -> bytes:
    """A 1-D vector as float32 little-endian bytes (the SQLite BLOB format)."""
    a = np.asarray(v)
    if a.ndim != 1:
        raise ValueError(f"vector must be 1-D, got shape {a.shape}")
    return a.astype("<f4", copy=False).tobytes()


def blob_to_vector(b: bytes | bytearray | memoryview, dim: int) -> np.ndarray:
    """Inverse of :func:`vector_to_blob`; a BLOB of the wrong size is a ``ValueError``."""
    raw = bytes(b)
    if len(raw) != 4 * dim:
        raise ValueError(f"vector blob has {len(raw)} bytes, expected {4 * dim} for dim {dim}")
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def decode_rows(rows: Sequence[Sequence[Any]], dim: int, blob: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(nids, float32 vectors) of stored rows: the nid in column 0, the BLOB in column ``blob``."""
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros((0, dim), dtype=np.float32)
    nids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    raw = b"".join(bytes(r[blob]) for r in rows)
    if len(raw) != 4 * dim * len(rows):  # some BLOB has the wrong size: name it
        return nids, np.vstack([blob_to_vector(r[blob], dim) for r in rows])
    return nids, np.frombuffer(raw, dtype="<f4").reshape(len(rows), dim).astype(np.float32)



def normalise_rows(m: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, float32 (a zero row stays zero instead of NaN)."""
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)  # a zero row stays zero instead of NaN
    return (m / norms).astype(np.float32, copy=False)
