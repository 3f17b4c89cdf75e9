"""Arrays spread over several devices: JAX's sharded and replicated arrays
on four host devices (the root conftest asks XLA for them), into NumPy,
PyTorch and JAX consumers through ``from_dlpack``, ``wrap`` and ``export``,
and out again shard by shard with ``gpu_dlpack.shards``."""

import numpy as np
import pytest

import gpu_dlpack

from .helpers import Handing

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def sharding(jax):
    if len(jax.devices()) < 4:
        pytest.skip("needs 4 JAX devices (XLA_FLAGS=--xla_force_host_platform_device_count=4)")
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = np.array(jax.devices()[:4])
    meshes = {"1d": Mesh(devices, ("x",)), "2d": Mesh(devices.reshape(2, 2), ("a", "b"))}

    def make(mesh, *spec):
        return NamedSharding(meshes[mesh], PartitionSpec(*spec))

    return make


def _put(jax, values, sharding):
    return jax.device_put(jax.numpy.asarray(values), sharding)


def _pointers(j):
    return {s.data.unsafe_buffer_pointer() for s in j.addressable_shards}


# (shape, mesh, spec): split along each axis, on 1-D and 2-D meshes, partly
# and fully replicated. (JAX refuses shardings that do not divide an axis.)
LAYOUTS = [
    ((16,), "1d", ("x",)),
    ((8, 4), "1d", ("x", None)),
    ((4, 8), "1d", (None, "x")),
    ((4, 6), "2d", ("a", "b")),
    ((4, 6), "2d", ("b", "a")),
    ((4, 6), "2d", ("a", None)),  # each piece on two devices
    ((6, 4), "2d", (None, "b")),
    ((2, 4, 2), "2d", (None, "a", "b")),
]
REPLICATED = [((16,), "1d", ()), ((3, 5), "2d", ()), ((), "1d", ())]
DTYPES = [np.float32, np.int64, np.complex64, np.bool_, np.float16]


def _values(shape, dtype):
    n = int(np.prod(shape))
    return (np.arange(n) % 7).astype(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,mesh,spec", LAYOUTS)
def test_a_sharded_array_is_gathered_once_into_numpy(jax, sharding, shape, mesh, spec, dtype):
    values = _values(shape, dtype)
    j = _put(jax, values, sharding(mesh, *spec))
    assert not j.is_fully_replicated
    a = gpu_dlpack.from_dlpack(j)
    assert type(a) is np.ndarray and a.dtype == values.dtype
    np.testing.assert_array_equal(a, np.asarray(j))
    assert a.flags.writeable and a.ctypes.data not in _pointers(j)  # a fresh gather


@pytest.mark.parametrize("shape,mesh,spec", LAYOUTS)
def test_a_sharded_array_reaches_each_consumer_through_wrap(jax, torch, sharding, shape, mesh, spec):
    values = _values(shape, np.float64)
    j = _put(jax, values, sharding(mesh, *spec))
    w = gpu_dlpack.wrap(j)
    assert w.__dlpack_device__() == (1, 0) and w.last_request is None
    np.testing.assert_array_equal(np.from_dlpack(w), values)
    assert w.last_request == {"stream": None, "max_version": (1, 0), "dl_device": None, "copy": None}
    np.testing.assert_array_equal(torch.from_dlpack(w).numpy(), values)
    np.testing.assert_array_equal(np.asarray(jax.dlpack.from_dlpack(w)), values)


def test_a_gathered_export_is_flagged_is_copied(jax, sharding):
    j = _put(jax, np.arange(16.0), sharding("1d", "x"))
    info = gpu_dlpack.inspect(gpu_dlpack.export(j, max_version=(1, 0)))
    assert info.name == "dltensor_versioned" and info.is_copied and not info.readonly
    assert info.shape == (16,) and info.device == gpu_dlpack.Device("cpu")
    assert info.data not in _pointers(j)
    legacy = gpu_dlpack.inspect(gpu_dlpack.export(j))
    assert legacy.name == "dltensor" and legacy.shape == (16,)


def test_a_gathered_export_is_read_only_when_wrapped_so(jax, sharding):
    j = _put(jax, np.arange(16.0), sharding("1d", "x"))
    info = gpu_dlpack.inspect(gpu_dlpack.wrap(j, readonly=True).__dlpack__(max_version=(1, 0)))
    assert info.readonly and info.is_copied


@pytest.mark.parametrize("how", ["from_dlpack", "wrap", "export"])
def test_copy_false_refuses_a_gather_and_names_the_way_out(jax, sharding, how):
    j = _put(jax, np.arange(16.0), sharding("1d", "x"))
    calls = {
        "from_dlpack": lambda: gpu_dlpack.from_dlpack(j, copy=False),
        "wrap": lambda: gpu_dlpack.wrap(j).__dlpack__(max_version=(1, 0), copy=False),
        "export": lambda: gpu_dlpack.export(j, max_version=(1, 0), copy=False),
    }
    with pytest.raises(BufferError) as err:
        calls[how]()
    text = str(err.value)
    assert "NamedSharding" in text and "over 4 devices" in text and "copy=False" in text
    assert "gpu_dlpack.shards(x)" in text


def _spread(jax, sharding, spec):
    return _put(jax, np.arange(16.0), sharding("1d", *spec))


@pytest.mark.parametrize("spec", [("x",), ()], ids=["sharded", "replicated"])
def test_a_spread_array_asked_for_the_cpu_lands_there(jax, sharding, spec):
    j = _spread(jax, sharding, spec)
    cap = gpu_dlpack.export(j, max_version=(1, 0), dl_device=(1, 0))
    info = gpu_dlpack.inspect(cap)
    assert info.device == gpu_dlpack.Device("cpu") and info.shape == (16,)
    assert np.from_dlpack(Handing(cap)).tolist() == list(range(16))
    first = j.addressable_shards[0].data.unsafe_buffer_pointer()
    if spec:  # gathered: a copy
        assert info.flags == gpu_dlpack.FLAG_IS_COPIED and info.data not in _pointers(j)
    else:  # its first replica, in place
        assert info.flags == gpu_dlpack.FLAG_READ_ONLY and info.data == first  # JAX data is immutable


@pytest.mark.parametrize("spec", [("x",), ()], ids=["sharded", "replicated"])
@pytest.mark.parametrize("dl_device, name", [((2, 0), "cuda:0"), ((10, 1), "rocm:1")])
def test_a_spread_array_asked_for_a_gpu_without_a_backend_is_a_buffer_error(jax, sharding, spec, dl_device, name):
    from gpu_dlpack._backends import cupy as cupy_backend

    if cupy_backend.serves(gpu_dlpack.Device(name)):
        pytest.skip(f"CuPy serves {name} here")
    j = _spread(jax, sharding, spec)
    with pytest.raises(BufferError) as refused:
        gpu_dlpack.export(j, max_version=(1, 0), dl_device=dl_device)
    assert str(refused.value).startswith(
        f"no backend can hold an array on {name}: gpu_dlpack needs CuPy and a working GPU for that."
    )


@pytest.mark.parametrize("spec", [("x",), ()], ids=["sharded", "replicated"])
def test_a_spread_array_follows_the_stream_and_copy_rules_of_host_memory(jax, sharding, spec):
    j = _spread(jax, sharding, spec)
    with pytest.raises(ValueError) as bad_stream:
        gpu_dlpack.export(j, max_version=(1, 0), stream=1)
    assert str(bad_stream.value) == (
        "stream=1 is not valid for CPU. Valid values: None (no stream (host memory)), -1 (no synchronization)."
    )
    with pytest.raises(TypeError) as bad_copy:
        gpu_dlpack.export(j, max_version=(1, 0), copy="yes")
    assert str(bad_copy.value) == "copy must be True, False or None; got 'yes'."
    info = gpu_dlpack.inspect(gpu_dlpack.export(j, max_version=(1, 0), copy=True))
    assert info.flags == gpu_dlpack.FLAG_IS_COPIED and info.data not in _pointers(j)


def test_copy_true_gathers_and_the_result_is_writeable(jax, sharding):
    j = _put(jax, np.arange(16.0), sharding("1d", "x"))
    a = gpu_dlpack.from_dlpack(j, copy=True)
    a[0] = 99.0
    assert float(np.asarray(j)[0]) == 0.0


@pytest.mark.parametrize("shape,mesh,spec", REPLICATED)
def test_a_replicated_array_is_its_first_replica_zero_copy(jax, sharding, shape, mesh, spec):
    values = _values(shape, np.float64)
    r = _put(jax, values, sharding(mesh, *spec))
    assert r.is_fully_replicated
    first = r.addressable_shards[0].data.unsafe_buffer_pointer()
    a = gpu_dlpack.from_dlpack(r)
    np.testing.assert_array_equal(a, values)
    assert a.ctypes.data == first
    assert not a.flags.writeable  # JAX gives legacy capsules: read-only, as for any JAX array


def test_a_replicated_array_reaches_consumers_zero_copy_through_wrap(jax, torch, sharding):
    r = _put(jax, np.arange(16.0), sharding("1d"))
    first = r.addressable_shards[0].data.unsafe_buffer_pointer()
    w = gpu_dlpack.wrap(r)
    assert w.__dlpack_device__() == (1, 0)
    assert torch.from_dlpack(w).data_ptr() == first
    assert np.from_dlpack(w).ctypes.data == first
    info = gpu_dlpack.inspect(gpu_dlpack.export(r, max_version=(1, 0)))
    assert info.data == first and info.readonly and not info.is_copied


def test_copy_false_takes_a_replica_zero_copy(jax, sharding):
    r = _put(jax, np.arange(16.0), sharding("1d"))
    a = gpu_dlpack.from_dlpack(r, copy=False)
    assert a.ctypes.data == r.addressable_shards[0].data.unsafe_buffer_pointer()


def test_shards_gives_each_piece_once_zero_copy_on_its_device(jax, sharding):
    values = np.arange(24.0).reshape(4, 6)
    j = _put(jax, values, sharding("2d", "a", None))  # each piece on two devices
    pieces = gpu_dlpack.shards(j)
    assert [p.index for p in pieces] == [(slice(0, 2), slice(None)), (slice(2, 4), slice(None))]
    by_pointer = {s.data.unsafe_buffer_pointer(): s for s in j.addressable_shards}
    for p in pieces:
        assert isinstance(p, gpu_dlpack.Shard) and p.replica_id == 0
        assert p.device == gpu_dlpack.Device("cpu")
        assert p.data.ctypes.data in by_pointer  # zero-copy
        np.testing.assert_array_equal(p.data, values[p.index])
    everything = gpu_dlpack.shards(j, replicas=True)
    assert len(everything) == 4 and {p.replica_id for p in everything} == {0, 1}


def test_shards_of_a_replicated_array_and_of_a_plain_array(jax, sharding):
    r = _put(jax, np.arange(5.0), sharding("1d"))
    assert len(gpu_dlpack.shards(r)) == 1
    assert len(gpu_dlpack.shards(r, replicas=True)) == 4
    (only,) = gpu_dlpack.shards(np.arange(3.0))
    assert only.index == (slice(None),) and only.replica_id == 0


def test_shards_hand_each_piece_to_torch_without_a_gather(jax, torch, sharding):
    j = _put(jax, np.arange(16.0), sharding("1d", "x"))
    for p in gpu_dlpack.shards(j):
        t = torch.from_dlpack(gpu_dlpack.wrap(p.data))
        assert t.data_ptr() == p.data.ctypes.data


def test_pmap_results_are_gathered(jax):
    if len(jax.devices()) < 4:
        pytest.skip("needs 4 JAX devices")
    out = jax.pmap(lambda v: v * 2)(jax.numpy.arange(8.0).reshape(4, 2))
    np.testing.assert_array_equal(gpu_dlpack.from_dlpack(out), np.arange(8.0).reshape(4, 2) * 2)


def test_the_peers_alone_refuse_these_arrays(jax, torch, sharding):
    j = _put(jax, np.arange(16.0), sharding("1d", "x"))
    r = _put(jax, np.arange(16.0), sharding("1d"))
    for x in (j, r):
        with pytest.raises(BufferError):
            np.from_dlpack(x)
        with pytest.raises(BufferError):
            torch.from_dlpack(x)


def test_jaxs_host_test_passes_an_array_on_one_host_device_and_no_other(jax, sharding):
    # The row's test (_peers.HostTest) stands for __dlpack_device__: it
    # passes an array on any one host device, never one over several (which
    # the layer gathers), and each lands whole, the core's way and Python's.
    from gpu_dlpack._devices import host_tested

    for device in jax.devices()[:4]:
        x = jax.device_put(jax.numpy.arange(4.0), device)
        assert host_tested(x)
        np.testing.assert_array_equal(gpu_dlpack.convert(x, "numpy"), np.arange(4.0))
        np.testing.assert_array_equal(np.from_dlpack(gpu_dlpack.wrap(x)), np.arange(4.0))
    values = np.arange(16.0).reshape(4, 4)
    for mesh, *spec in (("1d", "x"), ("1d",), ("2d", "a", "b")):
        x = _put(jax, values, sharding(mesh, *spec))
        assert not host_tested(x)
        np.testing.assert_array_equal(gpu_dlpack.convert(x, "numpy"), values)
        np.testing.assert_array_equal(gpu_dlpack.from_dlpack(x), values)


class _SpreadOverOtherProcesses:
    """A JAX-like array whose sharding spans devices of other processes."""

    class _Sharding:
        device_set = frozenset({"cpu:0", "cpu:1", "host2:0", "host2:1"})
        addressable_devices = frozenset({"cpu:0", "cpu:1"})
        spec = "P('x',)"

    sharding = _Sharding()
    is_fully_addressable = False
    is_fully_replicated = False
    addressable_shards = ()
    shape = (4,)

    def __dlpack__(self, **kwargs):
        raise BufferError("__dlpack__ only supported for unsharded arrays.")

    def __dlpack_device__(self):
        raise BufferError("__dlpack__ only supported for unsharded arrays.")


def test_a_partly_addressable_array_names_what_is_missing():
    x = _SpreadOverOtherProcesses()
    for call in (gpu_dlpack.from_dlpack, lambda x: gpu_dlpack.export(x, max_version=(1, 0)), gpu_dlpack.shards):
        with pytest.raises(BufferError) as err:
            call(x)
        text = str(err.value)
        assert "2 of its devices belong to other processes" in text and "cpu:0, cpu:1" in text


def test_other_buffer_errors_of_a_producer_are_not_taken_for_sharding():
    class Broken:
        def __dlpack__(self, **kwargs):
            raise BufferError("device lost")

        def __dlpack_device__(self):
            raise BufferError("device lost")

    with pytest.raises(BufferError, match="device lost"):
        gpu_dlpack.from_dlpack(Broken())
    with pytest.raises(BufferError, match="device lost"):
        gpu_dlpack.wrap(Broken())


@pytest.mark.gpu
@pytest.mark.kernel  # the pieces are placed by CuPy's setitem kernels
def test_a_host_sharded_array_is_gathered_onto_the_gpu_on_the_stream(jax, cp, sharding):
    values = np.arange(64.0).reshape(8, 8)
    j = _put(jax, values, sharding("2d", "a", "b"))
    s = cp.cuda.Stream(non_blocking=True)
    g = gpu_dlpack.from_dlpack(j, device="cuda:0", stream=s)
    assert isinstance(g, cp.ndarray) and g.device.id == 0
    s.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(g), values)
    cap = gpu_dlpack.wrap(j).__dlpack__(max_version=(1, 0), dl_device=(2, 0), stream=s.ptr)
    info = gpu_dlpack.inspect(cap)
    assert info.device == gpu_dlpack.Device("cuda:0") and info.is_copied
