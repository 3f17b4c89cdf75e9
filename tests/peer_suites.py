"""The peers' own DLPack suites, rewritten to run through the layer:
PyTorch's ``test/test_dlpack.py``, JAX's ``tests/array_interoperability_test.py``,
TensorFlow's ``tensorflow/python/dlpack/dlpack_test.py`` and PaddlePaddle's
``test/legacy_test/test_dlpack.py``.

No such file is in its library's wheel or sdist, so none is part of the
test command: ``scripts/peer-suites.sh DIR...`` runs them, each DIR laid out
as a checkout of its peer at the installed release, through
``tests/run_peer_suites.py``; TensorFlow's and PaddlePaddle's each in a
process of its own (``APART``: the two in one process have crashed).
Each file is read from there, rewritten in memory for a role and run
against the installed peer:

* ``consumer``: every consumer of the file is the layer: the peer's own
  ``from_dlpack`` (``torch.from_dlpack``, ``torch.utils.dlpack.from_dlpack``,
  ``jax.dlpack.from_dlpack``, ``jnp.from_dlpack``, TensorFlow's
  ``dlpack.from_dlpack``, ``paddle.from_dlpack``,
  ``paddle.utils.dlpack.from_dlpack``) is
  ``gpu_dlpack.convert(x, peer, ...)``, NumPy's ``np.from_dlpack`` is
  ``gpu_dlpack.from_dlpack``;
* ``producer``: every producer the file hands to a consumer is
  ``gpu_dlpack.wrap(x)`` (a raw capsule is handed on as it is), every
  ``x.__dlpack__(...)`` of a named array is ``gpu_dlpack.wrap(x).__dlpack__(...)``
  (in PaddlePaddle's file ``x.__dlpack_device__()`` too), the peer's
  ``to_dlpack(x)`` (torch's, TensorFlow's, PaddlePaddle's) is
  ``gpu_dlpack.export(x)`` and torch's file's own DLPack-only wrapper is
  ``gpu_dlpack.wrap``;
* ``itself``: the file as it is, which must pass whole: it shows that the
  file is the installed release's, so that what differs in the other roles
  is the layer's.

Where the layer decides otherwise than the peer, the case is a strict expected
failure with its reason (the table is ``tests/peer_differences.py``), in the
runs the decision shows in: a suite may name its runs (``Suite.runs``; JAX's
file runs with its 64-bit types and without them) and say which one a process
is, and a row of the table may be for one of them.
This module is the machinery, importable without any peer file
(``tests/test_peer_suites.py`` checks it).
"""

from __future__ import annotations

import functools
import os
import re
import sys
import types
import unittest
from dataclasses import dataclass
from typing import Any, Callable

import pytest

import gpu_dlpack

from .peer_differences import DIFFERENCES, Row

ROLES = ("consumer", "producer", "itself")

# A name that does not follow a dot or a word character: ``from_dlpack(`` but
# not ``torch.from_dlpack(`` nor ``tf.experimental.dlpack.from_dlpack(``.
_BARE = r"(?<![.\w])"

# JAX's products whole (JAX_NUM_GENERATED_CASES above every product's size),
# not its default sample of ten: every dtype, shape and keyword is a case.
WHOLE_PRODUCTS = 1_000_000


def _whole_jax_products(path: str) -> None:
    import jax
    from jax._src import test_util  # noqa: F401  (defines the flag)

    jax.config.update("jax_num_generated_cases", int(os.environ.get("JAX_NUM_GENERATED_CASES", WHOLE_PRODUCTS)))


def _jax_run() -> str:
    # JAX_ENABLE_X64 (scripts/peer-suites.sh sets it) is read when JAX is imported.
    import jax

    return "x64" if jax.config.read("jax_enable_x64") else "x32"


@dataclass(frozen=True)
class Suite:
    """A peer's DLPack test file and how each role rewrites it."""

    peer: str  # the module the file tests, and convert's name for it
    path: str  # where the file lies in a checkout of the peer
    consumer: tuple[tuple[str, str], ...]  # (pattern, replacement), in order
    producer: tuple[tuple[str, str], ...]
    prepare: Callable[[str], None] | None = None  # run, given the file's path, before the file is
    # The runs the suite's rows may name (peer_differences.Row.run), where
    # what the file meets differs between runs, and which one this process is.
    runs: tuple[str, ...] = ()
    run: Callable[[], str] | None = None


def _beside_it(path: str) -> None:
    # PaddlePaddle's file imports its helpers (``from utils import
    # dygraph_guard``) from its own directory, as Paddle's CI runs it.
    here = os.path.dirname(os.path.abspath(path))
    if here not in sys.path:
        sys.path.insert(0, here)


def _quiet_tensorflow(path: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# A consumer call ``f(x, ...)`` in the producer role is ``_handed(f, x, ...)``;
# ``x.__dlpack__(`` of a named array (not ``self.tensor.__dlpack__(`` inside
# a wrapper class of the file's own) asks the layer's wrapper.
_WRAP_DUNDER = (_BARE + r"([A-Za-z_]\w*)\.__dlpack__\(", r"_gpu_dlpack.wrap(\1).__dlpack__(")
_NUMPY_CONSUMER = (_BARE + r"np\.from_dlpack\(", "_gpu_dlpack.from_dlpack(")
_NUMPY_HANDED = (_BARE + r"(np\.from_dlpack)\(", r"_handed(\1, ")
_WRAP_DEVICE = (_BARE + r"([A-Za-z_]\w*)\.__dlpack_device__\(", r"_gpu_dlpack.wrap(\1).__dlpack_device__(")

SUITES = {
    "torch": Suite(
        peer="torch",
        path="test/test_dlpack.py",
        consumer=(
            (_BARE + r"torch\.from_dlpack\(", "_consume("),
            (_BARE + r"from_dlpack\(", "_consume("),  # torch.utils.dlpack's
            _NUMPY_CONSUMER,
        ),
        producer=(
            (_BARE + r"(torch\.from_dlpack)\(", r"_handed(\1, "),
            (_BARE + r"(from_dlpack)\(", r"_handed(\1, "),
            _NUMPY_HANDED,
            (_BARE + r"to_dlpack\(", "_gpu_dlpack.export("),
            # The file's own producer that speaks only DLPack, handed to torch.tensor.
            (_BARE + r"TensorDLPackWrapper\(", "_gpu_dlpack.wrap("),
            _WRAP_DUNDER,
        ),
    ),
    "jax": Suite(
        peer="jax",
        path="tests/array_interoperability_test.py",
        consumer=(
            (_BARE + r"jax\.dlpack\.from_dlpack\(", "_consume("),
            (_BARE + r"jnp\.from_dlpack\(", "_consume("),
            _NUMPY_CONSUMER,
        ),
        producer=(
            (_BARE + r"(jax\.dlpack\.from_dlpack)\(", r"_handed(\1, "),
            (_BARE + r"(jnp\.from_dlpack)\(", r"_handed(\1, "),
            _NUMPY_HANDED,
            _WRAP_DUNDER,
        ),
        prepare=_whole_jax_products,
        runs=("x64", "x32"),  # with and without JAX's 64-bit types
        run=_jax_run,
    ),
    "tensorflow": Suite(
        peer="tensorflow",
        path="tensorflow/python/dlpack/dlpack_test.py",
        # ``dlpack`` is tensorflow.python.dlpack.dlpack, the module behind
        # tf.experimental.dlpack: its importer takes a capsule only.
        consumer=(
            (_BARE + r"dlpack\.from_dlpack\(", "_consume("),
        ),
        producer=(
            (_BARE + r"(dlpack\.from_dlpack)\(", r"_handed(\1, "),
            (_BARE + r"dlpack\.to_dlpack\(", "_gpu_dlpack.export("),
        ),
        prepare=_quiet_tensorflow,
    ),
    "paddle": Suite(
        peer="paddle",
        path="test/legacy_test/test_dlpack.py",
        consumer=(
            (_BARE + r"paddle\.utils\.dlpack\.from_dlpack\(", "_consume("),
            (_BARE + r"paddle\.from_dlpack\(", "_consume("),
        ),
        producer=(
            (_BARE + r"(paddle\.utils\.dlpack\.from_dlpack)\(", r"_handed(\1, "),
            (_BARE + r"(paddle\.from_dlpack)\(", r"_handed(\1, "),
            (_BARE + r"paddle\.utils\.dlpack\.to_dlpack\(", "_gpu_dlpack.export("),
            (_BARE + r"paddle\.to_dlpack\(", "_gpu_dlpack.export("),
            _WRAP_DUNDER,
            _WRAP_DEVICE,
        ),
        prepare=_beside_it,
    ),
}

# The suites that each run in a process of their own, apart from every other
# suite: PaddlePaddle and TensorFlow imported into one process have crashed
# (tests/test_peers_apart.py).
APART = ("tensorflow", "paddle")


def rewrite(source: str, suite: str, role: str) -> tuple[str, dict[str, int]]:
    """``source`` as ``role`` runs it, and how often each pattern matched."""
    if role not in ROLES:
        raise ValueError(f"role {role!r} is not one of {ROLES}")
    counts: dict[str, int] = {}
    if role == "itself":
        return source, counts
    for pattern, replacement in getattr(SUITES[suite], role):
        source, counts[pattern] = re.subn(pattern, replacement, source)
    return source, counts


def _is_capsule(x: Any) -> bool:
    return type(x).__name__ == "PyCapsule"


def _handed(consumer, x, /, *args, **kwargs):
    """``consumer(x, ...)`` with the producer ``x`` behind the layer's wrapper."""
    return consumer(x if _is_capsule(x) else gpu_dlpack.wrap(x), *args, **kwargs)


def load(path: str, suite: str, role: str) -> types.ModuleType:
    """The file at ``path`` rewritten for ``role``, as a module of its own."""
    with open(path, encoding="utf-8") as f:
        source, counts = rewrite(f.read(), suite, role)
    if counts and not any(counts.values()):
        raise AssertionError(f"the {role}'s rewrite of {path} matched nothing: the file changed shape")
    peer = SUITES[suite].peer
    name = f"tests._peer_{suite}_as_{role}"
    module = types.ModuleType(name)
    module.__file__ = path
    module._gpu_dlpack = gpu_dlpack
    module._handed = _handed
    module._consume = lambda x, /, **kwargs: gpu_dlpack.convert(x, peer, **kwargs)
    sys.modules[name] = module
    exec(compile(source, path, "exec"), module.__dict__)
    return module


def cases(module: types.ModuleType) -> dict[str, tuple[type, str]]:
    """The module's test cases by name, ``Class::method``, followed for a case
    of an absl product by its parameters, ``(name=value, ...)``."""
    found = {}
    loader = unittest.TestLoader()
    for cls in vars(module).values():
        if not (isinstance(cls, type) and issubclass(cls, unittest.TestCase)) or cls.__module__ != module.__name__:
            continue
        for method in loader.getTestCaseNames(cls):
            params = getattr(getattr(cls, method), "__x_params_repr__", "")
            found[f"{cls.__name__}::{method}{params}"] = (cls, method)
    return found


def _pattern(row: str) -> re.Pattern[str]:
    # '*' is the only wildcard: the cases' names hold brackets and parentheses.
    return re.compile(".*".join(re.escape(part) for part in row.split("*")) + r"\Z")


def run_of(suite: str) -> str:
    """The suite's run in this process: one of its ``runs``, or ``""``
    for a suite that has none."""
    spec = SUITES[suite]
    run = spec.run() if spec.run is not None else ""
    if run not in (spec.runs or ("",)):
        raise ValueError(f"the {suite} suite's run {run!r} is not one of its runs {spec.runs}")
    return run


def applies(row: Row, suite: str, role: str, run: str) -> bool:
    """Whether ``row`` is for the suite and role, in the run ``run``."""
    return row.suite == suite and row.role == role and row.run in ("", run)


def decided(suite: str, role: str, case: str, run: str = "") -> list[Row]:
    """The rows of the table that name ``case`` in the run ``run``."""
    return [row for row in DIFFERENCES if applies(row, suite, role, run) and _pattern(row.case).match(case)]


def names_a_case(row: str, names) -> bool:
    """Whether the table's case pattern ``row`` matches one of ``names``."""
    pattern = _pattern(row)
    return any(pattern.match(name) for name in names)


def mark(cls: type, method: str, reason: str) -> None:
    """``cls.method`` as a strict expected failure, for ``reason``."""
    fn = getattr(cls, method)

    @functools.wraps(fn)
    def marked(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    marked.pytestmark = [*getattr(fn, "pytestmark", []), pytest.mark.xfail(reason=reason, strict=True)]
    setattr(cls, method, marked)


def find(directories: list[str]) -> dict[str, str]:
    """Each suite's file in ``directories``: ``{suite: path}``."""
    found: dict[str, str] = {}
    for suite, spec in SUITES.items():
        paths = [p for p in (os.path.join(d, spec.path) for d in directories) if os.path.isfile(p)]
        if len(paths) > 1:
            raise ValueError(f"{spec.path} is in more than one of the directories: {paths}")
        if paths:
            found[suite] = paths[0]
    return found


@dataclass
class Loaded:
    """One suite's file loaded for one role."""

    suite: str
    role: str
    module: types.ModuleType
    cases: dict[str, tuple[type, str]]
    run: str = ""  # run_of(suite) when loaded

    def tests(self):
        """``(name, test)``: the module's test classes and test functions,
        under names that say the suite and the role."""
        for name, obj in vars(self.module).items():
            if getattr(obj, "__module__", None) != self.module.__name__:
                continue
            if isinstance(obj, type) and issubclass(obj, unittest.TestCase):
                yield f"{self.suite}_{self.role}__{name}", obj
            elif isinstance(obj, types.FunctionType) and name.startswith("test"):
                yield f"test_{self.suite}_{self.role}__{name}", obj


def rows_for(loaded) -> list[Row]:
    """The table's rows for the suites and roles of ``loaded``, each in the
    run it was loaded in: those whose cases the run must show."""
    return sorted(row for one in loaded for row in DIFFERENCES if applies(row, one.suite, one.role, one.run))


def load_all(files: dict[str, str], roles) -> list[Loaded]:
    """Each file of ``files`` loaded for each role, each case the table
    names for it in this process's run marked."""
    loaded = []
    for suite, path in files.items():
        if SUITES[suite].prepare is not None:
            SUITES[suite].prepare(path)
        run = run_of(suite)
        for role in roles:
            module = load(path, suite, role)
            found = cases(module)
            for case, (cls, method) in found.items():
                rows = decided(suite, role, case, run)
                if rows:
                    mark(cls, method, "; ".join(DIFFERENCES[row] for row in rows))
            loaded.append(Loaded(suite, role, module, found, run))
    return loaded


# -- the figures of a run ---------------------------------------------------------

OUTCOMES = ("passed", "xfailed", "skipped", "failed")


def tally(junit_xml: str) -> dict[tuple[str, str], dict[str, int]]:
    """``{(suite, role): {outcome: count}}`` of a run's JUnit report; the
    runner's own checks count as suite ``runner``."""
    import xml.etree.ElementTree as ET

    counts: dict[tuple[str, str], dict[str, int]] = {}
    for case in ET.parse(junit_xml).iter("testcase"):
        key = ("runner", "")
        for where in (case.get("classname", "").rsplit(".", 1)[-1], case.get("name", "")):
            m = re.match(r"(?:test_)?([a-z]+)_(consumer|producer|itself)__", where)
            if m and m.group(1) in SUITES:
                key = (m.group(1), m.group(2))
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif skipped is not None:
            outcome = "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"
        else:
            outcome = "passed"
        row = counts.setdefault(key, dict.fromkeys(OUTCOMES, 0))
        row[outcome] += 1
    return counts


def main(argv: list[str]) -> int:
    """``python -m tests.peer_suites LABEL=JUNIT.xml...``: the figures of
    each run, one line per suite and role."""
    print(f"{'run':<24} {'suite':<10} {'role':<9} " + " ".join(f"{o:>8}" for o in OUTCOMES))
    for arg in argv:
        label, _, path = arg.partition("=")
        for (suite, role), row in sorted(tally(path).items()):
            if suite != "runner":
                print(f"{label:<24} {suite:<10} {role:<9} " + " ".join(f"{row[o]:>8}" for o in OUTCOMES))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
