"""The vector index files catch up along the change journal (review R4).

A process that opens a store whose vector index files were stamped at an earlier ``change_seq``
(another process wrote since: a CLI ``record``, a writer that embedded its own chunks) must not
fall back to reading every stored vector (above 30,000 vectors its first search would run without
the semantic channel while that read goes on): the journal names every chunk inserted, updated,
retexted or given a vector since the stamp, and just those are re-read from the store.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from causalmem import Config, Memory
from causalmem import sidecar
from causalmem import vector_files
from causalmem.vector_index import sidecar_dir

ROOT = Path(__file__).resolve().parents[1]
TESTS = str(Path(__file__).resolve().parent)


class ClusterEmbedder:
    """Deterministic 48-d vectors with structure: a text's vector is one of 300 cluster centres (chosen
    by its first word after ``topic``) plus a per-text offset, so near neighbours are real and an
    approximate index can be compared with exact search (any process gets the same vectors)."""

    model_name = "cluster-48"
    dim = 48

    def __init__(self) -> None:
        self.centres = np.random.default_rng(7).standard_normal((300, self.dim)).astype(np.float32)

    def encode(self, texts):
        out = np.zeros((len(list(texts)), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            words = t.split()
            topic = int(words[words.index("topic") + 1]) % 300 if "topic" in words else 0
            seed = int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
            out[i] = self.centres[topic] + 0.6 * np.random.default_rng(seed).standard_normal(self.dim)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def _pair(i: int) -> tuple[str, str]:
    return f"decision {i} on topic {i % 300} part {i % 7}", f"outcome {i} of topic {(i * 13) % 300} kind {i % 5}"


def _child(code: str) -> dict:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


_WRITER = """
import json, sys
sys.path.insert(0, {tests!r})
from test_vector_index_catchup import ClusterEmbedder
from causalmem import Config, Memory
mem = Memory({db!r}, embedder=ClusterEmbedder(), config=Config(vector_ann_min=1000))
ids = [mem.record_decision("late decision on topic 5 number %d" % k, "late outcome on topic 9 number %d" % k)
       for k in range(3)]
mem.update({retext!r}, "retexted decision on topic 250 now about something else")
mem.delete({gone!r})
out = {{"loaded_index": mem._views.vectors is not None}}
mem.close()
print(json.dumps(out))
"""

_EMBED = """
import json, sys
sys.path.insert(0, {tests!r})
from test_vector_index_catchup import ClusterEmbedder
from causalmem import Config, Memory
mem = Memory({db!r}, embedder=ClusterEmbedder(), config=Config(vector_ann_min=1000))
n = mem.reembed()  # what ``causalmem embed`` does: the queue only, never the vector index
out = {{"embedded": n, "loaded_index": mem._views.vectors is not None}}
mem.close()
print(json.dumps(out))
"""

_READER = """
import json, sys
import numpy as np
sys.path.insert(0, {tests!r})
from test_vector_index_catchup import ClusterEmbedder
from causalmem import Config, Memory
from causalmem.vector_index import IndexKeeper
pages = []
real_pages = IndexKeeper._pages
def counting(self, *a, **kw):
    pages.append(1)
    return real_pages(self, *a, **kw)
IndexKeeper._pages = counting
emb = ClusterEmbedder()
mem = Memory({db!r}, embedder=emb, config=Config(vector_ann_min=1000))
first = mem.search("late decision on topic 5 number 1", top_k=5, channels=("semantic",), reinforce=False,
                   explain=True)
views = mem._views
vi = views.vectors
out = {{"first": [h.text for h in first], "first_cos": [h.signals["cosine_rank"] for h in first],
       "coverage": first[0].signals["semantic_coverage"] if first else None,
       "fast": vi.loading_fast, "ready": vi.ready, "catch_ups": views.keeper.catch_ups, "pages": len(pages),
       "mapped": vi.segment is not None and vi.segment.path is not None, "live": len(vi)}}
recall = []
for q in {queries!r}:
    qv = emb.encode([q])[0]
    ids, sc = vi.search(qv, top_k=10)
    ex_ids, ex_sc = vi.search(qv, top_k=10, exact=True)
    # ties at the 10th exact score count as hits
    recall.append(float(np.mean(sc >= ex_sc[-1] - 1e-6)) if len(ex_sc) == 10 else float(len(ids) == len(ex_ids)))
out["recall"] = float(np.mean(recall))
found = lambda t: [h.text for h in mem.search(t, top_k=1, channels=("semantic",), reinforce=False)]
out["retexted"] = found("retexted decision on topic 250 now about something else")
out["deleted"] = found({gone_text!r})
mem.close()
print(json.dumps(out))
"""


def test_a_fresh_reader_catches_the_vector_files_up_after_another_process_wrote(db_path, monkeypatch):
    """B builds and stamps the index of a 50,000-vector store; A (a one-shot process) writes, retexts and
    deletes chunks, E (``causalmem embed``) stores their vectors; C's first search maps the files, patches them with the journal's
    rows only (no page through the stored vectors), has the semantic channel, answers as exact search."""
    n_pairs = 25_000
    # one build thread: the graph (and so the recall checked below) is the same on every run; with two
    # it varied 0.965-0.970 over 40 builds (review F1), a margin of 6 hits of 400 to the bar
    monkeypatch.setattr(vector_files, "BUILD_THREADS", 1)  # read there
    with Memory(db_path, embedder=ClusterEmbedder(), config=Config(vector_ann_min=1000)) as mem:
        mem.record_many([_pair(i) for i in range(n_pairs)])
        mem.flush()
        assert mem._views.wait_vectors(300, folded=True)
        mem.search("warm up topic 1", reinforce=False)
        assert mem._views.vectors.segment is not None
        by_text = {c.text: c.id for c in mem.get_all(limit=60)}
    head = json.loads((sidecar_dir(db_path) / "vectors.json").read_text())
    assert head["seq"] is not None and head["count"] == 2 * n_pairs  # B's close stamped the files
    usearch_file = sidecar_dir(db_path) / head["files"]["usearch"][0]
    stamp = usearch_file.stat().st_mtime_ns
    retext, gone = by_text[_pair(3)[0]], by_text[_pair(4)[0]]
    a = _child(_WRITER.format(tests=TESTS, db=str(db_path), retext=retext, gone=gone))
    e = _child(_EMBED.format(tests=TESTS, db=str(db_path)))
    assert not a["loaded_index"] and not e["loaded_index"] and e["embedded"] == 7, (a, e)
    assert json.loads((sidecar_dir(db_path) / "vectors.json").read_text())["seq"] == head["seq"]  # stale now
    queries = [_pair(i)[k] for i in range(0, n_pairs, 997) for k in (0, 1)][:40]
    c = _child(_READER.format(tests=TESTS, db=str(db_path), queries=queries, gone_text=_pair(4)[0]))
    assert c["catch_ups"] == 1 and c["fast"] and c["ready"] and c["mapped"], c
    assert c["pages"] == 0, c  # no read through every stored vector
    assert c["first"][0] == "late decision on topic 5 number 1" and all(r is not None for r in c["first_cos"]), c
    assert c["coverage"]["with_vector"] == c["coverage"]["in_scope"] == 2 * n_pairs + 6 - 1, c
    assert c["live"] == 2 * n_pairs + 6 - 1, c
    assert c["recall"] >= 0.95, c
    assert c["retexted"] == ["retexted decision on topic 250 now about something else"], c
    assert c["deleted"] != [_pair(4)[0]], c
    assert usearch_file.stat().st_mtime_ns == stamp  # the segment was mapped, not rebuilt
    # C's close stamped the caught-up state: the next reader maps the files exact
    assert json.loads((sidecar_dir(db_path) / "vectors.json").read_text())["seq"] != head["seq"]
    c2 = _child(_READER.format(tests=TESTS, db=str(db_path), queries=queries[:4], gone_text=_pair(4)[0]))
    assert c2["catch_ups"] == 0 and c2["fast"] and c2["pages"] == 0 and c2["live"] == c["live"], c2


def test_a_gap_in_the_chain_or_an_older_writer_means_the_slow_path(tmp_path):
    """Entries from a writer that does not name its stored vectors (an earlier version: no "w" flag) are
    no links of a vector chain; the text views still read them (they do not care about vectors), and ids
    of kind ``v`` never count against the text views' catch-up limit."""
    d = tmp_path
    assert sidecar.append_journal(d, 10, 11, {"ci": [5], "v": list(range(100, 200))})
    chain = sidecar.read_chain(d, 10, 11, max_ids=10)
    assert chain is not None and list(chain) == ["ci"] and chain["ci"].tolist() == [5]
    vec = sidecar.read_chain(d, 10, 11, kinds=("ci", "v"), vectors=True)
    assert vec is not None and vec["v"].tolist() == list(range(100, 200))
    assert sidecar.read_chain(d, 10, 11, kinds=("ci", "v"), vectors=True, max_ids=50) is None
    # an entry without the flag (written by an earlier version)
    text = json.dumps({"f": "11", "t": "12", "d": {"ci": [[6, 6]]}}, separators=(",", ":"))
    import zlib

    with open(d / sidecar.JOURNAL, "ab") as fh:
        fh.write(f"{text} {zlib.crc32(text.encode()):08x}\n".encode())
    assert sidecar.read_chain(d, 10, 12)["ci"].tolist() == [5, 6]
    assert sidecar.read_chain(d, 10, 12, kinds=("ci", "v"), vectors=True) is None
    sidecar.prune_journal(d, 10)  # keeps both entries and each one's flag
    assert sidecar.read_chain(d, 10, 11, kinds=("ci", "v"), vectors=True) is not None
    assert sidecar.read_chain(d, 10, 12, kinds=("ci", "v"), vectors=True) is None


def test_the_rows_file_is_read_whole_only_when_it_changed_since_it_was_written(db_path, monkeypatch):
    """The check after an open from the files reads the whole rows file (1.5 GB at 1M) only when its
    (inode, mtime, size) differs from the one recorded when it was written and checksummed."""
    from causalmem import vector_index as vx

    with Memory(db_path, embedder=ClusterEmbedder(), config=Config(vector_ann_min=100)) as mem:
        mem.record_many([_pair(i) for i in range(300)])
        mem.flush()
        assert mem._views.wait_vectors(120, folded=True)
        mem.search("warm up topic 1", reinforce=False)
    head = json.loads((sidecar_dir(db_path) / "vectors.json").read_text())
    rows = sidecar_dir(db_path) / head["files"]["rows"][0]
    read = []
    real = vx._checksum
    monkeypatch.setattr(vector_files, "checksum", lambda p, *a: read.append(Path(p).name) or real(p, *a))

    def open_and_search() -> None:
        with Memory(db_path, embedder=ClusterEmbedder(), config=Config(vector_ann_min=100)) as mem:
            hits = mem.search(_pair(7)[0], top_k=1, channels=("semantic",), reinforce=False)
            assert hits[0].text == _pair(7)[0]
            assert mem._views.keeper.wait_idle(60)
            assert mem._views.vectors is not None and mem._views.vectors.segment is not None  # kept

    open_and_search()
    assert rows.name not in read, read  # graph and keys are checked, the rows file is not re-read
    st = rows.stat()
    os.utime(rows, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # written to since: read it whole
    open_and_search()
    assert rows.name in read, read
