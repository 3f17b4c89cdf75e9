"""The copy engine's ring of pinned chunks, driven on the CPU through a
recording stand-in for the CUDA runtime whose copies really are
asynchronous: a queued copy reads its source only when an event after it is
waited for, as a DMA engine would. A chunk refilled before its copy ran
would put the wrong bytes in the destination, so these tests see it."""

import ctypes
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _copies

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class AsyncRuntime:
    """Copies queued per stream, run when an event recorded after them is
    synchronized (or at ``drain``). Counts what it hands out."""

    def __init__(self, fail_memcpy_at=None, fail_wait_at=None, interrupt_at=None):
        self.queues = {}
        self.events = {}
        self.created = self.destroyed = 0
        self.pinned = []  # live pinned buffers
        self.memcpys = 0
        self.waits = 0
        self.fail_memcpy_at = fail_memcpy_at
        self.fail_wait_at = fail_wait_at
        self.interrupt_at = interrupt_at
        self.lock = threading.Lock()

    def alloc_pinned(self, nbytes):
        buf = np.empty(nbytes, np.uint8)
        self.pinned.append(buf)
        return buf.ctypes.data, buf

    def memcpy(self, dst, src, nbytes, stream):
        with self.lock:
            self.memcpys += 1
            if self.interrupt_at is not None and self.memcpys == self.interrupt_at:
                raise KeyboardInterrupt
            if self.fail_memcpy_at is not None and self.memcpys == self.fail_memcpy_at:
                raise RuntimeError("cudaErrorInvalidResourceHandle: invalid resource handle")
            self.queues.setdefault(stream, []).append((dst, src, nbytes))

    def event_create(self):
        with self.lock:
            self.created += 1
            handle = 1000 + self.created
            self.events[handle] = None
            return handle

    def event_record(self, event, stream):
        with self.lock:
            self.events[event] = (stream, len(self.queues.get(stream, [])))

    def event_synchronize(self, event):
        with self.lock:
            self.waits += 1
            if self.fail_wait_at is not None and self.waits == self.fail_wait_at:
                raise RuntimeError("cudaErrorLaunchFailure: unspecified launch failure")
            recorded = self.events[event]
            if recorded is not None:
                stream, upto = recorded
                self._run(stream, upto)

    def event_destroy(self, event):
        with self.lock:
            self.destroyed += 1
            del self.events[event]

    def _run(self, stream, upto):
        queue = self.queues.get(stream, [])
        done = getattr(self, "_done", {}).get(stream, 0)
        for dst, src, n in queue[done:upto]:
            ctypes.memmove(dst, src, n)
        self._done = getattr(self, "_done", {})
        self._done[stream] = max(done, upto)

    def drain(self):
        with self.lock:
            for stream, queue in self.queues.items():
                self._run(stream, len(queue))


CHUNK = 4096


def _ring(runtime, chunks=4, workers=3):
    return _copies.Ring(runtime, chunk_bytes=CHUNK, chunks=chunks, workers=workers)


@pytest.mark.parametrize("nbytes", [1, CHUNK - 3, CHUNK, 3 * CHUNK + 17, 40 * CHUNK + 1])
def test_the_ring_copies_every_byte_in_order(nbytes):
    runtime = AsyncRuntime()
    ring = _ring(runtime)
    src = np.random.default_rng(nbytes).integers(0, 255, nbytes, dtype=np.uint8)
    dst = np.zeros(nbytes, np.uint8)
    ring.copy(dst.ctypes.data, src, stream=7)
    runtime.drain()
    np.testing.assert_array_equal(dst, src)
    assert runtime.memcpys == -(-nbytes // CHUNK)
    ring.close()


def test_a_chunk_is_refilled_only_after_its_copy_ran():
    # 40 chunks through a ring of 4: each chunk is reused 10 times, and the
    # stand-in runs a copy only when its event is waited for.
    runtime = AsyncRuntime()
    ring = _ring(runtime, chunks=4)
    src = np.arange(40 * CHUNK // 8, dtype=np.int64)
    dst = np.zeros_like(src)
    ring.copy(dst.ctypes.data, src, stream=3)
    runtime.drain()
    np.testing.assert_array_equal(dst, src)
    assert runtime.waits >= 36  # every reuse waited


def test_the_source_is_read_before_the_call_returns():
    runtime = AsyncRuntime()
    ring = _ring(runtime)
    src = np.full(10 * CHUNK, 5, np.uint8)
    dst = np.zeros_like(src)
    ring.copy(dst.ctypes.data, src, stream=1)
    src[:] = 9  # the caller may reuse or free its array at once
    runtime.drain()
    assert (dst == 5).all()


def test_what_the_ring_holds_is_bounded_and_kept_across_copies():
    runtime = AsyncRuntime()
    ring = _ring(runtime, chunks=4, workers=3)
    for n in (2 * CHUNK, 50 * CHUNK, 7 * CHUNK, 50 * CHUNK):
        src = np.ones(n, np.uint8)
        dst = np.zeros(n, np.uint8)
        ring.copy(dst.ctypes.data, src, stream=1)
        runtime.drain()
        assert (dst == 1).all()
    assert ring.pinned_bytes == 4 * CHUNK and len(runtime.pinned) == 4
    assert runtime.created == 4 and ring.events == 4
    assert ring.threads <= 3
    ring.close()
    assert runtime.destroyed == runtime.created and ring.threads == 0 and ring.pinned_bytes == 0


@pytest.mark.parametrize(
    "fault", [dict(fail_memcpy_at=3), dict(fail_wait_at=2), dict(interrupt_at=5)],
    ids=["invalid stream", "failed wait in a staging thread", "KeyboardInterrupt"],
)
def test_a_failed_copy_raises_and_leaves_the_ring_whole(fault):
    runtime = AsyncRuntime(**fault)
    ring = _ring(runtime, chunks=4)
    src = np.ones(30 * CHUNK, np.uint8)
    dst = np.zeros_like(src)
    expected = KeyboardInterrupt if "interrupt_at" in fault else RuntimeError
    with pytest.raises(expected):
        ring.copy(dst.ctypes.data, src, stream=1)
    # No worker writes a chunk after the call: a snapshot stays as it is.
    snapshot = [bytes(buf) for buf in runtime.pinned]
    assert [bytes(buf) for buf in runtime.pinned] == snapshot
    assert runtime.created == ring.events <= 4
    # The next copy works, and nothing more is held.
    runtime.fail_memcpy_at = runtime.fail_wait_at = runtime.interrupt_at = None
    src2 = np.arange(9 * CHUNK, dtype=np.uint8)
    dst2 = np.zeros_like(src2)
    ring.copy(dst2.ctypes.data, src2, stream=1)
    runtime.drain()
    np.testing.assert_array_equal(dst2, src2)
    assert ring.pinned_bytes <= 4 * CHUNK
    ring.close()
    assert runtime.destroyed == runtime.created and ring.threads == 0


def test_close_waits_for_the_copies_still_queued():
    runtime = AsyncRuntime()
    ring = _ring(runtime)
    src = np.full(6 * CHUNK, 3, np.uint8)
    dst = np.zeros_like(src)
    ring.copy(dst.ctypes.data, src, stream=2)
    ring.close()  # as at interpreter exit: the chunks outlive their copies
    assert (dst[-CHUNK:] == 3).all()
    assert ring.closed and not ring.try_acquire()


def test_one_copy_at_a_time_uses_the_ring():
    ring = _ring(AsyncRuntime())
    assert ring.try_acquire()
    assert not ring.try_acquire()  # a second copy goes direct instead of waiting
    ring.release()
    assert ring.try_acquire()
    ring.release()


@pytest.mark.parametrize(
    "nbytes,cores,workers",
    [
        (1 << 20, 16, 0),  # small: direct
        (64 << 20, 16, 12 if _copies.MAX_WORKERS >= 12 else _copies.MAX_WORKERS),
        (64 << 20, 8, 7),
        (64 << 20, 2, 0),  # two cores: the direct copy is as fast
        (64 << 20, 3, 2),
    ],
)
def test_the_plan_follows_size_and_cores(nbytes, cores, workers):
    assert _copies.plan(nbytes, cores) == workers


# -- the backend's use of the ring ----------------------------------------------

class _Out:
    """What the backend reads of a CuPy result: ``data.ptr`` (host memory here)."""

    def __init__(self, arr):
        self.arr = arr
        self.data = type("Pointer", (), {"ptr": arr.ctypes.data})()


@pytest.fixture
def backend_ring(monkeypatch):
    from gpu_dlpack._backends.cupy import copies as cupy_copies

    runtime = AsyncRuntime()
    ring = _ring(runtime, chunks=4)
    monkeypatch.setattr(_copies, "ring_for", lambda gpu, workers: ring)
    monkeypatch.setattr(_copies, "RING_MIN_BYTES", 4 * CHUNK)
    monkeypatch.setattr(_copies, "cores", lambda: 8)
    monkeypatch.setattr(cupy_copies, "_is_pinned", lambda ptr: False)
    yield cupy_copies, ring, runtime
    ring.close()


def test_large_pageable_copies_go_through_the_ring(backend_ring):
    cupy_copies, ring, runtime = backend_ring
    src = np.arange(10 * CHUNK // 4, dtype=np.float32)
    out = _Out(np.zeros_like(src))
    assert cupy_copies._ring_copy(out, src, 5, 0)
    runtime.drain()
    np.testing.assert_array_equal(out.arr, src)
    small = np.arange(8, dtype=np.float32)
    assert not cupy_copies._ring_copy(_Out(np.zeros_like(small)), small, 5, 0)  # direct


def test_a_busy_ring_sends_the_copy_direct(backend_ring):
    cupy_copies, ring, runtime = backend_ring
    src = np.ones(10 * CHUNK, np.uint8)
    assert ring.try_acquire()
    try:
        assert not cupy_copies._ring_copy(_Out(np.zeros_like(src)), src, 5, 0)
    finally:
        ring.release()


def test_a_failed_ring_copy_is_a_buffer_error_and_frees_the_ring(backend_ring):
    cupy_copies, ring, runtime = backend_ring
    runtime.fail_memcpy_at = 2
    src = np.ones(10 * CHUNK, np.uint8)
    out = _Out(np.zeros_like(src))  # alive until the ring is free again
    with pytest.raises(BufferError, match="invalid resource handle"):
        cupy_copies._ring_copy(out, src, 5, 0)
    assert ring.try_acquire()
    ring.release()
    # The copy queued before the failure runs when its event is waited for,
    # at the latest when the fixture closes the ring after this test: run it
    # now, while ``out`` is alive (else the stand-in writes freed memory).
    runtime.drain()


# -- on a GPU ---------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("nbytes", [4096, 1 << 20, 64 << 20])
def test_host_to_device_copies_are_right_and_need_no_source_after_return(cp, nbytes):
    host = np.random.default_rng(1).random(nbytes // 8)
    expected = host.copy()
    s = cp.cuda.Stream(non_blocking=True)
    g = gpu_dlpack.from_dlpack(host, device="cuda:0", stream=s)
    host[:] = -1.0  # the caller reuses its array at once
    del host
    s.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(g), expected)


@pytest.mark.gpu
def test_a_large_copy_through_the_ring_refills_a_chunk_only_once_its_copy_is_done(cp, monkeypatch):
    # The ring (normally from 16 MiB, on hosts with three cores or more) on
    # two chunks of 1 MiB for an 8 MiB copy: each chunk is filled four times,
    # each time only once the copy that read it before is done.
    from gpu_dlpack import _copies

    ring = _copies.Ring(_copies.Runtime(0), chunk_bytes=1 << 20, chunks=2, workers=2)
    monkeypatch.setattr(_copies, "plan", lambda nbytes, cores_available=None: 2)
    monkeypatch.setitem(_copies._rings, 0, ring)  # what ring_for finds for GPU 0
    monkeypatch.setattr(_copies, "RING_MIN_BYTES", 1 << 20)
    host = np.random.default_rng(2).random(1 << 20)  # 8 MiB
    expected = host.copy()
    s = cp.cuda.Stream(non_blocking=True)
    g = gpu_dlpack.from_dlpack(host, device="cuda:0", stream=s)
    host[:] = -1.0
    s.synchronize()
    np.testing.assert_array_equal(g.get(), expected)
    ring.close()


def test_pinned_memory_exhausted_is_raised_and_nothing_is_held():
    class NoPinned(AsyncRuntime):
        def alloc_pinned(self, nbytes):
            if len(self.pinned) == 2:
                raise MemoryError("cudaErrorMemoryAllocation: out of memory")
            return super().alloc_pinned(nbytes)

    runtime = NoPinned()
    ring = _ring(runtime, chunks=4)
    src = np.ones(10 * CHUNK, np.uint8)
    dst = np.zeros_like(src)  # alive until the ring is closed: its workers may still write it
    with pytest.raises(MemoryError):
        ring.copy(dst.ctypes.data, src, stream=1)
    assert ring.events == runtime.created == 2  # the chunks made so far stay in the ring
    ring.close()
    del dst
    assert runtime.destroyed == runtime.created and ring.threads == 0


def test_at_exit_the_ring_waits_for_its_queued_copies(tmp_path):
    # The check is registered before gpu_dlpack._copies is imported, so it
    # runs after the ring's own exit handler (atexit runs last-in first-out).
    script = f"""
import atexit, sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
sys.path.insert(0, {ROOT!r})
import numpy as np
dst = np.zeros(6 * 4096, np.uint8)
atexit.register(lambda: print("copied" if (dst == 7).all() else "lost"))
from gpu_dlpack import _copies
from test_copies import AsyncRuntime
ring = _copies.Ring(AsyncRuntime(), chunk_bytes=4096, chunks=2, workers=2)
_copies._rings[0] = ring
src = np.full(6 * 4096, 7, np.uint8)
ring.copy(dst.ctypes.data, src, stream=1)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "copied"
