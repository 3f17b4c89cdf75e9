"""The DLPack capsule ABI: claiming, reading, patching and discarding the C
structs inside ``dltensor`` / ``dltensor_versioned`` PyCapsules (the LP64
layout of dlpack.h, little-endian: other interpreters are refused at import).

This is mechanism only. Nothing here decides whether an exchange may happen;
``_rules`` does. Capsules are created by the backends (NumPy, CuPy), whose C
deleters are safe on any thread and at interpreter shutdown.

The compiled core does the work (``kind``, ``claim``, ``move``, ``checked``,
``discard``, ``read``, ``set_dtype``...: its functions, by the names the layer
calls). What stays here is what the core returns (``Header``,
``CapsuleInfo``) and the general path it hands back to (a capsule it will not
take, a value that fits no field, in the layer's words).

Floor: mechanism, over the loaded core and the leaves.
"""

from __future__ import annotations

import datetime
import struct
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, NamedTuple, NoReturn

import numpy as np

from . import _dtypes, _errors
from ._compiled import core
from ._devices import Device, DLDeviceType

LEGACY = "dltensor"
VERSIONED = "dltensor_versioned"
USED_LEGACY = "used_dltensor"
USED_VERSIONED = "used_dltensor_versioned"

READ_ONLY = 1 << 0
IS_COPIED = 1 << 1
IS_SUBBYTE_TYPE_PADDED = 1 << 2

#: The capsule type (types.CapsuleType from Python 3.13 on).
CapsuleType: Any = type(datetime.datetime_CAPI)

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

# DLTensor: data, device_type, device_id, ndim, code, bits, lanes, shape,
# strides, byte_offset (48 bytes).
_TENSOR = "QiiiBBHQQQ"
_LEGACY_FMT = struct.Struct("<" + _TENSOR + "QQ")  # + manager_ctx, deleter
_VERSIONED_FMT = struct.Struct("<IIQQQ" + _TENSOR)  # version, ctx, deleter, flags
_VERSION_FMT = struct.Struct("<II")
_U64 = struct.Struct("<Q")
_MAX_NDIM = 64
_INT64S = [struct.Struct(f"<{n}q") for n in range(_MAX_NDIM + 1)]  # a shape or strides
_DEVICE_TYPES = frozenset(int(t) for t in DLDeviceType)


@dataclass(frozen=True, init=False)
class CapsuleInfo(core.CapsuleFields):
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

    # The fields live in the core's base (CapsuleFields, which inspect fills
    # directly); the dataclass gives the record its face: the fields' types,
    # equality, hash, repr, and FrozenInstanceError on assignment. Each is a
    # field() without a default: dataclass would take the base's attribute,
    # found on the class, for one.
    __slots__ = ()

    name: str = field()
    versioned: bool = field()
    version: tuple[int, int] | None = field()
    flags: int = field()
    device: Device = field()
    dl_dtype: tuple[int, int, int] = field()
    shape: tuple[int, ...] = field()
    strides: tuple[int, ...] | None = field()
    byte_offset: int = field()
    data: int = field()

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


def version_word(version) -> int:
    """``version`` as the 64-bit word ``stamp_version`` writes."""
    return _U64.unpack(_VERSION_FMT.pack(*version))[0]


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


# -- the core's primitives ----------------------------------------------------
# Each takes the capsule in one step in which no Python code runs (the GIL,
# or the capsule's critical section on a free-threaded build, held): of
# several threads handed one capsule exactly one takes it, and an interrupt
# cannot land between a claim and the hand-over of the tensor.

#: ``kind(capsule)``: True for an unconsumed versioned capsule, False for a
#: legacy one; TypeError for a non-capsule, ConsumedCapsuleError for a used
#: one, BufferError for any other name (``_kind``'s words).
kind = core.kind
#: ``is_unconsumed(capsule)``: whether a capsule is named ``dltensor`` or
#: ``dltensor_versioned``.
is_unconsumed = core.is_unconsumed
#: ``pointer(capsule, versioned)``: the pointer of an unconsumed capsule of
#: that kind; ValueError (the C API's) for any other.
pointer = core.pointer
#: ``claim(capsule, versioned)``: rename an unconsumed capsule ``used_*`` and
#: return its pointer, whose tensor the caller now owns.
claim = core.claim
#: ``checked(capsule, likely_versioned=True, check_dtype=None)``: ``(versioned,
#: header)`` after the checks every exchange makes (a tensor an importer can
#: hold, major version 1, ``check_dtype(code, bits, lanes)``); a refused
#: capsule is discarded, its deleter run once, now.
checked = core.checked
#: ``discard(capsule, versioned)``: claim the capsule and run its deleter once
#: (what a consumer does with a capsule it rejects).
discard = core.discard
#: ``snapshot(capsule)``: ``(versioned, struct, shape, strides)``, the bytes of
#: an unconsumed capsule's struct and of its shape and strides arrays (None
#: where there are none to read), copied in one step.
snapshot = core.snapshot
#: ``read(capsule)``: the ``CapsuleInfo`` of an unconsumed capsule (inspect).
read = core.read
#: ``stamp_version(capsule, word)``: write ``version_word(version)`` into a
#: versioned capsule NumPy's own ``__dlpack__`` has just returned.
stamp_version = core.stamp_version
#: ``set_flags(ptr, flags)`` and ``set_version(ptr, (major, minor))`` of a
#: versioned tensor.
set_flags = core.set_flags
set_version = core.set_version
#: ``set_dtype(ptr, versioned, code, bits)`` of a tensor (one lane), and
#: ``set_device(ptr, versioned, device_type, device_id)``: relabel the
#: memory's device (a host capsule of pinned memory says CUDA_HOST, managed
#: memory says device id 0).
set_dtype = core.set_dtype
set_device = core.set_device
#: ``point_strides_after_shape(capsule)``: point a versioned capsule's
#: strides, left out (NULL with ndim > 0), at the ``ndim`` int64s right
#: after its shape; True when they were left out. Only for a capsule NumPy's
#: own ``__dlpack__`` has just returned: on a NumPy that writes a
#: C-contiguous array's strides there before leaving them out (2.1 to 2.3,
#: ``numpy_backend``) they are then its strides. ValueError (the C API's)
#: for anything but an unconsumed versioned capsule.
point_strides_after_shape = core.point_strides_after_shape
#: ``kept_capsule(ptr, keep)``: a versioned capsule over a struct whose
#: deleter is 0, holding ``keep`` until the core's deleter runs.
kept_capsule = core.kept_capsule
#: The core's capsule destructors by kind, C functions that free an
#: unconsumed capsule's tensor (any producer's), setting a pending exception
#: aside while its deleter runs.
OWNING_DESTRUCTORS = core.OWNING_DESTRUCTORS


def move(capsule, versioned: bool):
    """A new unconsumed capsule of the same kind that holds the tensor of
    ``capsule``, which is renamed ``used_*`` in the same step: from the claim
    on, the new capsule owns the tensor, and its destructor (the core's)
    frees it when it is dropped unconsumed, whatever raised in between.
    ConsumedCapsuleError when another consumer took the capsule first;
    MemoryError leaves it as it was."""
    return core.move(capsule, versioned, OWNING_DESTRUCTORS[versioned])


def take(capsule, versioned: bool) -> Owner:
    """Take ownership of an unconsumed capsule (rename it ``used_*``) and
    return the ``Owner`` that frees its tensor when it dies."""
    return Owner(move(capsule, versioned))


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


# -- the general path: what the core hands back ---------------------------------
# The core runs every call it can; a capsule it will not take (not a capsule,
# another name, a tensor no importer can hold, another major version) and a
# call it was not made for come back to these functions, by the primitive's
# name, which say why in the layer's words (``GENERAL``, told to the core by
# ``_wiring``). They read a capsule through ``snapshot``.


def _kind(obj, name) -> NoReturn:
    # What the core's kind read as the name (bytes, None for NULL) of
    # anything but an unconsumed DLPack capsule.
    if type(obj) is not CapsuleType:
        raise _errors.not_a_capsule(obj)
    name = None if name is None else name.decode(errors="replace")
    if name in (USED_LEGACY, USED_VERSIONED):
        raise _errors.consumed(name)
    raise _errors.bad_capsule_name(name)


def _not_taken(capsule, versioned) -> NoReturn:
    # What the name now is: not a capsule, consumed, another name (kind's
    # errors), the other kind, or the kind asked for that was not renamed.
    if kind(capsule) == versioned:
        raise _errors.malformed("the capsule could not be renamed")
    raise _errors.malformed("the capsule changed kind while it was read")


def _claim(capsule, versioned):
    _not_taken(capsule, versioned)


def _move(capsule, versioned, destructor):
    _not_taken(capsule, versioned)


def _snapshot(capsule):
    _not_taken(capsule, None)


def _unpack(versioned: bool, raw: bytes) -> tuple:
    """``(major, minor, flags, data, device_type, device_id, ndim, code,
    bits, lanes, shape pointer, strides pointer, byte_offset)`` of the
    bytes of a capsule's struct (``None, None, 0`` for a legacy one's
    version and flags)."""
    if versioned:
        major, minor, _ctx, _del, flags, *tensor = _VERSIONED_FMT.unpack(raw)
        return (major, minor, flags, *tensor)
    *tensor, _ctx, _del = _LEGACY_FMT.unpack(raw)
    return (None, None, 0, *tensor)


def _check_readable(ndim: int, shape_p: int, device_type: int, device_id: int) -> None:
    if not 0 <= ndim <= _MAX_NDIM:
        raise _errors.malformed(f"ndim={ndim}")
    if ndim and not shape_p:
        raise _errors.malformed(f"shape is NULL with ndim={ndim}")
    if device_type not in _DEVICE_TYPES or device_id < 0:
        raise _errors.malformed(f"no DLPack device is (device_type={device_type}, device_id={device_id})")


def _check_layout(data: int, offset: int, shape: tuple, strides: tuple | None, itemsize: int) -> None:
    """BufferError for a tensor whose shape and strides no importer can
    hold: a negative dimension (numpy.from_dlpack refuses it), NULL data
    with elements (a 0-d tensor has one), more bytes than an int64 counts,
    strides (None: compact row-major) reaching, from either end, outside
    the 64-bit address space from ``data + offset``, or a step of more bytes
    than an int64 holds. A tensor without elements is checked as if each
    zero extent were one, though its data may be NULL: extents that
    multiply past an int64 are malformed whatever one of them is (as NumPy
    counts them)."""
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
    low, high = (0, count - 1) if strides is None else reach(shape, strides)
    first = data + offset
    low, high = first + low * itemsize, first + (high + 1) * itemsize
    if low < 0 or high > 2**64 or high - low > _MAX_BYTES:
        if strides is not None:
            raise _errors.malformed(
                f"the strides {strides} of the shape {shape} reach outside the 64-bit address space"
            )
        raise _errors.malformed(
            f"the shape {shape} at data {data:#x} + byte_offset {offset} reaches past the end of the "
            "64-bit address space"
        )
    if strides is not None:
        # Even where an extent of 0 or 1 never takes it, a step is a byte
        # stride to NumPy, CuPy and the array interfaces: an int64.
        for step in strides:
            if not -(2**63) <= step * itemsize <= _MAX_BYTES:
                raise _errors.malformed(
                    f"the strides {strides} of the shape {shape} are steps of {itemsize}-byte elements "
                    "that no int64 byte count holds"
                )


def _header_of(ptr: int, versioned: bool, raw: bytes, shape_raw, strides_raw) -> Header:
    """The ``Header`` of a tensor from its bytes (``snapshot``'s), its
    layout checked; another major version's has no shape (only its version
    and flags words are laid out alike)."""
    major, minor, flags, data, dt, di, ndim, code, bits, lanes, shape_p, strides_p, offset = _unpack(versioned, raw)
    if versioned and major != 1:
        return Header(ptr, major, minor, flags, dt, di, code, bits, lanes, 0, 0)
    _check_readable(ndim, shape_p, dt, di)
    shape = _INT64S[ndim].unpack(shape_raw) if ndim else ()
    strides = None
    if strides_p:
        strides = _INT64S[ndim].unpack(strides_raw) if ndim else ()
    _check_layout(data, offset, shape, strides, max(1, (bits * lanes + 7) >> 3))
    return Header(ptr, major, minor, flags, dt, di, code, bits, lanes, ndim, strides_p)


def _checked(capsule, likely_versioned: bool = True, check_dtype=None):
    """What the core's ``checked`` refuses: a capsule it cannot take
    (``_not_taken``'s words), another major version, a tensor no importer
    can hold; the refused capsule is discarded."""
    versioned, raw, shape, strides = snapshot(capsule)
    try:
        head = _header_of(pointer(capsule, versioned), versioned, raw, shape, strides)
        if versioned and head.major != 1:
            raise _errors.unsupported_major(head.major)
        if check_dtype is not None:
            check_dtype(head.code, head.bits, head.lanes)
    except BufferError:
        discard(capsule, versioned)
        raise
    return versioned, head


def _read(capsule) -> CapsuleInfo:
    """What the core's ``read`` will not read, in words: another major
    version, an ndim out of range, a NULL shape, no DLPack device."""
    versioned, raw, shape_raw, strides_raw = snapshot(capsule)
    major, minor, flags, data, dt, di, ndim, code, bits, lanes, shape_p, strides_p, offset = _unpack(versioned, raw)
    if versioned and major != 1:
        # Another major version may lay the struct out differently: only
        # the version and flags words are safe to read.
        raise _errors.unreadable_major((major, minor))
    _check_readable(ndim, shape_p, dt, di)
    return CapsuleInfo(
        name=VERSIONED if versioned else LEGACY,
        versioned=versioned,
        version=(major, minor) if versioned else None,
        flags=flags,
        device=Device((dt, di)),
        dl_dtype=(code, bits, lanes),
        shape=_INT64S[ndim].unpack(shape_raw) if ndim else (),
        strides=(_INT64S[ndim].unpack(strides_raw) if ndim else ()) if strides_p else None,
        byte_offset=offset,
        data=data,
    )


def _stamp_version(capsule, word):
    if not kind(capsule):
        raise _errors.malformed("a legacy capsule has no version to stamp")
    ptr = pointer(capsule, True)
    if ptr & 7:
        raise _errors.malformed(f"DLManagedTensorVersioned at {ptr:#x} is not 8-byte aligned")
    raise TypeError(f"a version word is an int, not {type(word).__name__}")


def _not_written(ptr, value):
    # The core writes flags or a version (two uint32s) at a versioned
    # tensor's address; anything else is a call it was not made for.
    raise ValueError(f"no {value!r} is written at {ptr!r}: a versioned tensor's address and its flags or version")


def _not_set(ptr, versioned, first, second):
    # The core writes a dtype (code and bits, two uint8s) or a device (two
    # int32s) at a tensor's address; anything else is a call it was not made for.
    raise ValueError(
        f"no ({first!r}, {second!r}) is written at {ptr!r}: a tensor's address and its dtype's code and bits "
        "(uint8s) or its device (int32s)"
    )


#: The general path of each primitive, by the name the core hands back to.
GENERAL = {
    "claim": _claim, "discard": _claim, "move": _move, "snapshot": _snapshot, "checked": _checked,
    "read": _read, "stamp_version": _stamp_version, "set_flags": _not_written, "set_version": _not_written,
    "kind": _kind, "set_dtype": _not_set, "set_device": _not_set,
}
