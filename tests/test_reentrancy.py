"""Python code run inside the layer's own calls.

Finalizers that the cyclic GC runs in the middle of a call (an allocation
is enough) and change what the call works on; producers that call back into
the layer from their ``__dlpack__``; producers the layer takes for JAX's
(by their type's name) whose methods raise. Each sees what it works on
whole (as it was, or as changed), with no crash and no hang. The cases
that could crash or hang run in a child interpreter (a crash is then a
failed test, not a dead suite).

State the layer shares with the other libraries of the process:
tests/test_shared_process.py.
"""

import json
import os
import subprocess
import sys
import textwrap
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child(code, *args, timeout=120):
    """The JSON lines ``code`` prints, run in a child."""
    env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    assert done.returncode == 0, f"exit status {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith(("[", "{"))]


# -- finalizers that change a wrapper in the middle of its __dlpack__ ------------

FINALIZER = r"""
import gc, json
import numpy as np, torch, jax.numpy as jnp, gpu_dlpack
MAKE = {"numpy": lambda: np.arange(3.0), "torch": lambda: torch.arange(3.0), "jax": lambda: jnp.arange(3.0)}
MV = (1, 0)
other = np.arange(5, dtype=np.int32)
w = act = None


class Finalizer:
    def __del__(self):
        gc.set_threshold(700)  # one collection inside the call is enough
        # The wrapper's state is read-only to Python (a del is refused:
        # AttributeError); __init__ makes it anew, all at once.
        try:
            if act == "delete":
                del w._x
            elif act == "readonly":
                w.__init__(w.array, readonly=True)
            elif act == "replace":
                w.__init__(other)
            elif act == "floor":
                w.__init__(w.array, min_version=(1, 1))
        except AttributeError:
            pass


def ask(request):
    if request == "legacy":
        return w.__dlpack__()
    if request == "versioned":
        return w.__dlpack__(max_version=MV)
    return torch.from_dlpack(w)  # the wrapper's C exchange API, on the core


def describe(out):
    if type(out).__name__ == "PyCapsule":
        i = gpu_dlpack.inspect(out)
        return [i.name, i.read_only, list(i.shape), list(i.dl_dtype), gpu_dlpack.from_dlpack(out).tolist()]
    return out.tolist()


for plan in MAKE:
    for request in ("legacy", "versioned", "exchange api"):
        for act in ("delete", "readonly", "replace", "floor"):
            for attempt in range(2):  # with the verdict for MV cached or not
                # A max_version the core has not kept the request of (it
                # keeps the last one made): the call makes one, and the
                # collection lands there, before the plan is read.
                MV = tuple([1, 0])
                if attempt:
                    gpu_dlpack.export(np.arange(1.0), max_version=MV)
                w = gpu_dlpack.wrap(MAKE[plan]())
                gc.collect()
                a = Finalizer(); b = [a]; a.b = b  # a cycle with a finalizer, garbage once dropped
                del a, b
                gc.set_threshold(1)  # collected at the next allocation: inside the call
                try:
                    got = ["ok", describe(ask(request))]
                except Exception as exc:
                    got = [type(exc).__name__, str(exc)]
                finally:
                    gc.set_threshold(700)
                print(json.dumps([plan, request, act, attempt, got]))
"""


def test_a_finalizer_that_changes_the_wrapper_mid_call_leaves_it_whole_to_the_call():
    # The compiled __dlpack__ checked its plan, allocated (the GC ran a
    # finalizer that deleted w._x, when the state was Python's to delete),
    # then read the member it had checked: a NULL pointer (SIGSEGV), for
    # NumPy's plan, JAX's and torch's. Now a finalizer can only make the
    # wrapper anew (__init__): the call holds what its plan reads. Each
    # plan, each request (legacy, versioned, the C exchange API), each
    # change, with the version verdict cached and not.
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    here = _child(FINALIZER, timeout=300)
    assert len(here) == 3 * 3 * 4 * 2  # never a crash: every row is there
    # Each call sees the wrapper whole, as it was or as changed: the values
    # of one of the two arrays, or the error the changed wrapper gives;
    # never a mixture. (From CPython 3.12 the collector runs at the eval
    # breaker, not at the allocation that triggers it: the change may land
    # after the call read what it changes.)
    for plan, request, act, attempt, got in here:
        assert got[0] in ("ok", "ReadOnlyError", "DLPackVersionError"), (plan, request, act, got)
        if got[0] == "ok":
            values = got[1][4] if isinstance(got[1][0], str) else got[1]
            assert values in ([0.0, 1.0, 2.0], [0, 1, 2, 3, 4]), (plan, request, act, got)
            if act == "delete":  # refused: the wrapper as it was
                assert values == [0.0, 1.0, 2.0], (plan, request, act, got)
        elif got[0] == "ReadOnlyError":  # a legacy capsule of read-only data: the flag set, or JAX's array
            assert request == "legacy" and (act == "readonly" or plan == "jax"), (plan, request, act, got)
        else:  # the floor, raised above the version asked for
            assert act == "floor" and request != "legacy", (plan, request, act, got)
        if sys.version_info < (3, 12) and act == "floor" and request != "legacy":
            # the collection lands at the allocation: the call sees the wrapper made anew
            assert got[0] == "DLPackVersionError", (plan, request, act, got)


# -- a producer that exports or imports itself -------------------------------------

SELF_EXCHANGE = r"""
import json, sys, types
import numpy as np, gpu_dlpack
calls = 0
entry = None


class ArrayImpl:  # what the layer takes for JAX's array type, by its name
    _sharding = types.SimpleNamespace(_device=types.SimpleNamespace(platform="cpu"))

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kwargs):
        global calls
        calls += 1
        return exchange(self)


ArrayImpl.__module__ = "jaxlib.xla_extension"


def exchange(x):
    if entry == "import":
        return gpu_dlpack.from_dlpack(x)
    if entry == "export":
        return gpu_dlpack.export(x, max_version=(1, 0))
    if entry == "export legacy":
        return gpu_dlpack.export(x)
    if entry == "wrap":
        return gpu_dlpack.wrap(x).__dlpack__(max_version=(1, 0))
    return np.from_dlpack(gpu_dlpack.wrap(x))


for entry in ("import", "export", "export legacy", "wrap", "wrap numpy"):
    calls = 0
    try:
        exchange(ArrayImpl())
        got = "ok"
    except Exception as exc:
        got = f"{type(exc).__name__}: {exc}"
    print(json.dumps([entry, got, calls, sys.getrecursionlimit()]))
"""


def test_a_producer_that_exchanges_itself_is_asked_once_per_level():
    # The compiled import dropped the producer's error (RecursionError, deep
    # down) and the Python path asked __dlpack__ again, at every level: the
    # calls doubled every few frames, and at the default recursion limit
    # the import never returned.
    here = _child(SELF_EXCHANGE, timeout=120)
    said = "BufferError: jaxlib.xla_extension.ArrayImpl.__dlpack__ refused the export: RecursionError: "
    assert [e for e, *_ in here] == ["import", "export", "export legacy", "wrap", "wrap numpy"]
    for entry, got, calls, limit in here:
        assert got.startswith(said), (entry, got)
        assert 0 < calls <= limit, (entry, calls)


# -- producers taken for JAX's whose methods raise ------------------------------------

HOST_TESTED = r"""
import json, types
import numpy as np, gpu_dlpack


class Device:
    reads = 0

    def __init__(self, bad):
        self.bad = bad

    @property
    def platform(self):
        Device.reads += 1
        if self.bad == "platform raises":
            raise RuntimeError("platform")
        return "gpu" if self.bad == "on a gpu" else "cpu"


class ArrayImpl:  # taken for JAX's by its name: the layer reads its host test
    def __init__(self, bad, device=None):
        self.bad, self.a, self.device = bad, np.arange(3.0), device or Device(bad)

    @property
    def _sharding(self):
        if self.bad == "_sharding raises":
            raise RuntimeError("_sharding")
        # An array over several devices has a sharding without _device.
        return types.SimpleNamespace(**({} if self.bad == "two devices" else {"_device": self.device}))

    def __dlpack_device__(self):
        if self.bad in ("__dlpack_device__ raises", "two devices"):
            raise BufferError("__dlpack_device__: " + self.bad)
        return (1, 0)

    def __dlpack__(self, **kwargs):
        if self.bad == "__dlpack__ raises":
            raise RuntimeError("__dlpack__")
        if self.bad == "__dlpack__ refuses max_version" and kwargs:
            raise TypeError("no keywords")
        return self.a.__dlpack__()


ArrayImpl.__module__ = "jaxlib.xla_extension"
ENTRIES = {
    "import": lambda x: gpu_dlpack.from_dlpack(x).tolist(),
    "export": lambda x: gpu_dlpack.inspect(gpu_dlpack.export(x, max_version=(1, 0))).name,
    "export legacy": lambda x: gpu_dlpack.inspect(gpu_dlpack.export(x)).name,
    "wrap": lambda x: np.from_dlpack(gpu_dlpack.wrap(x)).tolist(),
}
for bad in ("nothing", "__dlpack_device__ raises", "_sharding raises", "platform raises",
            "two devices", "on a gpu", "__dlpack__ raises", "__dlpack__ refuses max_version"):
    for entry, call in ENTRIES.items():
        try:
            got = call(ArrayImpl(bad))
        except Exception as exc:
            got = f"{type(exc).__name__}: {exc}"
        print(json.dumps([bad, entry, got]))
one = Device("nothing")  # the device of three arrays: the core's export reads its platform once
Device.reads = 0
for _ in range(3):
    gpu_dlpack.export(ArrayImpl("nothing", one), max_version=(1, 0))
print(json.dumps(["one device", "platform reads", Device.reads]))
"""


def test_a_producer_taken_for_jax_is_read_alike_on_every_entry():
    # The core's wrap and export never asked __dlpack_device__ (its host
    # test stood for it, not on the Python path), and its import read
    # is_deleted() where the Python path read _arrays: an exception raised
    # in one of them surfaced on different entries.
    here = _child(HOST_TESTED)
    assert here.pop() == ["one device", "platform reads", 1]  # kept: a device's kind cannot change
    assert len(here) == 8 * 4
    got = {(bad, entry): out for bad, entry, out in here}
    entries = ("import", "export", "export legacy", "wrap")
    for bad in {bad for bad, _ in got}:
        # What a method raises surfaces on every entry alike: each gives what
        # it gives for a producer with nothing wrong, or all give one error.
        row = [got[bad, entry] for entry in entries]
        alike = len({str(out) for out in row}) == 1 and str(row[0]).startswith("BufferError")
        assert alike or row == [got["nothing", entry] for entry in entries], (bad, row)
    for entry in ("import", "export", "wrap"):
        # The host test stands for __dlpack_device__ on every entry; where it
        # cannot say, __dlpack_device__ is asked.
        assert not str(got["__dlpack_device__ raises", entry]).startswith("BufferError")
        assert got["two devices", entry].startswith("BufferError: jaxlib.xla_extension.ArrayImpl.__dlpack_device__ "
                                                    "names no device (BufferError: __dlpack_device__: two devices)")
        assert got["_sharding raises", entry] == got["nothing", entry] == got["platform raises", entry]
        assert got["on a gpu", entry] == got["nothing", entry]  # __dlpack_device__ asked: it says (1, 0)
    assert got["__dlpack__ raises", "import"].startswith(
        "BufferError: jaxlib.xla_extension.ArrayImpl.__dlpack__ refused the export: RuntimeError: __dlpack__")
    assert got["__dlpack__ refuses max_version", "export"] == "dltensor_versioned"  # asked again as an old producer


def test_an_error_of_a_producer_that_sets_a_floor_is_its_own(floor):
    # The core handed the producer's error on, then checked max_version
    # again, under the floor the producer had set meanwhile: a
    # DLPackVersionError where the Python path, which checks before it asks,
    # raises the producer's own error.
    import gpu_dlpack

    class ArrayImpl:  # taken for JAX's by its name
        _sharding = types.SimpleNamespace(_device=types.SimpleNamespace(platform="cpu"))

        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kwargs):
            gpu_dlpack.set_min_dlpack_version((1, 1))
            raise BufferError("the producer's own refusal")

    ArrayImpl.__module__, ArrayImpl.__qualname__ = "jaxlib.xla_extension", "ArrayImpl"
    for call in (lambda x: gpu_dlpack.export(x, max_version=(1, 0)),
                 lambda x: gpu_dlpack.wrap(x).__dlpack__(max_version=(1, 0))):
        gpu_dlpack.set_min_dlpack_version((0, 5))
        import numpy as np

        gpu_dlpack.export(np.arange(1.0), max_version=(1, 0))  # the verdict cached, as after any exchange
        with pytest.raises(BufferError, match="^the producer's own refusal$") as err:
            call(ArrayImpl())
        assert type(err.value) is BufferError


# -- a wrapper made anew, seen by the finalizers its old state runs ----------------

def test_a_wrapper_made_anew_is_whole_to_the_finalizers_its_old_state_runs():
    # __init__ again lets the old array go: its finalizer, run then, exports
    # through the same wrapper and must see it made anew whole (the new
    # array, read-only, no plan of the old one), never half of each.
    import weakref

    import numpy as np

    import gpu_dlpack

    for old_dtype in (np.float64, np.int32):
        old = np.arange(3, dtype=old_dtype)
        w = gpu_dlpack.wrap(old)
        seen = []

        def export():
            info = gpu_dlpack.inspect(w.__dlpack__(max_version=(1, 0)))
            seen.append((tuple(info.shape), info.readonly, w.readonly, w.array.dtype.name))

        weakref.finalize(old, export)
        del old  # the wrapper holds the only reference
        new = np.arange(5, dtype=np.int16)
        w.__init__(new, readonly=True)
        assert seen == [((5,), True, True, "int16")], seen
