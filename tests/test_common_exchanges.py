"""The common exchanges (a NumPy array or a torch tensor, default arguments)
obey every rule the general path does: same capsules, same flags, same
errors. These are the calls the benchmarks time, so each rule is checked on
the exact calls that are made fast."""

import ctypes
import struct
import weakref

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _capsule

from .helpers import refcount, released

VERSIONS = [(1, 0), (1, 1), (1, 2), (1, 7), (2, 0)]


def _exports(x):
    """Every way a consumer gets a capsule for ``x`` from gpu_dlpack."""
    w = gpu_dlpack.wrap(x)
    return {
        "export": lambda **kw: gpu_dlpack.export(x, **kw),
        "wrap": lambda **kw: w.__dlpack__(**kw),
    }


def _consume(cap):
    """Import a capsule with NumPy (through gpu_dlpack, which takes capsules)."""
    return gpu_dlpack.from_dlpack(cap)


# --- export ------------------------------------------------------------------

@pytest.mark.parametrize("how", ["export", "wrap"])
@pytest.mark.parametrize("max_version", VERSIONS)
def test_versioned_export_carries_dlpack_version_and_no_flags(how, max_version):
    x = np.arange(6.0).reshape(2, 3)
    for _ in range(3):  # the same request again gives the same capsule
        cap = _exports(x)[how](max_version=max_version)
        info = gpu_dlpack.inspect(cap)
        assert info.name == "dltensor_versioned"
        assert info.version == gpu_dlpack.DLPACK_VERSION
        assert info.flags == 0
        assert info.data == x.ctypes.data and info.shape == (2, 3) and info.strides == (3, 1)
        out = _consume(cap)
        assert out.ctypes.data == x.ctypes.data and out.flags.writeable


@pytest.mark.parametrize("how", ["export", "wrap"])
def test_legacy_export_of_a_writeable_array_is_numpys_capsule(how):
    x = np.arange(4, dtype=np.int32)
    cap = _exports(x)[how]()
    info = gpu_dlpack.inspect(cap)
    assert info.name == "dltensor" and info.version is None and info.data == x.ctypes.data


@pytest.mark.parametrize("how", ["export", "wrap"])
def test_read_only_array_exports_versioned_with_read_only(how):
    x = np.arange(3.0)
    x.flags.writeable = False
    info = gpu_dlpack.inspect(_exports(x)[how](max_version=(1, 0)))
    assert info.readonly and info.version == gpu_dlpack.DLPACK_VERSION


@pytest.mark.parametrize("how", ["export", "wrap"])
def test_read_only_array_refuses_a_legacy_export_with_the_remedy(how):
    x = np.arange(3.0)
    x.flags.writeable = False
    with pytest.raises(BufferError, match="max_version=\\(1, 0\\), or pass copy=True"):
        _exports(x)[how]()


def test_wrap_readonly_exports_read_only_from_a_writeable_array():
    x = np.arange(3.0)
    info = gpu_dlpack.inspect(gpu_dlpack.wrap(x, readonly=True).__dlpack__(max_version=(1, 0)))
    assert info.readonly and x.flags.writeable


@pytest.mark.parametrize("how", ["export", "wrap"])
@pytest.mark.parametrize("bad", [(1.0, 0), (True, 0), (1, False), [1, 0], (1,), (1, 0, 0), "1.0", 1])
def test_max_version_not_a_tuple_of_two_ints_is_a_type_error(how, bad):
    x = np.arange(3.0)
    for _ in range(2):
        with pytest.raises(TypeError, match="tuple of two ints"):
            _exports(x)[how](max_version=bad)


@pytest.mark.parametrize("how", ["export", "wrap"])
def test_floor_applies_to_a_max_version_accepted_before(how, floor):
    x = np.arange(3.0)
    asked = (1, 0)
    gpu_dlpack.inspect(_exports(x)[how](max_version=asked))
    gpu_dlpack.set_min_dlpack_version((1, 1))
    with pytest.raises(BufferError, match="below \\(1, 1\\)"):
        _exports(x)[how](max_version=asked)
    gpu_dlpack.set_min_dlpack_version((0, 5))
    assert gpu_dlpack.inspect(_exports(x)[how](max_version=asked)).versioned


@pytest.mark.parametrize("how", ["export", "wrap"])
@pytest.mark.parametrize("dtype", [">f8", np.longdouble, object, "M8[s]", "U2"])
def test_dtypes_dlpack_cannot_describe_get_gpu_dlpacks_message(how, dtype):
    x = np.zeros(2, dtype=dtype)
    for kw in ({}, {"max_version": (1, 0)}):
        with pytest.raises(BufferError, match="cannot export NumPy dtype"):
            _exports(x)[how](**kw)


@pytest.mark.parametrize("how", ["export", "wrap"])
def test_bfloat16_travels_with_its_dlpack_code(how, ml_dtypes):
    x = np.arange(4).astype(ml_dtypes.bfloat16)
    for kw in ({}, {"max_version": (1, 0)}):
        info = gpu_dlpack.inspect(_exports(x)[how](**kw))
        assert info.dl_dtype == (4, 16, 1) and info.data == x.ctypes.data


@pytest.mark.parametrize("how", ["export", "wrap"])
def test_float8_needs_a_consumer_of_major_version_1(how, ml_dtypes):
    x = np.zeros(4, dtype=ml_dtypes.float8_e4m3fn)
    with pytest.raises(BufferError, match="needs DLPack 1.1"):
        _exports(x)[how](max_version=(0, 8))
    assert gpu_dlpack.inspect(_exports(x)[how](max_version=(1, 0))).dl_dtype == (10, 8, 1)


@pytest.mark.parametrize("how", ["export", "wrap"])
def test_host_streams_are_checked(how):
    x = np.arange(3.0)
    assert gpu_dlpack.inspect(_exports(x)[how](stream=-1, max_version=(1, 0))).versioned
    with pytest.raises(ValueError, match="stream=5 is not valid"):
        _exports(x)[how](stream=5, max_version=(1, 0))


def test_subclass_of_ndarray_exports_like_an_ndarray():
    x = np.arange(3.0).view(np.matrix)
    info = gpu_dlpack.inspect(gpu_dlpack.export(x, max_version=(1, 0)))
    assert info.version == gpu_dlpack.DLPACK_VERSION and info.data == x.ctypes.data


def test_a_torch_tensor_its_exchange_api_cannot_describe_is_wrapped_and_refused_by_torch_at_export(torch):
    # A sparse tensor: wrap() takes it as any producer, and torch's refusal
    # comes when a consumer asks (a BufferError, as the standard says).
    w = gpu_dlpack.wrap(torch.eye(3).to_sparse())
    assert w.__dlpack_device__() == (1, 0) and w.last_request is None
    with pytest.raises(BufferError, match="layout other than torch.strided"):
        w.__dlpack__(max_version=(1, 0))
    assert w.last_request == {"stream": None, "max_version": (1, 0), "dl_device": None, "copy": None}


def test_wrap_records_what_the_consumer_asked(torch):
    w = gpu_dlpack.wrap(np.arange(3.0))
    assert w.last_request is None
    torch.from_dlpack(w)
    assert w.last_request == {"stream": None, "max_version": (1, 0), "dl_device": None, "copy": None}
    np.from_dlpack(w, copy=True)
    assert w.last_request == {"stream": None, "max_version": (1, 0), "dl_device": None, "copy": True}


def _numpy_exports_versioned() -> bool:
    try:
        np.arange(1.0).__dlpack__(max_version=(1, 0))
    except TypeError:  # NumPy before 2.1: no max_version (the layer adapts its legacy capsule)
        return False
    return True


def test_the_plain_requests_of_new_wrappers_are_made_once():
    # A consumer that asks each new wrapper the same (torch's from_dlpack,
    # its max_version a constant) makes no request per call: the wrappers
    # hold one tuple. Each records its own request all the same.
    x = np.arange(3.0)
    a, b = gpu_dlpack.wrap(x), gpu_dlpack.wrap(x)
    a.__dlpack__()
    b.__dlpack__()
    assert a._request is b._request and a.last_request == {"stream": None, "max_version": None, "dl_device": None,
                                                           "copy": None}
    if not _numpy_exports_versioned():
        pytest.skip(f"NumPy {np.__version__} exports no versioned capsule: the general path makes it")
    asked = (1, 0)
    gpu_dlpack.wrap(x).__dlpack__(max_version=asked)  # the verdict on asked, made once (the general path)
    a, b, c = gpu_dlpack.wrap(x), gpu_dlpack.wrap(x), gpu_dlpack.wrap(x)
    a.__dlpack__(max_version=asked)
    b.__dlpack__(max_version=asked)
    c.__dlpack__(max_version=tuple([1, 0]))  # an equal tuple: its own request (the same object is recorded)
    assert a._request is b._request and a._request[1] is asked and c._request[1] is not asked
    assert a.last_request == c.last_request == {"stream": None, "max_version": (1, 0), "dl_device": None, "copy": None}


def test_wrap_reports_the_device_of_what_it_wraps(torch):
    assert gpu_dlpack.wrap(np.arange(3)).__dlpack_device__() == (1, 0)
    assert gpu_dlpack.wrap(torch.arange(3)).__dlpack_device__() == (1, 0)


def test_wrap_refuses_a_non_bool_readonly():
    with pytest.raises(TypeError, match="readonly must be True or False"):
        gpu_dlpack.wrap(np.arange(3), readonly=1)


def test_wrap_refuses_an_object_without_dlpack():
    with pytest.raises(TypeError, match="does not support DLPack"):
        gpu_dlpack.wrap([1, 2, 3])


# --- import ------------------------------------------------------------------

def test_import_of_a_torch_tensor_is_zero_copy_and_writeable(torch):
    t = torch.arange(6.0).reshape(2, 3)
    for _ in range(3):
        a = gpu_dlpack.from_dlpack(t)
        assert a.ctypes.data == t.data_ptr() and a.flags.writeable and a.shape == (2, 3)
        a[0, 0] = 42
        assert t[0, 0] == 42


def test_import_of_a_jax_array_is_zero_copy_and_read_only(jax):
    j = jax.numpy.arange(4.0)
    a = gpu_dlpack.from_dlpack(j)
    assert a.ctypes.data == j.unsafe_buffer_pointer() and not a.flags.writeable


def test_import_of_a_numpy_array_is_a_view_that_keeps_read_only():
    x = np.arange(3.0)
    a = gpu_dlpack.from_dlpack(x)
    assert a.ctypes.data == x.ctypes.data and a.flags.writeable and type(a) is np.ndarray
    x.flags.writeable = False
    assert not gpu_dlpack.from_dlpack(x).flags.writeable


def test_import_of_a_torch_tensor_that_requires_grad_is_refused(torch):
    t = torch.arange(3.0, requires_grad=True)
    with pytest.raises(BufferError, match="require gradient"):
        gpu_dlpack.from_dlpack(t)


class _Producer:
    """A host producer whose capsule is made by NumPy and then altered."""

    def __init__(self, patch=None, device=(1, 0), result=None, raises=None, legacy=False):
        self.x = np.arange(6.0)
        self.patch, self.device, self.result, self.raises, self.legacy = patch, device, result, raises, legacy
        self.deleted = 0

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if self.raises is not None:
            raise self.raises
        if self.result is not None:
            return self.result
        cap = self.x.__dlpack__() if self.legacy else self.x.__dlpack__(max_version=(1, 0))
        if self.patch:
            versioned = not self.legacy
            ptr = _capsule.pointer(cap, versioned)
            self.patch(ptr + (32 if versioned else 0), ptr)
        return cap

    def __dlpack_device__(self):
        return self.device


def _poke(addr, fmt, *values):
    data = struct.pack(fmt, *values)
    ctypes.memmove(addr, data, len(data))


@pytest.mark.parametrize("patch, match", [
    (lambda t, m: _poke(t + 24, "<Q", 0), "shape is NULL"),
    (lambda t, m: _poke(t + 16, "<i", -1), "ndim=-1"),
    (lambda t, m: _poke(t + 16, "<i", 65), "ndim=65"),
    (lambda t, m: _poke(t, "<Q", 0), "data is NULL"),
    (lambda t, m: _poke(m, "<II", 2, 0), "DLPack 2.x capsule"),
    # The capsule on cuda:0 where __dlpack_device__ says the CPU: the producer contradicts itself.
    (lambda t, m: _poke(t + 8, "<i", 2), "says its array is on cpu, but its capsule holds memory on cuda:0"),
    (lambda t, m: _poke(t + 20, "<BBH", 2, 64, 2), "lanes"),
])
def test_import_refuses_a_malformed_capsule_and_frees_it(patch, match):
    p = _Producer(patch)
    before = refcount(p.x)
    with pytest.raises(BufferError, match=match) as caught:
        gpu_dlpack.from_dlpack(p)
    # The capsule is still referenced from the traceback, yet its deleter
    # already ran: NumPy's deleter lets go of the exported array.
    after = refcount(p.x)
    assert caught.traceback and after == before
    x = weakref.ref(p.x)
    del p, caught
    assert released(x)


def test_import_of_a_legacy_capsule_is_read_only():
    p = _Producer(legacy=True)
    a = gpu_dlpack.from_dlpack(p)
    assert a.ctypes.data == p.x.ctypes.data and not a.flags.writeable


def test_import_of_a_read_only_capsule_is_read_only():
    p = _Producer(lambda t, m: _poke(m + 24, "<Q", 1))
    assert not gpu_dlpack.from_dlpack(p).flags.writeable


def test_import_refuses_a_consumed_capsule():
    cap = np.arange(3.0).__dlpack__(max_version=(1, 0))
    gpu_dlpack.from_dlpack(cap)
    with pytest.raises(BufferError, match="already consumed"):
        gpu_dlpack.from_dlpack(_Producer(result=cap))


@pytest.mark.parametrize("result", [None, 3, "dltensor"])
def test_import_refuses_a_producer_that_returns_no_capsule(result):
    p = _Producer(result=result)
    if result is None:
        p.raises = RuntimeError("boom")
        with pytest.raises(BufferError, match="refused the export: RuntimeError: boom"):
            gpu_dlpack.from_dlpack(p)
    else:
        with pytest.raises(TypeError, match=r"__dlpack__\(\) returned \w+, not a DLPack capsule"):
            gpu_dlpack.from_dlpack(p)


def test_import_passes_on_a_producers_buffer_error():
    p = _Producer(raises=BufferError("no export today"))
    with pytest.raises(BufferError, match="no export today"):
        gpu_dlpack.from_dlpack(p)


@pytest.mark.parametrize("device", [(True, 0), (1, False), (1, 0.0), (1, -1), (0, 0), (1,)])
def test_import_refuses_a_device_that_is_not_a_dlpack_device(device):
    with pytest.raises(ValueError, match=r"__dlpack_device__\(\) returned .+, which names no DLPack device"):
        gpu_dlpack.from_dlpack(_Producer(device=device))


def test_import_from_an_old_producer_retries_without_new_keywords():
    class Old:
        def __init__(self):
            self.x = np.arange(3.0)

        def __dlpack__(self, stream=None):
            return self.x.__dlpack__()

        def __dlpack_device__(self):
            return (1, 0)

    for _ in range(2):
        o = Old()
        a = gpu_dlpack.from_dlpack(o)
        assert a.ctypes.data == o.x.ctypes.data and not a.flags.writeable


@pytest.mark.parametrize("how", ["export", "wrap"])
def test_a_0x_consumer_gets_no_dtype_its_version_cannot_describe(how):
    x = np.array([True, False])
    with pytest.raises(BufferError, match="needs DLPack 0.8"):
        _exports(x)[how](max_version=(0, 5))
    assert gpu_dlpack.inspect(_exports(x)[how](max_version=(0, 8))).name == "dltensor"


def test_import_of_a_torch_subclass_asks_its_dlpack_device(torch):
    class Tagged(torch.Tensor):
        pass

    t = torch.arange(3.0).as_subclass(Tagged)
    a = gpu_dlpack.from_dlpack(t)
    assert a.ctypes.data == t.data_ptr()


def test_import_of_a_legacy_producer_after_a_versioned_one_of_the_same_type():
    # The kind a producer type gave last time is only a guess: names are checked.
    p = _Producer(legacy=True)
    assert not gpu_dlpack.from_dlpack(p).flags.writeable
    p = _Producer()
    assert gpu_dlpack.from_dlpack(p).flags.writeable
    p = _Producer(legacy=True)
    assert not gpu_dlpack.from_dlpack(p).flags.writeable


@pytest.mark.parametrize("pair, dlpack", [((1, 0), (1, 0)), ((2, 1), (2, 1)), ((np.int64(1), 0), (1, 0))])
def test_a_device_pair_reads_the_same_each_time(pair, dlpack):
    for _ in range(2):
        assert gpu_dlpack.Device(pair).dlpack == dlpack


@pytest.mark.parametrize("pair", [(True, 0), (1, False), (1, 0.0), (1.0, 0), (1, -1), (0, 0)])
def test_a_pair_that_names_no_device_is_refused_each_time(pair):
    gpu_dlpack.Device((1, 0))
    for _ in range(2):
        with pytest.raises(ValueError, match="cannot read a device"):
            gpu_dlpack.Device(pair)


# --- inspect -----------------------------------------------------------------

def test_inspect_reads_every_field_without_consuming():
    x = np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2]
    for cap, name, version in ((x.__dlpack__(max_version=(1, 0)), "dltensor_versioned", (1, 0)),
                               (x.__dlpack__(), "dltensor", None)):
        info = gpu_dlpack.inspect(cap)
        assert (info.name, info.version, info.shape, info.strides) == (name, version, (3, 2), (4, 2))
        assert info.dl_dtype == (0, 16, 1) and info.device == gpu_dlpack.Device("cpu")
        assert info.data + info.byte_offset == x.ctypes.data
        assert gpu_dlpack.inspect(cap) == info  # still unconsumed


def test_inspect_refuses_a_consumed_capsule_and_a_non_capsule():
    cap = np.arange(3.0).__dlpack__(max_version=(1, 0))
    gpu_dlpack.from_dlpack(cap)
    with pytest.raises(gpu_dlpack.ConsumedCapsuleError):
        gpu_dlpack.inspect(cap)
    with pytest.raises(TypeError, match="expected a PyCapsule named 'dltensor' or 'dltensor_versioned'; got ndarray"):
        gpu_dlpack.inspect(np.arange(3))


def test_inspect_gives_a_frozen_record():
    info = gpu_dlpack.inspect(np.arange(3.0).__dlpack__())
    with pytest.raises(AttributeError):
        info.flags = 1
    assert info == gpu_dlpack.CapsuleInfo(**vars(info)) and hash(info) == hash(gpu_dlpack.CapsuleInfo(**vars(info)))
