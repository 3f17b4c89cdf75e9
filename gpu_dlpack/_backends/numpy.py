"""The NumPy backend: host memory. Exports through NumPy's own ``__dlpack__``
(whose C deleter is safe on any thread and at shutdown) and imports through
``numpy.from_dlpack``, patching in what NumPy cannot say itself: the layer's
version, the strides NumPy 2.1 to 2.3 leave out of a C-contiguous array's
versioned capsule (DLPack requires them since 1.2), and the dtypes NumPy
does not know (bfloat16, float8, sub-byte).

NumPy before 2.1 makes and reads only legacy capsules: versioned ones are
then built and read by ``_old_numpy``.

An ndarray subclass that overrides ``__dlpack__`` is a producer of its own
(it may take only ``stream``, as every producer older than the standard's
keywords): it is asked like any foreign producer, not exported here.

Floor: the backends, at the bottom of them with ``_old_numpy``.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _capsule, _dtypes, _errors, _peers
from .._devices import HOST_ACCESSIBLE
from .._versions import DLPACK_VERSION
from . import _old_numpy

_ASK = (1, 0)  # NumPy produces 1.0; the capsule is relabelled DLPACK_VERSION
_STAMP = _capsule.version_word(DLPACK_VERSION)
_ndarray_dlpack = np.ndarray.__dlpack__
# The device types numpy.from_dlpack imports (the CPU, pinned and managed
# memory; numpy/_core/src/multiarray/dlpack.c).
_NUMPY_NAMES = frozenset({1, 3, 11, 13})


class _Handoff:
    """Hands one checked capsule to ``numpy.from_dlpack``."""

    __slots__ = ("capsule", "device")

    def __init__(self, capsule, device):
        self.capsule = capsule
        self.device = device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self.capsule  # keywords named, not **kwargs: no dict per call

    def __dlpack_device__(self):
        return self.device


def _versioned_numpy() -> tuple[bool, bool]:
    """``(VERSIONED_NUMPY, STRIDES_AFTER_SHAPE)``, read from a probe capsule."""
    try:
        capsule = np.zeros((2, 3), np.int16).__dlpack__(max_version=_ASK)
    except TypeError:
        return False, False  # before 2.1: legacy capsules only
    if not _capsule.point_strides_after_shape(capsule):
        return True, False  # 2.4 and later: strides whenever ndim > 0
    # NumPy 2.1 to 2.3 (its src/multiarray/dlpack.c, the same in
    # every release of them) allocate the strides right after the shape and
    # fill them, then leave a C-contiguous array's out (NULL): DLPack allowed
    # that before 1.2, which requires strides for ndim > 0. Pointed at again
    # they are the array's strides, and the capsule meets 1.2 with nothing
    # built or copied: NumPy reads the probe's back as the array's.
    if tuple(int(part) for part in np.__version__.split(".")[:2]) < (2, 4):
        if np.from_dlpack(_Handoff(capsule, (1, 0))).strides == (6, 2):
            return True, True
    # Left out by a NumPy whose layout is not known here (the int64s after
    # the shape may not be its to read): versioned capsules are built and
    # read here, as for NumPy before 2.1.
    return False, False


#: Whether NumPy's own versioned capsules are made and read (NumPy 2.1+);
#: False: ``_old_numpy`` builds and reads them.
#: STRIDES_AFTER_SHAPE: whether NumPy leaves a C-contiguous array's strides
#: out of them, to be pointed at where it wrote them (NumPy 2.1 to 2.3).
VERSIONED_NUMPY, STRIDES_AFTER_SHAPE = _versioned_numpy()


def _relabel(capsule) -> None:
    """NumPy's versioned capsule as the layer's: stamped DLPACK_VERSION, with
    the strides DLPack 1.2 requires pointed at where NumPy 2.1 to 2.3 wrote
    them."""
    _capsule.stamp_version(capsule, _STAMP)
    if STRIDES_AFTER_SHAPE:
        _capsule.point_strides_after_shape(capsule)


def owns(x) -> bool:
    return isinstance(x, np.ndarray) and type(x).__dlpack__ is _ndarray_dlpack


def export(arr: np.ndarray, plan, dtype: _dtypes.DType):
    """A capsule for ``arr`` as ``plan`` says (the device is the CPU)."""
    view = arr if dtype.carrier is None else arr.view(dtype.carrier)
    if not VERSIONED_NUMPY:  # legacy capsules only: a versioned one is built by _old_numpy
        flags = 0
        if plan.copy:
            view = np.array(view, copy=True)
            flags |= _capsule.IS_COPIED
        if not plan.versioned:
            if plan.read_only:
                raise _errors.readonly_legacy(_peers.legacy_askers())
            capsule = view.__dlpack__()
            if dtype.carrier is not None:
                _capsule.set_dtype(capsule, dtype.code, dtype.bits)
            return capsule
        if plan.read_only:
            flags |= _capsule.READ_ONLY
        if dtype.padded:
            flags |= _capsule.IS_SUBBYTE_TYPE_PADDED
        return _old_numpy.export_versioned(view, _STAMP, flags, dtype.code, dtype.bits)
    if plan.read_only and view.flags.writeable:
        view = view.view()
        view.flags.writeable = False
    # NumPy makes a planned copy itself, and then sets IS_COPIED.
    capsule = view.__dlpack__(
        max_version=_ASK if plan.versioned else None, copy=True if plan.copy else None
    )
    if plan.versioned:
        _relabel(capsule)
    if dtype.carrier is not None:
        _capsule.set_dtype(capsule, dtype.code, dtype.bits)
        if plan.versioned and dtype.padded:
            flags = _capsule.read(capsule).flags
            _capsule.set_flags(capsule, flags | _capsule.IS_SUBBYTE_TYPE_PADDED)
    return capsule


def export_in_place(arr: np.ndarray, versioned: bool):
    """NumPy's own capsule for ``arr`` where it is already what the rules ask
    for (on the CPU, no copy, a dtype NumPy describes, READ_ONLY set by NumPy
    for read-only data), relabelled DLPACK_VERSION (with its strides) when
    versioned. None when NumPy refuses (a read-only array as legacy, a dtype
    it cannot export): the general path then says why, in gpu_dlpack's words."""
    if versioned and not VERSIONED_NUMPY:
        return None  # built by the general path
    try:
        capsule = arr.__dlpack__(max_version=_ASK) if versioned else arr.__dlpack__()
    except BufferError:
        return None
    if versioned:
        _relabel(capsule)
    return capsule


def consume(capsule, versioned, header) -> np.ndarray:
    """A NumPy array over a checked capsule's host memory (zero-copy).

    NumPy renames the capsule, calls the deleter when the array and all its
    views are gone, makes READ_ONLY and legacy imports non-writeable.
    """
    dtype = dtype_of(header, "NumPy")
    if dtype.carrier is not None:
        _capsule.set_dtype(capsule, _dtypes.UINT, dtype.carrier.itemsize * 8)
    if versioned and not VERSIONED_NUMPY:
        try:
            arr = _old_numpy.consume_versioned(capsule, dtype.carrier or dtype.numpy)
        except (RuntimeError, TypeError, ValueError) as exc:
            raise _errors.numpy_refused(exc) from exc
    else:
        # Host memory (_devices.MEMORY) of a type NumPy does not name is
        # imported labelled as the CPU's, the producer's label put back at
        # once (its deleter may read it); other memory NumPy refuses.
        device = (header.device_type, header.device_id)
        relabel = header.device_type not in _NUMPY_NAMES and header.device_type in HOST_ACCESSIBLE
        if relabel:
            _capsule.set_device(capsule, 1, 0)
        try:
            arr = np.from_dlpack(_Handoff(capsule, (1, 0) if relabel else device))
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:
            # NumPy 2.5 raises BufferError where earlier ones raise RuntimeError.
            raise _errors.numpy_refused(exc) from exc
        finally:
            if relabel:
                _capsule.set_device(capsule, *device)
    if dtype.carrier is not None:
        arr = arr.view(dtype.numpy)
    return arr


def dtype_of(header, holder: str) -> _dtypes.DType:
    """The dtype of a checked capsule's ``header``, for an array of
    ``holder`` (NumPy, CuPy), which has no layout for packed sub-byte data."""
    dtype = _dtypes.to_numpy(header.code, header.bits, header.lanes)
    if dtype.padded and not header.flags & _capsule.IS_SUBBYTE_TYPE_PADDED:
        why = f"packed sub-byte data (without the IS_SUBBYTE_TYPE_PADDED flag) has no {holder} layout"
        raise _errors.unsupported_dtype(header.code, header.bits, header.lanes, why)
    return dtype


def aligned_copy(arr: np.ndarray, alignment: int, stream=None) -> np.ndarray:
    """A writeable C-order copy of ``arr`` whose first element is at a
    multiple of ``alignment`` bytes (and of its dtype's alignment)."""
    alignment = math.lcm(max(alignment, 1), arr.dtype.alignment)
    raw = np.empty(arr.nbytes + alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment
    out = raw[start:start + arr.nbytes].view(arr.dtype).reshape(arr.shape)
    np.copyto(out, arr)
    return out
