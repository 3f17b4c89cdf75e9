"""Threads: 8 threads exchanging at once, with the checks of the other files.

Each thread owns its arrays, filled with values unique to it, and runs every
path (NumPy, torch through wrap() and back, JAX's adapted capsules, hand-made
capsules imported and refused) in a loop: values and pointers must be its
own, nothing may raise but the refusals expected, and at the end every
deleter ran exactly once and every source is freed. A second test hands
capsules from producer threads to consumer threads through a queue, so that
capsules are made, consumed and freed on different threads.
"""

from __future__ import annotations

import gc
import os
import queue
import sys
import threading
import weakref

import numpy as np
import pytest

import gpu_dlpack

from . import capsules
from .figures import counter_fixture
from .helpers import refcount, released

figures = counter_fixture("threads")

THREADS = 8
CYCLES = int(os.environ.get("GPU_DLPACK_THREAD_CYCLES", "2000"))


def _run(workers):
    """Start every worker at once; return the exceptions they raised."""
    errors = []
    barrier = threading.Barrier(len(workers))

    def guarded(work):
        try:
            barrier.wait()
            work()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return errors


def test_eight_threads_exchange_on_every_path_at_once(figures, torch, jax):
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads as often as possible
    calls_before, stray_before = capsules.total_calls, capsules.stray_calls
    counts = [0] * THREADS
    refs = []

    def worker(k):
        base = np.full(64, float(k))  # this thread's values
        a = base[::2]  # strided, so a copy shows
        refs.append(weakref.ref(base))
        t_src = torch.from_numpy(np.full(64, float(k)))
        refs.append(weakref.ref(t_src))
        j = jax.numpy.full(64, float(k))
        made = 0

        def check(arr, ptr=None):
            if arr.shape[0] and (arr[0] != k or arr[-1] != k):
                raise AssertionError(f"thread {k} saw another thread's values")
            if ptr is not None and arr.ctypes.data != ptr:
                raise AssertionError(f"thread {k}: a zero-copy exchange moved the data")

        def step(i):
            nonlocal made
            path = i % 7
            if path == 0:
                check(gpu_dlpack.from_dlpack(gpu_dlpack.export(a, max_version=(1, 0))), a.ctypes.data)
            elif path == 1:
                b = gpu_dlpack.from_dlpack(gpu_dlpack.export(a, copy=True))
                check(b)
                if b.ctypes.data == a.ctypes.data:
                    raise AssertionError("copy=True shared the data")
            elif path == 2:
                t = torch.from_dlpack(gpu_dlpack.wrap(a))
                if t.data_ptr() != a.ctypes.data or t[0].item() != k:
                    raise AssertionError(f"thread {k}: torch import went wrong")
            elif path == 3:
                check(gpu_dlpack.from_dlpack(gpu_dlpack.export(t_src, max_version=(1, 0))), t_src.data_ptr())
            elif path == 4:
                cap = gpu_dlpack.export(j, max_version=(1, 0))
                if not gpu_dlpack.inspect(cap).readonly:
                    raise AssertionError("JAX data lost READ_ONLY")
                check(gpu_dlpack.from_dlpack(cap), j.unsafe_buffer_pointer())
            elif path == 5:
                cap, _ = capsules.make(a)
                made += 1
                check(gpu_dlpack.from_dlpack(cap), a.ctypes.data)
            else:
                cap, _ = capsules.make(a, version=(2, 0))
                made += 1
                try:
                    gpu_dlpack.from_dlpack(cap)
                except BufferError:
                    pass
                else:
                    raise AssertionError("a DLPack 2.x capsule was imported")

        for i in range(CYCLES):
            step(i + k)
        counts[k] = made

    try:
        errors = _run([lambda k=k: worker(k) for k in range(THREADS)])
    finally:
        sys.setswitchinterval(old_interval)
    assert not errors, errors[:3]
    gc.collect()
    figures["threads"] += THREADS
    figures["exchanges on 8 threads at once"] += THREADS * CYCLES
    assert capsules.total_calls - calls_before == sum(counts)  # each deleter once
    assert capsules.stray_calls == stray_before
    assert all(r() is None for r in refs), "a source outlived its thread"


def test_capsules_made_on_one_thread_are_consumed_and_freed_on_others(figures, torch):
    # Four producer threads export; four consumer threads import and drop.
    produced = queue.Queue(maxsize=256)
    n = CYCLES
    sources = [np.arange(32.0) + 1000 * k for k in range(THREADS // 2)]
    refs_before = [refcount(s) for s in sources]
    t_sources = [torch.arange(32.0) + 1000 * k for k in range(THREADS // 2)]
    calls_before = capsules.total_calls
    done = []

    def producer(k):
        for i in range(n):
            path = i % 3
            if path == 0:
                produced.put((k, gpu_dlpack.export(sources[k], max_version=(1, 0)), sources[k].ctypes.data))
            elif path == 1:
                produced.put((k, gpu_dlpack.export(t_sources[k]), t_sources[k].data_ptr()))
            else:
                cap, _ = capsules.make(sources[k], versioned=bool(i % 2))
                produced.put((k, cap, sources[k].ctypes.data))
        produced.put(None)

    def consumer():
        got = 0
        while True:
            item = produced.get()
            if item is None:
                break
            k, cap, ptr = item
            arr = gpu_dlpack.from_dlpack(cap)
            if arr.ctypes.data != ptr or arr[1] != 1000 * k + 1:
                raise AssertionError("a capsule arrived changed")
            got += 1
        done.append(got)

    errors = _run([lambda k=k: producer(k) for k in range(THREADS // 2)] + [consumer] * (THREADS // 2))
    assert not errors, errors[:3]
    gc.collect()
    assert sum(done) == n * THREADS // 2
    figures["capsules handed between threads"] += sum(done)
    assert [refcount(s) for s in sources] == refs_before
    refs = [weakref.ref(s) for s in sources]
    del sources, producer, consumer
    assert all(released(r) for r in refs)  # no capsule kept a source alive
    made = sum(1 for i in range(n) if i % 3 == 2) * (THREADS // 2)
    assert capsules.total_calls - calls_before == made


@pytest.mark.gpu
@pytest.mark.parametrize("work", ["copy", pytest.param("kernel", marks=pytest.mark.kernel)])
def test_eight_threads_each_on_its_own_stream(figures, work):
    # Each thread queues work on its own producer stream and imports on its
    # own consumer stream: the consumer must see the work done (SPEC §3: the
    # producer makes the consumer's stream wait, without blocking the host).
    # The producer's work is a kernel, or a copy from the host (which the
    # simulated CUDA runs too).
    import cupy

    rounds = 50

    def worker(k):
        with cupy.cuda.Device(0):
            producer, consumer = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
            with producer:
                d = cupy.asarray(np.full(1 << 20, k, dtype=np.float32))
            for i in range(rounds):
                with producer:  # queued, maybe not yet run
                    if work == "kernel":
                        d += 1
                    else:
                        d.set(np.full(d.shape, k + i + 1, np.float32), stream=producer)
                    cap = gpu_dlpack.export(d, stream=consumer.ptr, max_version=(1, 0))
                with consumer:
                    e = gpu_dlpack.from_dlpack(cap, stream=consumer.ptr)
                    host = gpu_dlpack.from_dlpack(
                        gpu_dlpack.export(e, dl_device=(1, 0), max_version=(1, 0))  # on `consumer`
                    )
                if host[0] != k + i + 1 or host[-1] != k + i + 1:
                    raise AssertionError(f"thread {k} read before its producer stream's work finished")

    errors = _run([lambda k=k: worker(k) for k in range(THREADS)])
    assert not errors, errors[:3]
    figures["GPU exchanges on 8 threads, own streams"] += THREADS * rounds
