"""Session support: a candidate whose session also holds other strong hits gains (``RetrievalParams.session_support``).

Evidence for a question spread over several turns tends to sit in one session of the conversation (the
session where the topic was discussed): a turn that matches the question weakly but shares its session
with the best hits is likelier to be part of the answer than an equally weak match elsewhere. The
mechanism reads no model and no list: a candidate's score is multiplied by
``1 + weight x (sum of the scores of the best ``seeds`` candidates in its session, itself left out) /
(seeds x best score)``. Candidates without a session (code 0) are left as they are, and nothing changes
when the best hit itself was said in no session (a decision or a fact answers the query: there is no session to
complete). Only reorders the candidates; none enters."""
from __future__ import annotations

import numpy as np


def session_support(nids: np.ndarray, scores: np.ndarray, sessions: np.ndarray, weight: float,
                    seeds: int) -> np.ndarray:
    """``scores`` of candidates ``nids`` (session codes ``sessions``, 0 = none) with the support of their
    session's best hits applied (a new array; the input unchanged when nothing applies)."""
    if weight <= 0 or seeds < 1 or len(nids) < 2:
        return scores
    sc = np.asarray(scores, dtype=np.float64)
    top = np.lexsort((nids, -sc))[:seeds]
    best = float(sc[top[0]])
    if best <= 0 or sessions[top[0]] == 0:  # the best hit was said in no session: nothing to complete
        return scores
    top = top[(sessions[top] != 0) & (sc[top] > 0)]
    if not len(top):
        return scores
    support = np.zeros(len(sc))
    for k in top.tolist():  # at most ``seeds`` hits: each adds its score to every candidate of its session
        support[sessions == sessions[k]] += sc[k]
    support[top] -= sc[top]  # a hit's own score is not support for itself
    support = np.maximum(support, 0.0)
    if not support.any():
        return scores
    return sc * (1.0 + weight * support / (seeds * best))
