"""The CuPy backend as a consumer: producers and capsules landed in CuPy
arrays (or NumPy arrays over pinned memory), through ``cupy.from_dlpack``
or, for memory it refuses (pinned or host memory a GPU addresses), over
``cupy.cuda.UnownedMemory`` owned by the capsule's tensor; the pieces of a
spread array gathered on a GPU.

Floor: the backends, beside ``exports``, over ``copies`` and ``gpus``.
"""

from __future__ import annotations

import math

import numpy as np

from ... import _capsule, _dtypes, _errors, _handoff, _rules, _streams, _versions
from ... import _compiled
from ..._devices import CPU, Device, DLDeviceType, cupy_is_rocm
from ..._producer import request
from .. import _reach
from .. import numpy as numpy_backend
from .copies import _copy_from_gpu, _copy_from_host, to_host
from .gpus import (
    DEVICE_TYPES, INDEXED_TYPES, _consumer_stream, _lands_on_host, _stream_gpu, owns,
)

_T = DLDeviceType

#: Capsules ``cupy.from_dlpack`` takes, per build (ROCm or not).
_CUPY_TAKES = {False: frozenset({2, 13}), True: frozenset({10})}


def import_to(x, source, target, copy, needs_copy, stream):
    """``from_dlpack(x)`` onto ``target`` (a GPU, pinned or managed memory):
    a CuPy array, or a NumPy array over pinned memory for pinned targets.
    ``needs_copy`` is the rules' decision; ``stream`` the user's, if any."""
    _handoff.collect()
    _rules.check_move(source, target)
    gpu = _stream_gpu(target, source.index if source.type in INDEXED_TYPES else None)
    consumer = _consumer_stream(stream, target, gpu)
    if owns(x):
        src_gpu = x.data.device_id
        producer = _handoff.current_stream(src_gpu)
        if not needs_copy:  # the same GPU, or memory it addresses in place
            _handoff.handoff(producer, consumer, src_gpu, gpu)
            return x.view()
        return _copy_from_gpu(x, src_gpu, producer, target, stream, _lands_on_host(target), consumer)
    # The producer makes a stream wait for its work: the consumer's, or for
    # a peer copy the current stream of the producer's own GPU.
    peer = source.type in INDEXED_TYPES and source.index != gpu
    if source.type == _T.CPU:
        ask = None
    elif peer and consumer != -1:
        ask = _handoff.current_stream(source.index)
    else:
        ask = consumer
    if numpy_backend.owns(x):
        dtype = _dtypes.from_numpy(x.dtype)
        if needs_copy:
            # A NumPy array is copied as it is: no capsule to make and take
            # back (the common host-to-device copy, small ones above all).
            return _as_dtype(_copy_from_host(x, dtype, target, stream, _lands_on_host(target), consumer), dtype)
        # NumPy's own exporter refuses bfloat16 and float8: the layer's does not.
        capsule = numpy_backend.export(x, _rules.Plan(True, False, CPU, CPU, not x.flags.writeable), dtype)
    else:
        capsule = _exchange(x, source, ask)
        if capsule is None:
            capsule, _full = request(
                x, stream=ask, max_version=_versions.DLPACK_VERSION, copy=False if copy is False else None
            )
    versioned, header = _capsule.checked(capsule)
    if not _rules.capsule_agrees(source, header.device_type, header.device_id):
        _capsule.discard(capsule)
        raise _errors.device_mismatch(x, source, Device((header.device_type, header.device_id)))
    producer = ask if ask not in (None, -1) else None
    return _land(capsule, versioned, header, source, target, copy, needs_copy, stream, consumer, gpu, producer)


def import_capsule(capsule, versioned, header, target, copy, needs_copy, stream):
    """A raw capsule onto ``target`` (a GPU, pinned or managed memory, or the
    CPU for device memory), its producer already synchronized."""
    _handoff.collect()
    source = Device((header.device_type, header.device_id))
    _rules.check_move(source, target)
    if target == CPU:
        _streams.check_stream(stream, CPU.type)
        return to_host(_consume_checked(capsule, versioned, header), copy)
    gpu = _stream_gpu(target, source.index if source.type in INDEXED_TYPES else None)
    consumer = _consumer_stream(stream, target, gpu)
    return _land(capsule, versioned, header, source, target, copy, needs_copy, stream, consumer, gpu, None)


def _land(capsule, versioned, header, source, target, copy, needs_copy, stream, consumer, gpu, producer):
    """Land a checked capsule on ``target``, copying if the rules say so
    (``needs_copy``, or READ_ONLY data for always-writeable arrays)."""
    try:
        read_only = bool(header.flags & _capsule.READ_ONLY)
        needs_copy = _rules.readonly_import_copies(target, read_only, copy) or needs_copy
        if source.type in DEVICE_TYPES:
            arr = consume(capsule, versioned, header)
        elif not needs_copy:  # host memory used in place
            if target.type in DEVICE_TYPES:
                return _wrap(capsule, versioned, header, _stream_gpu(target, gpu))
            return numpy_backend.consume(capsule, versioned, header)
        else:
            host = numpy_backend.consume(capsule, versioned, header)
    except BufferError:
        if _capsule.is_unconsumed(capsule):
            _capsule.discard(capsule)
        raise
    if source.type in DEVICE_TYPES:
        if not needs_copy:
            return arr
        # Managed memory is copied by the GPU that serves the target.
        src_gpu = source.index if source.type in INDEXED_TYPES else gpu
        if producer is None:  # a raw capsule: its work is taken as queued on CuPy's stream
            producer = _handoff.current_stream(src_gpu)
        return _copy_from_gpu(arr, src_gpu, producer, target, stream, _lands_on_host(target), consumer)
    dtype = _dtypes.from_numpy(host.dtype)
    return _as_dtype(_copy_from_host(host, dtype, target, stream, _lands_on_host(target), consumer), dtype)


def consume(capsule, versioned, header):
    """A CuPy array over a checked capsule's memory, zero-copy; the deleter
    runs once, when the array and all its views are gone."""
    try:
        return _consume_checked(capsule, versioned, header)
    except BufferError:
        if _capsule.is_unconsumed(capsule):
            _capsule.discard(capsule)
        raise


def _consume_checked(capsule, versioned, header):
    dtype = numpy_backend.dtype_of(header, "CuPy")
    if header.device_type not in _CUPY_TAKES[cupy_is_rocm()]:
        return _wrap(capsule, versioned, header, _handoff._runtime().getDevice(), dtype)
    import cupy

    if dtype.carrier is not None:
        _capsule.set_dtype(capsule, _dtypes.UINT, dtype.carrier.itemsize * 8)
    try:
        arr = cupy.from_dlpack(capsule)  # a bare capsule: CuPy takes it as it is
    except Exception as exc:
        raise _errors.gpu_failed("import the capsule", exc) from exc
    return _as_dtype(arr, dtype)


def _wrap(capsule, versioned, header, gpu, dtype=None):
    """A CuPy array on GPU ``gpu`` over memory CuPy's importer refuses,
    owned by the capsule's tensor (deleted once, with the last view)."""
    import cupy

    if dtype is None:
        dtype = _dtypes.to_numpy(header.code, header.bits, header.lanes)
    storage = dtype.carrier if dtype.carrier is not None else dtype.numpy
    info = _capsule.read(capsule)
    owner = _capsule.take(capsule)
    itemsize = storage.itemsize
    strides = _capsule.byte_strides(info.strides, itemsize)
    start, nbytes, offset = _span(info.data, info.byte_offset, info.shape, info.strides, itemsize)
    try:
        memory = cupy.cuda.UnownedMemory(start, nbytes, owner, gpu)
        pointer = cupy.cuda.MemoryPointer(memory, offset)
        arr = cupy.ndarray(info.shape, storage, pointer, strides=strides)
    except Exception as exc:
        raise _errors.gpu_failed(f"hold memory of {info.device} on GPU {gpu}", exc) from exc
    return _as_dtype(arr, dtype)


def _span(data, byte_offset, shape, strides, itemsize):
    """``(start, nbytes, offset)`` of the memory to wrap for a tensor: from
    the lowest address it touches (negative strides reach below its first
    element, which is ``offset`` bytes in) to just past the highest; nothing
    when it is empty. ``strides`` in elements, None for compact row-major."""
    first = data + byte_offset
    if not all(shape):
        return first, 0, 0
    if strides is None:
        return first, int(np.prod(shape)) * itemsize, 0
    low, high = _capsule.reach(shape, strides)
    return first + low * itemsize, (high + 1 - low) * itemsize, -low * itemsize


def _as_dtype(arr, dtype):
    """``arr`` viewed as the real dtype of a carrier-typed transfer."""
    if dtype.carrier is None or arr.dtype == dtype.numpy:
        return arr
    try:
        return arr.view(dtype.numpy)
    except Exception as exc:
        raise _errors.unsupported_dtype(
            dtype.code, dtype.bits, dtype.lanes, f"CuPy cannot hold {dtype.numpy} arrays ({exc})"
        ) from exc


def gather(shape, dtype, pieces, target, stream):
    """A CuPy array on GPU ``target`` assembled from the shards ``pieces``
    (each with the ``index`` it covers), each imported onto ``target`` once
    and placed, all on the consumer's stream."""
    import cupy

    gpu = target.index
    consumer = _consumer_stream(stream, target, gpu)
    if consumer == -1:
        consumer = _handoff.current_stream(gpu)
    with _handoff.queue_on(consumer, gpu):
        out = cupy.empty(shape, dtype)
        for shard in pieces:
            source = Device.of(shard.data)
            needs_copy = _rules.import_needs_copy(source, target, None, _reach.addressable)
            out[shard.index] = import_to(shard.data, source, target, None, needs_copy, consumer)
    return out


def aligned_copy(arr, alignment, stream=None):
    """A C-order copy of CuPy array ``arr`` on its GPU whose first element is
    at a multiple of ``alignment`` bytes, queued on the consumer's stream
    (``stream``, else the enclosing ``use_stream`` block's, else CuPy's
    current one)."""
    import cupy

    gpu = arr.device.id
    alignment = math.lcm(max(alignment, 1), arr.dtype.itemsize or 1)
    consumer = _consumer_stream(stream, Device.of(arr), gpu)
    if consumer == -1:
        consumer = _handoff.current_stream(gpu)
    with _handoff.queue_on(consumer, gpu):
        raw = cupy.empty(arr.nbytes + alignment, cupy.uint8)
        start = (-raw.data.ptr) % alignment
        out = raw[start:start + arr.nbytes].view(arr.dtype).reshape(arr.shape)
        out[...] = arr
    return out


def _exchange(x, source, ask):
    """x's capsule through its type's DLPack C exchange API (PyTorch's),
    unsynchronized, then ``ask`` made to wait for the producer's current work
    stream, as ``x.__dlpack__(stream=ask)`` does. None when the type offers
    no such API, or the memory is not on a CUDA GPU."""
    if source.type != _T.CUDA or ask is None:
        return None
    got = _compiled.exchange(x)
    if got is None:
        return None
    capsule, work_stream = got
    if ask != -1:
        try:
            # 0 from the producer: its legacy default stream.
            _handoff.handoff(work_stream or 1, ask, source.index)
        except BaseException:
            _capsule.discard(capsule)
            raise
    return capsule
