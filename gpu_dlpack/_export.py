"""Export: ``export`` and ``wrap``, the producer side of DLPack.

Both stand on the exchange the two directions share (``_exchange``: a
capsule of any producer under the rules). ``wrap`` makes an ``Exportable``,
a producer that any consumer reads correctly: its ``__dlpack__`` and DLPack
C exchange API (the compiled core's), and the CUDA Array Interface or
NumPy's array interface of what it holds.

Floor: the two directions, beside ``_import``: neither imports the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _backends, _errors, _exchange, _peers, _producer, _protocols, _rules, _shards, _versions
from . import _compiled
from ._devices import CPU, Device, types
from ._typing import Capsule, DeviceLike, StreamLike, Version

_ndarray = np.ndarray
_asked = _producer.asked


def export(
    x: Any, /, *, stream: StreamLike | None = None, max_version: Version | None = None,
    dl_device: DeviceLike | None = None, copy: bool | None = None, readonly: bool = False,
    min_version: Version | str | None = None,
) -> Capsule:
    """A DLPack capsule for ``x``, following the array API standard exactly.

    What the producer of ``x`` gets wrong is corrected: a capsule of the kind
    the consumer asked for, with READ_ONLY and IS_COPIED set where they hold,
    on the device and stream asked for. The keywords are those of the
    standard's ``__dlpack__``, and two more: ``readonly`` and ``min_version``.

    Parameters
    ----------
    x : object
        The array: any DLPack producer (NumPy, CuPy, PyTorch, JAX...), an
        object of another array protocol (the CUDA Array Interface, NumPy's
        array interface, the buffer protocol) or a raw DLPack capsule.
    stream : int or stream object, optional
        The stream the consumer uses the data on, as in ``__dlpack__``:
        ``None`` or ``-1`` for host memory; on a GPU an int handle or a stream
        object (``cupy.cuda.Stream``, ``torch.cuda.Stream``...). Inside a
        `use_stream` block, an export to GPU memory without ``stream`` takes
        the block's.
    max_version : tuple of int, optional
        The newest ``(major, minor)`` the consumer reads. ``None`` or
        ``(0, m)`` gives a legacy ``dltensor`` capsule; ``(1, m)`` or more a
        ``dltensor_versioned`` one, which carries `DLPACK_VERSION`.
    dl_device : tuple of int, str, Device or device object, optional
        The ``(device_type, device_id)`` the consumer wants the data on, or
        the same in any form `Device` reads (``"cpu"``, ``"cuda:0"``, a torch
        device), as ``device=`` takes it elsewhere: the keyword keeps the
        name the standard's ``__dlpack__`` gives it. ``None`` or the array's
        own device exports in place; ``(1, 0)`` (the CPU) is reachable from
        any memory the host can address.
    copy : bool, optional
        ``True`` always copies (and sets IS_COPIED), ``False`` never copies,
        ``None`` copies only when it must.
    readonly : bool, default False
        Export the data read-only: a versioned capsule carries READ_ONLY; a
        legacy one, which cannot say so, is refused unless copied.
    min_version : tuple of int or str, optional
        The version floor of this call alone, ``(0, 4)`` or ``"0.4"``, for a
        consumer older than the floor in force (`MIN_DLPACK_VERSION`).

    Returns
    -------
    PyCapsule
        An unconsumed ``dltensor`` or ``dltensor_versioned`` capsule, for one
        consumer to take.

    Raises
    ------
    DLPackVersionError
        ``max_version`` below the floor, or too old for the dtype or device.
    CopyRequiredError
        ``copy=False`` where the exchange needs a copy.
    ReadOnlyError
        Read-only data asked for as a legacy capsule, without ``copy=True``.
    DeviceUnreachableError
        A ``dl_device`` the data cannot reach, or no installed backend for it.
    StreamError
        A ``stream`` the memory's device does not take: `InvalidStreamError`
        (a ``ValueError``) or `StreamTypeError` (a ``TypeError``).
    NotDLPackError
        ``x`` speaks no array protocol (a ``TypeError``).
    TypeError
        ``max_version``, ``copy`` or ``readonly`` of the wrong type.

    See Also
    --------
    wrap : A producer over ``x``, for any consumer's ``from_dlpack``.
    inspect : Read the capsule without consuming it.

    Examples
    --------
    >>> import numpy as np, gpu_dlpack
    >>> cap = gpu_dlpack.export(np.arange(3), max_version=(1, 0))
    >>> gpu_dlpack.inspect(cap).name
    'dltensor_versioned'

    Read-only data, for an old consumer that asks for DLPack 0.4:

    >>> r = np.arange(3.0)
    >>> r.flags.writeable = False
    >>> info = gpu_dlpack.inspect(gpu_dlpack.export(r, max_version=(1, 0)))
    >>> info.readonly, info.version == gpu_dlpack.DLPACK_VERSION
    (True, True)
    >>> old = gpu_dlpack.export(r, max_version=(0, 4), min_version=(0, 4), copy=True)
    >>> gpu_dlpack.inspect(old).name
    'dltensor'
    """
    stream = _exchange.stream_for(x, stream, dl_device)
    if readonly is not False and readonly is not True:
        raise _errors.bad_flag("readonly", readonly)
    floor = None if min_version is None else _versions.parse_floor(min_version, "min_version")
    return _under_floor(floor, x, readonly, stream, max_version, dl_device, copy)


# The public functions are the core's fronts (core/export.pxi): plain cases there, the rest the function above.
if not TYPE_CHECKING:
    export = _compiled.front("export", export)


class Exportable(_compiled.ExportableBase):
    """What `wrap` returns: a DLPack producer over an array that obeys the rules.

    Made by `wrap` (or `from_pointer`, or the `Producer` mixin); the
    constructor takes the same arguments. Any consumer's ``from_dlpack`` takes
    it: ``__dlpack__`` and ``__dlpack_device__`` as the standard says, and the
    DLPack C exchange API (``__dlpack_c_exchange_api__``), whose plain cases
    run in the compiled core.

    Parameters
    ----------
    x : object
        The array, as `wrap` takes it.
    readonly : bool, default False
        Export read-only.
    min_version : tuple of int or str, optional
        The version floor of this wrapper alone.

    Examples
    --------
    >>> import numpy as np, gpu_dlpack
    >>> w = gpu_dlpack.wrap(np.arange(3.0), readonly=True)
    >>> w
    gpu_dlpack.wrap(numpy.ndarray, readonly=True)
    >>> w.__dlpack_device__(), w.readonly
    ((1, 0), True)
    >>> gpu_dlpack.inspect(w.__dlpack__(max_version=(1, 0))).readonly
    True
    """

    if not TYPE_CHECKING:  # (mypy does not see the fields of the compiled base)
        __slots__ = ()  # no __dict__: the fields are the compiled base's
    _held: tuple | None

    def __init__(self, x: Any, readonly: bool = False, min_version: Version | str | None = None) -> None:
        # Where the data is, read once: the device __dlpack_device__ reports
        # is the one exported. The compiled base keeps it and makes the plan.
        if readonly is not False and readonly is not True:
            raise _errors.bad_flag("readonly", readonly)
        floor = None if min_version is None else _versions.parse_floor(min_version, "min_version")
        reported = None
        if type(x) is _ndarray:
            _made(self, x, readonly, floor, CPU, _CPU_DLPACK, None)
            return
        asks = _producer.asks_back(type(x))
        if asks and id(x) in _asked.ids:
            # wrap(self) inside x's own __dlpack__ or __dlpack_device__:
            # what else x speaks is wrapped.
            x = _protocols.besides_dlpack(x)
            asks = False
        try:
            if asks:
                source = _producer.marked(x, _backends.device_of, x)
            else:
                source = _backends.device_of(x)
        except BufferError:
            if not _shards.spread(x):
                raise
            one = _shards.replica(x)
            if one is None:  # sharded: gathered at each export, by default where it starts
                _made(self, x, readonly, floor, None, _shards.home(x).dlpack, None)
                return
            x = one  # replicated: export its first replica
            source = _backends.device_of(one)
        label = _rules.reported_device(source, _backends.gpu_of(x))
        if label != source:
            # Managed memory: its label depends on what the consumer asks.
            reported = label
        _made(self, x, readonly, floor, source, label.dlpack, reported)

    @property
    def device(self) -> Device:
        """Where the wrapped data is, as `__dlpack_device__` says it: the
        array API's ``x.device``, which array-api-compat's ``device`` reads."""
        return Device(self._device)

    @property
    def __cuda_array_interface__(self):
        """The CUDA Array Interface (version 3) of GPU data: ready on the
        legacy default stream (``stream`` 1), read-only where the export is.
        AttributeError for data elsewhere."""
        if self._device[0] not in _CUDA_INTERFACE_TYPES:
            raise AttributeError(
                f"{self!r} holds data on {Device(self._device)}, not on a CUDA GPU: "
                "it has no __cuda_array_interface__ (use __dlpack__ or __array_interface__)"
            )
        return self._interface(True)

    @property
    def __array_interface__(self):
        """NumPy's array interface (version 3) of host data, read-only where
        the export is. AttributeError for data the host cannot address."""
        if not (self._source or Device(self._device)).is_host_accessible:
            raise AttributeError(
                f"{self!r} holds data on {Device(self._device)}, which the host cannot "
                "address: it has no __array_interface__ (use __dlpack__ or "
                "__cuda_array_interface__)"
            )
        return self._interface(False)

    def _interface(self, cuda: bool) -> dict:
        # The memory stays owned by this wrapper (the interfaces have no
        # lifetime of their own: a consumer keeps the object that gave them).
        held = self._held
        if held is not None and (held[0] == cuda) and isinstance(self._x, _protocols.OneCapsule):
            return held[1]  # a raw capsule is read once
        to_host = None if cuda or self._device == _CPU_DLPACK else _CPU_DLPACK
        capsule = _exchange._export(
            self._x, self._readonly, 1 if cuda else None, _versions.DLPACK_VERSION, to_host, None, self._source)
        interface, owner = (_protocols.cuda_interface(capsule, self._readonly, 1) if cuda
                            else _protocols.array_interface(capsule, self._readonly))
        self._held = (cuda, interface, owner)
        return interface

    def __reduce__(self):
        # A copy (copy.copy, copy.deepcopy, pickle) is a new wrapper over the
        # same array, made as wrap makes one (the compiled base holds a plan
        # only __init__ makes).
        return type(self), (self._x, self._readonly, self._floor)

    @property
    def last_request(self) -> dict[str, Any] | None:
        """The keywords of the latest ``__dlpack__`` call (None before any)."""
        request = self._request
        return None if request is None else dict(zip(_REQUEST_KEYS, request))

    @property
    def array(self) -> Any:
        """The wrapped array."""
        return self._x

    @property
    def readonly(self) -> bool:
        """Whether the export is read-only (``wrap(x, readonly=True)``)."""
        return self._readonly

    @property
    def min_version(self) -> Version | None:
        """The version floor of this wrapper (``wrap(x, min_version=...)``),
        or None: the floor in force."""
        return self._floor

    def __repr__(self) -> str:
        ro = ", readonly=True" if self._readonly else ""
        floor = "" if self._floor is None else f", min_version={self._floor}"
        return f"gpu_dlpack.wrap({type(self._x).__module__}.{type(self._x).__qualname__}{ro}{floor})"


def general_dlpack(
    w: Exportable, stream: StreamLike | None, max_version: Version | None, dl_device: DeviceLike | None,
    copy: bool | None,
) -> Capsule:
    """``w.__dlpack__(...)`` where the compiled base runs no plan of its own
    (it has set ``w._request``): the exchange under the rules."""
    if w._reported is not None:
        dl_device = _rules.served_device(w._reported, dl_device, stream)
    return _under_floor(w._floor, w._x, w._readonly, stream, max_version, dl_device, copy, w._source)


def _under_floor(floor, x, readonly, stream, max_version, dl_device, copy, source=None):
    # The exchange under a floor of one call or one wrapper (None: the floor in force).
    if floor is None:
        return _exchange._export(x, readonly, stream, max_version, dl_device, copy, source)
    _versions.check_max_version(max_version, floor)
    return _versions.under_floor(floor, _exchange._export, x, readonly, stream, max_version, dl_device, copy, source)


_made = _compiled.ExportableBase.__init__


def wrap(x: Any, /, *, readonly: bool = False, min_version: Version | str | None = None) -> Exportable:
    """A DLPack producer over ``x`` that any consumer can import correctly.

    The consumer's ``from_dlpack`` calls the wrapper's ``__dlpack__``, which
    exports ``x`` under the rules whatever the consumer asks for (a legacy or a
    versioned capsule, a stream, a device, a copy). The wrapper also offers
    the DLPack C exchange API; over GPU memory it offers the CUDA Array
    Interface, over host memory NumPy's array interface.

    Parameters
    ----------
    x : object
        The array: any DLPack producer, an object of another array protocol
        (the CUDA Array Interface, NumPy's array interface, the buffer
        protocol) or a raw DLPack capsule (a producer of one use).
    readonly : bool, default False
        Export read-only: versioned capsules carry READ_ONLY, and legacy ones
        are refused unless the consumer copies.
    min_version : tuple of int or str, optional
        The version floor of this wrapper alone, ``(0, 4)`` or ``"0.4"``:
        ``old_lib.from_dlpack(wrap(x, min_version=(0, 4)))`` serves a consumer
        older than the floor in force.

    Returns
    -------
    Exportable
        The producer; it keeps ``x`` alive.

    Raises
    ------
    NotDLPackError
        ``x`` speaks no array protocol (a ``TypeError``).
    TypeError
        ``readonly`` is not a bool.
    ValueError
        ``min_version`` is no DLPack version.

    See Also
    --------
    export : The capsule itself.
    convert : ``x`` as an array of a named library, its faults handled.

    Examples
    --------
    >>> import numpy as np, torch, gpu_dlpack
    >>> a = np.arange(3.0)
    >>> t = torch.from_dlpack(gpu_dlpack.wrap(a))
    >>> t.data_ptr() == a.ctypes.data
    True

    What the consumer asked for:

    >>> w = gpu_dlpack.wrap(a)
    >>> t = torch.from_dlpack(w)
    >>> w.last_request
    {'stream': None, 'max_version': (1, 0), 'dl_device': None, 'copy': None}
    """
    if type(x) is not _ndarray and not hasattr(type(x), "__dlpack__"):
        adapted = _protocols.producer(x)  # another array protocol, or a raw capsule
        if adapted is None:
            raise _errors.not_dlpack(x, _peers.chunks_of(type(x)))
        x = adapted
    return Exportable(x, readonly, min_version)


# The public functions are the core's fronts (core/export.pxi): plain cases there, the rest the function above.
if not TYPE_CHECKING:
    wrap = _compiled.front("wrap", wrap)


_CPU_DLPACK = CPU.dlpack
_CUDA_INTERFACE_TYPES = types(stack="cuda", array="cupy")  # CUDA and CUDA_MANAGED memory
_REQUEST_KEYS = ("stream", "max_version", "dl_device", "copy")
