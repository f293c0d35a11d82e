"""A real full disk for tests: a small tmpfs mounted for the test (root only), filled to ENOSPC."""
from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """``path`` as a fresh tmpfs of ``size`` (e.g. "8m") for the block; the test is skipped without root."""
    path.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounts a small tmpfs (root only)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(path: Path, leave: int = 0) -> None:
    """Fill the file system of ``path`` to ENOSPC (a ``ballast`` file), then give ``leave`` bytes back."""
    fd = os.open(path / "ballast", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        size = 0
        while True:
            try:
                size += os.write(fd, b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
        if leave:
            os.ftruncate(fd, max(0, size - leave))
    finally:
        os.close(fd)
