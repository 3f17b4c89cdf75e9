#!/usr/bin/env bash
# The test command: scripts/test.sh [--quick] [pytest args for the main runs]
#
# Every suite runs on every core of the machine, in two passes
# (scripts/_passes.sh: pytest-xdist, then the tests marked serial alone),
# and the environments besides .venv are made in the background while the
# first steps run (scripts/envs.sh), so that the whole command fits its
# budget: docs/internals/testing.md gives it and the wall time of each step.
#
# --quick, the loop for a change (at most 5 minutes): steps 2 and 5 only,
# with the sweeps in the short form the other interpreters run, no other
# environment made; the whole command before a change lands.
#
# In .venv, CPython 3.11, the main interpreter (made on the first run from
# requirements/test-py3.11.txt, pinned by scripts/lock.sh from pyproject.toml's
# `test` dependency group):
#   1. the peers the suite checks against are installed (else their tests
#      would only skip);
#   1b. the two NumPy environments (below), made now: their editable
#      installs build this interpreter's core in place, which no step may be
#      loading then;
#   2. the compiled core built in place (gpu_dlpack/_core.pyx and the files
#      of gpu_dlpack/core/ it includes), which every later step runs on; then
#      the other CPythons' environments start being made, in the background
#      (scripts/envs.sh, logged to build/envs.log; each builds its own
#      interpreter's core);
#   3. each benchmark once, and bench/steps.py, as smoke tests (they never rot);
#   4. mypy on the public API (pyproject.toml's [tool.mypy]), and
#      mypy --strict on a user's script of the whole API (tests/typing_usage.py);
#   4b. the layers: import-linter's contracts (pyproject.toml's [tool.importlinter]);
#   4c. the documentation (scripts/docs.sh): docs/ built by Sphinx with every
#       warning an error, the API reference checked against gpu_dlpack.__all__,
#       and every example of the pages run as a doctest (about 10 s);
#   5. the suite (the run fails if the core built in step 2 is not the one
#      loaded), the README's blocks and the modules' doctests included, and
#      4,000 cases of the capsule fuzzer (tests/fuzz_capsules.py; 300 in the
#      other runs) and 2,000 of its reentrancy cases (200 in the other runs);
#   6. the gpu tests on the simulated CUDA under real CuPy (scripts/gpu-sim.sh),
#      and the stream and lifetime bugs it must catch, put in one at a time
#      (scripts/inject-bugs.sh, about a minute);
#   7. the suite again without the optional peers (CuPy, PyTorch, JAX,
#      ml_dtypes, array-api-strict, Numba hidden from import: GPU_DLPACK_TEST_HIDE);
#   8. the core built with ASan and UBSan, and the tests of what the layer
#      accepts and frees run on it, 1,000 fuzz cases and 300 reentrancy
#      cases included (scripts/sanitize.sh --quick; the long form is
#      scripts/sanitize.sh).
# In .venv-numpy-floor (numpy 1.26.4, the oldest NumPy numpy>=1.26 admits,
# with ml_dtypes, pytest and hypothesis; no other peer):
#   9. the suite.
# In .venv-numpy-2.2 (numpy 2.2.6, with ml_dtypes, pytest and hypothesis; no
# other peer): NumPy 2.1 to 2.3 leave a C-contiguous array's strides out of
# their versioned capsules, which the layer hands on as DLPack 1.2:
#   9b. the suite (on the core built in step 2).
# 10. The release artefacts: build, twine check, the sdist refused at its
#    build where no compiler works, the wheel tested in a fresh venv, the
#    pytest plugin in a venv of the wheel and pytest alone
#    (scripts/release-check.sh, about a minute and a half).
# 11. The matrix (scripts/matrix.sh): every other CPython the package claims
#    (3.10, 3.12, 3.13), each in .venv-py3.X from requirements/test-py3.X.txt
#    with the newest NumPy, JAX and (3.13) torch it admits: the core built
#    for it and the suite once, the long sweeps shortened. A claimed CPython
#    missing here fails the run under CI=true.
# Each suite run is recorded (scripts/suite.sh). At the end, whether it
# passed or not, the wall time of each step and the summary of every suite
# run (interpreter, peers, counts: scripts/matrix_summary.py). Stops at the
# first step that fails.
started=$(date +%s)
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
# Disk: a run from a fresh clone leaves about 21 GB of environments and
# builds (.venv 4.7 GB, .venv-py3.13 8.8 GB with torch's CUDA build) and
# needs a few GB more while pip unpacks; refused at once where that is
# not free, not after minutes with pip's "No space left on device".
disk_need_gb=24
if [ "$quick" = 0 ] && [ ! -d "$(dirname "${BASH_SOURCE[0]}")/../.venv-py3.13" ]; then
  disk_free_gb=$(($(df -Pk "$(dirname "${BASH_SOURCE[0]}")/.." | awk 'NR == 2 { print $4 }') / 1048576))
  if [ "$disk_free_gb" -lt "$disk_need_gb" ]; then
    echo "scripts/test.sh: the test command needs about $disk_need_gb GB free for the environments it makes;" \
      "$disk_free_gb GB are free on this clone's disk. Free some space (or run --quick, which makes .venv alone)." >&2
    exit 1
  fi
fi
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
source scripts/_passes.sh
names=("0. the main environment (.venv)") starts=("$started") envs_pid=""
step() { names+=("$*"); starts+=("$(date +%s)"); echo "== scripts/test.sh: $*" >&2; }
step_times() {
  # The wall time of each step, to the next step's start (the last: to now).
  local i n=${#names[@]} now next
  now=$(date +%s)
  echo "== scripts/test.sh: wall time of each step, $((now - started)) s in all (the budget: docs/internals/testing.md)" >&2
  for ((i = 0; i < n; i++)); do
    next=$now
    ((i + 1 < n)) && next=${starts[i + 1]}
    printf '  %5d s  %s\n' "$((next - starts[i]))" "${names[i]%% (*}" >&2
  done
}
finish() {
  local status=$?
  [ -z "$envs_pid" ] || kill -- "-$envs_pid" 2>/dev/null || true  # a run that stopped early
  step_times
  [ "$quick" = 1 ] || python scripts/matrix_summary.py >&2 || true
  return "$status"
}
trap finish EXIT
if [ "$quick" = 1 ]; then
  export GPU_DLPACK_RESULTS="$root/build/quick"
  rm -rf "$GPU_DLPACK_RESULTS"
  step "2. the compiled core"
  python setup.py -q build_ext --inplace
  step "5. the suite, its sweeps in the short form (--quick)"
  short_sweeps
  bash scripts/suite.sh quick -q -p no:cacheprovider "$@"
  exit 0
fi
rm -rf build/matrix
step "1. peers installed"
python -c "import torch, jax, cupy, ml_dtypes, array_api_strict, numba, tvm_ffi, mypy, xdist"
step "1b. the NumPy environments (scripts/envs.sh)"
# Made before the core is built, not beside the steps that load it: each
# installs the package in editable mode, which builds CPython 3.11's core
# in place again, the file every later step of this interpreter loads.
mkdir -p build
bash scripts/envs.sh numpy-floor numpy-2.2 >build/envs-numpy.log 2>&1 ||
  { grep -v "^WARNING: Location" build/envs-numpy.log | tail -n 60 >&2; exit 1; }
step "2. the compiled core"
python -c "import setuptools" 2>/dev/null || python -m pip install -q setuptools  # not in 3.12+ venvs
python setup.py -q build_ext --inplace
# The other CPythons' environments, made while the next steps run (each
# builds its own interpreter's core, a file of its own); waited for at
# step 9. (setsid: a process group of its own, ended whole if the run stops.)
mapfile -t others < <(source scripts/_envs.sh && env_names | grep "^py")
setsid bash scripts/envs.sh "${others[@]}" >build/envs.log 2>&1 &
envs_pid=$!
step "3. benchmarks once, bench/steps.py"
python -m pytest bench --benchmark-disable -q || [ $? -eq 5 ]  # 5: none collected
python bench/steps.py --repeat 1 --number 10 >/dev/null
step "4. mypy"
python -m mypy
python -m mypy --strict tests/typing_usage.py tests/typing_convert.py  # a user's scripts of the whole API
step "4b. the layers (lint-imports)"
lint-imports --no-cache
step "4c. the documentation (scripts/docs.sh)"
bash scripts/docs.sh
step "5. the suite"
GPU_DLPACK_FUZZ_CASES=4000 GPU_DLPACK_REENTRANCY_CASES=2000 bash scripts/suite.sh py3.11 "$@"
step "6. the gpu tests on the simulated CUDA (scripts/gpu-sim.sh), and the bugs it catches (scripts/inject-bugs.sh)"
bash scripts/gpu-sim.sh
bash scripts/inject-bugs.sh
step "7. the suite without the optional peers"
(
  short_sweeps
  GPU_DLPACK_TEST_HIDE=cupy,torch,jax,ml_dtypes,array_api_strict,numba,tvm_ffi bash scripts/suite.sh py3.11-no-peers -q
)
step "8. the core under ASan and UBSan (scripts/sanitize.sh --quick)"
bash scripts/sanitize.sh --quick
step "9. the other CPythons' environments made (scripts/envs.sh, build/envs.log)"
rc=0
wait "$envs_pid" || rc=$?
envs_pid=""
# (pip's notes on this machine's index configuration left out)
if [ "$rc" -ne 0 ]; then
  grep -v "^WARNING: Location" build/envs.log | tail -n 60 >&2
  echo "scripts/envs.sh failed ($rc): the end of build/envs.log above" >&2
  exit "$rc"
fi
grep "^envs: " build/envs.log >&2 || true
step "9a. the suite on the NumPy floor"
(
  source scripts/_envs.sh
  use_env numpy-floor
  short_sweeps
  bash scripts/suite.sh numpy-floor -q
)
step "9b. the suite under NumPy 2.2"
(
  source scripts/_envs.sh
  use_env numpy-2.2
  short_sweeps
  bash scripts/suite.sh numpy-2.2 -q
)
step "10. the release artefacts (scripts/release-check.sh)"
bash scripts/release-check.sh
step "11. the other CPythons the package claims (scripts/matrix.sh)"
bash scripts/matrix.sh
