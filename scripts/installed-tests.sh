#!/usr/bin/env bash
# The suite against an installed gpu_dlpack (a wheel), never a source tree:
#   bash scripts/installed-tests.sh [--no-core] [pytest args...]
#
# Run from a folder that holds copies of tests/, conftest.py, pyproject.toml
# (the pytest settings) and bench/report.py, but no gpu_dlpack/: cibuildwheel
# makes one from its test-sources and runs this as its test command
# (pyproject.toml, [tool.cibuildwheel]); scripts/release-check.sh does the
# same in a fresh venv. `python` is the interpreter the wheel is installed in.
#
# First it checks that gpu_dlpack is imported from that interpreter's
# site-packages. Then the suite runs on the compiled core, which must load
# (GPU_DLPACK_EXPECT_CORE=1), and again on the pure-Python path. With
# --no-core (a wheel built where no compiler worked) the wheel must carry no
# core, and the suite runs once, on the pure-Python path it has. Left out:
# the tests of the repository rather than the package (tests/test_docs.py
# reads README.md, tests/test_packaging.py builds from the checkout,
# tests/test_workflows.py reads .github/, tests/test_gpu_ci.py runs
# scripts/gpu-ci.sh).
set -euo pipefail
core=1
if [ "${1:-}" = --no-core ]; then
  core=0
  shift
fi
py=${PYTHON:-python}
if [ -e gpu_dlpack ] || [ ! -d tests ]; then
  echo "installed-tests: run from a copy of the tests without gpu_dlpack/ beside them (here: $PWD)" >&2
  exit 2
fi
unset PYTHONPATH GPU_DLPACK_PURE_PYTHON GPU_DLPACK_EXPECT_CORE GPU_DLPACK_TEST_HIDE
"$py" - "$core" <<'PY'
import os
import sys
import sysconfig

import gpu_dlpack
from gpu_dlpack import _fastpath

where = os.path.realpath(os.path.dirname(gpu_dlpack.__file__))
lib = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
if os.path.dirname(where) not in lib:
    sys.exit(f"installed-tests: gpu_dlpack is imported from {where}, not from this interpreter's "
             f"site-packages ({', '.join(sorted(lib))}): install the wheel, not the source tree")
want = "compiled" if sys.argv[1] == "1" else "pure Python"
print(f"installed-tests: gpu_dlpack {gpu_dlpack.__version__} from {where}; {_fastpath.describe()}")
if _fastpath.active() != want:
    sys.exit(f"installed-tests: expected the {want} path in this wheel, found {_fastpath.describe()}")
PY
run() {
  "$py" -m pytest tests -p no:cacheprovider -q \
    --ignore=tests/test_docs.py --ignore=tests/test_packaging.py --ignore=tests/test_workflows.py \
    --ignore=tests/test_gpu_ci.py "$@"
}
if [ $core = 1 ]; then
  echo "installed-tests: the suite on the compiled core" >&2
  GPU_DLPACK_EXPECT_CORE=1 run "$@"
  echo "installed-tests: the suite on the pure-Python path (GPU_DLPACK_PURE_PYTHON=1)" >&2
  GPU_DLPACK_PURE_PYTHON=1 GPU_DLPACK_EXPECT_CORE=0 run "$@"
else
  echo "installed-tests: the suite on the pure-Python path of a wheel without a core" >&2
  GPU_DLPACK_EXPECT_CORE=0 run "$@"
fi
