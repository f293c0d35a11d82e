"""The data behind every picture: a bounded neighbourhood of the causal graph.

``subgraph`` and ``what_if_graph`` read the memory only through the public ``Memory`` API
(``intervention_query``, ``search_causal``, ``trace_cause``, ``search(reinforce=False)``,
``get``, ``edges``): they never write, so the inspector can call them on a live database.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

DIRECTIONS = ("forward", "reverse", "both")
RISK_LABELS = ("DANGER", "WARNING")
_MAX_LIMIT = 2000


@dataclass(frozen=True)
class GraphNode:
    """One memory in a picture."""

    id: str
    text: str
    kind: str
    polarity: str | None  # from the valid edges into it (an outcome's polarity); None: not known
    q_value: float
    importance: float
    valid: bool
    energy: float | None = None  # forward spreading energy (what follows); < 0: reached over `prevented`
    cause_energy: float | None = None  # reverse spreading energy (what caused the seeds)
    seed: bool = False
    highlighted: bool = False  # on the chain behind a DANGER / WARNING label
    user_id: str | None = None
    agent_id: str | None = None
    access_count: int = 0


@dataclass(frozen=True)
class GraphEdge:
    """One stored edge between two nodes of the picture."""

    id: str
    src: str
    dst: str
    relation: str
    confidence: float
    polarity: str | None
    valid: bool
    subtype: str | None = None
    superseded_by: str | None = None
    highlighted: bool = False

    @property
    def inhibitory(self) -> bool:
        return self.relation == "prevented"


@dataclass(frozen=True)
class SubGraph:
    """Nodes and edges of one picture, with the query that made it."""

    query: str | None
    direction: str
    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...]
    seeds: tuple[str, ...] = ()
    label: str | None = None  # the what-if label (DANGER / WARNING / SAFE / UNKNOWN) when computed
    summary: str = ""
    mode: str = "neighbourhood"
    truncated: bool = False  # the node limit cut the neighbourhood short

    def node(self, node_id: str) -> GraphNode:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(f"unknown node id {node_id!r}")

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (what the HTML picture and the inspector API carry)."""
        out = asdict(self)
        for e, d in zip(self.edges, out["edges"]):
            d["inhibitory"] = e.inhibitory
        return out

    def to_networkx(self):
        from .export import to_networkx

        return to_networkx(self)

    def to_dot(self, **kwargs: Any) -> str:
        from .export import to_dot

        return to_dot(self, **kwargs)


# ---------------------------------------------------------------------------- validation
def _check_int(value: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer between {lo} and {hi}, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be between {lo} and {hi}, got {value}")
    return value


def _check_memory(mem: Any) -> None:
    for attr in ("edges", "get", "search_causal", "trace_cause", "intervention_query"):
        if not callable(getattr(mem, attr, None)):
            raise TypeError(f"mem must be a causalmem.Memory, got {type(mem).__name__}")


def _scope(user_id, agent_id, run_id) -> dict[str, Any]:
    return {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}


# ---------------------------------------------------------------------------- assembly
class _Reader:
    """Caches chunks and edges read through the public API for one picture."""

    def __init__(self, mem: Any, include_invalid: bool, relations: frozenset[str] | None, scope: Mapping) -> None:
        self.mem = mem
        self.include_invalid = include_invalid
        self.relations = relations
        self.scope = {k: v for k, v in scope.items() if v is not None}
        self._chunks: dict[str, Any] = {}
        self._edges: dict[str, list] = {}

    def chunk(self, cid: str):
        if cid not in self._chunks:
            try:
                self._chunks[cid] = self.mem.get(cid)
            except KeyError:
                self._chunks[cid] = None
        return self._chunks[cid]

    def in_scope(self, cid: str) -> bool:
        c = self.chunk(cid)
        return c is not None and all(getattr(c, k) == v for k, v in self.scope.items())

    def edges(self, cid: str) -> list:
        if cid not in self._edges:
            try:
                es = self.mem.edges(cid, valid_only=not self.include_invalid)
            except KeyError:
                es = []
            self._edges[cid] = [e for e in es if self.relations is None or e.relation in self.relations]
        return self._edges[cid]


def _node_polarity(edges_in: Iterable[Any]) -> str | None:
    """The polarity stored on the valid edges into a node (the outcome's polarity); ties: latest."""
    pols = [(e.discovered_at or 0.0, e.polarity) for e in edges_in
            if e.valid and e.polarity and e.relation not in ("temporal", "co_occurrence")]
    if not pols:
        return None
    counts = Counter(p for _, p in pols)
    top = max(counts.values())
    return max((t, p) for t, p in pols if counts[p] == top)[1]


def _energies(acts: Iterable[Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for a in acts:
        e = float(a.energy)
        if a.node_id not in out or abs(e) > abs(out[a.node_id]):
            out[a.node_id] = e
    return out


def _seed_ids(mem: Any, query: str, scope: Mapping, depth: int) -> tuple[list[str], Any]:
    """Chunks the query names (the causal queries' seeds), else the best search hits."""
    report = mem.intervention_query(query, max_depth=min(max(depth, 1), 20), limit=50, **scope)
    seeds = list(report.seeds)
    if not seeds and callable(getattr(mem, "search", None)):
        hits = mem.search(query, top_k=3, reinforce=False, channels=("lexical", "semantic"), **scope)
        seeds = [h.id for h in hits]
    return seeds, report


def _highlight_pairs(report: Any) -> set[tuple[str, str]]:
    """(src, dst) pairs on the chains of outcomes that make the label DANGER or WARNING."""
    pairs: set[tuple[str, str]] = set()
    if report is None or report.label not in RISK_LABELS:
        return pairs
    for o in report.outcomes:
        risky = o.energy >= 0 and {"negative": "DANGER", "mixed": "WARNING"}.get(o.polarity or "") == report.label
        if risky:
            pairs.update(zip(o.chain, o.chain[1:]))
    return pairs


def _build(reader: _Reader, node_ids: list[str], *, query, direction, seeds, report, mode,
           forward: Mapping[str, float], reverse: Mapping[str, float], truncated: bool,
           edge_filter=None) -> SubGraph:
    keep = set(node_ids)
    pairs = _highlight_pairs(report)
    edges: dict[str, GraphEdge] = {}
    for cid in node_ids:
        for e in reader.edges(cid):
            if e.src in keep and e.dst in keep and e.id not in edges and (edge_filter is None or edge_filter(e)):
                edges[e.id] = GraphEdge(
                    id=e.id, src=e.src, dst=e.dst, relation=e.relation, confidence=float(e.confidence),
                    polarity=e.polarity, valid=bool(e.valid), subtype=e.subtype, superseded_by=e.superseded_by,
                    highlighted=(e.src, e.dst) in pairs and e.valid)
    hl_nodes = {n for p in pairs for n in p}
    nodes = []
    for cid in node_ids:
        c = reader.chunk(cid)
        if c is None:
            continue
        nodes.append(GraphNode(
            id=c.id, text=c.text, kind=c.kind, polarity=_node_polarity(e for e in reader.edges(cid) if e.dst == cid),
            q_value=float(c.q_value), importance=float(c.importance), valid=bool(c.valid),
            energy=forward.get(cid), cause_energy=reverse.get(cid), seed=cid in seeds,
            highlighted=cid in hl_nodes, user_id=c.user_id, agent_id=c.agent_id, access_count=int(c.access_count)))
    return SubGraph(query=query, direction=direction, nodes=tuple(nodes),
                    edges=tuple(sorted(edges.values(), key=lambda e: (e.src, e.dst, e.id))),
                    seeds=tuple(s for s in seeds if s in keep), label=None if report is None else report.label,
                    summary="" if report is None else report.summary, mode=mode, truncated=truncated)


def subgraph(mem: Any, query_or_ids: "str | Sequence[str]", *, depth: int = 2, direction: str = "both",
             limit: int = 50, include_invalid: bool = False, relations: Iterable[str] | None = None,
             user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None) -> SubGraph:
    """The neighbourhood of a query (or of chunk ids) within ``depth`` hops, at most ``limit`` nodes.

    ``direction`` picks the edges followed from the seeds: ``"forward"`` (what follows),
    ``"reverse"`` (what caused it) or ``"both"``. Nodes carry text, polarity, Q, validity and the
    spreading energies; edges carry relation, confidence, polarity and validity. For a text query
    followed forward, the what-if label is computed and the chain behind a DANGER or WARNING
    label is marked ``highlighted``. Reads only: nothing is written.
    """
    _check_memory(mem)
    depth = _check_int(depth, "depth", 0, 10)
    limit = _check_int(limit, "limit", 1, _MAX_LIMIT)
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    if not isinstance(include_invalid, bool):
        raise TypeError(f"include_invalid must be a bool, got {type(include_invalid).__name__}")
    rel_set = None
    if relations is not None:
        from ..types import Relation

        if isinstance(relations, str):
            raise TypeError("relations must be a collection of relation names, not a single string")
        rel_set = frozenset(Relation.parse(r).value for r in relations)
    scope = _scope(user_id, agent_id, run_id)
    reader = _Reader(mem, include_invalid, rel_set, scope)

    report = None
    if isinstance(query_or_ids, str):
        query: str | None = query_or_ids
        if not query_or_ids.strip():
            raise ValueError("query_or_ids must be a non-empty query or a list of chunk ids")
        seeds, report = _seed_ids(mem, query_or_ids, scope, depth)
        seed_texts = [query_or_ids]
        if direction == "reverse":
            report = None  # the what-if label is about doing X, not about what caused X
    else:
        if not isinstance(query_or_ids, (list, tuple)) or not all(isinstance(i, str) for i in query_or_ids):
            raise TypeError("query_or_ids must be a query string or a list of chunk id strings")
        if not query_or_ids:
            raise ValueError("query_or_ids must be a non-empty query or a list of chunk ids")
        query = None
        seeds = list(dict.fromkeys(query_or_ids))
        for s in seeds:
            if reader.chunk(s) is None:
                raise KeyError(f"unknown chunk id {s!r}")
        seed_texts = [reader.chunk(s).text for s in seeds]
    seeds = [s for s in seeds if reader.chunk(s) is not None]

    forward: dict[str, float] = {}
    reverse: dict[str, float] = {}
    for text in seed_texts:
        if direction in ("forward", "both"):
            for k, v in _energies(mem.search_causal(text, limit=limit, include_seeds=True, **scope)).items():
                if k not in forward or abs(v) > abs(forward[k]):
                    forward[k] = v
        if direction in ("reverse", "both"):
            for k, v in _energies(mem.trace_cause(text, limit=limit, include_seeds=True, **scope)).items():
                if k not in reverse or abs(v) > abs(reverse[k]):
                    reverse[k] = v

    # Breadth-first over stored edges; within a hop the strongest edges come first.
    order: list[str] = []
    seen: set[str] = set()
    truncated = False
    for s in seeds:
        if s not in seen and len(order) < limit:
            seen.add(s)
            order.append(s)
    frontier = list(order)
    for _ in range(depth):
        nxt: list[tuple[float, str]] = []
        for cid in frontier:
            for e in reader.edges(cid):
                if direction in ("forward", "both") and e.src == cid:
                    nxt.append((-float(e.confidence), e.dst))
                if direction in ("reverse", "both") and e.dst == cid:
                    nxt.append((-float(e.confidence), e.src))
        frontier = []
        for _conf, cid in sorted(nxt):
            if cid in seen or not reader.in_scope(cid):
                continue
            if len(order) >= limit:
                truncated = True
                break
            seen.add(cid)
            order.append(cid)
            frontier.append(cid)
        if not frontier:
            break
    return _build(reader, order, query=query, direction=direction, seeds=seeds, report=report,
                  mode="neighbourhood", forward=forward, reverse=reverse, truncated=truncated)


def what_if_graph(mem: Any, action: str, *, max_depth: int = 3, limit: int = 5, user_id: str | None = None,
                  agent_id: str | None = None, run_id: str | None = None) -> SubGraph:
    """The picture of ``Memory.intervention_query(action)``: the action, its predicted outcomes and
    the best chain to each, the chains behind a DANGER or WARNING label highlighted."""
    _check_memory(mem)
    if not isinstance(action, str):
        raise TypeError(f"action must be a string, got {type(action).__name__}")
    if not action.strip():
        raise ValueError("action must be a non-empty string")
    scope = _scope(user_id, agent_id, run_id)
    report = mem.intervention_query(action, max_depth=max_depth, limit=limit, **scope)
    reader = _Reader(mem, False, None, scope)
    order: list[str] = list(dict.fromkeys(report.seeds))
    chain_pairs: set[tuple[str, str]] = set()
    for o in report.outcomes:
        order.extend(c for c in o.chain if c not in order)
        if o.node_id not in order:
            order.append(o.node_id)
        chain_pairs.update(zip(o.chain, o.chain[1:]))
    energies = {o.node_id: float(o.energy) for o in report.outcomes}
    for s in report.seeds:
        energies.setdefault(s, None)  # type: ignore[arg-type]
    energies = {k: v for k, v in energies.items() if v is not None}
    # Only the edges the chains walk: the picture answers "why this label", not "what is nearby".
    return _build(reader, order, query=action, direction="forward", seeds=list(report.seeds), report=report,
                  mode="what-if", forward=energies, reverse={}, truncated=False,
                  edge_filter=lambda e: (e.src, e.dst) in chain_pairs)
