"""Leaks: 100,000 export/import cycles of each kind, with a steady resident
size and every deleter called; and a source array freed once its last
consumer is gone.

Resident size is read from /proc/self/statm (Linux; elsewhere the RSS check
is skipped and the deleter checks still run) after a warm-up, so caches,
allocator arenas and first-call imports are not counted. A leak of one small
object (a capsule, a struct, a NumPy view) per cycle is 6 MB or more over
100,000 cycles; the limit is 4 MiB.

"Every deleter called" is checked where the deleter can be seen: the
hand-made capsule counts its calls; NumPy's capsule holds a reference to
its array, so the array's reference count is back where it was; torch's and
JAX's hold their buffer, which here is NumPy memory with a weak reference to
it, so that memory is freed at the end only if no capsule outlived its cycle.

``GPU_DLPACK_LEAK_CYCLES`` changes the number of cycles (default 100,000).
"""

from __future__ import annotations

import gc
import os
import time
import weakref

import numpy as np
import pytest

import gpu_dlpack

from . import capsules
from .figures import counter_fixture
from .helpers import refcount, released

# Resident size read over long soaks: run apart, in a process without
# pytest-xdist's thread (pyproject.toml's markers).
pytestmark = pytest.mark.serial

figures = counter_fixture("leaks")

CYCLES = int(os.environ.get("GPU_DLPACK_LEAK_CYCLES", "100000"))
WARMUP = min(5000, CYCLES)
RSS_LIMIT = 4 << 20
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss():
    """Resident set size in bytes, or None where /proc is missing."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return None


def soak(figures, name, step):
    """Run ``step(i)`` WARMUP times, then CYCLES times; check the resident
    size held steady and record the figures."""
    for i in range(WARMUP):
        step(i)
    gc.collect()
    before = rss()
    start = time.perf_counter()
    for i in range(CYCLES):
        step(i)
    seconds = time.perf_counter() - start
    gc.collect()
    after = rss()
    figures[name] += CYCLES
    if before is None:
        figures.notes.append(f"{name}: {CYCLES} cycles in {seconds:.1f} s (no /proc: RSS not read)")
        return
    figures.notes.append(
        f"{name}: {CYCLES} cycles in {seconds:.1f} s, RSS {before / 2**20:.1f} -> "
        f"{after / 2**20:.1f} MiB ({(after - before) / 2**10:+.0f} KiB)"
    )
    assert after - before < RSS_LIMIT, (
        f"{name}: resident size grew by {(after - before) / 2**20:.1f} MiB over {CYCLES} cycles"
    )


def _freed(ref):
    gc.collect()
    return ref() is None


def _aligned(n):
    """A float64 array whose data is 64-byte aligned, as JAX needs to import
    it without a copy; returns (array, owner of the memory)."""
    raw = np.empty(n * 8 + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start:start + n * 8].view(np.float64), raw


MAX_VERSIONS = [(1, 0), None, (1, 5), (0, 8)]


def test_numpy_to_numpy_cycles_leak_nothing(figures):
    a = np.arange(64.0)
    refs = refcount(a)

    def step(i):
        copy = True if i % 8 == 0 else None
        b = gpu_dlpack.from_dlpack(gpu_dlpack.export(a, max_version=MAX_VERSIONS[i % 4], copy=copy))
        if b[i % 64] != i % 64:
            raise AssertionError("values changed")

    soak(figures, "numpy -> numpy", step)
    assert refcount(a) == refs  # each capsule's deleter released a
    ref = weakref.ref(a)
    del a, step
    assert released(ref)


def test_numpy_to_torch_through_wrap_cycles_leak_nothing(figures, torch):
    a = np.arange(64.0)
    w = gpu_dlpack.wrap(a)
    refs = refcount(a)

    def step(i):
        t = torch.from_dlpack(w, copy=True if i % 8 == 0 else None)
        if t[i % 64].item() != i % 64:
            raise AssertionError("values changed")

    soak(figures, "numpy -> torch (wrap)", step)
    assert refcount(a) == refs
    ref = weakref.ref(a)
    del a, w, step
    assert released(ref)


def test_torch_to_gpu_dlpack_cycles_leak_nothing(figures, torch):
    a = np.arange(64.0)
    ref = weakref.ref(a)
    t = torch.from_numpy(a)  # torch's capsules hold t's storage, which holds a
    del a

    def step(i):
        kind = i % 4
        if kind == 0:
            b = gpu_dlpack.from_dlpack(t)
        elif kind == 1:
            b = gpu_dlpack.from_dlpack(gpu_dlpack.export(t, max_version=(1, 0)))
        elif kind == 2:
            b = gpu_dlpack.from_dlpack(gpu_dlpack.export(t))
        else:
            b = gpu_dlpack.from_dlpack(t, copy=True)
        if b[i % 64] != i % 64:
            raise AssertionError("values changed")

    soak(figures, "torch -> gpu_dlpack", step)
    del t
    assert _freed(ref), "a torch capsule outlived its cycle"


def test_jax_to_gpu_dlpack_versioned_adaptation_cycles_leak_nothing(figures, jax):
    a, owner = _aligned(64)
    a[:] = np.arange(64.0)
    ref = weakref.ref(owner)
    j = jax.numpy.from_dlpack(a)  # JAX holds a's memory; its capsules hold JAX's buffer
    assert j.unsafe_buffer_pointer() == a.ctypes.data
    del a, owner

    def step(i):
        # JAX gives legacy capsules only: each is rebuilt as DLPack 1.2, READ_ONLY.
        cap = gpu_dlpack.export(j, max_version=(1, 0), copy=True if i % 8 == 0 else None)
        b = gpu_dlpack.from_dlpack(cap)
        if b[i % 64] != i % 64:
            raise AssertionError("values changed")

    soak(figures, "jax -> gpu_dlpack (versioned adaptation)", step)
    del j
    assert _freed(ref), "a JAX capsule outlived its cycle"


def test_jax_through_the_core_cycles_leak_nothing(figures, jax, torch):
    # The plain JAX exchanges the compiled core makes: the import, the
    # pass-on, the adaptation consumed by torch, through tvm-ffi's C
    # exchange API, and never consumed.
    a, owner = _aligned(64)
    a[:] = np.arange(64.0)
    ref = weakref.ref(owner)
    j = jax.numpy.from_dlpack(a)
    assert j.unsafe_buffer_pointer() == a.ctypes.data
    del a, owner
    try:
        import tvm_ffi
    except ImportError:
        tvm_ffi = None

    def step(i):
        kind = i % 5
        if kind == 0:
            b = gpu_dlpack.from_dlpack(j)
        elif kind == 1:
            b = gpu_dlpack.from_dlpack(gpu_dlpack.export(j, max_version=(1, 0)))
        elif kind == 2:
            b = torch.from_dlpack(gpu_dlpack.wrap(j)).numpy()
        elif kind == 3 and tvm_ffi is not None:
            b = np.from_dlpack(tvm_ffi.from_dlpack(gpu_dlpack.wrap(j)))
        else:
            gpu_dlpack.export(j, max_version=(1, 0))  # dropped unconsumed
            return
        if b[i % 64] != i % 64:
            raise AssertionError("values changed")

    soak(figures, "jax -> gpu_dlpack (import, adaptation to gpu_dlpack, torch and tvm-ffi)", step)
    del j
    assert _freed(ref), "a JAX capsule outlived its cycle"


def test_adapted_capsule_cycles_call_every_deleter_once(figures):
    # The adaptation between kinds, each way, on the host and on a device,
    # consumed or dropped: one deleter call per capsule.
    a = np.arange(64.0)
    calls_before, stray_before = capsules.total_calls, capsules.stray_calls
    n = CYCLES // 10

    def step(i):
        versioned, device = bool(i % 2), ((1, 0), (2, 0))[(i // 2) % 2]
        cap, _ = capsules.make(a, versioned=versioned, device=device)
        out = gpu_dlpack.export(capsules.Producer(cap, device=device), max_version=None if versioned else (1, 0))
        if device == (1, 0) and i % 4 < 2:
            b = gpu_dlpack.from_dlpack(out)
            if b[i % 64] != i % 64:
                raise AssertionError("values changed")

    for i in range(n):
        step(i)
    gc.collect()
    figures["adapted capsule"] += n
    assert capsules.total_calls - calls_before == n
    assert capsules.stray_calls == stray_before


def test_raw_capsule_import_cycles_call_every_deleter_once(figures):
    a = np.arange(64.0)
    live_before = len(capsules.live)
    calls_before, stray_before = capsules.total_calls, capsules.stray_calls

    def step(i):
        cap, _ = capsules.make(a, versioned=bool(i % 2))
        b = gpu_dlpack.from_dlpack(cap)
        if b[i % 64] != i % 64:
            raise AssertionError("values changed")

    soak(figures, "raw capsule import", step)
    gc.collect()
    assert capsules.total_calls - calls_before == WARMUP + CYCLES
    assert capsules.stray_calls == stray_before  # no deleter ran twice
    assert len(capsules.live) == live_before  # none left unfreed


def test_refused_capsule_cycles_call_every_deleter_once(figures):
    # The error paths free too: a refused capsule is freed at once.
    a = np.arange(64.0)
    calls_before, stray_before = capsules.total_calls, capsules.stray_calls
    n = CYCLES // 10
    bad = [dict(version=(2, 0)), dict(dtype=(2, 64, 2)), dict(device=(0, 0)), dict(data=0)]
    for i in range(n):
        cap, _ = capsules.make(a, **bad[i % 4])
        try:
            gpu_dlpack.from_dlpack(cap)
        except BufferError:
            pass
        else:
            raise AssertionError("a malformed capsule was imported")
    gc.collect()
    figures["refused raw capsule"] += n
    assert capsules.total_calls - calls_before == n
    assert capsules.stray_calls == stray_before


# -- a source is freed once its last consumer is gone ----------------------------------


def test_a_numpy_source_lives_while_any_consumer_does(torch, jax):
    a = np.arange(8.0)
    ref = weakref.ref(a)
    b = gpu_dlpack.from_dlpack(gpu_dlpack.export(a, max_version=(1, 0)))
    t = torch.from_dlpack(gpu_dlpack.wrap(b))
    c = gpu_dlpack.from_dlpack(t)
    d = gpu_dlpack.from_dlpack(gpu_dlpack.export(c))
    del a, b, t, c
    assert not _freed(ref)
    assert d[3] == 3.0
    del d
    assert _freed(ref)


def test_a_torch_source_lives_while_any_consumer_does(torch):
    a = np.arange(8.0)
    ref = weakref.ref(a)
    t = torch.from_numpy(a)
    del a
    consumers = [
        gpu_dlpack.from_dlpack(t),
        gpu_dlpack.from_dlpack(gpu_dlpack.export(t, max_version=(1, 0))),
        gpu_dlpack.export(t),  # an unconsumed capsule holds it too
    ]
    del t
    for _ in range(len(consumers)):
        assert not _freed(ref)
        consumers.pop()
    assert _freed(ref)


def test_a_jax_source_lives_while_any_consumer_does(jax):
    a, owner = _aligned(8)
    a[:] = np.arange(8.0)
    ref = weakref.ref(owner)
    j = jax.numpy.from_dlpack(a)
    assert j.unsafe_buffer_pointer() == a.ctypes.data
    del a, owner
    consumers = [
        gpu_dlpack.from_dlpack(j),
        gpu_dlpack.from_dlpack(gpu_dlpack.export(j, max_version=(1, 0))),
        gpu_dlpack.export(j, max_version=(1, 0)),
    ]
    del j
    for _ in range(len(consumers)):
        assert not _freed(ref)
        consumers.pop()
    assert _freed(ref)


def test_a_source_is_freed_when_a_consumer_copied_it(torch):
    a = np.arange(8.0)
    ref = weakref.ref(a)
    copies = [
        gpu_dlpack.from_dlpack(a, copy=True),
        gpu_dlpack.from_dlpack(gpu_dlpack.export(a, max_version=(1, 0), copy=True)),
        torch.from_dlpack(gpu_dlpack.wrap(a), copy=True),
    ]
    del a
    assert _freed(ref)  # copies hold nothing of the source
    assert [float(c[3]) for c in copies] == [3.0, 3.0, 3.0]


# -- on a GPU (public API only) ----------------------------------------------------------


@pytest.mark.gpu
def test_host_to_gpu_and_back_cycles_leak_nothing(figures):
    import cupy

    from gpu_dlpack import _handoff

    a = np.arange(64.0)
    refs = refcount(a)
    pool = cupy.get_default_memory_pool()

    def step(i):
        d = gpu_dlpack.from_dlpack(gpu_dlpack.export(a, max_version=(1, 0), dl_device=(2, 0)))
        b = gpu_dlpack.from_dlpack(gpu_dlpack.export(d, max_version=(1, 0), dl_device=(1, 0)))
        if b[i % 64] != i % 64:
            raise AssertionError("values changed")

    n = min(CYCLES, 20000)  # device round trips are slower
    for i in range(WARMUP):
        step(i)
    used = pool.used_bytes()
    for i in range(n):
        step(i)
    gc.collect()
    figures["numpy -> cuda -> numpy"] += n
    assert pool.used_bytes() <= used  # every device buffer was given back
    # The last copy from the host keeps its source until its event says it
    # is done (the copy back to the host waited for it): released here.
    _handoff.collect()
    assert refcount(a) == refs
    ref = weakref.ref(a)
    del a, step
    assert released(ref)


def test_no_public_function_keeps_an_argument_in_a_cell():
    # CPython 3.11 and 3.12 leak a reference to an argument that a closure
    # (a generator expression) captures, where its cell cannot be allocated
    # at the call: from_dlpack(x) closed over x. The Python function behind
    # each public entry (the core's front hands it every general case).
    import types

    for name in ("from_dlpack", "export", "wrap", "convert", "view", "inspect", "shards"):
        fn = getattr(gpu_dlpack, name)
        fn = getattr(fn, "__wrapped__", fn)
        if not isinstance(fn, types.FunctionType):
            continue
        code = fn.__code__
        args = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount + code.co_posonlyargcount])
        assert not args & set(code.co_cellvars), (name, args & set(code.co_cellvars))
