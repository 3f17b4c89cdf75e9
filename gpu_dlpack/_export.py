"""Export: ``export`` and ``wrap``, the producer side of DLPack.

NumPy and CuPy arrays are exported by their backend under the rules. Any
other producer (PyTorch, JAX, ...) is asked for a zero-copy capsule, which is
passed on when it already obeys the rules and rebuilt through the host
backend when it does not (wrong capsule kind, missing flags, a copy or a move
to do).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from . import (
    _backends, _capsule, _dtypes, _errors, _fastpath, _protocols, _rules, _shards, _streams, _versions,
)
from ._backends import numpy_backend
from ._devices import CPU, Device
from ._producer import gave_legacy, request
from ._producer import producer_name as _producer_name
from ._typing import Capsule, StreamLike, Version

_ndarray = np.ndarray


def export(
    x: Any, *, stream: StreamLike | None = None, max_version: Version | None = None,
    dl_device: tuple[int, int] | None = None, copy: bool | None = None,
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
    to GPU memory without ``stream`` uses ``s``.
    """
    if stream is None:
        # A NumPy array that stays on the host has no stream to take.
        if (dl_device is not None or type(x) is not _ndarray) and _streams.in_block():
            stream = _block_stream(x, dl_device)
    elif type(stream) is not int:
        stream = _streams.handle_of(stream)
    return _export(x, False, stream, max_version, dl_device, copy)


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


def _export(x, readonly, stream, max_version, dl_device, copy, source=None):
    if type(x) is _ndarray:
        if stream is None and dl_device is None and copy is None and not readonly and (
            x.dtype.isbuiltin == 1  # NumPy's own types: no carrier, no code newer than 1.0
        ):
            # The common case: NumPy's capsule is already the one the rules
            # ask for. A 0.x max_version takes the general path (a dtype may
            # be too new for it).
            versioned = max_version is not None and _versions.check_max_version(max_version)
            if versioned or max_version is None:
                capsule = numpy_backend.export_in_place(x, versioned)
                if capsule is not None:
                    return capsule
        return _export_numpy(x, readonly, stream, max_version, dl_device, copy)
    backend = _backends.for_array(x)
    if backend is numpy_backend:
        return _export_numpy(x, readonly, stream, max_version, dl_device, copy)
    if backend is not None:
        return backend.export_array(x, readonly, stream, max_version, dl_device, copy)
    if not hasattr(type(x), "__dlpack__"):
        adapted = _protocols.producer(x)  # another array protocol, or a raw capsule
        if adapted is None:
            raise _errors.not_dlpack(x)
        return _export(adapted, readonly, stream, max_version, dl_device, copy)
    if source is None:
        try:
            source = Device.of(x)
        except BufferError:
            if not _shards.spread(x):
                raise
            return _export_spread(x, readonly, stream, max_version, dl_device, copy)
    if source.is_host_accessible:
        return _export_host_producer(x, source, readonly, stream, max_version, dl_device, copy)
    return _export_device_producer(x, source, readonly, stream, max_version, dl_device, copy)


def _export_spread(x, readonly, stream, max_version, dl_device, copy):
    """An array spread over several devices: its replica on the device asked
    for, exported in place; else one gather onto that device, exported and
    flagged IS_COPIED."""
    target = None if dl_device is None else _rules.target_device(CPU, dl_device)
    one = _shards.replica(x, target)
    if one is not None:
        return _export(one, readonly, stream, max_version, dl_device, copy)
    if target is None:
        target = _shards.home(x)
    _versions.check_max_version(max_version)
    _rules.check_copy(copy)
    # A target no backend serves is a BufferError, as on every other path,
    # not whatever the GPU library raises halfway through the gather.
    _backends.for_device(target)
    gathered = _shards.gather(x, target, copy, stream, _from_dlpack)
    capsule = _export(gathered, readonly, stream, max_version, target.dlpack, None)
    _shards.flag_copied(capsule)
    return capsule


def _from_dlpack(x, **kwargs):
    from ._import import from_dlpack

    return from_dlpack(x, **kwargs)


def _export_numpy(x, readonly, stream, max_version, dl_device, copy):
    dtype = _dtypes.from_numpy(x.dtype)
    plan = _rules.plan_export(
        CPU, readonly or not x.flags.writeable, dtype.code, dtype.bits, max_version, dl_device,
        copy, _backends.can_copy, _backends.addressable,
    )
    # The consumer's stream belongs to the memory it receives.
    if stream is not None:
        stream = _streams.check_stream(stream, plan.target.type)
    if plan.target != CPU:
        return _backends.for_device(plan.target).export_host(x, plan, dtype, stream)
    return numpy_backend.export(x, plan, dtype)


def _export_host_producer(x, source, readonly, stream, max_version, dl_device, copy):
    """A producer of host memory: take its zero-copy capsule, then pass it on
    or rebuild it through NumPy."""
    want_versioned = _versions.check_max_version(max_version)
    _rules.check_copy(copy)
    # A copy is rebuilt through NumPy anyway: ask for a versioned capsule,
    # which says whether the data is read-only (a legacy one cannot, and a
    # NumPy-based producer refuses one for read-only data).
    ask_versioned = want_versioned or copy is True
    capsule, _ = request(x, max_version=_versions.DLPACK_VERSION if ask_versioned else None)
    versioned, header = _capsule.checked(
        capsule, ask_versioned and type(x) not in gave_legacy, _dtypes.check_known
    )
    if ask_versioned and not versioned:
        gave_legacy.add(type(x))
    # Host memory is one address space whatever the id (JAX numbers its CPU
    # devices in capsules but says (1, 0) in __dlpack_device__): the type
    # must match.
    if header.device_type != source.type:
        _capsule.discard(capsule, versioned)
        got = Device((header.device_type, header.device_id))
        raise _errors.device_mismatch(_producer_name(x), source, got)
    flags = header.flags
    if readonly:
        known_readonly = True
    elif versioned:
        known_readonly = bool(flags & _capsule.READ_ONLY)
    else:
        known_readonly = None  # a legacy producer cannot say
    try:
        plan = _rules.plan_export(
            source, known_readonly, header.code, header.bits, max_version, dl_device, copy,
            _backends.can_copy, _backends.addressable,
        )
        stream = _streams.check_stream(stream, plan.target.type)
    except (BufferError, TypeError, ValueError):
        _capsule.discard(capsule, versioned)
        raise
    # Pass the producer's capsule on when it already says everything right
    # (versioned capsules must carry strides since DLPack 1.2).
    if not plan.copy and not plan.moves and plan.versioned == versioned and (
        not versioned or header.strides or not header.ndim
    ):
        if versioned:
            ptr = header.ptr
            _capsule.set_version(ptr, _versions.DLPACK_VERSION)
            if plan.read_only and not flags & _capsule.READ_ONLY:
                _capsule.set_flags(ptr, flags | _capsule.READ_ONLY)
        return capsule
    arr = numpy_backend.consume(capsule, versioned, header)
    dtype = _dtypes.from_numpy(arr.dtype)
    # The CPU under any id (a producer may number it) is NumPy's memory.
    if plan.target.type != CPU.type:
        return _backends.for_device(plan.target).export_host(arr, plan, dtype, stream)
    return numpy_backend.export(arr, plan, dtype)


def _export_device_producer(x, source, readonly, stream, max_version, dl_device, copy):
    """A producer of device memory that no backend of gpu_dlpack owns: forward
    every argument, then correct what the producer got wrong. A capsule of
    the other kind is rebuilt over the same memory (rule 6, on any device);
    a move or copy the producer did not make is made by the backend of the
    source device, when there is one."""
    want_versioned = _versions.check_max_version(max_version)
    _rules.check_copy(copy)
    target = _rules.target_device(source, dl_device)
    # The consumer's stream belongs to the memory it receives, as on every path.
    stream = _streams.check_stream(stream, target.type)
    # The array's own device asked for is no move: not even a keyword to a producer.
    moves = target != source
    capsule, full = request(
        x, stream=stream, max_version=_versions.DLPACK_VERSION if want_versioned else None,
        dl_device=target.dlpack if moves else None, copy=copy,
    )
    versioned, header = _capsule.checked(
        capsule, want_versioned and type(x) not in gave_legacy, _dtypes.check_known
    )
    if want_versioned and not versioned:
        gave_legacy.add(type(x))
    got = Device((header.device_type, header.device_id))
    if got != target or (copy and not full):
        return _finish_on_backend(capsule, versioned, header, source, got, target, readonly,
                                  stream, max_version, dl_device, copy)
    copied = bool(copy or moves)
    read_only = not copied and (readonly or bool(header.flags & _capsule.READ_ONLY))
    if not want_versioned:
        if read_only:
            _capsule.discard(capsule, versioned)
            raise _errors.readonly_legacy()
        if versioned:  # rule 6: a versioned-only producer serves a legacy consumer
            return _rebuild(capsule, versioned, header, False, False)
        return capsule
    if versioned:
        ptr, flags = header.ptr, header.flags
    else:
        # Rule 6: a legacy capsule cannot say whether its data may be
        # written, so the zero-copy versioned one says READ_ONLY.
        read_only = not copied
        capsule = _rebuild(capsule, versioned, header, True, read_only)
        ptr = _capsule.pointer(capsule, True)
        flags = 0
    if copied:
        flags |= _capsule.IS_COPIED
    if read_only:
        flags |= _capsule.READ_ONLY
    _capsule.set_version(ptr, _versions.DLPACK_VERSION)
    _capsule.set_flags(ptr, flags)
    return capsule


def _rebuild(capsule, versioned, header, want_versioned, read_only):
    """The capsule of the other kind over the same memory (no copy, any device)."""
    plan = _rules.Plan(want_versioned, False, CPU, CPU, read_only)
    try:
        dtype = _dtypes.to_numpy(header.code, header.bits, header.lanes)
    except BufferError:
        _capsule.discard(capsule, versioned)
        raise
    return numpy_backend.rebuild(capsule, versioned, header, plan, dtype)


def _finish_on_backend(capsule, versioned, header, source, got, target, readonly, stream,
                       max_version, dl_device, copy):
    """The producer gave its own memory where a move or a copy was asked:
    the backend of its device makes them, from a zero-copy view of that
    memory. Without such a backend, a BufferError."""
    if got != source or not _backends.can_copy(source, target):
        _capsule.discard(capsule, versioned)
        kind = "versioned" if versioned else "legacy"
        raise _errors.unreachable(
            source, target, f"the producer gave a {kind} capsule on {got} and "
            "gpu_dlpack has no backend for this device to move or copy it"
        )
    backend = _backends.for_device(source)
    arr = backend.consume(capsule, versioned, header)
    # Data of a legacy capsule counts as read-only unless it is copied.
    known_readonly = readonly or not versioned or bool(header.flags & _capsule.READ_ONLY)
    return backend.export_array(arr, known_readonly, stream, max_version, dl_device, copy)


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
        ("_x", "_readonly", "_source", "_device", "_reported", "_request", "_held", "__weakref__")
        if _Base is object else ()
    )
    _source: Device | None
    _reported: Device | None
    _request: tuple | None
    _held: tuple | None

    def __init__(self, x: Any, readonly: bool = False) -> None:
        if readonly is not False and readonly is not True:
            raise TypeError(f"readonly must be True or False; got {readonly!r}.")
        self._x = x
        self._readonly = readonly
        self._reported = None
        self._held = None
        if type(x) is _ndarray:
            self._source, self._device = CPU, _CPU_DLPACK
        else:
            # Read once: the device __dlpack_device__ reports is the one exported.
            try:
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
            self._set_plan(*_plan(x, readonly, self._source))

    def __dlpack__(
        self, *, stream: StreamLike | None = None, max_version: Version | None = None,
        dl_device: tuple[int, int] | None = None, copy: bool | None = None,
    ) -> Capsule:
        self._request = (stream, max_version, dl_device, copy)  # a dict only when read
        if self._reported is not None:
            dl_device = _rules.served_device(self._reported, dl_device, stream)
        return _export(self._x, self._readonly, stream, max_version, dl_device, copy, self._source)

    def __dlpack_device__(self) -> tuple[int, int]:
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
            capsule = _export(self._x, self._readonly, 1, _versions.DLPACK_VERSION, None, None, self._source)
            interface, owner = _protocols.cuda_interface(capsule, self._readonly, 1)
        else:
            to_host = None if self._device == _CPU_DLPACK else _CPU_DLPACK
            capsule = _export(self._x, self._readonly, None, _versions.DLPACK_VERSION, to_host, None, self._source)
            interface, owner = _protocols.array_interface(capsule, self._readonly)
        self._held = (cuda, interface, owner)
        return interface

    def __reduce__(self):
        # A copy (copy.copy, copy.deepcopy, pickle) is a new wrapper over the
        # same array, made as wrap makes one, on both paths alike (the
        # compiled base holds a plan only __init__ makes).
        return type(self), (self._x, self._readonly)

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
        return self._readonly

    def __repr__(self) -> str:
        ro = ", readonly=True" if self._readonly else ""
        return f"gpu_dlpack.wrap({type(self._x).__module__}.{type(self._x).__qualname__}{ro})"


def _plan(x, readonly, source):
    """The exchange the core may run for ``wrap(x)`` without asking: NumPy's
    own capsule for a NumPy dtype (the common case of ``_export``), or the
    producer's C exchange API for a host producer whose capsule passes as
    it comes (the rules' verdict for a versioned request of nothing else)."""
    if readonly is not False:
        return (_fastpath.core.PLAN_GENERAL,)
    if type(x) is _ndarray:
        if x.dtype.isbuiltin == 1:
            return _fastpath.core.PLAN_NUMPY, x.dtype
        return (_fastpath.core.PLAN_GENERAL,)
    if "__dlpack_c_exchange_api__" in type(x).__dict__ and source.type == CPU.type:
        return _fastpath.core.PLAN_EXCHANGE, type(x)
    return (_fastpath.core.PLAN_GENERAL,)


if _Base is not object:
    # The C __dlpack__ and __dlpack_device__ of the base run; this one is
    # what they hand back to.
    general_dlpack = Exportable.__dlpack__
    del Exportable.__dlpack__, Exportable.__dlpack_device__
else:
    general_dlpack = Exportable.__dlpack__


def wrap(x: Any, *, readonly: bool = False) -> Exportable:
    """A DLPack producer over ``x`` that any consumer can import correctly.

    >>> import numpy as np, torch, gpu_dlpack
    >>> a = np.arange(3.0)
    >>> t = torch.from_dlpack(gpu_dlpack.wrap(a))
    >>> t.data_ptr() == a.ctypes.data
    True

    ``readonly=True`` exports a read-only view: versioned capsules carry
    READ_ONLY, and legacy ones are refused unless the consumer copies.
    """
    return python_wrap(x, readonly)


def python_wrap(x, readonly):
    if type(x) is not _ndarray and not hasattr(type(x), "__dlpack__"):
        adapted = _protocols.producer(x)  # another array protocol, or a raw capsule
        if adapted is None:
            raise _errors.not_dlpack(x)
        x = adapted
    return Exportable(x, readonly)


if _fastpath.core is not None:
    # The plain cases (a NumPy array of a NumPy dtype, a host producer with a
    # C exchange API) are built in C; the rest calls python_wrap.
    wrap = functools.update_wrapper(_fastpath.core.Exporter(wrap, True), wrap)


_CPU_DLPACK = CPU.dlpack
_CUDA_INTERFACE_TYPES = frozenset({2, 13})  # CUDA and CUDA_MANAGED memory
_REQUEST_KEYS = ("stream", "max_version", "dl_device", "copy")
