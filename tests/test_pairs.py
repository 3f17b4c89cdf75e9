"""Every ordered pair of the installed libraries (tests/pairs.py: the
arrays, the oracle, the example counts). The pairs that share a process run
here; those of TensorFlow and of PaddlePaddle, which have crashed in one
process, each run in an interpreter of its own (tests/pairs_apart.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from . import pairs as P
from .figures import counter_fixture
from .interpreter import ROOT

cases = counter_fixture("property cases generated: pairs")

# The environments of the claimed CPythons have every peer (the pairs run
# in each; off the main interpreter with fewer examples a pair,
# scripts/matrix.sh); the NumPy floor's has none but NumPy.
pytestmark = pytest.mark.skipif(not P.installed("tensorflow"), reason=(
    "the pairs run in the environments of the claimed CPythons, which have every peer (TensorFlow among them)"))


def pair_test(selected):
    @pytest.mark.parametrize(("producer", "consumer"), selected, ids=[f"{p}-{c}" for p, c in selected])
    @P.pair_settings()
    @given(data=st.data(), seed=st.integers(0, 2**32 - 1), path=st.sampled_from(["convert", "wrap"]),
           copy=st.sampled_from([None, True, False]))
    def test_a_pair_keeps_values_or_refuses_with_a_remedy(cases, producer, consumer, data, seed, path, copy):
        name = data.draw(st.sampled_from(P.DTYPES[producer]), label="dtype")
        layout = data.draw(P.layouts(P.LAYOUTS.get(producer, "compact")), label="layout")
        P.check(cases, producer, consumer, path, name, layout, seed, copy)

    return test_a_pair_keeps_values_or_refuses_with_a_remedy


test_pairs_in_this_process = pair_test(P.pairs() or [pytest.param("numpy", "numpy", marks=pytest.mark.skip)])


@pytest.mark.parametrize("library", ["tensorflow", "paddle"])
def test_pairs_of_a_peer_kept_apart(cases, library):
    if not P.installed(library):
        pytest.skip(f"{library} is not installed")
    env = dict(os.environ, GPU_DLPACK_PAIRS_APART=library,
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # What other tests leave set is not this run's: x64 is chosen per pair.
    for name in ("JAX_ENABLE_X64", "JAX_PLATFORMS"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.join("tests", "pairs_apart.py")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    out = done.stdout.strip().splitlines()
    cases.notes.extend(f"({library}, apart) {line.split('] ', 1)[1]}" for line in out
                       if line.startswith("[property cases generated"))
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-3000:]
    assert out and " passed" in out[-1] and " failed" not in out[-1], out[-1:]


@pytest.mark.parametrize("case", ["length 1", "empty"])
def test_mlx_gets_a_copy_of_a_negative_stride_on_an_axis_not_walked(mx, case):
    # MLX refuses any negative stride, even on an axis of length 1 or in an
    # empty array, where the layer's walked-axes test sees none (found by
    # the pairs): its row "negative-strides-anywhere".
    import numpy as np

    import gpu_dlpack

    a = {"length 1": np.arange(1, dtype=np.float32)[::-1],  # strides (-4,)
         "empty": np.zeros((1, 2), np.float32)[::-1][:, :0]}[case]  # strides (-8, 4)
    assert min(a.strides) < 0
    got = gpu_dlpack.convert(a, "mlx.core", report=True)
    assert np.array(got.array).tobytes() == a.tobytes() and np.array(got.array).shape == a.shape
    assert "negative-strides-anywhere" in got.faults
    with pytest.raises(gpu_dlpack.CopyRequiredError):
        gpu_dlpack.convert(a, "mlx.core", copy=False)


# Freed in this order, Paddle 3.3.1 deadlocks (PaddleDeleterManager's lock
# taken again inside itself): a tensor it imported from a tensor it had
# imported, the source freed first. In a child process, which the deadlock
# would hang.
_PADDLE_REIMPORT = """
import sys, numpy as np, paddle, gpu_dlpack
a = paddle.from_dlpack(np.arange(5, dtype=np.uint32))
done = gpu_dlpack.convert(a, "paddle", copy={copy}, report=True)
b = done.array
print(b.data_ptr() == a.data_ptr(), b.numpy().tolist(), done.copied, list(done.faults), flush=True)
del done, a
del b
print("freed", flush=True)
"""


@pytest.mark.parametrize("copy", [None, False, True])
def test_paddle_to_paddle_never_reimports_what_paddle_cannot_free(copy):
    if not P.installed("paddle"):
        pytest.skip("paddle is not installed")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    try:
        done = subprocess.run([sys.executable, "-c", _PADDLE_REIMPORT.format(copy=copy)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("Paddle deadlocked freeing a re-import of its own import")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.split("\n")
    # copy=True goes by DLPack: the copy, apart from the source, frees alone.
    shared = copy is not True
    assert lines[0] == f"{shared} [0, 1, 2, 3, 4] {not shared} {['nested-import-deadlock'] if shared else []}", lines
    assert lines[1] == "freed"


@pytest.mark.parametrize("copy", [True, False])
@pytest.mark.parametrize("readonly", [False, True])
def test_a_numpy_array_of_an_ml_dtypes_dtype_imports_with_copy_asked(ml_dtypes, copy, readonly):
    # NumPy before 2.5 exports none of ml_dtypes' dtypes; from_dlpack asked
    # for copy=True/False used to ask NumPy's __dlpack__ and pass on its
    # BufferError (copy=None took the layer's own path). Found by the pairs.
    import numpy as np

    import gpu_dlpack

    a = np.arange(4.0).astype(ml_dtypes.bfloat16)
    a.flags.writeable = not readonly
    got = gpu_dlpack.from_dlpack(a, copy=copy)
    assert got.dtype == a.dtype and got.tobytes() == a.tobytes()
    assert (got.ctypes.data == a.ctypes.data) is (not copy)
    assert got.flags.writeable is (copy or not readonly)
    done = gpu_dlpack.convert(a, "numpy", copy=copy)
    assert done.dtype == a.dtype and done.tobytes() == a.tobytes()
