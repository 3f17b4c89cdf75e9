"""Exchanges inside a CUDA graph capture (docs/guide/gpu.md, "CUDA graphs").

Marked ``gpu``: on the simulated CUDA (scripts/gpu-sim.sh), which models
capture as CUDA defines it (tests/simcuda/simcuda.c, "stream capture"), and
on a GPU alike (scripts/gpu-ci.sh). Each test captures through CuPy's own
API, launches the graph at least three times where it makes one, and checks
the values after each launch; a refusal must leave the capture valid (it
ends, and its graph launches). On the simulator the checker's reports fail
any test that leaves one: a hand-off missing from the graph is a race it
reports at the replay.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _handoff

from . import simcuda
from .helpers import gpu_arange, simulated_cuda

pytestmark = pytest.mark.gpu

LAUNCHES = 3


def _settled(cp, *arrays):
    for device in range(cp.cuda.runtime.getDeviceCount()):
        with cp.cuda.Device(device):
            cp.cuda.runtime.deviceSynchronize()
    return arrays


def _capturing(stream) -> bool:
    return bool(stream.is_capturing())


def test_an_import_on_the_capturing_stream_is_zero_copy_and_keeps_the_capture(cp):
    src, dst = _settled(cp, gpu_arange(cp, 8.0), cp.empty(8))
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        b = gpu_dlpack.from_dlpack(src, stream=s.ptr)  # producer and consumer: the capturing stream
        assert _capturing(s) and b.data.ptr == src.data.ptr
        dst.data.copy_from_device_async(b.data, b.nbytes, s)
        graph = s.end_capture()
    for i in range(LAUNCHES):
        src.set(np.arange(8.0) * (i + 2), stream=s)
        graph.launch(stream=s)
        s.synchronize()
        assert dst.get(stream=s).tolist() == (np.arange(8.0) * (i + 2)).tolist()


def test_the_hand_off_between_two_streams_of_a_capture_is_recorded_into_the_graph(cp):
    # The producer writes on `p`, the consumer reads on `c`, both in the
    # capture (c joined it through an event): the layer's event record and
    # wait are graph edges, so every launch orders c's read after p's write.
    # Without them the simulator reports the read racing the write at each
    # launch.
    src, dst = _settled(cp, gpu_arange(cp, 6.0), cp.empty(6))
    staged = cp.empty(6)
    _settled(cp)
    p, c = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with p:
        p.begin_capture()
        c.wait_event(p.record())                                # c joins the capture
        staged.data.copy_from_device_async(src.data, src.nbytes, p)  # the producer's work, on p
        b = gpu_dlpack.from_dlpack(staged, stream=c.ptr)        # p -> c: recorded
        dst.data.copy_from_device_async(b.data, b.nbytes, c)    # the consumer's work, on c
        p.wait_event(c.record())                                # c rejoins p
        graph = p.end_capture()
    for i in range(LAUNCHES):
        src.set(np.arange(6.0) + 10 * i, stream=p)
        graph.launch(stream=p)
        p.synchronize()
        assert dst.get(stream=p).tolist() == (np.arange(6.0) + 10 * i).tolist()


def test_export_with_stream_none_under_capture_waits_on_the_capturing_stream(cp):
    # The standard's None is the legacy default stream, which a capture in
    # progress forbids: waiting on it would invalidate the capture. The
    # capturing stream stands in, and nothing is queued.
    (src,) = _settled(cp, gpu_arange(cp, 4.0))
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        capsule = gpu_dlpack.export(src, max_version=(1, 0), stream=None)
        assert _capturing(s)
        a = cp.from_dlpack(capsule)
        graph = s.end_capture()
    assert a.data.ptr == src.data.ptr
    for _ in range(LAUNCHES):
        graph.launch(stream=s)
        s.synchronize()
    assert src.get().tolist() == [0, 1, 2, 3]


def _refused_and_capture_kept(cp, s, call):
    """``call()`` under a capture on ``s`` raises CaptureError, and the
    capture is still valid: it ends, and its graph launches."""
    with s:
        s.begin_capture()
        with pytest.raises(gpu_dlpack.CaptureError, match="CUDA graph capture"):
            call()
        assert _capturing(s)
        graph = s.end_capture()
    for _ in range(LAUNCHES):
        graph.launch(stream=s)
    s.synchronize()


def test_a_copy_to_the_host_under_capture_is_refused_before_anything_is_queued(cp):
    (src,) = _settled(cp, gpu_arange(cp, 4.0))
    s = cp.cuda.Stream(non_blocking=True)
    _refused_and_capture_kept(cp, s, lambda: gpu_dlpack.from_dlpack(src, device="cpu"))
    _refused_and_capture_kept(cp, s, lambda: gpu_dlpack.export(src, max_version=(1, 0), dl_device=(1, 0)))
    assert gpu_dlpack.from_dlpack(src, device="cpu").tolist() == [0, 1, 2, 3]  # after it: as ever


def test_a_copy_on_the_device_under_capture_is_refused(cp):
    # Its buffers would be kept alive by an event recorded into the capture,
    # which a later exchange would query (cudaErrorCapturedEvent): refused,
    # and the next exchange goes on as ever.
    (src,) = _settled(cp, gpu_arange(cp, 4.0))
    s = cp.cuda.Stream(non_blocking=True)
    _refused_and_capture_kept(cp, s, lambda: gpu_dlpack.from_dlpack(src, copy=True, stream=s.ptr))
    with s:
        s.begin_capture()
        b = gpu_dlpack.from_dlpack(src, stream=s.ptr)
        graph = s.end_capture()
    graph.launch(stream=s)
    s.synchronize()
    assert b.get().tolist() == [0, 1, 2, 3]


def test_a_copy_from_host_memory_under_capture_is_refused(cp):
    s = cp.cuda.Stream(non_blocking=True)
    host = np.arange(4.0)
    _refused_and_capture_kept(cp, s, lambda: gpu_dlpack.from_dlpack(host, device="cuda:0", stream=s.ptr))


def test_a_copy_between_gpus_under_capture_is_refused(cp):
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    (src,) = _settled(cp, gpu_arange(cp, 4.0))
    s = cp.cuda.Stream(non_blocking=True)
    _refused_and_capture_kept(cp, s, lambda: gpu_dlpack.from_dlpack(src, device="cuda:1", copy=True))


def test_a_producer_on_the_legacy_stream_under_capture_is_refused(cp):
    # CuPy's default stream is the legacy stream: recording the producer's
    # work on it while a blocking capture runs would invalidate the capture.
    (src,) = _settled(cp, gpu_arange(cp, 4.0))
    s = cp.cuda.Stream()  # blocking: the legacy stream is off limits while it captures
    s.begin_capture()
    try:
        assert _handoff.current_stream(0) in (1, 2)  # outside `with s`: CuPy's default stream
        with pytest.raises(gpu_dlpack.CaptureError, match="legacy default stream"):
            gpu_dlpack.export(src, max_version=(1, 0), stream=s.ptr)
        assert _capturing(s)
    finally:
        graph = s.end_capture()
    graph.launch(stream=s)
    s.synchronize()


def test_a_capturing_consumer_and_a_producer_outside_the_capture(cp):
    # Work the producer still has queued outside the capture cannot be
    # waited for by a graph: refused. Once it is done, nothing is to wait
    # for: handed over without a wait.
    src, dst = _settled(cp, gpu_arange(cp, 4.0), cp.empty(4))
    producer, s = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    src.set(np.arange(4.0) + 5, stream=producer)  # queued on the producer's stream, not run
    with s:
        s.begin_capture()
        with producer, pytest.raises(gpu_dlpack.CaptureError, match="still has work queued"):
            gpu_dlpack.export(src, max_version=(1, 0), stream=s.ptr)
        assert _capturing(s)
        graph = s.end_capture()
    producer.synchronize()
    with s:
        s.begin_capture()
        with producer:
            capsule = gpu_dlpack.export(src, max_version=(1, 0), stream=s.ptr)
        b = cp.from_dlpack(capsule)
        dst.data.copy_from_device_async(b.data, b.nbytes, s)
        graph = s.end_capture()
    for _ in range(LAUNCHES):
        graph.launch(stream=s)
        s.synchronize()
        assert dst.get(stream=s).tolist() == [5, 6, 7, 8]


def test_an_invalidated_capture_is_said_so_in_the_layers_words(cp):
    (src,) = _settled(cp, gpu_arange(cp, 4.0))
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        with pytest.raises(cp.cuda.runtime.CUDARuntimeError):
            s.synchronize()  # CUDA refuses it, and invalidates the capture
        with pytest.raises(gpu_dlpack.CaptureError, match="invalidated the capture"):
            gpu_dlpack.from_dlpack(src, stream=s.ptr, copy=True)
        with pytest.raises(cp.cuda.runtime.CUDARuntimeError):
            s.end_capture()
    if simulated_cuda():  # the invalidation this test made, and no other report
        reports = simcuda.take_reports()
        assert len(reports) == 1 and "cudaStreamSynchronize" in reports[0], reports


def test_capture_of_says_what_the_runtime_says(cp):
    s = cp.cuda.Stream(non_blocking=True)
    assert _handoff.capture_of(s.ptr, 0) == _handoff.NOT_CAPTURING
    assert _handoff.capture_of(1, 0) == _handoff.NOT_CAPTURING
    blocking = cp.cuda.Stream()
    blocking.begin_capture()
    try:
        assert _handoff.capture_of(blocking.ptr, 0) == _handoff.CAPTURING
        assert _handoff.capture_of(1, 0) == _handoff.LEGACY_OFF_LIMITS  # asked, not used: still valid
        assert _handoff.capture_of(s.ptr, 0) == _handoff.NOT_CAPTURING
    finally:
        blocking.end_capture()


def test_cupy_to_torch_inside_torch_cuda_graph(cp):
    # PyTorch captures on a side stream of its own; CuPy queues its work on
    # the same stream (an ExternalStream of it), so the exchange's producer
    # and consumer are the capturing stream: no wait, nothing refused, and
    # each replay reads what CuPy's captured copy wrote.
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
        pytest.skip("needs a CUDA build of PyTorch and a GPU (runs in scripts/gpu-ci.sh)")
    src = gpu_arange(cp, 4.0, dtype=cp.float32)
    staged = cp.empty_like(src)
    out = torch.empty(4, device="cuda:0")
    _settled(cp)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        capturing = torch.cuda.current_stream()
        with cp.cuda.ExternalStream(capturing.cuda_stream):
            staged.data.copy_from_device_async(src.data, src.nbytes)
            t = torch.from_dlpack(gpu_dlpack.wrap(staged))
        out.copy_(t)
    for i in range(LAUNCHES):
        src.set(np.arange(4.0, dtype=np.float32) + i)
        cp.cuda.runtime.deviceSynchronize()
        graph.replay()
        torch.cuda.synchronize()
        assert out.tolist() == (np.arange(4.0) + i).tolist()
