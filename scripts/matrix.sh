#!/usr/bin/env bash
# The suite on every other CPython the package claims:
#   bash scripts/matrix.sh [VERSION ...]   (default: each claimed CPython but the main one)
#
# The main interpreter (CPython 3.11, .venv) runs the whole test command;
# for each other CPython that pyproject.toml's classifiers claim, in
# .venv-py3.X (made from requirements/test-py3.X.txt, the newest NumPy,
# JAX and, where it has a build here, torch that it admits):
#   1. the compiled core built in place for that interpreter (scripts/_envs.sh);
#   2. the suite on it (the run fails if it is not the one loaded), in two
#      passes (scripts/_passes.sh: on every core, then the serial tests).
# The long sweeps are shortened there (the knobs below): they run in full on
# the main interpreter. A claimed CPython that this machine lacks is a
# failure under CI=true, and a skip, said, elsewhere. Each run writes its
# results to build/matrix/ (JUnit XML and the versions it ran with), which
# scripts/matrix_summary.py reads; every run is made, and the script fails
# at the end if one failed.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
source "$here/_envs.sh"
main=$(main_python_version)
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  mapfile -t versions < <(claimed_pythons | grep -v -x "$main")
fi
# Shorter sweeps off the main interpreter (scripts/_passes.sh; the figures
# of both forms are in docs/internals/testing.md).
source "$here/_passes.sh"
short_sweeps
missing=() failed=()
for v in "${versions[@]}"; do
  if [ -z "$(python_for "$v")" ]; then
    missing+=("$v")
    echo "matrix: CPython $v is claimed but not on this machine" >&2
    continue
  fi
  # Each run goes on whatever the one before gave: the summary shows them all.
  # A process of its own: set -e holds in it (not in a subshell left of ||).
  bash -c 'set -euo pipefail; source "$1/_envs.sh"; use_env "py$2"; bash "$1/suite.sh" "py$2" -q -p no:cacheprovider' \
    _ "$here" "$v" || failed+=("$v")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "matrix: the suite failed under CPython ${failed[*]}" >&2
  exit 1
fi
if [ ${#missing[@]} -gt 0 ] && [ "${CI:-}" = "true" ]; then
  echo "matrix: claimed CPythons missing under CI=true: ${missing[*]}" >&2
  exit 1
fi
