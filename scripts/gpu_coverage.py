"""The summary of scripts/gpu-coverage.sh: python scripts/gpu_coverage.py COVERAGE_JSON GCOV LABEL [CORE_C]

Lines and branches of the GPU-facing Python modules covered (coverage.py's
JSON report), the same for the core's CUDA side, and every GPU-facing
function no test ran. The core's CUDA side is gpu_dlpack/core/runtime.pxi,
included into the generated gpu_dlpack/_core.c (CORE_C): the lines and
branches of the C functions Cython made of it (each def's argument parsing
and body, each cdef function), which are those whose definition in CORE_C
follows Cython's comment naming a line of runtime.pxi, read from gcov's
report of CORE_C (GCOV, its _core.c.gcov). Without CORE_C (a tree from
before the port, --rev), GCOV is gcov's output for gpu_dlpack/core/runtime.c.
"""

from __future__ import annotations

import json
import re
import sys


def python_part(path):
    with open(path) as f:
        report = json.load(f)
    lines = covered = branches = taken = 0
    never = []
    for name, data in sorted(report["files"].items()):
        s = data["summary"]
        lines += s["num_statements"]
        covered += s["covered_lines"]
        branches += s.get("num_branches", 0)
        taken += s.get("covered_branches", 0)
        for function, region in data.get("functions", {}).items():
            rs = region["summary"]
            if function and rs["num_statements"] and not rs["covered_lines"]:
                never.append(f"{name}: {function}")
    return lines, covered, branches, taken, never


RUNTIME_C = "gpu_dlpack/core/runtime.c"
RUNTIME_PXI = "gpu_dlpack/core/runtime.pxi"


def c_part(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    never = re.findall(r"Function '(\w+)'\nLines executed:0\.00% of \d+", text)
    part = text.split(f"File '{RUNTIME_C}'")[-1]
    lines = re.search(r"Lines executed:([\d.]+)% of (\d+)", part)
    taken = re.search(r"Taken at least once:([\d.]+)% of (\d+)", part)
    if lines is None:
        return None
    return float(lines.group(1)), int(lines.group(2)), float(taken.group(1)) if taken else 0.0, \
        int(taken.group(2)) if taken else 0, never


def functions_from(core_c, source):
    """{C function: (line of `source`, first C line, last C line)} for the
    functions Cython made of `source` in the generated C: each one's
    definition (its last mention at the start of a line, after its
    prototypes; it ends at the next "}" of column 0) follows the comment in
    which Cython quotes the def or cdef line it comes from. Utility code
    (__Pyx_*) and the module's init are no function of a source line."""
    marker = re.compile(r'^/\* "([^"]+)":(\d+)$')
    mention = re.compile(r"^[A-Za-z_][^;(]*?\b(\w+)\(")
    where, last, ends = None, {}, []
    with open(core_c) as f:
        for number, line in enumerate(f, 1):
            if line.startswith("/* #### Code section:"):
                where = None
            elif m := marker.match(line):
                where = (m.group(1), int(m.group(2)))
            elif (d := mention.match(line)) and where is not None:
                last[d.group(1)] = (where, number)
            elif line.rstrip() == "}":
                ends.append(number)
    found = {}
    for name, ((path, at), first) in last.items():
        if path == source and (name.startswith(("__pyx_f_", "__pyx_pw_", "__pyx_pf_")) or not name.startswith("__")):
            found[name] = (at, first, next(n for n in ends if n > first))
    return found


def cython_part(core_gcov, core_c):
    """c_part's figures over the lines of the functions of runtime.pxi in the
    generated C (gcov's per-line report of it, CORE_GCOV): the lines of
    cdef inline functions are counted wherever they were inlined."""
    try:
        with open(core_gcov) as f:
            report = f.read().splitlines()
    except OSError:
        return None
    functions = functions_from(core_c, RUNTIME_PXI)
    counts, branches = {}, {}  # C line -> executions (None: never); -> [taken?]
    line = None
    for text in report:
        if m := re.match(r"^\s*([^:]+):\s*(\d+):", text):
            count, line = m.group(1).strip().rstrip("*"), int(m.group(2))
            if count != "-":
                counts[line] = None if count in ("#####", "=====") else int(count)
        elif m := re.match(r"^branch\s+\d+ (taken (\d+)|never executed)", text):
            branches.setdefault(line, []).append(bool(m.group(2)) and int(m.group(2)) > 0)
    lines = covered = n_branches = taken = 0
    never = []
    for name, (at, first, last) in sorted(functions.items(), key=lambda item: item[1]):
        run = [counts[n] for n in range(first, last + 1) if n in counts]
        lines += len(run)
        covered += sum(1 for c in run if c)
        for n in range(first, last + 1):
            n_branches += len(branches.get(n, ()))
            taken += sum(branches.get(n, ()))
        if run and not any(run):
            never.append(f"line {at} ({name})")
    if not functions or not counts:
        return None
    return 100 * covered / max(lines, 1), lines, 100 * taken / max(n_branches, 1), n_branches, never


def main(argv):
    cov, gcov, label = argv[1:4]
    core_c = argv[4] if len(argv) > 4 else None
    lines, covered, branches, taken, never = python_part(cov)
    print(f"GPU-facing coverage of {label}")
    print(f"  Python (the CuPy backend, _handoff, _copies, _streams, _protocols): "
          f"lines {covered}/{lines} = {100 * covered / max(lines, 1):.1f}%, "
          f"branches {taken}/{branches} = {100 * taken / max(branches, 1):.1f}%")
    if core_c is None:
        what, c = f"C ({RUNTIME_C})", c_part(gcov)
        source = RUNTIME_C
    else:
        what, c = f"Cython ({RUNTIME_PXI}: its functions in {core_c})", cython_part(gcov, core_c)
        source = RUNTIME_PXI
    if c is None:
        print(f"  {what}: no gcov data")
        c_never = []
    else:
        c_lines, c_n, c_taken, c_b, c_never = c
        print(f"  {what}: lines {c_lines:.1f}% of {c_n}, branches taken {c_taken:.1f}% of {c_b}")
    print(f"  functions never run: {len(never) + len(c_never)}")
    for name in never + [f"{source}: {n}" for n in c_never]:
        print(f"    {name}")


if __name__ == "__main__":
    main(sys.argv)
