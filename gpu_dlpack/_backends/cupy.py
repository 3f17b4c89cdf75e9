"""The CuPy backend: CUDA and ROCm memory, and every copy that involves a GPU.

Exports go through CuPy's own exporter (zero-copy; its C deleter is safe on
any thread), asked for no synchronization: the stream hand-off is done here
with pooled events (``_handoff``), then the capsule is corrected (version,
flags, device label, dtype). What CuPy refuses or does poorly is done here:
``copy=True`` on the array's own device, device-to-host copies through
pinned memory on the consumer's stream, pinned host (CUDA_HOST) results,
peer copies between GPUs, and imports of host and pinned memory.

Imports land in CuPy arrays through ``cupy.from_dlpack`` for the capsules it
takes (CUDA, CUDA_MANAGED, ROCM), and over ``cupy.cuda.UnownedMemory`` owned
by the capsule's tensor for the memory it refuses (pinned or host memory a
GPU can address). Every copy is ``cudaMemcpyAsync`` on a stream, or a CuPy
kernel on it; every buffer a queued copy reads or writes stays alive until
it is done.

This module decides nothing: ``_rules`` says whether to copy and where to,
``_streams`` what each stream value means and when a copy must be complete.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import weakref

import numpy as np

from .. import _capsule, _copies, _dtypes, _errors, _handoff, _rules, _streams, _versions
from .. import _fastpath
from .._devices import CPU, Device, DLDeviceType, cupy_is_rocm
from .._producer import request

_T = DLDeviceType

GPU_TYPES = frozenset({_T.CUDA, _T.ROCM, _T.CUDA_MANAGED, _T.CUDA_HOST, _T.ROCM_HOST})
_BUILD_TYPES = {
    False: frozenset({_T.CUDA, _T.CUDA_MANAGED, _T.CUDA_HOST}),
    True: frozenset({_T.ROCM, _T.ROCM_HOST}),
}
#: Memory a CuPy array holds; the other GPU types are pinned host memory,
#: which lands in NumPy arrays.
DEVICE_TYPES = frozenset({_T.CUDA, _T.ROCM, _T.CUDA_MANAGED})
#: Memory of one GPU, named by its index.
INDEXED_TYPES = frozenset({_T.CUDA, _T.ROCM})
#: Capsules ``cupy.from_dlpack`` takes, per build (ROCm or not).
_CUPY_TAKES = {False: frozenset({2, 13}), True: frozenset({10})}


_ASK = (1, 0)  # what CuPy's exporter produces; relabelled DLPACK_VERSION


# -- availability ------------------------------------------------------------

def owns(x) -> bool:
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(x, cupy.ndarray)


@functools.lru_cache(maxsize=1)
def device_count() -> int:
    """GPUs CuPy can use; 0 without CuPy, without a driver, or without a GPU."""
    if importlib.util.find_spec("cupy") is None:
        return 0
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def serves(device: Device) -> bool:
    """Whether CuPy can hold or copy memory of ``device`` here: a type of
    this build (CUDA or ROCm) on a GPU that exists."""
    if device.type not in _BUILD_TYPES[cupy_is_rocm()]:
        return False
    count = device_count()
    return count > 0 and device.index < count


@functools.lru_cache(maxsize=None)
def _attribute(name: str, gpu: int) -> int:
    from cupy.cuda import runtime

    try:
        return int(runtime.deviceGetAttribute(getattr(runtime, name), gpu))
    except Exception:  # unknown to this build (HIP) or this driver
        return 0


# What each mapped move needs from the target GPU (device attributes).
_MAPPING_NEEDS = {
    _T.CUDA_HOST: ("cudaDevAttrUnifiedAddressing", "cudaDevAttrCanMapHostMemory"),
    _T.ROCM_HOST: ("cudaDevAttrUnifiedAddressing", "cudaDevAttrCanMapHostMemory"),
    _T.CUDA_MANAGED: ("cudaDevAttrManagedMemory", "cudaDevAttrConcurrentManagedAccess"),
    _T.CPU: ("cudaDevAttrPageableMemoryAccessUsesHostPageTables",),
}


def addressable(source: Device, target: Device) -> bool:
    """Whether GPU ``target`` reads and writes ``source`` memory in place:
    pinned memory under unified addressing, managed memory with concurrent
    access, pageable memory on systems where the GPU uses the host's page
    tables (ATS)."""
    needs = _MAPPING_NEEDS.get(source.type)
    return bool(needs) and all(_attribute(name, target.index) for name in needs)


def device_of(x) -> Device:
    """Where a CuPy array's memory is: CUDA, CUDA_MANAGED (id 0, as DLPack
    says for managed memory) or, on a ROCm build, ROCM."""
    data = x.data
    gpu = data.device_id
    if cupy_is_rocm():
        return Device._make(_T.ROCM, gpu)
    managed = _managed_by_kind(data.mem)
    if managed is None:
        managed = _is_managed(data.ptr)
    if managed:
        return Device._make(_T.CUDA_MANAGED, 0)
    return Device._make(_T.CUDA, gpu)


#: Whether memory of each of CuPy's memory classes is managed, where the
#: class alone says (cudaMalloc, cudaMallocAsync, cudaMallocManaged).
_KIND_OF_CLASS: dict = {}
#: The same, learnt per CuPy memory pool: a pool's blocks all come from its
#: one allocator, so the runtime is asked once per pool.
_kind_of_pool: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _managed_by_kind(mem) -> bool | None:
    """Whether ``mem`` (an array's ``data.mem``) is managed memory, as its
    CuPy class or its pool says; None when neither does (ask the runtime)."""
    if not _KIND_OF_CLASS:
        from cupy.cuda import memory

        _KIND_OF_CLASS.update({memory.Memory: False, memory.ManagedMemory: True, memory.PooledMemory: _POOLED})
        if hasattr(memory, "MemoryAsync"):
            _KIND_OF_CLASS[memory.MemoryAsync] = False
    known = _KIND_OF_CLASS.get(type(mem))
    if known is not _POOLED:
        return known
    try:  # a block of a memory pool
        pool = mem.pool
        pool = pool() if isinstance(pool, weakref.ref) else pool
        known = _kind_of_pool.get(pool)
        if known is None:
            known = _kind_of_pool[pool] = _is_managed(mem.ptr)
        return known
    except TypeError:  # a pool that takes no weak reference: ask each time
        return None


_POOLED = "pooled"


def gpu_of(ptr: int) -> int:
    """The GPU whose memory ``ptr`` points into (the current GPU for NULL or
    memory the runtime does not know; 0 without a GPU or without CuPy)."""
    try:
        from cupy.cuda import runtime
    except ImportError:
        return 0

    try:
        if ptr:
            device = int(runtime.pointerGetAttributes(ptr).device)
            if device >= 0:
                return device
        return int(runtime.getDevice())
    except Exception:
        return 0


def _memory_type(ptr: int) -> int | None:
    runtime = _handoff._runtime()

    try:
        return runtime.pointerGetAttributes(ptr).type
    except Exception:  # pageable memory on runtimes that refuse to say
        return None


def _before_host_access(source: Device, producer: int, gpu: int) -> None:
    """Wait until the host may read ``source`` memory in place: the
    producer's stream is done, and for managed memory on GPUs without
    concurrent managed access (cudaDevAttrConcurrentManagedAccess 0: Windows,
    pre-Pascal and some virtualised GPUs), where a host access while any
    kernel runs faults, every GPU is idle."""
    if source.type == _T.CUDA_MANAGED and not _attribute("cudaDevAttrConcurrentManagedAccess", gpu):
        for device in range(device_count()):
            _handoff.synchronize_device(device)
    else:
        _handoff.wait_host(producer, gpu)


def _is_managed(ptr: int) -> bool:
    runtime = _handoff._runtime()

    return bool(ptr) and _memory_type(ptr) == runtime.memoryTypeManaged


def _is_pinned(ptr: int) -> bool:
    runtime = _handoff._runtime()

    return bool(ptr) and _memory_type(ptr) == runtime.memoryTypeHost


def _backends():
    from .. import _backends

    return _backends


# -- export ------------------------------------------------------------------

def export_array(x, readonly, stream, max_version, dl_device, copy):
    """A capsule for CuPy array ``x``, following the rules (``__dlpack__``'s
    arguments; ``stream`` is the consumer's, for the memory it receives)."""
    _handoff.collect()
    source = device_of(x)
    dtype = _dtypes.from_numpy(x.dtype)
    backends = _backends()
    plan = _rules.plan_export(
        source, bool(readonly), dtype.code, dtype.bits, max_version, dl_device, copy,
        backends.can_copy, backends.addressable,
    )
    stream = _streams.check_stream(stream, plan.target.type)
    gpu = x.data.device_id
    producer = _handoff.current_stream(gpu)
    if plan.copy:
        host_done = _streams.finishes_before_return(plan.target.type, stream)
        out = _copy_from_gpu(x, gpu, producer, plan.target, stream, host_done)
        return _export_copied(out, plan, dtype)
    # Zero-copy: the same memory, ordered for the consumer, perhaps relabelled
    # (managed memory to the CPU, memory the target GPU addresses in place).
    if _streams.finishes_before_return(plan.target.type, stream, copied=False):
        _before_host_access(source, producer, gpu)
    elif stream != -1:
        consumer = _streams.resolve(stream, plan.target.type)
        _handoff.handoff(producer, consumer, gpu, _stream_gpu(plan.target, gpu))
    capsule, ptr = _capsule_of(x, dtype, plan.versioned)
    if plan.versioned:
        flags = _subbyte_flag(dtype) | (_capsule.READ_ONLY if plan.read_only else 0)
        _capsule.set_flags(ptr, flags)
    _capsule.set_device(ptr, plan.versioned, *plan.target.dlpack)
    return capsule


def export_host(arr, plan, dtype, stream):
    """A capsule for host array ``arr`` (NumPy) on the GPU-side target of
    ``plan``: pinned memory, managed memory or a GPU. ``stream`` is checked
    for the target's device type."""
    _handoff.collect()
    target = plan.target
    if not plan.copy:
        # Memory the target addresses in place (or pinned memory relabelled).
        host_plan = _rules.Plan(plan.versioned, False, CPU, CPU, plan.read_only)
        capsule = _numpy_backend().export(arr, host_plan, dtype)
        _capsule.set_device(_capsule.pointer(capsule, plan.versioned), plan.versioned, *target.dlpack)
        return capsule
    host_done = _streams.finishes_before_return(target.type, stream)
    out = _copy_from_host(arr, dtype, target, stream, host_done)
    return _export_copied(out, plan, dtype)


def _capsule_of(arr, dtype, versioned):
    """CuPy's own zero-copy capsule for ``arr`` (the stream hand-off already
    done), carrying DLPACK_VERSION and the real dtype. Returns it and its
    struct's address."""
    view = arr if dtype.carrier is None or arr.dtype == dtype.carrier else arr.view(dtype.carrier)
    try:
        capsule = view.__dlpack__(stream=-1, max_version=_ASK if versioned else None)
    except TypeError:
        if versioned:
            raise _errors.old_cupy("export a versioned DLPack capsule") from None
        capsule = view.__dlpack__(stream=-1)
    except Exception as exc:  # CuPy raises ValueError where the standard says BufferError
        raise _errors.gpu_failed("export the array", exc) from exc
    ptr = _capsule.pointer(capsule, versioned)
    if versioned:
        _capsule.set_version(ptr, _versions.DLPACK_VERSION)
    if dtype.carrier is not None:
        _capsule.set_dtype(ptr, versioned, dtype.code, dtype.bits)
    return capsule, ptr


def _subbyte_flag(dtype) -> int:
    return _capsule.IS_SUBBYTE_TYPE_PADDED if dtype.padded else 0


def _export_copied(out, plan, dtype):
    """The capsule of a fresh copy (a CuPy array, or a NumPy array over
    pinned memory), flagged IS_COPIED and labelled with the target."""
    if isinstance(out, np.ndarray):
        host_plan = _rules.Plan(plan.versioned, False, CPU, CPU, False)
        capsule = _numpy_backend().export(out, host_plan, dtype)
        ptr = _capsule.pointer(capsule, plan.versioned)
    else:
        capsule, ptr = _capsule_of(out, dtype, plan.versioned)
    if plan.versioned:
        _capsule.set_flags(ptr, _capsule.IS_COPIED | _subbyte_flag(dtype))
    _capsule.set_device(ptr, plan.versioned, *plan.target.dlpack)
    return capsule


# -- import ------------------------------------------------------------------

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
        out = _copy_from_gpu(x, src_gpu, producer, target, stream, _lands_on_host(target), consumer)
        return out
    # The producer makes a stream wait for its work: the consumer's, or for
    # a peer copy the current stream of the producer's own GPU.
    peer = source.type in INDEXED_TYPES and source.index != gpu
    if source.type == _T.CPU:
        ask = None
    elif peer and consumer != -1:
        ask = _handoff.current_stream(source.index)
    else:
        ask = consumer
    if _numpy_backend().owns(x):
        dtype = _dtypes.from_numpy(x.dtype)
        if needs_copy:
            # A NumPy array is copied as it is: no capsule to make and take
            # back (the common host-to-device copy, small ones above all).
            out = _copy_from_host(x, dtype, target, stream, _lands_on_host(target), consumer)
            return out if isinstance(out, np.ndarray) else _as_dtype(out, dtype)
        # NumPy's own exporter refuses bfloat16 and float8: the layer's does not.
        capsule = _numpy_backend().export(x, _rules.Plan(True, False, CPU, CPU, not x.flags.writeable), dtype)
    else:
        capsule = _exchange(x, source, ask)
        if capsule is None:
            capsule, _full = request(
                x, stream=ask, max_version=_versions.DLPACK_VERSION, copy=False if copy is False else None
            )
    versioned, header = _capsule.checked(capsule)
    got = Device((header.device_type, header.device_id))
    if got != source:
        _capsule.discard(capsule, versioned)
        raise _errors.unreachable(source, target, f"the producer gave memory on {got}")
    producer = ask if ask not in (None, -1) else None
    return _land(capsule, versioned, header, source, target, copy, needs_copy, stream, consumer, gpu, producer)


def import_capsule(capsule, versioned, header, target, copy, needs_copy, stream):
    """A raw capsule onto ``target``: a GPU, pinned or managed memory, or the
    CPU for a capsule of device memory. Its producer already chose how to
    synchronize; copies are queued on the consumer's stream."""
    _handoff.collect()
    source = Device((header.device_type, header.device_id))
    _rules.check_move(source, target)
    if target == CPU:
        if stream is not None:
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
            return _numpy_backend().consume(capsule, versioned, header)
        else:
            host = _numpy_backend().consume(capsule, versioned, header)
    except BufferError:
        if _capsule.is_unconsumed(capsule):
            _capsule.discard(capsule, versioned)
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
    out = _copy_from_host(host, dtype, target, stream, _lands_on_host(target), consumer)
    return out if isinstance(out, np.ndarray) else _as_dtype(out, dtype)


def consume(capsule, versioned, header):
    """A CuPy array over a checked capsule's memory, zero-copy. The capsule's
    owner stays alive, and its deleter is called once, when the array and
    all its views are gone."""
    try:
        return _consume_checked(capsule, versioned, header)
    except BufferError:
        if _capsule.is_unconsumed(capsule):
            _capsule.discard(capsule, versioned)
        raise


def _consume_checked(capsule, versioned, header):
    dtype = _dtypes.to_numpy(header.code, header.bits, header.lanes)
    if dtype.padded and not header.flags & _capsule.IS_SUBBYTE_TYPE_PADDED:
        raise _errors.unsupported_dtype(
            header.code, header.bits, header.lanes,
            "packed sub-byte data (without the IS_SUBBYTE_TYPE_PADDED flag) has no CuPy layout",
        )
    if header.device_type not in _CUPY_TAKES[cupy_is_rocm()]:
        return _wrap(capsule, versioned, header, _current_gpu(), dtype)
    import cupy

    if dtype.carrier is not None:
        _capsule.set_dtype(header.ptr, versioned, _dtypes.UINT, dtype.carrier.itemsize * 8)
    try:
        arr = cupy.from_dlpack(capsule)  # a bare capsule: CuPy takes it as it is
    except Exception as exc:
        raise _errors.gpu_failed("import the capsule", exc) from exc
    return _as_dtype(arr, dtype)


def _wrap(capsule, versioned, header, gpu, dtype=None):
    """A CuPy array on GPU ``gpu`` over memory CuPy's importer refuses
    (pinned or host memory the GPU addresses), owned by the capsule's tensor:
    its deleter runs once, when the array and all its views are gone."""
    import cupy

    if dtype is None:
        dtype = _dtypes.to_numpy(header.code, header.bits, header.lanes)
    storage = dtype.carrier if dtype.carrier is not None else dtype.numpy
    info = _capsule.read(capsule)
    owner = _capsule.take(capsule, versioned)
    itemsize = storage.itemsize
    # (No closure over itemsize: on CPython 3.11 a function whose cell fails to
    # be made, out of memory, leaks its arguments, here a capsule.)
    strides = None if info.strides is None else tuple(map(itemsize.__mul__, info.strides))
    start, nbytes, offset = _span(info.data, info.byte_offset, info.shape, info.strides, itemsize)
    try:
        memory = cupy.cuda.UnownedMemory(start, nbytes, owner, gpu)
        pointer = cupy.cuda.MemoryPointer(memory, offset)
        arr = cupy.ndarray(info.shape, storage, pointer, strides=strides)
    except Exception as exc:
        raise _errors.gpu_failed(f"hold memory of {info.device} on GPU {gpu}", exc) from exc
    return _as_dtype(arr, dtype)


def _extent(shape, strides, itemsize):
    """``(low, high)``: the bytes an array spans, as offsets from its first
    element: ``low`` (0 or less: negative strides reach below the first
    element) to ``high``, just past the highest element. ``(0, 0)`` when
    empty; ``strides`` in elements, None for compact row-major."""
    if not all(shape):
        return 0, 0
    if strides is None:
        return 0, int(np.prod(shape)) * itemsize
    low, high = _capsule.reach(shape, strides)
    return low * itemsize, (high + 1) * itemsize


def _span(data, byte_offset, shape, strides, itemsize):
    """``(start, nbytes, offset)`` of the memory to wrap for a tensor: it
    starts at the lowest address the tensor touches, and its first element
    is ``offset`` bytes in."""
    low, high = _extent(shape, strides, itemsize)
    first = data + byte_offset
    return first + low, high - low, -low


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


def gather(shape, dtype, pieces, target, stream, import_):
    """A CuPy array on GPU ``target`` assembled from the shards ``pieces``
    (each with the ``index`` it covers): every shard is read where it is
    or copied to the GPU once by ``import_`` (``from_dlpack``), then placed,
    all on the consumer's stream."""
    import cupy

    gpu = target.index
    consumer = _consumer_stream(stream, target, gpu)
    if consumer == -1:
        consumer = _handoff.current_stream(gpu)
    with _handoff.queue_on(consumer, gpu):
        out = cupy.empty(shape, dtype)
        for shard in pieces:
            out[shard.index] = import_(shard.data, device=target, stream=consumer)
    return out


def to_host(arr, copy):
    """A NumPy copy of CuPy array ``arr``, complete on return. Used for a
    producer too old to move its own data: it was asked with stream=None, so
    the copy is ordered on the default stream."""
    gpu = arr.data.device_id
    default = _streams.DEFAULT_HANDLE[_T.ROCM if cupy_is_rocm() else _T.CUDA]
    return _copy_from_gpu(arr, gpu, default, CPU, -1, True)


# -- streams -----------------------------------------------------------------

def _current_gpu() -> int:
    runtime = _handoff._runtime()

    return runtime.getDevice()


def _stream_gpu(target: Device, fallback: int | None) -> int:
    """The GPU whose streams serve ``target``: its own for GPU memory, else
    the GPU the data comes from, else the current one."""
    if target.type in INDEXED_TYPES:
        return target.index
    return fallback if fallback is not None else _current_gpu()


def _consumer_stream(stream, target: Device, gpu: int) -> int:
    """The handle of the stream an import's result is used on: ``stream``,
    else the enclosing ``use_stream`` block's, else CuPy's current stream on
    the target GPU (the per-thread default stream when CuPy uses it)."""
    if stream is None:
        stream = _streams.block_stream(target)
        if stream is None:
            return _handoff.current_stream(gpu)
    stream = _streams.check_stream(stream, target.type)
    return _streams.resolve(stream, target.type)


def _lands_on_host(target: Device) -> bool:
    return target.type in _streams.HOST_RESULTS


# -- copies ------------------------------------------------------------------

def _copy_from_gpu(x, src_gpu, producer, target, stream, host_done, consumer=None):
    """A new array on ``target`` holding CuPy array ``x``'s values (a CuPy
    array, or a NumPy array over pinned memory for host targets).

    The copy is queued on the consumer's stream after it waits for
    ``producer``; on the producer's stream when the consumer asked for no
    synchronization (-1) or is the host without a stream. ``host_done``: the
    copy is complete on return; else ``x`` stays alive until it is.
    """
    if stream == -1 or consumer == -1 or (host_done and stream is None):
        copy_stream, copy_gpu = producer, src_gpu
    else:
        if consumer is None:
            consumer = _streams.resolve(stream, target.type)
        copy_stream, copy_gpu = consumer, _stream_gpu(target, src_gpu)
    same_gpu = target.type in INDEXED_TYPES and target.index == src_gpu
    source = x
    if not same_gpu and _order(x) is None:
        import cupy

        # Laid out for a flat copy on the producer's stream, before the hand-off.
        with _handoff.queue_on(producer, src_gpu):
            x = cupy.ascontiguousarray(x)
    _handoff.handoff(producer, copy_stream, src_gpu, copy_gpu)
    if same_gpu:
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
    ``host_done`` (one copy, one stream synchronize), else queued on
    ``stream`` with the block and ``sources`` kept until the copy is done.
    A block whose copy failed is freed, never reused."""
    if not nbytes:
        return np.empty(shape, dtype, order=order)
    pool = _copies.pinned_pool()
    if host_done:
        return _over_block(_copies.to_host(src, nbytes, stream, gpu, pool), shape, dtype, order)
    block = pool.take(nbytes)
    out = _over_block(block, shape, dtype, order)
    try:
        _copies.copy_kept(block.ptr, src, nbytes, stream, gpu, sources + (out,))
    except BaseException:
        block.retire()
        raise
    return out


def _over_block(block, shape, dtype, order):
    """A NumPy array over ``block``, which goes back to its pool when the
    array and its views are gone."""
    return np.ndarray(shape, dtype, buffer=_pinned_pointer()(block, 0), order=order)


@functools.lru_cache(maxsize=None)
def _pinned_pointer():
    """CuPy's ``PinnedMemoryPointer`` type, imported once."""
    from cupy.cuda import PinnedMemoryPointer

    return PinnedMemoryPointer


def _queue_copy(dst, src, nbytes, stream, gpu, host_done, *buffers):
    """Copy ``nbytes`` from ``src`` to ``dst`` on ``stream``: complete on
    return when ``host_done`` (the host waits for the stream), else with
    every buffer it reads or writes kept until it is done."""
    if not nbytes:
        return
    if host_done:
        _copies.copy(dst, src, nbytes, stream, gpu, synchronize=True)
    else:
        _copies.copy_kept(dst, src, nbytes, stream, gpu, buffers)


def _copy_from_host(arr, dtype, target, stream, host_done, consumer=None):
    """A new array on ``target`` (GPU, managed or pinned memory) holding host
    array ``arr``'s values; GPU targets are reached by an asynchronous copy
    on the consumer's stream, large pageable arrays through the copy engine's
    ring of pinned chunks (``_copies``)."""
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
        consumer = -1 if stream == -1 else _streams.resolve(stream, target.type)
    copy_stream = consumer if consumer != -1 else _handoff.current_stream(gpu)
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
    ring of pinned chunks filled by worker threads, when it pays on this
    host (``_copies.plan``) and the ring is free; False otherwise."""
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


def _finish(stream, gpu, host_done, *buffers):
    """Complete a queued copy before returning, or keep every buffer it
    reads or writes (source, destination) alive until it is done: a caller
    may drop the result at once, and memory back in a pool (CuPy's pinned
    pool) must not be handed out while the copy still writes it."""
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
    """An empty array for a copy to ``target``: CuPy memory ordered on
    ``stream`` for GPU targets, managed memory, or pinned host memory under
    a NumPy array for host targets."""
    import cupy

    if target.type in INDEXED_TYPES:
        if _is_current(stream, target.index):
            return cupy.empty(shape, dtype, order=order)
        with _handoff.queue_on(stream, target.index):
            return cupy.empty(shape, dtype, order=order)
    if target.type == _T.CUDA_MANAGED:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        with _handoff.on_device(gpu):
            memory = cupy.cuda.malloc_managed(max(nbytes, 1))
            return cupy.ndarray(shape, dtype, memory, order=order)
    return _pinned_empty(shape, dtype, order)


def _address(a) -> int:
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr


def _is_current(stream: int, gpu: int) -> bool:
    """Whether CuPy already allocates on ``stream`` on GPU ``gpu``: ``gpu``
    is current and ``stream`` is CuPy's current stream there (no switch to
    make around the allocation)."""
    return _handoff._runtime().getDevice() == gpu and _handoff.current_stream(gpu) == stream


def _pinned_empty(shape, dtype, order):
    """A NumPy array over page-locked memory from the copy engine's pool
    (``_copies.PinnedPool``); the block goes back to the pool when the array
    and its views are gone."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if nbytes == 0:
        return np.empty(shape, dtype, order=order)
    return _over_block(_copies.pinned_pool().take(nbytes), shape, dtype, order)


def _numpy_backend():
    from . import numpy

    return numpy


def _exchange(x, source, ask):
    """x's capsule through its type's DLPack C exchange API (the compiled
    core; PyTorch offers it): exported without synchronizing, then ``ask``
    made to wait for the producer's current work stream with a pooled event,
    which is what ``x.__dlpack__(stream=ask)`` does. None when the core is off,
    the type offers no such API, or the memory is not on a CUDA GPU."""
    core = _fastpath.core
    if core is None or source.type != _T.CUDA or ask is None:
        return None
    got = core.exchange(x)
    if got is None:
        return None
    capsule, work_stream = got
    if ask != -1:
        try:
            # 0 from the producer: its legacy default stream.
            _handoff.handoff(work_stream or 1, ask, source.index)
        except BaseException:
            _capsule.discard(capsule, True)
            raise
    return capsule
