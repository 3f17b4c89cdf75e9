"""GPU copy benchmarks beside bench/test_gpu.py's: host to device against
PyTorch's own path too, device to pinned host memory (a ``cuda_host``
target), and a peer copy between two GPUs (skipped on one). Each records
``bytes`` and ``direction``, so ``bench/report.py`` gives GB/s."""

import numpy as np
import pytest

import gpu_dlpack

pytestmark = pytest.mark.gpu

KIB, MIB = 1 << 10, 1 << 20
SIZES = [4 * KIB, 1 * MIB, 64 * MIB, 256 * MIB]
VERSIONED = (1, 0)


def _rounds(nbytes):
    return max(3, min(50, (256 * MIB) // nbytes))


def _size(n):
    return f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"


@pytest.mark.parametrize("nbytes", SIZES, ids=lambda n: _size(n).replace(" ", ""))
def test_host_to_device_torch(measure, benchmark, tc, nbytes):
    benchmark.group = f"gpu: host to device {_size(nbytes)}"
    host = np.arange(nbytes // 4, dtype=np.float32)

    def copy():
        out = tc.from_numpy(host).cuda()
        tc.cuda.current_stream().synchronize()
        return out

    out = measure(copy, "torch.from_numpy(h).cuda()", role="other", rounds=_rounds(nbytes),
                  bytes=nbytes, direction="host to device")
    assert out[-1].item() == host[-1]


@pytest.mark.parametrize("nbytes", SIZES, ids=lambda n: _size(n).replace(" ", ""))
def test_device_to_pinned_gpu_dlpack(measure, benchmark, cp, nbytes, cupy_current):
    benchmark.group = f"gpu: device to pinned host {_size(nbytes)}"
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        a = cp.arange(nbytes // 4, dtype=cp.float32)
    stream.synchronize()

    def copy():
        cap = gpu_dlpack.export(a, dl_device=(3, 0), stream=stream.ptr, max_version=VERSIONED)
        stream.synchronize()
        return cap

    cap = measure(copy, "gpu_dlpack.export(a, dl_device=(3, 0))", role="gpu_dlpack",
                  peer="cudaMemcpyAsync into pinned memory", rounds=_rounds(nbytes), bytes=nbytes,
                  direction="device to pinned host")
    info = gpu_dlpack.inspect(cap)
    assert info.device == gpu_dlpack.Device("cuda_host") and info.is_copied


@pytest.mark.parametrize("nbytes", SIZES, ids=lambda n: _size(n).replace(" ", ""))
def test_device_to_pinned_ceiling(measure, benchmark, cp, nbytes):
    benchmark.group = f"gpu: device to pinned host {_size(nbytes)}"
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        a = cp.arange(nbytes // 4, dtype=cp.float32)
    stream.synchronize()
    pinned = cp.cuda.alloc_pinned_memory(nbytes)

    def copy():
        cp.cuda.runtime.memcpyAsync(pinned.ptr, a.data.ptr, nbytes, 2, stream.ptr)
        stream.synchronize()

    measure(copy, "cudaMemcpyAsync into pinned memory", role="ceiling", rounds=_rounds(nbytes),
            bytes=nbytes, direction="device to pinned host")


@pytest.fixture
def two_gpus(cp):
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    return cp


@pytest.mark.parametrize("nbytes", SIZES, ids=lambda n: _size(n).replace(" ", ""))
def test_peer_copy_gpu_dlpack(measure, benchmark, two_gpus, nbytes):
    cp = two_gpus
    benchmark.group = f"gpu: peer copy {_size(nbytes)}"
    with cp.cuda.Device(0):
        a = cp.arange(nbytes // 4, dtype=cp.float32)
        cp.cuda.Device(0).synchronize()
    with cp.cuda.Device(1):
        stream = cp.cuda.Stream(non_blocking=True)

    def copy():
        out = gpu_dlpack.from_dlpack(a, device="cuda:1", stream=stream)
        stream.synchronize()
        return out

    out = measure(copy, "gpu_dlpack.from_dlpack(a, device='cuda:1')", role="gpu_dlpack",
                  peer="cupy.asarray(a) on GPU 1", rounds=_rounds(nbytes), bytes=nbytes,
                  direction="peer copy")
    assert out.device.id == 1 and out[-1].item() == a[-1].item()


@pytest.mark.parametrize("nbytes", SIZES, ids=lambda n: _size(n).replace(" ", ""))
def test_peer_copy_cupy(measure, benchmark, two_gpus, nbytes):
    cp = two_gpus
    benchmark.group = f"gpu: peer copy {_size(nbytes)}"
    with cp.cuda.Device(0):
        a = cp.arange(nbytes // 4, dtype=cp.float32)
        cp.cuda.Device(0).synchronize()

    def copy():
        with cp.cuda.Device(1):
            out = cp.asarray(a)
            cp.cuda.Device(1).synchronize()
        return out

    measure(copy, "cupy.asarray(a) on GPU 1", rounds=_rounds(nbytes), bytes=nbytes, direction="peer copy")
