"""What a packager and a typed program see: the sdist carries the whole
test suite (it runs from an unpacked sdist), the wheel carries the package,
its compiled core, its data, ``py.typed`` and the LICENSE, the metadata says
MIT as an SPDX expression, the public API is annotated, an install without a
C compiler stops at its build with the remedies, and cibuildwheel builds a
wheel for every platform and CPython the package claims."""

from __future__ import annotations

import importlib.util
import inspect
import os
import shutil
import subprocess
import sys
import tarfile
import typing
import zipfile

import pytest

import gpu_dlpack
from gpu_dlpack import _export

from .helpers import load_toml, without_peers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tracked_files():
    if shutil.which("git") is None or not os.path.exists(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout (an unpacked sdist, say): nothing to compare with")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    return sorted(f for f in out.stdout.split("\0") if f and os.path.exists(os.path.join(ROOT, f)))


def _new_setuptools():
    try:
        import setuptools
    except ImportError:
        pytest.skip("setuptools is not installed")
    major = int(setuptools.__version__.split(".")[0])
    if major < 77:
        pytest.skip(f"setuptools {setuptools.__version__} cannot build this project (77+ reads SPDX licenses)")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The sdist and the wheel, built from the repository's tracked files
    only (what a fresh clone holds), without network access; or those in
    GPU_DLPACK_DIST (scripts/release-check.sh: what `python -m build` made)."""
    files = _tracked_files()
    given = os.environ.get("GPU_DLPACK_DIST")
    if given:
        (sdist,) = [os.path.join(given, n) for n in os.listdir(given) if n.endswith(".tar.gz")]
        (wheel,) = [os.path.join(given, n) for n in os.listdir(given) if n.endswith(".whl")]
        return files, sdist, wheel
    _new_setuptools()
    tmp = tmp_path_factory.mktemp("build")
    clone = tmp / "clone"
    for f in files:
        (clone / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.join(ROOT, f), clone / f)
    out = tmp / "dist"
    out.mkdir()
    code = (
        "import sys\nfrom setuptools import build_meta as b\n"
        "out = sys.argv[1]  # setuptools rewrites sys.argv\n"
        "s = b.build_sdist(out)\nw = b.build_wheel(out)\nprint('BUILT', s, w)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=clone, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "deprecat" not in done.stderr.lower(), done.stderr[-3000:]
    (line,) = [li for li in done.stdout.splitlines() if li.startswith("BUILT ")]
    _, sdist_name, wheel_name = line.split()
    return files, out / sdist_name, out / wheel_name


def test_the_sdist_holds_every_tracked_file_the_tests_need(built):
    files, sdist, _ = built
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    top = names[0].split("/")[0]
    members = {n[len(top) + 1:] for n in names if n.startswith(top + "/")}
    missing = [f for f in files if f not in members and f != ".gitignore"]
    assert not missing, f"tracked files the sdist lacks: {missing}"
    for needed in ("tests/__init__.py", "tests/conftest.py", "tests/helpers.py", "conftest.py",
                   "bench/conftest.py", "scripts/test.sh", "LICENSE"):
        assert needed in members, needed
    assert not [m for m in members if "__pycache__" in m or m.endswith(".pyc")]


def test_the_wheel_holds_the_package_its_data_types_and_license(built):
    _, _, wheel = built
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = z.read(metadata).decode()
    assert "gpu_dlpack/py.typed" in names
    assert "gpu_dlpack/explain.json" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "scripts/"))]
    # The core's sources are built, not installed: the sdist carries them.
    assert not [n for n in names if n.endswith((".c", ".h", ".pyx", ".pxd", ".pxi"))], names
    # gpu_dlpack has no path without it: a wheel always carries it.
    assert [n for n in names if n.startswith("gpu_dlpack/_core.") and n.endswith((".so", ".pyd"))], names
    assert "License-Expression: MIT" in meta
    assert "Requires-Python: >=3.10" in meta and "Requires-Dist: numpy>=1.26" in meta
    assert "Classifier: Typing :: Typed" in meta and "Project-URL:" in meta


def test_without_a_compiler_the_build_stops_naming_the_remedies_and_installs_nothing(built, tmp_path):
    # The sdist as a user's pip meets it, where no C compiler exists. The
    # build environment is this one (setuptools, Cython): no index is asked.
    _, sdist, _ = built
    if sys.platform == "win32":
        pytest.skip("setuptools finds MSVC itself, not through CC")
    _new_setuptools()
    pytest.importorskip("Cython")
    target = tmp_path / "site-packages"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
         "--target", str(target), str(sdist)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env=dict(os.environ, CC="/nonexistent", PIP_DISABLE_PIP_VERSION_CHECK="1"),
    )
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-3000:]
    assert "gpu_dlpack's compiled core (gpu_dlpack._core) could not be built: " in out, out[-3000:]
    assert "/nonexistent" in out  # what failed, in the compiler's words
    assert "install a wheel built for your platform" in out and "install a C compiler and the Python headers" in out
    assert 'building extension "gpu_dlpack._core" failed' not in out  # setuptools going on without an optional one
    assert not (target.exists() and list(target.iterdir())), sorted(p.name for p in target.iterdir())


PUBLIC = [gpu_dlpack.export, gpu_dlpack.wrap, gpu_dlpack.from_dlpack, gpu_dlpack.inspect,
          gpu_dlpack.use_stream, gpu_dlpack.set_min_dlpack_version, gpu_dlpack.Device.of,
          gpu_dlpack.Device.__new__, gpu_dlpack.shards, gpu_dlpack.view, gpu_dlpack.from_pointer,
          gpu_dlpack.Producer.__dlpack__, gpu_dlpack.Producer.__dlpack_device__, gpu_dlpack.Producer.dlpack_memory,
          gpu_dlpack.Exportable.__init__,
          _export.general_dlpack]  # Exportable.__dlpack__'s general path (the compiled core hands it on)


@pytest.mark.parametrize("fn", PUBLIC, ids=lambda f: f.__qualname__)
def test_the_public_api_is_annotated_and_the_annotations_resolve(fn):
    hints = typing.get_type_hints(fn)  # NameError when an annotation names nothing
    params = [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")]
    assert set(params) <= set(hints), (fn, params, hints)
    assert "return" in hints


def test_capsule_info_fields_are_typed():
    hints = typing.get_type_hints(gpu_dlpack.CapsuleInfo)
    assert hints["shape"] == tuple[int, ...] and hints["data"] is int
    assert hints["dl_dtype"] == tuple[int, int, int] and hints["version"] == typing.Optional[tuple[int, int]]


def test_the_package_says_it_is_typed():
    assert os.path.exists(os.path.join(os.path.dirname(gpu_dlpack.__file__), "py.typed"))


def test_help_shows_plain_annotations():
    import pydoc

    text = pydoc.render_doc(gpu_dlpack.Device.of, renderer=pydoc.plaintext)
    assert "\"'Device'\"" not in text and "-> 'Device'" in text


def test_the_version_is_one_everywhere():
    done = subprocess.run([sys.executable, "-m", "gpu_dlpack", "--version"], capture_output=True, text=True)
    assert done.stdout.strip() == f"gpu-dlpack {gpu_dlpack.__version__}"
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        assert f'version = "{gpu_dlpack.__version__}"' in f.read()
    doctor = subprocess.run([sys.executable, "-m", "gpu_dlpack", "doctor", "--json"],
                            capture_output=True, text=True, timeout=300, env=without_peers())
    import json

    assert json.loads(doctor.stdout)["gpu_dlpack"]["version"] == gpu_dlpack.__version__


def test_every_install_advice_works_from_where_the_user_stands():
    # gpu_dlpack is not on PyPI: advice names PyPI packages (cupy-cuda12x,
    # ml_dtypes...) or a path ('.[cuda12]' in a clone), never gpu_dlpack's
    # extras by name.
    import re

    package = os.path.dirname(gpu_dlpack.__file__)
    texts = {}
    for name in sorted(os.listdir(package)):
        if name.endswith((".py", ".json")):
            with open(os.path.join(package, name), encoding="utf-8") as f:
                texts[name] = f.read()
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        texts["README.md"] = f.read()
    for dirpath, _, files in os.walk(os.path.join(ROOT, "docs")):
        for name in files:
            if name.endswith(".md"):
                with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                    texts[os.path.relpath(os.path.join(dirpath, name), ROOT)] = f.read()
    bad = re.compile(r"pip install (?:-\S+ )*['\"]?gpu_dlpack\b")
    found = {name: m.group(0) for name, text in texts.items() for m in [bad.search(text)] if m}
    assert not found, found
    assert "pip install '.[cuda12]'" in texts["README.md"]


# -- the release: cibuildwheel's wheels and the test of an installed wheel --------


def _pyproject():
    return load_toml(os.path.join(ROOT, "pyproject.toml"))


# Every platform a wheel is published for, with its OS classifier, the archs
# cibuildwheel builds there and the tags of the wheels. gpu_dlpack has no path
# without its compiled core: anywhere else, pip install needs a C compiler.
WHEEL_PLATFORMS = {
    "linux": ("Operating System :: POSIX :: Linux", ["x86_64", "aarch64"],
              ["manylinux_x86_64", "manylinux_aarch64", "musllinux_x86_64", "musllinux_aarch64"]),
    "macos": ("Operating System :: MacOS", ["x86_64", "arm64"], ["macosx_x86_64", "macosx_arm64"]),
    "windows": ("Operating System :: Microsoft :: Windows", ["AMD64"], ["win_amd64"]),
}


def _claimed_cpythons():
    classifiers = _pyproject()["project"]["classifiers"]
    versions = [c.rsplit(" ", 1)[1] for c in classifiers if c.startswith("Programming Language :: Python :: 3.")]
    return sorted(versions, key=lambda v: tuple(map(int, v.split("."))))


def _cibuildwheel(*args, env=None):
    if importlib.util.find_spec("cibuildwheel") is None:
        pytest.skip("cibuildwheel is not installed")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}
    done = subprocess.run([sys.executable, "-m", "cibuildwheel", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=dict(clean, **(env or {})))
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_wheel_configuration_names_every_claimed_cpython_and_platform():
    # Read as written, where cibuildwheel is not installed (the matrix's venvs).
    project = _pyproject()["project"]
    assert _claimed_cpythons() == ["3.10", "3.11", "3.12", "3.13"] and project["requires-python"] == ">=3.10"
    cibw = _pyproject()["tool"]["cibuildwheel"]
    assert cibw["build"] == [f"cp{v.replace('.', '')}-*" for v in _claimed_cpythons()]
    # The release workflow shares the wheels out with CIBW_SKIP, which would
    # replace a skip written here; and every wheel is tested.
    assert "skip" not in cibw and "test-skip" not in cibw
    assert not [o for o in cibw.get("overrides", []) if {"skip", "test-skip", "test-command"} & set(o)]
    for platform, (_, archs, _) in WHEEL_PLATFORMS.items():
        assert cibw[platform]["archs"] == archs, platform
    systems = sorted(c for c in project["classifiers"] if c.startswith("Operating System ::"))
    assert systems == sorted(classifier for classifier, _, _ in WHEEL_PLATFORMS.values())


@pytest.mark.parametrize("platform", sorted(WHEEL_PLATFORMS))
def test_cibuildwheel_builds_a_wheel_for_each_claimed_cpython(platform):
    # cibuildwheel itself reads the configuration (an unknown option is an error).
    _, _, tags = WHEEL_PLATFORMS[platform]
    want = {f"cp{v.replace('.', '')}-{tag}" for v in _claimed_cpythons() for tag in tags}
    assert set(_cibuildwheel("--print-build-identifiers", "--platform", platform)) == want


def _pins(requirements, python_version):
    from packaging.requirements import Requirement

    pins = {}
    for line in requirements:
        req = Requirement(line.split("#")[0].strip())
        if req.marker is None or req.marker.evaluate({"python_version": python_version}):
            (spec,) = req.specifier
            pins[req.name] = spec.version.split("+")[0]  # torch's local build tag (+cpu) is Linux's
    return pins


def test_apple_silicon_wheels_are_tested_with_the_peers_the_matrix_runs():
    (override,) = [o for o in _pyproject()["tool"]["cibuildwheel"]["overrides"] if o["select"] == "*-macosx_arm64"]
    assert override["inherit"] == {"test-requires": "append"}
    for version in _claimed_cpythons():
        with open(os.path.join(ROOT, "requirements", f"test-py{version}.txt"), encoding="utf-8") as f:
            lock = [li for li in f if li.startswith(("jax==", "torch=="))]
        assert _pins(override["test-requires"], version) == _pins(lock, version), version


def test_cibuildwheel_tests_each_wheel_from_copies_of_the_tests_that_exist():
    cibw = _pyproject()["tool"]["cibuildwheel"]
    missing = [s for s in cibw["test-sources"] if not os.path.exists(os.path.join(ROOT, s))]
    assert not missing, f"test-sources cibuildwheel would not find: {missing}"
    assert cibw["test-command"] == "bash scripts/installed-tests.sh"
    assert "scripts/installed-tests.sh" in cibw["test-sources"] and "tests" in cibw["test-sources"]
    assert {"pytest", "hypothesis"} <= set(cibw["test-requires"])


def test_the_installed_wheel_tests_refuse_a_source_tree(tmp_path):
    # From the checkout itself: gpu_dlpack/ lies beside the tests.
    done = subprocess.run(["bash", "scripts/installed-tests.sh"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "without gpu_dlpack/ beside them" in done.stderr, done.stderr
    # From a copy of the tests, with this interpreter, whose gpu_dlpack is a
    # source tree (the editable install the test command makes), not a wheel.
    import sysconfig

    found = subprocess.run([sys.executable, "-c", "import gpu_dlpack, os; print(os.path.dirname(gpu_dlpack.__file__))"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True)
    where = os.path.realpath(found.stdout.strip())
    if os.path.dirname(where) in {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}:
        pytest.skip("gpu_dlpack is an installed wheel here: nothing to refuse")
    shutil.copytree(os.path.join(ROOT, "tests"), tmp_path / "tests")
    shutil.copy(os.path.join(ROOT, "scripts", "installed-tests.sh"), tmp_path / "installed-tests.sh")
    done = subprocess.run(["bash", "installed-tests.sh"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHON=sys.executable))
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f"gpu_dlpack is imported from {where}, not from this interpreter's site-packages" in done.stderr
