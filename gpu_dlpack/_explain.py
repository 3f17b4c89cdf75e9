"""``gpu-dlpack explain``: what a DLPack error message means, and how to fix it.

The knowledge is data: ``explain.json`` in this package (read with
``importlib.resources``, so it works from an installed wheel). Its
``errors`` list holds one entry per message users meet, from NumPy, PyTorch,
JAX, CuPy and gpu_dlpack itself:

``id``
    a stable name, such as ``jax-version-floor``.
``library``, ``exception``
    who raises it, and with which exception type.
``pattern``
    a regular expression searched for in the text, ignoring case, once runs
    of white space are folded into one space (so a wrapped traceback, or a
    message a library or a log capitalised otherwise, still matches). Named
    groups, such as ``(?P<floor>...)``, can be quoted as ``{floor}`` in
    ``meaning`` and ``remedies``.
``meaning``, ``remedies``
    what happened, and what to do about it, best remedy first.
``avoid``
    ``call``, ``before`` and ``after``: the gpu_dlpack call that avoids the
    error, with a short example of the failing code and the fixed code.
``refusal`` (optional, true)
    gpu_dlpack declining, by design, what the standard forbids or cannot
    say.
``rule`` (optional, with ``refusal``)
    the number of the rule (docs/internals/rules.md) that demands the refusal;
    ``gpu-dlpack doctor`` counts it as working as designed only for the
    rules that exist to refuse (versions, copy=False, read-only).

Its ``hazards`` map holds the problems ``gpu-dlpack doctor`` finds without any
exception (a consumer that writes through READ_ONLY, ...), each with a
``problem`` and a ``remedy`` that may quote ``{producer}``, ``{consumer}`` and
the other fields the doctor passes.

>>> [m.entry.id for m in match("BufferError: JAX does not support any version "
...     "below (0, 5) but version ((0, 4)) was requested.")]
['jax-version-floor']

Floor: the faces, read by the CLI and the doctor; of the package it imports
only the messages (``_errors``).
"""

from __future__ import annotations

import functools
import json
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from . import _errors

DATA_FILE = "explain.json"

_FIELD = re.compile(r"\{(\w+)\}")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Entry:
    """One known error message."""

    id: str
    library: str
    exception: str
    pattern: re.Pattern
    meaning: str
    remedies: tuple
    avoid: dict
    refusal: bool = False
    rule: int | None = None


@dataclass(frozen=True)
class Match:
    """An entry of the catalogue found in a text, with what its pattern captured.

    The troubleshooting page lists every entry, under its ``id``.

    Attributes
    ----------
    entry : object
        The catalogue's entry (its ``id``, ``library``, ``exception``,
        ``pattern``, ``meaning``, ``remedies`` and ``avoid``, as written).
    groups : dict
        What the pattern's named groups captured in the text.
    excerpt : str
        The part of the text the pattern matched.
    id : str
        The entry's stable name, such as ``"jax-version-floor"``.
    meaning : str
        What happened, with the captured values filled in.
    remedies : list of str
        What to do about it, best first, filled in.
    avoid : dict
        The gpu_dlpack call that avoids the error (``call``) with a short
        example of the failing code (``before``) and the fixed code
        (``after``), filled in.

    Examples
    --------
    >>> import gpu_dlpack
    >>> (m,) = gpu_dlpack.explain("RuntimeError: NumPy only supports stream=None.")
    >>> m.id, m.entry.library
    ('numpy-stream', 'NumPy (also array_api_strict)')
    """

    entry: Entry
    groups: dict
    excerpt: str

    @property
    def _fields(self) -> dict:
        # A group the text did not give (a message quoted without its
        # optional tail) is shown as <name>, never as an unfilled {name}.
        return {**{name: f"<{name}>" for name in self.entry.pattern.groupindex}, **self.groups}

    @property
    def meaning(self) -> str:
        return fill(self.entry.meaning, self._fields)

    @property
    def remedies(self) -> list:
        return [fill(r, self._fields) for r in self.entry.remedies]

    @property
    def avoid(self) -> dict:
        """The gpu_dlpack call that avoids the error, with its example, filled."""
        return {k: fill(v, self._fields) for k, v in self.entry.avoid.items()}

    @property
    def id(self) -> str:
        return self.entry.id

    def as_dict(self) -> dict:
        """The match as data, as ``gpu-dlpack explain --json`` prints it.

        Returns
        -------
        dict
            ``id``, ``library``, ``exception``, ``excerpt``, ``meaning``,
            ``remedies``, ``avoid`` and ``refusal``.
        """
        e = self.entry
        return {
            "id": e.id,
            "library": e.library,
            "exception": e.exception,
            "excerpt": self.excerpt,
            "meaning": self.meaning,
            "remedies": self.remedies,
            "avoid": self.avoid,
            "refusal": e.refusal,
        }

    def __str__(self) -> str:
        return render([self])


@dataclass(frozen=True)
class Explanation(Sequence):
    """What `gpu_dlpack.explain` found in a text: the matches, best first.

    A sequence of `Match` (``len``, iteration, indexing); true when something
    matched; ``str()`` of it is the terminal text of ``gpu-dlpack explain``.
    Made by `explain`; public for the annotations of code that passes one on.

    Attributes
    ----------
    text : str
        The text read (an exception's, with its chain).
    matches : tuple of Match
        The entries found, in the order they occur in the text.
    remedies : list of str
        Every remedy of every match, in order.

    Examples
    --------
    >>> import gpu_dlpack
    >>> found = gpu_dlpack.explain(BufferError("Cannot export readonly array since signalling readonly is unsupported by DLPack."))
    >>> bool(found), len(found), found[0].id
    (True, 1, 'numpy-readonly-legacy')
    >>> bool(gpu_dlpack.explain("all is well"))
    False
    """

    text: str
    matches: tuple

    def __len__(self) -> int:
        return len(self.matches)

    def __getitem__(self, i):
        return self.matches[i]

    @property
    def remedies(self) -> list:
        """Every remedy of every match, in order."""
        return [r for m in self.matches for r in m.remedies]

    def as_dict(self) -> dict:
        """The explanation as data, as ``gpu-dlpack explain --json`` prints it.

        Returns
        -------
        dict
            ``matched`` (a bool) and ``matches``, each as `Match.as_dict` gives it.
        """
        return {"matched": bool(self.matches), "matches": [m.as_dict() for m in self.matches]}

    def __str__(self) -> str:
        return render(list(self.matches))


def explain(exc_or_message) -> Explanation:
    """The known DLPack errors in an exception (with the exceptions it was
    raised from or during) or in a message."""
    if isinstance(exc_or_message, BaseException):
        text = _exception_text(exc_or_message)
    elif isinstance(exc_or_message, str):
        text = exc_or_message
    else:
        raise _errors.explain_takes(exc_or_message)
    return Explanation(text, tuple(match(text)))


def _exception_text(exc: BaseException) -> str:
    """``Type: message`` of ``exc`` and of each exception in its chain, as a
    traceback shows them (the cause first)."""
    lines, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        lines.insert(0, f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return "\n".join(lines)


def fill(template: str, fields: dict) -> str:
    """``template`` with ``{name}`` replaced for the names in ``fields`` only
    (other braces, as in code examples, stay as written)."""
    return _FIELD.sub(lambda m: str(fields[m[1]]) if m[1] in fields else m[0], template)


@functools.lru_cache(maxsize=1)
def _data() -> dict:
    import importlib.resources  # at the first explain, not at the package's import

    text = importlib.resources.files(__package__).joinpath(DATA_FILE).read_text(encoding="utf-8")
    return json.loads(text)


@functools.lru_cache(maxsize=1)
def entries() -> tuple:
    """Every known error, in the order of the data file (most specific first)."""
    return tuple(
        Entry(**{**raw, "pattern": re.compile(raw["pattern"], re.IGNORECASE), "remedies": tuple(raw["remedies"])})
        for raw in _data()["errors"]
    )


def by_id(entry_id: str) -> Entry | None:
    """The entry named ``entry_id``, or None."""
    return next((e for e in entries() if e.id == entry_id), None)


def hazards() -> dict:
    """The hazards ``gpu-dlpack doctor`` reports: id -> {problem, remedy}."""
    return _data()["hazards"]


def match(text: str) -> list:
    """Every entry whose pattern occurs in ``text``, in the order they occur
    there (ties in file order). A gpu_dlpack message that quotes a peer's
    error yields both."""
    flat = _SPACE.sub(" ", text)
    found = []
    for order, entry in enumerate(entries()):
        m = entry.pattern.search(flat)
        if m is not None:
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            found.append((m.start(), order, Match(entry, groups, m.group(0))))
    found.sort(key=lambda t: (t[0], t[1]))
    return [m for _, _, m in found]


def first(text: str):
    """The first match in ``text``, or None."""
    return next(iter(match(text)), None)


def render(matches: list) -> str:
    """The terminal text for ``matches``."""
    if not matches:
        return (
            "No known DLPack error matched this text.\n"
            "Run `gpu-dlpack doctor` to see which exchanges work in this "
            "environment, and `gpu-dlpack doctor --json` to attach to a bug report."
        )
    blocks = []
    for m in matches:
        e = m.entry
        excerpt = m.excerpt if len(m.excerpt) <= 160 else m.excerpt[:157] + "..."
        lines = [f"{e.id}: {e.exception} raised by {e.library}", f"  matched: {excerpt}", "  what it means:"]
        lines += wrap_text(m.meaning, "    ")
        lines.append("  remedies, in order:")
        for i, remedy in enumerate(m.remedies, 1):
            lines += wrap_text(remedy, f"    {i}. ", "       ")
        avoid = m.avoid
        lines.append(f"  with gpu_dlpack: {avoid['call']}")
        for part in ("before", "after"):
            lines.append(f"    {part}:")
            lines += ["      " + s for s in avoid[part].splitlines()]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def wrap_text(text: str, first: str, rest: str | None = None, width: int = 88) -> list:
    """``text`` wrapped to ``width``, the first line indented by ``first``."""
    rest = first if rest is None else rest
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest) or [first]


def run(text: str, as_json: bool = False) -> tuple:
    """``(output, exit status)`` for ``gpu-dlpack explain``: 0 when something
    matched, 1 when nothing did."""
    found = explain(text)
    out = json.dumps(found.as_dict(), indent=2) if as_json else str(found)
    return out, 0 if found else 1
