"""NumPy before 2.1 (the floor is ``numpy>=1.26``): its ``__dlpack__`` takes
no ``max_version``, ``dl_device`` or ``copy`` and makes legacy capsules only,
and its ``from_dlpack`` reads only those. gpu_dlpack builds and reads the
versioned capsules itself there (``_backends/_old_numpy.py``).

The first tests force that path on any NumPy (the capsules are checked by
gpu_dlpack, NumPy and PyTorch as consumers); the last ones run on the old
NumPy itself (scripts/test.sh runs the suite in an environment with the
floor version, ``.venv-numpy-floor``).
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import weakref

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack._backends import numpy as numpy_backend

from .helpers import OldProducer

OLD_NUMPY = not numpy_backend.VERSIONED_NUMPY


@pytest.fixture
def old_numpy(monkeypatch):
    """The NumPy backend as on NumPy < 2.1, whatever NumPy is installed."""
    monkeypatch.setattr(numpy_backend, "VERSIONED_NUMPY", False)


LAYOUTS = {
    "contiguous": lambda: np.arange(12.0).reshape(3, 4),
    "strided": lambda: np.arange(24.0).reshape(4, 6)[::2, 1::2],
    "negative strides": lambda: np.arange(12.0).reshape(3, 4)[::-1, ::-1],
    "fortran": lambda: np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    "0-d": lambda: np.array(7.5),
    "empty": lambda: np.zeros((0, 3)),
    "int8": lambda: np.arange(-5, 5, dtype=np.int8),
    "bool": lambda: np.array([True, False, True]),
    "complex64": lambda: np.arange(4, dtype=np.complex64) * 1j,
}


@pytest.mark.parametrize("make", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_a_versioned_export_is_built_zero_copy_and_reads_back(old_numpy, make):
    a = make()
    cap = gpu_dlpack.export(a, max_version=(1, 0))
    info = gpu_dlpack.inspect(cap)
    assert info.name == "dltensor_versioned" and info.version == gpu_dlpack.DLPACK_VERSION
    assert info.flags == 0
    assert info.shape == a.shape
    if a.size:
        assert info.data == a.ctypes.data
    if a.ndim:  # strides always (DLPack 1.2), in elements
        assert info.strides == tuple(s // a.itemsize for s in a.strides)
    b = gpu_dlpack.from_dlpack(cap)
    assert b.dtype == a.dtype and b.shape == a.shape
    np.testing.assert_array_equal(b, a)
    if a.size:
        assert b.ctypes.data == a.ctypes.data  # zero-copy both ways
        assert b.flags.writeable


def test_the_built_capsule_keeps_the_array_alive_and_frees_it_once(old_numpy):
    a = np.arange(5.0)
    ref = weakref.ref(a)
    before = sys.getrefcount(a)
    cap = gpu_dlpack.export(a, max_version=(1, 0))
    assert sys.getrefcount(a) == before + 1
    del a
    gc.collect()
    assert ref() is not None  # the capsule holds it
    del cap  # never consumed: the capsule's destructor calls the deleter
    gc.collect()
    assert ref() is None


def test_a_consumed_built_capsule_is_freed_with_the_array_it_became(old_numpy):
    a = np.arange(5.0)
    ref = weakref.ref(a)
    b = gpu_dlpack.from_dlpack(gpu_dlpack.export(a, max_version=(1, 0)))
    del a
    gc.collect()
    assert ref() is not None and b[4] == 4.0
    del b
    gc.collect()
    assert ref() is None


def test_read_only_data_exports_versioned_with_read_only_and_imports_read_only(old_numpy):
    a = np.arange(4.0)
    a.flags.writeable = False
    cap = gpu_dlpack.export(a, max_version=(1, 0))
    assert gpu_dlpack.inspect(cap).readonly
    b = gpu_dlpack.from_dlpack(cap)
    assert not b.flags.writeable and b.ctypes.data == a.ctypes.data
    with pytest.raises(BufferError, match="read-only"):
        gpu_dlpack.export(a)  # legacy cannot say read-only
    assert gpu_dlpack.inspect(gpu_dlpack.export(a, copy=True)).name == "dltensor"


def test_copy_true_copies_and_says_so(old_numpy):
    a = np.arange(4.0)
    cap = gpu_dlpack.export(a, max_version=(1, 0), copy=True)
    info = gpu_dlpack.inspect(cap)
    assert info.is_copied and info.data != a.ctypes.data
    legacy = gpu_dlpack.export(a, copy=True)
    assert gpu_dlpack.inspect(legacy).data != a.ctypes.data
    np.testing.assert_array_equal(gpu_dlpack.from_dlpack(legacy), a)


def test_wrap_serves_a_versioned_consumer(old_numpy):
    a = np.arange(6.0)
    cap = gpu_dlpack.wrap(a).__dlpack__(max_version=(1, 0))
    assert gpu_dlpack.inspect(cap).name == "dltensor_versioned"
    assert gpu_dlpack.from_dlpack(cap).ctypes.data == a.ctypes.data


def test_pytorch_reads_the_built_capsule_zero_copy(old_numpy, torch):
    a = np.arange(12.0).reshape(3, 4)[:, ::2]
    t = torch.from_dlpack(gpu_dlpack.wrap(a))
    assert t.data_ptr() == a.ctypes.data and t.stride() == (4, 2)
    assert t.tolist() == a.tolist()


def test_a_torch_tensor_imports_writeable_and_zero_copy(old_numpy, torch, monkeypatch):
    # Not through NumPy's own from_dlpack, which asks for a legacy capsule
    # (and so makes a read-only array) before NumPy 2.1.
    from gpu_dlpack import _import

    sent = []
    monkeypatch.setattr(_import, "_np_from_dlpack", lambda x: sent.append(x) or np.from_dlpack(x))
    t = torch.arange(4.0)
    for a in (gpu_dlpack.from_dlpack(t), _import.host_capsule(t)):  # the host capsule: the core may take t first
        assert a.flags.writeable and a.ctypes.data == t.data_ptr()
    assert sent == []


def test_numpy_reads_the_built_capsule(old_numpy):
    # NumPy 2.1+ as the consumer of the capsule gpu_dlpack built.
    if OLD_NUMPY:
        pytest.skip("this NumPy reads no versioned capsule")
    a = np.arange(6.0)
    b = np.from_dlpack(gpu_dlpack.wrap(a))
    assert b.ctypes.data == a.ctypes.data


def test_ml_dtypes_travel_on_the_built_capsule(old_numpy):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.arange(4).astype(ml_dtypes.bfloat16)
    cap = gpu_dlpack.export(a, max_version=(1, 0))
    assert gpu_dlpack.inspect(cap).dl_dtype == (4, 16, 1)
    b = gpu_dlpack.from_dlpack(cap)
    assert b.dtype == a.dtype and b.ctypes.data == a.ctypes.data


def test_strides_in_part_of_an_element_are_refused(old_numpy):
    field = np.zeros(5, dtype=[("i", np.int32), ("c", np.int8)])["i"]
    with pytest.raises(BufferError, match="not multiples of the item size"):
        gpu_dlpack.export(field, max_version=(1, 0))


def test_an_old_producer_is_still_asked_without_the_new_keywords():
    # NumPy 1.26's ndarray and NumPy's own test class OldDLPack: __dlpack__
    # takes only stream.
    class OldDLPack(np.ndarray):
        def __dlpack__(self, stream=None):
            return super().__dlpack__(stream=None)

    a = np.arange(5.0)
    sub = a.view(OldDLPack)
    cap = gpu_dlpack.export(sub, max_version=(1, 0))
    info = gpu_dlpack.inspect(cap)
    assert info.name == "dltensor_versioned" and info.readonly  # a legacy producer cannot say
    assert gpu_dlpack.from_dlpack(cap).ctypes.data == a.ctypes.data
    assert gpu_dlpack.inspect(gpu_dlpack.wrap(OldProducer(a)).__dlpack__(max_version=(1, 0))).versioned


def test_a_handed_over_capsule_dropped_unconsumed_is_freed_without_numpys_destructor():
    # A raw capsule given to export moves to a capsule of the layer's; NumPy
    # before 2.1 lends no versioned destructor for it: the core's frees it.
    import ctypes

    from gpu_dlpack import _capsule

    from .capsules import make

    cap, rec = make(np.arange(4.0))
    out = gpu_dlpack.export(cap, max_version=(1, 0))
    get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object)(("PyCapsule_GetDestructor", ctypes.pythonapi))
    assert get(out) == _capsule.OWNING_DESTRUCTORS[True]
    assert rec.calls == 0
    del out
    gc.collect()
    assert rec.calls == 1


# -- on the old NumPy itself ---------------------------------------------------


@pytest.mark.skipif(not OLD_NUMPY, reason="this NumPy makes versioned capsules itself (2.1+)")
def test_this_numpy_is_old_and_every_exchange_works():
    a = np.arange(6.0)
    with pytest.raises(TypeError):
        a.__dlpack__(max_version=(1, 0))
    cap = gpu_dlpack.export(a, max_version=(1, 0))
    assert gpu_dlpack.inspect(cap).versioned
    assert gpu_dlpack.from_dlpack(cap).ctypes.data == a.ctypes.data
    assert gpu_dlpack.from_dlpack(gpu_dlpack.wrap(a)).ctypes.data == a.ctypes.data
    assert np.from_dlpack(gpu_dlpack.wrap(a)).ctypes.data == a.ctypes.data  # asks legacy


@pytest.mark.skipif(not OLD_NUMPY, reason="this NumPy makes versioned capsules itself (2.1+)")
def test_the_doctor_sees_the_old_numpy_and_the_demo_passes():
    done = subprocess.run([sys.executable, "-m", "gpu_dlpack", "doctor", "--json"],
                          capture_output=True, text=True, timeout=300)
    report = json.loads(done.stdout)
    (row,) = [r for r in report["libraries"] if r["name"] == "numpy"]
    assert row["version"] == np.__version__
    assert row["producer"]["keywords"] == {"stream": True, "max_version": False, "dl_device": False, "copy": False}
    assert "max_version" in " ".join(f["text"] if isinstance(f, dict) and "text" in f else json.dumps(f)
                                     for f in report["findings"])
    assert done.returncode == report["exit_status"] == 0
    demo = subprocess.run([sys.executable, "-m", "gpu_dlpack", "demo"], capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stdout + demo.stderr
