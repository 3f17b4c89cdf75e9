#!/usr/bin/env bash
# The peers' own DLPack tests through the layer:
#   scripts/peer-suites.sh DIR... [-- pytest args]
#
# Each DIR is laid out as a checkout of a peer at the installed release, or
# holds several of the files: DIR/test/test_dlpack.py (pytorch/pytorch),
# DIR/tests/array_interoperability_test.py (jax-ml/jax),
# DIR/tensorflow/python/dlpack/dlpack_test.py (tensorflow/tensorflow),
# DIR/test/legacy_test/test_dlpack.py with its utils.py (PaddlePaddle/Paddle).
# No such file is in its library's wheel or sdist, so this is not part of
# scripts/test.sh (docs/internals/testing.md, "The peers' own suites").
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
#      again without them (JAX's default; label "layer-jax-x32"): JAX's runs
#      "x64" and "x32", which a row of tests/peer_differences.py may name.
# torch's and JAX's files run in one process per run; TensorFlow's and
# PaddlePaddle's each in processes of their own, apart from every other
# suite (labels "itself-SUITE" and "layer-SUITE"): the two imported into one
# process have crashed.
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
names = ("numpy", "torch", "jax", "jaxlib", "tensorflow", "tensorflow-cpu", "paddlepaddle", "paddlepaddle-gpu")
print("CPython", platform.python_version(), *(f"{p} {m.version(p)}" for p in names if any(m.distributions(name=p))))'
# The suites found: those that share a process (torch, JAX), then each of
# those that run apart (TensorFlow, PaddlePaddle).
together=$("$py" -c 'import os; from tests import peer_suites as p
print(",".join(s for s in p.find(os.environ["GPU_DLPACK_PEER_TESTS"].split(":")) if s not in p.APART))')
apart=$("$py" -c 'import os; from tests import peer_suites as p
print(" ".join(s for s in p.find(os.environ["GPU_DLPACK_PEER_TESTS"].split(":")) if s in p.APART))')
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
# GPU_DLPACK_EXPECT_CORE: tests/run_peer_suites.py checks that the core built above is the one loaded.
if [ -n "$together" ]; then
  run itself GPU_DLPACK_PEER_ROLES=itself GPU_DLPACK_PEER_SUITES="$together"
  run layer GPU_DLPACK_EXPECT_CORE=1 JAX_ENABLE_X64=1 GPU_DLPACK_PEER_SUITES="$together"
  case ",$together," in
    *,jax,*) run layer-jax-x32 GPU_DLPACK_EXPECT_CORE=1 JAX_ENABLE_X64=0 GPU_DLPACK_PEER_SUITES=jax ;;
  esac
fi
for suite in $apart; do
  run "itself-$suite" GPU_DLPACK_PEER_ROLES=itself GPU_DLPACK_PEER_SUITES="$suite" TF_CPP_MIN_LOG_LEVEL=2
  run "layer-$suite" GPU_DLPACK_EXPECT_CORE=1 GPU_DLPACK_PEER_SUITES="$suite" TF_CPP_MIN_LOG_LEVEL=2
done
"$py" -m tests.peer_suites "${runs[@]}"
exit $status
