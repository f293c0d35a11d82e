"""PostgreSQL backend vs SQLite, side by side in one run.

    python benchmarks/bench_postgres.py            # build the stores, then time (one process)
    python benchmarks/bench_postgres.py --quick    # small sizes, a smoke run

On a shared machine, build the stores under one lock and time them under another, on one server
and one work directory (what benchmarks/results/postgres.md was measured with)::

    eval "$(python tests/pg_cluster.py start --durable)"
    trap 'python tests/pg_cluster.py stop "$CAUSALMEM_TEST_PG_DIR"' EXIT
    export CAUSALMEM_BENCH_PG_DSN=$CAUSALMEM_TEST_PG_DSN
    python benchmarks/bench_postgres.py --phase build --workdir /tmp/pgbench
    python benchmarks/bench_postgres.py --phase time --workdir /tmp/pgbench

Starts a throwaway PostgreSQL cluster (tests/pg_cluster.py: fsync on, synchronous_commit off, the
durability class of SQLite's WAL + synchronous=NORMAL) unless ``CAUSALMEM_BENCH_PG_DSN`` names a
server. Every figure is a median over repeats measured in this one run, PostgreSQL and SQLite
alternating, so the ratio column survives a noisy machine. Writes benchmarks/results/postgres.md.

Measured (``Memory(target, embedder=None)``: the write and rebuild targets are model-free):
* ``record_many`` throughput (edges/s, batches of 2,000 new decision->outcome pairs);
* full projection rebuild from N edges (PostgreSQL: columns as binary arrays into numpy; SQLite:
  packed SELECT);
* ``search`` / ``search_causal`` latency (both answer from the in-process projection and indexes),
  and the statements each PostgreSQL query sends;
* catch-up: another connection ("host") writes one small ``record_decision``; time of this host's
  next ``search_causal`` (which notices the change, catches up and answers), and of the sync step alone.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from causalmem import Memory  # noqa: E402
from store_bench import build_store, vocab  # noqa: E402  (the same store shape as the SQLite store benchmark)

RESULTS = Path(__file__).resolve().parent / "results"


def texts(rng: np.random.Generator, words: list[str], n: int, length: int = 6) -> list[str]:
    z = np.minimum(rng.zipf(1.3, size=(n, length)) - 1, len(words) - 1)
    tag = uuid.uuid4().hex[:6]
    return [" ".join(words[j] for j in row) + f" #{tag}{i}" for i, row in enumerate(z)]


def bench_record_many(target: str, rng, words, n_batches: int, size: int) -> float:
    rates = []
    with Memory(target, embedder=None) as mem:
        for _ in range(n_batches):
            batch = list(zip(texts(rng, words, size), texts(rng, words, size)))
            t = time.perf_counter()
            mem.record_many(batch)
            rates.append(size / (time.perf_counter() - t))
    return statistics.median(rates)


def bench_record_many_open(targets: dict[str, str], rng, words, n_batches: int, size: int) -> dict[str, float]:
    """Median edges/s of ``record_many`` on one ``Memory`` per backend kept open (as a long-running
    agent or server writes), after one batch that is not counted; backends alternating."""
    mems = {k: Memory(t, embedder=None) for k, t in targets.items()}
    rates: dict[str, list[float]] = {k: [] for k in targets}
    for i in range(n_batches + 1):
        for k, mem in mems.items():
            batch = list(zip(texts(rng, words, size), texts(rng, words, size)))
            t = time.perf_counter()
            mem.record_many(batch)
            if i:
                rates[k].append(size / (time.perf_counter() - t))
    for mem in mems.values():
        mem.close()
    return {k: statistics.median(v) for k, v in rates.items()}


def bench_rebuild(targets: dict[str, str], repeats: int) -> dict[str, tuple[float, float, int]]:
    """backend -> (median full rebuild s, median of the store read alone s, edges)."""
    mems = {k: Memory(t, embedder=None) for k, t in targets.items()}
    full: dict[str, list[float]] = {k: [] for k in targets}
    load: dict[str, list[float]] = {k: [] for k in targets}
    for _ in range(repeats):
        for k, mem in mems.items():  # alternate the backends
            t = time.perf_counter()
            mem._store.projection_arrays()
            load[k].append(time.perf_counter() - t)
            mem._projection.graph = None
            t = time.perf_counter()
            mem._projection.rebuild()
            full[k].append(time.perf_counter() - t)
    out = {k: (statistics.median(full[k]), statistics.median(load[k]), mems[k]._projection.graph.n_edges)
           for k in targets}
    for mem in mems.values():
        mem.close()
    return out


def bench_queries(plan: dict, rng, n_queries: int) -> dict[str, dict[str, float]]:
    """p50 (and for the default search p99) in ms of ``search_causal``, ``search`` with reinforcement
    off (lexical+graph) and ``search(q)`` as users call it (reinforcement on: the learned-link overlay
    every query, the queue written every ``reinforce_batch``-th query inside it), backends alternating;
    the statements each PostgreSQL query sends; the change-sequence check's round trip alone."""
    decisions = plan["decisions"]
    mems = {}
    for k in ("pg", "sqlite"):
        mem = Memory(plan[k], embedder=None)
        mem.search_causal(decisions[0])  # the views are built (as after a process's first query)
        mem.search(decisions[1], channels=("lexical", "graph"), reinforce=False)
        mem.search(decisions[2])
        mem.flush()
        mems[k] = mem
    sent = count_statements(mems["pg"]._store.conn)
    qs = [decisions[int(i)] for i in rng.integers(0, len(decisions), size=n_queries)]
    names = ("search_causal", "search", "search (default)")
    lat: dict[str, dict[str, list[float]]] = {k: {n: [] for n in names} for k in mems}
    per: dict[str, list[int]] = {n: [] for n in names}
    for q in qs:
        for k, mem in mems.items():
            for name, call in (("search_causal", lambda: mem.search_causal(q)),
                               ("search", lambda: mem.search(q, channels=("lexical", "graph"), reinforce=False)),
                               ("search (default)", lambda: mem.search(q))):
                before = sent[0] + mems["pg"]._store.checks_sent
                t = time.perf_counter()
                call()
                lat[k][name].append(time.perf_counter() - t)
                if k == "pg":  # + the change checks sent ahead of a query (straight on the connection)
                    per[name].append(sent[0] + mems["pg"]._store.checks_sent - before)
    conn = mems["pg"]._store.conn
    rtt = []
    for _ in range(n_queries):
        t = time.perf_counter()
        conn.execute("SELECT seq FROM causalmem_state").fetchone()
        rtt.append(time.perf_counter() - t)
    for mem in mems.values():
        mem.close()
    out: dict[str, dict[str, float]] = {
        k: {name: statistics.median(v) * 1000 for name, v in d.items()} for k, d in lat.items()}
    for k, d in lat.items():
        out[k]["search (default) p99"] = float(np.percentile(d["search (default)"], 99)) * 1000
    for name in names:
        out["pg"][f"statements {name}"] = statistics.mean(per[name])
        out["pg"][f"statements {name} max"] = max(per[name])
    out["pg"]["round trip"] = statistics.median(rtt) * 1000
    return out


def bench_queries_model(plan: dict, rng, n_queries: int) -> dict[str, dict[str, float]]:
    """The default configuration, as users run it: ``Memory(target)`` with the model installed
    (embedder auto: every channel, the semantic one too), on a store whose chunks were embedded at
    build time. p50 / p99 in ms of ``search(q)`` (reinforcement on) and of ``search(q, reinforce=False)``,
    backends alternating, the same queries for both, a different query for each call (each is encoded
    once per ``Memory``)."""
    decisions = plan["decisions"]
    mems = {}
    for k in ("pg", "sqlite"):
        mem = Memory(plan[k])
        assert mem.embedder is not None, "the model is not installed: the default-configuration rows need it"
        for i in range(3):
            mem.search(decisions[i])
        assert mem._views.wait_vectors(120, folded=True), "the vector index did not load"
        mem.flush()
        mems[k] = mem
    # a query of its own for each of the two calls (each encodes its query: none is a cache hit)
    picks = rng.permutation(len(decisions))[:2 * n_queries]
    qs = [(decisions[int(i)], decisions[int(j)]) for i, j in zip(picks[::2], picks[1::2])]
    names = ("search (model, default)", "search (model, reinforce=False)")
    lat: dict[str, dict[str, list[float]]] = {k: {n: [] for n in names} for k in mems}
    for q, q2 in qs:
        for k, mem in mems.items():
            for name, call in ((names[0], lambda: mem.search(q)), (names[1], lambda: mem.search(q2, reinforce=False))):
                t = time.perf_counter()
                call()
                lat[k][name].append(time.perf_counter() - t)
    for mem in mems.values():
        mem.close()
    out: dict[str, dict[str, float]] = {}
    for k, d in lat.items():
        out[k] = {}
        for name, v in d.items():
            out[k][name] = statistics.median(v) * 1000
            out[k][name + " p99"] = float(np.percentile(v, 99)) * 1000
    return out


def bench_catch_up(plan: dict, rounds: int) -> dict[str, dict[str, float]]:
    """Two Memory objects on one store (two connections = two hosts): B writes one decision, A's next
    search_causal must see it. Reports the median of that first query and of a warm query."""
    out = {}
    decisions = plan["decisions"]
    for k in ("pg", "sqlite"):
        a = Memory(plan[k], embedder=None)
        b = Memory(plan[k], embedder=None)
        a.search_causal(decisions[0])
        b.search_causal(decisions[0])
        first, warm, sync = [], [], []
        for i in range(rounds):
            d, o = f"host b decision {uuid.uuid4().hex[:8]}", f"host b outcome {i}"
            b.record_decision(d, o)
            t0 = time.perf_counter()
            got = a.search_causal(d)
            first.append(time.perf_counter() - t0)
            assert [x.text for x in got] == [o], (k, got)
            t0 = time.perf_counter()
            a.search_causal(d)
            warm.append(time.perf_counter() - t0)
            b.record_decision(d + " again", o + " again")
            t0 = time.perf_counter()
            with a._lock:
                a._views.sync_external()
            sync.append(time.perf_counter() - t0)
        out[k] = {"first query after the write (ms)": statistics.median(first) * 1000,
                  "same query warm (ms)": statistics.median(warm) * 1000,
                  "sync step alone (ms)": statistics.median(sync) * 1000}
        a.close()
        b.close()
    return out


def count_statements(conn) -> list[int]:
    """A counter of the statements sent on ``conn`` (psycopg ``Cursor.execute``/``copy``)."""
    import psycopg

    box = [0]
    for name in ("execute", "copy"):
        orig = getattr(psycopg.Cursor, name)

        def counted(cur, *args, _orig=orig, **kwargs):
            if cur.connection is conn:
                box[0] += 1
            return _orig(cur, *args, **kwargs)

        setattr(psycopg.Cursor, name, counted)
    return box


def sizes(quick: bool, rebuild_edges: int | None) -> dict[str, int]:
    return {"batches": 3 if quick else 7, "batch": 1000 if quick else 2000,
            "edges": rebuild_edges or (100_000 if quick else 1_000_000),
            "pairs": 2000 if quick else 10000, "queries": 50 if quick else 200, "rounds": 10 if quick else 30}


def build(work: Path, server: str, n: dict[str, int]) -> dict:
    """The stores the timed phase reads (not timed): written under ``work`` and the server."""
    rng = np.random.default_rng(7)
    words = vocab(rng)
    tag = uuid.uuid4().hex[:8]
    sep = "&" if "?" in server else "?"
    plan: dict = {"words_seed": 7, "sizes": n}
    for name in ("writes", "rebuild", "queries", "catchup"):
        plan[name] = {"pg": f"{server}{sep}schema=bench_{name}_{tag}", "sqlite": str(work / f"{name}_{tag}.db")}
    for t in plan["rebuild"].values():
        build_store(t, np.random.default_rng(11), words, n["edges"] // 3, n["edges"]).close()
    for name in ("queries", "catchup"):
        decisions, outcomes = texts(rng, words, n["pairs"]), texts(rng, words, n["pairs"])
        for t in plan[name].values():
            with Memory(t, embedder=None) as mem:
                for lo in range(0, n["pairs"], 2000):
                    mem.record_many(list(zip(decisions[lo:lo + 2000], outcomes[lo:lo + 2000])))
        plan[name]["decisions"] = decisions
    # the default configuration (the model installed, embedder auto): the same pairs, every chunk embedded
    plan["queries_model"] = {"pg": f"{server}{sep}schema=bench_queries_model_{tag}",
                             "sqlite": str(work / f"queries_model_{tag}.db"), "decisions": plan["queries"]["decisions"]}
    pairs_model = list(zip(plan["queries"]["decisions"], texts(np.random.default_rng(12), words, n["pairs"])))
    for k in ("pg", "sqlite"):
        with Memory(plan["queries_model"][k]) as mem:
            if mem.embedder is None:
                raise SystemExit("the default-configuration rows need the model installed (embedder auto found none)")
            for lo in range(0, n["pairs"], 2000):
                mem.record_many(pairs_model[lo:lo + 2000])
            mem.flush()  # every chunk embedded before the timed phase
    (work / "plan.json").write_text(json.dumps(plan))
    return plan


def timed(plan: dict, quick: bool, command: str) -> list[str]:
    n = plan["sizes"]
    rng = np.random.default_rng(8)
    words = vocab(np.random.default_rng(plan["words_seed"]))
    lines = ["# PostgreSQL backend vs SQLite", "",
             f"Machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start of the timed "
             "phase (shared with other jobs: compare the ratio column). PostgreSQL 15 on a Unix socket on the same "
             "machine; fsync on, synchronous_commit off. `Memory(target, embedder=None)`, except the rows marked "
             "'default configuration': `Memory(target)` with the model installed (embedder auto). "
             f"Command: `{command}`.", "",
             "| measurement | PostgreSQL | SQLite | PG / SQLite | target |", "|---|---|---|---|---|"]
    # 1. record_many throughput, alternating backends
    pg_rates, lite_rates = [], []
    for _ in range(n["batches"]):
        pg_rates.append(bench_record_many(plan["writes"]["pg"], rng, words, 1, n["batch"]))
        lite_rates.append(bench_record_many(plan["writes"]["sqlite"], rng, words, 1, n["batch"]))
    p, s = statistics.median(pg_rates), statistics.median(lite_rates)
    lines.append(f"| record_many, batches of {n['batch']:,} new pairs, a fresh `Memory` (and connection) per batch "
                 f"(median of {n['batches']}) | {p:,.0f} edges/s | "
                 f"{s:,.0f} edges/s | {p / s:.2f} | PG >= 20,000 edges/s: {'met' if p >= 20000 else 'NOT met'} |")
    o = bench_record_many_open({k: plan["writes"][k] for k in ("pg", "sqlite")}, rng, words, n["batches"], n["batch"])
    lines.append(f"| record_many, batches of {n['batch']:,} new pairs, one `Memory` kept open (median of {n['batches']} "
                 f"after one more) | {o['pg']:,.0f} edges/s | {o['sqlite']:,.0f} edges/s | {o['pg'] / o['sqlite']:.2f} | "
                 f"PG >= 20,000 edges/s: {'met' if o['pg'] >= 20000 else 'NOT met'} |")
    print("\n".join(lines[-2:]), flush=True)

    # 2. projection rebuild
    targets = {k: plan["rebuild"][k] for k in ("pg", "sqlite")}
    r = bench_rebuild(targets, 3)
    lines.append(f"| full projection rebuild, {r['pg'][2]:,} valid edges (median of 3) | {r['pg'][0]:.2f} s | "
                 f"{r['sqlite'][0]:.2f} s | {r['pg'][0] / r['sqlite'][0]:.2f} | <= 3 s: "
                 f"{'met' if r['pg'][0] <= 3 else 'NOT met'} |")
    lines.append(f"| of which reading the edges from the store | {r['pg'][1]:.2f} s (binary arrays) | "
                 f"{r['sqlite'][1]:.2f} s | {r['pg'][1] / r['sqlite'][1]:.2f} | |")
    print("\n".join(lines[-2:]), flush=True)

    # 3. query latency
    q = bench_queries(plan["queries"], rng, n["queries"])
    shown = (("search_causal", "search_causal p50", "equal within noise"),
             ("search", "search p50 (lexical+graph, reinforce=False)", "equal within noise"),
             ("search (default)", "search p50 as users call it (`search(q)`: reinforcement on)", "equal within noise"),
             ("search (default) p99", "search p99 as users call it (the queue written every 64th: inside that search "
              "on SQLite, by the flusher thread on PostgreSQL)", "equal within noise"))
    for key, label, target in shown:
        lines.append(f"| {label}, {n['pairs']:,}-pair store ({n['queries']} queries) | {q['pg'][key]:.2f} ms | "
                     f"{q['sqlite'][key]:.2f} ms | {q['pg'][key] / q['sqlite'][key]:.2f} | {target} |")
    for name in ("search_causal", "search", "search (default)"):
        lines.append(f"| statements sent to the server per `{name}` (PostgreSQL; mean, most in one query) | "
                     f"{q['pg'][f'statements {name}']:.2f}, max {q['pg'][f'statements {name} max']:.0f} | 0 | | |")
    lines.append(f"| the change-sequence check alone (one round trip, `SELECT seq`) | {q['pg']['round trip']:.2f} ms "
                 "| | | |")
    print("\n".join(lines[-8:]), flush=True)

    # 3b. query latency in the default configuration (the model installed), when the plan has its store
    if "queries_model" in plan:
        qm = bench_queries_model(plan["queries_model"], rng, n["queries"])
        for key, label in (("search (model, default)", "`search(q)`: reinforcement on, every channel"),
                           ("search (model, reinforce=False)", "`search(q, reinforce=False)`, every channel")):
            for stat, suffix in (("p50", ""), ("p99", " p99")):
                lines.append(f"| default configuration (`Memory(target)`, the model): {label}, {stat}, "
                             f"{n['pairs']:,}-pair store ({n['queries']} queries) | {qm['pg'][key + suffix]:.2f} ms | "
                             f"{qm['sqlite'][key + suffix]:.2f} ms | {qm['pg'][key + suffix] / qm['sqlite'][key + suffix]:.2f} "
                             f"| {'equal within noise' if stat == 'p50' or 'default' in key else ''} |")
        print("\n".join(lines[-4:]), flush=True)

    # 4. catch-up after another host's write
    c = bench_catch_up(plan["catchup"], n["rounds"])
    for name in c["pg"]:
        target = "<= 10 ms" if name.startswith("first") else ""
        if target:
            target += ": " + ("met" if c["pg"][name] <= 10 else "NOT met")
        lines.append(f"| catch-up, {n['pairs']:,}-pair store: {name} | {c['pg'][name]:.2f} ms | "
                     f"{c['sqlite'][name]:.2f} ms | {c['pg'][name] / c['sqlite'][name]:.2f} | {target} |")
    print("\n".join(lines[-3:]), flush=True)
    lines.append("")
    lines.append(f"Load average at the end of the timed phase: {os.getloadavg()[0]:.1f}.")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rebuild-edges", type=int, default=None)
    ap.add_argument("--phase", choices=("build", "time", "all"), default="all")
    ap.add_argument("--workdir", default=None, help="where the SQLite stores and the plan live (build/time phases)")
    args = ap.parse_args()
    if args.phase != "all" and (not args.workdir or not os.environ.get("CAUSALMEM_BENCH_PG_DSN")):
        ap.error("--phase build/time need --workdir and CAUSALMEM_BENCH_PG_DSN (one server for both phases)")
    cluster = None
    server = os.environ.get("CAUSALMEM_BENCH_PG_DSN")
    if not server:
        import pg_cluster

        cluster = pg_cluster.start(durable=True)
        server = cluster.dsn
    command = "python benchmarks/bench_postgres.py" + (" --quick" if args.quick else "")
    if args.phase != "all":
        command = ("python benchmarks/bench_postgres.py --phase build --workdir W (other jobs allowed), then "
                   "--phase time --workdir W timed alone on the machine, on one durable tests/pg_cluster.py server"
                   + (", --quick" if args.quick else ""))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(args.workdir) if args.workdir else Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            if args.phase == "time":
                plan = json.loads((work / "plan.json").read_text())
            else:
                t0 = time.perf_counter()
                plan = build(work, server, sizes(args.quick, args.rebuild_edges))
                print(f"stores built in {time.perf_counter() - t0:.0f} s", flush=True)
            if args.phase == "build":
                return
            lines = timed(plan, args.quick, command)
    finally:
        if cluster is not None:
            cluster.stop()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("postgres_quick.md" if args.quick else "postgres.md")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
