#!/usr/bin/env bash
# Run the test suite in .venv (made on the first run), after running each
# benchmark once as a smoke test so that they never rot. The suite runs
# twice: on the compiled core (built here in place; the run fails if it is
# not active) and on the pure-Python path (GPU_DLPACK_PURE_PYTHON=1).
# Extra arguments go to the test runs, e.g. scripts/test.sh -k versions
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
python -c "import setuptools" 2>/dev/null || python -m pip install -q setuptools  # not in 3.12+ venvs
python setup.py -q build_ext --inplace
python -m pytest bench --benchmark-disable -q || [ $? -eq 5 ]  # 5: none collected
echo "== tests on the compiled core" >&2
GPU_DLPACK_EXPECT_CORE=1 python -m pytest tests "$@"
echo "== tests on the pure-Python path (GPU_DLPACK_PURE_PYTHON=1)" >&2
GPU_DLPACK_PURE_PYTHON=1 GPU_DLPACK_EXPECT_CORE=0 python -m pytest tests "$@"
