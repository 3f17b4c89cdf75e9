"""Stream hand-off on CUDA and ROCm: the mechanism behind the stream rules.

- ``handoff``: the consumer's stream waits for the work already queued on the
  producer's stream: an event is recorded on the producer's stream and
  ``cudaStreamWaitEvent`` queues the wait on the consumer's. The host never
  blocks.
- ``wait_host``: the host waits for the work queued so far on one stream (a
  copy the host reads at once), not for the whole device.
- ``keep_until_done``: objects stay alive until the work queued so far on a
  stream is done (every buffer an asynchronous copy reads or writes),
  checked without blocking at every exchange.
- ``current_stream``: the stream CuPy queues work on for a device, as a
  DLPack handle.
- ``capture_of`` and ``refuse_under_capture``: whether a stream takes part in
  a CUDA graph capture, and the refusal of what CUDA cannot record into a
  graph (a host wait, a kept buffer, the legacy stream), before anything is
  queued.

Events come from a small pool per device, created with timing disabled.
An event can go back to the pool as soon as the wait is queued:
``cudaStreamWaitEvent`` uses the state the event captured when it is called,
and a later ``cudaEventRecord`` does not change what is already waited for.
Nothing here decides whether to synchronize; ``_streams`` and the backends do.

Floor: mechanism, under ``_copies``, over the loaded core.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading

from . import _errors
from ._compiled import core

_POOL_SIZE = 8  # idle events kept per device
_MAX_PENDING = 4096  # entries keep_until_done holds before the host waits
_NOT_READY = 600  # cudaErrorNotReady and hipErrorNotReady
_CAPTURE_IMPLICIT = 906  # cudaErrorStreamCaptureImplicit: the legacy stream while a capture runs
_LEGACY = (0, 1)  # the handles of CUDA's legacy default stream
_DEFAULTS = (0, 1, 2)  # the handles of the current GPU's default streams

_pools: dict = {}  # device -> [event handle, ...]
_pending: list = []  # (event, device, stream, objects), oldest first
_pending_lock = threading.Lock()


_cuda: list = []  # CuPy's runtime module, once imported


def _runtime():
    if _forked:
        check_not_forked()
    if _cuda:
        return _cuda[0]
    from cupy.cuda import runtime

    _cuda.append(runtime)
    return runtime


class on_device:
    """A block in which GPU ``device`` is current. The runtime is asked once
    which GPU is current, and switched (and back) only when it is another."""

    __slots__ = ("device", "before")

    def __init__(self, device: int):
        self.device = device

    def __enter__(self):
        runtime = _runtime()
        self.before = before = runtime.getDevice()
        if before != self.device:
            runtime.setDevice(self.device)
        return self

    def __exit__(self, *exc):
        if self.before != self.device:
            _runtime().setDevice(self.before)


def _acquire(device: int) -> int:
    pool = _pools.get(device)
    if pool:
        try:
            return pool.pop()
        except IndexError:  # another thread took the last one
            pass
    runtime = _runtime()
    with on_device(device):
        return runtime.eventCreateWithFlags(runtime.eventDisableTiming)


def _release(device: int, event: int) -> None:
    pool = _pools.setdefault(device, [])
    if len(pool) < _POOL_SIZE:
        pool.append(event)
    else:
        _runtime().eventDestroy(event)


def pool_size(device: int) -> int:
    """Idle events in the pool of ``device`` (for tests and diagnostics)."""
    return len(_pools.get(device, ()))


def handoff(producer: int, consumer: int, device: int, consumer_device: int | None = None) -> bool:
    """Make ``consumer`` wait for the work queued so far on ``producer``.

    Both are stream handles (``-1`` for the consumer means no
    synchronization); ``producer`` lives on GPU ``device``, ``consumer`` on
    ``consumer_device`` (default: the same GPU). Returns whether a wait was
    queued. The special handles 1 and 2 name the default streams of the
    current device, so each call is made on the device its stream belongs to.
    """
    if consumer_device is None:
        consumer_device = device
    if consumer == -1 or (consumer == producer and consumer_device == device):
        return False
    runtime = _runtime()
    if _capture_stands_in(producer, consumer, device, consumer_device):
        return False
    event = _acquire(device)
    try:
        if core_bound(runtime):  # the same calls, made in C
            core.handoff(event, producer, consumer, device, consumer_device)
        else:  # a runtime the core is not bound to: its Python calls
            with on_device(device):
                runtime.eventRecord(event, producer)
            with on_device(consumer_device):
                runtime.streamWaitEvent(consumer, event, 0)
    finally:
        _release(device, event)
    return True


def wait_host(stream: int, device: int) -> None:
    """Block the host until the work queued on ``stream`` is done: one
    ``cudaStreamSynchronize`` (on its device: the handles 1 and 2 name the
    default streams of the current one), no event. Refused while the stream
    takes part in a capture (``refuse_under_capture``)."""
    refuse_under_capture("wait on the host for the stream's work", stream, device)
    with on_device(device):
        _runtime().streamSynchronize(stream)


def synchronize_device(device: int) -> None:
    """Block the host until all work queued on GPU ``device`` is done."""
    with on_device(device):
        _runtime().deviceSynchronize()


def keep_until_done(stream: int, device: int, *objects) -> None:
    """Keep ``objects`` alive until the work queued so far on ``stream`` is
    done, without blocking: an event is recorded, and ``collect`` drops the
    objects once it has completed. At most ``_MAX_PENDING`` entries wait:
    past that the host waits for the oldest. Refused while the stream
    takes part in a capture: work recorded into a graph runs at each launch,
    never known done here."""
    refuse_under_capture("keep buffers alive until a copy is done", stream, device)
    runtime = _runtime()
    event = reserve(device)
    try:
        with on_device(device):
            runtime.eventRecord(event, stream)
    except BaseException:
        abandon(event, device, stream)
        raise
    hold(event, device, stream, objects)


def reserve(device: int) -> int:
    """An event for ``hold``, after releasing what completed work held (only
    when something is pending) and bounding what waits."""
    if _pending:
        collect()
        _bound()
    return _acquire(device)


def hold(event: int, device: int, stream: int, objects) -> None:
    """Keep ``objects`` until ``event``, already recorded on ``stream`` after
    the work that touches them, has completed (``collect``)."""
    with _pending_lock:
        _pending.append((event, device, stream, objects))


def abandon(event: int, device: int, stream: int) -> None:
    """A reserved event whose recording failed goes back to the pool. The work
    may still be queued and nothing marks its end: the host waits for the
    stream before the objects it touches may go."""
    _release(device, event)
    with contextlib.suppress(Exception), on_device(device):
        _runtime().streamSynchronize(stream)


def collect() -> int:
    """Drop what ``keep_until_done`` holds for completed work; returns how
    many entries are still pending. Every entry is looked at, so one slow
    stream holds only its own work; work on one stream completes in order,
    so a stream found busy is not asked again in the same pass. Never
    blocks: a thread that finds another one collecting moves on."""
    if not _pending or not _pending_lock.acquire(blocking=False):
        return len(_pending)
    try:
        runtime = _runtime()
        busy = set()
        kept = []
        done = []
        for entry in _pending:
            event, device, stream, _objects = entry
            if (device, stream) in busy or runtime.eventQuery(event) == _NOT_READY:
                busy.add((device, stream))
                kept.append(entry)
            else:
                done.append(entry)
        _pending[:] = kept
    finally:
        _pending_lock.release()
    for event, device, _stream, _objects in done:
        _release(device, event)
    return len(kept)


def _bound() -> None:
    """Wait for the oldest pending work while more than ``_MAX_PENDING``
    entries are held."""
    while len(_pending) >= _MAX_PENDING:
        with _pending_lock:
            if len(_pending) < _MAX_PENDING:
                return
            event, device, _stream, objects = _pending.pop(0)
        _runtime().eventSynchronize(event)
        _release(device, event)
        del objects


# -- CUDA graph capture ------------------------------------------------------------
# A stream capturing a graph records work instead of running it, and CUDA
# invalidates the capture at the first operation it cannot record: a host
# wait on a capturing stream, a query of an event recorded in the capture,
# the legacy default stream while a capture runs (global mode). The hand-off
# (an event record and a wait) is recorded; everything else that touches the
# host is refused here before anything is queued (docs/guide/gpu.md, "CUDA
# graphs").

NOT_CAPTURING, CAPTURING, LEGACY_OFF_LIMITS = 0, 1, 2


def capture_of(stream: int, device: int) -> int:
    """``CAPTURING`` when ``stream`` (on GPU ``device``) is capturing a
    graph; ``LEGACY_OFF_LIMITS`` for the legacy default stream while a
    capture runs (any use of it would invalidate that capture);
    ``NOT_CAPTURING`` otherwise, and on runtimes without capture (ROCm). A
    capture already invalidated raises ``CaptureError``."""
    runtime = _runtime()
    if getattr(runtime, "is_hip", False):
        return NOT_CAPTURING
    # The handles of the default streams (0, 1, 2) name those of the current
    # GPU, asked on the stream's own; any other handle names its stream.
    on = device if stream in _DEFAULTS else -1
    try:
        if core_bound(runtime):
            capturing = core.capturing(stream, on)
        elif on < 0:
            capturing = runtime.streamIsCapturing(stream)
        else:
            with on_device(on):
                capturing = runtime.streamIsCapturing(stream)
    except RuntimeError as exc:
        status = getattr(exc, "status", None)  # a CUDARuntimeError's
        if status == _CAPTURE_IMPLICIT:
            return LEGACY_OFF_LIMITS
        if status is not None:
            raise
        # CuPy's word for cudaStreamCaptureStatusInvalidated
        raise _errors.capture_invalidated(stream, exc) from exc
    return CAPTURING if capturing else NOT_CAPTURING


def refuse_under_capture(what: str, stream: int, device: int) -> None:
    """Raise ``CaptureError`` when ``stream`` takes part in a capture: for
    an operation (``what``) CUDA cannot record into a graph, asked before
    anything is queued."""
    _refuse(capture_of(stream, device), what, stream)


def _refuse(state: int, what: str, stream: int) -> None:
    """``refuse_under_capture`` for a state already asked."""
    if state == CAPTURING:
        raise _errors.capture_forbids(what, stream, "CUDA records no host-side work into a graph")
    if state == LEGACY_OFF_LIMITS:
        raise _errors.capture_forbids(
            what, stream, "it is CUDA's legacy default stream, which a capture in progress forbids (use "
            "a stream made with cupy.cuda.Stream(non_blocking=True))",
        )


def _capture_stands_in(producer: int, consumer: int, device: int, consumer_device: int) -> bool:
    """The hand-off's rules under capture; True when no wait is to be
    queued. The event record and the wait are recorded into a graph as they
    are, with three exceptions. A consumer on the legacy stream (the
    standard's ``stream=None``) while the producer's stream captures: the
    capturing stream stands in for it, as PyTorch reads ``None`` under
    capture (the legacy stream cannot be used, and the consumer's work is
    then the capture's). A producer outside the capture and a capturing
    consumer: the producer's work is waited for only if some is still
    queued, and a graph cannot wait for work outside it: refused then. Any
    other use of the legacy stream under capture: refused."""
    produced = capture_of(producer, device)
    if produced == CAPTURING and consumer in _LEGACY:
        return True
    consumed = capture_of(consumer, consumer_device)
    if produced == LEGACY_OFF_LIMITS:
        _refuse(produced, "record the producer's work on its stream", producer)
    if consumed == LEGACY_OFF_LIMITS:
        _refuse(consumed, "make the consumer's stream wait for the producer", consumer)
    if consumed == CAPTURING and produced == NOT_CAPTURING:
        if _idle(producer, device):
            return True
        raise _errors.capture_forbids(
            "make the capturing consumer's stream wait for the producer", consumer,
            f"the producer's stream {producer:#x} still has work queued outside the capture, which a graph "
            "cannot wait for (synchronize it before the capture begins)",
        )
    return False


def _idle(stream: int, device: int) -> bool:
    """Whether ``stream`` (not capturing) has no work left queued."""
    with on_device(device):
        return _runtime().streamQuery(stream) == 0


# -- fork ---------------------------------------------------------------------------
# A child forked after the GPU was used cannot use it: the CUDA (and HIP)
# runtime does not survive fork. Its events, streams and pending entries are
# the parent's: forgotten in the child, never destroyed or waited for there
# (that would call the runtime), and the objects they keep stay alive.

_forked: list = []  # in a forked child: [whether the parent had used the runtime through the layer]
_forsaken: list = []  # what a forked child inherited and must never free


def _after_fork() -> None:
    global _pending_lock
    _pending_lock = threading.Lock()  # the thread that held it is not in the child
    _forsaken.append((list(_pools.values()), list(_pending), list(_stream_objects.values())))
    _pools.clear()
    _pending.clear()
    _stream_objects.clear()
    _forked[:] = [bool(_cuda)]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _gpu_started_before_fork() -> bool:
    """Whether the process this one was forked from had started a GPU runtime:
    through the layer, or (CuPy or another library on its own) as the driver
    library mapped into the process says (the child inherits the mapping)."""
    if _forked and _forked[0]:
        return True
    try:
        with open("/proc/self/maps") as maps:
            return any("libcuda.so" in line or "libamdhip64" in line for line in maps)
    except OSError:
        return False


def check_not_forked() -> None:
    """BufferError in a process forked after the GPU was used: any GPU call
    there would fail or hang. A child forked before the GPU was used may use
    it (and from then on is checked no more)."""
    if not _forked:
        return
    if _gpu_started_before_fork():
        raise _errors.forked_after_gpu(os.getpid())
    _forked.clear()


@atexit.register
def _drain():
    # Copies still queued at exit must not read memory freed at shutdown.
    while _pending:
        event, _device, _stream, _objects = _pending.pop(0)
        with contextlib.suppress(Exception):
            _runtime().eventSynchronize(event)


def default_stream() -> int:
    """The handle of CuPy's default stream: the per-thread default stream (2)
    when CuPy runs with CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1, else the
    legacy default stream (1); 0 (the null stream) on ROCm."""
    runtime = _runtime()
    if runtime.is_hip:
        return 0
    try:
        from cupy_backends.cuda.stream import get_default_stream_ptr
    except ImportError:  # older CuPy: read the switch CuPy reads
        ptds = os.environ.get("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0")
        return runtime.streamPerThread if ptds else runtime.streamLegacy
    return int(get_default_stream_ptr())


def current_stream(device: int) -> int:
    """The handle of CuPy's current stream on GPU ``device`` (its null stream
    as the default stream's handle, never the ambiguous 0 on CUDA)."""
    from cupy.cuda import get_current_stream

    ptr = int(get_current_stream(device).ptr)
    if ptr == 0:
        return default_stream()
    return ptr


@contextlib.contextmanager
def queue_on(stream: int, device: int):
    """Make ``stream`` CuPy's current stream on ``device`` for a block, so
    that CuPy's allocations and kernels in it are ordered on that stream."""
    with on_device(device), _cupy_stream(stream, device):
        yield


class _StreamHandle:
    """A bare handle, for ``cupy.cuda.Stream.from_external`` (CUDA stream protocol)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = ptr

    def __cuda_stream__(self):
        return (0, self.ptr)


_STREAM_OBJECTS = 64  # CuPy stream objects kept for the handles last used
_stream_objects: dict = {}  # (handle, device) -> CuPy stream object


def _cupy_stream(handle: int, device: int | None = None):
    """A CuPy stream object over ``handle`` (owning nothing), made once per
    handle and device: making one costs more than the copy it orders."""
    key = (handle, device)
    stream = _stream_objects.get(key)
    if stream is not None:
        return stream
    import cupy

    stream_type = cupy.cuda.Stream
    if hasattr(stream_type, "from_external"):  # CuPy 14
        stream = stream_type.from_external(_StreamHandle(handle))
    else:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            stream = cupy.cuda.ExternalStream(handle)
    if len(_stream_objects) >= _STREAM_OBJECTS:
        _stream_objects.clear()
    _stream_objects[key] = stream
    return stream


# -- the hand-off and the copy in the compiled core -----------------------------
# CuPy links the CUDA runtime statically into cupy_backends.cuda.api.runtime
# (no libcudart is loaded, and none of its symbols is exported); CuPy's other
# modules call that runtime through the C functions the module publishes in
# __pyx_capi__. The core binds to the same functions, so its calls reach the
# runtime instance that made CuPy's streams and events, whatever else is
# loaded (PyTorch's or JAX's CUDA runtime), on CUDA and ROCm builds alike.

#: The module whose C entries the core calls (``cupy.cuda.runtime`` re-exports it).
CUPY_RUNTIME = "cupy_backends.cuda.api.runtime"
_RUNTIME_FACES = ("cupy.cuda.runtime", CUPY_RUNTIME)
_bindings: list = []  # [(runtime module, bound: bool, why not)], once resolved


def core_bound(runtime) -> bool:
    """Whether the core's hand-off and copy (``core.handoff``, ``core.copy``)
    are bound to ``runtime`` (CuPy's runtime module, as ``_runtime`` gives
    it): resolved once; any other runtime object (a stand-in, or none) keeps
    the Python calls."""
    state = _bindings
    if state:
        known, bound, _why = state[0]
        return bound and runtime is known
    if getattr(runtime, "__name__", None) not in _RUNTIME_FACES:
        return False  # not CuPy's runtime module: nothing to remember
    bound, why = _bind_capi(runtime)
    state.append((runtime, bound, why))
    return bound


def _bind_capi(runtime):
    """``(bound, why not)``: the core bound to the C entries of CuPy's
    runtime module behind ``runtime``, checked entry by entry."""
    module = sys.modules.get(CUPY_RUNTIME)
    capi = getattr(module, "__pyx_capi__", None)
    if not isinstance(capi, dict) or getattr(runtime, "getDevice", None) is not getattr(module, "getDevice", False):
        return False, str(_errors.runtime_entry_differs(CUPY_RUNTIME, None))
    differs = core.bind_runtime(capi)
    if differs is not None:
        return False, str(_errors.runtime_entry_differs(CUPY_RUNTIME, *differs))
    return True, None


def binding() -> str:
    """The runtime the core's CUDA calls go to, in words (``gpu-dlpack
    doctor``): CuPy's runtime module, or why they are CuPy's Python calls."""
    if not _bindings:
        if "cupy" not in sys.modules:
            return "none yet: CuPy is not imported"
        try:
            core_bound(_runtime())
        except Exception as exc:  # a CuPy that does not import, or a forked child
            return f"none: {type(exc).__name__}: {exc}"
    if not _bindings:
        return "none: CuPy's runtime module is not the one in use"
    _runtime_module, bound, why = _bindings[0]
    if bound:
        entries = ", ".join(name for name, _signature in core.RUNTIME_ENTRIES)
        return f"CuPy's own runtime, through {CUPY_RUNTIME}.__pyx_capi__ ({entries})"
    return f"none: {why}"
