"""SQL of the learning loop (Q-values, Hebbian co-occurrence, sleep), mixed into ``Store``.

Kept apart from ``store.py`` so the write path and the learning loop can evolve separately;
both are the truth layer and the only places that speak SQL.

Bulk reads return numpy structured arrays built straight from the cursor (``np.fromiter``);
string columns (source, polarity, subtype) are turned into small integer codes by SQL ``CASE``
so that a million-edge table loads without a Python object per cell. Writes are
``executemany`` over only the rows that changed.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

# Small integer codes used by the sleep arrays (0 = NULL / other).
SOURCE_CODES = {"user_feedback": 1, "llm_inferred": 2, "temporal": 3}
POLARITY_CODES = {"negative": 1, "positive": 2, "mixed": 3, "neutral": 4}
POLARITY_NAMES = {0: None, 1: "negative", 2: "positive", 3: "mixed", 4: "neutral"}
SUBTYPE_CODES = {"similar_to": 1, "repeated": 2, "refines": 3, "contradicts": 4, "invalidates": 5,
                 "supersedes": 6}


def _case(column: str, codes: dict[str, int], other: int = 0) -> str:
    whens = " ".join(f"WHEN {column} = '{k}' THEN {v}" for k, v in codes.items())
    return f"CASE WHEN {column} IS NULL THEN 0 {whens} ELSE {other} END"


EDGE_DTYPE = np.dtype([
    ("eid", "i8"), ("src", "i8"), ("dst", "i8"), ("rel", "i4"), ("sub", "i1"), ("conf", "f8"),
    ("source", "i1"), ("pol", "i1"), ("disc", "f8"), ("acc", "f8"), ("sup", "i1"),
])
_EDGE_SELECT = (
    "SELECT eid, src, dst, rel_code, " + _case("subtype", SUBTYPE_CODES, 7) + ", confidence, "
    + _case("source", SOURCE_CODES) + ", " + _case("polarity", POLARITY_CODES) + ", discovered_at, "
    "COALESCE(last_accessed_at, -1e300), superseded_by IS NOT NULL FROM edges WHERE valid_to IS NULL"
)
CHUNK_DTYPE = np.dtype([("nid", "i8"), ("q", "f8"), ("alive", "i1"), ("acc", "f8")])
COOC_DTYPE = np.dtype([("a", "i8"), ("b", "i8"), ("w", "f8"), ("upd", "f8")])


class LearningStoreMixin:
    """Methods used by ``learning.py`` and ``consolidation.py``; ``self.conn`` is the connection."""

    conn: Any

    # ----------------------------------------------------------------- Q-values
    def q_value_of(self, nid: int) -> float:
        rows = self.query("SELECT q_value FROM chunks WHERE nid = ?", (int(nid),))
        if not rows:
            raise KeyError(f"unknown chunk nid {nid}")
        return float(rows[0][0])

    def max_successor_q(self, nid: int) -> float | None:
        """Max Q over destinations of valid out-edges whose chunk is not deleted (None if none)."""
        rows = self.query(
            "SELECT MAX(c.q_value) FROM edges e JOIN chunks c ON c.nid = e.dst "
            "WHERE e.src = ? AND e.valid_to IS NULL AND c.valid_to IS NULL", (int(nid),))
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    def update_q_values(self, rows: Iterable[tuple[float, int]]) -> None:
        """rows of (q_value, nid)."""
        self.conn.executemany("UPDATE chunks SET q_value = ? WHERE nid = ?", rows)

    # ----------------------------------------------------------------- Hebbian
    def cooccurrence_weights(self, nids: Sequence[int]) -> dict[tuple[int, int], float]:
        """Weights of the known pairs among ``nids`` (keys (a, b) with a < b)."""
        nids = [int(n) for n in nids]
        if len(nids) < 2:
            return {}
        q = ",".join("?" * len(nids))
        rows = self.query(f"SELECT a, b, weight FROM cooccurrence WHERE a IN ({q}) AND b IN ({q})", nids + nids)
        return {(a, b): w for a, b, w in rows}

    def upsert_cooccurrence(self, rows: Sequence[tuple[int, int, float, float]]) -> None:
        """rows of (a, b, weight, now) with a < b: insert new pairs, set weight and bump hits of known ones."""
        self.conn.executemany(
            "INSERT INTO cooccurrence (a, b, weight, hits, updated_at) VALUES (?, ?, ?, 1, ?) "
            "ON CONFLICT(a, b) DO UPDATE SET weight = excluded.weight, hits = hits + 1, "
            "updated_at = excluded.updated_at", rows)

    def cooccurrence_row(self, a: int, b: int) -> tuple | None:
        a, b = (int(a), int(b)) if a < b else (int(b), int(a))
        rows = self.query("SELECT a, b, weight, hits, updated_at FROM cooccurrence WHERE a = ? AND b = ?", (a, b))
        return rows[0] if rows else None

    def sleep_cooccurrence_arrays(self) -> np.ndarray:
        n = self.conn.execute("SELECT COUNT(*) FROM cooccurrence").fetchone()[0]
        cur = self.conn.execute("SELECT a, b, weight, updated_at FROM cooccurrence")
        return np.fromiter(cur, dtype=COOC_DTYPE, count=n)

    def set_cooccurrence_weights(self, rows: Iterable[tuple[float, int, int]]) -> None:
        """rows of (weight, a, b); updated_at is left alone (it records reinforcement, not fading)."""
        self.conn.executemany("UPDATE cooccurrence SET weight = ? WHERE a = ? AND b = ?", rows)

    def delete_cooccurrence(self, rows: Iterable[tuple[int, int]]) -> None:
        self.conn.executemany("DELETE FROM cooccurrence WHERE a = ? AND b = ?", rows)

    # ----------------------------------------------------------------- sleep: reads
    def recent_chunk_texts(self, limit: int = 64) -> list[str]:
        return [r[0] for r in self.query(
            "SELECT text FROM chunks WHERE valid_to IS NULL ORDER BY created_at DESC, nid DESC LIMIT ?",
            (int(limit),))]

    def sleep_edge_arrays(self, *, relations: Sequence[str] | None = None) -> np.ndarray:
        """Every valid edge as one structured array (see ``EDGE_DTYPE``), ordered by eid."""
        sql, params = _EDGE_SELECT, []
        if relations:
            sql += f" AND relation IN ({','.join('?' * len(relations))})"
            params = list(relations)
        count_sql = "SELECT COUNT(*) FROM edges WHERE valid_to IS NULL" + sql[len(_EDGE_SELECT):]
        n = self.conn.execute(count_sql, params).fetchone()[0]
        cur = self.conn.execute(sql + " ORDER BY eid", params)
        return np.fromiter(cur, dtype=EDGE_DTYPE, count=n)

    def sleep_chunk_arrays(self) -> np.ndarray:
        """(nid, q, alive, last_accessed_at or -1e300) of every chunk, ordered by nid."""
        n = self.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        cur = self.conn.execute(
            "SELECT nid, q_value, valid_to IS NULL, COALESCE(last_accessed_at, -1e300) FROM chunks ORDER BY nid")
        return np.fromiter(cur, dtype=CHUNK_DTYPE, count=n)

    def edge_ids(self, eids: Sequence[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        eids = [int(e) for e in eids]
        for i in range(0, len(eids), 900):
            part = eids[i:i + 900]
            out.update(self.query(f"SELECT eid, id FROM edges WHERE eid IN ({','.join('?' * len(part))})", part))
        return out

    def edge_judge_rows(self, eids: Sequence[int]) -> dict[int, tuple]:
        """eid -> (id, relation, confidence, source, polarity, task_tag, discovered_at, subtype, src, dst)."""
        out: dict[int, tuple] = {}
        eids = [int(e) for e in eids]
        for i in range(0, len(eids), 900):
            part = eids[i:i + 900]
            for row in self.query(
                    "SELECT eid, id, relation, confidence, source, polarity, task_tag, discovered_at, subtype, "
                    f"src, dst FROM edges WHERE eid IN ({','.join('?' * len(part))})", part):
                out[row[0]] = row[1:]
        return out

    def chunk_texts(self, nids: Sequence[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        nids = [int(n) for n in nids]
        for i in range(0, len(nids), 900):
            part = nids[i:i + 900]
            out.update(self.query(f"SELECT nid, text FROM chunks WHERE nid IN ({','.join('?' * len(part))})", part))
        return out

    def tagged_edge_rows(self) -> list[tuple]:
        """(src, dst, discovered_at, task_tag) of every valid caused/enabled/prevented edge with a task tag."""
        return self.query(
            "SELECT src, dst, discovered_at, task_tag FROM edges WHERE valid_to IS NULL AND task_tag IS NOT NULL "
            "AND relation IN ('caused', 'enabled', 'prevented')")

    def chunk_rows_for_mining(self, nids: Sequence[int]) -> Iterable[tuple]:
        """(nid, text, user, agent, run, created_at) of the live chunks among ``nids`` (any order)."""
        wanted = set(int(n) for n in nids)
        total = self.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        if len(wanted) * 4 < total:  # few: indexed lookups
            ordered = sorted(wanted)
            for i in range(0, len(ordered), 900):
                part = ordered[i:i + 900]
                yield from self.conn.execute(
                    "SELECT nid, text, user_id, agent_id, run_id, created_at FROM chunks WHERE valid_to IS NULL "
                    f"AND nid IN ({','.join('?' * len(part))})", part)
            return
        cur = self.conn.execute(
            "SELECT nid, text, user_id, agent_id, run_id, created_at FROM chunks WHERE valid_to IS NULL")
        while True:
            rows = cur.fetchmany(50000)
            if not rows:
                break
            for row in rows:
                if row[0] in wanted:
                    yield row

    def has_new_tagged_decisions(self, since: float) -> bool:
        """Whether a valid tagged caused/enabled/prevented edge or its decision chunk is newer than ``since``."""
        if since == float("-inf"):
            since = -1e308
        return bool(self.query(
            "SELECT 1 FROM edges e JOIN chunks s ON s.nid = e.src WHERE e.valid_to IS NULL AND e.task_tag IS NOT NULL "
            "AND e.relation IN ('caused', 'enabled', 'prevented') AND (e.discovered_at > ? OR s.created_at > ?) "
            "LIMIT 1", (since, since)))

    def judged_pairs(self) -> set[str]:
        """Keys 'judged:<old edge id>:<new edge id>' of pairs a judge already said to keep."""
        return {r[0] for r in self.query("SELECT key FROM meta WHERE key LIKE 'judged:%'")}

    def remember_judged(self, keys: Iterable[str], verdict: str = "decided") -> None:
        self.conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", [(k, verdict) for k in keys])

    # ----------------------------------------------------------------- sleep: writes
    def update_edge_confidences(self, rows: Iterable[tuple[float, int]]) -> None:
        """rows of (confidence, eid)."""
        self.conn.executemany("UPDATE edges SET confidence = ? WHERE eid = ?", rows)

    def retire_edges(self, rows: Iterable[tuple[float, str, float, int]]) -> None:
        """rows of (valid_to, invalid_reason, confidence, eid); already-invalid edges are left alone."""
        self.conn.executemany(
            "UPDATE edges SET valid_to = ?, invalid_reason = ?, confidence = ? WHERE eid = ? AND valid_to IS NULL",
            rows)

    def annotate_superseded(self, rows: Iterable[tuple[str, int]]) -> int:
        """rows of (superseded_by edge id, eid); only valid, not yet annotated edges change."""
        before = self.conn.total_changes
        self.conn.executemany(
            "UPDATE edges SET superseded_by = ? WHERE eid = ? AND valid_to IS NULL AND superseded_by IS NULL", rows)
        return self.conn.total_changes - before

    def retire_superseded(self, rows: Iterable[tuple[float, str, str, int]]) -> int:
        """rows of (valid_to, reason, superseded_by edge id, eid)."""
        before = self.conn.total_changes
        self.conn.executemany(
            "UPDATE edges SET valid_to = ?, invalid_reason = ?, superseded_by = ? WHERE eid = ? AND valid_to IS NULL",
            rows)
        return self.conn.total_changes - before
