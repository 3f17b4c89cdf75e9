"""What the simulated CUDA's checker must report, and must not, case by case,
with real CuPy on it. Run in an interpreter of its own (the simulator is
installed before CuPy is imported, once per process):
``python -c "from tests.simcuda import scenarios; scenarios.main()"`` prints
one JSON object, each case's name to its reports and what it measured.
tests/test_simulated_cuda.py checks them."""

from __future__ import annotations

import json

import numpy as np


def main():
    from tests import simcuda

    sim = simcuda.install()
    import cupy as cp

    rt = cp.cuda.runtime
    out = {}

    def case(name):
        def run(fn):
            simcuda.take_reports()
            seen = {}
            try:
                seen["value"] = fn()
            except Exception as exc:  # what the runtime raised, by type and status
                seen["raised"] = f"{type(exc).__name__}: {exc}"
            seen["reports"] = simcuda.take_reports()
            out[name] = seen
            for device in range(rt.getDeviceCount()):  # no work left for the next case
                with cp.cuda.Device(device):
                    rt.deviceSynchronize()
            simcuda.take_reports()
            return fn

        return run

    def filled(value, n=1024, stream=None):
        x = cp.empty(n, cp.float32)
        x.set(np.full(n, value, np.float32), stream=stream)
        return x

    def streams(non_blocking=True):
        return cp.cuda.Stream(non_blocking=non_blocking), cp.cuda.Stream(non_blocking=non_blocking)

    @case("read of another stream's write, never waited for")
    def _():
        s1, s2 = streams()
        x = filled(7.0, stream=s1)
        y = cp.empty_like(x)
        y.data.copy_from_device_async(x.data, x.nbytes, s2)
        s2.synchronize()
        return float(y.get()[0])  # read before s1 ran: not 7

    @case("read after an event wait")
    def _():
        s1, s2 = streams()
        x = filled(7.0, stream=s1)
        s2.wait_event(s1.record())
        y = cp.empty_like(x)
        y.data.copy_from_device_async(x.data, x.nbytes, s2)
        s2.synchronize()
        return float(y.get()[0])

    @case("read after the host waited")
    def _():
        s1, s2 = streams()
        x = filled(7.0, stream=s1)
        s1.synchronize()
        y = cp.empty_like(x)
        y.data.copy_from_device_async(x.data, x.nbytes, s2)
        s2.synchronize()
        return float(y.get()[0])

    @case("write over what another stream still reads")
    def _():
        s1, s2 = streams()
        x = filled(1.0)
        cp.cuda.Device().synchronize()
        y = cp.empty_like(x)
        y.data.copy_from_device_async(x.data, x.nbytes, s1)  # reads x, queued
        x.set(np.full(x.size, 2.0, np.float32), stream=s2)  # overwrites x, unordered
        cp.cuda.Device().synchronize()

    @case("blocking streams and the legacy default stream are ordered")
    def _():
        s1, _ = streams(non_blocking=False)
        x = filled(7.0, stream=s1)
        y = cp.empty_like(x)
        y.data.copy_from_device_async(x.data, x.nbytes, cp.cuda.Stream.null)
        cp.cuda.Stream.null.synchronize()
        return float(y.get()[0])

    @case("a non-blocking stream and the legacy default stream are not")
    def _():
        s1, _ = streams()
        x = filled(7.0, stream=s1)
        y = cp.empty_like(x)
        y.data.copy_from_device_async(x.data, x.nbytes, cp.cuda.Stream.null)
        cp.cuda.Stream.null.synchronize()

    @case("an unknown stream handle")
    def _():
        rt.streamSynchronize(0x1234560)

    @case("a destroyed stream")
    def _():
        h = rt.streamCreate()
        rt.streamDestroy(h)
        rt.streamSynchronize(h)

    @case("a destroyed event")
    def _():
        e = rt.eventCreate()
        rt.eventDestroy(e)
        rt.eventRecord(e, 1)

    @case("an event recorded on another device's stream")
    def _():
        e = rt.eventCreateWithFlags(rt.eventDisableTiming)  # on GPU 0
        with cp.cuda.Device(1):
            s = cp.cuda.Stream(non_blocking=True)
        rt.eventRecord(e, s.ptr)

    @case("a wait for an event of another device")
    def _():
        with cp.cuda.Device(1):
            s1 = cp.cuda.Stream(non_blocking=True)
            x = filled(7.0, stream=s1)
            e = s1.record()
        s2 = cp.cuda.Stream(non_blocking=True)
        s2.wait_event(e)
        y = cp.empty_like(x)  # on GPU 0: a peer copy of x
        y.data.copy_from_device_async(x.data, x.nbytes, s2)
        s2.synchronize()
        return float(y.get()[0])

    @case("a copy into freed device memory")
    def _():
        p = rt.malloc(4096)
        rt.free(p)
        h = np.zeros(16, np.uint8)
        rt.memcpy(p, h.ctypes.data, 16, rt.memcpyHostToDevice)

    @case("the host reads a pinned result before its copy ran")
    def _():
        x = filled(7.0)
        cp.cuda.Device().synchronize()
        s = cp.cuda.Stream(non_blocking=True)
        pinned = cp.cuda.alloc_pinned_memory(x.nbytes)
        rt.memcpyAsync(pinned.ptr, x.data.ptr, x.nbytes, rt.memcpyDefault, s.ptr)
        early = float(np.frombuffer(pinned, np.float32, x.size)[0])  # the host never waited
        s.synchronize()
        return early

    @case("the host reads a pinned result after its stream")
    def _():
        x = filled(7.0)
        cp.cuda.Device().synchronize()
        s = cp.cuda.Stream(non_blocking=True)
        pinned = cp.cuda.alloc_pinned_memory(x.nbytes)
        rt.memcpyAsync(pinned.ptr, x.data.ptr, x.nbytes, rt.memcpyDefault, s.ptr)
        s.synchronize()
        return float(np.frombuffer(pinned, np.float32, x.size)[0])

    @case("the host reads device memory")
    def _():
        x = filled(7.0)
        cp.cuda.Device().synchronize()
        import ctypes

        return ctypes.c_float.from_address(x.data.ptr).value

    @case("pageable memory is staged when the copy is queued")
    def _():
        s = cp.cuda.Stream(non_blocking=True)
        h = np.full(1024, 7.0, np.float32)
        x = cp.empty(1024, cp.float32)
        rt.memcpyAsync(x.data.ptr, h.ctypes.data, h.nbytes, rt.memcpyHostToDevice, s.ptr)
        h[:] = 0  # the source may be reused at once
        s.synchronize()
        return float(x.get()[0])

    @case("a CUDA call from a host function")
    def _():
        s = cp.cuda.Stream(non_blocking=True)
        s.launch_host_func(lambda arg: rt.getDevice(), None)
        s.synchronize()

    @case("an entry the simulator does not implement")
    def _():
        rt.memPoolTrimTo(0, 0)

    @case("a kernel")
    def _():
        cp.arange(4)

    @case("queries say done only once the host made the stream run")
    def _():
        s = cp.cuda.Stream(non_blocking=True)
        filled(7.0, stream=s)
        e = s.record()
        before = (s.done, e.done)
        s.synchronize()
        return [before, (s.done, e.done), sim.pending()]

    @case("a query finds bookkeeping done, and copies queued")
    def _():
        idle = cp.cuda.Stream(non_blocking=True)
        mark = idle.record()  # an event after no work
        busy = cp.cuda.Stream(non_blocking=True)
        filled(7.0, stream=busy)
        after = busy.record()
        return [mark.done, idle.done, after.done, busy.done, sim.pending()]

    print(json.dumps(out))


if __name__ == "__main__":
    main()
