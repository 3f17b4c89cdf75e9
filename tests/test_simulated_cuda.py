"""The simulated CUDA the gpu tests run on without a GPU (tests/simcuda), and
the runtime the compiled core binds to on it.

On any machine: the simulator implements exactly the C entries of the
installed CuPy (and refuses to run, naming the entry, otherwise), and its
checker reports each hazard it must (tests/simcuda/scenarios.py, with real
CuPy on the simulator in an interpreter of its own) and none of the correct
orders. Marked ``gpu`` (run by scripts/gpu-sim.sh on the simulator): the
core's hand-off and copy reach it through CuPy's runtime entries, not
through the Python calls.
"""

from __future__ import annotations

import ctypes
import json
import types

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _handoff

from . import simcuda
from .helpers import gpu_arange, simulated_cuda
from .interpreter import run_python


# -- it implements what the installed CuPy calls, or refuses to run -------------------

def test_the_simulator_implements_exactly_the_installed_cupys_c_entries():
    pytest.importorskip("cupy")
    from cupy_backends.cuda.api import driver, runtime

    sim = simcuda.load()
    simcuda.compare(runtime.__pyx_capi__, "runtime", sim)
    simcuda.compare(driver.__pyx_capi__, "driver", sim)
    assert len(runtime.__pyx_capi__) == 106 and len(driver.__pyx_capi__) == 24  # CuPy 14


def _capsule(name: bytes):
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(1, name, None)


@pytest.mark.parametrize("change, message", [
    ("signature", "the installed CuPy's runtime entry 'eventRecord' has the signature 'int (int)'; the "
                  "simulated CUDA implements 'PyObject *(intptr_t, intptr_t, int __pyx_skip_dispatch)'"),
    ("added", "the installed CuPy's runtime module has the C entry 'cudaFuture' (int), which the simulated "
              "CUDA does not implement"),
    ("removed", "the simulated CUDA implements the runtime entry 'eventRecord', which the installed CuPy "
                "does not have"),
])
def test_a_cupy_whose_c_entries_differ_stops_the_simulator_naming_the_entry(change, message):
    sim = simcuda.load()
    names = {name: signature.encode() for mod, name, signature, _a, _k in sim.entries() if mod == "runtime"}
    keep = {b"int (int)": _capsule(b"int (int)")}  # capsules keep their names' buffers
    capi = {name: _capsule(signature) for name, signature in names.items()}
    if change == "signature":
        capi["eventRecord"] = keep[b"int (int)"]
    elif change == "added":
        capi["cudaFuture"] = _capsule(b"int")
    else:
        del capi["eventRecord"]
    with pytest.raises(simcuda.SimulatorMismatch) as refused:
        simcuda.compare(capi, "runtime", sim)
    assert str(refused.value).startswith(message), str(refused.value)


# -- what the checker sees ---------------------------------------------------------

#: Each case of scenarios.py: what its reports say (None: no report), and
#: what it measured or raised.
EXPECTED = {
    "read of another stream's write, never waited for": (
        "reads 4096 bytes at +0 of device memory of GPU 0", {"value": 0.0}),
    "read after an event wait": (None, {"value": 7.0}),
    "read after the host waited": (None, {"value": 7.0}),
    "write over what another stream still reads": ("writes 4096 bytes at +0 of device memory", {}),
    "blocking streams and the legacy default stream are ordered": (None, {"value": 7.0}),
    "a non-blocking stream and the legacy default stream are not": (
        "on the legacy default stream of GPU 0 reads 4096 bytes", {}),
    "an unknown stream handle": ("cudaStreamSynchronize: unknown stream handle 0x1234560",
                                 {"raised": "CUDARuntimeError: cudaErrorInvalidResourceHandle"}),
    "a destroyed stream": ("was destroyed", {"raised": "CUDARuntimeError: cudaErrorInvalidResourceHandle"}),
    "a destroyed event": ("cudaEventRecord: event", {"raised": "CUDARuntimeError: cudaErrorInvalidResourceHandle"}),
    "an event recorded on another device's stream": (
        "made on GPU 0, on stream", {"raised": "CUDARuntimeError: cudaErrorInvalidResourceHandle"}),
    "a wait for an event of another device": (None, {"value": 7.0}),
    "a copy into freed device memory": ("is in freed memory: device memory of GPU 0",
                                        {"raised": "CUDARuntimeError: cudaErrorInvalidValue"}),
    "the host reads a pinned result before its copy ran": (
        "the host read pinned memory at", {"value": 0.0}),
    "the host reads a pinned result after its stream": (None, {"value": 7.0}),
    "the host reads device memory": ("the host read device memory of GPU 0", {}),
    "pageable memory is staged when the copy is queued": (None, {"value": 7.0}),
    "a CUDA call from a host function": ("runtime.getDevice was called from a host function", {}),
    "an entry the simulator does not implement": (
        "runtime.memPoolTrimTo is not simulated",
        {"raised": "NotSimulated: the simulated CUDA does not implement runtime.memPoolTrimTo"}),
    "a kernel": (None, {"raised": ""}),
    "queries say done only once the host made the stream run": (
        None, {"value": [[False, False], [True, True], 0]}),
    "a query finds bookkeeping done, and copies queued": (None, {"value": [True, True, False, False, 2]}),
}


@pytest.fixture(scope="module")
def scenarios():
    pytest.importorskip("cupy")
    done = run_python("from tests.simcuda import scenarios; scenarios.main()",
                      env={"GPU_DLPACK_SIMCUDA": "0"}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", list(EXPECTED))
def test_the_checker_reports_each_hazard_and_no_correct_order(scenarios, case):
    report, seen = EXPECTED[case]
    got = scenarios[case]
    if report is None:
        assert got["reports"] == [], got["reports"]
    else:
        assert len(got["reports"]) == 1 and report in got["reports"][0], got["reports"]
    for key, value in seen.items():
        if key == "raised":
            assert got.get("raised", "").startswith(value) and got["raised"], got
        else:
            assert got[key] == value, got


# -- on the simulator: the core calls CuPy's runtime entries ---------------------------

sim_only = pytest.mark.skipif(not simulated_cuda(), reason="needs the simulated CUDA (GPU_DLPACK_SIMCUDA=1)")


@pytest.mark.gpu
@sim_only
def test_the_hand_off_and_the_copy_go_through_cupys_runtime_entries_on_the_compiled_path(cp):
    # The hand-off and the copy are the core's calls through CuPy's C
    # entries (the simulator counts them: C face), not CuPy's Python
    # functions (Python face): Python calls where the core binds fail this
    # test.
    sim = simcuda.installed()
    x = gpu_arange(cp, 4.0)
    consumer = cp.cuda.Stream(non_blocking=True)
    face = 0
    assert _handoff.binding().startswith("CuPy's own runtime, through cupy_backends.cuda.api.runtime")
    before = {name: sim.calls(name) for name in ("eventRecord", "streamWaitEvent", "memcpyAsync", "streamSynchronize")}
    gpu_dlpack.export(x, max_version=(1, 0), stream=consumer.ptr)  # the hand-off
    host = gpu_dlpack.from_dlpack(gpu_dlpack.export(x, max_version=(1, 0), dl_device=(1, 0)))  # a copy
    assert host.tolist() == [0, 1, 2, 3]
    after = {name: sim.calls(name) for name in before}
    for name in before:
        assert after[name][face] == before[name][face] + 1, (name, before[name], after[name])
        assert after[name][1 - face] == before[name][1 - face], (name, before[name], after[name])


@pytest.mark.gpu
@sim_only
def test_an_entry_of_cupys_runtime_is_the_one_its_python_function_calls():
    # The stand-in module is CuPy's runtime module as CuPy's other modules and
    # gpu_dlpack see it: one set of C functions under both faces.
    import sys

    import cupy

    module = sys.modules[_handoff.CUPY_RUNTIME]
    assert isinstance(module, types.ModuleType) and module.__simulated__
    assert cupy.cuda.runtime.getDevice is module.getDevice
    assert cupy.cuda.runtime.getDeviceCount() == 2
    address = ctypes.pythonapi.PyCapsule_GetPointer
    address.restype, address.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    entries = {name: a for mod, name, _s, a, _k in simcuda.installed().entries() if mod == "runtime"}
    cap = module.__pyx_capi__["getDevice"]
    assert address(cap, b"int (int __pyx_skip_dispatch)") == entries["getDevice"]


@pytest.mark.gpu
@sim_only
def test_managed_memory_where_a_gpu_lacks_concurrent_access_waits_for_every_gpu(cp):
    # cudaDevAttrConcurrentManagedAccess 0 (Windows, pre-Pascal, some virtual
    # GPUs): the host may read managed memory only while no GPU runs work.
    from gpu_dlpack._backends.cupy import gpus

    sim = simcuda.installed()
    before = sim.set_attribute(89, 0, 0)
    gpus._attribute.cache_clear()
    try:
        with cp.cuda.using_allocator(cp.cuda.malloc_managed):
            m = gpu_arange(cp, 4.0)
        synchronized = sim.calls("deviceSynchronize")
        a = gpu_dlpack.from_dlpack(gpu_dlpack.export(m, max_version=(1, 0), dl_device=(1, 0)))
        assert a.ctypes.data == m.data.ptr and a.tolist() == [0, 1, 2, 3]
        assert sum(sim.calls("deviceSynchronize")) - sum(synchronized) == 2  # both GPUs
    finally:
        sim.set_attribute(89, 0, before)
        gpus._attribute.cache_clear()


@pytest.mark.gpu
@sim_only
@pytest.mark.parametrize("concurrent", [0, 1], ids=["without concurrent access", "with concurrent access"])
def test_managed_memory_handed_to_the_host_under_capture_is_refused_before_anything_is_queued(cp, concurrent):
    # Waiting for the host (a stream's synchronization, or every GPU's where
    # the host may read managed memory only while no GPU runs work) would
    # invalidate the capture: refused, nothing synchronized, the capture
    # still valid.
    from gpu_dlpack._backends.cupy import gpus

    sim = simcuda.installed()
    before = sim.set_attribute(89, 0, concurrent)
    gpus._attribute.cache_clear()
    try:
        with cp.cuda.using_allocator(cp.cuda.malloc_managed):
            m = gpu_arange(cp, 4.0)
        cp.cuda.runtime.deviceSynchronize()
        s = cp.cuda.Stream(non_blocking=True)
        synchronized = sum(sim.calls("deviceSynchronize")), sum(sim.calls("streamSynchronize"))
        with s:
            s.begin_capture()
            with pytest.raises(gpu_dlpack.CaptureError, match="CUDA graph capture"):
                gpu_dlpack.export(m, max_version=(1, 0), dl_device=(1, 0))
            assert s.is_capturing()
            graph = s.end_capture()
        assert (sum(sim.calls("deviceSynchronize")), sum(sim.calls("streamSynchronize"))) == synchronized
        for _ in range(3):
            graph.launch(stream=s)
        s.synchronize()
        a = gpu_dlpack.from_dlpack(gpu_dlpack.export(m, max_version=(1, 0), dl_device=(1, 0)))
        assert a.ctypes.data == m.data.ptr and a.tolist() == [0, 1, 2, 3]  # outside the capture: as ever
    finally:
        sim.set_attribute(89, 0, before)
        gpus._attribute.cache_clear()


@pytest.mark.gpu
@sim_only
def test_an_array_of_the_second_gpu_hands_off_on_that_gpus_streams(cp):
    # The producer's stream and the pooled event are the second GPU's while
    # the first is current: an event recorded on another device's stream
    # fails on CUDA (and is reported by the simulator).
    with cp.cuda.Device(1):
        x = gpu_arange(cp, 8.0)
        consumer = cp.cuda.Stream(non_blocking=True)
    assert cp.cuda.runtime.getDevice() == 0
    cap = gpu_dlpack.export(x, max_version=(1, 0), stream=consumer.ptr)
    with cp.cuda.Device(1):
        a = cp.from_dlpack(cap)
        with consumer:
            y = cp.empty_like(a)
            y.data.copy_from_device_async(a.data, a.nbytes)
        consumer.synchronize()
    assert y.get().tolist() == np.arange(8.0).tolist()
