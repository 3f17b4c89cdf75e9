"""The peers' own DLPack tests run through the layer
(``tests/peer_suites.py`` says how): ``scripts/peer-suites.sh DIR...``, or

    GPU_DLPACK_PEER_TESTS=DIR[:DIR...] python -m pytest tests/run_peer_suites.py

Collected only when named (not a ``test_*`` file): the peers' files are not
installable, so the test command does not run it. ``GPU_DLPACK_PEER_ROLES``
(default ``consumer,producer``) names the roles, from ``consumer``,
``producer`` and ``itself``; ``GPU_DLPACK_PEER_SUITES`` the suites, from
``torch``, ``jax``, ``tensorflow`` and ``paddle`` (default: every file found
but TensorFlow's and PaddlePaddle's). TensorFlow's and PaddlePaddle's each run
alone, in a process of their own (``peer_suites.APART``): named with another
suite, the run is refused. A suite with runs (JAX's: ``x64`` and ``x32``,
from ``JAX_ENABLE_X64``) is marked and checked by the table's rows for every
run and for the run this process is.
"""

from __future__ import annotations

import os

import pytest

from . import peer_suites

_DIRS = [d for d in os.environ.get("GPU_DLPACK_PEER_TESTS", "").split(os.pathsep) if d]
if not _DIRS:
    pytest.skip("GPU_DLPACK_PEER_TESTS names no directory of the peers' test files "
                "(scripts/peer-suites.sh DIR...)", allow_module_level=True)
_ROLES = os.environ.get("GPU_DLPACK_PEER_ROLES", "consumer,producer").split(",")
_FILES = peer_suites.find(_DIRS)
_SUITES = os.environ.get("GPU_DLPACK_PEER_SUITES")
if _SUITES:
    _FILES = {suite: path for suite, path in _FILES.items() if suite in _SUITES.split(",")}
else:
    _FILES = {suite: path for suite, path in _FILES.items() if suite not in peer_suites.APART}
if len(_FILES) > 1 and set(_FILES) & set(peer_suites.APART):
    raise pytest.UsageError(f"GPU_DLPACK_PEER_SUITES={_SUITES}: each of {peer_suites.APART} runs alone, "
                            "in a process of its own (the two in one process have crashed)")
if not _FILES:
    _ALONE = sorted(set(peer_suites.find(_DIRS)) & set(peer_suites.APART))
    pytest.skip(f"no file of {sorted(s.path for s in peer_suites.SUITES.values())} in {_DIRS} to run"
                + (f" with the others ({_ALONE} each run alone: GPU_DLPACK_PEER_SUITES=NAME)" if _ALONE else ""),
                allow_module_level=True)

LOADED = {(one.suite, one.role): one for one in peer_suites.load_all(_FILES, _ROLES)}
for _one in LOADED.values():
    globals().update(_one.tests())
del _one


# The rows for the suites and roles loaded, in this process's run of each.
_ROWS = peer_suites.rows_for(LOADED.values())


@pytest.mark.skipif(not _ROWS, reason="no row of the table is for the suites, roles and runs loaded")
@pytest.mark.parametrize("row", _ROWS or [None], ids=str)
def test_each_listed_difference_names_a_case(row):
    one = LOADED[(row.suite, row.role)]
    assert peer_suites.names_a_case(row.case, one.cases), (
        f"no case of the {row.suite} suite in the {row.role} role"
        + (f" in its run {one.run!r}" if one.run else "") + f" is {row.case!r}: the row is stale")
