"""How to persist the lexical index: three designs side by side in one run.

    python benchmarks/lexical_index.py --sizes 100000            # writes benchmarks/results/lexical_index.md
    python benchmarks/lexical_index.py --sizes 20000 --out -     # quick, print only

* **sidecar** (what causalmem uses): ``BM25Index`` arrays saved to ``<db>.idx/lexical.cmx`` and
  mapped copy-on-write at open (``causalmem.sidecar``); queries run on the in-memory index, so the
  warm path is today's.
* **SQLite postings table**: ``postings(term, nid, tf)`` + ``doclen(nid, len)`` in the database,
  clustered by term (``WITHOUT ROWID``); a query reads its terms' postings and scores them with
  the same numpy BM25. Nothing to load at open; every query pays the reads.
* **FTS5 fed with the engine's tokens**: a contentless FTS5 table whose documents are the
  engine's own tokens joined by spaces, ranked with FTS5's ``bm25()`` (an OR of the query
  terms). Its IDF differs from SPEC §4.1 (``ln((N-n+.5)/(n+.5))``, floored), so the ranking is not
  the engine's; the overlap of the top 10 with the engine is reported.
* **rebuild** (no persistence, the old behaviour): read every text and tokenize at first query.

Every figure is a median of this run; cold figures are in-process after the data files were just
written (page cache warm), the open+first-search in a fresh process is ``fast_defaults.py``.
"""
from __future__ import annotations

import argparse
import math
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import RESULTS, setup, write_report

setup()

import numpy as np  # noqa: E402


from store_bench import texts, vocab  # noqa: E402

from causalmem import sidecar  # noqa: E402
from causalmem.lexical import BM25Index, B, K1  # noqa: E402
from causalmem.tokenizer import DEFAULT_TOKENIZER  # noqa: E402



def ms(xs: list[float]) -> tuple[float, float]:
    return float(np.percentile(xs, 50)) * 1000, float(np.percentile(xs, 95)) * 1000


def run_queries(fn, queries) -> tuple[float, float]:
    lat = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        lat.append(time.perf_counter() - t)
    return ms(lat)


def bench(n: int, n_queries: int, tmp: Path) -> dict:
    rng = np.random.default_rng(11)
    words = vocab(rng)
    docs = texts(rng, words, n)
    queries = [" ".join(d.split()[:3]) for d in rng.choice(docs, n_queries)]
    pairs = list(enumerate(docs, start=1))
    out: dict = {}

    # -- rebuild (tokenize everything at the first query)
    t = time.perf_counter()
    index = BM25Index()
    index.add_many(pairs)
    out["rebuild"] = {"open": time.perf_counter() - t}
    out["rebuild"]["warm"] = run_queries(lambda q: index.search(q, top_k=10), queries)
    truth = {q: index.search(q, top_k=10)[0].tolist() for q in queries}

    # -- sidecar
    d = tmp / "m.db.idx"
    t = time.perf_counter()
    arrays, meta = index.to_arrays()
    sidecar.save_arrays(d, "lexical", 1, arrays, meta)
    save_s = time.perf_counter() - t
    t = time.perf_counter()
    snap = sidecar.load_arrays(d, "lexical", 1)
    loaded = BM25Index.from_arrays(snap.arrays, snap.meta)
    open_s = time.perf_counter() - t
    t = time.perf_counter()
    loaded.search(queries[0], top_k=10)
    first = time.perf_counter() - t
    same = all(loaded.search(q, top_k=10)[0].tolist() == truth[q] for q in queries)
    out["sidecar"] = {"open": open_s, "first": first, "warm": run_queries(lambda q: loaded.search(q, top_k=10), queries),
                      "save": save_s, "bytes": (d / "lexical.cmx").stat().st_size, "same": same}
    incr = BM25Index.from_arrays(snap.arrays, snap.meta)
    extra = [(n + 1 + i, docs[i] + " extra") for i in range(1000)]
    t = time.perf_counter()
    incr.add_many(extra)
    out["sidecar"]["write1k"] = time.perf_counter() - t

    # -- SQLite postings table
    db = tmp / "postings.db"
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("CREATE TABLE terms (term TEXT PRIMARY KEY, tid INTEGER NOT NULL, df INTEGER NOT NULL)")
    con.execute("CREATE TABLE postings (tid INTEGER, nid INTEGER, tf INTEGER, PRIMARY KEY (tid, nid)) WITHOUT ROWID")
    con.execute("CREATE TABLE doclen (nid INTEGER PRIMARY KEY, len INTEGER)")
    t = time.perf_counter()
    tid_of: dict[str, int] = {}
    post, lens = [], []
    for nid, text in pairs:
        toks = DEFAULT_TOKENIZER.tokenize(text)
        lens.append((nid, len(toks)))
        counts: dict[int, int] = {}
        for tok in toks:
            tid = tid_of.setdefault(tok, len(tid_of))
            counts[tid] = counts.get(tid, 0) + 1
        post += [(tid, nid, tf) for tid, tf in counts.items()]
    df = np.bincount(np.array([p[0] for p in post]), minlength=len(tid_of))
    with con:
        con.executemany("INSERT INTO terms VALUES (?,?,?)", [(tok, tid, int(df[tid])) for tok, tid in tid_of.items()])
        con.executemany("INSERT INTO postings VALUES (?,?,?)", sorted(post))
        con.executemany("INSERT INTO doclen VALUES (?,?)", lens)
    fill_s = time.perf_counter() - t
    con.close()
    con = sqlite3.connect(db)
    t = time.perf_counter()
    n_docs, total = con.execute("SELECT COUNT(*), SUM(len) FROM doclen").fetchone()
    max_nid = con.execute("SELECT MAX(nid) FROM doclen").fetchone()[0]
    dl = np.zeros(max_nid + 1)
    rows = np.array(con.execute("SELECT nid, len FROM doclen").fetchall())
    dl[rows[:, 0]] = rows[:, 1]
    avgdl = total / n_docs
    norm = K1 * (1 - B + B * dl / avgdl)
    open_tables = time.perf_counter() - t

    def sql_search(q: str) -> list[int]:
        toks = DEFAULT_TOKENIZER.tokenize(q)
        acc = np.zeros(max_nid + 1)
        for tok, qtf in {tk: toks.count(tk) for tk in dict.fromkeys(toks)}.items():
            r = con.execute("SELECT tid, df FROM terms WHERE term = ?", (tok,)).fetchone()
            if r is None:
                continue
            p = np.array(con.execute("SELECT nid, tf FROM postings WHERE tid = ?", (r[0],)).fetchall(), dtype=np.float64)
            idf = math.log(1 + (n_docs - r[1] + 0.5) / (r[1] + 0.5))
            nid = p[:, 0].astype(np.int64)
            acc[nid] += idf * qtf * (K1 + 1) * p[:, 1] / (p[:, 1] + norm[nid])
        top = np.argpartition(-acc, 10)[:10]
        return top[np.argsort(-acc[top], kind="stable")].tolist()

    t = time.perf_counter()
    sql_search(queries[0])
    first = time.perf_counter() - t
    out["sqlite tables"] = {"open": open_tables, "first": first, "warm": run_queries(sql_search, queries),
                            "save": fill_s, "bytes": db.stat().st_size}
    t = time.perf_counter()
    with con:
        base = max_nid + 1
        rows_new = []
        for i, (_, text) in enumerate(extra):
            toks = DEFAULT_TOKENIZER.tokenize(text)
            counts: dict[str, int] = {}
            for tok in toks:
                counts[tok] = counts.get(tok, 0) + 1
            for tok, tf in counts.items():
                tid = tid_of.setdefault(tok, len(tid_of))
                rows_new.append((tid, base + i, tf))
                con.execute("INSERT INTO terms VALUES (?,?,1) ON CONFLICT(term) DO UPDATE SET df = df + 1", (tok, tid))
            con.execute("INSERT INTO doclen VALUES (?,?)", (base + i, len(toks)))
        con.executemany("INSERT INTO postings VALUES (?,?,?)", rows_new)
    out["sqlite tables"]["write1k"] = time.perf_counter() - t
    con.close()

    # -- FTS5 over the engine's tokens
    fdb = tmp / "fts.db"
    con = sqlite3.connect(fdb)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("CREATE VIRTUAL TABLE fts USING fts5(tokens, content='', tokenize='unicode61 remove_diacritics 0')")
    t = time.perf_counter()
    with con:
        con.executemany("INSERT INTO fts (rowid, tokens) VALUES (?, ?)",
                        [(nid, " ".join(DEFAULT_TOKENIZER.tokenize(text))) for nid, text in pairs])
    fts_fill = time.perf_counter() - t
    con.close()
    con = sqlite3.connect(fdb)

    def fts_search(q: str) -> list[int]:
        toks = list(dict.fromkeys(DEFAULT_TOKENIZER.tokenize(q)))
        if not toks:
            return []
        match = " OR ".join('"' + tk.replace('"', '""') + '"' for tk in toks)
        return [r[0] for r in con.execute(
            "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY bm25(fts) LIMIT 10", (match,))]

    t = time.perf_counter()
    fts_search(queries[0])
    first = time.perf_counter() - t
    overlap = statistics.mean(len(set(fts_search(q)) & set(truth[q])) / max(1, len(truth[q])) for q in queries[:50])
    out["fts5"] = {"open": 0.0, "first": first, "warm": run_queries(fts_search, queries), "save": fts_fill,
                   "bytes": fdb.stat().st_size, "overlap": overlap}
    t = time.perf_counter()
    with con:
        con.executemany("INSERT INTO fts (rowid, tokens) VALUES (?, ?)",
                        [(nid, " ".join(DEFAULT_TOKENIZER.tokenize(text))) for nid, text in extra])
    out["fts5"]["write1k"] = time.perf_counter() - t
    con.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--out", default=str(RESULTS / "lexical_index.md"))
    args = ap.parse_args()
    lines = ["# Persisting the lexical index: sidecar file vs SQLite tables vs FTS5", "",
             f"`python benchmarks/lexical_index.py {' '.join(sys.argv[1:])}`".replace(" `", "`"), "",
             "| docs | design | open (load) | first query | warm p50 / p95 | build or save | on disk | "
             "+1,000 docs | same top 10 as the engine |", "|---|---|---|---|---|---|---|---|---|"]
    for n in [int(s) for s in args.sizes.split(",") if s]:
        with tempfile.TemporaryDirectory(prefix="causalmem-lex-") as d:
            res = bench(n, args.queries, Path(d))
        for name, r in res.items():
            p50, p95 = r["warm"]
            same = ("yes" if r.get("same") else "no") if "same" in r else \
                (f"{r['overlap']:.0%} overlap (FTS5's own bm25)" if "overlap" in r else
                 ("yes (reference)" if name == "rebuild" else "yes (same scoring)"))
            first = f"{r['first'] * 1000:.1f} ms" if "first" in r else "(included)"
            save = f"{r['save']:.2f} s" if "save" in r else "—"
            size = f"{r['bytes'] / 2**20:.0f} MB" if "bytes" in r else "—"
            w = f"{r['write1k'] * 1000:.0f} ms" if "write1k" in r else "—"
            lines.append(f"| {n:,} | {name} | {r['open'] * 1000:.0f} ms | {first} | {p50:.2f} / {p95:.2f} ms | "
                         f"{save} | {size} | {w} | {same} |")
            print(lines[-1], flush=True)
    write_report(lines, args.out)


if __name__ == "__main__":
    main()
