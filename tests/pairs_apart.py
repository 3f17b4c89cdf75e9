"""The pairs of one peer that must not share a process with the other
(``GPU_DLPACK_PAIRS_APART``: tensorflow or paddle), run by
tests/test_pairs.py in an interpreter of its own."""

import os

import pytest

from tests import pairs as P
from tests.figures import counter_fixture
from tests.test_pairs import pair_test

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
APART = os.environ.get("GPU_DLPACK_PAIRS_APART", "")
if APART not in P.APART:
    pytest.skip("run by tests/test_pairs.py with GPU_DLPACK_PAIRS_APART set", allow_module_level=True)

cases = counter_fixture(f"property cases generated: pairs of {APART}")

test_pairs_kept_apart = pair_test(P.pairs(APART))
