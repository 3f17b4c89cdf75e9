"""The producer kit: what a library needs to give a class of its own correct
DLPack, without writing any of the protocol: ``Producer``, a mixin over one
hook, and ``from_pointer``, memory C code owns named by a pointer.

Floor: the export direction's kit, over ``_export`` (never over ``_import``).
"""

from __future__ import annotations

import math
import operator
from typing import Any, Sequence

import numpy as np

from . import _capsule, _dtypes, _errors, _protocols, _streams
from ._devices import CPU, Device
from ._export import Exportable, wrap
from ._typing import Capsule, DeviceLike, StreamLike, Version


class Producer:
    """A mixin that gives a class ``__dlpack__`` and ``__dlpack_device__`` from
    one hook, and NumPy's array interface for host memory.

    A subclass defines ``dlpack_memory()``, which names the memory to export,
    and writes none of the protocol. Every request is served as
    ``gpu_dlpack.wrap(memory)`` serves it: any consumer, old or new, gets what
    the standard says. The mixin has no state (``__slots__ = ()``); the memory
    is asked for at each request, so a class whose memory changes needs
    nothing more.

    Host memory (the CPU, pinned and managed memory) also gives
    ``__array_interface__`` and ``__array__``, so that ``np.asarray(obj)`` is
    a NumPy array over it, read-only where the memory is (never a writeable
    array over read-only memory). What the interface names stays valid while
    the object lives; memory a GPU holds has no interface (``np.asarray``
    then says how to copy it to the host).

    See Also
    --------
    from_pointer : Memory that C code owns, for ``dlpack_memory()`` to return.

    Examples
    --------
    >>> import numpy as np, gpu_dlpack
    >>> class Samples(gpu_dlpack.Producer):
    ...     def __init__(self, n):
    ...         self._data = np.arange(n, dtype=np.float32)
    ...     def dlpack_memory(self):
    ...         return self._data
    >>> s = Samples(3)
    >>> np.from_dlpack(s).tolist()
    [0.0, 1.0, 2.0]
    >>> s.__dlpack_device__()
    (1, 0)
    >>> np.asarray(s).tolist(), np.shares_memory(np.asarray(s), s._data)
    ([0.0, 1.0, 2.0], True)
    """

    __slots__ = ()

    def dlpack_memory(self) -> Any:
        """The memory to export: the hook a subclass defines.

        Returns
        -------
        object
            An array of any DLPack library (NumPy, CuPy, PyTorch, JAX...) or any
            object `wrap` takes (the CUDA Array Interface, NumPy's array
            interface, the buffer protocol); ``gpu_dlpack.from_pointer(...)`` for
            memory C code owns; ``gpu_dlpack.wrap(x, readonly=True)`` (or a
            read-only NumPy array) for data consumers must not write.

        Raises
        ------
        NotImplementedError
            The subclass defines no ``dlpack_memory``.
        """
        raise _errors.no_dlpack_memory(self)

    def __dlpack__(
        self, /, *, stream: StreamLike | None = None, max_version: Version | None = None,
        dl_device: tuple[int, int] | None = None, copy: bool | None = None,
    ) -> Capsule:
        """A DLPack capsule of ``dlpack_memory()``, under the rules (the standard's
        ``__dlpack__``).

        Parameters
        ----------
        stream : int or stream object, optional
            The stream the consumer uses the data on.
        max_version : tuple of int, optional
            The newest DLPack version the consumer reads.
        dl_device : tuple of int, optional
            The ``(device_type, device_id)`` to export to.
        copy : bool, optional
            ``True`` always copies, ``False`` never, ``None`` when it must.

        Returns
        -------
        PyCapsule
            A ``dltensor`` or ``dltensor_versioned`` capsule.
        """
        return _exportable(self).__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self, /) -> tuple[int, int]:
        """The ``(device_type, device_id)`` of ``dlpack_memory()``.

        Returns
        -------
        tuple of int
            The DLPack device pair.
        """
        return _exportable(self).__dlpack_device__()

    @property
    def __array_interface__(self) -> dict:
        """NumPy's array interface of ``dlpack_memory()`` in host memory
        (AttributeError off the host); its ``data`` a buffer that keeps the
        memory alive."""
        exportable = _exportable(self)
        return _held_interface(exportable, exportable.__array_interface__)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """``dlpack_memory()`` as a NumPy array, over the memory, or a copy
        where ``copy=True`` or another ``dtype`` asks for one (TypeError off
        the host)."""
        exportable = _exportable(self)
        if not exportable.device.is_host_accessible:
            raise _errors.not_on_host(self, exportable.device)
        out = np.asarray(exportable)  # over the memory, kept by the wrapper (its base)
        wanted = None if dtype is None else np.dtype(dtype)
        if wanted is not None and wanted != out.dtype:
            if copy is False:
                raise _errors.array_copy_forbidden(self, out.dtype, wanted)
            return out.astype(wanted)
        return out.copy() if copy is True else out


def _exportable(producer) -> Exportable:
    """What ``producer.dlpack_memory()`` names, as `wrap` serves it. A
    Producer that speaks no protocol but this mixin's names its memory by
    its own ``dlpack_memory()`` only: that is followed, and a chain of them
    that comes back to where it started (a hook returning its own object)
    names no memory at all (TypeError, not an endless recursion)."""
    memory = producer.dlpack_memory()
    seen = None
    while isinstance(memory, Producer) and _mixin_only(memory):
        if seen is None:
            seen = {id(producer)}
        if id(memory) in seen:
            raise _errors.dlpack_memory_names_no_memory(producer, memory)
        seen.add(id(memory))
        memory = memory.dlpack_memory()
    return memory if type(memory) is Exportable else wrap(memory)


_MIXIN = ("__dlpack__", "__dlpack_device__", "__array_interface__")


def _mixin_only(memory) -> bool:
    """Whether a Producer's every array protocol is this mixin's (its type
    defines none of its own, no CUDA Array Interface, no buffer)."""
    t = type(memory)
    if any(getattr(t, name, None) is not getattr(Producer, name) for name in _MIXIN):
        return False
    if getattr(t, "__cuda_array_interface__", None) is not None:
        return False
    try:
        memoryview(memory)
    except TypeError:
        return True
    except Exception:  # it claims the buffer protocol
        return False
    return False


def _held_interface(exportable, interface) -> dict:
    """``interface`` with ``data`` a flat buffer over the bytes it spans,
    held by the array over them (whose base, the wrapper, holds the memory),
    and ``offset`` the first element's place in it: NumPy keeps that buffer,
    not the producer, so memory ``dlpack_memory()`` made afresh stays valid."""
    address, readonly = interface["data"]
    shape, strides = interface["shape"], interface.get("strides")  # left out for C order
    itemsize = np.dtype(interface["descr"] if interface["typestr"][1] == "V" else interface["typestr"]).itemsize
    if strides is None:
        strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) * itemsize for i in range(len(shape)))
    if 0 in shape or address == 0:
        return interface  # no memory to keep
    low, high = _capsule.reach(shape, strides)
    flat = {"version": 3, "shape": (high + itemsize - low,), "typestr": "|u1", "data": (address + low, readonly)}
    held = dict(interface)
    held["data"], held["offset"] = np.asarray(_capsule.Held(flat, np.asarray(exportable))), -low
    return held


def from_pointer(
    ptr: int, shape: Sequence[int], dtype: Any, /, *, strides: Sequence[int] | None = None,
    device: DeviceLike = "cpu", owner: Any = None, readonly: bool = False, stream: StreamLike | None = None,
) -> Exportable:
    """A DLPack producer over memory named by a pointer, for buffers that C code
    owns.

    The result is what `wrap` returns: any consumer takes it, and the rules
    apply (a copy or a move of host memory is the layer's; GPU memory is lent
    as it is, and a copy or a move of it is the consumer's to ask from
    `from_dlpack`). READ_ONLY reaches every consumer that asks for a versioned
    capsule.

    Parameters
    ----------
    ptr : int
        The address of the first element.
    shape : sequence of int
        The shape.
    dtype : numpy.dtype or what it takes
        Anything ``numpy.dtype`` takes, ``ml_dtypes`` types included.
    strides : sequence of int, optional
        The strides in elements, as DLPack counts them; None: C order.
    device : str, tuple, Device or device object, default "cpu"
        Any device `Device` reads: ``"cpu"``, ``"cuda:0"``, ``"cuda_host"``,
        ``"cuda_managed"``, a torch or JAX device...
    owner : object, optional
        The object whose finalizer frees the memory (a ctypes buffer, a
        capsule, an object with ``__del__``): kept alive until the last
        consumer's deleter has run, once, and the returned producer is gone.
    readonly : bool, default False
        Export the memory read-only.
    stream : int or stream object, optional
        For GPU memory, the stream the data is ready on: a consumer's stream
        waits for it with an event. None: nothing is pending.

    Returns
    -------
    Exportable
        The producer over the memory.

    Raises
    ------
    TypeError
        An argument of the wrong type (``ptr`` not an int, ``shape`` not a
        sequence of ints...).
    ValueError
        A negative address or dimension, a NULL pointer with elements, strides
        that do not match the shape, a dtype NumPy does not read.

    See Also
    --------
    Producer : A class of one's own as a producer.

    Examples
    --------
    >>> import ctypes, numpy as np, gpu_dlpack
    >>> buf = (ctypes.c_int32 * 6)(*range(6))
    >>> p = gpu_dlpack.from_pointer(ctypes.addressof(buf), (2, 3), np.int32, owner=buf)
    >>> np.from_dlpack(p).tolist()
    [[0, 1, 2], [3, 4, 5]]
    >>> np.from_dlpack(gpu_dlpack.from_pointer(ctypes.addressof(buf), (3,), np.int32, strides=(2,))).tolist()
    [0, 2, 4]
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
    size = math.prod(dims)
    if address == 0 and size:
        raise _errors.bad_pointer_argument("ptr", ptr, f"it is NULL but the shape {tuple(dims)} has elements")
    # Memory no 64-bit address space holds (int64 dimensions and byte steps,
    # extents of 0 counted as 1): an importer's checks of a capsule, made
    # before NumPy meets the numbers as an OverflowError.
    if address >= 2**64:
        raise _errors.bad_pointer_argument("ptr", ptr, "an address is below 2**64")
    count = 1
    for n in dims:
        if n >= 2**63:
            raise _errors.bad_pointer_argument("shape", shape, "each dimension is below 2**63")
        count *= n or 1
    if count * itemsize > _MAX_BYTES:
        raise _errors.bad_pointer_argument(
            "shape", shape, f"its extents of {itemsize}-byte elements hold more than 2**63 - 1 bytes"
        )
    if steps is None:
        low, high = 0, (count - 1) * itemsize
    else:
        if any(not -_MAX_BYTES - 1 <= s * itemsize <= _MAX_BYTES for s in steps):
            raise _errors.bad_pointer_argument(
                "strides", strides, f"each step of {itemsize}-byte elements is within an int64 count of bytes"
            )
        low, high = (end * itemsize for end in _capsule.reach(dims, steps))
    if 0 not in dims and (address + low < 0 or address + high + itemsize > 2**64):
        raise _errors.bad_pointer_argument(
            "strides" if steps is not None else "shape", strides if steps is not None else shape,
            f"the memory it describes from {address:#x} reaches outside the 64-bit address space",
        )
    where = Device(device)
    handle = None if stream is None else _streams.check_stream(_streams.handle_of(stream), where.type)
    info = {
        "shape": tuple(dims), "dtype": numpy_dtype, "ptr": address, "readonly": readonly,
        "strides": None if steps is None else tuple(s * itemsize for s in steps),
        "stream": handle, "size": size,
    }
    if where == CPU:
        # Host memory is a NumPy array over it: every rule of host data applies.
        return wrap(_protocols.host_array(info, owner), readonly=readonly)
    return wrap(_protocols.Lent(owner, info, where), readonly=readonly)


_MAX_BYTES = 2**63 - 1


def _index(name, value) -> int:
    try:
        if not isinstance(value, bool):
            return operator.index(value)
    except TypeError:
        pass
    raise _errors.bad_pointer_type(name, value, "an int")


def _ints(name, values) -> list:
    try:
        items = list(values)
    except TypeError:
        raise _errors.bad_pointer_type(name, values, "a sequence of ints") from None
    return [_index(name, v) for v in items]
