"""Builds the compiled core, gpu_dlpack._core: one extension module whose
face is Cython (gpu_dlpack/_core.pyx, including one file per concept from
gpu_dlpack/core/), with the concepts not yet ported still C files of
gpu_dlpack/core/ linked into it. Everything else is declared in
pyproject.toml. When the compiler or the headers are missing, the build
goes on without it and gpu_dlpack runs its pure-Python path, with the same
results."""

from Cython.Build import cythonize
from setuptools import Extension, setup

CORE = "gpu_dlpack/core/"
SOURCES = ["module.c", "export.c", "exportable.c", "adapt.c", "info.c", "capsule.c", "runtime.c", "state.c"]
HEADERS = ["module.h", "export.h", "exportable.h", "consumer.h", "adapt.h", "info.h", "capsule.h", "runtime.h", "state.h",
           "dlpack.h", "dlpack.pxd"]

setup(
    ext_modules=cythonize(
        [
            Extension(
                "gpu_dlpack._core", ["gpu_dlpack/_core.pyx"] + [CORE + name for name in SOURCES],
                depends=[CORE + name for name in HEADERS],
                include_dirs=[CORE],
                # Cython's init function, which module.c's PyInit__core calls once
                # it has refused a subinterpreter in the package's words.
                define_macros=[("PyInit__core", "gpu_dlpack_cython_init")],
                optional=True,
                # One module of several files: what they share is no symbol of the process.
                extra_compile_args=["-O2", "-fvisibility=hidden"],
            ),
        ],
        include_path=[CORE],
        compiler_directives={"language_level": 3},
    )
)
