"""Benchmark regression gate: compare peer ratios of a fresh run with a committed baseline.

    python benchmarks/gate.py --compare benchmarks/baseline_ratios.json        # run, compare
    python benchmarks/gate.py --compare benchmarks/baseline_ratios.json --json run.json
                                                         # compare a finished run instead
    python benchmarks/gate.py --update benchmarks/baseline_ratios.json         # record a baseline

A fresh run is ``pytest benchmarks/ --benchmark-only -m gate --benchmark-json=...``: the suites'
``test_gate_*`` benchmarks, each of which times causalmem against a peer doing the same work in
the same process (the compiled kernel against the numpy frontier, BM25Index against bm25s,
``record_many`` against raw ``sqlite3.executemany``, ``Memory.search`` against an exact
rank-bm25 scan) and stores ``peer median / ours median`` as ``extra_info["ratio"]``.  Absolute
timings on a shared machine move by about ±30% between runs; the ratio cancels most of that.

A ratio regresses when it falls below ``baseline × (1 − margin)``; the margin is 30% by default
(``--margin``, or the baseline file's own ``margin``).  Exit status: 0 when no ratio regressed,
1 when one did (or a baselined benchmark is missing from the run), 2 on a usage error or when
the benchmark run itself failed.  A ratio that improves beyond the margin is reported (so the
baseline can be refreshed with ``--update``) but does not fail.  A baseline is specific to a
kind of machine: in a hosted CI, record one on the same runner type (e.g. from the target
branch in the same job) rather than reuse one recorded elsewhere.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_MARGIN = 0.30


def run_benchmarks(out_json: Path, extra: list[str]) -> None:
    cmd = [sys.executable, "-m", "pytest", str(HERE), "--benchmark-only", "-m", "gate",
           f"--benchmark-json={out_json}", "-p", "no:cacheprovider", "-q", *extra]
    print("+", " ".join(cmd), flush=True)
    env = dict(os.environ, OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    status = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    if status != 0:
        raise SystemExit(f"gate: the benchmark run failed (pytest exit {status})")


def read_ratios(run_json: Path) -> dict[str, dict]:
    data = json.loads(Path(run_json).read_text())
    out = {}
    for b in data.get("benchmarks", []):
        info = b.get("extra_info", {})
        if "ratio" in info:
            name = b["fullname"].replace(os.sep, "/")
            out[name] = {"ratio": float(info["ratio"]), "peer": info.get("peer", "?"),
                         "ours_median_s": info.get("ours_median_s"),
                         "peer_median_s": info.get("peer_median_s")}
    return out


def compare(baseline: dict, fresh: dict[str, dict], margin: float) -> int:
    failures = 0
    width = max([len(n) for n in baseline["ratios"]] + [10])
    print(f"\n{'benchmark':{width}s}  {'peer':22s} {'baseline':>9s} {'fresh':>9s} {'change':>8s}  verdict")
    for name, base in sorted(baseline["ratios"].items()):
        base_ratio = base["ratio"] if isinstance(base, dict) else float(base)
        peer = base.get("peer", "?") if isinstance(base, dict) else "?"
        got = fresh.get(name)
        if got is None:
            print(f"{name:{width}s}  {peer:22s} {base_ratio:9.3f} {'-':>9s} {'-':>8s}  FAIL (missing from the run)")
            failures += 1
            continue
        change = got["ratio"] / base_ratio - 1.0
        if got["ratio"] < base_ratio * (1.0 - margin):
            verdict = f"FAIL (below {1 - margin:.0%} of baseline)"
            failures += 1
        elif got["ratio"] > base_ratio * (1.0 + margin):
            verdict = "ok (faster than baseline: consider --update)"
        else:
            verdict = "ok"
        print(f"{name:{width}s}  {peer:22s} {base_ratio:9.3f} {got['ratio']:9.3f} {change:+8.1%}  {verdict}")
    for name in sorted(set(fresh) - set(baseline["ratios"])):
        print(f"{name:{width}s}  {fresh[name]['peer']:22s} {'-':>9s} {fresh[name]['ratio']:9.3f} {'':8s}  new (not in the baseline)")
    print(f"\nratio = peer median / causalmem median (higher: causalmem faster); margin {margin:.0%}")
    if failures:
        print(f"gate: FAIL - {failures} ratio(s) regressed by more than {margin:.0%}")
        return 1
    print("gate: PASS")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--compare", type=Path, metavar="BASELINE", help="baseline JSON to compare with")
    mode.add_argument("--update", type=Path, metavar="BASELINE", help="write a baseline JSON from the run")
    ap.add_argument("--json", type=Path, help="read this pytest-benchmark JSON instead of running the suites")
    ap.add_argument("--save-run", type=Path, help="keep the fresh run's pytest-benchmark JSON here")
    ap.add_argument("--margin", type=float, default=None,
                    help=f"allowed fractional drop of a ratio (default: the baseline's, else {DEFAULT_MARGIN})")
    ap.add_argument("pytest_args", nargs="*", help="extra arguments for pytest (after --)")
    args = ap.parse_args(argv)
    if args.margin is not None and not 0.0 < args.margin < 1.0:
        ap.error(f"--margin must be between 0 and 1, got {args.margin}")

    baseline = None
    if args.compare is not None:
        if not args.compare.is_file():
            ap.error(f"baseline {args.compare} not found (record one with --update)")
        baseline = json.loads(args.compare.read_text())
        if not baseline.get("ratios"):
            ap.error(f"baseline {args.compare} holds no ratios")

    if args.json is not None:
        if not args.json.is_file():
            ap.error(f"--json {args.json} not found")
        fresh = read_ratios(args.json)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run.json"
            run_benchmarks(out, args.pytest_args)
            if args.save_run is not None:
                args.save_run.write_bytes(out.read_bytes())
            fresh = read_ratios(out)
    if not fresh:
        print("gate: the run holds no peer ratios (no test_gate_* benchmark ran)", file=sys.stderr)
        return 2

    if args.update is not None:
        margin = args.margin if args.margin is not None else DEFAULT_MARGIN
        record = {
            "about": "peer ratios of `python benchmarks/gate.py` (peer median / causalmem median); "
                     "a fresh ratio below baseline * (1 - margin) fails the gate",
            "margin": margin,
            "machine": {"python": platform.python_version(), "machine": platform.machine(),
                        "system": platform.system(), "cpus": os.cpu_count()},
            "ratios": {name: {"ratio": round(v["ratio"], 4), "peer": v["peer"]}
                       for name, v in sorted(fresh.items())},
        }
        args.update.write_text(json.dumps(record, indent=1) + "\n")
        for name, v in sorted(fresh.items()):
            print(f"{name}: {v['ratio']:.3f} (vs {v['peer']})")
        print(f"wrote {args.update}")
        return 0

    margin = args.margin if args.margin is not None else float(baseline.get("margin", DEFAULT_MARGIN))
    return compare(baseline, fresh, margin)


if __name__ == "__main__":
    raise SystemExit(main())
