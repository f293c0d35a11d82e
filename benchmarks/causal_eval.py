"""CausalEval-dev: do search / the causal queries surface the gold evidence nodes?

For every ``graph_*.json`` of ``../shared/data/causal-eval-dev`` (resolved from this file; never
copied), one ``Memory(":memory:")`` scoped to ``user_id = "graph-<id>"`` is built from

* the conversations: ``Memory.add`` per session (session_id = session number, event_time = the
  session's date), and
* the graph: ``record_decision(action[from], action[to], relation=..., polarity=polarity[to],
  task_tag=task_tag[from])`` per edge (node text = its ``action``; nodes without edges are
  stored with ``add``).

Each question then runs through ``Memory.search(question, top_k=10)`` and, where a causal query
fits the category, through it with the quoted node text of the question:
11 root cause -> ``trace_cause``; 12 intervention -> ``intervention_query``;
14 inhibition -> ``trace_cause`` (a preventer arrives with negative energy).

Matching rule (evaluation only, never used for retrieval): a returned chunk counts for a node
when its text *is* the node's action (the chunk ``record_decision`` wrote), or when it is a
conversation turn that *mentions* the node: at least 60 % of the node's content tokens (the
engine's tokenizer: lowercase, stop words out, light stemming) occur in the turn, and the node
is the turn's best-covered node (ties: every tied node). Each turn's node is fixed once at
ingest, independent of the questions.

Metrics per question: node recall@10 (share of evidence nodes found), hit@10 (at least one),
all@10 (every evidence node found).

    python benchmarks/causal_eval.py [--data DIR] [--embedder auto|none] [--out PATH|-]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from causalmem import Memory  # noqa: E402
from causalmem.config import Config  # noqa: E402
from causalmem.tokenizer import tokenize  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data" / "causal-eval-dev"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "causal_eval.md"
CATEGORIES = (11, 12, 13, 14, 15, 16, 17)
CAT_NAMES = {11: "root-cause chain", 12: "intervention", 13: "counterfactual choice", 14: "inhibition",
             15: "temporal order", 16: "lesson transfer", 17: "belief update"}
COVER = 0.6
_QUOTE = re.compile(r'"([^"]+)"')


def load(data_dir: Path) -> list[dict]:
    files = sorted(Path(data_dir).glob("graph_*.json"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
    return [json.loads(f.read_text()) for f in files]


def node_mentions(text: str, nodes: dict[int, str]) -> set[int]:
    """Nodes a conversation turn mentions (see the matching rule in the module docstring)."""
    toks = set(tokenize(text))
    best, cover = set(), 0.0
    for nid, action in nodes.items():
        nt = set(tokenize(action))
        if not nt:
            continue
        c = len(nt & toks) / len(nt)
        if c > cover + 1e-12:
            best, cover = {nid}, c
        elif abs(c - cover) <= 1e-12:
            best.add(nid)
    return best if cover >= COVER else set()


def build(g: dict, embedder: Any, *, conversations: bool = True, graph: bool = True, data_similar: bool = True,
          sleep: int | None = None) -> tuple[Memory, str, dict]:
    """The memory of one graph file and a map chunk text -> node ids it stands for.

    ``data_similar=False`` leaves out the data's own ``similar_to`` edges (a user records what
    happened, rarely which other task it resembles); ``sleep=k`` then runs one ``Memory.sleep()``
    with ``Config(transfer_links=k)`` (0: sleep without stage 4b) before the questions."""
    user = f"graph-{g['graph']['id']}"
    nodes = {n["id"]: n for n in g["graph"]["nodes"]}
    actions = {i: n["action"] for i, n in nodes.items()}
    mem = Memory(":memory:", embedder=embedder, config=Config(transfer_links=sleep or 0))
    text_nodes: dict[str, set[int]] = defaultdict(set)
    if conversations:
        for conv in g["conversations"]:
            for s in conv["sessions"]:
                when = dt.datetime.strptime(s["date_time"], "%Y-%m-%d %H:%M").replace(tzinfo=dt.timezone.utc)
                turns = [{"speaker": t["speaker"], "text": t["text"]} for t in s["turns"]]
                for chunk in mem.add(turns, user_id=user, session_id=f"{conv.get('graph_id', 0)}-{s['number']}",
                                     event_time=when):
                    text_nodes[chunk.text] |= node_mentions(chunk.text, actions)
    if graph:
        used = set()
        items = []
        for e in g["graph"]["edges"]:
            if e["relation"] == "similar_to" and not data_similar:
                continue
            src, dst = nodes[e["from"]], nodes[e["to"]]
            items.append({"decision": src["action"], "outcome": dst["action"], "relation": e["relation"],
                          "polarity": dst.get("polarity") or None, "task_tag": src.get("task_tag"),
                          "user_id": user, "source": "rule"})
            used |= {e["from"], e["to"]}
        mem.record_many(items)
        for i, n in nodes.items():
            if i not in used:
                mem.add(n["action"], user_id=user, session_id="graph")
        for i, a in actions.items():
            text_nodes[a].add(i)
    mem.flush()  # vectors are computed in the background; the eval asks with every vector present
    if sleep is not None:
        mem.sleep()
    return mem, user, text_nodes


def found_nodes(texts: Sequence[str], text_nodes: dict[str, set[int]]) -> set[int]:
    out: set[int] = set()
    for t in texts:
        out |= text_nodes.get(t, set())
    return out


def causal_texts(mem: Memory, user: str, qa: dict) -> list[str] | None:
    """Texts surfaced by the causal query that fits the category (None: no causal query fits)."""
    quoted = _QUOTE.findall(qa["question"])
    if not quoted:
        return None
    cat = qa["category"]
    if cat in (11, 14):
        acts = mem.trace_cause(quoted[0], limit=10, user_id=user, include_seeds=True)
        return [a.text for a in acts]
    if cat == 12:
        rep = mem.intervention_query(quoted[0], limit=10, user_id=user)
        texts = [o.text for o in rep.outcomes]
        for o in rep.outcomes:
            texts += list(o.chain_texts)
        return texts
    return None


def evaluate(graphs: list[dict], embedder: Any, *, conversations: bool, graph: bool,
             causal: bool = False, data_similar: bool = True, sleep: int | None = None) -> dict[int, list[dict]]:
    per_cat: dict[int, list[dict]] = defaultdict(list)
    for g in graphs:
        mem, user, text_nodes = build(g, embedder, conversations=conversations, graph=graph,
                                      data_similar=data_similar, sleep=sleep)
        for qa in g["qa"]:
            gold = set(qa["evidence_nodes"])
            if causal:
                texts = causal_texts(mem, user, qa)
                if texts is None:
                    continue
            else:
                texts = [h.text for h in mem.search(qa["question"], top_k=10, user_id=user, reinforce=False)]
            got = found_nodes(texts, text_nodes) & gold
            per_cat[qa["category"]].append({"recall": len(got) / len(gold), "hit": float(bool(got)),
                                            "all": float(got == gold)})
        mem.close()
    return per_cat


def summarise(per_cat: dict[int, list[dict]]) -> dict[str, dict[str, float]]:
    out, allq = {}, []
    for c in CATEGORIES:
        rows = per_cat.get(c, [])
        allq += rows
        if rows:
            out[str(c)] = {k: float(np.mean([r[k] for r in rows])) for k in ("recall", "hit", "all")}
            out[str(c)]["n"] = len(rows)
    out["all"] = {k: float(np.mean([r[k] for r in allq])) for k in ("recall", "hit", "all")} if allq else {}
    out["all"]["n"] = len(allq)
    return out


def markdown(rows: list[tuple[str, dict]], meta: dict) -> str:
    lines = ["# CausalEval-dev: evidence nodes surfaced", "",
             f"Command: `{meta['command']}`  ",
             f"Data: `{meta['data']}` ({meta['n_graphs']} graphs, {meta['n_q']} questions). "
             f"Embedder: {meta['embedder']}. Runtime {meta['seconds']:.0f} s.", "",
             "Memory per graph file: conversations via `add` (one call per session) and/or the graph via "
             "`record_many` of `record_decision` items (node text = action). `search` rows: "
             "`search(question, top_k=10, user_id=graph, reinforce=False)`. Causal rows: the API that fits the "
             "category, called with the node text quoted in the question (11 and 14: `trace_cause(..., "
             "include_seeds=True, limit=10)`, 12: `intervention_query(..., limit=10)`, outcomes and their chains).",
             "",
             "Matching rule: a returned chunk counts for a node when its text is the node's action, or when it is "
             f"a conversation turn that covers >= {int(COVER * 100)} % of the node's content tokens and that node "
             "is its best-covered one (fixed per turn at ingest, never used by retrieval).", "",
             "Cells: node recall@10 / hit@10 (at least one evidence node) / all@10 (every evidence node).", "",
             "Read with care: a graph file has only 11 nodes, so *graph only* with top_k = 10 is close to "
             "returning everything; *conversations + graph* (~30 turns + 11 nodes) is the informative row. "
             "Category 17 (belief update: 'what does X now believe is the right way to handle <task tag>?') "
             "names neither the node's words nor its task tag's text, and category 16 needs the other task's "
             "nodes two hops away (similar_to, then caused/enabled); the causal APIs are not tried there "
             "because no single quoted node text names what to spread from.", ""]
    header = "| setting | " + " | ".join(f"{c} {CAT_NAMES[c]}" for c in CATEGORIES) + " | overall |"
    lines += [header, "|---" * (len(CATEGORIES) + 2) + "|"]
    lines += _table_rows(rows)
    lines.append("")
    return "\n".join(lines)


def _table_rows(rows: list[tuple[str, dict]]) -> list[str]:
    """One markdown row per setting: recall / hit / all (n) per category and overall."""
    out = []
    for label, s in rows:
        cells = []
        for c in list(map(str, CATEGORIES)) + ["all"]:
            r = s.get(c)
            cells.append("—" if not r or "recall" not in r else
                         f"{r['recall']:.2f} / {r['hit']:.2f} / {r['all']:.2f} (n={r['n']})")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return out


#: stage 4b's links per decision when it is turned on (it is opt-in: Config().transfer_links is 0)
TRANSFER_ON = 2
# graphs 0-4 were looked at while building sleep stage 4b; 5-9 are held back and reported separately
HELD_BACK_FROM = 5


def transfer_markdown(rows: list[tuple[str, dict]]) -> str:
    lines = ["## Lesson transfer: similar_to links found at sleep", "",
             "The data's own `similar_to` edges are left out of `record_many` (a user records what happened, rarely "
             "which other task it resembles); the memory then runs one `Memory.sleep()` before the questions. Stage "
             "4b (`causalmem/consolidation/transfer.py`) links decisions of different tasks whose causal out-edges "
             "have the same (relation, outcome polarity) shape, at most `Config.transfer_links` per decision. "
             f"Graphs 0-{HELD_BACK_FROM - 1} were looked at while building the stage; graphs {HELD_BACK_FROM}-9 "
             "are held back and reported on their own. Same cells as above (search, conversations + graph).", "",
             "| setting | " + " | ".join(f"{c} {CAT_NAMES[c]}" for c in CATEGORIES) + " | overall |",
             "|---" * (len(CATEGORIES) + 2) + "|"]
    lines += _table_rows(rows)
    lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="directory holding graph_*.json")
    ap.add_argument("--embedder", default="auto", help="'auto' (packaged MiniLM), a model name/path, or 'none'")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="Markdown output file, '-' for stdout only")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    graphs = load(args.data)
    if not graphs:  # never replace the committed table with empty rows
        print(f"causal_eval: no graph_*.json under {args.data} (the eval data is read from "
              "../shared/data next to the checkout, or give --data); nothing written to "
              f"{args.out}", file=sys.stderr)
        return 2
    embedder = None
    if args.embedder != "none":
        from causalmem.semantic import resolve_embedder

        sys.path.insert(0, str(REPO / "benchmarks"))
        from locomo_retrieval import CachedEmbedder

        embedder = CachedEmbedder(resolve_embedder(args.embedder))
    settings = [
        ("search: conversations + graph", dict(conversations=True, graph=True)),
        ("search: graph only", dict(conversations=False, graph=True)),
        ("search: conversations only", dict(conversations=True, graph=False)),
        ("causal API (graph + conversations)", dict(conversations=True, graph=True, causal=True)),
    ]
    # the data's own similar_to edges left out, then found by sleep
    transfer = [
        ("conversations + graph without the data's similar_to: no sleep", dict(data_similar=False)),
        ("… after one sleep, stage 4b off (transfer_links=0)", dict(data_similar=False, sleep=0)),
        (f"… after one sleep, stage 4b on (transfer_links={TRANSFER_ON}, opt-in)",
         dict(data_similar=False, sleep=TRANSFER_ON)),
    ]
    split = {"dev": [g for g in graphs if int(g["graph"]["id"]) < HELD_BACK_FROM],
             "held back": [g for g in graphs if int(g["graph"]["id"]) >= HELD_BACK_FROM]}
    rows = []
    for label, kw in settings:
        s = summarise(evaluate(graphs, embedder, **kw))
        rows.append((label, s))
        print(f"{label:40s} recall {s['all'].get('recall', float('nan')):.3f} hit {s['all'].get('hit', float('nan')):.3f}"
              + "  " + " ".join(f"c{c}={s[c]['recall']:.2f}" for c in map(str, CATEGORIES) if c in s), flush=True)
    transfer_rows = []
    for part, gs in split.items():
        for label, kw in transfer:
            s = summarise(evaluate(gs, embedder, conversations=True, graph=True, **kw))
            transfer_rows.append((f"{part} ({len(gs)} graphs): {label}", s))
            print(f"{part}: {label:60s} " + " ".join(f"c{c}={s[c]['recall']:.2f}" for c in map(str, CATEGORIES)
                                                   if c in s), flush=True)
    meta = {"command": "python benchmarks/causal_eval.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "data": "../shared/data/causal-eval-dev" if args.data == DEFAULT_DATA else str(args.data),
            "n_graphs": len(graphs), "n_q": sum(len(g["qa"]) for g in graphs),
            "embedder": "none" if embedder is None else f"{embedder.model_name} (dim {embedder.dim})",
            "seconds": time.perf_counter() - t0}
    md = markdown(rows, meta) + transfer_markdown(transfer_rows)
    if args.out != "-":
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(md + "\n")
        print(f"wrote {args.out}")
    else:
        print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
