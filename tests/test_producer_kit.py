"""The producer kit: a library's own class exports correct DLPack from one
hook (``gpu_dlpack.Producer``), memory C code owns is named by a pointer
(``gpu_dlpack.from_pointer``), ``export(..., readonly=)``, and no recipe
recurses, whatever other protocols the class speaks. Each worked example
is consumed by NumPy, PyTorch and JAX."""

import ctypes
import gc
import sys
import traceback
import weakref

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _convert

from .helpers import aligned, refcount, released

libc = ctypes.CDLL(None)
libc.aligned_alloc.restype = ctypes.c_void_p
libc.aligned_alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]


# -- the worked examples ---------------------------------------------------------

class Samples(gpu_dlpack.Producer):
    """A pure-Python class of a library: it keeps its data in a NumPy array
    and names it; gpu_dlpack does the protocol."""

    def __init__(self, values, readonly=False):
        self._data = aligned((len(values),), np.float64)
        self._data[:] = values
        if readonly:
            self._data.flags.writeable = False

    def dlpack_memory(self):
        return self._data


FREED = []


class CBuffer(gpu_dlpack.Producer):
    """Memory that C allocates and frees (aligned_alloc and free): named by
    its pointer, kept alive by the object until the last consumer lets go."""

    def __init__(self, values, readonly=False):
        self.n, self.readonly = len(values), readonly
        # C11: the size a multiple of the alignment (ASan returns NULL otherwise).
        self.ptr = libc.aligned_alloc(64, -(-8 * self.n // 64) * 64)
        assert self.ptr, "aligned_alloc failed"
        ctypes.memmove(self.ptr, np.asarray(values, np.float64).ctypes.data, 8 * self.n)

    def dlpack_memory(self):
        return gpu_dlpack.from_pointer(self.ptr, (self.n,), np.float64, owner=self, readonly=self.readonly)

    def __del__(self):
        FREED.append(self.ptr)
        libc.free(self.ptr)


def _memory(producer):
    return producer._data.ctypes.data if isinstance(producer, Samples) else producer.ptr


EXAMPLES = [Samples, CBuffer]


def _consumers(torch, jax):
    return {
        "numpy": (np.from_dlpack, lambda a: a.ctypes.data),
        "torch": (torch.from_dlpack, lambda t: t.data_ptr()),
        "jax": (jax.numpy.from_dlpack, lambda j: j.unsafe_buffer_pointer()),
    }


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("consumer", ["numpy", "torch", "jax"])
def test_a_worked_example_is_taken_zero_copy_with_its_values(example, consumer, torch, jax):
    producer = example([1.0, 2.0, 3.0])
    take, where = _consumers(torch, jax)[consumer]
    out = take(producer)
    assert [float(v) for v in out.tolist()] == [1.0, 2.0, 3.0]
    assert where(out) == _memory(producer)
    assert producer.__dlpack_device__() == (1, 0)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda c: c.__name__)
def test_read_only_memory_is_read_only_where_the_consumer_honours_it(example, torch, jax):
    producer = example([1.0, 2.0], readonly=True)
    a = np.from_dlpack(producer)  # NumPy honours READ_ONLY
    assert not a.flags.writeable and a.ctypes.data == _memory(producer)
    info = gpu_dlpack.inspect(producer.__dlpack__(max_version=(1, 0)))
    assert info.readonly and info.data == _memory(producer)  # what torch is given (it ignores the flag)
    if "legacy-only" in _convert.consumer_of("jax").faults:
        with pytest.raises(gpu_dlpack.ReadOnlyError):  # JAX asks for a legacy capsule, which cannot say it
            jax.numpy.from_dlpack(producer)
    else:  # from 0.12 it asks for a versioned one; its arrays are immutable
        j = jax.numpy.from_dlpack(producer)
        assert j.tolist() == [1.0, 2.0] and j.unsafe_buffer_pointer() == _memory(producer)


@pytest.mark.parametrize("consumer", ["numpy", "torch", "jax", "gpu_dlpack"])
def test_c_memory_is_freed_once_when_the_last_consumer_lets_go(consumer, torch, jax):
    FREED.clear()
    producer = CBuffer([4.0, 5.0])
    ptr = producer.ptr
    take = gpu_dlpack.from_dlpack if consumer == "gpu_dlpack" else _consumers(torch, jax)[consumer][0]
    out = take(producer)
    del producer
    gc.collect()
    # (FREED may hold memory of an earlier test's producers, collected now.)
    assert ptr not in FREED  # the consumer still holds the memory
    assert [float(v) for v in out.tolist()] == [4.0, 5.0]
    del out
    for _ in range(3):
        gc.collect()
    assert FREED.count(ptr) == 1


def test_an_unconsumed_capsule_frees_the_c_memory_once_too():
    FREED.clear()
    producer = CBuffer([1.0])
    ptr = producer.ptr
    cap = producer.__dlpack__(max_version=(1, 0))
    del producer
    gc.collect()
    assert ptr not in FREED
    del cap
    gc.collect()
    assert FREED.count(ptr) == 1


def test_the_producer_follows_every_rule_of_the_layer():
    producer = Samples([1.0, 2.0])
    # versions: legacy, versioned with the layer's version, the floor
    assert gpu_dlpack.inspect(producer.__dlpack__()).name == "dltensor"
    assert gpu_dlpack.inspect(producer.__dlpack__(max_version=(1, 0))).version == gpu_dlpack.DLPACK_VERSION
    with pytest.raises(gpu_dlpack.DLPackVersionError):
        producer.__dlpack__(max_version=(0, 4))
    # copies flagged, streams checked, devices reached or refused
    info = gpu_dlpack.inspect(producer.__dlpack__(max_version=(1, 0), copy=True))
    assert info.is_copied and info.data != _memory(producer)
    with pytest.raises(gpu_dlpack.InvalidStreamError):
        producer.__dlpack__(stream=5)
    assert gpu_dlpack.inspect(producer.__dlpack__(dl_device=(1, 0), max_version=(1, 0))).data == _memory(producer)
    with pytest.raises(TypeError):
        producer.__dlpack__(1)  # keywords only, as the standard's signature says


def test_the_producer_serves_a_ctypes_structure():
    # A metaclass of its own (ctypes'): the mixin has none, so they combine.
    class Pair(ctypes.Structure, gpu_dlpack.Producer):
        _fields_ = [("a", ctypes.c_double), ("b", ctypes.c_double)]

        def dlpack_memory(self):
            return gpu_dlpack.from_pointer(ctypes.addressof(self), (2,), np.float64, owner=self)

    p = Pair(1.5, 2.5)
    a = np.from_dlpack(p)
    assert a.tolist() == [1.5, 2.5] and a.ctypes.data == ctypes.addressof(p)
    w = gpu_dlpack.from_dlpack(p)  # writeable on any NumPy (before 2.1 NumPy imports legacy capsules read-only)
    w[0] = 9.0
    assert p.a == 9.0


def test_a_producer_that_names_no_memory_says_what_to_define():
    class Nameless(gpu_dlpack.Producer):
        pass

    with pytest.raises(NotImplementedError, match=r"define Nameless.dlpack_memory\(self\)"):
        np.from_dlpack(Nameless())


def test_the_mixin_adds_no_state():
    class Slotted(gpu_dlpack.Producer):
        __slots__ = ("data",)

        def __init__(self):
            self.data = np.arange(3.0)

        def dlpack_memory(self):
            return self.data

    s = Slotted()
    assert not hasattr(s, "__dict__") and np.from_dlpack(s).tolist() == [0.0, 1.0, 2.0]


# -- from_pointer --------------------------------------------------------------------

def test_from_pointer_describes_strided_memory_in_elements(torch):
    base = np.arange(12, dtype=np.int32).reshape(3, 4)
    p = gpu_dlpack.from_pointer(base.ctypes.data, (3, 2), "int32", strides=(4, 2), owner=base)
    a = np.from_dlpack(p)
    assert a.tolist() == base[:, ::2].tolist() and a.ctypes.data == base.ctypes.data
    t = torch.from_dlpack(p)
    assert t.stride() == (4, 2) and t.data_ptr() == base.ctypes.data


def test_from_pointer_carries_a_type_numpy_holds_only_with_ml_dtypes(ml_dtypes, torch):
    base = np.array([1.0, 2.5], ml_dtypes.bfloat16)
    p = gpu_dlpack.from_pointer(base.ctypes.data, (2,), ml_dtypes.bfloat16, owner=base)
    info = gpu_dlpack.inspect(p.__dlpack__(max_version=(1, 0)))
    assert info.dl_dtype == (4, 16, 1) and info.dtype == ml_dtypes.bfloat16
    t = torch.from_dlpack(p)
    assert t.dtype == torch.bfloat16 and t.tolist() == [1.0, 2.5] and t.data_ptr() == base.ctypes.data


def test_from_pointer_keeps_its_owner_alive_until_the_consumer_lets_go():
    class Owner:
        pass

    owner = Owner()
    ref = weakref.ref(owner)
    buf = np.arange(4.0)
    a = np.from_dlpack(gpu_dlpack.from_pointer(buf.ctypes.data, (4,), np.float64, owner=owner))
    del owner
    assert not released(ref)
    del a
    assert released(ref)


@pytest.mark.parametrize(
    "device, dl",
    [("cuda:0", (2, 0)), ("cuda_host", (3, 0)), ("cuda_managed", (13, 0)), ((2, 1), (2, 1))],
)
def test_from_pointer_labels_memory_with_its_device(device, dl):
    # Host memory stands in for device memory: the layer reads only the pointer.
    buf = np.arange(6.0)
    p = gpu_dlpack.from_pointer(buf.ctypes.data, (2, 3), np.float64, device=device, owner=buf)
    info = gpu_dlpack.inspect(p.__dlpack__(max_version=(1, 0)))
    assert info.device.dlpack == dl and info.data == buf.ctypes.data and info.shape == (2, 3)
    assert info.strides == (3, 1) and not info.readonly
    ro = gpu_dlpack.from_pointer(buf.ctypes.data, (6,), np.float64, device=device, readonly=True)
    assert gpu_dlpack.inspect(ro.__dlpack__(max_version=(1, 0))).readonly
    with pytest.raises(gpu_dlpack.ReadOnlyError):
        ro.__dlpack__()


def test_the_consumer_stream_waits_for_the_stream_named_with_the_pointer(monkeypatch):
    calls = []
    monkeypatch.setattr("gpu_dlpack._handoff.handoff", lambda *a: calls.append(a) or True)
    buf = np.arange(3.0)
    p = gpu_dlpack.from_pointer(buf.ctypes.data, (3,), np.float64, device="cuda:0", stream=7, owner=buf)
    p.__dlpack__(stream=99, max_version=(1, 0))
    assert calls == [(7, 99, 0)]
    with pytest.raises(gpu_dlpack.InvalidStreamError):
        gpu_dlpack.from_pointer(buf.ctypes.data, (3,), np.float64, stream=7)  # host memory has no streams


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        (("0x10", (3,), np.float32), {}, TypeError, "ptr must be an int"),
        ((-8, (3,), np.float32), {}, ValueError, "ptr=-8"),
        ((0, (3,), np.float32), {}, ValueError, "NULL"),
        ((16, 3, np.float32), {}, TypeError, "shape must be a sequence of ints"),
        ((16, (2, -1), np.float32), {}, ValueError, "no dimension is negative"),
        ((16, (3,), "no such type"), {}, ValueError, "dtype="),
        ((16, (3,), np.float32), {"strides": (1, 1)}, ValueError, "one per dimension"),
        ((16, (3,), np.float32), {"readonly": 1}, TypeError, "readonly must be True or False"),
        ((16, (3,), "U1"), {}, BufferError, "cannot export NumPy dtype"),
        ((16, (3,), np.float32), {"device": "nowhere"}, ValueError, "cannot read a device"),
    ],
)
def test_from_pointer_refuses_what_cannot_describe_memory(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        gpu_dlpack.from_pointer(*args, **kwargs)


@pytest.mark.parametrize("device", ["cpu", "cuda:0", "cuda_host"])
@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((2**64, (2,), np.float64), {}, "an address is below 2"),
        ((2**70, (2,), np.float64), {}, "an address is below 2"),
        ((4096, (2**63,), np.float64), {}, "each dimension is below 2"),
        ((4096, (2**63, 0), np.float64), {}, "each dimension is below 2"),
        ((4096, (2**62,), np.float64), {}, "hold more than 2"),
        ((4096, (2**32, 2**32), np.float64), {}, "hold more than 2"),
        ((4096, (2,), np.float64), {"strides": (2**60,)}, "each step of 8-byte elements"),
        ((4096, (2,), np.float64), {"strides": (2**63,)}, "each step of 8-byte elements"),
        ((4096, (2,), np.float64), {"strides": (-(2**63),)}, "each step of 8-byte elements"),
        ((4096, (3,), np.float64), {"strides": (-(2**59),)}, "outside the 64-bit address space"),
        ((2**64 - 8, (2,), np.float64), {}, "outside the 64-bit address space"),
    ],
)
def test_from_pointer_refuses_numbers_past_64_bits_as_a_value_error(args, kwargs, match, device):
    # NumPy's OverflowError, a type from_pointer does not document, came
    # out of the host array (and, for device memory, a BufferError of the
    # first export).
    with pytest.raises(ValueError, match=match) as err:
        gpu_dlpack.from_pointer(*args, device=device, **kwargs)
    assert isinstance(err.value, ValueError) and isinstance(err.value, gpu_dlpack.GpuDlpackError)
    assert str(err.value).startswith("from_pointer: ")


def test_from_pointer_takes_the_largest_numbers_that_fit():
    buf = np.arange(4.0)
    p = buf.ctypes.data
    # A broadcast over one element, and the highest stride an int64 counts.
    assert np.from_dlpack(gpu_dlpack.from_pointer(p, (2**40,), np.float64, strides=(0,))).shape == (2**40,)
    one = gpu_dlpack.from_pointer(p, (1,), np.float64, strides=((2**63 - 1) // 8,))
    assert np.from_dlpack(one).tolist() == [0.0]
    assert np.from_dlpack(gpu_dlpack.from_pointer(p + 24, (4,), np.float64, strides=(-1,))).tolist() == [
        3.0, 2.0, 1.0, 0.0]


def test_from_pointer_in_c_order_lends_numpy_no_strides_entry():
    # NumPy 2.4.6 leaks a reference to None for each "strides": None of an
    # __array_interface__ it reads: one per from_pointer of host memory.
    from gpu_dlpack import _capsule

    buf = np.arange(6.0)
    seen = []
    real = _capsule.Held.__init__

    def watch(self, interface, owner):
        seen.append(dict(interface))
        real(self, interface, owner)

    _capsule.Held.__init__ = watch
    try:
        gpu_dlpack.from_pointer(buf.ctypes.data, (2, 3), np.float64)
        gpu_dlpack.from_pointer(buf.ctypes.data, (3,), np.float64, strides=(2,))
    finally:
        _capsule.Held.__init__ = real
    assert "strides" not in seen[0] and seen[1]["strides"] == (16,)
    # So does the array interface of a wrapper over a capsule without
    # strides (a 0-d one: every other capsule the layer exports has them).
    interface = gpu_dlpack.wrap(np.array(5.0)).__array_interface__
    assert "strides" not in interface and np.asarray(gpu_dlpack.wrap(np.array(5.0))).tolist() == 5.0
    if sys.implementation.name == "cpython" and sys.version_info < (3, 12):  # None is immortal from 3.12 on
        gc.collect()
        before = sys.getrefcount(None)
        for _ in range(1000):
            gpu_dlpack.from_pointer(buf.ctypes.data, (2, 3), np.float64)
        assert sys.getrefcount(None) - before < 100


def test_a_producer_of_a_0_d_array_lends_its_value():
    # Its array interface has no strides entry (C order): the held copy of
    # it must read the entry as left out, not fail on it.
    class Scalar(gpu_dlpack.Producer):
        def __init__(self, value):
            self._data = np.array(value)

        def dlpack_memory(self):
            return self._data

    s = Scalar(2.5)
    interface = s.__array_interface__
    assert "strides" not in interface and interface["shape"] == ()
    a = np.asarray(s)
    assert a.shape == () and a.tolist() == 2.5
    s._data[()] = 4.0  # the same memory, not a copy
    assert a.tolist() == 4.0 and np.from_dlpack(s).tolist() == 4.0


def test_an_empty_array_may_have_a_null_pointer():
    p = gpu_dlpack.from_pointer(0, (0, 3), np.float32)
    assert np.from_dlpack(p).shape == (0, 3)


# -- export(readonly=) ----------------------------------------------------------------

def test_export_readonly_marks_the_capsule_read_only(torch):
    for x in (np.arange(3.0), torch.arange(3.0)):
        info = gpu_dlpack.inspect(gpu_dlpack.export(x, max_version=(1, 0), readonly=True))
        assert info.readonly and not info.is_copied
        assert not np.from_dlpack(gpu_dlpack.wrap(x, readonly=True)).flags.writeable
        with pytest.raises(gpu_dlpack.ReadOnlyError):
            gpu_dlpack.export(x, readonly=True)  # a legacy capsule cannot say it
        copied = gpu_dlpack.inspect(gpu_dlpack.export(x, readonly=True, copy=True, max_version=(1, 0)))
        assert copied.is_copied and not copied.readonly
    assert not gpu_dlpack.inspect(gpu_dlpack.export(np.arange(3.0), max_version=(1, 0))).readonly
    with pytest.raises(TypeError, match="readonly must be True or False"):
        gpu_dlpack.export(np.arange(3.0), readonly="yes")


# -- no recursion, whatever the class speaks ---------------------------------------

class SelfExportingCtypes:
    """The obvious recipe: a ctypes buffer with __array_interface__, whose
    __dlpack__ asks gpu_dlpack to export the object itself."""

    def __init__(self, values):
        self.buf = (ctypes.c_double * len(values))(*values)

    @property
    def __array_interface__(self):
        return {"version": 3, "shape": (len(self.buf),), "typestr": "<f8", "data": (ctypes.addressof(self.buf), False)}

    def __dlpack__(self, **kw):
        return gpu_dlpack.export(gpu_dlpack.wrap(self), **kw)

    def __dlpack_device__(self):
        return (1, 0)


class SelfExportingBoth(SelfExportingCtypes):
    """The recipe for both methods: the device read through gpu_dlpack too."""

    def __dlpack_device__(self):
        return gpu_dlpack.wrap(self).__dlpack_device__()


class SelfExportingOnly:
    """The same recipe with nothing else to answer with."""

    def __dlpack__(self, **kw):
        return gpu_dlpack.export(self, **kw)

    def __dlpack_device__(self):
        return (1, 0)


class ProducerOfItself(gpu_dlpack.Producer):
    """The hook names the object itself, which also speaks the array interface."""

    def __init__(self):
        self.data = np.arange(3.0)

    @property
    def __array_interface__(self):
        return self.data.__array_interface__

    def dlpack_memory(self):
        return self


@pytest.mark.parametrize("recipe", [SelfExportingCtypes, SelfExportingBoth], ids=["dlpack", "both"])
@pytest.mark.parametrize("consumer", ["numpy", "torch", "jax", "gpu_dlpack"])
def test_the_obvious_recipe_works_through_its_other_protocol(recipe, consumer, torch, jax):
    c = recipe([1.0, 2.0, 3.0])
    assert c.__dlpack_device__() == (1, 0)
    take, where = {
        **_consumers(torch, jax), "gpu_dlpack": (gpu_dlpack.from_dlpack, lambda a: a.ctypes.data),
    }[consumer]
    out = take(c)
    assert [float(v) for v in out.tolist()] == [1.0, 2.0, 3.0]
    if consumer != "jax":  # JAX copies memory not aligned to 64 bytes
        assert where(out) == ctypes.addressof(c.buf)


@pytest.mark.parametrize("how", ["numpy", "export", "wrap", "from_dlpack"])
def test_a_recipe_with_nothing_else_to_answer_with_is_one_clear_error(how):
    x = SelfExportingOnly()
    call = {
        "numpy": lambda: np.from_dlpack(x),
        "export": lambda: gpu_dlpack.export(x, max_version=(1, 0)),
        "wrap": lambda: gpu_dlpack.wrap(x).__dlpack__(max_version=(1, 0)),
        "from_dlpack": lambda: gpu_dlpack.from_dlpack(x),
    }[how]
    with pytest.raises(BufferError, match="asks gpu_dlpack to export the SelfExportingOnly itself") as err:
        call()
    assert "gpu_dlpack.Producer" in str(err.value)
    assert len(traceback.format_exception(err.value)) < 80  # not thousands of lines of recursion


def test_a_hook_naming_the_object_itself_answers_with_its_other_protocol(torch):
    p = ProducerOfItself()
    for out in (np.from_dlpack(p), gpu_dlpack.from_dlpack(p)):
        assert out.tolist() == [0.0, 1.0, 2.0] and out.ctypes.data == p.data.ctypes.data
    assert torch.from_dlpack(p).data_ptr() == p.data.ctypes.data


class NamesItself(gpu_dlpack.Producer):
    """The hook names the object itself, which speaks no protocol but the mixin's."""

    def dlpack_memory(self):
        return self


class NamesTheOther(gpu_dlpack.Producer):
    """Two producers whose hooks name each other."""

    def __init__(self):
        self.other = None

    def dlpack_memory(self):
        return self.other


@pytest.mark.parametrize("cycle", ["itself", "each other"])
@pytest.mark.parametrize("how", ["export", "view", "convert", "wrap", "numpy", "device"])
def test_a_hook_that_names_no_memory_but_itself_is_a_type_error_not_a_recursion(cycle, how):
    if cycle == "itself":
        x = NamesItself()
    else:
        x, y = NamesTheOther(), NamesTheOther()
        x.other, y.other = y, x
    call = {
        "export": lambda: gpu_dlpack.export(x, max_version=(1, 0)),
        "view": lambda: gpu_dlpack.view(x),
        "convert": lambda: gpu_dlpack.convert(x, "numpy"),
        "wrap": lambda: gpu_dlpack.wrap(x).__dlpack__(max_version=(1, 0)),
        "numpy": lambda: np.from_dlpack(x),
        "device": lambda: x.__dlpack_device__(),
    }[how]
    with pytest.raises(TypeError, match=r"dlpack_memory\(\) returned .*names no memory. Return the memory") as err:
        call()
    assert len(traceback.format_exception(err.value)) < 80  # not thousands of lines of recursion


def test_a_hook_naming_a_producer_that_names_memory_exports_that_memory():
    a = np.arange(4.0)
    inner = NamesTheOther()
    inner.other = a
    outer = NamesTheOther()
    outer.other = inner
    assert gpu_dlpack.from_dlpack(outer).ctypes.data == a.ctypes.data


def test_a_forwarding_proxy_that_exports_itself_is_one_clear_error():
    class Proxy:
        def __getattr__(self, name):
            if name == "__dlpack__":
                return lambda **kw: gpu_dlpack.export(self, **kw)
            if name == "__dlpack_device__":
                return lambda: (1, 0)
            raise AttributeError(name)

    with pytest.raises(BufferError, match="itself"):
        gpu_dlpack.export(Proxy(), max_version=(1, 0))


def test_asking_a_producer_leaves_no_mark_behind(torch):
    from gpu_dlpack import _producer

    t = torch.arange(3.0)
    gpu_dlpack.from_dlpack(gpu_dlpack.wrap(t), copy=True)
    with pytest.raises(BufferError):
        np.from_dlpack(SelfExportingOnly())
    assert _producer.asked.ids == []
    before = refcount(t)
    gpu_dlpack.export(t, max_version=(1, 0))
    assert refcount(t) == before


# -- NumPy's array interface: np.asarray(obj) --------------------------------------

class Fresh(gpu_dlpack.Producer):
    """Memory made afresh at each request: what an interface names must be
    kept by the interface itself."""

    def dlpack_memory(self):
        return np.arange(12.0).reshape(3, 4)[::-1, ::2] * 2


class Lent(gpu_dlpack.Producer):
    def __init__(self, base, device):
        self.base, self.device = base, device

    def dlpack_memory(self):
        return gpu_dlpack.from_pointer(self.base.ctypes.data, (3,), np.float64, device=self.device, owner=self.base)


@pytest.mark.parametrize("example", ["Samples", "CBuffer"])
@pytest.mark.parametrize("readonly", [False, True])
def test_np_asarray_is_the_memory_itself_read_only_where_it_is(example, readonly):
    producer = (Samples if example == "Samples" else CBuffer)([1.5, 2.5, 3.5], readonly=readonly)
    for make in (np.asarray, lambda p: p.__array__(), lambda p: np.array(p, copy=False)):
        a = make(producer)
        assert a.dtype == np.float64 and a.tolist() == [1.5, 2.5, 3.5]
        assert a.ctypes.data == _memory(producer) and a.flags.writeable is not readonly
    if not readonly:
        np.asarray(producer)[0] = 42.0  # a write reaches the memory
        assert np.from_dlpack(producer)[0] == 42.0
    else:
        with pytest.raises(ValueError, match="read-only"):
            np.asarray(producer)[0] = 42.0


def test_a_read_only_export_of_writeable_memory_is_read_only_through_numpy_too():
    class ReadOnlyView(gpu_dlpack.Producer):
        def __init__(self):
            self.data = np.arange(3.0)

        def dlpack_memory(self):
            return gpu_dlpack.wrap(self.data, readonly=True)

    p = ReadOnlyView()
    assert not np.asarray(p).flags.writeable and not p.__array__().flags.writeable
    assert np.shares_memory(np.asarray(p), p.data) and p.data.flags.writeable  # the source stays writeable


def test_array_takes_numpys_dtype_and_copy():
    p = Samples([1.0, 2.0])
    assert p.__array__(np.float32).dtype == np.float32 and np.array(p, dtype=np.int64).tolist() == [1, 2]
    copied = np.array(p, copy=True)
    assert copied.ctypes.data != _memory(p) and copied.flags.writeable
    assert p.__array__(copy=True).ctypes.data != _memory(p)
    assert p.__array__(np.float64, copy=False).ctypes.data == _memory(p)
    with pytest.raises(ValueError, match=r"copy=False, but .*Samples holds float64 data and float32 was asked for"):
        p.__array__(np.float32, copy=False)


def test_memory_made_afresh_stays_valid_as_long_as_numpy_holds_it():
    p = Fresh()
    arrays = [np.asarray(p) for _ in range(3)]
    del p
    gc.collect()
    for a in arrays:
        assert a.tolist() == [[16.0, 20.0], [8.0, 12.0], [0.0, 4.0]]


def test_an_owner_the_interface_names_is_freed_once_with_the_last_array():
    FREED.clear()
    c = CBuffer([1.0, 2.0])
    ptr = c.ptr
    a = np.asarray(c)
    del c
    gc.collect()
    assert FREED == [] and a.tolist() == [1.0, 2.0]
    del a
    gc.collect()
    assert FREED == [ptr]


def test_memory_the_host_cannot_address_has_no_interface_and_numpy_says_how_to_copy_it():
    base = np.arange(3.0)
    gpu = Lent(base, "cuda:0")
    assert not hasattr(gpu, "__array_interface__")
    with pytest.raises(TypeError, match=r"holds its memory on cuda:0, which the host cannot address") as info:
        np.asarray(gpu)
    assert isinstance(info.value, gpu_dlpack.GpuDlpackError)
    # pinned and managed memory are host memory
    for device in ("cuda_host", "cuda_managed"):
        a = np.asarray(Lent(base, device))
        assert a.ctypes.data == base.ctypes.data and a.tolist() == [0.0, 1.0, 2.0]
