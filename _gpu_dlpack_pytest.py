"""gpu_dlpack's pytest plugin: a ``gpu_dlpack.testing.ProducerTests`` (or
``ConsumerTests``) bound to a ``test_`` name in a test module is collected
as one test per DLPack rule.

Pytest loads it with the package (an entry point, ``pytest11``); it is a
module of its own, outside the package, so that loading it imports nothing
of gpu_dlpack (nor NumPy) until such an object is found: a suite that does
not use it runs as if it were not installed.
"""

from __future__ import annotations

import pytest


def _is_suite(obj) -> bool:
    cls = type(obj)
    return cls.__name__ in ("ProducerTests", "ConsumerTests") and cls.__module__ == "gpu_dlpack.testing"


def pytest_pycollect_makeitem(collector, name, obj):
    if _is_suite(obj) and collector.funcnamefilter(name):
        return Rules.from_parent(collector, name=name, suite=obj)
    return None


class Rules(pytest.Collector):
    """The suite's tests: one per rule, named by its id."""

    def __init__(self, *, suite, **kwargs):
        super().__init__(**kwargs)
        self.suite = suite

    def collect(self):
        for rule in self.suite.rules.values():
            yield Rule.from_parent(self, name=rule.id, number=rule.number)


class Rule(pytest.Item):
    """One rule's test."""

    def __init__(self, *, number, **kwargs):
        super().__init__(**kwargs)
        self.number = number

    def runtest(self):
        self.parent.suite.run(self.name)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, AssertionError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"DLPack rule {self.number} {self.name}"
