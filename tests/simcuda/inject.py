"""Put each bug of tests/simcuda/bugs.py into a copy of the tree, one at a
time, and run the tests that must catch it on the simulated CUDA:
``python -m tests.simcuda.inject [-j JOBS] [NAME ...]``
(scripts/inject-bugs.sh). First the same tests run on the tree as it is
(they must pass there). Prints, per bug, what caught it: the
simulator's checker (its first report) or a test's assertion; exits 1 when
a bug went unnoticed, or when a test fails without any bug."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from .bugs import BUGS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COPIED = ("gpu_dlpack", "tests", "conftest.py", "pyproject.toml", "setup.py")
CHECKER = "the simulated CUDA's checker reported:"


def _copy_tree(where):
    for name in COPIED:
        src, dst = os.path.join(ROOT, name), os.path.join(where, name)
        if os.path.isdir(src):
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dst)


def _env(python_calls=False):
    return dict(os.environ, GPU_DLPACK_SIMCUDA="1", JAX_PLATFORMS="cpu",
                GPU_DLPACK_SIMCUDA_UNBOUND="1" if python_calls else "0",
                GPU_DLPACK_CPRODUCER_DIR=os.path.join(ROOT, "build", "tests"))


def _pytest(where, tests, python_calls=False):
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *tests],
                          cwd=where, env=_env(python_calls), capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout + done.stderr


def _verdict(rc, output):
    """``(caught, by what)`` of a run of the tests with a bug in."""
    if rc == 0:
        return False, "every test passed"
    lines = output.splitlines()
    if CHECKER in output:
        i = next(i for i, line in enumerate(lines) if CHECKER in line)
        report = next((line.strip() for line in lines[i + 1:] if line.strip().startswith("simcuda:")), "")
        return True, "checker: " + report[:400]
    if " failed" not in output:
        return False, "the tests did not run: " + " | ".join(lines[-3:])
    error = next((line.strip() for line in lines if line.startswith("E ")), "a failing test")
    return True, "test: " + error[:400]


def _one(bug, where):
    rc, output = _pytest(where, bug.tests, bug.python_calls)
    caught, why = _verdict(rc, output)
    return bug, caught, why


def _mutated_tree(bug, base):
    where = tempfile.mkdtemp(prefix=f"gpu_dlpack-bug-{bug.name}-", dir=base)
    _copy_tree(where)
    target = os.path.join(where, bug.file)
    with open(target) as f:
        text = f.read()
    if text.count(bug.old) != 1:
        raise SystemExit(f"inject: {bug.name}: {bug.file} holds its code {text.count(bug.old)} times, not once: "
                         "update tests/simcuda/bugs.py")
    with open(target, "w") as f:
        f.write(text.replace(bug.old, bug.new))
    if bug.file.endswith((".c", ".h", ".pyx", ".pxi")):
        done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=where,
                              capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"inject: {bug.name}: the core did not build:\n{done.stderr[-2000:]}")
    return where


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("names", nargs="*")
    args = parser.parse_args(argv)
    bugs = [b for b in BUGS if not args.names or b.name in args.names]
    started = time.time()
    base = tempfile.mkdtemp(prefix="gpu_dlpack-bugs-")
    failed = []
    try:
        # The tests, without any bug: each must pass.
        clean = os.path.join(base, "clean")
        os.mkdir(clean)
        _copy_tree(clean)
        for python_calls in (False, True):
            tests = sorted({test for bug in bugs if not bug.unreachable and bug.python_calls == python_calls
                            for test in bug.tests})
            rc, output = _pytest(clean, tests, python_calls) if tests else (0, "")
            if rc != 0:
                print(f"inject: without any bug, the tests fail:\n{output[-3000:]}")
                return 1
        with ThreadPoolExecutor(args.jobs) as pool:
            jobs = [pool.submit(_one, bug, _mutated_tree(bug, base)) for bug in bugs if not bug.unreachable]
            results = [job.result() for job in jobs]
        print(f"{'bug':42} caught by")
        for bug, caught, why in results:
            print(f"{bug.name:42} {why if caught else 'NOT CAUGHT: ' + why}")
            if not caught:
                failed.append(bug.name)
        for bug in bugs:
            if bug.unreachable:
                print(f"{bug.name:42} not run: {bug.unreachable}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"inject: {len(results) - len(failed)} of {len(results)} runs caught their bug, "
          f"{sum(1 for b in bugs if b.unreachable)} bug(s) unreachable here, {time.time() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
