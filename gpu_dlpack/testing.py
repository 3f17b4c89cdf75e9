"""DLPack conformance checks an array library runs against itself.

``check_producer(make)`` runs every rule of the array API standard and of
DLPack 1.x for a producer (``__dlpack__``, ``__dlpack_device__``) against
the arrays ``make`` returns, and gives a `Report`: one row per rule,
passed, failed with what was asked and what came back, or not applicable
and why. ``assert_conforms(report, allow=...)`` turns the failed rows into
one ``AssertionError`` that names each rule, its evidence and the
standard's words, less the rules a maintainer decided to differ on.

``make(shape, dtype, *, readonly=False)`` returns an array of the library
under test with ``shape`` and ``dtype`` (a NumPy dtype name) holding
``values(shape, dtype)``; with ``readonly=True`` an array the library
holds read-only (``NotImplementedError`` where it has none). A dtype it
does not have: ``TypeError`` or ``ValueError``, and that dtype is left out.

In a pytest suite, ``test_dlpack = ProducerTests(make, allow=...)`` in a
test module is one test per rule (gpu_dlpack's pytest plugin,
``_gpu_dlpack_pytest``, which pytest loads with the package and which does
nothing else).

The checks read capsules with gpu_dlpack's own reader (`inspect`) and
import them with its own ``from_dlpack``: a malformed capsule fails the
rule that asked for it, with the layer's error as evidence.

Floor: a face, beside ``_convert``: it stands on both directions.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from . import _capsule
from ._devices import DLDeviceType
from ._import import from_dlpack

__all__ = ["RULES", "ProducerTests", "Report", "Row", "Rule", "assert_conforms", "check_producer", "values"]

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
    unknown = sorted(set(allow) - set(RULES))
    if unknown:
        raise ValueError(f"allow= names no rule: {', '.join(map(repr, unknown))} (the rules: {', '.join(RULES)})")
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
    rows = []
    for rule_id, rule in RULES.items():
        # The checks ask for what producers warn of (legacy capsules): a
        # suite run with warnings as errors checks the rules all the same.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                outcome, evidence = _CHECKS[rule_id](producer)
            except Exception as exc:  # the library raised where the check did not expect it
                outcome, evidence = FAILED, f"the check met {_said(exc)}"
        rows.append(Row(rule, outcome, evidence))
    return Report(subject, tuple(rows))


class ProducerTests:
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

    def __init__(self, make: Callable, *, allow: Mapping[str, str] | None = None, dtypes=DTYPES,
                 name: str | None = None):
        self.make, self.dtypes, self.name = make, tuple(dtypes), name
        self.allow = dict(allow or {})
        unknown = sorted(set(self.allow) - set(RULES))
        if unknown:
            raise ValueError(f"allow= names no rule: {', '.join(map(repr, unknown))} (the rules: {', '.join(RULES)})")
        self._report: Report | None = None

    def report(self) -> Report:
        """The `Report` of ``make``'s arrays, made at the first call.

        Returns
        -------
        Report
            As `check_producer` gives it.
        """
        if self._report is None:
            self._report = check_producer(self.make, dtypes=self.dtypes, name=self.name)
        return self._report

    def run(self, rule_id: str) -> None:
        """One rule's test, as the plugin runs it.

        Parameters
        ----------
        rule_id : str
            The rule's id (a key of `RULES`).

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
