"""causalmem — long-term causal memory for AI agents.

Public API (imported lazily so that ``import causalmem`` stays cheap)::

    from causalmem import Memory, CSR, spread, CausalGraph, Relation
"""
from __future__ import annotations

import importlib
from typing import Any

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
    "SchemaVersionError": "causalmem.errors",
    "StoreError": "causalmem.errors",
    "LLMError": "causalmem.errors",
    "ConfigurationError": "causalmem.errors",
    # facade and pipeline
    "Memory": "causalmem.memory",
    "Embedder": "causalmem.semantic",
    "SentenceTransformerEmbedder": "causalmem.semantic",
    "Judge": "causalmem.judges",
    "RuleJudge": "causalmem.judges",
    "LLMJudge": "causalmem.judges",
    "Distiller": "causalmem.judges",
    "LLMDistiller": "causalmem.judges",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'causalmem' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
