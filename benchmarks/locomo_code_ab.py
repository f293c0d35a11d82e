"""Two versions of the engine on LoCoMo-dev, paired per question, from the reinforce-off score files that
``locomo_retrieval.py --paired ... --cache DIR`` writes (``DIR/off-<key>.npz``: every grid point's
per-question scores; the key hashes the engine's code, so a run on each version leaves one file each).

    python benchmarks/locomo_code_ab.py BEFORE.npz AFTER.npz [--label-before main --label-after branch]

Prints, as Markdown, for the cross-validated default (each version's own leave-one-conversation-out choice
of grid point, the headline figure of ``locomo.md``) and for the shipped constants: R@10 and nDCG@10 of
each version and after - before per question, pooled, with a 95% bootstrap interval over questions
(``locomo_retrieval.paired_spread``: 2,000 resamples) and how many questions moved each way.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo_retrieval as lr  # noqa: E402


def load(path: str) -> tuple[dict[str, lr.Scores], list[str]]:
    """grid point -> conv id -> (categories, per-question metrics), and the conv ids in file order."""
    by_point: dict[str, lr.Scores] = {}
    convs: list[str] = []
    with np.load(path, allow_pickle=False) as z:
        for key in z.files:
            point, conv, part = key.rsplit("|", 2)
            if conv not in convs:
                convs.append(conv)
            if part == "cats":
                by_point.setdefault(point, {})[conv] = (z[key], z[f"{point}|{conv}|scores"])
    if next(iter(by_point), None) != "shipped":
        raise SystemExit(f"locomo_code_ab: {path} does not start with the 'shipped' grid point: "
                         "not a locomo_retrieval --cache file")
    # file order is the harness's grid order: cross_validate breaks ties towards the earlier point, as there
    return by_point, convs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", help="off-<key>.npz of the first version")
    ap.add_argument("after", help="off-<key>.npz of the second version")
    ap.add_argument("--label-before", default="before")
    ap.add_argument("--label-after", default="after")
    args = ap.parse_args(argv)
    before, convs = load(args.before)
    after, convs_after = load(args.after)
    if convs != convs_after or set(before) != set(after):
        raise SystemExit("locomo_code_ab: the two files hold different conversations or grid points "
                         "(run both with the same data, --embedder and --config)")
    for p in before:
        for c in convs:
            if not np.array_equal(before[p][c][0], after[p][c][0]):
                raise SystemExit(f"locomo_code_ab: questions of {c} differ between the two files")
    cv_b, chosen_b = lr.cross_validate(before, convs)
    cv_a, chosen_a = lr.cross_validate(after, convs)
    rows = [("cross-validated", cv_b, cv_a), ("shipped constants", before["shipped"], after["shipped"])]
    lines = [f"| | R@10 {args.label_before} | R@10 {args.label_after} | {args.label_after} - {args.label_before} "
             "R@10 [95%] | up / down | nDCG@10 " + args.label_before + f" | nDCG@10 {args.label_after} | "
             f"{args.label_after} - {args.label_before} nDCG@10 [95%] | up / down |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, b, a in rows:
        sb, sa = lr.summarise_scores(b, convs)["all"], lr.summarise_scores(a, convs)["all"]
        d = lr.paired_spread(a, b, convs)
        r, n = d["R@10"], d["nDCG@10"]
        lines.append(f"| {name} | {sb['R@10']:.4f} | {sa['R@10']:.4f} | {r['pooled']:+.4f} [{r['lo']:+.4f}, "
                     f"{r['hi']:+.4f}] | {r['up']} / {r['down']} | {sb['nDCG@10']:.4f} | {sa['nDCG@10']:.4f} | "
                     f"{n['pooled']:+.4f} [{n['lo']:+.4f}, {n['hi']:+.4f}] | {n['up']} / {n['down']} |")
    lines += ["", f"Points the folds chose ({args.label_before} / {args.label_after}), by held-out conversation: "
              + "; ".join(f"{c}: `{chosen_b[c]}` / `{chosen_a[c]}`" for c in convs)]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
