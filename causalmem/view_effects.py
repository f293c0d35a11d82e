"""After-commit effects: how each kind of write reaches the in-process views.

A pipeline inside ``with views.write() as fx:`` calls one ``AfterCommit`` method per change it
made (``views.effects.chunks_added(fx, ...)``, ``edge_invalidated``, ``chunk_deleted``, ...). Each
notes the changed row ids for the index files' journal at once, and appends to ``fx`` a callback
that patches the chunk table, the BM25 index, the vector index and the projection; the write
protocol runs those only after the outermost transaction committed, so a rolled-back write never
leaves an index ahead of the store. Its host (:class:`EffectsHost`, the views) holds the views.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, NamedTuple, Protocol, Sequence

import numpy as np

from . import sidecar
from .embedding import OwnRows
from .store.base import text_hash
from .types import Relation
from .vector_index import UNKNOWN_HASH
from .view_sync import IndexesHost, StoreFollower

__all__ = ["AfterCommit", "EffectsHost", "Effects", "NewChunk", "NewEdge", "Scope"]

#: after-commit callbacks of one write
Effects = list[Callable[[], None]]
#: (user_id, agent_id, run_id)
Scope = tuple[str | None, str | None, str | None]


class NewChunk(NamedTuple):
    """A chunk just inserted, as the in-memory views need it."""

    nid: int
    text: str
    kind: str
    created_at: float
    event_time: float | None
    q: float
    scope: Scope
    session_id: str | None = None


class NewEdge(NamedTuple):
    eid: int
    src: int
    dst: int
    relation: Relation
    confidence: float


class EffectsHost(IndexesHost, Protocol):
    """What the after-commit effects patch (``Views``)."""

    lock: Any
    follower: StoreFollower
    own_rows: OwnRows
    embed_queued: bool


class AfterCommit:
    """One method per kind of change: note it for the journal, patch the views after commit."""

    def __init__(self, host: EffectsHost) -> None:
        self.host = host
        self.note = host.files.note

    def chunks_added(self, fx: Effects, chunks: Sequence[NewChunk],
                     vectors: dict[int, np.ndarray] | None = None) -> None:
        """New chunks (and their vectors by nid) enter every view after commit."""
        if not chunks:
            return
        host = self.host
        vectors = vectors or {}
        if len(vectors) < len(chunks):
            host.embed_queued = True
            host.own_rows.new_chunks([c.nid for c in chunks if c.nid not in vectors])
        self.note("ci", [c.nid for c in chunks])

        def apply() -> None:
            host.files.dirty.update(("chunks", "lexical"))
            if host.chunks is not None:
                nid, _t, kind, created, event, q, scope, session = map(list, zip(*chunks))
                users, agents, runs = map(list, zip(*scope))
                host.chunks.set_many(nid, kind=kind, created_at=created, event_time=event, q=q, user_id=users,
                                     agent_id=agents, run_id=runs, session_id=session)
            if host.lexical is not None:
                if len(chunks) == 1:
                    host.lexical.add(chunks[0].nid, chunks[0].text)
                else:
                    host.lexical.add_many([(c.nid, c.text) for c in chunks])
            if host.vectors is not None and vectors:
                texts = {c.nid: c.text for c in chunks}
                host.vectors.add(np.fromiter(vectors, dtype=np.int64, count=len(vectors)),
                                 np.vstack(list(vectors.values())),
                                 [text_hash(texts[n]) if n in texts else UNKNOWN_HASH for n in vectors])
            host.projection.n_nodes = max(host.projection.n_nodes, max([c[0] for c in chunks]) + 1)

        fx.append(apply)

    def edges_added(self, fx: Effects, edges: Sequence[NewEdge]) -> None:
        if not edges:
            return
        self.note("ei", [e.eid for e in edges])
        proj = self.host.projection

        def apply() -> None:
            for e in edges:
                proj.edge_added(e.eid, e.src, e.dst, e.relation, e.confidence)

        fx.append(apply)

    def edge_invalidated(self, fx: Effects, eid: int) -> None:
        self.note("ex", (eid,))
        fx.append(lambda: self.host.projection.edge_invalidated(eid))

    def edge_restored(self, fx: Effects, eid: int) -> None:
        self.note("eu", (eid,))
        fx.append(lambda: self.host.projection.edge_restored(eid))

    def chunk_deleted(self, fx: Effects, nid: int) -> None:
        self.note("cu", (nid,))
        host = self.host

        def apply() -> None:
            host.files.dirty.update(("chunks", "lexical"))
            if host.chunks is not None:
                host.chunks.kill(nid)
            if host.lexical is not None and nid in host.lexical:
                host.lexical.remove(nid)
            if host.vectors is not None:
                host.vectors.remove(nid)
            host.projection.node_deleted(nid)

        fx.append(apply)

    def text_updated(self, fx: Effects, nid: int, text: str, vector: np.ndarray | None) -> None:
        host = self.host
        if vector is None:
            host.embed_queued = True
            host.reset_embedded_mark()
            host.own_rows.changed(nid)
        self.note("ct", (nid,))

        def apply() -> None:
            host.files.dirty.add("lexical")
            host.follower.updates_seen = host.store.last_update_event()
            if host.lexical is not None:
                host.lexical.update(nid, text)
            if host.vectors is not None:
                if vector is not None:
                    host.vectors.add(np.asarray([nid], dtype=np.int64), vector[None, :], [text_hash(text)])
                else:  # the old text's vector is stale; the worker embeds the new text
                    host.vectors.remove(nid)

        fx.append(apply)

    def metadata_changed(self, fx: Effects, nid: int) -> None:
        """A chunk's metadata was replaced: the metadata filters read it again after commit."""
        fx.append(lambda: self.host.meta_cache.forget((nid,)))

    def q_changed(self, fx: Effects, nid: int, q: float) -> None:
        self.note("cu", (nid,))
        host = self.host

        def apply() -> None:
            host.files.dirty.add("chunks")
            if host.chunks is not None and nid < host.chunks.n:
                host.chunks.q[nid] = q

        fx.append(apply)

    def accessed(self, fx: Effects, nids: Sequence[int]) -> None:
        """A search returned ``nids``: importance + 0.1 (its learned links are in the projection already)."""
        self.note("cu", nids)
        host = self.host

        def apply() -> None:
            host.files.dirty.add("chunks")
            table = host.chunks
            if table is not None:
                # the store's value (float64 arithmetic in SQL), not a float32 sum of our own: a
                # table rebuilt from the database, or caught up from the journal, holds exactly that
                rows = host.store.chunk_rows_by_nid([n for n in dict.fromkeys(nids) if n < table.n])
                if rows:
                    idx = np.fromiter(rows, dtype=np.int64, count=len(rows))
                    table.importance[idx] = np.asarray([r.importance for r in rows.values()], dtype=np.float32)

        fx.append(apply)

    @contextlib.contextmanager
    def purging(self) -> Iterator[None]:
        """Around a purge's write: this process's lock, then the index directory's lock (no process
        saves index files from before the purge's commit until its files are gone), and a new purge
        token before the commit (a vector index build started from the old one is dropped, not saved)."""
        directory = self.host.files.dir
        with self.host.lock, sidecar.index_lock(directory):
            sidecar.new_purge_token(directory)
            yield

    def purged(self, fx: Effects) -> None:
        """Chunks and edges were removed from the store for good: rebuild every view from it."""
        host = self.host
        host.files.jdelta = None  # rows gone for good: no journal entry, so no catch-up across a purge

        def apply() -> None:
            host.chunks = host.lexical = host.vectors = None
            host.meta_cache.clear()
            host.projection.mark_stale()
            # purged texts and vectors must not outlive the purge in any index file: every file of the
            # directory goes (named ones, journal, vector generations, a crashed save's temporary files);
            # the caller holds ``sidecar.index_lock`` and replaced the purge token (``write.delete_all``),
            # and replaces it again after the commit: a process that read the token between the first
            # replacement and the commit (it may still hold purged rows) drops its builds and re-reads
            host.files.purged()

        fx.append(apply)

    def edges_reweighted(self, fx: Effects, edges: Sequence[tuple[int, str, float]]) -> None:
        """Valid edges whose confidence changed (repeated evidence), as ``(eid, relation name,
        confidence)``: their weights change in place in the projection (no rebuild)."""
        if edges:
            self.note("eu", [e[0] for e in edges])
            fx.append(lambda: self.host.projection.edges_reweighted([(e, Relation(r), c) for e, r, c in edges]))

    def confirmed_links(self, fx: Effects, nids: Sequence[int], deltas: Sequence[tuple[int, int, float]]) -> None:
        """``Memory.confirm`` wrote co-occurrence credit among ``nids`` (``(a, b, weight added)``):
        into the projection at commit, so the next query spreads over the links."""
        self.note("o", nids)
        if deltas:
            fx.append(lambda: self.host.projection.learned_links(list(deltas)))

    def count_write(self, fx: Effects, n: int = 1) -> None:
        """``n`` writes toward the projection's lazy-rebuild rule, after commit."""
        fx.append(lambda: self.host.projection.count_write(n))
