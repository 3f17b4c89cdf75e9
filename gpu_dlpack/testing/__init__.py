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

A package of a module per concept: ``_report`` (a rule, its row, the
report), ``_producer`` and ``_consumer`` (each role's rules and checks),
``_children`` (the importer's checks in child processes), ``_suites`` (the
pytest suites).

Floor: a face, beside ``_convert``: it stands on both directions.
"""

from ._consumer import CONSUMER_RULES, check_consumer
from ._producer import RULES, check_producer
from ._report import Report, Row, Rule, assert_conforms, values
from ._suites import ConsumerTests, ProducerTests

# The suites and the report name this package as their module (the pytest
# plugin reads it; the documentation shows it).
for _public in (ConsumerTests, ProducerTests, Report, Row, Rule):
    _public.__module__ = __name__
del _public

__all__ = ["CONSUMER_RULES", "RULES", "ConsumerTests", "ProducerTests", "Report", "Row", "Rule", "assert_conforms",
           "check_consumer", "check_producer", "values"]
