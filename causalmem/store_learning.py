"""SQL of the learning loop (Q-values, Hebbian co-occurrence, sleep), mixed into ``Store``.

Kept apart from ``store.py`` so the write path and the learning loop can evolve separately;
both are the truth layer and the only places that speak SQL.
"""
from __future__ import annotations


class LearningStoreMixin:
    """Methods used by ``learning.py`` and ``consolidation.py``; ``self.conn`` is the connection."""
