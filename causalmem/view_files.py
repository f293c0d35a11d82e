"""The views' index files (``<db>.idx/``) and their change journal.

``IndexFiles`` knows which store state (``change_seq``) the text views hold exactly (``seq``), which
views changed since they were loaded or saved (``dirty``), and what each file's header says
(``file_seq``). It loads the chunk table and the BM25 index from their files — as saved when they
match the store, or caught up from the journal when they are older (``load_tables``) — restores the
projection's graph the same way (``restore_projection``), writes one journal line per own commit
(``note`` during the write, ``journal_commit`` after it) and saves what changed at close (``save``).
A file that does not match is never trusted: its view is rebuilt from the database. Its host
(:class:`FilesHost`, the views) gives the store, the lock, the projection and the views themselves.
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from . import sidecar
from .chunks import ChunkTable
from .graph import CausalGraph
from .lexical import BM25Index
from .store.base import ChunkColumns
from .types import Relation

log = logging.getLogger("causalmem")

__all__ = ["IndexFiles", "FilesHost", "CATCH_UP_MAX_IDS", "CATCH_UP_KEEP", "columns_of"]

#: a catch-up from the journal re-reads at most this many row ids; more: rebuild from the database
CATCH_UP_MAX_IDS = 200_000
#: a process that caught up this many ids or fewer (and changed nothing itself) leaves the files
#: and the journal as they are at close; more, and it saves the views (the journal is pruned)
CATCH_UP_KEEP = 5_000
_NO_IDS = np.zeros(0, np.int64)


class FilesHost(Protocol):
    """What the index files read of their host (``Views``)."""

    store: Any
    lock: threading.RLock
    projection: Any
    chunks: ChunkTable | None
    lexical: BM25Index | None

    def sync_external(self) -> None: ...


class IndexFiles:
    """The index files of one store's views: load, catch up from the journal, journal, save."""

    def __init__(self, host: FilesHost, directory: Path | None) -> None:
        self.host = host
        self.store = host.store
        self.dir = directory
        #: the store state (change_seq) the chunk table and BM25 index hold exactly; None when unknown
        #: (then nothing is saved)
        self.seq: int | None = None
        self.dirty: set[str] = set()  # views changed since loaded / saved
        self.file_seq: dict[str, int] = {}  # kind -> change_seq in that file's header
        self.graph_saved: int | None = None  # the projection version the projection file holds
        # ids of the rows the current write changed, by journal kind (``sidecar.append_journal``);
        # None when the write cannot be described that way (a purge): then no entry, a gap
        self.jdelta: dict[str, list[int]] | None = {}
        # the purge token the views reflect (read before the rows they hold): a vector index build from
        # them is saved only while the directory's token is still this one (``sidecar.new_purge_token``)
        self.purge_seen = sidecar.purge_token(directory)
        #: (the index files' change_seq, ids re-read) when the views were caught up from the journal
        self.caught_up: tuple[int, int] | None = None
        # views whose file is older than them by the journal's rows (a catch-up): saved in full, or
        # left as they are when the catch-up was small (``CATCH_UP_KEEP``), never restamped
        self.behind: set[str] = set()
        #: views built from the database instead of loaded from their file, by kind (``Views.tables``;
        #: the projection counts its own, ``Projection.rebuilds``)
        self.rebuilt: dict[str, int] = {"chunks": 0, "lexical": 0}
        #: this process changed the store (an own commit, a purge, a sleep cycle): at close its views
        #: are brought to the files when the next open could not use them (``needs_build``)
        self.changed = False
        #: seconds ``close`` spent building the views for the next open (``build_for_next_open``)
        self.close_build_seconds = 0.0

    def open_tables(self, seq: int | None) -> tuple[ChunkTable, BM25Index]:
        """The chunk table and BM25 index at ``seq``: from their files when those serve
        (``load_tables``), else built from the store (counted in ``rebuilt``, marked dirty)."""
        table, index = self.load_tables(seq)
        if table is not None and index is not None:
            return table, index
        fresh_table, fresh_index = ChunkTable(), BM25Index()
        docs: list[tuple[int, str]] = []
        for cols in self.store.chunk_columns(with_text=index is None):
            if table is None:
                fresh_table.load(cols)
            if index is None:
                assert cols.text is not None
                docs += [(n, t) for n, t, a in zip(cols.nid, cols.text, cols.alive) if a]
        if docs:  # one batch: the postings are sorted once, not once per column batch
            fresh_index.add_many(docs)
        del docs
        for kind, built in (("chunks", table is None), ("lexical", index is None)):
            if built:
                self.dirty.add(kind)
                self.rebuilt[kind] += 1
        return (fresh_table if table is None else table), (fresh_index if index is None else index)

    def build_for_next_open(self, tables: Callable[[], Any], projection: Any) -> bool:
        """At close, when this process changed the store and a fresh process could not load every
        view from ``<db>.idx/`` (no file, or one too far behind its journal: ``needs_build``), bring
        the views to the store's state here (``tables()``, the projection) — from the files and
        journal when they serve, else built from the database — so the save writes them. A writer
        that never searched pays one build at close instead of every later reader paying it at
        open. True when it did; never raises (a failed build leaves the files as they were)."""
        if not self.changed or self.dir is None or getattr(self.store, "read_only", False):
            return False
        try:
            seq = self.read_seq()
            if seq is None or not self.needs_build(seq):
                return False
            t0 = time.perf_counter()
            tables()
            if not projection.savable():
                projection.rebuild()
            self.close_build_seconds = time.perf_counter() - t0
            return True
        except Exception as exc:
            log.warning("causalmem: could not build the index files of %s at close: %s", self.store.path, exc)
            return False

    def read_seq(self) -> int | None:
        """The store's change counter; None when the backend has none or the database has never
        been written by a version that keeps it (0): index files are neither trusted nor saved then."""
        change_seq = getattr(self.store, "change_seq", None)
        value = 0 if change_seq is None else int(change_seq())
        return value if value > 0 else None

    # ------------------------------------------------------------------ loading
    def load_tables(self, seq: int | None) -> tuple[ChunkTable | None, BM25Index | None]:
        """Chunk table and BM25 index from their files: each as saved when it matches ``seq``, else
        caught up from the journal when the file is older and the journal has the whole way; None
        for a view the caller rebuilds from the database."""
        if self.dir is None or seq is None:
            return None, None
        rows: dict[int, Any] = {}  # chunk rows the journal names, read once for both views
        table = self._load_view("chunks", seq, lambda sn: ChunkTable.from_arrays(sn.arrays, sn.meta), rows)
        index = self._load_view("lexical", seq, lambda sn: BM25Index.from_arrays(sn.arrays, sn.meta), rows)
        return table, index

    def _load_view(self, kind: str, seq: int, build: Callable[[Any], Any], rows: dict[int, Any]) -> Any:
        """One text view (``chunks`` or ``lexical``) from its file: at ``seq`` as it is; older, patched
        with the rows the journal says changed since (``sidecar.read_chain``). None when there is no
        file, no unbroken chain, or the database has rows neither the file nor the journal accounts
        for (a writer that did not advance the change counter): the caller rebuilds."""
        directory = self.dir
        snap = sidecar.load_arrays(directory, kind, seq)
        delta: dict[str, np.ndarray] = {}
        if snap is None:
            snap = sidecar.load_latest(directory, kind)
            if snap is None:
                return None
            chain = sidecar.read_chain(directory, snap.change_seq, seq, max_ids=CATCH_UP_MAX_IDS)
            if chain is None:
                return None
            delta = chain
        view = _guarded(build, snap)
        if view is None:
            return None
        if kind == "chunks":
            top = view.n - 1
        else:
            ids = view.doc_ids()  # ascending: the last is the highest
            top = int(ids[-1]) if len(ids) else -1
        if not self.accounted(snap.meta, delta, max_nid=top):
            return None
        nids = np.unique(np.concatenate([delta.get(k, _NO_IDS) for k in ("ci", "cu", "ct")])) if delta else _NO_IDS
        want = [n for n in nids.tolist() if n not in rows]
        if want:
            rows.update(self.store.chunk_rows_by_nid(want))
        mine = {n: rows[n] for n in nids.tolist() if n in rows}
        if kind == "chunks":
            if mine:
                view.load(columns_of(mine))
        else:
            retext = set(delta.get("ct", _NO_IDS).tolist())
            fresh = []
            for nid, row in sorted(mine.items()):
                if row.valid_to is not None:
                    if nid in view:
                        view.remove(nid)
                elif nid not in view:
                    fresh.append((nid, row.text))
                elif nid in retext:
                    view.update(nid, row.text)
            if fresh:
                view.add_many(fresh)
        self.file_seq[kind] = snap.change_seq
        if snap.change_seq != seq:
            if len(nids):  # the file is behind the view by the journal's rows: never restamped
                self.behind.add(kind)
            n_ids = int(sum(len(v) for v in delta.values()))
            done = self.caught_up[1] if self.caught_up is not None else 0
            self.caught_up = (snap.change_seq, max(done, n_ids))
            log.debug("causalmem: %s file caught up from the journal (%d rows)", kind, len(nids))
        return view

    def accounted(self, meta: dict, delta: dict[str, np.ndarray], *, max_nid: int | None = None) -> bool:
        """Whether every chunk / edge row above the highest id a file recorded at its save (its meta
        ``max_nid`` — the chunk table's — or ``max_eid`` — the graph's) is one the journal names:
        rows *inserted* by a writer that does not advance ``change_seq`` (another SQLite client) are
        noticed here, on the exact path and on a catch-up alike, and the views rebuilt. (That
        writer's updates and deletes of existing rows are not: docs, "Index files".)"""
        rows_above = getattr(self.store, "rows_above", None)
        if rows_above is None:
            return True
        none = 1 << 62
        top_nid = int(meta.get("max_nid", none if max_nid is None else max_nid))
        top_eid = int(meta.get("max_eid", none))
        ci, ei = delta.get("ci", _NO_IDS), delta.get("ei", _NO_IDS)
        want = (int(np.count_nonzero(ci > top_nid)), int(np.count_nonzero(ei > top_eid)))
        got = tuple(rows_above(top_nid, top_eid))
        if got != want:
            log.info("causalmem: %s holds rows its index files and their journal do not know (%d chunks / %d edges "
                     "above the saved ids, %d / %d expected): a writer that does not advance the change counter? "
                     "Rebuilding the views", self.store.path, got[0], got[1], want[0], want[1])
            return False
        return True

    def restore_projection(self) -> Any:
        """The projection's graph from its file when it matches the store now (else None); an older
        file with a journal that has the whole way comes with the patch that catches it up."""
        seq = self.seq if self.seq is not None else self.read_seq()
        if seq is None or (self.seq is not None and self.read_seq() != seq):
            return None
        snap = sidecar.load_arrays(self.dir, "projection", seq)
        patch: Callable[[], None] | None = None
        delta: dict[str, np.ndarray] = {}
        if snap is None:  # an older file: caught up from the journal when it has the whole way
            snap = sidecar.load_latest(self.dir, "projection")
            if snap is None:
                return None
            chain = sidecar.read_chain(self.dir, snap.change_seq, seq, max_ids=CATCH_UP_MAX_IDS)
            if chain is None or "eu" in chain or "o" in chain:  # reweighted / restored / learned: rebuild
                return None
            delta = chain
            patch = lambda: self._catch_up_projection(chain)  # noqa: E731
        if not self.accounted(snap.meta, delta):
            return None
        graph = _guarded(lambda s: CausalGraph.from_state_arrays(s.arrays), snap)
        if graph is None:
            return None
        self.file_seq["projection"] = snap.change_seq
        # adopt() bumps the version once: the saved copy is that version (a patch bumps it again)
        self.graph_saved = self.host.projection.version + 1
        return graph, snap.arrays, snap.meta, patch

    def _catch_up_projection(self, delta: dict[str, np.ndarray]) -> None:
        """Patch the graph adopted from an older file with the journal's edge and chunk changes, as
        this process's own writes would have (new edges into the overlay, invalidated edges and
        deleted chunks masked)."""
        proj = self.host.projection
        before = proj.version
        ei, ex = delta.get("ei", _NO_IDS), delta.get("ex", _NO_IDS)
        if len(ei):
            for eid, src, dst, code, conf, valid in self.store.edge_states(ei.tolist()):
                if valid:
                    proj.edge_added(eid, src, dst, Relation.from_code(code), conf)
        for eid in ex.tolist():
            proj.edge_invalidated(eid)
        cu = delta.get("cu", _NO_IDS)
        if len(cu):
            for nid, row in self.store.chunk_rows_by_nid(cu.tolist()).items():
                if row.valid_to is not None:
                    proj.node_deleted(nid)
        ci = delta.get("ci", _NO_IDS)
        if len(ci):
            proj.n_nodes = max(proj.n_nodes, int(ci[-1]) + 1)
        # not counted as writes of this process: the lazy-rebuild rule (SPEC §2: 5 writes or 30 s)
        # would otherwise rebuild the whole graph on a fresh reader's first query after one write
        # elsewhere (seconds at 1M); the overlay is exact, and its size rule still folds it
        if proj.version != before:  # the file is behind by the journal's rows (not an own change)
            self.graph_saved = proj.version
            self.behind.add("projection")

    # ------------------------------------------------------------------ the journal
    def note(self, kind: str, ids: Sequence[int] | np.ndarray) -> None:
        """The current write changed rows ``ids`` of journal kind ``kind``."""
        if self.jdelta is not None:
            self.jdelta.setdefault(kind, []).extend(int(i) for i in ids)

    def journal_commit(self) -> None:
        """After an own commit: one journal line from the counter before to the counter after."""
        delta, self.jdelta = self.jdelta, {}
        if self.dir is None or delta is None:
            return
        committed = getattr(self.store, "committed_seq", None)
        before = getattr(self.store, "committed_from", None)
        if committed is None or before is None:
            return  # nothing changed, or this commit started the counter (no file can be older)
        sidecar.append_journal(self.dir, before, committed, delta)

    def track_commit(self, vectors: Any) -> None:
        """After an own commit: the views (and the vector index) now hold the committed state if they
        held the one before it."""
        if not hasattr(self.store, "committed_seq"):
            self.seq = None
            if vectors is not None:
                vectors.seq = None
            return
        committed = self.store.committed_seq
        if committed is None:
            return  # nothing changed
        self.changed = True
        before = getattr(self.store, "committed_from", None)
        self.seq = committed if self.seq is not None and before is not None and self.seq == before else None
        if vectors is not None:
            vectors.seq = committed if vectors.seq is not None and before is not None and vectors.seq == before \
                else None

    def purged(self) -> None:
        """After a purge's commit (the caller holds ``sidecar.index_lock``): every file of the
        directory goes, and a new purge token (see ``Views.purged``)."""
        sidecar.purge_files(self.dir)
        self.changed = True
        try:
            self.purge_seen = sidecar.new_purge_token(self.dir)
        except OSError as exc:  # after the commit: the call succeeded; the token is gone, which every
            # process holding the old one reads as a purge too (``new_purge_token``)
            log.warning("causalmem: cannot write the purge token in %s after a purge (%s): removed instead",
                        self.dir, exc)
            self.purge_seen = None
        self.file_seq.clear()
        self.graph_saved = None

    # ------------------------------------------------------------------ saving
    def needs_build(self, seq: int) -> bool:
        """Whether a fresh process opening the store at ``seq`` would rebuild a view from the database:
        a file missing, newer than the store, or older by more than a short journal chain
        (``CATCH_UP_KEEP`` ids; the projection's chain also without reweights or learned links, which
        ``restore_projection`` refuses). Headers and the journal only: cheap enough for every close."""
        for kind in sidecar.KINDS:
            have = sidecar.header_seq(self.dir, kind)
            if have is None or have > seq:
                return True
            if have == seq:
                continue
            chain = sidecar.read_chain(self.dir, have, seq, max_ids=CATCH_UP_KEEP)
            if chain is None or (kind == "projection" and ("eu" in chain or "o" in chain)):
                return True
        return False

    def save(self) -> list[str]:
        """Write the views that changed to ``<db>.idx/`` (at ``close``); returns the kinds written.

        A view is saved only when the views hold exactly the store's current state (``change_seq``
        known and unchanged since); the projection only when it has no write overlay or deferred
        change. Never raises: a failed save leaves an older file, which its header disowns."""
        directory = self.dir
        if directory is None or getattr(self.store, "read_only", False):
            return []
        written: list[str] = []
        with self.host.lock:
            try:
                self.host.sync_external()
                seq = self.seq
                if seq is None or self.read_seq() != seq:
                    return []
                written = self._save_locked(directory, seq)
            except Exception as exc:  # a full disk or a read-only directory must not fail close()
                log.warning("causalmem: could not save the index files in %s: %s", directory, exc)
        return written

    def _save_locked(self, directory: Path, seq: int) -> list[str]:
        """``save`` under the index directory's lock: the state checked again there (a purge by
        another process holds the lock from before its commit until its files are gone, so a view
        that still holds purged rows is never written after it)."""
        written: list[str] = []
        host = self.host
        with sidecar.index_lock(directory):
            host.sync_external()
            if self.seq != seq or self.read_seq() != seq:
                return written
            items: list[tuple[str, Callable[[], tuple[dict, dict] | None]]] = []
            if host.chunks is not None:
                items.append(("chunks", host.chunks.to_arrays))
            if host.lexical is not None:
                items.append(("lexical", host.lexical.to_arrays))
            proj = host.projection
            if proj.savable():
                if proj.version != self.graph_saved:
                    self.dirty.add("projection")
                items.append(("projection", proj.state))
            caught = self.caught_up[1] if self.caught_up is not None else 0
            for kind, get in items:
                if kind in self.behind and kind not in self.dirty:
                    if caught <= CATCH_UP_KEEP:
                        continue  # the next open catches up as this one did: no rewrite
                elif kind not in self.dirty and self.file_seq.get(kind) == seq:
                    continue
                elif kind not in self.dirty and kind in self.file_seq and \
                        sidecar.restamp(directory, kind, self.file_seq[kind], seq):
                    self.file_seq[kind] = seq
                    continue
                state = get()
                if state is None:
                    continue
                if hasattr(self.store, "row_tops"):  # at seq (checked above), for ``accounted``
                    top_nid, top_eid = self.store.row_tops()
                    state[1]["max_eid" if kind == "projection" else "max_nid"] = \
                        top_eid if kind == "projection" else top_nid
                sidecar.save_arrays(directory, kind, seq, state[0], state[1])
                self.file_seq[kind] = seq
                self.dirty.discard(kind)
                self.behind.discard(kind)
                written.append(kind)
                if kind == "projection":
                    self.graph_saved = proj.version
            seqs = [sidecar.header_seq(directory, kind) for kind in sidecar.KINDS]
            known = [q for q in seqs if q is not None]
            if known:  # entries every file is past serve no catch-up any more
                sidecar.prune_journal(directory, min(known))
        return written


def columns_of(rows: dict[int, Any]) -> ChunkColumns:
    """Chunk rows by nid as one column batch for ``ChunkTable.load`` (texts left out)."""
    r = [rows[n] for n in sorted(rows)]
    return ChunkColumns(
        nid=tuple(x.nid for x in r), kind=tuple(x.kind for x in r),
        created_at=tuple(x.created_at for x in r), event_time=tuple(x.event_time for x in r),
        q_value=tuple(x.q_value for x in r), importance=tuple(x.importance for x in r),
        user_id=tuple(x.user_id for x in r), agent_id=tuple(x.agent_id for x in r),
        run_id=tuple(x.run_id for x in r), session_id=tuple(x.session_id for x in r),
        alive=tuple(int(x.valid_to is None) for x in r), text=None)


def _guarded(build: Callable[[Any], Any], snap: sidecar.Snapshot) -> Any:
    """``build(snap)`` with a damaged snapshot's errors turned into None (rebuild from the store)."""
    try:
        return build(snap)
    except Exception as exc:
        log.info("causalmem: sidecar %s not used (%s: %s); rebuilding from the database", snap.path,
                 type(exc).__name__, exc)
        return None
