#!/usr/bin/env bash
# One run of the suite, recorded for the matrix's summary:
#   bash scripts/suite.sh NAME [pytest args]
# in the active environment, from the repository's root, on the compiled
# core built for that interpreter (the run stops at once if it does not
# load). Writes NAME.xml (JUnit) and NAME.json (the interpreter and the
# peers' versions) into $GPU_DLPACK_RESULTS (default build/matrix), then
# exits as pytest did.
set -euo pipefail
name=$1
shift
out=${GPU_DLPACK_RESULTS:-build/matrix}
mkdir -p "$out"
# Read by tests/test_core.py: the core must be the one loaded.
export GPU_DLPACK_EXPECT_CORE=1
echo "suite: $name ($(python --version 2>&1))" >&2
python - "$out/$name.json" <<'PY'
import importlib.metadata as md
import json
import platform
import sys

import gpu_dlpack._core  # noqa: F401  (not built for this interpreter: stop here, before the suite)


def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


json.dump({"python": platform.python_version(),
           "peers": {n: version(n) for n in ("numpy", "torch", "jax", "cupy-cuda12x", "ml_dtypes",
                                             "array-api-strict", "apache-tvm-ffi", "numba-cuda")}},
          open(sys.argv[1], "w"))
PY
python -m pytest tests --junitxml="$out/$name.xml" -o junit_family=xunit2 "$@"
