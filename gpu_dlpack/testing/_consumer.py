"""The rules of an importer (``from_dlpack``) and ``check_consumer``,
which hands it producers and capsules of its own, each check in a child
process (``_children``) where the importer has a name; the observations
gpu-dlpack doctor reads too."""

from __future__ import annotations

import ctypes
import gc
import json
import struct
from typing import Callable

import numpy as np

from .. import _capsule, _compiled
from .._devices import DLDeviceType
from .._export import export, wrap
from .._import import from_dlpack
from .._peers import ALIGNMENT  # bytes: the "unaligned-copies" consumers import such data in place
from .._versions import DLPACK_VERSION
from . import _children
from ._report import (ARRAY_API, DLPACK_FLAGS, DLPACK_OWNERSHIP, DLPACK_VERSIONING, DTYPES, FAILED, FROM_DLPACK,
                      NOT_APPLICABLE, PASSED, SHAPES, Report, Row, Rule, listed, _asked, _run, _said, values)

#: The importer's rules, in order: id -> Rule, numbered under rule 9
#: (import) of gpu_dlpack's rules page; ``faults``: the consumer faults of
#: gpu_dlpack's table of peers (``faults`` in ``gpu_dlpack/_peers.py``)
#: that break it.
CONSUMER_RULES: dict[str, Rule] = {r.id: r for r in (
    Rule("9.1", "asks-versioned",
         "from_dlpack asks the producer for a versioned capsule (max_version=(1, 0) or newer): only it can say "
         "that data is read-only", FROM_DLPACK, ("legacy-only",)),
    Rule("9.2", "old-producer-asked-again",
         "a producer whose __dlpack__ takes no max_version (written before the standard's 2023.12 version) is "
         "still imported: the consumer asks again without it", ARRAY_API),
    Rule("9.3", "in-place",
         "copy=None reuses the producer's memory where it can: host data aligned to 64 bytes is imported in "
         "place", FROM_DLPACK),
    Rule("9.4", "unaligned-in-place",
         "...and host data 4 bytes past a 64-byte boundary (the alignment of its dtype) is imported in place too",
         FROM_DLPACK, ("unaligned-copies",)),
    Rule("9.5", "copy-true-copies",
         "copy=True always copies: the import's memory is apart from the producer's, with the same values",
         FROM_DLPACK, ("copy-shares",)),
    Rule("9.6", "read-only-honoured",
         "a capsule that says READ_ONLY is imported read-only, copied or refused: no write through the import "
         "reaches the producer's memory", DLPACK_FLAGS, ("read-only-ignored",)),
    Rule("9.7", "imports-the-array",
         "the import holds the producer's array: its shape, its dtype (never narrowed) and its values, for every "
         "dtype the library has, 0-d and empty arrays too", FROM_DLPACK,
         ("narrows-64-bit", "narrows-float64", "reads-padded-subbyte-packed")),
    Rule("9.8", "negative-strides",
         "an array with a negative stride (a[::-1]) is imported with its values in their places", FROM_DLPACK,
         ("negative-strides", "non-compact-strides")),
    Rule("9.9", "stepped-strides",
         "an array with a step (a[::2]) is imported with its values in their places", FROM_DLPACK,
         ("non-compact-strides",)),
    Rule("9.10", "fortran-order",
         "a transposed array (Fortran order) is imported with its values in their places", FROM_DLPACK,
         ("c-order-only",)),
    Rule("9.11", "unreached-negative-stride",
         "a negative stride on an axis of length 1, which reaches no element, is imported as any other",
         FROM_DLPACK, ("negative-strides-anywhere",)),
    Rule("9.12", "unreachable-device-refused",
         "a capsule of memory on a device the library cannot reach (CUDA, without a GPU build) raises, its "
         "tensor freed exactly once: it is never read as host memory, and never crashes the process",
         FROM_DLPACK, ("gpu-import-crashes",)),
    Rule("9.13", "freed-once",
         "the producer's tensor is freed exactly once, when the import is gone (its deleter called once)",
         DLPACK_OWNERSHIP),
    Rule("9.14", "refused-freed-once",
         "a capsule the consumer refuses (a dtype code DLPack does not define) raises, and its tensor is freed "
         "exactly once: by the consumer that claimed it, or by its producer where it was left unconsumed",
         DLPACK_OWNERSHIP),
    Rule("9.15", "unknown-major-refused",
         "a versioned capsule of a major version newer than the consumer's raises, its tensor freed exactly "
         "once: the consumer checks the version before it reads another field", DLPACK_VERSIONING),
    Rule("9.16", "malformed-refused",
         "a capsule no producer should make (NULL data with elements, a negative extent, a NULL shape, a vector "
         "dtype, more bytes than the address space holds, a stride past its end) raises, its tensor freed "
         "exactly once, and never crashes the process", DLPACK_OWNERSHIP),
)}

# -- the importer's rules --------------------------------------------------------


def _aligned(a, offset=0) -> np.ndarray:
    """A copy of ``a`` whose data starts ``offset`` bytes past a 64-byte
    boundary: what a consumer does with alignment shows the same on every run."""
    raw = np.empty(a.nbytes + 2 * ALIGNMENT, np.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT + offset
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _address_of(x) -> int | None:
    """The address of the first element of ``x`` (any DLPack producer), read
    from its capsule as gpu_dlpack exports it (None: it cannot)."""
    try:
        info = _capsule.read(export(x, max_version=(1, 0)))
    except Exception:
        return None
    return info.data + info.byte_offset


def _write_through(out, source: np.ndarray) -> tuple[bool, str]:
    """Write into ``out``, an import of read-only ``source``: (whether the
    source kept its values, what happened). An array that takes no item
    assignment (tvm-ffi's Tensor) is written through NumPy's import of it,
    where that is writeable."""
    index = (0,) * source.ndim
    before = source[index].item()
    try:
        out[index] = before + 41  # a Python scalar: every library takes one
    except Exception as exc:
        refused = f"refuses writes ({type(exc).__name__})"
        try:
            view = np.from_dlpack(out)
        except Exception:
            return True, refused
        if not view.flags.writeable:
            return True, refused + "; its export says READ_ONLY"
        view[index] = before + 41
        if source[index].item() != before:
            return False, "its export is writeable, and a write through it reaches the read-only source"
        return True, "the write went to a copy"
    if source[index].item() != before:
        return False, "writes into the read-only source"
    return True, "the write went to a copy"


class _Given:
    """A producer with ``__dlpack__`` alone (no C exchange API): the capsule
    ``export`` makes of its host array, as the consumer asks; each request
    kept."""

    def __init__(self, a):
        self.a = a
        self.asked: list = []

    def __dlpack__(self, **kw):
        self.asked.append(kw)
        return export(self.a, **kw)

    def __dlpack_device__(self):
        return (1, 0)


class _Old(_Given):
    """A producer whose ``__dlpack__`` takes ``stream`` alone (a type of its
    own: a consumer may remember what a type takes)."""

    def __dlpack__(self, stream=None):
        return super().__dlpack__(stream=stream)


class _Consumer:
    """The importer under test, and how its imports are read."""

    def __init__(self, fn: Callable, dtypes):
        self.fn, self.dtypes = fn, dtypes

    @staticmethod
    def held(x) -> np.ndarray | None:
        """A host copy of an import, through its own DLPack, else
        ``numpy.array`` (None: it cannot be read)."""
        try:
            return np.array(from_dlpack(x, device="cpu", copy=True))
        except Exception:
            pass
        try:
            return np.array(x)
        except Exception:
            return None

    def imports(self, a, **keywords):
        """(fn's import of ``wrap(a)``, None), or (None, the evidence)."""
        try:
            return self.fn(wrap(a), **keywords), None
        except Exception as exc:
            return None, f"{self.call(keywords)} raised {_said(exc)}"

    @staticmethod
    def call(keywords=None) -> str:
        return f"from_dlpack({', '.join(['wrap(a)'] + [f'{k}={v!r}' for k, v in (keywords or {}).items()])})"


# -- what an importer does, as the rules and gpu-dlpack doctor read it ------------


def _host_data(offset=0) -> np.ndarray:
    return _aligned(values((2, 3), "float32"), offset)


def _first_ask(fn) -> tuple[dict | None, Exception | None]:
    """(the keywords ``fn`` first passed to a producer with ``__dlpack__``
    alone, or None where it asked nothing; what ``fn`` raised, or None)."""
    p = _Given(_host_data())
    try:
        fn(p)
    except Exception as exc:
        return (p.asked[0] if p.asked else None), exc
    return (p.asked[0] if p.asked else None), None


def _imported_at(fn, offset: int) -> tuple:
    """(the address of ``fn(wrap(a))``, None where it cannot be read; a's)
    for host data ``offset`` bytes past a 64-byte boundary; what ``fn``
    raised is raised."""
    a = _host_data(offset)
    return _address_of(fn(wrap(a))), a.ctypes.data


def _copy_import(fn) -> tuple:
    """(``fn(wrap(a), copy=True)``, whether the request reached the
    producer, ``a``); what ``fn`` raised is raised."""
    a = _host_data()
    w = wrap(a)
    got = fn(w, copy=True)
    return got, bool(w.last_request and w.last_request.get("copy") is True), a


def _read_only_import(fn) -> tuple:
    """(whether no write through ``fn``'s import of read-only data reaches
    it, None where it cannot be told; what happened; what ``fn`` raised)."""
    a = _host_data()
    a.flags.writeable = False
    w = wrap(a)
    try:
        got = fn(w)
    except Exception as exc:
        if (w.last_request or {}).get("max_version") is None:
            return None, "asks for legacy capsules only, so read-only data is refused", exc
        return None, f"import failed: {_said(exc)}", exc
    return (*_write_through(got, a), None)


def _check_asks(c: _Consumer):
    asked, exc = _first_ask(c.fn)
    if asked is None:
        return FAILED, (f"from_dlpack(x) raised {_said(exc)} before it called x.__dlpack__" if exc is not None
                        else "from_dlpack(x) never called x.__dlpack__")
    mv = asked.get("max_version")
    if mv is None or mv[0] < 1:
        return FAILED, f"from_dlpack(x) asked {_asked(None, **asked)}: no versioned capsule"
    return PASSED, ""


def _check_old_producer(c: _Consumer):
    a = _host_data()
    p = _Old(a)
    try:
        got = c.fn(p)
    except Exception as exc:
        return FAILED, (f"from_dlpack(x) of an x whose __dlpack__ takes stream= alone, asked "
                        f"{', '.join(_asked(p, **kw) for kw in p.asked) or 'nothing'}, raised {_said(exc)}")
    held = c.held(got)
    if held is None or not np.array_equal(held, a):
        return FAILED, f"from_dlpack(x) of an x whose __dlpack__ takes stream= alone holds {_shown(held)}"
    return PASSED, ""


def _shown(held) -> str:
    return "what cannot be read" if held is None else f"{held.dtype} {held.tolist()}"


def _import_in_place_rule(offset: int):
    def check(c: _Consumer):
        try:
            where, source = _imported_at(c.fn, offset)
        except Exception as exc:
            return FAILED, f"{_Consumer.call()} raised {_said(exc)}"
        if where is None:
            return NOT_APPLICABLE, "the import's address cannot be read (it exports no DLPack)"
        if where != source:
            place = f"{offset} bytes past a 64-byte boundary" if offset else "aligned to 64 bytes"
            return FAILED, f"{_Consumer.call()} of host data {place} copied it (to {where:#x})"
        return PASSED, ""
    return check


def _check_copy(c: _Consumer):
    call = _Consumer.call({"copy": True})
    try:
        got, _forwarded, a = _copy_import(c.fn)
    except TypeError as exc:
        return NOT_APPLICABLE, f"from_dlpack takes no copy= ({_said(exc)})"
    except Exception as exc:
        return FAILED, f"{call} raised {_said(exc)}"
    held, where = c.held(got), _address_of(got)
    if where == a.ctypes.data:
        return FAILED, f"{call} gave the producer's own memory ({where:#x})"
    if held is None or not np.array_equal(held, a):
        return FAILED, f"{call} holds {_shown(held)}"
    return PASSED, ""


def _check_read_only(c: _Consumer):
    kept, what, exc = _read_only_import(c.fn)
    if exc is not None:  # refused: honoured, where it asked for a capsule that says READ_ONLY
        return ((NOT_APPLICABLE, "it asks for legacy capsules, which read-only data cannot travel in (rule 9.1)")
                if what.startswith("asks for legacy") else (PASSED, ""))
    return (PASSED, "") if kept else (FAILED, f"{_Consumer.call()} of read-only data: {what}")


def _check_holds(c: _Consumer):
    wrong, imported = [], 0
    for dtype in c.dtypes:
        for shape in SHAPES:
            a = _aligned(values(shape, dtype))  # as the allocator may place it (JAX 0.12 misreads float4 so)
            got, refused = c.imports(a)
            if refused:
                continue  # a dtype, or a shape, the library does not have
            imported += 1
            held = c.held(got)
            if held is None:
                wrong.append(f"{dtype} {shape}: the import cannot be read")
            elif held.shape != shape or held.dtype != a.dtype:
                wrong.append(f"{dtype} {shape}: the import is {held.dtype} {held.shape}")
            elif not np.array_equal(held, a):
                wrong.append(f"{dtype} {shape}: it holds {held.tolist()}, not {a.tolist()}")
    if not imported:
        return NOT_APPLICABLE, "it imported none of the dtypes asked"
    if wrong:
        return listed(wrong)
    return PASSED, ""


def _layouts():
    base = _aligned(values((12,), "float32"))
    return {
        "negative-strides": ("a[::-1]", base[::-1]),
        "stepped-strides": ("a[::2]", base[::2]),
        "fortran-order": ("a.reshape(3, 4).T", base.reshape(3, 4).T),
        "unreached-negative-stride": (
            "shape (1, 3), strides (-12, 4)",
            np.lib.stride_tricks.as_strided(base[3:], shape=(1, 3), strides=(-12, 4))),
    }


def _layout_outcome(c: _Consumer, a, producer: Callable = wrap) -> str:
    """What ``from_dlpack`` makes of ``wrap(a)``: "zero-copy", "copies",
    "wrong values" (of the import read through its own DLPack), "wrong
    values (its own reading)" (of ``numpy.asarray`` of it: Paddle 3.3's
    reads garbage) or "raises: <error>" (gpu-dlpack doctor's words)."""
    try:
        got = c.fn(producer(a))
    except Exception as exc:
        return f"raises: {_said(exc)}"
    held = c.held(got)
    if held is None or held.shape != a.shape or not np.array_equal(held, a):
        return "wrong values"
    if hasattr(type(got), "__array__"):
        try:
            own = np.asarray(got)
        except Exception:
            own = None
        if own is None or not np.array_equal(own, a):
            return "wrong values (its own reading)"
    return "zero-copy" if _address_of(got) == a.ctypes.data else "copies"


def _layout_rule(rule_id: str):
    def check(c: _Consumer):
        what, a = _layouts()[rule_id]
        # A stride of an axis of length 1 is one a producer may leave out
        # (NumPy 2.2 does, in a legacy capsule of a C-contiguous array): a
        # capsule of the checks' own says it.
        outcome = _layout_outcome(c, a, _Counted if rule_id == "unreached-negative-stride" else wrap)
        # "<the call> of <what>: <outcome>" (gpu-dlpack doctor reads the outcome)
        return PASSED if outcome in ("zero-copy", "copies") else FAILED, f"{_Consumer.call()} of {what}: {outcome}"
    return check


# The struct of a capsule the checks make is packed as dlpack.h lays it out
# (_capsule.VERSIONED_HEAD, LEGACY_HEAD); the core's counted_capsule sets
# manager_ctx and the deleter and counts the deleter's calls in the int64
# after the struct, which the shape and the strides follow.
_VERSIONED_HEAD, _LEGACY_HEAD = _capsule.VERSIONED_HEAD, _capsule.LEGACY_HEAD


class _Counted:
    """A producer of capsules over a C-contiguous NumPy array's memory,
    labelled with ``device`` and DLPack dtype ``(code, bits)``, whose deleter
    counts its calls (``calls()``: one number per capsule made). ``wrong``
    writes what no producer should: ``version`` (a versioned capsule's),
    ``data`` (an address), ``shape``, ``strides`` (in elements), ``lanes``,
    ``null_shape``."""

    def __init__(self, a, device=(1, 0), dtype=(2, 32), **wrong):
        self.a, self.device, self.dtype, self.wrong = a, device, dtype, wrong
        self.made: list = []  # (the struct's memory, its head's size) of each capsule

    def __dlpack__(self, **kw):
        mv = kw.get("max_version")
        versioned = mv is not None and mv[0] >= 1
        head = _VERSIONED_HEAD if versioned else _LEGACY_HEAD
        a, ndim, wrong = self.a, self.a.ndim, self.wrong
        mem = ctypes.create_string_buffer(head.size + 8 + 16 * ndim)
        at = ctypes.addressof(mem) + head.size + 8
        shape_at = 0 if not ndim or wrong.get("null_shape") else at
        tensor = (wrong.get("data", a.ctypes.data), *self.device, ndim, *self.dtype, wrong.get("lanes", 1), shape_at,
                  at + 8 * ndim if ndim else 0, 0)
        if versioned:
            head.pack_into(mem, 0, *wrong.get("version", DLPACK_VERSION), 0, 0, 0, *tensor)
        else:
            head.pack_into(mem, 0, *tensor, 0, 0)
        struct.pack_into(f"<{2 * ndim}q", mem, head.size + 8, *wrong.get("shape", a.shape),
                         *wrong.get("strides", [n // a.itemsize for n in a.strides]))
        self.made.append((mem, head.size))
        return _compiled.counted_capsule(ctypes.addressof(mem), (mem, a), versioned)

    def __dlpack_device__(self):
        return self.device

    def calls(self) -> list:
        return [ctypes.c_int64.from_buffer(mem, at).value for mem, at in self.made]


def _freed_once(p: _Counted, what: str) -> tuple:
    """The row of the capsules ``p`` made, every one of them gone: each
    freed exactly once, by its consumer or, left unconsumed, by its capsule."""
    gc.collect()
    calls = p.calls()
    if any(n == 0 for n in calls):
        return FAILED, f"from_dlpack(x) {what}, and its tensor was never freed (its deleter never ran)"
    if any(n > 1 for n in calls):
        return FAILED, f"from_dlpack(x) {what}, and its tensor was freed {max(calls)} times (its deleter called again)"
    return PASSED, ""


def _check_unreachable(c: _Consumer):
    p = _Counted(_host_data(), device=(int(DLDeviceType.CUDA), 0))
    try:
        got = c.fn(p)
    except Exception:
        got = None
    if got is None:  # (what the error's frames held is let go with it)
        return _freed_once(p, "of a capsule of CUDA memory raised")
    try:
        device = _capsule.read(export(got, max_version=(1, 0))).device
    except Exception:
        device = None
    if device is not None and device.dlpack[0] != int(DLDeviceType.CPU):
        return PASSED, ""  # it holds the memory as the device's, untouched
    return FAILED, f"from_dlpack(x) of a capsule of CUDA memory gave an array on {device or 'a device it hides'}"


def _check_freed_once(c: _Consumer):
    p = _Counted(_host_data())
    try:
        got = c.fn(p)
    except Exception as exc:
        return NOT_APPLICABLE, f"from_dlpack(x) raised {_said(exc)}"
    del got
    return _freed_once(p, "of an x gone")


def _check_refused(c: _Consumer):
    p = _Counted(_host_data(), dtype=(99, 32))
    try:
        c.fn(p)
    except Exception:
        pass  # (what the error's frames held is let go with it, after this block)
    else:
        return NOT_APPLICABLE, "it imports a capsule of dtype code 99 (no dtype of DLPack): it refused nothing"
    return _freed_once(p, "of a capsule of dtype code 99 raised")


def _check_unknown_major(c: _Consumer):
    p = _Counted(_host_data(), version=(DLPACK_VERSION[0] + 1, 0))
    try:
        got = c.fn(p)
    except Exception:
        got = None
    asked = [capsule_kind for capsule_kind in p.made if capsule_kind[1] == _VERSIONED_HEAD.size]
    if not asked:
        return NOT_APPLICABLE, "it asks for legacy capsules, which carry no version (rule 9.1)"
    if got is not None:
        return FAILED, f"from_dlpack(x) of a capsule of DLPack {DLPACK_VERSION[0] + 1}.0 imported it"
    return _freed_once(p, f"of a capsule of DLPack {DLPACK_VERSION[0] + 1}.0 raised")


#: What no producer writes, each in a capsule the importer must refuse: what
#: it is -> _Counted's ``wrong``.
_MALFORMED = {
    "NULL data for 6 elements": {"data": 0},
    "an extent of -1": {"shape": (2, -1)},
    "ndim 2 and a NULL shape": {"null_shape": True},
    "4 lanes (a vector dtype)": {"lanes": 4},
    # hostile: what the layer's fuzzers make, an import of which would read
    # or index past the end of the address space
    "shape (2**62, 3): more bytes than an address space holds": {"shape": (1 << 62, 3)},
    "a stride of 2**61 elements: past the end of the address space": {"strides": (1 << 61, 1)},
}


def _check_malformed(c: _Consumer):
    wrong_ones = []
    for what, wrong in _MALFORMED.items():
        _children.in_case(what)
        p = _Counted(_host_data(), **wrong)
        try:
            got = c.fn(p)
        except Exception:
            got = None
        if got is not None:
            del got  # (never read: the import of a capsule no producer should make)
            wrong_ones.append(f"from_dlpack(x) of a capsule of {what} imported it")
            continue
        outcome, evidence = _freed_once(p, f"of a capsule of {what} raised")
        if outcome != PASSED:
            wrong_ones.append(evidence)
    _children.in_case(None)
    return (FAILED, "; ".join(wrong_ones)) if wrong_ones else (PASSED, "")


_CONSUMER_CHECKS: dict[str, Callable[[_Consumer], tuple]] = {
    "asks-versioned": _check_asks,
    "old-producer-asked-again": _check_old_producer,
    "in-place": _import_in_place_rule(0),
    "unaligned-in-place": _import_in_place_rule(4),
    "copy-true-copies": _check_copy,
    "read-only-honoured": _check_read_only,
    "imports-the-array": _check_holds,
    "negative-strides": _layout_rule("negative-strides"),
    "stepped-strides": _layout_rule("stepped-strides"),
    "fortran-order": _layout_rule("fortran-order"),
    "unreached-negative-stride": _layout_rule("unreached-negative-stride"),
    "unreachable-device-refused": _check_unreachable,
    "freed-once": _check_freed_once,
    "refused-freed-once": _check_refused,
    "unknown-major-refused": _check_unknown_major,
    "malformed-refused": _check_malformed,
}


def child(spec: str) -> None:
    """Run the checks ``spec`` names (JSON) in this process, a line before
    and after each."""
    _children.IN_CHILD = True
    spec = json.loads(spec)
    c = _Consumer(_children.resolved(spec["target"]), tuple(spec["dtypes"]))
    for rule_id in spec["rules"]:
        print(_children.MARK + json.dumps({"start": rule_id}), flush=True)
        outcome, evidence = _run(_CONSUMER_CHECKS[rule_id], c)
        print(_children.MARK + json.dumps({"done": rule_id, "row": [outcome, evidence]}), flush=True)


def _row(rule: Rule, outcome: str, evidence: str) -> Row:
    """The row of what a child or a check found."""
    if outcome == _children.DIED:
        return Row(rule, FAILED, f"from_dlpack {evidence} in this check")
    if outcome == _children.NOT_RUN:
        return Row(rule, FAILED, f"not run: {evidence} before the check began")
    return Row(rule, outcome, evidence)


def check_consumer(from_dlpack: Callable | str, *, dtypes=DTYPES, name: str | None = None,
                   isolate: bool | None = None) -> Report:
    """Check a library's importer against every rule of a DLPack consumer.

    Parameters
    ----------
    from_dlpack : callable or str
        The importer under test: ``from_dlpack(x, **keywords)`` of a DLPack
        producer ``x``, as the standard's ``from_dlpack`` (``copy=`` is
        checked where it takes it), or ``"module:name"`` of one.
    dtypes : sequence of str, optional
        The dtypes imported (default: every one DLPack and NumPy share).
    name : str, optional
        What the report calls it (default: its module and name).
    isolate : bool, optional
        Run the checks in a child process, so that an importer that crashes
        fails the rule it crashed on instead of ending the caller (default:
        where ``from_dlpack`` is a module's function that a child process
        imports by name; True where it is not is a ``ValueError``).

    Returns
    -------
    Report
        A row per rule of `CONSUMER_RULES`: passed, failed with its
        evidence, or not applicable and why. Imports are read back through
        their own DLPack (``gpu_dlpack.from_dlpack``), else ``numpy.array``.

    Raises
    ------
    ModuleNotFoundError
        ``from_dlpack`` names a module (``"module:name"``) that is not
        installed.
    ValueError
        ``isolate=True`` for an importer a child process cannot import by name.

    Examples
    --------
    gpu_dlpack's own importer, which keeps every rule:

    >>> import gpu_dlpack
    >>> from gpu_dlpack import testing
    >>> testing.check_consumer(gpu_dlpack.from_dlpack, isolate=False).failed
    ()
    """
    target = _children.target_of(from_dlpack)
    if isolate and target is None:
        raise ValueError(f"check_consumer(isolate=True): {from_dlpack!r} cannot be imported by name in a child "
                         "process; pass a module's function, or 'module:name'")
    subject = name or target or getattr(from_dlpack, "__qualname__", repr(from_dlpack))
    if isolate is None:
        isolate = target is not None
    if isolate:
        _children.importable(target)
        found = _children.apart(target, list(CONSUMER_RULES), tuple(dtypes))
    else:
        c = _Consumer(_children.resolved(from_dlpack) if isinstance(from_dlpack, str) else from_dlpack, tuple(dtypes))
        found = {rule_id: _run(check, c) for rule_id, check in _CONSUMER_CHECKS.items()}
    return Report(subject, tuple(_row(rule, *found[rule_id]) for rule_id, rule in CONSUMER_RULES.items()))
