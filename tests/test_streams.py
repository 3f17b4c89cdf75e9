"""The stream rules (array API standard, ``__dlpack__(stream=...)``): the table
per device type, argument checks, stream objects, and ``use_stream`` blocks.
All of it runs without a GPU."""

import ctypes
import sys
import threading
import warnings

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import Device, DLDeviceType, StreamWarning, export, from_dlpack, use_stream
from gpu_dlpack import _streams

T = DLDeviceType
CUDA_FAMILY = [T.CUDA, T.CUDA_HOST, T.CUDA_MANAGED]
ROCM_FAMILY = [T.ROCM, T.ROCM_HOST]


# -- the table ---------------------------------------------------------------

@pytest.mark.parametrize("device_type", CUDA_FAMILY)
@pytest.mark.parametrize("stream", [None, -1, 1, 2, 3, 0x7F00DEADBEEF])
def test_cuda_takes_none_minus_one_one_two_and_handles(device_type, stream):
    assert _streams.check_stream(stream, device_type) == stream


@pytest.mark.parametrize("device_type", ROCM_FAMILY)
@pytest.mark.parametrize("stream", [None, -1, 0, 3, 0x7F00DEADBEEF])
def test_rocm_takes_none_minus_one_zero_and_handles(device_type, stream):
    assert _streams.check_stream(stream, device_type) == stream


@pytest.mark.parametrize("device_type", CUDA_FAMILY)
def test_cuda_zero_is_the_legacy_default_stream_with_a_stream_warning(device_type):
    with pytest.warns(StreamWarning) as caught:
        assert _streams.check_stream(0, device_type) == 1
    assert [str(w.message) for w in caught] == [
        "stream=0 is ambiguous for CUDA (the standard disallows it); it is taken as the "
        "legacy default stream (1). Pass 1 or 2 explicitly."
    ]


def where_it_warns(call):
    """The (file, line) each StreamWarning of ``call()`` names, and what it returned."""
    with pytest.warns(StreamWarning) as caught:
        result = call()
    return [(w.filename, w.lineno) for w in caught], result


def test_the_cuda_zero_warning_of_an_export_points_at_the_callers_line():
    # A producer of CUDA memory that no backend of gpu_dlpack owns: the
    # check runs three frames deeper than the call (export, _export, the path).
    from .capsules import KeywordDeviceProducer

    producer = KeywordDeviceProducer(device=(2, 0))
    line = sys._getframe().f_lineno + 1
    where, cap = where_it_warns(lambda: export(producer, stream=0, max_version=(1, 0)))
    assert where == [(__file__, line)]
    assert producer.requests[0]["stream"] == 1  # taken as the legacy default stream
    assert gpu_dlpack.inspect(cap).device == Device("cuda:0")


def test_the_cuda_zero_warning_of_a_wrapped_producer_points_at_the_callers_line():
    # The consumer calls __dlpack__ (the C one of the core hands back to Python).
    from .capsules import KeywordDeviceProducer

    producer = KeywordDeviceProducer(device=(2, 0))
    w = gpu_dlpack.wrap(producer)
    line = sys._getframe().f_lineno + 1
    where, cap = where_it_warns(lambda: w.__dlpack__(stream=0, max_version=(1, 0)))
    assert where == [(__file__, line)]
    assert producer.requests[0]["stream"] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("make", ["cupy", "numpy", "torch"])
def test_the_cuda_zero_warning_points_at_the_callers_line_on_every_gpu_path(make):
    # CuPy's backend, NumPy's array and a host producer copied to the GPU.
    if make == "cupy":
        cupy = pytest.importorskip("cupy")
        x, dl_device = cupy.asarray(np.arange(4.0)), None
    elif make == "numpy":
        x, dl_device = np.arange(4.0), (2, 0)
    else:
        x, dl_device = pytest.importorskip("torch").arange(4.0), (2, 0)
    line = sys._getframe().f_lineno + 1
    where, cap = where_it_warns(lambda: export(x, stream=0, max_version=(1, 0), dl_device=dl_device))
    assert where == [(__file__, line)]
    assert gpu_dlpack.inspect(cap).device == Device("cuda:0")


# The valid values each message lists, in the standard's words.
DESCRIBED = {
    T.CUDA: "None (the legacy default stream), -1 (no synchronization), 1 (the legacy default "
            "stream), 2 (the per-thread default stream), an int > 2 (a stream handle), 0 "
            "(ambiguous; taken as the legacy default stream, with a StreamWarning)",
    T.ROCM: "None (the default stream), -1 (no synchronization), 0 (the default stream), "
            "an int > 2 (a stream handle)",
    T.CPU: "None (no stream (host memory)), -1 (no synchronization)",
}


@pytest.mark.parametrize("device_type", list(DESCRIBED), ids=[t.name for t in DESCRIBED])
def test_the_valid_values_are_listed_exactly_and_only_cuda_mentions_zero(device_type):
    assert _streams.describe(device_type) == DESCRIBED[device_type]
    with pytest.raises(ValueError) as bad_value:
        _streams.check_stream(-7, device_type)
    assert str(bad_value.value) == (
        f"stream=-7 is not valid for {device_type.name}. Valid values: {DESCRIBED[device_type]}."
    )
    with pytest.raises(TypeError) as bad_type:
        _streams.check_stream("s", device_type)
    assert str(bad_type.value) == (
        f"stream must be an int or None; got str 's'. For {device_type.name} the valid "
        f"values are: {DESCRIBED[device_type]}."
    )


@pytest.mark.parametrize("device_type", CUDA_FAMILY)
@pytest.mark.parametrize("stream", [-2, -100])
def test_other_cuda_values_are_a_value_error_naming_the_valid_ones(device_type, stream):
    with pytest.raises(ValueError, match=r"not valid for CUDA.*-1 \(no synchronization\).*"
                                         r"2 \(the per-thread default stream\).*an int > 2"):
        _streams.check_stream(stream, device_type)


@pytest.mark.parametrize("device_type", ROCM_FAMILY)
@pytest.mark.parametrize("stream", [1, 2, -2])
def test_rocm_refuses_the_cuda_default_stream_values(device_type, stream):
    with pytest.raises(ValueError, match=r"not valid for ROCM.*0 \(the default stream\)"):
        _streams.check_stream(stream, device_type)


@pytest.mark.parametrize("stream", [0, 1, 2, 3, -2])
def test_host_memory_takes_only_none_and_minus_one(stream):
    with pytest.raises(ValueError, match=r"not valid for CPU"):
        _streams.check_stream(stream, T.CPU)
    assert _streams.check_stream(-1, T.CPU) == -1


@pytest.mark.parametrize("device_type", [T.CPU, T.CUDA, T.ROCM])
@pytest.mark.parametrize("stream", ["1", 1.0, True, object()])
def test_a_stream_that_is_not_an_int_is_a_type_error(device_type, stream):
    with pytest.raises(TypeError, match="stream must be an int or None"):
        _streams.check_stream(stream, device_type)


def test_an_integer_type_that_is_not_int_is_taken():
    assert _streams.check_stream(np.int64(7), T.CUDA) == 7


def test_an_integer_is_a_handle_itself_even_with_stream_attributes():
    # An int subclass that also carries .ptr or .handle is an int handle:
    # its attributes are not read.
    class Tagged(int):
        ptr = 0xBAD
        handle = 0xBAD

    stream = Tagged(0xABC)
    assert _streams.handle_of(stream) is stream
    assert _streams.check_stream(stream, T.CUDA) == 0xABC


def test_rocm_zero_is_valid_and_gives_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _streams.check_stream(0, T.ROCM) == 0


@pytest.mark.parametrize(
    "device_type, handle", [(T.CUDA, 1), (T.CUDA_HOST, 1), (T.CUDA_MANAGED, 1), (T.ROCM, 0), (T.ROCM_HOST, 0)]
)
def test_none_names_the_legacy_default_stream_on_cuda_and_the_null_stream_on_rocm(device_type, handle):
    assert _streams.resolve(None, device_type) == handle
    assert _streams.resolve(-1, device_type) == -1
    assert _streams.resolve(12345, device_type) == 12345


# -- copies the host reads at once ---------------------------------------------

def test_a_copy_to_the_cpu_is_always_complete_on_return():
    assert _streams.finishes_before_return(T.CPU, None)
    assert _streams.finishes_before_return(T.CPU, -1)


@pytest.mark.parametrize("device_type", [T.CUDA_HOST, T.ROCM_HOST, T.CUDA_MANAGED])
def test_a_copy_to_pinned_or_managed_memory_is_left_queued_only_on_a_named_stream(device_type):
    assert _streams.finishes_before_return(device_type, None)
    assert _streams.finishes_before_return(device_type, -1)
    assert not _streams.finishes_before_return(device_type, 1)
    assert not _streams.finishes_before_return(device_type, 0xBEEF)


@pytest.mark.parametrize("device_type", [T.CUDA_HOST, T.CUDA_MANAGED])
def test_memory_exported_in_place_with_minus_one_is_left_to_the_consumer(device_type):
    assert not _streams.finishes_before_return(device_type, -1, copied=False)
    assert _streams.finishes_before_return(device_type, None, copied=False)
    assert _streams.finishes_before_return(T.CPU, -1, copied=False)


@pytest.mark.parametrize("device_type", [T.CUDA, T.ROCM])
def test_a_copy_to_gpu_memory_is_ordered_on_the_consumers_stream(device_type):
    assert not _streams.finishes_before_return(device_type, None)


@pytest.mark.parametrize("device_type", list(T), ids=[t.name for t in T])
def test_imports_to_host_memory_the_gpu_does_not_manage_return_complete_numpy_arrays(device_type):
    # An import's result is a NumPy array (read by the host at once, so the
    # copy into it is complete on return) or a CuPy array (always writeable,
    # ordered on the consumer's stream): never both, and managed memory,
    # though the host can read it, comes back as a CuPy array.
    from gpu_dlpack import _rules
    from gpu_dlpack._backends.cupy import gpus as cupy_gpus
    from gpu_dlpack._devices import HOST_ACCESSIBLE

    lands_on_host = cupy_gpus._lands_on_host(Device((device_type, 0)))
    assert lands_on_host == (device_type in HOST_ACCESSIBLE and device_type not in _rules.ALWAYS_WRITEABLE)
    if lands_on_host:
        assert _streams.finishes_before_return(device_type, None)


# -- stream objects ------------------------------------------------------------

class Ptr:  # the attribute CuPy streams carry
    def __init__(self, ptr):
        self.ptr = ptr


class CudaStream:  # the attribute PyTorch streams carry
    def __init__(self, handle, index=None):
        self.cuda_stream = handle
        self.device = type("device", (), {"index": index, "type": "cuda"})()


class Handle:  # Numba streams: a ctypes pointer
    def __init__(self, value):
        self.handle = ctypes.c_void_p(value)


class DriverHandle:  # Numba streams over a driver handle: a plain int
    def __init__(self, value):
        self.handle = value


class Protocol:  # the CUDA stream protocol (cuda.core, CuPy 14)
    def __init__(self, handle):
        self._handle = handle

    def __cuda_stream__(self):
        return (0, self._handle)


@pytest.mark.parametrize(
    "stream, handle",
    [(Ptr(0xABC0), 0xABC0), (CudaStream(0xABC1), 0xABC1), (Handle(0xABC2), 0xABC2),
     (DriverHandle(0xABC4), 0xABC4), (Protocol(0xABC3), 0xABC3), (5, 5), (-1, -1), (None, None)],
)
def test_stream_objects_become_their_handle(stream, handle):
    assert _streams.handle_of(stream) == handle


@pytest.mark.parametrize("stream", [Ptr(0), CudaStream(0), Handle(None), Handle(0), Protocol(0)])
def test_a_stream_object_with_handle_zero_is_the_null_stream_without_a_warning(stream, monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _streams.handle_of(stream) == 1  # the legacy default stream on CUDA
        monkeypatch.setattr("gpu_dlpack._devices.cupy_is_rocm", lambda: True)
        assert _streams.handle_of(stream) == 0  # the null stream is ROCm's default stream


def test_cupys_own_stream_singletons_are_read_without_a_gpu():
    cupy = pytest.importorskip("cupy")
    if gpu_dlpack._devices.cupy_is_rocm():
        pytest.skip("a ROCm build has no legacy or per-thread default stream")
    assert _streams.handle_of(cupy.cuda.Stream.null) == 1
    assert _streams.handle_of(cupy.cuda.Stream.ptds) == 2


def test_what_is_not_a_stream_object_is_left_for_the_stream_check():
    thing = object()
    assert _streams.handle_of(thing) is thing
    with pytest.raises(TypeError, match="stream must be an int or None"):
        export(np.arange(3), stream=thing)


def test_a_broken_stream_protocol_is_a_type_error():
    class Broken:
        def __cuda_stream__(self):
            return 42

    with pytest.raises(TypeError) as refused:
        _streams.handle_of(Broken())
    assert str(refused.value) == "Broken.__cuda_stream__() must return a (version, handle) pair of ints."


class CupyStream(Ptr):  # CuPy streams say their GPU as .device_id
    def __init__(self, ptr, device_id):
        super().__init__(ptr)
        self.device_id = device_id


def test_the_device_of_a_stream_object_is_read_when_it_says():
    assert _streams.device_index_of(CudaStream(9, index=1)) == 1
    assert _streams.device_index_of(CudaStream(9, index=0)) == 0
    assert _streams.device_index_of(CudaStream(9)) is None
    assert _streams.device_index_of(Ptr(9)) is None
    assert _streams.device_index_of(CupyStream(9, 2)) == 2
    assert _streams.device_index_of(CupyStream(9, 0)) == 0
    assert _streams.device_index_of(CupyStream(9, -1)) is None  # CuPy's "no device yet"
    assert _streams.device_index_of(CudaStream(9, index="1")) is None  # not an index: unknown


def test_a_block_on_a_cupy_stream_of_gpu_0_leaves_other_gpus_alone():
    with use_stream(CupyStream(0xF, 0)):
        assert _streams.block_stream(Device("cuda:0")) == 0xF
        assert _streams.block_stream(Device("cuda:1")) is None
    with use_stream(CupyStream(0xF, -1)):  # no device said: every GPU
        assert _streams.block_stream(Device("cuda:1")) == 0xF


def test_a_stream_object_is_checked_for_the_memory_it_is_used_with():
    # A GPU stream handle means nothing to host memory.
    with pytest.raises(ValueError, match="not valid for CPU"):
        export(np.arange(3), stream=Ptr(0xABC0))
    with pytest.raises(ValueError, match="not valid for CPU"):
        from_dlpack(np.arange(3).__dlpack__(), stream=CudaStream(0xABC0))
    assert from_dlpack(np.arange(3.0), stream=Ptr(-1)).tolist() == [0, 1, 2]


# -- use_stream blocks ---------------------------------------------------------

def test_a_block_names_the_consumer_stream_for_gpu_memory():
    assert _streams.block_stream(Device("cuda:0")) is None
    with use_stream(0xABC0) as s:
        assert s == 0xABC0
        assert _streams.in_block()
        for name in ("cuda:0", "cuda:3", "cuda_host", "cuda_managed", "rocm:1"):
            assert _streams.block_stream(Device(name)) == 0xABC0
        assert _streams.block_stream(Device("cpu")) is None  # host memory has no stream
    assert not _streams.in_block() and _streams.block_stream(Device("cuda:0")) is None


def test_blocks_nest_and_end_even_on_an_exception():
    with use_stream(Ptr(0xA)):
        with pytest.raises(RuntimeError):
            with use_stream(CudaStream(0xB)):
                assert _streams.block_stream(Device("cuda:0")) == 0xB
                raise RuntimeError
        assert _streams.block_stream(Device("cuda:0")) == 0xA
    assert _streams.block_stream(Device("cuda:0")) is None


def test_a_block_is_limited_to_the_gpu_its_stream_belongs_to():
    with use_stream(CudaStream(0xC, index=1)):
        assert _streams.block_stream(Device("cuda:1")) == 0xC
        assert _streams.block_stream(Device("cuda:0")) is None
        assert _streams.block_stream(Device("cuda_host")) == 0xC  # pinned memory: any GPU
    with use_stream(0xD, device="cuda:2"):
        assert _streams.block_stream(Device("cuda:2")) == 0xD
        assert _streams.block_stream(Device("cuda:0")) is None


def test_an_export_takes_the_block_stream_of_the_device_it_goes_to():
    # A producer on GPU 0 moved to GPU 1 inside a block of GPU 1: the consumer's
    # memory is on GPU 1, so the block's stream is the one to hand to the producer.
    from .capsules import KeywordDeviceProducer

    producer = KeywordDeviceProducer(device=(2, 0))
    with use_stream(0xD, device="cuda:1"):
        export(producer, max_version=(1, 0), dl_device=(2, 1))
        export(producer, max_version=(1, 0))  # stays on GPU 0: not the block's
    assert [r["stream"] for r in producer.requests] == [0xD, None]


def test_a_block_belongs_to_its_thread():
    seen = []
    with use_stream(0xE):
        t = threading.Thread(target=lambda: seen.append(_streams.block_stream(Device("cuda:0"))))
        t.start()
        t.join()
    assert seen == [None]


def test_a_new_thread_opens_its_own_blocks():
    seen = []

    def work():
        with use_stream(0x1E):
            seen.append(_streams.block_stream(Device("cuda:0")))
        seen.append(_streams.in_block())

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen == [0x1E, False]


def test_a_block_leaves_host_exchanges_alone():
    a = np.arange(3.0)
    with use_stream(0xABC0):
        assert gpu_dlpack.inspect(export(a, max_version=(1, 0))).data == a.ctypes.data
        assert from_dlpack(a.__dlpack__()).tolist() == [0, 1, 2]


@pytest.mark.parametrize("bad", ["s", 1.5, object()])
def test_a_block_needs_a_stream(bad):
    with pytest.raises(TypeError, match="cannot read a stream from"):
        with use_stream(bad):
            pass


def test_a_block_refuses_a_negative_handle_other_than_minus_one():
    with pytest.raises(ValueError, match="stream=-2 is not valid"):
        with use_stream(-2):
            pass


def test_use_stream_is_public():
    assert gpu_dlpack.use_stream is use_stream and "use_stream" in gpu_dlpack.__all__
