"""Build the compiled kernels. Metadata lives in pyproject.toml."""
import os

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

# CAUSALMEM_DEBUG_BOUNDS=1 turns bounds/wraparound checks back on for debugging.
_debug = os.environ.get("CAUSALMEM_DEBUG_BOUNDS") == "1"

extensions = [
    Extension(
        "causalmem._spread",
        ["causalmem/_spread.pyx"],
        include_dirs=[np.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        language="c++",
        # -O3 but no -march=native: wheels must run on any x86-64/aarch64.
        # -ffp-contract=off: no FMA contraction, so float32 results match the twin bit for bit.
        extra_compile_args=["-O3", "-ffp-contract=off", "-std=c++11"],
    ),
]

setup(
    ext_modules=cythonize(
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
)
