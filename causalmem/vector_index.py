"""The public face of the semantic channel's vector index: an exact delta + a binary-HNSW segment.

Every name below is importable from here; each lives in the module of its role:

* :mod:`causalmem.vector_codec`: the codec of stored vectors and ``UNKNOWN_HASH``;
* :mod:`causalmem.vector_segments`: the exact delta, a segment's rows, the binary-HNSW segment;
* :mod:`causalmem.vector_core`: :class:`VectorIndex`, the search over both;
* :mod:`causalmem.vector_files`: the index files, their header and checksums, building and opening them;
* :mod:`causalmem.vector_journal`: the state stamped at close (the delta file) and the catch-up kinds;
* :mod:`causalmem.vector_keeper`: :class:`IndexKeeper`, the thread that loads, folds and saves.

Settings read at run time (``BUILD_THREADS``, ``usearch_available``) are read from their own module:
set them there (``vector_files.BUILD_THREADS``), not on this one.

Views layer helper, numpy at import; ``usearch`` is imported when an approximate segment is built or
opened (the ``[semantic]``/``[onnx]`` extras install it; without it every search is exact). Also the
one codec of stored vectors (:func:`vector_to_blob`, :func:`blob_to_vector`, :func:`decode_rows`).

:class:`VectorIndex` keeps normalised float32 rows keyed by the store's integer chunk ids in two
disjoint parts:

* the **delta** (:class:`ExactRows`): a dense matrix searched exactly (one matrix-vector product);
  every vector added in this process goes here first;
* at most one **segment** (:class:`AnnSegment`): an immutable usearch HNSW graph over the *sign bits*
  of ``vector - center`` (``b1``, Hamming distance: 48 bytes a vector at 384 dims) that proposes
  ``rescore`` (400) candidates, which are then scored exactly from the segment's **rows** (f32, or
  f16 / i8 with ``quantization``), read by row with ``pread`` from ``vectors-<gen>.rows.npy``. Only
  the small graph is memory-mapped; the rows never are, so the process's RSS holds the graph at most
  (about 200 MB at 1M vectors) and the rows stay in the page cache. A removed or replaced id is
  masked out (a tombstone) by a live mask.

A search asks both parts and merges (best first, equal scores to the lower id). A scope filter
(``allowed``, a boolean mask by id) is applied inside the segment: a scope holding at most
``exact_scope`` live segment vectors is scored exactly (its rows read); a larger one is over-fetched
from the graph by ``rescore / share`` (share = the scope's fraction of the segment), grown 4x while
fewer than ``top_k`` survive the mask, and scanned exactly when the over-fetch would exceed a quarter
of the segment — so a tiny scope still gets its top-k.

Nothing here runs on the query path but the searches: :class:`IndexKeeper` (one daemon thread per
``Views``) loads the index at first use, folds the delta into a new segment when it grows past
``max(ann_min, 10% of the segment)`` (or the tombstones pass 20%), saves it next to the database
and swaps it in under the lock. Until a freshly created index is *ready*, ``Views.vector_search``
answers small scopes exactly from the stored vectors and large ones without the semantic channel;
a first search waits (outside the lock, at most ``views.FAST_LOAD_WAIT_S``) only for a load that is
known to be quick (current files, or at most ``FAST_STORE_READ`` vectors in the store).

Sidecar (file stores only), in ``<db>.idx/``: ``vectors-<gen>.usearch`` (the graph, usearch's own
format), ``vectors-<gen>.rows.npy`` ((n, dim) rows in key order), ``vectors-<gen>.keys.npy`` ((n, 2)
int64: chunk id, hash of the text the vector was computed from) and the header ``vectors.json``
(format, model, dim, dtype, center, count, each file's name, size and checksum; ``seq``/``delta``
below). A new generation is written under new names and the header replaced last, so a reader never
sees a mixed set. At close, when the index holds exactly the store's vectors at its ``change_seq``,
the header records that ``seq`` and names a small delta file (the in-memory delta and the ids masked
since the save). The next open then checks the header, the sizes, the keys and the graph checksums
(read, not mapped) and the delta file, and maps the graph without reading the store (near-instant);
the rows file's checksum is verified by the keeper right after. A header of another ``seq`` makes
the keeper compare every (id, text hash) pair with the database's current vectors instead: an entry
the database no longer has is masked out, a current vector the file lacks is read from the store.
A missing, corrupt or mismatched file is logged and rebuilt, never trusted. Deleting the directory
is safe.
"""
from __future__ import annotations

from .vector_codec import UNKNOWN_HASH, blob_to_vector, decode_rows, normalise_rows, vector_to_blob
from .vector_core import VectorIndex
from .vector_files import (BUILD_THREADS, FORMAT, HEADER, PurgedMeanwhile, SegmentWriter, fold_segment, open_sidecar,
                           remove_sidecar, sidecar_dir, verify_rows)
from .vector_files import checksum as _checksum  # noqa: F401 - the name tests and tools used
from .vector_journal import CATCH_UP_KINDS, CATCH_UP_MAX_IDS, read_delta, stamp_sidecar
from .vector_keeper import DIRECT_BUILD, FAST_STORE_READ, IndexKeeper, stop_at_exit
from .vector_segments import QUANTIZATIONS, AnnSegment, ExactRows, Rows, usearch_available
from .vector_segments import usearch_index as _usearch_index  # noqa: F401 - the name tests and tools used

__all__ = ["VectorIndex", "ExactRows", "AnnSegment", "Rows", "SegmentWriter", "IndexKeeper", "usearch_available",
           "sidecar_dir", "QUANTIZATIONS", "UNKNOWN_HASH", "vector_to_blob", "blob_to_vector", "decode_rows",
           "normalise_rows", "FORMAT", "HEADER", "BUILD_THREADS", "FAST_STORE_READ", "DIRECT_BUILD", "CATCH_UP_KINDS",
           "CATCH_UP_MAX_IDS", "PurgedMeanwhile", "remove_sidecar", "open_sidecar", "verify_rows", "fold_segment",
           "stamp_sidecar", "read_delta", "stop_at_exit"]
