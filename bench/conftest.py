"""Benchmark set-up: the peers are the real libraries, and every gpu_dlpack
figure is measured beside its peer's own path, in the same run and group.

Each benchmark records in ``extra_info`` what ``bench/report.py`` needs:
``label`` (the call measured, as a user would write it), ``role`` ("peer",
"gpu_dlpack", "ceiling": the hardware's best, or "other": a figure shown for
context), ``peer`` (for gpu_dlpack rows: the label of the peer it is
compared with), ``target`` (the highest ratio to the peer that meets the
target, if any), ``most`` (the longest median, in seconds, that meets a
target of time), ``minus`` (the label of a row whose time is subtracted
first: the cost of one step alone) and, for copies, ``bytes`` and
``direction`` (so the report can compute GB/s).

``python -m pytest bench --benchmark-disable`` runs each call once, as a
smoke test: every benchmark also checks what its call returned.
"""

import numpy as np
import pytest

SMALL = 1000  # elements: exchanges are zero-copy, so the size does not matter


@pytest.fixture
def x():
    return np.arange(SMALL, dtype=np.float64)


@pytest.fixture
def t(torch):
    return torch.arange(SMALL, dtype=torch.float64)


@pytest.fixture
def j(jax):
    return jax.numpy.arange(SMALL, dtype=jax.numpy.float64)


@pytest.fixture(scope="session")
def tvm_ffi():
    import tvm_ffi

    return tvm_ffi


@pytest.fixture
def cupy_current():
    """Restores CuPy's current stream after a test that changes it."""
    import cupy

    before = cupy.cuda.get_current_stream()
    yield cupy
    before.use()


@pytest.fixture
def measure(benchmark):
    """``measure(fn, label, role="peer", peer=None, target=None, **info)``:
    benchmark ``fn`` (no arguments; with ``rounds`` and ``setup``, called
    with a fresh ``setup()`` each round) and record what the report needs.
    Returns what one call of ``fn`` returned."""

    def run(fn, label, role="peer", peer=None, target=None, rounds=None, setup=None, **info):
        if role not in ("peer", "gpu_dlpack", "ceiling", "other"):
            raise ValueError(f"unknown role {role!r}")
        if role == "gpu_dlpack" and peer is None:
            raise ValueError("a gpu_dlpack figure needs the label of its peer")
        benchmark.extra_info.update(label=label, role=role, **info)
        if peer is not None:
            benchmark.extra_info["peer"] = peer
        if target is not None:
            benchmark.extra_info["target"] = target
        if rounds is None:
            return benchmark(fn)
        if setup is not None:  # fresh arguments for each round, made outside the timing
            return benchmark.pedantic(fn, setup=lambda: ((setup(),), {}), rounds=rounds, warmup_rounds=1)
        return benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)

    return run


def pytest_benchmark_update_machine_info(config, machine_info):
    """Record the versions measured (and the GPU, when there is one)."""
    import importlib

    versions = {}
    for name in ("gpu_dlpack", "numpy", "torch", "jax", "cupy"):
        try:
            versions[name] = importlib.import_module(name).__version__
        except Exception:
            continue
    machine_info["versions"] = versions
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            props = cupy.cuda.runtime.getDeviceProperties(0)
            machine_info["gpu"] = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    except Exception:
        pass


def pytest_benchmark_update_json(config, benchmarks, output_json):
    """Leave each round's time out of the JSON: pytest-benchmark writes them
    all to ``--benchmark-json`` (``stats.data``, 25 MB for the GPU job's
    run), where the report reads only the statistics. ``--benchmark-save-data``
    keeps them."""
    if config.getoption("benchmark_save_data"):
        return
    for bench in output_json.get("benchmarks", []):
        bench.get("stats", {}).pop("data", None)
