"""Stream capture and CUDA graphs as the simulated CUDA models them
(tests/simcuda/simcuda.c, "stream capture"), through CuPy's own API:
``Stream.begin_capture()``, ``end_capture()``, ``Graph.launch()``,
``runtime.streamIsCapturing``.

Marked ``gpu``: on the simulator (scripts/gpu-sim.sh) and on a GPU alike,
the values after each replay and the errors CUDA gives are the same; what
the simulator's checker reports is asserted on the simulator only (on it, a
test fails on any report it does not take).
"""

from __future__ import annotations

import numpy as np
import pytest

from . import simcuda
from .helpers import gpu_arange, simulated_cuda

pytestmark = pytest.mark.gpu

UNSUPPORTED, INVALIDATED, MERGE, UNJOINED, ISOLATION, IMPLICIT, CAPTURED_EVENT = 900, 901, 902, 904, 905, 906, 907
ILLEGAL_STATE = 401


def _reports():
    """What the simulator's checker reported since the last call (None on a GPU)."""
    return simcuda.take_reports() if simulated_cuda() else None


def _status(cp, stream):
    """cudaStreamCaptureStatus of ``stream``: 0 none, 1 active, 2 invalidated
    (CuPy's streamIsCapturing raises RuntimeError for the last)."""
    try:
        return int(cp.cuda.runtime.streamIsCapturing(stream.ptr))
    except cp.cuda.runtime.CUDARuntimeError:
        raise
    except RuntimeError as exc:
        assert "invalidated the capture" in str(exc)
        return 2


def _settle(cp):
    for device in range(cp.cuda.runtime.getDeviceCount()):
        with cp.cuda.Device(device):
            cp.cuda.runtime.deviceSynchronize()


# -- a captured copy runs only when launched, as often as launched ------------------

def test_a_captured_copy_runs_at_each_launch_and_not_before(cp):
    src = gpu_arange(cp, 8.0)
    dst = cp.asarray(np.full(8, -1.0))
    _settle(cp)
    s = cp.cuda.Stream()
    s.begin_capture()
    dst.data.copy_from_device_async(src.data, src.nbytes, s)
    graph = s.end_capture()
    assert dst.get().tolist() == [-1.0] * 8  # captured, not run
    for i in range(3):
        src.set(np.arange(8.0) * (i + 2), stream=s)
        graph.launch(stream=s)
        s.synchronize()
        assert dst.get(stream=s).tolist() == (np.arange(8.0) * (i + 2)).tolist()
    assert _reports() in (None, [])


def test_a_graph_launched_on_another_stream_runs_in_that_streams_order(cp):
    src = gpu_arange(cp, 4.0)
    dst = cp.empty_like(src)
    _settle(cp)
    capturing, other = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    capturing.begin_capture()
    dst.data.copy_from_device_async(src.data, src.nbytes, capturing)
    cp.cuda.runtime.memsetAsync(src.data.ptr, 0, src.nbytes, capturing.ptr)
    graph = capturing.end_capture()
    for _ in range(3):
        src.set(np.arange(4.0) + 1, stream=other)
        graph.launch(stream=other)
        other.synchronize()
        assert dst.get(stream=other).tolist() == [1.0, 2.0, 3.0, 4.0]
        assert src.get(stream=other).tolist() == [0.0] * 4  # the memset node ran after the copy
    assert _reports() in (None, [])


@pytest.mark.skipif(not simulated_cuda(), reason="the checker is the simulator's")
def test_the_checker_judges_a_replay_like_any_other_work(cp):
    src = gpu_arange(cp, 4.0)
    dst = cp.empty_like(src)
    _settle(cp)
    writer, capturing, launch = (cp.cuda.Stream(non_blocking=True) for _ in range(3))
    capturing.begin_capture()
    dst.data.copy_from_device_async(src.data, src.nbytes, capturing)
    graph = capturing.end_capture()
    src.set(np.arange(4.0) + 5, stream=writer)
    graph.launch(stream=launch)  # never waited for the writer
    reports = _reports()
    assert len(reports) == 1 and "cudaGraphLaunch's copy node" in reports[0] and "never waited" in reports[0], reports
    _settle(cp)
    graph.launch(stream=launch)  # the host waited for the writer: ordered
    launch.synchronize()
    assert dst.get().tolist() == [5.0, 6.0, 7.0, 8.0] and _reports() == []


def test_cross_stream_capture_joins_a_stream_that_waits_on_a_captured_event(cp):
    src = gpu_arange(cp, 4.0)
    mid, dst = cp.empty_like(src), cp.empty_like(src)
    _settle(cp)
    origin, fork = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    origin.begin_capture()
    mid.data.copy_from_device_async(src.data, src.nbytes, origin)
    fork.wait_event(origin.record())
    assert _status(cp, fork) == 1  # it joined
    dst.data.copy_from_device_async(mid.data, mid.nbytes, fork)
    origin.wait_event(fork.record())  # joined back
    graph = origin.end_capture()
    assert _status(cp, fork) == 0 and _status(cp, origin) == 0
    launch = cp.cuda.Stream(non_blocking=True)
    for i in range(3):
        src.set(np.arange(4.0) - i, stream=launch)
        graph.launch(stream=launch)
        launch.synchronize()
        assert dst.get(stream=launch).tolist() == (np.arange(4.0) - i).tolist()
    assert _reports() in (None, [])


def test_a_fork_never_joined_back_fails_the_end_of_the_capture(cp):
    src = gpu_arange(cp, 4.0)
    dst = cp.empty_like(src)
    _settle(cp)
    origin, fork = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    origin.begin_capture()
    fork.wait_event(origin.record())
    dst.data.copy_from_device_async(src.data, src.nbytes, fork)
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError) as failed:
        origin.end_capture()
    assert failed.value.status == UNJOINED
    assert _status(cp, origin) == 0 and _status(cp, fork) == 0
    reports = _reports()
    assert reports is None or (len(reports) == 1 and "never waited for" in reports[0]), reports


def test_a_captured_host_function_runs_at_each_launch(cp):
    calls = []
    s = cp.cuda.Stream(non_blocking=True)
    s.begin_capture()
    s.launch_host_func(calls.append, "ran")  # CuPy's capture-aware path (cudaLaunchHostFunc, unmanaged)
    graph = s.end_capture()
    assert calls == []
    for i in range(3):
        graph.launch(stream=s)
        s.synchronize()
        assert calls == ["ran"] * (i + 1)
    assert _reports() in (None, [])


def test_a_graph_launched_into_a_capture_becomes_part_of_it(cp):
    src = gpu_arange(cp, 4.0)
    mid, dst = cp.empty_like(src), cp.empty_like(src)
    _settle(cp)
    s = cp.cuda.Stream(non_blocking=True)
    s.begin_capture()
    mid.data.copy_from_device_async(src.data, src.nbytes, s)
    inner = s.end_capture()
    s.begin_capture()
    inner.launch(stream=s)
    dst.data.copy_from_device_async(mid.data, mid.nbytes, s)
    outer = s.end_capture()
    for i in range(3):
        src.set(np.arange(4.0) * i, stream=s)
        outer.launch(stream=s)
        s.synchronize()
        assert dst.get(stream=s).tolist() == (np.arange(4.0) * i).tolist()
    assert _reports() in (None, [])


@pytest.mark.skipif(not simulated_cuda(), reason="the checker is the simulator's")
def test_a_launch_whose_node_reads_freed_memory_is_reported(cp):
    mem = cp.cuda.runtime.malloc(32)
    dst = cp.empty(4)
    s = cp.cuda.Stream(non_blocking=True)
    s.begin_capture()
    cp.cuda.runtime.memcpyAsync(dst.data.ptr, mem, 32, 3, s.ptr)
    graph = s.end_capture()
    cp.cuda.runtime.free(mem)
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError):
        graph.launch(stream=s)
    reports = _reports()
    assert len(reports) == 1 and "cudaGraphLaunch's copy node: the source" in reports[0] and "freed" in reports[0]


# -- what CUDA forbids during capture invalidates it ----------------------------------

def _forbidden_cases():
    def sync_stream(cp, s, ctx):
        s.synchronize()

    def query_stream(cp, s, ctx):
        cp.cuda.runtime.check_status(cp.cuda.runtime.streamQuery(s.ptr))

    def device_sync(cp, s, ctx):
        cp.cuda.runtime.deviceSynchronize()

    def legacy_stream(cp, s, ctx):
        cp.cuda.runtime.memcpyAsync(ctx["b"].data.ptr, ctx["a"].data.ptr, 8, 3, 0)

    def legacy_sync(cp, s, ctx):
        cp.cuda.Stream.null.synchronize()

    def query_event(cp, s, ctx):
        ctx["event"] = s.record()
        cp.cuda.runtime.check_status(cp.cuda.runtime.eventQuery(ctx["event"].ptr))

    def sync_event(cp, s, ctx):
        ctx["event"] = s.record()
        ctx["event"].synchronize()

    def pageable_to_device(cp, s, ctx):
        host = np.ones(4)
        cp.cuda.runtime.memcpyAsync(ctx["a"].data.ptr, host.ctypes.data, host.nbytes, 1, s.ptr)

    def pageable_to_host(cp, s, ctx):
        host = np.empty(4)
        cp.cuda.runtime.memcpyAsync(host.ctypes.data, ctx["a"].data.ptr, host.nbytes, 2, s.ptr)

    def synchronous_copy(cp, s, ctx):
        cp.cuda.runtime.memcpy(ctx["b"].data.ptr, ctx["a"].data.ptr, 8, 3)

    def outside_event(cp, s, ctx):
        s.wait_event(ctx["outside"])

    # name: (the call, the capture's stream is blocking, capture mode, CUDA's error)
    return {
        "synchronizing the capturing stream": (sync_stream, True, 2, UNSUPPORTED),
        "querying the capturing stream": (query_stream, True, 2, UNSUPPORTED),
        "synchronizing its device": (device_sync, True, 2, UNSUPPORTED),
        "work on the legacy stream while a blocking stream captures": (legacy_stream, True, 2, IMPLICIT),
        "synchronizing the legacy stream while a blocking stream captures": (legacy_sync, True, 2, IMPLICIT),
        "querying an event recorded in the capture": (query_event, False, 2, CAPTURED_EVENT),
        "synchronizing an event recorded in the capture": (sync_event, False, 2, CAPTURED_EVENT),
        "a copy from pageable memory on the capturing stream": (pageable_to_device, False, 2, UNSUPPORTED),
        "a copy to pageable memory on the capturing stream": (pageable_to_host, False, 2, UNSUPPORTED),
        "a synchronous copy during a capture in global mode": (synchronous_copy, False, 0, UNSUPPORTED),
        "a wait on an event recorded outside the capture": (outside_event, False, 2, ISOLATION),
    }


FORBIDDEN = _forbidden_cases()


@pytest.mark.parametrize("case", list(FORBIDDEN))
def test_what_cuda_forbids_during_capture_fails_and_invalidates_it(cp, case):
    call, blocking, mode, status = FORBIDDEN[case]
    ctx = {"a": gpu_arange(cp, 4.0), "b": cp.empty(4)}
    ctx["outside"] = cp.cuda.Stream(non_blocking=True).record()
    _settle(cp)
    s = cp.cuda.Stream(non_blocking=not blocking)
    s.begin_capture(mode=mode)
    ctx["b"].data.copy_from_device_async(ctx["a"].data, 32, s)
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError) as failed:
        call(cp, s, ctx)
    assert failed.value.status == status
    assert _status(cp, s) == 2
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError) as later:  # later work on it fails too
        ctx["b"].data.copy_from_device_async(ctx["a"].data, 32, s)
    assert later.value.status == INVALIDATED
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError) as ended:
        s.end_capture()
    assert ended.value.status == INVALIDATED
    assert _status(cp, s) == 0
    s.synchronize()  # no longer capturing: allowed
    reports = _reports()
    assert reports is None or (len(reports) == 1 and f"error {status}" in reports[0]
                               and "invalidates stream capture" in reports[0]), reports


def test_an_event_recorded_in_a_capture_is_not_queried_until_recorded_again(cp):
    s = cp.cuda.Stream(non_blocking=True)
    s.begin_capture()
    event = s.record()
    graph = s.end_capture()
    assert cp.cuda.runtime.eventQuery(event.ptr) == CAPTURED_EVENT  # the capture ended: nothing to invalidate
    s.record(event)
    s.synchronize()
    assert cp.cuda.runtime.eventQuery(event.ptr) == 0 and graph is not None
    reports = _reports()
    assert reports is None or (len(reports) == 1 and f"error {CAPTURED_EVENT}" in reports[0]), reports


def test_a_relaxed_capture_allows_a_synchronous_copy_of_another_stream(cp):
    a, b = gpu_arange(cp, 4.0), cp.empty(4)
    _settle(cp)
    s = cp.cuda.Stream(non_blocking=True)
    s.begin_capture()  # CuPy's default: relaxed
    cp.cuda.runtime.memcpy(b.data.ptr, a.data.ptr, a.nbytes, 3)
    assert _status(cp, s) == 1
    s.end_capture()
    assert b.get().tolist() == [0.0, 1.0, 2.0, 3.0] and _reports() in (None, [])


# -- the capture's status ------------------------------------------------------------

def test_stream_is_capturing_answers_none_active_invalidated(cp):
    s = cp.cuda.Stream()
    assert s.is_capturing() is False
    s.begin_capture()
    assert s.is_capturing() is True
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError) as implicit:  # the legacy stream's, meanwhile
        cp.cuda.runtime.streamIsCapturing(0)
    assert implicit.value.status == IMPLICIT
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError):
        s.synchronize()
    with pytest.raises(RuntimeError, match="invalidated the capture sequence"):
        s.is_capturing()
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError):
        s.end_capture()
    assert s.is_capturing() is False and cp.cuda.runtime.streamIsCapturing(0) is False
    reports = _reports()
    assert reports is None or len(reports) == 1, reports


def test_a_capture_begins_once_and_never_on_the_legacy_stream(cp):
    s = cp.cuda.Stream()
    s.begin_capture()
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError) as again:
        s.begin_capture()
    assert again.value.status == ILLEGAL_STATE
    s.end_capture()
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError) as legacy:
        cp.cuda.runtime.streamBeginCapture(0)
    assert legacy.value.status == UNSUPPORTED
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError) as never:
        cp.cuda.runtime.streamEndCapture(s.ptr)
    assert never.value.status == ILLEGAL_STATE
    assert _reports() in (None, [])


# -- CuPy reaches them through its own C entries ----------------------------------------

@pytest.mark.skipif(not simulated_cuda(), reason="counts the simulator's entries")
def test_cupys_capture_and_graph_api_calls_the_simulated_entries(cp):
    import gc

    sim = simcuda.installed()
    names = ("streamBeginCapture", "streamEndCapture", "streamIsCapturing", "graphInstantiate", "graphLaunch",
             "graphDestroy", "graphExecDestroy")
    before = {name: sim.calls(name)[0] for name in names}
    s = cp.cuda.Stream()
    s.begin_capture()
    assert s.is_capturing()
    graph = s.end_capture()
    graph.launch(stream=s)
    del graph
    gc.collect()
    s.synchronize()
    after = {name: sim.calls(name)[0] for name in names}
    assert all(after[name] == before[name] + 1 for name in names), (before, after)
    assert _reports() == []
