"""The layer in a process shared with other libraries.

``ctypes.pythonapi``'s function objects are shared by every library in the
process, which each configure them their own way (``argtypes`` and
``restype``), before or after the layer is imported: the layer calls the C
API through function objects of its own, and changes none of them.

torch, JAX, CuPy and TensorFlow each bring a runtime of their own into the
process (allocators, thread pools, signal handlers, their own copies of
protobuf and of the C++ runtime, ctypes configured their way): the layer's
exchanges give there what they give with NumPy alone. A child interpreter,
on the path of the run, imports them all first, then runs the tests of the
common exchanges and of the rules of each direction, then exchanges with
each library loaded (TensorFlow's own DLPack among them, where it is
installed: the test extra leaves it out, since ``gpu-dlpack doctor``
probes it where it is installed, and its import logs to stderr).
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child(code, *args, timeout=120):
    """The JSON lines ``code`` prints, run in a child on the path of the run."""
    env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    assert done.returncode == 0, f"exit status {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith(("[", "{"))]



LIBRARIES = ("torch", "jax", "cupy", "tensorflow")
SUITE = ("tests/test_common_exchanges.py", "tests/test_import_rules.py", "tests/test_export_rules.py")

CHILD = r"""
import json, os, sys
names = sys.argv[1].split(",")
for name in names:  # every library before gpu_dlpack, as a program that loaded them first
    __import__(name)
import pytest
code = pytest.main(["-q", "-p", "no:cacheprovider", "-x", *sys.argv[2].split(",")])
print(json.dumps(["suite", int(code)]))

import numpy as np, gpu_dlpack, torch, jax.numpy as jnp
a = np.arange(6.0).reshape(2, 3)
out = {
    "numpy -> torch": torch.from_dlpack(gpu_dlpack.wrap(a)).tolist(),
    "torch -> numpy": gpu_dlpack.from_dlpack(torch.arange(3.0)).tolist(),
    "jax -> torch": gpu_dlpack.convert(jnp.arange(3.0), "torch").tolist(),
    "torch -> jax": gpu_dlpack.convert(torch.arange(3.0), "jax").tolist(),
}
if "tensorflow" in names:
    import tensorflow as tf
    t = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    out["tensorflow -> numpy"] = gpu_dlpack.from_dlpack(tf.experimental.dlpack.to_dlpack(t)).tolist()
    # TensorFlow reads legacy capsules only: the layer's legacy export
    out["numpy -> tensorflow"] = tf.experimental.dlpack.from_dlpack(gpu_dlpack.export(a)).numpy().tolist()
    out["tensorflow -> torch"] = torch.from_dlpack(gpu_dlpack.wrap(tf.experimental.dlpack.to_dlpack(t))).tolist()
print(json.dumps(["exchanges", out]))
"""


def _installed(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def test_the_exchanges_hold_with_every_peer_library_loaded():
    missing = [n for n in ("torch", "jax", "cupy") if not _installed(n)]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (the test extra installs them)")
    names = [n for n in LIBRARIES if _installed(n)]
    env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", CHILD, ",".join(names), ",".join(SUITE)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]
    assert done.returncode == 0 and lines and lines[0] == ["suite", 0], done.stdout[-4000:] + done.stderr[-3000:]
    exchanges = dict([lines[1]])["exchanges"]
    assert exchanges["numpy -> torch"] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert exchanges["torch -> numpy"] == exchanges["jax -> torch"] == exchanges["torch -> jax"] == [0.0, 1.0, 2.0]
    if "tensorflow" in names:
        assert exchanges["tensorflow -> numpy"] == exchanges["tensorflow -> torch"] == [[1.0, 2.0], [3.0, 4.0]]
        assert exchanges["numpy -> tensorflow"] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


# -- ctypes.pythonapi as other libraries configure it --------------------------------

HOSTILE = r"""
import ctypes, json, sys
api = ctypes.pythonapi
P, V, C, I = ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
WAYS = {
    # What libraries set, each its own way: pointers taken and given as ints
    # (or as ctypes' default, a C int: half a pointer), names as bytes.
    "ints": {
        "PyCapsule_GetPointer": (I, [P, C]), "PyCapsule_GetName": (V, [P]), "PyCapsule_SetName": (I, [P, C]),
        "PyCapsule_New": (V, [V, C, V]), "PyCapsule_IsValid": (I, [P, C]), "PyMem_RawMalloc": (I, None),
        "Py_IncRef": (None, [V]), "Py_DecRef": (None, [V]), "PyCapsule_GetDestructor": (I, [P]),
    },
    # By address: the capsule passed as id(capsule).
    "addresses": {
        "PyCapsule_GetPointer": (V, [V, C]), "PyCapsule_GetName": (C, [V]), "PyCapsule_SetName": (I, [V, V]),
        "PyCapsule_New": (P, [V, V, V]), "PyCapsule_IsValid": (I, [V, C]), "PyMem_RawMalloc": (V, [ctypes.c_size_t]),
        "Py_IncRef": (None, [P]), "Py_DecRef": (None, [P]), "PyCapsule_GetDestructor": (V, [V]),
    },
}


def configure(way):
    for name, (restype, argtypes) in WAYS[way].items():
        f = getattr(api, name)
        f.restype, f.argtypes = restype, argtypes


def unchanged(way):
    return all(getattr(api, n).restype is r and list(getattr(api, n).argtypes or []) == list(a or [])
               for n, (r, a) in WAYS[way].items())


before, after = sys.argv[1:3]
if before != "none":
    configure(before)
import numpy as np, torch, gpu_dlpack
print(json.dumps(["left as the process set them", before == "none" or unchanged(before)]))
if after != "none":
    configure(after)


def exchanges():
    a = np.arange(6.0).reshape(2, 3)
    r = a.copy(); r.flags.writeable = False
    yield "import", lambda: gpu_dlpack.from_dlpack(a.__dlpack__()).tolist()
    yield "import versioned", lambda: gpu_dlpack.from_dlpack(a.__dlpack__(max_version=(1, 0))).tolist()
    yield "inspect", lambda: gpu_dlpack.inspect(a.__dlpack__(max_version=(1, 0))).shape
    yield "export", lambda: gpu_dlpack.inspect(gpu_dlpack.export(a, max_version=(1, 0))).name
    yield "export read-only", lambda: gpu_dlpack.inspect(gpu_dlpack.export(r, max_version=(1, 0))).flags
    yield "adapt", lambda: gpu_dlpack.inspect(gpu_dlpack.export(gpu_dlpack.wrap(a.__dlpack__()),
                                                                max_version=(1, 0))).name
    yield "legacy of versioned", lambda: gpu_dlpack.inspect(gpu_dlpack.export(a.__dlpack__(max_version=(1, 0)))).name
    yield "copy", lambda: gpu_dlpack.from_dlpack(gpu_dlpack.export(r, max_version=(0, 8), min_version=(0, 8),
                                                                   copy=True)).tolist()
    yield "consumed", lambda: (lambda c: (gpu_dlpack.from_dlpack(c), gpu_dlpack.from_dlpack(c)))(a.__dlpack__())
    yield "torch", lambda: torch.from_dlpack(gpu_dlpack.wrap(a)).tolist()
    yield "from torch", lambda: gpu_dlpack.from_dlpack(torch.arange(3.0)).tolist()
    yield "array interface", lambda: np.asarray(gpu_dlpack.wrap(a.__dlpack__())).tolist()
    yield "from_pointer", lambda: np.from_dlpack(gpu_dlpack.from_pointer(a.ctypes.data, (3,), np.float64)).tolist()
    yield "wrap read-only", lambda: gpu_dlpack.inspect(gpu_dlpack.wrap(a, readonly=True).__dlpack__(
        max_version=(1, 0))).read_only


for name, call in exchanges():
    try:
        got = call()
    except Exception as exc:
        got = f"{type(exc).__name__}: {exc}"
    print(json.dumps([name, got], default=str))
"""


@pytest.mark.parametrize("before, after", [("ints", "none"), ("none", "ints"), ("addresses", "ints"),
                                           ("ints", "addresses")])
def test_the_layer_calls_the_c_api_through_function_objects_of_its_own(before, after):
    # The layer set argtypes and restype on ctypes.pythonapi's shared
    # function objects, and so changed what every other library calls; any
    # library that set them its own way, after, changed what the layer
    # calls: ctypes.ArgumentError, AttributeError, a segmentation fault.
    pytest.importorskip("torch")
    clean = _child(HOSTILE, "none", "none")
    assert _child(HOSTILE, before, after) == clean
    assert clean[0] == ["left as the process set them", True]
