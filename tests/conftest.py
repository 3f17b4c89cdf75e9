"""Fixtures for the peers. Each is the real library; a test that needs one
that is missing is skipped (scripts/test.sh checks that its environment has
them all)."""

import pytest


@pytest.fixture(scope="session")
def xp_strict():
    return pytest.importorskip("array_api_strict")


@pytest.fixture(scope="session")
def ml_dtypes():
    return pytest.importorskip("ml_dtypes")


@pytest.fixture(scope="session")
def mx():
    return pytest.importorskip("mlx.core")


@pytest.fixture(scope="session")
def da():
    return pytest.importorskip("dask.array")


@pytest.fixture
def floor():
    """Restore the version floor after a test changes it."""
    import gpu_dlpack

    before = gpu_dlpack.MIN_DLPACK_VERSION
    yield
    gpu_dlpack.set_min_dlpack_version(before)
