"""The in-process views of one store, kept in step with it after every commit.

``Views`` owns what the pipelines read instead of SQL: the CSR projection (with its write
overlay), the chunk table (scope masks, Q, times), the BM25 index and the vector index, plus the
embedder that fills the vectors. It is also the narrow interface the pipelines receive (never a
``Memory``): ``store``, ``config``, ``lock``, ``now()``, ``tables()``, ``vector_index()``,
``encode()`` and ``write()``.

Write protocol: ``with views.write() as fx:`` opens one store transaction (nested writes become
savepoints) under the in-process lock; pipelines append *after-commit effects* to ``fx`` through
the ``*_added``/``*_deleted``/... helpers below; they run only once the outermost transaction
committed, so a rolled-back write never leaves an index ahead of the store. Another process's
commit (the store's ``data_version``) is noticed at the next read or write and patched in by difference.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from . import sidecar
from .chunks import ChunkTable
from .metadata_filter import FilterCache
from .embedding import CLOSE_DRAIN_S, EmbeddingWorker, HandOff, OwnRows, Progress, continue_handed_off, \
    embed_pending, embed_rows, hand_off, handoff_setting, model_loaded
from .config import Config
from .lexical import BM25Index
from .graph import CausalGraph
from .projection import Projection
from .semantic import Embedder
from .vector_index import UNKNOWN_HASH, IndexKeeper, VectorIndex, decode_rows
from .store.base import ChunkColumns, StoreBackend, text_hash
from .errors import StoreError
from .types import Relation, check_clock_value
from .background import Background
from .reinforcement import Reinforcement
from .view_vectors import FAST_LOAD_WAIT_S, SCOPE_FROM_STORE, PendingQuery, VectorView  # noqa: F401
from .write_gate import WriteGate

log = logging.getLogger("causalmem")

__all__ = ["Views", "NewChunk", "Effects", "Scope"]

#: seconds after open before the background worker looks for an earlier process's queue
RESUME_DELAY_S = 1.0
#: seconds after a write before a worker not yet running starts (and loads the model)
WORKER_START_DELAY_S = 0.5
#: a catch-up from the journal re-reads at most this many row ids; more: rebuild from the database
CATCH_UP_MAX_IDS = 200_000
#: a process that caught up this many ids or fewer (and changed nothing itself) leaves the files
#: and the journal as they are at close; more, and it saves the views (the journal is pruned)
CATCH_UP_KEEP = 5_000
_NO_IDS = np.zeros(0, np.int64)
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


class Views:
    """Projection, chunk table, BM25 and vector index of one store, and the write protocol."""

    def __init__(self, store: StoreBackend, config: Config, clock: Callable[[], float] | None = None, *,
                 embedder: Any = "auto", lock: threading.RLock | None = None) -> None:
        self.store = store
        self.config = config
        self.clock: Callable[[], float] = clock or time.time
        self.lock = lock if lock is not None else threading.RLock()
        self.projection = Projection(store.projection_arrays, config, self.clock)
        # sidecar snapshots (``<db>.idx/``): which store state (change_seq) the views hold, exactly,
        # or None when unknown (then nothing is saved); which views changed since loaded/saved
        self.sidecar_dir = sidecar.sidecar_dir(getattr(store, "path", None))
        self._seq: int | None = None
        self._dirty: set[str] = set()
        self._file_seq: dict[str, int] = {}  # kind -> change_seq in that file's header
        self._graph_saved: int | None = None  # the projection version the projection file holds
        # ids of the rows the current write changed, by journal kind (``sidecar.append_journal``);
        # None when the write cannot be described that way (a purge): then no entry, a gap
        self._jdelta: dict[str, list[int]] | None = {}
        # the purge token the views reflect (read before the rows they hold): a vector index build from
        # them is saved only while the directory's token is still this one (``sidecar.new_purge_token``)
        self.purge_seen = sidecar.purge_token(self.sidecar_dir)
        if self.sidecar_dir is not None:
            self.projection.restore = self._restore_projection
        self.chunks: ChunkTable | None = None
        self.lexical: BM25Index | None = None
        # which chunks match the metadata filters searches used (``metadata_filter.FilterCache``): nids
        # forgotten when their metadata may have changed (own writes: ``metadata_changed``; another
        # connection's: ``sync_external``), all of it on a purge
        self.meta_cache = FilterCache()
        self._embedder_spec = embedder
        self._effects: Effects | None = None
        self._data_version = store.data_version()
        self._updates_seen = store.last_update_event()
        #: the owner of this store's background threads and child processes (``background``)
        self.background = Background(str(getattr(store, "path", ":memory:")))
        #: searches' access counts and Hebbian credit waiting for a write (``reinforcement``)
        self.reinforcement = Reinforcement(self, spawn=self.background.thread)
        self.background.add("reinforce", self._stop_flusher)
        self.projection.pending_learned = \
            lambda: [(a, b, d) for (a, b), d in self.reinforcement.pending_all().items()]
        self._worker: EmbeddingWorker | None = None
        self.write_gate = WriteGate()  # writes in flight: the background worker waits for a quiet moment
        #: the embedder, query vectors and the vector index (``view_vectors``)
        self.vector_view = VectorView(self, embedder)
        self.keeper = IndexKeeper(self)  # loads, folds and persists the vector index (its own thread)
        self.background.add("vectors", self.keeper.stop)
        self._embed_queued = False  # this write committed chunks (or texts) without vectors
        self._closed = False
        #: (the index files' change_seq, ids re-read) when the views were caught up from the journal
        self.caught_up: tuple[int, int] | None = None
        # views whose file is older than them by the journal's rows (a catch-up): saved in full, or
        # left as they are when the catch-up was small (``CATCH_UP_KEEP``), never restamped
        self._behind: set[str] = set()
        self.embed_lock = threading.Lock()  # one embedding pass at a time (worker or reembed)
        self.embedded_below = 0  # every live chunk with nid <= this has a current vector (a hint)
        self.mark_resets = 0  # bumped whenever the hint is reset
        #: what close() does with this process's rows still without a vector ("auto", "drain", "off")
        try:
            self.handoff = handoff_setting(config.embed_handoff)
        except ValueError:
            store.close()
            raise
        self.own_rows = OwnRows()  # the chunks this process queued (the bound of a close-time hand-off)
        #: set in a ``causalmem embed`` started by a hand-off: it embeds the rows it was handed, no more
        self.handed_off = HandOff.take_from_env() if embedder is not None else None
        self.handoff_child = self.handed_off is not None  # then no background worker ever starts here
        if embedder is not None and getattr(store, "path", ":memory:") != ":memory:" and not self.handoff_child:
            # the queue of an earlier process (crash, close without drain) resumes shortly after open
            worker = self.worker
            if worker is not None:
                worker.kick_later(RESUME_DELAY_S)

    def now(self) -> float:
        """The clock, refused outside 1990 .. now + 1 year (a millisecond clock retires everything)."""
        return check_clock_value(self.clock(), "clock")

    # ------------------------------------------------------------------ background embedding
    def reset_embedded_mark(self) -> None:
        """Forget the low-water mark of the embedding queue (the next pass scans every chunk)."""
        self.embedded_below = 0
        self.mark_resets += 1

    @property
    def worker(self) -> EmbeddingWorker | None:
        """The background embedding worker (None when the semantic channel is off)."""
        if self._worker is None and self._embedder_spec is not None and not self._closed \
                and not getattr(self.store, "read_only", False):  # a read-only open cannot store vectors
            self._worker = EmbeddingWorker(self, owner=self.background)
        return self._worker

    def queue_changed(self) -> None:
        """Chunks without vectors were committed: wake the background worker (its first start is
        deferred by ``WORKER_START_DELAY_S``: a one-shot writer closes before it loads the model)."""
        if self._embedder_spec is None or self._closed or self.handoff_child:
            return
        worker = self.worker
        if worker is not None:
            worker.kick_deferred(WORKER_START_DELAY_S)

    def wait_embedded(self, timeout: float | None = None) -> bool:
        """Block until every chunk committed so far has a vector (True), or ``timeout`` passed."""
        emb = self.embedder if self._embedder_spec is not None else None
        if emb is None:
            return True
        worker = self.worker
        deadline = None if timeout is None else time.monotonic() + timeout
        if worker is None:  # read-only (or closed): nobody embeds; say whether anything is missing
            with self.lock:
                done = not self.store.chunks_missing_embedding(emb.model_name, limit=1)
        else:
            done = worker.wait(timeout)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return self.wait_vectors(left) and done

    def wait_vectors(self, timeout: float | None = None, *, folded: bool = False) -> bool:
        """Block until the vector index holds every stored vector (loaded: searchable, exact or not);
        ``folded=True`` also waits for the keeper's pending folds / saves. False on timeout."""
        if self.embedder is None or self._closed:
            return True
        with self.lock:
            vi = self.vector_index()
        if vi is None:
            return True
        if not vi.ready_event.wait(timeout):
            return False
        return self.keeper.wait_idle(timeout) if folded else True

    def close(self, *, drain: bool = False) -> None:
        """``Memory.close``: stop the worker (``drain``: after it embedded the queue; else the rule of
        ``embedding.py`` for this process's own rows, ``Config.embed_handoff``), write the queued
        reinforcement (dropped with a log line if the file refuses it), close the store, and hand
        what is left of the own rows to a detached ``causalmem embed`` when the rule says so."""
        rows = None if drain else self._settle_queue()
        self.stop_worker(drain=drain)  # outside the lock: the worker's last batch needs it
        with self.lock:
            if getattr(self.store, "_closed", False):
                self.background.close()
                return
            try:
                self.flush_reinforcement(wait=True)
            except StoreError as exc:
                self.drop_reinforcement(str(exc))
            finally:
                try:
                    self.background.stop("reinforce")
                    self.save_sidecars()  # never raises
                    self.stamp_vectors()  # never raises
                finally:
                    self.store.close()  # ends the WAL checkpointer thread (SQLite)
        self.background.close()  # joins every thread of this store (the store is closed: none needs it)
        if rows is not None and self.sidecar_dir is not None:
            hand_off(str(self.store.path), str(self._embedder_spec), self.sidecar_dir, rows,
                     spawn=self.background.spawn)

    def _settle_queue(self) -> OwnRows | None:
        """At close, the own rows still without a vector: embedded here — for at most ``CLOSE_DRAIN_S``
        when the model is loaded, or all of them with ``embed_handoff="drain"`` — and what is left
        returned when it is to be handed off (``"auto"``, a file store, an embedder spec), else None."""
        worker = self._worker
        if worker is None or not self.own_rows or self._closed or self._embedder_spec is None:
            return None
        with self.lock:
            rows = self.own_rows.past(self.embedded_below) if self.embedded_below > 0 else self.own_rows
        drain_all = self.handoff == "drain"
        if not drain_all and not model_loaded(self.vector_view.resolved):
            return self._handoff_rows(rows)
        worker.stop()  # its current sub-batch ends; the own rows are embedded here instead
        try:
            _, complete = embed_rows(self, rows, batch_size=64,
                                     deadline=None if drain_all else time.monotonic() + CLOSE_DRAIN_S)
        except Exception as exc:  # the embedder failed: the queue stays in the store
            log.warning("causalmem: embedding at close failed: %s", exc)
            return None
        return None if complete else self._handoff_rows(rows)

    def _handoff_rows(self, rows: OwnRows) -> OwnRows | None:
        """``rows`` to hand to a detached ``causalmem embed``, or None when this store/embedder/setting
        cannot or must not; with only older texts changed, the child also watches chunks from the
        next id up (rows other writers commit while it runs)."""
        if self.handoff != "auto" or not isinstance(self._embedder_spec, str) or self.sidecar_dir is None:
            return None
        if rows.floor is None:
            with self.lock:
                rows = OwnRows(self.store.max_chunk_nid() + 1, rows.ids)
        return rows

    def flush(self) -> int:
        """``Memory.flush``: wait for every vector, then write the queued reinforcement."""
        self.wait_embedded(None)  # outside the lock: the worker needs it to store vectors
        with self.lock:
            return self.flush_reinforcement(wait=True)

    def stop_worker(self, drain: bool = False) -> None:
        """Stop the worker (after draining the queue when ``drain``); the queue stays in the store."""
        if drain:
            self.wait_embedded()
        self._closed = True
        self.background.stop("query", "embed", "vectors")

    def reembed(self, model_name: str, progress: Progress | None = None) -> int:
        """Vectors for every chunk whose text or model changed, in this thread; returns how many."""
        handed, self.handed_off = self.handed_off, None
        if handed is not None and handed.rows is not None:  # a handed-off ``causalmem embed``: its rows only
            done = embed_rows(self, handed.rows)[0]
        else:
            with self.lock:
                self.reset_embedded_mark()  # look at every chunk
            done = embed_pending(self, progress=progress)
        return done + continue_handed_off(self, handed)  # a handed-off one: until no newer rows come

    # ------------------------------------------------------------------ reads
    def tables(self) -> tuple[ChunkTable, BM25Index]:
        """Chunk columns and the BM25 index, built from the store on first use."""
        self.sync_external()
        if self.chunks is None or self.lexical is None:
            self._updates_seen = self.store.last_update_event()
            seq = self._read_seq()  # before reading rows: the views can only be newer than seq
            table, index = self._load_tables(seq)
            if table is None or index is None:
                fresh_table, fresh_index = ChunkTable(), BM25Index()
                for cols in self.store.chunk_columns(with_text=index is None):
                    if table is None:
                        fresh_table.load(cols)
                    if index is None:
                        assert cols.text is not None
                        fresh_index.add_many([(n, t) for n, t, a in zip(cols.nid, cols.text, cols.alive) if a])
                if table is None:
                    table = fresh_table
                    self._dirty.add("chunks")
                if index is None:
                    index = fresh_index
                    self._dirty.add("lexical")
            self.chunks, self.lexical = table, index
            self._seq = seq
        return self.chunks, self.lexical

    # ------------------------------------------------------------------ sidecar snapshots
    def read_seq(self) -> int | None:
        """The store's change counter; None when the backend has none or the database has never
        been written by a version that keeps it (0): index files are neither trusted nor saved then."""
        change_seq = getattr(self.store, "change_seq", None)
        value = 0 if change_seq is None else int(change_seq())
        return value if value > 0 else None

    _read_seq = read_seq

    def _load_tables(self, seq: int | None) -> tuple[ChunkTable | None, BM25Index | None]:
        """Chunk table and BM25 index from their sidecar files: each as saved when it matches
        ``seq``, else caught up from the journal when the file is older and the journal has the
        whole way (``_catch_up``); None for a view rebuilt from the database."""
        if self.sidecar_dir is None or seq is None:
            return None, None
        rows: dict[int, Any] = {}  # chunk rows the journal names, read once for both views
        table = self._load_view("chunks", seq, lambda sn: ChunkTable.from_arrays(sn.arrays, sn.meta), rows)
        index = self._load_view("lexical", seq, lambda sn: BM25Index.from_arrays(sn.arrays, sn.meta), rows)
        return table, index

    def _catch_up_limit(self) -> int:
        """Most row ids a catch-up re-reads (beyond that a rebuild from the database is as cheap)."""
        return CATCH_UP_MAX_IDS

    def _load_view(self, kind: str, seq: int, build: Callable[[Any], Any], rows: dict[int, Any]) -> Any:
        """One text view (``chunks`` or ``lexical``) from its file: at ``seq`` as it is; older, patched
        with the rows the journal says changed since (``sidecar.read_chain``). None when there is no
        file, no unbroken chain, or the database has rows neither the file nor the journal accounts
        for (a writer that did not advance the change counter): the caller rebuilds."""
        directory = self.sidecar_dir
        snap = sidecar.load_arrays(directory, kind, seq)
        delta: dict[str, np.ndarray] = {}
        if snap is None:
            snap = sidecar.load_latest(directory, kind)
            if snap is None:
                return None
            chain = sidecar.read_chain(directory, snap.change_seq, seq, max_ids=self._catch_up_limit())
            if chain is None:
                return None
            delta = chain
        view = _guarded(build, snap)
        if view is None:
            return None
        if kind == "chunks":
            top = view.n - 1
        else:
            ids = view.doc_ids()
            top = int(ids.max()) if len(ids) else -1
        if not self._accounted(snap.meta, delta, max_nid=top):
            return None
        nids = np.union1d(np.union1d(delta.get("ci", _NO_IDS), delta.get("cu", _NO_IDS)), delta.get("ct", _NO_IDS))
        want = [n for n in nids.tolist() if n not in rows]
        if want:
            rows.update(self.store.chunk_rows_by_nid(want))
        mine = {n: rows[n] for n in nids.tolist() if n in rows}
        if kind == "chunks":
            if mine:
                view.load(_columns_of(mine))
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
        self._file_seq[kind] = snap.change_seq
        if snap.change_seq != seq:
            if len(nids):  # the file is behind the view by the journal's rows: never restamped
                self._behind.add(kind)
            n_ids = int(sum(len(v) for v in delta.values()))
            done = self.caught_up[1] if self.caught_up is not None else 0
            self.caught_up = (snap.change_seq, max(done, n_ids))
            log.debug("causalmem: %s file caught up from the journal (%d rows)", kind, len(nids))
        return view

    def _accounted(self, meta: dict, delta: dict[str, np.ndarray], *, max_nid: int | None = None) -> bool:
        """Whether every chunk / edge row above the highest id a file recorded at its save (its meta
        ``max_nid`` — the chunk table's — or ``max_eid`` — the graph's) is one the journal names:
        rows *inserted* by a writer that does not advance ``change_seq`` (another SQLite client) are
        noticed here, on the exact path and on a catch-up alike, and the views rebuilt. (That
        writer's updates and deletes of existing rows are not: README, "Index files".)"""
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

    def _before_write(self) -> None:
        """Hook before the first statement of an outer write (tests put another process's commit here).

        A process that only writes never loads the index files: its commits go to the journal
        (``_journal_commit``) and the next process that reads catches up from it."""

    def note(self, kind: str, ids: Sequence[int] | np.ndarray) -> None:
        """The current write changed rows ``ids`` of journal kind ``kind``."""
        if self._jdelta is not None:
            self._jdelta.setdefault(kind, []).extend(int(i) for i in ids)

    _note = note

    def _journal_commit(self) -> None:
        """After an own commit: one journal line from the counter before to the counter after."""
        delta, self._jdelta = self._jdelta, {}
        directory = self.sidecar_dir
        if directory is None or delta is None:
            return
        committed = getattr(self.store, "committed_seq", None)
        before = getattr(self.store, "committed_from", None)
        if committed is None or before is None:
            return  # nothing changed, or this commit started the counter (no file can be older)
        sidecar.append_journal(directory, before, committed, delta)

    def _restore_projection(self) -> Any:
        """The projection's graph from its sidecar when it matches the store now (else None)."""
        seq = self._seq if self._seq is not None else self._read_seq()
        if seq is None or (self._seq is not None and self._read_seq() != seq):
            return None
        snap = sidecar.load_arrays(self.sidecar_dir, "projection", seq)
        patch: Callable[[], None] | None = None
        delta: dict[str, np.ndarray] = {}
        if snap is None:  # an older file: caught up from the journal when it has the whole way
            snap = sidecar.load_latest(self.sidecar_dir, "projection")
            if snap is None:
                return None
            chain = sidecar.read_chain(self.sidecar_dir, snap.change_seq, seq, max_ids=self._catch_up_limit())
            if chain is None or "eu" in chain or "o" in chain:  # reweighted / restored / learned: rebuild
                return None
            delta = chain
            patch = lambda: self._catch_up_projection(chain)  # noqa: E731
        if not self._accounted(snap.meta, delta):
            return None
        graph = _guarded(lambda s: CausalGraph.from_state_arrays(s.arrays), snap)
        if graph is None:
            return None
        self._file_seq["projection"] = snap.change_seq
        # adopt() bumps the version once: the saved copy is that version (a patch bumps it again)
        self._graph_saved = self.projection.version + 1
        return graph, snap.arrays, snap.meta, patch

    def _catch_up_projection(self, delta: dict[str, np.ndarray]) -> None:
        """Patch the graph adopted from an older file with the journal's edge and chunk changes, as
        this process's own writes would have (new edges into the overlay, invalidated edges and
        deleted chunks masked)."""
        proj = self.projection
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
            self._graph_saved = proj.version
            self._behind.add("projection")

    def save_sidecars(self) -> list[str]:
        """Write the views that changed to ``<db>.idx/`` (at ``close``); returns the kinds written.

        A view is saved only when the views hold exactly the store's current state (``change_seq``
        known and unchanged since); the projection only when it has no write overlay or deferred
        change. Never raises: a failed save leaves an older file, which its header disowns."""
        directory = self.sidecar_dir
        if directory is None or getattr(self.store, "read_only", False):
            return []
        written: list[str] = []
        with self.lock:
            try:
                self.sync_external()
                seq = self._seq
                if seq is None or self._read_seq() != seq:
                    return []
                written = self._save_locked(directory, seq)
            except Exception as exc:  # a full disk or a read-only directory must not fail close()
                log.warning("causalmem: could not save the index files in %s: %s", directory, exc)
        return written

    def _save_locked(self, directory: Path, seq: int) -> list[str]:
        """``save_sidecars`` under the index directory's lock: the state checked again there (a purge
        by another process holds the lock from before its commit until its files are gone, so a view
        that still holds purged rows is never written after it)."""
        written: list[str] = []
        with sidecar.index_lock(directory):
            self.sync_external()
            if self._seq != seq or self._read_seq() != seq:
                return written
            items: list[tuple[str, Callable[[], tuple[dict, dict] | None]]] = []
            if self.chunks is not None:
                items.append(("chunks", self.chunks.to_arrays))
            if self.lexical is not None:
                items.append(("lexical", self.lexical.to_arrays))
            proj = self.projection
            if proj.savable():
                if proj.version != self._graph_saved:
                    self._dirty.add("projection")
                items.append(("projection", proj.state))
            caught = self.caught_up[1] if self.caught_up is not None else 0
            for kind, get in items:
                if kind in self._behind and kind not in self._dirty:
                    if caught <= CATCH_UP_KEEP:
                        continue  # the next open catches up as this one did: no rewrite
                elif kind not in self._dirty and self._file_seq.get(kind) == seq:
                    continue
                elif kind not in self._dirty and kind in self._file_seq and \
                        sidecar.restamp(directory, kind, self._file_seq[kind], seq):
                    self._file_seq[kind] = seq
                    continue
                state = get()
                if state is None:
                    continue
                if hasattr(self.store, "row_tops"):  # at seq (checked above), for ``_accounted``
                    top_nid, top_eid = self.store.row_tops()
                    state[1]["max_eid" if kind == "projection" else "max_nid"] = \
                        top_eid if kind == "projection" else top_nid
                sidecar.save_arrays(directory, kind, seq, state[0], state[1])
                self._file_seq[kind] = seq
                self._dirty.discard(kind)
                self._behind.discard(kind)
                written.append(kind)
                if kind == "projection":
                    self._graph_saved = proj.version
            seqs = [sidecar.header_seq(directory, kind) for kind in sidecar.KINDS]
            known = [q for q in seqs if q is not None]
            if known:  # entries every file is past serve no catch-up any more
                sidecar.prune_journal(directory, min(known))
        return written

    # ------------------------------------------------------------------ the vector side (``view_vectors``)
    @property
    def vectors(self) -> VectorIndex | None:
        """The vector index (None until first use, or after a reset)."""
        return self.vector_view.index

    @vectors.setter
    def vectors(self, index: VectorIndex | None) -> None:
        self.vector_view.index = index

    @property
    def embedder(self) -> Embedder | None:
        """The resolved embedder (``None`` when the semantic channel is off)."""
        return self.vector_view.embedder

    @property
    def _embedder(self) -> Embedder | None:
        return self.vector_view.resolved

    @property
    def embedder_name(self) -> str | None:
        return self.vector_view.embedder_name

    @property
    def query_cache(self) -> Any:
        return self.vector_view.query_cache

    def encode(self, texts: Sequence[str]) -> np.ndarray | None:
        return self.vector_view.encode(texts)

    def encode_query(self, query: str) -> np.ndarray | None:
        return self.vector_view.encode_query(query)

    def encode_query_later(self, query: str) -> PendingQuery:
        return self.vector_view.encode_query_later(query)

    def store_vectors(self, items: Sequence[tuple[int, str, np.ndarray]]) -> None:
        self.vector_view.store_vectors(items)

    def vectors_stored(self, fx: Effects, nids: Sequence[int], model: str, dim: int,
                       hashes: Sequence[int] | None = None) -> None:
        self.vector_view.vectors_stored(fx, nids, model, dim, hashes)

    def vector_index(self) -> VectorIndex | None:
        return self.vector_view.get_index()

    def vector_search(self, qvec: np.ndarray, top_k: int, mask: np.ndarray | None, *,
                      on_query_thread: bool = False) -> tuple[np.ndarray, np.ndarray]:
        return self.vector_view.search(qvec, top_k, mask, on_query_thread=on_query_thread)

    def cosines(self, qvec: np.ndarray, nids: Sequence[int]) -> dict[int, float]:
        return self.vector_view.cosines(qvec, nids)

    def vectors_of(self, nids: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.vector_view.vectors_of(nids)

    def vector_coverage(self, mask: np.ndarray | None = None) -> tuple[int, int]:
        return self.vector_view.coverage(mask)

    def stamp_vectors(self) -> bool:
        return self.vector_view.stamp()

    # ------------------------------------------------------------------ the write protocol
    @contextlib.contextmanager
    def write(self, *, wait: bool = True, sync: bool = True, background: bool = False) -> Iterator[Effects]:
        """One public write = one transaction; in-memory effects apply only after commit.

        The reinforcement queued by searches is written first, in the same transaction. ``sync=False``
        (a change-log backend, the queue written at the end of a search that has just caught up):
        no second change check; another host's commit since then is noticed by this write (the
        sequence it advances) and caught up with by the next call. A write holds the background
        embedding back while it runs and a moment after (``write_gate``); ``background=True`` is the
        worker's own write of the vectors it made."""
        if background:
            with self._write(wait, sync) as fx:
                yield fx
            return
        self.write_gate.begin()
        try:
            with self._write(wait, sync) as fx:
                yield fx
        finally:
            self.write_gate.end()

    @contextlib.contextmanager
    def _write(self, wait: bool, sync: bool) -> Iterator[Effects]:
        with self.lock:
            outer = self._effects is None
            if outer:
                flusher = self.reinforcement.flusher
                if flusher is not None:
                    flusher.settle()  # a batch the flusher took is written first (see ``settle``)
                if sync or getattr(self.store, "foreign_changes", None) is None:
                    self.sync_external()
                self._before_write()
                self._effects = []
                self._jdelta = {}
            effects = self._effects
            assert effects is not None
            queued: list = []
            try:
                with self.store.transaction(wait=wait):
                    if outer and self.reinforcement.queued:
                        queued = self.reinforcement.take()
                        self._write_reinforcement(effects, queued)
                    yield effects
            except BaseException:
                if outer:
                    self._effects = None
                    self.reinforcement.restore(queued)  # not written: still waiting
                raise
            if outer:
                self._effects = None
                for fx in effects:
                    fx()
                if queued:
                    self.reinforcement.written()
                self._track_commit()
                self._journal_commit()
                # _data_version stays as sync_external left it before this write: this connection's own
                # commit does not change it, and re-reading here would swallow another process's commit
                # that landed meanwhile
                if self._embed_queued:
                    self._embed_queued = False
                    self.queue_changed()

    def _track_commit(self) -> None:
        """After an own commit: the views now hold the committed state if they held the one before."""
        vi = self.vectors
        if not hasattr(self.store, "committed_seq"):
            self._seq = None
            if vi is not None:
                vi.seq = None
            return
        committed = self.store.committed_seq
        if committed is None:
            return  # nothing changed
        before = getattr(self.store, "committed_from", None)
        self._seq = committed if self._seq is not None and before is not None and self._seq == before else None
        if vi is not None:
            vi.seq = committed if vi.seq is not None and before is not None and vi.seq == before else None

    @property
    def tables_seq(self) -> int | None:
        """The store's change_seq the chunk table and BM25 index hold exactly (None: unknown)."""
        return self._seq

    def vector_seq_now(self) -> int | None:
        """The store's change_seq when this process has seen every commit (the caller holds the lock)."""
        return self._read_seq() if self.store.data_version() == self._data_version else None

    def recheck_store(self) -> None:
        """The next call re-reads the store and the purge token (the caller holds the lock)."""
        self._data_version = -1

    def sync_external(self) -> None:
        """Another connection committed: bring the views up to date with the store."""
        dv = self.store.data_version()
        if dv != self._data_version:
            self._data_version = dv
            token = sidecar.purge_token(self.sidecar_dir)  # a purge replaces it before its commit
            if token != self.purge_seen:
                self.meta_cache.clear()  # (another process purged: none of its metadata stays here)
            self.purge_seen = token
            if self.vectors is not None:
                self.vectors.seq = None  # patched from another process's changes: no exact state known
            changes = getattr(self.store, "foreign_changes", None)  # a backend with a change log
            delta = changes() if changes is not None else None
            if delta is None and changes is not None:
                # the change log no longer reaches back (another host far ahead): a purge there cannot be
                # ruled out, and the full re-read below (forget_all) would keep its metadata texts here
                self.meta_cache.clear()
            elif delta is not None:
                if "cd" in delta:  # chunk rows deleted for good (a purge elsewhere)
                    self.meta_cache.clear()
                else:
                    self.meta_cache.forget([*delta.get("ci", ()), *delta.get("cu", ())])
            if delta is None or not self.apply_changes(delta):
                self.resync()

    def apply_changes(self, delta: dict[str, list[int]]) -> bool:
        """Patch the views with the rows another process changed (keys by kind from the store's
        change log: ``ci``/``cu`` chunks inserted/updated, ``ei``/``eu`` edges, ``o*`` co-occurrence,
        ``vi``/``vu`` vectors). False when only a full re-read is exact (rows deleted for good)."""
        if any(k in delta for k in ("cd", "ed", "vd")):
            return False
        self.reset_embedded_mark()
        if self.vectors is not None and not self.vectors.ready:
            self.vectors = None  # still loading: start over from the store as it is now
        self._seq = None  # patched: no longer one exact store state a sidecar snapshot could name
        self._dirty.update(("chunks", "lexical"))
        nids = sorted(set(delta.get("ci", ())) | set(delta.get("cu", ())))
        if nids:
            rows = self.store.chunk_rows_by_nid(nids)
            text_changed = False
            if "cu" in delta:  # a text changes only by an update of an existing chunk
                last = self.store.last_update_event()
                text_changed, self._updates_seen = last != self._updates_seen, last
            if self.chunks is not None and rows:
                self.chunks.load(_columns_of(rows))
            for nid, row in rows.items():
                if row.valid_to is not None:
                    if self.lexical is not None and nid in self.lexical:
                        self.lexical.remove(nid)
                    if self.vectors is not None:
                        self.vectors.remove(nid)
                    self.projection.node_deleted(nid)
                    continue
                if self.lexical is not None:
                    if nid not in self.lexical:
                        self.lexical.add(nid, row.text)
                    elif text_changed:
                        self.lexical.update(nid, row.text)
                if text_changed and self.vectors is not None and nid in set(delta.get("cu", ())):
                    self.vectors.remove(nid)  # the new text's vector arrives as a 'v' change
                self.projection.n_nodes = max(self.projection.n_nodes, nid + 1)
        eids = sorted(set(delta.get("ei", ())) | set(delta.get("eu", ())))
        if eids:
            states = getattr(self.store, "edge_states")(eids)
            graph = self.projection.graph
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
                        self.projection.edge_added(eid, src, dst, Relation.from_code(code), conf)
                elif not valid:
                    self.projection.edge_invalidated(eid)
                else:  # restored or reweighted: rebuilt at the next graph query
                    self.projection.mark_stale()
            self.projection.count_write(len(eids))
        if any(k in delta for k in ("oi", "ou", "od")):  # learned links changed elsewhere: exact rebuild
            self.projection.mark_stale()
        vids = sorted(set(delta.get("vi", ())) | set(delta.get("vu", ())))
        emb = self.vector_view.resolved
        if vids and self.vectors is not None and emb is not None:
            got = self.store.embeddings_of(vids, emb.model_name)
            if got:
                ids, vecs = decode_rows(got, emb.dim)
                alive = self.chunks.alive if self.chunks is not None else None
                if alive is not None:
                    keep = (ids < alive.shape[0]) & alive[np.minimum(ids, max(alive.shape[0] - 1, 0))]
                    ids, vecs = ids[keep], vecs[keep]
                if len(ids):
                    self.vectors.add(ids, vecs)
        if nids:
            self.queue_changed()  # chunks written elsewhere without our model's vectors
        return True

    def after_bulk_change(self) -> None:
        """The store changed under this process's own hand outside ``write()`` (a sleep cycle)."""
        self._data_version = self.store.data_version()  # before re-reading: a later commit is noticed
        self.resync()

    def resync(self) -> None:
        """Re-read chunk columns and patch the text indexes by difference (new, deleted chunks).

        A text *changed* elsewhere (an ``update`` event we did not make) rebuilds them instead."""
        self.projection.mark_stale()
        self.meta_cache.forget_all()  # which chunk's metadata changed is not known
        self.reset_embedded_mark()  # another process may have changed texts or written without vectors
        self._seq = self._read_seq()  # read before the rows: the patched views are at least this new
        self._dirty.update(("chunks", "lexical"))
        if self.chunks is None or self.lexical is None:
            self.chunks = self.lexical = self.vectors = None
            return
        if self.store.last_update_event() != self._updates_seen:
            self.chunks = self.lexical = self.vectors = None
            return
        table = ChunkTable()
        lexical = self.lexical
        for cols in self.store.chunk_columns(with_text=False):
            table.load(cols)
        alive = np.flatnonzero(table.alive[: table.n])
        indexed = lexical.doc_ids()
        gone = np.setdiff1d(indexed, alive, assume_unique=True)
        fresh = np.setdiff1d(alive, indexed, assume_unique=True)
        for nid in gone.tolist():
            lexical.remove(nid)
        if len(fresh):
            lexical.add_many(self.store.texts_of(fresh.tolist()))
        if self.vectors is not None and not self.vectors.ready:
            self.vectors = None  # still loading: start over from the store as it is now
        if self.vectors is not None:
            vids = self.vectors.ids()
            for nid in np.setdiff1d(vids, alive).tolist():
                self.vectors.remove(nid)
            want = np.setdiff1d(alive, vids).tolist()
            emb = self.embedder
            if want and emb is not None:
                got = self.store.embeddings_of(want, emb.model_name)
                if got:
                    self.vectors.add(*decode_rows(got, emb.dim))
                # chunks written elsewhere without our model's vectors are in the worker's queue
        self.chunks = table
        self.queue_changed()  # another process may have written chunks without our model's vectors

    # ------------------------------------------------------------------ after-commit effects
    def chunks_added(self, fx: Effects, chunks: Sequence[NewChunk],
                     vectors: dict[int, np.ndarray] | None = None) -> None:
        """New chunks (and their vectors by nid) enter every view after commit."""
        if not chunks:
            return
        vectors = vectors or {}
        if len(vectors) < len(chunks):
            self._embed_queued = True
            self.own_rows.new_chunks([c.nid for c in chunks if c.nid not in vectors])
        self._note("ci", [c.nid for c in chunks])

        def apply() -> None:
            self._dirty.update(("chunks", "lexical"))
            if self.chunks is not None:
                nid, _t, kind, created, event, q, scope, session = map(list, zip(*chunks))
                users, agents, runs = map(list, zip(*scope))
                self.chunks.set_many(nid, kind=kind, created_at=created, event_time=event, q=q, user_id=users,
                                     agent_id=agents, run_id=runs, session_id=session)
            if self.lexical is not None:
                if len(chunks) == 1:
                    self.lexical.add(chunks[0].nid, chunks[0].text)
                else:
                    self.lexical.add_many([(c.nid, c.text) for c in chunks])
            if self.vectors is not None and vectors:
                texts = {c.nid: c.text for c in chunks}
                self.vectors.add(np.fromiter(vectors, dtype=np.int64, count=len(vectors)),
                                 np.vstack(list(vectors.values())),
                                 [text_hash(texts[n]) if n in texts else UNKNOWN_HASH for n in vectors])
            self.projection.n_nodes = max(self.projection.n_nodes, max([c[0] for c in chunks]) + 1)

        fx.append(apply)

    def edges_added(self, fx: Effects, edges: Sequence[NewEdge]) -> None:
        if not edges:
            return
        self._note("ei", [e.eid for e in edges])

        def apply() -> None:
            for e in edges:
                self.projection.edge_added(e.eid, e.src, e.dst, e.relation, e.confidence)

        fx.append(apply)

    def edge_invalidated(self, fx: Effects, eid: int) -> None:
        self._note("ex", (eid,))
        fx.append(lambda: self.projection.edge_invalidated(eid))

    def edge_restored(self, fx: Effects, eid: int) -> None:
        self._note("eu", (eid,))
        fx.append(lambda: self.projection.edge_restored(eid))

    def chunk_deleted(self, fx: Effects, nid: int) -> None:
        self._note("cu", (nid,))

        def apply() -> None:
            self._dirty.update(("chunks", "lexical"))
            if self.chunks is not None:
                self.chunks.kill(nid)
            if self.lexical is not None and nid in self.lexical:
                self.lexical.remove(nid)
            if self.vectors is not None:
                self.vectors.remove(nid)
            self.projection.node_deleted(nid)

        fx.append(apply)

    def text_updated(self, fx: Effects, nid: int, text: str, vector: np.ndarray | None) -> None:
        if vector is None:
            self._embed_queued = True
            self.reset_embedded_mark()
            self.own_rows.changed(nid)
        self._note("ct", (nid,))

        def apply() -> None:
            self._dirty.add("lexical")
            self._updates_seen = self.store.last_update_event()
            if self.lexical is not None:
                self.lexical.update(nid, text)
            if self.vectors is not None:
                if vector is not None:
                    self.vectors.add(np.asarray([nid], dtype=np.int64), vector[None, :], [text_hash(text)])
                else:  # the old text's vector is stale; the worker embeds the new text
                    self.vectors.remove(nid)

        fx.append(apply)

    def metadata_changed(self, fx: Effects, nid: int) -> None:
        """A chunk's metadata was replaced: the metadata filters read it again after commit."""
        fx.append(lambda: self.meta_cache.forget((nid,)))

    def q_changed(self, fx: Effects, nid: int, q: float) -> None:
        self._note("cu", (nid,))

        def apply() -> None:
            self._dirty.add("chunks")
            if self.chunks is not None and nid < self.chunks.n:
                self.chunks.q[nid] = q

        fx.append(apply)

    def accessed(self, fx: Effects, nids: Sequence[int]) -> None:
        """A search returned ``nids``: importance + 0.1 (its learned links are in the projection already)."""
        self._note("cu", nids)

        def apply() -> None:
            self._dirty.add("chunks")
            table = self.chunks
            if table is not None:
                # the store's value (float64 arithmetic in SQL), not a float32 sum of our own: a
                # table rebuilt from the database, or caught up from the journal, holds exactly that
                rows = self.store.chunk_rows_by_nid([n for n in dict.fromkeys(nids) if n < table.n])
                if rows:
                    idx = np.fromiter(rows, dtype=np.int64, count=len(rows))
                    table.importance[idx] = np.asarray([r.importance for r in rows.values()], dtype=np.float32)

        fx.append(apply)

    @contextlib.contextmanager
    def purging(self) -> Iterator[None]:
        """Around a purge's write: this process's lock, then the index directory's lock (no process
        saves index files from before the purge's commit until its files are gone), and a new purge
        token before the commit (a vector index build started from the old one is dropped, not saved)."""
        with self.lock, sidecar.index_lock(self.sidecar_dir):
            sidecar.new_purge_token(self.sidecar_dir)
            yield

    def purged(self, fx: Effects) -> None:
        """Chunks and edges were removed from the store for good: rebuild every view from it."""
        self._jdelta = None  # rows gone for good: no journal entry, so no catch-up across a purge

        def apply() -> None:
            self.chunks = self.lexical = self.vectors = None
            self.meta_cache.clear()
            self.projection.mark_stale()
            # purged texts and vectors must not outlive the purge in any index file: every file of the
            # directory goes (named ones, journal, vector generations, a crashed save's temporary files);
            # the caller holds ``sidecar.index_lock`` and replaced the purge token (``write.delete_all``)
            sidecar.purge_files(self.sidecar_dir)
            # and again after the commit: a process that read the token between the first replacement
            # and the commit (it may still hold purged rows) drops its builds and re-reads the store
            self.purge_seen = sidecar.new_purge_token(self.sidecar_dir)
            self._file_seq.clear()
            self._graph_saved = None

        fx.append(apply)

    def edges_reweighted(self, fx: Effects, edges: Sequence[tuple[int, str, float]]) -> None:
        """Valid edges whose confidence changed (repeated evidence), as ``(eid, relation name,
        confidence)``: their weights change in place in the projection (no rebuild)."""
        if edges:
            self._note("eu", [e[0] for e in edges])

            fx.append(lambda: self.projection.edges_reweighted([(e, Relation(r), c) for e, r, c in edges]))

    def confirmed_links(self, fx: Effects, nids: Sequence[int], deltas: Sequence[tuple[int, int, float]]) -> None:
        """``Memory.confirm`` wrote co-occurrence credit among ``nids`` (``(a, b, weight added)``):
        into the projection at commit, so the next query spreads over the links."""
        self._note("o", nids)
        if deltas:
            fx.append(lambda: self.projection.learned_links(list(deltas)))

    # ------------------------------------------------------------------ queued search reinforcement
    # (``reinforcement.Reinforcement``; these names are what the pipelines and tests call)
    def queue_reinforcement(self, nids: Sequence[int], scores: Mapping[int, float] | None = None) -> None:
        """What one search returned (best first), queued: ``Reinforcement.queue``."""
        self.reinforcement.queue(nids, scores)

    def flush_reinforcement(self, *, wait: bool = True, sync: bool = True) -> int:
        """Write the queued reinforcement now: ``Reinforcement.flush``."""
        return self.reinforcement.flush(wait=wait, sync=sync)

    def drop_reinforcement(self, why: str) -> None:
        self.reinforcement.drop(why)

    def learned_weights(self, nids: Sequence[int]) -> dict[tuple[int, int], float]:
        """Learned pair weights among ``nids``, queued credit included: ``Reinforcement.learned_weights``."""
        return self.reinforcement.learned_weights(nids)

    def _write_reinforcement(self, fx: Effects, queued: Sequence[tuple[float, list[int], list[list[int]]]]) -> None:
        self.reinforcement.write_rows(fx, queued)

    def _stop_flusher(self, timeout: float | None = None) -> None:
        with self.lock:  # the flusher's condition is on this lock
            self.reinforcement.close()

    def commit_adopted(self, seq: int, importance: list[tuple[int, float]]) -> None:
        """Another connection of this process committed change ``seq`` for the views (the flusher's
        batch; the caller holds the lock): the chunk table's importance, the views' sequence."""
        table = self.chunks
        if table is not None and importance:
            idx = np.fromiter((n for n, _ in importance), dtype=np.int64, count=len(importance))
            table.importance[idx] = np.asarray([v for _, v in importance], dtype=np.float32)
        self._dirty.add("chunks")
        if self._seq is not None:
            self._seq = seq if self._seq == seq - 1 else None
        vi = self.vectors
        if vi is not None and vi.seq is not None:
            vi.seq = seq if vi.seq == seq - 1 else None

    @property
    def reinforce_dropped(self) -> int:
        """Searches whose reinforcement was dropped because the queue was full (the writer busy), ever."""
        return self.reinforcement.dropped

    @property
    def reinforce_off(self) -> str | None:
        return self.reinforcement.off

    @property
    def _queued(self) -> list[tuple[float, list[int], list[list[int]]]]:
        return self.reinforcement.queued

    @_queued.setter
    def _queued(self, value: list[tuple[float, list[int], list[list[int]]]]) -> None:
        self.reinforcement.queued = value

    @_queued.setter
    def _queued(self, value: list[tuple[float, list[int], list[list[int]]]]) -> None:
        self.reinforcement.queued = value

    @property
    def _pending_co(self) -> dict[tuple[int, int], float]:
        return self.reinforcement.pending_co

    @_pending_co.setter
    def _pending_co(self, value: dict[tuple[int, int], float]) -> None:
        self.reinforcement.pending_co = value

    @property
    def _flusher(self) -> Any:
        return self.reinforcement.flusher

    @_flusher.setter
    def _flusher(self, value: Any) -> None:
        self.reinforcement.flusher = value

    def count_write(self, fx: Effects, n: int = 1) -> None:
        fx.append(lambda: self.projection.count_write(n))


def _columns_of(rows: dict[int, Any]) -> ChunkColumns:
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
