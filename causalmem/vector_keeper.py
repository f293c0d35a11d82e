"""The vector index's keeper: one daemon thread per ``Views`` that loads, folds, rebuilds and saves the index.

:class:`IndexKeeper` is given its owner as a :class:`KeeperHost` (the few attributes and methods it
uses; ``Views`` satisfies it structurally), never ``Views`` itself. It loads the index at first use
(from the files when they hold the database's state or an earlier one the journal reaches, else from
the store), folds the delta into a new segment when it grows past ``max(ann_min, 10% of the
segment)`` (or the tombstones pass 20%), saves it next to the database and swaps it in under the
host's lock.

Lifecycle (the ``Memory``'s background owner, ``causalmem.background``, calls these):

* :meth:`IndexKeeper.kick` starts the thread when it is not running and hands it work;
* :meth:`IndexKeeper.stop` (``timeout`` seconds, default 30; None waits) asks the thread to end at
  its next check (a build stops within one 4,096-row slice), then joins it; a stopped keeper takes
  no more kicks;
* :meth:`IndexKeeper.join` waits for the thread to end without asking it to, True when it has;
* at interpreter exit every keeper still alive is stopped (:func:`stop_at_exit`, after the
  embedding workers registered there): a daemon thread killed inside usearch can abort the process.
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
import weakref
from pathlib import Path
from typing import Any, ContextManager, Iterable, Protocol

import numpy as np

from .background import wait_for_work
from .errors import without_traceback
from . import vector_segments as segments
from .sidecar import index_lock, purge_token, read_chain
from .vector_codec import UNKNOWN_HASH, decode_rows, normalise_rows
from .vector_core import VectorIndex
from .vector_files import (HEADER, PurgedMeanwhile, SegmentWriter, fold_segment, open_sidecar, read_header,
                           remove_sidecar, verify_rows)
from .vector_journal import CATCH_UP_KINDS, CATCH_UP_MAX_IDS, read_delta
from .vector_segments import AnnSegment

__all__ = ["IndexKeeper", "KeeperHost", "FAST_STORE_READ", "DIRECT_BUILD", "stop_at_exit"]

log = logging.getLogger("causalmem")


class NamedModel(Protocol):
    """An embedder as the keeper sees it: the model name its stored vectors are kept under."""

    @property
    def model_name(self) -> str: ...


class KeeperHost(Protocol):
    """What the keeper uses of its owner (``Views``): the lock its swaps take, the index it keeps, the
    embedder, the store it reads vectors from, the index directory and purge token, the change sequence."""

    vectors: VectorIndex | None

    @property
    def lock(self) -> ContextManager[Any]: ...
    @property
    def embedder(self) -> NamedModel | None: ...
    @property
    def store(self) -> Any: ...
    @property
    def sidecar_dir(self) -> Path | None: ...
    @property
    def purge_seen(self) -> bytes | None: ...

    def read_seq(self) -> int | None: ...
    def vector_seq_now(self) -> int | None: ...
    def recheck_store(self) -> None: ...


#: rows per store read (each read holds the in-process lock briefly)
_PAGE = 20_000
#: a load reading at most this many vectors from the store is quick enough for a first search to wait
FAST_STORE_READ = 30_000
#: a store with at least this many vectors and no usable sidecar gets its segment built straight from
#: the store (its vectors never sit in the exact delta); smaller ones are loaded exact, then folded
DIRECT_BUILD = 200_000


#: live background threads' owners (embedding workers, index keepers), stopped at interpreter exit:
#: a daemon thread killed inside native code (usearch, onnxruntime, torch) can abort the process
#: instead of exiting cleanly. Workers stop first: a worker's last batch feeds its keeper.
_AT_EXIT: dict[str, "weakref.WeakSet[Any]"] = {"worker": weakref.WeakSet(), "keeper": weakref.WeakSet()}


def stop_at_exit(owner: Any, kind: str) -> None:
    """Have ``owner.stop(timeout=30)`` called at interpreter exit (``kind``: "worker" or "keeper")."""
    _AT_EXIT[kind].add(owner)


@atexit.register
def _stop_background_threads() -> None:
    for kind in ("worker", "keeper"):
        for owner in list(_AT_EXIT[kind]):
            owner.stop(timeout=30)


class IndexKeeper:
    """One daemon thread per ``Views``: loads, folds, rebuilds and persists the vector index.

    Never holds ``Views.lock`` while it reads many rows, builds or writes files: store reads are
    paged (the lock per page), the build runs on a private usearch index, the swap takes the lock."""

    def __init__(self, views: KeeperHost) -> None:
        self.views = views
        self._cond = threading.Condition()
        self._kicks = 0
        self._done = 0
        self._stop = False
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.loads = 0
        self.catch_ups = 0  # loads from files of an earlier state, caught up along the journal
        self.dropped = 0  # builds whose files were dropped because a purge ran meanwhile
        self._token: bytes | None = None  # the purge token the snapshot of the current step reflects
        stop_at_exit(self, "keeper")

    def kick(self) -> None:
        with self._cond:
            if self._stop:
                return
            self._kicks += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="causalmem-vectors", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def stop(self, timeout: float | None = 30) -> None:
        """End the thread at its next check and join it (up to ``timeout`` s); no kick starts it again."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` s for the thread to end (without asking it to: see :meth:`stop`);
        True when no thread of this keeper is running."""
        with self._cond:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every kick so far was handled."""
        with self._cond:
            want = self._kicks
            return self._cond.wait_for(lambda: self._done >= want or self._stop or
                                       not (self._thread and self._thread.is_alive()), timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not wait_for_work(self._cond, lambda: self._done < self._kicks, lambda: self._stop):
                    return
                seen = self._kicks
            try:
                for _ in range(8):  # a bounded number of steps per kick
                    if self._stop or not self.step():
                        break
            except Exception as exc:  # keep the thread: the next kick retries
                log.warning("causalmem: vector index maintenance failed: %s", exc, exc_info=True)
                self.error = without_traceback(exc)  # its frames hold snapshots and segments
                with self.views.lock:
                    vi = self.views.vectors
                    if vi is not None:
                        vi.abandon_snapshot()
            with self._cond:
                self._done = max(self._done, seen)
                self._cond.notify_all()

    # ------------------------------------------------------------------ steps
    def _sidecar(self) -> Path | None:
        """``<db>.idx`` (shared with the other index files, see ``sidecar.py``); None for a non-file store."""
        if not segments.usearch_available():
            return None
        return getattr(self.views, "sidecar_dir", None)

    def step(self) -> bool:
        """One unit of work; False when there is nothing to do."""
        views = self.views
        emb = views.embedder
        with views.lock:
            vi = views.vectors
            if vi is None or emb is None:
                return False
            kind: str | None = "load" if not vi.ready else vi.needs_fold()
            if kind is None:
                return False
            self._token = getattr(views, "purge_seen", None)
            if kind != "load":
                vi.begin_snapshot()
            snap = (vi.segment, *vi.delta.snapshot()) if kind == "fold" else None
        try:
            if kind == "load":
                self._load(vi, emb.model_name)
            elif kind == "fresh" or snap is None:
                self._fresh(vi, emb.model_name)
            else:
                self._fold(vi, emb.model_name, snap)
        except PurgedMeanwhile as exc:
            # built from vectors a purge may have removed: not saved, not installed; the views see
            # the purge at their next call (and drop those vectors), the next kick builds again
            log.info("causalmem: %s", exc)
            self.dropped += 1
            with views.lock:
                if views.vectors is vi:
                    vi.abandon_snapshot()
                views.recheck_store()  # the next call re-reads the store (and the token)
            return False
        return True

    @contextlib.contextmanager
    def _guard(self) -> Any:
        """Held while a new segment's header is written: the index directory's lock, yielding whether
        the purge token is still the one the snapshot reflected (a purge replaces it before its commit
        under the same lock and deletes every file after it, so a build either lands before the
        purge's deletion or is dropped)."""
        directory = self._sidecar()
        with index_lock(directory):
            yield purge_token(directory) == self._token

    def _pages(self, model: str, with_vectors: bool) -> Iterable[list[tuple]]:
        """Pages of (nid, text_hash[, blob]) of the current vectors, each read under the lock."""
        store = self.views.store
        paged = getattr(store, "embedding_rows", None)
        if paged is None:  # a backend without paging: one read
            with self.views.lock:
                rows = [tuple(r) if with_vectors else (r[0], r[1]) for r in store.embeddings_for(model)]
            yield rows
            return
        after = 0
        while not self._stop:
            with self.views.lock:
                rows = paged(model, after_nid=after, limit=_PAGE, with_vectors=with_vectors)
            if not rows:
                return
            yield rows
            after = rows[-1][0]

    def _decode(self, rows: list[tuple], dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids, vecs = decode_rows(rows, dim, blob=2)
        hashes = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
        return ids, vecs, hashes

    def _install(self, vi: VectorIndex, *args: Any, loaded: bool = False, **kw: Any) -> bool:
        """Swap under the lock; ``loaded``: a load made the index equal to the store's vectors now."""
        with self.views.lock:
            if self.views.vectors is not vi:  # reset meanwhile: the work is dropped
                return False
            vi.install(*args, **kw)
            if loaded:
                vi.seq = self.views.vector_seq_now()
            return True

    def _load(self, vi: VectorIndex, model: str) -> None:
        t0 = time.perf_counter()
        dim = vi.dim
        directory = self._sidecar()
        seg, why = (None, "no sidecar for this store")
        head = None
        if directory is not None and vi.ann_min is not None:
            head = read_header(directory) if (directory / HEADER).exists() else None
            seq = head.get("seq") if head is not None else None
            chain: dict[str, np.ndarray] | None = None
            if seq is not None:
                with self.views.lock:
                    current = self.views.read_seq()
                if seq == current:
                    chain = {}
                elif current is not None:  # files of an earlier state: caught up along the journal
                    chain = read_chain(directory, int(seq), current, max_ids=CATCH_UP_MAX_IDS, kinds=CATCH_UP_KINDS,
                                       vectors=True)
                if chain is not None:
                    vi.plan(fast=True)
            seg, why = open_sidecar(directory, model, vi, head) if head is not None else (
                (None, "no index file") if not (directory / HEADER).exists() else (None, "unreadable header"))
            if seg is None and why != "no index file":
                log.warning("causalmem: vector index %s not used (%s): rebuilding it", directory, why)
                remove_sidecar(directory)
            if seg is not None and chain is not None and head is not None:
                got = read_delta(directory, head, dim)
                if got is not None:  # the files hold the database's vectors at the header's change_seq
                    extra, gone = got
                    seg.tombstone(gone)
                    n_caught = 0
                    if chain:
                        extra, n_caught = self._caught_up(seg, extra, chain, model, dim)
                    if self._install(vi, seg, extra, loaded=True):
                        self.loads += 1
                        self.catch_ups += bool(chain)
                        log.info("causalmem: vector index mapped in %.3f s (files %s; %d in the delta)",
                                 time.perf_counter() - t0, f"caught up: {n_caught} rows re-read" if chain else
                                 "current", extra[0].shape[0])
                        self._verify(vi, seg, directory)
                    return
                log.warning("causalmem: vector index delta file in %s is damaged: checking every vector", directory)
        self._plan_store_read(vi, model)
        # the database's current (id, text hash) pairs decide which persisted vectors are still valid
        keys = [np.asarray(p, dtype=np.int64).reshape(-1, 2) for p in self._pages(model, with_vectors=False)]
        cur = np.concatenate(keys) if keys else np.zeros((0, 2), dtype=np.int64)
        del keys
        if seg is not None:
            pos = np.searchsorted(seg.keys, cur[:, 0])
            pos = np.minimum(pos, max(seg.keys.shape[0] - 1, 0))
            same = (seg.keys.shape[0] > 0) & (seg.keys[pos] == cur[:, 0]) & (seg.hashes[pos] == cur[:, 1])
            valid = np.zeros(seg.live.shape[0], dtype=bool)
            valid[cur[same, 0]] = True
            seg.tombstone(seg.keys[~valid[seg.keys]])
            missing = cur[~same, 0]
        else:
            missing = cur[:, 0]
        big = seg is None and vi.ann_min is not None and segments.usearch_available() and \
            missing.shape[0] >= max(vi.ann_min, DIRECT_BUILD)
        if big:  # build the segment straight from the store: the vectors never sit in the delta
            self._fresh(vi, model, loading=True)
            return
        extra = self._read_vectors(model, missing, dim)
        if self._install(vi, seg, extra, loaded=True):
            self.loads += 1
            log.info("causalmem: vector index ready in %.2f s (%s; %d from the store)",
                     time.perf_counter() - t0, "persisted segment" if seg is not None else why, extra[0].shape[0])
            if seg is not None and directory is not None:
                self._verify(vi, seg, directory)

    def _caught_up(self, seg: AnnSegment, extra: tuple[np.ndarray, np.ndarray, np.ndarray],
                   chain: dict[str, np.ndarray], model: str, dim: int
                   ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], int]:
        """The stamped files patched with the journal's rows: every chunk inserted, updated, retexted or
        given a vector since the stamp is masked in the segment and the delta, and its current vector
        (a live chunk's, of its current text) re-read from the store."""
        ids = np.unique(np.concatenate([chain.get(k, np.zeros(0, np.int64)) for k in CATCH_UP_KINDS]))
        seg.tombstone(ids)
        keep = ~np.isin(extra[0], ids)
        got = self._read_vectors(model, ids, dim)
        return tuple(np.concatenate([a[keep], b]) for a, b in zip(extra, got)), int(ids.shape[0])  # type: ignore

    def _plan_store_read(self, vi: VectorIndex, model: str) -> None:
        """A load that reads the store: quick (a first search may wait for it) up to ``FAST_STORE_READ``
        vectors, told by reading at most that many (id, hash) pairs."""
        paged = getattr(self.views.store, "embedding_rows", None)
        small = False
        if paged is not None:
            with self.views.lock:
                small = len(paged(model, after_nid=0, limit=FAST_STORE_READ + 1, with_vectors=False)) <= FAST_STORE_READ
        vi.plan(fast=small)

    def _verify(self, vi: VectorIndex, seg: AnnSegment, directory: Path) -> None:
        """After a load from the files: the rows file's checksum (read with ``read``, not mapped); a
        damaged file is dropped and the index rebuilt from the store."""
        ok = verify_rows(directory, seg, lambda: self._stop)
        if ok is not False:
            return
        log.warning("causalmem: vector index %s not used (checksum mismatch in the rows file): rebuilding it",
                    directory)
        remove_sidecar(directory)
        with self.views.lock:
            if self.views.vectors is vi:
                self.views.vectors = None  # the next search creates a new index, which the keeper builds

    def _read_vectors(self, model: str, nids: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        out = []
        store = self.views.store
        paged = getattr(store, "embedding_rows", None)
        if nids.shape[0] and paged is not None and nids.shape[0] > _PAGE:
            want = np.zeros(int(nids.max()) + 1, dtype=bool)
            want[nids] = True
            for rows in self._pages(model, with_vectors=True):
                rows = [r for r in rows if r[0] < want.shape[0] and want[r[0]]]
                if rows:
                    out.append(self._decode(rows, dim))
        elif nids.shape[0]:
            for s in range(0, nids.shape[0], 5000):
                part = nids[s: s + 5000].tolist()
                with self.views.lock:
                    if paged is not None:
                        rows = paged(model, nids=part, with_vectors=True)
                    else:
                        got = dict(store.embeddings_of(part, model))
                        rows = [(n, UNKNOWN_HASH, got[n]) for n in part if n in got]
                if rows:
                    out.append(self._decode(rows, dim))
        if not out:
            return np.zeros(0, np.int64), np.zeros((0, dim), np.float32), np.zeros(0, np.int64)
        return (np.concatenate([o[0] for o in out]), np.vstack([o[1] for o in out]),
                np.concatenate([o[2] for o in out]))

    def _fresh(self, vi: VectorIndex, model: str, loading: bool = False) -> None:
        """A new segment from every current vector in the store (paged reads, ascending ids)."""
        t0 = time.perf_counter()
        writer = SegmentWriter(vi, self._sidecar(), stopping=lambda: self._stop, guard=self._guard)
        try:
            for rows in self._pages(model, with_vectors=True):
                ids, vecs, h = self._decode(rows, vi.dim)
                if not writer.add(ids, normalise_rows(vecs), h):
                    writer.abort()
                    return
            if self._stop:
                writer.abort()
                return
            seg = writer.finish(model)
        except BaseException:
            writer.abort()
            raise
        with self.views.lock:
            if self.views.vectors is not vi:
                return
            # delta ids older than the snapshot are in the store read; newer ones are dirty (kept)
            vi.install(seg, None, snapshot_delta=vi.delta.ids().copy())
            if loading:
                vi.seq = self.views.vector_seq_now()
        log.info("causalmem: vector index built from the store in %.1f s (%d vectors)", time.perf_counter() - t0,
                 seg.n_total)

    def _fold(self, vi: VectorIndex, model: str, snap: tuple) -> None:
        """The delta folded into a copy of the segment (usearch adds: no rebuild of the graph)."""
        t0 = time.perf_counter()
        seg, ids, mat, hashes = snap
        new = fold_segment(vi, seg, ids, mat, hashes, self.views.lock, self._sidecar(), model, lambda: self._stop,
                           self._guard)
        if new is None:
            return
        if self._install(vi, new, None, snapshot_delta=ids):
            log.info("causalmem: %d vectors folded into the index in %.1f s (%d live)", ids.shape[0],
                     time.perf_counter() - t0, new.n_live)
