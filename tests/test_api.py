"""The public surface: names fixed by the project, importable with or without
CuPy and a GPU."""

import subprocess
import sys

import pytest

import gpu_dlpack


def test_public_names():
    for name in ("DLPACK_VERSION", "MIN_DLPACK_VERSION", "DLDeviceType", "Device", "export",
                 "wrap", "from_dlpack", "inspect"):
        assert hasattr(gpu_dlpack, name), name
    assert set(gpu_dlpack.__all__) <= set(dir(gpu_dlpack))


def test_import_needs_only_numpy():
    # Hide CuPy, torch and JAX: the package must import and run the host paths.
    code = (
        "import sys\n"
        "for m in ('cupy', 'torch', 'jax', 'ml_dtypes'): sys.modules[m] = None\n"
        "import numpy as np, gpu_dlpack\n"
        "a = np.arange(3.0)\n"
        "assert gpu_dlpack.from_dlpack(gpu_dlpack.export(a, max_version=(1, 0))).tolist() == [0, 1, 2]\n"
        "assert gpu_dlpack.Device('cuda:1').dlpack == (2, 1)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_import_with_cupy_installed_but_no_gpu():
    pytest.importorskip("cupy")
    code = (
        "import cupy, numpy as np, gpu_dlpack\n"
        "a = np.arange(3.0)\n"
        "assert gpu_dlpack.from_dlpack(gpu_dlpack.wrap(a)).tolist() == [0, 1, 2]\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_demo_runs_and_every_step_passes():
    out = subprocess.run(
        [sys.executable, "-m", "gpu_dlpack", "demo"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "demo: 0 step(s) failed" in out.stdout
    assert "dltensor_versioned v1.2 flags=[READ_ONLY]" in out.stdout
