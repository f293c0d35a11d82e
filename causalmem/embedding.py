"""Embedding off the write path (issue 10): a background worker fills vectors in large batches.

Views layer (it keeps the vector view filled). Writes commit text, edges and lexical postings
without vectors; the queue is the store itself — the live chunks without a current vector for the embedder's model
(``store.chunks_missing_embedding``) — so a crash or a ``kill -9`` loses no queued work and
the next open resumes it. One daemon thread per ``Views``:

* reads a batch of the queue (store lock only, a fast indexed query),
* encodes it **outside** every lock (the slow part; searches and writes go on),
* stores the vectors in one transaction under the in-process lock and, after commit, adds the
  still-current ones to the in-memory vector index if it is loaded.

A vector is stored with the hash of the text it was computed from, so a text changed while it
was being encoded stays in the queue (never a stale vector). ``wait(timeout)`` blocks until the
queue was seen empty after the call began; ``stop()`` ends the thread after its current batch
(the rest of the queue stays for the next open). Failures of the embedder are logged, kept in
``error`` and re-raised by ``wait``; the next ``kick`` tries again.

Who drains the queue of a short-lived process (a CLI call, a worker per request: it closes before
the deferred start, ``WORKER_START_DELAY_S``) — the rule at ``close()`` without ``drain``:

* a process that committed chunks still without vectors and whose model is already loaded (it
  searched with the model, or its worker ran) embeds them itself, for at most ``CLOSE_DRAIN_S``;
* what is left (or everything, when the model is not loaded: a writer never loads it just to
  write) is handed to a detached ``causalmem embed`` process for the same file and embedder spec,
  one at a time per store (an exclusive ``flock`` on ``<db>.idx/embed.lock``, taken by the closing
  process and inherited by the child): while one runs, a closing writer starts none — the running
  one looks at the queue again after it released the lock and goes on when it finds rows;
* not handed off: an embedder given as an object (the child could not rebuild it), a store without
  a file (``:memory:``, PostgreSQL), or ``CAUSALMEM_EMBED_HANDOFF=0`` in the environment; then the
  queue waits for the next process that stays open a second (``RESUME_DELAY_S``), ``flush()``,
  ``close(drain=True)`` or ``causalmem embed``.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .store.base import text_hash
from .vector_index import decode_rows, stop_at_exit

if TYPE_CHECKING:  # pragma: no cover
    from .views import Views

__all__ = ["EmbeddingWorker", "Progress", "embed_pending", "decode_rows"]

logger = logging.getLogger("causalmem")

#: progress callback: (done, total) after each batch
Progress = Callable[[int, int], None]
#: texts per encode call inside a batch (the worker checks for a stop between them)
_SUB_BATCH = 64
#: seconds a closing process with its model loaded spends embedding its own backlog
CLOSE_DRAIN_S = 0.5
#: ``0`` turns the hand-off to a detached ``causalmem embed`` off (the test suite does)
HANDOFF_ENV = "CAUSALMEM_EMBED_HANDOFF"
#: the descriptor of the inherited embed lock, in a handed-off ``causalmem embed``
LOCK_FD_ENV = "CAUSALMEM_EMBED_LOCK_FD"
LOCK_NAME = "embed.lock"


def model_loaded(emb: Any) -> bool:
    """Whether ``emb`` has its model in memory already (an encode now costs no load)."""
    return any(getattr(emb, a, None) is not None for a in ("_sess", "_sess_one", "_model"))


def handoff_enabled() -> bool:
    return os.environ.get(HANDOFF_ENV, "1").strip() != "0"


def try_lock(directory: Path) -> int | None:
    """The store's embed lock, taken without waiting: its descriptor, or None when another process
    holds it (or it cannot be taken here)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock on this platform: no hand-off
        return None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def hand_off(db_path: str, spec: str, directory: Path) -> bool:
    """Start a detached ``causalmem embed`` for ``db_path`` with embedder ``spec`` unless one holds the
    store's embed lock; True when started. The child inherits the lock (and drops it when done)."""
    fd = try_lock(directory)
    if fd is None:
        return False
    try:
        pkg_root = str(Path(__file__).resolve().parents[1])  # this very causalmem, whatever sys.path says
        env = {**os.environ, LOCK_FD_ENV: str(fd), HANDOFF_ENV: "0",
               "PYTHONPATH": os.pathsep.join(p for p in (pkg_root, os.environ.get("PYTHONPATH")) if p)}
        subprocess.Popen([sys.executable, "-m", "causalmem", "-q", "--db", db_path, "embed", "--embedder", spec,
                          "--no-progress"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, pass_fds=(fd,), env=env)
        logger.info("causalmem: %s: the embedding queue handed to a detached `causalmem embed`", db_path)
        return True
    except OSError as exc:
        logger.warning("causalmem: could not start `causalmem embed` for %s: %s", db_path, exc)
        return False
    finally:
        os.close(fd)


def continue_handed_off(views: "Views", progress: Progress | None = None) -> int:
    """In a ``causalmem embed`` started by a hand-off (``LOCK_FD_ENV``), after its pass over the queue:
    drop the inherited lock, look at the queue once more (a writer that found the lock held started
    nobody) and go on — lock taken again — while rows keep coming; returns how many more it embedded."""
    fd_text = os.environ.pop(LOCK_FD_ENV, None)
    directory = views.sidecar_dir
    if fd_text is None:
        return 0
    done = 0
    fd: int | None = int(fd_text)
    while fd is not None:
        os.close(fd)  # released: from now on a closing writer starts its own child
        emb = views.embedder
        if emb is None or directory is None:
            break
        with views.lock:
            views.sync_external()
            left = bool(views.store.chunks_missing_embedding(emb.model_name, limit=1))
        if not left:
            break
        fd = try_lock(directory)
        if fd is not None:
            with views.lock:
                views.reset_embedded_mark()
            done += embed_pending(views, progress=progress)
    return done


def _embed_batch(views: "Views", batch: list[tuple[int, str]], stopping: Callable[[], bool] = lambda: False) -> int:
    """Encode ``batch`` (no lock held) and store it; returns how many vectors were stored."""
    emb = views.embedder
    if emb is None or not batch:
        return 0
    parts = []
    for i in range(0, len(batch), _SUB_BATCH):  # sub-batches: a stop (close, exit) waits for one only
        parts.append(np.asarray(emb.encode([t for _, t in batch[i:i + _SUB_BATCH]]), dtype=np.float32))
        if stopping():
            return 0
    vecs = np.vstack(parts)
    with views.write() as fx:
        views.store_vectors([(nid, t, v) for (nid, t), v in zip(batch, vecs)])
        views.vectors_stored(fx, [nid for nid, _ in batch], emb.model_name, emb.dim,
                             [text_hash(t) for _, t in batch])
    return len(batch)


def embed_pending(views: "Views", *, batch_size: int = 256, progress: Progress | None = None,
                  stopping: Callable[[], bool] = lambda: False) -> int:
    """Embed the whole queue in the calling thread (``reembed``/backfill); returns how many.

    One pass at a time per ``Views`` (the worker and ``reembed`` never encode the same rows twice)."""
    with views.embed_lock:
        return _embed_pending(views, batch_size, progress, stopping)


def _embed_pending(views: "Views", batch_size: int, progress: Progress | None,
                   stopping: Callable[[], bool]) -> int:
    emb = views.embedder
    if emb is None:
        return 0
    if views.embedded_below == 0 and _queue_known_empty(views):
        return 0
    # queue reads under the in-process lock: a write holds it for its whole transaction, so the
    # shared connection never shows this thread another thread's uncommitted rows
    todo = 0
    if progress is not None:  # a full count: only when someone shows progress
        with views.lock:
            total, have = views.store.embedding_backlog(emb.model_name)
        todo = total - have
    done = 0
    # rows below the low-water mark were embedded by an earlier pass (nids only grow; a text
    # update or another process's commit resets the mark), so a pass does not rescan them
    after = views.embedded_below
    resets = views.mark_resets
    if progress is not None:
        progress(0, todo)
    while not stopping():
        with views.lock:
            batch = views.store.chunks_missing_embedding(emb.model_name, limit=batch_size, after_nid=after)
        if not batch:
            break
        after = batch[-1][0]
        done += _embed_batch(views, batch, stopping)
        if progress is not None:
            progress(done, max(todo, done))
        logger.debug("embedded %d/%d pending chunks", done, todo)
    else:
        return done
    with views.lock:
        if views.mark_resets == resets:  # nothing reset the mark meanwhile
            views.embedded_below = after
    return done


def _queue_known_empty(views: "Views") -> bool:
    """Whether the loaded vector index shows that every live chunk has a current vector — then the
    full scan of the store for chunks without one (seconds at 1M chunks, under the in-process lock,
    stalling searches) is skipped and the low-water mark set past the last chunk. Waits briefly for an
    index that is being mapped from current files."""
    vi = views.vectors
    if vi is None:
        return False
    if not vi.ready:
        vi.wait_fast_load(2.0)
    with views.lock:
        table = views.chunks
        if vi is not views.vectors or table is None or not vi.ready or vi.seq is None \
                or views.vector_seq_now() != vi.seq or views.tables_seq != vi.seq:
            return False
        alive = table.alive[: table.n]
        live = int(np.count_nonzero(alive))
        if live != len(vi) or vi.count_in(alive) != live:
            return False
        if live:
            views.embedded_below = int(np.flatnonzero(alive)[-1])
        return True


class EmbeddingWorker:
    """The background embedding thread of one ``Views`` (started on first ``kick``)."""

    def __init__(self, views: "Views", *, batch_size: int = 256, progress: Progress | None = None) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.views = views
        self.batch_size = batch_size
        self.progress = progress
        self._cond = threading.Condition()
        self._kicks = 1  # requests so far (the first: the store may hold an earlier process's queue)
        self._done = 0  # the queue was empty after this many requests
        self._stop = False
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.embedded = 0  # vectors stored by this worker
        stop_at_exit(self, "worker")  # a thread killed inside a native encoder aborts the process
        self._timer: threading.Timer | None = None
        self._deferred: threading.Timer | None = None  # the start after a write (``kick_deferred``)
        self._wrote = 0  # the request of this process's last write without vectors

    @property
    def own_backlog(self) -> bool:
        """Whether chunks this process wrote may still be without vectors."""
        return self._done < self._wrote

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def kick_later(self, delay: float) -> None:
        """Resume the stored queue ``delay`` seconds after open (not on the cold-start path)."""
        timer = threading.Timer(delay, self.kick)
        timer.daemon = True
        self._timer = timer
        timer.start()

    def kick_deferred(self, delay: float) -> None:
        """New chunks are queued: counted now (``wait`` sees them), the thread started ``delay``
        seconds later unless it runs already — a process that writes and closes at once (a CLI
        ``record``) never loads the model; ``stop`` cancels the start."""
        with self._cond:
            if self._stop:
                return
            self._kicks += 1
            self._wrote = self._kicks
            if self.running:
                self._cond.notify_all()
                return
            if self._deferred is None:
                timer = threading.Timer(delay, self._start_deferred)
                timer.daemon = True
                self._deferred = timer
                timer.start()

    def _start_deferred(self) -> None:
        with self._cond:
            self._deferred = None
            self._start_locked()

    def kick(self) -> None:
        """New chunks may be queued: wake (or start) the thread."""
        with self._cond:
            if self._stop:
                return
            self._kicks += 1
            self._start_locked()

    def _start_locked(self) -> None:
        if self._stop:
            return
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="causalmem-embed", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every chunk written before this call has a vector; False on timeout."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
            raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
        with self._cond:
            want = self._kicks
            if self._done < want:
                self._start_locked()
        with self._cond:
            self._cond.wait_for(lambda: self._done >= want or self.error is not None or self._stop
                                or not self.running, timeout)
            if self.error is not None:
                err, self.error = self.error, None
                raise RuntimeError(f"background embedding failed: {err}") from err
            return self._done >= want

    def stop(self, timeout: float | None = None) -> None:
        """End the thread after its current batch; the rest of the queue stays in the store."""
        if self._timer is not None:
            self._timer.cancel()
        with self._cond:
            if self._deferred is not None:
                self._deferred.cancel()
            self._stop = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _stopping(self) -> bool:
        return self._stop

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._done >= self._kicks and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                seen = self._kicks
            try:
                n = embed_pending(self.views, batch_size=self.batch_size, progress=self.progress,
                                  stopping=self._stopping)
                self.embedded += n
            except Exception as exc:  # keep the thread alive: the next kick retries
                if self._stop:  # the store closed under a last batch: nothing is lost
                    return
                logger.warning("background embedding failed: %s", exc)
                with self._cond:
                    self.error = exc
                    self._done = seen  # do not spin; a new kick retries
                    self._cond.notify_all()
                time.sleep(0.05)
                continue
            with self._cond:
                if not self._stop:
                    self._done = max(self._done, seen)
                self._cond.notify_all()
