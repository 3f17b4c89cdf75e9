"""Import: ``from_dlpack``, the consumer side of DLPack, and ``shards``.

Negotiates with any producer (new keywords first, then without them), checks
the capsule, and lands the data on the device asked for: a NumPy array for
host targets, a CuPy array for GPU targets. It stands on the exchange the two
directions share (``_exchange``): a NumPy array the view shortcut does not
take goes through its export, and an array spread over several devices
through a gather.

Floor: the two directions, beside ``_export``: neither imports the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import (
    _backends, _capsule, _dtypes, _errors, _exchange, _peers, _protocols, _rules, _shards, _streams, _versions,
)
from ._backends import numpy_backend
from . import _compiled
from ._devices import CPU, HOST_ACCESSIBLE, Device, host_tested, known_on_host
from ._producer import AskedAgain, answer_after, request
from ._shards import Shard
from ._typing import Array, DeviceLike, StreamLike

_ndarray = np.ndarray
_buffer_views = _protocols.BUFFER_VIEWS
_CapsuleType = _capsule.CapsuleType


def from_dlpack(
    x: Any, /, *, device: DeviceLike | None = None, copy: bool | None = None,
    stream: StreamLike | None = None, require_alignment: int = 0, require_contiguous: bool = False,
) -> Array:
    """Import ``x`` (any DLPack producer, or a raw capsule) as an array.

    Host data becomes a NumPy array, zero-copy unless ``copy=True`` or the data
    must move; GPU data becomes a CuPy array. Old and new producers alike are
    negotiated with (asked again without the keywords an old one refuses), and
    the capsule is checked before anything of it is used.

    Parameters
    ----------
    x : object
        Any DLPack producer (NumPy, CuPy, PyTorch, JAX, array-api-strict...),
        an object of another array protocol, or a raw DLPack capsule.
    device : str, tuple, Device or device object, optional
        Where the result lives: ``"cpu"``, ``"cuda:0"``, ``"cuda_host"``, a
        ``(device_type, device_id)`` pair, a `Device`, or a torch, CuPy or JAX
        device. Default: where the data is.
    copy : bool, optional
        ``True`` always gives a fresh writeable array (flagged IS_COPIED where
        it is exported again), ``False`` never copies, ``None`` copies only when
        it must.
    stream : int or stream object, optional
        On a GPU, the stream the result will be used on: an int handle or a
        stream object (``cupy.cuda.Stream``, ``torch.cuda.Stream``, a Numba
        stream...). The producer makes it wait for its pending work, and any
        copy is queued on it. Default: the stream of an enclosing `use_stream`
        block, else CuPy's current stream on the target device.
    require_alignment : int, default 0
        What a kernel asks of the data, as tvm-ffi's ``from_dlpack`` does: the
        address of the first element a multiple of this many bytes (0: any).
        Data that is not gets an aligned copy, only then; ``copy=False``
        refuses it (`CopyRequiredError`).
    require_contiguous : bool, default False
        The same for a C-order layout (an empty array, and an axis of length
        1 with any stride, are): a compact copy where the data is not. The
        copy is made where the result is: a CuPy array on its GPU, a NumPy
        array in host memory (pageable, also for a result over pinned
        memory that needed one).

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        The array, read-only where the data is (READ_ONLY, or a legacy capsule
        that was not copied).

    Raises
    ------
    CopyRequiredError
        ``copy=False`` where the data must be copied (to move it, or to meet
        ``require_alignment`` or ``require_contiguous``).
    DeviceUnreachableError
        A ``device`` the data cannot reach, or no installed backend for it.
    ConsumedCapsuleError
        A capsule that was already consumed.
    BufferError
        A malformed capsule, or data DLPack cannot describe.
    NotDLPackError
        ``x`` speaks no array protocol (a ``TypeError``).
    StreamError
        A ``stream`` the memory's device does not take.

    See Also
    --------
    convert : ``x`` as an array of any library.
    view : What ``x``'s memory is, without importing it.

    Examples
    --------
    >>> import torch, gpu_dlpack
    >>> t = torch.arange(4)
    >>> a = gpu_dlpack.from_dlpack(t)
    >>> a.ctypes.data == t.data_ptr()
    True
    >>> b = gpu_dlpack.from_dlpack(t, copy=True)
    >>> b.ctypes.data == t.data_ptr(), b.flags.writeable
    (False, True)

    For a kernel that reads 64-byte aligned, compact data (a copy only where
    the data is not):

    >>> import numpy as np
    >>> a = np.arange(17.0)[1:]                       # 8 bytes past a boundary
    >>> c = gpu_dlpack.from_dlpack(a, require_alignment=64, require_contiguous=True)
    >>> c.ctypes.data % 64, c.flags.c_contiguous, c.tolist() == a.tolist()
    (0, True, True)
    >>> gpu_dlpack.from_dlpack(c, require_alignment=64).ctypes.data == c.ctypes.data
    True
    """
    if require_alignment.__class__ is not int or require_alignment or require_contiguous is not False:
        return _meeting(x, device, copy, stream, require_alignment, require_contiguous)
    if type(x) is not _ndarray:
        values = _exchange.resolved_views(x, copy)
        if values is not x:  # torch's negative and conjugate bits: the values are a copy's
            return from_dlpack(values, device=device, copy=None, stream=stream)
    if device is None and copy is None and stream is None:
        if type(x) is _ndarray:
            # NumPy into NumPy: a view is the zero-copy import, where DLPack
            # could describe it (strides in whole elements on every axis longer than 1).
            if _id(x.dtype) in _PLAIN and (x.flags.c_contiguous or _whole_elements(x.shape, x.strides, x.itemsize)):
                return x.view(_ndarray)
            # Through the exchange itself: zero-copy for what DLPack can
            # describe (ml_dtypes types), BufferError as NumPy gives for the
            # rest (datetime64, byte-swapped data, a field of a structured array).
            return host_capsule(x, _exchange.export_numpy(x))
        if known_on_host(x):
            return host_capsule(x)
        view = _buffer_views.get(type(x))
        if view is not None:  # bytes, bytearray, memoryview...: a NumPy view
            return view(x)
    if type(x) is _CapsuleType:
        return _from_capsule(x, device, copy, stream)  # checks the rest once it owns x
    _rules.check_copy(copy)
    stream = _streams.handle_of(stream)
    try:
        type(x).__dlpack_device__
        type(x).__dlpack__
    except AttributeError:
        adapted = _protocols.producer(x)  # another array protocol
        if adapted is None:
            raise _errors.not_dlpack(x, _peers.chunks_of(type(x))) from None
        return from_dlpack(adapted, device=device, copy=copy, stream=stream)
    try:
        try:
            source = CPU if host_tested(x) else Device.of(x)  # a producer that answers no device is named
        except BufferError as refused:
            if not _shards.spread(x):
                return _host_copy(x, device, copy, stream, refused)
            # Spread over several devices: its replica on the device asked for
            # (zero-copy where the rules allow), else one gather onto that device.
            target = None if device is None else Device(device)
            one = _shards.replica(x, target)
            if one is not None:
                return from_dlpack(one, device=device, copy=copy, stream=stream)
            if target is None:
                target = _shards.home(x)
            gathered = _exchange.gather(x, target, copy, stream)
            return from_dlpack(gathered, device=target, copy=False if copy else None, stream=stream)
        target = _rules.import_target(source, device)
        needs_copy = _rules.import_needs_copy(source, target, copy, _backends.addressable)
        if target != CPU:
            return _backends.for_device(target).import_to(x, source, target, copy, needs_copy, stream)
        if stream is not None:
            _streams.check_stream(stream, CPU.type)  # refused, not ignored
        moves = not _rules.zero_copy(source, target)
        # Host-readable data is taken zero-copy and copied here if asked (one
        # copy, writeable, whatever the producer's capsule kind); data elsewhere
        # is moved by the producer, which is asked for the CPU.
        backend = _backends.for_array(x)
        foreign = backend is None or backend is numpy_backend
        # NumPy's own capsule where NumPy makes the one the rules want (a
        # versioned capsule of a plain dtype), else the layer's export of
        # the array: NumPy before 2.1 makes only legacy capsules, which land
        # read-only, and no NumPy before 2.5 exports the dtypes ml_dtypes
        # adds (bfloat16, float8_e5m2 whose kind is "f"...), which DLPack
        # describes and the layer exports as the plain import does.
        layers = backend is numpy_backend and (not numpy_backend.VERSIONED_NUMPY or _id(x.dtype) not in _PLAIN)
        if not moves and copy is None and foreign:
            return host_capsule(x, _exchange.export_numpy(x) if layers else None, said=source)
        ask = dict(
            max_version=_versions.DLPACK_VERSION,
            dl_device=CPU.dlpack if moves else None,
            copy=copy if moves else (False if copy is False else None),
        )
        if not foreign:
            # An array of a backend (CuPy) is exported under the rules, not by
            # its library's own __dlpack__.
            capsule, full = backend.export_array(x, False, None, **ask), True
        elif layers:
            capsule, full = _exchange.export_numpy(x), True
        else:
            capsule, full = request(x, **ask)
        versioned, header = _capsule.checked(capsule)
        if versioned and not moves:
            _as_its_row_says(x, capsule, header)
        if moves and not full:
            # An old producer could not move its data: a backend for its device does.
            backend = _backends.for_device(source)
            return backend.to_host(backend.consume(capsule, versioned, header), copy)
        return _land_on_host(capsule, versioned, header, needs_copy and not moves, x, None if moves else source)
    except AskedAgain as again:
        if again.producer is not x:
            raise
        # from_dlpack(self) inside x's own __dlpack__: what else x speaks answers.
        return from_dlpack(_protocols.besides_dlpack(x), device=device, copy=copy, stream=stream)


_id = id

_PLAIN = _dtypes.PLAIN


def _whole_elements(shape, strides, itemsize) -> bool:
    """Whether DLPack can describe the layout: strides in whole elements on
    every axis longer than 1. (A function of its own: a generator in
    from_dlpack would close over x, which CPython 3.11 and 3.12 then leak
    where the cell for it cannot be allocated at the call.)"""
    return all(s % itemsize == 0 or n == 1 for n, s in zip(shape, strides))


# The public functions are the core's fronts (core/export.pxi): plain cases there, the rest the function above.
if not TYPE_CHECKING:
    from_dlpack = _compiled.front("from_dlpack", from_dlpack)


def _meeting(x, device, copy, stream, alignment, contiguous):
    """``from_dlpack`` with a kernel's requirements: the import as asked
    (zero-copy where it can be), then one copy, aligned and compact, where
    the data does not meet them or ``copy=True`` asks for one."""
    _rules.check_requirements(alignment, contiguous)
    out = from_dlpack(x, device=device, copy=False if copy is False else None, stream=stream)
    backend = _backends.for_array(out)
    address = out.ctypes.data if backend is numpy_backend else out.data.ptr
    strides = tuple(s // out.itemsize for s in out.strides) if out.itemsize else None
    what = _rules.unmet(address, out.shape, strides, alignment, contiguous)
    if what is None and copy is not True:
        return out
    if copy is False:
        raise _errors.requirement_needs_copy(what, address, alignment, out.shape, strides)
    stream = _streams.handle_of(stream)
    return backend.aligned_copy(out, alignment, stream)


def host_capsule(x, capsule=None, error=None, said=CPU):
    """The common import: host memory of a foreign producer, no copy.
    ``capsule``: what ``x`` answered to ``__dlpack__(max_version=DLPACK_VERSION)``
    (the compiled core hands here every answer it does not import itself),
    or None to ask it now; ``error``: the error ``x`` raised to the core's
    request instead, gone on from as the Python path does (the producer is
    not asked the same again); ``said``: the host device ``x`` is known
    to be on (its host test, or its ``__dlpack_device__``)."""
    if error is not None:
        capsule, _ = answer_after(x, error, _versions.DLPACK_VERSION)
    if capsule is None:
        if not numpy_backend.VERSIONED_NUMPY and numpy_backend.owns(x):
            capsule = _exchange.export_numpy(x)  # NumPy before 2.1: the layer's versioned capsule
        else:
            # The dtypes NumPy's own importer reads exactly as the rules say,
            # of the row's producer: straight to numpy.from_dlpack, which
            # skips the checks a producer of unknown quality needs (NumPy
            # before 2.1 asks for legacy capsules: read-only arrays).
            dtypes = _peers.profile(type(x)).numpy_reads if numpy_backend.VERSIONED_NUMPY else None
            if dtypes is not None and x.dtype in dtypes:
                return _np_from_dlpack(x)
            capsule, _ = request(x, max_version=_versions.DLPACK_VERSION)
    elif type(capsule) is not _CapsuleType:
        raise _errors.producer_not_a_capsule(x, capsule)
    versioned, header = _capsule.checked(capsule)
    if versioned:
        _as_its_row_says(x, capsule, header)
    return _land_on_host(capsule, versioned, header, False, x, said)


def _as_its_row_says(x, capsule, header):
    """A versioned capsule of ``x``'s own memory made READ_ONLY where its
    library's row says its arrays are read-only whatever their capsules
    say (``_peers.READ_ONLY_ARRAYS``): on every path that lands it, as the
    compiled core's import does (``_wiring``'s import plan)."""
    if not header.flags & (_capsule.READ_ONLY | _capsule.IS_COPIED) and _peers.export_facts(type(x)).read_only:
        _capsule.set_flags(capsule, header.flags | _capsule.READ_ONLY)


_np_from_dlpack = np.from_dlpack


def _host_copy(x, device, copy, stream, refused):
    """``x`` whose ``__dlpack_device__`` refused (``refused``: the layer's
    refusal, JAX's on a TPU its cause, whose memory DLPack cannot reach):
    where the caller asked for the host, the producer is asked for a copy
    there (``dl_device=(1, 0)``, as ``numpy.from_dlpack(x, device="cpu")``
    asks), imported as any capsule; else that refusal."""
    target = None if device is None else Device(device)
    if target != CPU and not (target is None and copy is True):
        # Asked for nothing that needs the host: the refusal Device.of made,
        # alike on every entry, which names the remedy (device="cpu").
        raise refused
    if copy is False:
        raise _errors.copy_forbidden("the device its producer does not name", CPU,
                                     "the producer copies its data to the host") from refused
    capsule, _ = request(x, max_version=_versions.DLPACK_VERSION, dl_device=CPU.dlpack, copy=True)
    # A copy the producer made at this request: imported as any capsule (a
    # legacy one read-only unless the caller asked for a copy of it too).
    return _from_capsule(capsule, CPU, copy, stream)


def _from_capsule(capsule, device, copy, stream):
    # The caller's capsule may be shared with other threads: it is claimed
    # in one step, and only this call sees the capsule consumed from here on.
    versioned, capsule = _capsule.handover(capsule)
    versioned, header = _capsule.checked(capsule, versioned)
    try:
        _rules.check_copy(copy)
        stream = _streams.handle_of(stream)
        source = Device((header.device_type, header.device_id))
        target = _rules.import_target(source, device)
        needs_copy = _rules.import_needs_copy(source, target, copy, _backends.addressable)
        if target == CPU and source.is_host_accessible:
            if stream is not None:
                _streams.check_stream(stream, CPU.type)
            arr = numpy_backend.consume(capsule, versioned, header)
            return arr.copy() if needs_copy else arr
        # Device memory to the CPU is moved by the backend of its device.
        backend = _backends.for_device(source if target == CPU else target)
        return backend.import_capsule(capsule, versioned, header, target, copy, needs_copy, stream)
    except BaseException:
        # The caller handed the capsule over: a refusal frees it now, not
        # whenever the caller drops it.
        if _capsule.is_unconsumed(capsule):
            _capsule.discard(capsule)
        raise


def _land_on_host(capsule, versioned, header, copy, x=None, said=None):
    """A NumPy array over a checked capsule of host-readable memory, which
    producer ``x`` gave for the host device it ``said`` it is on, or (None)
    for ``dl_device=(1, 0)``."""
    if header.device_type not in _HOST_TYPES:
        got = Device((header.device_type, header.device_id))
        _capsule.discard(capsule)
        if said is not None:
            raise _errors.device_mismatch(x, said, got)
        raise _errors.unreachable(got, CPU, "the producer ignored dl_device=(1, 0)")
    try:
        arr = numpy_backend.consume(capsule, versioned, header)
    except BufferError:
        if _capsule.is_unconsumed(capsule):
            _capsule.discard(capsule)
        raise
    return arr.copy() if copy else arr


_HOST_TYPES = frozenset(int(t) for t in HOST_ACCESSIBLE)


def shards(x: Any, /, *, replicas: bool = False) -> list[Shard]:
    """Every addressable shard of ``x``, each imported zero-copy on its own
    device.

    Parameters
    ----------
    x : object
        An array spread over several devices (a JAX array with a
        ``NamedSharding``, from ``shard_map`` or ``pmap``...); a single-device
        array gives one shard covering it all.
    replicas : bool, default False
        Give every copy of each piece; by default each piece comes once
        (``replica_id == 0``).

    Returns
    -------
    list of Shard
        The shards, each with the slices of the whole it covers and its data:
        a NumPy array on the host, a CuPy array on a GPU.

    Raises
    ------
    BufferError
        Shards that cannot be imported (a device no backend serves).

    See Also
    --------
    from_dlpack : The whole array, gathered onto one device.

    Examples
    --------
    >>> import numpy as np, gpu_dlpack
    >>> [s.index for s in gpu_dlpack.shards(np.arange(4.0))]
    [(slice(None, None, None),)]

    To hand each shard of a JAX array to PyTorch without a gather::

        for s in gpu_dlpack.shards(j):
            t = torch.from_dlpack(gpu_dlpack.wrap(s.data))   # on s.device
    """
    if isinstance(x, type) or not hasattr(x, "addressable_shards"):
        data = from_dlpack(x)
        whole = tuple(slice(None) for _ in range(max(np.ndim(data), 1)))
        return [Shard(whole, _backends.device_of(data), 0, data)]
    _shards.check_addressable(x)
    found = []
    for shard in x.addressable_shards:
        if shard.replica_id and not replicas:
            continue
        data = from_dlpack(shard.data)
        index = tuple(shard.index)
        found.append(Shard(index, _backends.device_of(data), int(shard.replica_id), data))
    return found

