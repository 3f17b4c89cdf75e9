"""A view of any producer's memory without taking it: ``view(x)``, in the
manner of cuda.core's ``StridedMemoryView``: the pointer, shape, strides,
NumPy dtype, device, whether it is read-only, and the stream it is ready on.

The producer is asked for a capsule under the rules (zero-copy, on its own
device, versioned so that READ_ONLY is said), the capsule is read and freed
before ``view`` returns (its deleter runs then), and the record keeps the
producer alive instead: the memory stays valid while the record and the
producer live, as it does for the producer itself.

Floor: the two directions, beside ``_export`` and ``_import``: it stands on
the exchange they share and imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _backends, _capsule, _dtypes, _exchange, _streams, _versions
from ._devices import Device
from ._typing import StreamLike


@dataclass(frozen=True)
class ArrayView:
    """What ``gpu_dlpack.view(x)`` reads of a producer's memory.

    ``ptr`` is the address of the first element (the capsule's data plus
    its byte offset); ``strides`` are in elements, as DLPack counts them
    (filled in for C order when the producer gives none); ``dtype`` is the
    NumPy dtype (None when NumPy has none, as for bfloat16 without
    ml_dtypes) and ``dl_dtype`` the DLPack ``(code, bits, lanes)``;
    ``stream`` is the stream the data is ready on (a handle: the producer
    ordered its pending work before it), None for memory without streams;
    ``obj`` is the producer, kept alive by the record.
    """

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype[Any] | None
    dl_dtype: tuple[int, int, int]
    device: Device
    readonly: bool
    stream: int | None
    obj: Any = field(repr=False)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        """Bytes per element (a sub-byte type takes one byte each, padded)."""
        return max(1, (self.dl_dtype[1] * self.dl_dtype[2] + 7) // 8)


def view(x: Any, /, *, stream: StreamLike | None = None) -> ArrayView:
    """The memory of any producer (or of a raw capsule, which is not
    consumed), read without keeping or consuming anything of it.

    >>> import numpy as np, gpu_dlpack
    >>> a = np.zeros((2, 3), np.float32)
    >>> v = gpu_dlpack.view(a)
    >>> v.ptr == a.ctypes.data, v.shape, v.strides, v.dtype, v.readonly
    (True, (2, 3), (3, 1), dtype('float32'), False)

    On a GPU, ``stream`` is the stream the memory will be used on: the
    producer orders its pending work before it, as for ``from_dlpack``;
    without it, the stream of an enclosing ``use_stream`` block, else the
    default stream of the device (the legacy default stream on CUDA).
    """
    if type(x) is _capsule.CapsuleType:
        info = _capsule.read(x)
        # A legacy capsule cannot say its data may be written: read-only, as
        # its import is.
        return _record(info, None, x, info.read_only or not info.versioned)
    if stream is not None and type(stream) is not int:
        stream = _streams.handle_of(stream)
    if stream is None:
        try:
            stream = _streams.block_stream(_backends.device_of(x))
        except (AttributeError, TypeError, ValueError, BufferError):
            pass  # the export itself says what is wrong
    capsule = _exchange._export(x, False, stream, _versions.DLPACK_VERSION, None, None)
    try:
        info = _capsule.read(capsule)
    finally:
        # Read: the capsule goes now, and its deleter with it.
        _capsule.discard(capsule, _capsule.kind(capsule))
    ready_on = None
    if info.device.type in _streams.RULES:
        ready_on = _streams.resolve(stream, info.device.type)
    return _record(info, ready_on, x, info.read_only)


def _record(info, stream, obj, readonly) -> ArrayView:
    shape = info.shape
    strides = info.strides
    if strides is None:
        strides = _c_strides(shape)
    try:
        dtype = _dtypes.to_numpy(*info.dl_dtype).numpy
    except BufferError:
        dtype = None
    return ArrayView(
        ptr=info.data + info.byte_offset, shape=shape, strides=strides, dtype=dtype,
        dl_dtype=info.dl_dtype, device=info.device, readonly=readonly, stream=stream, obj=obj,
    )


def _c_strides(shape) -> tuple:
    strides = []
    step = 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))
