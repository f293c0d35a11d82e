"""The calls that ``benchmarks/mem0_record.py`` makes on real mem0 and ``tests/test_mem0_side_by_side.py``
makes on causalmem's mem0 adapter: one scenario, so both sides run the same calls in the same order.

Plain Python (no mem0, no causalmem import): the record script runs it in mem0's own venv, the test beside
causalmem. ``run(m, logger)`` returns what a user sees, by section: which memories come back (by text, in
order), item keys, errors (type and message), history events and the warnings logged on ``logger``.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

# the facts and queries; the record keeps them under "inputs"
FOOD_FACTS = ["I love eating sushi and ramen", "I'm allergic to peanuts", "My favourite dessert is chocolate cake",
              "I work as a software engineer in Berlin", "I play tennis every Sunday"]
RELEVANT_QUERY = "food"
UNRELATED_QUERY = "quantum chromodynamics lattice"
IDENTITY_METADATA = {"user_id": "sam", "agent_id": "a1", "run_id": "r1", "actor_id": "x", "category": "travel"}
INPUTS = {"food_facts": FOOD_FACTS, "relevant_query": RELEVANT_QUERY, "unrelated_query": UNRELATED_QUERY,
          "identity_metadata": IDENTITY_METADATA}


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _error(call: Callable[[], Any]) -> dict[str, Any]:
    try:
        out = call()
    except Exception as e:  # noqa: BLE001 - the record is of what a user sees, whatever it is
        return {"raised": type(e).__name__, "is_value_error": isinstance(e, ValueError), "message": str(e)}
    return {"raised": None, "returned": out}


def _texts(res: dict[str, Any]) -> list[str]:
    return [r["memory"] for r in res["results"]]


def run(m: Any, logger: str) -> dict[str, Any]:
    """The scenario on ``m`` (a mem0-style ``Memory``), with the warnings of ``logger`` captured."""
    warnings = _Warnings()
    logging.getLogger(logger).addHandler(warnings)
    try:
        return _scenario(m, warnings)
    finally:
        logging.getLogger(logger).removeHandler(warnings)


def _scenario(m: Any, warnings: _Warnings) -> dict[str, Any]:
    rec: dict[str, Any] = {}
    # 1. default threshold on a relevant and an unrelated query
    for fact in FOOD_FACTS:
        m.add(fact, user_id="alex", infer=False)
    scope = {"user_id": "alex"}
    rel = m.search(RELEVANT_QUERY, filters=scope)
    rec["threshold"] = {
        "relevant_default": _texts(rel),
        "relevant_default_scores": [r["score"] for r in rel["results"]],
        "relevant_threshold_0": _texts(m.search(RELEVANT_QUERY, filters=scope, threshold=0.0)),
        "unrelated_default": _texts(m.search(UNRELATED_QUERY, filters=scope)),
        "unrelated_threshold_0_count": len(m.search(UNRELATED_QUERY, filters=scope, threshold=0.0)["results"]),
        "search_item_keys": sorted(rel["results"][0]) if rel["results"] else [],
    }

    # 2. ids inside add(metadata=...)
    warnings.messages.clear()
    added = m.add("prefers window seats", user_id="traveller", metadata=dict(IDENTITY_METADATA), infer=False)
    add_warnings = list(warnings.messages)
    mid = added["results"][0]["id"]
    got = m.get(mid)
    hit = m.search("window seats", filters={"user_id": "traveller"})["results"]
    warnings.messages.clear()
    m.update(mid, metadata={"user_id": "sam", "seat": "aisle"})
    update_warnings = list(warnings.messages)
    after = m.get(mid)
    rec["ids_in_metadata"] = {
        "add_result_keys": sorted(added["results"][0]),
        "add_result_event": added["results"][0]["event"],
        "warnings_on_add": add_warnings,
        "get_metadata": got["metadata"],
        "get_scope": {k: got.get(k) for k in ("user_id", "agent_id", "run_id", "actor_id")},
        "search_hit_metadata": hit[0]["metadata"] if hit else None,
        "get_all_owner": _texts(m.get_all(filters={"user_id": "traveller"})),
        "get_all_user_sam": _texts(m.get_all(filters={"user_id": "sam"})),
        "get_all_agent_a1": _texts(m.get_all(filters={"agent_id": "a1"})),
        "get_all_run_r1": _texts(m.get_all(filters={"run_id": "r1"})),
        "warnings_on_update": update_warnings,
        "metadata_after_update": after["metadata"],
        "user_id_after_update": after.get("user_id"),
    }

    # 3. calls without any id
    rec["no_id"] = {
        "add": _error(lambda: m.add("a fact of nobody's", infer=False)),
        "search": _error(lambda: m.search("secret")),
        "search_metadata_filter_only": _error(lambda: m.search("secret", filters={"category": "x"})),
        "get_all": _error(lambda: m.get_all()),
        "get_all_metadata_filter_only": _error(lambda: m.get_all(filters={"category": "x"})),
        # mem0 2.x takes the ids only inside filters= for search / get_all
        "search_top_level_user_id": _error(lambda: _texts(m.search("sushi", user_id="alex"))),
        "get_all_top_level_user_id": _error(lambda: len(m.get_all(user_id="alex")["results"])),
    }

    # 4. a metadata-only update and the history
    mid = m.add("prefers dark mode", user_id="u", metadata={"category": "ui"}, infer=False)["results"][0]["id"]
    before = m.get(mid)
    returned = m.update(mid, metadata={"category": "preferences"})
    hist = m.history(mid)
    after = m.get(mid)
    rec["metadata_only_update"] = {
        "returned": returned,
        "history_events": [h["event"] for h in hist],
        "history_old_new": [[h["old_memory"], h["new_memory"]] for h in hist],
        "history_entry_keys": sorted(hist[-1]) if hist else [],
        "history_is_deleted": [h["is_deleted"] for h in hist],
        "memory_after": after["memory"],
        "metadata_after": after["metadata"],
        "updated_at_before_is_none": before["updated_at"] is None,
        "updated_at_after_is_none": after["updated_at"] is None,
        "updated_at_after_ge_created_at": (after["updated_at"] or "") >= (after["created_at"] or ""),
        "update_without_text_or_metadata": _error(lambda: m.update(mid)),
    }

    # 5. get keys
    mid = m.add("the staging database runs postgres 16", user_id="db", infer=False)["results"][0]["id"]
    got = m.get(mid)
    rec["get"] = {
        "keys": sorted(got),
        "score": got["score"],
        "metadata": got["metadata"],
        "role": got.get("role"),
        "get_all_item_keys": sorted(m.get_all(filters={"user_id": "db"})["results"][0]),
        "unknown_id": _error(lambda: m.get("00000000-0000-0000-0000-000000000000")),
    }

    # 6. top_k=0 (and its neighbours)
    plain = _texts(m.search("postgres", filters={"user_id": "db"}))
    rec["top_k"] = {
        "search_top_k_0": m.search("postgres", filters={"user_id": "db"}, top_k=0),
        "get_all_top_k_0": m.get_all(filters={"user_id": "db"}, top_k=0),
        "search_top_k_negative": _error(lambda: m.search("postgres", filters={"user_id": "db"}, top_k=-1)),
        "search_plain": plain,
        "search_rerank_without_reranker": _texts(m.search("postgres", filters={"user_id": "db"}, rerank=True)),
    }

    # the default number of results (search and get_all): 25 memories in one scope
    for i in range(25):
        m.add(f"note number {i} about the weekly report", user_id="many", infer=False)
    rec["defaults"] = {
        "get_all_count_of_25": len(m.get_all(filters={"user_id": "many"})["results"]),
        "search_count_of_25": len(m.search("weekly report", filters={"user_id": "many"})["results"]),
    }
    return rec
