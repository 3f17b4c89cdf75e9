#!/usr/bin/env bash
# The compiled core under AddressSanitizer and UndefinedBehaviorSanitizer:
#   scripts/sanitize.sh          the whole suite, then the RSS-based leak tests
#                                without ASan's quarantine, then valgrind on
#                                the hot paths (the long form)
#   scripts/sanitize.sh --quick  the tests of what the layer accepts and
#                                frees, 1,000 fuzz cases and 300 reentrancy
#                                cases (scripts/test.sh)
#   scripts/sanitize.sh [--quick] -- PYTEST ARGS   other tests
#
# The tree is copied to build/sanitize (tracked and untracked files, not the
# ignored ones: the C that Cython generates is made afresh there), the core
# built there with -fsanitize=address,undefined (any undefined behaviour
# aborts) on every C file of it, the one Cython writes from
# gpu_dlpack/_core.pyx and its .pxi files as well as the hand-written C
# (the run stops if an object file of the core is not instrumented), and the
# suite run from the copy, so the core built in place is left alone. The
# interpreter is not instrumented: libasan is preloaded, with libstdc++
# beside it (else jaxlib's first C++ exception kills the run on Debian), and
# PYTHONMALLOC=malloc lets ASan see every Python allocation. Leak reports are
# off (CPython, NumPy and the peers keep memory until exit by design). ASan
# keeps freed memory in quarantine, which the RSS-based leak tests read as a
# leak: they run apart, with the quarantine off. pytest captures sys.stderr
# only, so that a sanitizer's report (written to file 2 as the process ends)
# is seen.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
if [ "${1:-}" = "--" ]; then shift; fi
step() { echo "== scripts/sanitize.sh: $*" >&2; }

copy="$root/build/sanitize"
step "copy the tree to $copy"
rm -rf "$copy"
mkdir -p "$copy"
git -C "$root" ls-files -z --cached --others --exclude-standard |
  (cd "$root" && xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' _) |
  (cd "$root" && tar --null -T - -cf -) | tar -xf - -C "$copy"

flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
step "the core with $flags"
# setup.py compiles every C file of the core with CFLAGS, the generated one included.
(cd "$copy" && CFLAGS="$flags" LDFLAGS="-fsanitize=address,undefined" python setup.py -q build_ext --inplace)
# Each object file carries ASan's module constructor (__asan_init), and the
# one Cython generated UBSan's checks too: a build that dropped the flags for
# any of them would run unchecked and pass. (grep reads nm's output whole:
# under pipefail, grep -q ending a pipe early fails it.)
mapfile -t objects < <(find "$copy/build" -name "*.o" -path "*gpu_dlpack*")
[ ${#objects[@]} -gt 0 ] || { echo "sanitize: no object file of the core under $copy/build" >&2; exit 1; }
for o in "${objects[@]}"; do
  grep -q "__asan_init" < <(nm -u "$o") || { echo "sanitize: $o was built without ASan" >&2; exit 1; }
done
generated=$(printf '%s\n' "${objects[@]}" | grep "/gpu_dlpack/_core\.o$" || true)
[ -n "$generated" ] || { echo "sanitize: no object of the Cython-generated gpu_dlpack/_core.c under $copy/build" >&2; exit 1; }
grep -q "__ubsan_handle_" < <(nm -u "$generated") || { echo "sanitize: $generated was built without UBSan" >&2; exit 1; }
echo "sanitize: ${#objects[@]} object files of the core instrumented, gpu_dlpack/_core.c (Cython's) among them" >&2

asan=$(gcc -print-file-name=libasan.so)
cxx=$(gcc -print-file-name=libstdc++.so)
[ -e "$asan" ] || { echo "no libasan for gcc ($asan): install it (Debian: libasan8, gcc's own)" >&2; exit 1; }
sanitized() {
  (
    cd "$copy"
    export LD_PRELOAD="$asan:$cxx" PYTHONMALLOC=malloc
    export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:allocator_may_return_null=1:detect_stack_use_after_return=0:${ASAN_EXTRA:-}"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    export GPU_DLPACK_EXPECT_CORE=1 GPU_DLPACK_CPRODUCER_CFLAGS="-O1 -g $flags"
    python -c "import gpu_dlpack._core as c, sys; sys.exit(c.__file__.startswith('$copy/') == 0)"
    "$@"
  )
}

source "$root/scripts/_passes.sh"
if [ "$#" -gt 0 ]; then
  step "the tests asked for"
  sanitized python -m pytest -q -p no:cacheprovider --capture=sys "$@"
elif [ "$quick" = 1 ]; then
  step "the tests of what the layer accepts and frees, 1,000 fuzz cases, 300 reentrancy cases"
  # In two passes (scripts/_passes.sh): on every core, then the serial tests.
  GPU_DLPACK_FUZZ_CASES=1000 GPU_DLPACK_REENTRANCY_CASES=300 passes "" sanitized python -m pytest -q \
    -p no:cacheprovider --capture=sys -- tests/test_malformed.py \
    tests/test_core.py tests/test_reliability.py tests/test_threads.py tests/test_inspect.py \
    tests/test_bad_arguments.py tests/test_import_rules.py tests/test_export_rules.py tests/test_fuzz.py \
    tests/test_reentrancy.py tests/test_producer_kit.py::test_a_hook_that_names_no_memory_but_itself_is_a_type_error_not_a_recursion \
    tests/test_testing.py::test_counted_capsules_count_every_deleter_call \
    tests/test_testing.py::test_an_importer_that_keeps_every_rule_passes_every_check \
    --deselect tests/test_core.py::test_exchanges_through_the_c_api_leak_nothing  # RSS-based
else
  step "the suite"
  GPU_DLPACK_FUZZ_CASES=${GPU_DLPACK_FUZZ_CASES:-5000} GPU_DLPACK_REENTRANCY_CASES=${GPU_DLPACK_REENTRANCY_CASES:-2000} \
    sanitized python -m pytest -q -p no:cacheprovider --capture=sys tests \
    --deselect tests/test_leaks.py --deselect tests/test_core.py::test_exchanges_through_the_c_api_leak_nothing
  step "the RSS-based leak tests, without ASan's quarantine"
  ASAN_EXTRA="quarantine_size_mb=0:thread_local_quarantine_size_kb=0" \
    sanitized python -m pytest -q -p no:cacheprovider --capture=sys tests/test_leaks.py \
    tests/test_core.py::test_exchanges_through_the_c_api_leak_nothing
  step "valgrind on the hot paths"
  if ! command -v valgrind >/dev/null; then
    echo "valgrind is not installed (Debian: apt-get install valgrind): skipped" >&2
  else
    # The core built in place (no ASan: valgrind runs the plain build). The
    # interpreter itself draws valgrind reports (values derived from
    # os.urandom, glibc's SSE2 strncmp): the run fails on a report with a
    # frame in the layer's C (the core, the test capsules' deleter).
    python setup.py -q build_ext --inplace
    log="$root/build/valgrind.log"
    # --fullpath-after=: each frame with its file's path, which the filter
    # below reads (by default valgrind prints the file's name alone).
    PYTHONMALLOC=malloc valgrind --num-callers=40 --errors-for-leak-kinds=none --fullpath-after= --log-file="$log" \
      python scripts/hot_paths.py
    awk '/^==[0-9]+== $/ { if (rec ~ /gpu_dlpack\/_?core|cproducer/) { print rec; bad = 1 } rec = ""; next }
         { rec = rec $0 "\n" }
         END { if (rec ~ /gpu_dlpack\/_?core|cproducer/) { print rec; bad = 1 } exit bad }' "$log" ||
      { echo "valgrind: reports in the layer's C above (whole log: $log)" >&2; exit 1; }
    echo "valgrind: no report in the layer's C ($(grep -c '^==[0-9]*== [A-Z]' "$log") elsewhere: $log)" >&2
  fi
fi
step "done"
