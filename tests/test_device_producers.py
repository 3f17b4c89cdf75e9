"""Rule 6 on every device: a producer of memory that no backend of gpu_dlpack
owns (JAX on a GPU, with or without CuPy) still yields the capsule kind the
consumer asks for, zero-copy, labelled as its own device, and the adaptation
touches no memory.

The producer is a capsule built with ctypes (tests/capsules.py) that says
cuda:0 and legacy for every request, as JAX on CUDA does. Its data pointer is
an address no process maps (the first page), so any read of the data would
crash the test run: the tests pass only if nothing dereferences it.
"""

import functools
import gc
import sys

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import FLAG_IS_COPIED, FLAG_READ_ONLY, export, inspect, wrap

from .capsules import DeviceProducer, capsule_name, consume_and_free

CUDA0 = (2, 0)
UNMAPPED = 0x1000  # below mmap_min_addr on Linux: never mapped, never readable


def jax_on_cuda(**kw):
    return DeviceProducer(np.arange(6.0), device=CUDA0, data=UNMAPPED, **kw)


def check_versioned_in_place(cap, producer):
    info = inspect(cap)
    assert info.name == "dltensor_versioned"
    assert info.version == gpu_dlpack.DLPACK_VERSION
    assert info.device.dlpack == CUDA0
    assert info.data + info.byte_offset == UNMAPPED  # the same memory: zero-copy
    assert info.readonly and not info.is_copied
    assert info.shape == (6,) and info.dl_dtype == (2, 64, 1) and info.strides == (1,)
    assert len(producer.records) == 1 and producer.records[0].calls == 0
    return info


@pytest.mark.parametrize("dl_device", [None, CUDA0, gpu_dlpack.Device("cuda:0")])
@pytest.mark.parametrize("stream", [None, 1, 0xABC0])
def test_a_legacy_only_device_producer_exports_versioned_zero_copy_read_only_on_its_device(dl_device, stream):
    p = jax_on_cuda()
    cap = export(p, max_version=(1, 0), dl_device=dl_device, stream=stream)
    check_versioned_in_place(cap, p)
    # The stream keeps its meaning (the producer's hand-off); its own device
    # asked for is no move, so the producer is not asked to move.
    assert p.requests == [{"stream": stream, "max_version": gpu_dlpack.DLPACK_VERSION, "dl_device": None,
                           "copy": None}]


def test_the_request_torch_makes_on_a_gpu_gets_a_versioned_capsule_of_the_producers_memory():
    # torch.from_dlpack(w) reads w.__dlpack_device__() and, for a CUDA array,
    # asks {'max_version': (1, 0), 'stream': 1} on the legacy default stream.
    p = jax_on_cuda()
    w = wrap(p)
    assert w.__dlpack_device__() == CUDA0
    cap = w.__dlpack__(max_version=(1, 0), stream=1)
    check_versioned_in_place(cap, p)
    assert p.requests[0]["stream"] == 1


def test_the_legacy_deleter_runs_once_when_the_versioned_capsule_is_consumed_and_freed():
    p = jax_on_cuda()
    cap = export(p, max_version=(1, 0))
    (record,) = p.records
    assert capsule_name(cap) == "dltensor_versioned"
    consume_and_free(cap)
    gc.collect()
    assert record.calls == 1
    del cap
    gc.collect()
    assert record.calls == 1


def test_the_legacy_deleter_runs_once_when_the_versioned_capsule_is_never_consumed():
    p = jax_on_cuda()
    cap = export(p, max_version=(1, 0))
    (record,) = p.records
    assert record.calls == 0
    del cap
    gc.collect()
    assert record.calls == 1


def test_a_legacy_consumer_of_a_legacy_device_producer_gets_its_capsule_as_it_came():
    p = jax_on_cuda()
    cap = export(p)
    info = inspect(cap)
    assert info.name == "dltensor" and info.device.dlpack == CUDA0 and info.data == UNMAPPED


def test_readonly_wrap_of_a_device_producer_refuses_a_legacy_consumer_and_frees_the_capsule():
    p = jax_on_cuda()
    with pytest.raises(BufferError, match="read-only"):
        wrap(p, readonly=True).__dlpack__()
    assert p.records[0].calls == 1


def test_a_versioned_only_device_producer_serves_a_legacy_consumer_in_place():
    p = DeviceProducer(np.arange(6.0), device=CUDA0, data=UNMAPPED, versioned=True)
    cap = export(p)
    info = inspect(cap)
    assert info.name == "dltensor" and info.device.dlpack == CUDA0
    assert info.data + info.byte_offset == UNMAPPED
    (record,) = p.records
    del cap
    gc.collect()
    assert record.calls == 1


def test_a_versioned_only_device_producer_of_read_only_data_cannot_serve_a_legacy_consumer():
    p = DeviceProducer(np.arange(6.0), device=CUDA0, data=UNMAPPED, versioned=True, flags=FLAG_READ_ONLY)
    with pytest.raises(BufferError, match="read-only"):
        export(p)
    assert p.records[0].calls == 1


def test_a_copy_the_legacy_producer_takes_is_flagged_copied_and_writeable():
    p = jax_on_cuda()
    cap = export(p, max_version=(1, 0), copy=True)
    info = inspect(cap)
    assert info.name == "dltensor_versioned" and info.device.dlpack == CUDA0
    assert info.flags & FLAG_IS_COPIED and not info.flags & FLAG_READ_ONLY
    assert p.requests[0]["copy"] is True


def test_a_dtype_numpy_does_not_know_travels_through_the_carrier(ml_dtypes):
    p = jax_on_cuda(dtype=(4, 16, 1))  # bfloat16
    p.array = np.arange(6, dtype=np.uint16)
    info = inspect(export(p, max_version=(1, 0)))
    assert info.dl_dtype == (4, 16, 1) and info.device.dlpack == CUDA0 and info.readonly
    assert info.data + info.byte_offset == UNMAPPED


@pytest.mark.parametrize("dtype", [(4, 16, 1), (2, 16, 1), (7, 8, 1), (17, 4, 1)],
                         ids=["bfloat16", "float16", "float8_e3m4", "float4_e2m1fn"])
@pytest.mark.parametrize("shape", [(6,), (), (0,)], ids=["1-d", "0-d", "empty"])
def test_every_exchanged_dtype_and_shape_of_a_legacy_device_capsule_is_adapted_without_numpy(monkeypatch, dtype, shape):
    # The other kind over the same struct needs no NumPy and no ml_dtypes
    # (nothing is imported): bfloat16 and the float8/6/4 carriers, 0-d and
    # empty tensors, are adapted in place, READ_ONLY, freed once.
    from gpu_dlpack import _dtypes

    p = DeviceProducer(np.zeros(shape), device=CUDA0, data=UNMAPPED, dtype=dtype)
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # not installed
    monkeypatch.setattr(_dtypes, "_ml_dtypes", functools.lru_cache(_dtypes._ml_dtypes.__wrapped__))
    _dtypes.to_numpy.cache_clear()  # what it found with ml_dtypes
    try:
        cap = export(p, max_version=(1, 0))
    finally:
        _dtypes.to_numpy.cache_clear()
    info = inspect(cap)
    assert info.versioned and info.version == gpu_dlpack.DLPACK_VERSION and info.readonly
    assert info.device.dlpack == CUDA0 and info.data + info.byte_offset == UNMAPPED
    assert info.dl_dtype == dtype and info.shape == shape
    assert info.strides is not None and len(info.strides) == len(shape)  # strides always (DLPack 1.2)
    if 0 not in shape:
        assert info.strides == tuple(1 for _ in shape)
    assert [r.calls for r in p.records] == [0]
    del cap
    gc.collect()
    assert [r.calls for r in p.records] == [1]


def test_a_dtype_that_is_not_exchanged_is_refused_by_the_adaptation_and_the_capsule_freed():
    p = jax_on_cuda(dtype=(4, 8, 1))
    with pytest.raises(BufferError, match=r"DLPack dtype \(code=4, bits=8, lanes=1\)"):
        export(p, max_version=(1, 0))
    assert [r.calls for r in p.records] == [1]


# -- managed memory: which label is served to whom -------------------------------
#
# Managed memory is a CuPy array on a GPU; here the label logic is driven by a
# producer that says CUDA_MANAGED, with the backend's answer to "which GPU
# allocated it" and the export itself replaced by recorders (no GPU to make
# the capsule on). The consumers are the real NumPy and the requests PyTorch
# and CuPy make on a GPU.

MANAGED = (13, 0)


@pytest.fixture
def served(monkeypatch):
    from gpu_dlpack import _backends, _exchange

    asked = []

    def record(x, readonly, stream, max_version, dl_device, copy, source=None):
        asked.append(dl_device)
        return np.arange(6.0).__dlpack__(max_version=(1, 0))  # any capsule, for the consumer

    monkeypatch.setattr(_backends, "gpu_of", lambda x: 3 if isinstance(x, DeviceProducer) else None)
    monkeypatch.setattr(_exchange, "_export", record)
    return asked


def test_managed_memory_is_reported_as_the_cuda_device_that_allocated_it(served):
    w = wrap(DeviceProducer(device=MANAGED))
    assert w.__dlpack_device__() == (2, 3)  # PyTorch refuses device type 13, asks a stream for 2
    assert gpu_dlpack.Device.of(DeviceProducer(device=MANAGED)) == gpu_dlpack.Device("cuda_managed")


def test_a_consumer_that_passes_a_stream_gets_the_cuda_label(served):
    w = wrap(DeviceProducer(device=MANAGED))
    w.__dlpack__(max_version=(1, 0), stream=1)  # PyTorch on the legacy default stream
    w.__dlpack__(max_version=(1, 0), stream=0xABC0)  # CuPy, on its current stream
    w.__dlpack__(max_version=(1, 0), stream=-1)  # a GPU consumer that asks for no synchronization
    assert served == [(2, 3)] * 3


def test_a_consumer_without_a_stream_gets_the_managed_label_or_the_device_it_names(served):
    w = wrap(DeviceProducer(device=MANAGED))
    np.from_dlpack(w)
    np.from_dlpack(w, device="cpu")
    w.__dlpack__(max_version=(1, 0), dl_device=MANAGED, stream=1)
    assert served == [None, (1, 0), MANAGED]


def test_other_memory_is_reported_and_served_as_its_own_device(served):
    for device in [(2, 0), (1, 0), (3, 0)]:
        w = wrap(DeviceProducer(device=device))
        assert w.__dlpack_device__() == device
        w.__dlpack__(max_version=(1, 0), stream=1 if device == (2, 0) else None)
    assert served == [None, None, None]


def test_the_label_rules():
    from gpu_dlpack import _rules
    from gpu_dlpack._devices import Device

    managed, cuda1 = Device("cuda_managed"), Device("cuda:1")
    assert _rules.reported_device(managed, 1) == cuda1
    assert _rules.reported_device(managed, None) == managed  # the allocating GPU is unknown
    assert _rules.reported_device(cuda1, 0) == cuda1
    assert _rules.served_device(cuda1, None, 1) == (2, 1)
    assert _rules.served_device(cuda1, None, None) is None
    assert _rules.served_device(cuda1, (1, 0), 1) == (1, 0)
