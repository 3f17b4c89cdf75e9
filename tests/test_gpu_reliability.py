"""Reliability on a GPU: a copy still queued keeps every buffer it writes,
and memory wrapped for negative strides has the right bounds.

Marked ``gpu``: skipped without a GPU usable by CuPy. The same mechanism is
checked on the CPU with a recording stand-in of the runtime in
test_reliability.py.
"""

import gc

import numpy as np
import pytest

from gpu_dlpack import _copies, export, from_dlpack, inspect

from .capsules import make
from .helpers import gpu_arange, simulated_cuda

pytestmark = pytest.mark.gpu

_SLEEP = r"""
extern "C" __global__ void sleep_ns(long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < (unsigned long long)ns);
}
"""


@pytest.fixture(scope="module")
def sleep(cp):
    """sleep(stream, seconds): queue that much work on ``stream`` (timed by
    the GPU's global timer, not by clock cycles). On the simulated CUDA a
    stream runs only when the host waits for it: nothing to queue."""
    if simulated_cuda():
        return lambda stream, seconds: None
    if cp.cuda.runtime.is_hip:
        pytest.skip("the sleep kernel reads the CUDA global timer")
    try:
        kernel = cp.RawKernel(_SLEEP, "sleep_ns")
        kernel.compile()
    except Exception as exc:
        pytest.skip(f"cannot compile the sleep kernel: {exc}")

    def run(stream, seconds):
        with stream:
            kernel((1,), (1,), (np.int64(seconds * 1e9),))

    return run


@pytest.mark.parametrize("trial", range(3))
def test_a_pinned_destination_dropped_mid_copy_is_not_handed_to_another_owner(cp, sleep, trial):
    # 64 MiB copied into pinned memory on a stream that is busy for 0.2 s:
    # the copy has not started when export returns. The capsule is dropped
    # at once; a new owner takes pinned memory of the same size and fills
    # it. The pending copy must not write there.
    n = 16 * 1024 * 1024
    x = gpu_arange(cp, n, dtype=cp.float32)
    s = cp.cuda.Stream(non_blocking=True)
    cp.cuda.Device().synchronize()
    sleep(s, 0.2)
    cap = export(x, dl_device=(3, 0), stream=s.ptr, max_version=(1, 0))
    assert inspect(cap).device.dlpack == (3, 0)
    del cap
    gc.collect()
    export(x, max_version=(1, 0))  # another exchange: what completed copies held is released
    # New owners of pinned memory of that size: CuPy's, and the layer's own
    # pool (where the copy's block came from).
    memory = cp.cuda.alloc_pinned_memory(n * 4)
    block = _copies.pinned_pool().take(n * 4)
    owners = [np.frombuffer(memory, np.float32, n), np.ndarray(n, np.float32, buffer=cp.cuda.PinnedMemoryPointer(block, 0))]
    for mine in owners:
        mine[:] = 1.0
    s.synchronize()
    for mine in owners:
        assert int((mine != 1.0).sum()) == 0, "a copy wrote into memory it no longer owned"


def test_a_pinned_destination_holds_the_values_once_its_stream_is_done(cp, sleep):
    n = 1 << 20
    x = gpu_arange(cp, n, dtype=cp.float32)
    s = cp.cuda.Stream(non_blocking=True)
    cp.cuda.Device().synchronize()
    sleep(s, 0.1)
    a = from_dlpack(export(x, dl_device=(3, 0), stream=s.ptr, max_version=(1, 0)))
    s.synchronize()
    assert np.array_equal(a, np.arange(n, dtype=np.float32))


def test_pinned_memory_with_negative_strides_lands_on_the_gpu_with_its_values(cp):
    # A capsule of pinned host memory with negative strides, wrapped in
    # place by the GPU (unified addressing): the wrapped range must start at
    # the lowest address, not at the first element.
    n = 64
    memory = cp.cuda.alloc_pinned_memory(n * 8)
    base = np.frombuffer(memory, np.float64, n)
    base[:] = np.arange(n)
    view = base.reshape(8, 8)[::-1, ::-2]
    cap, rec = make(view, device=(3, 0), data=view.ctypes.data)
    a = from_dlpack(cap, device="cuda:0")
    assert isinstance(a, cp.ndarray)
    # The CuPy array wraps the span the view covers, from its lowest address
    # (element 1 of the base), and reads the view's values: pinned memory,
    # which the host reads in place too.
    assert a.shape == view.shape and a.strides == view.strides and a.data.ptr == view.ctypes.data
    assert a.data.mem.ptr == base.ctypes.data + 8 and a.data.mem.size == 63 * 8
    first = (a.data.ptr - base.ctypes.data) // 8
    seen = np.lib.stride_tricks.as_strided(base[first:], a.shape, a.strides)
    assert seen.tolist() == view.tolist()
    del a
    gc.collect()
    assert rec.calls == 1
