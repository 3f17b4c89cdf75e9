"""Every array protocol in and out: the buffer protocol, NumPy's array
interface, ``__dlpack__`` forwarded by an instance, raw capsules to ``wrap``
and ``export``, and the CUDA Array Interface (parsed, checked and labelled
here over host memory that no GPU ever reads; the GPU paths are in the
``gpu`` tests at the end)."""

import array
import gc
import mmap
import os
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _protocols

from .helpers import Handing, gpu_arange

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- the buffer protocol ---------------------------------------------------------

def test_a_bytearray_lands_in_numpy_zero_copy_and_writeable():
    b = bytearray(b"\x01\x02\x03\x04")
    a = gpu_dlpack.from_dlpack(b)
    assert type(a) is np.ndarray and a.dtype == np.uint8 and a.flags.writeable
    a[0] = 9
    assert b[0] == 9  # the same memory


def test_bytes_land_read_only():
    a = gpu_dlpack.from_dlpack(b"abcd")
    assert a.tolist() == [97, 98, 99, 100] and not a.flags.writeable
    info = gpu_dlpack.inspect(gpu_dlpack.export(b"abcd", max_version=(1, 0)))
    assert info.readonly and not info.is_copied
    with pytest.raises(BufferError, match="read-only"):
        gpu_dlpack.export(b"abcd")  # a legacy capsule cannot say read-only


def test_the_options_of_from_dlpack_hold_for_buffer_objects():
    b = bytearray(b"\x01\x02\x03")
    copied = gpu_dlpack.from_dlpack(b, copy=True)
    assert copied.tolist() == [1, 2, 3] and copied.flags.writeable
    copied[0] = 9
    assert b[0] == 1  # a copy, not the bytearray's memory
    shared = gpu_dlpack.from_dlpack(b, copy=False, device="cpu", stream=-1)
    assert np.shares_memory(shared, np.frombuffer(b, np.uint8))
    shared[0] = 7  # writeable, as the bytearray is, on every NumPy
    assert b[0] == 7
    with pytest.raises(ValueError, match="stream=5 is not valid"):
        gpu_dlpack.from_dlpack(b, stream=5)  # host data takes no stream
    with pytest.raises(BufferError, match="no backend can hold an array on cuda:0"):
        gpu_dlpack.from_dlpack(b, device="cuda:0")
    with pytest.raises(TypeError, match="does not support DLPack"):
        gpu_dlpack.from_dlpack(object(), copy=True)


@pytest.mark.parametrize(
    "make,dtype,values",
    [
        (lambda: array.array("d", [1.0, 2.0, 3.0]), np.float64, [1.0, 2.0, 3.0]),
        (lambda: array.array("i", [7, -1]), np.intc, [7, -1]),
        (lambda: memoryview(bytearray(range(12))).cast("B", (3, 4)), np.uint8, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]),
        (lambda: memoryview(np.arange(4.0).tobytes()).cast("d"), np.float64, [0.0, 1.0, 2.0, 3.0]),
    ],
    ids=["array.array-d", "array.array-i", "memoryview-2d", "memoryview-cast"],
)
def test_buffer_objects_keep_their_shape_and_type(make, dtype, values):
    obj = make()
    a = gpu_dlpack.from_dlpack(obj)
    assert a.dtype == np.dtype(dtype) and a.tolist() == values
    assert a.ctypes.data == np.asarray(memoryview(obj)).ctypes.data  # zero-copy


def test_an_mmap_is_shared_zero_copy():
    m = mmap.mmap(-1, 16)
    a = gpu_dlpack.from_dlpack(m)
    a[3] = 42
    assert m[3] == 42
    del a
    gc.collect()
    m.close()


def test_buffer_objects_reach_torch_and_jax_through_wrap(torch, jax):
    b = bytearray(range(8))
    t = torch.from_dlpack(gpu_dlpack.wrap(b))
    assert t.tolist() == list(range(8)) and t.data_ptr() == np.asarray(memoryview(b)).ctypes.data
    j = jax.dlpack.from_dlpack(gpu_dlpack.wrap(array.array("d", [1.0, 2.0])))
    assert np.asarray(j).tolist() == [1.0, 2.0]


def test_the_source_stays_alive_as_long_as_the_result():
    class Buffer(bytearray):
        pass

    b = Buffer(b"xyz")
    ref = weakref.ref(b)
    a = gpu_dlpack.from_dlpack(b)
    del b
    gc.collect()
    assert ref() is not None
    assert a.tobytes() == b"xyz"
    del a
    gc.collect()
    assert ref() is None


# -- NumPy's array interface ------------------------------------------------------

class ArrayInterface:
    """An object that speaks only ``__array_interface__`` (version 3)."""

    def __init__(self, arr, **changes):
        self.arr = arr
        self.__array_interface__ = dict(arr.__array_interface__, **changes)


def test_an_array_interface_object_lands_zero_copy(torch):
    x = np.arange(12.0).reshape(3, 4)[:, ::2]
    a = gpu_dlpack.from_dlpack(ArrayInterface(x))
    assert a.ctypes.data == x.ctypes.data and a.strides == x.strides
    np.testing.assert_array_equal(a, x)
    t = torch.from_dlpack(gpu_dlpack.wrap(ArrayInterface(np.arange(3.0))))
    assert t.tolist() == [0.0, 1.0, 2.0]


def test_a_read_only_array_interface_stays_read_only():
    x = np.arange(3.0)
    ai = ArrayInterface(x, data=(x.ctypes.data, True))
    assert not gpu_dlpack.from_dlpack(ai).flags.writeable
    assert gpu_dlpack.inspect(gpu_dlpack.export(ai, max_version=(1, 0))).readonly


def test_a_masked_array_interface_is_refused():
    x = np.arange(3.0)
    with pytest.raises(BufferError, match="has a mask: DLPack has no masked arrays"):
        gpu_dlpack.from_dlpack(ArrayInterface(x, mask=ArrayInterface(np.ones(3, bool))))


# -- __dlpack__ forwarded by the instance ---------------------------------------

class Proxy:
    """Forwards every attribute to the array it holds, as proxies do."""

    def __init__(self, target):
        self._target = target

    def __getattr__(self, name):
        return getattr(self._target, name)


def test_a_forwarded_dlpack_is_a_producer(torch):
    x = np.arange(4.0)
    a = gpu_dlpack.from_dlpack(Proxy(x))
    assert a.ctypes.data == x.ctypes.data
    t = torch.from_dlpack(gpu_dlpack.wrap(Proxy(torch.arange(3))))
    assert t.tolist() == [0, 1, 2]
    info = gpu_dlpack.inspect(gpu_dlpack.export(Proxy(x), max_version=(1, 0)))
    assert info.data == x.ctypes.data and info.version == gpu_dlpack.DLPACK_VERSION


def test_what_an_old_forwarded_producer_accepts_is_remembered_per_type():
    class OldArray:
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, stream=None):  # older than max_version
            return self.arr.__dlpack__()

        def __dlpack_device__(self):
            return (1, 0)

    class OldProxy(Proxy):
        pass

    old = gpu_dlpack.from_dlpack(OldProxy(OldArray(np.arange(3.0))))
    new = gpu_dlpack.export(Proxy(np.arange(3.0)), max_version=(1, 0))
    assert old.tolist() == [0.0, 1.0, 2.0]
    assert gpu_dlpack.inspect(new).name == "dltensor_versioned"  # not taken for an old producer


def test_dlpack_wins_over_the_other_protocols():
    x = np.arange(3.0)

    class Both(Proxy):
        __cuda_array_interface__ = {"shape": (1,), "typestr": "<f8", "data": (8, False), "version": 3}

    assert gpu_dlpack.from_dlpack(Both(x)).ctypes.data == x.ctypes.data


def test_numba_simulator_arrays_are_producers():
    pytest.importorskip("numba.cuda")
    pytest.importorskip("torch")
    script = textwrap.dedent(
        """
        import numpy as np, torch, gpu_dlpack
        from numba import cuda
        d = cuda.to_device(np.arange(6.0))
        assert not hasattr(type(d), "__dlpack__") and hasattr(d, "__dlpack__")
        a = gpu_dlpack.from_dlpack(d)
        assert a.tolist() == list(np.arange(6.0))
        t = torch.from_dlpack(gpu_dlpack.wrap(d))
        assert t.data_ptr() == a.ctypes.data
        print("ok")
        """
    )
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


# -- raw capsules to wrap and export -------------------------------------------------

def test_a_raw_capsule_can_be_wrapped_once(torch):
    x = np.arange(3.0)
    w = gpu_dlpack.wrap(x.__dlpack__(max_version=(1, 0)))
    t = torch.from_dlpack(w)
    assert t.data_ptr() == x.ctypes.data
    with pytest.raises(BufferError, match="already consumed"):
        torch.from_dlpack(w)


def test_a_raw_capsule_is_exported_under_the_rules():
    x = np.arange(3.0)
    legacy = gpu_dlpack.export(x.__dlpack__())
    assert gpu_dlpack.inspect(legacy).data == x.ctypes.data
    info = gpu_dlpack.inspect(gpu_dlpack.export(x.__dlpack__(), max_version=(1, 0)))
    assert info.name == "dltensor_versioned" and info.readonly  # a legacy capsule cannot say
    assert info.data == x.ctypes.data


def test_a_consumed_capsule_is_refused_by_wrap():
    cap = np.arange(3.0).__dlpack__()
    np.from_dlpack(Handing(cap))
    with pytest.raises(gpu_dlpack.ConsumedCapsuleError):
        gpu_dlpack.wrap(cap)


def test_a_numpy_scalar_is_a_0d_array():
    a = gpu_dlpack.from_dlpack(np.float64(2.5))
    assert a.shape == () and a.dtype == np.float64 and float(a) == 2.5


def test_nothing_known_is_still_refused():
    with pytest.raises(gpu_dlpack.NotDLPackError):
        gpu_dlpack.from_dlpack(object())
    with pytest.raises(gpu_dlpack.NotDLPackError):
        gpu_dlpack.wrap(3)
    with pytest.raises(gpu_dlpack.NotDLPackError):
        gpu_dlpack.export([1, 2])


# -- the CUDA Array Interface, over host memory no GPU reads -------------------

class CudaArray:
    """A CUDA Array Interface producer (as Numba's device arrays are) over
    host memory that stands in for device memory: the layer reads only the
    pointer, never the data."""

    def __init__(self, arr, version=3, **changes):
        self.arr = arr
        cai = {
            "shape": arr.shape,
            "typestr": arr.dtype.str,
            "data": (arr.ctypes.data, False),
            "strides": None if arr.flags.c_contiguous else arr.strides,
            "version": version,
        }
        if version >= 3:
            cai["stream"] = None
        cai.update(changes)
        self.__cuda_array_interface__ = cai


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(6, dtype="<f4").reshape(2, 3),
        np.arange(24, dtype=np.int64).reshape(4, 6)[::2, 1::2],
        np.zeros(5, "<f2"),
        np.array([True, False]),
        np.arange(4, dtype=np.complex64),
        np.array(2.5),
        np.zeros((0, 3)),
    ],
    ids=["f4", "strided-i8", "f2", "b1", "c8", "0-d", "zero-size"],
)
@pytest.mark.parametrize("version", [2, 3])
def test_a_cuda_array_interface_becomes_a_capsule_of_the_same_memory(arr, version):
    producer = CudaArray(arr, version=version)
    info = gpu_dlpack.inspect(gpu_dlpack.export(producer, max_version=(1, 0)))
    assert info.device == gpu_dlpack.Device("cuda:0")
    assert info.data + info.byte_offset == arr.ctypes.data
    assert info.shape == arr.shape
    if arr.ndim and arr.size:
        assert info.strides == tuple(s // arr.itemsize for s in arr.strides)
    code = {"f": 2, "i": 0, "b": 6, "c": 5}[arr.dtype.kind]
    assert info.dl_dtype == (code, arr.itemsize * 8, 1)
    assert not info.readonly


def test_a_read_only_cuda_array_interface_exports_read_only():
    arr = np.arange(3.0)
    producer = CudaArray(arr, data=(arr.ctypes.data, True))
    assert gpu_dlpack.inspect(gpu_dlpack.export(producer, max_version=(1, 0))).readonly
    with pytest.raises(BufferError, match="read-only"):
        gpu_dlpack.export(producer)


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"mask": object()}, "has a mask"),
        ({"typestr": "zz"}, "typestr 'zz' is no NumPy type string"),
        ({"typestr": ">f8"}, "byte order"),
        ({"strides": (3,)}, "not multiples of the item size 8"),
        ({"strides": (8, 8)}, "not one int per dimension"),
        ({"shape": [3]}, "not a tuple of non-negative ints"),
        ({"data": (0, False)}, "data is NULL but the shape"),
        ({"stream": 0}, "stream 0 is disallowed"),
        ({"version": 7}, "version 7 is not 0 to 3"),
    ],
)
def test_a_malformed_cuda_array_interface_is_refused_clearly(changes, message):
    with pytest.raises(BufferError, match=message):
        gpu_dlpack.export(CudaArray(np.arange(3.0), **changes), max_version=(1, 0))


def test_a_cuda_array_interface_without_data_is_refused():
    class NoData:
        __cuda_array_interface__ = {"shape": (3,), "typestr": "<f8", "version": 3}

    with pytest.raises(BufferError, match="it has no 'data'"):
        gpu_dlpack.from_dlpack(NoData())


def test_the_producer_object_lives_as_long_as_the_capsule():
    producer = CudaArray(np.arange(3.0))
    ref = weakref.ref(producer)
    cap = gpu_dlpack.export(producer, max_version=(1, 0))
    del producer
    gc.collect()
    assert ref() is not None
    del cap
    gc.collect()
    assert ref() is None


def test_the_cuda_array_interface_wins_over_the_array_interface():
    arr = np.arange(3.0)

    class Both(CudaArray):
        __array_interface__ = arr.__array_interface__

    assert gpu_dlpack.Device.of(gpu_dlpack.wrap(Both(arr))) == gpu_dlpack.Device("cuda:0")


def test_the_consumer_stream_waits_for_the_interface_stream(monkeypatch):
    calls = []
    monkeypatch.setattr("gpu_dlpack._handoff.handoff", lambda *a: calls.append(a) or True)
    producer = CudaArray(np.arange(3.0), stream=7)
    gpu_dlpack.export(producer, stream=99, max_version=(1, 0))
    assert calls == [(7, 99, 0)]
    gpu_dlpack.export(producer, stream=-1, max_version=(1, 0))
    assert calls == [(7, 99, 0)]  # -1: no synchronization asked
    gpu_dlpack.export(CudaArray(np.arange(3.0)), stream=99, max_version=(1, 0))
    assert calls == [(7, 99, 0)]  # stream None: nothing to wait for
    gpu_dlpack.export(CudaArray(np.arange(3.0), version=2, stream=7), stream=99, max_version=(1, 0))
    assert calls == [(7, 99, 0)]  # version 2 has no stream


def test_a_cuda_array_interface_producer_lends_memory_and_refuses_copies():
    with pytest.raises(BufferError, match="lends its memory only"):
        _protocols.producer(CudaArray(np.arange(3.0))).__dlpack__(copy=True)
    with pytest.raises(BufferError, match="lends its memory only"):
        _protocols.producer(CudaArray(np.arange(3.0))).__dlpack__(dl_device=(1, 0))


def test_importing_a_cuda_array_interface_needs_a_gpu_here():
    if gpu_dlpack._backends.cupy_backend.device_count():
        pytest.skip("a GPU is here")
    with pytest.raises(BufferError, match="cuda:0"):
        gpu_dlpack.from_dlpack(CudaArray(np.arange(3.0)))


# -- out: the interfaces wrap() offers ---------------------------------------------

def test_wrap_offers_the_array_interface_over_host_data(torch):
    x = np.arange(6.0).reshape(2, 3)
    w = gpu_dlpack.wrap(x)
    ai = w.__array_interface__
    assert ai["data"] == (x.ctypes.data, False) and ai["shape"] == (2, 3) and ai["typestr"] == "<f8"
    assert np.asarray(w).ctypes.data == x.ctypes.data
    assert not hasattr(w, "__cuda_array_interface__")
    ro = gpu_dlpack.wrap(x, readonly=True).__array_interface__
    assert ro["data"] == (x.ctypes.data, True)
    t = torch.arange(4.0)
    assert np.asarray(gpu_dlpack.wrap(t)).ctypes.data == t.data_ptr()


def test_wrap_offers_the_cuda_array_interface_over_gpu_data():
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1:]
    w = gpu_dlpack.wrap(CudaArray(arr))
    cai = w.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == (3, 3) and cai["typestr"] == "<f4"
    assert cai["data"] == (arr.ctypes.data, False) and cai["strides"] == arr.strides
    assert cai["stream"] == 1  # ready on the legacy default stream
    assert not hasattr(w, "__array_interface__")
    assert gpu_dlpack.wrap(CudaArray(arr), readonly=True).__cuda_array_interface__["data"][1] is True


def test_the_cuda_array_interface_exports_the_wrapped_device_on_the_legacy_default_stream():
    from .capsules import KeywordDeviceProducer

    producer = KeywordDeviceProducer(device=(2, 0), answers=(2, 0))
    w = gpu_dlpack.wrap(producer)
    producer.device = (1, 0)  # __dlpack_device__ is read once, at wrap time
    cai = w.__cuda_array_interface__
    assert cai["data"] == (producer.array.ctypes.data, False) and cai["stream"] == 1
    assert producer.requests == [
        dict(stream=1, max_version=gpu_dlpack.DLPACK_VERSION, dl_device=None, copy=None)
    ]


def test_the_array_interface_exports_the_device_reported_at_wrap_time():
    from .capsules import KeywordDeviceProducer

    producer = KeywordDeviceProducer(device=(1, 0), answers=(1, 0))
    w = gpu_dlpack.wrap(producer)
    producer.device = (2, 0)  # __dlpack_device__ is read once, at wrap time
    ai = w.__array_interface__
    assert ai["data"] == (producer.array.ctypes.data, False) and ai["shape"] == (6,)
    assert producer.requests == [
        dict(stream=None, max_version=gpu_dlpack.DLPACK_VERSION, dl_device=None, copy=None)
    ]


@pytest.mark.parametrize("cuda", [False, True])
def test_a_wrapped_raw_capsule_offers_one_interface_read_once(cuda):
    # A capsule can be consumed once: its interface is kept and offered again.
    from .capsules import KeywordDeviceProducer

    producer = KeywordDeviceProducer(device=(2, 0) if cuda else (1, 0))
    w = gpu_dlpack.wrap(producer.__dlpack__(max_version=(1, 0)))
    name = "__cuda_array_interface__" if cuda else "__array_interface__"
    first = getattr(w, name)
    assert first["data"] == (producer.array.ctypes.data, False) and first["shape"] == (6,)
    assert getattr(w, name) is first
    assert [r.calls for r in producer.records] == [0]  # held by the wrapper
    del w, first
    gc.collect()
    assert [r.calls for r in producer.records] == [1]


def test_the_offered_interface_keeps_the_memory_alive():
    producer = CudaArray(np.arange(3.0))
    ref = weakref.ref(producer)
    w = gpu_dlpack.wrap(producer)
    w.__cuda_array_interface__
    del producer
    gc.collect()
    assert ref() is not None
    del w
    gc.collect()
    assert ref() is None


# -- on a GPU: Numba device arrays, and Numba as a consumer ------------------------

@pytest.fixture
def numba_cuda(cp):
    cuda = pytest.importorskip("numba.cuda")
    if not cuda.is_available():
        pytest.skip("Numba sees no GPU")
    return cuda


@pytest.mark.gpu
def test_numba_device_arrays_reach_cupy_torch_and_jax(numba_cuda, cp, tc, jax):
    d = numba_cuda.to_device(np.arange(1000, dtype=np.float32))
    a = gpu_dlpack.from_dlpack(d)
    assert isinstance(a, cp.ndarray) and a.data.ptr == d.device_ctypes_pointer.value
    t = tc.from_dlpack(gpu_dlpack.wrap(d))
    assert t.data_ptr() == d.device_ctypes_pointer.value
    np.testing.assert_array_equal(t.cpu().numpy(), np.arange(1000, dtype=np.float32))
    try:
        gpu = jax.devices("gpu")
    except RuntimeError:
        gpu = []
    if gpu:
        j = jax.dlpack.from_dlpack(gpu_dlpack.wrap(d))
        np.testing.assert_array_equal(np.asarray(j), np.arange(1000, dtype=np.float32))


@pytest.mark.gpu
def test_numba_consumes_wrapped_arrays(numba_cuda, cp, tc):
    t = tc.arange(10, dtype=tc.float32, device="cuda")
    d = numba_cuda.as_cuda_array(gpu_dlpack.wrap(t))
    assert d.device_ctypes_pointer.value == t.data_ptr()
    np.testing.assert_array_equal(d.copy_to_host(), np.arange(10, dtype=np.float32))
    x = gpu_arange(cp, 5.0)
    assert numba_cuda.as_cuda_array(gpu_dlpack.wrap(x)).device_ctypes_pointer.value == x.data.ptr


@pytest.mark.gpu
def test_a_cuda_array_interface_is_read_on_the_consumer_stream_after_its_own(cp):
    # CuPy's own interface (version 3) of an array whose values are still
    # being written on the interface's stream: the consumer's stream waits
    # for that stream, with an event, before it reads.
    n = 1 << 16
    producer, consumer = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    x = cp.empty(n, cp.float32)
    cp.cuda.Device().synchronize()
    x.set(np.full(n, 3.0, np.float32), stream=producer)  # queued on the producer's stream

    class OnStream:
        __cuda_array_interface__ = dict(x.__cuda_array_interface__, stream=producer.ptr)

    a = gpu_dlpack.from_dlpack(OnStream(), stream=consumer)
    assert isinstance(a, cp.ndarray) and a.data.ptr == x.data.ptr
    with consumer:
        y = cp.empty_like(a)
        y.data.copy_from_device_async(a.data, a.nbytes)
    consumer.synchronize()
    np.testing.assert_array_equal(y.get(), np.full(n, 3.0, np.float32))
    out = gpu_dlpack.wrap(x).__cuda_array_interface__  # and out again: the same memory
    assert out["data"] == (x.data.ptr, False) and out["shape"] == (n,) and out["version"] == 3


@pytest.mark.gpu
def test_a_pending_write_on_the_interface_stream_is_read_correctly(numba_cuda, cp):
    n = 1 << 24
    s = numba_cuda.stream()
    d = numba_cuda.device_array(n, dtype=np.float32, stream=s)

    @numba_cuda.jit
    def fill(out, value):
        i = numba_cuda.grid(1)
        if i < out.size:
            for _ in range(200):  # long enough to still run when the consumer reads
                out[i] = value

    fill[(n + 255) // 256, 256, s](d, 3.0)

    class OnStream:
        __cuda_array_interface__ = dict(d.__cuda_array_interface__, stream=s.handle.value)

    consumer = cp.cuda.Stream(non_blocking=True)
    a = gpu_dlpack.from_dlpack(OnStream(), stream=consumer)
    with consumer:
        total = float(a.sum())
    assert total == 3.0 * n
