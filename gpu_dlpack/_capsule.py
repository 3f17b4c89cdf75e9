"""The DLPack capsule ABI: reading, patching and discarding the C structs
inside ``dltensor`` / ``dltensor_versioned`` PyCapsules (x86-64 and every
other LP64 layout: dlpack.h).

This is mechanism only. Nothing here decides whether an exchange may happen;
``_rules`` does. Capsules are created by the backends (NumPy, CuPy), whose C
deleters are safe on any thread and at interpreter shutdown.
"""

from __future__ import annotations

import ctypes
import datetime
import struct
from dataclasses import dataclass
from typing import NamedTuple

from . import _errors
from ._devices import Device, DLDeviceType

LEGACY = "dltensor"
VERSIONED = "dltensor_versioned"
USED_LEGACY = "used_dltensor"
USED_VERSIONED = "used_dltensor_versioned"

READ_ONLY = 1 << 0
IS_COPIED = 1 << 1
IS_SUBBYTE_TYPE_PADDED = 1 << 2

#: The capsule type (types.CapsuleType from Python 3.13 on).
CapsuleType = type(datetime.datetime_CAPI)

_api = ctypes.pythonapi
_GetName = _api.PyCapsule_GetName
_GetName.argtypes = [ctypes.py_object]
_GetName.restype = ctypes.c_char_p
_GetPointer = _api.PyCapsule_GetPointer
_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_GetPointer.restype = ctypes.c_void_p
_SetName = _api.PyCapsule_SetName
_SetName.argtypes = [ctypes.py_object, ctypes.c_void_p]
_SetName.restype = ctypes.c_int
_RawMalloc = _api.PyMem_RawMalloc
_RawMalloc.argtypes = [ctypes.c_size_t]
_RawMalloc.restype = ctypes.c_void_p
_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_string_at = ctypes.string_at
_memmove = ctypes.memmove

# DLTensor: data, device_type, device_id, ndim, code, bits, lanes, shape,
# strides, byte_offset (48 bytes).
_TENSOR = "QiiiBBHQQQ"
_LEGACY_FMT = struct.Struct("<" + _TENSOR + "QQ")  # + manager_ctx, deleter
_VERSIONED_FMT = struct.Struct("<IIQQQ" + _TENSOR)  # version, ctx, deleter, flags
_TENSOR_AT_VERSIONED = 32
_DELETER_AT = {False: 56, True: 16}
_MAX_NDIM = 64
_DEVICE_TYPES = frozenset(int(t) for t in DLDeviceType)


def _static_name(name: str) -> int:
    # A capsule keeps a pointer to its name, and may outlive this module
    # (interpreter shutdown): the used_ names live in memory never freed.
    raw = name.encode() + b"\0"
    addr = _RawMalloc(len(raw))
    _memmove(addr, raw, len(raw))
    return addr


_USED_NAME_PTR = {False: _static_name(USED_LEGACY), True: _static_name(USED_VERSIONED)}
_NAME_BYTES = {False: LEGACY.encode(), True: VERSIONED.encode()}


@dataclass(frozen=True)
class CapsuleInfo:
    """What an unconsumed DLPack capsule holds (``gpu_dlpack.inspect``)."""

    name: str
    versioned: bool
    version: tuple | None
    flags: int
    device: Device
    dtype: tuple
    shape: tuple
    strides: tuple | None
    byte_offset: int
    data: int

    @property
    def read_only(self) -> bool:
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
    raw = _GetName(obj)
    if raw == b"dltensor_versioned":
        return True
    if raw == b"dltensor":
        return False
    name = None if raw is None else raw.decode(errors="replace")
    if name in (USED_LEGACY, USED_VERSIONED):
        raise _errors.consumed(name)
    raise _errors.bad_capsule_name(name)


def is_unconsumed(capsule) -> bool:
    return _GetName(capsule) in (b"dltensor", b"dltensor_versioned")


def pointer(capsule, versioned: bool) -> int:
    return _GetPointer(capsule, _NAME_BYTES[versioned])


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


def peek(capsule, versioned: bool) -> Header:
    """The ``Header`` of an unconsumed capsule, read in one go. BufferError
    when the tensor could not be read safely (bad ndim, NULL shape, NULL data
    with elements, a device that is no DLPack device)."""
    ptr = _GetPointer(capsule, _NAME_BYTES[versioned])
    if versioned:
        major, minor, _ctx, _del, flags, data, dt, di, ndim, code, bits, lanes, shape_p, strides_p, _ = (
            _VERSIONED_FMT.unpack(_string_at(ptr, 80))
        )
        if major != 1:
            return Header(ptr, major, minor, flags, dt, di, code, bits, lanes, 0, 0)
    else:
        data, dt, di, ndim, code, bits, lanes, shape_p, strides_p, *_ = _LEGACY_FMT.unpack(
            _string_at(ptr, 64)
        )
        major = minor = None
        flags = 0
    if not 0 <= ndim <= _MAX_NDIM:
        raise _errors.malformed(f"ndim={ndim}")
    if ndim and not shape_p:
        raise _errors.malformed(f"shape is NULL with ndim={ndim}")
    if dt not in _DEVICE_TYPES or di < 0:
        raise _errors.malformed(f"no DLPack device is (device_type={dt}, device_id={di})")
    if not data and ndim:
        shape = struct.unpack(f"<{ndim}q", _string_at(shape_p, 8 * ndim))
        if all(shape):
            raise _errors.malformed(f"data is NULL but the shape {shape} has elements")
    return Header(ptr, major, minor, flags, dt, di, code, bits, lanes, ndim, strides_p)


def read(capsule) -> CapsuleInfo:
    """Every field of an unconsumed capsule, without consuming it."""
    versioned = kind(capsule)
    ptr = _GetPointer(capsule, _NAME_BYTES[versioned])
    if versioned:
        major, minor, _ctx, _del, flags, *tensor = _VERSIONED_FMT.unpack(_string_at(ptr, 80))
        version = (major, minor)
        if major != 1:
            # Another major version may lay the struct out differently: only
            # the version and flags words are safe to read.
            raise _errors.unreadable_major(version)
    else:
        *tensor, _ctx, _del = _LEGACY_FMT.unpack(_string_at(ptr, 64))
        version, flags = None, 0
    data, dt, di, ndim, code, bits, lanes, shape_p, strides_p, offset = tensor
    if not 0 <= ndim <= _MAX_NDIM:
        raise _errors.malformed(f"ndim={ndim}")
    if ndim and not shape_p:
        raise _errors.malformed(f"shape is NULL with ndim={ndim}")
    shape = struct.unpack(f"<{ndim}q", _string_at(shape_p, 8 * ndim)) if ndim else ()
    strides = None
    if strides_p:
        strides = struct.unpack(f"<{ndim}q", _string_at(strides_p, 8 * ndim)) if ndim else ()
    try:
        device = Device((dt, di))
    except ValueError:
        raise _errors.malformed(f"no DLPack device is (device_type={dt}, device_id={di})") from None
    return CapsuleInfo(
        name=VERSIONED if versioned else LEGACY,
        versioned=versioned,
        version=version,
        flags=flags,
        device=device,
        dtype=(code, bits, lanes),
        shape=shape,
        strides=strides,
        byte_offset=offset,
        data=data,
    )


def set_version(ptr: int, version) -> None:
    _memmove(ptr, struct.pack("<II", *version), 8)


def set_flags(ptr: int, flags: int) -> None:
    _memmove(ptr + 24, struct.pack("<Q", flags), 8)


def set_dtype(ptr: int, versioned: bool, code: int, bits: int) -> None:
    base = ptr + (_TENSOR_AT_VERSIONED if versioned else 0)
    _memmove(base + 20, struct.pack("<BBH", code, bits, 1), 4)


def set_device(ptr: int, versioned: bool, device_type: int, device_id: int) -> None:
    """Relabel the memory's device (``DLTensor.device``): a host capsule of
    pinned memory says CUDA_HOST, managed memory says device id 0."""
    base = ptr + (_TENSOR_AT_VERSIONED if versioned else 0)
    _memmove(base + 8, struct.pack("<ii", int(device_type), int(device_id)), 8)


class Owner:
    """Holds the tensor of a consumed capsule and calls its deleter once, when
    the last reference to this object goes (the owner of memory wrapped by
    another library, such as ``cupy.cuda.UnownedMemory``)."""

    __slots__ = ("_ptr", "_deleter", "__weakref__")

    def __init__(self, ptr: int, deleter: int):
        self._ptr = ptr
        # Bound now: at interpreter shutdown module globals may be gone.
        self._deleter = _Deleter(deleter) if deleter else None

    def release(self) -> None:
        deleter, self._deleter = self._deleter, None
        if deleter is not None:
            deleter(self._ptr)

    def __del__(self):
        self.release()


def take(capsule, versioned: bool) -> Owner:
    """Take ownership of an unconsumed capsule (rename it ``used_*``) and
    return the ``Owner`` that frees its tensor when it dies."""
    ptr = _GetPointer(capsule, _NAME_BYTES[versioned])
    deleter = struct.unpack("<Q", _string_at(ptr + _DELETER_AT[versioned], 8))[0]
    if _SetName(capsule, _USED_NAME_PTR[versioned]) != 0:
        raise _errors.malformed("the capsule could not be renamed")
    return Owner(ptr, deleter)


def discard(capsule, versioned: bool) -> None:
    """Take ownership of an unconsumed capsule and free what it holds now:
    rename it ``used_*`` (so its destructor does not free it again) and call
    the deleter once. What a consumer must do with a capsule it rejects."""
    ptr = _GetPointer(capsule, _NAME_BYTES[versioned])
    if _SetName(capsule, _USED_NAME_PTR[versioned]) != 0:
        raise _errors.malformed("the capsule could not be renamed")
    deleter = struct.unpack("<Q", _string_at(ptr + _DELETER_AT[versioned], 8))[0]
    if deleter:
        _Deleter(deleter)(ptr)


def device_type_name(dt) -> str:
    try:
        return DLDeviceType(dt).name
    except ValueError:
        return f"unknown device type {dt}"
