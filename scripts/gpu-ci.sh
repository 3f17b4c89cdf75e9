#!/usr/bin/env bash
# The GPU CI job: scripts/gpu-ci.sh OUTDIR
#
# For a GPU runner whose python3 already has numpy, cupy, torch, jax, pytest
# and pytest-benchmark (matplotlib for the plot); nothing is installed. Runs
# the GPU test suite (scripts/gpu-tests.sh) and the benchmarks, host and GPU,
# and writes into OUTDIR:
#   gpu-tests.xml, gpu-tests.log    JUnit XML and log of the GPU tests
#   benchmarks.json                 pytest-benchmark's JSON
#   benchmarks.xml, benchmarks.log  JUnit XML and log of the benchmark run
#   summary.md                      ratios to each peer, bandwidths, copy targets (bench/report.py)
#   copy-phases.md, copy-phases.json  the time of each step of a 4 KiB, 16 MiB and
#                                   64 MiB copy each way (bench/copy_phases.py)
#   bandwidth.png                   bandwidth against size (when matplotlib is there)
# Each step is time-boxed so the job ends in about 9 minutes at worst (about
# 2 normally). Exits non-zero when the tests or the benchmarks failed; the
# summary is written in every case.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ $# -lt 1 ]; then
  echo "usage: scripts/gpu-ci.sh OUTDIR" >&2
  exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
py=${PYTHON:-python3}
cd "$root"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
status=0

echo "gpu-ci: GPU tests"
GPU_TESTS_ALLOW_NO_GPU=${GPU_TESTS_ALLOW_NO_GPU:-0} \
  timeout -k 10 "${GPU_CI_TESTS_TIMEOUT:-270}" bash scripts/gpu-tests.sh "$out"
tests_status=$?
[ $tests_status -ne 0 ] && status=$tests_status

echo "gpu-ci: benchmarks"
# The host benchmarks compare with JAX on the CPU; the copies are sized and
# their rounds capped (bench/test_gpu.py) to fit the job's time.
JAX_PLATFORMS=cpu XLA_PYTHON_CLIENT_PREALLOCATE=false \
  timeout -k 10 "${GPU_CI_BENCH_TIMEOUT:-210}" "$py" -m pytest bench -p no:cacheprovider -q \
  --benchmark-only --benchmark-json="$out/benchmarks.json" \
  --benchmark-max-time=0.25 --benchmark-min-rounds=5 --benchmark-columns=min,median,max,rounds \
  --junitxml="$out/benchmarks.xml" -o junit_suite_name=gpu_dlpack-benchmarks 2>&1 \
  | tee "$out/benchmarks.log"
bench_status=${PIPESTATUS[0]}
[ $bench_status -ne 0 ] && [ $status -eq 0 ] && status=$bench_status

echo "gpu-ci: copy phases"
# A few seconds: where the time of one copy goes, beside x.get(), cupy.asarray(h)
# and the bare cudaMemcpyAsync (appended to the summary).
timeout -k 5 "${GPU_CI_PHASES_TIMEOUT:-60}" "$py" bench/copy_phases.py -o "$out/copy-phases.md" \
  --json "$out/copy-phases.json" 2>&1 | tail -n 5
phases_status=${PIPESTATUS[0]}

echo "gpu-ci: summary"
if [ -s "$out/benchmarks.json" ]; then
  "$py" bench/report.py "$out/benchmarks.json" -o "$out/summary.md" --plot "$out/bandwidth.png" \
    || { [ $status -eq 0 ] && status=1; }
else
  printf '# gpu_dlpack benchmarks\n\nNo benchmark results: the benchmark run exited with status %s (see benchmarks.log).\n' \
    "$bench_status" > "$out/summary.md"
fi
if [ -s "$out/copy-phases.md" ]; then
  { echo; cat "$out/copy-phases.md"; } >> "$out/summary.md"
else
  printf '\nCopy phases: not measured (exit status %s).\n' "$phases_status" >> "$out/summary.md"
fi
case $tests_status in
  0) tests_said="passed" ;;
  3) tests_said="not run: no GPU usable by CuPy" ;;
  124|137) tests_said="stopped after ${GPU_CI_TESTS_TIMEOUT:-270} s" ;;
  *) tests_said="failed (exit status $tests_status)" ;;
esac
printf '
GPU tests: %s (gpu-tests.xml, gpu-tests.log). Benchmarks: exit status %s (benchmarks.log).
' \
  "$tests_said" "$bench_status" >> "$out/summary.md"
cat "$out/summary.md"
exit $status
