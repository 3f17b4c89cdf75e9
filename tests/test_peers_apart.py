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


@pytest.mark.parametrize("library", sorted(APART))
def test_the_peer_in_a_process_of_its_own(library):
    if importlib.util.find_spec(library) is None:
        pytest.skip(f"{library} is not installed")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.join("tests", APART[library])],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    summary = done.stdout.strip().splitlines()[-1:] or ["(no output)"]
    print(f"{library}: {summary[0]}")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert " passed" in summary[0] and " failed" not in summary[0], summary[0]
