"""Stream hand-off on CUDA and ROCm: the mechanism behind the stream rules.

The consumer's stream waits for the producer's (``handoff``) without the
host blocking; buffers stay alive until the work queued on them is done
(``keep_until_done``); what CUDA cannot record into a graph is refused
before anything is queued (``refuse_under_capture``). Events come from a
small pool per device: one goes back as soon as its wait is queued, since
``cudaStreamWaitEvent`` uses the state the event captured when called.
Nothing here decides whether to synchronize; ``_streams`` and the backends do.

Floor: mechanism, under ``_copies``, over the loaded core.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import warnings

from . import _errors
from . import _compiled

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
    """A block in which GPU ``device`` is current, switched (and back) only
    when another is."""

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
    """Make ``consumer`` (``-1``: no synchronization; on ``consumer_device``,
    default ``device``) wait for the work queued so far on ``producer`` (on
    GPU ``device``); returns whether a wait was queued. Each call is made on
    its stream's device: the handles 1 and 2 name the current one's."""
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
            _compiled.handoff(event, producer, consumer, device, consumer_device)
        else:  # a runtime the core is not bound to: its Python calls
            with on_device(device):
                runtime.eventRecord(event, producer)
            with on_device(consumer_device):
                runtime.streamWaitEvent(consumer, event, 0)
    finally:
        _release(device, event)
    return True


def wait_host(stream: int, device: int) -> None:
    """Block the host until the work queued on ``stream`` (of ``device``) is
    done: one ``cudaStreamSynchronize``, no event; refused under capture."""
    refuse_under_capture("wait on the host for the stream's work", stream, device)
    with on_device(device):
        _runtime().streamSynchronize(stream)


def synchronize_device(device: int) -> None:
    """Block the host until all work queued on GPU ``device`` is done."""
    with on_device(device):
        _runtime().deviceSynchronize()


def keep_until_done(stream: int, device: int, *objects) -> None:
    """Keep ``objects`` alive until the work queued so far on ``stream`` is
    done, without blocking. Refused under capture: work recorded into a
    graph is never known done here."""
    refuse_under_capture("keep buffers alive until a copy is done", stream, device)

    def record(event):
        with on_device(device):
            _runtime().eventRecord(event, stream)

    keep(device, stream, objects, record)


def keep(device: int, stream: int, objects, queue) -> None:
    """Call ``queue(event)``, which queues work touching ``objects`` on
    ``stream`` and records ``event`` after it, and keep the objects until the
    event has completed (``collect``; past ``_MAX_PENDING`` entries the host
    waits for the oldest). Where ``queue`` fails the work may still be
    queued, and nothing marks its end: the host waits for the stream before
    the objects may go."""
    if _pending:
        collect()
        while len(_pending) >= _MAX_PENDING:
            with _pending_lock:
                if len(_pending) < _MAX_PENDING:
                    break
                oldest, oldest_device, _stream, held = _pending.pop(0)
            _runtime().eventSynchronize(oldest)
            _release(oldest_device, oldest)
            del held
    event = _acquire(device)
    try:
        queue(event)
    except BaseException:
        _release(device, event)
        with contextlib.suppress(Exception), on_device(device):
            _runtime().streamSynchronize(stream)
        raise
    with _pending_lock:
        _pending.append((event, device, stream, objects))


def collect() -> int:
    """Drop what ``keep_until_done`` holds for completed work; returns how
    many entries are still pending. Work on one stream completes in order,
    so a busy stream is not asked again in the same pass. Never blocks: a
    thread that finds another one collecting moves on."""
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


# -- CUDA graph capture (docs/guide/gpu.md) -----------------------------------------

NOT_CAPTURING, CAPTURING, LEGACY_OFF_LIMITS = 0, 1, 2


def capture_of(stream: int, device: int) -> int:
    """``CAPTURING``, ``LEGACY_OFF_LIMITS`` (the legacy default stream while
    a capture runs) or ``NOT_CAPTURING`` (also on ROCm) for ``stream`` on GPU
    ``device``; ``CaptureError`` for a capture already invalidated."""
    runtime = _runtime()
    if getattr(runtime, "is_hip", False):
        return NOT_CAPTURING
    # The handles of the default streams name the current GPU's: asked on its own.
    on = device if stream in _DEFAULTS else -1
    try:
        if core_bound(runtime):
            capturing = _compiled.capturing(stream, on)
        else:
            with on_device(on) if on >= 0 else contextlib.nullcontext():
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


def refuse_under_capture(what: str, stream: int, device: int, state: int | None = None) -> None:
    """``CaptureError`` when ``stream`` takes part in a capture (its ``state``
    unless already asked), for ``what`` CUDA cannot record into a graph,
    asked before anything is queued."""
    if state is None:
        state = capture_of(stream, device)
    if state == CAPTURING:
        raise _errors.capture_forbids(what, stream, "CUDA records no host-side work into a graph")
    if state == LEGACY_OFF_LIMITS:
        raise _errors.capture_forbids(
            what, stream, "it is CUDA's legacy default stream, which a capture in progress forbids (use "
            "a stream made with cupy.cuda.Stream(non_blocking=True))",
        )


def _capture_stands_in(producer: int, consumer: int, device: int, consumer_device: int) -> bool:
    """The hand-off's rules under capture; True when no wait is to be
    queued. The record and the wait go into a graph as they are, except: a
    consumer on the legacy stream while the producer captures (the capturing
    stream stands in, as PyTorch reads ``stream=None`` under capture); a
    capturing consumer of a producer outside the capture (nothing to wait
    for if the producer is idle, refused otherwise: a graph cannot wait for
    outside work); any other use of the legacy stream (refused)."""
    produced = capture_of(producer, device)
    if produced == CAPTURING and consumer in _LEGACY:
        return True
    consumed = capture_of(consumer, consumer_device)
    if produced == LEGACY_OFF_LIMITS:
        refuse_under_capture("record the producer's work on its stream", producer, device, produced)
    if consumed == LEGACY_OFF_LIMITS:
        refuse_under_capture("make the consumer's stream wait for the producer", consumer, consumer_device, consumed)
    if consumed == CAPTURING and produced == NOT_CAPTURING:
        with on_device(device):
            if _runtime().streamQuery(producer) == 0:  # the producer is idle
                return True
        raise _errors.capture_forbids(
            "make the capturing consumer's stream wait for the producer", consumer,
            f"the producer's stream {producer:#x} still has work queued outside the capture, which a graph "
            "cannot wait for (synchronize it before the capture begins)",
        )
    return False


# -- fork ---------------------------------------------------------------------------
# A forked child forgets the parent's events, streams and pending entries,
# never destroyed or waited for there (that would call the runtime); the
# objects they keep stay alive.

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


def check_not_forked() -> None:
    """BufferError in a process forked after the GPU was used (through the
    layer, or as the driver library mapped into the process says): any GPU
    call there would fail or hang. A child forked before may use it."""
    if not _forked:
        return
    started = _forked[0]
    if not started:
        try:
            with open("/proc/self/maps") as maps:
                started = any("libcuda.so" in line or "libamdhip64" in line for line in maps)
        except OSError:
            pass
    if started:
        raise _errors.forked_after_gpu(os.getpid())
    _forked.clear()


@atexit.register
def _drain():
    # Copies still queued at exit must not read memory freed at shutdown.
    while _pending:
        event, _device, _stream, _objects = _pending.pop(0)
        with contextlib.suppress(Exception):
            _runtime().eventSynchronize(event)


def current_stream(device: int) -> int:
    """The handle of CuPy's current stream on GPU ``device``; for its null
    stream, the default stream CuPy means by it (never the ambiguous 0 on
    CUDA): per-thread (2) or legacy (1), the null stream (0) on ROCm."""
    from cupy.cuda import get_current_stream

    ptr = int(get_current_stream(device).ptr)
    if ptr:
        return ptr
    runtime = _runtime()
    if runtime.is_hip:
        return 0
    try:
        from cupy_backends.cuda.stream import get_default_stream_ptr
    except ImportError:  # older CuPy: read the switch CuPy reads
        ptds = os.environ.get("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0")
        return runtime.streamPerThread if ptds else runtime.streamLegacy
    return int(get_default_stream_ptr())


class _StreamHandle:
    """A bare handle, for ``cupy.cuda.Stream.from_external`` (CUDA stream protocol)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = ptr

    def __cuda_stream__(self):
        return (0, self.ptr)


_STREAM_OBJECTS = 64  # CuPy stream objects kept for the handles last used
_stream_objects: dict = {}  # (handle, device) -> CuPy stream object


@contextlib.contextmanager
def queue_on(stream: int, device: int):
    """Make ``stream`` CuPy's current stream on ``device`` for a block (its
    allocations and kernels ordered on it). The CuPy stream object, owning
    nothing, is made once per handle and device: it costs more than a copy."""
    with on_device(device):
        key = (stream, device)
        cupy_stream = _stream_objects.get(key)
        if cupy_stream is None:
            import cupy

            if hasattr(cupy.cuda.Stream, "from_external"):  # CuPy 14
                cupy_stream = cupy.cuda.Stream.from_external(_StreamHandle(stream))
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    cupy_stream = cupy.cuda.ExternalStream(stream)
            if len(_stream_objects) >= _STREAM_OBJECTS:
                _stream_objects.clear()
            _stream_objects[key] = cupy_stream
        with cupy_stream:
            yield


# -- the hand-off and the copy in the compiled core (docs/internals/core.md) ----

#: The module whose C entries the core calls (``cupy.cuda.runtime`` re-exports it).
CUPY_RUNTIME = "cupy_backends.cuda.api.runtime"
_RUNTIME_FACES = ("cupy.cuda.runtime", CUPY_RUNTIME)
_bindings: list = []  # [(runtime module, bound: bool, why not)], once resolved


def core_bound(runtime) -> bool:
    """Whether the core's hand-off and copy are bound to ``runtime`` (CuPy's
    runtime module, as ``_runtime`` gives it), entry by entry, resolved
    once; any other runtime object (a stand-in) keeps the Python calls."""
    if _bindings:
        known, bound, _why = _bindings[0]
        return bound and runtime is known
    if getattr(runtime, "__name__", None) not in _RUNTIME_FACES:
        return False  # not CuPy's runtime module: nothing to remember
    module = sys.modules.get(CUPY_RUNTIME)
    capi = getattr(module, "__pyx_capi__", None)
    if not isinstance(capi, dict) or getattr(runtime, "getDevice", None) is not getattr(module, "getDevice", False):
        differs = (None,)
    else:
        differs = _compiled.bind_runtime(capi)
    why = None if differs is None else str(_errors.runtime_entry_differs(CUPY_RUNTIME, *differs))
    _bindings.append((runtime, differs is None, why))
    return differs is None


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
        entries = ", ".join(name for name, _signature in _compiled.RUNTIME_ENTRIES)
        return f"CuPy's own runtime, through {CUPY_RUNTIME}.__pyx_capi__ ({entries})"
    return f"none: {why}"
