"""What the checks of gpu_dlpack.testing share: a rule, its row, the
report and its assertion, the values the arrays hold, and the standard's
places the rules link to."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Mapping, NamedTuple

import numpy as np

ARRAY_API = "https://data-apis.org/array-api/latest/API_specification/generated/array_api.array.__dlpack__.html"
DEVICE_API = ("https://data-apis.org/array-api/latest/API_specification/generated/"
               "array_api.array.__dlpack_device__.html")
DLPACK_FLAGS = "https://dmlc.github.io/dlpack/latest/c_api.html#c.DLPACK_FLAG_BITMASK_READ_ONLY"
DLPACK_COPIED = "https://dmlc.github.io/dlpack/latest/c_api.html#c.DLPACK_FLAG_BITMASK_IS_COPIED"
FROM_DLPACK = "https://data-apis.org/array-api/latest/API_specification/generated/array_api.from_dlpack.html"
DLPACK_OWNERSHIP = "https://dmlc.github.io/dlpack/latest/python_spec.html#semantics"
DLPACK_VERSIONING = "https://dmlc.github.io/dlpack/latest/c_api.html#c.DLPackVersion"


class Rule(NamedTuple):
    """One rule a producer or an importer is checked against: ``number`` (``"1.2"``: the
    second check of rule 1 of gpu_dlpack's rules page), ``id`` (the name
    ``allow=`` and the doctor use), what the standard says, and where;
    ``faults``: the faults of gpu_dlpack's table of peers
    (``gpu_dlpack/_peers.py``) that break it."""

    number: str
    id: str
    text: str
    link: str
    faults: tuple = ()


#: The outcomes of a row.
PASSED, FAILED, NOT_APPLICABLE = "passed", "failed", "not applicable"

#: The dtypes ``check_producer`` asks ``make`` for, by default.
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
          "float32", "float64", "complex64", "complex128")
SHAPES = ((), (0,), (5,), (2, 3))


def listed(wrong: list) -> tuple[str, str]:
    """A failed row's outcome and evidence: the first four of what is
    ``wrong``, and how many more."""
    more = f"; and {len(wrong) - 4} more" if len(wrong) > 4 else ""
    return FAILED, "; ".join(wrong[:4]) + more


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
