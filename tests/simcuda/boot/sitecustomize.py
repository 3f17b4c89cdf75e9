"""Installs the simulated CUDA (tests/simcuda) at start-up when
GPU_DLPACK_SIMCUDA=1, before anything imports CuPy. The root conftest puts
this folder on PYTHONPATH, so that the interpreters the tests start run on
it too; what its checker reports is written to stderr at exit, one
``simcuda: ...`` line each, which tests/interpreter.py hands to the test's
own checker."""

import os
import sys

if os.environ.get("GPU_DLPACK_SIMCUDA", "") not in ("", "0"):
    import atexit

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    from tests import simcuda

    simcuda.install()
    del sys.path[0]

    @atexit.register
    def _write_reports():
        for line in simcuda.take_reports():
            sys.stderr.write(line.replace("\n", " ") + "\n")
