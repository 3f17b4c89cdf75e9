"""Running a short script in a fresh interpreter, for what must be seen from
outside: interpreter exit, or JAX started with other flags."""

from __future__ import annotations

import os
import subprocess
import sys

# The folder holding tests/: the source tree, or the copy of the tests an
# installed wheel is tested from (gpu_dlpack then comes from site-packages).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code, *, env=None, timeout=180, options=()):
    """Run ``code`` with this interpreter (and its ``options``, such as
    ``("-X", "dev")``), gpu_dlpack importable; returns the CompletedProcess
    (text, stdout and stderr captured)."""
    full_env = dict(os.environ)
    full_env.setdefault("JAX_PLATFORMS", "cpu")
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (ROOT, full_env.get("PYTHONPATH")) if p
    )
    full_env.update(env or {})
    done = subprocess.run(
        [sys.executable, *options, "-c", code], env=full_env, capture_output=True, text=True,
        timeout=timeout, cwd=ROOT,
    )
    _pass_on_reports(done.stderr)
    return done


def _pass_on_reports(stderr):
    """On the simulated CUDA (tests/simcuda), what its checker reported in
    the child becomes a report of this process's: the test fails on it."""
    sim = sys.modules.get("tests.simcuda")
    if sim is None or sim.installed() is None or not stderr:
        return
    for line in stderr.splitlines():
        if line.startswith("simcuda: "):
            sim.installed().report("in a child interpreter: " + line[len("simcuda: "):])
