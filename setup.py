"""Builds the optional compiled core, gpu_dlpack._core: one extension module
from the C files of gpu_dlpack/core/ (one per concept, each with its header;
Python headers only). Everything else is declared in pyproject.toml. When the
compiler or the headers are missing, the build goes on without it and
gpu_dlpack runs its pure-Python path, with the same results."""

from setuptools import Extension, setup

CORE = "gpu_dlpack/core/"
SOURCES = ["module.c", "export.c", "exportable.c", "consumer.c", "adapt.c", "info.c", "capsule.c", "runtime.c", "state.c"]
HEADERS = ["export.h", "exportable.h", "consumer.h", "adapt.h", "info.h", "capsule.h", "runtime.h", "state.h", "dlpack.h"]

setup(
    ext_modules=[
        Extension(
            "gpu_dlpack._core", [CORE + name for name in SOURCES], depends=[CORE + name for name in HEADERS],
            optional=True,
            # One module of several files: what they share is no symbol of the process.
            extra_compile_args=["-O2", "-fvisibility=hidden"],
        ),
    ]
)
