"""The suites of pytest tests, a test per rule (gpu_dlpack's pytest plugin
collects them): ``ProducerTests`` and ``ConsumerTests``."""

from __future__ import annotations

from typing import Callable, Mapping

from ._consumer import CONSUMER_RULES, check_consumer
from ._producer import RULES, check_producer
from ._report import DTYPES, FAILED, NOT_APPLICABLE, Report, Rule, assert_conforms

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
