"""Regenerate the README's picture: ``python -m causalmem.viz.readme_picture`` (from the checkout root).

Builds the demo database (the DevOps graph that ``causalmem demo`` records) in a temporary
directory, then runs ``causalmem --db demo.db show "deploy without tests" --mode what-if
--out docs/demo_chain.svg``. Needs Graphviz's ``dot``.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Sequence

DEFAULT_OUT = Path("docs") / "demo_chain.svg"
QUERY = "deploy without tests"


def build_demo_db(path: Path) -> None:
    """The same edges ``causalmem demo`` records."""
    from ..cli import DEVOPS_EDGES
    from ..memory import Memory

    with Memory(path, embedder=None) as mem:
        mem.record_many([{"decision": d, "outcome": o, "relation": r, "confidence": c} for d, o, r, c in DEVOPS_EDGES])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m causalmem.viz.readme_picture", description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(DEFAULT_OUT), help=f"where to write the picture (default: {DEFAULT_OUT})")
    p.add_argument("--mode", default="what-if", choices=["forward", "reverse", "both", "what-if"])
    args = p.parse_args(argv)
    from ..cli import main as cli_main

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="causalmem-demo-") as tmp:
        db = Path(tmp) / "demo.db"
        build_demo_db(db)
        return cli_main(["--db", str(db), "show", QUERY, "--mode", args.mode, "--out", args.out])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
