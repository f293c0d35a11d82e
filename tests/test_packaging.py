"""Installing without a C++ compiler: the package installs as pure Python and says so at import.

Each case copies the build inputs (setup.py, pyproject.toml, the package) to a temporary
directory, runs ``pip install --no-build-isolation --no-deps --target`` there with the compiler
replaced by ``/bin/false`` (or with ``CAUSALMEM_NO_EXTENSION=1``), and imports the result in a
fresh interpreter whose path holds only that target.  Needs the source tree next to the tests
(a checkout or an unpacked sdist) and the build backend in this interpreter; skipped from a
tests-only copy (the installed-wheel run of ``.ci/wheel_check.sh``).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILD_INPUTS = ["setup.py", "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (REPO / "setup.py").is_file(), reason="needs the source tree (setup.py)"),
    pytest.mark.skipif(sys.platform == "win32", reason="replaces the compiler with /bin/false"),
]


def _setuptools_ok() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 77  # SPDX license strings


needs_backend = pytest.mark.skipif(
    not _setuptools_ok() or importlib.util.find_spec("Cython") is None,
    reason="the build backend (setuptools>=77, Cython) is not installed in this interpreter",
)


def _source_copy(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for name in BUILD_INPUTS:
        if (REPO / name).exists():
            shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "causalmem", src / "causalmem",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "*.cpp", "__pycache__"))
    return src


def _pip_install(src: Path, target: Path, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("CAUSALMEM_REQUIRE_EXTENSION", "CAUSALMEM_NO_EXTENSION")}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
         "--no-index", "--target", str(target), str(src)],
        env=full_env, cwd=src.parent, capture_output=True, text=True, timeout=600)


PROBE = """
import sys, numpy as np
import causalmem
from causalmem.spreading import CSR
print("FILE", causalmem.__file__)
print("HAVE", causalmem.HAVE_EXTENSION)
csr = CSR.from_coo(3, np.array([0, 1], np.int32), np.array([1, 2], np.int32),
                   np.array([1.0, 0.5], np.float32))
nodes, energies = csr.spread(np.array([0], np.int32), np.array([1.0], np.float32), decay=0.7,
                             threshold=0.01, max_steps=3)
print("SPREAD", [int(n) for n in nodes], [round(float(e), 6) for e in energies])
"""


def _probe(target: Path, cwd: Path) -> subprocess.CompletedProcess:
    # -S: no .pth files, so an editable install of this project (a developer's, or CI's) cannot
    # hand out its own compiled ``causalmem._spread``; numpy comes from its directory explicitly.
    import numpy
    numpy_site = Path(numpy.__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "CAUSALMEM_PURE_PYTHON"}
    env["PYTHONPATH"] = os.pathsep.join([str(target), str(numpy_site)])
    return subprocess.run([sys.executable, "-S", "-c", PROBE], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@needs_backend
@pytest.mark.parametrize("how", ["no-compiler", "env-switch"])
def test_installs_as_pure_python(tmp_path, how):
    src = _source_copy(tmp_path)
    target = tmp_path / "site"
    env = ({"CC": "/bin/false", "CXX": "/bin/false", "LDSHARED": "/bin/false"}
           if how == "no-compiler" else {"CAUSALMEM_NO_EXTENSION": "1"})
    res = _pip_install(src, target, **env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert not list(target.glob("causalmem/_spread*.so")), "no extension was expected"
    assert (target / "causalmem" / "py.typed").is_file()

    out = _probe(target, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"FILE {target / 'causalmem' / '__init__.py'}" in out.stdout
    assert "HAVE False" in out.stdout
    assert "compiled kernels not available" in out.stderr  # the warning at import
    assert "pure-Python" in out.stderr
    # the reference twin computes the same answer as the compiled kernel does in this process
    from causalmem.spreading import CSR
    import numpy as np
    csr = CSR.from_coo(3, np.array([0, 1], np.int32), np.array([1, 2], np.int32),
                       np.array([1.0, 0.5], np.float32))
    nodes, energies = csr.spread(np.array([0], np.int32), np.array([1.0], np.float32), decay=0.7,
                                 threshold=0.01, max_steps=3)
    expected = f"SPREAD {[int(n) for n in nodes]} {[round(float(e), 6) for e in energies]}"
    assert expected in out.stdout


@needs_backend
def test_required_extension_fails_without_compiler(tmp_path):
    """Release builds set CAUSALMEM_REQUIRE_EXTENSION=1: then a missing compiler is an error."""
    src = _source_copy(tmp_path)
    res = _pip_install(src, tmp_path / "site", CC="/bin/false", CXX="/bin/false",
                       LDSHARED="/bin/false", CAUSALMEM_REQUIRE_EXTENSION="1")
    assert res.returncode != 0
    assert not (tmp_path / "site" / "causalmem").exists()
