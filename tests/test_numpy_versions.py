"""What the NumPy releases ``numpy>=1.26`` admits do differently, and the
layer makes the same of on each.

NumPy 2.1 to 2.3 leave a C-contiguous array's strides out (NULL) of the
versioned capsules they make, as DLPack allowed before 1.2; the layer hands
those capsules on labelled DLPACK_VERSION (1.2), which requires strides for
``ndim > 0``. These tests fail there unless the layer gives them their
strides (scripts/test.sh runs the suite on NumPy 2.2 for this,
``.venv-numpy-2.2``); on other NumPy they check the same capsules.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _capsule
from gpu_dlpack._backends import numpy as numpy_backend

from . import capsules

NUMPY = np.lib.NumpyVersion(np.__version__)
LEAVES_STRIDES_OUT = "2.1.0" <= NUMPY < "2.4.0"  # numpy/_core/src/multiarray/dlpack.c

SHAPES = [(2, 3), (5,), (1,), (0, 3), (4, 1, 2)]


def _elements(a):
    return tuple(s // a.itemsize for s in a.strides)


def _carries_its_strides(cap, a, zero_copy=True):
    info = gpu_dlpack.inspect(cap)
    assert info.versioned and info.version == gpu_dlpack.DLPACK_VERSION
    assert info.shape == a.shape
    assert info.strides is not None and len(info.strides) == a.ndim  # DLPack 1.2: strides when ndim > 0
    if a.size:  # an empty array's strides say nothing (a copy of one may have any)
        assert info.strides == _elements(np.ascontiguousarray(a))
    back = gpu_dlpack.from_dlpack(cap)
    assert back.shape == a.shape and back.dtype == a.dtype
    np.testing.assert_array_equal(back, a)
    if a.size:
        assert (back.ctypes.data == a.ctypes.data) is zero_copy


WAYS = {
    "export": lambda a: gpu_dlpack.export(a, max_version=(1, 0)),
    "export, asked for 1.2": lambda a: gpu_dlpack.export(a, max_version=(1, 2)),
    "wrap": lambda a: gpu_dlpack.wrap(a).__dlpack__(max_version=(1, 0)),
    "readonly wrap": lambda a: gpu_dlpack.wrap(a, readonly=True).__dlpack__(max_version=(1, 0)),
    "dl_device cpu": lambda a: gpu_dlpack.export(a, max_version=(1, 0), dl_device=(1, 0)),
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("way", WAYS.values(), ids=WAYS.keys())
def test_every_versioned_capsule_of_a_c_contiguous_array_carries_its_strides(way, shape):
    a = np.arange(float(np.prod(shape))).reshape(shape)
    _carries_its_strides(way(a), a)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_a_read_only_array_and_a_copy_carry_their_strides(shape):
    a = np.arange(float(np.prod(shape))).reshape(shape)
    ro = a.view()
    ro.flags.writeable = False
    cap = gpu_dlpack.export(ro, max_version=(1, 0))
    assert gpu_dlpack.inspect(cap).readonly
    _carries_its_strides(cap, ro)
    copied = gpu_dlpack.export(a, max_version=(1, 0), copy=True)
    assert gpu_dlpack.inspect(copied).is_copied
    _carries_its_strides(copied, a, zero_copy=False)


def test_a_dtype_numpy_does_not_describe_carries_its_strides(ml_dtypes):
    a = np.arange(6.0).astype(ml_dtypes.bfloat16).reshape(2, 3)
    cap = gpu_dlpack.export(a, max_version=(1, 0))
    assert gpu_dlpack.inspect(cap).dl_dtype == (4, 16, 1)
    _carries_its_strides(cap, a)


def test_a_capsule_rebuilt_through_numpy_carries_its_strides():
    # A host producer numbering its CPU device: NumPy imports and exports again.
    a = np.arange(6.0).reshape(2, 3)
    cap, rec = capsules.make(a, device=(1, 5), null_strides=True)
    _carries_its_strides(gpu_dlpack.export(capsules.Producer(cap), max_version=(1, 0)), a)


def test_a_numpys_own_versioned_capsule_is_relabelled_only_with_its_strides():
    a = np.arange(6.0).reshape(2, 3)
    try:
        own = gpu_dlpack.inspect(a.__dlpack__(max_version=(1, 0)))
    except TypeError:  # NumPy before 2.1: legacy capsules only
        assert not numpy_backend.VERSIONED_NUMPY and not numpy_backend.STRIDES_AFTER_SHAPE
        return
    assert (own.strides is None) is LEAVES_STRIDES_OUT
    assert numpy_backend.STRIDES_AFTER_SHAPE is LEAVES_STRIDES_OUT
    assert numpy_backend.VERSIONED_NUMPY
    _carries_its_strides(gpu_dlpack.export(a, max_version=(1, 0)), a)


@pytest.mark.parametrize("versioned", [False, True])
def test_a_capsule_numpy_refuses_is_refused_in_the_layers_words_on_every_numpy(versioned):
    # NumPy reads no ROCm memory: before 2.5 it raises RuntimeError, from 2.5 BufferError.
    if versioned and not numpy_backend.VERSIONED_NUMPY:
        pytest.skip("NumPy before 2.1 reads no versioned capsule: the layer reads them itself")
    a = np.arange(6.0)
    cap = gpu_dlpack.export(a, max_version=(1, 0) if versioned else None)
    _capsule.set_device(cap, 10, 0)
    with pytest.raises(BufferError, match=r"^NumPy could not import the capsule: ") as refused:
        numpy_backend.consume(cap, versioned, _capsule.checked(cap, versioned)[1])
    assert isinstance(refused.value.__cause__, (BufferError, RuntimeError, TypeError, ValueError))


@pytest.mark.parametrize("readonly", [False, True], ids=["writeable", "read-only"])
@pytest.mark.parametrize("kw", [dict(copy=False), dict(device="cpu"), dict(device="cpu", copy=False)], ids=str)
def test_a_numpy_array_imports_zero_copy_and_as_writeable_as_it_is_on_every_numpy(kw, readonly):
    # NumPy before 2.1 makes only legacy capsules: one taken from it lands
    # read-only, and a read-only array makes none.
    a = np.arange(6.0).reshape(2, 3)
    a.flags.writeable = not readonly
    b = gpu_dlpack.from_dlpack(a, **kw)
    assert b.ctypes.data == a.ctypes.data and b.flags.writeable is not readonly
    np.testing.assert_array_equal(b, a)


_UNKNOWN_LAYOUT = """
import json, numpy as np
np.__version__ = "2.4.0"  # a NumPy that leaves strides out, as 2.1 to 2.3 do, but is not known here
import gpu_dlpack
from gpu_dlpack import _capsule
from gpu_dlpack._backends import numpy as numpy_backend
a = np.arange(6.0).reshape(2, 3)
cap = gpu_dlpack.export(a, max_version=(1, 0))
info = gpu_dlpack.inspect(cap)
back = gpu_dlpack.from_dlpack(cap)
print(json.dumps([numpy_backend.VERSIONED_NUMPY, numpy_backend.STRIDES_AFTER_SHAPE, info.version,
                  info.strides, back.tolist(), back.ctypes.data == a.ctypes.data]))
"""


@pytest.mark.skipif(not LEAVES_STRIDES_OUT, reason="this NumPy gives strides (or makes no versioned capsules)")
def test_a_numpy_leaving_strides_out_in_a_layout_not_known_gets_capsules_built_by_the_layer():
    done = subprocess.run([sys.executable, "-c", _UNKNOWN_LAYOUT], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ), cwd=os.path.dirname(os.path.dirname(__file__)))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [False, False, [1, 2], [3, 1], [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], True]
