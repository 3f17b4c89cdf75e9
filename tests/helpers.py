"""Small helpers shared by the tests."""

import numpy as np


def pointer(x):
    """Address of the first element of a NumPy, PyTorch or JAX array."""
    if isinstance(x, np.ndarray):
        return x.ctypes.data
    if hasattr(x, "data_ptr"):
        return x.data_ptr()
    return x.unsafe_buffer_pointer()


class OldProducer:
    """A producer written before the 2023 revision of the standard: its
    ``__dlpack__`` takes only ``stream`` and gives a legacy capsule."""

    def __init__(self, array):
        self.array = array
        self.calls = []

    def __dlpack__(self, stream=None):
        self.calls.append({"stream": stream})
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class VersionedOnlyProducer:
    """A producer that answers every request with a versioned capsule, even a
    legacy consumer's (off-spec, seen in the wild)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self.array.__dlpack__(max_version=(1, 0))

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def aligned(shape, dtype=np.float64, align=64):
    """A C-contiguous array whose data is ``align``-byte aligned (JAX imports
    only aligned host memory without a copy)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(n + align, np.uint8)
    start = (-raw.ctypes.data) % align
    out = raw[start : start + n].view(dtype).reshape(shape)
    out[...] = np.arange(out.size, dtype=dtype).reshape(shape) if out.size else out
    return out


# -- the DLPack structs, written out here independently of gpu_dlpack -------

import ctypes


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_GetPointer.restype = ctypes.c_void_p
_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_GetName = ctypes.pythonapi.PyCapsule_GetName
_GetName.restype = ctypes.c_char_p
_GetName.argtypes = [ctypes.py_object]


def capsule_name(capsule):
    return _GetName(capsule).decode()


def managed(capsule):
    """The struct inside an unconsumed capsule, to read or alter in place."""
    name = _GetName(capsule)
    ptr = _GetPointer(capsule, name)
    if name == b"dltensor_versioned":
        return DLManagedTensorVersioned.from_address(ptr)
    return DLManagedTensor.from_address(ptr)
