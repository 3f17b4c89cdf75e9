"""Importer rules: negotiation, capsule checks, ownership, read-only, zero-copy."""

import gc
import sys
import types
import weakref

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import ConsumedCapsuleError, NotDLPackError, from_dlpack, inspect, wrap
from gpu_dlpack._compiled import core

from .capsules import KeywordDeviceProducer, make
from .helpers import OldProducer, aligned, capsule_name, managed, pointer


# -- negotiation -------------------------------------------------------------

def test_asks_with_max_version_and_without_unneeded_keywords():
    w = wrap(np.arange(3.0))
    from_dlpack(w)
    assert w.last_request == {
        "stream": None, "max_version": gpu_dlpack.DLPACK_VERSION, "dl_device": None, "copy": None
    }
    from_dlpack(w, copy=False)
    assert w.last_request["copy"] is False


def test_a_legacy_only_producer_is_imported(jax):
    j = jax.numpy.arange(4.0)
    out = from_dlpack(j)
    assert out.tolist() == [0, 1, 2, 3] and pointer(out) == pointer(j)


def test_a_producer_that_takes_only_stream_is_asked_again_without_new_keywords():
    a = np.arange(4.0)
    old = OldProducer(a)
    out = from_dlpack(old)
    assert pointer(out) == a.ctypes.data and out.tolist() == a.tolist()
    assert old.calls[-1] == {"stream": None}


def test_the_layer_copies_for_a_producer_that_cannot():
    a = np.arange(4.0)
    out = from_dlpack(OldProducer(a), copy=True)
    assert pointer(out) != a.ctypes.data and out.flags.writeable
    out[0] = 7
    assert a[0] == 0


def test_a_producers_buffer_error_propagates():
    with pytest.raises(BufferError, match="Cannot export readonly array"):
        np_ro = np.arange(3.0)
        np_ro.flags.writeable = False
        from_dlpack(OldProducer(np_ro))  # NumPy refuses a legacy export of read-only data


class _LostDevice:
    def __dlpack__(self, **kwargs):
        raise BufferError("device lost")

    def __dlpack_device__(self):
        raise BufferError("device lost")


def test_a_producers_buffer_error_about_its_device_is_the_cause_of_the_layers_refusal():
    # The producer's error is kept whole, as the cause of the refusal that
    # says what gets the data (the host, asked for).
    with pytest.raises(BufferError, match=r"_LostDevice\.__dlpack_device__ names no device .*device='cpu'") as refused:
        from_dlpack(_LostDevice())
    assert type(refused.value.__cause__) is BufferError and str(refused.value.__cause__) == "device lost"


def test_torchs_refusal_of_tensors_that_require_grad_propagates(torch):
    t = torch.ones(3, requires_grad=True)
    with pytest.raises(BufferError, match="detach"):
        from_dlpack(t)


class _FailingProducer:
    def __dlpack__(self, **kwargs):
        raise RuntimeError("device lost")

    def __dlpack_device__(self):
        return (1, 0)


def test_a_producers_other_errors_become_buffer_errors_naming_it():
    with pytest.raises(BufferError, match=r"_FailingProducer.__dlpack__ refused.*RuntimeError: device lost"):
        from_dlpack(_FailingProducer())


def test_an_object_without_dlpack_is_an_attribute_and_type_error():
    for bad in ([1, 2], 3.0, object()):
        with pytest.raises(AttributeError):
            from_dlpack(bad)
        with pytest.raises(TypeError, match="does not support DLPack"):
            from_dlpack(bad)
    assert issubclass(NotDLPackError, TypeError)


def test_an_unsupported_device_is_a_buffer_error():
    with pytest.raises(BufferError, match="CuPy and a working GPU"):
        from_dlpack(np.arange(3), device="cuda:0")
    with pytest.raises(ValueError, match="Accepted forms"):
        from_dlpack(np.arange(3), device="xpu")
    # A device DLPack names that no backend here reaches: what to do instead.
    with pytest.raises(BufferError, match="^no backend can hold an array on tpu:0: gpu_dlpack moves the memory of "
                       "the CPU and of CUDA and ROCm GPUs only. Ask the array's own library for a copy on the host"):
        from_dlpack(np.arange(3), device="tpu")


def test_copy_of_the_wrong_type_is_a_type_error():
    with pytest.raises(TypeError, match="copy must be"):
        from_dlpack(np.arange(3), copy="no")


def test_copy_is_judged_before_what_is_imported():
    with pytest.raises(TypeError, match="copy must be"):
        from_dlpack(object(), copy="no")  # not "does not support DLPack"
    a = np.arange(3.0)
    ref = weakref.ref(a)
    cap = a.__dlpack__(max_version=(1, 0))
    del a
    with pytest.raises(TypeError, match="copy must be"):
        from_dlpack(cap, copy="no", device="nowhere")  # not the device's ValueError
    gc.collect()
    assert ref() is None and capsule_name(cap) == "used_dltensor_versioned"


# -- capsule checks ----------------------------------------------------------

def test_raw_capsules_of_either_name_are_imported(torch):
    a = np.arange(3.0)
    for cap in (a.__dlpack__(), a.__dlpack__(max_version=(1, 0)), torch.arange(3.0).__dlpack__()):
        out = from_dlpack(cap)
        assert out.tolist() == [0, 1, 2]
        assert capsule_name(cap).startswith("used_")


def test_a_capsule_with_a_wrong_name_is_refused():
    import ctypes

    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    buf = ctypes.create_string_buffer(8)
    cap = new(ctypes.addressof(buf), b"not_dltensor", None)
    with pytest.raises(BufferError, match="'dltensor' or 'dltensor_versioned'"):
        from_dlpack(cap)


def test_a_versioned_major_above_1_is_a_buffer_error_after_the_deleter_runs():
    a = np.arange(3.0)
    ref = weakref.ref(a)
    cap = a.__dlpack__(max_version=(1, 0))
    managed(cap).version.major = 2
    del a
    assert ref() is not None  # the capsule keeps the array alive
    with pytest.raises(BufferError, match="2.x"):
        from_dlpack(cap)
    gc.collect()
    assert ref() is None  # the deleter ran: the array is freed
    assert capsule_name(cap) == "used_dltensor_versioned"
    del cap  # and the capsule's destructor does not free it twice


def test_null_strides_mean_compact_row_major():
    a = np.arange(12.0).reshape(3, 4)
    for cap in (a.__dlpack__(), a.__dlpack__(max_version=(1, 0))):
        managed(cap).dl_tensor.strides = None
        assert inspect(cap).strides is None
        out = from_dlpack(cap)
        assert out.tolist() == a.tolist() and out.strides == a.strides


def test_byte_offset_is_honoured():
    a = np.arange(10.0)
    cap = a[2:].__dlpack__(max_version=(1, 0))
    t = managed(cap).dl_tensor
    t.data -= 16
    t.byte_offset = 16
    assert inspect(cap).byte_offset == 16
    out = from_dlpack(cap)
    assert out.tolist() == list(range(2, 10)) and pointer(out) == a.ctypes.data + 16


@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (0, 2, 5)])
def test_zero_size_and_0d_arrays_work(shape, torch, jax):
    a = np.ones(shape)
    for x in (a, torch.ones(shape, dtype=torch.float64), jax.numpy.ones(shape)):
        out = from_dlpack(x)
        assert out.shape == shape and out.dtype == np.float64
        assert np.array_equal(out, a)
        out = from_dlpack(wrap(x).__dlpack__(max_version=(1, 0)))
        assert out.shape == shape


def test_an_unknown_dtype_code_is_a_buffer_error_and_the_capsule_is_freed():
    a = np.arange(3.0)
    ref = weakref.ref(a)
    cap = a.__dlpack__(max_version=(1, 0))
    managed(cap).dl_tensor.dtype.code = 99
    del a
    with pytest.raises(BufferError, match="code=99"):
        from_dlpack(cap)
    gc.collect()
    assert ref() is None


def test_vector_lanes_are_a_buffer_error():
    cap = np.arange(4.0).__dlpack__()
    managed(cap).dl_tensor.dtype.lanes = 4
    with pytest.raises(BufferError, match="lanes"):
        from_dlpack(cap)


# -- ownership ---------------------------------------------------------------

def test_the_capsule_is_renamed_used_and_the_deleter_runs_once_when_all_views_die():
    a = np.arange(6.0)
    ref = weakref.ref(a)
    cap = a.__dlpack__(max_version=(1, 0))
    del a
    out = from_dlpack(cap)
    assert capsule_name(cap) == "used_dltensor_versioned"
    view = out[2:]
    del out, cap
    gc.collect()
    assert ref() is not None  # a view is still alive
    assert view.tolist() == [2, 3, 4, 5]
    del view
    gc.collect()
    assert ref() is None


def test_a_capsule_consumed_twice_is_an_error_not_a_crash():
    cap = np.arange(3.0).__dlpack__()
    from_dlpack(cap)
    with pytest.raises(ConsumedCapsuleError, match="already consumed"):
        from_dlpack(cap)
    with pytest.raises(BufferError):
        from_dlpack(cap)
    with pytest.raises(ValueError):
        inspect(cap)


# -- read-only ---------------------------------------------------------------

def test_a_read_only_capsule_gives_a_non_writeable_array():
    ro = np.arange(3.0)
    ro.flags.writeable = False
    out = from_dlpack(ro.__dlpack__(max_version=(1, 0)))
    assert not out.flags.writeable and pointer(out) == ro.ctypes.data


def test_a_legacy_capsule_gives_a_non_writeable_array_unless_copied(torch):
    t = torch.arange(3.0)
    assert not from_dlpack(t.__dlpack__()).flags.writeable
    assert from_dlpack(t.__dlpack__(max_version=(1, 0))).flags.writeable
    copied = from_dlpack(t.__dlpack__(), copy=True)
    assert copied.flags.writeable and pointer(copied) != t.data_ptr()


def test_copy_true_always_gives_a_writeable_array(jax, torch):
    ro = np.arange(3.0)
    ro.flags.writeable = False
    for x in (ro, jax.numpy.arange(3.0), torch.arange(3.0), OldProducer(np.arange(3.0))):
        out = from_dlpack(x, copy=True)
        assert out.flags.writeable and out.tolist() == [0, 1, 2]


def test_copy_false_is_zero_copy_even_from_legacy_producers(jax):
    j = jax.numpy.arange(3.0)
    out = from_dlpack(j, copy=False)
    assert pointer(out) == pointer(j) and not out.flags.writeable


# -- zero-copy with each peer, both directions -------------------------------

def test_zero_copy_numpy_and_torch_both_ways(torch):
    a = np.arange(6.0).reshape(2, 3)
    t = torch.from_dlpack(wrap(a))
    assert t.data_ptr() == a.ctypes.data and t.tolist() == a.tolist()
    t2 = torch.arange(6.0, dtype=torch.float64).reshape(2, 3)[:, 1:]
    out = from_dlpack(t2)
    assert pointer(out) == t2.data_ptr() and out.tolist() == t2.tolist()
    assert out.strides == (24, 8)


def test_zero_copy_numpy_and_jax_both_ways(jax):
    a = aligned((4, 4))
    j = jax.dlpack.from_dlpack(wrap(a))
    assert j.unsafe_buffer_pointer() == a.ctypes.data and j.tolist() == a.tolist()
    j2 = jax.numpy.arange(8.0)
    out = from_dlpack(j2)
    assert pointer(out) == pointer(j2)


def test_zero_copy_numpy_and_array_api_strict_both_ways(xp_strict):
    a = np.arange(5.0)
    s = xp_strict.from_dlpack(wrap(a))
    assert s._array.ctypes.data == a.ctypes.data
    s2 = xp_strict.asarray([1.0, 2.0, 3.0])
    out = from_dlpack(s2)
    assert out.tolist() == [1, 2, 3] and pointer(out) == s2._array.ctypes.data


def test_numpy_from_dlpack_of_a_wrapped_torch_tensor_is_zero_copy(torch):
    t = torch.arange(4.0)
    out = np.from_dlpack(wrap(t))
    assert pointer(out) == t.data_ptr() and out.flags.writeable


def test_a_numpy_array_imports_as_a_writeable_view():
    a = np.arange(3.0)
    out = from_dlpack(a)
    assert pointer(out) == a.ctypes.data and out.flags.writeable and out is not a


@pytest.mark.parametrize("stream, error", [(5, ValueError), (0, ValueError), ("s", TypeError)])
def test_a_stream_for_a_host_import_must_be_none_or_minus_one(stream, error, torch):
    for x in (torch.arange(3.0), np.arange(3.0).__dlpack__()):
        with pytest.raises(error, match="-1"):
            from_dlpack(x, stream=stream)
    assert from_dlpack(torch.arange(3.0), stream=-1).tolist() == [0, 1, 2]


# -- NumPy arrays: the view shortcut and what it leaves to the exchange --------

@pytest.mark.parametrize("view", [
    lambda a: a[::2],
    lambda a: a[::-3],
    lambda a: a.reshape(3, 4)[:, 1],
    lambda a: a.reshape(3, 4).T,
    lambda a: np.lib.stride_tricks.as_strided(a, shape=(1, 3), strides=(3, 8)),  # odd stride, unused axis
], ids=["step", "negative", "column", "transposed", "odd-stride-on-a-length-1-axis"])
def test_a_strided_numpy_array_imports_as_a_writeable_view_of_its_memory(view):
    a = np.arange(12.0)
    x = view(a)
    out = from_dlpack(x)
    assert type(out) is np.ndarray and out is not x
    assert pointer(out) == pointer(x) and out.strides == x.strides and out.tolist() == x.tolist()
    assert out.flags.writeable
    out[0] = -1.0
    assert x.flat[0] == -1.0


# NumPy 2's own refusal, or the layer's where NumPy before 2.1 exports nothing versioned.
ODD_STRIDES = "strides which are a multiple of itemsize|are not multiples of the item size"


@pytest.mark.parametrize("x, says", [
    (np.zeros(2, ">f8"), "cannot export NumPy dtype >f8: DLPack has no byte order"),
    (np.zeros(4, ">f8")[::2], "cannot export NumPy dtype >f8: DLPack has no byte order"),
    (np.zeros(2, "M8[s]"), r"cannot export NumPy dtype datetime64\[s\]: DLPack carries booleans"),
    (np.zeros(4, "M8[s]")[::2], r"cannot export NumPy dtype datetime64\[s\]: DLPack carries booleans"),
    (np.zeros(2, object), "cannot export NumPy dtype object: DLPack carries booleans"),
    (np.zeros(4, object)[::2], "cannot export NumPy dtype object: DLPack carries booleans"),
    (np.zeros(3, [("a", "<f8"), ("b", "<i4")])["a"], ODD_STRIDES),
    (np.lib.stride_tricks.as_strided(np.arange(6.0), shape=(2, 3), strides=(4, 8)),
     ODD_STRIDES),
], ids=["byte-swapped", "byte-swapped-strided", "datetime64", "datetime64-strided", "object", "object-strided",
        "struct-field", "odd-stride"])
def test_a_numpy_array_dlpack_cannot_describe_is_refused_not_viewed(x, says):
    with pytest.raises(BufferError, match=says):
        from_dlpack(x)


@pytest.mark.parametrize("step", [1, 2])
def test_a_numpy_array_of_an_ml_dtypes_type_imports_zero_copy(step, ml_dtypes):
    x = np.array([1.5, -2.0, 3.25, 4.0], dtype=ml_dtypes.bfloat16)[::step]
    out = from_dlpack(x)
    assert out.dtype == ml_dtypes.bfloat16 and out.strides == x.strides
    assert pointer(out) == pointer(x) and out.astype(np.float32).tolist() == x.astype(np.float32).tolist()
    assert out.flags.writeable  # the exchange keeps what NumPy's own import of a NumPy array keeps
    out[0] = 8.0
    assert float(x[0]) == 8.0


_CPU_FORMS = {
    "none": {}, "'cpu'": {"device": "cpu"}, "(1, 0)": {"device": (1, 0)}, "Device": {"device": gpu_dlpack.Device("cpu")},
    "copy=False": {"copy": False}, "copy=True": {"copy": True},
}


@pytest.mark.parametrize("readonly", [False, True])
@pytest.mark.parametrize("form", list(_CPU_FORMS))
@pytest.mark.parametrize("name", ["bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3b11fnuz"])
def test_an_ml_dtypes_array_imports_alike_whatever_names_the_cpu(name, form, readonly, ml_dtypes):
    # device="cpu" (and (1, 0), a Device, copy=False: float8_e5m2's kind is
    # "f") asked NumPy's own __dlpack__, which exports no ml_dtypes type
    # before NumPy 2.5: a BufferError where the plain import is a view.
    x = np.array([1.5, -2.0, 3.0, 0.25], dtype=getattr(ml_dtypes, name))
    x.flags.writeable = not readonly
    kw = _CPU_FORMS[form]
    copied = kw.get("copy") is True
    for out in (from_dlpack(x, **kw), gpu_dlpack.convert(x, "numpy", **kw)):
        assert out.dtype == x.dtype and out.tobytes() == x.tobytes() and out.shape == x.shape
        assert (pointer(out) == pointer(x)) is not copied
        assert out.flags.writeable is (copied or not readonly)


class ArrayImpl:
    """Taken for JAX's array type by its name (its row: arrays immutable,
    "immutable-unflagged"), whose versioned capsules do not say READ_ONLY:
    no released JAX does both (0.10 exports legacy capsules, 0.12 flags
    them), but the row is what the layer applies, on every path."""

    def __init__(self):
        self.a = np.arange(3.0)

    _sharding = types.SimpleNamespace(_device=types.SimpleNamespace(platform="cpu"))

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kwargs):
        return self.a.__dlpack__(**kwargs)


ArrayImpl.__module__ = "jaxlib.xla_extension"

_READ_ONLY_ROW_IMPORTS = {
    "from_dlpack": lambda x: from_dlpack(x), "device='cpu'": lambda x: from_dlpack(x, device="cpu"),
    "Device": lambda x: from_dlpack(x, device=gpu_dlpack.Device("cpu:0")),
    "copy=False": lambda x: from_dlpack(x, copy=False), "convert": lambda x: gpu_dlpack.convert(x, "numpy"),
    "convert device='cpu'": lambda x: gpu_dlpack.convert(x, "numpy", device="cpu"),
    "wrap": lambda x: from_dlpack(wrap(x)),  # a consumer that asks for a versioned capsule, on any NumPy
}
_READ_ONLY_ROW_EXPORTS = {
    "export": lambda x: gpu_dlpack.export(x, max_version=(1, 0)),
    "export copy=False": lambda x: gpu_dlpack.export(x, max_version=(1, 0), copy=False),
    "wrap": lambda x: wrap(x).__dlpack__(max_version=(1, 0)),
    "wrap stream": lambda x: wrap(x).__dlpack__(max_version=(1, 3), stream=None),
}


@pytest.mark.parametrize("entry", list(_READ_ONLY_ROW_IMPORTS))
def test_a_producer_whose_row_says_its_arrays_are_immutable_imports_read_only_on_every_path(entry):
    # The compiled core's import (from_dlpack(j), device='cpu', convert) and
    # the general path's request (copy=False) handed such arrays over
    # writeable; only the Python host import applied the row.
    x = ArrayImpl()
    out = _READ_ONLY_ROW_IMPORTS[entry](x)
    assert pointer(out) == pointer(x.a) and out.tolist() == [0.0, 1.0, 2.0]
    assert not out.flags.writeable
    copied = from_dlpack(x, copy=True)
    assert copied.flags.writeable and pointer(copied) != pointer(x.a)


@pytest.mark.parametrize("entry", list(_READ_ONLY_ROW_EXPORTS))
def test_a_producer_whose_row_says_its_arrays_are_immutable_exports_read_only(entry):
    # The core passed on the producer's versioned capsule as it was.
    x = ArrayImpl()
    info = inspect(_READ_ONLY_ROW_EXPORTS[entry](x))
    assert info.readonly and info.data == pointer(x.a)
    with pytest.raises(gpu_dlpack.ReadOnlyError):
        gpu_dlpack.export(x)  # legacy: cannot say it


# -- torch tensors NumPy reads alone, and the others --------------------------

def test_torch_tensors_reach_numpy_zero_copy_whether_numpy_can_read_them_or_not(torch, ml_dtypes, monkeypatch):
    from gpu_dlpack import _import

    t = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)  # NumPy alone refuses it
    out = from_dlpack(t)
    assert out.dtype == ml_dtypes.bfloat16 and pointer(out) == t.data_ptr() and out.flags.writeable
    assert out.astype(np.float32).tolist() == [1.5, -2.0, 3.25]
    for dtype in (torch.float32, torch.int16, torch.uint16, torch.uint64, torch.bool, torch.complex64):
        t = torch.arange(3).to(dtype)
        out = from_dlpack(t)
        assert pointer(out) == t.data_ptr() and out.flags.writeable and out.tolist() == t.tolist()
        assert out.dtype == np.dtype(str(dtype).removeprefix("torch."))


@pytest.mark.parametrize("copy", [True, False])
def test_a_torch_bfloat16_tensor_lands_as_asked(copy, torch, ml_dtypes):
    t = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)
    out = from_dlpack(t, copy=copy)
    assert out.dtype == ml_dtypes.bfloat16 and out.astype(np.float32).tolist() == [1.5, -2.0, 3.25]
    assert (pointer(out) == t.data_ptr()) is not copy and out.flags.writeable


# -- what a producer is asked -------------------------------------------------

def test_host_data_is_never_asked_to_move_and_the_layer_makes_the_copy():
    a = np.arange(4.0)
    w = wrap(a)
    out = from_dlpack(w, copy=True)
    assert w.last_request == {"stream": None, "max_version": gpu_dlpack.DLPACK_VERSION, "dl_device": None, "copy": None}
    assert pointer(out) != a.ctypes.data and out.flags.writeable and out.tolist() == [0, 1, 2, 3]
    out = from_dlpack(w, copy=False, device="cpu")
    assert w.last_request == {"stream": None, "max_version": gpu_dlpack.DLPACK_VERSION, "dl_device": None, "copy": False}
    assert pointer(out) == a.ctypes.data


# -- device memory asked for on the CPU ---------------------------------------
#
# A producer of device memory that no backend owns, standing in over host
# memory (tests/capsules.py): it answers each request on the device asked for.

def test_device_memory_asked_for_the_cpu_is_moved_by_its_producer_once():
    p = KeywordDeviceProducer(device=(2, 0))
    out = from_dlpack(p, device="cpu")
    assert p.requests == [{"stream": None, "max_version": gpu_dlpack.DLPACK_VERSION, "dl_device": (1, 0), "copy": None}]
    assert out.tolist() == p.array.tolist() and pointer(out) == p.array.ctypes.data  # the producer's answer
    out = from_dlpack(p, device="cpu", copy=True)
    assert p.requests[-1] == {"stream": None, "max_version": gpu_dlpack.DLPACK_VERSION, "dl_device": (1, 0), "copy": True}
    assert pointer(out) == p.array.ctypes.data  # the producer made the copy: the layer makes no second one
    with pytest.raises(BufferError, match=r"copy=False, but exporting from cuda:0 to cpu needs a copy"):
        from_dlpack(p, device="cpu", copy=False)
    assert len(p.requests) == 2  # refused before the producer is asked


def test_a_producer_that_ignores_the_cpu_asked_for_is_refused_and_its_capsule_freed():
    p = KeywordDeviceProducer(device=(2, 0), answers=(2, 0))
    with pytest.raises(BufferError) as refused:
        from_dlpack(p, device="cpu")
    assert str(refused.value) == (
        "cannot move an array from cuda:0 to cpu (the producer ignored dl_device=(1, 0)). Ask for dl_device=None "
        "(the array's own device) or (1, 0) for the CPU where the data is host memory."
    )
    assert p.records[0].calls == 1


class _OldDeviceProducer:
    """Device memory from a producer that takes only ``stream``: it cannot move."""

    def __init__(self):
        self.records = []

    def __dlpack__(self, stream=None):
        capsule, record = make(np.arange(3.0), versioned=False, device=(2, 0))
        self.records.append(record)
        return capsule

    def __dlpack_device__(self):
        return (2, 0)


def test_device_memory_of_a_producer_that_cannot_move_it_needs_its_devices_backend():
    p = _OldDeviceProducer()
    with pytest.raises(BufferError, match=r"no backend can hold an array on cuda:0: gpu_dlpack needs CuPy"):
        from_dlpack(p, device="cpu")
    gc.collect()
    assert [r.calls for r in p.records] == [1]


# -- what a kernel requires (require_alignment, require_contiguous) -----------

def _offset(a, alignment, past):
    """A view of ``a``'s buffer starting ``past`` bytes after an ``alignment`` boundary."""
    raw = np.zeros(a.nbytes + 2 * alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment + past
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def test_data_that_meets_the_requirements_is_not_copied(torch):
    a = _offset(np.arange(12.0), 64, 0)
    for x in (a, torch.from_numpy(a), wrap(a)):
        out = from_dlpack(x, require_alignment=64, require_contiguous=True)
        assert pointer(out) == a.ctypes.data
    # an empty array and an axis of length 1 are C order whatever their strides
    for x in (np.zeros((0, 3))[:, ::2], np.arange(6.0).reshape(3, 2)[:1, :]):
        assert pointer(from_dlpack(x, require_contiguous=True)) == pointer(x)


@pytest.mark.parametrize("past", [8, 24, 56])
def test_unaligned_data_gets_one_aligned_copy(past, torch):
    a = _offset(np.arange(12.0), 64, past)
    for x in (a, torch.from_numpy(a)):
        out = from_dlpack(x, require_alignment=64)
        assert pointer(out) % 64 == 0 and pointer(out) != pointer(a)
        assert out.tolist() == a.tolist() and out.flags.writeable and out.flags.c_contiguous
    assert pointer(from_dlpack(a, require_alignment=8)) == pointer(a)  # 8 bytes suffice there


def test_a_layout_that_is_not_c_order_gets_a_compact_copy(torch, jax):
    base = np.arange(24.0).reshape(4, 6)
    t = torch.from_numpy(base)
    j = jax.numpy.asarray(base)
    for x, values in ((base.T, base.T), (base[:, ::2], base[:, ::2]), (base[::-1], base[::-1]),
                      (t.T, base.T), (t[:, ::2], base[:, ::2]), (j.T, base.T)):
        out = from_dlpack(x, require_contiguous=True)
        assert out.flags.c_contiguous and out.tolist() == values.tolist()


def test_copy_false_refuses_what_only_a_copy_meets():
    a = _offset(np.arange(4.0), 64, 8)
    with pytest.raises(gpu_dlpack.CopyRequiredError, match=r"copy=False, but require_alignment=64, and the data "
                       r"starts at 0x[0-9a-f]+, 8 bytes past a 64-byte boundary"):
        from_dlpack(a, require_alignment=64, copy=False)
    with pytest.raises(gpu_dlpack.CopyRequiredError, match=r"require_contiguous=True, and the data of shape "
                       r"\(2, 2\) has strides \(1, 2\) \(in elements\), not C order"):
        from_dlpack(np.arange(4.0).reshape(2, 2).T, require_contiguous=True, copy=False)
    # what meets them is shared, as copy=False asks
    ok = _offset(np.arange(4.0), 64, 0)
    assert pointer(from_dlpack(ok, require_alignment=64, require_contiguous=True, copy=False)) == pointer(ok)


def test_copy_true_with_requirements_is_one_fresh_copy_that_meets_them():
    a = _offset(np.arange(4.0), 128, 0)
    out = from_dlpack(a, require_alignment=128, copy=True)
    assert pointer(out) != pointer(a) and pointer(out) % 128 == 0 and out.tolist() == a.tolist()


@pytest.mark.parametrize("kw, error", [
    ({"require_alignment": -64}, ValueError), ({"require_alignment": True}, TypeError),
    ({"require_alignment": 64.0}, TypeError), ({"require_alignment": None}, TypeError),
    ({"require_contiguous": 1}, TypeError), ({"require_contiguous": None}, TypeError),
])
def test_a_requirement_that_is_no_requirement_is_refused(kw, error):
    with pytest.raises(error) as info:
        from_dlpack(np.arange(3.0), **kw)
    assert isinstance(info.value, gpu_dlpack.GpuDlpackError)
    with pytest.raises(error):
        gpu_dlpack.convert(np.arange(3.0), "numpy", **kw)


@pytest.mark.parametrize("lib", ["numpy", "numpy strided", "numpy read-only", "jax", "torch"])
def test_device_cpu_for_data_on_the_cpu_is_the_plain_import(lib, request):
    # The core takes device=CPU (the CPU's Device: convert's landing on the
    # host asks for it) as it takes no device, for data on the CPU: the same
    # memory, flags, dtype and shape as the plain import, and as "cpu".
    if lib.startswith("numpy"):
        x = np.arange(12.0)[::2] if lib == "numpy strided" else np.arange(6.0)
        if lib == "numpy read-only":
            x.flags.writeable = False
    else:
        mod = request.getfixturevalue(lib)
        x = mod.numpy.arange(6.0) if lib == "jax" else mod.arange(6.0)
    general = core.general("from_dlpack").__code__  # the Python function: the general path

    def enters_python(call):
        entered = []
        sys.setprofile(lambda frame, event, arg: event == "call" and entered.append(frame.f_code))
        try:
            return call(), general in entered
        finally:
            sys.setprofile(None)

    # The path of the plain import: the core's, but for a strided NumPy array
    # and where the core lays out no import (JAX on NumPy before 2.4).
    plain, plain_python = enters_python(lambda: from_dlpack(x))
    assert plain_python or lib != "numpy strided"
    for device in (gpu_dlpack.Device("cpu"), "cpu", (1, 0)):
        got, python = enters_python(lambda: from_dlpack(x, device=device))
        assert python is plain_python, device  # the same path as without a device
        assert type(got) is np.ndarray and got.ctypes.data == plain.ctypes.data == pointer(x)
        assert (got.flags.writeable, got.dtype, got.shape, got.strides) == (
            plain.flags.writeable, plain.dtype, plain.shape, plain.strides)
        assert got.tolist() == plain.tolist()
