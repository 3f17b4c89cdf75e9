"""The hiding of peers from a run (tests/hide, GPU_DLPACK_TEST_HIDE): a hidden
library is neither importable nor installed as importlib.metadata reads it,
also where its distribution is named otherwise than its module."""

import importlib.metadata
import os
import subprocess
import sys

import pytest

from tests.interpreter import ROOT

# A module the runs hide, and a distribution that installs it.
INSTALLS = [
    ("torch", "torch"),
    ("tvm_ffi", "apache-tvm-ffi"),
    ("paddle", "paddlepaddle"),
    ("tensorflow", "tensorflow-cpu"),
    ("ml_dtypes", "ml_dtypes"),
]

PROBE = r"""
import importlib.metadata, importlib.util, json, sys
module, dist = sys.argv[1:]
try:
    importlib.metadata.version(dist)
    found = True
except importlib.metadata.PackageNotFoundError:
    found = False
listed = any((d.metadata["Name"] or "").lower() == dist.lower() for d in importlib.metadata.distributions())
print(json.dumps([importlib.util.find_spec(module) is not None, found, listed]))
"""


@pytest.mark.parametrize(("module", "dist"), INSTALLS)
def test_a_hidden_library_is_neither_importable_nor_installed(module, dist):
    try:
        importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{dist} is not installed here (or this run hides it)")
    env = dict(os.environ, GPU_DLPACK_TEST_HIDE=module)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(ROOT, "tests", "hide"), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", PROBE, module, dist], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[false, false, false]", (module, dist, done.stdout)
