"""Faults that real programs meet: nothing is freed twice, leaked or hung.

Each scenario runs in child processes (``tests/faults.py``), so that a
crash or a hang is a failure reported here:

- every allocation of each exchange kind failing in turn
  (``_testcapi.set_nomemory(n, n + 1)``): the result or ``MemoryError``;
- an interrupt at every point of each exchange where one can land, and
  thousands of interrupts from a timer;
- children forked while threads exchange, a real ``DataLoader`` whose
  workers exchange, and each lock and pool of the package held or in use at
  the fork; a GPU call in a child forked after the GPU was used is a clear
  error;
- subinterpreters refused, whichever interpreter imports first;
- the compiled core refusing calls before it is configured.

The long forms (all kinds, 20,000 interrupts, 1,000 forks):
``scripts/faults.sh``.
"""

from __future__ import annotations

import gc
import importlib.machinery
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _capsule

from . import faults
from .figures import counter_fixture

# Allocation failures, forks and timed signals: run apart, in a process
# without pytest-xdist's thread (pyproject.toml's markers).
pytestmark = pytest.mark.serial

figures = counter_fixture("faults")

KINDS = faults.kinds_here()
SOAK_INTERRUPTS = int(os.environ.get("GPU_DLPACK_SOAK_INTERRUPTS", "3000"))
_testcapi = pytest.importorskip("_testcapi")


def _record(figures, what, lines):
    runs = [line for line in lines if "outcome" in line]
    figures[f"{what} runs"] += len(runs)
    figures[f"{what}: faulted"] += sum(1 for line in runs if line["outcome"] != "ok")
    peers = faults.peer_findings(lines)
    if peers:
        figures.notes.append(f"{what}: {len(peers)} the peer's or the interpreter's own ({peers[0]['outcome'][:80]})")
    return runs


# -- allocation failure ------------------------------------------------------------

@pytest.mark.parametrize("kind", [k for k in KINDS if k not in faults.NOMEMORY_SKIP])
def test_any_allocation_of_an_exchange_may_fail(figures, kind):
    # Failing the n-th allocation of one exchange, for each n: before, the
    # core released values twice (crashes) and returned a value with an
    # exception set.
    lines = faults.nomemory(kind)
    runs = _record(figures, "allocation failure", lines)
    found = faults.findings(lines)
    if not faults.interpreter_survives_nomemory():
        # This Python crashes by itself when allocations of a generator
        # expression fail (tests/nomemory_bare.py, no gpu_dlpack loaded): a
        # crash says nothing of the layer there; every other finding counts.
        crashes = [line for line in found if line["outcome"].startswith("crashed")]
        if crashes:
            figures.notes.append(f"allocation failure: {len(crashes)} crashes of Python "
                                 f"{sys.version.split()[0]} itself left out")
        found = [line for line in found if line not in crashes]
    assert not found, found[:3]
    assert any(line["outcome"] == "MemoryError" for line in runs)  # the failures reached the exchange
    assert runs[-1]["outcome"] == "ok"  # and the sweep went past its last allocation


# -- interrupts ----------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_an_interrupt_at_any_point_of_an_exchange_frees_each_tensor_once(figures, kind):
    # Before, an interrupt after the hand-over capsule was made freed the
    # tensor twice, and one between the claim and an owner leaked it.
    lines = faults.stepped(kind)
    runs = _record(figures, "interrupt points", lines)
    assert not faults.findings(lines), faults.findings(lines)[:3]
    assert any(line.get("done") for line in lines), "the stepping did not reach the end of the exchange"
    assert any(line["outcome"] == "interrupted" for line in runs)


def test_thousands_of_timed_interrupts_free_each_tensor_once(figures):
    final, rc, err, _ = faults.soak(SOAK_INTERRUPTS)
    assert rc == 0, err[-3000:]
    assert final is not None and final["interrupts"] >= SOAK_INTERRUPTS
    figures["timed interrupts"] += final["interrupts"]
    figures.notes.append(
        f"timed interrupts: {final['interrupts']} landed over {final['completed']} completed "
        f"exchanges in {final['seconds']} s"
    )
    assert (final["leaked"], final["twice"], final["wrong"], final["other"]) == (0, 0, 0, 0), final


_INTERRUPTED_POLICY = """
import numpy as np, gpu_dlpack as gd
from gpu_dlpack import _devices, _versions

def once(real):
    armed = [True]

    def interrupted(*args, **kwargs):
        if armed:
            armed.pop()
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    return interrupted

def show(call):
    try:
        return call()
    except KeyboardInterrupt:
        return "interrupted"

{body}
"""


def test_an_interrupt_in_the_version_check_of_the_exchange_api_is_raised():
    # The core checks whether the C exchange API's request passes the floor
    # once per floor; an interrupt in that check (here in the policy it
    # reads: the floor in force, from the environment at its first use) was
    # cleared with the check's refusals, and the consumer got its tensor.
    pytest.importorskip("tvm_ffi")
    done = _in_child(_INTERRUPTED_POLICY.format(body=textwrap.dedent("""
        import os, tvm_ffi
        os.environ["GPU_DLPACK_MIN_VERSION"] = "0.6"
        _versions.VERDICT.floor = None  # not read yet: the check reads it
        _versions.parse_floor = once(_versions.parse_floor)
        print(show(lambda: tvm_ffi.from_dlpack(gd.wrap(np.arange(3.0)))))
        print(np.from_dlpack(tvm_ffi.from_dlpack(gd.wrap(np.arange(3.0)))).tolist())
    """)))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["interrupted", "[0.0, 1.0, 2.0]"], done.stdout + done.stderr[-2000:]


def test_an_interrupt_while_device_is_compared_with_the_cpu_is_raised():
    # from_dlpack(x, device=D) compares D with the CPU in the core: an
    # interrupt in Device.__eq__ was printed as ignored and the import went on.
    done = _in_child(_INTERRUPTED_POLICY.format(body=textwrap.dedent("""
        _devices.Device.__eq__ = once(_devices.Device.__eq__)
        cpu = _devices.Device("cpu:0")
        print(show(lambda: gd.from_dlpack(np.arange(3.0), device=cpu)))
        print(gd.from_dlpack(np.arange(3.0), device=cpu).tolist())
    """)))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["interrupted", "[0.0, 1.0, 2.0]"], done.stdout + done.stderr[-2000:]
    assert "Exception ignored" not in done.stderr, done.stderr[-2000:]


def test_an_owner_has_no_finalizer_that_can_fail():
    # A half-made Owner (an interrupt in __init__) used to raise
    # AttributeError from __del__, which Python swallows with any interrupt.
    seen = []
    hook, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        half = _capsule.Owner.__new__(_capsule.Owner)
        del half
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert not seen, seen[0].exc_value


def test_a_taken_tensor_lives_in_a_capsule_only_its_owner_holds():
    a = np.arange(4.0)
    cap = a.__dlpack__()
    owner = _capsule.take(cap)
    assert type(owner._capsule) is _capsule.CapsuleType and _capsule.kind(owner._capsule) is False
    assert gpu_dlpack.inspect(owner._capsule).data == a.ctypes.data
    with pytest.raises(gpu_dlpack.ConsumedCapsuleError):
        _capsule.kind(cap)


def test_out_of_memory_the_core_s_capsule_reads_raise_memory_error_and_leave_it_as_it_was():
    # A capsule's name and pointer are read by the core (they were ctypes
    # calls, whose ArgumentError("argument 1: MemoryError") a caller catching
    # MemoryError missed): each allocation that fails is a MemoryError, and
    # the capsule keeps its name, until the read gets through. (What a
    # hand-back to Python raises then is the interpreter's, as for claim.)
    from . import capsules

    cap = np.arange(3.0).__dlpack__()
    for read, answer in ((lambda: _capsule.pointer(cap, False), int), (lambda: _capsule.kind(cap), bool)):
        failed = 0
        for n in range(200):
            _testcapi.set_nomemory(n, n + 1)
            try:
                got = read()
            except MemoryError:
                failed += 1
                continue
            finally:
                _testcapi.remove_mem_hooks()
            break
        else:
            pytest.fail("the read never got through")
        assert type(got) is answer and capsules.capsule_name(cap) == "dltensor"
        # The int of an address is allocated (once or more, as the interpreter
        # makes ints: twice on 3.13); what kind allocates is the interpreter's
        # (nothing on 3.11, once on 3.12).
        assert failed > 0 or answer is bool


# -- fork ----------------------------------------------------------------------------

def _in_child(code, timeout=120):
    env = faults._env()
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=faults.ROOT, env=env, capture_output=True, text=True,
        timeout=timeout,
    )


_FORK = """
import os, signal, sys, threading, time
import numpy as np
from tests import faults

def forked(child):
    # Run child() in a forked child within 20 s; its exit status (hung: None).
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.alarm(20)
            child()
            code = 0
        except BaseException as exc:
            print("child:", type(exc).__name__, exc, flush=True)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM:
        return None
    return os.waitstatus_to_exitcode(status)

def holding(lock):
    # A thread that holds lock until told: it is held across the fork.
    taken, release = threading.Event(), threading.Event()
    def hold():
        with lock:
            taken.set()
            release.wait()
    t = threading.Thread(target=hold, daemon=True)
    t.start()
    taken.wait()
    return release, t
"""


def test_children_forked_while_threads_exchange_exchange_normally(figures):
    done = _in_child("from tests import faults; print(faults.fork_under_threads(30))", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "(30, 0, 0)", done.stderr[-2000:]  # (clean, hung, failed)
    figures["forks under threads"] += 30


def test_a_dataloader_whose_workers_exchange_while_a_thread_does(figures):
    pytest.importorskip("torch")
    done = _in_child("from tests import faults; print(faults.dataloader_under_threads(2))", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[16, 16]", done.stdout + done.stderr[-2000:]  # items per epoch, values right
    figures["DataLoader epochs (2 workers)"] += 2


def test_the_copy_ring_and_pools_work_in_a_forked_child():
    # The ring kept its worker pool across fork with no thread behind it:
    # a copy in the child waited for ever. Its lock, and the pools' locks,
    # may be held by a thread that is not in the child.
    done = _in_child(_FORK + """
from gpu_dlpack import _copies, _handoff
from tests.test_copies import AsyncRuntime
from tests.test_reliability import HostBlocks
runtime = AsyncRuntime()
ring = _copies.Ring(runtime, chunk_bytes=4096, chunks=4, workers=3)
src = np.arange(40 * 4096 // 8, dtype=np.int64)
dst = np.zeros_like(src)
ring.copy(dst.ctypes.data, src, stream=1)  # the workers are started
runtime.drain()
blocks = HostBlocks()
pool = _copies.PinnedPool(blocks)
idle = pool.take(4096)
del idle  # one idle block, the parent's
allocated = len(blocks.blocks)
held = [holding(lock) for lock in (ring._lock, pool._lock, _copies._rings_lock, _handoff._pending_lock)]

def child():
    assert ring.try_acquire()
    again = np.zeros_like(src)
    ring.copy(again.ctypes.data, src, stream=2)
    runtime.drain()
    ring.release()
    assert (again == src).all()
    block = pool.take(4096)  # the parent's idle block is not handed out again
    del block
    assert len(blocks.blocks) == allocated + 1  # nothing freed through the parent's runtime
    _copies.ring_for(0, 2)  # takes the rings' lock
    with _handoff._pending_lock:  # what keep takes
        pass

status = forked(child)
for release, t in held:
    release.set(); t.join()
print(status)
""")
    assert done.returncode == 0 and done.stdout.split()[-1] == "0", done.stdout + done.stderr


def test_a_gpu_call_in_a_child_forked_after_the_gpu_was_used_is_a_clear_error():
    # The CUDA runtime does not survive fork: each GPU path of the layer is
    # refused at once in such a child (a stand-in that fails any call stands
    # for CuPy's runtime module, as the layer holds it once used), while
    # host exchanges go on.
    done = _in_child(_FORK + """
import gpu_dlpack
from gpu_dlpack import _backends, _copies, _handoff
from gpu_dlpack._devices import Device

class Used:
    def __getattr__(self, name):
        raise AssertionError(f"the runtime was called: {name}")

_handoff._cuda.append(Used())  # the parent used the GPU through the layer

def child():
    calls = [
        lambda: _handoff.handoff(5, 6, 0),
        lambda: _copies.copy(1, 2, 3, 4, 0),
        lambda: _copies.Runtime(0).event_create(),
        lambda: _copies.Runtime(0).alloc_pinned(64),
        lambda: _copies.HostRuntime().host_alloc(64),
        lambda: _backends.for_device(Device("cuda:0")),
    ]
    for call in calls:
        try:
            call()
        except BufferError as exc:
            assert "forked from a process that had already used the GPU" in str(exc), exc
            assert "spawn" in str(exc)
        else:
            raise AssertionError("a GPU call ran in the forked child")
    faults._exchange_raw(1)  # the host still exchanges

print(forked(child))
""")
    assert done.returncode == 0 and done.stdout.split()[-1] == "0", done.stdout + done.stderr


def test_a_child_forked_before_the_gpu_was_used_may_use_it():
    done = _in_child(_FORK + """
from gpu_dlpack import _handoff

def child():
    assert _handoff._forked  # marked at the fork
    _handoff.check_not_forked()  # the parent never used it: no refusal
    assert not _handoff._forked  # and no check from now on

print(forked(child))
""")
    assert done.returncode == 0 and done.stdout.split()[-1] == "0", done.stdout + done.stderr


# -- subinterpreters -----------------------------------------------------------------

REFUSED = "gpu_dlpack does not support subinterpreters"


@pytest.mark.parametrize("first", ["main", "subinterpreter"])
def test_subinterpreters_are_refused_whichever_imports_first(first):
    # A subinterpreter importing gpu_dlpack first hung; after the main
    # interpreter, it got NumPy's error. Now both get gpu_dlpack's ImportError
    # at once, and the main interpreter imports and exchanges normally after.
    pytest.importorskip("_xxsubinterpreters")
    main_first = "import gpu_dlpack" if first == "main" else ""
    done = _in_child(f"""
import _testcapi, _xxsubinterpreters as interpreters
{main_first}
interp = interpreters.create()
try:
    interpreters.run_string(interp, "import gpu_dlpack")
except interpreters.RunFailedError as exc:
    print("refused:", exc)
else:
    print("imported in a subinterpreter")
interpreters.destroy(interp)
code = _testcapi.run_in_subinterp("import gpu_dlpack")
print("run_in_subinterp:", code)
import numpy as np, gpu_dlpack
print(gpu_dlpack.from_dlpack(np.arange(3.0).__dlpack__()).tolist())
""", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused: ") and "ImportError" in lines[0] and REFUSED in lines[0], done.stdout
    assert lines[1] == "run_in_subinterp: -1" and REFUSED in done.stderr, done.stdout + done.stderr
    assert lines[2] == "[0.0, 1.0, 2.0]"


# -- the compiled core before it is told the policy (set_*) -------------------------

def test_the_core_refuses_every_call_before_it_is_configured():
    # Each entry point read the Python tables the set_* setters set: called before
    # it (the core loaded on its own), they crashed the process.
    import glob

    if not glob.glob(os.path.join(faults.ROOT, "gpu_dlpack", "_core" + importlib.machinery.EXTENSION_SUFFIXES[0])):
        pytest.skip("the compiled core is not built")
    done = _in_child("""
import glob, importlib.machinery, importlib.util, os
import numpy as np
path = os.path.join("gpu_dlpack", "_core" + importlib.machinery.EXTENSION_SUFFIXES[0])  # this interpreter's
loader = importlib.machinery.ExtensionFileLoader("gpu_dlpack._core", path)
core = importlib.util.module_from_spec(importlib.util.spec_from_file_location("gpu_dlpack._core", path, loader=loader))
loader.exec_module(core)  # the core alone: gpu_dlpack (which configures it) is not imported
a = np.arange(3.0)
cap = lambda: a.__dlpack__()
ptr = lambda: a.__array_interface__["data"][0]
base = core.ExportableBase.__new__(core.ExportableBase)
calls = {
    "checked": lambda: core.checked(cap()),
    "discard": lambda: core.discard(cap()),
    "move": lambda: core.move(cap()),
    "snapshot": lambda: core.snapshot(cap()),
    "stamp_version": lambda: core.stamp_version(cap(), 1),
    "import_host": lambda: core.import_host(a),
    "wrap": lambda: core.wrap(a),
    "exchange": lambda: core.exchange(a),
    "kind": lambda: core.kind(a),  # no capsule: its refusal is worded by _errors, not given yet
    "ExportableBase.__dlpack__": lambda: base.__dlpack__(),
    "ExportableBase.__init__": lambda: base.__init__(a, False, None, None, (1, 0), None),
}
for name, call in calls.items():
    try:
        call()
        print(name, "ran")
    except RuntimeError as exc:
        print(name, "refused" if "not configured" in str(exc) else exc)
# Every function of the core, with arguments of each shape a caller may pass:
# refused or run, never a crash.
for fname in sorted(n for n in dir(core) if not n.startswith(("_", "set_")) and type(getattr(core, n)).__name__ in (
        "builtin_function_or_method", "cython_function_or_method")):
    for args in ((), (a,), (cap(),), (object(),), (cap(), False), (cap(), True), (None, None, None)):
        try:
            getattr(core, fname)(*args)
        except BaseException:
            pass
print("front:", core.front("export", lambda x, /, *, stream=None, max_version=None, dl_device=None, copy=None,
                                       readonly=False, min_version=None: "python")(a))  # unconfigured: Python
try:  # a policy never made is refused, and nothing runs yet
    core.configure(core.Policy.__new__(core.Policy))
    print("unmade policy: taken")
except TypeError as exc:
    print("unmade policy:", exc)
try:
    core.checked(cap())
except RuntimeError as exc:
    print("checked still", "refused" if "not configured" in str(exc) else exc)
""")
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[:-3] == [f"{name} refused" for name in (
        "checked", "discard", "move", "snapshot", "stamp_version", "import_host", "wrap",
        "exchange", "kind", "ExportableBase.__dlpack__", "ExportableBase.__init__",
    )], done.stdout
    assert lines[-3] == "front: python"
    assert lines[-2] == "unmade policy: configure takes a Policy made by Policy(...)", done.stdout
    assert lines[-1] == "checked still refused"


_SUBINTERPRETER = r'''
import sys
try:  # CPython 3.13+
    import _interpreters as interpreters

    def run(code):
        interp = interpreters.create("legacy")  # the configuration of the C API's Py_NewInterpreter
        try:
            exc = interpreters.run_string(interp, code)
            return None if exc is None else f"{exc.type.__name__}: {exc.msg}"
        finally:
            interpreters.destroy(interp)
except ImportError:
    import _xxsubinterpreters as interpreters

    def run(code):
        interp = interpreters.create(isolated=False) if sys.version_info >= (3, 12) else interpreters.create()
        try:
            interpreters.run_string(interp, code)
        except interpreters.RunFailedError as exc:
            return str(exc)
        finally:
            interpreters.destroy(interp)


import numpy as np, gpu_dlpack, gpu_dlpack._core as core
LOAD_THE_FILE = """
import importlib.machinery, importlib.util
loader = importlib.machinery.ExtensionFileLoader("gpu_dlpack._core", %r)
m = importlib.util.module_from_spec(importlib.util.spec_from_file_location("gpu_dlpack._core", %r, loader=loader))
loader.exec_module(m)
class T: pass
print("ran in a subinterpreter:", m.import_host(T()), m.wrap(T(), False))
""" % (core.__file__, core.__file__)
load = "import gpu_dlpack" if sys.argv[1] == "the package" else LOAD_THE_FILE
for _ in range(2):
    print("refused:", run(load))
print(gpu_dlpack.from_dlpack(np.arange(3.0).__dlpack__()).tolist())
'''


@pytest.mark.parametrize("loads", ["the file", "the package"])
def test_the_core_is_refused_in_a_subinterpreter_after_the_main_interpreter_loaded_it(loads):
    # A single-phase module loaded by the main interpreter was copied into
    # a subinterpreter that loaded the same file, without PyInit__core
    # running again: the main interpreter's functions, types and caches,
    # called from the subinterpreter (and its classes kept in them).
    import glob
    import importlib.util

    if importlib.util.find_spec("_interpreters") is None and importlib.util.find_spec("_xxsubinterpreters") is None:
        pytest.skip("this interpreter has no module to make subinterpreters")
    if not glob.glob(os.path.join(faults.ROOT, "gpu_dlpack", "_core*.so")):
        pytest.skip("the compiled core is not built")
    env = faults._env()
    done = subprocess.run([sys.executable, "-c", _SUBINTERPRETER, loads], cwd=faults.ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and all(
        line.startswith("refused: ") and "ImportError" in line and REFUSED in line for line in lines[:2]
    ), done.stdout
    assert lines[2] == "[0.0, 1.0, 2.0]"


def test_the_core_is_refused_in_a_subinterpreter_on_its_own():
    pytest.importorskip("_xxsubinterpreters")
    import glob

    if not glob.glob(os.path.join(faults.ROOT, "gpu_dlpack", "_core" + importlib.machinery.EXTENSION_SUFFIXES[0])):
        pytest.skip("the compiled core is not built")
    done = _in_child("""
import _xxsubinterpreters as interpreters
interp = interpreters.create()
code = '''
import glob, importlib.machinery, importlib.util, os
path = os.path.join("gpu_dlpack", "_core" + importlib.machinery.EXTENSION_SUFFIXES[0])  # this interpreter's
loader = importlib.machinery.ExtensionFileLoader("gpu_dlpack._core", path)
loader.exec_module(importlib.util.module_from_spec(importlib.util.spec_from_file_location("gpu_dlpack._core", path, loader=loader)))
'''
try:
    interpreters.run_string(interp, code)
except interpreters.RunFailedError as exc:
    print("refused:", exc)
""")
    assert done.stdout.startswith("refused: ") and "ImportError" in done.stdout and REFUSED in done.stdout, (
        done.stdout + done.stderr
    )
