"""The only import point of the spreading kernels.

Tries the compiled extension ``causalmem._spread``; falls back to the plain-Python twin
``causalmem._spread_py`` (same names and semantics, much slower).  ``CAUSALMEM_PURE_PYTHON=1``
forces the twin (debugging).  ``HAVE_EXTENSION`` says which
one is in use; a test fails when it is False so that a silent fallback cannot pass CI.
"""
from __future__ import annotations

import logging
import os
from types import ModuleType

from . import _spread_py as reference

_IMPORT_ERROR: ImportError | None = None
compiled: ModuleType | None = None
if os.environ.get("CAUSALMEM_PURE_PYTHON") == "1":  # debugging switch: force the twin
    _IMPORT_ERROR = ImportError("disabled by CAUSALMEM_PURE_PYTHON=1")
else:
    try:
        from . import _spread as _compiled
    except ImportError as exc:  # pragma: no cover - exercised only without a build
        _IMPORT_ERROR = exc
        logging.getLogger("causalmem").warning(
            "causalmem: compiled kernels not available (%s); using the pure-Python reference "
            "(same results, much slower spreading). Install a wheel for this platform, or a C++ "
            "compiler and reinstall, for the compiled kernel.",
            exc,
        )
    else:
        compiled = _compiled

HAVE_EXTENSION: bool = compiled is not None
_impl = compiled if compiled is not None else reference

spread = _impl.spread
spread_view = _impl.spread_view
GraphView = _impl.GraphView
validate_seeds = _impl.validate_seeds
SpreadWorkspace = _impl.SpreadWorkspace
coo_to_csr = _impl.coo_to_csr
transpose_csr = _impl.transpose_csr
links_among = _impl.links_among
bm25_segments = _impl.bm25_segments
bm25_top = _impl.bm25_top
bonus_sum = _impl.bonus_sum
pread_rows = _impl.pread_rows
bm25_dense = _impl.bm25_dense

__all__ = [
    "HAVE_EXTENSION", "compiled", "reference", "spread", "spread_view", "GraphView",
    "validate_seeds", "SpreadWorkspace", "coo_to_csr", "transpose_csr", "links_among",
    "bm25_segments", "bm25_top", "bonus_sum", "pread_rows", "bm25_dense",
]
