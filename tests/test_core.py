"""What is the compiled core's own: the DLPack C exchange API on both sides,
the record inspect fills, claims under races, the stream hand-off and the
copy in C, and the plain JAX exchanges and the adaptation it runs without
a Python frame; and that gpu_dlpack does not import without it.
"""

import ctypes
import dataclasses
import gc
import os
import subprocess
import sys
import threading
import weakref

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack._backends import numpy as numpy_backend
from gpu_dlpack._compiled import core

from .figures import counter_fixture
from .helpers import managed
from .test_leaks import _freed, soak

figures = counter_fixture("leaks through the C exchange API")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_without_its_compiled_core_gpu_dlpack_does_not_import_and_names_the_remedies():
    # No other implementation runs: a missing core is an ImportError at
    # once, which says what to install, never a package half there.
    code = "import sys; sys.modules['gpu_dlpack._core'] = None; import gpu_dlpack"
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("gpu_dlpack._errors.ImportError: gpu_dlpack's compiled core (gpu_dlpack._core) is not "
                           "built or does not load here (import of gpu_dlpack._core halted; None in sys.modules)")
    assert "Install a wheel built for this platform and Python" in last and "needs a C compiler" in last


def _info_cases():
    from . import capsules

    x = np.arange(6.0).reshape(2, 3)
    ro = np.arange(4, dtype=np.int16)
    ro.flags.writeable = False
    made = {
        "legacy": lambda: x.__dlpack__(),
        "versioned": lambda: gpu_dlpack.export(x, max_version=(1, 0)),
        "read-only": lambda: gpu_dlpack.export(ro, max_version=(1, 0)),
        "fortran": lambda: gpu_dlpack.export(np.asfortranarray(x), max_version=(1, 0)),
        "strided": lambda: gpu_dlpack.export(x[:, ::2], max_version=(1, 0)),
        "0-d": lambda: gpu_dlpack.export(np.ones(()), max_version=(1, 0)),
        "empty": lambda: gpu_dlpack.export(np.ones((0, 3), np.uint8), max_version=(1, 0)),
        "bool": lambda: gpu_dlpack.export(np.array([True]), max_version=(1, 0)),
        "complex": lambda: gpu_dlpack.export(np.ones(2, np.complex64), max_version=(1, 0)),
        "null strides": lambda: capsules.make(x, null_strides=True)[0],
        "offset": lambda: capsules.make(x, byte_offset=8)[0],
        "cuda": lambda: capsules.make(x, device=(2, 1))[0],
        "flags": lambda: capsules.make(x, flags=6)[0],
        "bfloat16": lambda: capsules.make(x, dtype=(4, 16, 1))[0],
    }
    try:
        import jax.numpy as jnp
    except ImportError:
        pass
    else:
        made["jax"] = lambda: jnp.arange(3.0).__dlpack__()
    return made


@pytest.mark.parametrize("name", list(_info_cases()))
def test_the_record_the_core_fills_is_the_dataclass_field_by_field(name):
    # The core fills the record's dict itself. On CPython 3.13, where a plain
    # class keeps attributes in inline values, a dict set the 3.12 way had
    # none of the fields: every attribute read failed. What it makes is what
    # the constructor makes, to every reader.
    cap = _info_cases()[name]()
    info = gpu_dlpack.inspect(cap)
    fields = {f.name: getattr(info, f.name) for f in dataclasses.fields(info)}
    made = gpu_dlpack.CapsuleInfo(**fields)
    assert sorted(vars(info)) == sorted(f.name for f in dataclasses.fields(gpu_dlpack.CapsuleInfo))
    assert vars(info) == vars(made) and info == made and hash(info) == hash(made) and repr(info) == repr(made)
    assert info.dtype == made.dtype and info.ptr == made.ptr and info.readonly == made.readonly
    assert dataclasses.replace(info, flags=0).flags == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.shape = ()


# -- the consumer side: a producer's C exchange API -----------------------------

def test_from_dlpack_of_a_torch_tensor_reads_its_c_exchange_api(torch):
    t = torch.arange(6.0).reshape(2, 3)
    a = gpu_dlpack.from_dlpack(t)
    assert a.ctypes.data == t.data_ptr() and a.flags.writeable
    assert a.tolist() == t.tolist() and a.strides == (12, 4) and a.dtype == np.float32
    # The array's base frees torch's tensor: the exchange, not __dlpack__.
    assert type(a.base).__name__ == "PyCapsule" and "gpu_dlpack.exchanged" in repr(a.base)


def test_the_import_through_the_exchange_api_frees_the_tensor_once(torch):
    t = torch.arange(4.0)
    before = sys.getrefcount(t)
    a = gpu_dlpack.from_dlpack(t)
    b = a[1:]  # a view keeps the tensor too
    del a
    assert sys.getrefcount(t) > before  # torch's tensor lives while the array does
    del b
    assert sys.getrefcount(t) == before  # its deleter ran, once
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]


# -- the producer side: wrap(x) offers the C exchange API ------------------------

def _api(obj):
    cap = type(obj).__dlpack_c_exchange_api__
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get(cap, b"dlpack_exchange_api")


def test_wrap_offers_the_dlpack_c_exchange_api_on_its_type():
    w = gpu_dlpack.wrap(np.arange(3.0))
    cap = type(w).__dlpack_c_exchange_api__
    assert type(cap).__name__ == "PyCapsule" and "dlpack_exchange_api" in repr(cap)
    words = (ctypes.c_uint32 * 2).from_address(_api(w))
    assert tuple(words) == (1, 3)
    table = (ctypes.c_void_p * 7).from_address(_api(w))
    assert table[1] is None  # no older table chained
    assert all(table[i] for i in (2, 3, 4, 6)) and table[5] is None  # dltensor_from_py_object: optional


def test_the_exchange_api_of_wrap_gives_an_owned_versioned_tensor():
    x = np.arange(5.0)
    w = gpu_dlpack.wrap(x)
    from_py = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))(
        (ctypes.c_void_p * 7).from_address(_api(w))[3]
    )
    out = ctypes.c_void_p()
    assert from_py(w, ctypes.byref(out)) == 0
    major, minor = (ctypes.c_uint32 * 2).from_address(out.value)
    assert (major, minor) == gpu_dlpack.DLPACK_VERSION
    data = ctypes.c_void_p.from_address(out.value + 32).value
    assert data == x.ctypes.data
    assert w.last_request == {"stream": None, "max_version": gpu_dlpack.DLPACK_VERSION, "dl_device": None, "copy": None}
    deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ctypes.c_void_p.from_address(out.value + 16).value)
    deleter(out.value)


@pytest.mark.serial  # allocation failures
def test_the_exchange_api_of_wrap_releases_a_tensor_it_was_handed_when_memory_runs_out():
    # managed_tensor_to_py_object_no_sync steals the tensor (dlpack.h): when
    # the n-th allocation fails, for each n until the call succeeds, the
    # MemoryError comes with the tensor released (the source's reference
    # it held given back), never lost.
    _testcapi = pytest.importorskip("_testcapi")
    x = np.arange(5.0)
    w = gpu_dlpack.wrap(x)
    table = (ctypes.c_void_p * 7).from_address(_api(w))
    from_py = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))(table[3])
    to_py = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))(table[4])
    gpu_dlpack.from_dlpack(w)  # whatever the first import makes once
    base = sys.getrefcount(x)
    rc = None
    failures = 0
    for n in range(400):
        m, out = ctypes.c_void_p(), ctypes.c_void_p()
        assert from_py(w, ctypes.byref(m)) == 0 and sys.getrefcount(x) > base
        tensor, where = m.value, ctypes.byref(out)
        _testcapi.set_nomemory(n, n + 1)
        raised_in = None
        try:
            rc = to_py(tensor, where)
        except ctypes.ArgumentError:  # ctypes ran out before the call: the tensor is still ours
            rc = -1
        except MemoryError as exc:
            rc, tb = None, exc.__traceback__
            while tb.tb_next is not None:
                tb = tb.tb_next
            raised_in = tb.tb_frame.f_code.co_name
            del exc, tb
        finally:
            _testcapi.remove_mem_hooks()
        if rc == -1:
            ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ctypes.c_void_p.from_address(tensor + 16).value)(tensor)
            continue
        if rc == 0:
            break
        gc.collect()
        if "exportable_to_py" in raised_in or "owning_capsule" in raised_in:
            # the call's own allocations (the capsule that owns the tensor),
            # not those of the import it hands the capsule to
            failures += 1
            assert sys.getrefcount(x) == base, f"allocation {n} failed and the tensor was not released"
    assert failures and rc == 0
    got = ctypes.cast(out.value, ctypes.py_object).value
    ctypes.pythonapi.Py_DecRef(ctypes.py_object(got))  # the reference the call gave
    assert got.tolist() == x.tolist() and got.ctypes.data == x.ctypes.data
    held = sys.getrefcount(x)
    del got
    gc.collect()
    assert sys.getrefcount(x) == held - 1  # the array's tensor, freed with it


def test_the_exchange_api_of_wrap_names_no_stream_for_the_cpu_and_allocates_nothing():
    w = gpu_dlpack.wrap(np.arange(2.0))
    table = (ctypes.c_void_p * 7).from_address(_api(w))
    stream = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))(table[6])
    out = ctypes.c_void_p(123)
    assert stream(1, 0, ctypes.byref(out)) == 0 and out.value is None
    errors = []
    set_error = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)(
        lambda ctx, kind, msg: errors.append((kind, msg))
    )
    alloc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                             type(set_error))(table[2])
    made = ctypes.c_void_p(1)
    assert alloc(None, ctypes.byref(made), None, set_error) == -1 and made.value is None
    assert errors and errors[0][0] == b"NotImplementedError"


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_tvm_ffi_imports_a_wrapped_array_through_the_exchange_api(kind, torch):
    tvm_ffi = pytest.importorskip("tvm_ffi")
    src = np.arange(6.0) if kind == "numpy" else torch.arange(6.0)
    w = gpu_dlpack.wrap(src)
    out = tvm_ffi.from_dlpack(w)
    back = np.from_dlpack(out)
    ptr = src.ctypes.data if kind == "numpy" else src.data_ptr()
    assert back.ctypes.data == ptr and back.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert w.last_request["max_version"] == gpu_dlpack.DLPACK_VERSION


def test_torch_consumes_a_wrapped_tensor_zero_copy_with_the_version_stamped(torch):
    t = torch.arange(6.0)
    w = gpu_dlpack.wrap(t)
    info = gpu_dlpack.inspect(w.__dlpack__(max_version=(1, 0)))
    assert info.version == gpu_dlpack.DLPACK_VERSION and info.data == t.data_ptr() and info.flags == 0
    assert torch.from_dlpack(w).data_ptr() == t.data_ptr()


# -- claims ------------------------------------------------------------------------

@pytest.mark.parametrize("versioned", [False, True])
def test_a_capsule_raced_for_by_threads_is_taken_exactly_once(versioned):
    from gpu_dlpack import _capsule

    x = np.arange(3.0)
    for _ in range(50):
        cap = x.__dlpack__(max_version=(1, 0) if versioned else None)
        won, lost = [], []
        barrier = threading.Barrier(4)

        def race():
            barrier.wait()
            try:
                won.append(_capsule.take(cap))
            except Exception as exc:  # the loser's error
                lost.append(exc)

        threads = [threading.Thread(target=race) for _ in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert len(won) == 1 and len(lost) == 3
        won[0].release()


# -- the stream hand-off in C, against a recording stand-in for the runtime --------

class _RecordingRuntime:
    """The functions of CuPy's runtime module the core's hand-off calls
    (getDevice, setDevice, eventRecord, streamWaitEvent), each call recorded
    with the device current at the time. The core reaches them through C
    entries of their Cython signatures (tests/simcuda's forwarding capsules),
    as it reaches CuPy's; a failure raises, as CuPy's functions do."""

    def __init__(self, device=0, fail=None):
        self.device, self.fail, self.calls = device, fail, []

    def getDevice(self):
        return self.device

    def setDevice(self, device):
        self.calls.append(("set", device))
        self.device = device

    def eventRecord(self, event, stream):
        self.calls.append(("record", event, stream, self.device))
        if self.fail:
            raise RuntimeError(f"CUDA error {self.fail} (stand-in)")

    def streamWaitEvent(self, stream, event, flags=0):
        self.calls.append(("wait", stream, event, flags, self.device))

    def streamIsCapturing(self, stream):
        self.calls.append(("capturing?", stream))
        return False


def _bind_stand_in(target):
    """The core bound to ``target``'s methods through C entries; undone by
    ``_unbind``, after which the layer binds to CuPy's runtime again."""
    from . import simcuda

    assert core.bind_runtime(simcuda.load().forwarding_capi(target)) is None


def _unbind():
    from gpu_dlpack import _handoff

    from . import simcuda

    core.bind_runtime(None)
    simcuda.load().forwarding_capi(None)
    _handoff._bindings.clear()


@pytest.fixture
def recording_runtime():
    rt = _RecordingRuntime()
    _bind_stand_in(rt)
    yield rt
    _unbind()


def test_the_core_hand_off_records_on_the_producer_device_and_waits_on_the_consumer_device(recording_runtime):
    rt = recording_runtime
    assert core.handoff(0x10, 0x20, 0x30, 1, 2) is None
    assert [c for c in rt.calls if c[0] != "set"] == [("record", 0x10, 0x20, 1), ("wait", 0x30, 0x10, 0, 2)]
    assert rt.device == 0  # the current device restored
    rt.calls.clear()
    assert core.handoff(0x10, 0x20, 0x30, 0, 0) is None
    assert rt.calls == [("record", 0x10, 0x20, 0), ("wait", 0x30, 0x10, 0, 0)]  # no device switch


def test_a_failed_record_queues_no_wait_and_restores_the_device(recording_runtime):
    rt = recording_runtime
    rt.fail = 400  # cudaErrorInvalidResourceHandle
    with pytest.raises(RuntimeError, match="400"):
        core.handoff(0x10, 0x20, 0x30, 1, 1)
    assert [c[0] for c in rt.calls] == ["set", "record", "set"] and rt.device == 0


def test_handoff_goes_through_the_core_with_the_pooled_event(recording_runtime, monkeypatch):
    from gpu_dlpack import _handoff

    class Runtime:  # CuPy's runtime module, for what handoff still asks of it
        is_hip = False

    runtime = Runtime()
    monkeypatch.setattr(_handoff, "_runtime", lambda: runtime)
    monkeypatch.setattr(_handoff, "_bindings", [(runtime, True, None)])
    monkeypatch.setitem(_handoff._pools, 3, [0x77])
    assert _handoff.handoff(0x20, 0x30, 3) is True
    assert [c for c in recording_runtime.calls if c[0] != "set"] == [
        ("capturing?", 0x20), ("capturing?", 0x30), ("record", 0x77, 0x20, 3), ("wait", 0x30, 0x77, 0, 3)]
    assert _handoff._pools[3] == [0x77]  # back in the pool
    recording_runtime.calls.clear()
    assert _handoff.handoff(0x20, -1, 3) is False and not recording_runtime.calls  # -1: no synchronization
    recording_runtime.fail = 700
    with pytest.raises(RuntimeError, match="700"):
        _handoff.handoff(0x20, 0x30, 3)
    assert _handoff._pools[3] == [0x77]


# -- the runtime the core binds to: CuPy's own, through its C entries --------------

def _capsule_name(capsule):
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype, get.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return get(capsule).decode()


def test_the_core_binds_to_the_c_entries_of_cupys_runtime_module():
    # CuPy links the CUDA runtime statically: its runtime module's C entries
    # (__pyx_capi__, what CuPy's own modules call) are the only way to the
    # runtime instance that made CuPy's streams and events. They need no GPU.
    pytest.importorskip("cupy")
    from cupy_backends.cuda.api import runtime

    from gpu_dlpack import _handoff

    for name, signature in core.RUNTIME_ENTRIES:
        assert _capsule_name(runtime.__pyx_capi__[name]) == signature, name
    _handoff._bindings.clear()
    try:
        assert _handoff.binding().startswith(
            "CuPy's own runtime, through cupy_backends.cuda.api.runtime.__pyx_capi__ (getDevice, setDevice, "
            "eventRecord, streamWaitEvent, memcpyAsync, streamSynchronize, streamIsCapturing)")
        assert _handoff.core_bound(_handoff._runtime())
    finally:
        _handoff._bindings.clear()


def test_the_core_refuses_an_entry_whose_c_signature_differs_and_names_it(monkeypatch):
    pytest.importorskip("cupy")
    import types

    from cupy_backends.cuda.api import runtime

    from gpu_dlpack import _handoff

    capi = dict(runtime.__pyx_capi__)
    good = capi["eventRecord"]
    capi["eventRecord"] = capi["eventQuery"]  # PyObject *(intptr_t, int __pyx_skip_dispatch)
    assert core.bind_runtime(capi) == (
        "eventRecord", "PyObject *(intptr_t, int __pyx_skip_dispatch)",
        "PyObject *(intptr_t, intptr_t, int __pyx_skip_dispatch)")
    del capi["eventRecord"]
    assert core.bind_runtime(capi)[:2] == ("eventRecord", None)
    assert good is runtime.__pyx_capi__["eventRecord"]
    # The layer keeps CuPy's Python calls then, and says why.
    fake = types.ModuleType(_handoff.CUPY_RUNTIME)
    fake.__pyx_capi__, fake.getDevice = capi, runtime.getDevice
    monkeypatch.setitem(sys.modules, _handoff.CUPY_RUNTIME, fake)
    monkeypatch.setattr(_handoff, "_bindings", [])
    face = types.ModuleType("cupy.cuda.runtime")
    face.getDevice = runtime.getDevice
    assert not _handoff.core_bound(face)
    assert _handoff.binding() == (
        "none: the compiled core does not bind to CuPy's runtime: the entry 'eventRecord' of "
        "cupy_backends.cuda.api.runtime.__pyx_capi__ is missing, not the 'PyObject *(intptr_t, intptr_t, "
        "int __pyx_skip_dispatch)' the core calls. The stream hand-off and copies run through CuPy's Python "
        "calls instead (the same functions, with the same results); a gpu_dlpack release made for this CuPy "
        "binds again.")


# -- leaks of the C exchange API, on both sides ----------------------------------

def test_exchanges_through_the_c_api_leak_nothing(figures, torch):
    tvm_ffi = pytest.importorskip("tvm_ffi")
    a = np.arange(64.0)
    ref = weakref.ref(a)
    t = torch.from_numpy(a)  # torch's tensors hold t's storage, which holds a
    del a
    x = np.arange(64.0)
    refs = sys.getrefcount(x)

    def step(i):
        kind = i % 4
        if kind == 0:
            b = torch.from_dlpack(gpu_dlpack.wrap(t))
        elif kind == 1:
            b = np.from_dlpack(tvm_ffi.from_dlpack(gpu_dlpack.wrap(t)))
        elif kind == 2:
            b = np.from_dlpack(tvm_ffi.from_dlpack(gpu_dlpack.wrap(x)))
        else:
            b = gpu_dlpack.from_dlpack(t)
        if b[i % 64] != i % 64:
            raise AssertionError("values changed")

    soak(figures, "wrap -> torch, wrap -> tvm-ffi, torch -> gpu_dlpack", step)
    assert sys.getrefcount(x) == refs
    del t
    assert _freed(ref), "a tensor of the exchange outlived its cycle"


# -- torch -> CuPy: torch's C exchange API and its current work stream -------------

def test_the_exchange_of_a_torch_tensor_gives_its_capsule_unsynchronized(torch):
    t = torch.arange(6.0)
    capsule, stream = core.exchange(t)
    info = gpu_dlpack.inspect(capsule)
    assert info.versioned and info.data == t.data_ptr() and info.shape == (6,)
    assert stream == 0  # no stream on the CPU
    assert gpu_dlpack.from_dlpack(capsule).tolist() == t.tolist()
    # What torch's __dlpack__ refuses, the exchange leaves to it.
    assert core.exchange(torch.ones(2, requires_grad=True)) is None
    assert core.exchange(np.arange(3)) is None


@pytest.mark.gpu
def test_torch_to_cupy_through_the_exchange_waits_for_torch_current_stream(tc, cp):
    import torch as torch_module

    s = torch_module.cuda.Stream()
    with torch_module.cuda.stream(s):
        t = torch_module.arange(1 << 20, device="cuda", dtype=torch_module.float32) * 2
    consumer = cp.cuda.Stream(non_blocking=True)
    with torch_module.cuda.stream(s):
        g = gpu_dlpack.from_dlpack(t, stream=consumer)
    assert g.data.ptr == t.data_ptr()
    consumer.synchronize()
    assert float(g[-1]) == float((1 << 20) - 1) * 2


# -- what the core reads, it reads before Python code runs ----------------------

def test_checked_frees_a_refused_tensor_once_when_its_refusal_consumed_the_capsule():
    # The refusal's words are Python: another consumer of the capsule (here
    # the wording itself) may take and free the tensor while they are made.
    # The capsule is freed once, and the refusal raised.
    from gpu_dlpack import _capsule

    from . import capsules

    a = np.arange(6.0)
    cap, rec = capsules.make(a, dtype=(2, 64, 2))  # a vector type: not exchanged, so refused

    def not_exchanged(code, bits, lanes):
        _capsule.discard(cap)  # consumed and freed: the struct is poisoned
        assert rec.calls == 1
        return BufferError(f"refused {(code, bits, lanes)}")

    with pytest.raises(BufferError, match=r"refused \(2, 64, 2\)"):
        _capsule.checked(cap, True, not_exchanged)
    assert rec.calls == 1


def test_the_dtype_check_is_the_cores_over_the_table_of_dtypes():
    # One check: the core's, over _dtypes.KNOWN as the policy told it (known);
    # Python words its refusal only.
    from gpu_dlpack import _capsule, _dtypes

    from . import capsules

    asked = []
    for code, bits in sorted(_dtypes.KNOWN):
        cap, _ = capsules.make(np.zeros(2, np.uint64), dtype=(code, bits, 1), shape=(1,))
        _capsule.checked(cap, True, lambda *dt: asked.append(dt))
        _capsule.discard(cap)
    assert asked == []
    for dtype, why in (((2, 64, 2), "vector types"), ((2, 24, 1), "DLPack float has no 24-bit type"),
                       ((31, 8, 1), "not a DLPack dtype code"), ((0, 128, 1), "DLPack int has no 128-bit type")):
        cap, rec = capsules.make(np.zeros(1, np.uint64), dtype=dtype, shape=(1,))
        with pytest.raises(BufferError, match=why):
            _capsule.checked(cap, True, _dtypes.not_exchanged)
        assert _capsule.is_unconsumed(cap) is False and rec.calls == 1


def test_the_guards_are_the_rows_own_descriptors_and_readers(torch):
    # The core reads an attribute guard through the type's data descriptor
    # and calls the views' readers (the row's own methods), the objects the
    # general path reads: no name is looked up per export.
    from gpu_dlpack import _peers, _wiring

    api, attrs, methods, codes, _, _ = _wiring._import_plan(torch.Tensor)
    assert attrs == (torch._C.TensorBase.__dict__["requires_grad"],)
    readers = _peers.export_facts(torch.Tensor).readers
    assert methods == tuple(test for test, _ in readers) and methods[0] is torch.Tensor.is_neg
    assert len(codes) == len(methods)


def test_an_attribute_guard_is_read_by_name_where_getattr_may_read_another():
    from gpu_dlpack._wiring import _data_descriptor

    class Getset:
        x = property(lambda self: 1)
        y = 1

    class Own(Getset):
        def __getattribute__(self, name):
            return object.__getattribute__(self, name)

    assert _data_descriptor(Getset, "x") is Getset.__dict__["x"]
    assert _data_descriptor(Getset, "y") is None and _data_descriptor(Getset, "z") is None
    assert _data_descriptor(Own, "x") is None


@pytest.mark.parametrize("field, bad, words", [(1, lambda attrs: ("requires_grad",), "descriptors"),
                                               (2, lambda methods: (1,) * len(methods), "callables")])
def test_an_import_plan_whose_guards_the_core_cannot_read_is_refused(torch, monkeypatch, field, bad, words):
    from gpu_dlpack import _wiring

    real = _wiring._import_plan

    def plan(t):
        found = real(t)
        return found if found is None else found[:field] + (bad(found[field]),) + found[field + 1:]

    monkeypatch.setattr(_wiring, "_import_plan", plan)
    _wiring.forget()
    try:
        with pytest.raises(TypeError, match=words):
            gpu_dlpack.from_dlpack(torch.ones(2))
    finally:
        monkeypatch.undo()
        _wiring.forget()
    assert gpu_dlpack.from_dlpack(torch.ones(2)).tolist() == [1.0, 1.0]


def test_a_producer_table_forgotten_while_its_guards_run_stays_alive_for_that_import(torch):
    # The guards (torch's requires_grad, is_conj) are Python where a torch
    # function mode is active: one may make the core forget what it learnt
    # of torch.Tensor meanwhile. The import that is reading the entry keeps
    # it alive (the sanitizer run sees a read of a freed entry otherwise).
    import gc

    from torch.overrides import TorchFunctionMode

    forgot = []

    class Forget(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            core.forget()
            gc.collect()
            forgot.append(func)
            return func(*args, **(kwargs or {}))

    t = torch.ones(4, dtype=torch.complex64)
    for call in (lambda: gpu_dlpack.from_dlpack(t), lambda: core.exchange(t),
                 lambda: torch.from_dlpack(gpu_dlpack.wrap(t)), lambda: gpu_dlpack.export(t, max_version=(1, 0))):
        with Forget():
            out = call()
        assert out is not None
    assert forgot  # the guards did run Python


def test_handoff_converts_no_argument_after_one_that_failed(recording_runtime):
    # A conversion may run Python (__index__): never with an error pending.
    called = []

    class Index:
        def __index__(self):
            called.append(True)
            return 0

    with pytest.raises(TypeError):
        core.handoff("not a pointer", 0, 0, Index(), 0)
    assert not called and not recording_runtime.calls


class _FailingRuntime:
    """CuPy's runtime functions the core calls, on GPU 0 at first; the call
    named ``fail`` raises (``setDevice`` the ``nth`` time), as CuPy's do."""

    def __init__(self, fail=None, nth=1):
        self.device, self.fail, self.nth, self.calls = 0, fail, nth, []

    def _call(self, name, *args):
        self.calls.append((name, *args))
        if name == self.fail:
            self.nth -= 1
            if self.nth == 0:
                raise RuntimeError(f"{name} failed (stand-in)")

    def getDevice(self):
        self._call("getDevice")
        return self.device

    def setDevice(self, device):
        self._call("setDevice", device)
        self.device = device

    def eventRecord(self, event, stream):
        self._call("eventRecord", event, stream)

    def streamWaitEvent(self, stream, event, flags=0):
        self._call("streamWaitEvent", stream, event)

    def memcpyAsync(self, dst, src, n, kind, stream):
        self._call("memcpyAsync", stream)

    def streamSynchronize(self, stream):
        self._call("streamSynchronize", stream)


HANDOFF = (0x10, 0x20, 0x30, 1, 2)  # event, producer, consumer, device, consumer_device
COPY = (0x1000, 0x2000, 8, 0x30, 1, 0x40, True)  # dst, src, nbytes, stream, device, event, synchronize


@pytest.mark.parametrize("call, args, fail, nth, made, device", [
    ("handoff", HANDOFF, "getDevice", 1, ["getDevice"], 0),
    ("handoff", HANDOFF, "setDevice", 1, ["getDevice", "setDevice"], 0),
    ("handoff", HANDOFF, "eventRecord", 1, ["getDevice", "setDevice", "eventRecord", "setDevice"], 0),
    ("handoff", HANDOFF, "setDevice", 2, ["getDevice", "setDevice", "eventRecord", "setDevice", "setDevice"], 0),
    ("handoff", HANDOFF, "streamWaitEvent", 1,
     ["getDevice", "setDevice", "eventRecord", "setDevice", "streamWaitEvent", "setDevice"], 0),
    ("handoff", HANDOFF, "setDevice", 3,  # the restore itself: raised, the device left as it is
     ["getDevice", "setDevice", "eventRecord", "setDevice", "streamWaitEvent", "setDevice"], 2),
    ("copy", COPY, "getDevice", 1, ["getDevice"], 0),
    ("copy", COPY, "memcpyAsync", 1, ["getDevice", "setDevice", "memcpyAsync", "setDevice"], 0),
    ("copy", COPY, "eventRecord", 1, ["getDevice", "setDevice", "memcpyAsync", "eventRecord", "setDevice"], 0),
    ("copy", COPY, "streamSynchronize", 1,
     ["getDevice", "setDevice", "memcpyAsync", "eventRecord", "streamSynchronize", "setDevice"], 0),
    ("copy", COPY, "setDevice", 2,  # the restore itself
     ["getDevice", "setDevice", "memcpyAsync", "eventRecord", "streamSynchronize", "setDevice"], 1),
])
def test_a_failed_runtime_call_raises_its_error_makes_no_later_call_and_restores_the_device(
        call, args, fail, nth, made, device):
    rt = _FailingRuntime(fail, nth)
    _bind_stand_in(rt)
    try:
        with pytest.raises(RuntimeError, match=f"{fail} failed"):
            getattr(core, call)(*args)
    finally:
        _unbind()
    assert [c[0] for c in rt.calls] == made
    assert rt.device == device


@pytest.mark.parametrize("call, good", [("handoff", HANDOFF), ("copy", COPY)])
def test_each_argument_is_converted_before_the_next_and_none_after_one_that_failed(call, good):
    rt = _FailingRuntime()
    _bind_stand_in(rt)
    try:
        for i in range(len(good)):
            args = list(good)
            args[i] = "not a number"
            if call == "copy" and i == 6:
                class Falsy:  # synchronize=: its truth fails
                    def __bool__(self):
                        raise ValueError("no truth")

                args[i] = Falsy()
            with pytest.raises((TypeError, ValueError)):
                getattr(core, call)(*args)
        with pytest.raises(TypeError):
            getattr(core, call)(*good[:-1])
        assert rt.calls == []  # nothing called the runtime
        if call == "copy":  # no event and no wait asked: the copy alone
            core.copy(*good[:5], 0, False)
            assert [c[0] for c in rt.calls] == ["getDevice", "setDevice", "memcpyAsync", "setDevice"]
    finally:
        _unbind()


def test_the_core_binds_only_a_dict_of_capsules_and_unbinds_with_none():
    with pytest.raises(TypeError, match="__pyx_capi__ dict"):
        core.bind_runtime([])
    assert core.bind_runtime({"getDevice": 1})[:2] == ("getDevice", None)  # no capsule
    _unbind()
    with pytest.raises(RuntimeError, match="no CUDA runtime for the stream hand-off"):
        core.handoff(*HANDOFF)


_RUNTIME_SWAPPED = r'''
import ctypes
from gpu_dlpack._compiled import core
from tests import simcuda
calls = []
class Runtime:
    def getDevice(self):
        return 0
    def setDevice(self, device):
        pass
    def eventRecord(self, event, stream):
        calls.append("record")
    def streamWaitEvent(self, stream, event, flags):
        pass
    def memcpyAsync(self, dst, src, n, kind, stream):
        calls.append("memcpy")
        core.bind_runtime(None)  # another thread (here: the call itself) takes the runtime away
    def streamSynchronize(self, stream):
        calls.append("sync")
assert core.bind_runtime(simcuda.load().forwarding_capi(Runtime())) is None
print(core.copy(0x1000, 0x2000, 8, 0x30, 0, 0x40, True), calls)
# A consumer may pass no set_error to the allocator of wrap()'s C exchange API.
import numpy as np, gpu_dlpack
w = gpu_dlpack.wrap(np.arange(2.0))
get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
get_ptr.restype, get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
table = (ctypes.c_void_p * 7).from_address(get_ptr(type(w).__dlpack_c_exchange_api__, b"dlpack_exchange_api"))
alloc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                          ctypes.c_void_p)(table[2])
made = ctypes.c_void_p(1)
print(alloc(None, ctypes.byref(made), None, None), made.value)
'''


def test_a_copy_keeps_the_runtime_it_started_with_and_the_allocator_takes_no_set_error():
    from .interpreter import run_python

    done = run_python(_RUNTIME_SWAPPED)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["None ['memcpy', 'record', 'sync']", "-1 None"]


# -- JAX in C: its capsules asked for, imported, passed on and adapted by the core ----

def _layer_calls(fn):
    """``(fn(), names)``: the Python functions of gpu_dlpack that ``fn()``
    runs, in order (the compiled core's calls are not Python calls)."""
    root = os.path.join(ROOT, "gpu_dlpack") + os.sep
    names = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            names.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    return out, names


def _void(address):
    return ctypes.c_void_p.from_address(address).value or 0


def test_the_plain_jax_exchanges_run_in_the_core(jax, torch):
    from .helpers import pointer

    j = jax.numpy.arange(6.0)
    exchanges = {
        "from_dlpack": lambda: gpu_dlpack.from_dlpack(j),
        "export": lambda: gpu_dlpack.export(j, max_version=(1, 0)),
        "torch consumes wrap": lambda: torch.from_dlpack(gpu_dlpack.wrap(j)),
        "inspect": lambda: gpu_dlpack.inspect(j.__dlpack__()),
    }
    for fn in exchanges.values():
        fn()  # the first call tells the core what JAX's type is (Python)
    ran = {name: _layer_calls(fn) for name, fn in exchanges.items()}
    # No Python function of the layer runs: all of it is C.
    assert {name: calls for name, (_, calls) in ran.items()} == {
        "from_dlpack": [], "export": [], "torch consumes wrap": [], "inspect": [],
    }
    # A legacy capsule of JAX's immutable array is refused (rule 5): Python
    # words the refusal.
    for legacy in (lambda: gpu_dlpack.export(j), lambda: gpu_dlpack.wrap(j).__dlpack__()):
        with pytest.raises(gpu_dlpack.ReadOnlyError):
            legacy()
    arr = ran["from_dlpack"][0]
    assert arr.ctypes.data == pointer(j) and not arr.flags.writeable
    from gpu_dlpack import _peers

    # It frees JAX's tensor: a legacy one before 0.12, a versioned one from 0.12.
    legacy = _peers.release(jax.__version__) < (0, 12)
    assert ('"gpu_dlpack.exchanged_legacy"' if legacy else '"gpu_dlpack.exchanged"') in repr(arr.base)
    assert ran["torch consumes wrap"][0].data_ptr() == pointer(j)


def test_an_adapted_jax_capsule_holds_the_legacy_struct_in_its_manager_ctx(jax):
    from gpu_dlpack import _capsule, _peers

    if _peers.release(jax.__version__) >= (0, 12):
        pytest.skip(f"JAX {jax.__version__} gives a versioned capsule itself: nothing is adapted")
    j = jax.numpy.arange(6.0)
    cap = gpu_dlpack.export(j, max_version=(1, 0))
    info = gpu_dlpack.inspect(cap)
    assert info.versioned and info.readonly and info.version == gpu_dlpack.DLPACK_VERSION
    ctx = _void(_capsule.pointer(cap, True) + 8)
    # DLManagedTensor starts with its DLTensor, which starts with the data
    # pointer: JAX's struct itself, on every NumPy.
    assert ctx and _void(ctx) == j.unsafe_buffer_pointer() == info.data


def _legacy_on(device, **kw):
    from . import capsules

    return capsules.make(np.arange(6.0), versioned=False, device=device, **kw)


@pytest.mark.parametrize("device", [(1, 0), (1, 3), (2, 0), (4, 0)])
def test_the_legacy_to_versioned_adaptation_frees_the_legacy_tensor_once_on_every_path(device):
    # Consumed, refused by the consumer, never consumed: the legacy deleter
    # runs once, for a producer on any device. The new struct's manager_ctx
    # is the legacy struct itself.
    from gpu_dlpack import _capsule

    from .capsules import Producer, consume_and_free

    ends = {
        "consumed": consume_and_free,
        "refused": lambda c: pytest.raises(BufferError, gpu_dlpack.from_dlpack, c, device="cuda:7"),
        "never consumed": lambda c: None,
    }
    for end in ends.values():
        cap, rec = _legacy_on(device)
        adapted = gpu_dlpack.export(Producer(cap, device=device), max_version=(1, 0))
        info = gpu_dlpack.inspect(adapted)
        assert info.versioned and info.readonly and info.data == rec.struct.dl_tensor.data
        assert info.device.dlpack == (device if device[0] != 1 else (1, 0))  # the host as NumPy labels it
        assert _void(_capsule.pointer(adapted, True) + 8) == rec.address
        assert rec.calls == 0
        end(adapted)
        del adapted, cap
        import gc

        gc.collect()
        assert rec.calls == 1


@pytest.mark.parametrize("device", [(1, 0), (2, 0)])
def test_the_versioned_to_legacy_adaptation_frees_the_versioned_tensor_once(device):
    from gpu_dlpack import _capsule

    from . import capsules

    for consume in (True, False):
        cap, rec = capsules.make(np.arange(6.0), versioned=True, device=device)
        legacy = gpu_dlpack.export(capsules.Producer(cap, device=device))
        info = gpu_dlpack.inspect(legacy)
        assert info.name == "dltensor" and info.data == rec.struct.dl_tensor.data and info.strides == (1,)
        assert _void(_capsule.pointer(legacy, False) + 48) == rec.address  # DLManagedTensor.manager_ctx
        if consume:
            capsules.consume_and_free(legacy)
        del legacy, cap
        import gc

        gc.collect()
        assert rec.calls == 1


def test_a_capsule_the_adaptation_refuses_is_freed_at_once_with_the_layers_error():
    # A dtype that is not exchanged (bfloat with 8 bits): the adaptation
    # refuses it with the layer's error and frees the tensor at once.
    from .capsules import DeviceProducer

    p = DeviceProducer(np.arange(6, dtype=np.uint16), device=(2, 0), data=0x1000, dtype=(4, 8, 1))
    with pytest.raises(BufferError, match="DLPack"):
        gpu_dlpack.export(p, max_version=(1, 0))
    assert [r.calls for r in p.records] == [1]


def test_an_equal_max_version_of_another_caller_takes_the_plain_path():
    # The version policy caches the tuple it last accepted; every caller
    # passes its own (1, 0) (NumPy, torch and tvm-ffi each have theirs), and
    # an equal pair of ints gets the same verdict without asking it again.
    if np.lib.NumpyVersion(np.__version__) < "2.1.0":
        pytest.skip("NumPy before 2.1 makes no versioned capsule: its versioned export is always the Python one's")
    x = np.arange(3.0)
    gpu_dlpack.export(x, max_version=(1, 0))
    other = tuple([1, 0])  # equal, not the same object
    cap, calls = _layer_calls(lambda: gpu_dlpack.export(x, max_version=other))
    assert calls == [] and gpu_dlpack.inspect(cap).version == gpu_dlpack.DLPACK_VERSION
    # A pair that is not of ints, though equal ((True, 0) == (1, 0)), is the
    # policy's to judge: it refuses it.
    with pytest.raises(TypeError, match="two ints"):
        gpu_dlpack.export(x, max_version=(True, 0))


@pytest.mark.parametrize("versioned", [False, True])
def test_the_adaptation_adds_a_byte_offset_to_the_data_as_an_address(versioned):
    # An offset of 2**63 reaches past any object C knows of: the sum is an
    # address, not pointer arithmetic (UBSan aborted the core's rebuild on
    # it). The data is never read: the first page, which no process maps.
    from .capsules import Producer, make

    cap, rec = make(np.arange(6.0), versioned=versioned, device=(2, 0), data=0x1000, byte_offset=2**63)
    out = gpu_dlpack.export(Producer(cap, device=(2, 0)), max_version=None if versioned else (1, 0))
    info = gpu_dlpack.inspect(out)
    assert info.versioned is not versioned and info.data == 0x1000 + 2**63 and info.byte_offset == 0
    del out
    import gc

    gc.collect()
    assert rec.calls == 1


def test_inspect_of_capsules_of_one_array_gives_one_record_and_of_any_other_fields_its_own():
    # The last record is given again for a capsule of the same fields (a
    # record is frozen), and its shape and strides to a record of another
    # array of that shape; a field that differs, with the same data address
    # or another, makes a record of its own fields.
    x = np.arange(6.0).reshape(2, 3)
    a, b = (gpu_dlpack.inspect(x.__dlpack__(max_version=(1, 0))) for _ in range(2))
    assert a is b
    y = x.copy()
    c = gpu_dlpack.inspect(y.__dlpack__(max_version=(1, 0)))
    assert c is not a and c.data == y.ctypes.data and c.shape is a.shape and c.strides is a.strides
    ro = x.view()
    ro.flags.writeable = False
    shifted = x.__dlpack__()
    managed(shifted).dl_tensor.byte_offset = 8
    others = {
        "shape": (x.reshape(3, 2), lambda i: i.shape == (3, 2)),
        "ndim": (x.reshape(6), lambda i: i.shape == (6,)),
        "strides": (x[:, ::2], lambda i: i.shape == (2, 2) and i.strides == (3, 2)),
        "dtype": (x.view(np.int64), lambda i: i.dl_dtype == (0, 64, 1)),
        "flags": (ro, lambda i: i.readonly),
        "kind": (x.__dlpack__(), lambda i: not i.versioned and i.version is None),
        "byte_offset": (shifted, lambda i: i.byte_offset == 8),
    }
    for field, (other, right) in others.items():
        kept = gpu_dlpack.inspect(x.__dlpack__(max_version=(1, 0)))
        cap = other if type(other) is type(shifted) else other.__dlpack__(max_version=(1, 0))
        got = gpu_dlpack.inspect(cap)
        assert got is not kept and got.data == x.ctypes.data and right(got), field


# -- a capsule's kind and pointer, and the patches of a tensor's fields --------------
# The core's primitives the layer calls by a capsule or an address (once
# ctypes calls in _capsule.py): each answers or writes exactly its field, and
# a refusal writes nothing and says why in the layer's words.

def test_kind_and_is_unconsumed_read_a_capsule_name_once():
    from gpu_dlpack import _capsule

    from . import capsules

    versioned, legacy = np.arange(3.0).__dlpack__(max_version=(1, 0)), np.arange(3.0).__dlpack__()
    assert core.kind(versioned) is True and core.kind(legacy) is False
    assert core.is_unconsumed(versioned) is True and core.is_unconsumed(legacy) is True
    gpu_dlpack.from_dlpack(gpu_dlpack.wrap(legacy))  # consumed: renamed used_dltensor
    with pytest.raises(gpu_dlpack.ConsumedCapsuleError, match="'used_dltensor'"):
        core.kind(legacy)
    assert core.is_unconsumed(legacy) is False
    for name, shown in ((b"dltensor\xff", "'dltensor\\ufffd'"), (False, "None"), ("other", "'other'")):
        cap, _rec = capsules.make(name=name)
        with pytest.raises(BufferError, match=f"this one is named {shown}"):
            core.kind(cap)
        assert core.is_unconsumed(cap) is False
    with pytest.raises(TypeError, match="got int"):
        core.kind(3)
    assert core.is_unconsumed(3) is False
    assert _capsule.kind is core.kind and _capsule.is_unconsumed is core.is_unconsumed


def test_pointer_is_the_capsule_pointer_of_its_kind_only():
    from . import capsules

    for versioned in (False, True):
        cap, rec = capsules.make(versioned=versioned)
        assert core.pointer(cap, versioned) == rec.address
        with pytest.raises(ValueError, match="incorrect name"):
            core.pointer(cap, not versioned)
    with pytest.raises(ValueError, match="invalid PyCapsule"):
        core.pointer(object(), True)


@pytest.mark.parametrize("versioned", [False, True])
def test_set_dtype_and_set_device_write_those_fields_only(versioned):
    from . import capsules

    cap, rec = capsules.make(versioned=versioned, dtype=(2, 64, 4), device=(1, 0))
    before = bytes(rec.struct)
    core.set_dtype(cap, 1, 16)
    t = rec.struct.dl_tensor
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (1, 16, 1)
    core.set_device(cap, gpu_dlpack.DLDeviceType.CUDA_HOST, 2**31 - 1)
    assert (t.device.device_type, t.device.device_id) == (3, 2**31 - 1)
    core.set_device(cap, 1, 0)
    core.set_dtype(cap, 2, 64)
    t.dtype.lanes = 4
    assert bytes(rec.struct) == before  # nothing else was written


@pytest.mark.parametrize("call, args", [
    (core.set_dtype, (256, 8)), (core.set_dtype, (1, -1)), (core.set_dtype, (1.0, 8)),
    (core.set_device, (2**31, 0)), (core.set_device, (1, -(2**31) - 1)), (core.set_device, ("cpu", 0)),
])
def test_a_dtype_or_device_that_does_not_fit_its_field_writes_nothing(call, args):
    from . import capsules

    cap, rec = capsules.make(versioned=True)
    before = bytes(rec.struct)
    with pytest.raises(ValueError, match="is written into"):
        call(cap, *args)
    with pytest.raises(ValueError, match="is written into"):
        call(rec.address, 1, 8)  # an address is no capsule
    assert bytes(rec.struct) == before


def test_strides_left_out_are_pointed_after_the_shape_and_nothing_else_is_written():
    from . import capsules

    x = np.zeros((2, 3))
    # The shape and, after it, the strides in one array, as NumPy 2.1 to 2.3 allocate them.
    cap, rec = capsules.make(x, null_strides=True, together=(4, 0, 2, 7))
    t = rec.struct.dl_tensor
    shape_at = ctypes.cast(t.shape, ctypes.c_void_p).value
    assert core.point_strides_after_shape(cap) is True
    assert ctypes.cast(t.strides, ctypes.c_void_p).value == shape_at + 16
    assert gpu_dlpack.inspect(cap).strides == (3, 1)
    assert core.point_strides_after_shape(cap) is False  # strides there: left as they are
    assert ctypes.cast(t.strides, ctypes.c_void_p).value == shape_at + 16
    for kw in ({"null_shape": True}, {"ndim": 0, "shape": ()}, {"ndim": 65}):
        cap, rec = capsules.make(x, null_strides=True, **kw)
        before = bytes(rec.struct)
        assert core.point_strides_after_shape(cap) is False
        assert bytes(rec.struct) == before
    legacy, rec = capsules.make(x, versioned=False, null_strides=True)
    with pytest.raises(ValueError, match="incorrect name"):
        core.point_strides_after_shape(legacy)
    assert rec.struct.dl_tensor.strides is not None and not rec.struct.dl_tensor.strides


def test_every_plain_dtype_is_the_core_s_own(ml_dtypes):
    # The core's plain dtypes were its own list (one per code and width),
    # _dtypes.PLAIN's another (with 'q' and 'Q', NumPy's other int64 and
    # uint64: every int64 array on Windows): an array of those left the core
    # for the Python path. One table: every export, wrap and import of a
    # plain dtype runs no Python function of the layer.
    from gpu_dlpack import _dtypes
    from gpu_dlpack._backends import numpy as numpy_backend

    assert len(_dtypes.PLAIN) == 16
    if not numpy_backend.VERSIONED_NUMPY or numpy_backend.STRIDES_AFTER_SHAPE:
        pytest.skip("the core makes NumPy's capsules as NumPy 2.4 lays them out: before, NumPy's own path runs")
    for dtype in _dtypes.PLAIN.values():
        x = np.arange(3).astype(dtype)
        w = gpu_dlpack.wrap(x)
        for name, call in (
            ("export", lambda: gpu_dlpack.export(x, max_version=(1, 0))),
            ("export legacy", lambda: gpu_dlpack.export(x)),
            ("wrap", lambda: w.__dlpack__(max_version=(1, 0))),
            ("from_dlpack", lambda: gpu_dlpack.from_dlpack(x)),
        ):
            call()  # the first asks the versions policy for its verdict (cached)
            out, names = _layer_calls(call)
            assert names == [], (dtype.char, name, names)
            got = gpu_dlpack.from_dlpack(out) if name != "from_dlpack" else out
            assert got.dtype == x.dtype and got.tolist() == x.tolist(), (dtype.char, name)


def test_the_adaptation_reads_the_kind_from_the_capsule_and_refuses_what_it_cannot_make():
    # The capsule's name says its kind; no argument can make the core read
    # one kind as the other. What it is asked wrongly is the layer's error
    # (the capsule left as it was), what it refuses frees the tensor once.
    from gpu_dlpack import ReadOnlyError, _capsule

    from . import capsules

    for versioned in (False, True):
        cap, rec = capsules.make(np.arange(6.0), versioned=versioned)
        for bad in (None, 1, "yes", np.bool_(True)):
            with pytest.raises(TypeError, match="must be bools"):
                core.rebuild(cap, bad, False)
            with pytest.raises(TypeError, match="must be bools"):
                core.rebuild(cap, not versioned, bad)
        with pytest.raises(ValueError, match="already"):
            core.rebuild(cap, versioned, False)
        for device in ((0, 0), (1, -1), (1.0, 0), "cpu", (1, 0, 0), (2**40, 0)):
            with pytest.raises(ValueError, match="device must be"):
                core.rebuild(cap, not versioned, False, device)
        assert _capsule.is_unconsumed(cap) and rec.calls == 0
        out = core.rebuild(cap, not versioned, False, (2, 3))
        info = gpu_dlpack.inspect(out)
        assert info.versioned is (not versioned) and info.device.dlpack == (2, 3)
        assert not _capsule.is_unconsumed(cap)
        with pytest.raises(BufferError):  # taken: its name says used_*
            core.rebuild(cap, not versioned, False)
        del out
        gc.collect()
        assert rec.calls == 1
    for cap, rec in (capsules.make(np.arange(6.0), versioned=True, flags=gpu_dlpack.FLAG_READ_ONLY),
                     capsules.make(np.arange(6.0), versioned=True)):
        read_only = not rec.struct.flags  # the flag, or the argument
        with pytest.raises(ReadOnlyError):
            core.rebuild(cap, False, read_only)
        assert not _capsule.is_unconsumed(cap) and rec.calls == 1
    with pytest.raises(TypeError):
        core.rebuild(object(), True, False)


@pytest.mark.parametrize("versioned", [False, True])
def test_no_argument_makes_the_core_read_one_kind_of_capsule_as_the_other(versioned):
    # Every entry that reads a capsule reads its kind from its name. Where a
    # caller still passes one (a hint, or the kind asked of pointer()), the
    # wrong kind, None and a non-bool give the right answer or an error,
    # never a struct read as the other kind.
    from gpu_dlpack import _capsule
    from gpu_dlpack._backends import numpy_backend

    from . import capsules

    wrong = (not versioned, None, 2, "no", np.bool_(not versioned))

    def fresh():  # pinned host memory: NumPy's import relabels it as the CPU's and back
        return capsules.make(np.arange(6.0), versioned=versioned, device=(3, 0))

    for kind in wrong:
        cap, rec = fresh()
        assert _capsule.checked(cap, kind)[0] is versioned  # a hint of which name to try first
        if bool(kind) == versioned:  # the kind asked of pointer(): the C API checks the name
            assert core.pointer(cap, kind) == rec.address
        else:
            with pytest.raises(ValueError, match="incorrect name"):
                core.pointer(cap, kind)
        header = _capsule.checked(cap)[1]
        if versioned and not numpy_backend.VERSIONED_NUMPY and not kind:
            with pytest.raises(BufferError):  # NumPy before 2.1 reads no versioned capsule
                numpy_backend.consume(cap, kind, header)
        else:
            out = numpy_backend.consume(cap, kind, header)
            assert out.tolist() == list(range(6)) and out.ctypes.data == rec.struct.dl_tensor.data
            assert (rec.struct.dl_tensor.device.device_type, rec.struct.version.major if versioned else 1) == (3, 1)
        del cap
        gc.collect()
    for entry in (core.discard, core.move, lambda c: core.set_dtype(c, 2, 64), lambda c: core.set_device(c, 1, 0),
                  lambda c: core.rebuild(c, not versioned, False)):
        cap, rec = fresh()
        entry(cap)
        gc.collect()
    for entry in (core.set_flags, lambda c, f: core.set_version(c, (1, f))):
        cap, rec = fresh()
        if versioned:
            entry(cap, 0)
        else:
            with pytest.raises(ValueError, match="is written into"):
                entry(cap, 0)


def test_the_core_restates_no_policy_and_no_numpy_abi():
    # One mechanism: the core calls no Python function by name (the
    # general paths it hands cases to are attributes of its one Policy),
    # looks none up to compare or call it (the version check is its own,
    # the dtype check too), reaches NumPy through NumPy's headers (no slot
    # number of its C-API table, no restated struct), and keeps no copy of
    # the policy in a struct of its own.
    import pathlib
    import re

    root = pathlib.Path(gpu_dlpack.__file__).parent
    sources = [root / "_core.pyx", *sorted((root / "core").glob("*.pxi"))]
    if not all(p.exists() for p in sources) or not (root / "core" / "dlpack.pxd").exists():
        pytest.skip("the core's sources are not beside this installed package")
    assert max(len(p.read_text().splitlines()) for p in sources) <= 700  # one concept a file
    code = "\n".join(re.sub(r"#.*", "", p.read_text()) for p in sources)
    assert not re.search(r"delegate|py_impl|CoreState|\bstate\.", code)
    assert set(re.findall(r"fn = policy\.(\w+)", code)) == {"from_dlpack", "current_stream", "host_capsule",
                                                             "host_export"}
    # The public functions are Cython functions: no front type, no hand-set
    # vectorcall, no keyword parser of the core's own.
    assert not re.search(r"Exporter|tp_vectorcall_offset|plain_keywords|KEYWORD_NAMES", code)
    assert "PyDict_GetItemString" not in code and "vars(" not in code
    assert not re.search(r"numpy_api\[|ArrayHead|_ARRAY_API", code)
    assert "cimport numpy" in code
    pxd = (root / "core" / "dlpack.pxd").read_text()
    assert "cdef struct CoreState" not in pxd
    assert "cdef class Policy:" in code and "cdef Policy policy" in code
    # One plan, the core's; the exported object as Cython writes classes:
    # typed fields, def methods with their real signatures, no type slot or
    # keyword parser of its own, nothing taken out of the class after.
    exportable = (root / "core" / "exportable.pxi").read_text()
    assert "def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):" in exportable
    assert "cdef readonly object _x" in exportable and "cdef int plan_of(" in exportable
    assert not re.search(r"PyDescr_New|T_OBJECT_EX|PyMemberDef|plain_keywords|tp_dict", exportable)
    # One module faces the core: _compiled alone imports it; every other
    # module takes from _compiled the names it stands on, never the module.
    importers = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                       if re.search(r"import gpu_dlpack\._core|_compiled import core|_compiled\.core\b", p.read_text()))
    assert importers == ["_compiled.py"], importers
    python = "\n".join(p.read_text() for p in sorted(root.glob("*.py")))
    assert not re.search(r"\bPLAN_|_set_plan|del Exportable\.", python)
