#!/usr/bin/env bash
# Mutation testing of the policy and capsule modules with mutmut: each module
# is mutated on its own, against the focused tests that guard its rules, in a
# copy of the tree under $MUTATION_DIR (default /tmp/gpu_dlpack-mutation).
#
#   bash scripts/mutation.sh                 # all six modules, one after another
#   bash scripts/mutation.sh _rules _capsule # some of them
#
# The compiled core is built in place first and copied with the tree: the
# mutants run on it (the package has no other path). MUTATION_REUSE=1 keeps
# what a stopped run finished (and the tree and commit it began with) and
# runs the rest. MUTATION_ONLY="name ..." runs only those mutants (the
# survivors of a run, after tests were added). Per module it prints mutmut's
# summary, writes MODULE/summary.txt (the counts and the score),
# MODULE/results.txt (each mutant's status) and MODULE/survivors.txt (each
# surviving mutant and its diff). Knobs: MUTATION_JOBS (parallel mutants,
# default 1), MUTATION_TIMEOUT (seconds per module, default 1800),
# GPU_DLPACK_PYTHON (an interpreter that already has the test environment
# and mutmut; otherwise the project's .venv is made with the mutation
# dependency group too).
# Not part of scripts/test.sh: a full run takes tens of minutes.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -n "${GPU_DLPACK_PYTHON:-}" ]; then
  py=$GPU_DLPACK_PYTHON
else
  GPU_DLPACK_GROUPS=mutation source "$root/scripts/_venv.sh"
  py=python
fi
mutmut=("$py" -c "import sys; from mutmut.__main__ import cli; sys.argv[0] = 'mutmut'; cli()")
work=${MUTATION_DIR:-/tmp/gpu_dlpack-mutation}
jobs=${MUTATION_JOBS:-1}
limit=${MUTATION_TIMEOUT:-1800}
(cd "$root" && "$py" setup.py -q build_ext --inplace)

# The tests that guard each module's rules (fast ones: no subprocesses, no
# soak or property runs). mutmut runs each mutant's tests in a process forked
# from one that ran them all, with JAX's threads started: there JAX hangs on
# anything its missing threads would do (compiling, arrays over several
# devices) until mutmut's timeout, which counts as a kill. So
# tests/test_shards.py (JAX arrays over 4 host devices) stays out.
declare -A TESTS=(
  [_rules]="tests/test_export_rules.py tests/test_import_rules.py tests/test_gpu_rules.py tests/test_bad_arguments.py tests/test_versions.py"
  [_export]="tests/test_export_rules.py tests/test_bad_arguments.py tests/test_malformed.py tests/test_common_exchanges.py tests/test_versions.py tests/test_streams.py tests/test_inspect.py tests/test_reliability.py tests/test_device_producers.py tests/test_shards.py tests/test_protocols.py"
  [_exchange]="tests/test_export_rules.py tests/test_bad_arguments.py tests/test_malformed.py tests/test_common_exchanges.py tests/test_versions.py tests/test_streams.py tests/test_inspect.py tests/test_reliability.py tests/test_device_producers.py tests/test_shards.py tests/test_protocols.py"
  [_import]="tests/test_import_rules.py tests/test_bad_arguments.py tests/test_malformed.py tests/test_common_exchanges.py tests/test_streams.py tests/test_gpu_rules.py tests/test_inspect.py tests/test_reliability.py tests/test_device_producers.py tests/test_protocols.py"
  [_capsule]="tests/test_malformed.py tests/test_inspect.py tests/test_common_exchanges.py tests/test_export_rules.py tests/test_import_rules.py tests/test_versions.py tests/test_reliability.py tests/test_device_producers.py tests/test_protocols.py"
  [_streams]="tests/test_streams.py tests/test_gpu_rules.py tests/test_bad_arguments.py tests/test_export_rules.py"
)
# Left out: tests of the environment, the Numba simulator (5 s of imports per
# mutant), the tests that pin a warning to the caller's line (mutmut's
# trampolines are frames of their own between the caller and the package),
# and those that make allocations fail (the trampoline allocates too, and
# its SystemError fails mutmut's first, unmutated run).
DESELECT="not environment and not jax_arrays_on_a_cpu_device_other_than_0 and not numba_simulator and not callers_line and not runs_out_of_memory"
# Imported once by the server each mutant is forked from (import only: no
# JAX or torch runtime is started before the fork).
PRELOAD="numpy torch jax jax.numpy jax.dlpack ml_dtypes hypothesis"

modules=("$@")
[ ${#modules[@]} -eq 0 ] && modules=(_rules _exchange _export _import _capsule _streams)
for module in "${modules[@]}"; do
  tests=${TESTS[$module]:?no test selection for $module}
  out=$work/$module
  dir=$work/$module-mutants
  if [ -z "${MUTATION_REUSE:-}" ] || [ ! -s "$out/commit" ]; then
    rm -rf "$out" "$dir" && mkdir -p "$out/tree"
    # The tree as it was when the run began, the core built in place with it.
    cp -r "$root/gpu_dlpack" "$root/tests" "$root/conftest.py" "$root/pyproject.toml" "$out/tree/"
    find "$out/tree" -name __pycache__ -prune -exec rm -rf {} +
    echo "$(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- gpu_dlpack tests || echo "+changes")" > "$out/commit"
  fi
  commit=$(cat "$out/commit")
  if [ -n "${MUTATION_REUSE:-}" ] && [ -s "$out/results.txt" ]; then
    if grep -q ': not checked$' "$out/results.txt" && [ -d "$dir/mutants" ]; then
      # Stopped (by the time limit) before every mutant ran: mutmut goes on
      # with the mutants that have no result yet.
      echo "== resuming $dir" >&2
      (cd "$dir" && JAX_PLATFORMS=cpu timeout "$limit" "${mutmut[@]}" run --max-children "$jobs") || echo "mutmut run ended with status $?" >&2
      (cd "$dir" && "${mutmut[@]}" results --all true > "$out/results.txt") || true
    else
      echo "== reusing the results of $out" >&2
    fi
  else
    only=(${MUTATION_ONLY:-})
    rm -rf "$dir" && mkdir -p "$dir"
    cp -r "$out/tree/." "$dir/"
    printf '%s\n' $PRELOAD > "$dir/preload.txt"
    {
      echo "[mutmut]"
      echo "source_paths = gpu_dlpack"
      echo "only_mutate = gpu_dlpack/$module.py"
      echo "also_copy = conftest.py"
      # Fork each mutant from a server that has only imported the peers:
      # forked from mutmut's own process, which ran the tests once, a child
      # inherits JAX's runtime without its threads and hangs in its first
      # JAX call (a hang that counted as a kill).
      echo "process_isolation = forkserver"
      echo "forkserver_warmup = import"
      echo "preload_modules_file = preload.txt"
      echo "pytest_add_cli_args ="
      printf '    %s\n' -p no:cacheprovider -m "not slow and not gpu" -k "$DESELECT"
      echo "pytest_add_cli_args_test_selection ="
      for t in $tests; do echo "    $t"; done
    } > "$dir/setup.cfg"
    echo "== mutating gpu_dlpack/$module.py${MUTATION_ONLY:+ (${#only[@]} mutants)} against: $tests" >&2
    (cd "$dir" && JAX_PLATFORMS=cpu timeout "$limit" "${mutmut[@]}" run --max-children "$jobs" "${only[@]}") || echo "mutmut run ended with status $?" >&2
    (cd "$dir" && "${mutmut[@]}" results --all true > "$out/results.txt") || true
  fi
  # Score: killed (by a failing test, a timeout or a crash) over every mutant
  # that ran; "no tests" mutants count as survivors.
  "$py" - "$out" "gpu_dlpack/$module.py at $commit" <<'PY'
import collections, pathlib, sys
d, title = pathlib.Path(sys.argv[1]), sys.argv[2]
KILLED = ("killed", "timeout", "segfault")
results = d / "results.txt"
status = dict(line.strip().rsplit(": ", 1) for line in results.read_text().splitlines() if ": " in line) if results.exists() else {}
counts = collections.Counter(status.values())
killed = sum(counts[s] for s in KILLED)
ran = sum(n for s, n in counts.items() if s not in ("skipped", "not checked"))
lines = [title] + [f"  {s}: {n}" for s, n in counts.most_common()]
lines.append(f"score: {killed} of {ran} killed ({100 * killed / max(ran, 1):.1f}%)")
(d / "summary.txt").write_text("\n".join(lines) + "\n")
(d / "survivors.list").write_text("".join(f"{k}\n" for k, s in status.items() if s in ("survived", "no tests", "suspicious")))
PY
  : > "$out/survivors.txt"
  while read -r name; do
    (cd "$dir" && "${mutmut[@]}" show "$name" < /dev/null) >> "$out/survivors.txt" 2>&1 || true
  done < "$out/survivors.list"
  cat "$out/summary.txt"
done
