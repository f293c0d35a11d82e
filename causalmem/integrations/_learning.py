"""What the framework adapters share to pass a caller's feedback on to causalmem's learning.

Every adapter maps what its framework's search results carry (a LangGraph namespace + key, an
AutoGen ``MemoryContent``, a mem0 memory id, a CrewAI record) to a causalmem chunk id, checks it
against the adapter's own scope (an item outside it is unknown, as a pinned MCP server treats
another scope's id), then calls ``Memory.feedback`` (the chunk's Q-value, which ranks it in the next
searches: README "Q-values rank what proved useful") or ``Memory.confirm`` (learned links between
hits used together). No framework is imported here.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..memory import Memory
from ..types import Chunk

__all__ = ["check_reward", "check_many", "live_chunk", "one_scope"]


def check_reward(reward: Any, name: str = "reward") -> float:
    """``reward`` as a float in [-1, 1] (TypeError / ValueError naming ``name``)."""
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise TypeError(f"{name} must be a number in [-1, 1] (> 0 helped, < 0 hurt), got {type(reward).__name__}")
    if not -1 <= reward <= 1:  # also nan; ints compare exactly (no float overflow)
        shown = "a huge number" if abs(reward) >= 1e30 else reward  # nan compares False: shown
        raise ValueError(f"{name} must be in [-1, 1] (> 0 helped, < 0 hurt), got {shown}")
    return float(reward)


def check_many(items: Any, name: str) -> list[Any]:
    """The items of a ``confirm`` argument as a list: a list or tuple, not a string (TypeError naming ``name``)."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise TypeError(f"{name} must be a list, got {type(items).__name__}")
    out = list(items)
    if not out:
        raise ValueError(f"{name} must name at least one memory")
    return out


def live_chunk(memory: Memory, chunk_id: Any, scope: Mapping[str, str | None], name: str) -> Chunk:
    """The live chunk ``chunk_id`` if it is inside ``scope`` (the non-None of user_id / agent_id /
    run_id must match); else KeyError naming ``name``: a deleted chunk or one of another scope is
    unknown to the adapter, so its existence is not revealed."""
    if not isinstance(chunk_id, str) or not chunk_id:
        raise TypeError(f"{name} must be a non-empty id string, got {chunk_id!r}")
    try:
        chunk = memory.get(chunk_id)
    except (KeyError, ValueError):  # ValueError: not valid Unicode, so no stored id
        chunk = None
    if chunk is None or not chunk.valid or any(
            want is not None and getattr(chunk, key) != want for key, want in scope.items()):
        where = {k: v for k, v in scope.items() if v is not None}
        raise KeyError(f"{name}: no memory with id {chunk_id!r}" + (f" in scope {where}" if where else ""))
    return chunk


def one_scope(chunks: Sequence[Chunk], name: str) -> list[str]:
    """The ids of ``chunks`` to confirm together, if they share one user_id / agent_id / run_id scope
    (ValueError naming ``name`` otherwise: no learned link joins two scopes)."""
    scopes = {(c.user_id, c.agent_id, c.run_id) for c in chunks}
    if len(scopes) > 1:
        raise ValueError(f"{name} are in different scopes (user_id/agent_id/run_id {sorted(scopes, key=repr)!r}); "
                         "no learned link joins two scopes")
    return [c.id for c in chunks]
