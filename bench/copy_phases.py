"""Where the time of one copy goes, step by step, on the GPU.

    python bench/copy_phases.py [-o PHASES.md] [--json PHASES.json] [--quick]

For a 4 KiB, a 16 MiB and a 64 MiB copy in each direction, times (median
of repeated calls, in µs) each step of gpu_dlpack's path beside the whole
call, CuPy's own (``x.get()``, ``cupy.asarray(h)``) and the bare pinned
``cudaMemcpyAsync`` + ``cudaStreamSynchronize``: the allocation (a pooled
block, CuPy's pinned pool, a fresh ``cudaHostAlloc``), the hand-off, the
copy (returning, and waited for), the capsule and the consumer. A step
timed alone includes its own call overhead, so steps need not add up to
the whole. Takes a few seconds; without a GPU usable by CuPy it says so and
exits 0 (``scripts/gpu-ci.sh`` runs it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

KIB, MIB = 1 << 10, 1 << 20
SIZES = (4 * KIB, 16 * MIB, 64 * MIB)


def _median_us(fn, reps, setup=None):
    times = []
    for _ in range(reps):
        arg = setup() if setup is not None else None
        start = time.perf_counter_ns()
        fn() if setup is None else fn(arg)
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000


def _reps(nbytes, quick):
    reps = 300 if nbytes <= 64 * KIB else 30 if nbytes <= 16 * MIB else 12
    return max(3, reps // 10) if quick else reps


def _size(n):
    return f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"


def device_to_host(cp, nbytes, reps):
    import gpu_dlpack
    from gpu_dlpack import _copies, _handoff
    from gpu_dlpack._backends import cupy as backend
    from gpu_dlpack._backends.cupy import copies as cupy_copies

    rt = cp.cuda.runtime
    stream = cp.cuda.Stream(non_blocking=True)
    other = cp.cuda.Stream(non_blocking=True)
    with stream:
        a = cp.arange(nbytes // 4, dtype=cp.float32)
    stream.synchronize()
    gpu, ptr = a.data.device_id, a.data.ptr
    pinned = cp.cuda.alloc_pinned_memory(nbytes)
    pool = _copies.pinned_pool()
    out = {}
    with stream:
        out["whole: a.get()"] = _median_us(lambda: a.get(stream=stream), reps)
        out["whole: np.from_dlpack(wrap(a), device='cpu')"] = _median_us(
            lambda: np.from_dlpack(gpu_dlpack.wrap(a), device="cpu"), reps)
        out["whole: gpu_dlpack.from_dlpack(a, device='cpu')"] = _median_us(
            lambda: gpu_dlpack.from_dlpack(a, device="cpu"), reps)

        def bare():
            rt.memcpyAsync(pinned.ptr, ptr, nbytes, rt.memcpyDeviceToHost, stream.ptr)
            rt.streamSynchronize(stream.ptr)

        out["ceiling: cudaMemcpyAsync + cudaStreamSynchronize (CuPy's bindings)"] = _median_us(bare, reps)
        out["wrap(a)"] = _median_us(lambda: gpu_dlpack.wrap(a), reps)
        out["device_of(a) (memory kind)"] = _median_us(lambda: backend.device_of(a), reps)
        out["current_stream(gpu)"] = _median_us(lambda: _handoff.current_stream(gpu), reps)
        out["hand-off to another stream (pooled event)"] = _median_us(
            lambda: _handoff.handoff(stream.ptr, other.ptr, gpu), reps)
        out["allocation: pooled block (hit)"] = _median_us(lambda: pool.take(nbytes), reps)
        out["allocation: CuPy's pinned pool (hit)"] = _median_us(lambda: cp.cuda.alloc_pinned_memory(nbytes), reps)

        def fresh():  # a pool miss: page-locking the whole size, then freeing it
            p = rt.hostAlloc(nbytes, rt.hostAllocPortable)
            rt.freeHost(p)

        out["allocation: cudaHostAlloc + cudaFreeHost (miss)"] = _median_us(fresh, 3)
        block = pool.take(nbytes)
        out["memcpy: _copies.copy returning (no wait)"] = _median_us(
            lambda: _copies.copy(block.ptr, ptr, nbytes, stream.ptr, gpu), reps)
        stream.synchronize()
        out["memcpy + synchronize: _copies.copy(synchronize=True)"] = _median_us(
            lambda: _copies.copy(block.ptr, ptr, nbytes, stream.ptr, gpu, synchronize=True), reps)
        out["synchronize an idle stream"] = _median_us(lambda: rt.streamSynchronize(stream.ptr), reps)
        out["to_host (allocation + memcpy + synchronize)"] = _median_us(
            lambda: _copies.to_host(ptr, nbytes, stream.ptr, gpu, pool), reps)
        host = cupy_copies._over_block(pool.take(nbytes), a.shape, a.dtype, "C")
        out["result array over the block"] = _median_us(
            lambda: cupy_copies._over_block(block, a.shape, a.dtype, "C"), reps)
        out["capsule of the result (NumPy's __dlpack__)"] = _median_us(
            lambda: host.__dlpack__(max_version=(1, 0)), reps)
        out["consumer: np.from_dlpack(capsule)"] = _median_us(
            np.from_dlpack, reps, setup=lambda: _Capsule(host.__dlpack__(max_version=(1, 0))))
        out["export(a, dl_device=(1, 0)) (whole export)"] = _median_us(
            lambda: gpu_dlpack.export(a, dl_device=(1, 0), max_version=(1, 0)), reps)
    other.synchronize()
    return out


class _Capsule:
    """A capsule made outside the timing, offered to a consumer once."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


def host_to_device(cp, nbytes, reps):
    import gpu_dlpack
    from gpu_dlpack import _copies, _handoff
    from gpu_dlpack._backends.cupy import copies as cupy_copies

    rt = cp.cuda.runtime
    stream = cp.cuda.Stream(non_blocking=True)
    h = np.arange(nbytes // 4, dtype=np.float32)
    pinned = cp.cuda.alloc_pinned_memory(nbytes)
    np.frombuffer(pinned, np.float32, nbytes // 4)[:] = h
    with stream:
        d = cp.empty(nbytes // 4, dtype=cp.float32)
    gpu = d.data.device_id
    out = {}
    with stream:
        def asarray():
            cp.asarray(h)
            stream.synchronize()

        def ours():
            gpu_dlpack.from_dlpack(h, device="cuda:0")
            stream.synchronize()

        out["whole: cupy.asarray(h) + synchronize"] = _median_us(asarray, reps)
        out["whole: gpu_dlpack.from_dlpack(h, device='cuda:0') + synchronize"] = _median_us(ours, reps)

        def bare():
            rt.memcpyAsync(d.data.ptr, pinned.ptr, nbytes, rt.memcpyHostToDevice, stream.ptr)
            rt.streamSynchronize(stream.ptr)

        out["ceiling: cudaMemcpyAsync from pinned + cudaStreamSynchronize"] = _median_us(bare, reps)
        out["allocation: cupy.empty on the current stream"] = _median_us(lambda: cp.empty(nbytes // 4, cp.float32), reps)
        out["allocation check: _is_current(stream, gpu)"] = _median_us(lambda: cupy_copies._is_current(stream.ptr, gpu), reps)
        out["allocation: cupy.empty under queue_on (another stream)"] = _median_us(
            lambda: cupy_copies._allocate(gpu_dlpack.Device(f"cuda:{gpu}"), (nbytes // 4,), np.float32, "C", 1, gpu), reps)
        out["memcpy from pageable, returning: _copies.copy"] = _median_us(
            lambda: _copies.copy(d.data.ptr, h.ctypes.data, nbytes, stream.ptr, gpu), reps)
        stream.synchronize()
        out["memcpy + event kept: _copies.copy_kept"] = _median_us(
            lambda: _copies.copy_kept(d.data.ptr, h.ctypes.data, nbytes, stream.ptr, gpu, (h, d)), reps)
        stream.synchronize()
        out["release completed work: _handoff.collect()"] = _median_us(_handoff.collect, reps)
        out["synchronize after the copies"] = _median_us(lambda: rt.streamSynchronize(stream.ptr), reps)
    return out


def run(quick=False):
    try:
        import cupy as cp

        if cp.cuda.runtime.getDeviceCount() == 0:
            raise RuntimeError("no GPU")
    except Exception as exc:
        return None, f"no GPU usable by CuPy here ({type(exc).__name__}): nothing measured"
    from gpu_dlpack import _compiled

    results = {"core": _compiled.core.__file__, "phases": {}}
    for direction, fn in (("device to host", device_to_host), ("host to device", host_to_device)):
        for nbytes in SIZES:
            key = f"{direction} {_size(nbytes)}"
            try:
                results["phases"][key] = fn(cp, nbytes, _reps(nbytes, quick))
            except Exception as exc:  # one failed step must not hide the others
                results["phases"][key] = {"error": f"{type(exc).__name__}: {exc}"}
    return results, None


def markdown(results, note=None):
    lines = ["## Copy phases (median µs per step)", ""]
    if results is None:
        return "\n".join(lines + [note or "nothing measured", ""])
    lines += [f"Path: {results['path']}.", ""]
    for key, phases in results["phases"].items():
        lines += [f"**{key}**", "", "| step | µs |", "|---|---:|"]
        for step, value in phases.items():
            shown = value if isinstance(value, str) else f"{value:,.1f}"
            lines.append(f"| {step} | {shown} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", help="write the markdown here (default: stdout)")
    parser.add_argument("--json", help="write the figures as JSON here")
    parser.add_argument("--quick", action="store_true", help="a tenth of the repetitions")
    args = parser.parse_args(argv)
    results, note = run(args.quick)
    text = markdown(results, note)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    else:
        sys.stdout.write(text + "\n")
    if args.json and results is not None:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
