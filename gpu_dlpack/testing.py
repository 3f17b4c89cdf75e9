"""DLPack conformance checks an array library runs against itself.

``check_producer(make)`` runs every rule of the array API standard and of
DLPack 1.x for a producer (``__dlpack__``, ``__dlpack_device__``) against
the arrays ``make`` returns, and gives a `Report`: one row per rule,
passed, failed with what was asked and what came back, or not applicable
and why. ``check_consumer(from_dlpack)`` does the same for an importer,
with producers and capsules the checks make, each case in a child process
where ``from_dlpack`` can be imported there by name (a consumer that
crashes fails the rule it crashed on). ``assert_conforms(report,
allow=...)`` turns the failed rows into one ``AssertionError`` that names
each rule, its evidence and the standard's words, less the rules a
maintainer decided to differ on.

``make(shape, dtype, *, readonly=False)`` returns an array of the library
under test with ``shape`` and ``dtype`` (a NumPy dtype name) holding
``values(shape, dtype)``; with ``readonly=True`` an array the library
holds read-only (``NotImplementedError`` where it has none). A dtype it
does not have: ``TypeError`` or ``ValueError``, and that dtype is left out.

In a pytest suite, ``test_dlpack = ProducerTests(make, allow=...)`` (or
``ConsumerTests(from_dlpack, ...)``) in a test module is one test per rule (gpu_dlpack's pytest plugin,
``_gpu_dlpack_pytest``, which pytest loads with the package and which does
nothing else).

The checks read capsules with gpu_dlpack's own reader (`inspect`) and
import them with its own ``from_dlpack``: a malformed capsule fails the
rule that asked for it, with the layer's error as evidence.

Floor: a face, beside ``_convert``: it stands on both directions.
"""

from __future__ import annotations

import ctypes
import gc
import json
import math
import os
import signal
import struct
import subprocess
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from . import _capsule, _compiled
from ._devices import DLDeviceType
from ._export import export, wrap
from ._import import from_dlpack
from ._peers import ALIGNMENT  # bytes: the "unaligned-copies" consumers import such data in place
from ._versions import DLPACK_VERSION

__all__ = ["CONSUMER_RULES", "RULES", "ConsumerTests", "ProducerTests", "Report", "Row", "Rule", "assert_conforms",
           "check_consumer", "check_producer", "values"]

_ARRAY_API = "https://data-apis.org/array-api/latest/API_specification/generated/array_api.array.__dlpack__.html"
_DEVICE_API = ("https://data-apis.org/array-api/latest/API_specification/generated/"
               "array_api.array.__dlpack_device__.html")
_DLPACK_FLAGS = "https://dmlc.github.io/dlpack/latest/c_api.html#c.DLPACK_FLAG_BITMASK_READ_ONLY"
_DLPACK_COPIED = "https://dmlc.github.io/dlpack/latest/c_api.html#c.DLPACK_FLAG_BITMASK_IS_COPIED"


class Rule(NamedTuple):
    """One rule a producer is checked against: ``number`` (``"1.2"``: the
    second check of rule 1 of gpu_dlpack's rules page), ``id`` (the name
    ``allow=`` and the doctor use), what the standard says, and where;
    ``faults``: the producer faults of gpu_dlpack's table of peers
    (``export_faults`` in ``gpu_dlpack/_peers.py``) that break it."""

    number: str
    id: str
    text: str
    link: str
    faults: tuple = ()


#: The producer's rules, in order: id -> Rule. Each number's first part is
#: the rule of gpu_dlpack's own rules page (docs/internals/rules.md) it
#: belongs to: 1 versions, 2 copy, 3 device, 4 streams, 5 read-only, 8 the
#: capsule holds the array.
RULES: dict[str, Rule] = {r.id: r for r in (
    Rule("1.1", "no-keywords-legacy",
         "__dlpack__() asked for no max_version gives a legacy 'dltensor' capsule: a consumer that names no "
         "version reads no other", _ARRAY_API),
    Rule("1.2", "old-max-version-legacy",
         "max_version=(0, 8), a consumer of DLPack 0.8, gets a legacy 'dltensor' capsule, not an error",
         _ARRAY_API),
    Rule("1.3", "versioned-when-asked",
         "max_version=(1, 0) gets a 'dltensor_versioned' capsule of major version 1 (recommended: only it can "
         "say that data is read-only or a copy)", _ARRAY_API, ("legacy-only-export",)),
    Rule("1.4", "future-max-version",
         "max_version=(2, 0), a consumer newer than the producer, gets a capsule of a version the producer "
         "has (the consumer checks the version), not an error", _ARRAY_API),
    Rule("2.1", "copy-true-new-memory",
         "copy=True always copies: the capsule's memory is apart from the array's, with the same values",
         _ARRAY_API),
    Rule("2.2", "copy-true-flagged",
         "a versioned capsule of a copy the producer made (copy=True) says IS_COPIED", _DLPACK_COPIED),
    Rule("2.3", "copy-false-in-place",
         "copy=False never copies: the capsule holds the array's own memory (BufferError where a copy "
         "would be needed)", _ARRAY_API),
    Rule("3.1", "dlpack-device",
         "__dlpack_device__() returns (device_type, device_id), two ints, and names the device the "
         "capsule's tensor is on", _DEVICE_API, ("device-id-none",)),
    Rule("3.2", "dl-device-own",
         "dl_device= the array's own device exports it in place", _ARRAY_API),
    Rule("3.3", "dl-device-unreachable",
         "dl_device= a device the producer cannot handle raises BufferError", _ARRAY_API),
    Rule("4.1", "stream-none-host",
         "stream=None is taken for data on the host (the only value the standard names for the CPU)",
         _ARRAY_API),
    Rule("5.1", "read-only-flagged",
         "a versioned capsule of read-only data says READ_ONLY, so that no consumer writes through it",
         _DLPACK_FLAGS),
    Rule("5.2", "read-only-legacy-refused",
         "read-only data asked for a legacy capsule, which cannot say read-only, raises BufferError",
         _DLPACK_FLAGS, ("immutable-unflagged", "read-only-legacy-export")),
    Rule("8.1", "holds-the-array",
         "the capsule holds the array: its shape, its dtype and its values, for every dtype the library "
         "has, 0-d and empty arrays too", _ARRAY_API),
)}

_FROM_DLPACK = "https://data-apis.org/array-api/latest/API_specification/generated/array_api.from_dlpack.html"
_DLPACK_OWNERSHIP = "https://dmlc.github.io/dlpack/latest/python_spec.html#semantics"
_DLPACK_VERSIONING = "https://dmlc.github.io/dlpack/latest/c_api.html#c.DLPackVersion"

#: The importer's rules, in order: id -> Rule, numbered under rule 9
#: (import) of gpu_dlpack's rules page; ``faults``: the consumer faults of
#: gpu_dlpack's table of peers (``faults`` in ``gpu_dlpack/_peers.py``)
#: that break it.
CONSUMER_RULES: dict[str, Rule] = {r.id: r for r in (
    Rule("9.1", "asks-versioned",
         "from_dlpack asks the producer for a versioned capsule (max_version=(1, 0) or newer): only it can say "
         "that data is read-only", _FROM_DLPACK, ("legacy-only",)),
    Rule("9.2", "old-producer-asked-again",
         "a producer whose __dlpack__ takes no max_version (written before the standard's 2023.12 version) is "
         "still imported: the consumer asks again without it", _ARRAY_API),
    Rule("9.3", "in-place",
         "copy=None reuses the producer's memory where it can: host data aligned to 64 bytes is imported in "
         "place", _FROM_DLPACK),
    Rule("9.4", "unaligned-in-place",
         "...and host data 4 bytes past a 64-byte boundary (the alignment of its dtype) is imported in place too",
         _FROM_DLPACK, ("unaligned-copies",)),
    Rule("9.5", "copy-true-copies",
         "copy=True always copies: the import's memory is apart from the producer's, with the same values",
         _FROM_DLPACK, ("copy-shares",)),
    Rule("9.6", "read-only-honoured",
         "a capsule that says READ_ONLY is imported read-only, copied or refused: no write through the import "
         "reaches the producer's memory", _DLPACK_FLAGS, ("read-only-ignored",)),
    Rule("9.7", "imports-the-array",
         "the import holds the producer's array: its shape, its dtype (never narrowed) and its values, for every "
         "dtype the library has, 0-d and empty arrays too", _FROM_DLPACK, ("narrows-64-bit", "narrows-float64")),
    Rule("9.8", "negative-strides",
         "an array with a negative stride (a[::-1]) is imported with its values in their places", _FROM_DLPACK,
         ("negative-strides", "non-compact-strides")),
    Rule("9.9", "stepped-strides",
         "an array with a step (a[::2]) is imported with its values in their places", _FROM_DLPACK,
         ("non-compact-strides",)),
    Rule("9.10", "fortran-order",
         "a transposed array (Fortran order) is imported with its values in their places", _FROM_DLPACK,
         ("c-order-only",)),
    Rule("9.11", "unreached-negative-stride",
         "a negative stride on an axis of length 1, which reaches no element, is imported as any other",
         _FROM_DLPACK, ("negative-strides-anywhere",)),
    Rule("9.12", "unreachable-device-refused",
         "a capsule of memory on a device the library cannot reach (CUDA, without a GPU build) raises, its "
         "tensor freed exactly once: it is never read as host memory, and never crashes the process",
         _FROM_DLPACK, ("gpu-import-crashes",)),
    Rule("9.13", "freed-once",
         "the producer's tensor is freed exactly once, when the import is gone (its deleter called once)",
         _DLPACK_OWNERSHIP),
    Rule("9.14", "refused-freed-once",
         "a capsule the consumer refuses (a dtype code DLPack does not define) raises, and its tensor is freed "
         "exactly once: by the consumer that claimed it, or by its producer where it was left unconsumed",
         _DLPACK_OWNERSHIP),
    Rule("9.15", "unknown-major-refused",
         "a versioned capsule of a major version newer than the consumer's raises, its tensor freed exactly "
         "once: the consumer checks the version before it reads another field", _DLPACK_VERSIONING),
    Rule("9.16", "malformed-refused",
         "a capsule no producer should make (NULL data with elements, a negative extent, a NULL shape, a vector "
         "dtype) raises, its tensor freed exactly once, and never crashes the process", _DLPACK_OWNERSHIP),
)}

PASSED, FAILED, NOT_APPLICABLE = "passed", "failed", "not applicable"

#: The dtypes ``check_producer`` asks ``make`` for, by default.
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
          "float32", "float64", "complex64", "complex128")
_SHAPES = ((), (0,), (5,), (2, 3))


def values(shape, dtype) -> np.ndarray:
    """The values ``make(shape, dtype)`` holds, as a NumPy array.

    Parameters
    ----------
    shape : tuple of int
        The shape.
    dtype : str or numpy.dtype
        The dtype.

    Returns
    -------
    numpy.ndarray
        ``0, 1, 2, ...`` modulo 7 (modulo 2 for bool), in C order, of
        ``dtype``: a new, writeable array.

    Examples
    --------
    >>> from gpu_dlpack import testing
    >>> testing.values((2, 3), "int8").tolist()
    [[0, 1, 2], [3, 4, 5]]
    """
    n = math.prod(shape)
    return (np.arange(n) % (2 if np.dtype(dtype) == np.bool_ else 7)).reshape(shape).astype(dtype)


class Row(NamedTuple):
    """A rule's outcome: ``passed``, ``failed`` or ``not applicable``, and
    the evidence (what was asked, what came back; why not applicable)."""

    rule: Rule
    outcome: str
    evidence: str = ""


@dataclass(frozen=True)
class Report:
    """What `check_producer` found: a `Row` per rule, in the rules' order.

    ``str()`` of it is a line per rule; ``report[rule_id]`` is that rule's
    row.

    Attributes
    ----------
    subject : str
        The library checked (the type of its arrays, or the name given).
    rows : tuple of Row
        A row per rule of `RULES`.

    Examples
    --------
    A producer that says nothing of read-only data (``wrap`` asked to
    keep none read-only):

    >>> import gpu_dlpack
    >>> from gpu_dlpack import testing
    >>> report = testing.check_producer(lambda shape, dtype, readonly=False: gpu_dlpack.wrap(
    ...     testing.values(shape, dtype)), name="never read-only")
    >>> report["read-only-flagged"].outcome, report.failed
    ('failed', ('read-only-flagged', 'read-only-legacy-refused'))
    """

    subject: str
    rows: tuple[Row, ...]

    def __getitem__(self, rule_id: str) -> Row:
        for row in self.rows:
            if row.rule.id == rule_id:
                return row
        raise KeyError(rule_id)

    @property
    def failed(self) -> tuple[str, ...]:
        """The ids of the rules that failed."""
        return tuple(row.rule.id for row in self.rows if row.outcome == FAILED)

    def __str__(self) -> str:
        lines = [f"DLPack conformance of {self.subject}:"]
        for row in self.rows:
            lines.append(f"  {row.rule.number:4} {row.rule.id:26} {row.outcome}"
                         + (f": {row.evidence}" if row.evidence and row.outcome != PASSED else ""))
        return "\n".join(lines)


def assert_conforms(report: Report, allow: Mapping[str, str] | None = None) -> None:
    """Fail, naming each broken rule, unless every rule is kept or allowed.

    Parameters
    ----------
    report : Report
        What `check_producer` found.
    allow : mapping of str to str, optional
        The rules the library decided to differ on: rule id -> why.

    Returns
    -------
    None
        When ``report`` fails no rule but those allowed.

    Raises
    ------
    AssertionError
        Naming each other failed rule, with what was asked, what came back,
        and the standard's words for it (with a link).
    ValueError
        ``allow`` names an id that is no rule (a typo would allow nothing).

    Examples
    --------
    >>> import torch
    >>> from gpu_dlpack import testing
    >>> def make(shape, dtype, *, readonly=False):
    ...     if readonly:
    ...         raise NotImplementedError("torch has no read-only tensors")
    ...     return torch.from_numpy(testing.values(shape, dtype))
    >>> report = testing.check_producer(make)
    >>> report.failed
    ('copy-true-flagged',)
    >>> testing.assert_conforms(report, allow={"copy-true-flagged": "torch's own"})
    """
    allow = dict(allow or {})
    ids = [row.rule.id for row in report.rows]
    unknown = sorted(set(allow) - set(ids))
    if unknown:
        raise ValueError(f"allow= names no rule: {', '.join(map(repr, unknown))} (the rules: {', '.join(ids)})")
    broken = [row for row in report.rows if row.outcome == FAILED and row.rule.id not in allow]
    if broken:
        raise AssertionError(
            f"{report.subject} breaks {len(broken)} DLPack rule{'s' if len(broken) > 1 else ''}:\n" + "\n".join(
                f"- {row.rule.number} {row.rule.id}: {row.evidence}\n  the standard: {row.rule.text} "
                f"({row.rule.link})" for row in broken))


# -- the producer's rules --------------------------------------------------------


def _asked(x, **keywords) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in keywords.items())
    return f"x.__dlpack__({args})"


def _ask(x, **keywords):
    """(capsule, None), or (None, the exception) where the producer raised."""
    try:
        return x.__dlpack__(**keywords), None
    except Exception as exc:
        return None, exc


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def _run(check, subject) -> tuple:
    """A check's (outcome, evidence): the checks ask for what libraries warn
    of (legacy capsules), so a suite run with warnings as errors checks the
    rules all the same."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return check(subject)
        except Exception as exc:  # the library raised where the check did not expect it
            return FAILED, f"the check met {_said(exc)}"


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
        for shape in _SHAPES:
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
        more = f"; and {len(wrong) - 4} more" if len(wrong) > 4 else ""
        return FAILED, "; ".join(wrong[:4]) + more
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
        for shape in _SHAPES:
            a = values(shape, dtype)
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
        more = f"; and {len(wrong) - 4} more" if len(wrong) > 4 else ""
        return FAILED, "; ".join(wrong[:4]) + more
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


# The struct of a capsule the checks make, packed as dlpack.h lays it out:
# DLManagedTensorVersioned (version, manager_ctx, deleter, flags, DLTensor)
# or DLManagedTensor (DLTensor, manager_ctx, deleter); the core's
# counted_capsule sets the last two and counts the deleter's calls in the
# int64 after the struct, which the shape and the strides follow.
_VERSIONED_HEAD = struct.Struct("<IIQQQQiiiBBHQQQ")
_LEGACY_HEAD = struct.Struct("<QiiiBBHQQQQQ")


class _Counted:
    """A producer of capsules over a C-contiguous NumPy array's memory,
    labelled with ``device`` and DLPack dtype ``(code, bits)``, whose deleter
    counts its calls (``calls()``: one number per capsule made). ``wrong``
    writes what no producer should: ``version`` (a versioned capsule's),
    ``data`` (an address), ``shape``, ``lanes``, ``null_shape``."""

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
                         *(n // a.itemsize for n in a.strides))
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
}


def _check_malformed(c: _Consumer):
    wrong_ones = []
    for what, wrong in _MALFORMED.items():
        _in_case(what)
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
    _in_case(None)
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


# -- a consumer in a child process -----------------------------------------------

_CHILD = "import sys; from gpu_dlpack.testing import _child; _child(sys.argv[1])"
_MARK = "gpu_dlpack.testing:"  # what starts each line of the child's that the parent reads
_CHILD_TIMEOUT = 300  # seconds, for one child


def _target(fn) -> str | None:
    """``"module:qualified.name"`` of ``fn`` where importing it gives ``fn``
    back, in a child process; None where it does not."""
    if isinstance(fn, str):
        return fn
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not name or "<" in name or module == "__main__":
        return None
    try:
        found = _resolved(f"{module}:{name}")
    except Exception:
        return None
    return f"{module}:{name}" if found is fn else None


def _resolved(target: str):
    """The object ``"module:dotted.name"`` names (its parts may be
    submodules, imported as needed); ``"module:name|other.name"``: the
    first of them the module has."""
    import importlib

    module, _, names = target.partition(":")
    for name in names.split("|"):
        obj, path = importlib.import_module(module), module
        try:
            for part in name.split("."):
                path += "." + part
                try:
                    obj = getattr(obj, part)
                except AttributeError:
                    obj = importlib.import_module(path)
        except ImportError:
            continue
        return obj
    raise AttributeError(f"{module} has no {' or '.join(names.split('|'))}")


_IN_CHILD = False


def _in_case(what) -> None:
    """In a child process, say which case of a check runs (a death in it is
    reported with it)."""
    if _IN_CHILD:
        print(_MARK + json.dumps({"case": what}), flush=True)


def _child(spec: str) -> None:
    """Run the checks ``spec`` names (JSON) in this process, a line before
    and after each."""
    global _IN_CHILD
    _IN_CHILD = True
    spec = json.loads(spec)
    c = _Consumer(_resolved(spec["target"]), tuple(spec["dtypes"]))
    for rule_id in spec["rules"]:
        print(_MARK + json.dumps({"start": rule_id}), flush=True)
        outcome, evidence = _run(_CONSUMER_CHECKS[rule_id], c)
        print(_MARK + json.dumps({"done": rule_id, "row": [outcome, evidence]}), flush=True)


def _death(status) -> str:
    """What a child process's exit ``status`` (None: it timed out) says happened to it."""
    if status is None:
        return "hangs: the child process timed out"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"aborts the process ({name})"
    if status == 134:  # 128 + SIGABRT, as a shell reports it
        return "aborts the process (SIGABRT)"
    return f"kills the process (exit status {status})"


#: What _apart says of a check the child did not finish: it died in it, or before it.
DIED, NOT_RUN = "died", "not run"


def _apart(target: str, rule_ids, dtypes, env: Mapping[str, str] | None = None) -> dict:
    """rule id -> (outcome, evidence), each check run in a child process
    (with ``env`` added to its environment); a check the child died in is
    (DIED, how it died), and a new child goes on with the rest: those it
    died before are (NOT_RUN, its exit status)."""
    rows: dict = {}
    todo = list(rule_ids)
    env = dict(os.environ, **(env or {}), PYTHONPATH=os.pathsep.join([os.getcwd()] + [p for p in sys.path if p]))
    while todo:
        spec = json.dumps({"target": target, "rules": todo, "dtypes": list(dtypes)})
        try:
            done = subprocess.run([sys.executable, "-c", _CHILD, spec], capture_output=True, text=True, env=env,
                                  timeout=_CHILD_TIMEOUT)
            out, status = done.stdout, done.returncode
        except subprocess.TimeoutExpired as exc:
            out, status = exc.stdout or "", None
            out = out.decode() if isinstance(out, bytes) else out
        started = case = None
        for line in out.splitlines():
            if not line.startswith(_MARK):
                continue  # the library's own output
            msg = json.loads(line[len(_MARK):])
            if "start" in msg:
                started, case = msg["start"], None
            elif "case" in msg:
                case = msg["case"]
            else:
                rows[msg["done"]] = tuple(msg["row"])
                started = None
        if started is not None:
            rows[started] = (DIED, _death(status) + (f" (a capsule of {case})" if case else ""))
        elif status:
            rows.update({rule_id: (NOT_RUN, f"the child process exited with status {status}")
                         for rule_id in todo if rule_id not in rows})
        todo = [rule_id for rule_id in todo if rule_id not in rows]
    return rows


def _row(rule: Rule, outcome: str, evidence: str) -> Row:
    """The row of what _apart or a check found."""
    if outcome == DIED:
        return Row(rule, FAILED, f"from_dlpack {evidence} in this check")
    if outcome == NOT_RUN:
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

    Examples
    --------
    gpu_dlpack's own importer, which keeps every rule:

    >>> import gpu_dlpack
    >>> from gpu_dlpack import testing
    >>> testing.check_consumer(gpu_dlpack.from_dlpack, isolate=False).failed
    ()
    """
    target = _target(from_dlpack)
    if isolate and target is None:
        raise ValueError(f"check_consumer(isolate=True): {from_dlpack!r} cannot be imported by name in a child "
                         "process; pass a module's function, or 'module:name'")
    subject = name or target or getattr(from_dlpack, "__qualname__", repr(from_dlpack))
    if isolate is None:
        isolate = target is not None
    if isolate:
        found = _apart(target, list(CONSUMER_RULES), tuple(dtypes))
    else:
        c = _Consumer(_resolved(from_dlpack) if isinstance(from_dlpack, str) else from_dlpack, tuple(dtypes))
        found = {rule_id: _run(check, c) for rule_id, check in _CONSUMER_CHECKS.items()}
    return Report(subject, tuple(_row(rule, *found[rule_id]) for rule_id, rule in CONSUMER_RULES.items()))


class _RuleTests:
    """What `ProducerTests` and `ConsumerTests` share: a report made at the
    first test, and a test per rule."""

    rules: dict[str, Rule] = {}

    def __init__(self, allow: Mapping[str, str] | None):
        self.allow = dict(allow or {})
        unknown = sorted(set(self.allow) - set(self.rules))
        if unknown:
            raise ValueError(f"allow= names no rule: {', '.join(map(repr, unknown))} "
                             f"(the rules: {', '.join(self.rules)})")
        self._report: Report | None = None

    def check(self) -> Report:
        raise NotImplementedError

    def report(self) -> Report:
        """The `Report`, made at the first call.

        Returns
        -------
        Report
            As the check gives it.
        """
        if self._report is None:
            self._report = self.check()
        return self._report

    def run(self, rule_id: str) -> None:
        """One rule's test, as the plugin runs it.

        Parameters
        ----------
        rule_id : str
            The rule's id (a key of ``rules``).

        Raises
        ------
        AssertionError
            The rule failed and is not allowed.
        pytest.skip.Exception, pytest.xfail.Exception
            The rule does not apply; the rule failed and is allowed.
        """
        import pytest

        row = self.report()[rule_id]
        if row.outcome == NOT_APPLICABLE:
            pytest.skip(f"not applicable: {row.evidence}")
        if row.outcome == FAILED and rule_id in self.allow:
            pytest.xfail(f"allowed: {self.allow[rule_id]} ({row.evidence})")
        assert_conforms(Report(self.report().subject, (row,)))


class ProducerTests(_RuleTests):
    """A test per rule of `RULES`, for a pytest suite: bound to a ``test_``
    name in a test module, gpu_dlpack's pytest plugin collects it as one
    test per rule, which passes, fails with the rule's evidence and words,
    is skipped where the rule does not apply, or is an expected failure
    where ``allow`` names it (with the reason given).

    Parameters
    ----------
    make : callable
        As `check_producer` takes it.
    allow : mapping of str to str, optional
        The rules the library decided to differ on: rule id -> why.
    dtypes : sequence of str, optional
        As `check_producer` takes them.
    name : str, optional
        As `check_producer` takes it.

    Examples
    --------
    In a test module (``test_dlpack.py``) of the library's own suite:

    >>> import gpu_dlpack
    >>> from gpu_dlpack import testing
    >>> def make(shape, dtype, *, readonly=False):
    ...     return gpu_dlpack.wrap(testing.values(shape, dtype), readonly=readonly)
    >>> test_dlpack = testing.ProducerTests(make)
    >>> test_dlpack.report().failed
    ()
    """

    rules = RULES

    def __init__(self, make: Callable, *, allow: Mapping[str, str] | None = None, dtypes=DTYPES,
                 name: str | None = None):
        super().__init__(allow)
        self.make, self.dtypes, self.name = make, tuple(dtypes), name

    def check(self) -> Report:
        """`check_producer` of ``make``."""
        return check_producer(self.make, dtypes=self.dtypes, name=self.name)


class ConsumerTests(_RuleTests):
    """A test per rule of `CONSUMER_RULES`, for a pytest suite, as
    `ProducerTests` makes them for a producer.

    Parameters
    ----------
    from_dlpack : callable or str
        As `check_consumer` takes it (a module's function runs in a child
        process: a crash fails the rule it crashed on).
    allow : mapping of str to str, optional
        The rules the library decided to differ on: rule id -> why.
    dtypes : sequence of str, optional
        As `check_consumer` takes them.
    name : str, optional
        As `check_consumer` takes it.

    Examples
    --------
    In a test module (``test_dlpack.py``) of the library's own suite:

    >>> import numpy as np
    >>> from gpu_dlpack import testing
    >>> test_import = testing.ConsumerTests(np.from_dlpack, allow={"old-producer-asked-again": "ours"})
    """

    rules = CONSUMER_RULES

    def __init__(self, from_dlpack: Callable | str, *, allow: Mapping[str, str] | None = None, dtypes=DTYPES,
                 name: str | None = None):
        super().__init__(allow)
        self.from_dlpack, self.dtypes, self.name = from_dlpack, tuple(dtypes), name

    def check(self) -> Report:
        """`check_consumer` of ``from_dlpack``."""
        return check_consumer(self.from_dlpack, dtypes=self.dtypes, name=self.name)
