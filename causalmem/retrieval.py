"""Hybrid retrieval (SPEC §4): lexical BM25 + semantic cosine + graph spreading, fused.

``search(views, query, ...)`` is what ``Memory.search`` calls (``views.Views``: the store, the
in-memory indexes and the write protocol; never a ``Memory``). Every channel works inside the
caller's scope mask, so no channel — not even the graph — can surface another scope's chunk.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from . import _kernels, dates, entities, ingest, learning, metadata_filter, projection, sessions, speakers
from .config import Config
from .store.base import ChunkRow, StoreBackend
from .types import Chunk, Hit, to_timestamp
from .views import Views

CHANNELS = ("lexical", "semantic", "graph")
FUSIONS = ("auto", "rrf", "hybrid", "blend")
DEFAULT_FUSION = "blend"
SUPERSEDED_PENALTY = 0.5
_DAY = 86400.0


@dataclass
class RetrievalParams:
    """Knobs of the pipeline (tuned on the LoCoMo dev split only)."""

    candidates: int = 50          # per-channel depth before fusion
    graph_seeds: int = 10         # top hits of each channel that seed the spreading
    rrf_k: int = 60
    w_graph: float = 0.6
    w_vec: float = 0.3
    w_lex: float = 0.18
    w_importance: float = 0.1
    # "blend" fusion: score-level mix of max-normalised BM25 and raw cosine, plus a graph bonus.
    blend_lex: float = 1.0        # weight of BM25 / best BM25 of the query
    blend_vec: float = 1.0        # weight of the centred cosine
    raw_weight: float = 2.0       # a raw cosine weighs raw_weight x blend_vec (MiniLM's are compressed)
    # Cosines measured from the candidates' mean vector (see ``_centred_cosines``) when at least
    # ``centre_min`` candidates have a vector; else (or centre=False) raw cosines, as before centring.
    # Below ``candidates`` the pool is the whole scope and energy has no typical non-match to start from
    # (reference 0): a centred cosine is below 0 for half the pool, which would erase their order (and
    # what the superseded penalty does to it), so small scopes keep raw cosines.
    centre: bool = True
    centre_min: int = 50
    blend_seeds: int = 20         # best fused candidates that seed the spreading
    # Graph bonus per unit of seed score. A temporal hop carries decay 0.6 x (1 - teleport 0.15) x
    # coefficient 0.2 ~ 0.10 of a seed's energy (x (0.5 + 0.5 Q) = 0.75 at the default Q), so 5.0
    # gives the turn after a hit ~0.4 of the hit's score and 2.5 gives the turn before it ~0.2:
    # answers tend to follow the turn that matches the question.
    graph_forward: float = 5.0
    graph_backward: float = 2.5
    unit_degree: float = 2.0      # edges of a plain conversation turn (previous + next); see _graph_bonus
    degree_power: float = 0.5     # 0.5 = symmetric normalisation
    graph_cap: float = 1.0        # no node gains more than this x the best seed's score from the graph
    # Second pass (pseudo-relevance feedback, as RM3 does for BM25): the ``prf_terms`` words of the
    # best ``prf_docs`` fused hits that are frequent there and rare in the store, not in the query,
    # query BM25 again; its scores (/ its best) x ``prf_weight`` x the best fused score are added.
    # A multi-turn answer shares words with the turns the question found first.
    # Only when the scope has more lexical matches than the first pass took as candidates: below that
    # the feedback hits are not picked from a pool (as for ``centre_min``), the first pass has already
    # seen every match, and words drawn from whichever matches there are (a weak one's as much as the
    # exact one's; the pass is scaled to its own best) would lift a weak match above the exact text.
    prf_terms: int = 10
    prf_docs: int = 3
    prf_weight: float = 0.5
    # Entity hop (``entities.entity_hop``): memories naming an entity (a capitalised name, a number) of
    # the best ``entity_seeds`` hits gain entity_hop x the best score x (sum over the seeds reaching them of
    # seed score / best seed score) / entity_seeds; new candidates may come in. 0 = off.
    entity_hop: float = 0.0
    entity_seeds: int = 5
    entity_max_df: float = 0.02   # entity terms in more than this share of the documents are not followed
    entity_keyphrases: bool = False  # True: a seed's rare index terms (keyphrases) instead of its entity words
    entity_max_reach: bool = False   # True: a memory reached from several seeds gets the best seed's share only
    # Speaker match (``speakers.speaker_match``): when the query names some but not all of the speakers of
    # the best ``speaker_pool`` candidates, those a named speaker said are multiplied by 1 + speaker_match.
    # 0 = off (``Config.speaker_match``).
    speaker_match: float = 0.0
    speaker_pool: int = 50
    # Date match (``dates.date_match``): when the query names a date (a day, a month, a year), the candidates
    # whose event time (else creation time) falls in it, widened by ``date_slack_days`` each side, are
    # multiplied by 1 + date_match. 0 = off; ``Config.date_match``, 16 by default (the candidates of the period first).
    date_match: float = 16.0
    date_slack_days: float = 0.0
    # Session support (``sessions.session_support``): a candidate is multiplied by 1 + weight x the summed
    # scores of the best ``session_seeds`` candidates in its session (itself left out) / (session_seeds x the
    # best score); the weight is ``session_support`` when the semantic channel ran, ``session_support_lexical``
    # when it did not (lexical + graph). 0 = off. ``Config.session_support`` (None: these two).
    session_support: float = 0.0
    session_support_lexical: float = 4.0
    session_seeds: int = 5


PARAMS = RetrievalParams()


def _params_for(config: Config) -> RetrievalParams:
    """PARAMS with the retrieval knobs that live in ``Config`` (rrf_k, lexical_weight) applied."""
    rrf_k = getattr(config, "rrf_k", PARAMS.rrf_k)
    w_lex = getattr(config, "lexical_weight", PARAMS.w_lex)
    spk = getattr(config, "speaker_match", PARAMS.speaker_match)
    dm = getattr(config, "date_match", PARAMS.date_match)
    slack = getattr(config, "date_slack_days", PARAMS.date_slack_days)
    sup = getattr(config, "session_support", None)
    sup_sem, sup_lex = (PARAMS.session_support, PARAMS.session_support_lexical) if sup is None else (sup, sup)
    if (rrf_k, w_lex, spk, dm, slack, sup_sem, sup_lex) == (
            PARAMS.rrf_k, PARAMS.w_lex, PARAMS.speaker_match, PARAMS.date_match, PARAMS.date_slack_days,
            PARAMS.session_support, PARAMS.session_support_lexical):
        return PARAMS
    return replace(PARAMS, rrf_k=rrf_k, w_lex=w_lex, speaker_match=spk, date_match=dm, date_slack_days=slack,
                   session_support=sup_sem, session_support_lexical=sup_lex)


def _check_args(query: Any, top_k: Any, channels: Any, fusion: Any, max_top_k: int) -> tuple[str, ...]:
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, got {type(query).__name__}")
    ingest.check_unicode(query, "query")
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)):
        raise TypeError(f"top_k must be an integer, got {type(top_k).__name__}")
    if not 1 <= int(top_k) <= max_top_k:
        raise ValueError(f"top_k must be between 1 and {max_top_k}, got {top_k}")
    if isinstance(channels, str):
        channels = (channels,)
    chans = tuple(channels)
    bad = [c for c in chans if c not in CHANNELS]
    if bad or not chans:
        raise ValueError(f"channels must be a non-empty subset of {CHANNELS}, got {channels!r}")
    if fusion not in FUSIONS:
        raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
    return chans


def _scope(user_id, agent_id, run_id, filters: Mapping[str, Any] | None) -> dict[str, Any]:
    scope = {"user_id": user_id, "agent_id": agent_id, "run_id": run_id, "session_id": None}
    if filters:
        if not isinstance(filters, Mapping):
            raise TypeError(f"filters must be a mapping, got {type(filters).__name__}")
        bad = set(filters) - set(scope)
        if bad:
            raise ValueError(f"unknown filter keys {sorted(bad)}; allowed: {sorted(scope)}")
        for k, v in filters.items():
            if scope[k] is not None and v is not None and scope[k] != v:
                raise ValueError(f"{k} given twice with different values ({scope[k]!r} and {v!r})")
            scope[k] = scope[k] if v is None else v
    for k, v in scope.items():
        if v is not None and (not isinstance(v, str) or not v):
            raise ValueError(f"{k} must be a non-empty string or None, got {v!r}")
        if v is not None:
            ingest.check_unicode(v, k)
    return scope


def search(views: Views, query: Any, *, top_k: int = 10, user_id=None, agent_id=None, run_id=None,
           filters: Mapping[str, Any] | None = None, since=None, until=None,
           channels: Sequence[str] = CHANNELS, fusion: str = "auto", explain: bool = False,
           reinforce: bool = True, params: RetrievalParams | None = None,
           metadata: Mapping[str, Any] | None = None) -> list[Hit]:
    chans = _check_args(query, top_k, channels, fusion, views.config.max_top_k)
    scope = _scope(user_id, agent_id, run_id, filters)
    meta_filter = None if metadata is None else metadata_filter.validate(metadata)
    t_since = to_timestamp(since, name="since")
    t_until = to_timestamp(until, name="until")
    if t_since is not None and t_until is not None and t_since > t_until:
        raise ValueError(f"since ({t_since}) is after until ({t_until})")
    if not query.strip():
        return []
    p = params or _params_for(views.config)
    fusion = DEFAULT_FUSION if fusion == "auto" else fusion
    top_k = int(top_k)
    # a server backend sends its change check as the ranking starts and reads the reply after it
    # (ranked again, in step, if another host committed meanwhile); the reinforcement is queued
    # once, after the answer stands (``read_once``: the ranking itself writes nothing)
    hits, chosen, chosen_scores = views.store.read_once(lambda: _ranked(
        views, query, top_k, chans, fusion, explain, scope, meta_filter, t_since, t_until, p))
    if reinforce and hits:
        with views.lock:
            _reinforce(views, chosen, chosen_scores)
    return hits


def _ranked(views: Views, query: str, top_k: int, chans: tuple[str, ...], fusion: str, explain: bool,
            scope: dict, meta_filter: Any, t_since: float | None, t_until: float | None,
            p: RetrievalParams) -> tuple[list[Hit], list[int], dict[int, float]]:
    """The hits of ``search``, the nids it returned (best first) and their scores; reads only."""
    depth = max(p.candidates, 2 * top_k)
    qvec = None
    encoded = None
    if "semantic" in chans and views.embedder is not None:
        encoded = views.encode_query_later(query)  # on the query thread while the lexical channel runs
    with views.lock:
        table, lexical = views.tables()
        mask = table.scope_mask(**scope, since=t_since, until=t_until)
        if meta_filter is not None:
            mask = _metadata_mask(views, mask, meta_filter)
        if encoded is not None:  # the vector search too, on the query thread right after the encode
            encoded.offer(lambda qv: views.vector_search(qv, depth, mask, on_query_thread=True))
        # -- channels -------------------------------------------------------------
        lex_ids = np.empty(0, np.int64)
        lex_sc = np.empty(0, np.float32)
        if "lexical" in chans:
            lex_ids, lex_sc = lexical.search(query, top_k=depth, allowed=mask)
        lex_vectors = None
        if encoded is not None and encoded.future is not None and fusion == "blend" and p.centre and len(lex_ids):
            # the lexical candidates' vectors (the centred blend reads them) while the query thread works
            lex_vectors = (lex_ids, *views.vectors_of(lex_ids))
        vec_ids = np.empty(0, np.int64)
        vec_sc = np.empty(0, np.float32)
        if encoded is not None:
            qvec = encoded.result()
            if encoded.searched is not None:
                vec_ids, vec_sc = encoded.searched
            elif qvec is not None:
                vec_ids, vec_sc = views.vector_search(qvec[0], depth, mask)  # exact from the store while loading
        lex_max = float(lex_sc[0]) if len(lex_sc) else 1.0
        cos = dict(zip(vec_ids.tolist(), vec_sc.tolist()))
        # ranks (explain, rrf) and normalised BM25 (hybrid) as dicts only where they are read
        lex_rank = dict(zip(lex_ids.tolist(), range(len(lex_ids)))) if explain or fusion != "blend" else {}
        vec_rank = dict(zip(vec_ids.tolist(), range(len(vec_ids)))) if explain or fusion != "blend" else {}
        act: dict[int, float] = {}
        seeds: dict[int, float] = {}
        if fusion == "blend":
            nids, scores, seeds, act = _blend(views, table, mask, chans, qvec, lex_ids,
                                              lex_sc.astype(np.float64) / lex_max,
                                              cos, vec_ids, vec_sc, p, lex_vectors)
            if not len(nids):
                return [], [], {}
            if views.config.q_rank:  # before the second pass: its feedback comes from the best hits as ranked
                scores = scores * usefulness(table.q[nids], views.config.q_init)
            if p.prf_terms and "lexical" in chans:
                nids, scores = _second_pass(views, lexical, query, mask, nids, scores, lex_ids, depth, p)
            if p.entity_hop and "lexical" in chans and "graph" in chans:
                nids, scores = _entity_pass(views, lexical, query, mask, nids, scores, depth, p)
        else:
            lex_norm = {int(i): float(s) / lex_max for i, s in zip(lex_ids, lex_sc)}
            if "graph" in chans and (lex_norm or cos):
                for ids, sig in ((lex_ids[: p.graph_seeds], lex_norm), (vec_ids[: p.graph_seeds], cos)):
                    for i in ids:
                        i = int(i)
                        seeds[i] = max(seeds.get(i, 0.0), sig[i])
                act = _graph_channel(views, table, seeds, mask)
            # -- rank / score fusion ----------------------------------------------------
            cand = set(lex_norm) | set(cos) | set(act)
            if not cand:
                return [], [], {}
            nids = np.fromiter(cand, dtype=np.int64, count=len(cand))
            if fusion == "rrf":
                scores = _rrf(nids, lex_rank, vec_rank, act, p.rrf_k)
            else:
                if qvec is not None:
                    _fill_cosines(views, qvec[0], nids, cos)
                scores = _hybrid(nids, lex_norm if "lexical" in chans else None, cos if qvec is not None else None,
                                 act if "graph" in chans else None, table, views.now(), p)
            if views.config.q_rank:
                scores = scores * usefulness(table.q[nids], views.config.q_init)
        if p.speaker_match > 0:
            pool = nids[np.lexsort((nids, -scores))[: max(p.speaker_pool, top_k)]]
            scores = speakers.speaker_match(nids, scores, views.store.texts_of(pool.tolist()), query, p.speaker_match)
        if p.date_match > 0:
            et = table.event_time[nids]
            scores = dates.date_match(nids, scores, np.where(np.isnan(et), table.created_at[nids], et), query,
                                      p.date_match, p.date_slack_days)
        # Session support: measured on the blend only (rrf and hybrid keep their documented scores), and, as the
        # second pass, only when the lexical channel filled its depth: where every match in scope is a candidate
        # already, the first pass has scored them all, and lifting a turn that matched nothing (a hit's neighbour
        # over the graph) above one that did would only misrank a small store.
        if fusion == "blend" and len(lex_ids) >= depth:
            w_sup = p.session_support if qvec is not None else p.session_support_lexical
            if w_sup > 0:
                scores = sessions.session_support(nids, scores, table.session[nids], w_sup, p.session_seeds)
        order = np.lexsort((nids, -scores))
        pre = nids[order[: top_k * 3]]
        sup = views.store.superseded_chunks(pre.tolist())
        if sup:
            pos = {int(n): k for k, n in enumerate(nids)}
            for n in sup:
                scores[pos[n]] *= SUPERSEDED_PENALTY
            order = np.lexsort((nids, -scores))
        chosen = [int(n) for n in nids[order[:top_k]]]
        chosen_scores = {int(n): float(s) for n, s in zip(nids[order[:top_k]], scores[order[:top_k]])}
        rows = views.store.chunk_rows_by_nid(chosen)
        paths = _paths(views, chosen, seeds, act) if explain else {}
        coverage = None
        if explain and "semantic" in chans and views.embedder is not None:
            with_vec, in_scope = views.vector_coverage(mask)  # writes are embedded in the background
            coverage = {"with_vector": with_vec, "in_scope": in_scope,
                        "fraction": with_vec / in_scope if in_scope else 1.0}
        hits = []
        for n in chosen:
            row = rows.get(n)
            if row is None or row.valid_to is not None:
                continue
            signals = None
            if explain:
                signals = {
                    "fusion": fusion,
                    "lexical_rank": lex_rank.get(n), "lexical_score": None if n not in lex_rank else
                    float(lex_sc[lex_rank[n]]),
                    "cosine_rank": vec_rank.get(n), "cosine": cos.get(n),
                    "activation": act.get(n), "seed_energy": seeds.get(n),
                    "q_value": row.q_value, "importance": row.importance,
                    # the factor Q put on the score (Config.q_rank; 1.0 for a memory nobody rewarded)
                    "usefulness": float(usefulness(table.q[[n]], views.config.q_init)[0])
                    if views.config.q_rank else 1.0,
                    "path": paths.get(n, []),
                    "superseded_by": sup.get(n),
                    "semantic_coverage": coverage,
                }
            hits.append(Hit(id=row.id, text=row.text, score=chosen_scores[n], kind=row.kind, created_at=row.created_at,
                            event_time=row.event_time, user_id=row.user_id, agent_id=row.agent_id, run_id=row.run_id,
                            session_id=row.session_id, superseded_by=sup.get(n), signals=signals,
                            metadata=json.loads(row.metadata) if row.metadata and row.metadata != "{}" else {}))
        return hits, [n for n in chosen if n in rows], chosen_scores


def _metadata_mask(views: Views, mask: np.ndarray, spec: Mapping[str, Any]) -> np.ndarray:
    """The scope mask narrowed to chunks whose metadata matches ``spec`` (a new array: masks are cached),
    from the views' filter cache: metadata is read from the store only for chunks not known there."""
    return views.meta_cache.mask(spec, mask, views.store.chunk_metadata_json)


def _fill_cosines(views: Views, qv: np.ndarray, nids, cos: dict[int, float]) -> None:
    """Exact cosines for candidates the semantic channel did not return itself."""
    missing = [int(n) for n in nids if int(n) not in cos]
    if missing:
        cos.update(views.cosines(qv, missing))


def _centred_cosines(views: Views, qv: np.ndarray, ids: np.ndarray, mean: np.ndarray, cos: dict[int, float],
                     vectors: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Cosine of query and candidate measured from ``mean`` (the candidates' mean vector), 0 without a vector;
    ``cos`` gets the raw cosines (for ``explain``).

    Every turn of a conversation shares a large component with every other and with the query (the
    speakers' names, the register of chat, the query's broad topic), so raw MiniLM cosines are
    compressed into a narrow band and rank best what is nearly pure shared component: short
    content-free turns ("Jon: What gave you the idea?" outranked the answer to "What did Jon take a
    trip to Rome for?"). Subtracting the candidates' mean from query and candidate (a local form of
    the usual correction for anisotropic sentence embeddings) leaves what tells the candidates apart.
    """
    out = np.zeros(len(ids), np.float64)
    have, mat = vectors if vectors is not None else views.vectors_of(ids)  # (the caller's read of ``ids``)
    if not len(have):
        return out
    q = np.asarray(qv, np.float32).reshape(-1)
    q = q / max(float(np.linalg.norm(q)), 1e-12)
    raw = mat @ q
    cos.update((n, c) for n, c in zip(have.tolist(), raw.tolist()) if n not in cos)
    mu = mean.astype(np.float32)
    qc = q - mu
    qc /= max(float(np.linalg.norm(qc)), 1e-12)
    dc = mat - mu
    cc = ((dc @ qc) / np.maximum(np.linalg.norm(dc, axis=1), 1e-12)).astype(np.float64)
    if len(have) == len(ids):  # every candidate has a vector: same order
        return cc
    order = np.argsort(have)
    return _lookup(have[order], cc[order], np.asarray(ids, np.int64))


def _vectors_with(views: Views, nids: np.ndarray, known: tuple[np.ndarray, np.ndarray, np.ndarray] | None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``views.vectors_of(nids)`` (ascending ``nids``) reading only those not in ``known`` = (ids asked
    before, those of them with a vector, their vectors): the same ids and rows in the same order."""
    if known is None:
        return views.vectors_of(nids)
    asked, have, mat = known
    r_have, r_mat = views.vectors_of(np.setdiff1d(nids, asked))
    parts = [(i, m) for i, m in ((have, mat), (r_have, r_mat)) if len(i)]
    if not parts:
        return have, mat
    ids = np.concatenate([i for i, _ in parts])
    rows = np.concatenate([m for _, m in parts])
    order = np.argsort(ids, kind="stable")
    return ids[order], rows[order]


def _lookup(keys: np.ndarray, vals: np.ndarray, ids: np.ndarray, default: float = 0.0) -> np.ndarray:
    """vals[keys == id] for each id (keys sorted ascending), ``default`` where absent."""
    out = np.full(len(ids), default, dtype=np.float64)
    if len(keys) and len(ids):
        pos = np.minimum(np.searchsorted(keys, ids), len(keys) - 1)
        hit = keys[pos] == ids
        out[hit] = vals[pos[hit]]
    return out


def usefulness(q: np.ndarray, q_init: float) -> np.ndarray:
    """The factor a memory's Q-value puts on its fused score (``Config.q_rank``): SPEC §4's seed
    factor 0.5 + 0.5·Q, relative to a memory never rewarded (Q = ``q_init``: factor 1, scores as
    without it). Q is clamped to [0, 1], so the factor stays within [1, 2] / (1 + q_init). The chunk
    table holds Q as float32: the reference is ``q_init`` as float32 too, so an unrewarded memory's
    factor is exactly 1 for every ``q_init`` (0.3 is not a float32)."""
    ref = float(np.float32(q_init))
    return (0.5 + 0.5 * np.asarray(q, dtype=np.float64)) / (0.5 + 0.5 * ref)


def _blend(views: Views, table, mask: np.ndarray, chans: tuple[str, ...], qvec, lex_ids: np.ndarray,
           lex_norm: np.ndarray, cos: dict[int, float], vec_ids: np.ndarray, vec_sc: np.ndarray,
           p: RetrievalParams, lex_vectors: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None):
    """Score-level fusion ("blend", the default).

    base = (a*BM25/best BM25 + b*cosine) / (a + b) over the union of the channels' candidates,
    minus the score of a typical non-match (the ``candidates``-th best candidate) = ``energy``.
    The best ``blend_seeds`` candidates seed PEDSA spreading with their energy; what arrives at
    a node over the graph is added to it as a bonus (forward and backward weighed apart), so a
    neighbour of a strong hit (the next turn of the conversation, the outcome of a decision)
    climbs, and a hit whose neighbours also match climbs too.
    """
    use_lex = "lexical" in chans
    use_vec = qvec is not None
    nids = np.union1d(lex_ids, vec_ids).astype(np.int64) if use_vec else np.unique(lex_ids).astype(np.int64)
    if not len(nids):
        return nids, np.empty(0), {}, {}
    mean = None
    pool: tuple[np.ndarray, np.ndarray] | None = None
    if use_vec and p.centre:
        pool = _vectors_with(views, nids, lex_vectors)
        if len(pool[0]) >= p.centre_min:
            mean = pool[1].mean(axis=0, dtype=np.float64)
    a = p.blend_lex if use_lex else 0.0
    b = (p.blend_vec if mean is not None else p.raw_weight * p.blend_vec) if use_vec else 0.0
    den = (a + b) or 1.0
    lo = np.argsort(lex_ids, kind="stable")
    lex_keys, lex_vals = lex_ids[lo].astype(np.int64), lex_norm[lo]

    def base_of(ids: np.ndarray) -> np.ndarray:
        out = a * _lookup(lex_keys, lex_vals, ids) if use_lex else np.zeros(len(ids))
        if use_vec and mean is not None:
            out += b * _centred_cosines(views, qvec[0], ids, mean, cos, pool if ids is nids else None)
        elif use_vec:
            _fill_cosines(views, qvec[0], ids, cos)
            out += b * np.fromiter((cos.get(i, 0.0) for i in ids.tolist()), np.float64, len(ids))
        return out / den

    base = base_of(nids)
    # With fewer candidates than that, everything else in scope matched nothing: reference 0.
    ref = np.partition(base, len(base) - p.candidates)[len(base) - p.candidates] if len(base) >= p.candidates \
        else 0.0
    energy = np.maximum(base - ref, 0.0)
    seeds: dict[int, float] = {}
    act: dict[int, float] = {}
    if "graph" in chans:
        top = np.lexsort((nids, -energy))[: p.blend_seeds]
        top = top[energy[top] > 0]
        if len(top):
            seeds = dict(zip(nids[top].tolist(), energy[top].tolist()))
            g_ids, g_val = _graph_bonus(views, table, nids[top], energy[top], mask, p)
            if len(g_ids):
                act = dict(zip(g_ids.tolist(), g_val.tolist()))
                new = np.setdiff1d(g_ids, nids, assume_unique=True)
                if len(new):
                    nids = np.concatenate([nids, new])
                    energy = np.concatenate([energy, np.maximum(base_of(new) - ref, 0.0)])
                order = np.argsort(g_ids)
                # A node reached over a ``prevented`` edge arrives with negative energy: a warning
                # ("this stopped that") is relevant knowledge, so it counts by magnitude; the
                # sign stays visible in ``explain`` (activation < 0).
                energy = energy + np.abs(_lookup(g_ids[order], g_val[order], nids))
            if views.config.hebbian_rerank:
                energy = _learned_rerank(views, table, nids, energy, seeds, act, p)
    return nids, energy, seeds, act


def _learned_rerank(views: Views, table, nids: np.ndarray, energy: np.ndarray, seeds: dict[int, float],
                    act: dict[int, float], p: RetrievalParams) -> np.ndarray:
    """``Config.hebbian_rerank``: learned links between the seeds and the candidates found already
    add one hop of energy (forward + backward weight x decay x (1 - teleport), as a structural hop
    would carry), degree-normalised and capped as the graph bonus is; ``act`` gets it for explain."""
    pairs = views.learned_weights(nids.tolist())
    if not pairs:
        return energy
    kw = views.config.pedsa
    nodes = np.fromiter({n for pr in pairs for n in pr}, dtype=np.int64)
    factor = np.maximum(1.0, views.projection.degrees(nodes) / p.unit_degree) ** (2 * p.degree_power)
    q = {int(s): 0.5 + 0.5 * float(table.q[s]) for s in seeds}
    top = views.config.hebbian_rerank_seeds
    sources = sorted(seeds, key=lambda s: (-seeds[s], s))[:top] if top else list(seeds)
    bonus = learning.learned_bonus(pairs, {s: seeds[s] * q[s] for s in sources}, nids,
                                   scale=(p.graph_forward + p.graph_backward) * kw.decay * (1.0 - kw.teleport),
                                   coefficient=projection.CO_OCCURRENCE_COEFFICIENT,
                                   degree_of=dict(zip(nodes.tolist(), factor.tolist())))
    e_max = max(seeds.values()) if seeds else 0.0
    bonus = np.minimum(bonus, p.graph_cap * e_max)
    for k in np.flatnonzero(bonus).tolist():
        n = int(nids[k])
        act[n] = act.get(n, 0.0) + float(bonus[k])
    return energy + bonus


def _graph_bonus(views: Views, table, seed_ids: np.ndarray, seed_energy: np.ndarray, mask: np.ndarray,
                 p: RetrievalParams) -> tuple[np.ndarray, np.ndarray]:
    """What the seeds send each node over the graph (PEDSA with teleport), in seed-score units.

    A seed's own energy would mask what its neighbours send it (activation keeps the larger of
    the two), so seeds spread in groups in which no two seeds are joined by an edge (a greedy
    colouring of the seeds' adjacency, best seed first): every seed receives what each seed next
    to it sends, whatever their ids (consecutive turns, a cause and its outcome, a learned pair).

    Degree normalisation (symmetric, as in GCN / personalised PageRank): energy leaving a seed
    and energy arriving at a node are divided by sqrt(degree / 2), a turn with its two temporal
    neighbours being the unit. Without it a node that many others link to (a hub of Hebbian
    co-retrieval pairs) collects energy from every query and crowds out the real answers
    (LoCoMo-dev with reinforcement on: recall@10 0.26 without, 0.72 with).
    """
    e_max = float(seed_energy.max())
    kw = views.config.pedsa.as_kwargs()
    hi = float(kw.get("hi", 1.0))
    # Energies scaled so the best seed starts at the clamp ceiling: weak seeds stay above the
    # kernel's activation threshold after a temporal hop.
    energy = hi * seed_energy / e_max * (0.5 + 0.5 * table.q[seed_ids])
    seed_deg = views.projection.degrees(seed_ids)
    energy = (energy / np.maximum(1.0, seed_deg / p.unit_degree) ** p.degree_power).astype(np.float32)
    got_nodes, got_en, got_seeds, got_scale = [], [], [], []
    colour = _seed_colours(views, seed_ids)
    n_colours = int(colour.max()) + 1
    # int32 seeds take the kernel wrapper's O(len(seeds)) compiled check; sorted copies for the
    # "not a seed of this group" test, made once for both directions
    seeds32 = seed_ids.astype(np.int32)
    groups = [(seeds32, energy)] if n_colours == 1 else \
        [(seeds32[colour == c], energy[colour == c]) for c in range(n_colours)]
    group_sorted = [np.sort(idx).astype(np.int64) for idx, _ in groups]
    for weight, reverse in ((p.graph_forward, False), (p.graph_backward, True)):
        if weight == 0:
            continue
        for (idx, en_idx), idx_sorted in zip(groups, group_sorted):
            nodes, en = views.projection.spread(idx, en_idx, reverse=reverse, params=kw)
            got_nodes.append(nodes)
            got_en.append(en)
            got_seeds.append(idx_sorted)
            got_scale.append(weight * e_max / hi)
    if not got_nodes:
        return np.empty(0, np.int64), np.empty(0)
    # compiled: each spread's nodes inside the scope and not among its own seeds, energy x scale
    # in float64, summed per node in spread order (= np.unique + np.bincount over them)
    keys, val = _kernels.bonus_sum(got_nodes, got_en, got_seeds, np.array(got_scale, dtype=np.float64),
                                   np.ascontiguousarray(mask).view(np.uint8))
    if not len(keys):
        return keys, np.empty(0)
    val = val * np.maximum(1.0, views.projection.degrees(keys) / p.unit_degree) ** -p.degree_power
    return keys, soft_cap(val, p.graph_cap * e_max)


#: share of the graph cap below which a bonus is taken as is (see ``soft_cap``)
SOFT_CAP_KNEE = 0.5


def soft_cap(val: np.ndarray, cap: float) -> np.ndarray:
    """The graph bonus bounded by ``cap`` in magnitude without a tie at the bound: as is up to
    ``SOFT_CAP_KNEE`` x cap, above it tanh-saturating towards cap (continuous, slope 1 at the knee,
    strictly increasing), so two neighbours that both receive more than the cap keep their order
    (a hard clip tied a decision's caused and prevented outcomes with the decision itself). Signs
    are kept: a node reached over a ``prevented`` edge stays negative."""
    val = np.asarray(val, dtype=np.float64)
    if cap <= 0:
        return np.zeros_like(val)
    knee = SOFT_CAP_KNEE * cap
    mag = np.abs(val)
    over = mag > knee
    if over.any():
        mag = mag.copy()
        mag[over] = knee + (cap - knee) * np.tanh((mag[over] - knee) / (cap - knee))
    return np.copysign(mag, val)


def unit_scores(scores: Sequence[float]) -> list[float]:
    """The scores of one search on [0, 1], for frameworks that promise that range (mem0, CrewAI): as
    they are when the best is <= 1, else divided by the best (order and distinct values kept; a clip
    to 1 tied every hit above it). Negative scores (none from the default fusion) become 0."""
    vals = [max(0.0, float(s)) for s in scores]
    scale = max([1.0, *vals])
    return [v / scale for v in vals]


def is_prevented(hit: Hit) -> bool:
    """Whether a hit of ``search(explain=True)`` came in as an outcome that what matched prevented
    (its graph activation is negative): a warning, to be shown as one."""
    act = (hit.signals or {}).get("activation")
    return act is not None and act < 0


def _member(sorted_keys: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``np.isin(ids, sorted_keys)`` for ascending ``sorted_keys`` (a binary search: the
    per-query arrays are small, where ``np.isin``'s set-up costs more than the search)."""
    if not len(sorted_keys) or not len(ids):
        return np.zeros(len(ids), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_keys, ids), len(sorted_keys) - 1)
    return sorted_keys[pos] == ids


def _second_pass(views: Views, lexical, query: str, mask: np.ndarray, nids: np.ndarray, scores: np.ndarray,
                 lex_ids: np.ndarray, depth: int, p: RetrievalParams) -> tuple[np.ndarray, np.ndarray]:
    """Pseudo-relevance feedback (see ``RetrievalParams.prf_terms``): the fused scores of the
    candidates with the second BM25 pass added. The feedback comes from the best hits that share a word with
    the query (a neighbour the graph brought in is no evidence of what the query means), and only when the
    lexical channel filled its ``depth`` (the scope has more matches than the candidates)."""
    if len(lex_ids) < depth:  # every lexical match in scope is a candidate already: no pool to learn from
        return nids, scores
    order = np.lexsort((nids, -scores))
    matched = _member(np.sort(lex_ids), nids[order])
    top = order[matched][: p.prf_docs]
    if not len(top):
        return nids, scores
    tok = lexical.tokenizer
    # the best hits' distinct words from the lexical index's forward lists (they are lexical hits,
    # so indexed); the store's text, tokenized, only for one the index does not have
    words = lexical.doc_terms(nids[top].tolist())
    missing = [int(n) for n, w in zip(nids[top].tolist(), words) if w is None]
    if missing:
        words = [w for w in words if w is not None]
        words += [list(set(tok.tokenize(t))) for _, t in views.store.texts_of(missing)]
    q = set(tok.tokenize(query))
    tf: dict[str, int] = {}
    for ws in words:
        for w in ws:
            if w not in q:
                tf[w] = tf.get(w, 0) + 1
    n = max(lexical.n_docs, 1)
    cand = list(tf)
    weight = {w: tf[w] * math.log(1 + (n - df + 0.5) / (df + 0.5))
              for w, df in zip(cand, lexical.document_frequencies(cand).tolist())}
    terms = sorted(tf, key=lambda w: (-weight[w], w))[: p.prf_terms]
    if not terms:
        return nids, scores
    e_ids, e_sc = lexical.search(terms, top_k=depth, allowed=mask)
    if not len(e_ids):
        return nids, scores
    add = p.prf_weight * float(scores.max()) * e_sc.astype(np.float64) / float(e_sc[0])
    # re-scores the first pass's candidates only: bringing in new ones measured the same on LoCoMo-dev
    order = np.argsort(nids)
    sorted_nids = nids[order]
    keep = _member(sorted_nids, e_ids)
    e_ids, add = e_ids[keep], add[keep]
    pos = order[np.searchsorted(sorted_nids, e_ids)]
    scores = scores.copy()
    scores[pos] += add
    return nids, scores


def _entity_pass(views: Views, lexical, query: str, mask: np.ndarray, nids: np.ndarray, scores: np.ndarray,
                 depth: int, p: RetrievalParams) -> tuple[np.ndarray, np.ndarray]:
    """The entity hop (``RetrievalParams.entity_hop``, ``entities.entity_hop``): the fused scores with
    what the best ``entity_seeds`` hits send through the entities they name; new candidates come in."""
    order = np.lexsort((nids, -scores))[: p.entity_seeds]
    seed_ids = nids[order]
    seed_sc = scores[order]
    if not len(seed_ids) or float(seed_sc[0]) <= 0:
        return nids, scores
    if p.entity_keyphrases:  # every rare index term of the seed, from the lexical index's forward lists
        terms = {int(n): t for n, t in zip(seed_ids.tolist(), lexical.doc_terms(seed_ids.tolist())) if t is not None}
    else:
        terms = {n: entities.entity_terms(t, lexical.tokenizer) for n, t in views.store.texts_of(seed_ids.tolist())}
    keep = [k for k, n in enumerate(seed_ids.tolist()) if n in terms]
    r_ids, reach = entities.entity_hop([int(seed_ids[k]) for k in keep], [terms[int(seed_ids[k])] for k in keep],
                                       [float(seed_sc[k]) for k in keep], lexical.tokenizer.tokenize(query),
                                       lexical, mask, depth, p.entity_max_df,
                                       "max" if p.entity_max_reach else "sum")
    if not len(r_ids):
        return nids, scores
    add = p.entity_hop * float(seed_sc[0]) * reach / p.entity_seeds
    new = np.setdiff1d(r_ids, nids)
    if len(new):
        nids = np.concatenate([nids, new])
        scores = np.concatenate([scores, np.zeros(len(new))])
    else:
        scores = scores.copy()
    o = np.argsort(nids)
    pos = o[np.searchsorted(nids[o], r_ids)]
    scores[pos] += add
    return nids, scores


def _seed_colours(views: Views, seed_ids: np.ndarray) -> np.ndarray:
    """Greedy colouring of the seeds (in the given order) so that no edge joins two seeds of one colour."""
    pairs = views.projection.links_among(seed_ids)  # compiled: one pass over the seeds' rows
    colour = np.zeros(len(seed_ids), dtype=np.int64)
    if not len(pairs):
        return colour
    adj: list[set[int]] = [set() for _ in range(len(seed_ids))]
    for k, j in pairs.tolist():
        adj[k].add(j)
        adj[j].add(k)
    colour[:] = -1
    for k in range(len(seed_ids)):
        used = {int(colour[j]) for j in adj[k]}
        c = 0
        while c in used:
            c += 1
        colour[k] = c
    return colour


def _graph_channel(views: Views, table, seeds: dict[int, float], mask: np.ndarray) -> dict[int, float]:
    """PEDSA spreading (with teleport) both ways from the seeds; activation by absolute max."""
    idx = np.fromiter(seeds, dtype=np.int64, count=len(seeds))
    energy = np.fromiter(seeds.values(), dtype=np.float32, count=len(seeds))
    energy = energy * (0.5 + 0.5 * table.q[idx])
    params = views.config.pedsa.as_kwargs()
    out: dict[int, float] = {}
    for reverse in (False, True):
        nodes, en = views.projection.spread(idx, energy.astype(np.float32), reverse=reverse, params=params)
        for n, e in zip(nodes.tolist(), en.tolist()):
            if n < len(mask) and mask[n] and abs(e) > abs(out.get(n, 0.0)):
                out[n] = e
    return out


def _rrf(nids: np.ndarray, lex_rank: dict, vec_rank: dict, act: dict, k: int) -> np.ndarray:
    graph_rank = {n: r for r, n in enumerate(sorted((n for n in act if act[n] > 0), key=lambda n: (-act[n], n)))}
    scores = np.zeros(len(nids), dtype=np.float64)
    for j, n in enumerate(nids.tolist()):
        s = 0.0
        for ranks in (lex_rank, vec_rank, graph_rank):
            r = ranks.get(n)
            if r is not None:
                s += 1.0 / (k + r + 1)
        scores[j] = s
    return scores


def time_decay(days: float) -> float:
    """ST-BME recency factor: 1 for new memories, approaching 0.8 for old ones (30 d → 0.8451)."""
    d = max(0.0, float(days))
    return 0.8 + 0.2 / (1.0 + math.log1p(d))


def hybrid_score(graph: float, vec: float, lex: float | None, importance: float, days: float,
                 p: RetrievalParams = PARAMS) -> float:
    """The ST-BME hybrid score of SPEC §4 for one candidate (lex None = lexical channel off)."""
    clamp = lambda x: min(1.0, max(0.0, x))  # noqa: E731
    num = p.w_graph * clamp(graph / 2.0) + p.w_vec * clamp(vec) + p.w_importance * clamp(importance / 10.0)
    den = p.w_graph + p.w_vec + p.w_importance
    if lex is not None:
        num += p.w_lex * clamp(lex)
        den += p.w_lex
    return num / den * time_decay(days)


def _hybrid(nids: np.ndarray, lex: dict | None, cos: dict | None, act: dict | None, table, now: float,
            p: RetrievalParams) -> np.ndarray:
    n = len(nids)
    g = np.array([act.get(i, 0.0) for i in nids.tolist()], dtype=np.float64) if act is not None else np.zeros(n)
    v = np.array([cos.get(i, 0.0) for i in nids.tolist()], dtype=np.float64) if cos is not None else np.zeros(n)
    imp = table.importance[nids].astype(np.float64)
    days = np.maximum(0.0, (now - table.created_at[nids]) / _DAY)
    num = p.w_graph * np.clip(g / 2.0, 0, 1) + p.w_vec * np.clip(v, 0, 1) + p.w_importance * np.clip(imp / 10, 0, 1)
    den = p.w_graph + p.w_vec + p.w_importance
    if lex is not None:
        lx = np.array([lex.get(i, 0.0) for i in nids.tolist()], dtype=np.float64)
        num += p.w_lex * np.clip(lx, 0, 1)
        den += p.w_lex
    decay = 0.8 + 0.2 / (1.0 + np.log1p(days))
    return num / den * decay


def _paths(views: Views, chosen: list[int], seeds: dict[int, float], act: dict[int, float]) -> dict[int, list]:
    """For hits the graph brought in: the edge from a seed (or a one-hop chain) that reached them."""
    out: dict[int, list] = {}
    if not seeds:
        return out
    targets = [n for n in chosen if n in act and n not in seeds]
    if not targets:
        return out
    for e in views.store.edges_between(list(seeds), targets):
        target = e.dst if e.dst in targets and e.src in seeds else e.src
        out.setdefault(target, []).append(
            {"edge": e.id, "from": e.src_id, "to": e.dst_id, "relation": e.relation, "confidence": e.confidence})
    for a, b, w in views.store.cooccurrence_between(list(seeds), targets):
        target = b if b in targets and a in seeds else a
        other = a if target == b else b
        out.setdefault(target, []).append({"edge": None, "from_nid": other, "relation": "co_occurrence",
                                           "weight": w})
    return out


def _reinforce(views: Views, nids: list[int], scores: Mapping[int, float] | None = None) -> None:
    """Access reinforcement + Hebbian credit for what one search returned: queued, written in
    batches by the next write (a search never waits on the write lock); pairs only within a scope."""
    views.queue_reinforcement(nids, scores)


LIST_FILTERS = ("user_id", "agent_id", "run_id", "session_id", "kind")
#: the largest ``get_all`` limit (SQLite's LIMIT is a signed 64-bit integer; this means "all")
MAX_LIST = 2 ** 62


def list_chunks(store: StoreBackend, filters: Mapping[str, Any], metadata: Mapping[str, Any] | None,
                limit: Any, views: Views) -> list[Chunk]:
    """Live chunks whose columns equal ``filters`` (keys ``LIST_FILTERS``) and whose metadata matches the
    ``metadata`` filter (``None``: any), oldest first, at most ``limit``; the metadata filter is answered
    from the filter cache of ``views`` (those of ``store``), as a search's is."""
    bad = set(filters) - set(LIST_FILTERS)
    if bad:
        raise ValueError(f"unknown filter keys {sorted(bad)}; allowed: {sorted(LIST_FILTERS)}")
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an integer, got {type(limit).__name__}")
    if not 1 <= limit <= MAX_LIST:
        raise ValueError(f"limit must be between 1 and {MAX_LIST}, got {limit!r}")
    for k, v in filters.items():
        if k in ("user_id", "agent_id", "run_id"):
            ingest.check_scope_value(v, k)
        elif v is not None:
            if not isinstance(v, str):
                raise TypeError(f"{k} must be a string or None, got {type(v).__name__}")
            ingest.check_unicode(v, k)
    if metadata is None:
        nids = store.chunk_nids(filters=filters, limit=limit)
    else:
        spec = metadata_filter.validate(metadata)
        with views.lock:
            views.sync_external()  # another connection's commit first (the cache forgets what it changed)
            nids = store.chunk_nids(filters=filters)
            scope = np.zeros(max(nids, default=-1) + 1, dtype=bool)
            scope[nids] = True
            keep = views.meta_cache.mask(spec, scope, store.chunk_metadata_json)
        nids = [n for n in nids if keep[n]][:limit]
    rows = store.chunk_rows_by_nid(nids)
    return [rows[n].to_chunk() for n in nids if n in rows]


def chunk_history(store: StoreBackend, row: ChunkRow) -> list[dict[str, Any]]:
    """Events of a chunk: create, update (old → new text), delete; oldest first."""
    events = [{"event": h.event, "old_text": h.old_text, "new_text": h.new_text, "at": h.at}
              for h in store.history(row.nid)]
    first_text = next((e["old_text"] for e in events if e["event"] == "update"), row.text)
    return [{"event": "create", "old_text": None, "new_text": first_text, "at": row.created_at}] + events


def stats(views: Views, filters: Mapping[str, str]) -> dict[str, Any]:
    """``Memory.stats``: the store's counts (of one scope if ``filters``), file, schema, rebuilds, embedder."""
    with views.lock:
        c: dict[str, Any] = dict(views.store.scoped_counts(filters) if filters else views.store.counts())
        c["path"] = views.store.path
        c["schema_version"] = views.store.user_version()
        c["graph_rebuilds"] = views.projection.rebuilds
        c["embedder"] = views.embedder_name
        # searches whose access counts were dropped because the writer stayed busy (queue full)
        c["reinforce_dropped"] = views.reinforce_dropped
        # writes of queued reinforcement the store refused for now (the queue kept for the next write)
        c["reinforce_deferred"] = views.reinforcement.deferred
        return c
