"""The capsule fuzzer (tests/fuzz_capsules.py) in the suite: crafted
DLPack structs fed to every entry point, in an interpreter of their own, so
that a crash is reported with its case. GPU_DLPACK_FUZZ_CASES sets the number of cases
(scripts/test.sh runs 4,000 once; 300 elsewhere), GPU_DLPACK_FUZZ_SEED the
seed (a new one each run, printed with the figures).

Its reentrancy cases (tests/reentrant.py): producers that call back into
the layer, raise, or answer with other capsules or the same one twice, and
finalizers and GC callbacks that change what a call is working on.
GPU_DLPACK_REENTRANCY_CASES sets their number (scripts/test.sh
runs 2,000 once, scripts/sanitize.sh --quick 300 under ASan; 200
elsewhere)."""

import os

from .figures import counter_fixture
from .fuzz_capsules import REENTRANT_ENTRIES, describe, fuzz

figures = counter_fixture("capsule fuzzer")

CASES = int(os.environ.get("GPU_DLPACK_FUZZ_CASES", "300"))
REENTRANCY_CASES = int(os.environ.get("GPU_DLPACK_REENTRANCY_CASES", "200"))
SEED = os.environ.get("GPU_DLPACK_FUZZ_SEED")


def test_crafted_capsules_are_refused_or_taken_cleanly(figures):
    report = fuzz(CASES, None if SEED is None else int(SEED))
    for entry, n in report["runs"].items():
        figures[entry] += n
    figures.notes.append(describe(report, limit=0).splitlines()[0])
    assert not report["crashes"], describe(report)
    assert not report["violations"], describe(report)
    # The cases reached every entry point (copy and torch: where they apply).
    drawn = report["cases"]
    always = ("import", "inspect", "view", "export", "adapt versioned", "adapt legacy", "import host-tested",
              "export host-tested", "wrap host-tested")
    assert drawn >= CASES * 9 // 10 and all(report["runs"].get(e) == drawn for e in always)


def test_code_run_inside_the_layers_calls_is_taken_cleanly(figures):
    report = fuzz(REENTRANCY_CASES, None if SEED is None else int(SEED), family="reentrancy")
    for entry, n in report["runs"].items():
        figures["reentrancy: " + entry] += n
    figures.notes.append(describe(report, limit=0).splitlines()[0])
    assert not report["crashes"], describe(report)
    assert not report["violations"], describe(report)
    drawn = report["cases"]
    assert drawn >= REENTRANCY_CASES * 9 // 10 and sum(report["runs"].values()) == drawn
    if drawn >= 100:  # every entry reached (torch's where it is installed)
        assert all(report["runs"].get(e) for e in REENTRANT_ENTRIES if e != "torch"), report["runs"]
