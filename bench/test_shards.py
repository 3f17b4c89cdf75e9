"""Arrays spread over several devices: gathering a sharded JAX array of
64 MiB (four host devices, as the root conftest asks XLA for) through
gpu_dlpack, beside JAX's and NumPy's own ways to bring it whole to the host."""

import numpy as np
import pytest

import gpu_dlpack

GROUP = "gather a sharded jax array (64 MiB, 4 devices)"
N = (64 << 20) // 8  # float64 elements


@pytest.fixture(scope="module")
def fresh(jax):
    """Makes a new sharded array for each round: JAX keeps the host copy that
    np.asarray or jax.device_get made inside the array and hands it out again,
    so only a fresh array measures a real gather."""
    if len(jax.devices()) < 4:
        pytest.skip("needs 4 JAX devices (XLA_FLAGS=--xla_force_host_platform_device_count=4)")
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
    sharding = NamedSharding(mesh, PartitionSpec("x"))
    host = np.arange(N, dtype=np.float64)
    return lambda: jax.device_put(host, sharding)


def _check(a):
    assert a.shape == (N,) and a[0] == 0 and a[-1] == N - 1


@pytest.mark.benchmark(group=GROUP)
def test_gather_sharded_peer(measure, fresh):
    _check(measure(np.asarray, "np.asarray(j)", rounds=15, setup=fresh))


@pytest.mark.benchmark(group=GROUP)
def test_gather_sharded_jax(measure, jax, fresh):
    _check(measure(jax.device_get, "jax.device_get(j)", role="other", rounds=15, setup=fresh))


@pytest.mark.benchmark(group=GROUP)
def test_gather_sharded(measure, fresh):
    out = measure(
        gpu_dlpack.from_dlpack, "gpu_dlpack.from_dlpack(j)",
        role="gpu_dlpack", peer="np.asarray(j)", target=1.2, rounds=15, setup=fresh,
    )
    _check(out)
    assert out.flags.writeable
