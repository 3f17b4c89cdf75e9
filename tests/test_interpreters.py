"""The interpreters gpu_dlpack runs on: a free-threaded CPython without its
GIL is refused at import with the layer's ImportError (none is on these
machines: its answer is given by sys._is_gil_enabled, set here as such a
build sets it), and the interpreter the suite runs on is one the package
claims."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child(code):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_a_free_threaded_python_without_its_gil_is_refused_at_import():
    done = _child("""
import sys
sys._is_gil_enabled = lambda: False  # as a free-threaded build with PYTHON_GIL=0 answers
try:
    import gpu_dlpack
except ImportError as exc:
    print("refused:", exc)
    print("numpy loaded:", "numpy" in sys.modules, "core loaded:", "gpu_dlpack._core" in sys.modules)
else:
    print("imported")
""")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused: gpu_dlpack needs the GIL, and this free-threaded CPython"), done.stdout
    assert "PYTHON_GIL=1" in lines[0] and "-X gil=1" in lines[0]
    # What it says of a claim is what the core does: one step under the
    # capsule's critical section (the unlocked caches are why it refuses).
    assert "claims a capsule in one step (its name checked and renamed under the capsule's critical section)" in (
        lines[0]) and "caches" in lines[0] and "then renamed" not in lines[0]
    assert lines[1] == "numpy loaded: False core loaded: False"  # refused before anything is loaded
    source = os.path.join(ROOT, "gpu_dlpack", "core", "capsule.pxi")
    if os.path.exists(source):  # a source tree (an installed wheel has no .pxi)
        with open(source) as f:
            claim = f.read().split('"""Claim an unconsumed capsule of the given kind', 1)[1].split("\n\n\n", 1)[0]
        assert "with cython.critical_section(<object>capsule):" in claim and "rename(" in claim


def test_a_python_with_its_gil_imports():
    done = _child("""
import sys
sys._is_gil_enabled = lambda: True  # a free-threaded build with PYTHON_GIL=1, or any default build
import numpy as np, gpu_dlpack
print(gpu_dlpack.from_dlpack(np.arange(3.0)).tolist())
""")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0.0, 1.0, 2.0]"


def test_this_interpreter_is_one_the_package_claims():
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        claimed = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', f.read())
    assert "%d.%d" % sys.version_info[:2] in claimed, claimed


def test_a_source_tree_without_its_core_says_it_hides_the_installed_package(tmp_path):
    # Python started in a clone's root imports the clone: when its core is
    # not built, the ImportError says which installed gpu_dlpack it hides.
    import shutil

    import gpu_dlpack

    installed = os.path.dirname(os.path.realpath(gpu_dlpack.__file__))
    shutil.copytree(installed, tmp_path / "gpu_dlpack",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", "_core.c"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", "import gpu_dlpack"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    assert f"before the one installed at {installed} (Python started in a clone's root" in done.stderr, done.stderr
    assert "No module named 'gpu_dlpack._core'" in done.stderr
