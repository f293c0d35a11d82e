"""``Memory``: the one public entry point, a thin facade.

It validates public arguments, holds the lock and delegates: the write path to ``write``, causal
queries to ``causal``, retrieval to ``retrieval``, learning to ``learning``, sleep to
``consolidation``; the in-memory indexes live in ``views.Views``, the data in the store.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import threading
import time
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from . import _args, causal, consolidation, ingest, portable, retrieval, view_pool
from . import confirm as confirm_mod
from . import write as w
from .chunks import ChunkTable
from .config import Config
from .errors import ConfigurationError, guard_public_methods
from .projection import Projection
from .store import Store
from .types import SOURCES_CONFIDENCE, Activation, AddResult, Chunk, Edge, Hit, InterventionReport, Relation, \
    SleepReport, check_clock_value, to_timestamp
from .views import Views

if TYPE_CHECKING:  # pragma: no cover
    from .semantic import Embedder, VectorIndex

__all__ = ["Memory"]


class Memory:
    """Long-term causal memory on one SQLite file (or ``":memory:"``), or in a PostgreSQL database
    shared by many processes and hosts (a ``postgresql://`` DSN; ``backend`` forces the choice).

    >>> with Memory("agent.db", embedder=None) as mem:
    ...     mem.record_decision("deploy without tests", "production crash")
    ...     mem.search_causal("deploy without tests")
    """

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, config: Config | None = None,
                 clock: Callable[[], float] | None = None, embedder: Any = "auto", judge: Any = None,
                 distiller: Any = None, read_only: bool = False, backend: str | None = None,
                 embed_handoff: str | bool | None = None, views_budget_mb: float | None = None) -> None:
        """``embed_handoff``: ``Config.embed_handoff``; ``views_budget_mb``: MB of per-tenant views (``view_pool``)."""
        _args.check_memory_args(path, config=config, clock=clock, embedder=embedder, read_only=read_only,
                                backend=backend, views_budget_mb=views_budget_mb)
        self.config = config or Config()
        if embed_handoff is not None:
            self.config = dataclasses.replace(self.config, embed_handoff=embed_handoff)
        self._lock = threading.RLock()
        self._store = Store(path, busy_timeout_ms=self.config.busy_timeout_ms, read_only=read_only,
                            backend=backend)
        self.path = self._store.path
        self._views = Views(self._store, self.config, clock or time.time, embedder=embedder, lock=self._lock)
        self._pool = view_pool.ViewPool(self._views, clock or time.time, budget_mb=views_budget_mb)
        self.judge, self.distiller = judge, distiller

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self, *, drain: bool = False) -> None:
        """Close the database: queued search reinforcement is written first (if the file is locked
        or read-only it is dropped, with a log line); everything else is already committed.
        Chunks still waiting for a vector stay queued in the store (the next open embeds them);
        ``drain=True`` first waits until the background worker embedded them all."""
        self._pool.close()
        self._views.close(drain=drain)

    def flush(self) -> int:
        """Finish what runs behind the writes: wait until every chunk written so far has its vector (no-op
        without an embedder), then write the reinforcement queued by searches (normally done by the next
        write, a size or time threshold, or ``close``); returns how many searches it covered."""
        return self._views.flush() + self._pool.flush()

    @property
    def read_only(self) -> bool:
        """Opened read-only: searches work (reinforcement off), writes raise ``StoreError``."""
        return self._store.read_only

    def wait_embedded(self, timeout: float | None = None) -> bool:
        """Block until every chunk written so far has a vector (True) or ``timeout`` seconds passed (False).

        Writes commit without vectors; a background thread embeds them in large batches."""
        return self._views.wait_embedded(timeout)

    def now(self) -> float:
        return self._views.now()

    def __repr__(self) -> str:
        return f"Memory({self.path!r})"

    @property
    def embedder(self) -> "Embedder | None":
        """The resolved embedder (``None`` when the semantic channel is off)."""
        return self._views.embedder

    @property  # the facade's own view of its parts (tests and benchmarks look at them)
    def _projection(self) -> Projection:
        return self._views.projection

    @property
    def _chunks(self) -> ChunkTable | None:
        return self._views.chunks

    @_chunks.setter
    def _chunks(self, table: ChunkTable | None) -> None:
        self._views.chunks = table

    def _vector_index(self) -> "VectorIndex | None":
        return self._views.vector_index()

    # ------------------------------------------------------------------ writes
    def record_decision(self, decision: str, outcome: str, *, relation: str = "caused",
                        source: str = "manual", confidence: float | None = None,
                        polarity: str | None = None, task_tag: str | None = None,
                        event_time: float | _dt.datetime | None = None, user_id: str | None = None,
                        agent_id: str | None = None, run_id: str | None = None) -> Edge:
        """Record that ``decision`` led to ``outcome`` (one transaction); returns the new edge."""
        a = w.validated_record(decision, outcome, relation, source, confidence, polarity, task_tag, event_time,
                               user_id, agent_id, run_id)
        with self._pool.writing(user_id) as views, views.write() as fx:  # vectors: the background worker
            return w.record_batch(views, fx, [a])[0]

    def record_many(self, items: Iterable[Any]) -> list[Edge]:
        """Record many decision→outcome pairs in one transaction (all or nothing)."""
        return w.record_many(self._views, items)

    def link(self, src_chunk_id: str, dst_chunk_id: str, relation: str, *, confidence: float | None = None,
             source: str = "rule", polarity: str | None = None, task_tag: str | None = None) -> Edge:
        """Add a typed edge between two existing chunks of one scope. Again on a linked pair (same relation
        and meta kind): that valid edge gains evidence as in ``record_decision`` (+1, confidence noisy-or
        capped at 0.99, a given polarity replaces it) and is returned, same id; never a parallel edge."""
        rel = Relation.parse(relation)
        source = ingest.check_source(source)
        conf = ingest.check_confidence(SOURCES_CONFIDENCE.get(source, 0.6) if confidence is None else confidence)
        polarity = ingest.check_polarity(polarity)
        with self._views.write() as fx:
            s = ingest.require_chunk(self._store, src_chunk_id, "src_chunk_id")
            d = ingest.require_chunk(self._store, dst_chunk_id, "dst_chunk_id")
            edge_id = w.link(self._views, fx, s, d, rel, Relation.subtype_of(relation), confidence=conf,
                             source=source, polarity=polarity, task_tag=task_tag)
        return self.get_edge(edge_id)

    def add_fact(self, key: str, value: str, *, user_id: str | None = None, agent_id: str | None = None,
                 run_id: str | None = None, confidence: float = 0.8, replace_same_key: bool = False) -> Chunk:
        """Store a fact ``key: value`` as a searchable chunk; optionally retire older values of the key."""
        ingest.check_text(key, "key")
        ingest.check_text(value, "value")
        conf = ingest.check_confidence(confidence)
        scope = w.check_scope(user_id, agent_id, run_id)
        with self._pool.writing(user_id) as views, views.write() as fx:
            cid = w.add_fact(views, fx, key, value, scope, confidence=conf, vec=None,
                             replace_same_key=replace_same_key)
        return self.get(cid)

    def invalidate(self, edge_id: str, reason: str | None = None) -> Edge:
        """Soft-invalidate an edge: kept in the store, skipped by every query."""
        with self._views.write() as fx:
            row = ingest.require_edge(self._store, edge_id)
            if row.valid_to is not None:
                raise ValueError(f"edge {edge_id!r} is already invalid "
                                 f"(since {row.valid_to:.3f}, reason: {row.invalid_reason or 'none'})")
            w.invalidate_edge(self._views, fx, row.eid, reason)
            self._views.effects.count_write(fx)
        return self.get_edge(edge_id)

    def restore(self, edge_id: str) -> Edge:
        """Undo an invalidation or a supersession of an edge."""
        with self._views.write() as fx:
            w.restore_edge(self._views, fx, ingest.require_edge(self._store, edge_id))
        return self.get_edge(edge_id)

    def delete(self, chunk_id: str) -> None:
        """Soft-delete a chunk: never returned again; its edges stop spreading at once."""
        with self._views.write() as fx:
            row = ingest.require_chunk(self._store, chunk_id)
            if row.valid_to is not None:
                raise ValueError(f"chunk {chunk_id!r} is already deleted")
            w.delete_chunk(self._views, fx, row.nid)
            self._views.effects.count_write(fx)

    def delete_all(self, *, user_id: str | None = None, agent_id: str | None = None,
                   run_id: str | None = None, purge: bool = False) -> int:
        """Delete every chunk of a scope (at least one scope filter is required); returns how many.

        By default a soft delete: hidden from every query, kept in ``history``. ``purge=True``, the right
        to be forgotten: the texts and everything derived from them (edges, co-occurrence, facts, vectors,
        history, also of chunks soft-deleted before) leave every table, then the file is rewritten (``VACUUM``,
        write-ahead log emptied, freed pages zeroed) so the bytes are gone from the disk; ``get``/``history``
        then raise ``KeyError`` (``PurgeIncompleteError``: rows gone, rewrite failed; call again to rewrite)."""
        scope = w.check_scope(user_id, agent_id, run_id)
        if not isinstance(purge, bool):
            raise TypeError(f"purge must be True or False, got {type(purge).__name__}")
        if scope == (None, None, None):
            raise ValueError("delete_all needs user_id, agent_id or run_id (refusing to delete everything)")
        return w.delete_all(self._views, scope, purge=purge)

    def update(self, chunk_id: str, text: str | None = None, *, metadata: Mapping[str, Any] | None = None) -> Chunk:
        """Replace a chunk's text (re-indexed and re-embedded; the old text stays in ``history``) and/or
        merge ``metadata`` into its metadata (a key set to ``None`` is removed)."""
        if text is None and metadata is None:
            raise ValueError("update needs text, metadata or both")
        if text is not None:
            ingest.check_text(text, "text")
        if metadata is not None:
            metadata = w.check_metadata(metadata)
        with self._views.write() as fx:  # the new text's vector: the background worker
            w.update_chunk(self._views, fx, ingest.require_chunk(self._store, chunk_id), text, None, metadata)
        return self.get(chunk_id)

    def history(self, chunk_id: str) -> list[dict[str, Any]]:
        """Events of a chunk: create, update (old → new text), delete; oldest first."""
        return retrieval.chunk_history(self._store, ingest.require_chunk(self._store, chunk_id))

    def add(self, messages: Any, *, user_id: str | None = None, agent_id: str | None = None,
            run_id: str | None = None, session_id: str | None = None, metadata: Mapping[str, Any] | None = None,
            event_time: float | _dt.datetime | None = None, infer: bool = False, link: bool | None = None,
            dedupe: bool | None = None) -> AddResult:
        """Store each turn of a conversation as its own chunk, linked in order by temporal edges.

        ``link`` (chain turns by temporal edges) and ``dedupe`` (an exact live duplicate in the scope is
        that memory): defaults and rules in :func:`causalmem.ingest.link_and_dedupe`.

        ``infer=True`` also stores what the distiller extracts (asked before the lock is taken).
        The turns are stored whatever the distiller does: a failed call or an unusable answer is
        logged and reported in ``distill_error``, bad items are skipped and listed in
        ``distill_skipped``, at most the distiller's ``max_items`` (default 50) are kept.
        """
        turns = ingest.normalize_messages(messages)
        link, dedupe = ingest.link_and_dedupe(turns, session_id, link, dedupe)
        scope = w.check_scope(user_id, agent_id, run_id)
        if session_id is not None and (not isinstance(session_id, str) or not session_id):
            raise ValueError(f"session_id must be a non-empty string or None, got {session_id!r}")
        if metadata is not None:
            metadata = w.check_metadata(metadata)
        et = to_timestamp(event_time, name="event_time")
        if infer and self.distiller is None:
            raise ConfigurationError(
                "add(..., infer=True) needs an LLM distiller: pass Memory(distiller=LLMDistiller(...)) or set "
                "CAUSALMEM_LLM_BASE_URL and use causalmem.LLMDistiller.from_env()")
        with self._pool.writing(user_id) as views:
            return w.add_messages(views, turns, distiller=self.distiller, infer=infer, scope=scope,
                                  session_id=session_id, metadata=metadata, event_time=et, link=link,
                                  dedupe=dedupe)

    # ------------------------------------------------------------------ backup and move
    def export(self, path: str | os.PathLike[str] | IO[str], *, vectors: bool = False) -> int:
        """Write the whole memory as versioned JSON lines (see ``causalmem.portable``): chunks with
        their history, edges with validity, supersession and evidence, facts, Q-values,
        co-occurrence, decay bookkeeping and, with ``vectors=True``, the stored embeddings.
        Returns the number of lines. Queued search reinforcement is written first."""
        return portable.export_memory(self._views, path, vectors=vectors)

    def import_(self, path: str | os.PathLike[str] | IO[str]) -> dict[str, int]:
        """Load a file written by ``export`` in one transaction: every line is checked first, a bad
        one raises ``ValueError`` naming its line and nothing is written. Ids must not exist here
        yet (import into an empty memory, or one that shares no ids). Returns counts by type."""
        return portable.import_memory(self._views, path)

    # ------------------------------------------------------------------ reads
    def get_all(self, filters: Mapping[str, Any] | None = None, *, limit: int = 100,
                metadata: Mapping[str, Any] | None = None, **kwargs: Any) -> list[Chunk]:
        """Chunks matching exact-value filters (user_id, agent_id, run_id, session_id, kind) and, when
        given, a ``metadata`` filter (see ``causalmem.metadata_filter``), oldest first."""
        return retrieval.list_chunks(self._store, {**(filters or {}), **kwargs}, metadata, limit, self._views)

    def get(self, chunk_id: str) -> Chunk:
        return ingest.require_chunk(self._store, chunk_id).to_chunk()

    def get_edge(self, edge_id: str) -> Edge:
        return ingest.require_edge(self._store, edge_id).to_edge()

    def edges(self, chunk_id: str | None = None, *, valid_only: bool = True) -> list[Edge]:
        nid = None if chunk_id is None else ingest.require_chunk(self._store, chunk_id).nid
        return [r.to_edge() for r in self._store.edge_rows(nid=nid, valid_only=valid_only)]

    def stats(self, *, user_id: str | None = None, agent_id: str | None = None,
              run_id: str | None = None) -> dict[str, Any]:
        """Counts of chunks, edges, pairs, facts and vectors (of one scope if any filter is given)."""
        return retrieval.stats(self._views, w.scope_filters(w.check_scope(user_id, agent_id, run_id)))

    # ------------------------------------------------------------------ causal queries
    def search_causal(self, query: str, *, limit: int = 5, task_tag: str | None = None,
                      user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None,
                      include_seeds: bool = False, **spread_overrides: Any) -> list[Activation]:
        """What follows from ``query``: forward spreading (causal preset) from the chunks it names.

        Energy < 0 is a warning that arrived over a ``prevented`` edge."""
        return self._causal(query, False, limit, task_tag, (user_id, agent_id, run_id), include_seeds,
                            spread_overrides)

    def trace_cause(self, outcome: str, *, limit: int = 5, user_id: str | None = None,
                    agent_id: str | None = None, run_id: str | None = None, include_seeds: bool = False,
                    **spread_overrides: Any) -> list[Activation]:
        """What caused ``outcome``: reverse spreading (causal preset)."""
        return self._causal(outcome, True, limit, None, (user_id, agent_id, run_id), include_seeds,
                            spread_overrides)

    def _causal(self, query: Any, reverse: bool, limit: Any, task_tag: str | None, scope: tuple[Any, Any, Any],
                include_seeds: bool, overrides: Mapping[str, Any]) -> list[Activation]:
        sc = w.check_scope(*scope)
        causal.check_query(query, "outcome" if reverse else "query", task_tag)
        limit = ingest.check_limit(limit)
        overrides = causal.check_spread_overrides(overrides)
        with self._lock, self._pool.scope(sc[0]) as views:
            return self._store.read_once(lambda: causal.spread_query(  # the change check overlaps it
                views, query, reverse=reverse, limit=limit, task_tag=task_tag, scope=sc,
                include_seeds=include_seeds, overrides=overrides))

    def intervention_query(self, action: str, *, max_depth: int = 3, limit: int = 5, user_id: str | None = None,
                           agent_id: str | None = None, run_id: str | None = None) -> InterventionReport:
        """Predict what doing ``action`` again leads to, with causal chains and a risk label."""
        causal.check_query(action, "action")
        limit = ingest.check_limit(limit)
        max_depth = causal.check_max_depth(max_depth)
        sc = w.check_scope(user_id, agent_id, run_id)
        with self._lock, self._pool.scope(sc[0]) as views:  # (SQLite: the whole store's, one user's machine)
            return causal.intervention(views, action, max_depth=max_depth, limit=limit, scope=sc)

    # ------------------------------------------------------------------ retrieval
    def search(self, query: str, *, top_k: int = 10, user_id: str | None = None, agent_id: str | None = None,
               run_id: str | None = None, filters: Mapping[str, Any] | None = None,
               since: float | _dt.datetime | None = None, until: float | _dt.datetime | None = None,
               channels: Sequence[str] = ("lexical", "semantic", "graph"), fusion: str = "auto",
               explain: bool = False, reinforce: bool = True,
               metadata: Mapping[str, Any] | None = None) -> list[Hit]:
        """What do I know about ``query``: lexical + semantic + graph spreading, fused (SPEC §4).

        ``metadata`` keeps only chunks whose metadata matches a filter (``causalmem.metadata_filter``:
        ``{"field": value}``, ``{"field": {"$gte": 3}}``, ``$in``, ``$contains``, ``$or`` ...). On PostgreSQL a
        ``user_id`` searches that tenant's own views (``views_budget_mb``); none, the whole database's."""
        with self._pool.scope(ingest.check_scope_value(user_id, "user_id")) as views:
            return retrieval.search(views, query, top_k=top_k, user_id=user_id, agent_id=agent_id, run_id=run_id,
                                    filters=filters, since=since, until=until, channels=channels, fusion=fusion,
                                    explain=explain, reinforce=reinforce, metadata=metadata)

    def reembed(self, *, progress: Callable[[int, int], None] | None = None) -> int:
        """Compute vectors for every chunk whose text or model changed, now; returns how many.

        ``progress(done, total)`` is called after each batch (the CLI draws a bar with it)."""
        emb = self.embedder
        if emb is None:
            raise ConfigurationError("reembed() needs an embedder; this Memory was opened with embedder=None")
        if progress is not None and not callable(progress):
            raise TypeError("progress must be a callable (done, total) or None")
        return self._views.reembed(emb.model_name, progress)

    # ------------------------------------------------------------------ learning
    def feedback(self, chunk_id: str, reward: float) -> float:
        """Reward (in [-1, 1]) a memory that proved useful or harmful; returns its new Q-value."""
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            raise TypeError(f"reward must be a number in [-1, 1], got {type(reward).__name__}")
        if not -1.0 <= reward <= 1.0 or reward != reward:  # compares ints exactly: no float overflow
            raise ValueError(f"reward must be in [-1, 1], got {reward if abs(reward) < 1e30 else 'a huge number'}")
        return w.feedback(self._views, chunk_id, float(reward))

    def confirm(self, chunk_ids: Sequence[str]) -> int:
        """These hits were useful together: link every pair of them (Hebbian credit, capped, one scope,
        visible to the next query; ``causalmem.confirm``); returns how many pairs were credited."""
        return confirm_mod.confirm(self._views, confirm_mod.check_chunk_ids(chunk_ids))

    def sleep(self, *, dry_run: bool = False, now: float | _dt.datetime | None = None, judge: Any = None,
              min_diversity: float = 0.0, action: str = "annotate", progress: bool = False,
              llm_budget: float | None = None) -> SleepReport:
        """One consolidation cycle (SPEC §6), in one transaction; ``dry_run`` writes nothing.

        A slow judge (an LLM: no ``might_supersede`` pre-filter) is asked with the lock released —
        other calls on this ``Memory`` go on meanwhile — for at most ``llm_budget`` seconds
        (default ``Config.sleep_llm_budget``); pairs not asked wait for the next sleep
        (``SleepReport.judge_deferred``), verdicts whose edges changed meanwhile are not applied.
        """
        ts = check_clock_value(now, "now") if now is not None else self.now()
        return consolidation.sleep_memory(
            self._views, now=ts, judge=judge or self.judge, dry_run=dry_run, min_diversity=min_diversity,
            action=action, progress=progress,
            llm_budget=self.config.sleep_llm_budget if llm_budget is None else llm_budget)

    def last_sleep_report(self) -> dict[str, Any] | None:
        """Counts of the last committed ``sleep()`` (``now``: when it ran), or None before the first."""
        with self._lock:
            return consolidation.last_report(self._store)

    # ------------------------------------------------------------------ pictures
    def subgraph(self, query_or_ids: str | Sequence[str], *, depth: int = 2, direction: str = "both",
                 limit: int = 50, **kwargs: Any) -> Any:
        """Nodes and edges around a query or chunk ids, the data behind every picture (``causalmem.viz.subgraph``)."""
        from .viz import subgraph  # imported on use: viz reads through this facade's public API

        return subgraph(self, query_or_ids, depth=depth, direction=direction, limit=limit, **kwargs)


# every public method: a raw backend error surfaces as a StoreError naming the file
guard_public_methods(Memory, lambda mem: mem._store.errors(),
                     may_retry=lambda mem: not mem._store.in_transaction)  # deadlock/serialization: run again
