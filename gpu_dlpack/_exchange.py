"""The exchange both directions share: a capsule of any producer under the
rules, and arrays spread over several devices gathered onto one.

NumPy and CuPy arrays are exported by their backend under the rules. Any
other producer (PyTorch, JAX, ...) is asked for a zero-copy capsule, which is
passed on when it already obeys the rules and rebuilt through the host
backend when it does not (wrong capsule kind, missing flags, a copy or a move
to do); what it could not move or copy itself, the backend of its device
does. An object that speaks another array protocol is taken through
``_protocols``; an array spread over several devices is its replica, or a
gather of its pieces (``_shards`` reads its shard list), each piece
exported in turn. Export (``export``, ``wrap``) and import (``from_dlpack``)
stand on this module, side by side.

Floor: what both directions share, over ``_protocols`` and ``_shards``,
above the backends.
"""

from __future__ import annotations

import numpy as np

from . import (
    _backends, _capsule, _dtypes, _errors, _peers, _protocols, _rules, _shards, _streams, _versions,
)
from ._backends import cupy_backend, numpy_backend
from . import _compiled
from ._devices import CPU, HOST_ACCESSIBLE, Device, host_tested, types
from ._producer import AskedAgain, answer_after, request

_ndarray = np.ndarray


def _export(x, readonly, stream, max_version, dl_device, copy, source=None):
    """A capsule for any producer ``x`` under the rules: ``__dlpack__``'s
    arguments (``stream`` a handle), ``readonly`` as ``wrap`` was asked, and
    ``source`` the device ``wrap`` read ``x`` on (None: read it now). One
    pass down: another protocol's object, a producer's views resolved, a
    spread array's replica or gather and what else a producer speaks when
    its own ``__dlpack__`` asks back each replace ``x`` and go round again."""
    copied = False  # x is a copy made here (views resolved, a gather): flagged IS_COPIED
    while True:
        if type(x) is _ndarray:
            backend = numpy_backend
            if stream is None and dl_device is None and copy is None and not readonly and _id(x.dtype) in _PLAIN:
                # The common case: NumPy's capsule is already the one the rules
                # ask for. A 0.x max_version takes the general path (a dtype may
                # be too new for it).
                versioned = max_version is not None and _versions.check_max_version(max_version)
                if versioned or max_version is None:
                    capsule = numpy_backend.export_in_place(x, versioned)
                    if capsule is not None:
                        break
        else:
            backend = _backends.for_array(x)
        if backend is numpy_backend:
            capsule = export_numpy(x, readonly, stream, max_version, dl_device, copy)
            break
        if backend is not None:
            capsule = backend.export_array(x, readonly, stream, max_version, dl_device, copy)
            break
        if not hasattr(type(x), "__dlpack__"):
            adapted = _protocols.producer(x)  # another array protocol, or a raw capsule
            if adapted is None:
                raise _errors.not_dlpack(x, _peers.chunks_of(type(x)))
            x, source = adapted, None
            continue
        values = resolved_views(x, copy)
        if values is not x:
            x, copy, source, copied = values, None, None, True
            continue
        try:
            if source is None:
                try:
                    # A host test (JAX) stands for __dlpack_device__ where it passes.
                    source = CPU if host_tested(x) else Device.of(x)
                except BufferError:
                    if not _shards.spread(x):
                        raise
                    # Spread over several devices: its replica on the device
                    # asked for, exported in place; else one gather onto that
                    # device, exported and flagged IS_COPIED.
                    target = None if dl_device is None else _rules.target_device(CPU, dl_device)
                    one = _shards.replica(x, target)
                    if one is None:
                        if target is None:
                            target = _shards.home(x)
                        _versions.check_max_version(max_version)
                        _rules.check_copy(copy)
                        # A target no backend serves is a BufferError, as on every
                        # other path, not whatever the GPU library raises halfway
                        # through the gather.
                        _backends.for_device(target)
                        one, dl_device, copy, copied = gather(x, target, copy, stream), target.dlpack, None, True
                    x = one
                    continue
            if source.is_host_accessible:
                capsule = host_answer(x, source, None, readonly, stream, max_version, dl_device, copy)
            else:
                capsule = _export_device_producer(x, source, readonly, stream, max_version, dl_device, copy)
            break
        except AskedAgain as again:
            if again.producer is not x:
                raise
            # x's own __dlpack__ asks for its export: its other protocols answer.
            x, source = _protocols.besides_dlpack(x), None
    if copied:
        _shards.flag_copied(capsule)
    return capsule


_profiles = _peers._PROFILES  # type -> its Profile, once read

_id = id
_PLAIN = _dtypes.PLAIN


def stream_for(x, stream, dl_device=None):
    """``stream`` as a handle; for none, inside a ``use_stream`` block, the
    block's stream for the memory the consumer of ``x`` receives (None for
    memory without GPU streams: a NumPy array that stays on the host)."""
    if stream is not None:
        return stream if type(stream) is int else _streams.handle_of(stream)
    if (dl_device is not None or type(x) is not np.ndarray) and _streams.in_block():
        try:
            return _streams.block_stream(_rules.target_device(_backends.device_of(x), dl_device))
        except (AttributeError, TypeError, ValueError, BufferError):
            pass  # the export itself reports what is wrong
    return None


def resolved_views(x, copy):
    """``x`` with the views (``_peers.ExportFacts.views``) it holds unresolved (torch's
    negative and conjugate bits) resolved: a new array holding the values
    its capsule would not carry; ``x`` itself where it holds none.
    ``copy=False`` forbids that copy (``CopyRequiredError``). The bits are
    read and resolved by the row's own methods (``ExportFacts.readers``), the
    same for a subclass whose hook refuses them (torch's ReadOnlyTensorWrapper)."""
    facts = (_profiles.get(type(x)) or _peers.profile(type(x))).export
    for view, (test, _) in zip(facts.views, facts.readers):
        try:
            if test(x) is not True:
                continue
        except Exception:  # the test cannot say: the export is the producer's as it is
            continue
        if copy is False:
            raise _errors.view_needs_copy(x, view.what, view.resolve)
        for test, resolve in facts.readers:
            if test(x) is True:
                x = resolve(x)
        return x
    return x


def gather(x, target: Device, copy, stream):
    """A new array holding all of ``x``, each piece copied once into its
    place: a NumPy array for the CPU, a CuPy array for a GPU (the copies
    queued on the consumer's ``stream``, each piece landed by the GPU's
    backend). For other targets (pinned or managed memory) the host gather
    is returned, for the caller to move."""
    if copy is False:
        raise _errors.spread_needs_copy(x, target)
    pieces = _shards.pieces(x)
    if target.type in _GPU_TYPES:
        return cupy_backend.gather(x.shape, x.dtype, pieces, target, stream)
    out = np.empty(x.shape, x.dtype)
    for shard in pieces:
        # Each piece where the host reads it: its export to the CPU under
        # the rules (zero-copy for host memory).
        capsule = _export(shard.data, False, None, _versions.DLPACK_VERSION, CPU.dlpack, None)
        out[shard.index] = numpy_backend.consume(capsule, *_capsule.checked(capsule))
    return out


_GPU_TYPES = types(indexed=True)  # one GPU's memory (pinned and managed: the host gather)


def export_numpy(x, readonly=False, stream=None, max_version=_versions.DLPACK_VERSION, dl_device=None, copy=None,
                 plan=None):
    """A capsule of NumPy array ``x`` under the rules, built by the host
    backend: NumPy's memory, or a copy the backend of the target device
    makes of it (by default the versioned capsule an import takes).
    ``plan``: the rules' verdict where the caller has it."""
    dtype = _dtypes.from_numpy(x.dtype)
    if plan is None:
        plan = _rules.plan_export(
            CPU, readonly or not x.flags.writeable, dtype.code, dtype.bits, max_version, dl_device,
            copy, _backends.can_copy, _backends.addressable,
        )
    # The consumer's stream belongs to the memory it receives.
    if stream is not None:
        stream = _streams.check_stream(stream, plan.target.type)
    if plan.target.type != CPU.type:
        return _backends.for_device(plan.target).export_host(x, plan, dtype, stream)
    return numpy_backend.export(x, plan, dtype)


def host_export(x, max_version, capsule=None, error=None):
    """``host_answer`` for the compiled core's export of nothing but
    ``max_version`` of a producer on the host by its host test (JAX):
    ``capsule``, its answer that the core does not pass on; ``error``, the
    error it raised instead, gone on from as the Python path does (the
    producer is not asked the same again); neither, where the core's
    verdict on ``max_version`` no longer holds (a floor set meanwhile)."""
    if error is not None:
        capsule, _ = answer_after(x, error, None if max_version is None else _versions.DLPACK_VERSION)
    return host_answer(x, CPU, capsule, False, None, max_version, None, None)


def host_answer(x, source, capsule, readonly, stream, max_version, dl_device, copy):
    """A producer of host memory: its zero-copy capsule passed on or rebuilt
    through NumPy. ``capsule``: what ``x`` answered to
    ``__dlpack__(max_version=...)`` (``DLPACK_VERSION`` when a versioned
    capsule or a copy was asked, else None), or None to ask it now. The
    compiled core asks the producers it was told about (JAX) itself, passes
    on or adapts the plain capsules, and hands every other answer here."""
    # A copy is rebuilt through NumPy anyway: ask for a versioned capsule,
    # which says whether the data is read-only (a legacy one cannot, and a
    # NumPy-based producer refuses one for read-only data).
    ask_versioned = _versions.check_max_version(max_version) or copy is True
    if capsule is None:
        _rules.check_copy(copy)
        capsule, _ = request(x, max_version=_versions.DLPACK_VERSION if ask_versioned else None)
    elif type(capsule) is not _capsule.CapsuleType:
        raise _errors.producer_not_a_capsule(x, capsule)
    versioned, header = _capsule.checked(capsule, True, _dtypes.not_exchanged)
    if not _rules.capsule_agrees(source, header.device_type, header.device_id):
        _capsule.discard(capsule)
        got = Device((header.device_type, header.device_id))
        raise _errors.device_mismatch(x, source, got)
    flags = header.flags
    if readonly or _peers.export_facts(type(x)).read_only:
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
        _capsule.discard(capsule)
        raise
    # Pass the producer's capsule on when it already says everything right
    # (versioned capsules must carry strides since DLPack 1.2).
    if not plan.copy and not plan.moves and plan.versioned == versioned and (
        not versioned or header.strides or not header.ndim
    ):
        if versioned:
            _capsule.set_version(capsule, _versions.DLPACK_VERSION)
            if plan.read_only and not flags & _capsule.READ_ONLY:
                _capsule.set_flags(capsule, flags | _capsule.READ_ONLY)
        return capsule
    if not plan.copy and not plan.moves and plan.versioned != versioned and plan.target.type in HOST_ACCESSIBLE:
        # The other kind over the same memory, a struct relabelled (no GPU
        # call: pinned and managed memory change kind without CuPy), on the
        # device as the rules name it (host memory under any id a producer
        # gives is device id 0: the CPU is NumPy's (1, 0)).
        return _compiled.rebuild(capsule, plan.versioned, plan.read_only, (int(plan.target.type), 0))
    arr = numpy_backend.consume(capsule, versioned, header)
    return export_numpy(arr, readonly, stream, max_version, dl_device, copy, plan)


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
    versioned, header = _capsule.checked(capsule, True, _dtypes.not_exchanged)
    got = Device((header.device_type, header.device_id))
    if got != target and not (moves and got == source) and not _rules.capsule_agrees(
            source, header.device_type, header.device_id):
        # Neither where it said nor where it was asked to move: the producer
        # contradicts itself (not a move nobody asked for).
        _capsule.discard(capsule)
        raise _errors.device_mismatch(x, source, got)
    if got != target or (copy and not full):
        # The producer gave its own memory where a move or a copy was asked:
        # the backend of its device makes them, from a zero-copy view of it.
        if got != source or not _backends.can_copy(source, target):
            _capsule.discard(capsule)
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
    copied = bool(copy or moves)
    read_only = not copied and (readonly or bool(header.flags & _capsule.READ_ONLY) or _peers.export_facts(type(x)).read_only)
    if not want_versioned:
        if read_only:
            _capsule.discard(capsule)
            raise _errors.readonly_legacy(_peers.legacy_askers())
        if versioned:  # rule 6: a versioned-only producer serves a legacy consumer
            return _compiled.rebuild(capsule, False, False)
        return capsule
    if versioned:
        flags = header.flags
    else:
        # Rule 6: a legacy capsule cannot say whether its data may be
        # written, so the zero-copy versioned one says READ_ONLY.
        read_only = not copied
        capsule = _compiled.rebuild(capsule, True, read_only)
        flags = 0
    if copied:
        flags |= _capsule.IS_COPIED
    if read_only:
        flags |= _capsule.READ_ONLY
    _capsule.set_version(capsule, _versions.DLPACK_VERSION)
    _capsule.set_flags(capsule, flags)
    return capsule
