#!/usr/bin/env bash
# The coverage of the GPU-facing code on this host: scripts/gpu-coverage.sh [--rev REV] [--suite]
#
# The GPU-facing code: the CuPy backend (gpu_dlpack/_backends/cupy/), _handoff,
# _copies, _streams and _protocols (coverage.py, lines and branches), and the
# core's CUDA side, gpu_dlpack/core/runtime.pxi (gcov, with the core built with
# --coverage: the C functions Cython makes of runtime.pxi in the generated
# gpu_dlpack/_core.c; for a REV from before the port, gpu_dlpack/core/runtime.c).
# Runs, in a copy of the tree (of commit REV with --rev):
#   the tests that reach that code on the CPU (GPU_TESTS below; --suite: the
#   whole suite), and where the tree has the simulated CUDA (tests/simcuda),
#   the gpu tests on it (as scripts/gpu-sim.sh runs them).
# Prints lines and branches covered, and each GPU-facing function no test
# ran (scripts/gpu_coverage.py). Not part of scripts/test.sh: three to five
# minutes on two cores (--suite: the whole suite twice, under coverage).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/_venv.sh"
rev="" suite=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rev) rev=$2; shift 2 ;;
    --suite) suite=1; shift ;;
    *) echo "usage: scripts/gpu-coverage.sh [--rev REV] [--suite]" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /tmp/gpu_dlpack-coverage-XXXXXX)
trap 'rm -rf "$work"' EXIT
if [ -n "$rev" ]; then
  git -C "$root" archive "$rev" | tar -x -C "$work"
else
  (cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 -I{} cp --parents {} "$work")
fi
cd "$work"
CFLAGS="--coverage" LDFLAGS="--coverage" python setup.py -q build_ext --inplace >/dev/null
cat > .coveragerc <<'EOF'
[run]
branch = True
parallel = True
# Children too: forked ones (the fork handlers), interpreters the tests start,
# and processes that leave by os._exit.
patch = subprocess, fork, _exit
include =
    gpu_dlpack/_backends/cupy/*.py
    gpu_dlpack/_handoff.py
    gpu_dlpack/_copies.py
    gpu_dlpack/_streams.py
    gpu_dlpack/_protocols.py
EOF
GPU_TESTS="tests/test_copies.py tests/test_copy_calls.py tests/test_core.py tests/test_streams.py \
  tests/test_protocols.py tests/test_gpu_rules.py tests/test_reliability.py tests/test_device_producers.py \
  tests/test_producer_kit.py tests/test_simulated_cuda.py"
# tests/test_faults.py for its forks (the fork handlers), not for its failing
# allocations (_testcapi.set_nomemory), under which coverage's own tracer crashes.
FORK_TESTS="tests/test_faults.py"
if [ "$suite" = 1 ]; then
  selection=(tests)
else
  selection=()
  for f in $GPU_TESTS; do [ -f "$f" ] && selection+=("$f"); done
fi
run() {  # run LABEL ENV... -- PYTEST ARGS...
  local label=$1; shift
  echo "== scripts/gpu-coverage.sh: $label" >&2
  env "$@" >/dev/null 2>"$work/$label.log" || { echo "(see $label.log: some tests failed)" >&2; true; }
}
pytest_cov=(python -m coverage run --rcfile=.coveragerc -m pytest -q -p no:cacheprovider)
run "tests" GPU_DLPACK_EXPECT_CORE=1 "${pytest_cov[@]}" "${selection[@]}"
if [ "$suite" = 0 ] && [ -f "$FORK_TESTS" ]; then
  run "forks" GPU_DLPACK_EXPECT_CORE=1 "${pytest_cov[@]}" "$FORK_TESTS" -k fork
fi
if [ -d tests/simcuda ]; then
  mapfile -t gpu_files < <(grep -l "mark\.gpu" tests/test_*.py)
  sim=(GPU_DLPACK_SIMCUDA=1 JAX_PLATFORMS=cpu GPU_DLPACK_LEAK_CYCLES=2000 GPU_DLPACK_EXAMPLES=0.25)
  run "gpu tests on the simulated CUDA" "${sim[@]}" GPU_DLPACK_EXPECT_CORE=1 "${pytest_cov[@]}" "${gpu_files[@]}" -m gpu
fi
python -m coverage combine --rcfile=.coveragerc -q
python -m coverage json --rcfile=.coveragerc -q -o coverage.json
out=${GPU_COVERAGE_OUT:-$root/build/coverage}
mkdir -p "$out"
if [ -f gpu_dlpack/core/runtime.pxi ]; then
  objdir=$(dirname "$(find build -name _core.gcda | head -1)")
  gcov -b -c -f -o "$objdir" gpu_dlpack/_core.c >gcov.txt 2>&1 || true
  cp coverage.json gcov.txt gpu_dlpack/_core.c "$out"/ && cp _core.c.gcov "$out"/ 2>/dev/null || true
  python "$root/scripts/gpu_coverage.py" coverage.json _core.c.gcov "${rev:-the working tree}" gpu_dlpack/_core.c
  echo "(coverage.json, gcov.txt, _core.c and _core.c.gcov in $out)"
else
  objdir=$(dirname "$(find build -name runtime.gcda | head -1)")
  gcov -b -c -f -o "$objdir" gpu_dlpack/core/runtime.c >gcov.txt 2>&1 || true
  cp coverage.json gcov.txt "$out"/ && cp runtime.c.gcov "$out"/ 2>/dev/null || true
  python "$root/scripts/gpu_coverage.py" coverage.json gcov.txt "${rev:-the working tree}"
  echo "(coverage.json, gcov.txt and runtime.c.gcov in $out)"
fi
