"""Shared test set-up: the peers are real libraries, imported here once."""

import os

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


def _gpu_available():
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


GPU = _gpu_available()


def pytest_collection_modifyitems(config, items):
    if GPU:
        return
    skip = pytest.mark.skip(reason="needs a GPU usable by CuPy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# -- the peers, real libraries, shared by tests/ and bench/ -----------------


@pytest.fixture(scope="session")
def torch():
    import torch

    return torch


@pytest.fixture(scope="session")
def jax():
    import jax
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
