"""A separate process with its own ``Memory`` on a PostgreSQL DSN (a second "host" for the tests).

``python tests/pg_worker.py serve DSN``: reads one JSON command per line on stdin, answers one JSON
line on stdout: {"op": "record", "decision", "outcome"} -> {"edge"}, {"op": "search_causal",
"query"} -> {"texts"}, {"op": "search", "query"} -> {"texts"}, {"op": "stats"}, {"op": "quit"}.

``python tests/pg_worker.py workload DSN NAME SECONDS``: for SECONDS, record a decision, then ask
for it (search_causal) and for the newest decision another worker reported so far (read from the
shared memory: ``search``); prints one JSON line: the edge ids written, the number of searches and
every error that reached this caller.
"""
from __future__ import annotations

import json
import random
import sys
import time
import traceback

from causalmem import Memory


def serve(dsn: str) -> None:
    mem = Memory(dsn, embedder=None)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "record":
                e = mem.record_decision(cmd["decision"], cmd["outcome"])
                out: dict = {"edge": e.id}
            elif op == "search_causal":
                out = {"texts": [a.text for a in mem.search_causal(cmd["query"], limit=10)]}
            elif op == "search":
                out = {"texts": [h.text for h in mem.search(cmd["query"], top_k=10, channels=("lexical", "graph"))]}
            elif op == "stats":
                out = {"stats": {k: v for k, v in mem.stats().items() if isinstance(v, int)}}
            elif op == "quit":
                mem.close()
                print(json.dumps({"bye": True}), flush=True)
                return
            else:
                out = {"error": f"unknown op {op}"}
        except Exception as exc:  # reported to the test, which fails on it
            out = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(out), flush=True)


def workload(dsn: str, name: str, seconds: float) -> None:
    mem = Memory(dsn, embedder=None)
    rng = random.Random(name)
    written: list[str] = []
    errors: list[str] = []
    searches = misses = 0
    deadline = time.monotonic() + seconds
    k = 0
    while time.monotonic() < deadline:
        k += 1
        decision, outcome = f"{name} decision {k} zq{rng.randrange(10**9)}", f"{name} outcome {k}"
        try:
            e = mem.record_decision(decision, outcome, user_id="team")
            written.append(e.id)
            got = [a.text for a in mem.search_causal(decision, limit=5, user_id="team")]
            searches += 1
            if outcome not in got:
                misses += 1
            if rng.random() < 0.5:
                mem.search(f"decision {rng.randrange(1, k + 1)}", top_k=5, user_id="team",
                           channels=("lexical", "graph"))
                searches += 1
        except Exception:
            errors.append(traceback.format_exc(limit=3))
    mem.close()
    print(json.dumps({"name": name, "written": written, "searches": searches, "misses": misses,
                      "errors": errors}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    elif sys.argv[1] == "workload":
        workload(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    else:
        raise SystemExit("usage: pg_worker.py serve DSN | workload DSN NAME SECONDS")
