"""LoCoMo-dev quick check of the lexical channel alone (retrieval-only protocol).

Indexes each conversation's turns ("speaker: text" + " [shares photo: caption]") in a
``BM25Index`` and reports recall@10 (and hit@10, MRR) per category and overall (1-5), for
several tokenizer variants. The data set is read in place, never copied.

    python benchmarks/bm25_locomo_check.py [path/to/locomo_dev.json]
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from causalmem.lexical import BM25Index
from causalmem.tokenizer import ENGLISH_STOP_WORDS, Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from locomo_retrieval import normalise_evidence  # noqa: E402  (one evidence normaliser for both harnesses)

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo-dev" / "locomo_dev.json"

# A classic, larger stop-word list to compare against the engine's small one.
_FILLERS = set("hey hi oh yeah yes wow thanks thank really ok okay um uh hmm lol haha".split())
_LARGE_EXTRA = set(
    """
    not no nor never again once further get got go going gone make made say said tell told
    like really yeah yes oh hey hi thanks thank well know think want going one two lot much
    many way thing things something anything everything nothing someone anyone everyone
    still even ever back now today always though although because since while until
    """.split()
)


def load(path: Path):
    samples = json.loads(path.read_text())
    convs = []
    for s in samples:
        c = s["conversation"]
        turns: list[tuple[str, str]] = []
        n = 1
        while f"session_{n}" in c:
            for t in c[f"session_{n}"]:
                text = f"{t['speaker']}: {t['text']}"
                if t.get("blip_caption"):
                    text += f" [shares photo: {t['blip_caption']}]"
                turns.append((t["dia_id"], text))
            n += 1
        known = {d for d, _ in turns}
        qas = []
        for qa in s["qa"]:
            gold = normalise_evidence(qa.get("evidence") or [], known)
            if gold and qa.get("category") in (1, 2, 3, 4, 5):
                qas.append((qa["question"], gold, qa["category"]))
        convs.append((s["sample_id"], turns, qas))
    return convs


def evaluate(convs, tokenizer: Tokenizer, k: int = 10) -> dict:
    per_cat = defaultdict(list)
    for _, turns, qas in convs:
        index = BM25Index(tokenizer=tokenizer)
        index.add_many([(i, text) for i, (_, text) in enumerate(turns)])
        dia = [d for d, _ in turns]
        for question, gold, cat in qas:
            ids, _ = index.search(question, top_k=k)
            got = [dia[i] for i in ids]
            g = set(gold)
            recall = len(g.intersection(got)) / len(g)
            hit = float(bool(g.intersection(got)))
            rr = next((1.0 / (r + 1) for r, d in enumerate(got) if d in g), 0.0)
            per_cat[cat].append((recall, hit, rr))
    rows = {}
    allv = [v for vs in per_cat.values() for v in vs]
    for cat in sorted(per_cat) + ["all"]:
        vs = allv if cat == "all" else per_cat[cat]
        rows[cat] = tuple(sum(x[i] for x in vs) / len(vs) for i in range(3)) + (len(vs),)
    return rows


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_PATH
    if not path.is_file():
        sys.exit(f"bm25_locomo_check: {path} not found (the eval data is read from ../shared/data "
                 "next to the checkout, or give its path)")
    convs = load(path)
    stop_lists = {
        "no stop words": (),
        "small (engine default)": ENGLISH_STOP_WORDS,
        "small + chat fillers": ENGLISH_STOP_WORDS | _FILLERS,
        "large (fillers, negations, light verbs)": ENGLISH_STOP_WORDS | _FILLERS | _LARGE_EXTRA,
    }
    variants = {
        f"stem={stem:6s} stop={stop_name}": Tokenizer(stem=stem, stop_words=words)
        for stem in ("none", "plural", "light")
        for stop_name, words in stop_lists.items()
    }
    print(f"{'variant':60s} {'R@10':>6s} {'hit@10':>6s} {'MRR':>6s}   R@10 per category 1..5")
    for name, tok in variants.items():
        rows = evaluate(convs, tok)
        r, h, m, n = rows["all"]
        cats = " ".join(f"{rows[c][0]:.3f}" for c in sorted(c for c in rows if c != "all"))
        print(f"{name:60s} {r:6.4f} {h:6.4f} {m:6.4f}   {cats}  (n={n})")


if __name__ == "__main__":
    main()
