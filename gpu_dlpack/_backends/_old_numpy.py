"""Versioned capsules for NumPy < 2.1, whose ``__dlpack__`` makes only legacy
``dltensor`` capsules (no ``max_version``, ``copy`` or ``dl_device``) and whose
``from_dlpack`` reads only those.

Export builds the ``DLManagedTensorVersioned`` here: one allocation holding
the struct, the shape and the strides, a reference to the array kept until
the consumer calls the deleter (or the unconsumed capsule dies): the
compiled core's deleter and destructor (``_capsule.counted_capsule`` takes the
reference and makes the capsule in one step). Import reads a versioned
capsule through the array interface, the capsule's owner kept alive by the
array's base. NumPy 2.1 and later never come here.

Floor: the backends, under ``numpy``.
"""

from __future__ import annotations

import ctypes
import struct

import numpy as np

from .. import _capsule, _errors

_HEAD = _capsule.VERSIONED_HEAD
_HEAD_SIZE = _HEAD.size  # 80

# The address of arrays without elements, never freed: an array over it may
# outlive this module at shutdown.
_no_elements = ctypes.create_string_buffer(64)
ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", ctypes.pythonapi))(_no_elements)
_NO_ELEMENTS = ctypes.addressof(_no_elements)


def _data_offset():
    """Where NumPy keeps an array's data pointer in the array object: first
    after the object header (PyArrayObject_fields, the same in NumPy 1.x
    and 2.x). Confirmed on a probe array; None where it does not hold."""
    probe = np.arange(3.0)
    at = object.__basicsize__
    if ctypes.c_void_p.from_address(id(probe) + at).value != probe.__array_interface__["data"][0]:
        return None
    return at


_DATA_AT = _data_offset()


def _data_of(arr) -> int:
    # Read from the array object: NumPy 1.x's __array_interface__ getter
    # dereferences NULL, and its ctypes getter returns an error, when one of
    # their own allocations fails.
    if _DATA_AT is None:
        return arr.__array_interface__["data"][0]
    return ctypes.c_void_p.from_address(id(arr) + _DATA_AT).value or 0


def export_versioned(arr: np.ndarray, version_word: int, flags: int, code: int, bits: int):
    """A ``dltensor_versioned`` capsule over ``arr``'s memory (no copy)."""
    itemsize = arr.itemsize
    ndim = arr.ndim
    strides = []
    for n, s in zip(arr.shape, arr.strides):
        if s % itemsize and n != 1:  # the stride of a length-1 axis is never used
            raise _errors.unsupported_numpy_dtype(
                arr.dtype, f"the strides {arr.strides} are not multiples of the item size {itemsize} "
                "(DLPack counts strides in elements); export a copy, np.ascontiguousarray(x)"
            )
        strides.append(s // itemsize)
    data = _data_of(arr)
    mem = ctypes.create_string_buffer(_HEAD_SIZE + 8 + 16 * ndim)  # the struct, the core's count, the shape and strides
    ptr = ctypes.addressof(mem)
    shape_at = ptr + _HEAD_SIZE + 8
    strides_at = shape_at + 8 * ndim
    _HEAD.pack_into(
        # (No deleter yet: counted_capsule sets the core's.)
        mem, 0, version_word & 0xFFFFFFFF, version_word >> 32, 0, 0, flags,
        data, 1, 0, ndim, code, bits, 1,
        shape_at if ndim else 0, strides_at if ndim else 0, 0,
    )
    struct.pack_into(f"<{ndim}q{ndim}q", mem, _HEAD_SIZE + 8, *arr.shape, *strides)
    return _capsule.counted_capsule(ptr, (mem, arr), True)


def consume_versioned(capsule, dtype: np.dtype) -> np.ndarray:
    """A NumPy array over a checked versioned capsule of host memory,
    zero-copy, read-only when the capsule says READ_ONLY."""
    info = _capsule.read(capsule)
    strides = _capsule.byte_strides(info.strides, dtype.itemsize)
    owner = _capsule.take(capsule)
    interface = {
        "version": 3,
        "shape": info.shape,
        "typestr": dtype.str,
        "strides": strides,
        # No elements may come with no data pointer, which NumPy does not take.
        "data": (info.data + info.byte_offset or _NO_ELEMENTS, info.readonly),
    }
    if dtype.fields is None and dtype.str.startswith("|V"):
        interface["descr"] = [("", dtype.str)]
    return np.asarray(_capsule.Held(interface, owner))
