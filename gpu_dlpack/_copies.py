"""The copy engine: one copy and what follows it, the pool of pinned
results, and large host-to-device copies from pageable memory pipelined
through a bounded ring of pinned staging chunks.

The driver stages a copy from pageable memory one small piece at a time, at
a fraction of what the bus carries (on an H200 host: 8 GB/s, against 55 GB/s
from pinned memory). The ring stages in parallel instead: worker threads
fill pinned chunks while the copy engine moves those filled before; a chunk
is refilled only once the event recorded after its copy has completed. When
``Ring.copy`` returns, the source has been read; ``plan`` says whether the
ring pays, and the caller decides.

Floor: mechanism, over ``_handoff``.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np

from . import _handoff
from . import _compiled

#: Bytes of one pinned staging chunk, and the chunks in the ring (measured on
#: an H200 host: 4-8 MiB chunks, 8-12 threads, 29-40 GB/s from 256 MiB up).
CHUNK_BYTES = 4 << 20
RING_CHUNKS = 16
#: Copies smaller than this go straight from pageable memory (the driver's
#: own staging): below it the ring's set-up costs more than it saves.
RING_MIN_BYTES = 16 << 20
#: Workers filling chunks: the cores this process may use, less one for
#: the thread that queues the copies, at most 12.
MAX_WORKERS = 12


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def plan(nbytes: int, cores_available: int | None = None) -> int:
    """How many workers a host-to-device copy of ``nbytes`` from pageable
    memory should use: 0 means the direct copy (the driver stages it), which
    is as fast as anything on a host with fewer than three cores."""
    if nbytes < RING_MIN_BYTES:
        return 0
    n = min(MAX_WORKERS, (cores() if cores_available is None else cores_available) - 1)
    return n if n >= 2 else 0


class Runtime:
    """The runtime calls the engine makes, through CuPy on GPU ``gpu``."""

    def __init__(self, gpu: int):
        self.gpu = gpu

    def alloc_pinned(self, nbytes: int):
        """``(address, owner)``: page-locked memory, freed when ``owner`` (a
        buffer over it) goes."""
        _handoff._runtime()  # first: refused in a forked child
        import cupy

        memory = cupy.cuda.alloc_pinned_memory(nbytes)
        return memory.ptr, memory

    def memcpy(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        rt = _handoff._runtime()
        with _handoff.on_device(self.gpu):
            rt.memcpyAsync(dst, src, nbytes, rt.memcpyHostToDevice, stream)

    def event_create(self) -> int:
        rt = _handoff._runtime()
        with _handoff.on_device(self.gpu):
            return rt.eventCreateWithFlags(rt.eventDisableTiming)

    def event_record(self, event: int, stream: int) -> None:
        rt = _handoff._runtime()
        with _handoff.on_device(self.gpu):
            rt.eventRecord(event, stream)

    def event_synchronize(self, event: int) -> None:
        _handoff._runtime().eventSynchronize(event)

    def event_destroy(self, event: int) -> None:
        _handoff._runtime().eventDestroy(event)


class _Slot:
    """One pinned chunk, and the event recorded after the last copy that read it."""

    __slots__ = ("ptr", "owner", "view", "event", "in_flight")

    def __init__(self, runtime, nbytes):
        self.ptr, self.owner = runtime.alloc_pinned(nbytes)
        self.view = np.frombuffer(self.owner, np.uint8, nbytes)
        self.event = runtime.event_create()
        self.in_flight = False

    def wait(self, runtime) -> None:
        if self.in_flight:
            runtime.event_synchronize(self.event)
            self.in_flight = False


class Ring:
    """A bounded ring of pinned chunks with its pool of filling workers.
    One copy uses it at a time; a copy that finds it busy goes direct."""

    def __init__(self, runtime, chunk_bytes=CHUNK_BYTES, chunks=RING_CHUNKS, workers=2):
        self.runtime = runtime
        self.chunk_bytes = chunk_bytes
        self.chunks = chunks
        self.workers = workers
        self._slots: list = []
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.closed = False
        _inherited.add(self)

    def _after_fork(self) -> None:
        # In a forked child the ring starts again empty: its workers and the
        # thread that held its lock are not there, and its chunks and events
        # are the parent's (kept, never freed: that would call the runtime).
        _handoff._forsaken.extend(self._slots)
        self._slots = []
        self._pool = None
        self._lock = threading.Lock()

    # -- what the ring holds (for tests and the doctor) --
    @property
    def pinned_bytes(self) -> int:
        return len(self._slots) * self.chunk_bytes

    @property
    def events(self) -> int:
        return len(self._slots)

    @property
    def threads(self) -> int:
        pool = self._pool
        return 0 if pool is None else len(pool._threads)

    def try_acquire(self) -> bool:
        return not self.closed and self._lock.acquire(blocking=False)

    def release(self) -> None:
        self._lock.release()

    def copy(self, dst: int, src: np.ndarray, stream: int) -> None:
        """Queue the copy of the contiguous host array ``src`` to device
        address ``dst`` on ``stream``, the ring held (``try_acquire``); what a
        fill or a runtime call raised is raised once every worker stopped."""
        flat = src.reshape(-1).view(np.uint8)
        nbytes = flat.size
        size = self.chunk_bytes
        count = (nbytes + size - 1) // size
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="gpu_dlpack-stage")
        pool, runtime = self._pool, self.runtime
        depth = min(count, self.chunks)
        while len(self._slots) < depth:
            self._slots.append(_Slot(runtime, size))
        slots = self._slots[:depth]
        fills = collections.deque()

        def submit(k):
            slot = slots[k % depth]
            start = k * size
            n = min(size, nbytes - start)
            fills.append((slot, n, pool.submit(_fill, runtime, slot, flat, start, n)))

        try:
            for k in range(depth):
                submit(k)
            for k in range(count):
                slot, n, done = fills.popleft()
                done.result()
                runtime.memcpy(dst + k * size, slot.ptr, n, stream)
                runtime.event_record(slot.event, stream)
                slot.in_flight = True
                if k + depth < count:
                    submit(k + depth)
        except BaseException:
            # KeyboardInterrupt or a failure: no worker may write a chunk
            # once this returns, and no chunk is reused before its copy is done.
            for _slot, _n, done in fills:
                done.cancel()
            wait([done for _slot, _n, done in fills])
            raise

    def close(self) -> None:
        """Wait for every queued copy, free the chunks and events, end the workers."""
        self.closed = True
        with self._lock:
            pool, self._pool = self._pool, None
            if pool is not None:
                pool.shutdown(wait=True)
            slots, self._slots = self._slots, []
            for slot in slots:
                try:
                    slot.wait(self.runtime)
                finally:
                    self.runtime.event_destroy(slot.event)


def _fill(runtime, slot, flat, start, n):
    slot.wait(runtime)  # its last copy must be done before it is written
    np.copyto(slot.view[:n], flat[start:start + n])


_rings: dict = {}  # gpu -> Ring
_rings_lock = threading.Lock()
_inherited: weakref.WeakSet = weakref.WeakSet()  # every ring and pool, for the fork handler


def ring_for(gpu: int, workers: int) -> Ring:
    with _rings_lock:
        ring = _rings.get(gpu)
        if ring is None or ring.closed:
            ring = _rings[gpu] = Ring(Runtime(gpu), workers=workers)
        return ring


# -- one copy: the calls it makes, and the pinned memory its result lands in -----

def copy(dst: int, src: int, nbytes: int, stream: int, gpu: int, *, event: int = 0, synchronize: bool = False) -> None:
    """``cudaMemcpyAsync`` of ``nbytes`` from ``src`` to ``dst`` on
    ``stream`` of GPU ``gpu``, then ``event`` recorded when given, then the
    host waits for the stream when ``synchronize``: one call into the core
    where it is bound, else CuPy's runtime calls (the same functions)."""
    runtime = _handoff._runtime()
    if _handoff.core_bound(runtime):
        _compiled.copy(dst, src, nbytes, stream, gpu, event, synchronize)
        return
    with _handoff.on_device(gpu):
        runtime.memcpyAsync(dst, src, nbytes, runtime.memcpyDefault, stream)
        if event:
            runtime.eventRecord(event, stream)
        if synchronize:
            runtime.streamSynchronize(stream)


def copy_kept(dst: int, src: int, nbytes: int, stream: int, gpu: int, objects) -> None:
    """``copy`` without waiting: ``objects`` (every buffer the copy reads or
    writes) stay alive until it is done (``_handoff.keep``)."""
    _handoff.keep(gpu, stream, objects, lambda event: copy(dst, src, nbytes, stream, gpu, event=event))


#: Idle pinned bytes the result pool keeps for reuse; blocks past it are
#: freed, least recently returned first. A result in use counts nothing.
POOL_IDLE_BYTES = 1 << 30
_SMALL_CLASS = 1 << 20


def size_class(nbytes: int) -> int:
    """The size of the block a result of ``nbytes`` gets: a power of two up
    to 1 MiB (at least 4 KiB), above that a multiple of an eighth of the
    power of two below it (at most 12.5% more than asked)."""
    if nbytes <= _SMALL_CLASS:
        return max(4096, 1 << (max(nbytes, 1) - 1).bit_length())
    step = (1 << ((nbytes - 1).bit_length() - 1)) >> 3
    return -(-nbytes // step) * step


class HostRuntime:
    """Page-locked allocations through CuPy's runtime (portable: any GPU's
    copies read and write them)."""

    def host_alloc(self, nbytes: int) -> int:
        runtime = _handoff._runtime()
        return runtime.hostAlloc(nbytes, runtime.hostAllocPortable)

    def free_host(self, ptr: int) -> None:
        _handoff._runtime().freeHost(ptr)


class Block:
    """A pinned block of a ``PinnedPool`` (``ptr`` and ``size``, as
    ``cupy.cuda.PinnedMemoryPointer`` reads them), back to its pool with the
    last reference: its result's, which a copy still queued into it holds."""

    __slots__ = ("ptr", "size", "pool")

    def __init__(self, ptr: int, size: int, pool):
        self.ptr, self.size, self.pool = ptr, size, pool

    def retire(self) -> None:
        """Free the block instead of reusing it (a copy into it failed, and
        may still be writing it: ``cudaFreeHost`` waits for the device)."""
        pool, self.pool = self.pool, None
        if pool is not None:
            pool._free(self.ptr, self.size)

    def __del__(self):
        pool, self.pool = self.pool, None
        if pool is not None:
            pool._give_back(self.ptr, self.size)


class PinnedPool:
    """Page-locked blocks for copy results, reused across calls.

    CuPy's pinned pool keeps a free list per exact size, without bound, and
    a new size costs a ``cudaHostAlloc`` far slower than the copy. Here sizes
    are grouped in classes (``size_class``), the block returned last is
    reused first (its pages are warm), and at most ``idle_bytes`` of idle
    blocks are kept."""

    def __init__(self, runtime=None, idle_bytes: int = POOL_IDLE_BYTES):
        self.runtime = runtime if runtime is not None else HostRuntime()
        self.idle_limit = idle_bytes
        self._idle: dict = {}  # size -> [ptr, ...], most recently returned last
        self._order: dict = {}  # ptr -> size, least recently returned first
        self.idle_bytes = 0
        self.allocated = 0  # blocks allocated and not yet freed
        self._lock = threading.RLock()  # a block may come back from __del__ on any thread
        self.closed = False
        self._forked = False
        _inherited.add(self)

    def _after_fork(self) -> None:
        # In a forked child the blocks are the parent's: never reused or freed.
        self._lock = threading.RLock()
        self._idle.clear()
        self._order.clear()
        self.idle_bytes = 0
        self.closed = self._forked = True

    def take(self, nbytes: int) -> Block:
        """A block of at least ``nbytes``."""
        size = size_class(nbytes)
        with self._lock:
            free = self._idle.get(size)
            if free:
                ptr = free.pop()
                del self._order[ptr]
                self.idle_bytes -= size
                return Block(ptr, size, self)
        try:
            ptr = self.runtime.host_alloc(size)
        except Exception:
            # Pinned memory exhausted: what is idle goes, then one more try.
            self.release_idle()
            ptr = self.runtime.host_alloc(size)
        with self._lock:
            self.allocated += 1
        return Block(ptr, size, self)

    def _give_back(self, ptr: int, size: int) -> None:
        evicted = []
        with self._lock:
            if self.closed or size > self.idle_limit:
                evicted.append((ptr, size))
            else:
                self._idle.setdefault(size, []).append(ptr)
                self._order[ptr] = size
                self.idle_bytes += size
                while self.idle_bytes > self.idle_limit:
                    old = next(iter(self._order))
                    old_size = self._order.pop(old)
                    self._idle[old_size].remove(old)
                    self.idle_bytes -= old_size
                    evicted.append((old, old_size))
        for ptr, size in evicted:
            self._free(ptr, size)

    def _free(self, ptr: int, size: int) -> None:
        with self._lock:
            self.allocated -= 1
        if self._forked:
            return  # the parent's memory: left to the process
        with contextlib.suppress(Exception):  # at exit the runtime may be gone: the process frees it
            self.runtime.free_host(ptr)

    def release_idle(self) -> None:
        """Free every idle block."""
        with self._lock:
            blocks = list(self._order.items())
            self._idle.clear()
            self._order.clear()
            self.idle_bytes = 0
        for ptr, size in blocks:
            self._free(ptr, size)

    def close(self) -> None:
        """Free the idle blocks; blocks in use are freed when they come back."""
        self.closed = True
        self.release_idle()


_pool = PinnedPool()  # the process's result pool


def _after_fork() -> None:
    global _rings_lock, _pool
    _rings_lock = threading.Lock()
    for held in list(_inherited):
        held._after_fork()
    _rings.clear()  # ring_for makes new ones
    _pool = PinnedPool()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def pinned_pool() -> PinnedPool:
    return _pool


def to_host(src: int, nbytes: int, stream: int, gpu: int, pool: PinnedPool | None = None) -> Block:
    """A pinned block holding ``nbytes`` copied from ``src`` on ``stream``,
    complete on return: one copy and one stream synchronize, no event. A
    block whose copy failed is freed, never reused."""
    block = (pool or pinned_pool()).take(nbytes)
    try:
        copy(block.ptr, src, nbytes, stream, gpu, synchronize=True)
    except BaseException:
        block.retire()
        raise
    return block


@atexit.register
def _close_all():
    _pool.close()
    # Chunks still being read by a queued copy must outlive it.
    for ring in list(_rings.values()):
        with contextlib.suppress(Exception):
            ring.close()
