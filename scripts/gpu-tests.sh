#!/usr/bin/env bash
# The GPU test suite, once, with JUnit XML: scripts/gpu-tests.sh [OUT_DIR] [pytest args...]
#
# For a machine with a GPU whose python3 has the packages of
# requirements/gpu-cuda13.txt or gpu-cuda12.txt (nothing is installed).
# Writes OUT_DIR/gpu-tests.xml (default results/gpu) and
# OUT_DIR/gpu-tests.log; exits with pytest's status. Without a GPU usable by
# CuPy it stops at once with status 3 and writes no XML (every test would
# skip), unless GPU_TESTS_ALLOW_NO_GPU=1; scripts/gpu-ci.sh counts either as
# a run in which nothing ran.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/results/gpu}
[ $# -gt 0 ] && shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
py=${PYTHON:-python3}
cd "$root"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
# The compiled core, built in place (Cython, gcc and the Python headers):
# without it nothing can be tested, and the run stops with status 1.
# GPU_TESTS_BUILD=0 tests the tree as it is.
if [ "${GPU_TESTS_BUILD:-1}" = 1 ]; then
  "$py" setup.py -q build_ext --inplace >/dev/null || { echo "gpu-tests: the compiled core did not build" >&2; exit 1; }
fi
"$py" -c "import gpu_dlpack._core as core; print('gpu-tests: core:', core.__file__)" >&2 ||
  { echo "gpu-tests: the compiled core does not load" >&2; exit 1; }
# JAX takes no GPU memory up front, and runs on the GPU when its plugin works.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
if [ -z "${JAX_PLATFORMS:-}" ]; then
  if JAX_PLATFORMS=cuda,cpu timeout 120 "$py" -c "import jax; jax.devices('gpu')" >/dev/null 2>&1; then
    export JAX_PLATFORMS=cuda,cpu
  else
    export JAX_PLATFORMS=cpu
  fi
fi
{
  echo "gpu-tests: $(date -u +%Y-%m-%dT%H:%M:%SZ) JAX_PLATFORMS=$JAX_PLATFORMS"
  command -v nvidia-smi >/dev/null && nvidia-smi -L
  command -v rocm-smi >/dev/null && rocm-smi --showproductname
  "$py" - <<'PY'
import importlib
for name in ("numpy", "cupy", "torch", "jax", "numba"):
    try:
        print(f"{name} {importlib.import_module(name).__version__}")
    except Exception as exc:
        print(f"{name}: not usable ({type(exc).__name__})")
PY
} 2>&1 | tee "$out/gpu-tests.log"
if ! "$py" -c "import cupy, sys; sys.exit(cupy.cuda.runtime.getDeviceCount() == 0)" >/dev/null 2>&1; then
  echo "gpu-tests: no GPU usable by CuPy here" | tee -a "$out/gpu-tests.log"
  [ "${GPU_TESTS_ALLOW_NO_GPU:-0}" = 1 ] || exit 3
fi
"$py" -m pytest tests -m gpu -p no:cacheprovider -rs \
  --junitxml="$out/gpu-tests.xml" -o junit_suite_name=gpu_dlpack-gpu "$@" 2>&1 | tee -a "$out/gpu-tests.log"
exit "${PIPESTATUS[0]}"
