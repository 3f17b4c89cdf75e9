"""The other array protocols: buffer-protocol imports beside NumPy's own
``np.frombuffer``, and on a GPU the CUDA Array Interface both ways (Numba
device arrays into PyTorch, PyTorch tensors into Numba) beside the peers'
direct paths."""

import numpy as np
import pytest

import gpu_dlpack


def _bench(group):
    return pytest.mark.benchmark(group=group)


@pytest.fixture
def buf():
    return bytearray(8000)


@_bench("import a buffer-protocol object")
def test_buffer_import_peer(measure, buf):
    out = measure(lambda: np.frombuffer(buf, np.uint8), "np.frombuffer(b, np.uint8)")
    assert out.size == len(buf)


@_bench("import a buffer-protocol object")
def test_buffer_import(measure, buf):
    out = measure(
        lambda: gpu_dlpack.from_dlpack(buf), "gpu_dlpack.from_dlpack(b)",
        role="gpu_dlpack", peer="np.frombuffer(b, np.uint8)", target=2.0,
    )
    assert out.size == len(buf) and out.ctypes.data == np.frombuffer(buf, np.uint8).ctypes.data


@_bench("torch consumes a buffer-protocol object")
def test_torch_buffer_peer(measure, torch, buf):
    out = measure(lambda: torch.frombuffer(buf, dtype=torch.uint8), "torch.frombuffer(b, dtype=torch.uint8)")
    assert out.numel() == len(buf)


@_bench("torch consumes a buffer-protocol object")
def test_torch_buffer_wrapped(measure, torch, buf):
    out = measure(
        lambda: torch.from_dlpack(gpu_dlpack.wrap(buf)), "torch.from_dlpack(gpu_dlpack.wrap(b))",
        role="gpu_dlpack", peer="torch.frombuffer(b, dtype=torch.uint8)",
    )
    assert out.numel() == len(buf)


# --- on a GPU: the CUDA Array Interface ----------------------------------------

@pytest.fixture
def numba_array(cp):
    cuda = pytest.importorskip("numba.cuda")
    if not cuda.is_available():
        pytest.skip("Numba sees no GPU")
    return cuda.to_device(np.arange(1000, dtype=np.float32))


@pytest.mark.gpu
@_bench("torch consumes a numba device array")
def test_torch_numba_peer(measure, tc, numba_array):
    out = measure(lambda: tc.as_tensor(numba_array, device="cuda"), 'torch.as_tensor(d, device="cuda")')
    assert out.data_ptr() == numba_array.device_ctypes_pointer.value


@pytest.mark.gpu
@_bench("torch consumes a numba device array")
def test_torch_numba_wrapped(measure, tc, numba_array):
    out = measure(
        lambda: tc.from_dlpack(gpu_dlpack.wrap(numba_array)), "torch.from_dlpack(gpu_dlpack.wrap(d))",
        role="gpu_dlpack", peer='torch.as_tensor(d, device="cuda")', target=1.5,
    )
    assert out.data_ptr() == numba_array.device_ctypes_pointer.value


@pytest.mark.gpu
@_bench("numba consumes a cuda array")
def test_numba_consumes_cupy_peer(measure, cp, numba_array):
    from numba import cuda

    x = cp.arange(1000, dtype=cp.float32)
    out = measure(lambda: cuda.as_cuda_array(x), "numba.cuda.as_cuda_array(cupy_array)")
    assert out.device_ctypes_pointer.value == x.data.ptr


@pytest.mark.gpu
@_bench("numba consumes a cuda array")
def test_numba_consumes_torch_wrapped(measure, tc, numba_array):
    from numba import cuda

    t = tc.arange(1000, dtype=tc.float32, device="cuda")
    out = measure(
        lambda: cuda.as_cuda_array(gpu_dlpack.wrap(t)), "numba.cuda.as_cuda_array(gpu_dlpack.wrap(t))",
        role="gpu_dlpack", peer="numba.cuda.as_cuda_array(cupy_array)", target=1.2,
    )
    assert out.device_ctypes_pointer.value == t.data_ptr()
