#!/usr/bin/env bash
# One run of the suite, recorded for the matrix's summary:
#   bash scripts/suite.sh NAME [pytest args]
# in the active environment, from the repository's root. NAME ends in
# "-core" (the compiled core, which must be active) or "-pure" (the
# pure-Python path). Writes NAME.xml (JUnit) and NAME.json (the interpreter
# and the peers' versions) into $GPU_DLPACK_RESULTS (default build/matrix),
# then exits as pytest did.
set -euo pipefail
name=$1
shift
out=${GPU_DLPACK_RESULTS:-build/matrix}
mkdir -p "$out"
case "$name" in
  *-core) export GPU_DLPACK_EXPECT_CORE=1; unset GPU_DLPACK_PURE_PYTHON ;;
  *-pure) export GPU_DLPACK_PURE_PYTHON=1 GPU_DLPACK_EXPECT_CORE=0 ;;
  *) echo "suite.sh: NAME must end in -core or -pure: $name" >&2; exit 2 ;;
esac
echo "suite: $name ($(python --version 2>&1))" >&2
python - "$out/$name.json" <<'PY'
import importlib.metadata as md
import json
import platform
import sys

def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None

import gpu_dlpack._fastpath as fastpath

json.dump({"python": platform.python_version(), "path": fastpath.active(),
           "peers": {n: version(n) for n in ("numpy", "torch", "jax", "cupy-cuda12x", "ml_dtypes",
                                             "array-api-strict", "apache-tvm-ffi", "numba-cuda")}},
          open(sys.argv[1], "w"))
PY
python -m pytest tests --junitxml="$out/$name.xml" -o junit_family=xunit2 "$@"
