"""Subprocesses of a PostgreSQL test run open their stores on PostgreSQL too (see causalmem_pg_shim)."""
import os

if os.environ.get("CAUSALMEM_TEST_BACKEND") == "postgres" and os.environ.get("CAUSALMEM_TEST_PG_DB_DSN"):
    try:
        import causalmem_pg_shim

        causalmem_pg_shim.install()
    except ImportError:  # a Python without causalmem (pip, build tools): nothing to substitute
        pass
