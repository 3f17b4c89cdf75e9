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
    assert v.obj is a


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
    assert v.ptr == a.ctypes.data and not v.readonly and v.obj is cap
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
