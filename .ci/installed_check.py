"""pytest plugin used by .ci/wheel_check.sh: refuse to run unless ``causalmem`` is imported from
the directory named by ``CAUSALMEM_EXPECT_UNDER`` (the fresh venv, or the unpacked sdist) and its
compiled extension loaded; print where it came from."""
from __future__ import annotations

import os

import pytest


def _where() -> tuple[str, str, bool]:
    import causalmem

    expect = os.path.realpath(os.environ["CAUSALMEM_EXPECT_UNDER"])
    return os.path.realpath(causalmem.__file__), expect, bool(causalmem.HAVE_EXTENSION)


def pytest_configure(config):
    where, expect, have = _where()
    if not where.startswith(expect + os.sep):
        raise pytest.UsageError(f"causalmem imported from {where}, expected under {expect}")
    if not have:
        raise pytest.UsageError(f"causalmem at {where} has no compiled extension")


def pytest_sessionstart(session):
    where, _, have = _where()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:  # shown with -q too
        reporter.write_line(f"causalmem under test: {where} (HAVE_EXTENSION={have})")
