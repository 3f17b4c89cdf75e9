"""Producers and finalizers that run Python code inside the layer's calls,
for the reentrancy cases of the capsule fuzzer (tests/fuzz_capsules.py).

A ``Hostile`` producer's ``__dlpack__`` may call back into the layer
(export or import another array, inspect its own capsule, export, import or
wrap itself once), then answer: its own capsule (as asked, always legacy,
always versioned), the same capsule on every call, a capsule already
consumed, one labelled with a device it is not on, no capsule at all, or an
exception. ``HostTested`` is the same producer with a host test, told to
the layer as JAX's arrays are (``PEER``): the compiled core asks its
``__dlpack__`` itself. The capsules are tests/capsules.py's, whose C
deleter counts its calls.

A finalizer (a ``gc.callbacks`` entry, the ``__del__`` of an object in a
reference cycle, or a ``weakref.finalize`` of one) changes what a call is
working on when a collection runs: inside the producer's ``__dlpack__``,
``__dlpack_device__`` or host test (an explicit collection there), or at
the first allocation of the call (the threshold of the youngest
generation set to 1). What it changes: the wrapper (made anew over
another array, or read-only), the producer's array or capsule, the floor
in force; or it takes the capsule in flight, or makes an exchange of its
own. At the first allocation, which is no fixed point of the call (a
tuple from a free list counts none), it only replaces the wrapper's
array with an equal one: a result that does not depend on when it runs,
and memory freed under a call that would still read the original.
"""

from __future__ import annotations

import gc
import types
import weakref

import numpy as np

from . import capsules

DTYPES = ("float64", "int32", "uint8", "bool", "complex64")
SHAPES = ([3], [2, 3], [], [0, 4], [1, 1, 5])


class Hostile:
    """A host producer that does what its case says (``case``: a dict of
    fuzz_capsules.reentrant_strategy), over ``array``."""

    def __init__(self, case, array, when):
        self.case = case
        self.when = when       # where the finalizer runs (fuzz_capsules.run_reentrant_case)
        self.array = array
        self.records = []      # of every capsule it made
        self.kept = None       # the capsule it answers with every time ("same twice")
        self.last = None       # the capsule it is about to answer with
        self.inside = False    # within one of its own calls back
        self.calls = 0
        self.trigger = None    # set by arm(): runs the finalizer where the case says

    # -- what a consumer asks ----------------------------------------------------

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls += 1
        case = self.case
        if case["answer"] == "TypeError on keywords" and (max_version is not None or dl_device is not None or
                                                           copy is not None):
            raise TypeError("__dlpack__() got an unexpected keyword argument")
        if not self.inside:
            self.inside = True
            try:
                self._call_back()
            finally:
                self.inside = False
        if case["answer"] == "raises":
            raise _EXCEPTIONS[case["raises"]](f"the producer raised {case['raises']}")
        capsule = self._answer(max_version)
        self.last = capsule
        if self.when == "in __dlpack__" and self.trigger is not None:
            self.trigger()
        self.last = None
        return capsule

    def __dlpack_device__(self):
        if self.when == "in __dlpack_device__" and self.trigger is not None:
            self.trigger()
        return (1, 0)

    def _answer(self, max_version):
        answer = self.case["answer"]
        if answer == "not a capsule":
            return self.array
        if answer == "same twice" and self.kept is not None:
            return self.kept
        versioned = max_version is not None and max_version[0] >= 1
        if answer == "own legacy" or answer == "TypeError on keywords":
            versioned = False
        elif answer == "own versioned":
            versioned = True
        device = (2, 0) if answer == "wrong device" else (1, 0)
        capsule, record = capsules.make(self.array, versioned=versioned, device=device,
                                        flags=0 if self.array.flags.writeable else 1)
        self.records.append(record)
        if answer == "consumed":
            capsules.consume_and_free(capsule)
        if answer == "same twice":
            self.kept = capsule
        return capsule

    def _call_back(self):
        """What the producer asks of the layer before it answers (an error
        it meets is its own to handle: it goes on)."""
        import gpu_dlpack

        back = self.case["callback"]
        other = np.arange(4.0)
        try:
            if back == "export other":
                gpu_dlpack.export(other, max_version=(1, 0))
            elif back == "import other":
                gpu_dlpack.from_dlpack(other.__dlpack__())
            elif back == "inspect own":
                capsule = self._answer(None if self.case["answer"] == "own legacy" else (1, 0))
                if type(capsule).__name__ == "PyCapsule":
                    gpu_dlpack.inspect(capsule)
            elif back == "import itself":
                gpu_dlpack.from_dlpack(self)
            elif back == "export itself":
                gpu_dlpack.export(self, max_version=(1, 0))
            elif back == "wrap itself":
                np.from_dlpack(gpu_dlpack.wrap(self))
            elif back == "collect":
                gc.collect()
        except Exception:
            pass


class HostTested(Hostile):
    """A ``Hostile`` producer with the host test of ``PEER``: its one
    device, new at each read (never one the core kept), says "cpu" (a
    collection there where its case says)."""

    @property
    def _sharding(self):
        return types.SimpleNamespace(_device=_Device(self))


class _Device:
    # The core keeps the last device that passed: it must not keep the
    # producer alive (JAX's devices outlive every array).
    def __init__(self, producer):
        self.producer = weakref.ref(producer)

    @property
    def platform(self):
        producer = self.producer()
        if producer is not None and producer.when == "in host test" and producer.trigger is not None:
            producer.trigger()
        return "cpu"


HostTested.__module__ = "tests.reentrant_peer"  # a peer's own type (never marked as asked back)


def peer():
    """The row that tells the layer of ``HostTested`` (as JAX's is told)."""
    from gpu_dlpack import _peers

    return _peers.Peer("reentrant producer", "tests.reentrant_peer", array="HostTested",
                       host_test=_peers.HostTest(("_sharding", "_device"), "platform", "cpu"))


_EXCEPTIONS = {"BufferError": BufferError, "TypeError": TypeError, "ValueError": ValueError,
               "RuntimeError": RuntimeError, "KeyError": KeyError, "MemoryError": MemoryError}

# -- finalizers -------------------------------------------------------------------


def _equal_copy(x):
    """An object equal to ``x`` for every consumer, of its type."""
    import copy

    if isinstance(x, np.ndarray):  # its strides too (those of an empty array are any)
        out = np.lib.stride_tricks.as_strided(x.copy(), x.shape, x.strides) if x.size == 0 else x.copy()
        out.flags.writeable = x.flags.writeable
        return out
    if hasattr(x, "clone"):  # torch: its strides too
        import torch

        return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype).copy_(x)
    if isinstance(x, Hostile):
        return copy.copy(x)  # the same records and capsules
    return copy.deepcopy(x)  # JAX: a new buffer


class _Finalized:
    """An object in a reference cycle, whose ``__del__`` runs ``act``."""

    def __init__(self, act):
        self.act = act
        self.cycle = [self]

    def __del__(self):
        self.act()


class _Referent:
    """An object in a reference cycle, the referent of a weakref.finalize."""

    def __init__(self):
        self.cycle = [self]


def arm(case, state):
    """Set the finalizer of ``case`` to act on ``state`` (a dict: the
    producer, the wrapper, the array, the layer) once, where the case says;
    returns what undoes it (it also restores the floor and the collector)."""
    import gpu_dlpack

    done = []
    finalizer = case["finalizer"]

    def act():
        if done:
            return
        done.append(True)
        gc.disable()  # one collection inside the call: none at another point of it
        what = case["action"]
        producer, wrapper = state.get("producer"), state.get("wrapper")
        try:
            # A wrapper's state is read-only to Python: only __init__
            # changes it, all of it at once (the plan with it).
            if what == "delete array":
                if wrapper is not None:
                    wrapper.__init__(np.arange(2.0))  # the array it held dropped
                elif producer is not None:
                    del producer.array
            elif what == "replace array":
                other = np.arange(5, dtype=np.int16)
                if wrapper is not None:
                    wrapper.__init__(other)
                elif producer is not None:
                    producer.array = other
            elif what == "read-only":
                if wrapper is not None:
                    wrapper.__init__(wrapper.array, readonly=True)
                else:
                    state["array"].flags.writeable = False
            elif what == "equal copy":
                # What the wrapper holds, replaced by an equal object (its
                # only reference dropped): the same result whenever the
                # finalizer runs, and freed memory for a call that still
                # reads the original.
                if wrapper is not None:
                    wrapper.__init__(_equal_copy(wrapper.array))
            elif what == "floor":
                gpu_dlpack.set_min_dlpack_version((1, 1))
            elif what == "take the capsule":
                capsule = getattr(producer, "last", None) if producer is not None else None
                if capsule is not None:
                    gpu_dlpack.from_dlpack(capsule)
            elif what == "steal the capsule":
                if producer is not None:
                    producer.kept, record = capsules.make(np.arange(2.0))
                    producer.records.append(record)
            elif what == "exchange":
                gpu_dlpack.from_dlpack(gpu_dlpack.export(np.arange(3.0), max_version=(1, 0)))
        except Exception:
            pass  # a finalizer's error is the interpreter's to print, never the call's

    def fire():
        gc.collect(0)  # the youngest generation: the finalizer's garbage is there (no collection since)

    # No collection but the one the case asks for: the finalizer then acts
    # at the point of the call the case names.
    gc.disable()
    if finalizer == "none":
        return lambda: gc.enable()
    if finalizer == "gc.callbacks":
        def callback(phase, info):
            if phase == "start":
                act()
        gc.callbacks.append(callback)
        undo_cb = lambda: callback in gc.callbacks and gc.callbacks.remove(callback)  # noqa: E731
    elif finalizer == "__del__ in a cycle":
        _Finalized(act)  # garbage from here: collected with the next collection
        undo_cb = lambda: None  # noqa: E731
    else:
        weakref.finalize(_Referent(), act)
        undo_cb = lambda: None  # noqa: E731
    when = state.get("when", case["when"])
    if when == "first allocation":
        state["arm_threshold"] = True
    elif state.get("producer") is not None:
        state["producer"].trigger = fire

    def undo():
        gc.set_threshold(700)
        undo_cb()
        if not done:
            gc.collect(0)  # a finalizer that did not run in the call runs now, on nothing in flight
        gpu_dlpack.set_min_dlpack_version((0, 5))
        gc.enable()
    return undo


def start(state):
    """Just before the call: a finalizer of the first allocation armed. The
    youngest generation is collected once it counts more allocations than
    its threshold (deallocations count down): with the threshold at 1 and
    one allocation counted, the next one collects."""
    if state.get("arm_threshold"):
        gc.set_threshold(1)
        kept = state.setdefault("kept", [])
        while gc.get_count()[0] < 1:
            kept.append([])
        gc.enable()
