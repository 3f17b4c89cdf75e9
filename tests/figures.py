"""Figures the hardening tests report: how many cases each generated or fed.

Each module keeps a Counter and prints it once its tests are done, on the
terminal (also under -q and with output captured), so a run shows what it
covered.
"""

from __future__ import annotations

import collections

import pytest


def counter_fixture(title):
    """A module-scoped autouse fixture yielding a Counter that is reported
    on the terminal when the module's tests end."""

    @pytest.fixture(scope="module", autouse=True)
    def figures(request):
        counts = collections.Counter()
        yield counts
        if not counts:
            return
        text = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
        line = f"[{title}] {text} (total {sum(counts.values())})"
        plugins = request.config.pluginmanager
        reporter = plugins.get_plugin("terminalreporter")
        capture = plugins.get_plugin("capturemanager")
        if reporter is None or capture is None:
            print(line)
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            reporter.write_line(line)

    return figures
