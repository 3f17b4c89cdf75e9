"""The producer kit: what a library needs to give a class of its own correct
DLPack, without writing any of the protocol.

- ``Producer``, a mixin: the class names its memory in ``dlpack_memory()``
  and gets ``__dlpack__`` and ``__dlpack_device__`` under every rule of the
  layer (versions and the floor, copies, devices, streams, READ_ONLY), as
  ``wrap`` serves them. Whatever else the class speaks (the array
  interface, the buffer protocol), nothing recurses.
- ``from_pointer``: memory that C code owns, named by a pointer, a shape, a
  dtype, strides and a device, kept alive by an owner until the last
  consumer's deleter has run (as nanobind's ``nb::ndarray(ptr, shape,
  owner)`` does).

Floor: the export direction's kit, over ``_export`` (never over ``_import``).
"""

from __future__ import annotations

import operator
from typing import Any, Sequence

import numpy as np

from . import _dtypes, _errors, _protocols, _streams
from ._devices import CPU, Device
from ._export import Exportable, wrap
from ._typing import Capsule, DeviceLike, StreamLike, Version

_Exportable = Exportable


class Producer:
    """A mixin that gives a class ``__dlpack__`` and ``__dlpack_device__``
    from one hook, ``dlpack_memory()``, which names the memory to export:

    - an array of any DLPack library (NumPy, CuPy, PyTorch, JAX...), or any
      object ``gpu_dlpack.wrap`` takes (the CUDA Array Interface, NumPy's
      array interface, the buffer protocol);
    - ``gpu_dlpack.from_pointer(...)`` for memory C code owns;
    - ``gpu_dlpack.wrap(x, readonly=True)`` (or a read-only NumPy array) for
      data consumers must not write.

    Every request is served as ``gpu_dlpack.wrap(memory)`` serves it: any
    consumer, old or new, gets what the standard says.

    >>> import numpy as np, gpu_dlpack
    >>> class Samples(gpu_dlpack.Producer):
    ...     def __init__(self, n):
    ...         self._data = np.arange(n, dtype=np.float32)
    ...     def dlpack_memory(self):
    ...         return self._data
    >>> s = Samples(3)
    >>> np.from_dlpack(s).tolist()
    [0.0, 1.0, 2.0]

    The mixin has no state (``__slots__ = ()``); the memory is asked for at
    each request, so a class whose memory changes needs nothing more.
    """

    __slots__ = ()

    def dlpack_memory(self) -> Any:
        """The memory to export (see the class): what ``gpu_dlpack.wrap``
        takes, or ``gpu_dlpack.from_pointer(...)``."""
        raise _errors.no_dlpack_memory(self)

    def __dlpack__(
        self, /, *, stream: StreamLike | None = None, max_version: Version | None = None,
        dl_device: tuple[int, int] | None = None, copy: bool | None = None,
    ) -> Capsule:
        """A DLPack capsule of ``dlpack_memory()``, under the rules (the
        standard's ``__dlpack__``)."""
        return _exportable(self).__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self, /) -> tuple[int, int]:
        """The ``(device_type, device_id)`` of ``dlpack_memory()``."""
        return _exportable(self).__dlpack_device__()


def _exportable(producer) -> Exportable:
    memory = producer.dlpack_memory()
    return memory if type(memory) is _Exportable else wrap(memory)


def from_pointer(
    ptr: int, shape: Sequence[int], dtype: Any, /, *, strides: Sequence[int] | None = None,
    device: DeviceLike = "cpu", owner: Any = None, readonly: bool = False, stream: StreamLike | None = None,
) -> Exportable:
    """A DLPack producer over memory named by a pointer, for buffers that C
    code owns: ``ptr`` the address of the first element, ``shape``, ``dtype``
    (anything ``numpy.dtype`` takes, ``ml_dtypes`` types included),
    ``strides`` in elements as DLPack counts them (None: C-contiguous),
    ``device`` (``"cpu"``, ``"cuda:0"``, ``"cuda_host"``, a torch or JAX
    device...), ``readonly``, and for GPU memory the ``stream`` the data is
    ready on (consumers' streams wait for it; None: nothing pending).

    ``owner`` is kept alive until the last consumer's deleter has run and
    the returned producer is gone: the object whose finalizer frees the
    memory (a ctypes buffer, a capsule, an object with ``__del__``).

    >>> import ctypes, numpy as np, gpu_dlpack
    >>> buf = (ctypes.c_int32 * 6)(*range(6))
    >>> p = gpu_dlpack.from_pointer(ctypes.addressof(buf), (2, 3), np.int32, owner=buf)
    >>> np.from_dlpack(p).tolist()
    [[0, 1, 2], [3, 4, 5]]

    The result is what ``wrap`` returns: any consumer takes it, and the
    rules apply (a copy or a move of host memory is the layer's; GPU memory
    is lent as it is).
    """
    if readonly is not False and readonly is not True:
        raise _errors.bad_flag("readonly", readonly)
    address = _index("ptr", ptr)
    if address < 0:
        raise _errors.bad_pointer_argument("ptr", ptr, "an address is not negative")
    dims = _ints("shape", shape)
    if any(n < 0 for n in dims):
        raise _errors.bad_pointer_argument("shape", shape, "no dimension is negative")
    try:
        numpy_dtype = np.dtype(dtype)
    except TypeError:
        raise _errors.bad_pointer_argument("dtype", dtype, "it must be a NumPy dtype or what numpy.dtype takes") from None
    itemsize = numpy_dtype.itemsize
    _dtypes.from_numpy(numpy_dtype)  # BufferError for what DLPack cannot describe
    steps = None
    if strides is not None:
        steps = _ints("strides", strides)
        if len(steps) != len(dims):
            raise _errors.bad_pointer_argument("strides", strides, f"there is one per dimension of {tuple(dims)}")
    size = 1
    for n in dims:
        size *= n
    if address == 0 and size:
        raise _errors.bad_pointer_argument("ptr", ptr, f"it is NULL but the shape {tuple(dims)} has elements")
    where = Device(device)
    handle = None
    if stream is not None:
        handle = _streams.check_stream(_streams.handle_of(stream), where.type)
    info = {
        "shape": tuple(dims), "dtype": numpy_dtype, "ptr": address, "readonly": readonly,
        "strides": None if steps is None else tuple(s * itemsize for s in steps),
        "stream": handle, "size": size,
    }
    if where == CPU:
        # Host memory is a NumPy array over it: every rule of host data applies.
        return wrap(_protocols.host_array(info, owner), readonly=readonly)
    return wrap(_protocols.Lent(owner, info, where), readonly=readonly)


def _index(name, value) -> int:
    if isinstance(value, bool):
        raise _errors.bad_pointer_type(name, value, "an int")
    try:
        return operator.index(value)
    except TypeError:
        raise _errors.bad_pointer_type(name, value, "an int") from None


def _ints(name, values) -> list:
    try:
        items = list(values)
    except TypeError:
        raise _errors.bad_pointer_type(name, values, "a sequence of ints") from None
    return [_index(name, v) for v in items]
