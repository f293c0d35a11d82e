"""The in-process views of one store, kept in step with it after every commit.

``Views`` is the narrow interface the pipelines receive (never a ``Memory``): ``store``, ``config``,
``lock``, ``now()``, ``tables()``, ``vector_index()``, ``encode()``, ``write()`` and ``effects``.
It coordinates the parts that do the work, one role per module:

* ``view_files.IndexFiles`` (``files``): the index files in ``<db>.idx/`` and their change journal;
* ``view_sync.StoreFollower`` (``follower``): another connection's commits patched in;
* ``view_effects.AfterCommit`` (``effects``): how each kind of write reaches the views;
* ``view_vectors.VectorView`` (``vector_view``): the embedder, query vectors, the vector index;
* ``view_embedding.EmbeddingSide`` (``embedding``): the background embedding worker, close-time rows;
* ``reinforcement.Reinforcement`` (``reinforcement``): searches' access counts and Hebbian credit;
* ``background.Background`` (``background``): the owner of every thread and child process.

Write protocol: ``with views.write() as fx:`` opens one store transaction (nested writes become
savepoints) under the in-process lock; pipelines append *after-commit effects* to ``fx`` through
``views.effects``; they run only once the outermost transaction committed, so a rolled-back write
never leaves an index ahead of the store. Another process's commit (the store's ``data_version``) is
noticed at the next read or write and patched in by difference (``sync_external``).
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from . import sidecar
from .background import Background
from .chunks import ChunkTable
from .config import Config
from .errors import StoreError
from .lexical import BM25Index
from .metadata_filter import FilterCache
from .projection import Projection
from .reinforcement import Reinforcement
from .semantic import Embedder
from .store.base import StoreBackend
from .types import check_clock_value
from .vector_index import IndexKeeper, VectorIndex
from .view_effects import AfterCommit, Effects, NewChunk, NewEdge, Scope
from .view_embedding import EmbeddingSide
from .view_exit import EXIT_LOCK_S, close_at_exit, register_open
from .view_files import IndexFiles
from .view_sync import StoreFollower
from .view_vectors import PendingQuery, VectorView
from .embedding import EmbeddingWorker, Progress, hand_off
from .write_gate import WriteGate

__all__ = ["Views", "NewChunk", "NewEdge", "Effects", "Scope", "EXIT_LOCK_S", "close_at_exit"]

log = logging.getLogger("causalmem")



class Views:
    """Projection, chunk table, BM25 and vector index of one store, and the write protocol."""

    def __init__(self, store: StoreBackend, config: Config, clock: Callable[[], float] | None = None, *,
                 embedder: Any = "auto", lock: threading.RLock | None = None) -> None:
        self.store = store
        self.config = config
        self.clock: Callable[[], float] = clock or time.time
        self.lock = lock if lock is not None else threading.RLock()
        self.projection = Projection(store.projection_arrays, config, self.clock)
        self.sidecar_dir = sidecar.sidecar_dir(getattr(store, "path", None))
        self.chunks: ChunkTable | None = None
        self.lexical: BM25Index | None = None
        #: the index files and their journal: which store state the text views hold (``view_files``)
        self.files = IndexFiles(self, self.sidecar_dir)
        if self.sidecar_dir is not None:
            self.projection.restore = self.files.restore_projection
        # which chunks match the metadata filters searches used (``metadata_filter.FilterCache``): nids
        # forgotten when their metadata may have changed (own writes: ``effects.metadata_changed``;
        # another connection's: ``sync_external``), all of it on a purge
        self.meta_cache = FilterCache()
        self._effects: Effects | None = None
        #: another connection's commits, patched into the views (``view_sync``)
        self.follower = StoreFollower(self)
        #: the owner of this store's background threads and child processes (``background``)
        self.background = Background(str(getattr(store, "path", ":memory:")))
        #: searches' access counts and Hebbian credit waiting for a write (``reinforcement``)
        self.reinforcement = Reinforcement(self, spawn=self.background.thread)
        self.background.add("reinforce", self._stop_flusher)
        self.projection.pending_learned = \
            lambda: [(a, b, d) for (a, b), d in self.reinforcement.pending_all().items()]
        self.write_gate = WriteGate()  # writes in flight: the background worker waits for a quiet moment
        #: the embedder, query vectors and the vector index (``view_vectors``)
        self.vector_view = VectorView(self, embedder)
        self.keeper = IndexKeeper(self)  # loads, folds and persists the vector index (its own thread)
        self.background.add("vectors", self.keeper.stop)
        self.embed_queued = False  # this write committed chunks (or texts) without vectors
        self.embed_lock = threading.Lock()  # one embedding pass at a time (worker or reembed)
        self.embedded_below = 0  # every live chunk with nid <= this has a current vector (a hint)
        self.mark_resets = 0  # bumped whenever the hint is reset
        #: after-commit effects of each kind of write (``view_effects``)
        self.effects = AfterCommit(self)
        try:  # the background embedding worker and this process's own rows (``view_embedding``)
            self.embedding = EmbeddingSide(self, embedder, config.embed_handoff)
        except ValueError:
            store.close()
            raise
        self.own_rows = self.embedding.own_rows
        self.closed = False
        self.pid = os.getpid()
        register_open(self)  # closed at a normal interpreter exit, as close() would
        self.embedding.resume_later()

    def now(self) -> float:
        """The clock, refused outside 1990 .. now + 1 year (a millisecond clock retires everything)."""
        return check_clock_value(self.clock(), "clock")

    # ------------------------------------------------------------------ embedding (``view_embedding``)
    def reset_embedded_mark(self) -> None:
        """Forget the low-water mark of the embedding queue (the next pass scans every chunk)."""
        self.embedded_below = 0
        self.mark_resets += 1

    @property
    def worker(self) -> EmbeddingWorker | None:
        """The background embedding worker (None when the semantic channel is off)."""
        return self.embedding.worker

    def queue_changed(self) -> None:
        self.embedding.queue_changed()

    def wait_embedded(self, timeout: float | None = None) -> bool:
        """Block until every chunk committed so far has a vector (True), or ``timeout`` passed."""
        return self.embedding.wait_embedded(timeout)

    def wait_vectors(self, timeout: float | None = None, *, folded: bool = False) -> bool:
        """Block until the vector index holds every stored vector (``VectorView.wait_loaded``)."""
        return self.embedding.closed or self.vector_view.wait_loaded(timeout, folded=folded)

    def reembed(self, model_name: str, progress: Progress | None = None) -> int:
        """Vectors for every chunk whose text or model changed, in this thread; returns how many."""
        return self.embedding.reembed(progress)

    def flush(self) -> int:
        """``Memory.flush``: wait for every vector, then write the queued reinforcement."""
        self.wait_embedded(None)  # outside the lock: the worker needs it to store vectors
        with self.lock:
            return self.flush_reinforcement(wait=True)

    def close(self, *, drain: bool = False) -> None:
        """``Memory.close``: stop the worker (``drain``: after it embedded the queue; else the rule of
        ``embedding.py`` for this process's own rows, ``Config.embed_handoff``), write the queued
        reinforcement (dropped with a log line if the file refuses it), save the index files, close
        the store, and hand what is left of the own rows to a detached ``causalmem embed`` when the
        rule says so."""
        self.closed = True
        rows = None if drain else self.embedding.settle_queue()
        self.embedding.stop(drain=drain)  # outside the lock: the worker's last batch needs it
        with self.lock:
            if getattr(self.store, "_closed", False):
                self.background.close()
                return
            try:
                self.flush_reinforcement(wait=True)
            except StoreError as exc:
                self.reinforcement.drop(str(exc))
            finally:
                try:
                    self.background.stop("reinforce")
                    self.build_for_next_open()  # never raises
                    self.save_sidecars()  # never raises
                    self.stamp_vectors()  # never raises
                finally:
                    self.store.close()  # ends the WAL checkpointer thread (SQLite)
                    self.release()
        self.background.close()  # joins every thread of this store (the store is closed: none needs it)
        if rows is not None and self.sidecar_dir is not None:
            hand_off(str(self.store.path), str(self.embedding.spec), self.sidecar_dir, rows,
                     spawn=self.background.spawn)

    def build_for_next_open(self) -> bool:
        """At close: the views brought to the store's state for ``save_sidecars`` when a fresh process
        could not load them from ``<db>.idx/`` (``IndexFiles.build_for_next_open``); never raises."""
        return self.files.build_for_next_open(self.tables, self.projection)

    def release(self) -> None:
        """After close: drop the in-process views, so no map or descriptor of ``<db>.idx/`` outlives
        ``close`` while the caller keeps the ``Memory`` (their arrays map the files copy-on-write)."""
        self.chunks = self.lexical = None
        self.vector_view.release()
        self.projection.release()
        self.meta_cache.clear()

    # ------------------------------------------------------------------ the text views and their files
    def tables(self) -> tuple[ChunkTable, BM25Index]:
        """Chunk columns and the BM25 index: from their index files when those match the store (or
        are caught up from the journal), else built from the store, on first use."""
        self.sync_external()
        if self.chunks is None or self.lexical is None:
            self.follower.updates_seen = self.store.last_update_event()
            files = self.files
            seq = files.read_seq()  # before reading rows: the views can only be newer than seq
            table, index = files.open_tables(seq)
            self.chunks, self.lexical = table, index
            files.seq = seq
        return self.chunks, self.lexical

    def read_seq(self) -> int | None:
        """The store's change counter (None: unknown; ``IndexFiles.read_seq``)."""
        return self.files.read_seq()

    def note(self, kind: str, ids: Sequence[int] | np.ndarray) -> None:
        """The current write changed rows ``ids`` of journal kind ``kind`` (``IndexFiles.note``)."""
        self.files.note(kind, ids)

    @property
    def purge_seen(self) -> bytes | None:
        return self.files.purge_seen

    def save_sidecars(self) -> list[str]:
        """Write the views that changed to ``<db>.idx/`` (``IndexFiles.save``); the kinds written."""
        return self.files.save()

    def _before_write(self) -> None:
        """Hook before the first statement of an outer write (tests put another process's commit here).

        A process that only writes never loads the index files: its commits go to the journal
        (``IndexFiles.journal_commit``) and the next process that reads catches up from it."""

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
                self.files.jdelta = {}
            effects = self._effects
            assert effects is not None
            queued: list = []
            try:
                with self.store.transaction(wait=wait):
                    if outer and self.reinforcement.queued:
                        queued = self.reinforcement.take()
                        self.reinforcement.write_rows(effects, queued)
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
                self.files.track_commit(self.vectors)
                self.files.journal_commit()
                # follower.data_version stays as sync_external left it before this write: this connection's own
                # commit does not change it, and re-reading here would swallow another process's commit
                # that landed meanwhile
                if self.embed_queued:
                    self.embed_queued = False
                    self.embedding.queue_changed()

    @property
    def tables_seq(self) -> int | None:
        """The store's change_seq the chunk table and BM25 index hold exactly (None: unknown)."""
        return self.files.seq

    def vector_seq_now(self) -> int | None:
        """The store's change_seq when this process has seen every commit (the caller holds the lock)."""
        return self.files.read_seq() if self.store.data_version() == self.follower.data_version else None

    def recheck_store(self) -> None:
        """The next call re-reads the store and the purge token (the caller holds the lock)."""
        self.follower.data_version = -1

    # ------------------------------------------------------------------ another connection's commits
    def sync_external(self) -> None:
        """Another connection committed: bring the views up to date with the store (``view_sync``)."""
        self.follower.sync()

    def after_bulk_change(self) -> None:
        """The store changed under this process's own hand outside ``write()`` (a sleep cycle)."""
        self.follower.after_bulk_change()

    # ------------------------------------------------------------------ queued search reinforcement
    # (``reinforcement.Reinforcement``; the names the pipelines call)
    def queue_reinforcement(self, nids: Sequence[int], scores: Mapping[int, float] | None = None) -> None:
        """What one search returned (best first), queued: ``Reinforcement.queue``."""
        self.reinforcement.queue(nids, scores)

    def flush_reinforcement(self, *, wait: bool = True, sync: bool = True) -> int:
        """Write the queued reinforcement now: ``Reinforcement.flush``."""
        return self.reinforcement.flush(wait=wait, sync=sync)

    def learned_weights(self, nids: Sequence[int]) -> dict[tuple[int, int], float]:
        """Learned pair weights among ``nids``, queued credit included: ``Reinforcement.learned_weights``."""
        return self.reinforcement.learned_weights(nids)

    def _stop_flusher(self, timeout: float | None = None) -> None:
        with self.lock:  # the flusher's condition is on this lock
            self.reinforcement.close()

    def commit_adopted(self, seq: int, importance: list[tuple[int, float]]) -> None:
        """The flusher's connection committed change ``seq`` (``StoreFollower.adopt_commit``)."""
        self.follower.adopt_commit(seq, importance)

    @property
    def reinforce_dropped(self) -> int:
        """Searches whose reinforcement was dropped because the queue was full (the writer busy), ever."""
        return self.reinforcement.dropped
