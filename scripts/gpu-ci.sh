#!/usr/bin/env bash
# The GPU CI job: scripts/gpu-ci.sh OUTDIR
#
# For a GPU runner whose python3 has the packages of requirements/gpu-cuda13.txt
# (or gpu-cuda12.txt; requirements/README.md); nothing is installed here.
# Runs the GPU test suite (scripts/gpu-tests.sh), the benchmarks, host and
# GPU, and the copy phases, and writes into OUTDIR:
#   summary.md                      the verdict and why, what ran (passed, failed,
#                                   skipped from the JUnit files), each target met or
#                                   missed, ratios, bandwidths, the change against the
#                                   last run of main kept (GPU_CI_BASELINE;
#                                   bench/report.py), and the copy phases
#   gpu-tests.xml, gpu-tests.log    JUnit XML and log of the GPU tests
#   benchmarks.json                 pytest-benchmark's JSON, without each round's time
#   benchmarks.xml, benchmarks.log  JUnit XML and log of the benchmark run
#   copy-phases.md, copy-phases.json  the time of each step of a 4 KiB, 16 MiB and
#                                   64 MiB copy each way (bench/copy_phases.py)
#   bandwidth.png                   bandwidth against size (when matplotlib is there)
#
# Skipped is not passed: a run in which no GPU test ran (no GPU) fails.
# It writes nothing outside OUTDIR: the results of main are kept by a job of
# their own that no pull request's code runs in (the workflow's `history` job,
# scripts/gpu-ci-history.sh; requirements/README.md), and only read here.
# Settings, in the environment:
#   GPU_TESTS_ALLOW_NO_GPU=1        run the GPU suite without a GPU (each test skips)
#                                   instead of stopping before it
#   GPU_CI_ALLOW_NOTHING_RAN=1      a suite in which no test ran does not fail the job
#   GPU_CI_FAIL_ON_MISSED_TARGET=1  a missed benchmark target fails the job (default:
#                                   shown, not failing: some targets are still open)
#   GPU_CI_BASELINE=FILE            the benchmarks.json of the last run of main that
#                                   passed, to compare with (the workflow reads it from
#                                   the gpu-ci-history branch); none: no comparison
#   GPU_CI_REGRESSION_MARGIN=25     percent a figure may grow by against that run
#   GPU_CI_FAIL_ON_REGRESSION=0     show regressions without failing the job
#   GPU_CI_BENCH_ARGS="bench"       what the benchmark run collects
#   GPU_CI_TESTS_ARGS=""            more pytest arguments for the GPU suite (a selection)
#   GPU_CI_TESTS_TIMEOUT, GPU_CI_BENCH_TIMEOUT, GPU_CI_PHASES_TIMEOUT  seconds
# Each step is time-boxed so the job ends in about 9 minutes at worst (about
# 2 normally). Exits 0 when the summary's verdict is passed, 1 when failed, 2
# on a usage error; the summary is written in every case.
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
rm -f "$out"/{gpu-tests,benchmarks}.{xml,log} "$out"/benchmarks.json "$out"/copy-phases.{md,json} \
  "$out"/summary.md "$out"/bandwidth.png

echo "gpu-ci: GPU tests"
# shellcheck disable=SC2086  # the arguments are separate words
GPU_TESTS_ALLOW_NO_GPU=${GPU_TESTS_ALLOW_NO_GPU:-0} \
  timeout -k 10 "${GPU_CI_TESTS_TIMEOUT:-270}" bash scripts/gpu-tests.sh "$out" ${GPU_CI_TESTS_ARGS:-}
tests_status=$?

echo "gpu-ci: benchmarks"
# The host benchmarks compare with JAX on the CPU; the copies are sized and
# their rounds capped (bench/test_gpu.py) to fit the job's time.
# shellcheck disable=SC2086  # the selection is separate words
JAX_PLATFORMS=cpu XLA_PYTHON_CLIENT_PREALLOCATE=false \
  timeout -k 10 "${GPU_CI_BENCH_TIMEOUT:-210}" "$py" -m pytest ${GPU_CI_BENCH_ARGS:-bench} -p no:cacheprovider -q \
  --benchmark-only --benchmark-json="$out/benchmarks.json" \
  --benchmark-max-time=0.25 --benchmark-min-rounds=5 --benchmark-columns=min,median,max,rounds \
  --junitxml="$out/benchmarks.xml" -o junit_suite_name=gpu_dlpack-benchmarks 2>&1 \
  | tee "$out/benchmarks.log"
bench_status=${PIPESTATUS[0]}

echo "gpu-ci: copy phases"
# A few seconds: where the time of one copy goes, beside x.get(), cupy.asarray(h)
# and the bare cudaMemcpyAsync (appended to the summary).
timeout -k 5 "${GPU_CI_PHASES_TIMEOUT:-60}" "$py" bench/copy_phases.py -o "$out/copy-phases.md" \
  --json "$out/copy-phases.json" 2>&1 | tail -n 5
phases_status=${PIPESTATUS[0]}

echo "gpu-ci: summary"
baseline=${GPU_CI_BASELINE:-}
args=(--suite "GPU tests" "$out/gpu-tests.xml" "$tests_status"
      --suite "benchmarks" "$out/benchmarks.xml" "$bench_status"
      --plot "$out/bandwidth.png" -o "$out/summary.md"
      --max-regression "${GPU_CI_REGRESSION_MARGIN:-25}")
if [ "$tests_status" -eq 3 ] && [ ! -s "$out/gpu-tests.xml" ]; then
  args+=(--note "GPU tests: no GPU usable by CuPy here, so scripts/gpu-tests.sh stopped before the suite \
(GPU_TESTS_ALLOW_NO_GPU=1 runs it anyway, and every test skips)")
fi
[ "${GPU_CI_ALLOW_NOTHING_RAN:-0}" = 1 ] && args+=(--allow-nothing-ran)
[ "${GPU_CI_FAIL_ON_MISSED_TARGET:-0}" = 1 ] && args+=(--fail-on-missed-target)
[ "${GPU_CI_FAIL_ON_REGRESSION:-1}" = 1 ] && args+=(--fail-on-regression)
if [ -n "$baseline" ] && [ -s "$baseline" ]; then
  args+=(--compare "$baseline" --compare-name "the last run of main kept")
fi
"$py" bench/report.py "$out/benchmarks.json" "${args[@]}"
status=$?
if [ $status -gt 1 ] || [ ! -s "$out/summary.md" ]; then
  printf '# gpu_dlpack GPU CI\n\n**Verdict: failed**\n\n- the report failed (exit status %s); GPU tests: exit status %s, benchmarks: exit status %s\n' \
    "$status" "$tests_status" "$bench_status" > "$out/summary.md"
  status=1
fi
if [ -s "$out/copy-phases.md" ]; then
  { echo; cat "$out/copy-phases.md"; } >> "$out/summary.md"
else
  printf '\nCopy phases: not measured (exit status %s).\n' "$phases_status" >> "$out/summary.md"
fi
cat "$out/summary.md"
exit $status
