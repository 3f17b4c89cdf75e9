"""What one small copy costs the host, and what a failed one leaves behind.

The copy paths are driven through addresses and sizes (host memory here)
against a recording stand-in for the CUDA runtime, on both faces the layer
uses: CuPy's runtime module (its Python calls, where the core is not bound
to it) and the C entries the compiled core calls (tests/simcuda's forwarding capsules, of CuPy's Cython
signatures, calling the stand-in's methods). The stand-in moves the bytes
at once, so values are checked too. Pinned here:

- the runtime calls of one copy: device to host is ``cudaGetDevice``,
  ``cudaMemcpyAsync``, ``cudaStreamSynchronize`` (no event, no device
  switch when the GPU is current); host to device adds ``cudaEventRecord``
  of a pooled event (what keeps its buffers alive) and no wait;
- the Python-level calls of each (cProfile), on each face;
- a failed copy frees its pinned block or returns its event, and a block
  is reused only once no queued copy can still write it.
"""

from __future__ import annotations

import cProfile
import ctypes
import gc
import pstats
import weakref

import numpy as np
import pytest

from gpu_dlpack import _copies, _handoff
from gpu_dlpack._compiled import core

STREAM, OTHER_STREAM = 0x5000, 0x6000


class Runtime:
    """The CUDA runtime calls of the copy paths, recorded: the functions of
    CuPy's runtime module the layer calls, which the compiled core reaches
    through C entries (``capi``). Copies move host bytes at once; an event
    completes when ``finish`` says so."""

    memcpyDefault = 4
    hostAllocPortable = 1

    def __init__(self, device=0):
        self.device = device
        self.calls = []
        self.fail = {}  # call name -> error code, for the next such call
        self.done = set()
        self.pinned = {}  # address -> buffer: page-locked blocks alive
        self._next = 0x100

    # -- bookkeeping --
    def _call(self, name, *args):
        self.calls.append((name, *args))
        status = self.fail.pop(name, 0)
        return status

    def names(self):
        return [c[0] for c in self.calls]

    def finish(self):
        self.done.update(c[1] for c in self.calls if c[0] == "eventRecord")

    # -- the Python face (CuPy's runtime module) --
    def check_status(self, status):
        if status:
            raise RuntimeError(f"CUDA error {status} (stand-in)")

    def _raise(self, status):
        if status:
            raise RuntimeError(f"CUDA error {status} (stand-in)")

    def getDevice(self):
        self._raise(self._call("getDevice"))
        return self.device

    def setDevice(self, device):
        self._raise(self._call("setDevice", device))
        self.device = device

    def memcpyAsync(self, dst, src, nbytes, kind, stream):
        self._raise(self._call("memcpyAsync", stream, self.device))
        ctypes.memmove(dst, src, nbytes)

    def eventRecord(self, event, stream):
        self._raise(self._call("eventRecord", event, stream))
        self.done.discard(event)

    def streamWaitEvent(self, stream, event, flags=0):
        self._raise(self._call("streamWaitEvent", stream, event))

    def streamSynchronize(self, stream):
        self._raise(self._call("streamSynchronize", stream))

    def streamIsCapturing(self, stream):
        # Asked before every copy and hand-off; no stream captures here (the
        # capture rules are tested on the simulated CUDA), and the question
        # queues no work: not among the calls.
        return False

    def eventCreateWithFlags(self, flags):
        self._next += 1
        self.calls.append(("eventCreate", self._next))
        return self._next

    def eventDestroy(self, event):
        self.calls.append(("eventDestroy", event))

    def eventQuery(self, event):
        self.calls.append(("eventQuery", event))
        return 0 if event in self.done else _handoff._NOT_READY

    def eventSynchronize(self, event):
        self.calls.append(("eventSynchronize", event))
        self.done.add(event)

    def hostAlloc(self, nbytes, flags):
        self._raise(self._call("hostAlloc", nbytes))
        buf = np.empty(nbytes, np.uint8)
        self.pinned[buf.ctypes.data] = buf
        return buf.ctypes.data

    def freeHost(self, ptr):
        self.calls.append(("freeHost", ptr))
        del self.pinned[ptr]

    # -- the C face --
    def capi(self):
        """C entries of CuPy's signatures that call this stand-in's methods."""
        from . import simcuda

        return simcuda.load().forwarding_capi(self)


@pytest.fixture
def runtime(monkeypatch):
    """The stand-in as a runtime the core is not bound to (CuPy's Python
    calls), with empty event pools and nothing pending."""
    rt = Runtime()
    monkeypatch.setattr(_handoff, "_runtime", lambda: rt)
    monkeypatch.setattr(_handoff, "_bindings", [(rt, False, "a stand-in")])
    monkeypatch.setattr(_handoff, "_pools", {})
    monkeypatch.setattr(_handoff, "_pending", [])
    return rt


@pytest.fixture(params=["Python calls", "compiled"])
def path(request, runtime, monkeypatch):
    """Each way to the runtime in turn: the compiled core's copy through C
    entries to the stand-in, or, where the core is not bound to the runtime
    (entries that differ), CuPy's runtime calls on it from Python."""
    if request.param == "compiled":
        assert core.bind_runtime(runtime.capi()) is None
        monkeypatch.setattr(_handoff, "_bindings", [(runtime, True, None)])
        yield request.param
        core.bind_runtime(None)
        _handoff._bindings.clear()
    else:
        yield request.param


def _pool(runtime, **kwargs):
    """A pool of its own, allocating through the stand-in (``_runtime``)."""
    return _copies.PinnedPool(_copies.HostRuntime(), **kwargs)


def _profiled_calls(fn):
    """The Python-level calls (cProfile) the layer makes in one call of
    ``fn``: its own functions, and the built-in functions and methods they
    call. The stand-in's own work is not counted."""
    profile = cProfile.Profile()
    profile.runcall(fn)
    ours = "/gpu_dlpack/"
    total = 0
    for (filename, _line, _name), (_cc, calls, _tt, _ct, callers) in pstats.Stats(profile).stats.items():
        if ours in filename:
            total += calls
        elif filename == "~":
            total += sum(c[1] for (caller_file, _l, _n), c in callers.items() if ours in caller_file)
    return total


# -- what one small copy costs --------------------------------------------------

#: The runtime calls of one small copy, per direction, on the current GPU.
DEVICE_TO_HOST = ["getDevice", "memcpyAsync", "streamSynchronize"]
HOST_TO_DEVICE = ["getDevice", "memcpyAsync", "eventRecord"]
#: The most Python-level calls (cProfile: the layer's functions and the
#: built-ins they call) each may make, per path, from the decided copy to
#: its result, with a pooled block or event (as after the first call).
MOST_CALLS = {
    ("device to host", "Python calls"): 15,
    ("device to host", "compiled"): 13,
    ("host to device", "Python calls"): 13,
    ("host to device", "compiled"): 11,
}


def test_a_small_copy_to_the_host_is_one_copy_and_one_stream_synchronize(runtime, path):
    pool = _pool(runtime)
    src = np.arange(1024, dtype=np.float32)
    pool.take(4096)  # a block in the pool, as after the first copy
    runtime.calls.clear()
    got = []
    calls = _profiled_calls(lambda: got.append(_copies.to_host(src.ctypes.data, src.nbytes, STREAM, 0, pool)))
    block = got[0]
    assert runtime.names() == DEVICE_TO_HOST
    assert runtime.calls[1] == ("memcpyAsync", STREAM, 0) and runtime.calls[2] == ("streamSynchronize", STREAM)
    assert np.frombuffer((ctypes.c_char * src.nbytes).from_address(block.ptr), np.float32).tolist() == src.tolist()
    assert calls <= MOST_CALLS["device to host", path], calls
    assert pool.allocated == 1  # the pooled block, not a new one


def test_a_small_copy_to_the_device_queues_a_pooled_event_and_never_waits(runtime, path):
    src = np.arange(1024, dtype=np.float32)
    dst = np.zeros_like(src)
    _handoff._release(0, runtime.eventCreateWithFlags(0))  # an event in the pool
    runtime.calls.clear()
    calls = _profiled_calls(lambda: _copies.copy_kept(dst.ctypes.data, src.ctypes.data, src.nbytes, STREAM, 0, (src, dst)))
    assert runtime.names() == HOST_TO_DEVICE
    assert (dst == src).all()
    assert calls <= MOST_CALLS["host to device", path], calls
    assert len(_handoff._pending) == 1 and _handoff.pool_size(0) == 0
    # The next copy first releases what completed work held: one query.
    runtime.finish()
    runtime.calls.clear()
    _copies.copy_kept(dst.ctypes.data, src.ctypes.data, src.nbytes, STREAM, 0, (src, dst))
    assert runtime.names() == ["eventQuery"] + HOST_TO_DEVICE
    assert len(_handoff._pending) == 1


def test_a_copy_for_another_gpu_switches_the_device_and_back(runtime, path):
    src = np.arange(16, dtype=np.uint8)
    dst = np.zeros_like(src)
    _copies.copy(dst.ctypes.data, src.ctypes.data, 16, STREAM, 1, synchronize=True)
    assert runtime.calls == [
        ("getDevice",), ("setDevice", 1), ("memcpyAsync", STREAM, 1), ("streamSynchronize", STREAM), ("setDevice", 0),
    ]
    assert runtime.device == 0 and (dst == src).all()


def test_the_host_waits_for_one_stream_without_an_event(runtime):
    _handoff.wait_host(OTHER_STREAM, 0)
    assert runtime.calls == [("getDevice",), ("streamSynchronize", OTHER_STREAM)]


# -- what a failed copy leaves behind ---------------------------------------------

@pytest.mark.parametrize("failing", ["memcpyAsync", "streamSynchronize", "getDevice"])
def test_a_failed_copy_to_the_host_frees_its_block_and_restores_the_device(runtime, path, failing):
    pool = _pool(runtime)
    pool.take(4096)
    pooled = next(iter(runtime.pinned))
    runtime.fail[failing] = 700  # cudaErrorIllegalAddress
    src = np.ones(4096, np.uint8)
    with pytest.raises(RuntimeError, match="700"):
        _copies.to_host(src.ctypes.data, 4096, STREAM, 1, pool)
    # The block the copy may have been writing is freed, never handed out again.
    assert ("freeHost", pooled) in runtime.calls
    assert pool.allocated == 0 and pool.idle_bytes == 0 and not runtime.pinned
    assert runtime.device == 0


@pytest.mark.parametrize("failing", ["memcpyAsync", "eventRecord"])
def test_a_failed_copy_to_the_device_returns_its_event_and_holds_nothing(runtime, path, failing):
    _handoff._release(0, runtime.eventCreateWithFlags(0))
    src, dst = np.ones(64, np.uint8), np.zeros(64, np.uint8)
    held = weakref.ref(src)
    runtime.fail[failing] = 400
    with pytest.raises(RuntimeError, match="400"):
        _copies.copy_kept(dst.ctypes.data, src.ctypes.data, 64, STREAM, 0, (src,))
    assert _handoff.pool_size(0) == 1 and not _handoff._pending
    # A copy may be queued and nothing marks its end: the host waited for
    # the stream before its buffers could go.
    assert runtime.calls[-1] == ("streamSynchronize", STREAM)
    del src
    gc.collect()
    assert held() is None


def test_pinned_memory_exhausted_frees_the_idle_blocks_and_tries_once_more(runtime):
    pool = _pool(runtime)
    for n in (4096, 8192, 1 << 20):
        pool.take(n)  # dropped at once: idle in the pool
    assert pool.idle_bytes == 4096 + 8192 + (1 << 20)
    runtime.fail["hostAlloc"] = 2  # cudaErrorMemoryAllocation, once
    block = pool.take(3 << 20)
    assert pool.idle_bytes == 0 and set(runtime.pinned) == {block.ptr}
    del block
    refused = []

    def refuse(nbytes, flags):
        refused.append(nbytes)
        raise RuntimeError("CUDA error 2 (stand-in)")

    runtime.hostAlloc = refuse  # exhausted for good
    with pytest.raises(RuntimeError, match="error 2"):
        pool.take(5 << 20)
    assert len(refused) == 2 and pool.idle_bytes == 0 and not runtime.pinned and pool.allocated == 0


# -- the pool: reused at once, never while a copy writes, bounded ------------------

def test_a_pooled_block_is_reused_only_once_no_queued_copy_writes_it(runtime, path):
    pool = _pool(runtime)
    block = pool.take(4096)
    first = block.ptr
    src = np.full(4096, 7, np.uint8)
    holder = [block]  # the result array over the block: what the caller holds
    _handoff._release(0, runtime.eventCreateWithFlags(0))
    _copies.copy_kept(block.ptr, src.ctypes.data, 4096, STREAM, 0, (src, holder))
    del block, holder  # the caller drops its result at once
    gc.collect()
    other = pool.take(4096)
    assert other.ptr != first, "a block was handed out while a copy still writes it"
    runtime.finish()
    _handoff.collect()
    gc.collect()
    again = pool.take(4096)
    assert again.ptr == first  # reused at once when the copy is done
    del other, again


def test_the_block_returned_last_is_reused_first(runtime):
    pool = _pool(runtime)
    a, b = pool.take(4096), pool.take(4096)
    pa, pb = a.ptr, b.ptr
    del a
    del b
    assert pool.take(4096).ptr == pb and pool.take(4096).ptr == pa
    assert pool.allocated == 2


def test_idle_blocks_are_bounded_and_freed_least_recently_returned_first(runtime):
    pool = _pool(runtime, idle_bytes=3 * 4096)
    blocks = [pool.take(4096) for _ in range(5)]
    ptrs = [b.ptr for b in blocks]
    while blocks:
        blocks.pop(0)  # returned in the order taken
    assert pool.idle_bytes == 3 * 4096 and len(runtime.pinned) == 3
    assert set(runtime.pinned) == set(ptrs[2:])  # the three returned last
    big = pool.take(4 * 4096)  # larger than the bound: freed when it comes back
    del big
    assert pool.idle_bytes == 3 * 4096 and len(runtime.pinned) == 3
    pool.close()
    assert not runtime.pinned and pool.allocated == 0


def test_a_block_in_use_at_close_is_freed_when_it_comes_back(runtime):
    pool = _pool(runtime)
    block = pool.take(100)
    pool.close()
    assert len(runtime.pinned) == 1
    del block
    assert not runtime.pinned


@pytest.mark.parametrize(
    "nbytes,size",
    [(1, 4096), (4096, 4096), (4097, 8192), (1 << 20, 1 << 20), ((1 << 20) + 1, 9 << 17),
     (16 << 20, 16 << 20), ((16 << 20) + 1, 18 << 20), (100 << 20, 104 << 20), (1 << 30, 1 << 30)],
)
def test_size_classes_waste_at_most_an_eighth_above_one_mib(nbytes, size):
    assert _copies.size_class(nbytes) == size
    if nbytes > 1 << 20:
        assert size <= nbytes * 9 / 8


# -- the core's copy entry --------------------------------------------------------

def test_the_core_copy_checks_its_arguments_and_needs_a_runtime():
    with pytest.raises(TypeError):
        core.copy(1, 2, 3)
    core.bind_runtime(None)
    _handoff._bindings.clear()
    with pytest.raises(RuntimeError, match="no CUDA runtime"):
        core.copy(1, 2, 3, 4, 0, 0, True)
    # All the entries or none: one missing is named, and nothing is bound.
    assert core.bind_runtime({}) == ("getDevice", None, "int (int __pyx_skip_dispatch)")
    with pytest.raises(RuntimeError, match="no CUDA runtime"):
        core.copy(1, 2, 3, 4, 0, 0, True)


# -- the report of the copy targets ------------------------------------------------

def _bench(group, label, role, median, nbytes, **info):
    extra = dict(label=label, role=role, bytes=nbytes, direction=group.split(" 4")[0].split(" 16")[0], **info)
    return {"group": group, "name": label, "stats": {"median": median}, "extra_info": extra}


def test_the_report_gives_each_copy_its_ratio_to_the_peer_and_share_of_the_ceiling():
    from bench import report

    small, large = "device to host 4 KiB", "device to host 16 MiB"
    doc = {"benchmarks": [
        _bench(small, "a.get()", "peer", 12e-6, 4096),
        _bench(small, "wrap", "gpu_dlpack", 10e-6, 4096, peer="a.get()", target=1.0),
        _bench(small, "from_dlpack", "gpu_dlpack", 15e-6, 4096, peer="a.get()", target=1.0),
        _bench(small, "bare", "ceiling", 8e-6, 4096),
        _bench(large, "a.get()", "peer", 1700e-6, 16 << 20),
        _bench(large, "wrap", "gpu_dlpack", 330e-6, 16 << 20, peer="a.get()", ceiling_share=0.9),
        _bench(large, "from_dlpack", "gpu_dlpack", 420e-6, 16 << 20, peer="a.get()", ceiling_share=0.9),
        _bench(large, "bare", "ceiling", 312e-6, 16 << 20),
    ]}
    text = "\n".join(report.copy_target_table(doc))
    assert "| device to host | 4 | `wrap` | 10.0 | `a.get()` | 0.833 | ≤ 1 | met | 80 |  |  |" in text
    assert "| `from_dlpack` | 15.0 | `a.get()` | 1.25 | ≤ 1 | missed by 0.25 |" in text
    assert "| 95 | ≥ 90 | met |" in text and "| 74 | ≥ 90 | missed by 16 |" in text
    assert "## Copy targets" in report.summary(doc)
