"""What a user's type checker says of gpu_dlpack: mypy --strict on a small
script in a folder of its own (not the source tree), as a user runs it on
code that imports the installed package (an editable install included).

tests/typing_usage.py and tests/typing_convert.py are what must pass
(scripts/test.sh checks them); here a misspelt library name must fail, on
its own line, beside a right one that passes. The peers' own packages are
not followed (their types are not what is checked), so that one run takes
seconds, not minutes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("mypy")

_CONFIG = """\
[mypy]
strict = True
incremental = False
[mypy-torch.*,jax.*,jaxlib.*,cupy.*,numba.*,array_api_strict.*]
follow_imports = skip
"""

_SCRIPT = """\
import numpy as np
import gpu_dlpack

a = np.arange(3.0)
right = gpu_dlpack.convert(a, "torch")
typo = gpu_dlpack.convert(a, "torhc")
other_case = gpu_dlpack.convert(a, "Torch")
another_name = gpu_dlpack.convert(a, "pytorch")
empty = gpu_dlpack.convert(a, "")
also_right = gpu_dlpack.convert(a, "numpy", require_alignment=64)
"""


def _installed():
    """Whether this Python has gpu_dlpack installed (a wheel, or an editable
    install), not only importable from the source tree on sys.path."""
    from importlib import metadata

    try:
        metadata.distribution("gpu_dlpack")
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    if os.environ.get("GPU_DLPACK_TEST_HIDE"):
        pytest.skip("mypy reads the sources, whichever peer is hidden: the run that hides none checks them")
    if not _installed():
        pytest.skip("gpu_dlpack is not installed here (run from the source tree on PYTHONPATH)")
    where = tmp_path_factory.mktemp("user")
    (where / "user.py").write_text(_SCRIPT, encoding="utf-8")
    (where / "mypy.ini").write_text(_CONFIG, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--python-executable", sys.executable, "user.py"],
        cwd=where, env=env, capture_output=True, text=True, timeout=600,
    )
    errors = {}
    for line in done.stdout.splitlines():
        m = re.match(r"user\.py:(\d+): error: (.*)", line)
        if m:
            errors.setdefault(int(m[1]), []).append(m[2])
    return done, errors


def test_mypy_finds_gpu_dlpack_from_any_folder(checked):
    done, _ = checked
    assert "import-not-found" not in done.stdout and "import-untyped" not in done.stdout, done.stdout


def test_a_misspelt_library_fails_the_type_check_and_a_known_one_passes(checked):
    done, errors = checked
    assert done.returncode == 1, done.stdout + done.stderr
    assert sorted(errors) == [6, 7, 8, 9], done.stdout  # the four misspelt names, not lines 5 and 10
    for line in (6, 7, 8, 9):
        (error,) = errors[line]
        assert error.startswith('No overload variant of "convert" matches argument types "ndarray[')
        assert error.endswith('"str"  [call-overload]'), error
