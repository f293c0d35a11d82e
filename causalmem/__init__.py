"""causalmem — long-term causal memory for AI agents.

Public API (imported lazily so that ``import causalmem`` stays cheap)::

    from causalmem import Memory, CSR, spread, CausalGraph, Relation
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover  (type checkers see every public name with its real type)
    from ._kernels import HAVE_EXTENSION
    from .config import CAUSAL, PEDSA, Config, SpreadParams
    from .errors import (CausalMemError, ConfigurationError, LLMError, PurgeIncompleteError, SchemaVersionError,
                         StoreError)
    from .graph import CausalGraph
    from .judges import Distiller, Judge, LLMDistiller, LLMJudge, RuleJudge
    from .async_memory import AsyncMemory
    from .memory import Memory
    from .semantic import Embedder, SentenceTransformerEmbedder
    from .spreading import CSR, spread
    from .types import (Activation, Chunk, Edge, Hit, InterventionReport, PredictedOutcome, Relation,
                        SleepReport)

__version__ = "0.1.0"

_EXPORTS = {
    # engine
    "CSR": "causalmem.spreading",
    "spread": "causalmem.spreading",
    "CausalGraph": "causalmem.graph",
    "HAVE_EXTENSION": "causalmem._kernels",
    # values
    "Relation": "causalmem.types",
    "Chunk": "causalmem.types",
    "Edge": "causalmem.types",
    "Activation": "causalmem.types",
    "Hit": "causalmem.types",
    "InterventionReport": "causalmem.types",
    "PredictedOutcome": "causalmem.types",
    "SleepReport": "causalmem.types",
    "Config": "causalmem.config",
    "SpreadParams": "causalmem.config",
    "CAUSAL": "causalmem.config",
    "PEDSA": "causalmem.config",
    # errors
    "CausalMemError": "causalmem.errors",
    "SchemaVersionError": "causalmem.errors",
    "StoreError": "causalmem.errors",
    "PurgeIncompleteError": "causalmem.errors",
    "LLMError": "causalmem.errors",
    "ConfigurationError": "causalmem.errors",
    # facade and pipeline
    "Memory": "causalmem.memory",
    "AsyncMemory": "causalmem.async_memory",
    "Embedder": "causalmem.semantic",
    "SentenceTransformerEmbedder": "causalmem.semantic",
    "Judge": "causalmem.judges",
    "RuleJudge": "causalmem.judges",
    "LLMJudge": "causalmem.judges",
    "Distiller": "causalmem.judges",
    "LLMDistiller": "causalmem.judges",
}

__all__ = [
    "Activation", "AsyncMemory", "CAUSAL", "CSR", "CausalGraph", "CausalMemError", "Chunk", "Config",
    "ConfigurationError", "Distiller", "Edge", "Embedder", "HAVE_EXTENSION", "Hit", "InterventionReport", "Judge",
    "LLMDistiller", "LLMError", "LLMJudge", "Memory", "PEDSA", "PredictedOutcome", "PurgeIncompleteError",
    "Relation", "RuleJudge",
    "SchemaVersionError", "SentenceTransformerEmbedder", "SleepReport", "SpreadParams", "StoreError",
    "spread", "__version__",
]
assert set(__all__) == set(_EXPORTS) | {"__version__"}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'causalmem' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
