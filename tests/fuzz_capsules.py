"""A fuzzer of the capsule checks: crafted ``DLManagedTensor(Versioned)``
structs (tests/capsules.py, whose deleter and destructor are C) fed to every
entry point.

Cases are drawn by hypothesis (a test dependency already, with strategies
that reach each bound of a field) in this process, written to a file, and
run in a child interpreter, so that a crash is reported with its case
instead of ending the run; a child that dies is started again after the
case it died on. The child checks, per case and entry point:

- the refusal is one of the standard's exception types;
- a call that raised left the capsule either untouched (its name unchanged,
  its deleter not run: refused before the claim) or taken and freed at once
  (``used_*``, the deleter run once); ``inspect`` and ``view`` never take it;
- a capsule the import refuses as malformed (or of another major version)
  ``inspect`` and ``view`` refuse too, a malformed one in the same words;
- once everything is dropped, every deleter ran exactly once (NULL
  deleters: never), and none ran on a tensor already freed;
- an accepted tensor is the struct's: ``inspect`` reads every field as it
  was written, ``view`` its address (data plus byte offset), shape and dtype; an array, a tensor and the import of a capsule passed on
  have the struct's shape and item size, an array over the fuzzer's buffer
  starts where the struct's data and byte offset say, and where the struct
  lies inside the buffer the values are the bytes it describes.

The entry points: ``from_dlpack`` of the capsule and of a producer giving it
(with ``copy=True`` where the data is real), ``inspect``, ``view``, ``export`` at the
case's ``max_version``, the adaptation to each other kind, ``wrap`` consumed
by NumPy, gpu_dlpack and torch, and a producer with a host test
(``capsules.HostProducer``, told to the layer as JAX is) imported, exported
and wrapped: the compiled core asks that one's ``__dlpack__`` itself.

Its reentrancy cases (``family="reentrancy"``) run Python code inside the
layer's calls instead (tests/reentrant.py): a producer that calls back into
the layer, raises, answers with another capsule, a consumed one, none, or
the same one twice, and a finalizer (``gc.callbacks``, ``__del__`` in a
reference cycle, ``weakref.finalize``) that changes the wrapper, the
producer, the capsule in flight or the floor while the call runs.
Checked: the standard's exception types (and the ``AttributeError`` of a
deleted member, a ``MemoryError``); every capsule's deleter once, none on a
freed tensor; nothing left behind (no floor of a call, no producer marked
as asked); what an accepted call gives holds the values of an array the
case made (the source, or the one a finalizer put in its place).

``python -m tests.fuzz_capsules --cases N [--seed S] [--family reentrancy]``
runs it from the command line (scripts/fuzz.sh); tests/test_fuzz.py runs it
in the suite.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BUFFER = 1 << 16  # bytes of real memory a case's data may point into

ENTRIES = (
    "import", "import producer", "inspect", "view", "export", "wrap numpy", "wrap gpu_dlpack", "copy", "torch",
    # the adaptation between capsule kinds, each way, whatever the case asks
    "adapt versioned", "adapt legacy",
    # a producer with a host test, whose capsules the compiled core asks for
    # itself (JAX's path)
    "import host-tested", "export host-tested", "wrap host-tested",
)

# -- the cases (drawn in the parent) --------------------------------------------


def strategy():
    """The hypothesis strategy of one case: a dict of struct fields, JSON-able."""
    from hypothesis import strategies as st

    extent = st.one_of(
        st.integers(0, 6), st.integers(0, 6), st.integers(0, 6),
        st.sampled_from([2**31, 2**32 + 1, 2**60, 2**62, 2**63 - 1, -1, -(2**63)]),
    )
    stride = st.one_of(
        st.integers(-8, 8), st.integers(-8, 8),
        st.sampled_from([2**31, 2**61, 2**62, 2**63 - 1, -(2**62), -(2**63)]),
    )
    shape = st.one_of(st.lists(extent, max_size=4), st.just([1] * 64), st.lists(extent, min_size=5, max_size=8))
    dtype = st.one_of(
        st.sampled_from([
            (2, 64, 1), (2, 32, 1), (2, 16, 1), (0, 8, 1), (0, 16, 1), (0, 32, 1), (0, 64, 1), (1, 8, 1),
            (1, 16, 1), (1, 64, 1), (6, 8, 1), (5, 64, 1), (5, 128, 1), (4, 16, 1), (7, 8, 1), (17, 4, 1),
            (1, 4, 1), (0, 1, 1),
        ]),
        st.tuples(st.integers(0, 255), st.sampled_from([0, 1, 7, 8, 12, 16, 24, 32, 64, 128, 255]),
                  st.sampled_from([0, 1, 2, 4, 65535])),
    )
    device = st.one_of(
        st.just((1, 0)), st.just((1, 0)), st.just((1, 0)),
        st.sampled_from([(1, 1), (1, 5), (3, 0), (13, 0), (14, 0), (2, 0), (4, 0), (7, 0), (8, 0), (0, 0),
                         (5, 0), (6, 0), (19, 0), (99, 0), (-1, 0), (1, -1), (2**31 - 1, 0),
                         (11, 0), (10, 0), (20, 0), (20, 1), (21, 0), (22, 0), (40, 3)]),
        # Every code past those dlpack.h names here is a device type too.
        st.tuples(st.integers(19, 2**31 - 1), st.sampled_from([0, 1, 7])),
    )
    data = st.one_of(
        st.tuples(st.just("buf"), st.sampled_from([0, 0, 8, 64, 1, 3, 4096, BUFFER // 2])),
        st.sampled_from([0, 1, 4096, 2**63, 2**64 - 8, 2**64 - 4096]),
    )
    return st.fixed_dictionaries({
        "versioned": st.booleans(),
        # (Never the other kind's name: a struct read as the other kind has
        # its pointers where the other one has ints, which no check can tell.)
        "name": st.sampled_from(["right"] * 12 + ["", "dltensor_v", "used", "NULL"]),
        "version": st.tuples(st.sampled_from([1, 1, 1, 1, 0, 2, 2**32 - 1]),
                             st.one_of(st.integers(0, 5), st.just(2**32 - 1))),
        "flags": st.one_of(st.sampled_from([0, 0, 0, 1, 2, 3, 4, 5, 7]), st.integers(0, 2**64 - 1)),
        "device": device,
        "dtype": dtype,
        "shape": shape,
        "ndim": st.one_of(st.just(None), st.just(None), st.just(None),
                          st.sampled_from([0, 1, 3, 64, 65, -1, 2**31 - 1, -(2**31)])),
        "strides": st.one_of(st.just(None), st.lists(stride, min_size=8, max_size=8)),
        "null_shape": st.sampled_from([False] * 15 + [True]),
        "data": data,
        "byte_offset": st.one_of(st.just(0), st.just(0), st.integers(0, 64),
                                 st.sampled_from([4095, 4096, 2**63, 2**64 - 1, 2**64 - 4096])),
        "deleter": st.sampled_from([True] * 7 + [False]),
        "max_version": st.sampled_from([None, (1, 0), (1, 0), (0, 8), (1, 3), (0, 4)]),
    })


REENTRANT_ENTRIES = ("import", "export", "wrap numpy", "wrap gpu_dlpack", "wrap dlpack", "torch")


def reentrant_strategy():
    """The hypothesis strategy of one reentrancy case (tests/reentrant.py):
    a producer, what it does inside its calls and answers, a finalizer and
    what it changes, where it runs, and the entry point."""
    from hypothesis import strategies as st

    return st.fixed_dictionaries({
        "producer": st.sampled_from(["plain"] * 3 + ["host-tested"] * 3 + ["numpy", "torch", "jax"]),
        "answer": st.sampled_from(["own"] * 4 + ["own legacy", "own versioned", "same twice", "consumed",
                                                 "wrong device", "not a capsule", "raises",
                                                 "TypeError on keywords"]),
        "raises": st.sampled_from(["BufferError", "TypeError", "ValueError", "RuntimeError", "KeyError",
                                   "MemoryError"]),
        "callback": st.sampled_from(["none"] * 3 + ["export other", "import other", "inspect own",
                                                    "import itself", "export itself", "wrap itself", "collect"]),
        "finalizer": st.sampled_from(["none", "gc.callbacks", "__del__ in a cycle", "weakref.finalize"]),
        "action": st.sampled_from(["delete array", "replace array", "read-only", "floor", "take the capsule",
                                   "steal the capsule", "exchange"]),
        "when": st.sampled_from(["in __dlpack__", "in __dlpack__", "first allocation", "in __dlpack_device__",
                                 "in host test"]),
        "entry": st.sampled_from(REENTRANT_ENTRIES),
        "max_version": st.sampled_from([None, (1, 0), (1, 0), (1, 2), (0, 8)]),
        "dtype": st.sampled_from(list(range(5))),
        "shape": st.sampled_from(list(range(5))),
        "readonly": st.sampled_from([False] * 4 + [True]),
    })


def draw(n: int, seed: int, family: str = "capsules") -> list:
    """``n`` cases of ``family`` ("capsules", "reentrancy") drawn by
    hypothesis with ``seed``."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as with_seed

    cases = []

    @with_seed(seed)
    @settings(max_examples=n, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(strategy() if family == "capsules" else reentrant_strategy())
    def collect(case):
        cases.append(json.loads(json.dumps(case)))  # tuples as lists, as the children read them

    collect()
    return cases[:n]


# -- one case, run in a child ---------------------------------------------------


def _host_tested():
    from gpu_dlpack import _peers

    return _peers.Peer("fuzzed producer", "tests.capsules", array="HostProducer",
                       host_test=_peers.HostTest(("_sharding", "_device"), "platform", "cpu"))


class _Env:
    """What the child holds for all cases: the library, the buffer."""

    def __init__(self, with_torch, jax=False):
        import numpy as np

        import gpu_dlpack

        from . import capsules

        self.np, self.g, self.capsules = np, gpu_dlpack, capsules
        from gpu_dlpack import _peers

        from . import reentrant

        # before the layer first meets the types
        _peers.PEERS = _peers.PEERS + (_host_tested(), reentrant.peer())
        self.torch = self.jnp = None
        if with_torch:
            import torch

            self.torch = torch
        if jax:
            try:
                import jax.numpy as jnp

                self.jnp = jnp
            except ImportError:
                pass
        raw = np.empty(BUFFER + 64, np.uint8)
        start = (-raw.ctypes.data) % 64
        self.raw = raw
        self.buf = raw[start:start + BUFFER]
        self.buf[:] = np.arange(BUFFER) % 251
        self.base = self.buf.ctypes.data
        if jax:
            self._meet_the_types()

    def _meet_the_types(self):
        """Each type of the reentrancy cases exchanged once, so that no case
        is the first the layer meets of its type (the compiled core then
        asks Python about the type, which runs code, and a collection, at a
        point of its own)."""
        from . import reentrant

        g, np = self.g, self.np
        case = {"answer": "own", "callback": "none"}
        for kind in (reentrant.Hostile, reentrant.HostTested):
            for call in (g.from_dlpack, lambda x: g.export(x, max_version=(1, 0)), lambda x: g.wrap(x)):
                call(kind(case, np.arange(2.0), "none"))
        arrays = [np.arange(2.0)] + ([self.torch.arange(2.0)] if self.torch is not None else []) + (
            [self.jnp.arange(2.0)] if self.jnp is not None else [])
        for a in arrays:
            w = g.wrap(a)
            g.from_dlpack(w), np.from_dlpack(w), w.__dlpack__(max_version=(1, 0)), g.export(a, max_version=(1, 0))
            if self.torch is not None:
                self.torch.from_dlpack(w)

    def address(self, data):
        return self.base + data[1] if isinstance(data, list) else data

    def norm(self, text):
        """A message with addresses inside the buffer as BUF+offset (the
        buffer lies elsewhere in each child)."""
        def sub(m):
            v = int(m.group(0), 16)
            return f"BUF+{v - self.base}" if self.base <= v < self.base + 2 * BUFFER else m.group(0)

        return re.sub(r"0x[0-9a-f]+", sub, text)

    def rel(self, address):
        """An address as the same value in every child: near the buffer
        (a byte_offset of 2**63 aside, modulo 2**64), its offset from it; an
        address the case wrote (low or high), itself; any other (a copy's),
        "elsewhere"."""
        for half in (0, 2**63):
            d = (address - self.base - half) % 2**64
            if d < 2 * BUFFER or d > 2**64 - 2 * BUFFER:
                return ["BUF", half, d if d < 2**63 else d - 2**64]
        return address if address < 1 << 20 or address >= 1 << 62 else "elsewhere"


def _fields(case):
    """capsules.make's keywords for a case."""
    versioned = case["versioned"]
    name = {"right": None, "NULL": False, "used": "used_dltensor_versioned" if versioned else "used_dltensor",
            }.get(case["name"], case["name"])
    shape = list(case["shape"])
    ndim = case["ndim"] if case["ndim"] is not None else len(shape)
    if 0 <= ndim <= 64 and ndim > len(shape):
        shape += [1] * (ndim - len(shape))  # the struct never points past its arrays
    strides = case["strides"]
    width = max(len(shape), 1)
    kw = dict(versioned=versioned, name=name, version=tuple(case["version"]), flags=case["flags"],
              device=tuple(case["device"]), dtype=tuple(case["dtype"]), ndim=ndim, shape=tuple(shape),
              byte_offset=case["byte_offset"], null_shape=case["null_shape"], deleter=case["deleter"])
    if strides is None:
        kw["null_strides"] = True
        kw["strides"] = (1,) * width
    else:
        kw["strides"] = tuple((strides * 8)[:width])
    return kw


def _negative_strides(kw):
    return not kw.get("null_strides") and any(s < 0 for s in kw["strides"][: max(kw["ndim"], 0)])


def backed(env, case, kw):
    """Whether every byte of the tensor lies in the buffer (so it may be read)."""
    data = case["data"]
    ndim = kw["ndim"]
    if not isinstance(data, list) or not 0 <= ndim <= 64 or kw["null_shape"]:
        return False
    shape = kw["shape"][:ndim]
    code, bits, lanes = kw["dtype"]
    if bits % 8 or bits == 0 or lanes != 1 or any(n < 0 for n in shape):
        return False
    item = bits // 8
    if kw.get("null_strides"):
        strides, count = [], 1
        for n in reversed(shape):
            strides.insert(0, count)
            count *= n
    else:
        strides = list(kw["strides"][:ndim])
    if 0 in shape:
        return True
    count = 1
    for n in shape:
        count *= n
    if count > BUFFER:
        return False  # a broadcast over a few bytes: real, but no copy of it fits anywhere
    low = high = 0
    for n, s in zip(shape, strides):
        (low, high) = (low + (n - 1) * s, high) if s < 0 else (low, high + (n - 1) * s)
    first = data[1] + kw["byte_offset"]
    return first + low * item >= 0 and first + (high + 1) * item <= BUFFER


STANDARD = (BufferError, TypeError, ValueError)


def _empty_at(at):
    """Where an empty tensor's data is: NumPy may give an empty array over no
    real memory a fresh allocation, which can land anywhere, near the buffer
    too, so only an address inside the buffer is compared."""
    return at if not isinstance(at, list) or (at[1] == 0 and 0 <= at[2] <= BUFFER) else "elsewhere"


def _summary(env, v):
    np, g = env.np, env.g
    if isinstance(v, np.ndarray):
        at = env.rel(v.ctypes.data) if v.base is not None else "a copy"
        if v.size == 0:
            at = _empty_at(at)
        return ["array", list(v.shape), list(v.strides), v.dtype.str, at, v.flags.writeable]
    if env.torch is not None and isinstance(v, env.torch.Tensor):
        return ["tensor", list(v.shape), list(v.stride()), str(v.dtype), env.rel(v.data_ptr())]
    if isinstance(v, g.ArrayView):
        return ["view", env.rel(v.ptr), list(v.shape), list(v.strides), list(v.dl_dtype), list(v.device.dlpack),
                v.readonly]
    if isinstance(v, g.CapsuleInfo):
        return ["info", v.name, v.version, v.flags, list(v.device.dlpack), list(v.dl_dtype), list(v.shape),
                None if v.strides is None else list(v.strides), v.byte_offset, env.rel(v.data)]
    if type(v).__name__ == "PyCapsule":
        i = g.inspect(v)
        at = env.rel(i.data)
        if 0 in i.shape:  # an empty tensor: its data may be a fresh allocation (NumPy's)
            at = _empty_at(at)
        return ["capsule", i.name, i.version, i.flags, list(i.device.dlpack), list(i.dl_dtype), list(i.shape),
                None if i.strides is None else list(i.strides), i.byte_offset, at]
    return ["other", type(v).__name__]


def _call(env, entry, cap, case):
    g, np, capsules = env.g, env.np, env.capsules
    device = tuple(case["device"])
    mv = None if case["max_version"] is None else tuple(case["max_version"])
    if entry == "import":
        return g.from_dlpack(cap)
    if entry == "import producer":
        return g.from_dlpack(capsules.Producer(cap, device=device))
    if entry == "inspect":
        return g.inspect(cap)
    if entry == "view":
        return g.view(cap)
    if entry == "export":
        return g.export(capsules.Producer(cap, device=device), max_version=mv)
    if entry == "wrap numpy":
        return np.from_dlpack(g.wrap(cap))
    if entry == "wrap gpu_dlpack":
        return g.from_dlpack(g.wrap(capsules.Producer(cap, device=device)))
    if entry == "copy":
        out = g.from_dlpack(cap, copy=True)
        if env.base <= out.ctypes.data < env.base + BUFFER:
            raise AssertionError("copy=True shared the data")
        return out.copy()  # its address: somewhere else, as every copy's
    if entry == "torch":
        return env.torch.from_dlpack(g.wrap(capsules.Producer(cap, device=device)))
    if entry == "adapt versioned":
        return g.export(capsules.Producer(cap, device=device), max_version=(1, 0))
    if entry == "adapt legacy":
        return g.export(capsules.Producer(cap, device=device))
    if entry == "import host-tested":
        return g.from_dlpack(capsules.HostProducer(cap, device=device))
    if entry == "export host-tested":
        return g.export(capsules.HostProducer(cap, device=device), max_version=mv)
    if entry == "wrap host-tested":
        return np.from_dlpack(g.wrap(capsules.HostProducer(cap, device=device)))
    raise AssertionError(entry)


def run_case(env, case, entries, keep):
    """The outcome of each entry point on ``case``: a dict entry -> record.
    The records of the capsules made are appended to ``keep`` (their final
    deleter counts are read once the batch is collected)."""
    capsules = env.capsules
    out = {}
    kw = _fields(case)
    is_backed = backed(env, case, kw)
    for entry in entries:
        if entry == "copy" and not is_backed:
            continue  # a copy reads the data: only where the data is real
        if entry == "torch" and (env.torch is None or _negative_strides(kw) or kw["device"][0] not in (1, 2)):
            # torch 2.x aborts the process on negative strides (its own C++
            # throw), and now and then on device types it has no backend
            # for (an internal assert): its own crashes.
            continue
        cap, rec = capsules.make(env.buf, data=env.address(case["data"]) or 0, **kw)
        name_before = capsules.capsule_name(cap)
        result = {}
        error = None
        try:
            value = _call(env, entry, cap, case)
        except Exception as exc:
            error = exc
            value = None
        if error is not None:
            # Checked once the exception is no longer handled (its frames,
            # and what they hold, are gone).
            kind = type(error).__name__
            result["error"] = [kind, env.norm(str(error))]
            # A consumer library's own refusal of what it was handed is its
            # own (AssertionError from torch for CUDA memory without CUDA).
            consumer = entry in ("wrap numpy", "torch", "wrap host-tested") and not _raised_by_the_layer(error)
            standard = isinstance(error, STANDARD)
            error = None
            if not (standard or consumer):
                result["violation"] = f"{kind} is not a type the standard names"
            name_after = capsules.capsule_name(cap)
            calls = rec.calls
            taken = name_after is not None and name_after.startswith("used_") and name_after != name_before
            if not ((name_after == name_before and calls == 0) or (taken and calls == int(kw["deleter"]))):
                result["violation"] = (f"refused, and left the capsule named {name_after!r} (was "
                                       f"{name_before!r}) with {calls} deleter calls")
        else:
            result["ok"] = _summary(env, value)
            if entry in ("inspect", "view") and (rec.calls or capsules.capsule_name(cap) != name_before):
                result["violation"] = f"{entry} took the capsule"
            wrong = _not_the_struct(env, case, kw, value, is_backed)
            if wrong:
                result["violation"] = wrong
            del value
        out[entry] = result
        keep.append((entry, rec, int(kw["deleter"])))
        del cap
    # What the import refuses as malformed or of another major version,
    # inspect and view refuse too: a malformed tensor in the import's words.
    refused = out.get("import", {}).get("error")
    if refused and refused[0] == "BufferError" and (
            refused[1].startswith("malformed DLPack tensor") or "capsule; gpu_dlpack reads major version 1" in refused[1]):
        for entry in ("inspect", "view"):
            got = out.get(entry)
            if got is None or "violation" in got:
                continue
            same = got.get("error") == refused if refused[1].startswith("malformed") else (
                (got.get("error") or [None])[0] == "BufferError")
            if not same:
                got["violation"] = f"the import refused with {refused}, {entry} gave {got.get('error') or got.get('ok')}"
    return out


_LAYER = os.path.join(ROOT, "gpu_dlpack") + os.sep


def _raised_by_the_layer(error):
    tb = error.__traceback__
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last is not None and last.tb_frame.f_code.co_filename.startswith(_LAYER)


def _struct_bytes(env, case, kw):
    """The bytes of the tensor the struct describes, element by element in
    C order: only for a struct that lies inside the buffer (``backed``)."""
    np = env.np
    ndim = kw["ndim"]
    shape = list(kw["shape"][:ndim])
    item = kw["dtype"][1] // 8
    if kw.get("null_strides"):
        view = np.ndarray(shape, np.dtype((np.void, item)), env.buf, case["data"][1] + kw["byte_offset"])
    else:
        strides = [s * item for s in kw["strides"][:ndim]]
        view = np.ndarray(shape, np.dtype((np.void, item)), env.buf, case["data"][1] + kw["byte_offset"], strides)
    return np.ascontiguousarray(view).view(np.uint8).ravel()


def _not_the_struct(env, case, kw, value, is_backed):
    """How what an entry point accepted differs from the struct it was
    handed, in words; None when it is the struct's (its fields, its shape,
    its item size, where it starts, its values)."""
    np, g = env.np, env.g
    ndim = kw["ndim"]
    shape = list(kw["shape"][:ndim])
    if isinstance(value, g.ArrayView):  # view: where the first element is, the shape, the dtype
        read = [value.ptr, list(value.shape), list(value.dl_dtype), list(value.device.dlpack)]
        written = [(env.address(case["data"]) or 0) + kw["byte_offset"], shape, list(kw["dtype"]), list(kw["device"])]
        return None if read == written else f"view read {read}, not the struct's {written}"
    if isinstance(value, g.CapsuleInfo):  # inspect: every field as written
        strides = None if kw.get("null_strides") else list(kw["strides"][:ndim])
        read = [value.versioned, value.version, value.flags, list(value.device.dlpack), list(value.dl_dtype),
                list(value.shape), None if value.strides is None else list(value.strides), value.byte_offset,
                value.data]
        written = [kw["versioned"], kw["version"] if kw["versioned"] else None, kw["flags"] if kw["versioned"] else 0,
                   list(kw["device"]), list(kw["dtype"]), shape, strides, kw["byte_offset"],
                   env.address(case["data"]) or 0]
        return None if read == written else f"inspect read {read}, not the struct's {written}"
    if type(value).__name__ == "PyCapsule":  # passed on: the same tensor, and its import
        info = g.inspect(value)
        if list(info.shape) != shape:
            return f"the capsule passed on has the shape {list(info.shape)}, not the struct's {shape}"
        try:
            value = g.from_dlpack(value)
        except STANDARD:
            return None
    if env.torch is not None and isinstance(value, env.torch.Tensor):
        if list(value.shape) != shape:
            return f"the tensor's shape {list(value.shape)} is not the struct's {shape}"
        try:
            value = value.numpy() if value.device.type == "cpu" else None
        except (TypeError, RuntimeError):  # a dtype NumPy has not (bfloat16)
            value = None
    if not isinstance(value, np.ndarray):
        return None
    if list(value.shape) != shape:
        return f"the array's shape {list(value.shape)} is not the struct's {shape}"
    if value.size and case["data"] == 0:
        return "an array with elements over NULL data"
    counted = 1
    for n in value.shape:
        counted *= n or 1
    if counted * value.itemsize > 2**63 - 1:
        return "an array whose extents (zeros aside) hold more than 2**63 - 1 bytes"
    code, bits, lanes = kw["dtype"]
    if value.itemsize * 8 != bits * lanes and bits % 8 == 0:
        return f"the array's items are {value.itemsize} bytes, not the struct's {bits * lanes} bits"
    at = value.ctypes.data
    first = (env.address(case["data"]) + kw["byte_offset"]) % 2**64
    if value.size and env.base <= at < env.base + BUFFER and at != first:
        return f"the array starts at BUF+{at - env.base}, not at the struct's data + byte_offset"
    if value.size and is_backed and not np.array_equal(np.ascontiguousarray(value).view(np.uint8).ravel(),
                                                       _struct_bytes(env, case, kw)):
        return "the array's values are not the bytes the struct describes"
    return None


# -- reentrancy cases, run in a child ------------------------------------------------


def _values(v):
    """A small array's values, as text (complex and bool alike)."""
    return [repr(e) for e in v.ravel().tolist()] if v.size <= 64 else int(v.view("u1").sum())


def _r_summary(env, v, source):
    """What a reentrancy case gave (no address, only whether the memory is
    the source's)."""
    np_, g = env.np, env.g
    if isinstance(v, np_.ndarray):
        shares = None if v.size == 0 or source is None else v.ctypes.data == source
        return ["array", list(v.shape), v.dtype.str, _values(v), bool(v.flags.writeable), shares]
    if env.torch is not None and isinstance(v, env.torch.Tensor):
        return ["tensor", list(v.shape), str(v.dtype), _values(v.numpy()),
                None if v.numel() == 0 or source is None else v.data_ptr() == source]
    if type(v).__name__ == "PyCapsule":
        i = g.inspect(v)
        head = ["capsule", i.name, i.version, i.flags, list(i.device.dlpack), list(i.dl_dtype), list(i.shape),
                None if i.strides is None else list(i.strides), i.byte_offset,
                None if source is None else i.data + i.byte_offset == source]
        try:
            return head + [_r_summary(env, g.from_dlpack(v), source)]
        except STANDARD as exc:
            return head + [["error", type(exc).__name__, _addresses_out(str(exc))]]
    return ["other", type(v).__name__]


def _given_values(summary):
    """The values a reentrancy case's result holds (``_r_summary``'s), or
    None where it holds none (a capsule the layer refused to import)."""
    if summary[0] in ("array", "tensor"):
        return summary[3]
    if summary[0] == "capsule" and summary[-1][0] != "error":
        return _given_values(summary[-1])
    return None


def _addresses_out(text):
    return re.sub(r"0x[0-9a-f]+", "0x?", text)


def _source_array(env, case):
    """The case's array: (the object to export, NumPy's view of it, its address)."""
    np_ = env.np
    from . import reentrant

    dtype = reentrant.DTYPES[case["dtype"]]
    shape = reentrant.SHAPES[case["shape"]]
    a = (np_.arange(max(1, int(np_.prod(shape)))) % 3).astype(dtype)[: int(np_.prod(shape))].reshape(shape)
    if case["readonly"]:
        a.flags.writeable = False
    kind = case["producer"]
    if kind == "torch" and env.torch is not None:
        t = env.torch.from_numpy(a.copy())
        return t, a, t.data_ptr() if t.numel() else None
    if kind == "jax" and env.jnp is not None:
        j = env.jnp.asarray(a)
        return j, a, j.unsafe_buffer_pointer() if j.size else None
    return a, a, a.ctypes.data if a.size else None


def run_reentrant_case(env, case, keep):
    """The outcome of one reentrancy case: a dict entry -> record (one
    entry per case), the records of its capsules appended to ``keep``."""
    from gpu_dlpack import _producer, _versions

    from . import reentrant

    g, np_ = env.g, env.np
    kind = case["producer"]
    entry = case["entry"]
    if kind in ("torch", "jax") and (env.torch is None if kind == "torch" else env.jnp is None):
        kind = "numpy"
    obj, array, source = _source_array(env, dict(case, producer=kind))
    # What an accepted call may give: the values of an array the case made,
    # the source or what a finalizer puts in its place (another array, a
    # capsule of its own).
    made = [_values(array), _values(np_.arange(5, dtype=np_.int16)), _values(np_.arange(2.0))]
    if entry == "torch" and env.torch is None:
        entry = "wrap numpy"
    # Where the finalizer runs: the first allocation of a call is a point
    # of the call only where the call is the wrapper's __dlpack__ (its
    # request, made first), or a consumer library's (which allocates before
    # it asks); an array of a library runs no code of the case's, and has
    # no other point.
    when = case["when"]
    wrapped = entry.startswith("wrap") or entry == "torch"
    if kind in ("numpy", "torch", "jax"):
        entry = entry if wrapped else "wrap dlpack"
        when = "first allocation"
    elif when == "first allocation" and not wrapped:
        when = "in __dlpack__"
    elif when == "in host test" and kind == "plain":
        when = "in __dlpack__"
    if when == "first allocation":
        case = dict(case, action="equal copy")
        source = None  # the memory may be the copy's: compared by value
    producer = None
    if kind in ("plain", "host-tested"):
        producer = (reentrant.Hostile if kind == "plain" else reentrant.HostTested)(case, array, when)
        obj = producer
    mv = None if case["max_version"] is None else tuple(case["max_version"])
    _producer._old_producers.clear()  # each case as the first of its type
    state = {"producer": producer, "array": array, "when": when}
    result = {}
    try:
        wrapper = g.wrap(obj) if entry.startswith("wrap") or entry == "torch" else None
    except Exception as exc:
        wrapper, result = None, {"error": ["wrap: " + type(exc).__name__, _addresses_out(str(exc))]}
    state["wrapper"] = wrapper
    if wrapper is not None and when == "first allocation":
        del obj, array, state["array"]  # the wrapper holds the only reference
    if not result:
        undo = reentrant.arm(case, state)
        value = error = None
        try:
            reentrant.start(state)
            if entry == "import":
                value = g.from_dlpack(obj)
            elif entry == "export":
                value = g.export(obj, max_version=mv)
            elif entry == "wrap numpy":
                value = np_.from_dlpack(wrapper)
            elif entry == "wrap gpu_dlpack":
                value = g.from_dlpack(wrapper)
            elif entry == "wrap dlpack":
                value = wrapper.__dlpack__(max_version=mv)
            else:
                value = env.torch.from_dlpack(wrapper)
        except Exception as exc:
            error = exc
        finally:
            undo()
        if error is not None:
            result["error"] = [type(error).__name__, _addresses_out(str(error))]
            consumer = entry in ("wrap numpy", "torch") and not _raised_by_the_layer(error)
            if not (isinstance(error, STANDARD + (AttributeError, MemoryError)) or consumer):
                result["violation"] = f"{type(error).__name__} is not a type the standard names"
            error = None
        else:
            result["ok"] = _r_summary(env, value, source)
            values = _given_values(result["ok"])
            if values is not None and values not in made:
                result["violation"] = f"gave the values {values}, of no array the case made"
        del value
    # Nothing of the call is left behind: no floor of a call, no producer
    # marked as asked.
    left = [what for what, there in (("a floor of a call", _versions._local.floor is not None or
                                      bool(_versions.calls_with_own_floor)),
                                     ("a producer marked as asked", bool(_producer.asked.ids))) if there]
    if left:
        result["violation"] = "left behind: " + ", ".join(left)
        _versions._local.floor = None
        del _versions.calls_with_own_floor[:], _producer.asked.ids[:]
    if producer is not None:
        keep.extend((entry, rec, 1) for rec in producer.records)
        producer.trigger = None
    return {entry: result}


def child(path, start, entries, with_torch, progress, family="capsules"):
    """Run the cases of ``path`` from ``start``, printing one JSON line per
    case (and one per batch with the final deleter counts)."""
    import gc

    env = _Env(with_torch, jax=family == "reentrancy")
    with open(path) as f:
        cases = json.load(f)
    fd = os.open(progress, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    capsules = env.capsules
    batch, keep = [], []
    stray = capsules.stray_calls

    def flush():
        nonlocal stray
        gc.collect()
        finals = {}
        for i, entry, rec, want in keep:
            if rec.calls != want:
                finals.setdefault(str(i), []).append(f"{entry}: deleter ran {rec.calls} times, not {want}")
        now = capsules.stray_calls
        line = {"batch": batch[:], "finals": finals, "stray": now - stray}
        stray = now
        print(json.dumps(line), flush=True)
        batch.clear()
        keep.clear()

    for i in range(start, len(cases)):
        os.pwrite(fd, f"{i:>12}".encode(), 0)
        made = []
        if family == "capsules":
            outcome = run_case(env, cases[i], entries, made)
        else:
            outcome = run_reentrant_case(env, cases[i], made)
        keep.extend((i, e, r, w) for e, r, w in made)
        batch.append(i)
        print(json.dumps({"i": i, "outcome": outcome}), flush=True)
        if len(batch) >= 100:
            flush()
    if batch:
        flush()
    os.close(fd)


# -- the parent: run the cases in a child, restarted after a crash ------------------


def _run(cases_file, n, entries, with_torch, env_extra, timeout, family="capsules"):
    """Outcomes, crashes and per-batch findings of the cases."""
    outcomes, crashes, findings = {}, [], []
    start = 0
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.update(env_extra or {})
    while start < n:
        with tempfile.NamedTemporaryFile(prefix="fuzz-progress-", delete=False) as p:
            progress = p.name
        cmd = [sys.executable, "-c",
               "import sys; from tests.fuzz_capsules import child; "
               f"child({cases_file!r}, {start}, {list(entries)!r}, {with_torch!r}, {progress!r}, {family!r})"]
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
            rc, stdout, stderr = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired as exc:
            rc = "timeout"
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        for line in stdout.splitlines():
            if not line.startswith("{"):
                continue
            rec = json.loads(line)
            if "i" in rec:
                outcomes[rec["i"]] = rec["outcome"]
            else:
                for i, what in rec["finals"].items():
                    findings.append((int(i), "; ".join(what)))
                if rec["stray"]:
                    findings.append((rec["batch"][0], f"{rec['stray']} deleter calls on tensors already freed "
                                                      f"in cases {rec['batch'][0]}..{rec['batch'][-1]}"))
        try:
            with open(progress) as f:
                text = f.read().strip()
            os.unlink(progress)
        except OSError:
            text = ""
        if rc == 0:
            break
        at = int(text) if text else start
        crashes.append((at, rc, stderr[-3000:]))
        start = at + 1
    return outcomes, crashes, findings


def fuzz(n=2000, seed=None, entries=ENTRIES, with_torch=None, env=None, timeout=900, family="capsules"):
    """Draw ``n`` cases of ``family`` ("capsules": crafted structs;
    "reentrancy": Python code run inside the layer's calls) and run them.
    Returns a report dict: cases, seed, runs per entry, crashes and
    violations (each with the case)."""
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    if with_torch is None:
        try:
            import torch  # noqa: F401
            with_torch = True
        except ImportError:
            with_torch = False
    started = time.perf_counter()
    cases = draw(n, seed, family)
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="fuzz-cases-", delete=False) as f:
        json.dump(cases, f)
        cases_file = f.name
    try:
        outcomes, crashes, findings = _run(cases_file, len(cases), entries, with_torch, env, timeout, family)
    finally:
        os.unlink(cases_file)
    report = {"family": family, "cases": len(cases), "seed": seed, "seconds": 0.0, "runs": {}, "crashes": [],
              "violations": []}
    for at, rc, err in crashes:
        report["crashes"].append({"case": cases[at] if at < len(cases) else None, "index": at, "rc": rc,
                                  "stderr": err})
    for i, what in findings:
        report["violations"].append({"index": i, "case": cases[i], "what": what})
    for i, outcome in outcomes.items():
        for entry, result in outcome.items():
            report["runs"][entry] = report["runs"].get(entry, 0) + 1
            if "violation" in result:
                report["violations"].append({"index": i, "entry": entry, "case": cases[i],
                                             "what": result["violation"],
                                             "result": result.get("error") or result.get("ok")})
    report["seconds"] = round(time.perf_counter() - started, 1)
    return report


def describe(report, limit=5) -> str:
    """A few lines: the counts, then the first findings of each kind."""
    runs = ", ".join(f"{k}: {v}" for k, v in sorted(report["runs"].items()))
    family = "" if report.get("family", "capsules") == "capsules" else f" of {report['family']}"
    lines = [f"{report['cases']} cases{family} (seed {report['seed']}) in {report['seconds']} s; "
             f"runs: {runs}",
             f"crashes: {len(report['crashes'])}, violations: {len(report['violations'])}"]
    for kind in ("crashes", "violations"):
        seen = {}
        for item in report[kind]:
            what = item.get("what") or item.get("entry") or str(item.get("rc"))
            seen.setdefault(what, item)
        for what, item in list(seen.items())[:limit]:
            lines.append(f"{kind[:-1]} ({what}): " + json.dumps(item, default=str)[:1500])
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--family", choices=["capsules", "reentrancy"], default="capsules")
    args = parser.parse_args(argv)
    report = fuzz(args.cases, args.seed, with_torch=False if args.no_torch else None, family=args.family)
    print(describe(report))
    return 1 if report["crashes"] or report["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
