#!/usr/bin/env bash
# The test command: scripts/test.sh [pytest args for the main run]
#
# In .venv (made on the first run, with the test extra):
#   1. the peers the suite checks against are installed (else their tests
#      would only skip);
#   2. each benchmark once, and bench/steps.py, as smoke tests (they never rot);
#   3. mypy on the public API (pyproject.toml's [tool.mypy]);
#   4. the suite (doctests of the README and of the modules included);
#   5. the suite again without the optional peers (CuPy, PyTorch, JAX,
#      ml_dtypes, array-api-strict, Numba hidden from import: GPU_DLPACK_TEST_HIDE).
# In .venv-numpy-floor (numpy 1.26.4, the oldest NumPy numpy>=1.26 admits,
# with ml_dtypes, pytest and hypothesis; no other peer):
#   6. the suite.
# Stops at the first step that fails. About 10 minutes on a fresh machine,
# 5 once the environments exist.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
step() { echo "== scripts/test.sh: $*" >&2; }
step "1. peers installed"
python -c "import torch, jax, cupy, ml_dtypes, array_api_strict, numba, mypy"
step "2. benchmarks once, bench/steps.py"
python -m pytest bench --benchmark-disable -q || [ $? -eq 5 ]  # 5: none collected
python bench/steps.py --repeat 1 --number 10 >/dev/null
step "3. mypy"
python -m mypy
step "4. the suite"
python -m pytest tests "$@"
step "5. the suite without the optional peers"
GPU_DLPACK_TEST_HIDE=cupy,torch,jax,ml_dtypes,array_api_strict,numba python -m pytest tests -q
step "6. the suite on the NumPy floor"
(
  export GPU_DLPACK_VENV="$root/.venv-numpy-floor" GPU_DLPACK_EXTRAS=bf16
  export GPU_DLPACK_PIP="numpy==1.26.4 pytest hypothesis"
  source scripts/_venv.sh
  python -c 'import numpy; assert numpy.__version__ == "1.26.4", numpy.__version__'
  python -m pytest tests -q
)
