#!/usr/bin/env bash
# The gpu tests on the simulated CUDA: scripts/gpu-sim.sh [--long] [pytest args]
#
# Without a GPU: real CuPy runs on the simulated CUDA of tests/simcuda (its
# runtime and driver modules replaced at their C entries before CuPy is
# imported; GPU_DLPACK_SIMCUDA=1), two GPUs, and every test marked gpu
# that needs no kernel runs, on the compiled core, whose CUDA calls reach
# the simulator through CuPy's own entries. A test fails on any report of
# the simulator's checker (a read or write another stream's work was never
# waited for, device memory CuPy's pool took back while another stream's
# queued work still uses it, freed memory, an unknown or destroyed stream
# or event, an event recorded on another device's stream, the host touching
# device memory or memory that queued work still writes, an operation CUDA
# forbids during stream capture); an installed CuPy whose C entries differ
# from what the simulator implements stops the run, naming the entry. What
# still needs a GPU skips, with why
# (docs/internals/testing.md lists it).
#
# Then the tests of streams, copies and captures again, with the hand-off and
# the copies made by CuPy's Python calls (GPU_DLPACK_SIMCUDA_UNBOUND=1: the
# path where the core is not bound to CuPy's runtime).
#
# The short form (scripts/test.sh runs it) soaks the leak test 2,000 times and
# runs a quarter of the property examples; --long runs them in full. Exits as
# pytest did: non-zero when a test fails.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
if [ "${1:-}" = "--long" ]; then
  shift
else
  export GPU_DLPACK_LEAK_CYCLES=${GPU_DLPACK_LEAK_CYCLES:-2000} GPU_DLPACK_EXAMPLES=${GPU_DLPACK_EXAMPLES:-0.25}
fi
python -c "import gpu_dlpack._core" || { echo "gpu-sim: the compiled core is not built: python setup.py build_ext --inplace" >&2; exit 1; }
export GPU_DLPACK_SIMCUDA=1 JAX_PLATFORMS=cpu
# Only the files that hold gpu tests: collecting the whole suite takes longer than running these.
mapfile -t files < <(grep -l "mark\.gpu" tests/test_*.py)
echo "== scripts/gpu-sim.sh: the gpu tests on the simulated CUDA" >&2
python -m pytest "${files[@]}" -m gpu -q -p no:cacheprovider "$@"
# Again, the stream hand-off, the copies and the capture checks as CuPy's
# Python calls, the path the layer takes where the compiled core is not
# bound to CuPy's runtime module (an entry whose C signature differs): the
# tests of streams, copies and captures.
echo "== scripts/gpu-sim.sh: the same, as CuPy's Python calls (the core not bound)" >&2
GPU_DLPACK_SIMCUDA_UNBOUND=1 python -m pytest tests/test_gpu.py tests/test_gpu_stream_order.py \
  tests/test_gpu_reliability.py tests/test_capture.py tests/test_copies.py -m gpu -q -p no:cacheprovider "$@"
