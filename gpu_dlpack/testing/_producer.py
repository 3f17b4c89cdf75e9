"""The rules of a producer (``__dlpack__``, ``__dlpack_device__``) and
``check_producer``, which runs them against the arrays a library makes."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .. import _capsule
from .._devices import DLDeviceType
from .._import import from_dlpack
from ._report import (ARRAY_API, DEVICE_API, DLPACK_COPIED, DLPACK_FLAGS, DTYPES, FAILED, NOT_APPLICABLE, PASSED,
                      SHAPES, Report, Row, Rule, listed, _ask, _asked, _run, _said, values)

#: The producer's rules, in order: id -> Rule. Each number's first part is
#: the rule of gpu_dlpack's own rules page (docs/internals/rules.md) it
#: belongs to: 1 versions, 2 copy, 3 device, 4 streams, 5 read-only, 8 the
#: capsule holds the array.
RULES: dict[str, Rule] = {r.id: r for r in (
    Rule("1.1", "no-keywords-legacy",
         "__dlpack__() asked for no max_version gives a legacy 'dltensor' capsule: a consumer that names no "
         "version reads no other", ARRAY_API),
    Rule("1.2", "old-max-version-legacy",
         "max_version=(0, 8), a consumer of DLPack 0.8, gets a legacy 'dltensor' capsule, not an error",
         ARRAY_API),
    Rule("1.3", "versioned-when-asked",
         "max_version=(1, 0) gets a 'dltensor_versioned' capsule of major version 1 (recommended: only it can "
         "say that data is read-only or a copy)", ARRAY_API, ("legacy-only-export",)),
    Rule("1.4", "future-max-version",
         "max_version=(2, 0), a consumer newer than the producer, gets a capsule of a version the producer "
         "has (the consumer checks the version), not an error", ARRAY_API),
    Rule("2.1", "copy-true-new-memory",
         "copy=True always copies: the capsule's memory is apart from the array's, with the same values",
         ARRAY_API),
    Rule("2.2", "copy-true-flagged",
         "a versioned capsule of a copy the producer made (copy=True) says IS_COPIED", DLPACK_COPIED),
    Rule("2.3", "copy-false-in-place",
         "copy=False never copies: the capsule holds the array's own memory (BufferError where a copy "
         "would be needed)", ARRAY_API),
    Rule("3.1", "dlpack-device",
         "__dlpack_device__() returns (device_type, device_id), two ints, and names the device the "
         "capsule's tensor is on", DEVICE_API, ("device-id-none",)),
    Rule("3.2", "dl-device-own",
         "dl_device= the array's own device exports it in place", ARRAY_API),
    Rule("3.3", "dl-device-unreachable",
         "dl_device= a device the producer cannot handle raises BufferError", ARRAY_API),
    Rule("4.1", "stream-none-host",
         "stream=None is taken for data on the host (the only value the standard names for the CPU)",
         ARRAY_API),
    Rule("5.1", "read-only-flagged",
         "a versioned capsule of read-only data says READ_ONLY, so that no consumer writes through it",
         DLPACK_FLAGS),
    Rule("5.2", "read-only-legacy-refused",
         "read-only data asked for a legacy capsule, which cannot say read-only, raises BufferError",
         DLPACK_FLAGS, ("immutable-unflagged", "read-only-legacy-export")),
    Rule("8.1", "holds-the-array",
         "the capsule holds the array: its shape, its dtype and its values, for every dtype the library "
         "has, 0-d and empty arrays too", ARRAY_API),
)}

def _read(capsule):
    """(its CapsuleInfo, None), or (None, why it cannot be read)."""
    try:
        return _capsule.read(capsule), None
    except Exception as exc:
        return None, f"a capsule gpu_dlpack cannot read ({_said(exc)})"


def _answered(x, **keywords):
    """(the capsule ``x.__dlpack__(**keywords)`` gave, read, None), or
    (None, None, the evidence: what it raised, or why its capsule cannot be
    read)."""
    capsule, exc = _ask(x, **keywords)
    if exc is not None:
        return None, None, f"asked {_asked(x, **keywords)}; it raised {_said(exc)}"
    info, bad = _read(capsule)
    if info is None:
        return None, None, f"asked {_asked(x, **keywords)}; it gave {bad}"
    return capsule, info, None


def _address(info) -> int:
    return info.data + info.byte_offset


def _held(capsule) -> np.ndarray:
    """A host copy of what ``capsule`` holds (consumed here)."""
    return np.array(from_dlpack(capsule, device="cpu", copy=True))


class _Producer:
    """The arrays of the library under test, made once each."""

    def __init__(self, make: Callable, dtypes):
        self.make = make
        self.dtypes = dtypes
        self._made: dict = {}

    def array(self, shape=(2, 3), dtype="float32", readonly=False):
        """``make``'s array, or the exception it raised (kept)."""
        key = (shape, dtype, readonly)
        if key not in self._made:
            try:
                self._made[key] = self.make(shape, dtype, readonly=readonly) if readonly else self.make(shape, dtype)
            except Exception as exc:
                self._made[key] = exc
        return self._made[key]

    def plain(self):
        """An array of two dimensions (one, where the library has no other:
        pyarrow's) of the first dtype ``make`` has."""
        return self.array(*self.plain_key())

    def plain_key(self) -> tuple:
        """(shape, dtype) of `plain`'s array."""
        for dtype in ("float32", *self.dtypes):
            for shape in ((2, 3), (6,)):
                x = self.array(shape, dtype)
                if not isinstance(x, Exception):
                    return shape, dtype
        raise ValueError(f"make refused every dtype asked ({', '.join(self.dtypes)}): {_said(x)}")


def _name_rule(keywords: dict, wanted: str, why: str):
    def check(p: _Producer):
        x = p.plain()
        _capsule, info, wrong = _answered(x, **keywords)
        if wrong:
            return FAILED, wrong
        if info.name != wanted:
            return FAILED, f"asked {_asked(x, **keywords)}; it gave a {info.name!r} capsule ({why})"
        return PASSED, ""
    return check


def _check_versioned(p: _Producer):
    x = p.plain()
    _capsule, info, wrong = _answered(x, max_version=(1, 0))
    if wrong:
        return FAILED, wrong
    if not info.versioned:
        return FAILED, f"asked {_asked(x, max_version=(1, 0))}; it gave a legacy 'dltensor' capsule"
    if info.version[0] != 1:
        return FAILED, f"asked {_asked(x, max_version=(1, 0))}; it gave version {info.version}"
    return PASSED, ""


def _check_future(p: _Producer):
    _capsule, _info, wrong = _answered(p.plain(), max_version=(2, 0))
    return (FAILED, wrong) if wrong else (PASSED, "")


def _own(x):
    """The versioned (or, from a legacy-only producer, legacy) capsule of x
    asked for nothing else, read: (info, None) or (None, why)."""
    capsule, exc = _ask(x, max_version=(1, 0))
    if exc is not None:
        capsule, exc = _ask(x)
    if exc is not None:
        return None, f"{_asked(x)} raised {_said(exc)}"
    return _read(capsule)


def _copy_rule(flag: bool):
    def check(p: _Producer):
        x = p.plain()
        own, why = _own(x)
        if own is None:
            return NOT_APPLICABLE, f"no capsule of the array to compare with: {why}"
        asked = dict(max_version=(1, 0), copy=True)
        capsule, info, wrong = _answered(x, **asked)
        if wrong:
            return (NOT_APPLICABLE, f"it made no copy to flag (rule 2.1: {wrong})") if flag else (FAILED, wrong)
        if flag:
            if not info.versioned:
                return NOT_APPLICABLE, "the copy came in a legacy capsule, which has no flags (rule 1.3)"
            if not info.is_copied:
                return FAILED, f"asked {_asked(x, **asked)}; its capsule's flags are {info.flags}: no IS_COPIED"
            return PASSED, ""
        if _address(info) == _address(own):
            return FAILED, f"asked {_asked(x, **asked)}; it gave the array's own memory ({_address(info):#x})"
        held = _held(capsule)
        if not np.array_equal(held, values(own.shape, held.dtype)):
            return FAILED, f"asked {_asked(x, **asked)}; the copy holds other values: {held.tolist()}"
        return PASSED, ""
    return check


def _in_place_rule(keywords: Callable[[Any], dict]):
    def check(p: _Producer):
        x = p.plain()
        own, why = _own(x)
        if own is None:
            return NOT_APPLICABLE, f"no capsule of the array to compare with: {why}"
        asked = dict(max_version=(1, 0), **keywords(own))
        _capsule, info, wrong = _answered(x, **asked)
        if wrong:
            return FAILED, wrong
        if _address(info) != _address(own) or info.device != own.device:
            return FAILED, (f"asked {_asked(x, **asked)}; it gave memory at {_address(info):#x} on {info.device}, "
                            f"not the array's own ({_address(own):#x} on {own.device})")
        return PASSED, ""
    return check


def _check_device(p: _Producer):
    x = p.plain()
    try:
        said = x.__dlpack_device__()
    except Exception as exc:
        return FAILED, f"x.__dlpack_device__() raised {_said(exc)}"
    if (type(said) is not tuple or len(said) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in said)):
        return FAILED, f"x.__dlpack_device__() returned {said!r}, not a pair of ints"
    own, why = _own(x)
    if own is None:
        return NOT_APPLICABLE, f"no capsule to compare with: {why}"
    if own.device.dlpack != (int(said[0]), int(said[1])):
        return FAILED, f"x.__dlpack_device__() said {said!r}; the capsule's tensor is on {own.device.dlpack}"
    return PASSED, ""


_NO_ONE_HAS = (int(DLDeviceType.HEXAGON), 0)


def _check_unreachable(p: _Producer):
    x = p.plain()
    asked = dict(max_version=(1, 0), dl_device=_NO_ONE_HAS)
    capsule, exc = _ask(x, **asked)
    if exc is None:
        return FAILED, f"asked {_asked(x, **asked)} (Hexagon); it gave a capsule"
    if not isinstance(exc, BufferError):
        return FAILED, f"asked {_asked(x, **asked)} (Hexagon); it raised {_said(exc)}, not a BufferError"
    return PASSED, ""


def _check_stream_host(p: _Producer):
    x = p.plain()
    own, why = _own(x)
    if own is None:
        return NOT_APPLICABLE, f"no capsule of the array: {why}"
    if not own.device.is_host_accessible:
        return NOT_APPLICABLE, f"the array is on {own.device}, not on the host"
    capsule, exc = _ask(x, stream=None, max_version=(1, 0))
    if exc is not None:
        return FAILED, f"asked {_asked(x, stream=None, max_version=(1, 0))}; it raised {_said(exc)}"
    return PASSED, ""


def _read_only_rule(legacy: bool):
    def check(p: _Producer):
        x = p.array(*p.plain_key(), readonly=True)
        if isinstance(x, NotImplementedError):
            return NOT_APPLICABLE, f"the library holds no read-only arrays (make raised {_said(x)})"
        if isinstance(x, Exception):
            return NOT_APPLICABLE, f"make(readonly=True) raised {_said(x)}"
        asked = {} if legacy else dict(max_version=(1, 0))
        capsule, exc = _ask(x, **asked)
        if legacy:
            info = None if exc is not None else _read(capsule)[0]
            if info is not None and info.versioned and info.readonly:
                return NOT_APPLICABLE, "it gave a versioned capsule, flagged READ_ONLY, where none was asked (rule 1.1)"
            if exc is None:
                return FAILED, f"asked {_asked(x)} of read-only data; it gave a capsule its consumer may write through"
            if not isinstance(exc, BufferError):
                return FAILED, f"asked {_asked(x)} of read-only data; it raised {_said(exc)}, not a BufferError"
            return PASSED, ""
        if isinstance(exc, BufferError):
            return NOT_APPLICABLE, f"it exports no read-only data ({_asked(x, **asked)} raised {_said(exc)})"
        if exc is not None:
            return FAILED, f"asked {_asked(x, **asked)} of read-only data; it raised {_said(exc)}"
        info, bad = _read(capsule)
        if info is None:
            return FAILED, f"asked {_asked(x, **asked)} of read-only data; it gave {bad}"
        if not info.versioned:
            return NOT_APPLICABLE, "a legacy capsule has no flags (rule 1.3)"
        if not info.readonly:
            return FAILED, f"asked {_asked(x, **asked)} of read-only data; its capsule's flags are {info.flags}: no READ_ONLY"
        return PASSED, ""
    return check


def _check_holds(p: _Producer):
    wrong, made = [], []
    for dtype in p.dtypes:
        for shape in SHAPES:
            x = p.array(shape, dtype)
            if isinstance(x, Exception):
                continue  # a dtype, or a shape, the library does not have
            made.append(f"{dtype}{list(shape)}")
            capsule, exc = _ask(x, max_version=(1, 0))
            if exc is not None:
                capsule, exc = _ask(x)
            if exc is not None:
                wrong.append(f"{dtype} {shape}: {_asked(x)} raised {_said(exc)}")
                continue
            info, bad = _read(capsule)
            if info is None:
                wrong.append(f"{dtype} {shape}: {bad}")
                continue
            if info.shape != shape or info.dtype != np.dtype(dtype):
                wrong.append(f"{dtype} {shape}: the capsule says shape {info.shape}, dtype {info.dtype}")
                continue
            held = _held(capsule)
            if not np.array_equal(held, values(shape, dtype)):
                wrong.append(f"{dtype} {shape}: it holds {held.tolist()}, not {values(shape, dtype).tolist()}")
    if not made:
        return NOT_APPLICABLE, "make refused every dtype asked"
    if wrong:
        return listed(wrong)
    return PASSED, ""


_CHECKS: dict[str, Callable[[_Producer], tuple]] = {
    "no-keywords-legacy": _name_rule({}, "dltensor", "a consumer that names no max_version reads only legacy ones"),
    "old-max-version-legacy": _name_rule(dict(max_version=(0, 8)), "dltensor", "a 0.8 consumer reads only legacy ones"),
    "versioned-when-asked": _check_versioned,
    "future-max-version": _check_future,
    "copy-true-new-memory": _copy_rule(flag=False),
    "copy-true-flagged": _copy_rule(flag=True),
    "copy-false-in-place": _in_place_rule(lambda own: dict(copy=False)),
    "dlpack-device": _check_device,
    "dl-device-own": _in_place_rule(lambda own: dict(dl_device=own.device.dlpack)),
    "dl-device-unreachable": _check_unreachable,
    "stream-none-host": _check_stream_host,
    "read-only-flagged": _read_only_rule(legacy=False),
    "read-only-legacy-refused": _read_only_rule(legacy=True),
    "holds-the-array": _check_holds,
}


def check_producer(make: Callable, *, dtypes=DTYPES, name: str | None = None) -> Report:
    """Check a library's arrays against every rule of a DLPack producer.

    Parameters
    ----------
    make : callable
        ``make(shape, dtype, *, readonly=False)``: an array of the library
        under test of that shape and dtype (a NumPy dtype name), holding
        ``values(shape, dtype)``, read-only with ``readonly=True``
        (``NotImplementedError`` where the library has no read-only arrays;
        ``TypeError`` or ``ValueError`` for a dtype it does not have).
    dtypes : sequence of str, optional
        The dtypes asked for (default: every one DLPack and NumPy share).
    name : str, optional
        What the report calls the library (default: the type of its arrays).

    Returns
    -------
    Report
        A row per rule of `RULES`: passed, failed with its evidence, or not
        applicable and why.

    Examples
    --------
    gpu_dlpack's own producer, which keeps every rule:

    >>> import gpu_dlpack
    >>> from gpu_dlpack import testing
    >>> def make(shape, dtype, *, readonly=False):
    ...     return gpu_dlpack.wrap(testing.values(shape, dtype), readonly=readonly)
    >>> testing.check_producer(make).failed
    ()
    """
    producer = _Producer(make, tuple(dtypes))
    try:
        subject = name or type(producer.plain()).__qualname__
    except ValueError as exc:
        raise ValueError(f"check_producer: {exc}") from None
    return Report(subject, tuple(Row(rule, *_run(_CHECKS[rule_id], producer)) for rule_id, rule in RULES.items()))
