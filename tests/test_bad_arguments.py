"""Bad arguments everywhere in the public API: each gets a clear exception of
the standard's type (TypeError for a wrong type, ValueError for a wrong
value, BufferError for an exchange that cannot happen), and nothing leaks:
the source array is freed once the caller drops it, and no capsule is left
unfreed."""

import gc
import re
import weakref

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _errors

from .helpers import gpu_arange, refcount


@pytest.mark.parametrize("dl_device", [(1, 1), (1, 7), (3, 1), (13, 2), gpu_dlpack.Device((1, 3))])
def test_a_consumer_may_ask_for_host_memory_of_device_id_0_only(dl_device):
    x = np.arange(3.0)
    # The message quotes what was asked, and says what to ask instead.
    target = gpu_dlpack.Device(dl_device)
    name = target.type.name.lower()
    said = re.escape(
        f"{dl_device!r} asks for {name} memory with device id {target.index}, but host memory "
        f"is one address space with device id 0 only. Ask for ({int(target.type)}, 0) or '{name}'."
    )
    with pytest.raises(BufferError, match=said):
        gpu_dlpack.export(x, max_version=(1, 0), dl_device=dl_device)
    with pytest.raises(BufferError, match=said):
        gpu_dlpack.wrap(x).__dlpack__(max_version=(1, 0), dl_device=dl_device)
    with pytest.raises(BufferError, match=said):
        gpu_dlpack.from_dlpack(x, device=dl_device)
    cap = gpu_dlpack.export(x, max_version=(1, 0))
    with pytest.raises(BufferError, match=said):
        gpu_dlpack.from_dlpack(cap, device=dl_device)
    with pytest.raises(gpu_dlpack.ConsumedCapsuleError):
        gpu_dlpack.inspect(cap)  # refused, so freed at once


@pytest.mark.parametrize(
    "stream, error",
    [("0", TypeError), (1.5, TypeError), (True, TypeError), (0, ValueError), (1, ValueError),
     (2, ValueError), (5, ValueError), (-2, ValueError), (2**64, ValueError)],
)
def test_a_stream_is_refused_for_a_host_import_not_ignored(torch, stream, error):
    # Host memory has no stream: only None and -1 are valid (SPEC §3).
    x = np.arange(3.0)
    for source in (x, torch.arange(3.0), gpu_dlpack.wrap(x)):
        with pytest.raises(error, match="stream"):
            gpu_dlpack.from_dlpack(source, stream=stream)
    cap = gpu_dlpack.export(x, max_version=(1, 0))
    with pytest.raises(error, match="stream"):
        gpu_dlpack.from_dlpack(cap, stream=stream)
    with pytest.raises(gpu_dlpack.ConsumedCapsuleError):
        gpu_dlpack.inspect(cap)  # refused, so freed at once
    assert gpu_dlpack.from_dlpack(x, stream=-1).ctypes.data == x.ctypes.data


def _reachable():
    """The GPUs this machine offers (what the root conftest tests with)."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:
        count = 0
    return {gpu_dlpack.Device(f"cuda:{i}") for i in range(count)}


@pytest.mark.parametrize("copy", ["x", 1, np.True_])
def test_a_capsule_refused_for_its_copy_argument_is_freed_at_once(copy):
    a = np.arange(3.0)
    ref = weakref.ref(a)
    cap = gpu_dlpack.export(a, max_version=(1, 0))
    del a
    with pytest.raises(TypeError, match="copy"):
        gpu_dlpack.from_dlpack(cap, copy=copy)
    gc.collect()
    assert ref() is None
    with pytest.raises(gpu_dlpack.ConsumedCapsuleError):
        gpu_dlpack.from_dlpack(cap)


# -- the table of bad arguments ---------------------------------------------------

class _Opaque:
    """An object that is nothing DLPack knows, with a repr that is the same
    in every process (test ids are built from it)."""

    def __repr__(self):
        return "_Opaque()"


BAD_EXPORT = [
    ({"stream": "0"}, TypeError, "stream"),
    ({"stream": 1.5}, TypeError, "stream"),
    ({"stream": True}, TypeError, "stream"),
    ({"stream": 0}, ValueError, "stream"),
    ({"stream": 1}, ValueError, "stream"),
    ({"stream": 2}, ValueError, "stream"),
    ({"stream": 3}, ValueError, "stream"),
    ({"stream": -2}, ValueError, "stream"),
    ({"stream": 2**64}, ValueError, "stream"),
    ({"max_version": (1,)}, TypeError, "max_version"),
    ({"max_version": (1, 0, 0)}, TypeError, "max_version"),
    ({"max_version": [1, 0]}, TypeError, "max_version"),
    ({"max_version": "1.0"}, TypeError, "max_version"),
    ({"max_version": 1}, TypeError, "max_version"),
    ({"max_version": (1.0, 0)}, TypeError, "max_version"),
    ({"max_version": (True, 0)}, TypeError, "max_version"),
    ({"max_version": (np.int64(1), 0)}, TypeError, "max_version"),
    ({"max_version": (1, None)}, TypeError, "max_version"),
    ({"max_version": (0, 4)}, BufferError, "below"),
    ({"max_version": (-1, 0)}, BufferError, "below"),
    ({"dl_device": b"cpu"}, TypeError, "dl_device"),  # "cpu" is a device (any form Device reads)
    ({"dl_device": 1}, TypeError, "dl_device"),
    ({"dl_device": (1,)}, BufferError, "dl_device"),
    ({"dl_device": (1, 0, 0)}, BufferError, "dl_device"),
    ({"dl_device": (0, 0)}, BufferError, "dl_device"),
    ({"dl_device": (-1, 0)}, BufferError, "dl_device"),
    ({"dl_device": (1, -1)}, BufferError, "dl_device"),
    ({"dl_device": (1, 1)}, BufferError, "device id 0"),
    ({"dl_device": (4, 0)}, BufferError, "opencl"),
    ({"copy": "yes"}, TypeError, "copy"),
    ({"copy": 1}, TypeError, "copy"),
    ({"copy": 0}, TypeError, "copy"),
    ({"copy": np.True_}, TypeError, "copy"),
]
GPU_ONLY_REFUSALS = [({"dl_device": (2, 0)}, BufferError, "cuda")]

BAD_IMPORT = [
    ({"device": "nope"}, ValueError, "device"),
    ({"device": "cpu:1"}, BufferError, "device id 0"),  # read as (1, 1) is, refused alike
    ({"device": "cuda:x"}, ValueError, "device"),
    ({"device": (0, 0)}, ValueError, "device"),
    ({"device": (1,)}, ValueError, "device"),
    ({"device": (1, -1)}, ValueError, "device"),
    ({"device": (1, 1)}, BufferError, "device id 0"),
    ({"device": 3.5}, TypeError, "device"),
    ({"device": -1}, TypeError, "device"),
    ({"device": _Opaque()}, TypeError, "device"),
    ({"copy": "x"}, TypeError, "copy"),
    ({"copy": 1}, TypeError, "copy"),
    ({"stream": "x"}, TypeError, "stream"),
    ({"stream": 7}, ValueError, "stream"),
]

# bytes and NumPy scalars speak the buffer protocol and the array interface:
# they are taken (tests/test_protocols.py).
NOT_DLPACK = [None, 5, "abc", [1, 2], object(), {"a": 1}]


def _aligned(n):
    # JAX imports NumPy data zero-copy only when it is 64-byte aligned.
    raw = np.empty(n * 8 + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start:start + n * 8].view(np.float64)


def _sources(torch, jax):
    """(name, factory): each factory returns (source, base): base is the
    NumPy array whose memory the source uses, for a weak reference."""

    def numpy():
        a = np.arange(6.0)
        return a, a

    def wrapped():
        a = np.arange(6.0)
        return gpu_dlpack.wrap(a), a

    def torch_tensor():
        a = np.arange(6.0)
        return torch.from_numpy(a), a

    def jax_array():
        a = _aligned(6)
        a[:] = np.arange(6.0)
        j = jax.numpy.from_dlpack(a)
        assert j.unsafe_buffer_pointer() == a.ctypes.data  # shares a's memory
        return j, a

    return {"numpy": numpy, "wrap": wrapped, "torch": torch_tensor, "jax": jax_array}


def _export_call(name):
    if name == "wrap":
        return lambda src, kw: src.__dlpack__(**kw)
    return lambda src, kw: gpu_dlpack.export(src, **kw)


def _collected(ref):
    """Whether ``ref`` died; a young-generation collection first (fast), a
    full one only if needed (about 70 ms with torch and JAX loaded)."""
    gc.collect(1)
    if ref() is not None:
        gc.collect()
    return ref() is None


def _refused_and_released(make, call, error, match):
    """``call(source)`` raises ``error``, leaves the source's reference count
    as it was, and the memory is freed once the caller drops the source."""
    src, base = make()
    ref = weakref.ref(base)
    del base
    before = refcount(src)
    with pytest.raises(error, match=match) as info:
        call(src)
    assert str(info.value)
    del info
    gc.collect(1)
    assert refcount(src) == before
    del src
    assert _collected(ref), "the source's memory outlived every reference to it"


@pytest.mark.parametrize("source", ["numpy", "wrap", "torch", "jax"])
@pytest.mark.parametrize("kwargs, error, match", BAD_EXPORT, ids=[repr(k) for k, _, _ in BAD_EXPORT])
def test_export_refuses_a_bad_argument_and_leaks_nothing(torch, jax, source, kwargs, error, match):
    make = _sources(torch, jax)[source]
    call = _export_call(source)
    if source == "jax" and "max_version" not in kwargs:
        # JAX's arrays are immutable: a legacy export of one is refused as
        # read-only data (rule 5) before the other arguments are read.
        kwargs = {**kwargs, "max_version": (1, 0)}
    _refused_and_released(make, lambda src: call(src, kwargs), error, match)


@pytest.mark.parametrize("source", ["numpy", "wrap", "torch", "jax"])
@pytest.mark.parametrize("kwargs, error, match", BAD_IMPORT, ids=[repr(k) for k, _, _ in BAD_IMPORT])
def test_from_dlpack_refuses_a_bad_argument_and_leaks_nothing(torch, jax, source, kwargs, error, match):
    make = _sources(torch, jax)[source]
    _refused_and_released(make, lambda src: gpu_dlpack.from_dlpack(src, **kwargs), error, match)


@pytest.mark.parametrize("kwargs, error, match", BAD_IMPORT, ids=[repr(k) for k, _, _ in BAD_IMPORT])
def test_from_dlpack_of_a_capsule_refuses_a_bad_argument_and_frees_it(kwargs, error, match):
    a = np.arange(6.0)
    ref = weakref.ref(a)
    cap = gpu_dlpack.export(a, max_version=(1, 0))
    del a
    assert ref() is not None  # the capsule holds the array
    with pytest.raises(error, match=match):
        gpu_dlpack.from_dlpack(cap, **kwargs)
    assert _collected(ref), "a refused capsule must be freed at once"
    with pytest.raises(gpu_dlpack.ConsumedCapsuleError):
        gpu_dlpack.from_dlpack(cap)


@pytest.mark.parametrize("kwargs, error, match", GPU_ONLY_REFUSALS, ids=["cuda"])
def test_export_to_a_gpu_without_one_is_refused(kwargs, error, match):
    if gpu_dlpack.Device("cuda:0") in _reachable():
        pytest.skip("this machine has a GPU: the move is possible")
    _refused_and_released(lambda: (np.arange(3.0),) * 2, lambda x: gpu_dlpack.export(x, **kwargs), error, match)
    _refused_and_released(
        lambda: (np.arange(3.0),) * 2, lambda x: gpu_dlpack.from_dlpack(x, device="cuda:0"), BufferError, "cuda"
    )


@pytest.mark.parametrize("obj", NOT_DLPACK, ids=[type(o).__name__ for o in NOT_DLPACK])
def test_an_object_without_dlpack_is_refused_by_every_entry_point(obj):
    for call in (gpu_dlpack.from_dlpack, gpu_dlpack.export, gpu_dlpack.wrap, gpu_dlpack.Device.of):
        named = re.escape(f"{type(obj).__module__}.{type(obj).__qualname__} does not support DLPack")
        with pytest.raises(gpu_dlpack.NotDLPackError, match=named):
            call(obj)
        with pytest.raises(TypeError):  # the Python way to catch it
            call(obj)
        with pytest.raises(AttributeError):  # the standard's way
            call(obj)
    with pytest.raises(TypeError, match="PyCapsule"):
        gpu_dlpack.inspect(obj)


@pytest.mark.parametrize("readonly", ["yes", 1, 0, None, np.True_])
def test_wrap_takes_a_bool_for_readonly(readonly):
    _refused_and_released(
        lambda: (np.arange(3.0),) * 2, lambda x: gpu_dlpack.wrap(x, readonly=readonly), TypeError, "readonly"
    )


def test_public_functions_take_their_options_by_keyword_only():
    x = np.arange(3.0)
    for call in (
        lambda: gpu_dlpack.export(x, None),
        lambda: gpu_dlpack.from_dlpack(x, "cpu"),
        lambda: gpu_dlpack.wrap(x, True),
        lambda: gpu_dlpack.wrap(x).__dlpack__(None),
    ):
        with pytest.raises(TypeError):
            call()


BAD_FLOORS = ["abc", "", "9.9", "1.0.0", (3, 0), (0, -1), (1,), (0.5, 0), 5, None, [0, 8]]


@pytest.mark.parametrize("value", BAD_FLOORS, ids=[repr(v) for v in BAD_FLOORS])
def test_the_floor_refuses_what_is_no_version_and_stays_as_it_was(floor, value):
    before = gpu_dlpack.MIN_DLPACK_VERSION
    with pytest.raises(ValueError, match="MIN_DLPACK_VERSION"):
        gpu_dlpack.set_min_dlpack_version(value)
    with pytest.raises(ValueError, match="MIN_DLPACK_VERSION"):
        gpu_dlpack.MIN_DLPACK_VERSION = value
    assert gpu_dlpack.MIN_DLPACK_VERSION == before


BAD_DEVICES = [
    ("cuda:x", ValueError), ("", ValueError), ("cuda:-1", ValueError), ((2.9, 0), ValueError), (("40", 0), ValueError),
    ("xpu", ValueError), ((1,), ValueError), ((1, 0, 0), ValueError), ((0, 0), ValueError), ((2**31, 0), ValueError),
    ((2, -1), ValueError), ((1, "0"), ValueError), ((True, 0), ValueError), (3.5, TypeError),
    (None, TypeError), (b"cpu", TypeError), (np.zeros(3), TypeError),
]


@pytest.mark.parametrize("spec, error", BAD_DEVICES, ids=[repr(s) for s, _ in BAD_DEVICES])
def test_device_refuses_what_names_no_device(spec, error):
    with pytest.raises(error, match="device|array"):
        gpu_dlpack.Device(spec)


@pytest.mark.parametrize("index", [-1, "1", 1.5, True])
def test_device_refuses_a_bad_index(index):
    with pytest.raises(ValueError, match="device"):
        gpu_dlpack.Device("cuda", index=index)


# -- producers that answer badly ------------------------------------------------------


class _Liar:
    """A producer whose answers are given by the test."""

    def __init__(self, capsule=None, device=(1, 0), raises=None):
        self._capsule, self._device, self._raises = capsule, device, raises

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if self._raises is not None:
            raise self._raises
        return self._capsule

    def __dlpack_device__(self):
        return self._device


LIAR = "tests.test_bad_arguments._Liar"
_NOT_A_CAPSULE = "the producer breaks the DLPack protocol. Fix its __dlpack__"
_NO_DEVICE = "it must return a (device_type, device_id) pair of ints"
_REFUSED = "fix what it names, or ask the producer for an export it can make"

# case -> (producer, exception type, what the message says was asked and
# answered, the remedy it gives). A producer's own BufferError is passed on
# as it is (None: the very exception the producer raised).
BAD_PRODUCERS = {
    "returns None": (dict(capsule=None), TypeError, f"{LIAR}.__dlpack__() returned NoneType, not a DLPack capsule", _NOT_A_CAPSULE),
    "returns an int": (dict(capsule=5), TypeError, f"{LIAR}.__dlpack__() returned int, not a DLPack capsule", _NOT_A_CAPSULE),
    "returns a NumPy array": (dict(capsule=np.zeros(3)), TypeError, f"{LIAR}.__dlpack__() returned ndarray, not a DLPack capsule", _NOT_A_CAPSULE),
    "device is a string": (dict(device="cpu"), ValueError, f"{LIAR}.__dlpack_device__() returned 'cpu', which names no DLPack device", _NO_DEVICE),
    "device is one int": (dict(device=(1,)), ValueError, f"{LIAR}.__dlpack_device__() returned (1,), which names no DLPack device", _NO_DEVICE),
    "device is no type": (dict(device=(0, 0)), ValueError, f"{LIAR}.__dlpack_device__() returned (0, 0), which names no DLPack device", _NO_DEVICE),
    "device is None": (dict(device=None), TypeError, f"{LIAR}.__dlpack_device__() returned None, which names no DLPack device", _NO_DEVICE),
    "raises RuntimeError": (dict(raises=RuntimeError("no")), BufferError, f"{LIAR}.__dlpack__ refused the export: RuntimeError: no.", _REFUSED),
    "raises KeyError": (dict(raises=KeyError("no")), BufferError, f"{LIAR}.__dlpack__ refused the export: KeyError: 'no'.", _REFUSED),
    "raises BufferError": (dict(raises=BufferError("no")), BufferError, None, None),
}


@pytest.mark.parametrize("case", BAD_PRODUCERS, ids=list(BAD_PRODUCERS))
@pytest.mark.parametrize("entry", ["from_dlpack", "export", "export versioned", "wrap"])
def test_a_producer_that_answers_badly_gets_a_clear_error(case, entry):
    kwargs, error, asked, remedy = BAD_PRODUCERS[case]
    if "capsule" not in kwargs and "raises" not in kwargs:
        kwargs = dict(kwargs, capsule=np.arange(3.0).__dlpack__())
    producer = _Liar(**kwargs)
    call = {
        "from_dlpack": lambda: gpu_dlpack.from_dlpack(producer),
        "export": lambda: gpu_dlpack.export(producer),
        "export versioned": lambda: gpu_dlpack.export(producer, max_version=(1, 0)),
        "wrap": lambda: gpu_dlpack.wrap(producer).__dlpack__(max_version=(1, 0)),
    }[entry]
    with pytest.raises(error) as info:
        call()
    # The layer's own error of the standard's type, or the producer's own.
    assert type(info.value) is (error if asked is None else getattr(_errors, error.__name__))
    message = str(info.value)
    if asked is None:
        assert info.value is kwargs["raises"]  # the producer's own refusal, untouched
        return
    assert message.startswith(asked), message
    assert remedy in message, message


# -- on a GPU (public API only) ----------------------------------------------------------

BAD_GPU_EXPORT = [
    ({"stream": "1"}, TypeError, "stream"),
    ({"stream": 1.0}, TypeError, "stream"),
    ({"stream": -2}, ValueError, "stream"),
    ({"dl_device": (2, 99)}, BufferError, "cuda:99"),
    ({"dl_device": (2, -1)}, BufferError, "dl_device"),
    ({"max_version": (1,)}, TypeError, "max_version"),
    ({"copy": "no"}, TypeError, "copy"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("kwargs, error, match", BAD_GPU_EXPORT, ids=[repr(k) for k, _, _ in BAD_GPU_EXPORT])
def test_export_of_gpu_data_refuses_a_bad_argument_and_leaks_nothing(kwargs, error, match):
    import cupy

    pool = cupy.get_default_memory_pool()
    d = gpu_arange(cupy, 1 << 16, dtype=cupy.float32)
    used = pool.used_bytes()
    with pytest.raises(error, match=match):
        gpu_dlpack.export(d, **kwargs)
    with pytest.raises(error, match=match):
        gpu_dlpack.wrap(d).__dlpack__(**kwargs)
    gc.collect()
    assert pool.used_bytes() == used


@pytest.mark.gpu
def test_cuda_stream_0_is_taken_as_the_legacy_default_with_a_warning():
    import cupy

    d = gpu_arange(cupy, 4.0)
    with pytest.warns(gpu_dlpack.StreamWarning):
        cap = gpu_dlpack.export(d, stream=0, max_version=(1, 0))
    assert gpu_dlpack.inspect(cap).device == gpu_dlpack.Device("cuda:0")


@pytest.mark.gpu
@pytest.mark.parametrize("device", ["cuda:99", (2, 99), "rocm:0"])
def test_import_to_a_gpu_that_does_not_exist_is_refused(device):
    x = np.arange(4.0)
    with pytest.raises((BufferError, ValueError)):
        gpu_dlpack.from_dlpack(x, device=device)


# -- a wrap() object whose state is asked for, taken away or replaced --------------
#
# Its state is the compiled base's typed fields, read-only to Python: a del
# or an assignment raises AttributeError and leaves the wrapper as it was;
# only __init__ makes it anew (the plan with it). One made by __new__ alone
# wraps no array: each use raises the layer's TypeError, never a crash. Run
# in a fresh interpreter, so that a crash is reported as such.

_FIELDS = ("_x", "_readonly", "_floor", "_source", "_device", "_reported", "_request")

_GONE = {
    "__new__ alone, __dlpack_device__": "w = E.__new__(E); w.__dlpack_device__()",
    "__new__ alone, __dlpack__": "w = E.__new__(E); w.__dlpack__(max_version=(1, 0))",
    "__new__ alone, legacy __dlpack__": "w = E.__new__(E); w.__dlpack__()",
    "__new__ alone, numpy": "w = E.__new__(E); np.from_dlpack(w)",
    "__new__ alone, repr": "w = E.__new__(E); repr(w)",
    **{f"del {f}": f"w = g.wrap(a); del w.{f}" for f in _FIELDS},
    **{f"{f} replaced": f"w = g.wrap(a); w.{f} = np.arange(2, dtype=np.int8)" for f in _FIELDS},
    "no _held": "w = g.wrap(a); del w._held; assert w.__array_interface__['shape'] == (3,)",
    "made anew": ("w = g.wrap(a); w.__init__(np.arange(2, dtype=np.int8), True); "
                  "c = g.inspect(w.__dlpack__(max_version=(1, 0))); "
                  "assert (c.shape, c.readonly, w.array.dtype) == ((2,), True, np.int8)"),
    "as it was": ("w = g.wrap(a)\n"
                  "for f in " + repr(_FIELDS) + ":\n"
                  "    for change in (lambda: delattr(w, f), lambda: setattr(w, f, None)):\n"
                  "        try:\n"
                  "            change()\n"
                  "        except AttributeError:\n"
                  "            pass\n"
                  "assert np.from_dlpack(w) is not a and np.from_dlpack(w).tolist() == [0.0, 1.0, 2.0]\n"
                  "assert w.array is a and w.readonly is False and w.__dlpack_device__() == (1, 0)"),
}


def _gone_outcomes(env=None):
    from .interpreter import run_python

    code = (
        "import json, numpy as np, gpu_dlpack as g\n"
        "from gpu_dlpack import Exportable as E\n"
        "a = np.arange(3.0)\n"
        f"cases = {_GONE!r}\n"
        "out = {}\n"
        "for name, case in cases.items():\n"
        "    try:\n"
        "        exec(case)\n"
        "        out[name] = 'ok'\n"
        "    except Exception as exc:\n"
        "        out[name] = [type(exc).__name__, str(exc)]\n"
        "print(json.dumps(out))\n"
    )
    done = run_python(code, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    return json.loads(done.stdout.splitlines()[-1])


def test_a_wrapper_keeps_its_state_and_one_without_it_raises_type_error():
    out = _gone_outcomes()
    unmade = gpu_dlpack._errors.unmade_wrapper(gpu_dlpack.Exportable)
    for case in ("__dlpack_device__", "__dlpack__", "legacy __dlpack__", "numpy"):
        assert out[f"__new__ alone, {case}"] == ["TypeError", str(unmade)], case
    for f in _FIELDS:
        for case in (f"del {f}", f"{f} replaced"):
            kind, message = out[case]
            assert kind == "AttributeError" and f"'{f}'" in message and "not writable" in message, (case, message)
    assert out["__new__ alone, repr"] == out["no _held"] == out["made anew"] == out["as it was"] == "ok", out


def test_a_copy_of_a_wrapper_wraps_the_same_array():
    import copy
    import pickle

    a = np.arange(4.0)
    for w in (gpu_dlpack.wrap(a), gpu_dlpack.wrap(a, readonly=True)):
        c = copy.copy(w)
        assert type(c) is type(w) and c is not w and c.array is a and c.readonly == w.readonly
        assert c.__dlpack_device__() == w.__dlpack_device__() and c.last_request is None
        info = gpu_dlpack.inspect(c.__dlpack__(max_version=(1, 0)))
        assert info.data == a.ctypes.data and info.readonly == w.readonly
        for d in (copy.deepcopy(w), pickle.loads(pickle.dumps(w))):
            assert d.array is not a and d.array.tolist() == a.tolist() and d.readonly == w.readonly
            assert gpu_dlpack.from_dlpack(d).tolist() == a.tolist()
