"""A purge on a full disk: the deletion commits (it needs a few pages of log), the rewrite after it
(``VACUUM``, which needs room for a copy of the file) fails. ``delete_all`` must then say that the rows
are gone and the rewrite is not done (``PurgeIncompleteError``), never "nothing of this call was saved";
the same call again, once there is room, finishes the rewrite. A real full disk: a small tmpfs (root)."""
from __future__ import annotations

import os

import pytest

from causalmem import Memory, PurgeIncompleteError, StoreError
from disk_full import fill, tmpfs

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root only)"),
    pytest.mark.skipif(os.environ.get("CAUSALMEM_TEST_BACKEND") == "postgres",
                       reason="a SQLite file on a full tmpfs (the PostgreSQL case: benchmarks/soak.py)"),
]


@pytest.mark.timeout(120)
def test_a_purge_whose_rewrite_finds_the_disk_full_says_what_was_done(tmp_path):
    with tmpfs(tmp_path / "disk", "8m") as disk:
        db = str(disk / "agent.db")
        with Memory(db, embedder=None) as m:
            keep = m.record_many([(f"decision {i} about the cache of service {i} " + "x" * 300,
                                   f"outcome {i} of that change " + "y" * 300) for i in range(1500)])
            m.record_decision("alice's passport number zq7731", "visa approved", user_id="alice")
        assert os.path.getsize(db) > 1_000_000  # checkpointed into the file at close
        m = Memory(db, embedder=None)
        try:
            fill(disk, leave=256 * 1024)  # room for the deletion's log pages, not for a copy of the file
            with pytest.raises(PurgeIncompleteError) as info:
                m.delete_all(user_id="alice", purge=True)
            err = info.value
            assert isinstance(err, StoreError) and err.purged == 2
            assert "purged 2 chunk(s)" in str(err) and "nothing of this call was saved" not in str(err)
            assert "full" in str(err)
            # the rows are gone for good (this memory and a fresh reader), everything else is there
            assert m.get_all(user_id="alice") == []
            assert m.search("passport zq7731", user_id="alice") == []
            (disk / "ballast").unlink()
            assert m.delete_all(user_id="alice", purge=True) == 0  # the rewrite, now that there is room
        finally:
            m.close()
        with Memory(db, embedder=None) as fresh:
            assert fresh.get_all(user_id="alice") == []
            assert fresh.stats()["chunks"] == 2 * len(keep)
        with open(db, "rb") as fh:
            assert b"zq7731" not in fh.read()

