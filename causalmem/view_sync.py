"""Following the store: another connection's commits patched into this process's views.

``StoreFollower`` compares the store's ``data_version`` before every read and write
(``sync``). A backend with a change log (PostgreSQL) names the rows another host changed, and
``apply_changes`` patches exactly those into the chunk table, the BM25 index, the vector index and
the projection; without one (SQLite), ``resync`` re-reads the chunk columns and patches the text
indexes by difference. Rows deleted for good elsewhere (a purge) or a text changed elsewhere
without a change log make it drop the views for a rebuild instead. Its host (:class:`SyncHost`,
the views) gives the store, the views and the index files' state.
"""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from . import sidecar
from .chunks import ChunkTable
from .lexical import BM25Index
from .metadata_filter import FilterCache
from .types import Relation
from .vector_index import VectorIndex, decode_rows
from .view_files import IndexFiles, columns_of

__all__ = ["IndexesHost", "StoreFollower", "SyncHost"]


class IndexesHost(Protocol):
    """The in-process indexes of a ``Views`` that following the store and the after-commit
    effects both patch."""

    store: Any
    projection: Any
    chunks: ChunkTable | None
    lexical: BM25Index | None
    vectors: VectorIndex | None
    meta_cache: FilterCache
    files: IndexFiles

    def reset_embedded_mark(self) -> None: ...


class SyncHost(IndexesHost, Protocol):
    """What following the store reads and patches of its host (``Views``)."""

    vector_view: Any

    def queue_changed(self) -> None: ...


class StoreFollower:
    """Notices another connection's commits and brings the host's views up to date with them."""

    def __init__(self, host: SyncHost) -> None:
        self.host = host
        self.store = host.store
        self.data_version = self.store.data_version()  # as of the last comparison
        self.updates_seen = self.store.last_update_event()  # the last text update the views hold

    def sync(self) -> None:
        """Another connection committed: bring the views up to date with the store."""
        host = self.host
        dv = self.store.data_version()
        if dv == self.data_version:
            return
        self.data_version = dv
        files = host.files
        token = sidecar.purge_token(files.dir)  # a purge replaces it before its commit
        if token != files.purge_seen:
            host.meta_cache.clear()  # (another process purged: none of its metadata stays here)
        files.purge_seen = token
        if host.vectors is not None:
            host.vectors.seq = None  # patched from another process's changes: no exact state known
        changes = getattr(self.store, "foreign_changes", None)  # a backend with a change log
        delta = changes() if changes is not None else None
        if delta is None and changes is not None:
            # the change log no longer reaches back (another host far ahead): a purge there cannot be
            # ruled out, and the full re-read below (forget_all) would keep its metadata texts here
            host.meta_cache.clear()
        elif delta is not None:
            if "cd" in delta:  # chunk rows deleted for good (a purge elsewhere)
                host.meta_cache.clear()
            else:
                host.meta_cache.forget([*delta.get("ci", ()), *delta.get("cu", ())])
        if delta is None or not self.apply_changes(delta):
            self.resync()

    def apply_changes(self, delta: dict[str, list[int]]) -> bool:
        """Patch the views with the rows another process changed (keys by kind from the store's
        change log: ``ci``/``cu`` chunks inserted/updated, ``ei``/``eu`` edges, ``o*`` co-occurrence,
        ``vi``/``vu`` vectors). False when only a full re-read is exact (rows deleted for good)."""
        if any(k in delta for k in ("cd", "ed", "vd")):
            return False
        host, store, proj = self.host, self.store, self.host.projection
        host.reset_embedded_mark()
        if host.vectors is not None and not host.vectors.ready:
            host.vectors = None  # still loading: start over from the store as it is now
        host.files.seq = None  # patched: no longer one exact store state an index file could name
        host.files.dirty.update(("chunks", "lexical"))
        nids = sorted(set(delta.get("ci", ())) | set(delta.get("cu", ())))
        if nids:
            rows = store.chunk_rows_by_nid(nids)
            text_changed = False
            if "cu" in delta:  # a text changes only by an update of an existing chunk
                last = store.last_update_event()
                text_changed, self.updates_seen = last != self.updates_seen, last
            if host.chunks is not None and rows:
                host.chunks.load(columns_of(rows))
            updated = set(delta.get("cu", ()))
            lexical, vectors = host.lexical, host.vectors
            for nid, row in rows.items():
                if row.valid_to is not None:
                    if lexical is not None and nid in lexical:
                        lexical.remove(nid)
                    if vectors is not None:
                        vectors.remove(nid)
                    proj.node_deleted(nid)
                    continue
                if lexical is not None:
                    if nid not in lexical:
                        lexical.add(nid, row.text)
                    elif text_changed:
                        lexical.update(nid, row.text)
                if text_changed and vectors is not None and nid in updated:
                    vectors.remove(nid)  # the new text's vector arrives as a 'v' change
                proj.n_nodes = max(proj.n_nodes, nid + 1)
        eids = sorted(set(delta.get("ei", ())) | set(delta.get("eu", ())))
        if eids:
            states = getattr(store, "edge_states")(eids)
            graph = proj.graph
            inserted = set(delta.get("ei", ()))
            for eid, src, dst, code, conf, valid in states:
                if eid in inserted and valid:
                    known = False
                    if graph is not None:
                        try:
                            graph._ordinal(eid)
                            known = True
                        except KeyError:
                            pass
                    if not known:
                        proj.edge_added(eid, src, dst, Relation.from_code(code), conf)
                elif not valid:
                    proj.edge_invalidated(eid)
                else:  # restored or reweighted: rebuilt at the next graph query
                    proj.mark_stale()
            proj.count_write(len(eids))
        if any(k in delta for k in ("oi", "ou", "od")):  # learned links changed elsewhere: exact rebuild
            proj.mark_stale()
        vids = sorted(set(delta.get("vi", ())) | set(delta.get("vu", ())))
        emb = host.vector_view.resolved
        if vids and host.vectors is not None and emb is not None:
            got = store.embeddings_of(vids, emb.model_name)
            if got:
                ids, vecs = decode_rows(got, emb.dim)
                alive = host.chunks.alive if host.chunks is not None else None
                if alive is not None:
                    keep = (ids < alive.shape[0]) & alive[np.minimum(ids, max(alive.shape[0] - 1, 0))]
                    ids, vecs = ids[keep], vecs[keep]
                if len(ids):
                    host.vectors.add(ids, vecs)
        if nids:
            host.queue_changed()  # chunks written elsewhere without our model's vectors
        return True

    def adopt_commit(self, seq: int, importance: list[tuple[int, float]]) -> None:
        """Another connection of this process committed change ``seq`` for the views (the flusher's
        batch; the caller holds the lock): the chunk table's importance, the views' sequence."""
        host = self.host
        table, files = host.chunks, host.files
        if table is not None and importance:
            idx = np.fromiter((n for n, _ in importance), dtype=np.int64, count=len(importance))
            table.importance[idx] = np.asarray([v for _, v in importance], dtype=np.float32)
        files.dirty.add("chunks")
        if files.seq is not None:
            files.seq = seq if files.seq == seq - 1 else None
        vi = host.vectors
        if vi is not None and vi.seq is not None:
            vi.seq = seq if vi.seq == seq - 1 else None

    def after_bulk_change(self) -> None:
        """The store changed under this process's own hand outside ``write()`` (a sleep cycle)."""
        self.host.files.changed = True
        self.data_version = self.store.data_version()  # before re-reading: a later commit is noticed
        self.resync()

    def resync(self) -> None:
        """Re-read chunk columns and patch the text indexes by difference (new, deleted chunks).

        A text *changed* elsewhere (an ``update`` event we did not make) rebuilds them instead."""
        host, store = self.host, self.store
        host.projection.mark_stale()
        host.meta_cache.forget_all()  # which chunk's metadata changed is not known
        host.reset_embedded_mark()  # another process may have changed texts or written without vectors
        host.files.seq = host.files.read_seq()  # read before the rows: the patched views are at least this new
        host.files.dirty.update(("chunks", "lexical"))
        if host.chunks is None or host.lexical is None:
            host.chunks = host.lexical = host.vectors = None
            return
        if store.last_update_event() != self.updates_seen:
            host.chunks = host.lexical = host.vectors = None
            return
        table = ChunkTable()
        lexical = host.lexical
        for cols in store.chunk_columns(with_text=False):
            table.load(cols)
        alive = np.flatnonzero(table.alive[: table.n])
        indexed = lexical.doc_ids()
        gone = np.setdiff1d(indexed, alive, assume_unique=True)
        fresh = np.setdiff1d(alive, indexed, assume_unique=True)
        for nid in gone.tolist():
            lexical.remove(nid)
        if len(fresh):
            lexical.add_many(store.texts_of(fresh.tolist()))
        if host.vectors is not None and not host.vectors.ready:
            host.vectors = None  # still loading: start over from the store as it is now
        vectors = host.vectors
        if vectors is not None:
            vids = vectors.ids()
            for nid in np.setdiff1d(vids, alive).tolist():
                vectors.remove(nid)
            want = np.setdiff1d(alive, vids).tolist()
            emb = host.vector_view.embedder
            if want and emb is not None:
                got = store.embeddings_of(want, emb.model_name)
                if got:
                    vectors.add(*decode_rows(got, emb.dim))
                # chunks written elsewhere without our model's vectors are in the worker's queue
        host.chunks = table
        host.queue_changed()  # another process may have written chunks without our model's vectors
