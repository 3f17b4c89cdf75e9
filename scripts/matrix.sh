#!/usr/bin/env bash
# The suite on every other CPython the package claims:
#   bash scripts/matrix.sh [VERSION ...]   (default: each claimed CPython but the main one)
#
# The main interpreter (CPython 3.11, .venv) runs the whole test command;
# for each other CPython that pyproject.toml's classifiers claim, in
# .venv-py3.X (made from requirements/test-py3.X.txt, the newest NumPy,
# JAX and, where it has a build here, torch that it admits):
#   1. the compiled core built in place for that interpreter;
#   2. the suite on it (the run fails if it is not the one loaded).
# The long sweeps are shortened there (the knobs below): they run in full on
# the main interpreter. A claimed CPython that this machine lacks is a
# failure under CI=true, and a skip, said, elsewhere. Each run writes its
# results to build/matrix/ (JUnit XML and the versions it ran with), which
# scripts/matrix_summary.py reads; every run is made, and the script fails
# at the end if one failed.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
source "$here/_pythons.sh"
main=$(main_python_version)
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  mapfile -t versions < <(claimed_pythons | grep -v -x "$main")
fi
# Shorter sweeps off the main interpreter (the defaults, and the main runs'
# figures, are in docs/internals/testing.md).
export GPU_DLPACK_FUZZ_CASES="${GPU_DLPACK_FUZZ_CASES:-300}"
export GPU_DLPACK_SOAK_INTERRUPTS="${GPU_DLPACK_SOAK_INTERRUPTS:-300}"
export GPU_DLPACK_LEAK_CYCLES="${GPU_DLPACK_LEAK_CYCLES:-20000}"
export GPU_DLPACK_THREAD_CYCLES="${GPU_DLPACK_THREAD_CYCLES:-500}"
export GPU_DLPACK_FAULT_STRIDE="${GPU_DLPACK_FAULT_STRIDE:-4}"
export GPU_DLPACK_PAIR_EXAMPLES="${GPU_DLPACK_PAIR_EXAMPLES:-15}"
missing=() failed=()
for v in "${versions[@]}"; do
  py=$(python_for "$v")
  if [ -z "$py" ]; then
    missing+=("$v")
    echo "matrix: CPython $v is claimed but not on this machine" >&2
    continue
  fi
  # Each run goes on whatever the one before gave: the summary shows them all.
  (
    export PYTHON=$py GPU_DLPACK_VENV="$root/.venv-py$v"
    source "$here/_venv.sh"
    echo "matrix: CPython $v: the compiled core" >&2
    python setup.py -q build_ext --inplace >/dev/null
    bash "$here/suite.sh" "py$v" -q -p no:cacheprovider
  ) || failed+=("$v")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "matrix: the suite failed under CPython ${failed[*]}" >&2
  exit 1
fi
if [ ${#missing[@]} -gt 0 ] && [ "${CI:-}" = "true" ]; then
  echo "matrix: claimed CPythons missing under CI=true: ${missing[*]}" >&2
  exit 1
fi
