#!/usr/bin/env bash
# The suite against an installed gpu_dlpack (a wheel), never a source tree:
#   bash scripts/installed-tests.sh [pytest args...]
#
# Run from a folder that holds copies of tests/, conftest.py, pyproject.toml
# (the pytest settings) and bench/report.py, but no gpu_dlpack/: cibuildwheel
# makes one from its test-sources and runs this as its test command
# (pyproject.toml, [tool.cibuildwheel]); scripts/release-check.sh does the
# same in a fresh venv. `python` is the interpreter the wheel is installed in.
#
# First it checks that gpu_dlpack and its compiled core are imported from
# that interpreter's site-packages, and that the core loads; then the suite
# runs on it (GPU_DLPACK_EXPECT_CORE=1). Left out: the tests of the
# repository rather than the package (tests/test_docs.py reads README.md,
# tests/test_packaging.py builds from the checkout, tests/test_workflows.py
# reads .github/, tests/test_gpu_ci.py runs scripts/gpu-ci.sh).
set -euo pipefail
py=${PYTHON:-python}
if [ -e gpu_dlpack ] || [ ! -d tests ]; then
  echo "installed-tests: run from a copy of the tests without gpu_dlpack/ beside them (here: $PWD)" >&2
  exit 2
fi
unset PYTHONPATH GPU_DLPACK_PURE_PYTHON GPU_DLPACK_EXPECT_CORE GPU_DLPACK_TEST_HIDE
"$py" - <<'PY'
import os
import sys
import sysconfig


def place(path):
    return os.path.normcase(os.path.realpath(path))


import gpu_dlpack

where = place(os.path.dirname(gpu_dlpack.__file__))
lib = {place(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
if os.path.dirname(where) not in lib:
    sys.exit(f"installed-tests: gpu_dlpack is imported from {where}, not from this interpreter's "
             f"site-packages ({', '.join(sorted(lib))}): install the wheel, not the source tree")
try:
    from gpu_dlpack import _core
except ImportError as error:
    sys.exit(f"installed-tests: the wheel's compiled core does not load: {error}")
if place(os.path.dirname(_core.__file__)) != where:
    sys.exit(f"installed-tests: the compiled core is imported from {_core.__file__}, not from {where}")
print(f"installed-tests: gpu_dlpack {gpu_dlpack.__version__} from {where}, its core {os.path.basename(_core.__file__)}")
PY
echo "installed-tests: the suite on the installed wheel" >&2
args=(--ignore=tests/test_docs.py --ignore=tests/test_packaging.py --ignore=tests/test_workflows.py
      --ignore=tests/test_gpu_ci.py "$@")
export GPU_DLPACK_EXPECT_CORE=1
if [ -f scripts/_passes.sh ] && "$py" -c "import xdist" 2>/dev/null; then
  # on every core, then the tests marked serial alone (cibuildwheel's
  # test-requires bring pytest-xdist)
  source scripts/_passes.sh
  passes "" "$py" -m pytest tests -p no:cacheprovider -q -- "${args[@]}"
else
  "$py" -m pytest tests -p no:cacheprovider -q "${args[@]}"
fi
