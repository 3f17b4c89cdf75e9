"""The peers that must not share a process: PaddlePaddle and TensorFlow
imported into one process have crashed. Each one's tests (tests/peers_X.py)
run here in an interpreter of their own, and are skipped where the library
is not installed."""

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.interpreter import ROOT

APART = {"paddle": "peers_paddle.py", "tensorflow": "peers_tensorflow.py"}


def _env():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def _importable(library):
    """Whether the library imports here: installed, and nothing it needs
    hidden (the run without the optional peers hides ml_dtypes, which
    TensorFlow needs). Asked of an interpreter of its own, and only in that
    run: elsewhere an installed library that does not import is a failure."""
    if importlib.util.find_spec(library) is None:
        return False
    if not os.environ.get("GPU_DLPACK_TEST_HIDE"):
        return True
    probe = subprocess.run([sys.executable, "-c", f"import {library}"], cwd=ROOT, env=_env(),
                           capture_output=True, timeout=300)
    return probe.returncode == 0


@pytest.mark.parametrize("library", sorted(APART))
def test_the_peer_in_a_process_of_its_own(library):
    if not _importable(library):
        pytest.skip(f"{library} is not installed, or what it needs is hidden")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.join("tests", APART[library])],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600,
    )
    summary = done.stdout.strip().splitlines()[-1:] or ["(no output)"]
    print(f"{library}: {summary[0]}")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert " passed" in summary[0] and " failed" not in summary[0], summary[0]


def test_the_doctor_imports_the_peers_in_an_order_that_holds():
    # Paddle 3.3.1 imported after TensorFlow 2.21 crashes the process
    # (SIGSEGV); the doctor, which imports every installed peer into its
    # own process, imports Paddle first.
    if not all(_importable(name) for name in APART):
        pytest.skip("needs both paddle and tensorflow installed, and importable")
    code = (
        "import importlib, importlib.util\n"
        "from gpu_dlpack.doctor._peers import PEERS\n"
        "for p in PEERS:\n"
        "    if p.name in ('paddle', 'tensorflow'):\n"
        "        importlib.import_module(p.module)\n"
        "print('imported')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "imported" in done.stdout, (done.returncode, done.stderr[-2000:])
