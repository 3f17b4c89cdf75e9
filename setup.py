"""Builds the compiled core, gpu_dlpack._core: one extension module whose
source is Cython (gpu_dlpack/_core.pyx, including one file per concept from
gpu_dlpack/core/), with one small C file linked into it (core/module.c, the
init function that refuses a subinterpreter before Cython's init runs). It
is compiled against NumPy's headers (its C API, through `cimport numpy`),
so NumPy 2 is a build requirement. Everything else is declared in
pyproject.toml. gpu_dlpack has no path without its core: where no C
compiler works, the build stops and names the remedies."""

import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import BaseError, CCompilerError, CompileError

CORE = "gpu_dlpack/core/"
SOURCES = ["module.c"]

NO_COMPILER = """gpu_dlpack's compiled core (gpu_dlpack._core) could not be built: {error}
gpu_dlpack needs its compiled core on every platform. Either:
  - install a wheel built for your platform, which carries the core: the
    release builds them for Linux (manylinux and musllinux, x86_64 and
    aarch64), macOS (x86_64 and arm64) and Windows (AMD64), CPython 3.10
    to 3.13; or
  - install a C compiler and the Python headers, then install again: gcc or
    clang and your distribution's python3-dev (python3-devel) on Linux,
    Xcode's command line tools on macOS (xcode-select --install), the
    Microsoft C++ Build Tools on Windows. pip fetches Cython and NumPy itself."""


# The C Cython generates depends on the NumPy it was generated against
# (NumPy's .pxd, which follows its headers: NumPy 2.4's declares what 2.2's
# headers lack), and cythonize judges it stale by file times alone, which a
# NumPy installed later from a wheel does not beat. So it is generated again
# whenever the NumPy found differs from the one it was made with (another
# environment, another release), which this stamp records.
NUMPY_STAMP = os.path.join("build", "core-c-numpy.txt")
NUMPY_FOUND = f"{numpy.__version__} {numpy.get_include()}"


def _generated_for_another_numpy() -> bool:
    try:
        with open(NUMPY_STAMP, encoding="utf-8") as f:
            return f.read() != NUMPY_FOUND
    except OSError:
        return True


class BuildCore(build_ext):
    def build_extension(self, ext):
        # MSVC's defaults already optimise (/O2) and export nothing but the
        # module's init function; gcc and clang are told so.
        if self.compiler.compiler_type != "msvc":
            # One module of several files: what they share is no symbol of the process.
            ext.extra_compile_args = ["-O2", "-fvisibility=hidden"]
        try:
            super().build_extension(ext)
        except (CCompilerError, BaseError) as error:
            raise CompileError(NO_COMPILER.format(error=error)) from error


setup(
    cmdclass={"build_ext": BuildCore},
    ext_modules=cythonize(
        [
            Extension(
                "gpu_dlpack._core", ["gpu_dlpack/_core.pyx"] + [CORE + name for name in SOURCES],
                # Cython's init function, which module.c's PyInit__core calls once
                # it has refused a subinterpreter in the package's words.
                define_macros=[
                    ("PyInit__core", "gpu_dlpack_cython_init"),
                    # NumPy's API without what it deprecated in 1.7 ...
                    ("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"),
                    # ... and no newer than NumPy 1.26's (the package's floor;
                    # 1.26 added none to 1.25's): built against NumPy 2's
                    # headers, the core loads on any NumPy from 1.26 up,
                    # whatever NumPy the build found (2.x's default target is
                    # older still, but may move up).
                    ("NPY_TARGET_VERSION", "NPY_1_25_API_VERSION"),
                ],
                include_dirs=[numpy.get_include()],
            ),
        ],
        include_path=[CORE],
        compiler_directives={"language_level": 3},
        force=_generated_for_another_numpy(),
    ),
)
os.makedirs(os.path.dirname(NUMPY_STAMP), exist_ok=True)
with open(NUMPY_STAMP, "w", encoding="utf-8") as stamp:
    stamp.write(NUMPY_FOUND)
