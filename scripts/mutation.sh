#!/usr/bin/env bash
# Mutation testing of the policy and capsule modules with mutmut: each module
# is mutated on its own, against the focused tests that guard its rules, in a
# copy of the tree under $MUTATION_DIR (default /tmp/gpu_dlpack-mutation).
#
#   bash scripts/mutation.sh                 # all five modules, one after another
#   bash scripts/mutation.sh _rules _capsule # some of them
#
# Per module it prints mutmut's summary, writes MODULE/summary.txt (the
# counts and the score) and MODULE/survivors.txt (each surviving mutant and
# its diff). Knobs: MUTATION_JOBS (parallel mutants, default 1),
# MUTATION_TIMEOUT (seconds per module, default 1800), GPU_DLPACK_PYTHON (an
# interpreter that already has the test extra and mutmut; otherwise the
# project's .venv is made with the test and mutation extras).
# Not part of scripts/test.sh: a full run takes tens of minutes.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -n "${GPU_DLPACK_PYTHON:-}" ]; then
  py=$GPU_DLPACK_PYTHON
else
  GPU_DLPACK_EXTRAS="test,mutation" source "$root/scripts/_venv.sh"
  py=python
fi
mutmut=("$py" -c "import sys; from mutmut.__main__ import cli; sys.argv[0] = 'mutmut'; cli()")
work=${MUTATION_DIR:-/tmp/gpu_dlpack-mutation}
jobs=${MUTATION_JOBS:-1}
limit=${MUTATION_TIMEOUT:-1800}

# The tests that guard each module's rules (fast ones: no subprocesses, no
# soak or property runs).
declare -A TESTS=(
  [_rules]="tests/test_export_rules.py tests/test_import_rules.py tests/test_gpu_rules.py tests/test_bad_arguments.py tests/test_versions.py"
  [_export]="tests/test_export_rules.py tests/test_bad_arguments.py tests/test_malformed.py tests/test_common_exchanges.py tests/test_versions.py tests/test_streams.py tests/test_inspect.py tests/test_reliability.py tests/test_device_producers.py"
  [_import]="tests/test_import_rules.py tests/test_bad_arguments.py tests/test_malformed.py tests/test_common_exchanges.py tests/test_streams.py tests/test_gpu_rules.py tests/test_inspect.py tests/test_reliability.py tests/test_device_producers.py"
  [_capsule]="tests/test_malformed.py tests/test_inspect.py tests/test_common_exchanges.py tests/test_export_rules.py tests/test_import_rules.py tests/test_versions.py tests/test_reliability.py tests/test_device_producers.py"
  [_streams]="tests/test_streams.py tests/test_gpu_rules.py tests/test_bad_arguments.py tests/test_export_rules.py"
)
DESELECT="not environment and not jax_arrays_on_a_cpu_device_other_than_0"

modules=("$@")
[ ${#modules[@]} -eq 0 ] && modules=(_rules _export _import _capsule _streams)
for module in "${modules[@]}"; do
  tests=${TESTS[$module]:?no test selection for $module}
  dir=$work/$module
  rm -rf "$dir" && mkdir -p "$dir"
  commit=$(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- gpu_dlpack tests || echo "+changes")
  cp -r "$root/gpu_dlpack" "$root/tests" "$root/conftest.py" "$root/pyproject.toml" "$dir/"
  find "$dir" -name __pycache__ -prune -exec rm -rf {} +
  {
    echo "[mutmut]"
    echo "source_paths = gpu_dlpack"
    echo "only_mutate = gpu_dlpack/$module.py"
    echo "also_copy = conftest.py"
    echo "pytest_add_cli_args ="
    printf '    %s\n' -p no:cacheprovider -m "not slow and not gpu" -k "$DESELECT"
    echo "pytest_add_cli_args_test_selection ="
    for t in $tests; do echo "    $t"; done
  } > "$dir/setup.cfg"
  echo "== mutating gpu_dlpack/$module.py against: $tests" >&2
  (cd "$dir" && JAX_PLATFORMS=cpu timeout "$limit" "${mutmut[@]}" run --max-children "$jobs") || echo "mutmut run ended with status $?" >&2
  (cd "$dir" && "${mutmut[@]}" results --all true > results.txt) || true
  # Score: killed (by a failing test, a timeout or a crash) over every
  # mutant that ran; "no tests" mutants count as survivors.
  "$py" - "$dir" "gpu_dlpack/$module.py at $commit" <<'PY'
import collections, pathlib, sys
d = pathlib.Path(sys.argv[1])
status = dict(line.strip().rsplit(": ", 1) for line in (d / "results.txt").read_text().splitlines() if ": " in line)
counts = collections.Counter(status.values())
killed = counts["killed"] + counts["timeout"] + counts["segfault"]
ran = sum(n for s, n in counts.items() if s not in ("skipped", "not checked"))
lines = [sys.argv[2]] + [f"  {s}: {n}" for s, n in counts.most_common()]
lines.append(f"score: {killed} of {ran} killed ({100 * killed / max(ran, 1):.1f}%)")
(d / "summary.txt").write_text("\n".join(lines) + "\n")
(d / "survivors.list").write_text("".join(f"{k}\n" for k, s in status.items() if s in ("survived", "no tests", "suspicious")))
PY
  : > "$dir/survivors.txt"
  while read -r name; do
    (cd "$dir" && "${mutmut[@]}" show "$name" < /dev/null) >> "$dir/survivors.txt" 2>&1 || true
  done < "$dir/survivors.list"
  cat "$dir/summary.txt"
done
