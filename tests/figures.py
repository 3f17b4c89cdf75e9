"""Figures the hardening tests report: how many cases each generated or fed.

Each module keeps a Counter and prints it once its tests are done, on the
terminal (also under -q and with output captured), so a run shows what it
covered. Under pytest-xdist a worker has no terminal: it hands its lines to
the controller (``workeroutput``, read by the root conftest), which prints
them with the run's summary.
"""

from __future__ import annotations

import collections

import pytest


#: The lines an xdist worker's modules reported, for its controller.
WORKER_LINES = pytest.StashKey[list]()


class Figures(collections.Counter):
    """Counts, plus free-form ``notes`` (measurements) printed after them."""

    def __init__(self):
        super().__init__()
        self.notes = []


def counter_fixture(title):
    """A module-scoped autouse fixture yielding a ``Figures`` that is
    reported on the terminal when the module's tests end."""

    @pytest.fixture(scope="module", autouse=True)
    def figures(request):
        counts = Figures()
        yield counts
        if not counts and not counts.notes:
            return
        text = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
        lines = [f"[{title}] {text} (total {sum(counts.values())})"]
        lines += [f"[{title}] {note}" for note in counts.notes]
        if hasattr(request.config, "workerinput"):  # an xdist worker: the controller prints them
            request.config.stash.setdefault(WORKER_LINES, []).extend(lines)
            return
        plugins = request.config.pluginmanager
        reporter = plugins.get_plugin("terminalreporter")
        capture = plugins.get_plugin("capturemanager")
        if reporter is None or capture is None:
            print("\n".join(lines))
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            for line in lines:
                reporter.write_line(line)

    return figures
