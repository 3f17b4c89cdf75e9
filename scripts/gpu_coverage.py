"""The summary of scripts/gpu-coverage.sh: python scripts/gpu_coverage.py COVERAGE_JSON GCOV_TXT LABEL

Lines and branches of the GPU-facing Python modules covered (coverage.py's
JSON report), the same for the core's CUDA side (gcov's output for
gpu_dlpack/core/runtime.c), and every GPU-facing function no test ran.
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


def c_part(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    never = re.findall(r"Function '(\w+)'\nLines executed:0\.00% of \d+", text)
    part = text.split("File 'gpu_dlpack/core/runtime.c'")[-1]
    lines = re.search(r"Lines executed:([\d.]+)% of (\d+)", part)
    taken = re.search(r"Taken at least once:([\d.]+)% of (\d+)", part)
    if lines is None:
        return None
    return float(lines.group(1)), int(lines.group(2)), float(taken.group(1)) if taken else 0.0, \
        int(taken.group(2)) if taken else 0, never


def main(argv):
    cov, gcov, label = argv[1:4]
    lines, covered, branches, taken, never = python_part(cov)
    print(f"GPU-facing coverage of {label}")
    print(f"  Python (the CuPy backend, _handoff, _copies, _streams, _protocols): "
          f"lines {covered}/{lines} = {100 * covered / max(lines, 1):.1f}%, "
          f"branches {taken}/{branches} = {100 * taken / max(branches, 1):.1f}%")
    c = c_part(gcov)
    if c is None:
        print("  C (gpu_dlpack/core/runtime.c): no gcov data")
        c_never = []
    else:
        c_lines, c_n, c_taken, c_b, c_never = c
        print(f"  C (gpu_dlpack/core/runtime.c): lines {c_lines:.1f}% of {c_n}, branches taken {c_taken:.1f}% of {c_b}")
    print(f"  functions never run: {len(never) + len(c_never)}")
    for name in never + [f"gpu_dlpack/core/runtime.c: {n}" for n in c_never]:
        print(f"    {name}")


if __name__ == "__main__":
    main(sys.argv)
