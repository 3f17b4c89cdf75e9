"""Builds the optional compiled core (gpu_dlpack/_core.c: Python headers
only). Everything else is declared in pyproject.toml. When the compiler or
the headers are missing, the build goes on without it and gpu_dlpack runs
its pure-Python path, with the same results."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("gpu_dlpack._core", ["gpu_dlpack/_core.c"], optional=True, extra_compile_args=["-O2"]),
    ]
)
