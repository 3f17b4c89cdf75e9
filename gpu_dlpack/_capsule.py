"""The DLPack capsule ABI as Python uses it (the LP64 layout of dlpack.h,
little-endian: other interpreters are refused at import). Mechanism only:
``_rules`` decides whether an exchange may happen.

The compiled core does the work, by the names the layer calls. What stays
here is what the core returns (``Header``, ``CapsuleInfo``) and the general
path it hands back to (a capsule it will not take, a value that fits no
field, in the layer's words).

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
from ._devices import Device

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
    core reads dlpack.h's LP64 layout, and version words and pointers are
    patched as native 64-bit words."""
    unsupported = []
    if byteorder != "little":
        unsupported.append(f"{byteorder}-endian")
    if maxsize < 2**63 - 1:
        unsupported.append(f"{maxsize.bit_length() + 1}-bit")
    if unsupported:
        raise _errors.unsupported_platform(", ".join(unsupported))


check_platform(sys.byteorder, sys.maxsize)

_VERSION_FMT = struct.Struct("<II")
_U64 = struct.Struct("<Q")
_MAX_NDIM = 64


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
# cannot land between a claim and the hand-over of the tensor. What each
# refuses is worded by its function in GENERAL below.

#: True for an unconsumed versioned capsule, False for a legacy one.
kind = core.kind
is_unconsumed = core.is_unconsumed
#: ``pointer(capsule, versioned)``; ValueError (the C API's) for any other capsule.
pointer = core.pointer
#: ``checked(capsule, likely_versioned=True, check_dtype=None)``: ``(versioned,
#: header)`` after the checks every exchange makes; a refused capsule is
#: discarded, its deleter run once, now.
checked = core.checked
#: ``discard(capsule, versioned)``: claim the capsule and run its deleter once.
discard = core.discard
snapshot = core.snapshot
#: ``read(capsule)``: the ``CapsuleInfo`` of an unconsumed capsule (inspect).
read = core.read
#: ``stamp_version(capsule, version_word(version))``, into a capsule NumPy has just made.
stamp_version = core.stamp_version
#: ``set_flags(ptr, flags)``, ``set_version(ptr, (major, minor))`` of a
#: versioned tensor; ``set_dtype(ptr, versioned, code, bits)`` (one lane) and
#: ``set_device(ptr, versioned, device_type, device_id)`` of any.
set_flags = core.set_flags
set_version = core.set_version
set_dtype = core.set_dtype
set_device = core.set_device
#: Only for a capsule NumPy's own ``__dlpack__`` has just returned (2.1 to
#: 2.3 write a C-contiguous array's strides after its shape and leave them
#: out): True when they were left out, and are now pointed at.
point_strides_after_shape = core.point_strides_after_shape
#: ``kept_capsule(ptr, keep)``: a versioned capsule over a struct whose
#: deleter is 0, holding ``keep`` until the core's deleter runs.
kept_capsule = core.kept_capsule
#: The core's capsule destructors by kind: each frees an unconsumed capsule's tensor.
OWNING_DESTRUCTORS = core.OWNING_DESTRUCTORS


def move(capsule, versioned: bool):
    """A new unconsumed capsule of the same kind that holds the tensor of
    ``capsule``, renamed ``used_*`` in the same step: the new capsule's
    destructor frees the tensor if it is dropped unconsumed. MemoryError
    leaves ``capsule`` as it was."""
    return core.move(capsule, versioned, OWNING_DESTRUCTORS[versioned])


def take(capsule, versioned: bool) -> Owner:
    """Take ownership of an unconsumed capsule (rename it ``used_*``) and
    return the ``Owner`` that frees its tensor when it dies."""
    return Owner(move(capsule, versioned))


def handover(capsule):
    """``(versioned, private)`` for a capsule a caller handed to the layer
    (and may have shared with other threads): its tensor ``move``d to a
    capsule only this call holds, which the layer then checks and consumes
    like any other."""
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


def _not_taken(capsule, versioned=None, destructor=None) -> NoReturn:
    # What the name now is (discard, move, snapshot): not a capsule,
    # consumed, another name (kind's errors), the other kind, or the kind
    # asked for that was not renamed.
    if kind(capsule) == versioned:
        raise _errors.malformed("the capsule could not be renamed")
    raise _errors.malformed("the capsule changed kind while it was read")


def _check_readable(ndim: int, shape_p: int, device_type: int, device_id: int) -> None:
    if not 0 <= ndim <= _MAX_NDIM:
        raise _errors.malformed(f"ndim={ndim}")
    if ndim and not shape_p:
        raise _errors.malformed(f"shape is NULL with ndim={ndim}")
    if device_type < 1 or device_id < 0:  # from 1 up, every type is a device (_devices.DLDeviceType)
        raise _errors.malformed(f"no DLPack device is (device_type={device_type}, device_id={device_id})")


def _layout_words(fault: int, data: int, offset: int, shape: tuple, strides, itemsize: int) -> str:
    """What the core's layout_fault found (1 to 5, in the order it checks),
    in words: no importer can hold such a tensor (a negative dimension is
    what numpy.from_dlpack refuses; a tensor without elements is checked as
    if each zero extent were one, and a step is a byte stride, an int64, to
    NumPy, CuPy and the array interfaces, even where no extent takes it)."""
    if fault == 1:
        return f"the shape {shape} has a negative dimension"
    if fault == 2:
        return f"data is NULL but the shape {shape} has elements" if shape else "data is NULL but a 0-d tensor has one element"
    if fault == 3 and 0 in shape:
        return (
            f"the extents other than 0 of the shape {shape} of {itemsize}-byte elements multiply to "
            "more than 2**63 - 1 bytes"
        )
    if fault == 3:
        return f"the shape {shape} of {itemsize}-byte elements holds more than 2**63 - 1 bytes"
    if fault == 4 and strides is not None:
        return f"the strides {strides} of the shape {shape} reach outside the 64-bit address space"
    if fault == 4:
        return (
            f"the shape {shape} at data {data:#x} + byte_offset {offset} reaches past the end of the "
            "64-bit address space"
        )
    return (
        f"the strides {strides} of the shape {shape} are steps of {itemsize}-byte elements "
        "that no int64 byte count holds"
    )


def _check_layout(fault, data, offset, shape, strides, bits, lanes) -> None:
    """BufferError in words when the core's layout_fault found a fault: the
    one check of every import, of ``inspect`` and of ``view``."""
    if fault:
        itemsize = max(1, (bits * lanes + 7) >> 3)
        raise _errors.malformed(_layout_words(fault, data, offset, shape, strides, itemsize))


def _checked(capsule, likely_versioned: bool = True, check_dtype=None):
    """What the core's ``checked`` refuses: a capsule it cannot take
    (``_not_taken``'s words), another major version, a tensor no importer
    can hold; the refused capsule is discarded."""
    versioned, fields, shape, strides, fault = snapshot(capsule)
    major, minor, flags, data, dt, di, ndim, code, bits, lanes, shape_p, strides_p, offset = fields
    try:
        ptr = pointer(capsule, versioned)
        if versioned and major != 1:
            raise _errors.unsupported_major(major)
        _check_readable(ndim, shape_p, dt, di)
        _check_layout(fault, data, offset, shape, strides, bits, lanes)
        if check_dtype is not None:
            check_dtype(code, bits, lanes)
    except BufferError:
        discard(capsule, versioned)
        raise
    return versioned, Header(ptr, major, minor, flags, dt, di, code, bits, lanes, ndim, strides_p)


def _read(capsule) -> CapsuleInfo:
    """What the core's ``read`` will not read, in words: another major
    version, an ndim out of range, a NULL shape, no DLPack device, a layout
    no importer can hold (the checks of an import, in its order)."""
    versioned, fields, shape, strides, fault = snapshot(capsule)
    major, minor, flags, data, dt, di, ndim, code, bits, lanes, shape_p, strides_p, offset = fields
    if versioned and major != 1:
        # Another major version may lay the struct out differently: only
        # the version and flags words are safe to read.
        raise _errors.unreadable_major((major, minor))
    _check_readable(ndim, shape_p, dt, di)
    _check_layout(fault, data, offset, shape, strides, bits, lanes)
    return CapsuleInfo(
        name=VERSIONED if versioned else LEGACY,
        versioned=versioned,
        version=(major, minor) if versioned else None,
        flags=flags,
        device=Device((dt, di)),
        dl_dtype=(code, bits, lanes),
        shape=shape,
        strides=strides,
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
    "discard": _not_taken, "move": _not_taken, "snapshot": _not_taken, "checked": _checked,
    "read": _read, "stamp_version": _stamp_version, "set_flags": _not_written, "set_version": _not_written,
    "kind": _kind, "set_dtype": _not_set, "set_device": _not_set,
}
