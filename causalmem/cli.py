"""Command line: ``causalmem record | search | search-causal | trace | what-if | stats | sleep | demo | show | ui``."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from .config import default_db

# The DevOps graph of SPEC §3 (decision, outcome, relation, confidence); tests import it from here.
DEVOPS_EDGES = [
    ("deploy without tests", "production crash", "caused", 0.9),
    ("deploy without tests", "safe release", "prevented", 0.85),
    ("production crash", "user complaints", "caused", 0.8),
    ("production crash", "rollback needed", "enabled", 0.7),
    ("rollback needed", "downtime", "caused", 0.75),
    ("add input validation", "sql injection", "prevented", 0.9),
    ("add input validation", "security audit passed", "enabled", 0.6),
    ("skip code review", "hidden bugs", "caused", 0.85),
    ("hidden bugs", "production crash", "caused", 0.7),
    ("enable caching", "faster response", "caused", 0.8),
    ("enable caching", "timeout errors", "prevented", 0.85),
]


def _open(args: argparse.Namespace, *, must_exist: bool = False):
    """The Memory the command works on; commands that only read never create a database."""
    from .errors import StoreError
    from .memory import Memory

    path = args.db or default_db()
    if must_exist and path != ":memory:" and not Path(path).exists():
        raise StoreError(f"no database at {path!r} (this command only reads; nothing was created)")
    return Memory(path, embedder="auto" if getattr(args, "semantic", False) else None)


def _print_activations(title: str, acts, out) -> None:
    print(title, file=out)
    if not acts:
        print("  (nothing in memory)", file=out)
    for a in acts:
        tag = "WARNING (prevented)" if a.energy < 0 else ""
        sup = f"  [superseded by {a.superseded_by}]" if a.superseded_by else ""
        print(f"  {a.energy:+.4f}  {a.text}  {tag}{sup}".rstrip(), file=out)


def _print_report(rep, out) -> None:
    print(f"what if: {rep.action!r} -> {rep.label}", file=out)
    if not rep.outcomes:
        print(f"  {rep.summary}", file=out)
    for o in rep.outcomes:
        chain = " -> ".join(f"{t}" for t in o.chain_texts)
        rels = ",".join(o.relations)
        pol = o.polarity or "no polarity"
        tag = f"prevented ({pol} outcome blocked)" if o.energy < 0 else pol
        print(f"  {o.energy:+.4f}  {o.text}  [{tag}]  chain: {chain} "
              f"({rels}; confidence {o.chain_confidence:.3f})", file=out)


def cmd_record(args, out) -> int:
    with _open(args) as mem:
        e = mem.record_decision(args.decision, args.outcome, relation=args.relation, source=args.source,
                                confidence=args.confidence, polarity=args.polarity, task_tag=args.task_tag,
                                user_id=args.user_id)
        print(f"recorded edge {e.id}: {args.decision!r} -{e.relation}({e.confidence:.2f})-> {args.outcome!r}"
              f" polarity={e.polarity}", file=out)
    return 0


def cmd_search_causal(args, out) -> int:
    with _open(args, must_exist=True) as mem:
        _print_activations(f"what follows from {args.query!r}:",
                           mem.search_causal(args.query, limit=args.limit, user_id=args.user_id), out)
    return 0


def cmd_trace(args, out) -> int:
    with _open(args, must_exist=True) as mem:
        _print_activations(f"what caused {args.outcome!r}:",
                           mem.trace_cause(args.outcome, limit=args.limit, user_id=args.user_id), out)
    return 0


def cmd_what_if(args, out) -> int:
    with _open(args, must_exist=True) as mem:
        _print_report(mem.intervention_query(args.action, max_depth=args.max_depth, limit=args.limit,
                                             user_id=args.user_id), out)
    return 0


def cmd_search(args, out) -> int:
    # semantic on by default, as in Python and over MCP (--no-semantic turns it off)
    args.semantic = not getattr(args, "no_semantic", False)
    with _open(args, must_exist=True) as mem:
        from .retrieval import is_prevented

        if args.semantic:  # as the MCP server: the vectors of what was written before (bounded wait)
            mem.wait_embedded(timeout=60.0)
        # explain: the graph activation's sign marks a hit reached over a prevented edge
        hits = mem.search(args.query, top_k=args.limit, user_id=args.user_id, explain=True)
        if not hits:
            print("(no match)", file=out)
        for h in hits:
            sup = f"  [superseded by {h.superseded_by}]" if h.superseded_by else ""
            warn = "  WARNING (prevented)" if is_prevented(h) else ""
            print(f"  {h.score:.4f}  [{h.kind}] {h.text}{warn}{sup}", file=out)
    return 0


def cmd_stats(args, out) -> int:
    with _open(args, must_exist=True) as mem:
        for k, v in mem.stats(user_id=args.user_id).items():
            print(f"{k:16} {v}", file=out)
    return 0


def cmd_sleep(args, out) -> int:
    from .consolidation import format_report

    with _open(args) as mem:
        report = mem.sleep(dry_run=args.dry_run, action=args.action, progress=True)
        print(format_report(report), file=out)
    return 0


def cmd_embed(args, out) -> int:
    """Vectors for every chunk without a current one (the background queue), with a progress bar."""
    from .memory import Memory

    with Memory(args.db or default_db(), embedder=args.embedder) as mem:
        if mem.embedder is None:
            print("causalmem: error: no embedder installed "
                  "(pip install 'causalmem-engine[onnx]' or 'causalmem-engine[semantic]')", file=sys.stderr)
            return 2
        width = 30

        def bar(done: int, total: int) -> None:
            filled = width * done // total if total else width
            sys.stderr.write(f"\rembedding [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,}")
            sys.stderr.flush()

        n = mem.reembed(progress=None if args.no_progress else bar)
        if not args.no_progress:
            sys.stderr.write("\n")
        print(f"embedded {n} chunks with {mem.embedder.model_name}", file=out)
    return 0


def cmd_demo(args, out) -> int:
    from .memory import Memory

    with tempfile.TemporaryDirectory(prefix="causalmem-demo-") as tmp:
        db = Path(args.db) if args.db else Path(tmp) / "demo.db"  # --db keeps the demo for later queries
        with Memory(db, embedder="auto" if args.semantic else None) as mem:
            mem.record_many([{"decision": d, "outcome": o, "relation": r, "confidence": c} for d, o, r, c in
                             DEVOPS_EDGES])
            print(f"DevOps demo: {len(DEVOPS_EDGES)} causal edges recorded in {db.name}\n", file=out)
            _print_activations("forward  - what follows from 'deploy without tests'?",
                               mem.search_causal("deploy without tests"), out)
            print(file=out)
            _print_activations("reverse  - what caused 'production crash'?", mem.trace_cause("production crash"), out)
            print(file=out)
            _print_report(mem.intervention_query("deploy without tests"), out)
            print(file=out)
            _print_report(mem.intervention_query("enable caching"), out)
            print(file=out)
            _print_report(mem.intervention_query("rewrite everything in a weekend"), out)
    return 0


def cmd_export(args, out) -> int:
    with _open(args, must_exist=True) as mem:
        n = mem.export(args.file, vectors=args.vectors)
    print(f"exported {n} lines to {args.file}", file=out)
    return 0


def cmd_import(args, out) -> int:
    with _open(args) as mem:
        counts = mem.import_(args.file)
    print("imported " + ", ".join(f"{v} {k}" for k, v in counts.items() if v), file=out)
    return 0


def cmd_mcp(args, out) -> int:
    from .mcp_server import serve

    # The semantic channel is on by default, as in Python (--no-semantic turns it off).
    return serve(args.db, semantic=not args.no_semantic, transport=args.transport, host=args.host, port=args.port,
                 user_id=args.user_id, agent_id=args.agent_id, run_id=args.run_id)


def _open_existing(args: argparse.Namespace):
    """The database named by --db (or the default) without creating it: pictures only read."""
    path = args.db or default_db()
    if path != ":memory:" and not Path(path).exists():
        raise ValueError(f"--db: no database at {path!r}")
    return _open(args)


def cmd_show(args, out) -> int:
    from .viz import what_if_graph, write_picture

    suffix = Path(args.out).suffix.lower()
    if suffix not in (".svg", ".html", ".htm", ".dot"):
        raise ValueError(f"--out must end in .svg, .html or .dot, got {args.out!r}")
    with _open_existing(args) as mem:
        if args.mode == "what-if":
            sg = what_if_graph(mem, args.query, max_depth=args.depth or 3, limit=args.limit or 5,
                               user_id=args.user_id)
        else:
            sg = mem.subgraph(args.query, depth=args.depth or 2, direction=args.mode, limit=args.limit or 50,
                              user_id=args.user_id)
        try:
            write_picture(sg, args.out)
        except RuntimeError as exc:  # Graphviz missing or failing
            print(f"causalmem: error: {exc}", file=sys.stderr)
            return 2
    label = f", label {sg.label}" if sg.label else ""
    print(f"wrote {args.out}: {len(sg.nodes)} memories, {len(sg.edges)} edges{label}", file=out)
    return 0


def cmd_ui(args, out) -> int:
    from .viz.server import serve

    # the inspector searches with the channels Memory.search and the MCP server use by default
    args.semantic = not getattr(args, "no_semantic", False)
    with _open_existing(args) as mem:
        def ready(url: str) -> None:
            mode = "writable" if args.writable else "read-only"
            print(f"causalmem inspector ({mode}) on {url}  - Ctrl-C to stop", file=out, flush=True)
            if args.open:
                import webbrowser

                webbrowser.open(url)

        serve(mem, port=args.port, writable=args.writable, ready=ready)
    return 0


DISTRIBUTION = "causalmem-engine"  # the name on the package index (import package: causalmem)


class _VersionAction(argparse.Action):
    """``--version``: the distribution, its version and whether the compiled kernel loaded."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from . import __version__
        from ._kernels import HAVE_EXTENSION

        kernel = "compiled" if HAVE_EXTENSION else "pure-Python reference (no compiled extension)"
        print(f"{DISTRIBUTION} {__version__} (import causalmem; kernel: {kernel})")
        parser.exit()


def _configure_logging(verbose: int, quiet: bool) -> None:
    """The ``causalmem`` logger to stderr: warnings by default, -v info, -vv debug, -q errors only."""
    import logging

    if quiet:
        level = logging.ERROR
    elif verbose >= 2:
        level = logging.DEBUG
    elif verbose == 1:
        level = logging.INFO
    else:
        level = logging.WARNING
    logger = logging.getLogger("causalmem")
    logger.setLevel(level)
    if not any(getattr(h, "_causalmem_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        handler._causalmem_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="causalmem", description="Long-term causal memory for AI agents.")
    p.add_argument("--version", action=_VersionAction, help="print the version and exit")
    noise = p.add_mutually_exclusive_group()
    noise.add_argument("-v", "--verbose", action="count", default=0,
                       help="log progress to stderr (-v info, -vv debug)")
    noise.add_argument("-q", "--quiet", action="store_true", help="log errors only")
    p.add_argument("--db", help="database file (default: $CAUSALMEM_DB or the user data directory)")
    p.add_argument("--semantic", action="store_true", help="load the sentence-transformers embedder")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("record", help="record decision -> outcome")
    r.add_argument("decision")
    r.add_argument("outcome")
    r.add_argument("--relation", default="caused")
    r.add_argument("--source", default="cli", help="where the edge came from (default: cli)")
    r.add_argument("--confidence", type=float)
    r.add_argument("--polarity", choices=["positive", "negative", "mixed", "neutral"])
    r.add_argument("--task-tag")
    r.set_defaults(func=cmd_record)

    for name, fn, arg, helptext in (
        ("search-causal", cmd_search_causal, "query", "what follows from doing X"),
        ("trace", cmd_trace, "outcome", "what caused Y"),
        ("search", cmd_search, "query", "hybrid search: what do I know about Z"),
    ):
        s = sub.add_parser(name, help=helptext)
        s.add_argument(arg)
        s.add_argument("--limit", type=int, default=5 if name != "search" else 10)
        if name == "search":  # the channels Memory.search and the MCP server use by default
            s.add_argument("--no-semantic", dest="no_semantic", action="store_true",
                           help="search without the semantic channel (lexical + graph only)")
        s.set_defaults(func=fn)

    w = sub.add_parser("what-if", help="intervention query: predicted outcomes with chains and a label")
    w.add_argument("action")
    w.add_argument("--max-depth", type=int, default=3)
    w.add_argument("--limit", type=int, default=5)
    w.set_defaults(func=cmd_what_if)

    sub.add_parser("stats", help="counts of chunks, edges, ...").set_defaults(func=cmd_stats)
    sl = sub.add_parser("sleep", help="run one consolidation cycle")
    sl.add_argument("--dry-run", action="store_true", help="report what would change; write nothing")
    sl.add_argument("--action", choices=["annotate", "retire"], default="annotate",
                    help="what supersession does to an outdated lesson (default: annotate)")
    sl.set_defaults(func=cmd_sleep)
    em = sub.add_parser("embed", help="compute the vectors still missing (writes embed in the background), "
                        "with a progress bar")
    em.add_argument("--embedder", default="auto", help="embedder spec, as Memory(embedder=...) takes it "
                    "(default: auto)")
    em.add_argument("--no-progress", action="store_true", help="no progress bar")
    em.set_defaults(func=cmd_embed)
    sub.add_parser("demo", help="build the DevOps example (in a temporary database, or in --db) and query it"
                   ).set_defaults(func=cmd_demo)
    ex = sub.add_parser("export", help="write the whole memory to a versioned JSON-lines file (backup, move)")
    ex.add_argument("file", help="output .jsonl file")
    ex.add_argument("--vectors", action="store_true", help="include the stored embedding vectors")
    ex.set_defaults(func=cmd_export)
    im = sub.add_parser("import", help="load a JSON-lines export into the database (one transaction)")
    im.add_argument("file", help="a file written by 'causalmem export'")
    im.set_defaults(func=cmd_import)
    m = sub.add_parser("mcp", help="serve the memory to MCP clients over stdio or streamable HTTP "
                                   "(needs causalmem-engine[mcp])")
    m.add_argument("--no-semantic", action="store_true", help="do not load the embedder (lexical + graph only)")
    m.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    m.add_argument("--host", default="127.0.0.1", help="HTTP: loopback address to bind")
    m.add_argument("--port", type=int, default=8765, help="HTTP: port (0 = any free port, printed on stderr)")
    m.add_argument("--agent-id", dest="agent_id", default=None, help="pin every tool call to this agent")
    m.add_argument("--run-id", dest="run_id", default=None, help="pin every tool call to this run")
    m.set_defaults(func=cmd_mcp)
    sh = sub.add_parser("show", help="draw the causal picture of a query: .svg (Graphviz), .html or .dot")
    sh.add_argument("query")
    sh.add_argument("--out", required=True, help="chain.svg (needs Graphviz), chain.html (self-contained) or .dot")
    sh.add_argument("--mode", choices=["forward", "reverse", "both", "what-if"], default="forward",
                    help="forward: what follows; reverse: what caused it; what-if: the chains behind the label")
    sh.add_argument("--depth", type=int, help="hops from the query (default 2; what-if: chain depth, default 3)")
    sh.add_argument("--limit", type=int, help="most memories drawn (default 50; what-if: outcomes, default 5)")
    sh.set_defaults(func=cmd_show)
    u = sub.add_parser("ui", help="serve a local inspector page on 127.0.0.1 (read-only unless --writable)")
    u.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free port)")
    u.add_argument("--writable", action="store_true", help="allow feedback and sleep from the page")
    u.add_argument("--open", action="store_true", help="open the page in the default browser")
    u.add_argument("--no-semantic", dest="no_semantic", action="store_true",
                   help="search without the semantic channel (lexical + graph only)")
    u.set_defaults(func=cmd_ui)
    for name, sp in sub.choices.items():
        # Accept --db/--semantic after the subcommand too; SUPPRESS keeps the top-level value.
        # Each command gets only the flags it honours.
        sp.add_argument("--db", dest="db", default=argparse.SUPPRESS, help="database file")
        if name not in ("export", "import"):
            sp.add_argument("--semantic", action="store_true", default=argparse.SUPPRESS,
                            help="load the sentence-transformers embedder")
        if name not in ("sleep", "demo", "export", "import"):
            sp.add_argument("--user-id", dest="user_id", default=None, help="scope: the user's memories only")
        sp_noise = sp.add_mutually_exclusive_group()
        sp_noise.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                              help="log progress to stderr (-v info, -vv debug)")
        sp_noise.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                              help="log errors only")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose, args.quiet)
    out = sys.stdout
    from .errors import CausalMemError

    try:
        return args.func(args, out)
    except (ValueError, TypeError, KeyError, CausalMemError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"causalmem: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
