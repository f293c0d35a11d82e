"""The search reinforcement queue: access counts and Hebbian credit, queued by searches, written in batches.

A search never takes the write lock for its access counts and learned links: it queues them here
(``queue``); they are written by the next write of the store (``Views.write`` calls ``take`` and
``write_rows`` in its transaction), by ``flush``, every ``Config.reinforce_batch`` searches, or — on a
server backend — by the flusher thread (``reinforce_flush.Flusher``) on its own connection. The links
a queued search makes are in the projection at once (``learn_now``): the next query spreads over
them. A full queue (the writer busy for long) drops its oldest searches with one warning per
episode, counted in ``dropped`` (``Memory.stats()["reinforce_dropped"]``).

The queue is given the narrow interface of its host (:class:`ReinforceHost`, the views), never a
``Memory``; the flusher thread is given this queue (it satisfies ``reinforce_flush.FlushQueue``).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, ContextManager, Mapping, Protocol, Sequence

import numpy as np

from . import learning
from .config import Config
from .errors import StoreError
from .reinforce_flush import Flusher, Queued, credit_rows

log = logging.getLogger("causalmem")

__all__ = ["Reinforcement", "ReinforceHost"]

Effects = list[Callable[[], None]]


class ReinforceHost(Protocol):
    """What the queue reads and calls on its host (``Views``)."""

    store: Any
    config: Config
    lock: threading.RLock
    projection: Any
    chunks: Any
    effects: Any  # view_effects.AfterCommit (``accessed``)

    def now(self) -> float: ...

    def write(self, *, wait: bool = True, sync: bool = True, background: bool = False) -> ContextManager[Effects]: ...

    def vectors_of(self, nids: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def note(self, kind: str, ids: Sequence[int] | np.ndarray) -> None: ...

    def commit_adopted(self, seq: int, importance: list[tuple[int, float]]) -> None: ...


class Reinforcement:
    """The queue of one store's searches (see the module docstring); guarded by the host's lock."""

    def __init__(self, host: ReinforceHost, *, spawn: Callable[..., threading.Thread] | None = None) -> None:
        self.host = host
        self.store = host.store
        self.config = host.config
        self.lock = host.lock
        # search reinforcement waiting for a write: (clock time, nids, nid groups of one scope each)
        self.queued: list[tuple[float, list[int], list[list[int]]]] = []
        self._queued_since = 0.0
        #: searches whose reinforcement was dropped because the queue was full (the writer busy), ever
        self.dropped = 0
        self._dropping_since: int | None = None  # ``dropped`` when this episode of drops began
        # during an episode of drops that lost learned links: queued links reach the store only (see _drop_oldest)
        self._links_paused = False
        # co-occurrence weight the queued searches will add, visible to the next query already
        self.pending_co: dict[tuple[int, int], float] = {}
        # ... and the credit of the batch a server backend's flusher thread is writing (``reinforce_flush``)
        self.flushing_co: dict[tuple[int, int], float] = {}
        # a server backend writes the queue off the search call, on its own connection
        self.flusher: Flusher | None = Flusher(self, spawn=spawn) if hasattr(self.store, "writer_twin") else None
        self.off: str | None = "the database was opened read-only" if self.store.read_only else None
        self._off_logged = False
        self._deferred_here = 0  # flushes without waiting that found the write lock taken (kept queued)
        # a tenant's views on a server (``view_pool``: no flusher thread of its own) write the batch in the
        # search that fills it; a refusal keeps the queue, as the flusher's would (``_flush_in_search``)
        self.defer_refused = self.flusher is None and getattr(self.store, "pooled", False)
        self._refused_since: int | None = None  # ``_deferred_here`` when this episode of refusals began

    # ------------------------------------------------------------------ queueing
    def queue(self, nids: Sequence[int], scores: Mapping[int, float] | None = None) -> None:
        """What one search returned (best first): access counts and Hebbian credit, queued (never a
        write lock here). Pairs are credited among the best ``Config.hebbian_top`` hits only, and only
        within one scope: an unscoped search never links two users. The links they make are visible
        to the next query at once (``learn_now``); the store gets them with the queue."""
        if self.off is not None:
            self.say_off()
            return
        nids = [int(n) for n in dict.fromkeys(nids)]
        if not nids:
            return
        cfg = self.config
        groups: dict[tuple, list[int]] = {}
        table = self.host.chunks
        # by default a search credits access counts only: links come from Memory.confirm
        top = cfg.hebbian_top if cfg.hebbian_search else 0
        for n in nids[:min(top, learning.MAX_HEBBIAN_NIDS)]:
            key = (int(table.user[n]), int(table.agent[n]), int(table.run[n]),
                   int(table.session[n]) if cfg.hebbian_same_session else 0) \
                if table is not None and n < table.n else ("nid", n)
            groups.setdefault(key, []).append(n)
        if not self.queued:
            self._queued_since = time.monotonic()
        pairs = [g for g in groups.values() if len(g) > 1]
        if pairs and cfg.hebbian_min_ratio > 0 and scores:
            # a hit far below the group's best is more often a non-answer than its partner
            pairs = [k for k in ([g[0]] + [n for n in g[1:] if scores.get(n, 0.0) >= cfg.hebbian_min_ratio
                                            * scores.get(g[0], 0.0)] for g in pairs) if len(k) > 1]
        if pairs and cfg.hebbian_min_cosine > 0:
            pairs = self._close_groups(pairs)
        self.queued.append((self.host.now(), nids, pairs))
        if not self._links_paused:
            self.learn_now(pairs)
        if len(self.queued) > cfg.reinforce_queue_max:
            self._drop_oldest(len(self.queued) - cfg.reinforce_queue_max)
        if len(self.queued) >= cfg.reinforce_batch or \
                time.monotonic() - self._queued_since >= cfg.reinforce_seconds:
            if self.flusher is not None:
                self.flusher.wake()  # written on the flusher's connection, not inside this search
            else:
                self._flush_in_search()

    def _flush_in_search(self) -> None:
        """The search that filled the batch writes it, not waiting for the lock. On a tenant's views
        (``defer_refused``) a store that refuses the write (a full disk, a constraint) leaves the queue in
        place for the next write or ``flush``, counted in ``deferred``, one warning per episode: the
        search still answers."""
        try:
            self.flush(wait=False, sync=False)
        except StoreError as exc:
            if not self.defer_refused:
                raise
            self._deferred_here += 1
            if self._refused_since is None:
                self._refused_since = self._deferred_here
                log.warning("causalmem: %s: the store refused the searches' reinforcement (%s); kept queued for "
                            "the next write (counted in reinforce_deferred)", self.store.path, exc)

    def _drop_oldest(self, n: int) -> None:
        """The queue is full (the writer has been busy for long): the oldest ``n`` searches are
        dropped. One warning per episode; the episode ends, with an info line counting its drops,
        at the next successful write of the queue (``written``).

        A dropped search that carried Hebbian pairs (``Config.hebbian_search``; by default a search
        queues access counts only) had its links in the projection already. The first such drop of
        an episode re-reads the projection from the store, once, and pauses ``learn_now``: until the
        queue is written, searches queue their links for the store without showing them, so a later
        drop has nothing to take back (no rebuild per search); ``written`` shows them with one more
        re-read."""
        lost = self.queued[:n]
        del self.queued[:n]
        self.dropped += n
        if not self._links_paused and any(groups for _t, _nids, groups in lost):
            self._links_paused = True
            self.forget_pending()
        if self._dropping_since is None:
            self._dropping_since = self.dropped - n
            log.warning("causalmem: %s: reinforcement queue full (writer busy): dropping the oldest searches' "
                        "access counts%s until a write gets through (counted in reinforce_dropped)",
                        self.store.path, " and links" if self.config.hebbian_search else "")

    def written(self) -> None:
        """A write of the queued reinforcement committed: an episode of drops (if any) is over."""
        if self._links_paused and not self.queued:  # every link queued meanwhile is stored: show them
            self._links_paused = False
            self.host.projection.mark_stale()
        if self._refused_since is not None:
            log.info("causalmem: %s: reinforcement written again after %d refused writes", self.store.path,
                     self._deferred_here - self._refused_since + 1)
            self._refused_since = None
        if self._dropping_since is not None:
            log.info("causalmem: %s: reinforcement written again; %d searches were dropped while the writer "
                     "was busy", self.store.path, self.dropped - self._dropping_since)
            self._dropping_since = None

    # ------------------------------------------------------------------ writing
    def flush(self, *, wait: bool = True, sync: bool = True) -> int:
        """Write the queued reinforcement now; returns how many searches were written. With
        ``wait=False`` a busy write lock leaves the queue for later instead of waiting. With ``wait``
        a batch the flusher thread is writing is waited for first (the lock released meanwhile)."""
        if wait and self.flusher is not None:
            self.flusher.join()
        if not self.queued or self.off is not None:
            return 0
        n = len(self.queued)
        try:
            with self.host.write(wait=wait, sync=sync):
                pass
        except StoreError as exc:
            msg = str(exc)
            if "read-only" in msg or "readonly" in msg:
                self.turn_off(f"the database is read-only ({msg})")
                return 0
            if not wait and "locked" in msg:
                self._deferred_here += 1
                return 0
            raise
        return n

    @property
    def deferred(self) -> int:
        """Writes of the queue the store refused for now (busy, disk full ...), the queue kept, ever:
        the flusher thread's (a server backend) and the non-waiting flushes' (``stats()["reinforce_deferred"]``)."""
        return self._deferred_here + (self.flusher.deferred if self.flusher is not None else 0)

    def drop(self, why: str) -> None:
        """Drop what is queued (``close`` when the file refuses the write), with a log line."""
        if self.queued:
            log.warning("causalmem: %s: reinforcement of %d searches not written: %s", self.store.path,
                        len(self.queued), why)
            self.queued = []
            self.forget_pending()

    def turn_off(self, why: str) -> None:
        """The store refuses reinforcement (read-only): the queue goes, searches queue nothing more."""
        self.off = why
        self.queued = []
        self.forget_pending()
        self.say_off()

    def take(self) -> list[tuple[float, list[int], list[list[int]]]]:
        """What is queued, taken out for the write that starts now (``restore`` puts it back)."""
        queued, self.queued = self.queued, []
        return queued

    def restore(self, queued: list[tuple[float, list[int], list[list[int]]]]) -> None:
        """A write that took ``queued`` rolled back: it waits in front of what was queued since."""
        self.queued = queued + self.queued

    def write_rows(self, fx: Effects, queued: Queued) -> None:
        """The queued searches in a few statements, whatever their number (one round trip each on a
        server): the access counts in one batch; the Hebbian credit of every group read once and
        written once per pair, with the weights ``learning.hebbian_credit`` would have left after
        crediting the groups one by one in queue order."""
        self.store.touch_chunks_batch([(nids, t) for t, nids, _groups in queued])
        rows, groups = credit_rows(self.store, queued, self.config)
        if groups:
            for g in groups:
                self.host.note("o", g)
            self.store.credit_cooccurrence(rows)
        self.host.effects.accessed(fx, [n for _t, nids, _groups in queued for n in nids])
        fx.append(self.pending_co.clear)  # the store holds them now (the overlay keeps showing them)

    def adopted(self, done: tuple[int, dict, list[int] | None, list[tuple]], batch: Queued) -> None:
        """The flusher's commit of ``batch`` (its ``last_write``), taken in as an own write's effects
        would be (the caller holds the lock): the row cache from what the write returned, the chunk
        table's importance, the views' sequence."""
        seq, touched = done[0], done[1]
        exact = getattr(self.store, "adopt_write")(seq, *done[1:])
        table = self.host.chunks
        got: list[tuple[int, float]] = []
        if table is not None:
            nids = [n for n in dict.fromkeys(n for _t, ns, _g in batch for n in ns) if n < table.n]
            if exact:
                got = [(n, touched[n][1]) for n in nids if n in touched]
            else:  # a later commit was applied first: the rows as they are now
                got = [(n, r.importance) for n, r in self.store.chunk_rows_by_nid(nids).items()]
        self.host.commit_adopted(seq, got)

    # ------------------------------------------------------------------ learned links
    def _close_groups(self, groups: list[list[int]]) -> list[list[int]]:
        """The groups narrowed to hits whose vector is within ``Config.hebbian_min_cosine`` of the
        group's best hit (co-retrieval alone is weak evidence)."""
        ids, mat = self.host.vectors_of(sorted({n for g in groups for n in g}))
        if not len(ids):
            return []
        norm = mat.astype(np.float64)
        norm /= np.maximum(np.linalg.norm(norm, axis=1, keepdims=True), 1e-12)
        row = {int(n): k for k, n in enumerate(ids.tolist())}
        out = []
        for g in groups:
            if g[0] not in row:
                continue
            lead = norm[row[g[0]]]
            keep = [g[0]] + [n for n in g[1:]
                             if n in row and float(norm[row[n]] @ lead) >= self.config.hebbian_min_cosine]
            if len(keep) > 1:
                out.append(keep)
        return out

    def learned_weights(self, nids: Sequence[int]) -> dict[tuple[int, int], float]:
        """Co-occurrence weight of every learned pair ``(a < b)`` among ``nids``: the store's plus the
        credit still queued (what the next write will hold)."""
        got = self.store.cooccurrence_weights(sorted({int(n) for n in nids}))
        pending = self.pending_all()
        if pending:
            want = {int(n) for n in nids}
            for (a, b), d in pending.items():
                if a in want and b in want:
                    got[(a, b)] = got.get((a, b), 0.0) + d
        return got

    def learn_now(self, groups: Sequence[Sequence[int]]) -> None:
        """Put the co-occurrence weight these groups will get into the projection now, as the
        difference to what the store plus the earlier queued searches hold (the queue write computes
        the same weights from the store, in the same order)."""
        deltas = []
        for g in groups:
            pairs = learning.hebbian_pairs(g, learning.MAX_HEBBIAN_NIDS)
            stored = self.store.cooccurrence_weights(sorted(set(g)))
            for key in pairs:
                w, pend, fly = stored.get(key), self.pending_co.get(key), self.flushing_co.get(key)
                cur = None if w is None and pend is None and fly is None else (w or 0.0) + (pend or 0.0) + (fly or 0.0)
                delta = learning.next_hebbian_weight(cur, self.config) - (cur or 0.0)
                # a pair credited at weight 0 (Config.hebbian_start = 0) is remembered too: its next
                # credit is a repeat and must give the link at once, as the queue write will
                self.pending_co[key] = (pend or 0.0) + delta
                if delta > 0:
                    deltas.append((key[0], key[1], delta))
        if deltas:
            self.host.projection.learned_links(deltas)

    def pending_all(self) -> dict[tuple[int, int], float]:
        """The co-occurrence credit not in the store yet: queued, plus the batch being written."""
        if not self.flushing_co:
            return self.pending_co
        out = dict(self.flushing_co)
        for key, d in self.pending_co.items():
            out[key] = out.get(key, 0.0) + d
        return out

    def forget_pending(self) -> None:
        """Queued reinforcement was dropped: the projection is re-read from the store (and what is
        still queued becomes visible when it is written)."""
        self.pending_co.clear()
        self.host.projection.mark_stale()

    def say_off(self) -> None:
        if not self._off_logged:
            self._off_logged = True
            log.warning("causalmem: %s: search reinforcement is off: %s", self.store.path, self.off)

    def close(self) -> None:
        """Stop the flusher thread (the caller holds the lock and wrote the queue)."""
        if self.flusher is not None:
            self.flusher.close()
