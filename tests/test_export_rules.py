"""Exporter rules 2-7: copy, device, streams, read-only, capsule kinds,
bfloat16/float8. Each against the real peers."""

import re

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import FLAG_IS_COPIED, FLAG_READ_ONLY, export, inspect, wrap

from gpu_dlpack import _rules
from gpu_dlpack._devices import CPU

from . import capsules
from .capsules import KeywordDeviceProducer
from .helpers import OldProducer, VersionedOnlyProducer, aligned, pointer
from .test_streams import Ptr


def _readonly(a):
    a = a.copy()
    a.flags.writeable = False
    return a


# -- rule 2: copy ------------------------------------------------------------

def test_copy_true_always_copies_and_sets_is_copied(torch, jax):
    for x in (np.arange(4.0), torch.arange(4.0), jax.numpy.arange(4.0)):
        info = inspect(export(x, max_version=(1, 0), copy=True))
        assert info.flags & FLAG_IS_COPIED
        assert not info.flags & FLAG_READ_ONLY  # a copy is the consumer's to write
        assert info.data != pointer(x)


def test_copy_true_sets_is_copied_where_torch_forgets_it(torch):
    t = torch.arange(4.0)
    assert not inspect(t.__dlpack__(max_version=(1, 0), copy=True)).flags & FLAG_IS_COPIED
    assert inspect(export(t, max_version=(1, 0), copy=True)).flags & FLAG_IS_COPIED


def test_copy_true_values_survive_and_are_independent(torch):
    a = np.arange(6.0).reshape(2, 3)
    out = torch.from_dlpack(wrap(a).__dlpack__(max_version=(1, 0), copy=True))
    assert out.tolist() == a.tolist()
    out[0, 0] = 99
    assert a[0, 0] == 0


# A producer of device memory with no backend here: gpu_dlpack forwards the
# request and corrects the flags the producer forgets (it never sets any).

@pytest.mark.parametrize("dl_device, copy", [(None, True), ((2, 0), True), ((2, 1), None), ((2, 1), True)])
@pytest.mark.parametrize("readonly", [False, True])
def test_a_device_producer_that_forgets_is_copied_gets_it_on_a_copy_or_a_move(dl_device, copy, readonly):
    producer = KeywordDeviceProducer(device=(2, 0))
    exported = wrap(producer, readonly=readonly)
    info = inspect(exported.__dlpack__(max_version=(1, 0), dl_device=dl_device, copy=copy))
    # The producer's own device is asked for as no device at all.
    forwarded = None if dl_device == (2, 0) else dl_device
    assert producer.requests == [
        dict(stream=None, max_version=gpu_dlpack.DLPACK_VERSION, dl_device=forwarded, copy=copy)
    ]
    assert info.name == "dltensor_versioned" and info.version == gpu_dlpack.DLPACK_VERSION
    assert info.device == gpu_dlpack.Device(dl_device or (2, 0))
    assert info.flags == FLAG_IS_COPIED  # and not READ_ONLY: a copy is the consumer's


@pytest.mark.parametrize("copy", [None, False])
@pytest.mark.parametrize("readonly", [False, True])
def test_a_device_producer_exported_in_place_is_not_flagged_copied(copy, readonly):
    producer = KeywordDeviceProducer(device=(2, 0))
    info = inspect(wrap(producer, readonly=readonly).__dlpack__(max_version=(1, 0), copy=copy))
    assert info.device == gpu_dlpack.Device("cuda:0")
    assert info.flags == (FLAG_READ_ONLY if readonly else 0)
    assert info.data == producer.array.ctypes.data


def test_a_legacy_export_of_a_read_only_device_producer_is_refused_and_its_capsule_freed():
    producer = KeywordDeviceProducer(device=(2, 0))
    with pytest.raises(BufferError, match="read-only"):
        wrap(producer, readonly=True).__dlpack__()
    assert [r.calls for r in producer.records] == [1]


def test_a_device_producer_is_asked_with_the_consumers_stream_and_keywords():
    producer = KeywordDeviceProducer(device=(2, 0))
    export(producer, stream=0xABC, max_version=(1, 0))
    export(producer, stream=Ptr(0xABD))  # a stream object: its handle
    with gpu_dlpack.use_stream(0xABE):
        export(producer, max_version=(1, 0))  # the block's stream
        # A consumer calling __dlpack__ names its own stream: the block is not asked.
        wrap(producer).__dlpack__(max_version=(1, 0))
    assert [r["stream"] for r in producer.requests] == [0xABC, 0xABD, 0xABE, None]
    assert [r["max_version"] for r in producer.requests] == [gpu_dlpack.DLPACK_VERSION, None] + [
        gpu_dlpack.DLPACK_VERSION] * 2


@pytest.mark.parametrize("bad, error", [({"stream": "s"}, TypeError), ({"copy": "yes"}, TypeError),
                                        ({"stream": -7}, ValueError)])
def test_a_device_producer_is_not_asked_with_bad_arguments(bad, error):
    producer = KeywordDeviceProducer(device=(2, 0))
    with pytest.raises(error):
        export(producer, max_version=(1, 0), **bad)
    assert producer.requests == []


def test_a_device_producer_that_answers_another_device_is_refused_and_its_capsule_freed():
    producer = KeywordDeviceProducer(answers=(2, 0))
    with pytest.raises(BufferError) as refused:
        export(producer, max_version=(1, 0), dl_device=(2, 1))
    assert str(refused.value).startswith(
        "cannot move an array from cuda:0 to cuda:1 (the producer gave a versioned capsule on "
        "cuda:0 and gpu_dlpack has no backend for this device to move or copy it)."
    )
    assert [r.calls for r in producer.records] == [1]


def test_a_legacy_only_device_producer_still_yields_a_versioned_read_only_capsule():
    producer = KeywordDeviceProducer(legacy_only=True)
    info = inspect(export(producer, max_version=(1, 0)))
    assert (info.name, info.flags, info.device) == ("dltensor_versioned", FLAG_READ_ONLY, gpu_dlpack.Device("cuda:0"))
    assert info.data == producer.array.ctypes.data


def test_a_device_producers_capsule_of_an_unknown_dtype_is_refused_and_freed():
    producer = KeywordDeviceProducer(dtype=(2, 32, 2))
    with pytest.raises(BufferError, match="lanes"):
        export(producer, max_version=(1, 0))
    assert [r.calls for r in producer.records] == [1]


def test_a_device_producers_own_flags_are_kept():
    copied = KeywordDeviceProducer(flags=FLAG_IS_COPIED)  # it copied on its own
    assert inspect(wrap(copied, readonly=True).__dlpack__(max_version=(1, 0))).flags == (
        FLAG_IS_COPIED | FLAG_READ_ONLY
    )
    readonly = KeywordDeviceProducer(flags=FLAG_READ_ONLY)
    assert inspect(export(readonly, max_version=(1, 0), copy=True)).flags == FLAG_READ_ONLY | FLAG_IS_COPIED


def test_a_legacy_export_of_a_writeable_device_producer_passes_its_capsule_on():
    producer = KeywordDeviceProducer(device=(2, 0))
    info = inspect(export(producer))
    assert info.name == "dltensor" and info.device == gpu_dlpack.Device("cuda:0")
    assert info.data == producer.array.ctypes.data


def test_a_legacy_capsule_a_device_producer_leaves_where_it_is_is_refused_by_kind():
    producer = KeywordDeviceProducer(answers=(2, 0), legacy_only=True)
    with pytest.raises(BufferError) as refused:
        export(producer, max_version=(1, 0), dl_device=(2, 1))
    assert str(refused.value).startswith(
        "cannot move an array from cuda:0 to cuda:1 (the producer gave a legacy capsule on "
        "cuda:0 and gpu_dlpack has no backend for this device to move or copy it)."
    )
    assert [r.calls for r in producer.records] == [1]


# A move or a copy the producer did not make is made by the backend of its
# device from a view of the producer's memory. The CuPy backend needs a GPU
# for that; here a recording backend stands in for its two calls, and the
# test checks what it is handed: the producer's capsule and the rules'
# arguments (data of a legacy capsule counts as read-only unless copied).

@pytest.fixture
def gpu_backend(monkeypatch):
    from gpu_dlpack._backends import cupy as cupy_backend
    from gpu_dlpack._backends.cupy import gpus as cupy_gpus

    asked = []

    def consume(capsule, versioned, header):
        asked.append(("consume", capsules.capsule_name(capsule), versioned, inspect(capsule).data,
                      (header.device_type, header.device_id, header.ndim)))
        return ("view", capsule)

    def export_array(arr, readonly, stream, max_version, dl_device, copy):
        asked.append(("export", arr, readonly, stream, max_version, dl_device, copy))
        return "the backend's capsule"

    monkeypatch.setattr(cupy_gpus, "serves", lambda device: device.type == gpu_dlpack.DLDeviceType.CUDA)
    monkeypatch.setattr(cupy_backend, "consume", consume)
    monkeypatch.setattr(cupy_backend, "export_array", export_array)
    return asked


class _StreamOnlyDeviceProducer(KeywordDeviceProducer):
    """A producer of device memory from before the 2023 revision: only ``stream``."""

    def __dlpack__(self, stream=None):
        return super().__dlpack__(stream=stream)


@pytest.mark.parametrize("legacy_only, flags, readonly, known_readonly", [
    (False, 0, False, False),  # a versioned capsule of writeable data
    (False, FLAG_READ_ONLY, False, True),
    (False, 0, True, True),  # wrap(readonly=True)
    (True, 0, False, True),  # a legacy capsule cannot say
])
def test_a_move_the_device_producer_did_not_make_is_made_by_the_backend_of_its_device(
        gpu_backend, legacy_only, flags, readonly, known_readonly):
    producer = KeywordDeviceProducer(answers=(2, 0), legacy_only=legacy_only, flags=flags)
    got = wrap(producer, readonly=readonly).__dlpack__(stream=0xAB, max_version=(1, 0), dl_device=(2, 1))
    assert got == "the backend's capsule"
    name = "dltensor" if legacy_only else "dltensor_versioned"
    assert gpu_backend[0] == ("consume", name, not legacy_only, producer.array.ctypes.data, (2, 0, 1))
    (_, view, *arguments) = gpu_backend[1]
    assert view[0] == "view" and capsules.capsule_name(view[1]) == name
    assert arguments == [known_readonly, 0xAB, (1, 0), (2, 1), None]
    assert arguments[0] is known_readonly
    assert len(gpu_backend) == 2


def test_a_copy_a_device_producer_could_not_be_asked_for_is_made_by_the_backend(gpu_backend):
    producer = _StreamOnlyDeviceProducer(device=(2, 0))
    assert export(producer, max_version=(1, 0), copy=True) == "the backend's capsule"
    assert producer.requests == [dict(stream=None, max_version=None, dl_device=None, copy=None)]
    assert gpu_backend[0] == ("consume", "dltensor", False, producer.array.ctypes.data, (2, 0, 1))
    # A legacy capsule cannot say its data is writeable: read-only, and copied.
    assert gpu_backend[1][2:] == (True, None, (1, 0), None, True)


def test_wrap_exports_the_device_its_producer_reported_when_wrapped():
    producer = KeywordDeviceProducer(device=(2, 0), answers=(2, 0))
    w = wrap(producer)
    producer.device = (1, 0)  # __dlpack_device__ is read once, at wrap time
    assert inspect(w.__dlpack__(max_version=(1, 0))).device == gpu_dlpack.Device("cuda:0")
    assert w.__dlpack_device__() == (2, 0)


def test_wrap_has_a_repr_naming_the_array_type():
    assert repr(wrap(np.arange(3))) == "gpu_dlpack.wrap(numpy.ndarray)"
    assert repr(wrap(np.arange(3), readonly=True)) == "gpu_dlpack.wrap(numpy.ndarray, readonly=True)"
    assert repr(wrap(KeywordDeviceProducer())) == "gpu_dlpack.wrap(tests.capsules.KeywordDeviceProducer)"


# Host memory to a GPU: the backend of the GPU makes the export, from the
# array and the plan the rules made. A GPU that addresses the host's pageable
# memory (ATS, as on Grace Hopper) takes it in place; here a recording backend
# stands in for CuPy's answer and its export, and the test checks what it is
# handed.

@pytest.fixture
def mapping_gpu(monkeypatch):
    from gpu_dlpack._backends import cupy as cupy_backend
    from gpu_dlpack._backends.cupy import gpus as cupy_gpus

    asked = []

    def export_host(arr, plan, dtype, stream):
        asked.append((arr, plan, dtype, stream))
        return "the backend's capsule"

    monkeypatch.setattr(cupy_gpus, "serves", lambda device: device.type == gpu_dlpack.DLDeviceType.CUDA)
    monkeypatch.setattr(cupy_gpus, "addressable", lambda source, target: True)
    monkeypatch.setattr(cupy_backend, "export_host", export_host)
    return asked


@pytest.mark.parametrize("copy", [None, True])
def test_host_data_a_gpu_addresses_is_exported_to_it_by_its_backend(mapping_gpu, copy, torch):
    from gpu_dlpack import _dtypes

    cuda0 = gpu_dlpack.Device("cuda:0")
    a, t = np.arange(4.0), torch.arange(4, dtype=torch.int32)
    for x, data in ((a, a.ctypes.data), (t, t.data_ptr())):
        got = export(x, max_version=(1, 0), dl_device=(2, 0), stream=0xAB, copy=copy)
        assert got == "the backend's capsule"
        arr, plan, dtype, stream = mapping_gpu.pop()
        assert type(arr) is np.ndarray and arr.ctypes.data == data and arr.tolist() == [0, 1, 2, 3]
        # In place unless a copy is asked; both say their data is writeable.
        assert plan == _rules.Plan(True, copy is True, CPU, cuda0, False)
        assert dtype == _dtypes.from_numpy(arr.dtype) and stream == 0xAB


class _Sub(np.ndarray):
    """A NumPy subclass: exported by the NumPy backend like an ndarray."""


def test_a_numpy_subclass_follows_every_export_rule():
    a = np.arange(4.0).view(_Sub)
    assert inspect(export(a, max_version=(1, 0))).data == a.ctypes.data
    copied = inspect(export(a, max_version=(1, 0), copy=True))
    assert copied.is_copied and copied.data != a.ctypes.data
    assert inspect(wrap(a, readonly=True).__dlpack__(max_version=(1, 0))).readonly
    with pytest.raises(ValueError, match="stream=5 is not valid for CPU"):
        export(a, stream=5)
    with pytest.raises(BufferError, match="cuda:0"):
        export(a, dl_device=(2, 0), copy=False)


def test_a_versioned_export_of_a_writeable_torch_tensor_is_in_place_and_writeable(torch):
    t = torch.arange(4.0)
    info = inspect(export(t, max_version=(1, 0)))
    assert info.data == t.data_ptr() and info.flags == 0
    copied = torch.from_dlpack(export(t, max_version=(1, 0), copy=True))
    assert copied.tolist() == [0.0, 1.0, 2.0, 3.0] and copied.data_ptr() != t.data_ptr()


def test_a_host_producers_versioned_capsule_without_strides_is_rebuilt_with_them():
    a = np.arange(6.0).reshape(2, 3)
    cap, rec = capsules.make(a, null_strides=True)
    info = inspect(export(capsules.Producer(cap), max_version=(1, 0)))
    assert info.strides == (3, 1) and info.data == a.ctypes.data  # DLPack 1.2 requires strides
    scalar = np.array(2.5)
    cap, rec = capsules.make(scalar, null_strides=True)
    info = inspect(export(capsules.Producer(cap), max_version=(1, 0)))
    assert info.strides is None and info.version == gpu_dlpack.DLPACK_VERSION  # 0-d: nothing to say


def test_a_host_producer_whose_capsule_is_elsewhere_is_refused_by_name():
    cap, rec = capsules.make(np.arange(3.0), device=(2, 0))
    with pytest.raises(BufferError) as refused:
        export(capsules.Producer(cap, device=(1, 0)), max_version=(1, 0))
    assert str(refused.value).startswith(
        "tests.capsules.Producer.__dlpack_device__ says its array is on cpu, but its capsule "
        "holds memory on cuda:0."
    )
    assert rec.calls == 1


def test_a_torch_bool_tensor_needs_dlpack_0_8(torch):
    with pytest.raises(BufferError, match=re.escape("bool needs DLPack 0.8 or newer, but the consumer asked for max_version=(0, 6)")):
        export(torch.tensor([True, False]), max_version=(0, 6))


@pytest.mark.parametrize("copy", [None, False])
def test_copy_false_or_none_exports_in_place(copy, torch, jax):
    for x in (np.arange(4.0), torch.arange(4.0), jax.numpy.arange(4.0)):
        info = inspect(export(x, max_version=(1, 0), copy=copy))
        assert info.data == pointer(x)
        assert not info.flags & FLAG_IS_COPIED


def test_copy_false_when_a_copy_is_needed_is_a_buffer_error():
    with pytest.raises(BufferError, match="cuda:0"):
        export(np.arange(3), dl_device=(2, 0), copy=False)


@pytest.mark.parametrize("bad", [1, 0, "yes", np.bool_(True)])
def test_copy_of_the_wrong_type_is_a_type_error(bad):
    with pytest.raises(TypeError, match=re.escape(f"copy must be True, False or None; got {bad!r}.")):
        export(np.arange(3), copy=bad)


# -- rule 3: device ----------------------------------------------------------

@pytest.mark.parametrize("dl_device", [None, (1, 0), gpu_dlpack.Device("cpu")])
def test_own_device_or_cpu_exports_in_place(dl_device, torch):
    for x in (np.arange(3.0), torch.arange(3.0)):
        info = inspect(export(x, max_version=(1, 0), dl_device=dl_device))
        assert info.device == gpu_dlpack.Device("cpu") and info.data == pointer(x)


@pytest.mark.parametrize("dl_device, name", [((2, 0), "cuda:0"), ((10, 1), "rocm:1"), ((3, 0), "cuda_host")])
def test_an_unreachable_device_is_a_buffer_error_naming_it(dl_device, name, torch):
    for x in (np.arange(3.0), torch.arange(3.0)):
        with pytest.raises(BufferError, match=name):
            export(x, max_version=(1, 0), dl_device=dl_device)


@pytest.mark.parametrize("bad", [(0, 0), (-2, 0), (2**31, 0)])
def test_a_device_that_does_not_exist_is_a_buffer_error(bad):
    with pytest.raises(BufferError, match="names no DLPack device"):
        export(np.arange(3), dl_device=bad)


@pytest.mark.parametrize("device, name", [((19, 0), "tpu:0"), ((21, 2), "ascend:2"), ((99, 0), "99:0")])
def test_a_device_no_backend_here_reaches_is_named_with_the_remedy(device, name):
    # Every code from 1 up is a DLPack device type, named or not yet.
    with pytest.raises(gpu_dlpack.DeviceUnreachableError, match=f"^cannot move an array from cpu to {name}. "):
        export(np.arange(3), dl_device=device)


@pytest.mark.parametrize("bad", [b"cpu", 1, 1.0])
def test_dl_device_of_the_wrong_type_is_a_type_error(bad):
    # ("cpu" is a device: dl_device takes every form Device reads, below.)
    with pytest.raises(TypeError, match=re.escape(f"a torch.device...); got {type(bad).__name__} {bad!r}.")):
        export(np.arange(3), dl_device=bad)


# -- rule 4: streams ---------------------------------------------------------

@pytest.mark.parametrize("stream", [None, -1])
def test_host_memory_takes_stream_none_or_minus_one(stream, torch, jax):
    for x in (np.arange(3.0), torch.arange(3.0), jax.numpy.arange(3.0)):
        assert inspect(export(x, max_version=(1, 0), stream=stream)).data == pointer(x)


@pytest.mark.parametrize("stream", [0, 1, 2, 3, 12345, -2])
def test_any_other_int_stream_on_host_memory_is_a_value_error_naming_the_valid_values(stream, torch):
    for x in (np.arange(3.0), torch.arange(3.0)):
        with pytest.raises(ValueError, match=r"not valid for CPU.*None.*-1 \(no synchronization\)"):
            export(x, stream=stream)


@pytest.mark.parametrize("stream", ["1", 1.0, True, object()])
def test_a_non_int_stream_is_a_type_error_naming_the_valid_values(stream):
    with pytest.raises(TypeError, match=r"stream must be an int or None.*-1"):
        export(np.arange(3), stream=stream)


# -- rule 5: read-only -------------------------------------------------------

def test_a_read_only_source_exports_versioned_with_read_only():
    ro = _readonly(np.arange(3.0))
    info = inspect(export(ro, max_version=(1, 0)))
    assert info.readonly and info.data == ro.ctypes.data


def test_readonly_wrap_exports_a_read_only_view_of_a_writeable_array(torch):
    for x in (np.arange(3.0), torch.arange(3.0)):
        w = wrap(x, readonly=True)
        assert inspect(w.__dlpack__(max_version=(1, 0))).readonly
        out = np.from_dlpack(w)
        assert not out.flags.writeable and pointer(out) == pointer(x)
    a = np.arange(3.0)
    np.from_dlpack(wrap(a, readonly=True))
    assert a.flags.writeable  # the source itself is untouched


def test_a_legacy_export_of_read_only_data_is_a_buffer_error_unless_copied(torch):
    ro = _readonly(np.arange(3.0))
    for producer in (ro, wrap(np.arange(3.0), readonly=True), wrap(torch.arange(3.0), readonly=True)):
        with pytest.raises(BufferError, match="read-only.*max_version=\\(1, 0\\).*copy=True"):
            producer.__dlpack__() if isinstance(producer, gpu_dlpack.Exportable) else export(producer)
    info = inspect(export(ro, copy=True))
    assert info.name == "dltensor" and info.data != ro.ctypes.data


def _legacy_jax(jax):
    """JAX before 0.12 asks and answers with legacy capsules only: the real
    legacy peer these tests exchange with (0.12 speaks DLPack 1.3)."""
    from gpu_dlpack import _peers

    if _peers.release(jax.__version__) >= (0, 12):
        pytest.skip(f"JAX {jax.__version__} asks for and gives versioned capsules")


def test_a_read_only_numpy_array_reaches_a_legacy_consumer_only_as_a_copy(jax):
    # JAX before 0.12 never sends max_version (jax issue 40789): it gets a legacy request.
    _legacy_jax(jax)
    ro = _readonly(np.arange(3.0))
    with pytest.raises(BufferError, match="read-only"):
        jax.dlpack.from_dlpack(wrap(ro))


# -- rule 6: adapting between capsule kinds -----------------------------------

def test_a_legacy_only_producer_yields_versioned_zero_copy_and_read_only(jax):
    _legacy_jax(jax)
    j = jax.numpy.arange(5.0)
    assert inspect(j.__dlpack__(max_version=(1, 0))).name == "dltensor"  # JAX's own answer
    info = inspect(export(j, max_version=(1, 0)))
    assert info.name == "dltensor_versioned" and info.readonly
    assert info.data == pointer(j)
    out = np.from_dlpack(wrap(j))
    assert out.tolist() == [0, 1, 2, 3, 4] and not out.flags.writeable and pointer(out) == pointer(j)


@pytest.fixture
def rules_path_for_jax(monkeypatch):
    """The Python path for JAX's capsules, which the compiled core otherwise
    asks for and passes on or adapts itself, so that the rules it asks can
    be watched."""
    from gpu_dlpack import _wiring
    from gpu_dlpack._compiled import core

    monkeypatch.setattr(_wiring, "CAPSULES", False)
    core.forget()
    yield
    monkeypatch.undo()
    core.forget()


def test_a_legacy_producer_is_planned_as_read_only_data_for_a_versioned_consumer(jax, monkeypatch,
                                                                                 rules_path_for_jax):
    # JAX's legacy capsule cannot say whether its data may be written, and
    # its arrays are immutable (the export_faults of its row): the rules take
    # them as read-only, so a versioned consumer gets READ_ONLY and a legacy
    # one is refused unless it copies (rule 5).
    plans = []
    plan_export = _rules.plan_export

    def spy(*args):
        plans.append(args[1])
        return plan_export(*args)

    monkeypatch.setattr(_rules, "plan_export", spy)
    j = jax.numpy.arange(5.0)
    assert inspect(export(j, max_version=(1, 0))).readonly
    with pytest.raises(gpu_dlpack.ReadOnlyError):
        export(j)
    assert inspect(export(j, copy=True)).name == "dltensor"
    assert plans == [True, True, True]


@pytest.mark.parametrize("versioned", [False, True])
@pytest.mark.parametrize("copy", [None, False, True])
@pytest.mark.parametrize("readonly", [False, None, True])
def test_plan_export_read_only_follows_what_is_known_of_the_data(readonly, copy, versioned):
    max_version = (1, 0) if versioned else None
    args = (CPU, readonly, 2, 64, max_version, None, copy, lambda s, t: True)
    if readonly is True and not versioned and copy is not True:
        with pytest.raises(BufferError, match="read-only"):
            _rules.plan_export(*args)
        return
    plan = _rules.plan_export(*args)
    assert plan.versioned is versioned and plan.copy is (copy is True)
    assert plan.source == plan.target == CPU
    # Only a copy is known to be writeable; unknown data is treated as read-only.
    assert plan.read_only is (copy is not True and readonly is not False)


def test_a_legacy_request_on_a_legacy_producer_passes_its_capsule_through():
    # A legacy producer of writeable data (an old producer, nothing in the
    # table) keeps its own capsule for a legacy consumer.
    a = np.arange(4.0)
    info = inspect(export(OldProducer(a)))
    assert info.name == "dltensor" and info.data == a.ctypes.data


def test_a_legacy_request_on_an_immutable_producer_is_refused_unless_copied(jax):
    j = jax.numpy.arange(5.0)
    with pytest.raises(gpu_dlpack.ReadOnlyError, match="legacy"):
        export(j)
    info = inspect(export(j, copy=True))
    assert info.name == "dltensor" and info.data != pointer(j)


def test_an_old_producer_that_takes_only_stream_is_adapted_too():
    a = np.arange(4.0)
    old = OldProducer(a)
    info = inspect(export(old, max_version=(1, 0)))
    assert info.name == "dltensor_versioned" and info.data == a.ctypes.data and info.readonly


def test_a_versioned_only_producer_serves_a_legacy_consumer(jax):
    a = aligned((4,))
    producer = VersionedOnlyProducer(a)
    info = inspect(export(producer))
    assert info.name == "dltensor" and info.data == a.ctypes.data
    out = jax.dlpack.from_dlpack(wrap(producer))
    assert out.tolist() == a.tolist()


def test_a_versioned_only_producer_of_read_only_data_cannot_serve_a_legacy_consumer():
    producer = VersionedOnlyProducer(_readonly(np.arange(4.0)))
    with pytest.raises(BufferError, match="read-only"):
        export(producer)


# -- rule 7: bfloat16 and the float8 family -----------------------------------

def test_torch_bfloat16_imports_into_numpy_as_ml_dtypes_bfloat16(torch, ml_dtypes):
    t = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)
    if np.lib.NumpyVersion(np.__version__) < "2.5.0":
        with pytest.raises(RuntimeError):
            np.from_dlpack(t)  # NumPy alone refuses it
    else:  # NumPy 2.5 reads it as ml_dtypes' bfloat16 itself
        assert np.from_dlpack(t).dtype == ml_dtypes.bfloat16
    out = gpu_dlpack.from_dlpack(t)
    assert out.dtype == ml_dtypes.bfloat16
    assert out.astype(np.float32).tolist() == [1.5, -2.0, 3.25]
    assert pointer(out) == t.data_ptr()


@pytest.mark.parametrize(
    "name, code", [("bfloat16", 4), ("float8_e4m3fn", 10), ("float8_e5m2", 12), ("float8_e4m3fnuz", 11)]
)
def test_ml_dtypes_arrays_export_with_the_right_dlpack_code(name, code, ml_dtypes):
    dtype = getattr(ml_dtypes, name)
    a = np.array([0.5, 1.0, -2.0], dtype=dtype)
    info = inspect(export(a, max_version=(1, 1)))
    assert info.dl_dtype == (code, np.dtype(dtype).itemsize * 8, 1)
    back = gpu_dlpack.from_dlpack(wrap(a))
    assert back.dtype == np.dtype(dtype) and back.astype(np.float32).tolist() == [0.5, 1.0, -2.0]


def test_numpy_bfloat16_reaches_torch(torch, ml_dtypes):
    a = np.array([1.0, 2.5], dtype=ml_dtypes.bfloat16)
    t = torch.from_dlpack(wrap(a))
    assert t.dtype == torch.bfloat16 and t.tolist() == [1.0, 2.5] and t.data_ptr() == a.ctypes.data


def test_numpy_float8_reaches_torch(torch, ml_dtypes):
    a = np.array([1.0, -0.5], dtype=ml_dtypes.float8_e4m3fn)
    t = torch.from_dlpack(wrap(a))
    assert t.dtype == torch.float8_e4m3fn and t.float().tolist() == [1.0, -0.5]


def test_sub_byte_types_travel_padded_in_versioned_capsules_only(ml_dtypes):
    a = np.array([1.0, -0.5, 6.0], dtype=ml_dtypes.float4_e2m1fn)
    info = inspect(export(a, max_version=(1, 1)))
    assert info.dl_dtype == (17, 4, 1) and info.flags & gpu_dlpack.FLAG_IS_SUBBYTE_TYPE_PADDED
    assert gpu_dlpack.from_dlpack(wrap(a)).astype(np.float32).tolist() == [1.0, -0.5, 6.0]
    i4 = np.array([1, -2], dtype=ml_dtypes.int4)
    with pytest.raises(BufferError, match="4-bit dtype needs DLPack 1.1"):
        export(i4)
    # A consumer older than 1.1 cannot read the flag that says "padded".
    for asked in ((1, 0), (0, 8)):
        with pytest.raises(BufferError, match=re.escape(f"a 4-bit dtype needs DLPack 1.1 or newer, but the consumer asked for max_version={asked}.")):
            export(i4, max_version=asked)
    assert inspect(export(i4, max_version=(1, 1))).dl_dtype == (0, 4, 1)


def test_a_non_native_byte_order_is_a_buffer_error_with_the_remedy():
    with pytest.raises(BufferError, match="newbyteorder"):
        export(np.arange(3, dtype=">i4"), max_version=(1, 0))


@pytest.mark.parametrize("dtype", [np.dtype("U3"), np.dtype([("a", "i4")]), np.dtype("O"), np.longdouble])
def test_a_dtype_dlpack_cannot_describe_is_a_buffer_error(dtype):
    with pytest.raises(BufferError, match="cannot export NumPy dtype"):
        export(np.zeros(2, dtype=dtype), max_version=(1, 0))


# -- a producer's own rules: asked for nothing, it is asked for nothing ------------

def test_a_request_of_nothing_asks_the_producer_for_nothing(xp_strict):
    # array-api-strict under API version 2022.12 refuses any max_version
    # keyword, None included, as that version of the standard had none.
    with xp_strict.ArrayAPIStrictFlags(api_version="2022.12"):
        a = xp_strict.asarray([1.0, 2.0])
        for capsule in (
            export(a), wrap(a).__dlpack__(), wrap(a).__dlpack__(stream=None, max_version=None, copy=None),
            export(a, stream=None, dl_device=None), gpu_dlpack.export(a, readonly=False),
        ):
            info = inspect(capsule)
            assert info.name == "dltensor" and info.shape == (2,)
        assert gpu_dlpack.from_dlpack(export(a)).tolist() == [1.0, 2.0]
        with pytest.raises(BufferError, match="requires at least version 2023.12"):
            export(a, max_version=(1, 0))  # asked for a version: the producer's own refusal, named


def test_dl_device_takes_every_form_device_takes_elsewhere(torch):
    # export's keyword keeps the standard's name; its value is read as
    # from_dlpack's and convert's device= is.
    a = np.arange(3.0)
    for form in ("cpu", (1, 0), [1, 0], gpu_dlpack.Device("cpu"), torch.device("cpu")):
        for make in (lambda: export(a, dl_device=form, max_version=(1, 0)),
                     lambda: wrap(a).__dlpack__(dl_device=form, max_version=(1, 0)),
                     lambda: export(torch.arange(3.0), dl_device=form, max_version=(1, 0))):
            info = inspect(make())
            assert info.device == CPU and not info.is_copied, form
    assert inspect(export(a, dl_device="cpu", copy=True, max_version=(1, 0))).is_copied
    with pytest.raises(gpu_dlpack.DeviceUnreachableError):
        export(a, dl_device="vulkan")
    with pytest.raises(ValueError, match="cannot read a device from 'cpux'"):
        export(a, dl_device="cpux")
    with pytest.raises(TypeError, match=r"^dl_device must be None, a \(device_type, device_id\) tuple"):
        export(a, dl_device=1)


@pytest.mark.parametrize("device", [(1, 0), (3, 0), (11, 0), (13, 0)], ids=["cpu", "cuda_host", "rocm_host", "managed"])
@pytest.mark.parametrize("versioned", [True, False])
def test_host_readable_capsules_change_kind_without_a_gpu(device, versioned):
    # Pinned and managed capsules changed kind through their GPU's backend
    # ("needs CuPy and a working GPU"), where the same struct operation on a
    # CPU capsule needs none: the other kind is a struct over the same memory.
    from .capsules import make

    cap, rec = make(device=device, versioned=versioned)
    out = gpu_dlpack.export(cap, max_version=None if versioned else (1, 0))
    info = inspect(out)
    assert info.versioned is not versioned and info.device == gpu_dlpack.Device(device)
    assert info.data == rec.keep[0].ctypes.data  # the same memory
    assert info.shape == (6,) and info.dl_dtype == (2, 64, 1)
    # A legacy capsule cannot say its data may be written: versioned, READ_ONLY.
    assert info.readonly is not versioned
    assert rec.calls == 0
    del out
    assert rec.calls == 1
    if versioned:  # read-only data as legacy: refused, and the capsule freed
        cap, rec = make(device=device, flags=1)
        with pytest.raises(gpu_dlpack.ReadOnlyError):
            gpu_dlpack.export(cap, max_version=None)
        assert rec.calls == 1
