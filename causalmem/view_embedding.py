"""The embedding side of the views: the background worker, waiting for vectors, and close-time rows.

``EmbeddingSide`` starts the background embedding worker (``embedding.EmbeddingWorker``) when
chunks without vectors are committed — deferred by ``WORKER_START_DELAY_S``, so a one-shot writer
closes before it loads the model — or shortly after open when an earlier process left a queue
(``RESUME_DELAY_S``); it answers ``wait_embedded`` and ``reembed``, and at close settles this
process's own rows still without a vector by the rule of ``Config.embed_handoff`` (embedded here,
handed to a detached ``causalmem embed``, or left in the store's queue: ``embedding.py``). Its host
(:class:`EmbedSideHost`, the views) gives the store, the lock, the embedder and the vector wait.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from .embedding import CLOSE_DRAIN_S, EmbeddingHost, EmbeddingWorker, HandOff, OwnRows, Progress, \
    continue_handed_off, embed_pending, embed_rows, handoff_setting, model_loaded

log = logging.getLogger("causalmem")

__all__ = ["EmbeddingSide", "EmbedSideHost", "RESUME_DELAY_S", "WORKER_START_DELAY_S"]

#: seconds after open before the background worker looks for an earlier process's queue
RESUME_DELAY_S = 1.0
#: seconds after a write before a worker not yet running starts (and loads the model)
WORKER_START_DELAY_S = 0.5


class EmbedSideHost(EmbeddingHost, Protocol):
    """What the embedding side reads of its host (``Views``): what an embedding pass needs, and more."""

    background: Any
    vector_view: Any

    def wait_vectors(self, timeout: float | None = None, *, folded: bool = False) -> bool: ...


class EmbeddingSide:
    """The embedding worker's life in one ``Views``, and this process's own rows without vectors."""

    def __init__(self, host: EmbedSideHost, spec: Any, handoff: str | bool) -> None:
        self.host = host
        self.spec = spec  # the embedder as given (None: the semantic channel is off)
        self.closed = False
        self._worker: EmbeddingWorker | None = None
        #: what close() does with this process's rows still without a vector ("auto", "drain", "off")
        self.handoff = handoff_setting(handoff)
        self.own_rows = OwnRows()  # the chunks this process queued (the bound of a close-time hand-off)
        #: set in a ``causalmem embed`` started by a hand-off: it embeds the rows it was handed, no more
        self.handed_off = HandOff.take_from_env() if spec is not None else None
        self.handoff_child = self.handed_off is not None  # then no background worker ever starts here

    def resume_later(self) -> None:
        """The queue of an earlier process (crash, close without drain) resumes shortly after open."""
        store = self.host.store
        if self.spec is not None and getattr(store, "path", ":memory:") != ":memory:" and not self.handoff_child:
            worker = self.worker
            if worker is not None:
                worker.kick_later(RESUME_DELAY_S)

    @property
    def worker(self) -> EmbeddingWorker | None:
        """The background embedding worker (None when the semantic channel is off)."""
        if self._worker is None and self.spec is not None and not self.closed \
                and not getattr(self.host.store, "read_only", False) \
                and getattr(self.host.store, "embeds", True):  # read-only, or a tenant's window: never a worker
            self._worker = EmbeddingWorker(self.host, owner=self.host.background)
        return self._worker

    def queue_changed(self) -> None:
        """Chunks without vectors were committed: wake the background worker (its first start is
        deferred by ``WORKER_START_DELAY_S``: a one-shot writer closes before it loads the model)."""
        if self.spec is None or self.closed or self.handoff_child:
            return
        worker = self.worker
        if worker is not None:
            worker.kick_deferred(WORKER_START_DELAY_S)

    def wait_embedded(self, timeout: float | None = None) -> bool:
        """Block until every chunk committed so far has a vector (True), or ``timeout`` passed."""
        host = self.host
        emb = host.embedder if self.spec is not None else None
        if emb is None:
            return True
        worker = self.worker
        deadline = None if timeout is None else time.monotonic() + timeout
        if worker is None:  # read-only (or closed): nobody embeds; say whether anything is missing
            with host.lock:
                done = not host.store.chunks_missing_embedding(emb.model_name, limit=1)
        else:
            done = worker.wait(timeout)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return host.wait_vectors(left) and done

    def settle_queue(self) -> OwnRows | None:
        """At close, the own rows still without a vector: embedded here — for at most ``CLOSE_DRAIN_S``
        when the model is loaded, or all of them with ``embed_handoff="drain"`` — and what is left
        returned when it is to be handed off (``"auto"``, a file store, an embedder spec), else None."""
        worker, host = self._worker, self.host
        if worker is None or not self.own_rows or self.closed or self.spec is None:
            return None
        with host.lock:
            rows = self.own_rows.past(host.embedded_below) if host.embedded_below > 0 else self.own_rows
        drain_all = self.handoff == "drain"
        if not drain_all and not model_loaded(host.vector_view.resolved):
            return self._handoff_rows(rows)
        worker.stop()  # its current sub-batch ends; the own rows are embedded here instead
        try:
            _, complete = embed_rows(host, rows, batch_size=64,
                                     deadline=None if drain_all else time.monotonic() + CLOSE_DRAIN_S)
        except Exception as exc:  # the embedder failed: the queue stays in the store
            log.warning("causalmem: embedding at close failed: %s", exc)
            return None
        return None if complete else self._handoff_rows(rows)

    def _handoff_rows(self, rows: OwnRows) -> OwnRows | None:
        """``rows`` to hand to a detached ``causalmem embed``, or None when this store/embedder/setting
        cannot or must not; with only older texts changed, the child also watches chunks from the
        next id up (rows other writers commit while it runs)."""
        if self.handoff != "auto" or not isinstance(self.spec, str) or self.host.sidecar_dir is None:
            return None
        if rows.floor is None:
            with self.host.lock:
                rows = OwnRows(self.host.store.max_chunk_nid() + 1, rows.ids)
        return rows

    def stop(self, drain: bool = False) -> None:
        """Stop the worker (after draining the queue when ``drain``); the queue stays in the store."""
        if drain:
            self.wait_embedded()
        self.closed = True
        self.host.background.stop("query", "embed", "vectors")

    def reembed(self, progress: Progress | None = None) -> int:
        """Vectors for every chunk whose text or model changed, in this thread; returns how many."""
        host = self.host
        handed, self.handed_off = self.handed_off, None
        if handed is not None and handed.rows is not None:  # a handed-off ``causalmem embed``: its rows only
            done = embed_rows(host, handed.rows)[0]
        else:
            with host.lock:
                host.reset_embedded_mark()  # look at every chunk
            done = embed_pending(host, progress=progress)
        return done + continue_handed_off(host, handed)
