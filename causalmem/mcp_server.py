"""MCP server: the memory as tools for agents, over stdio (``python -m causalmem.mcp_server``).

An interface layer like ``cli.py``: each tool parses its arguments, calls one ``Memory`` method and
returns plain JSON built from the result dataclasses. The MCP SDK (``pip install 'causalmem[mcp]'``,
mcp >= 2) is imported only when a server is built, so ``import causalmem`` never needs it.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import sys
import threading
from typing import Any, Callable, Mapping, Sequence, TypeVar

from .config import default_db
from .errors import CausalMemError

SERVER_NAME = "causalmem"

INSTRUCTIONS = (
    "Long-term causal memory. Record what your decisions led to with remember_decision "
    "(relation 'caused', 'prevented', 'enabled', ...). Before acting, ask what_if(action) for predicted "
    "outcomes with causal chains and a DANGER/WARNING/SAFE/UNKNOWN label; search_causal(query) for what "
    "follows from something, trace_cause(outcome) for what led to it, search(query) for anything you "
    "stored (including conversations saved with add_messages). Negative energy means 'prevented': a "
    "warning, not a prediction. Reward memories that helped (or hurt) with feedback(chunk_id, reward)."
)

_F = TypeVar("_F", bound=Callable[..., Any])


def _plain(value: Any) -> Any:
    """JSON-ready copy: dataclasses, mappings and tuples to dicts/lists, numpy scalars to Python, NaN to None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, bool, int)) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "tolist"):  # numpy scalar or array
        return _plain(value.tolist())
    return str(value)


def _error_message(exc: BaseException) -> str:
    # str(KeyError("x")) is "'x'" with quotes; the message itself reads better.
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    return str(exc)


def build_server(memory: Any) -> Any:
    """An ``MCPServer`` whose tools call ``memory`` (a ``causalmem.Memory``); the caller owns ``memory``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING")
    # The SDK runs sync tools in worker threads; one call at a time keeps Memory's write path simple.
    lock = threading.Lock()

    def memory_call(fn: _F) -> _F:
        """Serialise the call; an argument error from Memory becomes a tool error carrying its message."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                with lock:
                    return _plain(fn(*args, **kwargs))
            except (ValueError, TypeError, KeyError, CausalMemError) as exc:
                raise ToolError(_error_message(exc)) from exc

        return wrapper  # type: ignore[return-value]

    @server.tool()
    @memory_call
    def remember_decision(decision: str, outcome: str, relation: str = "caused", confidence: float | None = None,
                          polarity: str | None = None, task_tag: str | None = None,
                          user_id: str | None = None) -> dict[str, Any]:
        """Record that `decision` led to `outcome` as a typed causal edge; returns the edge.

        relation: caused | enabled | prevented | no_effect | fact | temporal | co_occurrence (or a meta kind).
        confidence in [0, 1] (default from the source); polarity of the outcome: positive | negative | mixed |
        neutral (guessed from the text when omitted); task_tag groups edges by task; user_id scopes them.
        """
        return memory.record_decision(decision, outcome, relation=relation, confidence=confidence,
                                      polarity=polarity, task_tag=task_tag, user_id=user_id)

    @server.tool()
    @memory_call
    def search(query: str, top_k: int = 10, user_id: str | None = None,
               explain: bool = False) -> list[dict[str, Any]]:
        """What do I know about `query`: hybrid lexical + semantic + graph search over every stored memory.

        Returns hits (id, text, score, kind, ...); explain=True adds the per-channel signals of each hit.
        """
        return memory.search(query, top_k=top_k, user_id=user_id, explain=explain)

    @server.tool()
    @memory_call
    def search_causal(query: str, limit: int = 5, user_id: str | None = None) -> list[dict[str, Any]]:
        """What follows from `query` (forward causal spreading). Energy < 0 is a warning: reached over a
        'prevented' edge, i.e. something this tends to stop from happening."""
        return memory.search_causal(query, limit=limit, user_id=user_id)

    @server.tool()
    @memory_call
    def trace_cause(outcome: str, limit: int = 5, user_id: str | None = None) -> list[dict[str, Any]]:
        """What led to `outcome` (reverse causal spreading): likely causes, strongest first."""
        return memory.trace_cause(outcome, limit=limit, user_id=user_id)

    @server.tool()
    @memory_call
    def what_if(action: str, max_depth: int = 3, limit: int = 5, user_id: str | None = None) -> dict[str, Any]:
        """Predict what doing `action` leads to, from recorded precedent: outcomes with causal chains and an
        overall label DANGER | WARNING | SAFE | UNKNOWN (UNKNOWN with has_precedent=false means nothing in
        memory follows from it, which does not mean it is safe)."""
        return memory.intervention_query(action, max_depth=max_depth, limit=limit, user_id=user_id)

    @server.tool()
    @memory_call
    def add_messages(messages: str | list[str | dict[str, Any]], user_id: str | None = None,
                     session_id: str | None = None) -> list[dict[str, Any]]:
        """Store a conversation: a string, or a list of {"role", "content"} / {"speaker", "text"} messages.

        Each turn becomes a memory chunk, linked in order; returns the stored chunks."""
        return memory.add(messages, user_id=user_id, session_id=session_id)

    @server.tool()
    @memory_call
    def feedback(chunk_id: str, reward: float) -> dict[str, Any]:
        """Reward a memory (by chunk id) that proved useful (up to 1) or harmful (down to -1); returns its new
        Q-value, which ranks it higher or lower in later searches."""
        return {"chunk_id": chunk_id, "q_value": memory.feedback(chunk_id, reward)}

    @server.tool()
    @memory_call
    def sleep(dry_run: bool = False) -> dict[str, Any]:
        """Run one consolidation cycle (replay, supersede contradicted failures, merge, mine patterns, decay);
        dry_run=True reports what would change and writes nothing."""
        return memory.sleep(dry_run=dry_run)

    @server.tool()
    @memory_call
    def stats() -> dict[str, Any]:
        """Counts of memories (chunks), causal edges, facts and embeddings, and the database path."""
        return memory.stats()

    return server


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="causalmem-mcp",
                                description="Serve a causalmem database to MCP clients over stdio.")
    p.add_argument("--db", default=None,
                   help=f"database file (default: $CAUSALMEM_DB or {default_db()})")
    p.add_argument("--semantic", action="store_true",
                   help="load the sentence-transformers embedder (slower start; default: lexical + graph only)")
    return p


def serve(db: str | None = None, *, semantic: bool = False) -> int:
    """Serve the database ``db`` (default: ``causalmem.cli.default_db()``) on stdin/stdout until the client
    disconnects; returns the exit status. ``semantic`` loads the sentence-transformers embedder."""
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError as exc:
        print(f"causalmem-mcp: error: the MCP server needs the MCP Python SDK >= 2 "
              f"(pip install 'causalmem[mcp]'): {exc}", file=sys.stderr)
        return 2
    from .memory import Memory

    try:
        memory = Memory(db or default_db(), embedder="auto" if semantic else None)
    except (ValueError, TypeError, CausalMemError) as exc:
        print(f"causalmem-mcp: error: {exc}", file=sys.stderr)
        return 2
    try:
        build_server(memory).run("stdio")
    except KeyboardInterrupt:  # pragma: no cover - interactive stop
        pass
    finally:
        memory.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m causalmem.mcp_server [--db FILE] [--semantic]``: run the MCP server over stdio."""
    args = build_parser().parse_args(argv)
    return serve(args.db, semantic=args.semantic)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
