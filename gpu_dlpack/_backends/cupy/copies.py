"""The CuPy backend's copies, between any two of host, pinned, managed and
GPU memory, each queued on a stream, with every buffer it reads or writes
kept alive until it is done (``_copies`` and ``_handoff`` are the mechanism).

Floor: the backends, under CuPy's exports and imports, over its ``gpus``.
"""

from __future__ import annotations

import functools

import numpy as np

from ... import _copies, _errors, _handoff, _streams
from ..._devices import CPU, DLDeviceType, cupy_is_rocm
from .gpus import DEVICE_TYPES, INDEXED_TYPES, _is_pinned, _stream_gpu

_T = DLDeviceType


def _copy_from_gpu(x, src_gpu, producer, target, stream, host_done, consumer=None):
    """A new array on ``target`` holding CuPy array ``x``'s values (a NumPy
    array over pinned memory for host targets), queued on the consumer's
    stream after it waits for ``producer``, or on the producer's stream when
    the consumer asked for no synchronization or is the host without a
    stream; complete on return when ``host_done``."""
    if stream == -1 or consumer == -1 or (host_done and stream is None):
        copy_stream, copy_gpu = producer, src_gpu
    else:
        if consumer is None:
            consumer = _streams.resolve(stream, target.type)
        copy_stream, copy_gpu = consumer, _stream_gpu(target, src_gpu)
    _refuse_copy_under_capture(target, (producer, src_gpu), (copy_stream, copy_gpu))
    same_gpu = target.type in INDEXED_TYPES and target.index == src_gpu
    source = x
    if not same_gpu and _order(x) is None:
        import cupy

        # Laid out for a flat copy on the producer's stream, before the hand-off.
        with _handoff.queue_on(producer, src_gpu):
            x = cupy.ascontiguousarray(x)
    _handoff.handoff(producer, copy_stream, src_gpu, copy_gpu)
    if same_gpu and _order(x) is None:  # strided on its own GPU: a CuPy kernel copies it
        with _handoff.queue_on(copy_stream, copy_gpu):
            out = x.copy()
        _finish(copy_stream, copy_gpu, host_done, source, x, out)
        return out
    if target.type not in DEVICE_TYPES:  # pinned host memory, from the copy engine's pool
        return _to_pinned(x.data.ptr, x.nbytes, x.shape, x.dtype, _order(x), copy_stream, copy_gpu, host_done, source, x)
    out = _allocate(target, x.shape, x.dtype, _order(x), copy_stream, copy_gpu)
    _queue_copy(_address(out), x.data.ptr, x.nbytes, copy_stream, copy_gpu, host_done, source, x, out)
    return out


def _to_pinned(src, nbytes, shape, dtype, order, stream, gpu, host_done, *sources):
    """A NumPy array over a pinned block of the copy engine's pool holding
    the ``nbytes`` at device address ``src``: complete on return when
    ``host_done``, else with the block and ``sources`` kept until the copy
    is done. A block whose copy failed is freed, never reused."""
    if not nbytes:
        return np.empty(shape, dtype, order=order)
    if host_done:
        return _over_block(_copies.to_host(src, nbytes, stream, gpu), shape, dtype, order)
    block = _copies.pinned_pool().take(nbytes)
    out = _over_block(block, shape, dtype, order)
    try:
        _copies.copy_kept(block.ptr, src, nbytes, stream, gpu, sources + (out,))
    except BaseException:
        block.retire()
        raise
    return out


def _over_block(block, shape, dtype, order):
    """A NumPy array over ``block``, back to its pool once the array and its views are gone."""
    return np.ndarray(shape, dtype, buffer=_pinned_pointer()(block, 0), order=order)


@functools.lru_cache(maxsize=None)
def _pinned_pointer():
    """CuPy's ``PinnedMemoryPointer`` type, imported once."""
    from cupy.cuda import PinnedMemoryPointer

    return PinnedMemoryPointer


def _queue_copy(dst, src, nbytes, stream, gpu, host_done, *buffers):
    """Copy ``nbytes`` from ``src`` to ``dst`` on ``stream``: complete on
    return when ``host_done``, else with ``buffers`` kept until it is done."""
    if not nbytes:
        return
    if host_done:
        _copies.copy(dst, src, nbytes, stream, gpu, synchronize=True)
    else:
        _copies.copy_kept(dst, src, nbytes, stream, gpu, buffers)


def _copy_from_host(arr, dtype, target, stream, host_done, consumer=None):
    """A new array on ``target`` (GPU, managed or pinned memory) holding host
    array ``arr``'s values, copied to a GPU on the consumer's stream."""
    src = arr if _order(arr) is not None else np.ascontiguousarray(arr)
    if dtype.carrier is not None:
        src = src.view(dtype.carrier)
    order = _order(src)
    if target.type not in DEVICE_TYPES:  # pinned memory: a host copy
        out = _pinned_empty(src.shape, src.dtype, order)
        np.copyto(out, src)
        return out.view(dtype.numpy) if dtype.carrier is not None else out
    gpu = _stream_gpu(target, None)
    if consumer is None:
        consumer = _streams.resolve(stream, target.type)
    copy_stream = consumer if consumer != -1 else _handoff.current_stream(gpu)
    _refuse_copy_under_capture(target, (copy_stream, gpu))
    out = _allocate(target, src.shape, src.dtype, order, copy_stream, gpu)
    if target.type in INDEXED_TYPES and src.nbytes >= _copies.RING_MIN_BYTES and _ring_copy(out, src, copy_stream, gpu):
        # The source is read; the ring keeps its chunks until their copies are done.
        _finish(copy_stream, gpu, host_done, out)
        return out
    # Pinned memory is read by the copy engine in place, and pageable memory
    # is staged by the driver before the call returns (as cupy.asarray does).
    _queue_copy(_address(out), src.ctypes.data, src.nbytes, copy_stream, gpu, host_done, src, arr, out)
    return out


def _ring_copy(out, src, stream, gpu) -> bool:
    """Copy large pageable ``src`` into ``out`` through the copy engine's
    ring, when it pays here (``_copies.plan``) and is free; False otherwise."""
    workers = _copies.plan(src.nbytes)
    if not workers or _is_pinned(src.ctypes.data):
        return False
    ring = _copies.ring_for(gpu, workers)
    if not ring.try_acquire():
        return False
    try:
        ring.copy(out.data.ptr, src, stream)
    except Exception as exc:
        raise _errors.gpu_failed("copy host memory to the GPU", exc) from exc
    finally:
        ring.release()
    return True


def _refuse_copy_under_capture(target, *streams):
    """Refuse a copy before anything is queued when one of ``streams``
    (``(handle, gpu)`` pairs) takes part in a CUDA graph capture: every copy
    waits on the host, touches host memory or keeps buffers alive, none of
    which a graph can hold, and allocates (cudaMalloc, forbidden then)."""
    for stream, gpu in dict.fromkeys(streams):  # each stream asked once
        _handoff.refuse_under_capture(f"copy the array to {target}", stream, gpu)


def _finish(stream, gpu, host_done, *buffers):
    """Complete a queued copy before returning, or keep every buffer it
    reads or writes alive until it is done (a caller may drop the result at
    once, which must not go back to a pool while the copy writes it)."""
    if host_done:
        _handoff.wait_host(stream, gpu)
    else:
        _handoff.keep_until_done(stream, gpu, *buffers)


def _order(a):
    """'C' or 'F' for an array a flat copy can move, None otherwise."""
    if a.flags.c_contiguous:
        return "C"
    if a.flags.f_contiguous:
        return "F"
    return None


def _allocate(target, shape, dtype, order, stream, gpu):
    """An empty CuPy array for a copy to ``target`` (``DEVICE_TYPES``): GPU
    memory ordered on ``stream``, or managed memory."""
    import cupy

    if target.type == _T.CUDA_MANAGED:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        with _handoff.on_device(gpu):
            memory = cupy.cuda.malloc_managed(max(nbytes, 1))
            return cupy.ndarray(shape, dtype, memory, order=order)
    if _is_current(stream, target.index):
        return cupy.empty(shape, dtype, order=order)
    with _handoff.queue_on(stream, target.index):
        return cupy.empty(shape, dtype, order=order)


def _address(a) -> int:
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr


def _is_current(stream: int, gpu: int) -> bool:
    """Whether CuPy already allocates on ``stream`` on GPU ``gpu`` (no switch to make)."""
    return _handoff._runtime().getDevice() == gpu and _handoff.current_stream(gpu) == stream


def _pinned_empty(shape, dtype, order):
    """A NumPy array over a block of the copy engine's pinned pool."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if nbytes == 0:
        return np.empty(shape, dtype, order=order)
    return _over_block(_copies.pinned_pool().take(nbytes), shape, dtype, order)


def to_host(arr, copy):
    """A NumPy copy of CuPy array ``arr``, complete on return, ordered on the
    default stream (a producer too old to move its data, asked with stream=None)."""
    gpu = arr.data.device_id
    default = _streams.DEFAULT_HANDLE[_T.ROCM if cupy_is_rocm() else _T.CUDA]
    return _copy_from_gpu(arr, gpu, default, CPU, -1, True)
