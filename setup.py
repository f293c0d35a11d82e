"""Build the compiled kernels. Metadata lives in pyproject.toml.

The extension is optional: when it cannot be built (no C++ compiler, or
``CAUSALMEM_NO_EXTENSION=1``) the package installs as pure Python and warns at import that it
runs on the reference twin.  ``CAUSALMEM_REQUIRE_EXTENSION=1`` (set by the wheel builds and CI)
turns a failed build back into an error, so a release can never ship without its kernel.
"""
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# CAUSALMEM_DEBUG_BOUNDS=1 turns bounds/wraparound checks back on for debugging.
_debug = os.environ.get("CAUSALMEM_DEBUG_BOUNDS") == "1"
_skip = os.environ.get("CAUSALMEM_NO_EXTENSION") == "1"
_require = os.environ.get("CAUSALMEM_REQUIRE_EXTENSION") == "1"

# Per compiler family: -O3 but no -march=native (wheels must run on any x86-64/aarch64), and no
# floating-point contraction (FMA), so float32 results match the reference twin bit for bit.
# GCC/Clang: -ffp-contract=off (GCC's default in GNU mode is "fast").  MSVC: /fp:precise, which
# since Visual Studio 2022 17.0 does not contract (fp_contract defaults to off); never /fp:fast
# or /fp:contract, and no /arch:AVX2, so x64 code has no FMA instructions to contract into.
_FLAGS = {
    "unix": ["-O3", "-ffp-contract=off", "-std=c++11"],
    "msvc": ["/O2", "/fp:precise", "/std:c++14"],
}
# Release wheels carry no debug info: strip the shared object at link time (Linux: -s; macOS's
# linker removes local symbols with -x; MSVC writes no debug info without /Zi).
_LINK = {"linux": ["-s"], "darwin": ["-Wl,-x"]}


class OptionalBuildExt(build_ext):
    """Compiler-specific flags; a failed build warns and leaves the pure-Python package."""

    def build_extensions(self):
        family = "msvc" if self.compiler.compiler_type == "msvc" else "unix"
        link = [] if _debug else next((v for k, v in _LINK.items() if sys.platform.startswith(k)), [])
        for ext in self.extensions:
            ext.extra_compile_args = list(_FLAGS[family]) + list(ext.extra_compile_args or [])
            ext.extra_link_args = list(link) + list(ext.extra_link_args or [])
        super().build_extensions()

    def run(self):
        try:
            super().run()
        except Exception as exc:  # DistutilsPlatformError: no compiler at all
            self._give_up(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # CompileError / LinkError / DistutilsExecError / OSError
            self._give_up(exc)

    @staticmethod
    def _give_up(exc):
        if _require:
            raise
        print(
            "\n*** causalmem: the compiled kernel could not be built "
            f"({type(exc).__name__}: {exc}).\n"
            "*** Installing the pure-Python package: correct results, much slower spreading.\n"
            "*** Install a C++ compiler (or a prebuilt wheel) and reinstall for the fast kernel.\n",
            file=sys.stderr,
        )


def _extensions():
    if _skip:
        return []
    # Cython and numpy are only needed when the extension is built.
    import numpy as np
    from Cython.Build import cythonize

    extensions = [
        Extension(
            "causalmem._spread",
            ["causalmem/_spread.pyx"],
            include_dirs=[np.get_include()],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            language="c++",
        ),
    ]
    return cythonize(
        extensions,
        language_level=3,
        compiler_directives={
            "boundscheck": _debug,
            "wraparound": _debug,
            "cdivision": True,
            "initializedcheck": _debug,
            "nonecheck": False,
        },
    )


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
