"""A fleet of stateless workers on one PostgreSQL memory that holds many small tenants.

    python benchmarks/fleet.py                  # 500, 2,000 and 8,000 tenants x 200, and 200 x 1,000; 4 workers
    python benchmarks/fleet.py --shape 500x200 --seconds 30
    python benchmarks/fleet.py --quick          # a smoke run

What it simulates: an agent platform with T tenants (``user_id``), M memories each, served by W
worker processes behind a load balancer. Any worker may receive any tenant. Each worker is a fresh
process running ``Memory(dsn)`` in its default configuration (per-tenant views under the default
``views_budget_mb``; ``--whole-views`` for views of the whole database). It receives a
Zipf-distributed stream of tenants (exponent ``--zipf``) and mixes 80% searches
(``search(query, user_id=tenant)``) with 20% writes (``add(text, user_id=tenant)``). Meanwhile a
writer on another connection adds a probe memory to a random tenant every ``--probe-every`` seconds.
The first worker searches for each probe as soon as it hears of it, which measures how stale a read
can be after another process's write.

Reported per worker: RSS over the run (steady state = the median of its second half), the time of
the open and first search, p50/p95/p99 of searches on a tenant's first touch in that worker (cold),
later (warm) and after its views were evicted (rebuilt), p50/p95/p99 of writes, the per-tenant
views built, evicted and held, and the probe lag. The reference for the warm-search ratio is a
single-tenant SQLite ``Memory`` holding one tenant's M memories, searched on the same kind of
query once every 10 ms beside the workers (same contention) and back to back alone after the runs.

Each shape (``--shape TxM``, repeatable) is its own schema on one throwaway cluster
(``tests/pg_cluster.py``, fsync on; ``CAUSALMEM_BENCH_PG_DSN`` reuses a running server and the
schemas already built), built once with ``add(..., link=False)``. By default there is no model
(``--model`` turns the default embedder on: 400k chunks take the 2-core machine more than an hour
to embed), so the table reads the lexical and graph channels. Its output is
``benchmarks/results/fleet.md`` (``--out`` to change it), with the commit and the command;
``--samples FILE`` keeps every sample as JSON. The 10,000 tenants x 1,000 memories shape is
arithmetic from the per-tenant costs measured in the 1,000-memory shape, printed as such.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"

WORDS = ("kafka consumer lag deploy rollback cache redis postgres index vacuum latency budget invoice refund "
         "customer ticket alert pager dashboard migration schema replica failover backup restore quota token "
         "login session cookie banner checkout cart payment gateway webhook retry timeout queue worker cron "
         "report export import audit review release feature flag canary metric trace span log disk memory cpu "
         "thread pool connection socket dns certificate proxy cdn image upload thumbnail search ranking model "
         "prompt agent memory lesson decision outcome incident postmortem owner manager team sprint roadmap").split()


def tenant_texts(tenant: int, m: int) -> list[str]:
    """M distinct memories of one tenant: its own topic words plus common ones (searches must rank)."""
    rng = random.Random(tenant)
    topic = rng.sample(WORDS, 6)
    out = []
    for i in range(m):
        words = rng.sample(topic, 3) + rng.sample(WORDS, 5)
        out.append(f"tenant {tenant} note {i}: " + " ".join(words))
    return out


def tenant_query(tenant: int, rng: random.Random) -> str:
    topic = random.Random(tenant).sample(WORDS, 6)
    return " ".join(rng.sample(topic, 2) + rng.sample(WORDS, 1))


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


# ------------------------------------------------------------------ build
def build(dsn: str, tenants: int, per_tenant: int, embedder: object) -> float:
    """The shape's memory; returns seconds spent (0 when it exists already)."""
    from causalmem import Memory

    with Memory(dsn, embedder=embedder) as m:
        if m.stats()["chunks"] >= tenants * per_tenant:
            return 0.0
        t0 = time.perf_counter()
        for t in range(tenants):
            m.add(tenant_texts(t, per_tenant), user_id=f"t{t}", link=False)
        if embedder is not None:
            m.flush()
        return time.perf_counter() - t0


# ------------------------------------------------------------------ one worker process
def worker(idx: int, dsn: str, tenants: int, seconds: float, zipf: float, model: bool, seed: int,
           probes: "mp.Queue | None", ready: "mp.Event", out: "mp.Queue", reinforce: bool = True,
           whole: bool = False) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t_start = time.perf_counter()
    from causalmem import Config, Memory

    rng = random.Random(seed)
    weights = [1.0 / (r + 1) ** zipf for r in range(tenants)]
    order = list(range(tenants))
    rng.shuffle(order)  # which tenants are hot differs from the build order
    cfg = Config(scoped_views=False) if whole else Config()  # the default: per-tenant views
    m = Memory(dsn, config=cfg) if model else Memory(dsn, embedder=None, config=cfg)
    t_open = time.perf_counter() - t_start
    first = tenant_query(order[0], rng)
    t0 = time.perf_counter()
    m.search(first, user_id=f"t{order[0]}", top_k=5)
    t_first = time.perf_counter() - t0
    searched = {order[0]}  # tenants this worker has searched (a write builds no per-tenant views)
    if probes is not None:
        ready.set()  # the probes start once this worker answers
    cold: list[float] = []
    warm: list[float] = []
    rebuilt: list[float] = []  # seen before, its views evicted since: built again
    pool = getattr(m, "_pool", None)
    writes: list[float] = []
    lags: list[float] = []
    heard: list[float] = []
    lag_first_try = 0
    rss: list[tuple[float, float]] = [(time.perf_counter() - t_start, rss_mb())]
    last_rss = time.perf_counter()
    deadline = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < deadline:
        tenant = order[rng.choices(range(tenants), weights)[0]]
        uid = f"t{tenant}"
        if rng.random() < 0.8:
            q = tenant_query(tenant, rng)
            pooled = pool is None or not pool.enabled or uid in pool.views  # views held before the call
            t0 = time.perf_counter()
            m.search(q, user_id=uid, top_k=5, reinforce=reinforce)
            dt = time.perf_counter() - t0
            (cold if tenant not in searched else warm if pooled else rebuilt).append(dt)
            searched.add(tenant)
        else:
            t0 = time.perf_counter()
            m.add(f"tenant {tenant} worker {idx} wrote {n}: " + " ".join(rng.sample(WORDS, 6)), user_id=uid,
                  link=False)
            writes.append(time.perf_counter() - t0)
        n += 1
        if time.perf_counter() - last_rss >= 1.0:
            rss.append((time.perf_counter() - t_start, rss_mb()))
            last_rss = time.perf_counter()
        if probes is not None:
            try:
                token, ptenant, t_ack = probes.get_nowait()
            except queue.Empty:
                continue
            t_heard = time.time()
            tries = 0
            while time.time() - t_ack < 10.0:
                tries += 1
                if any(token in h.text for h in m.search(token, user_id=f"t{ptenant}", top_k=3)):
                    lags.append(time.time() - t_ack)
                    heard.append(time.time() - t_heard)
                    lag_first_try += tries == 1
                    break
    rss.append((time.perf_counter() - t_start, rss_mb()))
    evictions = pool.evictions if pool is not None else 0
    builds = pool.builds if pool is not None else 0
    held = len(pool.views) if pool is not None else 0
    held_bytes = sum(pool.sizes.values()) if pool is not None else 0
    m.close()
    out.put({"evictions": evictions, "builds": builds, "held": held, "held_bytes": held_bytes, "worker": idx, "open_s": t_open, "first_search_s": t_first, "cold": cold, "warm": warm, "rebuilt": rebuilt,
             "writes": writes, "lags": lags, "heard": heard, "lag_first_try": lag_first_try, "rss": rss, "ops": n})


def prober(dsn: str, tenants: int, seconds: float, every: float, probes: "mp.Queue", ready: "mp.Event",
           model: bool) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from causalmem import Memory

    rng = random.Random(7)
    m = Memory(dsn) if model else Memory(dsn, embedder=None)
    ready.wait(600)  # worker 0 has opened and answered its first search
    deadline = time.perf_counter() + seconds
    k = 0
    while time.perf_counter() < deadline:
        tenant = rng.randrange(tenants)
        token = f"probe{os.getpid()}x{k}"
        m.add(f"{token} lands for tenant {tenant}", user_id=f"t{tenant}", link=False)
        probes.put((token, tenant, time.time()))  # acknowledged: add returned
        k += 1
        time.sleep(every)
    m.close()


def sqlite_reference(per_tenant: int, queries: int, model: bool, seconds: float = 0.0,
                     every: float = 0.0, started: "mp.Event | None" = None, out: "mp.Queue | None" = None) -> list[float]:
    """Warm searches on a single-tenant SQLite memory of one tenant's M memories: ``queries`` of them
    back to back (alone), or, beside the workers (``seconds``), one every ``every`` seconds until the
    run ends, so that it samples the same contention without adding much of its own."""
    from causalmem import Memory

    rng = random.Random(3)
    with tempfile.TemporaryDirectory() as d:
        with (Memory(os.path.join(d, "one.db")) if model else Memory(os.path.join(d, "one.db"), embedder=None)) as m:
            m.add(tenant_texts(0, per_tenant), user_id="t0", link=False)
            if model:
                m.flush()
            m.search(tenant_query(0, rng), user_id="t0", top_k=5)
            if started is not None:
                started.wait(600)  # the workers are serving
            times: list[float] = []
            deadline = time.perf_counter() + seconds
            while (time.perf_counter() < deadline) if seconds else (len(times) < queries):
                q = tenant_query(0, rng)
                t0 = time.perf_counter()
                m.search(q, user_id="t0", top_k=5)
                times.append(time.perf_counter() - t0)
                if every:
                    time.sleep(every)
    if out is not None:
        out.put({"reference": times})
    return times


def run_shape(dsn: str, tenants: int, per_tenant: int, args: argparse.Namespace) -> dict:
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    probes: mp.Queue = ctx.Queue()
    ready = ctx.Event()
    procs = [ctx.Process(target=worker, args=(i, dsn, tenants, args.seconds, args.zipf, args.model, 100 + i,
                                              probes if i == 0 else None, ready, out, not args.no_reinforce,
                                              args.whole_views))
             for i in range(args.workers)]
    procs.append(ctx.Process(target=prober, args=(dsn, tenants, args.seconds, args.probe_every, probes, ready,
                                                  args.model)))
    procs.append(ctx.Process(target=sqlite_reference, args=(per_tenant, 0, args.model, args.seconds, 0.01, ready,
                                                            out)))
    for p in procs:
        p.start()
    got = [out.get(timeout=args.seconds * 10 + 600) for _ in range(args.workers + 1)]
    for p in procs:
        p.join(timeout=120)
    beside = next(r["reference"] for r in got if "reference" in r)
    results = [r for r in got if "reference" not in r]
    return {"tenants": tenants, "per_tenant": per_tenant, "beside": beside,
            "workers": sorted(results, key=lambda r: r["worker"])}


def steady_rss(r: dict) -> float:
    samples = [mb for _, mb in r["rss"]]
    return statistics.median(samples[len(samples) // 2:])


def table(shape: dict, ref: list[float]) -> list[str]:
    ms = 1000.0
    per_tenant = shape["per_tenant"]
    lines = [f"#### {shape['tenants']:,} tenants x {per_tenant} memories ({shape['tenants'] * per_tenant:,} chunks)", "",
             "| worker | ops | RSS steady / max (MB) | open + first search (s) | cold search p50 / p95 / p99 (ms) "
             "| warm search p50 / p95 / p99 (ms) | write p50 / p95 / p99 (ms) | views built / evicted / held |",
             "|---|---|---|---|---|---|---|---|"]
    for r in shape["workers"]:
        c, w, wr = r["cold"], r["warm"], r["writes"]
        lines.append(
            f"| {r['worker']} | {r['ops']} | {steady_rss(r):.0f} / {max(mb for _, mb in r['rss']):.0f} "
            f"| {r['open_s'] + r['first_search_s']:.2f} "
            f"| {pct(c, 50) * ms:.1f} / {pct(c, 95) * ms:.1f} / {pct(c, 99) * ms:.1f} "
            f"| {pct(w, 50) * ms:.1f} / {pct(w, 95) * ms:.1f} / {pct(w, 99) * ms:.1f} "
            f"| {pct(wr, 50) * ms:.1f} / {pct(wr, 95) * ms:.1f} / {pct(wr, 99) * ms:.1f} "
            f"| {r.get('builds', 0)} / {r.get('evictions', 0)} / {r.get('held', 0)} |")
    warm_all = [x for r in shape["workers"] for x in r["warm"]]
    cold_all = [x for r in shape["workers"] for x in r["cold"]]
    rebuilt = [x for r in shape["workers"] for x in r["rebuilt"]]
    beside = shape["beside"]
    lags, heard = shape["workers"][0]["lags"], shape["workers"][0]["heard"]
    held = sum(r.get("held", 0) for r in shape["workers"])
    held_bytes = sum(r.get("held_bytes", 0) for r in shape["workers"])
    lines += ["",
              f"- Warm search p95, all workers: **{pct(warm_all, 95) * ms:.1f} ms**. A single-tenant SQLite `Memory` "
              f"on the same {per_tenant} memories, searching once every 10 ms beside the workers in this run: "
              f"p95 {pct(beside, 95) * ms:.2f} ms ({len(beside)} searches; ratio "
              f"**{pct(warm_all, 95) / pct(beside, 95):.1f}x**); the same alone after the runs: "
              f"p95 {pct(ref, 95) * ms:.2f} ms (ratio {pct(warm_all, 95) / pct(ref, 95):.1f}x).",
              f"- First touch of a tenant (cold), all workers: {len(cold_all)} searches, p50 "
              f"{pct(cold_all, 50) * ms:.1f} ms, **p95 {pct(cold_all, 95) * ms:.1f} ms**; a tenant seen before whose "
              f"views were evicted since: {len(rebuilt)} searches, p95 {pct(rebuilt, 95) * ms:.1f} ms.",
              f"- Probe lag (another process's acknowledged `add` until worker 0's search returns it): "
              f"{len(lags)} probes, p50 {pct(lags, 50) * ms:.0f} ms, **p99 {pct(lags, 99) * ms:.0f} ms** "
              f"(from when worker 0 heard of the probe, after its operation in progress: p50 "
              f"{pct(heard, 50) * ms:.0f} ms, p99 {pct(heard, 99) * ms:.0f} ms); found by the first search after "
              f"the probe was heard: {shape['workers'][0]['lag_first_try']}/{len(lags)}.",
              f"- Per-tenant views held at the end: {held} in all, estimated "
              + (f"{held_bytes / max(held, 1) / 1024:.0f} KB each ({held_bytes / max(held, 1) / per_tenant:.0f} bytes "
                 "per memory)." if held else "none (whole-database views)."), ""]
    return lines


def parse_shape(text: str) -> tuple[int, int]:
    try:
        t, m = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape must be TENANTSxMEMORIES, e.g. 2000x200, got {text!r}") from None
    if t < 1 or m < 1:
        raise argparse.ArgumentTypeError(f"--shape needs at least 1 tenant and 1 memory, got {text!r}")
    return t, m


DEFAULT_SHAPES = [(500, 200), (2000, 200), (8000, 200), (200, 1000)]


def schema_mb(dsn: str) -> float:
    """The bytes the shape's schema takes on the server (tables and their indexes), in MB."""
    from causalmem import Memory

    with Memory(dsn, embedder=None) as m:
        store = m._views.store
        rows = store.query("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                           "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
                           "AND c.relkind IN ('r', 'm')", ())
        return float(rows[0][0]) / 1024 / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", type=parse_shape, action="append",
                    help="TENANTSxMEMORIES (repeatable; default 500x200, 2000x200, 8000x200 and 200x1000)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each shape's run")
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--probe-every", type=float, default=0.5)
    ap.add_argument("--no-reinforce", action="store_true",
                    help="diagnosis: searches write no reinforcement (access counts, Hebbian credit)")
    ap.add_argument("--whole-views", action="store_true",
                    help="workers use views of the whole database (Config(scoped_views=False)), not per-tenant ones")
    ap.add_argument("--model", action="store_true", help="the default embedder on (slow to build)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 50 tenants x 50, 10 s, 2 workers")
    ap.add_argument("--out", default=str(RESULTS / "fleet.md"))
    ap.add_argument("--samples", help="also write every sample (latencies, RSS over time) as JSON to this file")
    args = ap.parse_args(argv)
    if args.quick:
        args.shape, args.seconds, args.workers = args.shape or [(50, 50)], 10.0, 2
    shapes = args.shape or DEFAULT_SHAPES
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT))
    from pg_cluster import start

    embedder = "auto" if args.model else None
    base = os.environ.get("CAUSALMEM_BENCH_PG_DSN")
    cluster = None if base else start(durable=True)
    base = base or cluster.dsn
    try:
        sep = "&" if "?" in base else "?"
        built, measured, sizes = {}, [], {}
        for t, per in shapes:
            dsn = f"{base}{sep}schema=fleet_{t}x{per}"
            built[f"{t}x{per}"] = build(dsn, t, per, embedder)
            sizes[(t, per)] = schema_mb(dsn)
            print(f"built {t} x {per} in {built[f'{t}x{per}']:.1f} s ({sizes[(t, per)]:.0f} MB)", flush=True)
            measured.append(run_shape(dsn, t, per, args))
            print(f"ran {t} x {per}", flush=True)
        refs = {per: sqlite_reference(per, 400, args.model) for per in sorted({per for _, per in shapes})}
    finally:
        if cluster is not None:
            cluster.stop()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    cmd = "python benchmarks/fleet.py " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    views = "views of the whole database (`--whole-views`)" if args.whole_views else \
        "per-tenant views (the default on PostgreSQL, default `views_budget_mb`)"
    lines = ["# A fleet of workers on one PostgreSQL memory", "",
             f"Commit `{commit}`; command `{cmd.strip()}`; {args.workers} worker processes (`Memory(dsn)`, "
             f"{views}), {args.seconds:.0f} s per shape, Zipf {args.zipf}, 80% search / 20% write, a probe "
             f"writer on another connection every {args.probe_every} s; "
             + ("the default embedder on." if args.model else "no model (`embedder=None`): lexical and graph channels.")
             + " 2-core machine: the workers, the probe writer, the reference and the server share it. "
             "Read ratios and growth, not absolute speed.", ""]
    for shape in measured:
        lines += table(shape, refs[shape["per_tenant"]])
    lines += projection(measured, sizes)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if args.samples:
        Path(args.samples).write_text(json.dumps({"built_s": built, "shapes": measured,
                                                  "sqlite_ref": {str(k): v for k, v in refs.items()}}))
    return 0


def projection(measured: list[dict], sizes: dict) -> list[str]:
    """RSS against the number of tenants, and the 10,000 x 1,000 shape on paper from per-tenant costs."""
    lines = ["## Growth, and 10,000 tenants x 1,000 memories on paper", "",
             "| shape | chunks | median steady RSS per worker (MB) | server schema (MB) |", "|---|---|---|---|"]
    for shape in measured:
        t, per = shape["tenants"], shape["per_tenant"]
        rss = statistics.median(steady_rss(r) for r in shape["workers"])
        lines.append(f"| {t:,} x {per} | {t * per:,} | {rss:.0f} | {sizes[(t, per)]:.0f} |")
    big = [s for s in measured if s["per_tenant"] >= 1000] or measured[-1:]
    s = big[0]
    per = s["per_tenant"]
    held = sum(r.get("held", 0) for r in s["workers"])
    each = sum(r.get("held_bytes", 0) for r in s["workers"]) / max(held, 1)
    cold = [x for r in s["workers"] for x in r["cold"]]
    per_chunk_mb = statistics.median(sizes[(x["tenants"], x["per_tenant"])] / (x["tenants"] * x["per_tenant"])
                                     for x in measured)
    scale = 1000 / per
    lines += ["",
              f"Arithmetic from the measured figures, not a measurement: a {per}-memory tenant's views are "
              f"estimated at {each / 1024:.0f} KB and its first touch took p50 {pct(cold, 50) * 1000:.0f} ms, "
              f"p95 {pct(cold, 95) * 1000:.0f} ms in the {s['tenants']:,} x {per} run. At 10,000 tenants x 1,000 "
              f"memories a tenant's views are about {each * scale / 1024 / 1024:.1f} MB, so the default 96 MB budget "
              f"keeps about {96 * 1024 * 1024 / max(each * scale, 1):.0f} of them hot per worker and the worker's RSS "
              f"stays the fixed part plus the budget, whatever the number of tenants. The server holds about "
              f"{per_chunk_mb * 1e7 / 1024:.0f} GB for 10M chunks ({per_chunk_mb * 1e6:.0f} bytes per chunk in these "
              "schemas, no vectors: a 384-dimension float32 vector adds 1.5 KB per chunk).", ""]
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
