"""The CuPy backend's GPUs, as CuPy's runtime answers (kept where the answer
cannot change): which devices CuPy serves, where an array's memory is, what
a GPU addresses in place, and which GPU and stream serve a target.

Floor: the backends, at the bottom of CuPy's: it asks only the runtime.
"""

from __future__ import annotations

import functools
import sys
import weakref

from ... import _handoff, _streams
from ..._devices import Device, DLDeviceType, cupy_is_rocm, types
from ..._streams import INDEXED_TYPES

_T = DLDeviceType

_BUILD_TYPES = {False: types(stack="cuda"), True: types(stack="rocm")}  # by cupy_is_rocm()
#: Memory a CuPy array holds; the other GPU types are pinned host memory,
#: which lands in NumPy arrays.
DEVICE_TYPES = types(array="cupy")


def owns(x) -> bool:
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(x, cupy.ndarray)


@functools.lru_cache(maxsize=1)
def device_count() -> int:
    """GPUs CuPy can use; 0 without CuPy, without a driver, or without a GPU."""
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
    if cupy_is_rocm():
        return Device._make(_T.ROCM, data.device_id)
    if _is_managed_memory(data.mem):
        return Device._make(_T.CUDA_MANAGED, 0)
    return Device._make(_T.CUDA, data.device_id)


#: Whether each of CuPy's memory classes is managed, where the class says.
_KIND_OF_CLASS: dict = {}
#: The same per memory pool (one allocator each): the runtime asked once per pool.
_kind_of_pool: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _is_managed_memory(mem) -> bool:
    """Whether ``mem`` (an array's ``data.mem``) is managed memory, as its
    CuPy class or its pool says, else as the runtime says."""
    if not _KIND_OF_CLASS:
        from cupy.cuda import memory

        _KIND_OF_CLASS.update({memory.Memory: False, memory.ManagedMemory: True, memory.PooledMemory: _POOLED})
        if hasattr(memory, "MemoryAsync"):
            _KIND_OF_CLASS[memory.MemoryAsync] = False
    known = _KIND_OF_CLASS.get(type(mem))
    if known is None:
        return _memory_is(mem.ptr, "Managed")
    if known is not _POOLED:
        return known
    try:  # a block of a memory pool
        pool = mem.pool
        pool = pool() if isinstance(pool, weakref.ref) else pool
        known = _kind_of_pool.get(pool)
        if known is None:
            known = _kind_of_pool[pool] = _memory_is(mem.ptr, "Managed")
        return known
    except TypeError:  # a pool that takes no weak reference: ask each time
        return _memory_is(mem.ptr, "Managed")


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


def _before_host_access(source: Device, producer: int, gpu: int) -> None:
    """Wait until the host may read ``source`` memory in place: the
    producer's stream is done, and every GPU is idle for managed memory
    without concurrent managed access (Windows, pre-Pascal and some
    virtualised GPUs: a host access while any kernel runs faults)."""
    if source.type == _T.CUDA_MANAGED and not _attribute("cudaDevAttrConcurrentManagedAccess", gpu):
        # A device's synchronization invalidates a capture: refused first.
        _handoff.refuse_under_capture("wait on the host for every GPU (managed memory the host may read only while "
                                      "no GPU runs work)", producer, gpu)
        for device in range(device_count()):
            _handoff.synchronize_device(device)
    else:
        _handoff.wait_host(producer, gpu)


def _memory_is(ptr: int, kind: str) -> bool:
    """Whether ``ptr`` points into ``memoryType<kind>`` memory (False for
    NULL, and for pageable memory on runtimes that refuse to say)."""
    runtime = _handoff._runtime()
    if not ptr:
        return False
    try:
        found = runtime.pointerGetAttributes(ptr).type
    except Exception:
        return False
    return found == getattr(runtime, f"memoryType{kind}")


def _is_pinned(ptr: int) -> bool:
    return _memory_is(ptr, "Host")


# -- streams -----------------------------------------------------------------

def _stream_gpu(target: Device, fallback: int | None) -> int:
    """The GPU whose streams serve ``target``: its own for GPU memory, else
    the GPU the data comes from, else the current one."""
    if target.type in INDEXED_TYPES:
        return target.index
    return fallback if fallback is not None else _handoff._runtime().getDevice()


def _consumer_stream(stream, target: Device, gpu: int) -> int:
    """The handle of the stream an import's result is used on: ``stream``,
    else the enclosing ``use_stream`` block's, else CuPy's current one."""
    if stream is None:
        stream = _streams.block_stream(target)
        if stream is None:
            return _handoff.current_stream(gpu)
    return _streams.check_stream(stream, target.type)


def _lands_on_host(target: Device) -> bool:
    return target.type in _streams.HOST_RESULTS
