"""A fleet of stateless workers on one PostgreSQL memory that holds many small tenants.

    python benchmarks/fleet.py                                   # 500 and 2,000 tenants x 200, 4 workers
    python benchmarks/fleet.py --tenants 500 --seconds 30 --quick

What it simulates: an agent platform with T tenants (``user_id``), M memories each, served by W
worker processes behind a load balancer. Any worker may receive any tenant. Each worker is a fresh
process running ``Memory(dsn)``. It receives a Zipf-distributed stream of tenants (exponent
``--zipf``) and mixes 80% searches (``search(query, user_id=tenant)``) with 20% writes
(``add(text, user_id=tenant)``). Meanwhile a writer on another connection adds a probe memory to
a random tenant every ``--probe-every`` seconds. The first worker searches for each probe as soon
as it hears of it, which measures how stale a read can be after another process's write.

Reported per worker: RSS over the run (steady state = the median of its second half), the time of
the open and first search, p50/p95/p99 of searches on a tenant's first touch in that worker
(cold) and later (warm), p50/p95/p99 of writes, and the probe lag. The same run times a
single-tenant SQLite ``Memory`` holding one tenant's M memories on the same queries, the reference
for the warm-search ratio.

Each shape (``--tenants``, repeatable) is its own schema on one throwaway cluster
(``tests/pg_cluster.py``, fsync on), built once per run with ``add(..., link=False)``. By default
there is no model (``--model`` turns the default embedder on: 400k chunks take the 2-core machine
more than an hour to embed). The table then reads the lexical and graph channels, which are what
the views hold per worker. Its output is ``benchmarks/results/fleet.md`` (``--out`` to change it),
with the commit and the command; ``--samples FILE`` keeps every sample as JSON.

Projection: with views of the whole database (today), a worker's RSS grows with the total number
of chunks. The slope between two shapes, extended to 10,000 tenants x 1,000 memories, is printed
beside the table as arithmetic from the measured figures, not as a measurement.
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
           scoped: bool = False) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t_start = time.perf_counter()
    from causalmem import Config, Memory

    rng = random.Random(seed)
    weights = [1.0 / (r + 1) ** zipf for r in range(tenants)]
    order = list(range(tenants))
    rng.shuffle(order)  # which tenants are hot differs from the build order
    cfg = Config(scoped_views=scoped)
    m = Memory(dsn, config=cfg) if model else Memory(dsn, embedder=None, config=cfg)
    t_open = time.perf_counter() - t_start
    first = tenant_query(order[0], rng)
    t0 = time.perf_counter()
    m.search(first, user_id=f"t{order[0]}", top_k=5)
    t_first = time.perf_counter() - t0
    seen = {order[0]}
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
            (cold if tenant not in seen else warm if pooled else rebuilt).append(dt)
        else:
            t0 = time.perf_counter()
            m.add(f"tenant {tenant} worker {idx} wrote {n}: " + " ".join(rng.sample(WORDS, 6)), user_id=uid,
                  link=False)
            writes.append(time.perf_counter() - t0)
        seen.add(tenant)
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
    m.close()
    out.put({"evictions": evictions, "builds": builds, "worker": idx, "open_s": t_open, "first_search_s": t_first, "cold": cold, "warm": warm, "rebuilt": rebuilt,
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


def sqlite_reference(per_tenant: int, queries: int, model: bool) -> list[float]:
    """Warm searches on a single-tenant SQLite memory of one tenant's M memories."""
    from causalmem import Memory

    rng = random.Random(3)
    with tempfile.TemporaryDirectory() as d:
        with (Memory(os.path.join(d, "one.db")) if model else Memory(os.path.join(d, "one.db"), embedder=None)) as m:
            m.add(tenant_texts(0, per_tenant), user_id="t0", link=False)
            if model:
                m.flush()
            m.search(tenant_query(0, rng), user_id="t0", top_k=5)
            out = []
            for _ in range(queries):
                q = tenant_query(0, rng)
                t0 = time.perf_counter()
                m.search(q, user_id="t0", top_k=5)
                out.append(time.perf_counter() - t0)
            return out


def run_shape(dsn: str, tenants: int, args: argparse.Namespace) -> dict:
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    probes: mp.Queue = ctx.Queue()
    ready = ctx.Event()
    procs = [ctx.Process(target=worker, args=(i, dsn, tenants, args.seconds, args.zipf, args.model, 100 + i,
                                              probes if i == 0 else None, ready, out, not args.no_reinforce,
                                              args.scoped))
             for i in range(args.workers)]
    procs.append(ctx.Process(target=prober, args=(dsn, tenants, args.seconds, args.probe_every, probes, ready,
                                                  args.model)))
    for p in procs:
        p.start()
    results = [out.get(timeout=args.seconds * 10 + 600) for _ in range(args.workers)]
    for p in procs:
        p.join(timeout=120)
    return {"tenants": tenants, "workers": sorted(results, key=lambda r: r["worker"])}


def steady_rss(r: dict) -> float:
    samples = [mb for _, mb in r["rss"]]
    return statistics.median(samples[len(samples) // 2:])


def table(shape: dict, per_tenant: int, ref: list[float]) -> list[str]:
    ms = 1000.0
    lines = [f"#### {shape['tenants']:,} tenants x {per_tenant} memories ({shape['tenants'] * per_tenant:,} chunks)", "",
             "| worker | ops | RSS steady / max (MB) | open + first search (s) | cold search p50 / p95 / p99 (ms) "
             "| warm search p50 / p95 / p99 (ms) | write p50 / p95 / p99 (ms) |",
             "|---|---|---|---|---|---|---|"]
    for r in shape["workers"]:
        c, w, wr = r["cold"], r["warm"], r["writes"]
        lines.append(
            f"| {r['worker']} | {r['ops']} | {steady_rss(r):.0f} / {max(mb for _, mb in r['rss']):.0f} "
            f"| {r['open_s'] + r['first_search_s']:.2f} "
            f"| {pct(c, 50) * ms:.1f} / {pct(c, 95) * ms:.1f} / {pct(c, 99) * ms:.1f} "
            f"| {pct(w, 50) * ms:.1f} / {pct(w, 95) * ms:.1f} / {pct(w, 99) * ms:.1f} "
            f"| {pct(wr, 50) * ms:.1f} / {pct(wr, 95) * ms:.1f} / {pct(wr, 99) * ms:.1f} |")
    warm_all = [x for r in shape["workers"] for x in r["warm"]]
    lags, heard = shape["workers"][0]["lags"], shape["workers"][0]["heard"]
    lines += ["",
              f"Warm search p95, all workers: {pct(warm_all, 95) * ms:.1f} ms; single-tenant SQLite `Memory` "
              f"on the same {per_tenant} memories, same run: p95 {pct(ref, 95) * ms:.2f} ms "
              f"(ratio {pct(warm_all, 95) / pct(ref, 95):.1f}x).",
              f"Probe lag (another process's acknowledged `add` until worker 0's search returns it): "
              f"{len(lags)} probes, p50 {pct(lags, 50) * ms:.0f} ms, p99 {pct(lags, 99) * ms:.0f} ms "
              f"(of which waiting for worker 0's operation in progress to end: the lag from when it heard of the "
              f"probe is p50 {pct(heard, 50) * ms:.0f} ms, p99 {pct(heard, 99) * ms:.0f} ms); "
              f"found by the first search after the probe was heard: {shape['workers'][0]['lag_first_try']}"
              f"/{len(lags)}.",
              "Per-tenant views built / evicted per worker: "
              + ", ".join(f"{r.get('builds', 0)} / {r.get('evictions', 0)}" for r in shape["workers"])
              + " (`Config(scoped_views=True)`, default `views_budget_mb`; 0 / 0: whole-database views); cold search p95, all workers: "
              f"{pct([x for r in shape['workers'] for x in r['cold']], 95) * ms:.1f} ms.", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tenants", type=int, action="append", help="tenants per shape (repeatable; default 500 and 2000)")
    ap.add_argument("--per-tenant", type=int, default=200)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each shape's run")
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--probe-every", type=float, default=0.5)
    ap.add_argument("--no-reinforce", action="store_true",
                    help="diagnosis: searches write no reinforcement (access counts, Hebbian credit)")
    ap.add_argument("--scoped", action="store_true",
                    help="workers use per-tenant views (Config(scoped_views=True), default views_budget_mb)")
    ap.add_argument("--model", action="store_true", help="the default embedder on (slow to build)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 50 tenants x 50, 10 s, 2 workers")
    ap.add_argument("--out", default=str(RESULTS / "fleet.md"))
    ap.add_argument("--samples", help="also write every sample (latencies, RSS over time) as JSON to this file")
    args = ap.parse_args(argv)
    if args.quick:
        args.tenants, args.per_tenant, args.seconds, args.workers = args.tenants or [50], 50, 10.0, 2
    shapes = args.tenants or [500, 2000]
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT))
    from pg_cluster import start

    embedder = "auto" if args.model else None
    base = os.environ.get("CAUSALMEM_BENCH_PG_DSN")
    cluster = None if base else start(durable=True)
    base = base or cluster.dsn
    try:
        sep = "&" if "?" in base else "?"
        built, measured = {}, []
        for t in shapes:
            dsn = f"{base}{sep}schema=fleet_{t}x{args.per_tenant}"
            built[t] = build(dsn, t, args.per_tenant, embedder)
            print(f"built {t} x {args.per_tenant} in {built[t]:.1f} s", flush=True)
            measured.append(run_shape(dsn, t, args))
            print(f"ran {t} tenants", flush=True)
        ref = sqlite_reference(args.per_tenant, 400, args.model)
    finally:
        if cluster is not None:
            cluster.stop()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    cmd = "python benchmarks/fleet.py " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    lines = ["# A fleet of workers on one PostgreSQL memory", "",
             f"Commit `{commit}`; command `{cmd.strip()}`; {args.workers} worker processes, "
             f"{args.seconds:.0f} s per shape, Zipf {args.zipf}, 80% search / 20% write, a probe writer on "
             f"another connection every {args.probe_every} s; "
             + ("the default embedder on." if args.model else "no model (`embedder=None`): lexical and graph channels.")
             + " 2-core machine shared with other work: read ratios and growth, not absolute speed.", ""]
    for shape in measured:
        lines += table(shape, args.per_tenant, ref)
    if len(measured) >= 2:
        a, b = measured[0], measured[-1]
        ra = statistics.median(steady_rss(r) for r in a["workers"])
        rb = statistics.median(steady_rss(r) for r in b["workers"])
        ca, cb = a["tenants"] * args.per_tenant, b["tenants"] * args.per_tenant
        slope = (rb - ra) / (cb - ca)  # MB per chunk held in the views
        fixed = ra - slope * ca
        proj = fixed + slope * 10_000 * 1_000
        lines += ["## Growth and the projection to 10,000 tenants x 1,000 memories", "",
                  f"Median steady RSS per worker: {ra:.0f} MB at {ca:,} chunks, {rb:.0f} MB at {cb:,} chunks: "
                  f"{slope * 1e6 / 1024:.2f} GB per million chunks above a fixed {fixed:.0f} MB. "
                  f"Arithmetic, not measured: whole-database views at 10,000 x 1,000 = 10M chunks would need "
                  f"about {proj / 1024:.1f} GB per worker.", ""]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if args.samples:
        Path(args.samples).write_text(json.dumps({"built_s": built, "shapes": measured, "sqlite_ref": ref}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
