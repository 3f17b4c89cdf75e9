#!/usr/bin/env bash
# The main job: `gpu-dlpack doctor` (what in this stack interoperates) and
# the demo exchange, on the GPU when there is one, else on the CPU.
#
# In an environment of its own, .venv-main (GPU_DLPACK_VENV picks another),
# made on the first run: the package and what those two exchange with,
# pyproject.toml's `main` dependency group (NumPy, torch's CPU build, JAX,
# CuPy, ml_dtypes, array-api-strict, tvm-ffi), at the versions the tests pin
# (requirements/test-py3.X.txt, as constraints): not the test environment.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export GPU_DLPACK_VENV="${GPU_DLPACK_VENV:-$root/.venv-main}" GPU_DLPACK_LOCK="" GPU_DLPACK_GROUPS=main
export GPU_DLPACK_CONSTRAIN=1
source "$root/scripts/_venv.sh"
status=0
gpu-dlpack doctor "$@" || status=$?
echo
gpu-dlpack demo || status=$?
exit $status
