"""Reliability: nothing freed twice, nothing freed early, nothing passed on
unchecked, whatever the interleaving.

- a capsule handed to the layer is consumed or discarded exactly once when
  threads race for it;
- every capsule the layer passes on is checked as strictly as one it imports;
- a queued copy keeps every buffer it touches (source and destination) until
  it is done; events are never lost; one slow stream does not hold the work
  of the others; the host reads managed memory only when the GPU allows it;
- the stream rules are checked against the memory the consumer receives, on
  every path;
- the struct layout the capsule code assumes is checked at import, and the
  ABI reads and writes only the structs it is given.

The GPU-side mechanism is driven here through a recording stand-in of the
CUDA runtime calls (``_handoff._runtime``); the same scenarios run on a real
GPU in test_gpu_reliability.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
import threading
import weakref

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _capsule, _copies, _handoff
from gpu_dlpack._backends.cupy import copies as cupy_copies
from gpu_dlpack._backends.cupy import gpus as cupy_gpus
from gpu_dlpack._backends.cupy import imports as cupy_imports
from gpu_dlpack._devices import Device

from . import capsules
from .capsules import Producer, capsule_name, make


@pytest.fixture(autouse=True)
def no_stray_deleter_calls():
    before = capsules.stray_calls
    yield
    gc.collect()
    assert capsules.stray_calls == before, "a deleter ran on a tensor already freed"


# -- 1. a capsule is consumed exactly once, whatever the interleaving ----------

CONTESTED = 3000
CONTENDERS = 4


def _contest(capsules_, work):
    """Run ``work(capsule)`` on every capsule from CONTENDERS threads at once,
    all in the same order (so that they meet on each one); returns, per
    capsule, the outcomes ('ok', 'consumed' or the exception type name)."""
    outcomes = [[] for _ in capsules_]

    def run():
        for i, cap in enumerate(capsules_):
            try:
                result = work(cap)
            except gpu_dlpack.ConsumedCapsuleError:
                outcomes[i].append("consumed")
            except Exception as exc:  # noqa: BLE001 - the outcome is the point
                outcomes[i].append(type(exc).__name__)
            else:
                outcomes[i].append("ok")
                del result

    _race([run] * CONTENDERS)
    return outcomes


def _race(targets):
    """Run each of ``targets`` on a thread of its own, all released at once,
    with threads switched as often as possible; fails the test with what any
    of them raised."""
    barrier = threading.Barrier(len(targets))
    errors = []

    def run(target):
        try:
            barrier.wait()
            target()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        threads = [threading.Thread(target=run, args=(t,)) for t in targets]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors


@pytest.mark.parametrize("work", [
    pytest.param(lambda cap: gpu_dlpack.from_dlpack(cap, device="nowhere"), id="refused import"),
    pytest.param(lambda cap: gpu_dlpack.from_dlpack(cap), id="import"),
    pytest.param(lambda cap: gpu_dlpack.from_dlpack(cap, copy=True), id="import with copy"),
    pytest.param(lambda cap: gpu_dlpack.export(cap, max_version=(1, 0)), id="export"),
    pytest.param(lambda cap: gpu_dlpack.export(cap, max_version=(1, 0), copy=True), id="export with copy"),
])
def test_threads_racing_for_one_capsule_run_its_deleter_exactly_once(work):
    calls, stray = capsules.total_calls, capsules.stray_calls
    made = [make(np.arange(4.0) + i) for i in range(CONTESTED)]
    caps = [cap for cap, _ in made]
    records = [rec for _, rec in made]
    del made
    outcomes = _contest(caps, work)
    for cap in caps:
        assert capsule_name(cap) == "used_dltensor_versioned"
    del caps
    gc.collect()
    assert capsules.stray_calls == stray, "a deleter ran twice"
    assert [r.calls for r in records] == [1] * CONTESTED
    assert capsules.total_calls - calls == CONTESTED
    # One thread took each capsule; every other one was told it was taken.
    for got in outcomes:
        assert len(got) == CONTENDERS
        assert got.count("consumed") == CONTENDERS - 1, got


def test_a_capsule_discarded_by_one_thread_is_consumed_for_the_others():
    cap, rec = make()
    _capsule.discard(cap)
    assert rec.calls == 1
    with pytest.raises(gpu_dlpack.ConsumedCapsuleError):
        _capsule.discard(cap)
    with pytest.raises(gpu_dlpack.ConsumedCapsuleError):
        _capsule.take(cap)
    assert rec.calls == 1


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_inspect_racing_a_consumer_reads_the_whole_tensor_or_none_of_it(versioned):
    # One thread inspects each capsule over and over while another imports
    # it and drops the array (its deleter poisons the tensor, as reuse of freed memory would):
    # every read gives the capsule's true fields or ConsumedCapsuleError,
    # never fields read after the tensor was freed.
    made = [make(np.arange(3.0) + i, versioned=versioned) for i in range(CONTESTED)]
    caps = [cap for cap, _ in made]
    data = [rec.struct.dl_tensor.data for _, rec in made]
    records = [rec for _, rec in made]
    del made
    wrong = []

    def inspector():
        for cap, ptr in zip(caps, data):
            for _ in range(20):
                try:
                    info = gpu_dlpack.inspect(cap)
                except gpu_dlpack.ConsumedCapsuleError:
                    break
                except Exception as exc:  # noqa: BLE001 - the outcome is the point
                    wrong.append(repr(exc))
                    break
                if (info.shape, info.data, info.device, info.versioned) != ((3,), ptr, Device("cpu"), versioned):
                    wrong.append(repr(info))

    def consumer():
        for cap in caps:
            gpu_dlpack.from_dlpack(cap)  # taken, and freed with the array at once

    _race([inspector, consumer])
    assert not wrong, f"{len(wrong)} reads of a freed tensor, such as {wrong[:3]}"
    assert [r.calls for r in records] == [1] * CONTESTED


def test_an_imported_capsule_owns_its_tensor_through_the_array():
    x = np.arange(5.0)
    cap, rec = make(x)
    a = gpu_dlpack.from_dlpack(cap)
    assert a.ctypes.data == x.ctypes.data and a.tolist() == x.tolist()
    assert capsule_name(cap) == "used_dltensor_versioned"
    del cap
    gc.collect()
    assert rec.calls == 0  # the array still uses the tensor
    del a
    gc.collect()
    assert rec.calls == 1


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_a_taken_capsule_is_freed_once_by_its_owner(versioned):
    # What the CuPy backend and the array interfaces hold for memory they wrap.
    cap, rec = make(versioned=versioned)
    owner = _capsule.take(cap)
    assert capsule_name(cap) == ("used_dltensor_versioned" if versioned else "used_dltensor")
    assert rec.calls == 0
    owner.release()
    assert rec.calls == 1  # the deleter ran on this tensor (a stray call would not count)
    owner.release()
    del owner
    gc.collect()
    assert rec.calls == 1
    cap, rec = make(versioned=versioned)
    owner = _capsule.take(cap)
    del owner  # the last reference
    assert rec.calls == 1


def test_a_taken_capsule_without_a_deleter_is_left_to_its_producer():
    cap, rec = make(deleter=False)
    owner = _capsule.take(cap)
    owner.release()
    del owner
    assert capsule_name(cap) == "used_dltensor_versioned"
    assert capsules.live.pop(rec.address) is rec  # nothing freed it: the producer's own business


@pytest.mark.parametrize("versioned", [False, True])
def test_a_claim_reads_the_kind_from_the_capsule_name(versioned):
    # No caller says which kind a capsule is: a claim can read neither kind
    # as the other.
    for claim in (_capsule.discard, _capsule.take):
        cap, rec = make(versioned=versioned)
        got = claim(cap)
        assert capsule_name(cap) == ("used_dltensor_versioned" if versioned else "used_dltensor")
        del got
        gc.collect()
        assert rec.calls == 1
        says = r"^this DLPack capsule was already consumed \(its name is 'used_dltensor(_versioned)?'\)"
        with pytest.raises(BufferError, match=says):
            claim(cap)
        assert rec.calls == 1
    says = r"^expected a PyCapsule named 'dltensor' or 'dltensor_versioned'; got ndarray\.$"
    for claim in (_capsule.discard, _capsule.take):
        with pytest.raises(TypeError, match=says):
            claim(np.arange(3))


def test_a_capsule_that_cannot_be_renamed_is_not_taken():
    # PyCapsule_SetName failing (CPython has no such case for a capsule
    # whose pointer was just read): the core leaves the capsule as it was
    # and raises what its name now says, in _errors.not_taken's words.
    from gpu_dlpack import _errors

    assert str(_errors.not_taken(True, True)) == "malformed DLPack tensor: the capsule could not be renamed."
    assert str(_errors.not_taken(False, True)) == (
        "malformed DLPack tensor: the capsule changed kind while it was read.")
    assert str(_errors.not_taken(True, None)) == (
        "malformed DLPack tensor: the capsule changed kind while it was read.")


def _destructor_of(capsule):
    get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object)(("PyCapsule_GetDestructor", ctypes.pythonapi))
    return get(capsule)


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_a_capsule_handed_over_and_dropped_unconsumed_is_freed_once_by_a_c_destructor(versioned):
    # wrap(capsule) hands the tensor over to a capsule of its own; dropped
    # unconsumed, a C destructor (safe on any thread and at shutdown) frees
    # it, whoever produced it: the compiled core's.
    x = np.arange(6.0)
    cap, rec = make(x, versioned=versioned)
    out = gpu_dlpack.wrap(cap).__dlpack__(**({"max_version": (1, 0)} if versioned else {}))
    assert capsule_name(cap) == ("used_dltensor_versioned" if versioned else "used_dltensor")
    assert capsule_name(out) == ("dltensor_versioned" if versioned else "dltensor")
    assert gpu_dlpack.inspect(out).data == x.ctypes.data
    assert _destructor_of(out) == _capsule.OWNING_DESTRUCTORS[versioned]
    assert rec.calls == 0
    del out
    gc.collect()
    assert rec.calls == 1


@pytest.mark.serial  # allocation failures
@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_a_capsule_whose_hand_over_runs_out_of_memory_stays_its_producers(versioned):
    # The n-th allocation of the move fails, for each n until one succeeds:
    # each failure is a MemoryError that leaves the capsule unconsumed (the
    # new capsule is made before the claim); the move that succeeds owns the
    # tensor, freed once when it goes.
    _testcapi = pytest.importorskip("_testcapi")
    cap, rec = make(versioned=versioned)
    unconsumed = "dltensor_versioned" if versioned else "dltensor"
    failures = 0
    for n in range(200):
        _testcapi.set_nomemory(n, n + 1)
        try:
            moved = _capsule.move(cap)
        except MemoryError:
            moved = None
        finally:
            _testcapi.remove_mem_hooks()
        if moved is not None:
            break
        failures += 1
        assert capsule_name(cap) == unconsumed and rec.calls == 0
    assert failures and moved is not None
    assert capsule_name(cap) == "used_" + unconsumed and capsule_name(moved) == unconsumed
    assert rec.calls == 0
    del moved
    gc.collect()
    assert rec.calls == 1


# -- 2. what the layer passes on is checked like what it imports ----------------

PASSED_ON = {
    "negative shape": dict(shape=(-6,)),
    "negative shape, 2-d": dict(array=np.zeros((2, 3)), shape=(2, -3)),
    "shape past 2**63 bytes": dict(shape=(2**31, 2**31), strides=(2**31, 1)),
    "strides past 2**63 bytes": dict(strides=(2**62,)),
    "negative strides past 2**63 bytes": dict(strides=(-(2**62),)),
    "strides before address 0": dict(strides=(-(2**50),)),
}


@pytest.mark.parametrize("device", [(1, 0), (2, 0)], ids=["host producer", "device producer"])
@pytest.mark.parametrize("max_version", [None, (1, 0)], ids=["legacy", "versioned"])
@pytest.mark.parametrize("case", PASSED_ON, ids=list(PASSED_ON))
def test_export_refuses_a_capsule_import_would_refuse(case, max_version, device):
    kw = PASSED_ON[case]
    cap, rec = make(device=device, versioned=max_version is not None, **kw)
    producer = Producer(cap, device=device)
    del cap
    with pytest.raises(BufferError, match="malformed DLPack tensor"):
        gpu_dlpack.export(producer, max_version=max_version)
    gc.collect()
    assert rec.calls == 1
    # Import refuses the same capsule.
    cap, rec = make(versioned=max_version is not None, **kw)
    with pytest.raises(BufferError):
        gpu_dlpack.from_dlpack(cap)
    assert rec.calls == 1


@pytest.mark.parametrize("device", [(1, 0), (2, 0)], ids=["host producer", "device producer"])
def test_export_passes_on_a_well_formed_strided_capsule(device):
    base = np.arange(12.0)
    view = base[::-3]
    cap, rec = make(view, device=device, data=view.ctypes.data)
    producer = Producer(cap, device=device)
    del cap
    out = gpu_dlpack.export(producer, max_version=(1, 0))
    info = gpu_dlpack.inspect(out)
    assert info.shape == (4,) and info.strides == (-3,) and info.data == view.ctypes.data
    assert info.device == Device(device)
    del out
    gc.collect()
    assert rec.calls == 1


# -- a recording stand-in of the CUDA runtime ------------------------------------

class Runtime:
    """The runtime calls _handoff and the CuPy backend make, recorded. Events
    complete when the test says so (``done``), or when synchronized."""

    eventDisableTiming = 2
    memcpyDefault = 4

    def __init__(self):
        self.calls = []
        self.done = set()
        self.fail_record = False
        self._next = 1000

    def eventCreateWithFlags(self, flags):
        self._next += 1
        self.calls.append(("create", self._next))
        return self._next

    def eventDestroy(self, event):
        self.calls.append(("destroy", event))

    def eventRecord(self, event, stream):
        if self.fail_record:
            raise RuntimeError("cudaErrorLaunchFailure (stand-in)")
        self.done.discard(event)
        self.calls.append(("record", event, stream))

    def eventQuery(self, event):
        return 0 if event in self.done else _handoff._NOT_READY

    def eventSynchronize(self, event):
        self.calls.append(("synchronize", event))
        self.done.add(event)

    def streamWaitEvent(self, stream, event, flags):
        self.calls.append(("wait", stream, event))

    def streamSynchronize(self, stream):
        self.calls.append(("stream synchronize", stream))

    def streamIsCapturing(self, stream):
        return False  # no capture here: tests/test_capture.py, on the simulated CUDA

    def deviceSynchronize(self):
        self.calls.append(("device synchronize",))

    def memcpyAsync(self, dst, src, nbytes, kind, stream):
        self.calls.append(("memcpy", dst, src, nbytes, stream))

    def recorded(self, stream):
        return [c[1] for c in self.calls if c[0] == "record" and c[2] == stream]

    def finish(self, stream):
        """Complete the work queued so far on ``stream``."""
        self.done.update(self.recorded(stream))


@pytest.fixture
def runtime(monkeypatch):
    rt = Runtime()
    monkeypatch.setattr(_handoff, "_runtime", lambda: rt)
    monkeypatch.setattr(_handoff, "on_device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(_handoff, "_pools", {})
    monkeypatch.setattr(_handoff, "_pending", [])
    yield rt
    _handoff._pending.clear()


class HostBlocks:
    """Page-locked allocations for a ``_copies.PinnedPool``, as host memory."""

    def __init__(self):
        self.blocks = {}

    def host_alloc(self, nbytes):
        buf = np.empty(nbytes, np.uint8)
        self.blocks[buf.ctypes.data] = buf
        return buf.ctypes.data

    def free_host(self, ptr):
        del self.blocks[ptr]


class Buffer:
    """Memory a copy touches, with a weak reference to see when it dies."""

    __slots__ = ("array", "__weakref__")

    def __init__(self, n):
        self.array = np.zeros(n, dtype=np.float32)


# -- 3. a queued copy keeps what it touches alive --------------------------------

def test_a_pinned_destination_lives_until_its_copy_is_done(runtime, monkeypatch):
    pytest.importorskip("cupy")  # the copy is CuPy's (its runtime is the stand-in)
    # export(x, dl_device=(3, 0), stream=s) of device memory: the copy into
    # pinned memory is still queued on s when the call returns. The source
    # is memory the stand-in runtime copies from (what x.data.ptr names).
    pool = _copies.PinnedPool(HostBlocks())
    monkeypatch.setattr(_copies, "pinned_pool", lambda: pool)
    x = np.arange(1000, dtype=np.float32)
    source = weakref.ref(x)
    out = cupy_copies._to_pinned(x.ctypes.data, x.nbytes, x.shape, x.dtype, "C", 77, 0, False, x)
    assert pool.idle_bytes == 0 and pool.allocated == 1
    assert [c[0] for c in runtime.calls if c[0] == "memcpy"] == ["memcpy"]
    assert runtime.recorded(77), "no event marks the end of the copy"
    destination = weakref.ref(out)
    del out, x
    gc.collect()
    assert destination() is not None, "the pinned destination was freed mid-copy"
    assert source() is not None, "the source was freed mid-copy"
    assert pool.idle_bytes == 0, "the pinned block went back to the pool mid-copy"
    runtime.finish(77)
    _handoff.collect()
    gc.collect()
    assert destination() is None and source() is None
    assert pool.idle_bytes == 4096  # back in the pool once the copy is done


def test_a_device_destination_lives_until_its_copy_from_the_host_is_done(runtime, monkeypatch):
    made = []

    def allocate(target, shape, dtype, order, stream, gpu):
        made.append(np.empty(shape, dtype))
        return made[-1]

    monkeypatch.setattr(cupy_copies, "_allocate", allocate)
    monkeypatch.setattr(cupy_copies, "_is_pinned", lambda ptr: False)
    host = np.arange(100, dtype=np.float32)
    dtype = gpu_dlpack._dtypes.from_numpy(host.dtype)
    out = cupy_copies._copy_from_host(host, dtype, Device((2, 0)), 88, host_done=False, consumer=88)
    assert out is made[0]
    destination, src = weakref.ref(made.pop()), weakref.ref(host)
    del out, host
    gc.collect()
    assert destination() is not None and src() is not None
    runtime.finish(88)
    _handoff.collect()
    gc.collect()
    assert destination() is None and src() is None


# -- 4. an event is never lost -------------------------------------------------

def test_keep_until_done_returns_its_event_when_recording_fails(runtime):
    for _ in range(3):
        _handoff._release(0, runtime.eventCreateWithFlags(0))
    assert _handoff.pool_size(0) == 3
    runtime.fail_record = True
    buffer = Buffer(4)
    with pytest.raises(RuntimeError, match="stand-in"):
        _handoff.keep_until_done(9, 0, buffer)
    assert _handoff.pool_size(0) == 3
    assert not _handoff._pending
    # The copy the event was to follow may still be queued: the host waited
    # for the stream before letting the buffer go.
    assert ("stream synchronize", 9) in runtime.calls


# -- 5. one slow stream does not hold the others ---------------------------------

def test_collect_releases_completed_work_behind_a_slow_stream(runtime):
    slow, fast = Buffer(4), [Buffer(4) for _ in range(3)]
    _handoff.keep_until_done(10, 0, slow)
    for i, b in enumerate(fast):
        _handoff.keep_until_done(20 + i, 0, b)
    refs = [weakref.ref(b) for b in fast]
    slow_ref = weakref.ref(slow)
    del slow, fast, b
    for i in range(3):
        runtime.finish(20 + i)
    assert _handoff.collect() == 1
    gc.collect()
    assert [r() for r in refs] == [None] * 3
    assert slow_ref() is not None
    assert _handoff.pool_size(0) == 3  # the completed events went back to the pool
    runtime.finish(10)
    assert _handoff.collect() == 0
    gc.collect()
    assert slow_ref() is None


def test_collect_asks_each_busy_stream_once(runtime):
    for _ in range(5):
        _handoff.keep_until_done(10, 0, Buffer(1))
    queried = []
    query = runtime.eventQuery
    runtime.eventQuery = lambda event: queried.append(event) or query(event)
    assert _handoff.collect() == 5
    assert len(queried) == 1  # work on one stream completes in order


def test_what_waits_for_the_gpu_is_bounded(runtime, monkeypatch):
    monkeypatch.setattr(_handoff, "_MAX_PENDING", 4)
    for i in range(10):
        _handoff.keep_until_done(10, 0, Buffer(1))
        assert len(_handoff._pending) <= 4
    # The host waited for the oldest work rather than hold more.
    assert sum(1 for c in runtime.calls if c[0] == "synchronize") == 6


# -- 6. the extent of strided memory, from both ends ---------------------------

def _byte_bounds(a):
    try:
        from numpy.lib.array_utils import byte_bounds
    except ImportError:  # NumPy < 2
        byte_bounds = np.byte_bounds
    return byte_bounds(a)


def _strided_views():
    base = np.zeros(4096, dtype=np.float64)
    mid = base[2048:]
    yield mid[:0]
    yield mid[:7]
    yield mid[::-1][:9]
    yield mid[:24].reshape(4, 6)[::-1]
    yield mid[:24].reshape(4, 6)[:, ::-2]
    yield mid[:24].reshape(4, 6)[::-1, ::-1]
    yield mid[:60].reshape(3, 4, 5)[::-2, 1:, ::-3]
    yield mid[:60].reshape(3, 4, 5).transpose(2, 0, 1)[::-1]
    yield mid[:1].reshape(1, 1)
    yield np.lib.stride_tricks.as_strided(mid, (3, 4), (-8 * 5, 8 * 7))
    yield np.lib.stride_tricks.as_strided(mid, (5, 2, 3), (-8 * 3, 8 * 11, -8))
    yield np.lib.stride_tricks.as_strided(mid, (4, 0, 3), (-8, 8, 8))
    rng = np.random.default_rng(0)
    for _ in range(200):
        ndim = int(rng.integers(1, 4))
        shape = tuple(int(n) for n in rng.integers(1, 6, ndim))
        strides = tuple(int(s) * 8 for s in rng.integers(-40, 41, ndim))
        yield np.lib.stride_tricks.as_strided(mid, shape, strides)


def test_the_extent_of_strided_memory_matches_numpy_byte_bounds():
    for a in _strided_views():
        strides = tuple(s // a.itemsize for s in a.strides)
        start, nbytes, _offset = cupy_imports._span(a.ctypes.data, 0, a.shape, strides, a.itemsize)
        if a.size == 0:
            assert nbytes == 0
            continue
        assert (start, start + nbytes) == tuple(_byte_bounds(a)), (a.shape, strides)


def test_the_extent_of_compact_memory_is_its_size():
    assert cupy_imports._span(0, 0, (3, 4), None, 8) == (0, 96, 0)
    assert cupy_imports._span(0, 0, (3, 0), None, 8) == (0, 0, 0)
    assert cupy_imports._span(0, 0, (), (), 2) == (0, 2, 0)


def test_memory_wrapped_for_negative_strides_starts_at_the_lowest_address():
    base = np.arange(20.0)
    a = base[::-2]  # first element at base[19], lowest at base[1]
    start, nbytes, offset = cupy_imports._span(a.ctypes.data, 0, a.shape, (-2,), 8)
    assert start == base[1:].ctypes.data
    assert start + offset == a.ctypes.data  # where the array starts inside it
    assert nbytes == 19 * 8 - 8 + 8
    # With a byte offset, the memory begins where the data does.
    start, nbytes, offset = cupy_imports._span(base.ctypes.data, 19 * 8, a.shape, (-2,), 8)
    assert start == base[1:].ctypes.data and start + offset == base[19:].ctypes.data
    assert cupy_imports._span(1234, 16, (0,), (1,), 8) == (1250, 0, 0)


# -- 7. managed memory on the host: as the GPU allows ------------------------------

@pytest.mark.parametrize("concurrent", [0, 1])
def test_managed_memory_reaches_the_host_as_the_gpu_allows(concurrent, monkeypatch):
    waits = []
    monkeypatch.setattr(
        cupy_gpus, "_attribute",
        lambda name, gpu: concurrent if name == "cudaDevAttrConcurrentManagedAccess" else 1,
    )
    monkeypatch.setattr(cupy_gpus, "device_count", lambda: 2)
    monkeypatch.setattr(_handoff, "wait_host", lambda stream, gpu: waits.append(("stream", stream, gpu)))
    monkeypatch.setattr(_handoff, "synchronize_device", lambda gpu: waits.append(("device", gpu)))
    monkeypatch.setattr(_handoff, "refuse_under_capture", lambda what, stream, gpu: waits.append(("capture", stream, gpu)))
    cupy_gpus._before_host_access(Device((13, 0)), 77, 1)
    if concurrent:
        assert waits == [("stream", 77, 1)]  # (wait_host refuses a capture itself)
    else:  # no host access while any kernel runs: every GPU is idle first, outside a capture
        assert waits == [("capture", 77, 1), ("device", 0), ("device", 1)]
    waits.clear()
    cupy_gpus._before_host_access(Device((2, 1)), 77, 1)
    assert waits == [("stream", 77, 1)]  # device memory: its stream only


# -- 8. one stream check, against the target ---------------------------------------

def _device_producer(versioned=True):
    # A producer of device memory: its capsule says CUDA (2, 0) over host
    # memory that nothing here dereferences.
    cap, rec = make(device=(2, 0), versioned=versioned)
    return Producer(cap, device=(2, 0)), rec


@pytest.mark.parametrize("stream", [12345, 1, 2])
def test_a_device_producer_exported_to_the_host_takes_host_streams_only(stream):
    producer, rec = _device_producer()
    with pytest.raises(ValueError, match=r"stream=\d+ is not valid for CPU"):
        gpu_dlpack.export(producer, stream=stream, dl_device=(1, 0), max_version=(1, 0))
    assert producer.capsule is not None  # refused before the producer was asked
    # The NumPy path says the same.
    with pytest.raises(ValueError, match=r"stream=\d+ is not valid for CPU"):
        gpu_dlpack.export(np.arange(3.0), stream=stream, dl_device=(1, 0), max_version=(1, 0))
    del producer
    gc.collect()
    assert rec.calls == 1


def test_a_device_producer_keeps_its_device_streams():
    producer, rec = _device_producer()
    cap = gpu_dlpack.export(producer, stream=12345, max_version=(1, 0))
    info = gpu_dlpack.inspect(cap)
    assert info.device == Device((2, 0)) and info.version == gpu_dlpack.DLPACK_VERSION
    del cap
    gc.collect()
    assert rec.calls == 1


# -- 9. the struct layout, and memory touched ----------------------------------------

@pytest.mark.parametrize("byteorder, maxsize, unsupported", [
    ("big", 2**63 - 1, "big-endian"),
    ("little", 2**31 - 1, "32-bit"),
    ("big", 2**31 - 1, "big-endian, 32-bit"),
])
def test_an_unsupported_interpreter_is_refused_at_import(byteorder, maxsize, unsupported):
    with pytest.raises(ImportError, match=f"this one is {unsupported}\\. ") as info:
        _capsule.check_platform(byteorder, maxsize)
    assert str(info.value).startswith("gpu_dlpack supports little-endian 64-bit interpreters only;")


def test_this_interpreter_is_supported():
    _capsule.check_platform(sys.byteorder, sys.maxsize)


def test_a_version_is_stamped_as_one_word_major_first():
    assert _capsule.version_word((1, 3)) == 1 | 3 << 32
    cap, rec = make(version=(0, 0))
    _capsule.stamp_version(cap, _capsule.version_word((1, 3)))
    assert gpu_dlpack.inspect(cap).version == (1, 3)
    assert rec.struct.version.major == 1 and rec.struct.version.minor == 3


def test_a_version_is_stamped_only_into_an_8_byte_aligned_struct():
    words = (ctypes.c_uint64 * 24)()
    base = ctypes.addressof(words)
    name = capsules._name_ptr("dltensor_versioned")
    for offset in (0, 4, 8, 12, 16, 24):  # two aligned ones are 8 past a multiple of 16
        ptr = base + offset
        cap = capsules._New(ptr, name, capsules._DESTRUCTOR(0))
        before = bytes(words)
        if ptr % 8:
            says = f"^malformed DLPack tensor: DLManagedTensorVersioned at {ptr:#x} is not 8-byte aligned\\.$"
            with pytest.raises(BufferError, match=says):
                _capsule.stamp_version(cap, 0x0000000300000001)
            assert bytes(words) == before
        else:
            _capsule.stamp_version(cap, 0x0000000300000001)
            assert ctypes.c_uint64.from_address(ptr).value == 0x0000000300000001


def test_the_abi_holds_no_view_wider_than_a_struct():
    # Reads and writes go through views of the structs they are given, not
    # through a view of the whole address space.
    for name, value in vars(_capsule).items():
        if isinstance(value, memoryview):
            assert value.nbytes <= 4096, name
        if isinstance(value, ctypes.Array):
            assert ctypes.sizeof(value) <= 4096, name


def test_patching_a_capsule_writes_only_its_own_fields():
    x = np.arange(4.0)
    cap, rec = make(x, flags=0)
    raw = bytes(memoryview(rec.struct).cast("B"))
    _capsule.set_flags(cap, _capsule.READ_ONLY)
    _capsule.set_version(cap, (1, 2))
    after = bytes(memoryview(rec.struct).cast("B"))
    changed = [i for i in range(len(raw)) if raw[i] != after[i]]
    assert changed == [4, 24]  # the minor version and the flags word
    info = gpu_dlpack.inspect(cap)
    assert info.version == (1, 2) and info.readonly


@pytest.mark.parametrize("field, value, says", [
    ("shape", -6, r"^malformed DLPack tensor: the shape \(-6,\) has a negative dimension\.$"),
    ("strides", 2**62, r"^malformed DLPack tensor: the strides \(4611686018427387904,\) of the shape \(6,\) "
                       r"reach outside the 64-bit address space\.$"),
    ("strides", -(2**60), r"^malformed DLPack tensor: the strides \(-1152921504606846976,\) of the shape \(6,\) "
                          r"reach outside the 64-bit address space\.$"),
])
def test_a_numpy_capsule_with_an_impossible_layout_is_refused(field, value, says):
    # NumPy allocates shape and strides together (read in one go): the same
    # checks hold there. Every other element: strides on every NumPy (2.1 to
    # 2.3 leave a C-contiguous array's out).
    a = np.arange(12.0)[::2]
    ref = weakref.ref(a)
    cap = a.__dlpack__(max_version=(1, 0))
    tensor = capsules.DLManagedTensorVersioned.from_address(_capsule.pointer(cap, True)).dl_tensor
    assert ctypes.addressof(tensor.strides.contents) == ctypes.addressof(tensor.shape.contents) + 8
    getattr(tensor, field)[0] = value
    del a
    with pytest.raises(BufferError, match=says):
        gpu_dlpack.from_dlpack(cap)
    gc.collect()
    assert ref() is None  # refused and freed at once
    assert capsule_name(cap) == "used_dltensor_versioned"
