"""The DLPack capsule ABI as Python uses it (the LP64 layout of dlpack.h,
little-endian: other interpreters are refused at import). Mechanism only:
``_rules`` decides whether an exchange may happen.

The compiled core does the work, by the names the layer calls, and raises
what it refuses in the layer's words (``_errors``' factories). What stays
here is what the core returns (``Header``, ``CapsuleInfo``).

Floor: mechanism, over the loaded core and the leaves.
"""

from __future__ import annotations

import datetime
import struct
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from . import _dtypes, _errors
from . import _compiled
from ._devices import Device

LEGACY = "dltensor"

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
#: The structs of a capsule as dlpack.h lays them out (the platform
#: check_platform accepts): DLManagedTensorVersioned (version, manager_ctx,
#: deleter, flags, then the DLTensor: data, device, ndim, dtype, shape,
#: strides, byte_offset) and DLManagedTensor (the DLTensor, manager_ctx, deleter).
VERSIONED_HEAD = struct.Struct("<IIQQQQiiiBBHQQQ")
LEGACY_HEAD = struct.Struct("<QiiiBBHQQQQQ")


@dataclass(frozen=True, init=False)
class CapsuleInfo(_compiled.CapsuleFields):
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


def byte_strides(strides, itemsize: int) -> tuple | None:
    """Strides in elements (None: C order) as strides in bytes. (No closure
    over ``itemsize``: on CPython 3.11 a function whose cell fails to be
    made, out of memory, leaks its arguments, a capsule among them.)"""
    return None if strides is None else tuple(map(itemsize.__mul__, strides))


def version_word(version) -> int:
    """``version`` as the 64-bit word ``stamp_version`` writes."""
    return _U64.unpack(_VERSION_FMT.pack(*version))[0]


class Held:
    """An array interface (``__array_interface__``) and the owner of its
    memory: NumPy's view of it (``numpy.asarray``) keeps the owner alive."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, interface, owner):
        self.__array_interface__ = interface
        self.owner = owner


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
# refuses the core raises, worded by _errors (not_taken, capsule_fault...).
# Their signatures and what each does: the core's docstrings.
from ._compiled import (  # noqa: E402
    OWNING_DESTRUCTORS, checked, counted_capsule, discard, is_unconsumed, kind, move, point_strides_after_shape,
    pointer, read, set_device, set_dtype, set_flags, set_version, stamp_version,
)


def take(capsule) -> Owner:
    """Take ownership of an unconsumed capsule (rename it ``used_*``) and
    return the ``Owner`` that frees its tensor when it dies."""
    return Owner(move(capsule))


def handover(capsule):
    """``(versioned, private)`` for a capsule a caller handed to the layer
    (and may have shared with other threads): its tensor ``move``d to a
    capsule only this call holds, which the layer then checks and consumes
    like any other."""
    versioned = kind(capsule)
    return versioned, move(capsule)

