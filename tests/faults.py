"""Faults that real programs meet, driven in child processes so that a crash
or a hang is a reported failure, not a lost test run.

- **Allocation failure**: the n-th allocation of one exchange fails
  (``_testcapi.set_nomemory(n, n + 1)``), for every n until the exchange no
  longer reaches it. Each outcome must be the exchange's result (values
  checked) or ``MemoryError``; nothing else is raised, nothing crashes.
- **Interrupts, stepped**: ``KeyboardInterrupt`` raised at each instruction
  of the layer's own Python code that one exchange runs (``sys.settrace``
  with opcode events), one instruction per run, until a run ends before the
  instruction counted. Every point between taking a capsule and handing its
  tensor on is one of them.
- **Interrupts, timed**: a SIGALRM handler raising ``KeyboardInterrupt``
  after a random 20-400 µs, re-armed for each batch of exchanges, until
  thousands of interrupts have landed.
- **Fork**: children forked while threads exchange, and a real
  ``torch.utils.data.DataLoader(num_workers=2)`` whose workers exchange.

After every run each source is checked: a hand-made capsule's deleter ran
exactly once (``tests/capsules.py`` counts its calls, and calls for a tensor
already freed), a NumPy source array is freed (a weak reference).

Interrupts land only in gpu_dlpack's code and in the exchange around it,
never in the Python code of the hand-made producer's deleter, which stands
for a C producer's (a C deleter runs no Python code that a signal could
interrupt).

Run as a script for the long forms: ``python -m tests.faults --help``.
"""

from __future__ import annotations

import argparse
import dis
import gc
import json
import linecache
import os
import random
import signal
import subprocess
import sys
import threading
import time
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "gpu_dlpack") + os.sep
CAPSULES = os.path.join(ROOT, "tests", "capsules.py")


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


# -- the exchanges --------------------------------------------------------------
# Each kind builds its source and returns (run, check, watch): run() makes the
# exchange and returns its result, check(result) checks the values, watch() is
# the Watch that says, after the result is dropped, whether the source was freed.

EXPECTED = np.arange(6.0)


class Watch:
    """The sources of one run: hand-made capsule records (their deleter's
    calls are counted) and NumPy arrays (held here: once the run's objects
    are dropped, this is their only reference, so a count above it is a
    leak and one below it a reference released twice)."""

    def __init__(self, records=(), arrays=()):
        self.records = list(records)
        self.arrays = list(arrays)

    def state(self, collect=True):
        """``(leaked, freed twice)`` once every other reference is dropped
        (and, unless ``collect`` is False, cycles collected: the young
        generations, and all of them only when something looks leaked, since
        a full collection with torch loaded costs tens of milliseconds)."""
        if collect:
            gc.collect(1)
            found = self.state(collect=False)
            if not found[0]:
                return found
            gc.collect()
        leaked = sum(1 for r in self.records if r.calls == 0)
        twice = sum(1 for r in self.records if r.calls > 1)
        for i in range(len(self.arrays)):
            refs = sys.getrefcount(self.arrays[i]) - 1  # the list's own
            leaked += refs > 1
            twice += refs < 1
        return leaked, twice


def _values(x):
    got = np.asarray(x if not hasattr(x, "numpy") else x.numpy())
    if got.tolist() != EXPECTED.tolist():
        raise AssertionError(f"wrong values: {got.tolist()}")


def _refused(result):
    if not isinstance(result, BufferError):
        raise AssertionError(f"a malformed capsule was not refused: {result!r}")


_VERSIONED_NUMPY = np.lib.NumpyVersion(np.__version__) >= "2.1.0"


def _source(versioned=True):
    """``([capsule], watch)``: a capsule over ``arange(6.0)`` made by NumPy
    (a C producer: C deleter and destructor), or before NumPy 2.1, which
    makes no versioned capsules, the one gpu_dlpack makes for it."""
    a = np.arange(6.0)
    if not versioned:
        cap = a.__dlpack__()
    elif _VERSIONED_NUMPY:
        cap = a.__dlpack__(max_version=(1, 0))
    else:
        import gpu_dlpack

        cap = gpu_dlpack.export(a, max_version=(1, 0))
    return [cap], Watch(arrays=[a])


def _array(wrap=None):
    a = np.arange(6.0)
    return [a if wrap is None else wrap(a)], Watch(arrays=[a])


def k_capsule():
    import gpu_dlpack

    box, watch = _source()
    return (lambda: gpu_dlpack.from_dlpack(box.pop())), _values, watch


def k_capsule_legacy():
    import gpu_dlpack

    box, watch = _source(versioned=False)
    return (lambda: gpu_dlpack.from_dlpack(box.pop())), _values, watch


def k_capsule_refused():
    import gpu_dlpack
    from gpu_dlpack import _capsule

    box, watch = _source()
    _capsule.set_version(box[0], (2, 0))  # a major version no importer reads

    def run():
        try:
            gpu_dlpack.from_dlpack(box.pop())
        except BufferError as exc:
            return exc
        return None

    return run, _refused, watch


def k_wrap_capsule():
    import gpu_dlpack

    box, watch = _source()
    return (lambda: np.from_dlpack(gpu_dlpack.wrap(box.pop()))), _values, watch


def k_inspect():
    import gpu_dlpack

    box, watch = _source()

    def run():
        info = gpu_dlpack.inspect(box[0])
        if info.readonly or info.shape != (6,) or info.is_copied:
            raise AssertionError(f"wrong fields: {info}")
        return gpu_dlpack.from_dlpack(box.pop())

    return run, _values, watch


def k_array_interface():
    import gpu_dlpack

    box, watch = _source()
    return (lambda: np.asarray(gpu_dlpack.wrap(box.pop()))), _values, watch


def k_numpy_export():
    import gpu_dlpack

    box, watch = _array()
    return (lambda: gpu_dlpack.from_dlpack(gpu_dlpack.export(box.pop(), max_version=(1, 0)))), _values, watch


def k_numpy_wrap():
    import gpu_dlpack

    box, watch = _array()
    return (lambda: np.from_dlpack(gpu_dlpack.wrap(box.pop()))), _values, watch


def k_legacy_producer():
    import gpu_dlpack

    from .helpers import OldProducer

    box, watch = _array(OldProducer)
    return (lambda: gpu_dlpack.from_dlpack(gpu_dlpack.export(box.pop(), max_version=(1, 0)))), _values, watch


def k_torch_import():
    import gpu_dlpack

    box, watch = _array(_torch().from_numpy)
    return (lambda: gpu_dlpack.from_dlpack(box.pop())), _values, watch


def k_torch_export():
    import gpu_dlpack

    box, watch = _array(_torch().from_numpy)
    return (lambda: gpu_dlpack.from_dlpack(gpu_dlpack.export(box.pop(), max_version=(1, 0)))), _values, watch


def k_torch_wrap():
    import gpu_dlpack

    torch = _torch()
    box, watch = _array()
    return (lambda: torch.from_dlpack(gpu_dlpack.wrap(box.pop()))), _values, watch


def k_torch_capsule():
    import gpu_dlpack

    torch = _torch()
    box, watch = _source()
    return (lambda: torch.from_dlpack(gpu_dlpack.wrap(box.pop()))), _values, watch


def _floor_left():
    """The floor an earlier call left on this thread (None: none, as it must)."""
    from gpu_dlpack import _versions

    return _versions._local.floor


def _values_no_floor(result):
    left, got = result
    if left is not None:
        raise AssertionError(f"the floor {left} of an earlier call outlived it on this thread")
    _values(got)


def k_floor_export():
    import gpu_dlpack

    box, watch = _array()

    def run():
        left = _floor_left()
        return left, gpu_dlpack.from_dlpack(gpu_dlpack.export(box.pop(), max_version=(0, 4), min_version=(0, 4)))

    return run, _values_no_floor, watch


def k_floor_wrap():
    import gpu_dlpack

    box, watch = _array()

    def run():
        left = _floor_left()
        return left, gpu_dlpack.from_dlpack(gpu_dlpack.wrap(box.pop(), min_version=(0, 4)).__dlpack__(max_version=(0, 4)))

    return run, _values_no_floor, watch


def _host_producer(versioned=True):
    """``([producer], watch)``: a producer that answers the host test as
    JAX's arrays do (``capsules.HostProducer``, told to the layer as the
    fuzzer tells it), whose one capsule is hand-made (its deleter's calls
    counted), legacy as JAX's are or versioned: what the compiled core asks,
    imports and adapts in C."""
    from gpu_dlpack import _peers

    from . import capsules
    from .fuzz_capsules import _host_tested

    if not any(p.array == "HostProducer" for p in _peers.PEERS):
        _peers.PEERS = _peers.PEERS + (_host_tested(),)  # before the layer first meets the type
    cap, record = capsules.make(np.arange(6.0), versioned=versioned)
    return [capsules.HostProducer(cap)], Watch(records=[record])


def k_host_import():
    import gpu_dlpack

    box, watch = _host_producer()
    return (lambda: gpu_dlpack.from_dlpack(box.pop())), _values, watch


def k_host_import_legacy():
    import gpu_dlpack

    box, watch = _host_producer(versioned=False)
    return (lambda: gpu_dlpack.from_dlpack(box.pop())), _values, watch


def k_host_adapt():
    # legacy -> versioned: the adaptation of a host producer's capsule
    import gpu_dlpack

    box, watch = _host_producer(versioned=False)
    return (lambda: gpu_dlpack.from_dlpack(gpu_dlpack.export(box.pop(), max_version=(1, 0)))), _values, watch


def k_host_adapt_wrap():
    import gpu_dlpack

    box, watch = _host_producer(versioned=False)
    return (lambda: np.from_dlpack(gpu_dlpack.wrap(box.pop()))), _values, watch


class _ProducerWatch(Watch):
    """The records of a ``capsules.DeviceProducer``: the capsules it made
    while the run asked it."""

    def __init__(self, producer):
        super().__init__()
        self.producer = producer

    def state(self, collect=True):
        self.records = list(self.producer.records)
        return super().state(collect)


def _device_adapted(versioned):
    def check(result):
        from gpu_dlpack import _capsule

        info = _capsule.read(result)
        if info.versioned is versioned or tuple(info.device.dlpack) != (2, 0) or info.shape != (6,):
            raise AssertionError(f"wrong adaptation: {info}")
        if versioned is False and not info.readonly:
            raise AssertionError("a legacy tensor adapted to a versioned one is not READ_ONLY")

    return check


def k_device_adapt():
    # legacy -> versioned on a device no backend owns (no data touched)
    import gpu_dlpack

    from .capsules import DeviceProducer

    p = DeviceProducer(versioned=False)
    box = [p]
    return (lambda: gpu_dlpack.export(box.pop(), max_version=(1, 0))), _device_adapted(False), _ProducerWatch(p)


def k_device_adapt_legacy():
    # versioned -> legacy, nothing read-only lost
    import gpu_dlpack

    from .capsules import DeviceProducer

    p = DeviceProducer(versioned=True)
    box = [p]
    return (lambda: gpu_dlpack.export(box.pop())), _device_adapted(True), _ProducerWatch(p)


def _jax():
    try:
        import jax.numpy as jnp
    except ImportError:
        return None
    return jnp


def _jax_array():
    """A JAX array of ``EXPECTED``. JAX's capsules hold its buffer in C++,
    which no Python count sees: these kinds find crashes, double frees (the
    sanitizer run), wrong values and errors other than MemoryError; the
    counted kinds above (``host-*``) and tests/test_leaks.py find leaks."""
    return [_jax().asarray(EXPECTED)], Watch()


def k_jax_import():
    import gpu_dlpack

    box, watch = _jax_array()
    return (lambda: gpu_dlpack.from_dlpack(box.pop())), _values, watch


def k_jax_export():
    import gpu_dlpack

    box, watch = _jax_array()
    return (lambda: gpu_dlpack.from_dlpack(gpu_dlpack.export(box.pop(), max_version=(1, 0)))), _values, watch


def k_jax_wrap():
    import gpu_dlpack

    box, watch = _jax_array()
    return (lambda: np.from_dlpack(gpu_dlpack.wrap(box.pop()))), _values, watch


def k_torch_jax():
    import gpu_dlpack

    torch = _torch()
    box, watch = _jax_array()
    return (lambda: torch.from_dlpack(gpu_dlpack.wrap(box.pop()))), _values, watch


KINDS = {
    "capsule": k_capsule,
    "capsule-legacy": k_capsule_legacy,
    "capsule-refused": k_capsule_refused,
    "wrap-capsule": k_wrap_capsule,
    "inspect": k_inspect,
    "array-interface": k_array_interface,
    "numpy-export": k_numpy_export,
    "numpy-wrap": k_numpy_wrap,
    "legacy-producer": k_legacy_producer,
    "floor-export": k_floor_export,
    "floor-wrap": k_floor_wrap,
    "host-import": k_host_import,
    "host-import-legacy": k_host_import_legacy,
    "host-adapt": k_host_adapt,
    "host-adapt-wrap": k_host_adapt_wrap,
    "device-adapt": k_device_adapt,
    "device-adapt-legacy": k_device_adapt_legacy,
    "jax-import": k_jax_import,
    "jax-export": k_jax_export,
    "jax-wrap": k_jax_wrap,
    "torch-jax": k_torch_jax,
    "torch-import": k_torch_import,
    "torch-export": k_torch_export,
    "torch-wrap": k_torch_wrap,
    "torch-capsule": k_torch_capsule,
}
TORCH_KINDS = frozenset(k for k in KINDS if k.startswith("torch"))
JAX_KINDS = frozenset(k for k in KINDS if "jax" in k)
# JAX's own __dlpack__ crashes the process (SIGSEGV in jaxlib, under
# Array.addressable_data) when one of the allocations it makes fails: JAX
# alone does, with no gpu_dlpack loaded. Its kinds are interrupted and soaked
# but not swept for allocation failure; the host-* kinds run the same C
# paths over a producer whose deleter is counted.
NOMEMORY_SKIP = JAX_KINDS


def kinds_here():
    """The kinds this environment can run (torch or JAX may be hidden or missing)."""
    return [k for k in KINDS if (k not in TORCH_KINDS or _torch() is not None) and (
        k not in JAX_KINDS or _jax() is not None)]


# -- child side: one sweep, one line of JSON per run -------------------------------

def _emit(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _settle(kind, watch, outcome, detail=None, **more):
    leaked, twice = watch.state()
    if detail and (leaked or twice or outcome not in ("ok", "MemoryError", "interrupted")):
        more["detail"] = detail  # where it was raised, for a finding
    _emit(kind=kind, outcome=outcome, leaked=leaked, twice=twice, **more)


def _origin(exc) -> str:
    """Where an exception was raised: ``layer`` when its innermost Python
    frame is gpu_dlpack's, ``peer`` when it is a peer library's or the
    exchange's own consumer call (NumPy's or torch's C code: the innermost
    frame is then the harness's line that called it)."""
    if exc.__cause__ is not None:  # a producer's error the layer rewords (``producer_refused``)
        return _origin(exc.__cause__)
    tb = exc.__traceback__
    last = line = None
    while tb is not None:
        last, line = tb.tb_frame.f_code.co_filename, tb.tb_lineno
        tb = tb.tb_next
    if last is None or not last.startswith(PACKAGE):
        return "peer"
    if any(call in linecache.getline(last, line) for call in _PEER_CALLS):
        return "peer"  # raised by the peer's function the layer called there
    return "layer"


# Lines of the layer that hand a peer's C function an object that owns a
# tensor: NumPy's array-interface import (np.asarray) leaks the object it was
# given when one of its own allocations fails (seen on NumPy 2.4 from the
# outside, through wrap's __array_interface__, and on NumPy 1.26 inside the
# layer's import of versioned capsules).
_PEER_CALLS = ("np.asarray(",)


# CPython 3.11 loses the exception in flight when it cannot allocate a frame
# object while unwinding (``take_ownership`` clears it: python/cpython#131173),
# and then reports one of these. Seen under gdb for these runs; the
# interpreter's, not the layer's (a C function of the layer returning NULL
# without an exception would be named as a built-in).
_INTERPRETER_LOST = ("SystemError: error return without exception set",)
_INTERPRETER_LOST_FUNCTION = "returned NULL without setting an exception"


def _classify(exc) -> tuple:
    """``(outcome, origin)`` of an exception a run raised."""
    name = type(exc).__name__
    if isinstance(exc, MemoryError) or name == "OutOfMemoryError":  # torch's own, from torch.from_dlpack
        return "MemoryError", _origin(exc)
    text = f"{name}: {exc}"
    if text in _INTERPRETER_LOST or (
        isinstance(exc, SystemError) and text.endswith(_INTERPRETER_LOST_FUNCTION) and "<function " in text
    ):
        return "MemoryError", "interpreter"
    return text, _origin(exc)


def nomemory_child(kind, start, stop, streak, stride=1):
    """Fail the n-th allocation of one exchange, for n from ``start``; stop
    after ``streak`` clean runs in a row (the exchange no longer reaches n)
    or at ``stop``."""
    import _testcapi

    import gpu_dlpack  # noqa: F401  (imported before any allocation fails)

    clean = 0
    for n in range(start, stop, stride):
        run, check, watch = KINDS[kind]()
        result = error = None
        gc.collect(1)
        gc.disable()  # no collection while allocations fail: the failure lands in the exchange
        _testcapi.set_nomemory(n, n + 1)
        try:
            result = run()
        except BaseException as exc:  # noqa: BLE001  (classified below, hooks removed)
            error = exc
        finally:
            _testcapi.remove_mem_hooks()
            gc.enable()
        outcome, origin, detail = "ok", "layer", None
        if error is not None:
            outcome, origin = _classify(error)
            detail = "".join(traceback.format_exception(error))[-1500:]
            error = None
        if outcome == "ok":
            try:
                check(result)
            except AssertionError as exc:
                outcome = f"wrong result: {exc}"
        del result, run
        _settle(kind, watch, outcome, detail, n=n, origin=origin)
        clean = clean + 1 if outcome == "ok" else 0
        if clean * stride >= streak:
            return


# Where a signal's Python handler runs: after a call returns, at a backward
# jump, when a function starts (CPython's eval-breaker checks); raising just
# after such an instruction is raising where an interrupt lands.
_LANDINGS = frozenset(dis.opmap[name] for name in (
    "CALL", "CALL_KW", "CALL_FUNCTION_EX", "RESUME", "JUMP_BACKWARD",  # CPython 3.11+ (CALL_KW: 3.13+)
    "CALL_FUNCTION", "CALL_FUNCTION_KW", "CALL_METHOD", "JUMP_ABSOLUTE",  # 3.10
) if name in dis.opmap)


_HANDLERS: dict = {}


def _handlers(code) -> frozenset:
    """The offsets where ``code``'s exception handlers start."""
    found = _HANDLERS.get(code)
    if found is None:
        if hasattr(dis, "_parse_exception_table"):  # CPython 3.11+: the exception table
            found = frozenset(e.target for e in dis._parse_exception_table(code))
        else:  # 3.10: where the blocks its SETUP_ instructions push go on
            found = frozenset(i.argval for i in dis.get_instructions(code)
                              if i.opname in ("SETUP_FINALLY", "SETUP_WITH", "SETUP_ASYNC_WITH"))
        _HANDLERS[code] = found
    return found


class _Stepper:
    """A trace function that raises KeyboardInterrupt at the k-th point of
    the exchange where an interrupt can land (``_LANDINGS``), in any Python
    code the exchange runs (the layer's, the peers', the call itself) but
    the hand-made producer's deleter (a C deleter's stand-in)."""

    def __init__(self, k):
        self.k = k
        self.count = 0
        self.at = None

    def __call__(self, frame, event, arg):
        code = frame.f_code
        if code.co_filename == CAPSULES:
            return None
        previous = [None]
        handlers = _handlers(code)

        def local(frame, event, arg):
            if event == "opcode":
                # (A call that raised goes on at a handler, where no signal
                # handler runs: no landing there.)
                if previous[0] in _LANDINGS and frame.f_lasti not in handlers:
                    self.count += 1
                    if self.count == self.k:
                        self.at = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}:{frame.f_lineno}@{frame.f_lasti}"
                        raise KeyboardInterrupt
                previous[0] = frame.f_code.co_code[frame.f_lasti]
            return local

        # The frame's trace function first: CPython 3.12 and 3.13 turn on
        # opcode events for a frame that has one only (set in the call event
        # before it, f_trace_opcodes is ignored: no interrupt point at all).
        frame.f_trace = local
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return local


def step_child(kind, start, stop, stride=1):
    """Interrupt one exchange at its k-th instruction in the layer, for k from
    ``start``, until a run ends before instruction k (every point is done)."""
    import gpu_dlpack  # noqa: F401

    # CPython 3.12 emits opcode events to a frame that asks for them in its
    # call event (``_Stepper``) only where a frame asked before sys.settrace
    # was called; 3.11 and 3.13 emit them in any case.
    sys._getframe().f_trace_opcodes = True
    for k in range(start, stop, stride):
        run, check, watch = KINDS[kind]()
        result = error = None
        stepper = _Stepper(k)
        sys.settrace(stepper)
        try:
            result = run()
        except BaseException as exc:  # noqa: BLE001  (classified below)
            error = exc
        finally:
            sys.settrace(None)
        outcome, origin = "ok", "layer"
        if isinstance(error, KeyboardInterrupt):
            outcome = "interrupted"
        elif error is not None:
            outcome, origin = _classify(error)
        error = None
        if outcome == "ok":
            try:
                check(result)
            except AssertionError as exc:
                outcome = f"wrong result: {exc}"
        del result, run
        _settle(kind, watch, outcome, n=k, origin=origin, at=stepper.at)
        if stepper.count < k:
            _emit(kind=kind, done=True, points=stepper.count)
            return


class _Alarm:
    """SIGALRM raising KeyboardInterrupt while armed, except inside the
    hand-made producer's deleter (which stands for C code); there it is put
    off by re-arming a short timer."""

    def __init__(self):
        self.armed = False
        self.landed = 0
        self.deferred = 0
        self.where = None
        signal.signal(signal.SIGALRM, self._handler)

    def _handler(self, signum, frame):
        if not self.armed:
            return
        f = frame
        while f is not None:
            if f.f_code.co_filename == CAPSULES:
                self.deferred += 1
                signal.setitimer(signal.ITIMER_REAL, 20e-6)
                return
            f = f.f_back
        self.armed = False
        self.landed += 1
        self.where = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}:{frame.f_lineno}"
        raise KeyboardInterrupt

    def arm(self, seconds):
        self.armed = True
        signal.setitimer(signal.ITIMER_REAL, seconds)

    def disarm(self):
        self.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)


def _batch(work, done, alarm, seconds):
    """Run the exchanges of one batch under the alarm (a function of its own,
    so that nothing of the batch outlives it in a variable)."""
    try:
        alarm.arm(seconds)
        for run, _check, _watch in work:
            done.append((run(), _check))
    finally:
        alarm.disarm()


def _wrong(done) -> int:
    wrong = 0
    for result, check in done:
        try:
            check(result)
        except AssertionError:
            wrong += 1
    return wrong


def soak_child(interrupts, batch, seed, kinds):
    """Exchanges in batches of ``batch`` (mixed kinds), each batch under an
    alarm set 20-400 µs ahead, until ``interrupts`` interrupts have landed."""
    import gpu_dlpack  # noqa: F401

    rng = random.Random(seed)
    alarm = _Alarm()
    runs = leaked = twice = wrong = other = 0
    batches = 0
    suspects: list = []
    by_kind: dict = {}
    start = time.perf_counter()
    while alarm.landed < interrupts:
        batches += 1
        chosen = [rng.choice(kinds) for _ in range(batch)]
        work = [KINDS[k]() for k in chosen]
        watches = [w for _, _, w in work]
        done: list = []
        alarm.where = None
        try:
            _batch(work, done, alarm, rng.uniform(20e-6, 400e-6))
        except KeyboardInterrupt:
            pass
        except BaseException as exc:  # noqa: BLE001
            other += 1
            _emit(error=f"{type(exc).__name__}: {exc}")
        wrong += _wrong(done)
        runs += len(done)
        del work, done
        gc.collect(1)  # what a batch leaves is young: a full collection per batch would take most of the time
        for k, w in zip(chosen, watches):
            a, b = w.state(collect=False)
            if a:
                suspects.append((k, w, alarm.where))  # looked at again after a full collection, at the end
            twice += b
            by_kind[k] = by_kind.get(k, 0) + b
        if batches % 200 == 0:
            _emit(progress=alarm.landed, batches=batches)
    gc.collect()
    leaks: dict = {}
    for k, w, where in suspects:
        a, _ = w.state(collect=False)
        leaked += a
        if a:
            leaks[f"{k} (interrupted at {where})"] = leaks.get(k, 0) + a
    _emit(
        interrupts=alarm.landed, deferred=alarm.deferred, batches=batches, completed=runs, leaked=leaked,
        twice=twice, wrong=wrong, other=other, seconds=round(time.perf_counter() - start, 1),
        leaks=leaks, twice_by_kind={k: v for k, v in by_kind.items() if v},
    )


# -- parent side ---------------------------------------------------------------------

def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


def _child(code, timeout):
    """Run ``code`` in a child; ``(lines, returncode, stderr)``, returncode
    None when it was killed for taking longer than ``timeout``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        rc = None
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return lines, rc, err


#: Every STRIDE-th point of the allocation and interrupt sweeps
#: (GPU_DLPACK_FAULT_STRIDE, default 1: every point): the matrix's runs off the
#: main interpreter take every 4th (scripts/matrix.sh).
STRIDE = max(1, int(os.environ.get("GPU_DLPACK_FAULT_STRIDE", "1")))


def _sweep(kind, first, stop, make_code, timeout):
    """Runs a sweep child from ``first``, restarting it after a crash at the
    next point; returns the result lines plus a line for each crash."""
    lines = []
    n = first
    while n < stop:
        got, rc, err = _child(make_code(kind, n), timeout)
        lines += got
        runs = [line for line in got if "n" in line]
        if rc == 0:
            return lines
        at = runs[-1]["n"] + STRIDE if runs else n
        why = "hung" if rc is None else f"exit status {rc}"
        lines.append(dict(kind=kind, n=at, outcome=f"crashed ({why}): {err.strip()[-300:]}", leaked=0, twice=0))
        n = at + STRIDE
    return lines


_BARE: dict = {}


def interpreter_survives_nomemory() -> bool:
    """Whether this interpreter survives failing allocations by itself
    (``tests/nomemory_bare.py`` in a child: CPython 3.12.1 does not)."""
    if "ok" not in _BARE:
        bare = os.path.join(ROOT, "tests", "nomemory_bare.py")
        done = subprocess.run([sys.executable, bare], capture_output=True, timeout=120)
        _BARE["ok"] = done.returncode == 0
    return _BARE["ok"]


def nomemory(kind, stop=2000, streak=60, timeout=300):
    code = lambda kind, n: (  # noqa: E731
        f"from tests import faults; faults.nomemory_child({kind!r}, {n}, {stop}, {streak}, {STRIDE})")
    return _sweep(kind, 0, stop, code, timeout)


def stepped(kind, stop=20000, timeout=300):
    code = lambda kind, n: (  # noqa: E731
        f"from tests import faults; faults.step_child({kind!r}, {max(n, 1)}, {stop}, {STRIDE})")
    return _sweep(kind, 1, stop, code, timeout)


def soak(interrupts, batch=8, seed=1, kinds=None, timeout=600):
    kinds = kinds or kinds_here()
    code = f"from tests import faults; faults.soak_child({interrupts}, {batch}, {seed}, {kinds!r})"
    lines, rc, err = _child(code, timeout)
    final = [line for line in lines if "interrupts" in line]
    return (final[-1] if final else None), rc, err, lines


def findings(lines):
    """The runs that went wrong in the layer: a crash or hang, a tensor freed
    twice, or, where the layer raised (or nothing did), an outcome other
    than the result, MemoryError or the interrupt, or a source not freed.
    What a peer library raised itself (its consumer call, its own methods)
    is the peer's: see ``peer_findings``."""
    bad = []
    for line in lines:
        if "outcome" not in line:
            continue
        if line["twice"] or line["outcome"].startswith("crashed"):
            bad.append(line)
        elif line.get("origin", "layer") == "layer" and (
            line["outcome"] not in ("ok", "MemoryError", "interrupted") or line["leaked"]
        ):
            bad.append(line)
    return bad


def peer_findings(lines):
    """Runs where a peer library (or the interpreter) went wrong by itself."""
    return [
        line for line in lines
        if "outcome" in line and line.get("origin", "layer") != "layer" and line not in findings([line])
        and (line["outcome"] != "MemoryError" or line["leaked"] or line["origin"] == "interpreter")
    ]


# -- fork ----------------------------------------------------------------------------

FORK_CHILD_TIMEOUT = 20


def _exchange_raw(i=0):
    """One exchange of a raw capsule (a claim), made by NumPy: no lock of the
    test's own is taken, so a child forked while another thread holds one
    cannot hang on the harness."""
    import gpu_dlpack

    a = np.arange(6.0) + i
    versioned = _VERSIONED_NUMPY and i % 2 == 1
    cap = a.__dlpack__(max_version=(1, 0)) if versioned else a.__dlpack__()
    got = gpu_dlpack.from_dlpack(cap)
    if got.tolist() != a.tolist():
        raise AssertionError(f"wrong values: {got.tolist()}")
    return got


def fork_under_threads(forks=30, threads=2):
    """Fork ``forks`` children while ``threads`` threads exchange raw capsules
    (each a claim); each child exchanges and exits. Returns (clean, hung,
    failed) counts. Call in a process of its own."""
    import faulthandler

    import gpu_dlpack  # noqa: F401  (imported before the threads: none holds the import's lock at a fork)

    stop = threading.Event()

    def exchange():
        for i in range(2):
            _exchange_raw(i)

    def spin():
        while not stop.is_set():
            exchange()

    workers = [threading.Thread(target=spin, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    clean = hung = failed = 0
    try:
        for _ in range(forks):
            pid = os.fork()
            if pid == 0:  # the child: exchange on the host, then leave at once
                code = 1
                try:
                    faulthandler.dump_traceback_later(FORK_CHILD_TIMEOUT - 5)  # where it hangs, if it does
                    signal.alarm(FORK_CHILD_TIMEOUT)
                    for _ in range(20):
                        exchange()
                    code = 0
                finally:
                    os._exit(code)
            deadline = time.monotonic() + FORK_CHILD_TIMEOUT + 5
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    status = None
                    break
                time.sleep(0.005)
            if status == 0:
                clean += 1
            elif status is None or (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM):
                hung += 1
            else:
                failed += 1
    finally:
        stop.set()
        for w in workers:
            w.join()
    return clean, hung, failed


class RawCapsules:
    """A map-style dataset whose items are made through gpu_dlpack in the
    worker: a hand-made capsule imported (a claim) and exported again."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        import gpu_dlpack

        arr = _exchange_raw(i)
        return gpu_dlpack.from_dlpack(gpu_dlpack.export(arr, max_version=(1, 0))).sum()


def dataloader_under_threads(epochs=3, threads=2, timeout=10):
    """torch DataLoader(num_workers=2, fork) epochs while ``threads`` threads
    exchange in the parent; returns the items received per epoch."""
    import torch
    import torch.utils.data

    import gpu_dlpack  # noqa: F401

    stop = threading.Event()

    def spin():
        while not stop.is_set():
            _exchange_raw(0)
            _exchange_raw(1)

    workers = [threading.Thread(target=spin, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    got = []
    try:
        for _ in range(epochs):
            loader = torch.utils.data.DataLoader(
                RawCapsules(), batch_size=4, num_workers=2, timeout=timeout, multiprocessing_context="fork",
            )
            items = [float(x) for batch in loader for x in batch]
            expected = [float((np.arange(6.0) + i).sum()) for i in range(16)]
            got.append(len(items) if items == expected else -1)
            del loader
            torch.utils.data  # noqa: B018
    finally:
        stop.set()
        for w in workers:
            w.join()
    return got


# -- the command line (long forms) ---------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["nomemory", "stepped", "soak", "fork", "dataloader", "all"])
    parser.add_argument("--kinds", default=None, help="comma-separated exchange kinds (default: all here)")
    parser.add_argument("--interrupts", type=int, default=5000, help="interrupts of the timed soak")
    parser.add_argument("--forks", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args(argv)
    kinds = args.kinds.split(",") if args.kinds else kinds_here()
    bad = 0
    if args.what in ("nomemory", "stepped", "all"):
        for what in (["nomemory", "stepped"] if args.what == "all" else [args.what]):
            sweep = nomemory if what == "nomemory" else stepped
            total = [0, 0, 0, 0]  # runs, faulted, findings, the peers' own
            for kind in kinds:
                lines = sweep(kind)
                runs = [line for line in lines if "outcome" in line]
                wrong = findings(lines)
                peers = peer_findings(lines)
                bad += len(wrong)
                faulted = sum(1 for line in runs if line["outcome"] != "ok")
                for i, n in enumerate((len(runs), faulted, len(wrong), len(peers))):
                    total[i] += n
                print(f"{what} {kind}: {len(runs)} runs, {faulted} faulted, {len(wrong)} findings"
                      f"{f', {len(peers)} the peer or the interpreter' if peers else ''}", flush=True)
                for line in wrong[:5] + peers[:2]:
                    print("   ", {k: v for k, v in line.items() if k != "detail"})
            print(f"{what}: {len(kinds)} kinds, {total[0]} runs, {total[1]} faulted, {total[2]} findings, "
                  f"{total[3]} the peer's or the interpreter's own", flush=True)
    if args.what in ("soak", "all"):
        final, rc, err, _ = soak(args.interrupts)
        print(f"soak: {final} (exit status {rc})")
        if rc != 0 or final is None or final["leaked"] or final["twice"] or final["wrong"] or final["other"]:
            bad += 1
            print(err[-2000:])
    if args.what in ("fork", "all"):
        code = f"from tests import faults; print(faults.fork_under_threads({args.forks}))"
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True,
                              text=True, timeout=args.forks * 30 + 60)
        print(f"fork under threads (clean, hung, failed): {done.stdout.strip()} {done.stderr[-500:]}")
        bad += done.returncode != 0 or not done.stdout.strip().endswith(", 0, 0)")
    if args.what in ("dataloader", "all") and _torch() is not None:
        code = f"from tests import faults; print(faults.dataloader_under_threads({args.epochs}))"
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True,
                              text=True, timeout=args.epochs * 60 + 60)
        print(f"DataLoader epochs (items each): {done.stdout.strip()} {done.stderr[-500:]}")
        bad += done.returncode != 0 or "-1" in done.stdout
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
