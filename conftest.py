"""Shared test set-up: the peers are real libraries, imported here once."""

import importlib.util
import os
import sys

import pytest

# JAX on the CPU, quietly, with 64-bit types so dtypes match NumPy's.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_ENABLE_X64", "1")
# Four host devices, so that arrays spread over several devices (sharded and
# replicated JAX arrays) are tested on any machine.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()

# GPU_DLPACK_TEST_HIDE=cupy,torch,... runs the suite as if those peers were
# not installed, here and in the interpreters the tests start.
if os.environ.get("GPU_DLPACK_TEST_HIDE"):
    _hide = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests", "hide")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_hide, os.environ.get("PYTHONPATH")]))
    _spec = importlib.util.spec_from_file_location("_hide_peers", os.path.join(_hide, "sitecustomize.py"))
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))  # installs the finder


# GPU_DLPACK_SIMCUDA=1 runs the suite on a simulated CUDA under real CuPy
# (tests/simcuda: installed before CuPy is imported); scripts/gpu-sim.sh runs
# the gpu tests so. A test the simulator's checker reports on fails.
SIMCUDA = os.environ.get("GPU_DLPACK_SIMCUDA", "") not in ("", "0")
if SIMCUDA:
    from tests import simcuda as _simcuda

    _simcuda.install()
    _boot = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests", "simcuda", "boot")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_boot, os.environ.get("PYTHONPATH")]))


def _gpu_available():
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


GPU = _gpu_available()
if SIMCUDA:  # CuPy's pool tells the checker what it takes back (on the main thread)
    _simcuda.watch_pool()


def pytest_collection_modifyitems(config, items):
    if _OLD_NUMPY:
        for item in items:
            for prefix, reason in _NEEDS_NEW_NUMPY.items():
                if item.nodeid.startswith(prefix):
                    item.add_marker(pytest.mark.skip(reason=f"NumPy < 2.1: {reason}"))
    if SIMCUDA:
        kernel = pytest.mark.skip(reason="launches a CuPy kernel, which the simulated CUDA cannot run")
        for item in items:
            if "kernel" in item.keywords:
                item.add_marker(kernel)
    if GPU:
        return
    skip = pytest.mark.skip(reason="needs a GPU usable by CuPy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_sessionfinish(session, exitstatus):
    """On the simulated CUDA: a report outside any test (at collection, or
    of work a test left queued) fails the run too. An xdist worker hands
    the figures its modules reported (tests/figures.py) to the controller."""
    if hasattr(session.config, "workeroutput"):
        from tests.figures import WORKER_LINES

        session.config.workeroutput["gpu_dlpack_figures"] = session.config.stash.get(WORKER_LINES, [])
    if SIMCUDA:
        reports = _simcuda.take_reports()
        if reports:
            print("\nthe simulated CUDA's checker reported outside the tests:\n" + "\n".join(reports))
            session.exitstatus = 1


_FIGURES: list = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: the figures a worker reported."""
    _FIGURES.extend(getattr(node, "workeroutput", {}).get("gpu_dlpack_figures", []))


def pytest_terminal_summary(terminalreporter):
    if _FIGURES:
        terminalreporter.write_line("")
        for line in _FIGURES:
            terminalreporter.write_line(line)


#: GPU_DLPACK_SIMCUDA_UNBOUND=1 (scripts/gpu-sim.sh's second pass): the
#: hand-off, the copies and the capture checks run as CuPy's Python calls, as
#: where the compiled core is not bound to CuPy's runtime module (an entry
#: whose C signature differs), instead of the core's own calls.
UNBOUND = SIMCUDA and os.environ.get("GPU_DLPACK_SIMCUDA_UNBOUND", "") not in ("", "0")


@pytest.fixture(autouse=True)
def _simcuda_checker():
    """On the simulated CUDA: a test fails on any report of its checker."""
    if UNBOUND:
        import cupy  # noqa: F401  (the runtime the layer resolves)

        from gpu_dlpack import _handoff

        # Resolved as the layer resolves a runtime the core does not bind
        # (before each test: a test may clear it).
        _handoff._bindings[:] = [(_handoff._runtime(), False, "unbound: the Python calls' pass")]
    yield
    if SIMCUDA:
        reports = _simcuda.take_reports()
        if reports:
            pytest.fail("the simulated CUDA's checker reported:\n" + "\n".join(reports), pytrace=False)


# -- the peers, real libraries, shared by tests/ and bench/ -----------------


# Every peer is optional: a test that needs a missing one is skipped (the
# test command checks that its own environment has them all).


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="session")
def jax():
    jax = pytest.importorskip("jax")
    import jax.dlpack  # noqa: F401
    import jax.numpy  # noqa: F401

    return jax


@pytest.fixture(scope="session")
def cp():
    return pytest.importorskip("cupy")


@pytest.fixture(scope="session")
def tc():
    """PyTorch with a CUDA (or ROCm) device."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch has no CUDA (or ROCm) device")
    return torch


# -- the NumPy floor -------------------------------------------------------------
# On NumPy < 2.1 (scripts/test.sh runs the suite so, in .venv-numpy-floor) a
# test that builds its own capsule with NumPy 2.1's
# ``__dlpack__(max_version=...)`` cannot run: when that TypeError is raised
# in the test's own code, the test is reported as skipped. The same error
# raised inside gpu_dlpack still fails.

_OLD_NUMPY_ERROR = "__dlpack__() got an unexpected keyword argument"


def _numpy_is_old():
    import numpy as np

    try:
        np.empty(0).__dlpack__(max_version=(1, 0))
    except TypeError:
        return True
    return False


_OLD_NUMPY = _numpy_is_old()

# Tests that check what only NumPy 2.1+ does (node id prefix: why).
_NEEDS_NEW_NUMPY = {
    "tests/test_explain.py::test_entry_recognises_its_real_message": "the entries quote NumPy 2.x messages",
    "tests/test_properties.py::test_numpy_through_wrap_reaches_each_consumer_intact": "its NumPy "
    "consumer passes from_dlpack's copy and device keywords",
    "tests/test_shutdown.py::test_the_interpreter_exits_cleanly_with[a wrap() object": "numpy.from_dlpack "
    "asks for a legacy capsule, which read-only data cannot travel in",
    "tests/test_malformed.py::test_the_most_dimensions_a_capsule_may_have_are_64": "its arrays have "
    "at most 32 dimensions (64 from NumPy 2.0)",
    "tests/test_doctor.py::test_a_peer_that_cannot_open_its_accelerator_is_probed_on_the_cpu_and_fails_nothing":
    "its stand-in of JAX imports through numpy.from_dlpack with the copy keyword (NumPy 2.1+)",
}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if not _OLD_NUMPY or call.excinfo is None or call.when != "call":
        return
    exc = call.excinfo.value
    if not (isinstance(exc, TypeError) and _OLD_NUMPY_ERROR in str(exc)):
        return
    raiser = call.excinfo.traceback[-1].path
    import gpu_dlpack

    if str(raiser).startswith(os.path.dirname(os.path.abspath(gpu_dlpack.__file__)) + os.sep):
        return  # the library's own call: a real failure
    report = outcome.get_result()
    report.outcome = "skipped"
    report.longrepr = (str(raiser), call.excinfo.traceback[-1].lineno + 1,
                       "Skipped: the test builds its capsule with NumPy 2.1's __dlpack__ keywords")

