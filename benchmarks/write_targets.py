"""The two write targets, each command run several times in a row (every run a fresh process):

    python benchmarks/write_targets.py --part default --runs 5   # fast_defaults.py's record_many row
    python benchmarks/write_targets.py --part nomodel --runs 5   # write_speed.py (embedder=None)
    python benchmarks/write_targets.py --report                  # -> benchmarks/results/write_targets.md

``--part default`` runs ``python benchmarks/fast_defaults.py --sizes "" --embedded 0 --background 512
--batches 10 --out -`` (``record_many`` at the default ``Memory(path)``, model installed and the
background worker on, 10 batches of 1,000 pairs, each batch checked to be lexically searchable
right after the call; ``embedder=None`` in the same run as the peer); ``--part nomodel`` runs
``python benchmarks/write_speed.py --out -`` (4 rounds x 10 batches of 1,000 pairs, the raw sqlite3
``executemany`` peer in the same rounds). Each part records every run's figures, the load average
before each run and whether it ran alone on a quiet machine (``QUIET=1`` in the environment: the
caller says so) in ``benchmarks/results/write_targets.json``; ``--report`` writes the table of all
runs, their median and their minimum against the target and 1.3x the target.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

from _common import HERE, RESULTS, load_text

STORE = RESULTS / "write_targets.json"
DEFAULT_CMD = ["fast_defaults.py", "--sizes", "", "--embedded", "0", "--background", "512", "--batches", "10",
               "--out", "-"]
NOMODEL_CMD = ["write_speed.py", "--out", "-"]
TARGETS = {"default": 10_000, "nomodel": 20_000}


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def run_default() -> dict:
    out = subprocess.run([sys.executable, str(HERE / DEFAULT_CMD[0]), *DEFAULT_CMD[1:]], capture_output=True,
                         text=True, check=True).stdout
    row = next(line for line in out.splitlines() if line.startswith("| `record_many` at the default"))
    fig = re.search(r"\| ([\d,]+) edges/s .*searchable at once: (\d+)/(\d+) batches", row)
    peer = re.search(r"embedder=None ([\d,]+) edges/s", row)
    assert fig and peer, row
    return {"edges_s": _num(fig.group(1)), "searchable": f"{fig.group(2)}/{fig.group(3)}",
            "peer_none_edges_s": _num(peer.group(1))}


def run_nomodel() -> dict:
    out = subprocess.run([sys.executable, str(HERE / NOMODEL_CMD[0]), *NOMODEL_CMD[1:]], capture_output=True,
                         text=True, check=True).stdout
    cur = re.search(r"\| current tree \| ([\d,]+) \| ([\d,]+) \|", out)
    raw = re.search(r"\| raw sqlite3 executemany \(peer\) \| ([\d,]+) \| ([\d,]+) \|", out)
    assert cur and raw, out
    return {"edges_s": _num(cur.group(1)), "cpu_edges_s": _num(cur.group(2)), "peer_raw_edges_s": _num(raw.group(1))}


def _commit() -> str:
    return subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def report() -> None:
    runs = json.loads(STORE.read_text()) if STORE.exists() else []
    lines = ["# The write targets, run after run", "",
             "`python benchmarks/write_targets.py --part default --runs 5` / `--part nomodel --runs 5`, then "
             "`--report`. Every run is a fresh process of the command named below; the load average is the one "
             "just before the run (other helpers' unlocked jobs share the 2-core machine even under `quiet`). "
             "The runs of each commit are summarised apart.", ""]
    for part, cmd in (("default", DEFAULT_CMD), ("nomodel", NOMODEL_CMD)):
        for commit in dict.fromkeys(r["commit"] for r in runs if r["part"] == part):
            lines += _section(part, cmd, commit, [r for r in runs if r["part"] == part and r["commit"] == commit])
    (RESULTS / "write_targets.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _section(part: str, cmd: list[str], commit: str, rows: list[dict]) -> list[str]:
    target = TARGETS[part]
    shown = " ".join(f'"{a}"' if a == "" else a for a in cmd)
    lines = [f"## `python benchmarks/{shown}` on {commit}", "",
             "| run | commit | UTC | load (1/5/15 min) | quiet | edges/s | peer in the same run |",
             "|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows, 1):
        peer = (f"`embedder=None` {r['peer_none_edges_s']:,.0f}; searchable at once {r['searchable']}"
                if part == "default" else f"raw sqlite3 `executemany` {r['peer_raw_edges_s']:,.0f} "
                f"(process CPU-time rate, the checkpoint thread included: {r['cpu_edges_s']:,.0f})")
        lines.append(f"| {i} | {r['commit']} | {r['utc']} | {r['load']} | {'yes' if r['quiet'] else 'no'} | "
                     f"{r['edges_s']:,.0f} | {peer} |")
    figs = [r["edges_s"] for r in rows]
    med, low = statistics.median(figs), min(figs)
    return lines + ["", f"Median {med:,.0f} edges/s ({med / target:.2f}x the {target:,} target; goal 1.3x = "
                        f"{1.3 * target:,.0f}: {'met' if med >= 1.3 * target else 'NOT met'}); lowest run {low:,.0f} "
                        f"({'every run at or above the target' if low >= target else 'a run BELOW the target'}).", ""]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=["default", "nomodel"])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--reset", action="store_true", help="forget the runs recorded so far")
    args = ap.parse_args()
    if args.reset and STORE.exists():
        STORE.unlink()
    if args.part:
        runs = json.loads(STORE.read_text()) if STORE.exists() else []
        for _ in range(args.runs):
            load = load_text()
            fig = run_default() if args.part == "default" else run_nomodel()
            rec = {"part": args.part, "commit": _commit(), "utc": time.strftime("%H:%M:%S", time.gmtime()),
                   "load": load, "quiet": os.environ.get("QUIET") == "1", **fig}
            runs.append(rec)
            print(json.dumps(rec), flush=True)
            STORE.write_text(json.dumps(runs, indent=1) + "\n")
    if args.report:
        report()


if __name__ == "__main__":
    main()
