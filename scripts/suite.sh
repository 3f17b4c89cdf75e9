#!/usr/bin/env bash
# One run of the suite, recorded for the matrix's summary:
#   bash scripts/suite.sh NAME [pytest args]
# in the active environment, from the repository's root, on the compiled
# core built for that interpreter (the run stops at once if it does not
# load), in two passes (scripts/_passes.sh: on every core, then the tests
# marked serial alone). Writes NAME.xml and NAME-serial.xml (JUnit) and
# NAME.json (the interpreter and the peers' versions, a peer hidden by
# GPU_DLPACK_TEST_HIDE as absent) into $GPU_DLPACK_RESULTS (default
# build/matrix), then exits as pytest did.
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
import os
import platform
import sys

import gpu_dlpack._core  # noqa: F401  (not built for this interpreter: stop here, before the suite)


HIDDEN = {"torch": "torch", "jax": "jax", "cupy": "cupy-cuda12x", "ml_dtypes": "ml_dtypes",
          "array_api_strict": "array-api-strict", "tvm_ffi": "apache-tvm-ffi", "numba": "numba-cuda"}
hidden = {HIDDEN.get(m, m) for m in os.environ.get("GPU_DLPACK_TEST_HIDE", "").split(",") if m}


def version(name):
    if name in hidden:
        return None
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


json.dump({"python": platform.python_version(),
           "peers": {n: version(n) for n in ("numpy", "torch", "jax", "cupy-cuda12x", "ml_dtypes",
                                             "array-api-strict", "apache-tvm-ffi", "numba-cuda")}},
          open(sys.argv[1], "w"))
PY
source "$(dirname "${BASH_SOURCE[0]}")/_passes.sh"
passes "$name" python -m pytest tests -- "$@"
