"""Exchanges on a GPU with real CuPy, PyTorch (CUDA), JAX (GPU) and Numba, in
both directions, and the proof of the stream rules.

Every test here is marked ``gpu``: the root conftest skips them without a GPU
usable by CuPy. On a GPU machine: ``PYTHONPATH=. python3 -m pytest -m gpu``
(or ``scripts/gpu-tests.sh``). JAX runs on the GPU only when JAX_PLATFORMS
allows it (the script sets it); otherwise its GPU tests skip.
"""

import gc

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import (
    FLAG_IS_COPIED, FLAG_READ_ONLY, Device, export, from_dlpack, inspect, use_stream, wrap,
)
from gpu_dlpack import _backends, _handoff

from .helpers import gpu_arange, simulated_cuda

pytestmark = pytest.mark.gpu

SPIN_MS = 200  # how long the producer's kernel keeps its stream busy


# -- peers ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def jgpu():
    jax = pytest.importorskip("jax")
    import jax.dlpack  # noqa: F401
    import jax.numpy  # noqa: F401

    try:
        jax.devices("gpu")
    except RuntimeError:
        pytest.skip("JAX has no GPU backend here (JAX_PLATFORMS, or a CPU-only jaxlib)")
    return jax


@pytest.fixture(scope="module")
def nb():
    numba_cuda = pytest.importorskip("numba.cuda")
    if not numba_cuda.is_available():
        pytest.skip("Numba sees no GPU")
    return numba_cuda


@pytest.fixture
def two_gpus(cp):
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")


def _memory_type(cp, ptr):
    return cp.cuda.runtime.pointerGetAttributes(ptr).type


def _gpu0():
    return Device("cuda:0")  # (ROCM, 0) on a ROCm build


# -- export of CuPy arrays -----------------------------------------------------

def test_cupy_export_on_its_device_is_zero_copy_and_versioned(cp):
    x = gpu_arange(cp, 12, dtype=cp.float32).reshape(3, 4)
    info = inspect(export(x, max_version=(1, 0)))
    assert info.data == x.data.ptr and info.device == _gpu0()
    assert info.version == gpu_dlpack.DLPACK_VERSION and info.flags == 0
    assert info.shape == (3, 4) and info.strides == (4, 1) and info.dl_dtype == (2, 32, 1)
    assert inspect(export(x)).name == "dltensor"
    assert Device.of(wrap(x)) == _gpu0()


def test_cupy_export_readonly_sets_read_only_and_a_legacy_one_is_refused(cp):
    x = gpu_arange(cp, 3.0)
    assert inspect(wrap(x, readonly=True).__dlpack__(max_version=(1, 0))).flags == FLAG_READ_ONLY
    with pytest.raises(BufferError, match="read-only"):
        wrap(x, readonly=True).__dlpack__()


def test_cupy_copy_true_on_its_device_is_a_device_copy_flagged_is_copied(cp):
    x = gpu_arange(cp, 6.0).reshape(2, 3)
    cap = export(x, max_version=(1, 0), copy=True)
    info = inspect(cap)
    assert info.flags == FLAG_IS_COPIED and info.device == _gpu0() and info.data != x.data.ptr
    out = from_dlpack(cap)
    assert isinstance(out, cp.ndarray) and out.tolist() == x.tolist()
    out[0, :1].set(np.array([9.0]))  # a host-to-device copy: no kernel
    assert float(x[0, 0]) == 0.0


def _exports_to_the_cpu_into_pinned_memory(cp, x, expected):
    cap = export(x, max_version=(1, 0), dl_device=(1, 0))
    info = inspect(cap)
    assert info.device == Device("cpu") and info.flags == FLAG_IS_COPIED
    assert _memory_type(cp, info.data) == cp.cuda.runtime.memoryTypeHost  # page-locked
    out = from_dlpack(cap)
    assert isinstance(out, np.ndarray) and out.tolist() == expected.tolist()
    with pytest.raises(BufferError, match="copy=False"):
        export(x, max_version=(1, 0), dl_device=(1, 0), copy=False)


def test_cupy_export_to_the_cpu_copies_into_pinned_memory(cp):
    # F-ordered: copied as it is laid out
    _exports_to_the_cpu_into_pinned_memory(cp, gpu_arange(cp, 6.0).reshape(2, 3).T, np.arange(6.0).reshape(2, 3).T)


@pytest.mark.kernel
def test_a_strided_cupy_array_is_made_contiguous_before_its_copy_to_the_cpu(cp):
    x = gpu_arange(cp, 12.0).reshape(3, 4)[:, ::2]  # made contiguous by a CuPy kernel first
    _exports_to_the_cpu_into_pinned_memory(cp, x, np.arange(12.0).reshape(3, 4)[:, ::2])


def test_numpy_imports_a_cupy_array_through_wrap(cp):
    x = gpu_arange(cp, 5, dtype=cp.int64)
    out = np.from_dlpack(wrap(x), device="cpu")
    assert out.tolist() == [0, 1, 2, 3, 4]


def test_cupy_export_to_cuda_host_is_pinned_memory_labelled_cuda_host(cp):
    x = gpu_arange(cp, 4, dtype=cp.int32)
    info = inspect(export(x, max_version=(1, 0), dl_device=Device("cuda_host").dlpack))
    assert info.device == Device("cuda_host") and info.flags == FLAG_IS_COPIED
    assert _memory_type(cp, info.data) == cp.cuda.runtime.memoryTypeHost
    out = from_dlpack(export(x, max_version=(1, 0), dl_device=Device("cuda_host").dlpack))
    assert out.tolist() == [0, 1, 2, 3]


def test_cupy_export_to_another_gpu_is_a_peer_copy(cp, two_gpus):
    x = gpu_arange(cp, 5.0)
    cap = export(x, max_version=(1, 0), dl_device=Device("cuda:1").dlpack)
    info = inspect(cap)
    assert info.device == Device("cuda:1") and info.flags == FLAG_IS_COPIED
    out = from_dlpack(cap)
    assert out.device.id == 1 and out.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(BufferError, match="copy=False"):
        export(x, max_version=(1, 0), dl_device=Device("cuda:1").dlpack, copy=False)


def test_managed_memory_says_cuda_managed_and_reaches_the_cpu_in_place(cp):
    if gpu_dlpack._devices.cupy_is_rocm():
        pytest.skip("DLPack has no ROCm managed type")
    with cp.cuda.using_allocator(cp.cuda.malloc_managed):
        m = gpu_arange(cp, 4.0)
    assert Device.of(m) == Device("cuda_managed")
    assert inspect(export(m, max_version=(1, 0))).device == Device("cuda_managed")
    info = inspect(export(m, max_version=(1, 0), dl_device=(1, 0)))
    assert info.device == Device("cpu") and info.data == m.data.ptr and info.flags == 0
    assert from_dlpack(export(m, max_version=(1, 0), dl_device=(1, 0))).tolist() == [0, 1, 2, 3]
    assert from_dlpack(m).tolist() == [0, 1, 2, 3]  # NumPy over managed memory, after a sync


def test_bfloat16_travels_with_its_dlpack_code(cp):
    ml = pytest.importorskip("ml_dtypes")
    try:
        x = cp.asarray(np.arange(4).astype(ml.bfloat16))
    except Exception as exc:
        pytest.skip(f"this CuPy holds no bfloat16: {exc}")
    assert inspect(export(x, max_version=(1, 0))).dl_dtype == (4, 16, 1)
    back = from_dlpack(export(x, max_version=(1, 0)))
    assert back.dtype == x.dtype and back.data.ptr == x.data.ptr


# -- other consumers of CuPy arrays ---------------------------------------------

def test_torch_imports_a_cupy_array_zero_copy(cp, tc):
    x = gpu_arange(cp, 6, dtype=cp.float32)
    w = wrap(x)
    t = tc.from_dlpack(w)
    assert t.is_cuda and t.data_ptr() == x.data.ptr and t.tolist() == [0, 1, 2, 3, 4, 5]
    assert type(w.last_request["stream"]) is int


def test_cupy_imports_through_wrap_zero_copy(cp):
    x = gpu_arange(cp, 3.0)
    out = cp.from_dlpack(wrap(x))
    assert out.data.ptr == x.data.ptr


def test_jax_imports_a_cupy_array(cp, jgpu):
    x = gpu_arange(cp, 8, dtype=cp.float32)
    j = jgpu.dlpack.from_dlpack(wrap(x))
    assert next(iter(j.devices())).platform == "gpu"
    assert np.asarray(j).tolist() == list(range(8))


# -- imports to the GPU ----------------------------------------------------------

def test_a_torch_cuda_tensor_imports_zero_copy_and_is_freed_with_the_last_view(cp, tc):
    gc.collect()
    base = tc.cuda.memory_allocated()
    t = tc.arange(1 << 20, dtype=tc.float32, device="cuda")
    held = tc.cuda.memory_allocated()
    a = from_dlpack(t)
    assert isinstance(a, cp.ndarray) and a.data.ptr == t.data_ptr() and int(a[5]) == 5
    view = a[10:]
    del t, a
    gc.collect()
    assert tc.cuda.memory_allocated() == held  # the view keeps the tensor's memory
    del view
    gc.collect()
    assert tc.cuda.memory_allocated() == base  # deleter called once the last view died


def test_a_torch_cuda_tensor_with_copy_true_is_copied(cp, tc):
    t = tc.arange(4.0, device="cuda")
    a = from_dlpack(t, copy=True)
    assert a.data.ptr != t.data_ptr() and a.tolist() == [0, 1, 2, 3]


def test_a_cupy_array_imports_as_a_view_or_a_copy(cp):
    x = gpu_arange(cp, 4.0)
    assert from_dlpack(x).data.ptr == x.data.ptr
    c = from_dlpack(x, copy=True)
    assert c.data.ptr != x.data.ptr and c.tolist() == [0, 1, 2, 3]


def test_read_only_device_data_is_copied_or_refused(cp):
    x = gpu_arange(cp, 4.0)
    a = from_dlpack(wrap(x, readonly=True))
    assert a.data.ptr != x.data.ptr and a.tolist() == [0, 1, 2, 3]
    with pytest.raises(BufferError, match="READ_ONLY"):
        from_dlpack(wrap(x, readonly=True), copy=False)


def test_a_jax_gpu_array_imports_zero_copy(cp, jgpu):
    j = jgpu.numpy.arange(8.0, dtype=jgpu.numpy.float32)
    a = from_dlpack(j)
    assert isinstance(a, cp.ndarray) and a.data.ptr == j.unsafe_buffer_pointer()
    assert a.tolist() == list(range(8))


@pytest.mark.parametrize("n", [5, 1 << 18])  # small, and large enough for pinned staging
def test_host_producers_reach_the_gpu_by_a_copy(cp, torch, n):
    jax = pytest.importorskip("jax")
    producers = [np.arange(n, dtype=np.float32), torch.arange(n, dtype=torch.float32),
                 jax.device_put(np.arange(n, dtype=np.float32), jax.devices("cpu")[0])]
    # Where the GPU uses the host's page tables (ATS), host memory is used in
    # place unless a copy is asked for.
    mapped = _backends.addressable(Device("cpu"), _gpu0())
    for x in producers:
        a = from_dlpack(x, device="cuda:0", copy=True if mapped else None)
        assert isinstance(a, cp.ndarray) and a.device.id == 0
        assert _memory_type(cp, a.data.ptr) == cp.cuda.runtime.memoryTypeDevice
        assert a[:5].tolist() == [0, 1, 2, 3, 4] and int(a[-1]) == n - 1
    if mapped:  # the GPU uses the host's page tables: pageable memory in place
        a = np.arange(4.0)
        assert from_dlpack(a, device="cuda:0", copy=False).data.ptr == a.ctypes.data
    else:
        with pytest.raises(BufferError, match="copy=False"):
            from_dlpack(np.arange(4.0), device="cuda:0", copy=False)


def test_pinned_host_memory_is_used_in_place_or_copied(cp):
    cap = export(gpu_arange(cp, 4.0), max_version=(1, 0), dl_device=Device("cuda_host").dlpack)
    pinned = inspect(cap).data
    if _backends.addressable(Device("cuda_host"), _gpu0()):
        a = from_dlpack(cap, device="cuda:0")
        assert a.data.ptr == pinned and a.tolist() == [0, 1, 2, 3]
    cap = export(gpu_arange(cp, 4.0), max_version=(1, 0), dl_device=Device("cuda_host").dlpack)
    c = from_dlpack(cap, device="cuda:0", copy=True)
    assert _memory_type(cp, c.data.ptr) == cp.cuda.runtime.memoryTypeDevice and c.tolist() == [0, 1, 2, 3]


@pytest.mark.kernel
def test_a_kernel_reads_pinned_memory_used_in_place(cp):
    if not _backends.addressable(Device("cuda_host"), _gpu0()):
        pytest.skip("this GPU does not address pinned memory in place")
    cap = export(gpu_arange(cp, 4.0), max_version=(1, 0), dl_device=Device("cuda_host").dlpack)
    pinned = inspect(cap).data
    a = from_dlpack(cap, device="cuda:0")
    assert a.data.ptr == pinned and (a * 2).tolist() == [0, 2, 4, 6]  # a kernel reads it


def _lands_in_pinned_memory_as_numpy(cp, x):
    out = from_dlpack(x, device="cuda_host")
    assert isinstance(out, np.ndarray) and out.tolist() == [0, 1, 2]
    assert _memory_type(cp, out.ctypes.data) == cp.cuda.runtime.memoryTypeHost


def test_a_cupy_array_imports_to_pinned_memory_as_numpy(cp):
    _lands_in_pinned_memory_as_numpy(cp, gpu_arange(cp, 3.0))


def test_a_torch_cuda_tensor_imports_to_pinned_memory_as_numpy(cp, tc):
    _lands_in_pinned_memory_as_numpy(cp, tc.arange(3.0, device="cuda"))


def test_a_numpy_array_exports_to_the_gpu(cp):
    a = np.arange(6.0).reshape(2, 3)
    info = inspect(export(a, max_version=(1, 0), dl_device=_gpu0().dlpack))
    assert info.device == _gpu0() and info.flags == FLAG_IS_COPIED
    back = from_dlpack(export(a, max_version=(1, 0), dl_device=_gpu0().dlpack))
    assert isinstance(back, cp.ndarray) and back.tolist() == a.tolist()


def test_a_tensor_on_another_gpu_is_peer_copied(cp, tc, two_gpus):
    t = tc.arange(4.0, device="cuda:0")
    a = from_dlpack(t, device="cuda:1")
    assert a.device.id == 1 and a.tolist() == [0, 1, 2, 3]
    with pytest.raises(BufferError, match="copy=False"):
        from_dlpack(t, device="cuda:1", copy=False)


def test_a_device_capsule_imports_to_the_cpu(cp, tc):
    out = from_dlpack(tc.arange(3.0, device="cuda").__dlpack__(), device="cpu")
    assert isinstance(out, np.ndarray) and out.tolist() == [0, 1, 2]


def test_host_arrays_land_in_pinned_and_in_managed_memory(cp):
    if gpu_dlpack._devices.cupy_is_rocm():
        pytest.skip("DLPack has no ROCm managed type")
    a = np.arange(6.0)
    p = from_dlpack(a, device="cuda_host")  # a NumPy array over page-locked memory
    assert isinstance(p, np.ndarray) and p.tolist() == a.tolist() and p.ctypes.data != a.ctypes.data
    assert _memory_type(cp, p.ctypes.data) == cp.cuda.runtime.memoryTypeHost
    m = from_dlpack(a, device="cuda_managed")
    assert isinstance(m, cp.ndarray) and Device.of(m) == Device("cuda_managed") and m.get().tolist() == a.tolist()
    info = inspect(export(a, max_version=(1, 0), dl_device=Device("cuda_managed").dlpack))
    assert info.device == Device("cuda_managed") and info.is_copied


def test_a_cupy_capsule_imports_to_the_cpu(cp):
    x = gpu_arange(cp, 3.0)
    out = from_dlpack(x.__dlpack__(), device="cpu")
    assert isinstance(out, np.ndarray) and out.tolist() == [0, 1, 2]


def test_numba_streams_are_taken(cp, tc, nb):
    s = nb.stream()
    t = tc.arange(4.0, device="cuda")
    a = from_dlpack(t, stream=s)
    s.synchronize()
    assert a.tolist() == [0, 1, 2, 3]
    assert nb.as_cuda_array(a).copy_to_host().tolist() == [0, 1, 2, 3]


def test_numba_exchanges_both_ways_where_it_speaks_dlpack(cp, nb):
    x = gpu_arange(cp, 5, dtype=cp.float32)
    if hasattr(nb, "from_dlpack"):
        d = nb.from_dlpack(wrap(x))
        assert d.copy_to_host().tolist() == [0, 1, 2, 3, 4]
    d = nb.to_device(np.arange(4, dtype=np.float32))
    if not hasattr(type(d), "__dlpack__"):
        pytest.skip("this Numba's device arrays speak no DLPack")
    a = from_dlpack(d)
    assert isinstance(a, cp.ndarray) and a.data.ptr == d.__cuda_array_interface__["data"][0]
    assert a.tolist() == [0, 1, 2, 3]


# -- JAX arrays on the GPU: legacy capsules only, adapted in place ---------------

N = 1000


def _jax_on_gpu(jgpu):
    j = jgpu.device_put(jgpu.numpy.arange(N, dtype=jgpu.numpy.float32), jgpu.devices("gpu")[0])
    j.block_until_ready()
    return j


def _expected():
    return np.arange(N, dtype=np.float32)


@pytest.mark.parametrize("kw", [{}, {"dl_device": (2, 0)}, {"stream": 1}, {"dl_device": (2, 0), "stream": 1}])
def test_a_jax_gpu_array_exports_versioned_zero_copy_read_only(cp, jgpu, kw):
    j = _jax_on_gpu(jgpu)
    info = inspect(export(j, max_version=(1, 0), **kw))
    assert info.name == "dltensor_versioned" and info.version == gpu_dlpack.DLPACK_VERSION
    assert info.device == _gpu0() and info.readonly and not info.is_copied
    assert info.data + info.byte_offset == j.unsafe_buffer_pointer()


def test_torch_imports_a_jax_gpu_array_through_wrap_zero_copy(cp, tc, jgpu):
    j = _jax_on_gpu(jgpu)
    w = wrap(j)
    t = tc.from_dlpack(w)
    assert w.last_request["max_version"] == (1, 0) and w.last_request["stream"] is not None
    assert t.device.type == "cuda" and t.data_ptr() == j.unsafe_buffer_pointer()
    assert np.array_equal(t.cpu().numpy(), _expected())


def test_numpy_imports_a_jax_gpu_array_through_wrap_on_the_cpu(cp, jgpu):
    j = _jax_on_gpu(jgpu)
    a = np.from_dlpack(wrap(j), device="cpu")
    assert np.array_equal(a, _expected())
    assert np.array_equal(from_dlpack(export(j, max_version=(1, 0), dl_device=(1, 0))), _expected())


def test_cupy_imports_a_jax_gpu_array_through_wrap_and_export(cp, jgpu):
    j = _jax_on_gpu(jgpu)
    a = cp.from_dlpack(wrap(j))  # CuPy ignores READ_ONLY: zero-copy
    assert a.data.ptr == j.unsafe_buffer_pointer() and np.array_equal(a.get(), _expected())
    b = from_dlpack(wrap(j))  # READ_ONLY data lands in a CuPy array as a copy (CuPy arrays are writeable)
    assert isinstance(b, cp.ndarray) and np.array_equal(b.get(), _expected())
    c = from_dlpack(j)
    assert c.data.ptr == j.unsafe_buffer_pointer()


def _pending_jax_result(jgpu):
    """A JAX result still being computed on JAX's stream when it is handed on
    (large enough that a consumer reading it early reads zeros)."""
    n = 1 << 24
    x = jgpu.device_put(jgpu.numpy.ones(n, dtype=jgpu.numpy.float32), jgpu.devices("gpu")[0])
    x.block_until_ready()
    return jgpu.numpy.cumsum(x * 2.0), 2.0 * n


def test_torch_reads_a_pending_jax_result_through_wrap_on_its_own_stream(cp, tc, jgpu):
    j, last = _pending_jax_result(jgpu)
    s = tc.cuda.Stream()
    with tc.cuda.stream(s):
        t = tc.from_dlpack(wrap(j))  # the stream torch passes is s
        value = float(t[-1])
    assert t.data_ptr() == j.unsafe_buffer_pointer() and value == last


def test_cupy_reads_a_pending_jax_result_on_the_consumer_stream(cp, jgpu):
    j, last = _pending_jax_result(jgpu)
    consumer = cp.cuda.Stream(non_blocking=True)
    with consumer:
        a = from_dlpack(j)
        value = float(a[-1])
    assert a.data.ptr == j.unsafe_buffer_pointer() and value == last


def test_a_jax_gpu_capsule_is_adapted_in_c_around_its_legacy_struct(cp, jgpu):
    import ctypes

    from gpu_dlpack import _capsule

    j = _jax_on_gpu(jgpu)
    cap = export(j, max_version=(1, 0))
    info = inspect(cap)
    assert info.readonly and info.device == _gpu0()
    ctx = ctypes.c_void_p.from_address(_capsule.pointer(cap, True) + 8).value
    assert ctypes.c_void_p.from_address(ctx).value == j.unsafe_buffer_pointer()  # JAX's DLTensor.data


# -- managed memory: CUDA to consumers that ask for a stream, managed to the others --


@pytest.fixture
def managed(cp):
    if gpu_dlpack._devices.cupy_is_rocm():
        pytest.skip("DLPack has no ROCm managed type")
    with cp.cuda.using_allocator(cp.cuda.malloc_managed):
        m = gpu_arange(cp, N, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    return m


def test_torch_imports_managed_memory_through_wrap_zero_copy(cp, tc, managed):
    m = managed
    w = wrap(m)
    assert w.__dlpack_device__() == (2, m.data.device_id)
    t = tc.from_dlpack(w)
    assert t.device == tc.device("cuda", m.data.device_id) and t.data_ptr() == m.data.ptr
    assert np.array_equal(t.cpu().numpy(), _expected())
    t += 1  # the same memory
    tc.cuda.synchronize()
    assert float(m[0]) == 1.0
    assert Device.of(m) == Device("cuda_managed")


def test_numpy_reads_managed_memory_through_wrap_in_place(cp, managed):
    m = managed
    for a in (np.from_dlpack(wrap(m)), np.from_dlpack(wrap(m), device="cpu")):
        assert a.ctypes.data == m.data.ptr and np.array_equal(a, _expected())
    assert inspect(wrap(m).__dlpack__(max_version=(1, 0))).device == Device("cuda_managed")


def test_cupy_imports_managed_memory_through_wrap_zero_copy(cp, managed):
    m = managed
    for a in (cp.from_dlpack(wrap(m)), from_dlpack(wrap(m))):
        assert a.data.ptr == m.data.ptr and np.array_equal(a.get(), _expected())
        assert Device.of(a) == Device("cuda_managed")
    # from_dlpack(m) itself: NumPy over the managed memory, after a sync
    assert from_dlpack(m).ctypes.data == m.data.ptr


# -- the stream rules, proved with a kernel that keeps the producer busy ---------

# The spin is sized by time, not by clock cycles: the SM clock rate a device
# reports (cudaDevAttrClockRate) is not the rate clock64() counts at under
# boost, and CUDA 13 no longer reports it meaningfully. %globaltimer counts
# nanoseconds on every NVIDIA GPU; ROCm's wall_clock64() counts at the
# device's wall clock rate, which HIP reports in kHz.
_SPIN_CUDA = r"""
__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
extern "C" __global__ void spin_then_fill(float* out, long long n, float value, long long ns) {
    if (threadIdx.x == 0) {
        unsigned long long start = now_ns();
        while (now_ns() - start < (unsigned long long)ns) { }
    }
    __syncthreads();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        out[i] = value;
    }
}
"""
_SPIN_ROCM = r"""
extern "C" __global__ void spin_then_fill(float* out, long long n, float value, long long ticks) {
    if (threadIdx.x == 0) {
        long long start = wall_clock64();
        while (wall_clock64() - start < ticks) { }
    }
    __syncthreads();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        out[i] = value;
    }
}
"""


@pytest.fixture(scope="module")
def spin(cp):
    """spin(x, value, stream): on ``stream``, busy-wait SPIN_MS, then fill x.

    Every kernel the stream tests queue is compiled and run once here, so
    that no test measures a compilation instead of a wait. On the simulated
    CUDA a stream runs only when the host waits for it: the fill is a copy
    queued on ``stream`` (no kernel), which stays pending as long as a kernel
    spinning would."""
    if simulated_cuda():
        def fill(x, value, stream):
            x.set(np.full(x.shape, value, x.dtype), stream=stream)

        return fill
    hip = bool(getattr(cp.cuda.runtime, "is_hip", False))
    try:
        kernel = cp.RawKernel(_SPIN_ROCM if hip else _SPIN_CUDA, "spin_then_fill")
        kernel.compile()
    except Exception as exc:
        pytest.skip(f"cannot compile the spin kernel: {exc}")

    def launch(x, value, stream, length):
        with stream:
            kernel((1,), (256,), (x, np.int64(x.size), np.float32(value), np.int64(length)))

    warm = cp.zeros(1 << 16, dtype=cp.float32)
    launch(warm, 7.0, cp.cuda.Stream.null, 0)
    if hip:  # ticks per ms, measured: a spin of 10**6 ticks timed with events
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        launch(warm, 7.0, cp.cuda.Stream.null, 10**6)
        stop.record()
        stop.synchronize()
        length = int(10**6 / max(cp.cuda.get_elapsed_time(start, stop), 1e-3) * SPIN_MS)
    else:
        length = SPIN_MS * 1_000_000  # ns of %globaltimer

    def run(x, value, stream):
        launch(x, value, stream, length)

    assert bool(((warm + 0) == 7).all())
    from_dlpack(warm, copy=True)
    from_dlpack(export(warm, max_version=(1, 0), dl_device=(1, 0)))
    cp.cuda.Device().synchronize()
    return run


def _queued_copy(cp, a):
    """A copy of ``a`` queued on CuPy's current stream (one device-to-device
    copy, no kernel): work of the consumer that reads ``a``."""
    y = cp.empty_like(a)
    y.data.copy_from_device_async(a.data, a.nbytes)
    return y


@pytest.fixture
def streams(cp):
    producer, consumer = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    yield producer, consumer
    producer.synchronize()
    consumer.synchronize()


def _busy(cp, spin, producer, n=1 << 16):
    x = cp.zeros(n, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    spin(x, 7.0, producer)
    return x


def test_an_export_makes_the_consumer_stream_wait_without_blocking_the_host(cp, spin, streams):
    producer, consumer = streams
    with producer:
        x = _busy(cp, spin, producer)
        cap = export(x, max_version=(1, 0), stream=consumer.ptr)
        assert not producer.done  # the call returned while the kernel still runs
    assert not consumer.done  # the consumer waits for it
    a = cp.from_dlpack(cap)
    with consumer:
        y = _queued_copy(cp, a)  # queued behind the wait
    assert not consumer.done
    consumer.synchronize()
    # The values prove the order: read before the producer's fill, y would be 0.
    assert (y.get() == 7).all()


def test_stream_minus_one_asks_for_no_synchronization(cp, spin, streams):
    producer, consumer = streams
    with producer:
        x = _busy(cp, spin, producer)
        export(x, max_version=(1, 0), stream=-1)
        assert not producer.done  # the host was not made to wait
    # No stream was made to wait: not the default stream (what stream=None
    # would name; the producer's stream is non-blocking, so only a wait
    # queued by the export could keep it busy), nor any other.
    assert cp.cuda.Stream.null.done and consumer.done


def test_an_import_is_ready_on_the_consumer_stream_without_blocking_the_host(cp, spin, streams):
    producer, consumer = streams
    with producer:  # the producer's stream is CuPy's current one, as for CuPy's own exports
        x = _busy(cp, spin, producer)
        a = from_dlpack(x, stream=consumer)  # a cupy.cuda.Stream object
        assert not producer.done and not consumer.done
    with consumer:
        y = _queued_copy(cp, a)
    consumer.synchronize()
    assert (y.get() == 7).all()


def test_a_use_stream_block_runs_imports_on_its_stream(cp, spin, streams):
    producer, consumer = streams
    with producer, use_stream(consumer):
        x = _busy(cp, spin, producer)
        a = from_dlpack(x, copy=True)  # the copy is queued on the consumer's stream too
        assert not producer.done and not consumer.done
    consumer.synchronize()
    assert (a.get() == 7).all()


def test_torch_on_its_own_stream_waits_for_the_cupy_producer(cp, tc, spin, streams):
    producer, _ = streams
    ts = tc.cuda.Stream()
    with producer, tc.cuda.stream(ts):
        x = _busy(cp, spin, producer)
        w = wrap(x)
        t = tc.from_dlpack(w)
        assert w.last_request["stream"] == ts.cuda_stream
        assert not producer.done and not ts.query()
        total = t.sum()
    ts.synchronize()
    assert float(total) == 7.0 * x.size


def test_managed_memory_reaches_the_cpu_in_place_once_the_producer_stream_is_done(cp, spin, streams):
    if gpu_dlpack._devices.cupy_is_rocm():
        pytest.skip("DLPack has no ROCm managed type")
    producer, _ = streams
    with cp.cuda.using_allocator(cp.cuda.malloc_managed):
        m = cp.zeros(1 << 16, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    spin(m, 7.0, producer)  # the producer's work on the managed memory, still queued
    with producer:
        a = from_dlpack(export(m, max_version=(1, 0), dl_device=(1, 0)))
    assert a.ctypes.data == m.data.ptr and (a == 7).all()  # read in place on the host: the final values


def test_a_copy_to_the_cpu_is_complete_when_the_call_returns(cp, spin, streams):
    producer, _ = streams
    with producer:
        x = _busy(cp, spin, producer)
        out = from_dlpack(export(x, max_version=(1, 0), dl_device=(1, 0)))
    assert (out == 7).all()  # read on the host at once: the final values


def test_events_come_from_a_small_pool(cp, streams):
    _, consumer = streams
    x = gpu_arange(cp, 3.0)
    for _ in range(50):
        export(x, max_version=(1, 0), stream=consumer.ptr)
    assert 1 <= _handoff.pool_size(x.device.id) <= _handoff._POOL_SIZE


# -- the doctor on a GPU -----------------------------------------------------------


def test_the_doctor_runs_jax_and_managed_memory_to_every_consumer_on_the_gpu(cp, tc, jgpu):
    from gpu_dlpack import doctor

    rep = doctor.run()
    (mat,) = [m for m in rep["matrices"] if m["device"] != "cpu"]
    assert {"jax", "cupy (managed)"} <= set(mat["producers"])
    assert {"numpy", "torch", "cupy"} <= set(mat["consumers"])
    cells = {(c["producer"], c["consumer"]): c for c in mat["cells"]}
    for pair in [("jax", "torch"), ("jax", "numpy"), ("jax", "cupy"), ("cupy (managed)", "torch"),
                 ("cupy (managed)", "numpy"), ("cupy (managed)", "cupy")]:
        via = cells[pair]["via"]
        assert via["ok"], (pair, via)
    for pair in [("jax", "torch"), ("cupy (managed)", "torch"), ("cupy (managed)", "numpy")]:
        assert cells[pair]["via"]["outcome"] == "zero-copy", pair
    assert not [f for f in rep["findings"] if f["severity"] == "failure"], rep["findings"]
    assert rep["exit_status"] == 0
