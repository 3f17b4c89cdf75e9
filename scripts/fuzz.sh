#!/usr/bin/env bash
# The capsule fuzzer's long form: scripts/fuzz.sh [CASES [ROUNDS]]
#
# ROUNDS rounds (default 5) of CASES cases each (default 10,000), each with
# a new seed, on the compiled core built in place, in an interpreter of its
# own (tests/fuzz_capsules.py): crafted capsules, then as many reentrancy
# cases (producers and finalizers that run Python code inside the layer's
# calls). Stops at the first round with a crash or a broken invariant (the
# checks docs/internals/testing.md lists), and prints its seed:
# `python -m tests.fuzz_capsules [--family reentrancy] --cases N --seed S`
# runs that round again. Under the sanitizers: scripts/sanitize.sh --
# tests/test_fuzz.py with GPU_DLPACK_FUZZ_CASES and
# GPU_DLPACK_REENTRANCY_CASES set.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cases="${1:-10000}"
rounds="${2:-5}"
python setup.py -q build_ext --inplace
for round in $(seq 1 "$rounds"); do
  echo "== scripts/fuzz.sh: round $round of $rounds, $cases cases" >&2
  python -m tests.fuzz_capsules --cases "$cases"
  python -m tests.fuzz_capsules --family reentrancy --cases "$cases"
done
