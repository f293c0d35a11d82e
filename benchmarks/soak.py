"""Crash-and-soak harness: several processes on one store, killed and starved of disk at random.

    python benchmarks/soak.py --backend sqlite|postgres|both --seconds S --workers N \
        [--model | --no-model] [--kill-every A:B] [--fill-every A:B] --out benchmarks/results/soak.md

N worker processes (``soak.py worker``, default 4) share one store for ``--seconds`` (split over the
backends, and over model on / model off when neither ``--model`` nor ``--no-model`` is given). Each
mixes every public operation at fixed ratios (reads dominate): add, record_many, record_decision,
search, search_causal, trace_cause, feedback, confirm, delete, purge (``delete_all(purge=True)``),
sleep, export, import_, close/reopen.

Two chaos threads run beside them: one SIGKILLs a random worker at a random moment and starts it
again (the check below runs between the kill and the restart); one fills the store's disk with a
ballast file until ``ENOSPC``, holds it a few seconds and frees it. The disk is a small tmpfs mounted
(as root) for the run: SQLite keeps the database, its WAL and ``<db>.idx/`` on it; PostgreSQL keeps
the soak database in a tablespace on it (relations run out of space and the statement fails; the
cluster's WAL stays on the ordinary disk, so the server keeps running, as with a full data volume).
Without root (no mount), the disk-full thread is off and the report says so.

The oracle: before a write each worker appends its intent (the texts, the scope) to its own log and
fsyncs it, after the call returns it appends the acknowledgement (the ids) and fsyncs again; a call
that raises appends the error. After every kill, at every phase end and at the end, the checker
reads the store directly (sqlite3 / psycopg, not through causalmem) and verifies:

* ``acked_present``: every acknowledged chunk is there, same text and scope, live unless deleted;
  every acknowledged edge is there with the same ends;
* ``deleted_absent`` / ``purged_absent``: acknowledged deletes are soft-deleted, purged scopes gone;
* ``all_or_nothing``: a call that was killed or failed left all of its rows or none (a record_many
  batch, the turns of one add, an import_);
* ``failed_left_nothing``: a call that raised did not commit;
* ``integrity``: ``PRAGMA integrity_check`` and ``foreign_key_check`` (SQLite); on PostgreSQL no
  dangling edge/fact/embedding and the change log behind the state counter; both: no edge whose two
  ends are in different scopes;
* ``scope_isolation``: every search/search_causal/trace_cause hit a worker got (and every checker
  search) belongs to the scope asked for;
* ``index_equal`` (file stores): searches from a fresh open with ``<db>.idx/`` kept and deleted give
  the same ids and scores, every vector scored exactly (past ``vector_ann_min`` the default search is
  approximate, and two HNSW graphs of the same vectors propose different candidates);
* ``no_leak``: after each close, a worker's threads, child processes and descriptors come back to
  what they were after its first close (psutil).

Exit status 0 when every invariant held, 1 otherwise; the report lists every count.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # this checkout, in the harness and in every worker (they run this file)
    sys.path.insert(0, str(ROOT))

WORDS = ("deploy cache config rollback database migration schema index query latency timeout retry "
         "queue worker memory leak crash alert monitor build test release branch merge review ticket "
         "customer invoice payment refund login password token session cookie server client network "
         "disk backup restore snapshot replica shard cluster node pod container image registry").split()
USERS = ("u0", "u1", "u2")

#: relative frequency of each operation in a worker's loop (reads dominate, as in an agent's use)
WEIGHTS = {
    "search": 30, "search_causal": 8, "trace_cause": 5, "add": 14, "record_decision": 10,
    "record_many": 5, "feedback": 6, "confirm": 4, "delete": 3, "purge": 0.6, "sleep": 0.4,
    "export": 0.4, "import_": 1.0, "reopen": 1.2,
}


# ---------------------------------------------------------------------------------------------- log
class Journal:
    """Append-only, fsynced JSON lines: what this worker saw acknowledged."""

    def __init__(self, path: Path) -> None:
        self.fh = open(path, "a", buffering=1)

    def write(self, **rec: Any) -> None:
        self.fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self.fh.flush()
        os.fsync(self.fh.fileno())


def read_journal(path: Path) -> list[dict[str, Any]]:
    out = []
    if not path.exists():
        return out
    with open(path) as fh:
        for line in fh:
            if not line.endswith("\n"):
                break  # a torn last line (killed mid-write): its call was never acknowledged
            out.append(json.loads(line))
    return out


# ------------------------------------------------------------------------------------------- worker
def _open(store: str, model: bool) -> Any:
    from causalmem import Memory

    return Memory(store, embedder="auto" if model else None)


def _proc_counts() -> dict[str, int]:
    import psutil

    p = psutil.Process()
    kids = [c for c in p.children(recursive=True) if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    return {"threads": p.num_threads(), "fds": p.num_fds(), "children": len(kids)}


def _thread_names() -> list[str]:
    """Python threads by name, then every native thread by its kernel name (``/proc/self/task/*/comm``)."""
    names = [f"py:{t.name}" for t in threading.enumerate()]
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            names.append("os:" + Path(f"/proc/self/task/{tid}/comm").read_text().strip())
    return sorted(names)


def _fd_paths() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
    return sorted(out)


def _holders(limit: int = 6) -> list[str]:
    """After a leak: which live objects still hold the index's file-backed parts (vector segments, row
    files, views), each with the chain of its referrers' types up to the module or frame holding it."""
    kinds = ("AnnSegment", "Rows", "VectorIndex", "Views", "IndexKeeper")
    found = [o for o in gc.get_objects() if type(o).__name__ in kinds][:limit]
    out = []
    here = sys._getframe()
    for obj in found:
        chain, cur, seen = [type(obj).__name__], obj, {id(found), id(here)}
        for _ in range(5):  # follow the first referrer that is not this function's own bookkeeping
            seen.add(id(cur))
            nxt = next((r for r in gc.get_referrers(cur) if id(r) not in seen and r is not chain), None)
            if nxt is None:
                break
            cur = nxt
            del nxt
            desc = type(cur).__name__
            if isinstance(cur, dict):
                desc += f"[{','.join(sorted(map(str, cur))[:4])}]"
            elif hasattr(cur, "f_code"):
                desc += f"[{cur.f_code.co_filename.rsplit('/', 1)[-1]}:{cur.f_lineno}]"
            chain.append(desc)
        out.append(" <- ".join(chain))
    return out


def run_worker(a: argparse.Namespace) -> int:
    wid, rng = a.wid, random.Random(a.seed)
    log_path = Path(a.log)
    past = read_journal(log_path)
    inc = sum(1 for r in past if r["t"] == "start")
    # what this worker owns, rebuilt from its journal (an unacknowledged call owns nothing)
    mine: dict[str, str] = {}  # chunk id -> scope user
    for r in past:
        if r["t"] == "ack" and r.get("ids"):
            for cid, user in zip(r["ids"], r["users"]):
                mine[cid] = user
        elif r["t"] == "ack" and r["op"] == "delete":
            mine.pop(r["id"], None)
        elif r["t"] == "ack" and r["op"] == "purge":
            for cid in [c for c, u in mine.items() if u == r["user"]]:
                del mine[cid]
    j = Journal(log_path)
    j.write(t="start", inc=inc, pid=os.getpid(), at=time.time())
    seq = 0
    private = f"p{wid}"
    scratch = Path(a.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    ops = list(WEIGHTS)
    weights = [WEIGHTS[o] for o in ops]
    mem = _open(a.store, a.model)
    if a.model:  # the model's runtime opens its process-wide pools and files on first use, not per open:
        # load it now, before the leak baseline (a search loads no model while no vector is stored yet)
        with contextlib.suppress(Exception):
            from causalmem.semantic import resolve_embedder

            warm = resolve_embedder("auto")
            if warm is not None:
                warm.encode(["warm up the model"] * 80)  # several sub-batches: its helper threads too
    baseline: dict[str, int] | None = None
    base_fds: list[str] = []
    base_threads: list[str] = []
    closes = 0
    deadline = time.time() + a.seconds
    stop_file = Path(a.stop_file)

    def text(kind: str) -> str:
        nonlocal seq
        seq += 1
        return f"{kind} {' '.join(rng.sample(WORDS, 4))} w{wid}i{inc}s{seq}"

    def pick_user() -> str:
        return private if rng.random() < 0.2 else rng.choice(USERS)

    while time.time() < deadline and not stop_file.exists():
        op = rng.choices(ops, weights)[0]
        key = f"w{wid}i{inc}k{seq}"
        if mem is None:  # the last reopen failed (a full disk can refuse the connection): open again first
            op = "open"
        try:
            if op == "open":
                mem = _open(a.store, a.model)
                continue
            if op == "add":
                user = pick_user()
                turns = [{"role": r, "content": text(r)} for r in ("user", "assistant")[:rng.randint(1, 2)]]
                j.write(t="intent", op=op, k=key, texts=[t["content"] for t in turns], users=[user] * len(turns))
                res = mem.add(turns, user_id=user, session_id=f"s{wid}-{inc}")
                j.write(t="ack", op=op, k=key, ids=[c.id for c in res], users=[user] * len(res))
            elif op == "record_decision":
                user = pick_user()
                d, o = text("decision"), text("outcome")
                j.write(t="intent", op=op, k=key, texts=[d, o], users=[user, user])
                e = mem.record_decision(d, o, relation=rng.choice(["caused", "enabled", "prevented"]),
                                        user_id=user, task_tag=rng.choice(["ops", "billing", None]))
                j.write(t="ack", op=op, k=key, ids=[e.src, e.dst], users=[user, user], edges=[[e.id, e.src, e.dst]])
            elif op == "record_many":
                items, texts, users = [], [], []
                for _ in range(rng.randint(2, 12)):
                    user = pick_user()
                    d, o = text("decision"), text("outcome")
                    items.append({"decision": d, "outcome": o, "user_id": user})
                    texts += [d, o]
                    users += [user, user]
                j.write(t="intent", op=op, k=key, texts=texts, users=users)
                es = mem.record_many(items)
                ids = [x for e in es for x in (e.src, e.dst)]
                j.write(t="ack", op=op, k=key, ids=ids, users=users, edges=[[e.id, e.src, e.dst] for e in es])
            elif op in ("search", "search_causal", "trace_cause"):
                user = rng.choice(USERS + (private,))
                q = " ".join(rng.sample(WORDS, 3))
                if op == "search":
                    hits = mem.search(q, top_k=10, user_id=user)
                    bad = [h.id for h in hits if h.user_id != user]
                    ids = [h.id for h in hits]
                else:
                    fn = mem.search_causal if op == "search_causal" else mem.trace_cause
                    acts = fn(q, limit=5, user_id=user)
                    ids = [str(x.node_id) for x in acts]
                    bad = []
                    for cid in ids:  # an activated node must be of the asked scope
                        with contextlib.suppress(KeyError):
                            if mem.get(cid).user_id != user:
                                bad.append(cid)
                j.write(t="read", op=op, user=user, n=len(ids), leaked=bad)
            elif op == "feedback" and mine:
                cid = rng.choice(list(mine))
                q = mem.feedback(cid, rng.uniform(-1, 1))
                j.write(t="ack", op=op, k=key, id=cid, q=q)
            elif op == "confirm" and len(mine) >= 2:
                by_user = defaultdict(list)
                for c, u in mine.items():
                    by_user[u].append(c)
                group = max(by_user.values(), key=len)
                if len(group) >= 2:
                    n = mem.confirm(rng.sample(group, min(3, len(group))))
                    j.write(t="ack", op=op, k=key, n=n)
            elif op == "delete" and mine:
                cid = rng.choice(list(mine))
                j.write(t="intent", op=op, k=key, id=cid)
                mem.delete(cid)
                mine.pop(cid, None)
                j.write(t="ack", op=op, k=key, id=cid)
            elif op == "purge":
                j.write(t="intent", op=op, k=key, user=private)
                from causalmem import PurgeIncompleteError

                try:
                    n, compacted = mem.delete_all(user_id=private, purge=True), True
                except PurgeIncompleteError as exc:  # the rows are gone (committed), the rewrite failed
                    n, compacted = exc.purged, False
                for cid in [c for c, u in mine.items() if u == private]:
                    del mine[cid]
                j.write(t="ack", op=op, k=key, user=private, n=n, compacted=compacted)
            elif op == "sleep":
                rep = mem.sleep()
                j.write(t="ack", op=op, k=key, report=str(rep)[:200])
            elif op == "export":
                out = scratch / "export.jsonl"
                n = mem.export(out)
                with open(out) as fh:
                    lines = sum(1 for _ in fh)
                j.write(t="ack", op=op, k=key, n=n, ok=n == lines)
            elif op == "import_":
                # a dump made elsewhere (a scratch memory), loaded into the shared store
                user = pick_user()
                from causalmem import Memory

                with Memory(":memory:", embedder=None) as src:
                    for _ in range(rng.randint(1, 3)):
                        src.record_decision(text("decision"), text("outcome"), user_id=user)
                    chunks = src.get_all(limit=100)
                    buf = io.StringIO()
                    src.export(buf)
                ids, texts = [c.id for c in chunks], [c.text for c in chunks]
                j.write(t="intent", op=op, k=key, texts=texts, users=[user] * len(ids), ids=ids)
                buf.seek(0)
                counts = mem.import_(buf)
                j.write(t="ack", op=op, k=key, ids=ids, users=[user] * len(ids), counts=counts)
            elif op == "reopen":
                mem.close()
                mem = None  # until the open below succeeds
                closes += 1
                after = _settled(baseline)
                if closes <= 2:
                    # the baseline is the second close: what the first open's native runtime started once
                    # (thread pools, its own cache files) stays for the process; a leak grows per reopen
                    baseline, base_fds, base_threads = after, _fd_paths(), _thread_names()
                    j.write(t="leak", base=baseline, now=after, leaked=False, until_gc=False, baseline=True)
                    mem = _open(a.store, a.model)
                    continue
                assert baseline is not None
                leaked = any(after[k] > baseline[k] for k in baseline)
                extra = sorted((Counter(_fd_paths()) - Counter(base_fds)).elements()) if leaked else []
                extra_threads = sorted((Counter(_thread_names()) - Counter(base_threads)).elements()) if leaked else []
                if leaked:  # held by garbage (a reference cycle) or for good?
                    gc.collect()
                    after_gc = _proc_counts()
                    leaked_gc = any(after_gc[k] > baseline[k] for k in baseline)
                    holders = _holders() if leaked_gc else []
                else:
                    after_gc, leaked_gc, holders = after, False, []
                j.write(t="leak", base=baseline, now=after, leaked=leaked_gc, until_gc=leaked and not leaked_gc,
                        extra_fds=extra[:10], extra_threads=extra_threads[:10], after_gc=after_gc, holders=holders)
                mem = _open(a.store, a.model)
            else:
                continue
        except Exception as exc:  # noqa: BLE001 - every failure is logged; disk-full ones are expected
            j.write(t="fail", op=op, k=key, err=f"{type(exc).__name__}: {str(exc)[:300]}",
                    where=traceback.format_exc(limit=-6)[-1500:])
            time.sleep(0.05)
    if mem is not None:
        mem.close()
    j.write(t="stop", at=time.time())
    return 0


def _settled(baseline: dict[str, int] | None) -> dict[str, int]:
    """Counts after a close; threads and children get a few seconds to finish."""
    now = _proc_counts()
    if baseline is None:
        time.sleep(1.0)
        return _proc_counts()
    t0 = time.time()
    while any(now[k] > baseline[k] for k in baseline) and time.time() - t0 < 5:
        time.sleep(0.2)
        now = _proc_counts()
    return now


# ------------------------------------------------------------------------------------------ checker
class RawStore:
    """The store read directly, not through causalmem."""

    def __init__(self, backend: str, target: str) -> None:
        self.backend, self.target = backend, target

    def _rows(self, sql: str) -> list[tuple]:
        if self.backend == "sqlite":
            con = sqlite3.connect(f"file:{self.target}?mode=ro", uri=True, timeout=60)
            try:
                con.execute("PRAGMA busy_timeout=60000")
                con.execute("BEGIN")
                return list(con.execute(sql))
            finally:
                con.close()
        import psycopg

        with psycopg.connect(self.target, autocommit=False) as con:
            con.execute("SET search_path TO causalmem")
            con.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            return list(con.execute(sql))

    def created(self) -> bool:
        """Whether a worker has created the store's tables yet (a kill may come before the first open ends)."""
        if self.backend == "sqlite":
            if not os.path.exists(self.target):
                return False
            sql = "SELECT count(*) FROM sqlite_master WHERE name = 'chunks'"
        else:
            sql = "SELECT count(*) FROM pg_tables WHERE schemaname = 'causalmem' AND tablename = 'chunks'"
        return bool(self._rows(sql)[0][0])

    def snapshot(self) -> tuple[dict[str, tuple], dict[str, tuple]]:
        if self.backend == "sqlite":
            con = sqlite3.connect(f"file:{self.target}?mode=ro", uri=True, timeout=60)
            con.execute("PRAGMA busy_timeout=60000")
            con.execute("BEGIN")
            cur = con
        else:
            import psycopg

            con = psycopg.connect(self.target, autocommit=False)
            con.execute("SET search_path TO causalmem")
            con.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur = con
        try:
            chunks = {r[0]: r[1:] for r in cur.execute(
                "SELECT id, text, user_id, valid_to, nid FROM chunks")}
            nid2id = {v[3]: k for k, v in chunks.items()}
            edges = {r[0]: (nid2id.get(r[1]), nid2id.get(r[2])) for r in cur.execute(
                "SELECT id, src, dst FROM edges")}
        finally:
            con.close()
        return chunks, edges

    def integrity(self) -> list[str]:
        bad: list[str] = []
        common = {
            "cross-scope edge": "SELECT count(*) FROM edges e JOIN chunks a ON a.nid = e.src JOIN chunks b "
                                "ON b.nid = e.dst WHERE a.user_id IS NOT b.user_id OR a.agent_id IS NOT b.agent_id "
                                "OR a.run_id IS NOT b.run_id",
            "dangling edge": "SELECT count(*) FROM edges e WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE "
                             "c.nid = e.src) OR NOT EXISTS (SELECT 1 FROM chunks c WHERE c.nid = e.dst)",
            "dangling fact": "SELECT count(*) FROM facts f WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.nid = f.nid)",
            "dangling embedding": "SELECT count(*) FROM embeddings v WHERE NOT EXISTS "
                                  "(SELECT 1 FROM chunks c WHERE c.nid = v.nid)",
        }
        if self.backend == "postgres":
            common = {k: v.replace("IS NOT", "IS DISTINCT FROM") for k, v in common.items()}
            common["change log ahead of the state counter"] = (
                "SELECT count(*) FROM changes WHERE seq > (SELECT seq FROM causalmem_state)")
        for name, sql in common.items():
            n = self._rows(sql)[0][0]
            if n:
                bad.append(f"{name}: {n}")
        if self.backend == "sqlite":
            res = self._rows("PRAGMA integrity_check")
            if res != [("ok",)]:
                bad.append(f"integrity_check: {res[:5]}")
            fk = self._rows("PRAGMA foreign_key_check")
            if fk:
                bad.append(f"foreign_key_check: {fk[:5]}")
        return bad


class Checker:
    def __init__(self, raw: RawStore, logs: list[Path]) -> None:
        self.raw, self.logs = raw, logs
        self.counts: Counter[str] = Counter()  # invariant -> checks that held
        self.failures: list[str] = []
        self.notes: list[str] = []
        self.lock = threading.Lock()

    def fail(self, inv: str, msg: str) -> None:
        self.counts[inv + ".FAILED"] += 1
        if self.counts[inv + ".FAILED"] <= 20:  # the first of each kind, so a frequent one hides no other
            self.failures.append(f"{inv}: {msg}")

    def check(self, *, live: set[int], when: str) -> None:
        """Everything the journals say against the store; ``live``: workers still running (their last
        unacknowledged call may be in flight and is not judged)."""
        with self.lock:
            journals = [read_journal(path) for path in self.logs]  # before the snapshot: acks it must hold
            if not self.raw.created():
                acks = sum(1 for recs in journals for r in recs if r["t"] == "ack" and r.get("ids"))
                if acks:
                    self.fail("acked_present", f"{when}: {acks} writes acknowledged but the store has no tables")
                return  # no worker finished its first open yet: nothing to check
            chunks, edges = self.raw.snapshot()
            by_text: dict[str, list[str]] = defaultdict(list)
            for cid, (txt, _u, _v, _n) in chunks.items():
                by_text[txt].append(cid)
            for i, recs in enumerate(journals):
                self._check_log(i, recs, chunks, edges, by_text, in_flight_ok=i in live, when=when)
            for msg in self.raw.integrity():
                self.fail("integrity", f"{when}: {msg}")
            self.counts["integrity"] += 1

    def _check_log(self, wid: int, recs: list[dict[str, Any]], chunks: dict, edges: dict,
                   by_text: dict[str, list[str]], *, in_flight_ok: bool, when: str) -> None:
        acked: dict[str, tuple[str, str]] = {}  # chunk id -> (text, user)
        acked_at: dict[str, int] = {}  # chunk id -> index of its acknowledgement
        acked_edges: dict[str, tuple[str, str]] = {}
        deleted: set[str] = set()
        purged_users_after: dict[str, int] = {}  # user -> index of the last acknowledged purge
        pending: list[tuple[int, dict[str, Any], str]] = []  # (index, intent, outcome: killed/failed)
        open_intent: dict[str, Any] | None = None
        open_at = -1
        for idx, r in enumerate(recs):
            t = r["t"]
            if t == "intent":
                if open_intent is not None:
                    pending.append((open_at, open_intent, "killed"))
                open_intent, open_at = r, idx
            elif t == "ack":
                if open_intent is not None and open_intent["k"] == r["k"]:
                    open_intent = None
                if r.get("ids"):
                    for cid, txt_user in zip(r["ids"], r["users"]):
                        acked[cid] = ("", txt_user)
                        acked_at[cid] = idx
                    intent = recs[open_at] if open_at >= 0 else None
                    if intent and intent.get("k") == r["k"] and "texts" in intent:
                        for cid, txt in zip(r["ids"], _ack_texts(r, intent)):
                            acked[cid] = (txt, acked[cid][1])
                for e in r.get("edges", []):
                    acked_edges[e[0]] = (e[1], e[2])
                if r["op"] == "delete":
                    deleted.add(r["id"])
                if r["op"] == "purge":
                    purged_users_after[r["user"]] = idx
                    for cid in [c for c, (_t, u) in acked.items() if u == r["user"]]:
                        acked.pop(cid)
                        deleted.discard(cid)
                        self._expect_absent(cid, chunks, when)
                    for e in [e for e, (s, d) in acked_edges.items() if s not in acked or d not in acked]:
                        acked_edges.pop(e)
            elif t == "fail":
                if open_intent is not None and open_intent["k"] == r["k"]:
                    pending.append((open_at, open_intent, "failed"))
                    open_intent = None
            elif t == "start":
                if open_intent is not None:
                    pending.append((open_at, open_intent, "killed"))
                    open_intent = None
            elif t == "read":
                if r["leaked"]:
                    self.fail("scope_isolation", f"worker {wid} {r['op']} as {r['user']} got {r['leaked']}")
                else:
                    self.counts["scope_isolation"] += 1
            elif t == "leak" and r.get("baseline"):
                continue  # the first two closes set the baseline (see run_worker)
            elif t == "leak":
                if r.get("until_gc"):
                    self.counts["no_leak.held_until_gc"] += 1
                    if len(self.notes) < 5:
                        self.notes.append(f"worker {wid}: after close, until gc.collect(): {r.get('extra_fds')}")
                if r["leaked"]:
                    self.fail("no_leak", f"worker {wid}: after close {r['now']} vs first close {r['base']}, "
                                         f"new descriptors {r.get('extra_fds')}, new threads {r.get('extra_threads')}")
                else:
                    self.counts["no_leak"] += 1
        if open_intent is not None and not in_flight_ok:
            pending.append((open_at, open_intent, "killed"))
        # a purge killed (or in flight) before its acknowledgement may have committed: the scope's chunks
        # acknowledged before it are then all gone (checked whole below), else all there
        maybe_purged = {intent["user"]: i for i, intent, how in pending if intent["op"] == "purge" and how == "killed"}
        if open_intent is not None and open_intent["op"] == "purge":
            maybe_purged[open_intent["user"]] = open_at
        gone_whole: dict[str, list[bool]] = defaultdict(list)
        for cid, (txt, user) in acked.items():
            row = chunks.get(cid)
            if row is None and in_flight_ok and user == f"p{wid}":
                continue  # a running worker may have purged its own scope since its journal was read
            if user in maybe_purged and acked_at.get(cid, -1) < maybe_purged[user]:
                gone_whole[user].append(row is None)
                if row is None:
                    continue
            if row is None:
                self.fail("acked_present", f"{when}: worker {wid} chunk {cid} ({txt!r}, {user}) missing")
            elif (txt and row[0] != txt) or row[1] != user:
                self.fail("acked_present", f"{when}: worker {wid} chunk {cid}: {row[:2]} != {(txt, user)}")
            elif cid in deleted:
                if row[2] is None:
                    self.fail("deleted_absent", f"{when}: worker {wid} deleted chunk {cid} still live")
                else:
                    self.counts["deleted_absent"] += 1
            else:
                self.counts["acked_present"] += 1
        for user, gone in gone_whole.items():
            if any(gone) and not all(gone):
                self.fail("all_or_nothing", f"{when}: worker {wid} killed purge of {user}: {sum(gone)} of {len(gone)} "
                                            f"earlier chunks gone")
            else:
                self.counts["all_or_nothing"] += 1
        for eid, (s, d) in acked_edges.items():
            got = edges.get(eid)
            if got is None and in_flight_ok and (acked.get(s, ("", ""))[1] == f"p{wid}"):
                continue
            if got is None and acked.get(s, ("", ""))[1] in maybe_purged and s not in chunks:
                continue  # its chunks went with a killed purge (judged whole above)
            if got is None or got != (s, d):
                self.fail("acked_present", f"{when}: worker {wid} edge {eid} {s}->{d}: store has {got}")
            else:
                self.counts["acked_present"] += 1
        for idx, intent, how in pending:
            if intent["op"] in ("delete", "purge"):
                continue  # a delete either happened or not; both are whole (checked by the store's own rows)
            texts, users = intent["texts"], intent["users"]
            if "ids" in intent:
                present = [cid in chunks for cid in intent["ids"]]
            else:
                present = [bool(by_text.get(t)) for t in texts]
            later_purge = any(purged_users_after.get(u, -1) > idx for u in set(users))
            if later_purge:
                # rows in a purged scope are gone whatever the call did; the rest must still be whole
                present = [p for p, u in zip(present, users) if purged_users_after.get(u, -1) <= idx]
            if any(present) and not all(present):
                self.fail("all_or_nothing", f"{when}: worker {wid} {how} {intent['op']} {intent['k']}: "
                                            f"{sum(present)} of {len(present)} rows present")
            else:
                self.counts["all_or_nothing"] += 1
            if how == "failed":
                if present and all(present):
                    self.fail("failed_left_nothing", f"{when}: worker {wid} {intent['op']} {intent['k']} raised "
                                                     f"but committed")
                else:
                    self.counts["failed_left_nothing"] += 1

    def _expect_absent(self, cid: str, chunks: dict, when: str) -> None:
        if cid in chunks:
            self.fail("purged_absent", f"{when}: purged chunk {cid} still stored")
        else:
            self.counts["purged_absent"] += 1


def _ack_texts(ack: dict[str, Any], intent: dict[str, Any]) -> list[str]:
    if ack["op"] == "import_":  # ids come from the intent, in the same order as its texts
        return list(intent["texts"])
    return list(intent["texts"])[:len(ack["ids"])]


def search_snapshot(store: str, model: bool, queries: list[tuple[str, str]]) -> list[list[tuple[str, float]]]:
    """Each query's top 10 from a fresh open, every vector scored exactly (``vector_exact_scope`` above any
    scope): past ``vector_ann_min`` the default search takes its candidates from an HNSW graph, and two
    graphs of the same vectors (the kept one and a rebuild's) propose different ones, so only exact
    scoring can show that the kept files hold what a rebuild reads from the store."""
    from causalmem import Config, Memory

    mem = Memory(store, embedder="auto" if model else None, config=Config(vector_exact_scope=1 << 30))
    try:
        out = []
        for q, user in queries:
            hits = mem.search(q, top_k=10, user_id=user, reinforce=False)
            out.append([(h.id, round(h.score, 6), h.user_id) for h in hits])
        return out
    finally:
        mem.close()


def index_equal(checker: Checker, store: str, model: bool, seed: int) -> None:
    """Fresh open with ``<db>.idx/`` kept vs deleted: the same answers, vectors scored exactly (file stores only)."""
    rng = random.Random(seed)
    queries = [(" ".join(rng.sample(WORDS, 3)), rng.choice(USERS)) for _ in range(20)]
    mem = _open(store, model)  # embed what the killed workers left unembedded, so both opens see the same rows
    mem.wait_embedded(120)
    mem.close()
    kept = search_snapshot(store, model, queries)
    shutil.rmtree(store + ".idx", ignore_errors=True)
    rebuilt = search_snapshot(store, model, queries)
    for (q, user), a, b in zip(queries, kept, rebuilt):
        if [x[:2] for x in a] != [x[:2] for x in b]:
            checker.fail("index_equal", f"{q!r} as {user}: kept {a[:3]} vs rebuilt {b[:3]}")
        else:
            checker.counts["index_equal"] += 1
        leaked = [x for x in a + b if x[2] != user]
        if leaked:
            checker.fail("scope_isolation", f"checker search {q!r} as {user}: {leaked[:3]}")
        else:
            checker.counts["scope_isolation"] += 1


# -------------------------------------------------------------------------------------------- chaos
class DiskFiller(threading.Thread):
    """Fill the tmpfs with a ballast file until ENOSPC, hold, free; repeat."""

    def __init__(self, mount: Path, every: tuple[float, float], hold: tuple[float, float], rng: random.Random,
                 stop: threading.Event) -> None:
        super().__init__(daemon=True, name="soak-disk-filler")
        self.mount, self.every, self.hold, self.rng, self.stop_ev = mount, every, hold, rng, stop
        self.episodes = 0
        self.enospc_seen = 0
        self.full = threading.Event()  # set from the first ballast byte until the ballast is gone

    def run(self) -> None:
        ballast = self.mount / "ballast.bin"
        block = b"\0" * (1 << 20)
        while not self.stop_ev.wait(self.rng.uniform(*self.every)):
            self.full.set()
            try:
                with open(ballast, "wb") as fh:
                    while True:
                        fh.write(block)
                        fh.flush()
            except OSError as exc:
                if exc.errno == 28:
                    self.enospc_seen += 1
            self.episodes += 1
            self.stop_ev.wait(self.rng.uniform(*self.hold))
            with contextlib.suppress(OSError):
                ballast.unlink()
            self.full.clear()


class Pool:
    def __init__(self, a: argparse.Namespace, store: str, model: bool, run_dir: Path, phase: str) -> None:
        self.a, self.store, self.model, self.run_dir, self.phase = a, store, model, run_dir, phase
        self.procs: dict[int, subprocess.Popen] = {}
        self.logs = [run_dir / f"{phase}-worker{i}.jsonl" for i in range(a.workers)]
        self.stop_file = run_dir / f"{phase}.stop"
        self.starts = Counter()

    def spawn(self, i: int, seconds: float) -> None:
        self.starts[i] += 1
        cmd = [sys.executable, str(Path(__file__).resolve()), "worker", "--store", self.store, "--wid", str(i),
               "--log", str(self.logs[i]), "--seed", str(self.a.seed * 1000 + i * 37 + self.starts[i]),
               "--seconds", str(max(1.0, seconds)), "--stop-file", str(self.stop_file),
               "--scratch", str(self.run_dir / f"scratch-{self.phase}-{i}"), "--model" if self.model else "--no-model"]
        err = open(self.run_dir / f"{self.phase}-worker{i}.stderr", "a")
        self.procs[i] = subprocess.Popen(cmd, stdout=err, stderr=err, stdin=subprocess.DEVNULL, cwd=str(ROOT))


def run_phase(a: argparse.Namespace, backend: str, model: bool, seconds: float, run_dir: Path,
              store: str, raw: RawStore, mount: Path | None, rng: random.Random) -> dict[str, Any]:
    phase = f"{backend}-{'model' if model else 'nomodel'}"
    pool = Pool(a, store, model, run_dir, phase)
    checker = Checker(raw, pool.logs)
    end = time.time() + seconds
    for i in range(a.workers):
        pool.spawn(i, seconds)
    stop = threading.Event()
    filler = None
    if mount is not None:
        filler = DiskFiller(mount, a.fill_every, (2.0, 6.0), random.Random(rng.random()), stop)
        filler.start()
    kills = 0
    check_errors: list[str] = []
    while time.time() < end - 2:
        time.sleep(min(rng.uniform(*a.kill_every), max(0.0, end - 2 - time.time())))
        if time.time() >= end - 2:
            break
        i = rng.randrange(a.workers)
        p = pool.procs[i]
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()
            kills += 1
        for attempt in (1, 2):
            disk_full = filler is not None and filler.full.is_set()
            try:
                checker.check(live={k for k, q in pool.procs.items() if q.poll() is None}, when=f"after kill {kills}")
                break
            except Exception as exc:  # noqa: BLE001 - the store unreadable is itself a finding
                if attempt == 1 and disk_full:
                    # a reader may need to write (SQLite's shared-memory index after a crash; PostgreSQL's
                    # relation cache file): refused on a full disk, which is an error, not damage. Judge the
                    # store once the disk has room again.
                    checker.counts["checker_waited_for_disk"] += 1
                    while filler is not None and filler.full.is_set() and time.time() < end + 30:
                        time.sleep(0.2)
                    continue
                check_errors.append(f"{type(exc).__name__}: {exc}")
                checker.fail("integrity", f"checker could not read the store after kill {kills} "
                                          f"(disk {'full' if disk_full else 'not full'}): {exc}")
        if time.time() < end - 3:
            pool.spawn(i, end - time.time())
    pool.stop_file.touch()
    stop.set()
    for p in pool.procs.values():
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            checker.fail("clean_stop", f"worker pid {p.pid} did not stop within 120 s")
            p.kill()
            p.wait()
    if filler is not None:
        filler.join(30)
        with contextlib.suppress(OSError):
            (mount / "ballast.bin").unlink()
    checker.check(live=set(), when="phase end")
    if backend == "sqlite":
        index_equal(checker, store, model, a.seed)
    ops: Counter[str] = Counter()
    fails: Counter[str] = Counter()
    for path in pool.logs:
        for r in read_journal(path):
            if r["t"] in ("ack", "read"):
                ops[r["op"]] += 1
            elif r["t"] == "leak":
                ops["reopen"] += 1
            elif r["t"] == "fail":
                fails[r["err"].split(":")[0] + (" (disk full)" if "full" in r["err"].lower()
                                                or "space" in r["err"].lower() else "")] += 1
    return {"phase": phase, "seconds": seconds, "kills": kills, "restarts": sum(pool.starts.values()) - a.workers,
            "disk_full": filler.episodes if filler else 0, "ops": ops, "fails": fails,
            "counts": checker.counts, "failures": checker.failures, "notes": checker.notes}


@contextlib.contextmanager
def tmpfs(path: Path, size: str, owner: str | None = None):
    """A tmpfs mounted at ``path`` for the duration (root only); yields None where it cannot mount."""
    path.mkdir(parents=True, exist_ok=True)
    ok = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                                              capture_output=True).returncode == 0
    try:
        if ok and owner:
            shutil.chown(path, owner, owner)
        yield path if ok else None
    finally:
        if ok:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def run_backend(a: argparse.Namespace, backend: str, seconds: float, models: list[bool], run_dir: Path,
                rng: random.Random) -> list[dict[str, Any]]:
    results = []
    per = seconds / len(models)
    for model in models:
        mdir = run_dir / f"{backend}-{'m' if model else 'n'}-disk"
        if backend == "sqlite":
            with tmpfs(mdir, a.disk_size) as mount:
                base = mount if mount is not None else mdir
                store = str(base / "soak.db")
                results.append(run_phase(a, backend, model, per, run_dir, store, RawStore("sqlite", store), mount, rng))
                results[-1]["disk"] = (f"tmpfs {a.disk_size} holding the database, WAL and .idx/" if mount
                                       else "no tmpfs (not root): disk-full off")
        else:
            sys.path.insert(0, str(ROOT / "tests"))
            import pg_cluster  # noqa: E402  (the tests' throwaway cluster)
            import psycopg

            with tmpfs(mdir, a.disk_size, owner="postgres") as mount:
                cluster = pg_cluster.start(durable=True)
                try:
                    with psycopg.connect(cluster.dsn, autocommit=True) as con:
                        con.execute("ALTER SYSTEM SET synchronous_commit = on")  # an acknowledged commit is durable
                        con.execute("SELECT pg_reload_conf()")
                        if mount is not None:
                            con.execute(f"CREATE TABLESPACE soak LOCATION '{mount}'")
                            con.execute("CREATE DATABASE soak TABLESPACE soak")
                        else:
                            con.execute("CREATE DATABASE soak")
                    dsn = cluster.dsn_for("soak")
                    results.append(run_phase(a, backend, model, per, run_dir, dsn, RawStore("postgres", dsn),
                                             mount, rng))
                    results[-1]["disk"] = (f"tmpfs {a.disk_size} as the soak database's tablespace (WAL on the "
                                           "ordinary disk)" if mount else "no tmpfs (not root): disk-full off")
                finally:
                    cluster.stop()
    return results


def render(results: list[dict[str, Any]], a: argparse.Namespace, argv: list[str], elapsed: float) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=str(ROOT)).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "causalmem"], capture_output=True, text=True,
                           cwd=str(ROOT)).stdout.strip()
    total_fail = sum(v for r in results for k, v in r["counts"].items() if k.endswith(".FAILED"))
    lines = ["# Soak: processes killed and disks filled at random", "",
             f"Commit `{commit}`{' (with local changes under causalmem/)' if dirty else ''}, "
             f"{a.workers} worker processes, {elapsed / 60:.1f} min in all. Reproduce:", "",
             "```", "python benchmarks/soak.py " + " ".join(argv), "```", "",
             f"**Result: {'PASS' if total_fail == 0 else 'FAIL'}** ({total_fail} invariant violations).", ""]
    invs = ["acked_present", "deleted_absent", "purged_absent", "all_or_nothing", "failed_left_nothing",
            "integrity", "scope_isolation", "index_equal", "no_leak", "clean_stop"]
    lines += ["| phase | minutes | operations | kills survived | disk-full episodes | failed calls (disk full) |",
              "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        full = sum(v for k, v in r["fails"].items() if "disk full" in k)
        lines.append(f"| {r['phase']} | {r['seconds'] / 60:.1f} | {sum(r['ops'].values())} | {r['kills']} | "
                     f"{r['disk_full']} | {sum(r['fails'].values())} ({full}) |")
    lines += ["", "Invariants: checks that held / violations, per phase.", "",
              "| invariant | " + " | ".join(r["phase"] for r in results) + " |",
              "|---|" + "---:|" * len(results)]
    for inv in invs:
        lines.append(f"| {inv} | " + " | ".join(f"{r['counts'].get(inv, 0)} / {r['counts'].get(inv + '.FAILED', 0)}"
                                                  for r in results) + " |")
    lines += ["", "Operations acknowledged, per phase.", "", "| operation | " + " | ".join(r["phase"] for r in results)
              + " |", "|---|" + "---:|" * len(results)]
    for op in WEIGHTS:
        lines.append(f"| {op} | " + " | ".join(str(r["ops"].get(op, 0)) for r in results) + " |")
    lines += ["", "Disk: " + "; ".join(f"{r['phase']}: {r.get('disk', '')}" for r in results) + ".", "",
              "Failed calls by error (a call that raised is checked to have left nothing):", ""]
    for r in results:
        lines.append(f"- {r['phase']}: " + (", ".join(f"{k} x{v}" for k, v in r["fails"].most_common(8)) or "none"))
    viol = [f"{r['phase']}: {f}" for r in results for f in r["failures"]]
    if viol:
        lines += ["", "Violations (the first 20 of each invariant, per phase):", ""] + [f"- {v}" for v in viol]
    notes = [f"{r['phase']}: {n}" for r in results for n in r.get("notes", [])]
    held = {r["phase"]: r["counts"].get("no_leak.held_until_gc", 0) for r in results}
    lines += ["", "Closes after which a descriptor was still open until `gc.collect()` (released then, so not "
              "counted as a leak): " + ", ".join(f"{k} {v}" for k, v in held.items()) + "."]
    lines += [f"- {n}" for n in notes[:10]]
    waited = {r["phase"]: r["counts"].get("checker_waited_for_disk", 0) for r in results}
    lines += ["", "Checks after a kill that found the disk full and could not read the store, so waited until it "
              "had room and then judged it: " + ", ".join(f"{k} {v}" for k, v in waited.items()) + "."]
    lines += ["", "What each invariant means: see the docstring of `benchmarks/soak.py`.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "worker":
        p = argparse.ArgumentParser()
        p.add_argument("cmd")
        p.add_argument("--store", required=True)
        p.add_argument("--wid", type=int, required=True)
        p.add_argument("--log", required=True)
        p.add_argument("--seed", type=int, required=True)
        p.add_argument("--seconds", type=float, required=True)
        p.add_argument("--stop-file", required=True)
        p.add_argument("--scratch", required=True)
        p.add_argument("--model", action=argparse.BooleanOptionalAction, default=True)
        w = p.parse_args(argv)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        return run_worker(w)

    def span(s: str) -> tuple[float, float]:
        lo, _, hi = s.partition(":")
        return float(lo), float(hi or lo)

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    p.add_argument("--seconds", type=float, default=180.0, help="in all (split over backends and model settings)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--model", action=argparse.BooleanOptionalAction, default=None,
                   help="embedding model on / off (default: half the time each)")
    p.add_argument("--kill-every", type=span, default=(4.0, 12.0), help="seconds between kills, A:B (uniform)")
    p.add_argument("--fill-every", type=span, default=(15.0, 40.0), help="seconds between disk-full episodes")
    p.add_argument("--disk-size", default="512m", help="the tmpfs' size")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default=None, help="write the report (markdown) here")
    p.add_argument("--keep", action="store_true", help="keep the run directory (journals, worker stderr)")
    a = p.parse_args(argv)
    if a.workers < 1 or a.seconds <= 0:
        p.error("--workers must be >= 1 and --seconds > 0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    backends = ["sqlite", "postgres"] if a.backend == "both" else [a.backend]
    models = [True, False] if a.model is None else [a.model]
    rng = random.Random(a.seed)
    run_dir = Path(tempfile.mkdtemp(prefix="causalmem-soak-"))
    os.chmod(run_dir, 0o755)  # the PostgreSQL server (its own OS user) reaches its tablespace under it
    t0 = time.time()
    results: list[dict[str, Any]] = []
    try:
        for b in backends:
            results += run_backend(a, b, a.seconds / len(backends), models, run_dir, rng)
    finally:
        if a.keep:
            print(f"run directory kept: {run_dir}", file=sys.stderr)
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
    report = render(results, a, argv, time.time() - t0)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(report)
    print(report)
    bad = sum(v for r in results for k, v in r["counts"].items() if k.endswith(".FAILED"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
