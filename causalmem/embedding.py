"""Embedding off the write path: a background worker fills vectors in large batches.

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
the deferred start, ``WORKER_START_DELAY_S``) — the rule at ``close()`` without ``drain``, chosen by
``Config.embed_handoff`` / ``Memory(embed_handoff=...)`` (the environment variable
``CAUSALMEM_EMBED_HANDOFF``, when set, overrides both). It concerns only *this process's own rows*
(:class:`OwnRows`: the chunks it wrote, or whose text it changed, without a vector):

* ``"auto"`` (default): a process whose model is already loaded (it searched with the model, or its
  worker ran) embeds its own rows itself for at most ``CLOSE_DRAIN_S``; what is left (or everything,
  when the model is not loaded: a writer never loads it just to write) is handed to a detached
  ``causalmem embed`` for the same file and embedder spec, one at a time per store (an exclusive
  ``flock`` on ``<db>.idx/embed.lock``, taken by the closing process and inherited by the child).
  The child embeds only the rows it was handed (``ROWS_ENV``) — the closing process's rows and any
  newer chunk (rows other writers commit while it runs) — and exits: an older backlog (a store
  written with ``embedder=None``) is left to a process that stays open, ``flush()`` or
  ``causalmem embed``. While one runs, a closing writer starts none: the running one looks at the
  newer rows again after it released the lock and goes on when it finds some;
* ``"drain"``: the closing process embeds its own rows itself before ``close`` returns (it loads
  the model if needed; no time limit), never a child;
* ``"off"``: neither (the ``CLOSE_DRAIN_S`` embedding of a loaded model still happens): the rows
  wait for the next process that stays open a second (``RESUME_DELAY_S``), ``flush()``,
  ``close(drain=True)`` or ``causalmem embed``.

Never handed off (``"auto"`` behaves as ``"off"``): an embedder given as an object (the child could
not rebuild it), a store without a file (``:memory:``, PostgreSQL).
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, ContextManager, Protocol, Sequence

import numpy as np

from .background import wait_for_work
from .config import handoff_mode
from .errors import without_traceback
from .store.base import text_hash
from .vector_index import decode_rows

class EmbeddingHost(Protocol):
    """What the embedding passes and the worker are given (the views), never a ``Memory``."""

    store: Any
    lock: Any
    embed_lock: Any
    write_gate: Any
    embedded_below: int
    mark_resets: int
    sidecar_dir: Path | None
    vectors: Any
    chunks: Any

    @property
    def embedder(self) -> Any: ...

    @property
    def tables_seq(self) -> int | None: ...

    def reset_embedded_mark(self) -> None: ...

    def sync_external(self) -> None: ...

    def vector_seq_now(self) -> int | None: ...

    def write(self, *, wait: bool = True, sync: bool = True, background: bool = False) -> ContextManager[Any]: ...

    def store_vectors(self, items: Sequence[tuple[int, str, Any]]) -> None: ...

    def vectors_stored(self, fx: Any, nids: Sequence[int], model: str, dim: int,
                       hashes: Sequence[int] | None = None) -> None: ...

__all__ = ["EmbeddingWorker", "Progress", "embed_pending", "decode_rows"]

logger = logging.getLogger("causalmem")

#: progress callback: (done, total) after each batch
Progress = Callable[[int, int], None]
#: texts per encode call inside a batch (the worker checks for a stop between them)
_SUB_BATCH = 128
#: seconds a closing process with its model loaded spends embedding its own backlog
CLOSE_DRAIN_S = 0.5
#: overrides ``Config.embed_handoff`` when set: ``0``/``off`` (the test suite sets it), ``1``/``auto``, ``drain``
HANDOFF_ENV = "CAUSALMEM_EMBED_HANDOFF"
_ENV_VALUES = {"0": "off", "off": "off", "false": "off", "no": "off", "1": "auto", "auto": "auto", "true": "auto",
               "yes": "auto", "on": "auto", "drain": "drain"}
#: the descriptor of the inherited embed lock, in a handed-off ``causalmem embed``
LOCK_FD_ENV = "CAUSALMEM_EMBED_LOCK_FD"
#: the rows a handed-off ``causalmem embed`` is to embed (``OwnRows.to_env``)
ROWS_ENV = "CAUSALMEM_EMBED_ROWS"
LOCK_NAME = "embed.lock"


def model_loaded(emb: Any) -> bool:
    """Whether ``emb`` has its model in memory already (an encode now costs no load)."""
    return any(getattr(emb, a, None) is not None for a in ("_sess", "_sess_one", "_model"))


def query_encoder_ready(emb: Any) -> bool:
    """Whether encoding one query with ``emb`` now costs no model or session load (an embedder of
    unknown kind: assumed ready). A search whose encoder is not ready encodes before it takes the lock
    (a session load on the query thread would hold every writer of the process for its duration)."""
    for attr in ("_sess_one", "_model"):  # OnnxEmbedder's single-query session; SentenceTransformerEmbedder
        if hasattr(emb, attr):
            return getattr(emb, attr) is not None
    return True


def handoff_setting(configured: str | bool) -> str:
    """The close-time rule in force: ``$CAUSALMEM_EMBED_HANDOFF`` when set (ValueError naming it when
    it holds something else than the documented values), else ``configured`` (``Config.embed_handoff``)."""
    raw = os.environ.get(HANDOFF_ENV)
    if raw is None or not raw.strip():
        return handoff_mode(configured, "embed_handoff")
    mode = _ENV_VALUES.get(raw.strip().lower())
    if mode is None:
        raise ValueError(f"environment variable {HANDOFF_ENV} must be one of 0, 1, off, auto, drain, got {raw!r}")
    return mode


class OwnRows:
    """The chunks one process queued (wrote, or changed the text of, without a vector): every chunk id
    >= ``floor`` (new chunks get ids above every existing one) plus ``ids``, older chunks whose text it
    changed (at most ``MAX_IDS``; beyond that ``floor`` drops to the lowest of them)."""

    MAX_IDS = 2048

    def __init__(self, floor: int | None = None, ids: Any = ()) -> None:
        self.floor = floor
        self.ids: set[int] = {int(i) for i in ids}

    def __bool__(self) -> bool:
        return self.floor is not None or bool(self.ids)

    def __repr__(self) -> str:
        return f"OwnRows(floor={self.floor}, ids={sorted(self.ids)[:8]}{'...' if len(self.ids) > 8 else ''})"

    def new_chunks(self, nids: Any) -> None:
        low = int(min(nids))
        self.floor = low if self.floor is None else min(self.floor, low)
        self.ids = {i for i in self.ids if i < self.floor}

    def changed(self, nid: int) -> None:
        if self.floor is not None and nid >= self.floor:
            return
        self.ids.add(int(nid))
        if len(self.ids) > self.MAX_IDS:
            self.floor = min(self.ids) if self.floor is None else min(self.floor, min(self.ids))
            self.ids.clear()

    def past(self, below: int) -> "OwnRows":
        """A copy without the ids <= ``below`` (chunks known to have a vector)."""
        floor = None if self.floor is None else max(self.floor, below + 1)
        return OwnRows(floor, (i for i in self.ids if i > below))

    def to_env(self) -> str:
        return f"{'' if self.floor is None else self.floor};{','.join(map(str, sorted(self.ids)))}"

    @classmethod
    def from_env(cls, text: str) -> "OwnRows":
        floor, _, ids = text.partition(";")
        return cls(int(floor) if floor.strip() else None, (int(i) for i in ids.split(",") if i.strip()))


class HandOff:
    """What a handed-off ``causalmem embed`` received from the closing process: the embed lock's
    descriptor and the rows to embed (None: the whole queue, as a manual ``causalmem embed``)."""

    def __init__(self, fd: int, rows: OwnRows | None) -> None:
        self.fd = fd
        self.rows = rows

    @classmethod
    def take_from_env(cls) -> "HandOff | None":
        """The hand-off this process was started with (read once: the variables are removed)."""
        fd_text = os.environ.pop(LOCK_FD_ENV, None)
        rows_text = os.environ.pop(ROWS_ENV, None)
        if fd_text is None:
            return None
        try:
            return cls(int(fd_text), None if rows_text is None else OwnRows.from_env(rows_text))
        except ValueError:
            logger.warning("causalmem: ignoring a malformed hand-off (%s=%r, %s=%r)", LOCK_FD_ENV, fd_text,
                           ROWS_ENV, rows_text)
            return None


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


def hand_off(db_path: str, spec: str, directory: Path, rows: OwnRows, *,
             spawn: Callable[..., bool] | None = None) -> bool:
    """Start a detached ``causalmem embed`` for ``db_path`` with embedder ``spec`` for ``rows`` unless
    one holds the store's embed lock; True when started. The child inherits the lock (and drops it
    when done)."""
    fd = try_lock(directory)
    if fd is None:
        return False
    try:
        pkg_root = str(Path(__file__).resolve().parents[1])  # this very causalmem, whatever sys.path says
        env = {**os.environ, LOCK_FD_ENV: str(fd), ROWS_ENV: rows.to_env(), HANDOFF_ENV: "0",
               "PYTHONPATH": os.pathsep.join(p for p in (pkg_root, os.environ.get("PYTHONPATH")) if p)}
        argv = [sys.executable, "-m", "causalmem", "-q", "--db", db_path, "embed", "--embedder", spec, "--no-progress"]
        popen: dict[str, Any] = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     pass_fds=(fd,), env=env)
        if spawn is not None:  # ``background.Background.spawn``: its own session, reaped, none in a forked child
            if not spawn(argv, **popen):
                return False
        else:
            subprocess.Popen(argv, start_new_session=True, **popen)
        logger.info("causalmem: %s: the embedding queue handed to a detached `causalmem embed`", db_path)
        return True
    except OSError as exc:
        logger.warning("causalmem: could not start `causalmem embed` for %s: %s", db_path, exc)
        return False
    finally:
        os.close(fd)


def continue_handed_off(views: EmbeddingHost, handed: HandOff | None) -> int:
    """In a ``causalmem embed`` started by a hand-off, after its pass: drop the inherited lock, look
    once more for rows (a writer that found the lock held started nobody) — only chunks from the
    handed rows' ``floor`` up when it was given rows, else the whole queue — and go on, lock taken
    again, while such rows keep coming; returns how many more it embedded."""
    directory = views.sidecar_dir
    if handed is None:
        return 0
    floor = None if handed.rows is None else handed.rows.floor
    if handed.rows is not None and floor is None:  # only older texts were handed: nothing newer to watch
        os.close(handed.fd)
        return 0
    done = 0
    fd: int | None = handed.fd
    while fd is not None:
        os.close(fd)  # released: from now on a closing writer starts its own child
        emb = views.embedder
        if emb is None or directory is None:
            break
        with views.lock:
            views.sync_external()
            left = bool(views.store.chunks_missing_embedding(emb.model_name, limit=1,
                                                             after_nid=-1 if floor is None else floor - 1))
        if not left:
            break
        fd = try_lock(directory)
        if fd is not None:
            if floor is None:
                with views.lock:
                    views.reset_embedded_mark()
                done += embed_pending(views)
            else:
                done += embed_rows(views, OwnRows(floor))[0]
    return done


def embed_rows(views: EmbeddingHost, rows: OwnRows, *, batch_size: int = 256,
               deadline: float | None = None) -> tuple[int, bool]:
    """Embed the queued chunks among ``rows`` (their ``ids``, then every chunk from ``floor`` up) in the
    calling thread, stopping between batches once ``time.monotonic()`` passed ``deadline``; returns
    (vectors stored, whether none of ``rows`` is left without one)."""
    with views.embed_lock:
        emb = views.embedder
        if emb is None or not rows:
            return 0, True
        model = emb.model_name

        def late() -> bool:
            return deadline is not None and time.monotonic() > deadline

        done = 0
        ids = sorted(rows.ids)
        for lo in range(0, len(ids), batch_size):
            if late():
                return done, False
            part = ids[lo: lo + batch_size]
            with views.lock:
                live = views.store.chunk_rows_by_nid(part)
                have = {n for n, _ in views.store.embeddings_of(part, model)}
            done += _embed_batch(views, [(n, r.text) for n, r in sorted(live.items())
                                         if r.valid_to is None and n not in have])
        after = None if rows.floor is None else rows.floor - 1
        while after is not None:
            with views.lock:
                batch = views.store.chunks_missing_embedding(model, limit=batch_size, after_nid=after)
            if not batch:
                break
            if late():
                return done, False
            after = batch[-1][0]
            done += _embed_batch(views, batch)
        return done, True


def _embed_batch(views: EmbeddingHost, batch: list[tuple[int, str]], stopping: Callable[[], bool] = lambda: False,
                 pause: Callable[[], object] | None = None) -> int:
    """Encode ``batch`` (no lock held) and store it; returns how many vectors were stored. ``pause``
    (the background worker's) is called before each sub-batch: it returns once writes let it."""
    emb = views.embedder
    if emb is None or not batch:
        return 0
    parts = []
    for i in range(0, len(batch), _SUB_BATCH):  # sub-batches: a stop (close, exit) waits for one only
        if pause is not None:
            pause()
        parts.append(np.asarray(emb.encode([t for _, t in batch[i:i + _SUB_BATCH]]), dtype=np.float32))
        if stopping():
            return 0
    vecs = np.vstack(parts)
    with views.write(background=True) as fx:
        views.store_vectors([(nid, t, v) for (nid, t), v in zip(batch, vecs)])
        views.vectors_stored(fx, [nid for nid, _ in batch], emb.model_name, emb.dim,
                             [text_hash(t) for _, t in batch])
    return len(batch)


def embed_pending(views: EmbeddingHost, *, batch_size: int = 256, progress: Progress | None = None,
                  stopping: Callable[[], bool] = lambda: False, pause: Callable[[], object] | None = None) -> int:
    """Embed the whole queue in the calling thread (``reembed``/backfill); returns how many.

    One pass at a time per ``Views`` (the worker and ``reembed`` never encode the same rows twice)."""
    with views.embed_lock:
        return _embed_pending(views, batch_size, progress, stopping, pause)


def _embed_pending(views: EmbeddingHost, batch_size: int, progress: Progress | None,
                   stopping: Callable[[], bool], pause: Callable[[], object] | None = None) -> int:
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
        done += _embed_batch(views, batch, stopping, pause)
        if progress is not None:
            progress(done, max(todo, done))
        logger.debug("embedded %d/%d pending chunks", done, todo)
    else:
        return done
    with views.lock:
        if views.mark_resets == resets:  # nothing reset the mark meanwhile
            views.embedded_below = after
    return done


def _queue_known_empty(views: EmbeddingHost) -> bool:
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

    def __init__(self, views: EmbeddingHost, *, batch_size: int = 256, progress: Progress | None = None,
                 owner: Any = None) -> None:
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
        # its threads are started by ``owner`` (``background.Background``), which stops this worker at
        # close and at interpreter exit (a thread killed inside a native encoder aborts the process)
        self._owner = owner
        if owner is not None:
            owner.add("embed", self.stop)
        self._timer: threading.Timer | None = None
        self._deferred: threading.Timer | None = None  # the start after a write (``kick_deferred``)
        self._waiters = 0  # callers in ``wait``: the worker then stops stepping aside for writes

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def kick_later(self, delay: float) -> None:
        """Resume the stored queue ``delay`` seconds after open (not on the cold-start path)."""
        self._timer = self._start_timer("causalmem-embed-resume", delay, self.kick)

    def kick_deferred(self, delay: float) -> None:
        """New chunks are queued: counted now (``wait`` sees them), the thread started ``delay``
        seconds later unless it runs already — a process that writes and closes at once (a CLI
        ``record``) never loads the model; ``stop`` cancels the start."""
        with self._cond:
            if self._stop:
                return
            self._kicks += 1
            if self.running:
                self._cond.notify_all()
                return
            if self._deferred is None:
                self._deferred = self._start_timer("causalmem-embed-start", delay, self._start_deferred)

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
            if self._owner is not None:
                self._thread = self._owner.thread("causalmem-embed", self._run)
            else:
                self._thread = threading.Thread(target=self._run, name="causalmem-embed", daemon=True)
                self._thread.start()
        self._cond.notify_all()

    def _start_timer(self, name: str, delay: float, target: Callable[[], None]) -> threading.Timer:
        if self._owner is not None:
            timer: threading.Timer = self._owner.timer(name, delay, target)
            return timer
        timer = threading.Timer(delay, target)
        timer.name, timer.daemon = name, True
        timer.start()
        return timer

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every chunk written before this call has a vector; False on timeout."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
            raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
        with self._cond:
            want = self._kicks
            if self._done < want:
                self._start_locked()
            self._waiters += 1
        self.views.write_gate.wake()  # someone waits for the vectors: no more stepping aside
        with self._cond:
            try:
                self._cond.wait_for(lambda: self._done >= want or self.error is not None or self._stop
                                    or not self.running, timeout)
            finally:
                self._waiters -= 1
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
        self.views.write_gate.wake()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _stopping(self) -> bool:
        return self._stop

    def _step_aside(self) -> None:
        """Before an encode (and before the model loads): let the writes in flight finish and wait
        for a quiet moment (``write_gate``), unless someone waits for the vectors or a stop came."""
        self.views.write_gate.wait_quiet(lambda: self._stop or self._waiters > 0)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not wait_for_work(self._cond, lambda: self._done < self._kicks, lambda: self._stop):
                    return
                seen = self._kicks
            try:
                self._step_aside()  # the first pass loads the model: not in the middle of a write stream
                n = embed_pending(self.views, batch_size=self.batch_size, progress=self.progress,
                                  stopping=self._stopping, pause=self._step_aside)
                self.embedded += n
            except Exception as exc:  # keep the thread alive: the next kick retries
                if self._stop:  # the store closed under a last batch: nothing is lost
                    return
                logger.warning("background embedding failed: %s", exc)
                with self._cond:
                    self.error = without_traceback(exc)  # its frames would hold the failed batch's views
                    self._done = seen  # do not spin; a new kick retries
                    self._cond.notify_all()
                time.sleep(0.05)
                continue
            with self._cond:
                if not self._stop:
                    self._done = max(self._done, seen)
                self._cond.notify_all()
