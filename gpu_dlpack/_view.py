"""A view of any producer's memory without taking it: ``view(x)``, in the
manner of cuda.core's ``StridedMemoryView`` and in its vocabulary, and
``args_viewable``, its ``args_viewable_as_strided_memory``. It is no array:
no ``__array_namespace__``, so array-api-compat's ``array_namespace``
refuses it, as it does a ``wrap(x)``.

Floor: the two directions, beside ``_export`` and ``_import``: it stands on
the exchange they share and imports neither.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import numpy as np

from . import _capsule, _dtypes, _errors, _exchange, _streams, _versions
from ._devices import DEVICE_ACCESSIBLE, Device, DLDeviceType
from ._typing import StreamLike

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ArrayView:
    """What `view` reads of a producer's memory.

    A frozen record; it keeps the producer alive (``obj``), not the capsule it
    read, which `view` freed before it returned.

    Attributes
    ----------
    ptr : int
        The address of the first element (the capsule's data plus its byte
        offset).
    shape : tuple of int
        The shape.
    strides : tuple of int
        The strides in elements, as DLPack counts them (filled in for C order
        when the producer gives none).
    dtype : numpy.dtype or None
        The NumPy dtype; None where NumPy has none (bfloat16 without
        ml_dtypes).
    dl_dtype : tuple of int
        The DLPack ``(code, bits, lanes)``.
    device : Device
        Where the memory is (what array-api-compat's ``device`` reads).
    readonly : bool
        Whether the memory is read-only (READ_ONLY, or a read-only source).
    stream : int or None
        On a GPU, the stream handle the data is ready on (the producer ordered
        its pending work before it); None for memory without streams.
    exporting_obj : object
        The producer (cuda.core's name; ``obj`` is its deprecated alias).
    device_id : int
        The device's index, -1 for memory only the host reads (the CPU), as
        cuda.core's ``StridedMemoryView`` says it.
    is_device_accessible : bool
        Whether a GPU reads the memory in place: GPU memory, pinned and
        managed memory (cuda.core's name).
    ndim : int
        The number of dimensions.
    itemsize : int
        Bytes per element (a sub-byte type takes one byte each, padded).

    Examples
    --------
    >>> import numpy as np, gpu_dlpack
    >>> v = gpu_dlpack.view(np.zeros((4, 3), np.int16)[::2])
    >>> v.shape, v.strides, v.itemsize, v.ndim
    ((2, 3), (6, 1), 2, 2)
    """

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype[Any] | None
    dl_dtype: tuple[int, int, int]
    device: Device
    readonly: bool
    stream: int | None
    exporting_obj: Any = field(repr=False)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def device_id(self) -> int:
        return -1 if self.device.type == DLDeviceType.CPU else self.device.index

    @property
    def is_device_accessible(self) -> bool:
        return self.device.type in DEVICE_ACCESSIBLE

    @property
    def obj(self) -> Any:
        """Deprecated: `exporting_obj`."""
        warnings.warn(_errors.renamed("ArrayView", "obj", "exporting_obj"), stacklevel=2)
        return self.exporting_obj

    @property
    def itemsize(self) -> int:
        """Bytes per element (a sub-byte type takes one byte each, padded)."""
        return max(1, (self.dl_dtype[1] * self.dl_dtype[2] + 7) // 8)


def view(x: Any, /, *, stream: StreamLike | None = None) -> ArrayView:
    """The memory of any producer, read without keeping or consuming it.

    The way cuda.core's ``StridedMemoryView`` reads it: the producer is asked
    for a capsule, the capsule is read and freed before this returns. A raw
    capsule is read without being consumed.

    Parameters
    ----------
    x : object
        Any DLPack producer, an object of another array protocol, or a raw
        DLPack capsule.
    stream : int or stream object, optional
        On a GPU, the stream the memory will be used on: the producer orders
        its pending work before it, as for `from_dlpack`. Default: the stream
        of an enclosing `use_stream` block, else the device's default stream
        (the legacy default stream on CUDA).

    Returns
    -------
    ArrayView
        Pointer, shape, strides (in elements), NumPy dtype, device,
        read-only, and the stream the data is ready on.

    Raises
    ------
    NotDLPackError
        ``x`` speaks no array protocol (a ``TypeError``).
    BufferError
        A capsule that is malformed or was consumed.

    See Also
    --------
    inspect : The same record of a capsule, unconsumed.

    Examples
    --------
    >>> import numpy as np, gpu_dlpack
    >>> a = np.zeros((2, 3), np.float32)
    >>> v = gpu_dlpack.view(a)
    >>> v.ptr == a.ctypes.data, v.shape, v.strides, v.dtype, v.readonly
    (True, (2, 3), (3, 1), dtype('float32'), False)
    """
    if type(x) is _capsule.CapsuleType:
        info = _capsule.read(x)
        # A legacy capsule cannot say its data may be written: read-only, as
        # its import is.
        ready_on, readonly = None, info.readonly or not info.versioned
    else:
        stream = _exchange.stream_for(x, stream)
        capsule = _exchange._export(x, False, stream, _versions.DLPACK_VERSION, None, None)
        try:
            info = _capsule.read(capsule)
        finally:
            _capsule.discard(capsule)
        ready_on = _streams.resolve(stream, info.device.type) if info.device.type in _streams.RULES else None
        readonly = info.readonly
    shape, strides = info.shape, info.strides
    if strides is None:  # C order
        strides = tuple(math.prod(max(n, 1) for n in shape[i + 1:]) for i in range(len(shape)))
    try:
        dtype = _dtypes.to_numpy(*info.dl_dtype).numpy
    except BufferError:
        dtype = None
    return ArrayView(
        ptr=info.data + info.byte_offset, shape=shape, strides=strides, dtype=dtype,
        dl_dtype=info.dl_dtype, device=info.device, readonly=readonly, stream=ready_on, exporting_obj=x,
    )


class _Viewable:
    """An argument of a function decorated with `args_viewable`: the object
    passed, viewed when the function says on which stream."""

    __slots__ = ("exporting_obj",)

    def __init__(self, obj):
        self.exporting_obj = obj

    def view(self, stream: StreamLike | None = None) -> ArrayView:
        """``view(obj, stream=stream)``: the memory, ready on ``stream``."""
        return view(self.exporting_obj, stream=stream)

    def __repr__(self) -> str:
        return f"args_viewable argument ({type(self.exporting_obj).__module__}.{type(self.exporting_obj).__qualname__})"


def args_viewable(arg_indices: tuple[int, ...], /) -> Callable[[_F], _F]:
    """A decorator for functions that read array memory (kernels): the
    positional arguments at ``arg_indices`` reach the function as objects
    whose ``view(stream)`` is `view` of what was passed.

    cuda.core's ``args_viewable_as_strided_memory``, over `view`: the body
    names the stream the memory is used on once it knows it, and any
    producer a caller passes (NumPy, CuPy, PyTorch, JAX, a CUDA Array
    Interface, a raw capsule...) is read the same way. The decorated function
    keeps its name, docstring and signature; a position the call does not
    fill is left to the function's own signature.

    Parameters
    ----------
    arg_indices : tuple of int
        The positions of the arguments to view (negative ones count from the
        end, as in a list).

    Returns
    -------
    callable
        The decorator.

    Raises
    ------
    TypeError
        ``arg_indices`` is not a tuple of ints.

    See Also
    --------
    view : What each argument's ``view()`` returns.

    Examples
    --------
    >>> import numpy as np, gpu_dlpack
    >>> @gpu_dlpack.args_viewable((0,))
    ... def describe(x, scale, stream=None):
    ...     v = x.view(stream)
    ...     return v.shape, v.dtype, v.device_id, v.is_device_accessible, scale
    >>> describe(np.zeros((2, 3), np.float32), 2.0)
    ((2, 3), dtype('float32'), -1, False, 2.0)
    >>> describe.__name__
    'describe'
    """
    if type(arg_indices) is not tuple or not all(type(i) is int for i in arg_indices):
        raise _errors.bad_arg_indices(arg_indices)

    def decorate(func: _F) -> _F:
        @functools.wraps(func)
        def viewed(*args: Any, **kwargs: Any) -> Any:
            given = list(args)
            for i in arg_indices:
                if -len(given) <= i < len(given):
                    given[i] = _Viewable(given[i])
            return func(*given, **kwargs)

        return viewed  # type: ignore[return-value]

    return decorate
