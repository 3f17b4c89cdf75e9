"""``gpu_dlpack.view(x)``: the memory of any producer, read without keeping
or consuming it (pointer, shape, strides, NumPy dtype, device, read-only,
the stream it is ready on)."""

import gc
import weakref

import numpy as np
import pytest

import gpu_dlpack

from .helpers import pointer, refcount, released


def test_a_view_of_a_numpy_array_says_where_and_what_its_memory_is():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1::2]
    v = gpu_dlpack.view(a)
    assert v.ptr == a.ctypes.data and v.shape == (3, 2) and v.strides == (4, 2)
    assert v.dtype == np.float32 and v.dl_dtype == (2, 32, 1) and v.itemsize == 4 and v.ndim == 2
    assert v.device == gpu_dlpack.Device("cpu") and not v.readonly and v.stream is None
    assert v.exporting_obj is a


def test_a_view_of_peers_reads_their_memory(torch, jax, xp_strict):
    t = torch.arange(6.0).reshape(2, 3).t()
    v = gpu_dlpack.view(t)
    assert v.ptr == t.data_ptr() and v.shape == (3, 2) and v.strides == t.stride() and not v.readonly
    j = jax.numpy.arange(4, dtype=jax.numpy.int16)
    v = gpu_dlpack.view(j)
    # JAX arrays are immutable: a legacy capsule becomes a read-only view.
    assert v.ptr == pointer(j) and v.dtype == np.int16 and v.readonly
    s = xp_strict.asarray([1.0, 2.0])
    assert gpu_dlpack.view(s).dtype == np.float64


def test_read_only_memory_is_said(torch):
    r = np.arange(3.0)
    r.flags.writeable = False
    assert gpu_dlpack.view(r).readonly
    assert gpu_dlpack.view(gpu_dlpack.wrap(np.arange(3.0), readonly=True)).readonly
    assert not gpu_dlpack.view(gpu_dlpack.wrap(torch.arange(3.0))).readonly


def test_a_type_numpy_has_only_with_ml_dtypes_is_a_numpy_dtype_there(torch, ml_dtypes):
    v = gpu_dlpack.view(torch.zeros(3, dtype=torch.bfloat16))
    assert v.dtype == ml_dtypes.bfloat16 and v.dl_dtype == (4, 16, 1) and v.itemsize == 2


def test_the_view_keeps_the_producer_and_nothing_else(torch):
    # The capsule is gone when view returns (its deleter ran): the only new
    # reference is the record's own to the producer.
    for x in (np.arange(4.0), torch.arange(4.0)):
        before = refcount(x)
        v = gpu_dlpack.view(x)
        if before is not None:
            assert refcount(x) == before + 1
        del v
        gc.collect()
        if before is not None:
            assert refcount(x) == before
    t = torch.arange(3.0)
    ref = weakref.ref(t)
    gpu_dlpack.view(t)
    del t
    assert released(ref)


def test_a_view_of_a_capsule_does_not_consume_it():
    a = np.arange(3.0)
    cap = a.__dlpack__(max_version=(1, 0))
    v = gpu_dlpack.view(cap)
    assert v.ptr == a.ctypes.data and not v.readonly and v.exporting_obj is cap
    assert gpu_dlpack.from_dlpack(cap).tolist() == [0.0, 1.0, 2.0]  # still whole
    assert gpu_dlpack.view(a.__dlpack__()).readonly  # a legacy capsule cannot say it is writeable


def test_the_stream_the_memory_is_ready_on(monkeypatch):
    calls = []
    monkeypatch.setattr("gpu_dlpack._handoff.handoff", lambda *a: calls.append(a) or True)
    buf = np.arange(3.0)
    p = gpu_dlpack.from_pointer(buf.ctypes.data, (3,), np.float64, device="cuda:0", stream=7, owner=buf)
    v = gpu_dlpack.view(p, stream=99)
    assert v.stream == 99 and v.device == gpu_dlpack.Device("cuda:0") and calls == [(7, 99, 0)]
    assert gpu_dlpack.view(p).stream == 1  # None on CUDA: the legacy default stream
    with gpu_dlpack.use_stream(42):
        assert gpu_dlpack.view(p).stream == 42
    with pytest.raises(gpu_dlpack.InvalidStreamError):
        gpu_dlpack.view(np.arange(3), stream=5)


def test_a_view_of_what_is_no_array_is_refused():
    with pytest.raises(gpu_dlpack.NotDLPackError):
        gpu_dlpack.view(object())
    assert gpu_dlpack.view(bytearray(b"ab")).dtype == np.uint8  # the buffer protocol is an array


# -- cuda.core's vocabulary and decorator, array-api-compat ------------------------

def test_a_view_speaks_cuda_cores_names(torch):
    a = np.arange(6.0)
    v = gpu_dlpack.view(a)
    # StridedMemoryView: device_id is -1 for memory only the host reads.
    assert v.exporting_obj is a and v.device_id == -1 and v.is_device_accessible is False
    assert v.ptr == a.ctypes.data and v.readonly is False
    # Pinned and managed memory a GPU maps, and GPU memory, are device accessible.
    for device, index, accessible in (("cuda_host", 0, True), ("cuda_managed", 0, True), ("cuda:1", 1, True),
                                       ("rocm_host", 0, True), ("rocm:2", 2, True)):
        lent = gpu_dlpack.from_pointer(a.ctypes.data, (6,), np.float64, device=device, owner=a)
        w = gpu_dlpack.view(lent, stream=-1) if device.startswith(("cuda:", "rocm:")) else gpu_dlpack.view(lent)
        assert (w.device_id, w.is_device_accessible) == (index, accessible), device


def test_the_old_name_of_the_producer_warns_and_gives_the_same_object():
    a = np.arange(3.0)
    v = gpu_dlpack.view(a)
    with pytest.warns(DeprecationWarning, match=r"^ArrayView\.obj is deprecated: read ArrayView\.exporting_obj"):
        assert v.obj is a


def test_args_viewable_views_the_arguments_it_names_on_the_stream_the_body_names(torch):
    seen = []

    @gpu_dlpack.args_viewable((0, -1))
    def kernel(x, alpha, y, stream=None):
        """Scale x into y."""
        vx, vy = x.view(stream), y.view(stream=stream)
        seen.append((vx.ptr, vx.shape, vy.ptr, vy.readonly, alpha, x.exporting_obj, stream))
        return "ran"

    a, t = np.zeros((2, 3), np.float32), torch.ones(4)
    assert kernel(a, 0.5, t) == "ran"
    assert seen[-1] == (a.ctypes.data, (2, 3), t.data_ptr(), False, 0.5, a, None)
    kernel(gpu_dlpack.wrap(a, readonly=True), 1, t, stream=-1)  # a keyword argument is not viewed
    assert seen[-1][3] is False and seen[-1][-1] == -1
    assert kernel.__name__ == "kernel" and kernel.__doc__ == "Scale x into y."
    assert str(__import__("inspect").signature(kernel)) == "(x, alpha, y, stream=None)"
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'y'"):
        kernel(a, 1)  # a position the call leaves empty: the function's own signature speaks


@pytest.mark.parametrize("indices", [0, [0], (0, "1"), (True,), None])
def test_args_viewable_takes_a_tuple_of_positions(indices):
    with pytest.raises(gpu_dlpack.GpuDlpackError, match=r"^args_viewable takes the positions of the arguments"):
        gpu_dlpack.args_viewable(indices)


def test_array_api_compat_reads_the_device_of_a_view_and_of_a_wrapper_but_no_namespace(torch):
    compat = pytest.importorskip("array_api_compat")
    a = np.arange(3.0)
    for x in (gpu_dlpack.view(a), gpu_dlpack.wrap(a), gpu_dlpack.wrap(torch.arange(3.0))):
        assert compat.device(x) == gpu_dlpack.Device("cpu")
        # A record of memory and a producer are no arrays: no operations to name.
        with pytest.raises(TypeError, match="is not a supported array type"):
            compat.array_namespace(x)
    # The array they stand for has one.
    assert compat.array_namespace(gpu_dlpack.from_dlpack(gpu_dlpack.wrap(a))) is compat.array_namespace(a)
