# Sourced by the scripts that run the suite.
#
#   short_sweeps
# The long sweeps in their short form, for every suite run but the main
# interpreter's (which keeps their counts): each knob exported unless set
# (the figures of both forms are in docs/internals/testing.md).
#
#   passes NAME CMD... -- PYTEST_ARGS...
# One suite run in two passes.
# CMD... PYTEST_ARGS... run twice:
#   1. the tests not marked serial, on every core of the machine (pytest-xdist:
#      -n ${GPU_DLPACK_WORKERS:-auto}, --dist worksteal, which hands a worker
#      that is done the tests still queued on a busy one);
#   2. the tests marked serial (pyproject.toml's markers: forks, allocation
#      failures, timed signals, resident size, timed benchmarks), one after
#      another, beside no other test, in a plain pytest process: an xdist
#      worker runs a thread of its own (execnet's), which a fork may catch
#      holding a lock and an injected allocation failure may hit.
# (pytest-xdist's own grouping, --dist loadgroup, would keep them on one
# worker, beside the others and with that thread; it cannot today either:
# it renames node ids as pytest 9 no longer keeps them.) With NAME not empty, the passes write JUnit to
# $GPU_DLPACK_RESULTS/NAME.xml and NAME-serial.xml (scripts/matrix_summary.py
# counts both as the one run). Returns the status of the first pass that
# failed; a pass that selected nothing (5) fails only if the other did too.
passes() {
  local name=$1 cmd=() status=0 rc=0
  shift
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do cmd+=("$1"); shift; done
  [ "$#" -gt 0 ] && shift
  local out=${GPU_DLPACK_RESULTS:-build/matrix} first=() second=()
  if [ -n "$name" ]; then
    mkdir -p "$out"
    first=(--junitxml="$out/$name.xml" -o junit_family=xunit2)
    second=(--junitxml="$out/$name-serial.xml" -o junit_family=xunit2)
  fi
  "${cmd[@]}" -n "${GPU_DLPACK_WORKERS:-auto}" --dist worksteal -m "not serial" "${first[@]}" "$@" || status=$?
  "${cmd[@]}" -m serial "${second[@]}" "$@" || rc=$?
  if [ "$status" -eq 5 ] && [ "$rc" -ne 5 ]; then
    status=$rc
  elif [ "$status" -eq 0 ] && [ "$rc" -ne 5 ]; then
    status=$rc
  fi
  return "$status"
}

short_sweeps() {
  export GPU_DLPACK_FUZZ_CASES="${GPU_DLPACK_FUZZ_CASES:-300}"
  export GPU_DLPACK_REENTRANCY_CASES="${GPU_DLPACK_REENTRANCY_CASES:-200}"
  export GPU_DLPACK_SOAK_INTERRUPTS="${GPU_DLPACK_SOAK_INTERRUPTS:-300}"
  export GPU_DLPACK_LEAK_CYCLES="${GPU_DLPACK_LEAK_CYCLES:-20000}"
  export GPU_DLPACK_THREAD_CYCLES="${GPU_DLPACK_THREAD_CYCLES:-500}"
  export GPU_DLPACK_FAULT_STRIDE="${GPU_DLPACK_FAULT_STRIDE:-4}"
  export GPU_DLPACK_PAIR_EXAMPLES="${GPU_DLPACK_PAIR_EXAMPLES:-15}"
}
