"""``Memory.confirm``: the caller says which hits of a search were useful together.

Why a separate path: the co-retrieval of two hits by one search is weak evidence that they belong
together (13 search-time credit rules, six sessions, all neutral within noise on LoCoMo-dev:
``benchmarks/results/locomo_learning_rules.md``). A caller that used several hits to answer has
stronger evidence, and says so here. By default (``Config.hebbian_search = False``) a search
writes access counts only, and learned (Hebbian) links come from confirmations alone.

Rules (no new constant: the search-time rule's start / step / cap / idle fade):
- every unordered pair among the distinct confirmed chunks gains one credit: ``hebbian_start`` when
  new, ``+hebbian_step`` when known, never above ``hebbian_cap`` (``learning.next_hebbian_weight``);
  at most ``learning.MAX_HEBBIAN_NIDS`` distinct chunks per call (a longer list is an error, not a
  silent cut);
- one public write, one transaction; the links are in the projection before the call returns
  (visible to the next query) and fade at sleep like the search-time pairs;
- scope is a wall: every confirmed chunk must have the same ``user_id``/``agent_id``/``run_id``,
  or the call raises ``ValueError`` and writes nothing (as ``Memory.link`` does for an edge).
"""
from __future__ import annotations

from typing import Any

from . import ingest, learning
from .views import Views

__all__ = ["confirm", "check_chunk_ids"]


def check_chunk_ids(chunk_ids: Any) -> list[str]:
    """The distinct chunk ids of a ``confirm`` argument, in order (TypeError/ValueError naming it)."""
    if isinstance(chunk_ids, (str, bytes)) or not hasattr(chunk_ids, "__iter__"):
        raise TypeError(f"chunk_ids must be a list of chunk id strings, got {type(chunk_ids).__name__}")
    ids = list(chunk_ids)
    for cid in ids:
        if not isinstance(cid, str):
            raise TypeError(f"chunk_ids must hold chunk id strings, got {type(cid).__name__}")
        ingest.check_unicode(cid, "chunk_ids")
    uniq = list(dict.fromkeys(ids))
    if not uniq:
        raise ValueError("chunk_ids must name at least one chunk")
    if len(uniq) > learning.MAX_HEBBIAN_NIDS:
        raise ValueError(f"chunk_ids names {len(uniq)} distinct chunks; at most {learning.MAX_HEBBIAN_NIDS} "
                         "can be confirmed together")
    return uniq


def confirm(views: Views, chunk_ids: list[str]) -> int:
    """Credit the Hebbian pairs among ``chunk_ids`` (checked by ``check_chunk_ids``); returns how
    many pairs were credited (0 for a single chunk)."""
    with views.write() as fx:
        rows = [ingest.require_chunk(views.store, cid, "chunk_ids") for cid in chunk_ids]
        for row in rows:
            if row.valid_to is not None:
                raise ValueError(f"chunk_ids: chunk {row.id!r} was deleted")
        scopes = {(r.user_id, r.agent_id, r.run_id) for r in rows}
        if len(scopes) > 1:
            raise ValueError(f"chunk_ids are in different scopes (user_id/agent_id/run_id "
                             f"{sorted(scopes, key=repr)!r}); scope is a wall: no learned link joins two scopes")
        nids = [r.nid for r in rows]
        pairs = learning.hebbian_pairs(nids, learning.MAX_HEBBIAN_NIDS)
        if not pairs:
            return 0
        # the store as this transaction sees it: the queued search credit was written first (Views.write)
        stored = views.store.cooccurrence_weights(sorted(set(nids)))
        now = views.now()
        credit, deltas = [], []
        for a, b in pairs:
            old = stored.get((a, b))
            new = learning.next_hebbian_weight(old, views.config)
            credit.append((a, b, new, 1, now))
            if new > (old or 0.0):
                deltas.append((a, b, new - (old or 0.0)))
        views.store.credit_cooccurrence(credit)
        views.effects.confirmed_links(fx, nids, deltas)
    return len(pairs)
