#!/usr/bin/env bash
# PyTorch's and JAX's own DLPack tests through the layer:
#   scripts/peer-suites.sh DIR... [-- pytest args]
#
# Each DIR is laid out as a checkout of torch or JAX at the installed release,
# or holds both files: DIR/test/test_dlpack.py (pytorch/pytorch),
# DIR/tests/array_interoperability_test.py (jax-ml/jax). Neither file is in
# its library's wheel or sdist, so this is not part of scripts/test.sh
# (docs/internals/testing.md, "The peers' own suites").
#
# In the environment of GPU_DLPACK_PEER_PYTHON (an interpreter whose
# environment holds gpu_dlpack from this checkout, the peers, pytest,
# hypothesis, absl-py and expecttest), else in .venv (absl-py and expecttest
# added there when missing), with the compiled core built in place for that
# interpreter:
#   1. each file as it is (role "itself"): it must pass whole, which shows it
#      is the installed release's;
#   2. through the layer (label "layer"): the consumer and producer roles
#      (tests/run_peer_suites.py) with JAX's 64-bit types, then JAX's file
#      again without them (JAX's default; label "layer-jax-x32").
# Prints the figures of each run per suite and role (the runs' logs and JUnit
# reports are in build/peer-suites/); exits 1 if any run failed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dirs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  dirs+=("$(cd "$1" && pwd)")
  shift
done
[ "${1:-}" = "--" ] && shift
if [ ${#dirs[@]} -eq 0 ]; then
  echo "usage: scripts/peer-suites.sh DIR... [-- pytest args]" >&2
  exit 2
fi
if [ -n "${GPU_DLPACK_PEER_PYTHON:-}" ]; then
  py=$GPU_DLPACK_PEER_PYTHON
  cd "$root"
else
  source "$root/scripts/_venv.sh"
  py=python
  "$py" -c "import absl.testing, expecttest" 2>/dev/null || "$py" -m pip install -q absl-py expecttest
fi
"$py" -c 'import os, sys, gpu_dlpack
here = os.path.dirname(os.path.dirname(os.path.abspath(gpu_dlpack.__file__)))
sys.exit(None if here == sys.argv[1] else
         f"{sys.executable} imports gpu_dlpack from {here}: pip install -e {sys.argv[1]} into its environment")' "$root"
"$py" setup.py -q build_ext --inplace
GPU_DLPACK_PEER_TESTS=$(IFS=:; echo "${dirs[*]}")
export GPU_DLPACK_PEER_TESTS
out="$root/build/peer-suites"
rm -rf "$out" && mkdir -p "$out"
"$py" -c 'import importlib.metadata as m, platform
print("CPython", platform.python_version(), *(f"{p} {m.version(p)}" for p in ("numpy", "torch", "jax", "jaxlib")
      if m.distributions(name=p)))'
has_jax=$("$py" -c 'import os, sys; from tests import peer_suites as p
print(int("jax" in p.find(os.environ["GPU_DLPACK_PEER_TESTS"].split(":"))))')
status=0
runs=()
run() {  # run LABEL VAR=VALUE...: one pytest run of tests/run_peer_suites.py
  local label=$1
  shift
  echo "== scripts/peer-suites.sh: $label ($*)" >&2
  if env "$@" "$py" -m pytest tests/run_peer_suites.py -q -rfE -p no:cacheprovider \
      --junitxml="$out/$label.xml" "${pytest_args[@]}" >"$out/$label.log" 2>&1; then
    tail -n 1 "$out/$label.log"
  else
    grep -E "^(FAILED|ERROR)" "$out/$label.log" || tail -n 30 "$out/$label.log"
    tail -n 1 "$out/$label.log"
    status=1
  fi
  runs+=("$label=$out/$label.xml")
}
pytest_args=("$@")
run itself GPU_DLPACK_PEER_ROLES=itself
# GPU_DLPACK_EXPECT_CORE: tests/run_peer_suites.py checks that the core built above is the one loaded.
run layer GPU_DLPACK_EXPECT_CORE=1 JAX_ENABLE_X64=1
if [ "$has_jax" = 1 ]; then
  run layer-jax-x32 GPU_DLPACK_EXPECT_CORE=1 JAX_ENABLE_X64=0 GPU_DLPACK_PEER_SUITES=jax
fi
"$py" -m tests.peer_suites "${runs[@]}"
exit $status
