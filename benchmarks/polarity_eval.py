"""Accuracy of ``causalmem.polarity.guess_polarity`` on a labelled set of operational outcome phrases.

The set is written by hand: outcome predicates of everyday operations (failures, recoveries, negated
failures such as "errors dropped to zero", and neutral events), each said in twelve contexts (a bare
phrase, after a deploy, overnight, on a named service, ...). A neutral phrase is right when the guess
is None or "neutral". Prints per-class accuracy and the misses.

    python benchmarks/polarity_eval.py            # -> benchmarks/results/polarity.md
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from causalmem.polarity import guess_polarity

NEGATIVE = """pager went off | dashboards went stale | stale config served | latency went up | alerts fired all night
queue backed up | disk filled up | pods kept restarting | requests piled up | users saw 500s | memory blew up
build went red | checkout page returned errors | customers could not log in | the cache served old data
p99 doubled | the job never finished | replicas fell behind | certificates expired | the site was down""".split("|")
POSITIVE = """errors dropped to zero | latency went down | no more timeouts | alerts stopped | queue drained
build went green | p99 halved | zero downtime | tests pass again | users stopped complaining | cpu usage dropped
no errors since | the crash is fixed | the outage was resolved | deploys are faster | checkout works again""".split("|")
NEUTRAL = """config was reloaded | the team met at noon | logs were rotated | release notes were posted
the job ran at midnight | a new dashboard was added""".split("|")
CONTEXTS = ["{}", "after the deploy {}", "overnight {}", "on the api, {}", "{} on friday", "in staging {}",
            "right after the restart {}", "{} within minutes", "the next morning {}", "{} for the eu region",
            "once we flipped the flag {}", "{} again"]


def labelled() -> list[tuple[str, str]]:
    out = []
    for label, preds in (("negative", NEGATIVE), ("positive", POSITIVE), ("neutral", NEUTRAL)):
        for p in (x.strip() for x in re.split(r"[|\n]", "|".join(preds)) if x.strip()):
            for c in CONTEXTS:
                out.append((label, c.format(" ".join(p.split()))))
    return out


def main() -> int:
    data = labelled()
    per: dict[str, list[int]] = {}
    misses = []
    for label, text in data:
        guess = guess_polarity(text)
        ok = guess in (None, "neutral") if label == "neutral" else guess == label
        per.setdefault(label, [0, 0])[0] += ok
        per[label][1] += 1
        if not ok:
            misses.append((label, guess, text))
    right = sum(v[0] for v in per.values())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = ["# Outcome polarity on a labelled set of operational phrases", "",
             f"Command: `python benchmarks/polarity_eval.py` (commit {commit}; the working tree's polarity.py).",
             f"{len(data)} phrases ({len(data) // len(CONTEXTS)} outcome predicates x "
             f"{len(CONTEXTS)} contexts).", "",
             f"Accuracy: **{right}/{len(data)} = {right / len(data):.3f}**", "",
             "| class | right | total | accuracy |", "|---|---|---|---|"]
    for label, (r, n) in per.items():
        lines.append(f"| {label} | {r} | {n} | {r / n:.3f} |")
    shown = sorted({(lab, str(g), t) for lab, g, t in misses})[:60]
    lines += ["", f"Misses ({len(misses)}; first 60 shown, label / guess / phrase):", ""]
    lines += [f"- {lab} / {g} / {t}" for lab, g, t in shown]
    text = "\n".join(lines) + "\n"
    print(text)
    if "--no-write" not in sys.argv:
        (Path(__file__).resolve().parent / "results" / "polarity.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
