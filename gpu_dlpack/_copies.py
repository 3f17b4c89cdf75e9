"""The copy engine: large host-to-device copies from pageable memory,
pipelined through a bounded ring of pinned staging chunks.

A GPU's copy engine reads page-locked memory only. From ordinary (pageable)
memory the driver stages a copy through a small buffer of its own, one piece
at a time, at a fraction of what the bus carries (on an H200 host: 8 GB/s
from pageable memory, 55 GB/s from pinned memory). Here the staging runs in
parallel instead: worker threads fill pinned chunks (``numpy.copyto``, which
releases the GIL) while the copy engine moves the chunks filled before; a
chunk is filled again only once the event recorded after its copy has
completed. The ring holds at most ``RING_CHUNKS`` x ``CHUNK_BYTES`` of pinned
memory, kept across calls, and the workers are a fixed pool.

When the call returns, every byte of the source has been read (it may be
freed at once); the copies into the destination are queued on the stream
and complete in stream order; the chunks they read belong to the ring,
which waits for them before reuse, and at exit.

This is mechanism: ``plan`` says from the size and the cores available
whether the ring pays, and the caller decides. The runtime calls go through
a ``Runtime`` (CuPy's, or a recording stand-in in tests).
"""

from __future__ import annotations

import atexit
import collections
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: Bytes of one pinned staging chunk, and the chunks in the ring: at most
#: 64 MiB of pinned memory held (measured on an H200 host: 4-8 MiB chunks,
#: 8-12 threads, 29-40 GB/s from 256 MiB up).
CHUNK_BYTES = 4 << 20
RING_CHUNKS = 16
#: Copies smaller than this go straight from pageable memory (the driver's
#: own staging): below it the ring's set-up costs more than it saves.
RING_MIN_BYTES = 16 << 20
#: Workers filling chunks: the cores this process may use, less one for
#: the thread that queues the copies, at most 12.
MAX_WORKERS = 12


def workers_for(cores: int) -> int:
    return max(0, min(MAX_WORKERS, cores - 1))


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
    n = workers_for(cores() if cores_available is None else cores_available)
    return n if n >= 2 else 0


class Runtime:
    """The runtime calls the engine makes, through CuPy on GPU ``gpu``."""

    def __init__(self, gpu: int):
        self.gpu = gpu

    def _rt(self):
        from cupy.cuda import runtime

        return runtime

    def alloc_pinned(self, nbytes: int):
        """``(address, owner)``: page-locked memory, freed when ``owner`` goes."""
        import cupy

        memory = cupy.cuda.alloc_pinned_memory(nbytes)
        return memory.ptr, memory

    def memcpy(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        from cupy.cuda import Device

        rt = self._rt()
        with Device(self.gpu):
            rt.memcpyAsync(dst, src, nbytes, rt.memcpyHostToDevice, stream)

    def event_create(self) -> int:
        from cupy.cuda import Device

        rt = self._rt()
        with Device(self.gpu):
            return rt.eventCreateWithFlags(rt.eventDisableTiming)

    def event_record(self, event: int, stream: int) -> None:
        from cupy.cuda import Device

        with Device(self.gpu):
            self._rt().eventRecord(event, stream)

    def event_synchronize(self, event: int) -> None:
        self._rt().eventSynchronize(event)

    def event_destroy(self, event: int) -> None:
        self._rt().eventDestroy(event)


class _Slot:
    """One pinned chunk, and the event recorded after the last copy that read it."""

    __slots__ = ("ptr", "owner", "view", "event", "in_flight")

    def __init__(self, runtime, nbytes):
        self.ptr, self.owner = runtime.alloc_pinned(nbytes)
        self.view = np.asarray(_Buffer(self.ptr, nbytes, self.owner))
        self.event = runtime.event_create()
        self.in_flight = False

    def wait(self, runtime) -> None:
        if self.in_flight:
            runtime.event_synchronize(self.event)
            self.in_flight = False


class _Buffer:
    """Describes ``nbytes`` at ``ptr`` to NumPy, and keeps ``owner`` alive."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, ptr, nbytes, owner):
        self.__array_interface__ = {"version": 3, "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False)}
        self.owner = owner


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

    def _slot(self, i: int) -> _Slot:
        while len(self._slots) <= i:
            self._slots.append(_Slot(self.runtime, self.chunk_bytes))
        return self._slots[i]

    def copy(self, dst: int, src: np.ndarray, stream: int) -> None:
        """Queue the copy of the contiguous host array ``src`` to device
        address ``dst`` on ``stream``. The caller holds the ring
        (``try_acquire``). Raises what a fill or a runtime call raised, after
        every worker has stopped writing."""
        flat = src.reshape(-1).view(np.uint8)
        nbytes = flat.size
        size = self.chunk_bytes
        count = (nbytes + size - 1) // size
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="gpu_dlpack-stage")
        pool, runtime = self._pool, self.runtime
        depth = min(count, self.chunks)
        slots = [self._slot(i) for i in range(depth)]
        fills = collections.deque()

        def submit(k):
            slot = slots[k % depth]
            start = k * size
            n = min(size, nbytes - start)
            fills.append((k, slot, n, pool.submit(_fill, runtime, slot, flat, start, n)))

        try:
            for k in range(depth):
                submit(k)
            for k in range(count):
                _k, slot, n, done = fills.popleft()
                done.result()
                runtime.memcpy(dst + k * size, slot.ptr, n, stream)
                runtime.event_record(slot.event, stream)
                slot.in_flight = True
                if k + depth < count:
                    submit(k + depth)
        except BaseException:
            # KeyboardInterrupt or a failure: no worker may write a chunk
            # once this returns, and no chunk is reused before its copy is done.
            for _k, _slot, _n, done in fills:
                done.cancel()
            for _k, _slot, _n, done in fills:
                try:
                    done.result()
                except BaseException:
                    pass
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


def ring_for(gpu: int, workers: int) -> Ring:
    with _rings_lock:
        ring = _rings.get(gpu)
        if ring is None or ring.closed:
            ring = _rings[gpu] = Ring(Runtime(gpu), workers=workers)
        return ring


@atexit.register
def _close_all():
    # Chunks still being read by a queued copy must outlive it.
    for ring in list(_rings.values()):
        try:
            ring.close()
        except Exception:
            pass
