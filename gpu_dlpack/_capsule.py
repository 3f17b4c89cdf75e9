"""The DLPack capsule ABI: reading, patching and discarding the C structs
inside ``dltensor`` / ``dltensor_versioned`` PyCapsules (the LP64
layout of dlpack.h, little-endian: other interpreters are refused at import).

This is mechanism only. Nothing here decides whether an exchange may happen;
``_rules`` does. Capsules are created by the backends (NumPy, CuPy), whose C
deleters are safe on any thread and at interpreter shutdown.

Floor: mechanism, over ``_destructor`` and the leaves.
"""

from __future__ import annotations

import ctypes
import datetime
import os
import struct
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from . import _dtypes, _errors
from ._destructor import OWNING_DESTRUCTOR as _OWN_DESTRUCTOR
from ._devices import Device, DLDeviceType
from ._compiled import core as _core

LEGACY = "dltensor"
VERSIONED = "dltensor_versioned"
USED_LEGACY = "used_dltensor"
USED_VERSIONED = "used_dltensor_versioned"

READ_ONLY = 1 << 0
IS_COPIED = 1 << 1
IS_SUBBYTE_TYPE_PADDED = 1 << 2

#: The capsule type (types.CapsuleType from Python 3.13 on).
CapsuleType: Any = type(datetime.datetime_CAPI)

# The C API through function objects of the layer's own, each with its own
# prototype: ctypes.pythonapi's attributes are shared objects whose argtypes
# and restype any library in the process may set (its own way, or back to
# ctypes' default of a C int, which cuts a pointer in half).
_api = ctypes.pythonapi
_GetName = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", _api))
_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_SetName = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(("PyCapsule_SetName", _api))
_RawMalloc = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(("PyMem_RawMalloc", _api))
_New = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_New", _api)
)
# What a ctypes call raises when converting an argument fails, a MemoryError
# included; the functions below raise that one as MemoryError
# (``from_ctypes``), as every other path does.
_ArgumentError = ctypes.ArgumentError


def from_ctypes(exc):
    """What a ctypes call's ``ArgumentError`` stands for. Out of memory,
    ctypes wraps the ``MemoryError`` of converting an argument in it; that
    is a ``MemoryError``, as on every other path. Anything else is itself."""
    if ": MemoryError" in str(exc):
        return MemoryError()
    return exc


def check_platform(byteorder: str, maxsize: int) -> None:
    """ImportError unless the interpreter is little-endian and 64-bit: the
    struct formats here are dlpack.h's LP64 layout in little-endian order,
    and version words and pointers are patched as native 64-bit words."""
    unsupported = []
    if byteorder != "little":
        unsupported.append(f"{byteorder}-endian")
    if maxsize < 2**63 - 1:
        unsupported.append(f"{maxsize.bit_length() + 1}-bit")
    if unsupported:
        raise _errors.unsupported_platform(", ".join(unsupported))


check_platform(sys.byteorder, sys.maxsize)

# Each access reads or writes one struct through a view of that struct's own
# bytes (a ctypes array at its address), never through a view of the whole
# address space: a bad pointer can reach no further than the struct it
# names. A view costs about 70 ns; an exchange makes a few.
_c_u64 = ctypes.c_uint64
_c_void_p = ctypes.c_void_p
_BYTES = [ctypes.c_char * n for n in range(81)]
_LEGACY_BYTES = _BYTES[64]
_void_at = _c_void_p.from_address
_u64_at = _c_u64.from_address
_VERSIONED_BYTES = _BYTES[80]

# DLTensor: data, device_type, device_id, ndim, code, bits, lanes, shape,
# strides, byte_offset (48 bytes).
_TENSOR = "QiiiBBHQQQ"
_LEGACY_FMT = struct.Struct("<" + _TENSOR + "QQ")  # + manager_ctx, deleter
_VERSIONED_FMT = struct.Struct("<IIQQQ" + _TENSOR)  # version, ctx, deleter, flags
_TENSOR_AT_VERSIONED = 32
_VERSION_FMT = struct.Struct("<II")
_U64 = struct.Struct("<Q")
_DTYPE_FMT = struct.Struct("<BBH")
_DEVICE_FMT = struct.Struct("<ii")
_MAX_NDIM = 64
_NDIM_FMT = struct.Struct("<i")  # DLTensor.ndim, 16 bytes in
_SHAPES_FMT = struct.Struct("<QQ")  # DLTensor.shape and .strides, 24 bytes in
_INT64S = [struct.Struct(f"<{n}q") for n in range(2 * _MAX_NDIM + 1)]  # shape and strides
_INT64_BYTES = [ctypes.c_char * (8 * n) for n in range(2 * _MAX_NDIM + 1)]
_DEVICE_TYPES = frozenset(int(t) for t in DLDeviceType)


def _int64s(ptr: int, n: int) -> tuple:
    """The ``n`` int64 values at ``ptr`` (a shape or strides array)."""
    return _INT64S[n].unpack_from(_INT64_BYTES[n].from_address(ptr))


def _static_name(name: str) -> int:
    # A capsule keeps a pointer to its name, and may outlive this module
    # (interpreter shutdown): the used_ names live in memory never freed.
    raw = name.encode() + b"\0"
    addr = _RawMalloc(len(raw))
    ctypes.memmove(addr, raw, len(raw))
    return addr


_USED_NAME_PTR = {False: _static_name(USED_LEGACY), True: _static_name(USED_VERSIONED)}
_NAME_PTR = {False: _static_name(LEGACY), True: _static_name(VERSIONED)}
_NAME_BYTES = {False: LEGACY.encode(), True: VERSIONED.encode()}


def _pointer_offset():
    """Where CPython keeps a capsule's pointer inside the capsule object: right
    after the object header, then the name (Objects/capsule.c, unchanged since
    the type appeared). Confirmed here on a probe capsule; None when it does
    not hold, and the pointer is then asked for through ctypes."""
    if sys.implementation.name != "cpython":
        return None
    offset = object.__basicsize__
    name = _USED_NAME_PTR[False]
    marker = name + 1  # any non-NULL address: a capsule never dereferences it
    probe = _New(marker, name, None)
    at = id(probe) + offset
    if at % 8 or _c_void_p.from_address(at).value != marker or _c_void_p.from_address(at + 8).value != name:
        return None
    return offset


_POINTER_AT = _pointer_offset()


@dataclass(frozen=True)
class CapsuleInfo:
    """What an unconsumed DLPack capsule holds, as `inspect` reads it.

    A frozen record: reading it touches the capsule no more.

    Attributes
    ----------
    name : str
        ``"dltensor"`` or ``"dltensor_versioned"``.
    versioned : bool
        Whether the capsule is a versioned one.
    version : tuple of int or None
        The ``(major, minor)`` a versioned capsule carries; None for a legacy one.
    flags : int
        The flag bits (`FLAG_READ_ONLY`, `FLAG_IS_COPIED`,
        `FLAG_IS_SUBBYTE_TYPE_PADDED`); 0 for a legacy capsule.
    device : Device
        Where the memory is.
    dl_dtype : tuple of int
        The DLPack ``(code, bits, lanes)``.
    dtype : numpy.dtype or None
        The NumPy dtype of ``dl_dtype``; None where NumPy has none (bfloat16
        without ml_dtypes, a vector type).
    shape : tuple of int
        The shape.
    strides : tuple of int or None
        The strides in elements; None when the capsule has none (C order).
    byte_offset : int
        The offset of the first element from ``data``, in bytes.
    data : int
        The data pointer, as the capsule gives it (DLTensor's ``data``).
    ptr : int
        The address of the first element, ``data + byte_offset``: what
        `ArrayView` calls ``ptr`` too.
    ndim : int
        The number of dimensions.
    readonly : bool
        Whether READ_ONLY is set (``read_only`` is its deprecated alias).
    is_copied : bool
        Whether IS_COPIED is set.

    Examples
    --------
    >>> import numpy as np, gpu_dlpack
    >>> a = np.arange(6.0).reshape(2, 3)[:, ::2]
    >>> info = gpu_dlpack.inspect(gpu_dlpack.export(a, max_version=(1, 0)))
    >>> info.version == gpu_dlpack.DLPACK_VERSION, info.shape, info.strides, str(info.device)
    (True, (2, 2), (3, 2), 'cpu')
    """

    name: str
    versioned: bool
    version: tuple[int, int] | None
    flags: int
    device: Device
    dl_dtype: tuple[int, int, int]
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    byte_offset: int
    data: int

    @property
    def dtype(self) -> np.dtype[Any] | None:
        """The NumPy dtype of ``dl_dtype``, or None where NumPy has none."""
        try:
            return _dtypes.to_numpy(*self.dl_dtype).numpy
        except BufferError:
            return None

    @property
    def ptr(self) -> int:
        return self.data + self.byte_offset

    @property
    def readonly(self) -> bool:
        return bool(self.flags & READ_ONLY)

    @property
    def read_only(self) -> bool:
        """Deprecated: `readonly`."""
        warnings.warn(_errors.renamed("CapsuleInfo", "read_only", "readonly"), stacklevel=2)
        return bool(self.flags & READ_ONLY)

    @property
    def is_copied(self) -> bool:
        return bool(self.flags & IS_COPIED)

    @property
    def ndim(self) -> int:
        return len(self.shape)


def kind(obj) -> bool:
    """True for an unconsumed versioned capsule, False for a legacy one.

    TypeError for a non-capsule, ConsumedCapsuleError for a used one,
    BufferError for any other name.
    """
    if type(obj) is not CapsuleType:
        raise _errors.not_a_capsule(obj)
    try:
        raw = _GetName(obj)
    except _ArgumentError as exc:
        raise from_ctypes(exc) from None
    if raw == b"dltensor_versioned":
        return True
    if raw == b"dltensor":
        return False
    name = None if raw is None else raw.decode(errors="replace")
    if name in (USED_LEGACY, USED_VERSIONED):
        raise _errors.consumed(name)
    raise _errors.bad_capsule_name(name)


def is_unconsumed(capsule) -> bool:
    try:
        return _GetName(capsule) in (b"dltensor", b"dltensor_versioned")
    except _ArgumentError as exc:
        raise from_ctypes(exc) from None


def pointer(capsule, versioned: bool) -> int:
    try:
        return _GetPointer(capsule, _NAME_BYTES[versioned])
    except _ArgumentError as exc:
        raise from_ctypes(exc) from None


class Header(NamedTuple):
    """The fields an exchange decides on (``strides`` is the pointer, 0 for NULL)."""

    ptr: int
    major: int | None
    minor: int | None
    flags: int
    device_type: int
    device_id: int
    code: int
    bits: int
    lanes: int
    ndim: int
    strides: int


# Header(...) goes through a Python-level __new__ (250 ns); the tuple's own
# constructor is 100 ns.
_new_header = tuple.__new__


def peek(capsule, versioned: bool) -> Header:
    """The ``Header`` of an unconsumed capsule, read in one go. BufferError
    when the tensor could not be read safely (bad ndim, NULL shape, a device
    that is no DLPack device) or held by any importer (``_check_layout``)."""
    return header(pointer(capsule, versioned), versioned)


def kind_and_pointer(capsule, likely: bool = True):
    """``(kind(capsule), pointer(capsule, kind))`` in one ctypes call when the
    capsule is of the ``likely`` kind (PyCapsule_GetPointer checks the name);
    kind()'s errors otherwise."""
    if type(capsule) is not CapsuleType:
        raise _errors.not_a_capsule(capsule)
    try:
        return likely, _GetPointer(capsule, _NAME_BYTES[likely])
    except ValueError:  # another name
        versioned = kind(capsule)
        return versioned, pointer(capsule, versioned)
    except _ArgumentError as exc:
        raise from_ctypes(exc) from None


_MAX_BYTES = 2**63 - 1  # the largest extent an int64 byte count holds


def reach(shape, strides) -> tuple:
    """``(low, high)``: the offsets, in elements, of the lowest and the
    highest element from the first one (negative strides reach below it).
    A zero extent reaches nowhere, as an extent of one."""
    low = high = 0
    for n, step in zip(shape, strides):
        if not n:
            continue
        if step < 0:
            low += (n - 1) * step
        else:
            high += (n - 1) * step
    return low, high


def _check_layout(data: int, offset: int, shape: tuple, strides, strides_p: int, itemsize: int) -> None:
    """BufferError for a tensor whose shape and strides no importer can
    hold: a negative dimension (numpy.from_dlpack refuses it), NULL data
    with elements (a 0-d tensor has one), more bytes than an int64 counts,
    strides (NULL: compact row-major) reaching, from either end, outside
    the 64-bit address space from ``data + offset``, or a step of more bytes
    than an int64 holds. A tensor without
    elements is checked as if each zero extent were one, though its data may
    be NULL: extents that multiply past an int64 are malformed whatever one
    of them is (as NumPy counts them). ``strides`` is None when not read yet
    (then read from ``strides_p`` if needed)."""
    count = 1
    empty = False
    for n in shape:
        if n < 0:
            raise _errors.malformed(f"the shape {shape} has a negative dimension")
        if n:
            count *= n
        else:
            empty = True
    if not data and not empty:
        raise _errors.malformed(
            f"data is NULL but the shape {shape} has elements" if shape else "data is NULL but a 0-d tensor has one element"
        )
    if count * itemsize > _MAX_BYTES:
        if empty:
            raise _errors.malformed(
                f"the extents other than 0 of the shape {shape} of {itemsize}-byte elements multiply to "
                "more than 2**63 - 1 bytes"
            )
        raise _errors.malformed(f"the shape {shape} of {itemsize}-byte elements holds more than 2**63 - 1 bytes")
    if strides_p:
        if strides is None:
            strides = _int64s(strides_p, len(shape))
        low, high = reach(shape, strides)
    else:
        low, high = 0, count - 1
    first = data + offset
    low, high = first + low * itemsize, first + (high + 1) * itemsize
    if low < 0 or high > 2**64 or high - low > _MAX_BYTES:
        if strides_p:
            raise _errors.malformed(
                f"the strides {strides} of the shape {shape} reach outside the 64-bit address space"
            )
        raise _errors.malformed(
            f"the shape {shape} at data {data:#x} + byte_offset {offset} reaches past the end of the "
            "64-bit address space"
        )
    if strides_p:
        # Even where an extent of 0 or 1 never takes it, a step is a byte
        # stride to NumPy, CuPy and the array interfaces: an int64.
        for step in strides:
            if not -(2**63) <= step * itemsize <= _MAX_BYTES:
                raise _errors.malformed(
                    f"the strides {strides} of the shape {shape} are steps of {itemsize}-byte elements "
                    "that no int64 byte count holds"
                )


def header(ptr: int, versioned: bool) -> Header:
    """``peek`` from the capsule's pointer."""
    if versioned:
        major, minor, _ctx, _del, flags, data, dt, di, ndim, code, bits, lanes, shape_p, strides_p, offset = (
            _VERSIONED_FMT.unpack_from(_VERSIONED_BYTES.from_address(ptr))
        )
        if major != 1:
            return _new_header(Header, (ptr, major, minor, flags, dt, di, code, bits, lanes, 0, 0))
    else:
        data, dt, di, ndim, code, bits, lanes, shape_p, strides_p, offset, _ctx, _del = (
            _LEGACY_FMT.unpack_from(_LEGACY_BYTES.from_address(ptr))
        )
        major = minor = None
        flags = 0
    if not 0 <= ndim <= _MAX_NDIM:
        raise _errors.malformed(f"ndim={ndim}")
    if ndim and not shape_p:
        raise _errors.malformed(f"shape is NULL with ndim={ndim}")
    if dt not in _DEVICE_TYPES or di < 0:
        raise _errors.malformed(f"no DLPack device is (device_type={dt}, device_id={di})")
    if not ndim:
        shape = strides = ()
    elif strides_p == shape_p + 8 * ndim:  # one allocation (NumPy, PyTorch): one read
        both = _int64s(shape_p, 2 * ndim)
        shape, strides = both[:ndim], both[ndim:]
    else:
        shape, strides = _int64s(shape_p, ndim), None
    _check_layout(data, offset, shape, strides, strides_p, max(1, (bits * lanes + 7) >> 3))
    return _new_header(Header, (ptr, major, minor, flags, dt, di, code, bits, lanes, ndim, strides_p))


def snapshot(capsule) -> tuple:
    """``(versioned, struct, shape, strides)`` of an unconsumed capsule: the
    bytes of its struct and of its shape and strides arrays (None when there
    is none to read: NULL, no dimensions, or a struct no later check takes),
    copied in one step that no claim of the layer interleaves with, so a
    consumer on another thread cannot free them while they are read
    (``_claim_lock`` here; the compiled core copies them holding the GIL)."""
    with _claim_lock:
        versioned, ptr = kind_and_pointer(capsule)
        raw = (_VERSIONED_BYTES if versioned else _LEGACY_BYTES).from_address(ptr).raw
        shape = strides = None
        at = _TENSOR_AT_VERSIONED if versioned else 0
        if not versioned or _VERSION_FMT.unpack_from(raw)[0] == 1:
            ndim, shape_p, strides_p = _NDIM_FMT.unpack_from(raw, at + 16)[0], *_SHAPES_FMT.unpack_from(raw, at + 24)
            if 0 < ndim <= _MAX_NDIM:
                if shape_p:
                    shape = _INT64_BYTES[ndim].from_address(shape_p).raw
                if strides_p:
                    strides = _INT64_BYTES[ndim].from_address(strides_p).raw
    return versioned, raw, shape, strides


def read(capsule) -> CapsuleInfo:
    """Every field of an unconsumed capsule, without consuming it. Safe while
    another thread consumes the capsule through the layer: either every
    field is read before the claim, or ConsumedCapsuleError."""
    versioned, raw, shape_raw, strides_raw = snapshot(capsule)
    if versioned:
        major, minor, _ctx, _del, flags, *tensor = _VERSIONED_FMT.unpack(raw)
        version = (major, minor)
        if major != 1:
            # Another major version may lay the struct out differently: only
            # the version and flags words are safe to read.
            raise _errors.unreadable_major(version)
    else:
        *tensor, _ctx, _del = _LEGACY_FMT.unpack(raw)
        version, flags = None, 0
    data, dt, di, ndim, code, bits, lanes, shape_p, strides_p, offset = tensor
    if not 0 <= ndim <= _MAX_NDIM:
        raise _errors.malformed(f"ndim={ndim}")
    if ndim and not shape_p:
        raise _errors.malformed(f"shape is NULL with ndim={ndim}")
    shape = _INT64S[ndim].unpack(shape_raw) if ndim else ()
    strides = None
    if strides_p:
        strides = _INT64S[ndim].unpack(strides_raw) if ndim else ()
    try:
        device = Device((dt, di))
    except ValueError:
        raise _errors.malformed(f"no DLPack device is (device_type={dt}, device_id={di})") from None
    return _capsule_info(
        name=VERSIONED if versioned else LEGACY,
        versioned=versioned,
        version=version,
        flags=flags,
        device=device,
        dl_dtype=(code, bits, lanes),
        shape=shape,
        strides=strides,
        byte_offset=offset,
        data=data,
    )


def _capsule_info(**fields) -> CapsuleInfo:
    # CapsuleInfo(...) sets each field of the frozen dataclass through
    # object.__setattr__ (1,350 ns); filling the new instance's dict at once
    # gives the same object (equal, same hash and repr) in 450 ns.
    info = object.__new__(CapsuleInfo)
    info.__dict__.update(fields)
    return info


def set_version(ptr: int, version) -> None:
    _VERSION_FMT.pack_into(_BYTES[8].from_address(ptr), 0, *version)


def version_word(version) -> int:
    """``version`` as the 64-bit word ``stamp_version`` writes."""
    return _U64.unpack(_VERSION_FMT.pack(*version))[0]


def stamp_version(capsule, word: int) -> None:
    """Write a version (``version_word(version)``) into a versioned capsule
    that NumPy's own ``__dlpack__`` has just returned, so whose name is known.

    The hot path of every NumPy export: the pointer is read straight from the
    capsule object where its layout was confirmed (two ctypes calls saved),
    and the version is one aligned word (DLManagedTensorVersioned starts with
    it and holds 64-bit fields, so a valid pointer is 8-aligned).
    """
    if _POINTER_AT is None:
        ptr = _GetPointer(capsule, b"dltensor_versioned")
    else:
        ptr = _void_at(id(capsule) + _POINTER_AT).value
    if ptr & 7:
        raise _errors.malformed(f"DLManagedTensorVersioned at {ptr:#x} is not 8-byte aligned")
    _u64_at(ptr).value = word


def set_flags(ptr: int, flags: int) -> None:
    _c_u64.from_address(ptr + 24).value = flags


def set_dtype(ptr: int, versioned: bool, code: int, bits: int) -> None:
    base = ptr + (_TENSOR_AT_VERSIONED if versioned else 0)
    _DTYPE_FMT.pack_into(_BYTES[4].from_address(base + 20), 0, code, bits, 1)


def set_device(ptr: int, versioned: bool, device_type: int, device_id: int) -> None:
    """Relabel the memory's device (``DLTensor.device``): a host capsule of
    pinned memory says CUDA_HOST, managed memory says device id 0."""
    base = ptr + (_TENSOR_AT_VERSIONED if versioned else 0)
    _DEVICE_FMT.pack_into(_BYTES[8].from_address(base + 8), 0, int(device_type), int(device_id))


def point_strides_after_shape(capsule) -> bool:
    """Point a versioned capsule's strides, left out (NULL with ndim > 0), at
    the ``ndim`` int64s right after its shape; True when they were left out.
    Only for a capsule NumPy's own ``__dlpack__`` has just returned: on a
    NumPy that writes a C-contiguous array's strides there before leaving
    them out (2.1 to 2.3, ``numpy_backend``) they are then its strides.
    Writes the struct's strides field only, and reads nothing past the shape."""
    base = pointer(capsule, True) + _TENSOR_AT_VERSIONED
    ndim = _NDIM_FMT.unpack_from(_BYTES[4].from_address(base + 16))[0]
    shape_p, strides_p = _SHAPES_FMT.unpack_from(_BYTES[16].from_address(base + 24))
    if not 0 < ndim <= _MAX_NDIM or not shape_p or strides_p:
        return False
    _u64_at(base + 32).value = shape_p + 8 * ndim
    return True


class Owner:
    """Holds the tensor of a consumed capsule (the owner of memory wrapped by
    another library, such as ``cupy.cuda.UnownedMemory``): the tensor lives
    in a capsule of its own that only this object holds, and that capsule's
    C destructor frees it once, when the last reference to this object goes
    or at ``release``. No Python code of the owner runs then (no ``__del__``),
    so an interrupt or an object half made cannot skip or repeat the free."""

    __slots__ = ("_capsule", "__weakref__")

    def __init__(self, capsule):
        self._capsule = capsule

    def release(self) -> None:
        self._capsule = None  # the capsule goes: its destructor frees the tensor


# Checking a capsule's name and renaming it used_* is one step under this
# lock, for every thread (free-threaded builds too): of several threads
# handed one capsule, exactly one takes it, and its deleter runs once. A
# forked child gets a new lock (``_after_fork``): the thread that held it
# in the parent does not exist there.
_claim_lock = threading.Lock()


def _after_fork() -> None:
    global _claim_lock
    _claim_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def claim(capsule, versioned: bool) -> int:
    """Take an unconsumed capsule: rename it ``used_*`` (so that neither its
    destructor nor any other consumer frees it) and return its pointer, whose
    tensor the caller now owns. ConsumedCapsuleError when another consumer
    took it first. The layer itself takes capsules with ``move``, whose
    result owns the tensor from the instant the claim is made."""
    with _claim_lock:
        try:
            ptr = _GetPointer(capsule, _NAME_BYTES[versioned])
        except ValueError:  # renamed by another consumer
            ptr = None
        except _ArgumentError as exc:
            raise from_ctypes(exc) from None
        else:
            # (Out of memory here, ctypes raises before the rename is made.)
            try:
                renamed = _SetName(capsule, _USED_NAME_PTR[versioned]) == 0
            except _ArgumentError as exc:
                raise from_ctypes(exc) from None
    if ptr is None:
        kind(capsule)  # says what the name now is
        raise _errors.malformed("the capsule changed kind while it was read")
    if not renamed:
        raise _errors.malformed("the capsule could not be renamed")
    return ptr


# -- moving a tensor to a capsule of the layer's own --------------------------------
# A claim in pure Python cannot be one C call followed by another that gives
# the tensor an owner: an interrupt (a signal handler raising) or a failed
# allocation may land between any two calls. So the claim and the hand-over
# are one C call here: both capsules are first given names inside one buffer
# of the layer's, laid out so that a single memmove turns the old capsule's
# name from "dltensor" into "used_dltensor" and, in the same write, the new
# one's from "used_dltensor" into "dltensor". Before that write the old
# capsule owns the tensor, after it the new one does; at no instruction do
# both or neither. (The names are then pointed back to the layer's static
# names, and the buffer reused; one that an interrupt left in use is never
# reused, and stays allocated.)

# Holding the GIL (no other thread reads a name halfway through the write),
# and returning nothing (no result to convert, which could fail after the
# write was made).
_memmove_at = ctypes.cast(ctypes.memmove, ctypes.c_void_p).value
assert _memmove_at
_memmove = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)(_memmove_at)


def _static_bytes(raw: bytes) -> int:
    addr = _RawMalloc(len(raw))
    ctypes.memmove(addr, raw, len(raw))
    return addr


def _flip_layout(versioned: bool) -> tuple:
    """``(offset of the new capsule's name, before, after)`` of one buffer:
    ``before`` reads NAME at 0 and used_NAME at the offset, ``after`` (the
    claim, written over its start) used_NAME at 0 and NAME at the offset."""
    name = _NAME_BYTES[versioned]
    used = b"used_" + name
    at = len(used) + 1
    before = name + b"\0" * (at - len(name)) + used + b"\0"
    after = used + b"\0" + name + b"\0"
    return at, (_static_bytes(before), len(before)), (_static_bytes(after), len(after))


_FLIP = {False: _flip_layout(False), True: _flip_layout(True)}
_free_flips: dict = {False: [], True: []}  # buffers in the "before" state, not in use


def _flip_buffer(versioned: bool) -> int:
    try:
        return _free_flips[versioned].pop()
    except IndexError:
        _at, (before, size), _after = _FLIP[versioned]
        addr = _RawMalloc(size)
        if not addr:
            raise MemoryError
        _memmove(addr, before, size)
        return addr


def move(capsule, versioned: bool, destructor: int | None = None):
    """A new unconsumed capsule of the same kind that holds the tensor of
    ``capsule``, which is renamed ``used_*`` in the same step: from the claim
    on, the new capsule owns the tensor, and its ``destructor`` (by default
    ``owning_destructor``, a C function) frees it when it is dropped
    unconsumed, whatever raised in between. ConsumedCapsuleError when another
    consumer took the capsule first; MemoryError leaves it as it was."""
    if destructor is None:
        destructor = owning_destructor(versioned)
    with _claim_lock:
        try:
            ptr = _GetPointer(capsule, _NAME_BYTES[versioned])
        except ValueError:  # renamed by another consumer, or not a capsule of this kind
            ptr = None
        except _ArgumentError as exc:
            raise from_ctypes(exc) from None
        else:
            at, (before, before_size), (after, after_size) = _FLIP[versioned]
            try:
                buf = _flip_buffer(versioned)
                new = _New(ptr, buf + at, destructor)  # named used_*: it owns nothing yet
                renamed = _SetName(capsule, buf) == 0  # the same name, in the buffer
                if renamed:
                    _memmove(buf, after, after_size)  # the claim and the hand-over
            except _ArgumentError as exc:
                raise from_ctypes(exc) from None
            if renamed:
                # The new capsule owns the tensor: the move is made. Pointing
                # the names back to the static ones frees the buffer for the
                # next move; out of memory for it, the buffer stays in use
                # (never reused) and the move stands.
                try:
                    _SetName(capsule, _USED_NAME_PTR[versioned])
                    _SetName(new, _NAME_PTR[versioned])
                    _memmove(buf, before, before_size)
                    _free_flips[versioned].append(buf)
                except (MemoryError, _ArgumentError):
                    pass
                return new
    if ptr is None:
        kind(capsule)  # says what the name now is
        raise _errors.malformed("the capsule changed kind while it was read")
    raise _errors.malformed("the capsule could not be renamed")  # (the new capsule owns nothing: it goes)


def take(capsule, versioned: bool) -> Owner:
    """Take ownership of an unconsumed capsule (rename it ``used_*``) and
    return the ``Owner`` that frees its tensor when it dies."""
    return Owner(move(capsule, versioned))


def _owning_destructors() -> dict:
    """NumPy's capsule destructors, by kind: C functions that call the
    tensor's deleter unless the capsule was renamed ``used_*``, which is what
    every producer's destructor does (dlpack.h), for any producer's tensor.
    Safe on any thread and at shutdown. None where this NumPy exports no
    such capsule (no versioned capsules before NumPy 2.1)."""
    import numpy as np

    get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object)(("PyCapsule_GetDestructor", _api))
    found = {False: get(np.empty(0).__dlpack__()), True: None}
    try:
        found[True] = get(np.empty(0).__dlpack__(max_version=(1, 0)))
    except TypeError:
        pass
    return found


_OWNING_DESTRUCTOR = _owning_destructors()


def python_owning_destructor() -> int:
    """The layer's own versioned destructor for NumPy before 2.1 without the
    compiled core: a ctypes callback, so Python code (``_destructor``)."""
    assert _OWN_DESTRUCTOR
    return _OWN_DESTRUCTOR


def owning_destructor(versioned: bool) -> int:
    """The destructor of the capsules ``move`` makes, a C function that frees
    an unconsumed capsule's tensor: the compiled core's, which also sets a
    pending exception aside while the deleter runs (a capsule dropped as an
    interrupt unwinds the stack dies with the interrupt pending); without
    the core, NumPy's, or before NumPy 2.1 (no versioned one to lend) the
    layer's Python one."""
    if _core is not None:
        return _core.OWNING_DESTRUCTORS[versioned]
    found = _OWNING_DESTRUCTOR[versioned]
    return python_owning_destructor() if found is None else found


def handover(capsule):
    """``(versioned, private)`` for a capsule a caller handed to the layer
    (and may have shared with other threads): the capsule is claimed, and its
    tensor moves to a new unconsumed capsule that only this call holds, in
    one step (``move``); the layer then checks and consumes it like any
    other. ConsumedCapsuleError when another consumer took the capsule first.

    Dropped unconsumed, the new capsule frees the tensor (its C destructor),
    also when an interrupt lands before this returns."""
    versioned = kind(capsule)
    return versioned, move(capsule, versioned)


def checked(capsule, likely_versioned: bool = True, check_dtype=None):
    """``(versioned, header)`` of a capsule handed to the layer, after the
    checks every exchange makes, for what it imports and what it passes on
    alike (``header``'s, major version 1, and ``check_dtype(code, bits,
    lanes)`` when given). A refused capsule is discarded: its deleter runs
    once, now."""
    versioned, ptr = kind_and_pointer(capsule, likely_versioned)
    try:
        head = header(ptr, versioned)
        if versioned and head.major != 1:
            raise _errors.unsupported_major(head.major)
        if check_dtype is not None:
            check_dtype(head.code, head.bits, head.lanes)
    except BufferError:
        discard(capsule, versioned)
        raise
    return versioned, head


def discard(capsule, versioned: bool) -> None:
    """Take ownership of an unconsumed capsule and free what it holds now:
    rename it ``used_*`` (so its destructor does not free it again) and call
    the deleter once. What a consumer must do with a capsule it rejects.
    (The tensor moves to a capsule of the layer's, dropped at once: its C
    destructor calls the deleter, with no Python step between.)"""
    move(capsule, versioned)


# -- the implementation in use --------------------------------------------------
# The compiled core (``_compiled.core``) takes the hot functions over; it runs the
# plain case itself and hands every other one to these Python functions, kept
# in ``PYTHON``, so results and errors are the same on both paths.

PYTHON = {
    "header": header, "checked": checked, "discard": discard, "stamp_version": stamp_version,
    "set_flags": set_flags, "set_version": set_version, "claim": claim, "snapshot": snapshot, "read": read,
    "move": move,
}

if _core is not None:
    # claim and move too: every claim then takes the C step, so a C claim and
    # a Python one never interleave.
    claim = _core.claim
    _core_move = _core.move

    def move(capsule, versioned: bool, destructor: int | None = None):  # noqa: F811
        return _core_move(capsule, versioned, owning_destructor(versioned) if destructor is None else destructor)

    move.__doc__ = PYTHON["move"].__doc__
    header = _core.header
    checked = _core.checked
    discard = _core.discard
    stamp_version = _core.stamp_version
    set_flags = _core.set_flags
    set_version = _core.set_version
    snapshot = _core.snapshot
    read = _core.read
