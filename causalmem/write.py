"""The write path: decisions and outcomes, links, facts, conversation turns, deletes and updates.

Every function runs inside the caller's ``views.write()`` transaction, gets its effects list
``fx`` and leaves the in-memory views to after-commit effects. Arguments arrive validated by the
facade (``ingest`` checks); what is validated here is what only a batch knows (``items[i]``).
"""
from __future__ import annotations

import contextlib
import functools
import gc
import json
import logging
import threading
import uuid
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from . import ingest, learning
from .errors import PurgeIncompleteError, StoreError
from .judges import MAX_DISTILLED_ITEMS, validate_distilled
from .store.base import ChunkRow, EdgeRow
from .types import SOURCES_CONFIDENCE, AddResult, Chunk, Edge, Relation, new_edge, to_timestamp
from .views import Effects, NewChunk, NewEdge, Scope, Views

log = logging.getLogger("causalmem")

__all__ = [
    "validated_record", "parse_record_items", "record_many", "record_batch", "gc_paused", "get_or_create_chunk",
    "insert_edge", "invalidate_edge", "delete_chunk", "delete_scope", "link", "add_fact", "update_text", "restore_edge",
    "turn_rows", "add_turns", "apply_distilled", "check_scope", "purge_scope", "combine_confidence",
]

_EXCITATORY = ("caused", "enabled")
_new_chunk = functools.partial(tuple.__new__, NewChunk)  # NewChunk from a full tuple, in C
_RECORD_KEYS = {"decision", "outcome", "relation", "source", "confidence", "polarity", "task_tag", "event_time",
                "user_id", "agent_id", "run_id"}


def check_scope(user_id: Any, agent_id: Any, run_id: Any) -> Scope:
    return (ingest.check_scope_value(user_id, "user_id"), ingest.check_scope_value(agent_id, "agent_id"),
            ingest.check_scope_value(run_id, "run_id"))


def scope_filters(scope: Scope) -> dict[str, str]:
    """The given parts of a scope as store filters (``{}``: no scope)."""
    return {k: v for k, v in zip(("user_id", "agent_id", "run_id"), scope) if v is not None}


def check_metadata(metadata: Any, name: str = "metadata") -> dict[str, Any]:
    """A chunk's metadata: a JSON object with string keys (stored as JSON, returned on chunks and hits)."""
    if not isinstance(metadata, Mapping):
        raise TypeError(f"{name} must be a mapping, got {type(metadata).__name__}")
    bad = [k for k in metadata if not isinstance(k, str)]
    if bad:
        raise TypeError(f"{name} keys must be strings, got {bad[:3]!r}")
    try:
        json.dumps(dict(metadata), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be JSON-serialisable (no NaN/inf): {exc}") from None
    return dict(metadata)


# ---------------------------------------------------------------------------------- decision → outcome
def validated_record(decision: Any, outcome: Any, relation: Any, source: Any, confidence: Any, polarity: Any,
                     task_tag: Any, event_time: Any, user_id: Any, agent_id: Any, run_id: Any,
                     _cache: dict | None = None) -> dict[str, Any]:
    """One decision→outcome item, checked and normalised (metadata validation memoised in ``_cache``)."""
    ingest.check_text(decision, "decision")
    ingest.check_text(outcome, "outcome")
    if decision == outcome:
        raise ValueError("decision and outcome are the same text; an edge needs two different chunks")
    key = (relation, source, confidence, polarity, task_tag, event_time, user_id, agent_id, run_id)
    meta = None
    if _cache is not None:
        try:
            meta = _cache.get(key)
        except TypeError:  # unhashable argument: validated below, which names it
            _cache = None
    if meta is None:
        rel = Relation.parse(relation)
        source = ingest.check_source(source)
        conf = SOURCES_CONFIDENCE.get(source, 0.6) if confidence is None else confidence
        if task_tag is not None and not isinstance(task_tag, str):
            raise TypeError(f"task_tag must be a string or None, got {type(task_tag).__name__}")
        if task_tag is not None:
            ingest.check_unicode(task_tag, "task_tag")
        meta = dict(rel=rel, relv=rel.value, subtype=Relation.subtype_of(relation), source=source,
                    confidence=ingest.check_confidence(conf), polarity=ingest.check_polarity(polarity),
                    task_tag=task_tag, event_time=to_timestamp(event_time, name="event_time"),
                    scope=check_scope(user_id, agent_id, run_id))
        if _cache is not None:
            _cache[key] = meta
    return dict(meta, decision=decision, outcome=outcome)


def parse_record_items(items: Iterable[Any]) -> list[dict[str, Any]]:
    """``record_many`` input: dicts or (decision, outcome[, relation]) tuples, errors naming ``items[i]``."""
    parsed = []
    cache: dict = {}
    for i, item in enumerate(items):
        if isinstance(item, (tuple, list)) and len(item) in (2, 3):
            try:  # the common case: (decision, outcome[, relation]) with default metadata
                parsed.append(validated_record(
                    item[0], item[1], item[2] if len(item) == 3 else "caused", "manual", None, None,
                    None, None, None, None, None, _cache=cache))
            except (ValueError, TypeError) as exc:
                raise type(exc)(f"items[{i}]: {exc}") from None
            continue
        if isinstance(item, Mapping):
            kw = dict(item)
            unknown = set(kw) - _RECORD_KEYS
            if unknown:
                raise TypeError(f"items[{i}] has unknown keys {sorted(unknown)}")
            if "decision" not in kw or "outcome" not in kw:
                raise ValueError(f"items[{i}] needs 'decision' and 'outcome'")
        else:
            raise TypeError(f"items[{i}] must be a dict or a (decision, outcome[, relation]) tuple")
        try:
            parsed.append(validated_record(
                kw["decision"], kw["outcome"], kw.get("relation", "caused"), kw.get("source", "manual"),
                kw.get("confidence"), kw.get("polarity"), kw.get("task_tag"), kw.get("event_time"),
                kw.get("user_id"), kw.get("agent_id"), kw.get("run_id"), _cache=cache))
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"items[{i}]: {exc}") from None
    return parsed


_gc_lock = threading.Lock()
_gc_state = [0, False]  # [writes in flight with the collector paused, whether it was enabled before]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused for a bulk write (the previous setting restored after the
    last one in flight ends).

    A thousand-pair ``record_many`` allocates some 30,000 container objects (row dicts, keys, edges,
    postings) that reference counting frees; with the collector on they set off ~20 young
    collections and, every few batches, a full one that walks the whole heap (the in-memory
    views) — 10-20% of the write's CPU time. Paused, the batch counts as one young collection when
    it ends. Nothing the write path allocates forms a cycle that must be collected meanwhile."""
    with _gc_lock:
        if _gc_state[0] == 0:
            _gc_state[1] = gc.isenabled()
            gc.disable()
        _gc_state[0] += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_state[0] -= 1
            if _gc_state[0] == 0 and _gc_state[1]:
                gc.enable()


def record_many(views: Views, items: Iterable[Any]) -> list[Edge]:
    """``Memory.record_many``: the items checked, then written in one transaction."""
    with gc_paused():
        parsed = parse_record_items(items)
    with views.write() as fx, gc_paused():  # paused again once the write lock is held, not while waiting for it
        return record_batch(views, fx, parsed)


def record_batch(views: Views, fx: Effects, items: Sequence[dict[str, Any]],
                 vecs: dict[str, np.ndarray] | None = None) -> list[Edge]:
    """Write validated decision→outcome items in the current transaction, in bulk."""
    store = views.store
    vecs = vecs or {}
    now = views.now()
    q0 = views.config.q_init
    # 1. chunks: reuse by exact text within scope, create the rest in one statement
    keys: dict[tuple[str, tuple], str] = {}
    for a in items:
        scope = a["scope"]
        keys.setdefault((a["decision"], scope), "decision")
        keys.setdefault((a["outcome"], scope), "outcome")
    hashes: dict[str, int] = {}
    found = store.find_reusable_chunks(list(keys), hashes)
    new_keys = [k for k in keys if k not in found] if found else list(keys)
    created = store.insert_chunks_bulk([
        {"text": t, "text_hash": hashes[t], "kind": keys[(t, sc)], "created_at": now, "event_time": None,
         "q_value": q0, "user_id": sc[0], "agent_id": sc[1], "run_id": sc[2]} for t, sc in new_keys])
    nid_of = {k: c.nid for k, c in found.items()}
    id_of = {c.nid: c.id for c in found.values()}
    nid_of.update(zip(new_keys, [c.nid for c in created]))
    id_of.update(created)  # ChunkKey: (nid, id)
    if vecs:
        views.store_vectors([(c.nid, t, vecs[t]) for (t, _sc), c in zip(new_keys, created) if t in vecs])
    # 2. edges: repeated evidence (same decision, outcome, relation in the scope) updates the
    #    existing valid edge; everything else is a new edge. Polarity is guessed once per distinct
    #    outcome text that has none given.
    unknown = {a["outcome"] for a in items if a["polarity"] is None}
    guessed = dict(zip(unknown, map(ingest.guess_polarity, unknown)))
    wanted: list[tuple[dict[str, Any], tuple]] = []
    for a in items:
        scope, outcome = a["scope"], a["outcome"]
        d_nid = nid_of[(a["decision"], scope)]
        o_nid = nid_of[(outcome, scope)]
        polarity = a["polarity"]
        if polarity is None:
            polarity = guessed[outcome]
            origin = "unknown" if polarity is None else "guessed"
        else:
            origin = "given"
        row = {"src": d_nid, "dst": o_nid, "relation": a["rel"], "relv": a["relv"], "subtype": a["subtype"],
               "confidence": a["confidence"], "source": a["source"], "polarity": polarity, "polarity_origin": origin,
               "task_tag": a["task_tag"], "event_time": a["event_time"], "discovered_at": now}
        wanted.append((row, (d_nid, o_nid, a["relv"], a["subtype"])))
    existing = store.valid_edges_for_pairs([k for _r, k in wanted])
    # per key: [eid, id, confidence, evidence, polarity, origin, added evidence, the new row (None: an
    # existing edge)]
    state: dict[tuple, list[Any]] = {k: [e.eid, e.id, e.confidence, e.evidence, e.polarity, e.polarity_origin, 0, None]
                                     for k, e in existing.items()}
    rows: list[dict[str, Any]] = []
    for row, key in wanted:
        st = state.get(key)
        if st is None:
            state[key] = [None, None, row["confidence"], 1, row["polarity"], row["polarity_origin"], 0, row]
            rows.append(row)
            continue
        st[2] = combine_confidence(st[2], row["confidence"])
        st[3] += 1
        st[6] += 1
        if row["polarity_origin"] == "given" or (st[5] != "given" and row["polarity"] is not None):
            st[4], st[5] = row["polarity"], row["polarity_origin"]
    inserted = store.insert_edges_bulk(rows)
    for row, (eid, edge_id) in zip(rows, inserted):
        st = state[(row["src"], row["dst"], row["relv"], row["subtype"])]
        st[0], st[1] = eid, edge_id
        if st[6]:  # repeated within this batch: the new edge carries the combined evidence at once
            row["confidence"] = st[2]
    updates = [(st[2], st[6], st[4], st[5], st[0]) for st in state.values() if st[6]]
    if updates:
        store.add_edge_evidence(updates)
        reweighted = [(st[0], key[2], st[2]) for key, st in state.items() if st[6] and st[7] is None]
        views.effects.edges_reweighted(fx, reweighted)
    # 3. contradiction fast path (rule judge): a new success *annotates* the failures of the same
    #    decision as they stand at its position in the batch (superseded_by); retiring them is sleep's
    #    judge's call, never a write-time guess
    sup: dict[int, str] = {}  # eid -> the first success of this batch that annotated it
    srcs = {r["src"] for r in rows if r["polarity"] == "positive" and r["relv"] in _EXCITATORY}
    if srcs:
        notes = supersede_notes(store, wanted, state, existing, srcs)
        if notes:
            store.annotate_superseded(notes)
            for by, eid in notes:
                sup.setdefault(eid, by)
    # 4. in-memory views, after commit
    views.effects.chunks_added(fx, list(map(_new_chunk, [(c.nid, t, keys[(t, sc)], now, None, q0, sc, None)
                                                      for (t, sc), c in zip(new_keys, created)])),
                       {c.nid: vecs[t] for (t, _sc), c in zip(new_keys, created) if t in vecs} if vecs else None)
    views.effects.edges_added(fx, [NewEdge(eid, r["src"], r["dst"], r["relation"], r["confidence"])
                           for r, (eid, _e) in zip(rows, inserted)])
    views.effects.count_write(fx)
    # the edges as stored: a new one from its row (the first item of its key), an existing one
    # read back after the update (its own history and notes)
    made: dict[int, Edge] = {}
    for st in state.values():
        r = st[7]
        if r is not None:
            made[st[0]] = new_edge(st[1], id_of[r["src"]], id_of[r["dst"]], r["relv"], st[2], r["source"], st[4],
                                   r["task_tag"], r["event_time"], True, sup.get(st[0]) if sup else None, now,
                                   r["subtype"], None, st[5], st[3])
    if len(made) < len(state):
        made.update((r.eid, r.to_edge()) for r in store.edge_rows_by_ids(
            [st[1] for st in state.values() if st[7] is None]))
    return [made[state[key][0]] for _row, key in wanted]


def supersede_notes(store: Any, wanted: Sequence[tuple[dict[str, Any], tuple]], state: Mapping[tuple, list[Any]],
                    existing: Mapping[tuple, Any], srcs: set[int]) -> list[tuple[str, int]]:
    """(success edge id, failure eid) pairs to annotate, in batch order: what recording the items one
    by one annotates. Each *new* positive excitatory edge (the first item of its key) annotates every
    valid excitatory edge of the same decision to another outcome that is negative *at its position*:
    one stored before the batch and untouched by it, or one this batch created or re-recorded before
    that position, with the polarity it had there (re-recording changes it as step 2 does). The
    store keeps an edge's first annotation (``superseded_by IS NULL``), so each failure is noted
    once, by the first success that finds it: linear in the batch, however many successes.

    ``srcs``: the decisions of the batch's new successes. Only decisions with a failure at some
    point of the batch are replayed (the common batch has none)."""
    failures = store.negative_excitatory_out_edges(sorted(srcs))  # as stored now: the batch's updates in
    hot = set(failures)
    hot.update(k[0] for k, e in existing.items() if e.polarity == "negative")
    hot.update(key[0] for row, key in wanted if row["polarity"] == "negative")
    hot &= srcs
    if not hot:
        return []
    touched = {st[0] for k, st in state.items() if k[0] in hot}
    # per decision: its failures as of the current position not noted yet (eid -> dst); the ones the
    # batch does not touch keep their stored polarity all along
    pending: dict[int, dict[int, int]] = {s: {o.eid: o.dst for o in failures.get(s, ()) if o.eid not in touched}
                                          for s in hot}
    cur: dict[tuple, list[Any]] = {}  # key -> [eid, polarity, origin] of the batch's edges, as of the position
    for k, e in existing.items():
        if k[0] in hot and k[2] in _EXCITATORY:
            cur[k] = [e.eid, e.polarity, e.polarity_origin]
            if e.polarity == "negative":
                pending[k[0]][e.eid] = k[1]
    noted: set[int] = set()
    notes: list[tuple[str, int]] = []
    for row, key in wanted:
        src = key[0]
        if src not in hot or key[2] not in _EXCITATORY:
            continue
        c = cur.get(key)
        polarity = row["polarity"]
        if c is None:  # the first item of a new edge
            st = state[key]
            pend = pending[src]
            if polarity == "positive" and pend:
                found = [eid for eid, dst in pend.items() if dst != key[1]]
                notes.extend((st[1], eid) for eid in found)
                noted.update(found)
                for eid in found:
                    del pend[eid]
            cur[key] = [st[0], polarity, row["polarity_origin"]]
            if polarity == "negative":
                pend[st[0]] = key[1]
        elif row["polarity_origin"] == "given" or (c[2] != "given" and polarity is not None):
            if polarity == "negative" and c[1] != "negative" and c[0] not in noted:
                pending[src][c[0]] = key[1]
            elif polarity != "negative" and c[1] == "negative":
                pending[src].pop(c[0], None)
            c[1], c[2] = polarity, row["polarity_origin"]
    return notes


#: repeated evidence never makes an edge certain
EVIDENCE_CAP = 0.99


def combine_confidence(old: float, new: float) -> float:
    """Two independent pieces of evidence (noisy-or), capped at ``EVIDENCE_CAP`` but never
    below what either of them said."""
    return max(old, new, min(EVIDENCE_CAP, 1.0 - (1.0 - old) * (1.0 - new)))


# ---------------------------------------------------------------------------------- single rows
def get_or_create_chunk(views: Views, fx: Effects, text: str, kind: str, scope: Scope, *,
                        event_time: float | None, session_id: str | None = None,
                        metadata: Mapping[str, Any] | None = None, vec: np.ndarray | None = None,
                        reuse: bool = True) -> tuple[int, str, bool]:
    """(nid, id, created): the live chunk with this exact text in the scope, else a new one."""
    if reuse:
        found = views.store.find_reusable_chunk(text, *scope)
        if found is not None:
            return found.nid, found.id, False
    now = views.now()
    q0 = views.config.q_init
    nid, cid = views.store.insert_chunk(
        text=text, kind=kind, created_at=now, q_value=q0, event_time=event_time, user_id=scope[0],
        agent_id=scope[1], run_id=scope[2], session_id=session_id, metadata=metadata)
    if vec is not None:
        views.store_vectors([(nid, text, vec)])
    views.effects.chunks_added(fx, [NewChunk(nid, text, kind, now, event_time, q0, scope, session_id)],
                       {nid: vec} if vec is not None else None)
    return nid, cid, True


def insert_edge(views: Views, fx: Effects, src: int, dst: int, relation: Relation, *, confidence: float,
                source: str, polarity: str | None, task_tag: str | None, event_time: float | None,
                subtype: str | None = None) -> tuple[int, str]:
    eid, edge_id = views.store.insert_edge(
        src=src, dst=dst, relation=relation, subtype=subtype, confidence=confidence, source=source,
        polarity=polarity, task_tag=task_tag, event_time=event_time, discovered_at=views.now())
    views.effects.edges_added(fx, [NewEdge(eid, src, dst, relation, confidence)])
    return eid, edge_id


def invalidate_edge(views: Views, fx: Effects, eid: int, reason: str | None, superseded_by: str | None = None) -> None:
    views.store.set_edge_invalid(eid, views.now(), reason, superseded_by)
    views.effects.edge_invalidated(fx, eid)


def restore_edge(views: Views, fx: Effects, row: EdgeRow) -> None:
    """Undo an invalidation or supersession (both endpoint chunks must be live)."""
    if row.valid_to is None and row.superseded_by is None:
        raise ValueError(f"edge {row.id!r} is valid and not superseded; nothing to restore")
    for nid, name in ((row.src_nid, "source"), (row.dst_nid, "destination")):
        if not views.store.chunk_alive(nid):
            raise ValueError(f"edge {row.id!r} cannot be restored: its {name} chunk was deleted")
    views.store.restore_edge(row.eid)
    views.effects.edge_restored(fx, row.eid)
    views.effects.count_write(fx)


def delete_chunk(views: Views, fx: Effects, nid: int) -> None:
    views.store.set_chunk_deleted(nid, views.now())
    views.effects.chunk_deleted(fx, nid)


def delete_scope(views: Views, fx: Effects, filters: Mapping[str, str | None]) -> int:
    nids = views.store.chunk_nids(filters=filters)
    for nid in nids:
        delete_chunk(views, fx, nid)
    views.effects.count_write(fx, max(1, len(nids)))
    return len(nids)


def purge_scope(views: Views, fx: Effects, filters: Mapping[str, str | None]) -> int:
    """Right to be forgotten: every chunk of the scope (soft-deleted ones too) and everything
    derived from it leave the store; the in-memory views are rebuilt from what is left."""
    nids = views.store.chunk_nids(filters=filters, live_only=False)
    n = views.store.purge_chunks(nids)
    views.effects.purged(fx)
    views.effects.count_write(fx, max(1, n))
    return n


def delete_all(views: Views, scope: Scope, *, purge: bool) -> int:
    """``Memory.delete_all`` of a checked, non-empty scope: a soft delete, or a purge followed by a
    rewrite of the file (the bytes leave the disk)."""
    filters = scope_filters(scope)
    with views.effects.purging() if purge else contextlib.nullcontext():
        with views.write() as fx:
            n = purge_scope(views, fx, filters) if purge else delete_scope(views, fx, filters)
    if purge:
        with views.lock:
            try:
                compacted = views.store.compact()
            except StoreError as exc:  # the purge above is committed: say so, with the driver's own reason
                raise PurgeIncompleteError(n, str(views.store.path), str(exc.__cause__ or exc)) from exc
            if not compacted:
                log.warning("causalmem: %s: purged, but another connection kept the write-ahead log in use; "
                            "the freed pages are zeroed, the log is emptied at its next checkpoint", views.store.path)
    return n


def feedback(views: Views, chunk_id: Any, reward: float) -> float:
    """``Memory.feedback`` of a checked reward: the chunk's new Q-value, written and indexed."""
    with views.write() as fx:
        if not isinstance(chunk_id, str):
            raise TypeError(f"chunk_id must be a chunk id string, got {type(chunk_id).__name__}")
        ingest.check_unicode(chunk_id, "chunk_id")
        nid = views.store.nid_of(chunk_id)
        if nid is None:
            raise KeyError(f"unknown chunk_id {chunk_id!r}")
        q = learning.apply_feedback(views.store, nid, reward, views.config)
        views.effects.q_changed(fx, nid, q)
    return q


def link(views: Views, fx: Effects, s: ChunkRow, d: ChunkRow, rel: Relation, subtype: str | None, *,
         confidence: float, source: str, polarity: str | None, task_tag: str | None) -> str:
    """A typed edge between two live chunks of one scope; returns its id.

    Repeated evidence (SPEC §7), as ``record_decision`` does it: when a valid edge (``valid_to``
    unset; one annotated ``superseded_by`` is still valid) with the same source chunk, destination
    chunk, relation and meta subtype exists, it is updated instead of adding a parallel one —
    ``evidence`` + 1, confidence combined noisy-or (``combine_confidence``: capped at
    ``EVIDENCE_CAP``, never below either value), a given ``polarity`` replaces the stored one
    (``polarity_origin`` "given"), ``None`` keeps it — and its id is returned. The edge keeps its
    own ``source`` (which sets its decay), ``task_tag`` and supersession note; the call's
    ``confidence`` (the given one, or the default of the call's ``source``) is what adds up. An
    invalidated edge is never reused: the link is a new edge, as on first use. The projection sets
    the updated edge's weight in place (no second entry between the two chunks)."""
    for row, name in ((s, "src_chunk_id"), (d, "dst_chunk_id")):
        if row.valid_to is not None:
            raise ValueError(f"{name} {row.id!r} was deleted")
    if s.nid == d.nid:
        raise ValueError("src_chunk_id and dst_chunk_id are the same chunk")
    if (s.user_id, s.agent_id, s.run_id) != (d.user_id, d.agent_id, d.run_id):
        raise ValueError(
            f"src_chunk_id and dst_chunk_id are in different scopes (user_id/agent_id/run_id "
            f"{(s.user_id, s.agent_id, s.run_id)!r} vs {(d.user_id, d.agent_id, d.run_id)!r}); scope is a wall: "
            "no edge joins two scopes")
    key = (s.nid, d.nid, rel.value, subtype)
    old = views.store.valid_edges_for_pairs([key]).get(key)
    if old is None:
        _, edge_id = insert_edge(views, fx, s.nid, d.nid, rel, confidence=confidence, source=source,
                                 polarity=polarity, task_tag=task_tag, event_time=None, subtype=subtype)
    else:
        conf = combine_confidence(old.confidence, confidence)
        views.store.add_edge_evidence([(conf, 1, polarity, "given", old.eid)])
        views.effects.edges_reweighted(fx, [(old.eid, rel.value, conf)])
        edge_id = old.id
    views.effects.count_write(fx)
    return edge_id


def add_fact(views: Views, fx: Effects, key: str, value: str, scope: Scope, *, confidence: float,
             vec: np.ndarray | None, replace_same_key: bool) -> str:
    """Store ``key: value`` as a fact chunk (reused if identical); returns the chunk id."""
    old = views.store.facts_with_key(key, *scope)
    nid, cid, _ = get_or_create_chunk(views, fx, f"{key}: {value}", "fact", scope, event_time=None,
                                      metadata={"key": key, "value": value}, vec=vec)
    if replace_same_key:
        for fact in old:
            if fact.nid != nid:
                views.store.retire_fact(fact.fid, views.now())
                delete_chunk(views, fx, fact.nid)
    if not any(fact.nid == nid for fact in old):
        views.store.insert_fact(key=key, value=value, nid=nid, user_id=scope[0], agent_id=scope[1],
                                run_id=scope[2], confidence=confidence, now=views.now())
    views.effects.count_write(fx)
    return cid


def update_chunk(views: Views, fx: Effects, row: ChunkRow, text: str | None, vec: np.ndarray | None,
                 metadata: Mapping[str, Any] | None) -> None:
    """Merge checked ``metadata`` into a live chunk's (a ``None`` value removes the key) and/or replace its text."""
    if row.valid_to is not None:
        raise ValueError(f"chunk {row.id!r} was deleted")
    if metadata is not None:
        merged = {**(json.loads(row.metadata) if row.metadata else {}), **metadata}
        views.store.set_chunk_metadata(row.nid, {k: v for k, v in merged.items() if v is not None})
        views.effects.metadata_changed(fx, row.nid)
        if text is None:
            views.effects.count_write(fx)
    if text is not None:
        update_text(views, fx, row, text, vec)


def update_text(views: Views, fx: Effects, row: ChunkRow, text: str, vec: np.ndarray | None) -> None:
    if row.valid_to is not None:
        raise ValueError(f"chunk {row.id!r} was deleted")
    views.store.set_chunk_text(row.nid, text, views.now())
    if vec is not None:
        views.store_vectors([(row.nid, text, vec)])
    views.effects.text_updated(fx, row.nid, text, vec)
    views.effects.count_write(fx)


# ---------------------------------------------------------------------------------- conversations
def _jsonable(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool, type(None), list, dict))


def turn_rows(turns: Sequence[tuple[str | None, str, Mapping[str, Any]]], *, scope: Scope, session: str,
              metadata: Mapping[str, Any] | None, event_time: float | None, q_init: float) -> list[dict[str, Any]]:
    """Chunk rows for normalised turns: "speaker: text", per-turn metadata and event times."""
    ingest.check_unicode(session, "session_id")
    if metadata:
        try:
            json.dumps(dict(metadata), ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError, UnicodeEncodeError, RecursionError) as exc:
            raise ValueError(f"metadata must be JSON-serialisable text: {exc}") from None
    rows = []
    for i, (speaker, t, extra) in enumerate(turns):
        text = t if speaker is None or t.startswith(f"{speaker}:") else f"{speaker}: {t}"
        meta = dict(metadata or {})
        meta.update({k: v for k, v in extra.items() if _jsonable(v)})
        if speaker is not None:
            meta.setdefault("speaker", speaker)
        turn_time = event_time
        for key in ("event_time", "timestamp", "time"):
            if key in extra:
                turn_time = to_timestamp(extra[key], name=f"messages[{i}].{key}")
                break
        rows.append({"text": text, "kind": "turn", "event_time": turn_time, "q_value": q_init,
                     "user_id": scope[0], "agent_id": scope[1], "run_id": scope[2], "session_id": session,
                     "metadata": meta})
    return rows


def new_session_id() -> str:
    return uuid.uuid4().hex


def add_turns(views: Views, fx: Effects, rows: list[dict[str, Any]], scope: Scope, session: str,
              vecs: np.ndarray | None, *, link: bool = True, dedupe: bool = False) -> list[Chunk]:
    """Insert turn rows, chained in order by temporal edges (after the session's previous turn) when
    ``link``. With ``dedupe``, a row whose exact text is a live chunk of the scope (or an earlier row of
    the same call) is that chunk: its access count goes up by one and its last access is now."""
    store = views.store
    now = views.now()
    for r in rows:
        r["created_at"] = now
    plan: list[tuple[bool, int]] | None = None  # per row: (True, index of a new row) or (False, old nid)
    again: list[int] = []  # new-row indexes repeated within this call
    old: list[int] = []
    if dedupe:
        # the same memory: the same text and the same metadata (a text stored twice under two ids, as
        # the framework adapters do, stays two memories)
        found = store.find_reusable_chunks([(r["text"], scope) for r in rows], turns=True)
        cand = sorted({k.nid for k in found.values()})
        meta_of = {n: (json.loads(row.metadata) if row.metadata else {})
                   for n, row in store.chunk_rows_by_nid(cand).items()} if cand else {}
        plan, keep = [], []
        new_rows: list[dict[str, Any]] = []
        first: dict[tuple[str, str], int] = {}
        for i, r in enumerate(rows):
            meta = r["metadata"] or {}
            key = found.get((r["text"], scope))
            same = (r["text"], json.dumps(meta, sort_keys=True, default=str))
            if key is not None and meta_of.get(key.nid) == meta:
                plan.append((False, key.nid))
                old.append(key.nid)
            elif same in first:
                plan.append((True, first[same]))
                again.append(first[same])
            else:
                first[same] = len(new_rows)
                plan.append((True, len(new_rows)))
                new_rows.append(r)
                keep.append(i)
        rows = new_rows
        vecs = vecs[keep] if vecs is not None else None
    prev = store.previous_turn(session, *scope) if link else None
    created = store.insert_chunks_bulk(rows) if rows else []
    nids = [c.nid for c in created]
    if vecs is not None:
        views.store_vectors([(nid, r["text"], v) for nid, r, v in zip(nids, rows, vecs)])
    chain = ([prev] if prev is not None else []) + nids
    # source "session": turn adjacency is structure, not a learned temporal relation, so it
    # decays like rule edges (×0.99/day) instead of the 7-day half-life of "temporal" edges.
    edge_rows = [{"src": a, "dst": b, "relation": Relation.TEMPORAL, "confidence": 1.0, "source": "session",
                  "event_time": r["event_time"], "discovered_at": now}
                 for a, b, r in zip(chain, chain[1:], rows[len(rows) - len(chain) + 1:])] if link else []
    inserted = store.insert_edges_bulk(edge_rows) if edge_rows else []
    views.effects.chunks_added(fx, [NewChunk(nid, r["text"], "turn", now, r["event_time"], r["q_value"], scope, session)
                            for nid, r in zip(nids, rows)],
                       dict(zip(nids, vecs)) if vecs is not None else None)
    views.effects.edges_added(fx, [NewEdge(eid, er["src"], er["dst"], Relation.TEMPORAL, 1.0)
                           for er, (eid, _e) in zip(edge_rows, inserted)])
    new = [Chunk(id=c.id, text=r["text"], kind="turn", q_value=r["q_value"], importance=5.0, created_at=now,
                 event_time=r["event_time"], user_id=scope[0], agent_id=scope[1], run_id=scope[2],
                 session_id=session, metadata=r["metadata"]) for c, r in zip(created, rows)]
    if plan is None:
        return new
    # a repeat counts as evidence again: access count + 1 and last access now, once per repeat
    touches = old + [nids[k] for k in again]
    if touches:
        store.touch_chunks_batch([([n], now) for n in touches])
    rows_old = store.chunk_rows_by_nid(sorted(set(old))) if old else {}
    return [new[k] if is_new else rows_old[k].to_chunk() for is_new, k in plan]


def add_messages(views: Views, turns: Sequence[tuple[str | None, str, Mapping[str, Any]]], *, distiller: Any,
                 infer: bool, scope: Scope, session_id: str | None, metadata: Mapping[str, Any] | None,
                 event_time: float | None, link: bool = True, dedupe: bool = False) -> AddResult:
    """``Memory.add`` of checked arguments: distil (no lock held), then the turns and what was
    distilled in one transaction."""
    distilled, skipped, error = distill(distiller, turns) if infer else ([], [], None)
    session = session_id or new_session_id()
    rows = turn_rows(turns, scope=scope, session=session, metadata=metadata, event_time=event_time,
                     q_init=views.config.q_init)
    with views.write() as fx:
        chunks = add_turns(views, fx, rows, scope, session, None, link=link, dedupe=dedupe)
        not_stored = apply_distilled(views, fx, distilled, scope, event_time) if distilled else []
        views.effects.count_write(fx)
    return AddResult(chunks, distilled=len(distilled) - len(not_stored), distill_skipped=skipped + not_stored,
                     distill_error=error)


def distill(distiller: Any, turns: Sequence[tuple[str | None, str, Mapping[str, Any]]]
            ) -> tuple[list[Any], list[str], str | None]:
    """Ask the distiller about the turns (no lock held): (checked items, skipped reasons, error).

    A failed call or an unusable answer never stops the turns from being stored: it is logged and
    returned as the error; bad items are skipped; at most the distiller's ``max_items`` are kept."""
    try:
        answer = distiller.distill([{"speaker": s, "text": t} for s, t, _ in turns])
    except Exception as exc:  # the turns are stored anyway; the failure is reported
        error = f"{type(exc).__name__}: {exc}"
        log.warning("causalmem: distiller failed, storing the turns only: %s", error)
        return [], [], error
    max_items = getattr(distiller, "max_items", MAX_DISTILLED_ITEMS)
    if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 1:
        max_items = MAX_DISTILLED_ITEMS
    checked = validate_distilled(answer, max_items=max_items)
    return list(checked), list(checked.skipped), None


def apply_distilled(views: Views, fx: Effects, items: Sequence[Any], scope: Scope, et: float | None) -> list[str]:
    """Causal pairs, facts and lessons an LLM distiller extracted from a conversation.

    Each item is written in its own savepoint: one that cannot be stored is rolled back (its
    in-memory effects dropped), logged and returned as a reason; the turns and the other items
    stay. Returns the reasons of the items skipped.
    """
    skipped: list[str] = []
    for i, item in enumerate(items):
        mark = len(fx)
        try:
            with views.store.transaction():  # nested: a savepoint
                _apply_distilled_item(views, fx, item, scope, et)
        except (ValueError, TypeError) as exc:
            del fx[mark:]
            skipped.append(f"item {i}: {exc}")
            log.warning("causalmem: distilled item %d not stored: %s", i, exc)
    return skipped


def _apply_distilled_item(views: Views, fx: Effects, item: Any, scope: Scope, et: float | None) -> None:
    kind = getattr(item, "kind", None)
    text = getattr(item, "text", None)
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text must be a non-empty string")
    decision = getattr(item, "decision", None)
    if kind == "causal" and isinstance(decision, str) and decision.strip() and decision != text:
        rel = getattr(item, "relation", None) or "caused"
        try:
            Relation.parse(rel)
        except ValueError:
            rel = "caused"
        a = validated_record(decision, text, rel, "distill", None, None, getattr(item, "task_tag", None),
                             et, *scope)
        record_batch(views, fx, [a])
    elif kind in ("fact", "lesson"):
        ingest.check_text(text, "text")
        get_or_create_chunk(views, fx, text, kind, scope, event_time=et, metadata={"source": "distill"})
    else:
        raise ValueError(f"kind must be fact, lesson or causal (with a decision), got {kind!r}")
