"""MCP server: the memory as tools for agents, over stdio or streamable HTTP on 127.0.0.1.

    causalmem-mcp --db agent.db                          # stdio (Claude Desktop, MCP clients)
    causalmem-mcp --db agent.db --user-id bob            # every tool call pinned to bob's memories
    causalmem-mcp --db agent.db --transport http --port 8765   # http://127.0.0.1:8765/mcp

An interface layer like ``cli.py``: each tool checks its arguments against the schema it publishes
(descriptions, enums, ranges; unknown arguments are refused by name), calls one ``Memory`` method on
``AsyncMemory``'s bounded pool and returns plain JSON that matches the tool's output schema. Errors
come back as tool errors in plain words. A request the SDK cannot parse still gets a JSON-RPC error
reply (stdio) instead of silence. The MCP SDK (``pip install 'causalmem-engine[mcp]'``, mcp >= 2) is
imported only when a server is built, so ``import causalmem`` never needs it.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import socket
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .config import default_db
from .errors import CausalMemError
from .types import POLARITIES, Relation
from .types import META_KINDS  # noqa: F401  (re-exported for the relation enum below)

SERVER_NAME = "causalmem"

INSTRUCTIONS = (
    "Long-term causal memory. Record what your decisions led to with remember_decision "
    "(relation 'caused', 'prevented', 'enabled', ...). Before acting, ask what_if(action) for predicted "
    "outcomes with causal chains and a DANGER/WARNING/SAFE/UNKNOWN label; search_causal(query) for what "
    "follows from something, trace_cause(outcome) for what led to it, search(query) for anything you "
    "stored (including conversations saved with add_messages and facts saved with add_fact). Correct "
    "memories with get, update, delete and history; retire a wrong causal edge with invalidate. Negative "
    "energy means 'prevented': a warning, not a prediction. Reward memories that helped (or hurt) with "
    "feedback(chunk_id, reward); after answering from several hits, confirm(chunk_ids) links the ones you used."
)

RELATIONS = [r.value for r in Relation] + [k for k in META_KINDS if k not in {r.value for r in Relation}]
FUSIONS = ["auto", "blend", "rrf", "hybrid"]
MAX_TOP_K = 1000
MAX_LIMIT = 1000
MAX_EXPORT_BYTES = 16 * 1024 * 1024


# ---------------------------------------------------------------------------------- argument schemas
def _s(description: str, **kw: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **kw}


def _scope_props(what: str = "memories") -> dict[str, dict[str, Any]]:
    return {
        "user_id": _s(f"Only {what} of this user (a scope; omit for every user).", minLength=1),
        "agent_id": _s(f"Only {what} of this agent (a scope).", minLength=1),
        "run_id": _s(f"Only {what} of this run (a scope).", minLength=1),
    }


_METADATA_FILTER = {
    "type": "object",
    "description": "Keep only memories whose metadata matches: {\"field\": value} for equality, or an operator "
                   "object {\"field\": {\"$gte\": 3}} with $eq $ne $gt $gte $lt $lte $in $nin $contains "
                   "$icontains $exists; {\"$or\": [...]}, {\"$and\": [...]}, {\"$not\": [...]} combine filters.",
}
_CONFIDENCE = {"type": "number", "minimum": 0.0, "maximum": 1.0,
               "description": "How sure the link is, from 0 to 1 (default: from the source)."}
_RELATION = {"type": "string", "enum": RELATIONS, "default": "caused",
             "description": "Edge type: caused (+1.0), enabled (+0.5), prevented (-0.3, the outcome was stopped), "
                            "no_effect, fact, temporal, co_occurrence, or a meta kind."}
_POLARITY = {"type": "string", "enum": list(POLARITIES),
             "description": "Whether the outcome is good or bad: positive, negative, mixed or neutral "
                            "(guessed from the text when omitted)."}
# link never guesses: an omitted polarity stays unknown on a new edge and unchanged on a repeated link
_LINK_POLARITY = {**_POLARITY, "description": "Whether the outcome is good or bad: positive, negative, mixed or "
                                              "neutral (when omitted: unknown on a new edge, kept on a repeated link)."}
_CHUNK_ID = _s("Id of a memory (a chunk id, as returned by search, add_messages, get_all ...).", minLength=1)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    properties: dict[str, dict[str, Any]]
    required: tuple[str, ...]
    output: dict[str, Any]
    call: Callable[..., Any]  # (memory, **arguments) -> JSON-able value
    scoped: bool = False      # takes user_id/agent_id/run_id (pinned by --user-id & co.)
    ids: tuple[str, ...] = ()  # chunk-id arguments that must lie inside the pinned scope
    edge_ids: tuple[str, ...] = ()
    read_only: bool = False

    def input_schema(self, pinned: Mapping[str, str]) -> dict[str, Any]:
        props = {k: v for k, v in self.properties.items() if k not in pinned}
        schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
        if self.required:
            schema["required"] = list(self.required)
        return schema


# ---------------------------------------------------------------------------------- output schemas
_FIELD_DOCS = {
    "id": "Stable id of this memory or edge.", "text": "The memory's text.", "kind": "Kind of memory "
    "(decision, outcome, fact, turn, lesson, event, pattern).", "score": "Relevance (higher is better).",
    "energy": "Activation; negative = reached over a 'prevented' edge (a warning).",
    "q_value": "Learned usefulness in [0, 1] (starts at 0.5; feedback moves it; a higher Q ranks higher).",
    "relation": "Edge type.",
    "confidence": "How sure the edge is, 0..1.", "valid": "False once invalidated, superseded or deleted.",
    "created_at": "When stored (POSIX seconds).", "event_time": "When it happened (POSIX seconds), if known.",
    "metadata": "Free-form metadata stored with the memory.", "label": "DANGER, WARNING, SAFE or UNKNOWN.",
    "superseded_by": "Id of the memory or edge that replaced this one, if any.",
    "chain_texts": "The causal chain from the action to this outcome.", "src": "Source chunk id.",
    "dst": "Destination chunk id.", "signals": "Per-channel evidence (with explain=true).",
}


def _clean_schema(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _clean_schema(v) for k, v in node.items() if k != "title"}
        props = out.get("properties")
        if isinstance(props, dict):
            for name, prop in props.items():
                if isinstance(prop, dict) and name in _FIELD_DOCS and "description" not in prop:
                    prop["description"] = _FIELD_DOCS[name]
        return out
    if isinstance(node, list):
        return [_clean_schema(v) for v in node]
    return node


def _schema_of(tp: Any, description: str) -> dict[str, Any]:
    from pydantic import TypeAdapter

    schema = _clean_schema(TypeAdapter(tp).json_schema())
    schema["description"] = description
    return schema


def _list_of(tp: Any, description: str) -> dict[str, Any]:
    inner = _schema_of(tp, description)
    defs = inner.pop("$defs", None)
    schema: dict[str, Any] = {"type": "object", "description": description, "required": ["result"],
                              "properties": {"result": {"type": "array", "items": inner}}}
    if defs:
        schema["$defs"] = defs
    return schema


def _object(description: str, props: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {"type": "object", "description": description, "properties": props, "required": list(required)}


# ---------------------------------------------------------------------------------- argument checking
class ArgumentError(ValueError):
    """An argument a tool cannot take, in words an agent can act on."""


_TYPE_WORDS = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
               "object": "an object", "array": "a list"}


def _is(value: Any, t: str) -> bool:
    if t == "string":
        return isinstance(value, str)
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if t == "boolean":
        return isinstance(value, bool)
    if t == "object":
        return isinstance(value, dict)
    if t == "array":
        return isinstance(value, list)
    return False


def _check_value(name: str, value: Any, schema: Mapping[str, Any]) -> None:
    if "anyOf" in schema:
        if not any(_matches(value, s) for s in schema["anyOf"]):
            kinds = " or ".join(_TYPE_WORDS.get(s.get("type"), str(s.get("type"))) for s in schema["anyOf"])
            raise ArgumentError(f"argument '{name}' must be {kinds}, got {_show(value)}")
        return
    t = schema.get("type")
    if t is not None and not _is(value, t):
        raise ArgumentError(f"argument '{name}' must be {_TYPE_WORDS.get(t, t)}, got {_show(value)}")
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(str(v) for v in schema["enum"])
        extra = " (valid relations: " + allowed + ")" if name == "relation" else f"; allowed: {allowed}"
        raise ArgumentError(f"argument '{name}' is {_show(value)}, not one of the allowed values{extra}")
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        rng = f"from {lo} to {hi}" if lo is not None and hi is not None else (
            f">= {lo}" if lo is not None else f"<= {hi}")
        raise ArgumentError(f"argument '{name}' must be {rng}, got {_show(value)}")
    if "minLength" in schema and isinstance(value, str) and len(value.strip()) < schema["minLength"]:
        raise ArgumentError(f"argument '{name}' must not be empty")


def _matches(value: Any, schema: Mapping[str, Any]) -> bool:
    try:
        _check_value("x", value, schema)
    except ArgumentError:
        return False
    return True


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, float) or math.isfinite(value) \
        else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_arguments(spec: ToolSpec, arguments: Mapping[str, Any] | None,
                    pinned: Mapping[str, str]) -> dict[str, Any]:
    """Arguments as the tool's published schema allows them, or ArgumentError naming the problem."""
    args = dict(arguments or {})
    schema = spec.input_schema(pinned)
    props = schema["properties"]
    unknown = sorted(set(args) - set(props))
    if unknown:
        names = ", ".join(f"'{u}'" for u in unknown)
        why = ""
        pinned_given = [u for u in unknown if u in pinned]
        if pinned_given:
            why = (f" ({', '.join(pinned_given)} is fixed by the server: this server only serves "
                   f"{', '.join(f'{k}={v!r}' for k, v in pinned.items())})")
        allowed = ", ".join(sorted(props)) or "none"
        raise ArgumentError(f"{spec.name} does not take {'argument' if len(unknown) == 1 else 'arguments'} "
                            f"{names}{why}; it takes: {allowed}")
    missing = [r for r in schema.get("required", []) if r not in args or args[r] is None]
    if missing:
        raise ArgumentError(f"{spec.name} needs {', '.join(repr(m) for m in missing)}")
    for name, value in list(args.items()):
        if value is None:
            del args[name]  # an explicit null means "the default"
            continue
        _check_value(name, value, props[name])
    return args


# ---------------------------------------------------------------------------------- JSON conversion
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


# ---------------------------------------------------------------------------------- the tools
def build_tools() -> list[ToolSpec]:
    from .types import Activation, Chunk, Edge, Hit, InterventionReport, SleepReport

    edge_out = _schema_of(Edge, "The causal edge as stored.")
    chunk_out = _schema_of(Chunk, "The memory as stored.")
    chunks_out = _list_of(Chunk, "Memories, oldest first.")
    acts_out = _list_of(Activation, "Activated memories, strongest first (negative energy = warning).")
    scope = _scope_props()
    limit = {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 5,
             "description": f"How many results at most (1..{MAX_LIMIT})."}

    def search(mem: Any, **a: Any) -> Any:
        # a write acknowledged over MCP is findable by the next call: wait for the vectors written so
        # far, as the framework adapters do (bounded, so a stuck embedder cannot hang the server)
        mem.wait_embedded(timeout=60.0)
        return mem.search(**a)

    def what_if(mem: Any, **a: Any) -> Any:
        return mem.intervention_query(**a)

    def add_messages(mem: Any, **a: Any) -> Any:
        return mem.add(a.pop("messages"), **a)

    def feedback(mem: Any, chunk_id: str, reward: float) -> Any:
        return {"chunk_id": chunk_id, "q_value": mem.feedback(chunk_id, reward)}

    def confirm(mem: Any, chunk_ids: list[str]) -> Any:
        return {"pairs": mem.confirm(chunk_ids)}

    def get_all(mem: Any, limit: int = 100, metadata: Any = None, **flt: Any) -> Any:
        return mem.get_all(flt, limit=limit, metadata=metadata)

    def update(mem: Any, chunk_id: str, text: str | None = None, metadata: Any = None) -> Any:
        return mem.update(chunk_id, text, metadata=metadata)

    def delete(mem: Any, chunk_id: str) -> Any:
        mem.delete(chunk_id)
        return {"deleted": chunk_id}

    def history(mem: Any, chunk_id: str) -> Any:
        return mem.history(chunk_id)

    def link(mem: Any, **a: Any) -> Any:
        return mem.link(a.pop("src_chunk_id"), a.pop("dst_chunk_id"), a.pop("relation", "caused"), **a)

    def add_fact(mem: Any, **a: Any) -> Any:
        return mem.add_fact(a.pop("key"), a.pop("value"), **a)

    def export(mem: Any, vectors: bool = False) -> Any:
        import io

        buf = io.StringIO()
        lines = mem.export(buf, vectors=vectors)
        text = buf.getvalue()
        size = len(text.encode("utf-8"))
        if size > MAX_EXPORT_BYTES:
            raise ValueError(f"the export is {size} bytes, more than the {MAX_EXPORT_BYTES} bytes one MCP reply "
                             "carries here; run `causalmem export` on the command line instead")
        return {"lines": lines, "bytes": size, "jsonl": text}

    tools = [
        ToolSpec("remember_decision", "Remember a decision and its outcome",
                 "Record that `decision` led to `outcome` as a typed causal edge; returns the edge.",
                 {"decision": _s("What was done (the cause).", minLength=1),
                  "outcome": _s("What followed (the effect).", minLength=1),
                  "relation": _RELATION, "confidence": _CONFIDENCE, "polarity": _POLARITY,
                  "task_tag": _s("Groups edges of one task (e.g. 'deploy-api').", minLength=1),
                  **scope},
                 ("decision", "outcome"), edge_out,
                 lambda mem, decision, outcome, **a: mem.record_decision(decision, outcome, source="mcp", **a),
                 scoped=True),
        ToolSpec("search", "Search memories",
                 "What do I know about `query`: hybrid lexical + semantic + graph search over every stored "
                 "memory of the scope; best first.",
                 {"query": _s("What to look for, in plain words.", minLength=1),
                  "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "default": 10,
                            "description": f"How many hits at most (1..{MAX_TOP_K})."},
                  "fusion": {"type": "string", "enum": FUSIONS, "default": "auto",
                             "description": "How the channels are combined: auto (= blend, the default), blend "
                                            "(score mix + graph bonus), rrf (reciprocal rank fusion), hybrid."},
                  "explain": {"type": "boolean", "default": False,
                              "description": "Add each hit's per-channel signals (lexical rank, cosine, graph)."},
                  "metadata": _METADATA_FILTER, **scope},
                 ("query",), _list_of(Hit, "Hits, best first."), search, scoped=True, read_only=True),
        ToolSpec("search_causal", "What follows from something",
                 "What follows from `query` (forward causal spreading). Energy < 0 is a warning: reached over a "
                 "'prevented' edge, i.e. something this tends to stop from happening.",
                 {"query": _s("An action or event, in plain words.", minLength=1), "limit": limit, **scope},
                 ("query",), acts_out, lambda mem, query, **a: mem.search_causal(query, **a), scoped=True,
                 read_only=True),
        ToolSpec("trace_cause", "What led to something",
                 "What led to `outcome` (reverse causal spreading): likely causes, strongest first.",
                 {"outcome": _s("The outcome to explain, in plain words.", minLength=1), "limit": limit, **scope},
                 ("outcome",), acts_out, lambda mem, outcome, **a: mem.trace_cause(outcome, **a), scoped=True,
                 read_only=True),
        ToolSpec("what_if", "Predict the outcome of an action",
                 "Predict what doing `action` leads to, from recorded precedent: outcomes with causal chains and "
                 "an overall label DANGER | WARNING | SAFE | UNKNOWN (UNKNOWN with has_precedent=false means "
                 "nothing in memory follows from it, which does not mean it is safe).",
                 {"action": _s("The action you are about to take.", minLength=1),
                  "max_depth": {"type": "integer", "minimum": 1, "maximum": 20, "default": 3,
                                "description": "Longest causal chain followed (1..20)."},
                  "limit": limit, **scope},
                 ("action",), _schema_of(InterventionReport, "Predicted outcomes and the overall label."),
                 what_if, scoped=True, read_only=True),
        ToolSpec("add_messages", "Store a conversation",
                 "Store a conversation: a string, or a list of {\"role\", \"content\"} / {\"speaker\", \"text\"} "
                 "messages. Each turn becomes a memory, linked in order; returns the stored memories.",
                 {"messages": {"anyOf": [{"type": "string"}, {"type": "array"}],
                               "description": "A string, or a list of messages ({\"role\": \"user\", \"content\": "
                                              "\"...\"} or {\"speaker\": \"Kim\", \"text\": \"...\"})."},
                  "session_id": _s("Conversation id: turns of one session are linked in order.", minLength=1),
                  "metadata": {"type": "object", "description": "Metadata stored with every turn (JSON object)."},
                  **scope},
                 ("messages",), chunks_out, add_messages, scoped=True),
        ToolSpec("add_fact", "Store a fact",
                 "Store a fact `key: value` as a searchable memory; replace_same_key retires older values of the "
                 "key in the same scope.",
                 {"key": _s("What the fact is about (e.g. 'preferred editor').", minLength=1),
                  "value": _s("The fact's value (e.g. 'vim').", minLength=1),
                  "confidence": {**_CONFIDENCE, "default": 0.8, "description": "How sure the fact is, 0..1."},
                  "replace_same_key": {"type": "boolean", "default": False,
                                       "description": "Retire older values of this key in this scope."},
                  **scope},
                 ("key", "value"), chunk_out, add_fact, scoped=True),
        ToolSpec("feedback", "Reward a memory",
                 "Reward a memory (by chunk id) that proved useful (up to 1) or harmful (down to -1); returns its "
                 "new Q-value, which ranks it higher or lower in later searches.",
                 {"chunk_id": _CHUNK_ID,
                  "reward": {"type": "number", "minimum": -1.0, "maximum": 1.0,
                             "description": "From -1 (harmful) to 1 (useful)."}},
                 ("chunk_id", "reward"),
                 _object("The memory's new Q-value.", {"chunk_id": {"type": "string"}, "q_value": {
                     "type": "number", "description": _FIELD_DOCS["q_value"]}}, ["chunk_id", "q_value"]),
                 feedback, ids=("chunk_id",)),
        ToolSpec("confirm", "Confirm hits used together",
                 "After answering from several hits of a search, name the ones you actually used (same user/agent/"
                 "run scope): each pair of them gets a learned link, so a later search that finds one also "
                 "reaches the others. A search alone links nothing. Returns how many pairs were credited.",
                 {"chunk_ids": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1,
                                "maxItems": 64, "description": "Ids of the memories (chunk ids) that were useful "
                                "together."}},
                 ("chunk_ids",),
                 _object("How many pairs were credited.", {"pairs": {"type": "integer"}}, ["pairs"]),
                 confirm, ids=("chunk_ids",)),
        ToolSpec("get", "Read one memory", "One memory by id, with its metadata.",
                 {"chunk_id": _CHUNK_ID}, ("chunk_id",), chunk_out,
                 lambda mem, chunk_id: mem.get(chunk_id), ids=("chunk_id",), read_only=True),
        ToolSpec("get_all", "List memories",
                 "Memories of a scope (and optional session, kind and metadata filters), oldest first.",
                 {**scope, "session_id": _s("Only this conversation.", minLength=1),
                  "kind": {"type": "string", "enum": ["decision", "outcome", "fact", "turn", "lesson", "event",
                                                      "pattern"], "description": "Only memories of this kind."},
                  "metadata": _METADATA_FILTER,
                  "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 100,
                            "description": f"How many at most (1..{MAX_LIMIT})."}},
                 (), chunks_out, get_all, scoped=True, read_only=True),
        ToolSpec("update", "Correct a memory",
                 "Replace a memory's text (re-indexed; the old text stays in its history) and/or merge metadata "
                 "into it (a key set to null is removed).",
                 {"chunk_id": _CHUNK_ID, "text": _s("The corrected text.", minLength=1),
                  "metadata": {"type": "object", "description": "Metadata to merge (JSON object)."}},
                 ("chunk_id",), chunk_out, update, ids=("chunk_id",)),
        ToolSpec("delete", "Delete a memory",
                 "Delete a memory: never returned again, its causal edges stop counting at once.",
                 {"chunk_id": _CHUNK_ID}, ("chunk_id",),
                 _object("What was deleted.", {"deleted": {"type": "string", "description": "The chunk id."}},
                         ["deleted"]), delete, ids=("chunk_id",)),
        ToolSpec("history", "History of a memory",
                 "Events of a memory, oldest first: create, update (old -> new text), delete.",
                 {"chunk_id": _CHUNK_ID}, ("chunk_id",),
                 {"type": "object", "description": "Events, oldest first.", "required": ["result"],
                  "properties": {"result": {"type": "array", "items": _object(
                      "One event.", {"event": {"type": "string", "description": "create, update or delete."},
                                     "old_text": {"type": ["string", "null"]}, "new_text": {"type": ["string",
                                                                                                     "null"]},
                                     "at": {"type": "number", "description": "When (POSIX seconds)."}},
                      ["event", "at"])}}},
                 history, ids=("chunk_id",), read_only=True),
        ToolSpec("invalidate", "Retire a wrong causal edge",
                 "Invalidate a causal edge (by edge id, as returned by remember_decision or link): kept for the "
                 "record, skipped by every query.",
                 {"edge_id": _s("Id of the edge.", minLength=1),
                  "reason": _s("Why it is wrong (kept with the edge).", minLength=1)},
                 ("edge_id",), edge_out, lambda mem, edge_id, reason=None: mem.invalidate(edge_id, reason),
                 edge_ids=("edge_id",)),
        ToolSpec("link", "Link two memories",
                 "Add a typed causal edge between two existing memories (by chunk id); returns the edge. Linking "
                 "the same two memories with the same relation again strengthens that edge (evidence + 1, "
                 "confidence combined) and returns it: no second edge.",
                 {"src_chunk_id": _s("Id of the cause.", minLength=1), "dst_chunk_id": _s("Id of the effect.",
                                                                                        minLength=1),
                  "relation": _RELATION, "confidence": _CONFIDENCE, "polarity": _LINK_POLARITY,
                  "task_tag": _s("Groups edges of one task.", minLength=1)},
                 ("src_chunk_id", "dst_chunk_id"), edge_out, link, ids=("src_chunk_id", "dst_chunk_id")),
        ToolSpec("sleep", "Consolidate",
                 "Run one consolidation cycle over the whole database (replay, supersede contradicted failures, "
                 "merge, mine patterns, decay); dry_run=true reports what would change and writes nothing. Not "
                 "offered when the server is pinned to a scope.",
                 {"dry_run": {"type": "boolean", "default": False,
                              "description": "Only report what would change."}},
                 (), _schema_of(SleepReport, "What the cycle changed (or would change)."),
                 lambda mem, dry_run=False: mem.sleep(dry_run=dry_run)),
        ToolSpec("stats", "Database statistics",
                 "Counts of memories (chunks), causal edges, facts and embeddings of the whole database, and "
                 "its path.", {}, (),
                 {"type": "object", "description": "Counts and settings of the database.",
                  "additionalProperties": True, "properties": {
                      "path": {"type": "string", "description": "The database file."}}},
                 lambda mem: mem.stats(), read_only=True),
        ToolSpec("export", "Export the whole memory",
                 "The whole database as versioned JSON lines (chunks with history, edges with validity, facts, "
                 "Q-values, co-occurrence; vectors on request), the format `Memory.import_` and `causalmem "
                 "import` read. Not offered when the server is pinned to a scope.",
                 {"vectors": {"type": "boolean", "default": False,
                              "description": "Include the stored embeddings (much larger)."}},
                 (), _object("The dump.", {
                     "lines": {"type": "integer", "description": "Number of JSON lines."},
                     "bytes": {"type": "integer", "description": "Size of the dump in bytes (UTF-8)."},
                     "jsonl": {"type": "string", "description": "The dump, one JSON object per line."}},
                     ["lines", "bytes", "jsonl"]), export, read_only=True),
    ]
    return tools


# ---------------------------------------------------------------------------------- the server
#: tools that act on the whole database, never offered by a server pinned to a scope
WHOLE_DB = ("export", "sleep")
_PINNED_STATS_OUT = {"type": "object", "description": "Counts of the pinned scope and settings.",
                     "additionalProperties": True, "properties": {}}


def _pinned_stats(mem: Any, **scope: str) -> dict[str, Any]:
    out = dict(mem.stats(**scope))
    out.pop("path", None)
    return out


class _Scope:
    """The pinned scope (--user-id/--agent-id/--run-id) and its checks on ids."""

    def __init__(self, pinned: Mapping[str, str]) -> None:
        self.pinned = dict(pinned)

    def check_chunk(self, mem: Any, chunk_id: str, name: str) -> None:
        if not self.pinned:
            return
        unknown = KeyError(f"unknown {name} {chunk_id!r}")  # the same words whether absent or another scope's
        try:
            chunk = mem.get(chunk_id)
        except KeyError:
            raise unknown from None
        if any(getattr(chunk, k) != v for k, v in self.pinned.items()):
            raise unknown  # another scope's memory does not exist here

    def check_edge(self, mem: Any, edge_id: str) -> None:
        if not self.pinned:
            return
        unknown = KeyError(f"unknown edge_id {edge_id!r}")
        try:
            edge = mem.get_edge(edge_id)
        except KeyError:
            raise unknown from None
        for end in (edge.src, edge.dst):
            chunk = mem.get(end)
            if any(getattr(chunk, k) != v for k, v in self.pinned.items()):
                raise unknown


def build_server(memory: Any, *, user_id: str | None = None, agent_id: str | None = None,
                 run_id: str | None = None, max_workers: int | None = None) -> Any:
    """A low-level MCP ``Server`` whose tools call ``memory`` (a ``causalmem.Memory``, owned by the caller).

    ``user_id``/``agent_id``/``run_id`` pin every tool call to that scope: the tools do not offer these
    arguments, searches and writes use the pinned values, and ids of other scopes' memories are unknown.
    """
    import mcp_types as types
    from mcp.server.lowlevel import Server

    from .async_memory import AsyncMemory

    pinned = {k: v for k, v in (("user_id", user_id), ("agent_id", agent_id), ("run_id", run_id)) if v is not None}
    for k, v in pinned.items():
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"{k} must be a non-empty string, got {v!r}")
    scope = _Scope(pinned)
    amem = AsyncMemory(memory=memory, max_workers=max_workers)
    # export dumps the whole database: only when the Memory has it, and never for a pinned (scoped) server;
    # sleep consolidates every scope's memories (decay, supersession, merges): never on a pinned server's request
    tools = {t.name: t for t in build_tools()
             if not (t.name == "export" and not hasattr(memory, "export")) and not (pinned and t.name in WHOLE_DB)}
    if pinned:  # the pinned scope's counts, without the database's path
        tools["stats"] = dataclasses.replace(
            tools["stats"], description="Counts of memories (chunks), causal edges, facts and embeddings of the "
            "scope this server is pinned to.", output=_PINNED_STATS_OUT, call=_pinned_stats, scoped=True)

    listed = [
        types.Tool(name=t.name, title=t.title, description=t.description, input_schema=t.input_schema(pinned),
                   output_schema=t.output,
                   annotations=types.ToolAnnotations(read_only_hint=t.read_only, destructive_hint=t.name in (
                       "delete", "invalidate", "update", "sleep"), open_world_hint=False))
        for t in tools.values()]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=listed)

    def run(spec: ToolSpec, args: dict[str, Any]) -> Any:
        for name in spec.ids:  # one id, or a list of them (confirm)
            for cid in args[name] if isinstance(args[name], list) else [args[name]]:
                scope.check_chunk(memory, cid, name)
        for name in spec.edge_ids:
            scope.check_edge(memory, args[name])
        if spec.scoped:
            args.update(pinned)
        result = _plain(spec.call(memory, **args))
        return {"result": result} if isinstance(result, list) else result

    async def call_tool(ctx: Any, params: Any) -> Any:
        spec = tools.get(params.name)
        if spec is None:
            return _tool_error(types, f"unknown tool {params.name!r}; tools: {', '.join(sorted(tools))}")
        try:
            args = check_arguments(spec, params.arguments, pinned)
            data = await amem.run(run, spec, args)
        except (ValueError, TypeError, KeyError, CausalMemError) as exc:
            return _tool_error(types, _error_message(exc))
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(data, ensure_ascii=False))],
                                    structured_content=data)

    return Server(SERVER_NAME, version=_version(), instructions=INSTRUCTIONS, on_list_tools=list_tools,
                  on_call_tool=call_tool)


def _tool_error(types: Any, message: str) -> Any:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def _version() -> str:
    from . import __version__

    return __version__


# ---------------------------------------------------------------------------------- transports
def _invalid_request_reply(line: str) -> dict[str, Any] | None:
    """The JSON-RPC error for a line the SDK would drop silently, or None for a valid message."""
    import mcp_types as types

    if not line.strip():
        return None
    try:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        return None
    except Exception:  # noqa: BLE001 - any validation failure: answer it below
        pass
    try:
        obj = json.loads(line)
    except ValueError:
        return {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error: not valid JSON"}}
    msg_id = obj.get("id") if isinstance(obj, dict) else None
    if isinstance(msg_id, bool) or not isinstance(msg_id, (str, int)):
        if isinstance(obj, dict) and "id" not in obj and "method" in obj:
            return {}  # an invalid notification: JSON-RPC says no reply
        msg_id = None
    if isinstance(obj, dict) and ("result" in obj or "error" in obj) and "method" not in obj:
        return {}  # a malformed response from the client: nothing to answer
    why = "not a JSON-RPC 2.0 request"
    if isinstance(obj, dict):
        if obj.get("jsonrpc") != "2.0":
            why = "'jsonrpc' must be \"2.0\""
        elif not isinstance(obj.get("method"), str):
            why = "'method' must be a string"
        elif "params" in obj and not isinstance(obj["params"], (dict, list)):
            why = "'params' must be an object"
    elif isinstance(obj, list):
        why = "batch requests are not supported"
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32600, "message": f"Invalid Request: {why}"}}


class _CheckedLines:
    """stdin lines for the SDK's reader; invalid requests are answered here instead of being dropped."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.write_stream: Any = None

    def __aiter__(self) -> Any:
        return self._lines()

    async def _lines(self) -> Any:
        import mcp_types as types
        from mcp.shared.message import SessionMessage

        async for line in self.inner:
            reply = _invalid_request_reply(line)
            if reply is None:
                yield line
            elif reply and self.write_stream is not None:
                message = types.jsonrpc_message_adapter.validate_python(reply)
                await self.write_stream.send(SessionMessage(message))


async def _serve_stdio(server: Any) -> None:
    import io

    import anyio
    from mcp.server.stdio import stdio_server

    stdin = _CheckedLines(anyio.wrap_file(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")))
    async with stdio_server(stdin=stdin) as (read_stream, write_stream):  # type: ignore[arg-type]
        stdin.write_stream = write_stream
        await server.run(read_stream, write_stream, server.create_initialization_options())


_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_MAX_BODY = 8 * 1024 * 1024


class _CheckedHTTP:
    """ASGI wrapper: a POSTed message the SDK cannot parse gets our JSON-RPC error (its id, plain words)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > _MAX_BODY:
                await self._reply(send, 413, {"jsonrpc": "2.0", "id": None, "error": {
                    "code": -32600, "message": f"Invalid Request: body over {_MAX_BODY} bytes"}})
                return
        body = b"".join(chunks)
        reply = _invalid_request_reply(body.decode("utf-8", errors="replace"))
        if reply:
            await self._reply(send, 400, reply)
            return
        if reply == {}:  # an invalid notification or response: nothing to answer
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _reply(send: Any, status: int, payload: Mapping[str, Any]) -> None:
        data = json.dumps(payload).encode("utf-8")
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})


async def _serve_http(server: Any, host: str, port: int) -> None:
    import uvicorn

    app = _CheckedHTTP(server.streamable_http_app(host=host))
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    sock.listen(2048)  # before announcing the URL: a client connecting at once is queued, not refused
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(f"causalmem-mcp: serving http://{host if family == socket.AF_INET else f'[{host}]'}:{bound}/mcp",
          file=sys.stderr, flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="causalmem-mcp",
                                description="Serve a causalmem database to MCP clients (stdio or streamable HTTP).")
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser, *, with_db: bool = True) -> None:
    """The server's options (shared with ``causalmem mcp``)."""
    if with_db:
        p.add_argument("--db", default=None, help=f"database file (default: $CAUSALMEM_DB or {default_db()})")
    p.add_argument("--no-semantic", dest="semantic", action="store_false", default=True,
                   help="do not load the sentence-transformers embedder (faster start; lexical + graph only)")
    p.add_argument("--semantic", dest="semantic", action="store_true",
                   help="load the embedder (the default, as in Python)")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                   help="stdio (default) or streamable HTTP on --host/--port")
    p.add_argument("--host", default="127.0.0.1", help="HTTP: loopback address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="HTTP: port (0 = any free port; the URL is printed "
                                                           "on stderr)")
    for scope in ("user", "agent", "run"):
        p.add_argument(f"--{scope}-id", dest=f"{scope}_id", default=None,
                       help=f"pin every tool call to this {scope}'s memories")


def serve(db: str | None = None, *, semantic: bool = True, transport: str = "stdio", host: str = "127.0.0.1",
          port: int = 8765, user_id: str | None = None, agent_id: str | None = None,
          run_id: str | None = None) -> int:
    """Serve the database ``db`` (default: ``causalmem.config.default_db()``) until the client disconnects
    (stdio) or the process is stopped (HTTP); returns the exit status."""
    try:
        import mcp.server.lowlevel  # noqa: F401
    except ImportError as exc:
        print(f"causalmem-mcp: error: the MCP server needs the MCP Python SDK >= 2 "
              f"(pip install 'causalmem-engine[mcp]'): {exc}", file=sys.stderr)
        return 2
    if transport not in ("stdio", "http"):
        print(f"causalmem-mcp: error: transport must be 'stdio' or 'http', got {transport!r}", file=sys.stderr)
        return 2
    if transport == "http" and host not in _LOOPBACK:
        print(f"causalmem-mcp: error: --host must be a loopback address ({', '.join(_LOOPBACK)}); the server has "
              f"no authentication, got {host!r}", file=sys.stderr)
        return 2
    if not 0 <= port <= 65535:
        print(f"causalmem-mcp: error: --port must be between 0 and 65535, got {port}", file=sys.stderr)
        return 2
    import anyio

    from .memory import Memory

    try:
        memory = Memory(db or default_db(), embedder="auto" if semantic else None)
        server = build_server(memory, user_id=user_id, agent_id=agent_id, run_id=run_id)
    except (ValueError, TypeError, CausalMemError) as exc:
        print(f"causalmem-mcp: error: {exc}", file=sys.stderr)
        return 2
    try:
        if transport == "stdio":
            anyio.run(_serve_stdio, server)
        else:
            anyio.run(_serve_http, server, host, port)
    except KeyboardInterrupt:  # pragma: no cover - interactive stop
        pass
    except OSError as exc:
        print(f"causalmem-mcp: error: {exc}", file=sys.stderr)
        return 2
    finally:
        memory.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m causalmem.mcp_server [--db FILE] [--transport stdio|http] [--user-id ID] ...``."""
    a = build_parser().parse_args(argv)
    return serve(a.db, semantic=a.semantic, transport=a.transport, host=a.host, port=a.port, user_id=a.user_id,
                 agent_id=a.agent_id, run_id=a.run_id)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
