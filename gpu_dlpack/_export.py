"""Export: ``export`` and ``wrap``, the producer side of DLPack.

Both stand on the exchange the two directions share (``_exchange``: a
capsule of any producer under the rules). ``wrap`` makes an ``Exportable``,
a producer that any consumer reads correctly: its ``__dlpack__`` (and, with
the compiled core, its DLPack C exchange API), and the CUDA Array Interface
or NumPy's array interface of what it holds.

Floor: the two directions, beside ``_import``: neither imports the other.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from . import _backends, _errors, _exchange, _fastpath, _producer, _protocols, _rules, _shards, _streams, _versions
from ._devices import CPU, Device
from ._typing import Capsule, StreamLike, Version

_ndarray = np.ndarray
_asked = _producer.asked
_asks_back = _producer.ASKS_BACK


def export(
    x: Any, /, *, stream: StreamLike | None = None, max_version: Version | None = None,
    dl_device: tuple[int, int] | None = None, copy: bool | None = None, readonly: bool = False,
    min_version: Version | str | None = None,
) -> Capsule:
    """A DLPack capsule for ``x``, following the array API standard exactly.

    ``x`` is a NumPy array, a CuPy array, or any object with ``__dlpack__``
    (a torch tensor, a JAX array); what such a producer gets wrong is
    corrected. Arguments are those of ``__dlpack__``.

    >>> import numpy as np, gpu_dlpack
    >>> cap = gpu_dlpack.export(np.arange(3), max_version=(1, 0))
    >>> gpu_dlpack.inspect(cap).name
    'dltensor_versioned'

    ``stream`` may also be a stream object (``cupy.cuda.Stream``,
    ``torch.cuda.Stream``...); inside ``gpu_dlpack.use_stream(s)`` an export
    to GPU memory without ``stream`` uses ``s``. ``readonly=True`` exports
    the data read-only (versioned: READ_ONLY; legacy: refused unless
    copied). ``min_version`` is the version floor of this call alone
    (``(0, 4)`` or ``"0.4"``), for a consumer older than the floor in force.
    """
    if stream is None:
        # A NumPy array that stays on the host has no stream to take.
        if (dl_device is not None or type(x) is not _ndarray) and _streams.in_block():
            stream = _block_stream(x, dl_device)
    elif type(stream) is not int:
        stream = _streams.handle_of(stream)
    if readonly is not False and readonly is not True:
        raise _errors.bad_flag("readonly", readonly)
    if min_version is None:
        return _exchange._export(x, readonly, stream, max_version, dl_device, copy)
    floor = _versions.parse_floor(min_version, "min_version")
    _versions.check_max_version(max_version, floor)
    return _versions.under_floor(floor, _exchange._export, x, readonly, stream, max_version, dl_device, copy)


if _fastpath.core is not None:
    # The plain cases (a NumPy array of a NumPy dtype, a host producer with a
    # C exchange API, asked for nothing but max_version) run in C; the rest
    # calls the function above. help() and inspect see that function.
    export = functools.update_wrapper(_fastpath.core.Exporter(export), export)


def _block_stream(x, dl_device):
    """The stream of the enclosing ``use_stream`` block for the memory the
    consumer receives, if that memory has GPU streams."""
    try:
        target = _rules.target_device(_backends.device_of(x), dl_device)
    except (AttributeError, TypeError, ValueError, BufferError):
        return None  # the export itself reports what is wrong
    return _streams.block_stream(target)


_Base: Any = object if _fastpath.core is None else _fastpath.core.ExportableBase


class Exportable(_Base):
    """What ``wrap`` returns: a DLPack producer over ``x`` that obeys the rules.

    ``last_request`` holds the keywords of the latest ``__dlpack__`` call, so
    a caller can see what a consumer really asks for.

    With the compiled core, ``__dlpack__`` runs in C the plan decided here
    at wrap time, and the type offers the DLPack C exchange API
    (``__dlpack_c_exchange_api__``); every other request takes the Python
    ``__dlpack__`` below.
    """

    __slots__ = (
        ("_x", "_readonly", "_floor", "_source", "_device", "_reported", "_request", "_held", "__weakref__")
        if _Base is object else ()
    )
    _source: Device | None
    _reported: Device | None
    _request: tuple | None
    _held: tuple | None

    def __init__(self, x: Any, readonly: bool = False, min_version: Version | str | None = None) -> None:
        if readonly is not False and readonly is not True:
            raise _errors.bad_flag("readonly", readonly)
        self._x = x
        self._readonly = readonly
        self._floor = None if min_version is None else _versions.parse_floor(min_version, "min_version")
        self._reported = None
        self._held = None
        if type(x) is _ndarray:
            self._source, self._device = CPU, _CPU_DLPACK
        else:
            # Read once: the device __dlpack_device__ reports is the one exported.
            asks = _asks_back.get(type(x))
            if asks is None:
                asks = _producer.asks_back(type(x))
            if asks and id(x) in _asked.ids:
                # wrap(self) inside x's own __dlpack__ or __dlpack_device__:
                # what else x speaks is wrapped.
                x = self._x = _protocols.besides_dlpack(x)
                asks = False
            try:
                if asks:
                    self._source = _producer.marked(x, _backends.device_of, x)
                else:
                    self._source = _backends.device_of(x)
            except BufferError:
                if not _shards.spread(x):
                    raise
                one = _shards.replica(x)
                if one is not None:  # replicated: export its first replica
                    self._x = one
                    self._source = _backends.device_of(one)
                else:  # sharded: gathered at each export, by default where it starts
                    self._source = None
                    self._device = _shards.home(x).dlpack
                    self._request = None
                    return
            reported = _rules.reported_device(self._source, _backends.gpu_of(self._x))
            self._device = reported.dlpack
            if reported != self._source:
                # Managed memory: its label depends on what the consumer asks.
                self._reported = reported
        self._request = None
        if _Base is not object and self._reported is None:
            self._set_plan(*_plan(x, readonly or self._floor is not None, self._source))

    def __dlpack__(
        self, /, *, stream: StreamLike | None = None, max_version: Version | None = None,
        dl_device: tuple[int, int] | None = None, copy: bool | None = None,
    ) -> Capsule:
        """A DLPack capsule of the wrapped array, under the rules (the
        standard's ``__dlpack__``)."""
        self._request = (stream, max_version, dl_device, copy)  # a dict only when read
        if self._reported is not None:
            dl_device = _rules.served_device(self._reported, dl_device, stream)
        floor = self._floor
        if floor is None:
            return _exchange._export(self._x, self._readonly, stream, max_version, dl_device, copy, self._source)
        _versions.check_max_version(max_version, floor)
        return _versions.under_floor(
            floor, _exchange._export, self._x, self._readonly, stream, max_version, dl_device, copy, self._source
        )

    def __dlpack_device__(self, /) -> tuple[int, int]:
        """The ``(device_type, device_id)`` of the wrapped array."""
        return self._device

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
        if cuda:
            capsule = _exchange._export(self._x, self._readonly, 1, _versions.DLPACK_VERSION, None, None, self._source)
            interface, owner = _protocols.cuda_interface(capsule, self._readonly, 1)
        else:
            to_host = None if self._device == _CPU_DLPACK else _CPU_DLPACK
            capsule = _exchange._export(
                self._x, self._readonly, None, _versions.DLPACK_VERSION, to_host, None, self._source
            )
            interface, owner = _protocols.array_interface(capsule, self._readonly)
        self._held = (cuda, interface, owner)
        return interface

    def __reduce__(self):
        # A copy (copy.copy, copy.deepcopy, pickle) is a new wrapper over the
        # same array, made as wrap makes one, on both paths alike (the
        # compiled base holds a plan only __init__ makes).
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


def _plan(x, readonly, source):
    """The exchange the core may run for ``wrap(x)`` without asking: NumPy's
    own capsule for a NumPy dtype (the common case of ``_export``), the
    producer's C exchange API for a host producer whose capsule passes as
    it comes (the rules' verdict for a versioned request of nothing else),
    or the capsule of a host producer the core asks itself (JAX), passed on
    or adapted for a request of nothing but ``max_version``."""
    if readonly is not False:
        return (_fastpath.core.PLAN_GENERAL,)
    if type(x) is _ndarray:
        if x.dtype.isbuiltin == 1:
            return _fastpath.core.PLAN_NUMPY, x.dtype
        return (_fastpath.core.PLAN_GENERAL,)
    if source.type != CPU.type:
        return (_fastpath.core.PLAN_GENERAL,)
    if "__dlpack_c_exchange_api__" in type(x).__dict__:
        return _fastpath.core.PLAN_EXCHANGE, type(x)
    # The core keeps it only for a type with a host test (JAX): it asks
    # such a producer's __dlpack__ itself.
    return _fastpath.core.PLAN_CAPSULE, type(x)


if _Base is not object:
    # The C __dlpack__ and __dlpack_device__ of the base run; this one is
    # what they hand back to.
    general_dlpack = Exportable.__dlpack__
    del Exportable.__dlpack__, Exportable.__dlpack_device__
else:
    general_dlpack = Exportable.__dlpack__


def wrap(x: Any, /, *, readonly: bool = False, min_version: Version | str | None = None) -> Exportable:
    """A DLPack producer over ``x`` that any consumer can import correctly.

    >>> import numpy as np, torch, gpu_dlpack
    >>> a = np.arange(3.0)
    >>> t = torch.from_dlpack(gpu_dlpack.wrap(a))
    >>> t.data_ptr() == a.ctypes.data
    True

    ``readonly=True`` exports a read-only view: versioned capsules carry
    READ_ONLY, and legacy ones are refused unless the consumer copies.
    ``min_version`` is the version floor of this wrapper alone (``(0, 4)``
    or ``"0.4"``): ``old_lib.from_dlpack(wrap(x, min_version=(0, 4)))``
    serves a consumer older than the floor in force.
    """
    return python_wrap(x, readonly, min_version)


def python_wrap(x, readonly, min_version=None):
    if type(x) is not _ndarray and not hasattr(type(x), "__dlpack__"):
        adapted = _protocols.producer(x)  # another array protocol, or a raw capsule
        if adapted is None:
            raise _errors.not_dlpack(x)
        x = adapted
    return Exportable(x, readonly, min_version)


if _fastpath.core is not None:
    # The plain cases (a NumPy array of a NumPy dtype, a host producer with a
    # C exchange API) are built in C; the rest calls python_wrap.
    wrap = functools.update_wrapper(_fastpath.core.Exporter(wrap, 1), wrap)


_CPU_DLPACK = CPU.dlpack
_CUDA_INTERFACE_TYPES = frozenset({2, 13})  # CUDA and CUDA_MANAGED memory
_REQUEST_KEYS = ("stream", "max_version", "dl_device", "copy")
