"""PaddlePaddle through the layer, both ways, with the real library (in a
process of its own: tests/test_peers_apart.py runs this file, since Paddle
and TensorFlow in one process have crashed).

- As a producer its ``__dlpack_device__`` answers ``(kDLCPU, None)`` for a
  CPU tensor (``device-id-none`` in its row): the layer reads the CPU.
- Its type offers the DLPack C exchange API, which the core reads as it
  reads torch's, guarded by ``requires_grad`` (its ``__dlpack__`` refuses
  such tensors; the exchange would not).
- As a consumer it writes through READ_ONLY capsules and imports a negative
  stride as garbage: ``convert`` copies for both.
"""

import inspect
import numpy as np

import pytest

import gpu_dlpack
from gpu_dlpack import _peers, _wiring

paddle = pytest.importorskip("paddle")


def test_the_device_without_an_id_is_the_fault_the_row_says():
    p = paddle.to_tensor([1.0, 2.0])
    device_type, device_id = p.__dlpack_device__()
    assert int(device_type) == 1 and device_id is None
    assert "device-id-none" in _peers.export_faults_of(_peers.by_name("paddle"), paddle.__version__)
    assert gpu_dlpack.Device.of(p) == gpu_dlpack.Device("cpu")


def test_from_dlpack_of_a_cpu_tensor_shares_its_memory():
    p = paddle.to_tensor([1.0, 2.0])
    a = gpu_dlpack.from_dlpack(p)
    assert a.tolist() == [1.0, 2.0]
    a[0] = 7.0
    assert p.numpy().tolist() == [7.0, 2.0]


@pytest.mark.parametrize("to", ["numpy", "torch", "jax", "array_api_strict"])
def test_convert_of_a_cpu_tensor(to):
    pytest.importorskip(to)
    p = paddle.to_tensor([[1, 2], [3, 4]], dtype="int32")
    got = gpu_dlpack.convert(p, to)
    assert np.asarray(gpu_dlpack.from_dlpack(got)).tolist() == [[1, 2], [3, 4]]


def test_wrap_and_export_of_a_cpu_tensor():
    p = paddle.to_tensor([1.5, 2.5])
    assert np.from_dlpack(gpu_dlpack.wrap(p)).tolist() == [1.5, 2.5]
    assert gpu_dlpack.from_dlpack(gpu_dlpack.export(p)).tolist() == [1.5, 2.5]


def test_the_core_reads_its_exchange_api():
    t = type(paddle.to_tensor([1.0]))
    plan = _wiring._import_plan(t)
    assert plan is not None and plan[0] is t.__dict__["__dlpack_c_exchange_api__"]
    # its guard, read through the type's own descriptor (not by name)
    assert plan[1] == (inspect.getattr_static(t, "requires_grad"),)


def test_a_tensor_that_requires_grad_is_refused_as_its_dlpack_refuses():
    g = paddle.to_tensor([1.0, 2.0])
    g.stop_gradient = False
    with pytest.raises(BufferError, match="gradient"):
        g.__dlpack__()
    with pytest.raises(BufferError, match="gradient"):
        gpu_dlpack.from_dlpack(g)
    assert gpu_dlpack.from_dlpack(g.detach()).tolist() == [1.0, 2.0]


def test_a_transposed_tensor_keeps_its_values():
    p = paddle.to_tensor([[1, 2, 3], [4, 5, 6]], dtype="int64").T
    assert gpu_dlpack.from_dlpack(p).tolist() == [[1, 4], [2, 5], [3, 6]]


def test_convert_to_paddle_copies_read_only_data():
    r = np.arange(3.0)
    r.flags.writeable = False
    q = gpu_dlpack.convert(r, "paddle")
    q[0] = 5.0
    assert r.tolist() == [0.0, 1.0, 2.0]
    assert "read-only-ignored" in gpu_dlpack.convert(r, "paddle", report=True).faults


def test_convert_to_paddle_of_a_negative_stride_holds_the_values():
    a = np.arange(6.0)[::-1]
    assert gpu_dlpack.convert(a, "paddle").numpy().tolist() == a.tolist()


def test_convert_to_paddle_shares_a_plain_array():
    a = np.arange(4.0)
    q = gpu_dlpack.convert(a, "paddle")
    a[0] = 9.0
    assert q.numpy().tolist() == [9.0, 1.0, 2.0, 3.0]


def test_a_cpu_build_is_never_handed_gpu_data():
    # Its CPU build dies (SIGSEGV) importing from a producer on a GPU
    # (gpu-import-crashes): convert refuses before it is called.
    if paddle.is_compiled_with_cuda():
        pytest.skip("a CUDA build of Paddle")

    class OnTheGpu:
        def __init__(self):
            self.a = np.arange(3.0)

        def __dlpack__(self, **kwargs):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(gpu_dlpack.DeviceUnreachableError, match="crashes the process"):
        gpu_dlpack.convert(OnTheGpu(), "paddle")


def test_a_static_mode_tensor_whose_buffer_fails_gets_the_layers_error():
    # A static-mode DenseTensor speaks no DLPack (Paddle's to_dlpack reads
    # it through a private method) and no array interface, and claims the
    # buffer protocol, whose export fails: the layer says so in its words,
    # with the remedy, not with pybind11's bare BufferError.
    from paddle import base

    paddle.enable_static()
    try:
        t = base.create_lod_tensor(np.array([[1], [2]]).astype("int64"), [[1, 1]], base.CPUPlace())
        with pytest.raises(gpu_dlpack.GpuDlpackError, match="offers the buffer protocol") as caught:
            gpu_dlpack.from_dlpack(t)
        assert isinstance(caught.value, BufferError) and "that library's own DLPack export" in str(caught.value)
        assert gpu_dlpack.from_dlpack(paddle.utils.dlpack.to_dlpack(t)).tolist() == [[1], [2]]
    finally:
        paddle.disable_static()
