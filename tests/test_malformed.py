"""Malformed capsules, built by hand (tests/capsules.py), fed to every entry
point: ``from_dlpack`` (raw capsule, and a producer returning it),
``inspect``, and ``export``/``wrap`` of a producer returning it.

Rules checked:
- each refusal is a clear exception of the standard's type (BufferError,
  TypeError or ValueError), never a crash;
- the deleter runs exactly once over the capsule's life, whoever ran it;
- once a capsule with a valid name is handed to ``from_dlpack``, any refusal
  discards it at once (renamed ``used_*``, deleter called before the
  exception reaches the caller);
- ``inspect`` never takes ownership: it reads, or refuses to read.
"""

import datetime
import gc
import re

import numpy as np
import pytest

import gpu_dlpack

from . import capsules
from .capsules import Producer, capsule_name, make
from .figures import counter_fixture
from .helpers import gpu_arange
from .interpreter import run_python

fed = counter_fixture("malformed capsules fed")

STANDARD = (BufferError, TypeError, ValueError)

# name -> keyword arguments of capsules.make. Each is refused by every import
# and every export.
MALFORMED = {
    "versioned major 0": dict(version=(0, 8)),
    "versioned major 2": dict(version=(2, 0)),
    "versioned major 2, NULL deleter": dict(version=(2, 0), deleter=False),
    "ndim -1": dict(ndim=-1),
    "ndim -2**31": dict(ndim=-(2**31)),
    "ndim 65": dict(ndim=65),
    "ndim 2**31-1": dict(ndim=2**31 - 1),
    "NULL shape, ndim 1": dict(null_shape=True),
    "NULL shape, ndim 3": dict(array=np.zeros((2, 3, 4)), null_shape=True),
    "legacy NULL shape": dict(versioned=False, null_shape=True),
    "float bits 12": dict(dtype=(2, 12, 1)),
    "float bits 0": dict(dtype=(2, 0, 1)),
    "int bits 7": dict(dtype=(0, 7, 1)),
    "uint bits 24": dict(dtype=(1, 24, 1)),
    "bool bits 1": dict(dtype=(6, 1, 1)),
    "bfloat bits 8": dict(dtype=(4, 8, 1)),
    "legacy float bits 12": dict(versioned=False, dtype=(2, 12, 1)),
    "lanes 2": dict(dtype=(2, 32, 2)),
    "lanes 0": dict(dtype=(2, 64, 0)),
    "lanes 65535": dict(dtype=(2, 64, 65535)),
    "legacy lanes 4": dict(versioned=False, dtype=(2, 16, 4)),
    "opaque handle code 3": dict(dtype=(3, 64, 1)),
    "bcomplex code 18": dict(dtype=(18, 32, 1)),
    "code 19": dict(dtype=(19, 8, 1)),
    "code 99": dict(dtype=(99, 64, 1)),
    "code 255": dict(dtype=(255, 64, 1)),
    "legacy code 42": dict(versioned=False, dtype=(42, 64, 1)),
    "device type 0": dict(device=(0, 0)),
    "device type -1": dict(device=(-1, 0)),
    "device type -2**31": dict(device=(-(2**31), 0)),
    "device id -1": dict(device=(1, -1)),
    "NULL data, 6 elements": dict(data=0),
    "NULL data, shape (2, 3)": dict(array=np.zeros((2, 3)), data=0),
    "legacy NULL data": dict(versioned=False, data=0),
    # A 0-d tensor has one element: NULL data is no array (NumPy would
    # allocate a fresh one, or, with a byte_offset, point at that address).
    "0-d, NULL data": dict(array=np.array(3.0), data=0),
    "0-d, NULL data, byte_offset 4096": dict(array=np.array(3.0), data=0, byte_offset=4096),
    "legacy 0-d, NULL data": dict(array=np.array(3.0), versioned=False, data=0),
    # Extents that multiply past an int64 are malformed whatever one of
    # them is (torch counts them and fails after running the deleter).
    "shape (2**62, 4, 0)": dict(array=np.zeros((1, 1, 0)), shape=(2**62, 4, 0), strides=(4, 1, 1)),
    "legacy shape (2**62, 4, 0), NULL strides": dict(
        array=np.zeros((1, 1, 0)), versioned=False, shape=(2**62, 4, 0), null_strides=True),
}

# Well-formed capsules that an import on this machine cannot take (the
# memory is on a device with no backend here, or the shape is impossible).
# Every device type from 1 up is a device: DLPack adds types within a
# version (TPU, TPU_HOST and ASCEND came with the minor version unchanged),
# and one dlpack.h here does not name yet is named by its number.
UNREACHABLE = {
    "OpenCL memory": dict(device=(4, 0)),
    "Vulkan memory": dict(device=(7, 0)),
    "Metal memory": dict(device=(8, 0)),
    "TPU memory": dict(device=(19, 0)),
    "TPU host memory": dict(device=(20, 1)),
    "Ascend memory": dict(device=(21, 3)),
    "device type 5": dict(device=(5, 0)),
    "legacy device type 6": dict(versioned=False, device=(6, 0)),
    "device type 40": dict(device=(40, 0)),
    "device type 2**31-1": dict(device=(2**31 - 1, 2**31 - 1)),
    "negative shape": dict(shape=(-6,)),
}

# What the import of each UNREACHABLE capsule says: the device, and that
# only the array's own library reaches it (no CuPy would help).
_ELSEWHERE = (": gpu_dlpack moves the memory of the CPU and of CUDA and ROCm GPUs only. Ask the array's own "
              "library for a copy on the host")
UNREACHABLE_SAYS = {
    "OpenCL memory": "opencl:0" + _ELSEWHERE,
    "Vulkan memory": "vulkan:0" + _ELSEWHERE,
    "Metal memory": "metal:0" + _ELSEWHERE,
    "TPU memory": "tpu:0" + _ELSEWHERE,
    "TPU host memory": "tpu_host:1" + _ELSEWHERE,
    "Ascend memory": "ascend:3" + _ELSEWHERE,
    "device type 5": "5:0" + _ELSEWHERE,
    "legacy device type 6": "6:0" + _ELSEWHERE,
    "device type 40": "40:0" + _ELSEWHERE,
    "device type 2**31-1": "2147483647:2147483647" + _ELSEWHERE,
}


def _collect():
    """Free what only a cycle still holds (an exception's traceback): a
    young-generation collection, then a full one (about 70 ms with torch and
    JAX loaded) only if some hand-made tensor is still waiting."""
    gc.collect(1)
    # A record whose deleter is NULL waits for nothing (its producer keeps the
    # memory): only those with a deleter still to run call for a full pass.
    if any(r.calls == 0 and r.struct.deleter for r in list(capsules.live.values())):
        gc.collect()


@pytest.fixture(autouse=True)
def no_stray_deleter_calls():
    before = capsules.stray_calls
    yield
    gc.collect(1)
    assert capsules.stray_calls == before, "a deleter ran on a tensor already freed"


def _used(versioned):
    return "used_dltensor_versioned" if versioned else "used_dltensor"


def _says_malformed(what):
    return "^" + re.escape(f"malformed DLPack tensor: {what}.") + "$"


def _says_dtype(code, bits, lanes, why):
    return "^" + re.escape(f"cannot exchange DLPack dtype (code={code}, bits={bits}, lanes={lanes}): {why}.") + "$"


def _says_major(major):
    return "^" + re.escape(f"the producer gave a DLPack {major}.x capsule; gpu_dlpack reads major version 1 only.")


_NO_NUMPY_TYPE = "NumPy has no such type"
_VECTOR = "vector types (lanes != 1) have no NumPy equivalent"
_NO_CODE = "the code is not a DLPack dtype code"

# What the import of each MALFORMED capsule says, in full: the field that is
# wrong and its value.
IMPORT_SAYS = {
    "versioned major 0": _says_major(0),
    "versioned major 2": _says_major(2),
    "versioned major 2, NULL deleter": _says_major(2),
    "ndim -1": _says_malformed("ndim=-1"),
    "ndim -2**31": _says_malformed("ndim=-2147483648"),
    "ndim 65": _says_malformed("ndim=65"),
    "ndim 2**31-1": _says_malformed("ndim=2147483647"),
    "NULL shape, ndim 1": _says_malformed("shape is NULL with ndim=1"),
    "NULL shape, ndim 3": _says_malformed("shape is NULL with ndim=3"),
    "legacy NULL shape": _says_malformed("shape is NULL with ndim=1"),
    "float bits 12": _says_dtype(2, 12, 1, _NO_NUMPY_TYPE),
    "float bits 0": _says_dtype(2, 0, 1, _NO_NUMPY_TYPE),
    "int bits 7": _says_dtype(0, 7, 1, _NO_NUMPY_TYPE),
    "uint bits 24": _says_dtype(1, 24, 1, _NO_NUMPY_TYPE),
    "bool bits 1": _says_dtype(6, 1, 1, _NO_NUMPY_TYPE),
    "bfloat bits 8": _says_dtype(4, 8, 1, _NO_NUMPY_TYPE),
    "legacy float bits 12": _says_dtype(2, 12, 1, _NO_NUMPY_TYPE),
    "lanes 2": _says_dtype(2, 32, 2, _VECTOR),
    "lanes 0": _says_dtype(2, 64, 0, _VECTOR),
    "lanes 65535": _says_dtype(2, 64, 65535, _VECTOR),
    "legacy lanes 4": _says_dtype(2, 16, 4, _VECTOR),
    "opaque handle code 3": _says_dtype(3, 64, 1, _NO_NUMPY_TYPE),
    "bcomplex code 18": _says_dtype(18, 32, 1, _NO_NUMPY_TYPE),
    "code 19": _says_dtype(19, 8, 1, _NO_CODE),
    "code 99": _says_dtype(99, 64, 1, _NO_CODE),
    "code 255": _says_dtype(255, 64, 1, _NO_CODE),
    "legacy code 42": _says_dtype(42, 64, 1, _NO_CODE),
    "device type 0": _says_malformed("no DLPack device is (device_type=0, device_id=0)"),
    "device type -1": _says_malformed("no DLPack device is (device_type=-1, device_id=0)"),
    "device type -2**31": _says_malformed("no DLPack device is (device_type=-2147483648, device_id=0)"),
    "device id -1": _says_malformed("no DLPack device is (device_type=1, device_id=-1)"),
    "NULL data, 6 elements": _says_malformed("data is NULL but the shape (6,) has elements"),
    "NULL data, shape (2, 3)": _says_malformed("data is NULL but the shape (2, 3) has elements"),
    "legacy NULL data": _says_malformed("data is NULL but the shape (6,) has elements"),
    "0-d, NULL data": _says_malformed("data is NULL but a 0-d tensor has one element"),
    "0-d, NULL data, byte_offset 4096": _says_malformed("data is NULL but a 0-d tensor has one element"),
    "legacy 0-d, NULL data": _says_malformed("data is NULL but a 0-d tensor has one element"),
    "shape (2**62, 4, 0)": _says_malformed(
        f"the extents other than 0 of the shape {(2**62, 4, 0)} of 8-byte elements multiply to more than "
        "2**63 - 1 bytes"),
    "legacy shape (2**62, 4, 0), NULL strides": _says_malformed(
        f"the extents other than 0 of the shape {(2**62, 4, 0)} of 8-byte elements multiply to more than "
        "2**63 - 1 bytes"),
}
assert IMPORT_SAYS.keys() == MALFORMED.keys()


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_import_of_a_malformed_capsule_raises_and_frees_it_at_once(case, fed):
    fed["from_dlpack(capsule)"] += 1
    kw = MALFORMED[case]
    cap, rec = make(**kw)
    versioned = kw.get("versioned", True)
    with pytest.raises(BufferError, match=IMPORT_SAYS[case]) as info:
        gpu_dlpack.from_dlpack(cap)
    assert rec.calls == (1 if kw.get("deleter", True) else 0)
    assert capsule_name(cap) == _used(versioned)
    del info
    del cap
    _collect()
    assert rec.calls == (1 if kw.get("deleter", True) else 0)


@pytest.mark.parametrize("case", UNREACHABLE, ids=list(UNREACHABLE))
def test_import_of_an_unreachable_capsule_raises_and_frees_it_at_once(case, fed):
    fed["from_dlpack(capsule)"] += 1
    cap, rec = make(**UNREACHABLE[case])
    says = UNREACHABLE_SAYS.get(case)
    with pytest.raises(BufferError, match=None if says is None else "^" + re.escape("no backend can hold an array on " + says)):
        gpu_dlpack.from_dlpack(cap)
    assert rec.calls == 1
    assert capsule_name(cap) == _used(UNREACHABLE[case].get("versioned", True))
    del cap
    _collect()
    assert rec.calls == 1


@pytest.mark.parametrize("case", {**MALFORMED, **UNREACHABLE}, ids=list({**MALFORMED, **UNREACHABLE}))
def test_import_from_a_producer_of_a_malformed_capsule_raises_and_frees_it(case, fed):
    fed["from_dlpack(producer)"] += 1
    kw = {**MALFORMED, **UNREACHABLE}[case]
    cap, rec = make(**kw)
    producer = Producer(cap)
    del cap
    with pytest.raises(BufferError):
        gpu_dlpack.from_dlpack(producer)
    _collect()
    assert rec.calls == (1 if kw.get("deleter", True) else 0)


@pytest.mark.parametrize("max_version", [None, (1, 0)], ids=["legacy", "versioned"])
@pytest.mark.parametrize("case", {**MALFORMED, **UNREACHABLE}, ids=list({**MALFORMED, **UNREACHABLE}))
def test_export_of_a_producer_of_a_malformed_capsule_raises_and_frees_it(case, max_version, fed):
    # The layer must never pass on, relabelled as its own, a capsule that it
    # could not read or that lies about its device or dtype.
    kw = {**MALFORMED, **UNREACHABLE}[case]
    fed["export(producer)"] += 1
    cap, rec = make(**kw)
    producer = Producer(cap)
    del cap
    with pytest.raises(BufferError):
        gpu_dlpack.export(producer, max_version=max_version)
    _collect()
    assert rec.calls == (1 if kw.get("deleter", True) else 0)


@pytest.mark.parametrize("case", ["versioned major 2", "lanes 2", "device type 0", "NULL data, 6 elements"])
def test_wrap_of_a_producer_of_a_malformed_capsule_refuses_each_consumer(case, fed):
    fed["wrap(producer)"] += 2
    cap, rec = make(**MALFORMED[case])
    wrapped = gpu_dlpack.wrap(Producer(cap))
    del cap
    with pytest.raises(BufferError):
        wrapped.__dlpack__(max_version=(1, 0))
    _collect()
    assert rec.calls == 1
    # A consumer library sees the same refusal, not a crash.
    cap, rec = make(**MALFORMED[case])
    wrapped = gpu_dlpack.wrap(Producer(cap))
    del cap
    with pytest.raises(BufferError):
        np.from_dlpack(wrapped)
    _collect()
    assert rec.calls == 1


def test_a_shape_whose_extents_overflow_is_never_handed_to_torch(torch, fed):
    # torch counts the extents of (2**62, 4, 0), overflows, and raises after
    # running the deleter of a capsule it did not rename: a capsule the
    # layer relayed would then free the tensor a second time.
    fed["wrap(producer)"] += 2
    for versioned in (True, False):
        cap, rec = make(np.zeros((1, 1, 0)), versioned=versioned, shape=(2**62, 4, 0), strides=(4, 1, 1))
        wrapped = gpu_dlpack.wrap(Producer(cap))
        del cap
        with pytest.raises(BufferError, match="extents other than 0 of the shape"):
            torch.from_dlpack(wrapped)
        _collect()
        assert rec.calls == 1


# What inspect and view refuse (the text the message must hold): what they
# cannot read without trusting a field they cannot check (a major version
# they do not know, ndim, a NULL shape, a device that is no DLPack device),
# and a layout no importer can hold, refused in the words of the import (a
# caller trusting the pointer read would read whatever is there). Every
# other field is shown as the producer wrote it: that is what inspect is for.
INSPECT_REFUSES = {
    "versioned major 0": "holds DLPack 0.8",
    "versioned major 2": "holds DLPack 2.0",
    "versioned major 2, NULL deleter": "holds DLPack 2.0",
    "ndim -1": "ndim=-1",
    "ndim -2**31": "ndim=-2147483648",
    "ndim 65": "ndim=65",
    "ndim 2**31-1": "ndim=2147483647",
    "NULL shape, ndim 1": "shape is NULL with ndim=1",
    "NULL shape, ndim 3": "shape is NULL with ndim=3",
    "legacy NULL shape": "shape is NULL with ndim=1",
    "device type 0": r"\(device_type=0, device_id=0\)",
    "device type -1": r"\(device_type=-1, device_id=0\)",
    "device type -2**31": r"\(device_type=-2147483648, device_id=0\)",
    "device id -1": r"\(device_type=1, device_id=-1\)",
    # the layout faults, each in the words of its import
    **{case: IMPORT_SAYS[case] for case in (
        "NULL data, 6 elements", "NULL data, shape (2, 3)", "legacy NULL data", "0-d, NULL data",
        "0-d, NULL data, byte_offset 4096", "legacy 0-d, NULL data", "shape (2**62, 4, 0)",
        "legacy shape (2**62, 4, 0), NULL strides")},
    "negative shape": _says_malformed("the shape (-6,) has a negative dimension"),
}


def _as_written(kw, rec):
    """What the hand-made capsule says, from the arguments it was made with."""
    array = rec.keep[0]
    versioned = kw.get("versioned", True)
    kind = {"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}[array.dtype.kind]
    return dict(
        name="dltensor_versioned" if versioned else "dltensor",
        versioned=versioned,
        version=kw.get("version", (1, 0)) if versioned else None,
        flags=kw.get("flags", 0) if versioned else 0,
        device=gpu_dlpack.Device(kw.get("device", (1, 0))),
        dl_dtype=kw.get("dtype", (kind, array.itemsize * 8, 1)),
        shape=tuple(kw.get("shape", array.shape)),
        byte_offset=kw.get("byte_offset", 0),
        data=0 if kw.get("data") == 0 else array.ctypes.data,
    )


@pytest.mark.parametrize("entry", ["inspect", "view"])
@pytest.mark.parametrize("case", {**MALFORMED, **UNREACHABLE}, ids=list({**MALFORMED, **UNREACHABLE}))
def test_inspect_of_a_malformed_capsule_reads_it_as_written_or_refuses_and_never_takes_it(case, entry, fed):
    fed[entry] += 1
    kw = {**MALFORMED, **UNREACHABLE}[case]
    cap, rec = make(**kw)
    read = {"inspect": gpu_dlpack.inspect, "view": gpu_dlpack.view}[entry]
    if case in INSPECT_REFUSES:
        with pytest.raises(BufferError, match=INSPECT_REFUSES[case]):
            read(cap)
    elif entry == "inspect":
        info = read(cap)
        shown = {field: getattr(info, field) for field in _as_written(kw, rec)}
        assert shown == _as_written(kw, rec)
    else:
        written = _as_written(kw, rec)
        v = read(cap)
        assert (v.ptr, v.shape, v.dl_dtype, v.device) == (
            written["data"] + written["byte_offset"], written["shape"], written["dl_dtype"], written["device"])
        del v  # it keeps the capsule (exporting_obj)
    assert rec.calls == 0
    assert capsule_name(cap) == ("dltensor_versioned" if kw.get("versioned", True) else "dltensor")
    del cap
    _collect()
    assert rec.calls == (1 if kw.get("deleter", True) else 0)


def test_the_most_dimensions_a_capsule_may_have_are_64():
    deep = np.zeros((1,) * 64)
    cap, rec = make(deep)
    assert gpu_dlpack.inspect(cap).ndim == 64
    arr = gpu_dlpack.from_dlpack(cap)
    assert arr.shape == (1,) * 64 and arr.ctypes.data == deep.ctypes.data
    del arr, cap
    _collect()
    assert rec.calls == 1


# -- the bounds of the address space ------------------------------------------
#
# Capsules of OpenCL memory (device (4, 0)): no byte of it is ever read here,
# so any address can be written. A layout the layer can hold passes the
# checks and is refused only for want of an OpenCL backend; one it cannot
# hold is refused as malformed, saying why. Each pair sits on either side of
# one bound.

_TOP = 2**64
_U8 = np.zeros(2, np.uint8)
_NO_BACKEND = "^no backend can hold an array on opencl:0"


def _reaches_outside(strides, shape):
    return _says_malformed(f"the strides {strides} of the shape {shape} reach outside the 64-bit address space")


LAYOUT_EDGES = {
    "2**63 - 1 bytes of uint8": (
        dict(array=_U8, shape=(2**63 - 1,), strides=(1,), data=4096), _NO_BACKEND),
    "2**63 - 1 bytes of uint8, NULL strides": (
        dict(array=_U8, shape=(2**63 - 1,), null_strides=True, data=4096), _NO_BACKEND),
    "2**63 bytes of uint8": (
        dict(array=_U8, shape=(2**62, 2), strides=(2, 1), data=4096),
        _says_malformed(f"the shape {(2**62, 2)} of 1-byte elements holds more than 2**63 - 1 bytes")),
    "2**63 - 8 bytes of float64": (
        dict(shape=(2**60 - 1,), strides=(1,), data=4096), _NO_BACKEND),
    "2**63 bytes of float64": (
        dict(shape=(2**60,), strides=(1,), data=4096),
        _says_malformed(f"the shape {(2**60,)} of 8-byte elements holds more than 2**63 - 1 bytes")),
    "2**63 bytes of float64, NULL strides": (
        dict(shape=(2**60,), null_strides=True, data=4096),
        _says_malformed(f"the shape {(2**60,)} of 8-byte elements holds more than 2**63 - 1 bytes")),
    "ending at the top of the address space": (
        dict(array=_U8, shape=(2,), strides=(1,), data=_TOP - 2), _NO_BACKEND),
    "one byte past the top": (
        dict(array=_U8, shape=(2,), strides=(1,), data=_TOP - 1), _reaches_outside((1,), (2,))),
    "float64 ending at the top": (
        dict(shape=(2,), strides=(1,), data=_TOP - 16), _NO_BACKEND),
    "float64 one element past the top": (
        dict(shape=(2,), strides=(1,), data=_TOP - 8), _reaches_outside((1,), (2,))),
    "byte_offset up to the top": (
        dict(array=_U8, shape=(1,), strides=(1,), data=_TOP - 4096, byte_offset=4095), _NO_BACKEND),
    "byte_offset past the top": (
        dict(array=_U8, shape=(1,), strides=(1,), data=_TOP - 4096, byte_offset=4096),
        _reaches_outside((1,), (1,))),
    "negative strides down to address 0": (
        dict(shape=(2,), strides=(-1,), data=8), _NO_BACKEND),
    "negative strides below address 0": (
        dict(shape=(3,), strides=(-1,), data=8), _reaches_outside((-1,), (3,))),
    "both ends, 2**63 - 1 bytes apart": (
        dict(array=_U8, shape=(2, 2), strides=(2**62 - 1, -(2**62 - 1)), data=2**62), _NO_BACKEND),
    "both ends, 2**63 bytes apart": (
        dict(array=_U8, shape=(2, 2), strides=(2**62 - 1, -(2**62)), data=2**62),
        _reaches_outside((2**62 - 1, -(2**62)), (2, 2))),
    # NULL strides are compact row-major: the same bounds hold.
    "byte_offset up to the top, NULL strides": (
        dict(array=_U8, shape=(2,), null_strides=True, data=_TOP - 4096, byte_offset=4094), _NO_BACKEND),
    "byte_offset past the top, NULL strides": (
        dict(array=_U8, shape=(2,), null_strides=True, data=_TOP - 4096, byte_offset=4095),
        _says_malformed(f"the shape (2,) at data {_TOP - 4096:#x} + byte_offset 4095 reaches past the end "
                        "of the 64-bit address space")),
    "0-d ending at the top": (
        dict(array=np.array(1, np.uint8), data=_TOP - 4096, byte_offset=4095), _NO_BACKEND),
    "0-d past the top": (
        dict(array=np.array(1, np.uint8), data=_TOP - 4096, byte_offset=4096), _reaches_outside((), ())),
    # A tensor without elements is checked as if each zero extent were one.
    "2**63 - 8 bytes of float64 beside a zero extent": (
        dict(shape=(2**60 - 1, 0), strides=(1, 1), data=4096), _NO_BACKEND),
    "2**63 bytes of float64 beside a zero extent": (
        dict(shape=(0, 2**60), strides=(1, 1), data=4096),
        _says_malformed(f"the extents other than 0 of the shape {(0, 2**60)} of 8-byte elements multiply to "
                        "more than 2**63 - 1 bytes")),
    "strides up to the top beside a zero extent": (
        dict(array=_U8, shape=(2, 0), strides=(2**63 - 4097, 1), data=4096), _NO_BACKEND),
    # A step is a byte stride to NumPy and CuPy, even where no extent takes it.
    "a step of 2**63 - 1 bytes on an extent of one": (
        dict(array=_U8, shape=(1,), strides=(2**63 - 1,), data=4096), _NO_BACKEND),
    "a step of -2**63 bytes on an extent of one": (
        dict(array=_U8, shape=(1,), strides=(-(2**63),), data=4096), _NO_BACKEND),
    "a step of 2**63 bytes on an extent of one": (
        dict(shape=(1,), strides=(2**60,), data=4096),
        _says_malformed(f"the strides {(2**60,)} of the shape (1,) are steps of 8-byte elements that no int64 "
                        "byte count holds")),
    "a step of -2**63 - 8 bytes beside a zero extent": (
        dict(shape=(0, 1), strides=(1, -(2**60) - 1), data=4096),
        _says_malformed(f"the strides {(1, -(2**60) - 1)} of the shape (0, 1) are steps of 8-byte elements "
                        "that no int64 byte count holds")),
    "strides past the top beside a zero extent": (
        dict(array=_U8, shape=(2, 0), strides=(2**63 - 1, 1), data=2**63), _reaches_outside((2**63 - 1, 1), (2, 0))),
}


@pytest.mark.parametrize("case", LAYOUT_EDGES, ids=list(LAYOUT_EDGES))
@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_the_layout_check_holds_at_each_bound_of_the_address_space(case, versioned):
    kw, says = LAYOUT_EDGES[case]
    cap, rec = make(**kw, device=(4, 0), versioned=versioned)
    # inspect and view read what an import holds and refuse, in its words,
    # what it refuses as malformed; neither takes the capsule.
    for read in (gpu_dlpack.inspect, gpu_dlpack.view):
        if says == _NO_BACKEND:
            assert read(cap).shape == kw["shape"] if "shape" in kw else read(cap).shape == ()
        else:
            with pytest.raises(BufferError, match=says):
                read(cap)
    assert rec.calls == 0 and capsule_name(cap) == ("dltensor_versioned" if versioned else "dltensor")
    with pytest.raises(BufferError, match=says):
        gpu_dlpack.from_dlpack(cap)
    assert rec.calls == 1
    assert capsule_name(cap) == _used(versioned)


# Where shape and strides lie, as (slots, shape_at, strides_at) of one int64
# array: each is read from its own pointer, wherever the producer put it.
# The other slots hold a stride no layout could use.
_APART = {
    "strides right after the shape (NumPy, PyTorch)": (16, 0, 8),
    "strides right before the shape": (24, 8, 0),
    "strides one slot after the shape": (17, 0, 9),
}


@pytest.mark.parametrize("where", _APART, ids=list(_APART))
def test_shape_and_strides_are_read_where_their_pointers_say(where):
    slots, shape_at, strides_at = _APART[where]
    x = np.arange(256.0).reshape((2,) * 8)[:, ::-1]
    cap, rec = make(x, together=(slots, shape_at, strides_at, 2**62))
    assert gpu_dlpack.inspect(cap).strides == tuple(s // 8 for s in x.strides)
    arr = gpu_dlpack.from_dlpack(cap)
    np.testing.assert_array_equal(arr, x)
    assert arr.ctypes.data == x.ctypes.data and arr.strides == x.strides
    del arr
    _collect()
    assert rec.calls == 1


# -- names -----------------------------------------------------------------

WRONG_NAMES = ["", "foo", "dltensor_v", "DLTENSOR", "dltensor\x01", "used_dltensorx", False]


# Plain ids: a node id must name its test again when passed back to pytest.
@pytest.mark.parametrize(
    "name", WRONG_NAMES, ids=["empty", "foo", "dltensor_v", "DLTENSOR", "dltensor+0x01", "used_dltensorx", "NULL"]
)
@pytest.mark.parametrize("entry", ["from_dlpack", "inspect", "export", "from_producer"])
def test_a_capsule_with_a_wrong_name_is_refused_and_left_to_its_owner(name, entry, fed):
    fed["wrong name, " + entry] += 1
    cap, rec = make(name=name)
    call = {
        "from_dlpack": lambda: gpu_dlpack.from_dlpack(cap),
        "inspect": lambda: gpu_dlpack.inspect(cap),
        "export": lambda: gpu_dlpack.export(Producer(cap), max_version=(1, 0)),
        "from_producer": lambda: gpu_dlpack.from_dlpack(Producer(cap)),
    }[entry]
    with pytest.raises(BufferError, match="named"):
        call()
    # Not a DLPack capsule: the layer must not touch it.
    assert rec.calls == 0
    assert capsule_name(cap) == (None if name is False else name)
    del call
    del cap
    _collect()
    assert rec.calls == 1


@pytest.mark.parametrize("entry", ["from_dlpack", "inspect", "export"])
def test_a_capsule_name_that_is_no_utf8_is_shown_with_replacement_characters(entry, fed):
    fed["wrong name, " + entry] += 1
    cap, rec = make(name=b"dltensor\xff\xfe")
    call = {
        "from_dlpack": lambda: gpu_dlpack.from_dlpack(cap),
        "inspect": lambda: gpu_dlpack.inspect(cap),
        "export": lambda: gpu_dlpack.export(Producer(cap), max_version=(1, 0)),
    }[entry]
    with pytest.raises(BufferError, match="this one is named 'dltensor\ufffd\ufffd'\\.$"):
        call()
    assert rec.calls == 0
    assert capsules._GetName(cap) == b"dltensor\xff\xfe"
    del call, cap
    _collect()
    assert rec.calls == 1


def test_a_capsule_that_is_not_dlpack_at_all_is_refused(fed):
    fed["foreign capsule"] += 3
    foreign = datetime.datetime_CAPI
    for call in (gpu_dlpack.from_dlpack, gpu_dlpack.inspect):
        with pytest.raises(BufferError, match="datetime.datetime_CAPI"):
            call(foreign)
    with pytest.raises(BufferError):
        gpu_dlpack.export(Producer(foreign))
    assert capsule_name(foreign) == "datetime.datetime_CAPI"
    assert datetime.datetime(2000, 1, 1).year == 2000  # still usable


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_a_consumed_capsule_is_refused_everywhere_and_freed_once(versioned, fed):
    fed["consumed capsule"] += 6
    cap, rec = make(np.arange(6.0), versioned=versioned)
    arr = gpu_dlpack.from_dlpack(cap)
    assert arr.tolist() == list(range(6))
    for call in (
        lambda: gpu_dlpack.from_dlpack(cap),
        lambda: gpu_dlpack.from_dlpack(cap, copy=True),
        lambda: gpu_dlpack.export(Producer(cap), max_version=(1, 0)),
        lambda: gpu_dlpack.from_dlpack(Producer(cap)),
        lambda: np.from_dlpack(gpu_dlpack.wrap(Producer(cap))),
    ):
        with pytest.raises(gpu_dlpack.ConsumedCapsuleError):
            call()
    with pytest.raises(ValueError, match=f"already consumed \\(its name is '{_used(versioned)}'\\)"):
        gpu_dlpack.inspect(cap)
    assert rec.calls == 0  # the array still uses the memory
    del arr
    _collect()
    assert rec.calls == 1
    del cap
    _collect()
    assert rec.calls == 1


def test_a_capsule_consumed_by_a_peer_is_refused(torch, fed):
    fed["consumed capsule"] += 1
    cap, rec = make(np.arange(4.0))
    t = torch.from_dlpack(cap)
    with pytest.raises(gpu_dlpack.ConsumedCapsuleError):
        gpu_dlpack.from_dlpack(cap)
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
    del t
    del cap
    _collect()
    assert rec.calls == 1


# -- what is well-formed passes --------------------------------------------

WELL_FORMED = {
    "versioned": dict(),
    "legacy": dict(versioned=False),
    "versioned 1.9": dict(version=(1, 9)),
    "NULL strides (before 1.2)": dict(array=np.arange(6.0).reshape(2, 3), null_strides=True),
    "NULL data, zero size": dict(array=np.zeros((0, 3)), data=0),
    "NULL deleter": dict(deleter=False),
    "0-d": dict(array=np.array(2.5, np.float32)),
    "byte_offset": dict(array=np.arange(8.0), shape=(6,), strides=(1,), byte_offset=16),
}


@pytest.mark.parametrize("case", WELL_FORMED, ids=list(WELL_FORMED))
def test_a_well_formed_hand_made_capsule_imports_and_is_freed_once(case):
    kw = dict(WELL_FORMED[case])
    kw.setdefault("array", np.arange(6.0))
    cap, rec = make(**kw)
    arr = gpu_dlpack.from_dlpack(cap)
    expected = kw["array"]
    if case == "byte_offset":
        expected = expected[2:]
    np.testing.assert_array_equal(arr, expected)
    if expected.size:
        assert arr.ctypes.data == expected.ctypes.data
    assert rec.calls == 0
    del arr
    _collect()
    if kw.get("deleter", True):
        assert rec.calls == 1
    else:
        assert rec.calls == 0
        capsules.live.pop(rec.address, None)  # the producer's own business
    del cap
    _collect()


@pytest.mark.parametrize("device_id", [1, 7])
@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_a_host_producer_may_number_its_cpu_device(device_id, max_version):
    # JAX with several CPU devices says (1, 0) in __dlpack_device__ and puts
    # its device number in the capsule: still host memory, still exported.
    x = np.arange(6.0)
    cap, rec = make(x, device=(1, device_id))
    out = gpu_dlpack.export(Producer(cap), max_version=max_version)
    del cap
    assert gpu_dlpack.inspect(out).data == x.ctypes.data
    arr = gpu_dlpack.from_dlpack(out)
    assert arr.ctypes.data == x.ctypes.data
    del arr, out
    _collect()
    assert rec.calls == 1


@pytest.mark.parametrize("copy", [None, True])
@pytest.mark.parametrize("max_version", [None, (1, 0)])
@pytest.mark.parametrize("given", ["capsule", "producer"])
def test_host_memory_numbered_by_its_producer_is_exported_by_numpy(given, max_version, copy):
    # The producer itself says (1, 5), in __dlpack_device__ or in the raw
    # capsule: still NumPy's memory for every rebuild (a legacy capsule of a
    # versioned one, a copy), labelled (1, 0) as the standard has it.
    x = np.arange(6.0)
    cap, rec = make(x, device=(1, 5))
    source = cap if given == "capsule" else Producer(cap, device=(1, 5))
    del cap
    out = gpu_dlpack.export(source, max_version=max_version, copy=copy)
    info = gpu_dlpack.inspect(out)
    assert info.versioned == (max_version is not None)
    assert (info.data == x.ctypes.data) == (copy is None)
    assert gpu_dlpack.from_dlpack(out).tolist() == x.tolist()
    del out, source
    _collect()
    assert rec.calls == 1


def test_a_wrapped_capsule_of_numbered_host_memory_reaches_each_consumer():
    x = np.arange(6.0)
    for consume in (np.from_dlpack, gpu_dlpack.from_dlpack, lambda w: w.__dlpack__(),
                    lambda w: w.__dlpack__(max_version=(1, 0))):
        cap, rec = make(x, device=(1, 5))
        out = consume(gpu_dlpack.wrap(cap))
        del cap
        if not isinstance(out, np.ndarray):
            out = gpu_dlpack.from_dlpack(out)
        assert out.tolist() == x.tolist() and out.ctypes.data == x.ctypes.data
        del out
        _collect()
        assert rec.calls == 1


def test_jax_arrays_on_a_cpu_device_other_than_0_exchange():
    pytest.importorskip("jax")
    # A real JAX with four CPU devices, in its own interpreter.
    code = (
        "import jax, jax.numpy as jnp, numpy as np, gpu_dlpack as g\n"
        "j = jax.device_put(jnp.arange(6.0), jax.devices()[2])\n"
        "assert g.inspect(j.__dlpack__()).device.index == 2\n"
        "for mv in (None, (1, 0)):\n"
        "    cap = g.export(j, max_version=mv, copy=mv is None)  # legacy: a copy (rule 5)\n"
        "    assert g.from_dlpack(cap).tolist() == list(range(6))\n"
        "assert g.from_dlpack(j).tolist() == list(range(6))\n"
        "print('ok')\n"
    )
    done = run_python(code, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


# -- the hand-made capsules themselves ------------------------------------------


def test_a_capsule_a_consumer_drops_with_its_error_pending_is_freed_once():
    # NumPy refuses a vector dtype and drops the capsule, its last
    # reference, with its exception still set: the capsule's destructor and
    # deleter run then, so they must be C that touches no Python state (a
    # Python callback swallows NumPy's error, frees nothing, and may leave a
    # lock taken for the next deleter to wait on for ever).
    code = (
        "import numpy as np\n"
        "from tests import capsules\n"
        "for i in range(3):\n"
        "    cap, rec = capsules.make(dtype=(2, 32, 2))\n"
        "    producer = capsules.Producer(cap)\n"
        "    del cap\n"
        "    try:\n"
        "        np.from_dlpack(producer)\n"
        "    except Exception as exc:\n"
        "        print(type(exc).__name__, rec.calls)\n"
        "cap, rec = capsules.make()\n"
        "del cap\n"
        "print('after', rec.calls, capsules.stray_calls)\n"
    )
    done = run_python(code, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.split("\n")
    assert [line.split()[1] for line in lines[:3]] == ["1", "1", "1"], done.stdout
    assert not any(line.startswith("SystemError") for line in lines), done.stdout
    assert lines[3] == "after 1 0", done.stdout


# -- on a GPU (public API only) ----------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize(
    "case",
    ["versioned major 2", "ndim -1", "NULL shape, ndim 1", "lanes 2", "code 99", "NULL data, 6 elements"],
)
def test_a_malformed_capsule_of_gpu_memory_is_refused_and_freed(case):
    import cupy

    d = gpu_arange(cupy, 6.0)
    kw = dict(MALFORMED[case], device=(2, 0))
    cap, rec = make(d.get(), **kw, **({} if "data" in kw else {"data": d.data.ptr}))
    with pytest.raises(BufferError):
        gpu_dlpack.from_dlpack(cap)
    assert rec.calls == 1
    del cap
    _collect()
    assert rec.calls == 1


@pytest.mark.gpu
def test_a_well_formed_capsule_of_gpu_memory_imports_zero_copy():
    import cupy

    d = gpu_arange(cupy, 6.0)
    cap, rec = make(d.get(), device=(2, 0), data=d.data.ptr)
    e = gpu_dlpack.from_dlpack(cap)
    assert isinstance(e, cupy.ndarray) and e.data.ptr == d.data.ptr
    assert cupy.asnumpy(e).tolist() == list(range(6))
    del e
    _collect()
    assert rec.calls == 1
