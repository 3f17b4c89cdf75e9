"""inspect(): a frozen record of an unconsumed capsule, read without consuming it."""

import dataclasses

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import Device, inspect

from .helpers import capsule_name, managed


def test_inspect_reads_a_legacy_capsule_without_consuming_it():
    a = np.zeros((2, 3), np.float32)[:, ::2]
    cap = a.__dlpack__()
    info = inspect(cap)
    assert info.name == "dltensor" and not info.versioned and info.version is None
    assert info.flags == 0 and not info.readonly and not info.is_copied
    assert info.device == Device("cpu")
    assert info.dl_dtype == (2, 32, 1)
    assert info.shape == (2, 2) and info.strides == (3, 2)
    assert info.byte_offset == 0 and info.data == a.ctypes.data
    assert capsule_name(cap) == "dltensor"
    assert gpu_dlpack.from_dlpack(cap).tolist() == a.tolist()  # still importable


def test_inspect_reads_a_versioned_capsule(torch):
    cap = torch.arange(4, dtype=torch.int16).__dlpack__(max_version=(1, 0))
    info = inspect(cap)
    assert info.name == "dltensor_versioned" and info.versioned and info.version == (1, 3)
    assert info.dl_dtype == (0, 16, 1) and info.shape == (4,) and info.strides == (1,)
    ro = np.arange(3)
    ro.flags.writeable = False
    info = inspect(ro.__dlpack__(max_version=(1, 0), copy=True))
    assert info.is_copied and not info.readonly
    assert inspect(ro.__dlpack__(max_version=(1, 0))).readonly


def test_inspect_gives_none_strides_when_null():
    cap = np.arange(6).reshape(2, 3).__dlpack__()
    managed(cap).dl_tensor.strides = None
    assert inspect(cap).strides is None


def test_inspect_record_is_frozen():
    info = inspect(np.arange(3).__dlpack__())
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.shape = (4,)


def test_inspect_of_a_consumed_capsule_is_a_value_error():
    cap = np.arange(3).__dlpack__()
    np.from_dlpack(type("H", (), {"__dlpack__": lambda self, **k: cap, "__dlpack_device__": lambda self: (1, 0)})())
    with pytest.raises(ValueError, match="already consumed"):
        inspect(cap)


def test_inspect_of_a_non_capsule_is_a_type_error():
    says = r"^expected a PyCapsule named 'dltensor' or 'dltensor_versioned'; got ndarray\.$"
    with pytest.raises(TypeError, match=says):
        inspect(np.arange(3))


def test_inspect_does_not_read_the_tensor_of_an_unknown_major_version():
    cap = np.arange(3).__dlpack__(max_version=(1, 0))
    managed(cap).version.major = 2
    with pytest.raises(BufferError, match="2.0"):
        inspect(cap)


def test_inspect_reads_a_0d_tensor_with_or_without_strides(torch):
    # PyTorch points strides at an empty array for 0-d tensors, NumPy leaves it NULL.
    t = torch.tensor(2.5, dtype=torch.float64)
    for cap in (t.__dlpack__(), t.__dlpack__(max_version=(1, 0))):
        info = inspect(cap)
        assert info.shape == () and info.strides == () and info.ndim == 0
        assert info.data == t.data_ptr() and info.dl_dtype == (2, 64, 1)
    info = inspect(np.array(2.5).__dlpack__())
    assert info.shape == () and info.strides is None


# -- one vocabulary: the names ArrayView and wrap use --------------------------------

def test_a_capsule_record_says_readonly_and_ptr_as_a_view_does():
    r = np.arange(6.0)[2:]
    r.flags.writeable = False
    info = inspect(r.__dlpack__(max_version=(1, 0)))
    v = gpu_dlpack.view(r)
    assert info.readonly is v.readonly is True
    assert info.ptr == v.ptr == r.ctypes.data == info.data + info.byte_offset
    with pytest.warns(DeprecationWarning, match=r"^CapsuleInfo\.read_only is deprecated: read CapsuleInfo\.readonly"):
        assert info.read_only is True


def test_inspect_is_inspect_capsule_and_a_star_import_leaves_the_standard_librarys_inspect():
    import inspect as stdlib_inspect

    assert gpu_dlpack.inspect is gpu_dlpack.inspect_capsule and "inspect" in dir(gpu_dlpack)
    assert "inspect" not in gpu_dlpack.__all__ and "inspect_capsule" in gpu_dlpack.__all__
    names = {"inspect": stdlib_inspect}
    exec("from gpu_dlpack import *", names)
    assert names["inspect"] is stdlib_inspect and names["inspect_capsule"] is gpu_dlpack.inspect_capsule


def test_a_new_assigned_to_the_record_class_neither_crashes_nor_changes_the_record():
    # The core makes the record with CapsuleFields' own constructor: a
    # __new__ a user puts on the Python class (which may return anything)
    # is never what the core casts and writes into.
    from .interpreter import run_python

    done = run_python(
        "import numpy as np, gpu_dlpack as gd\n"
        "gd.CapsuleInfo.__new__ = lambda cls, *a, **k: None\n"
        "info = gd.inspect(np.arange(3.0).__dlpack__())\n"
        "print(type(info).__name__, info.shape, gd.view(np.arange(2.0).__dlpack__()).shape)\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["CapsuleInfo", "(3,)", "(2,)"]


def test_an_interrupt_while_inspect_makes_the_device_is_raised():
    # Only the layer's refusal of a pair as no device is read as "no device"
    # (and worded by the Python read); a KeyboardInterrupt raised while the
    # Device is made goes through, once, and the next read gives the record.
    from .interpreter import run_python

    done = run_python(
        "import sys, numpy as np, gpu_dlpack as gd\n"
        "from gpu_dlpack import _devices\n"
        "sys.path.insert(0, '.')\n"
        "from tests.capsules import make\n"
        "make_device = _devices.Device._make.__func__\n"
        "armed = [True]\n"
        "def interrupted(cls, dtype, index):\n"
        "    if armed and index == 40:\n"
        "        armed.pop()\n"
        "        raise KeyboardInterrupt\n"
        "    return make_device(cls, dtype, index)\n"
        "_devices.Device._make = classmethod(interrupted)\n"
        "cap, rec = make(device=(4, 40))\n"
        "try:\n"
        "    gd.inspect(cap)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
        "print(gd.inspect(cap).device)\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["interrupted", "opencl:40"]
