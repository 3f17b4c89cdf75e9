"""GPU benchmarks: exchanges between CuPy and PyTorch, and from JAX to each,
through gpu_dlpack against each library's own ``from_dlpack``, the stream
hand-off alone, and copies between host and device against CuPy and a
pinned-copy ceiling.

Every benchmark here is marked ``gpu`` (skipped without a GPU usable by
CuPy). ``bytes`` in ``extra_info`` lets ``bench/report.py`` turn the copy
medians into GB/s. Run: ``PYTHONPATH=. python3 -m pytest -m gpu bench
--benchmark-only`` (or ``scripts/gpu-ci.sh OUTDIR``).
"""

import numpy as np
import pytest

import gpu_dlpack

pytestmark = pytest.mark.gpu

VERSIONED = (1, 0)
SMALL = 1 << 20  # elements of the exchanged arrays (zero-copy: the size does not matter)
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
SIZES = [4 * KIB, 64 * KIB, 1 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, 1 * GIB]
# cudaMemcpyKind values (driver_types.h); CuPy's runtime takes them as ints.
HOST_TO_DEVICE, DEVICE_TO_HOST = 1, 2


def _rounds(nbytes):
    """Rounds per copy benchmark: many for small copies, few for large ones,
    so that the whole run stays within the GPU CI job's time."""
    return max(3, min(50, (256 * MIB) // nbytes))


def _size(n):
    return f"{n // GIB} GiB" if n >= GIB else f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"


def _id(n):
    return _size(n).replace(" ", "")


# --- peers and streams --------------------------------------------------------


@pytest.fixture(scope="module")
def streams(cp):
    """(producer, consumer): two non-blocking CuPy streams."""
    return cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)


@pytest.fixture
def on_streams(cp, tc, streams):
    """Returns ``use(cupy_stream, torch_stream)``: makes those the current
    streams of CuPy and PyTorch for the test, restored afterwards."""
    cupy_before = cp.cuda.get_current_stream()
    torch_before = tc.cuda.current_stream()

    def use(cupy_stream, torch_stream):
        cupy_stream.use()
        tc.cuda.set_stream(tc.cuda.ExternalStream(torch_stream.ptr))

    yield use
    cupy_before.use()
    tc.cuda.set_stream(torch_before)


def _cupy_array(cp, stream):
    with stream:
        a = cp.arange(SMALL, dtype=cp.float32)
    stream.synchronize()
    return a


def _torch_tensor(tc, stream):
    with tc.cuda.stream(tc.cuda.ExternalStream(stream.ptr)):
        t = tc.arange(SMALL, dtype=tc.float32, device="cuda")
    stream.synchronize()
    return t


# --- CuPy to PyTorch ------------------------------------------------------------

@pytest.mark.benchmark(group="gpu: cupy to torch, no stream hand-off")
def test_cupy_to_torch_peer(measure, cp, tc, streams):
    a = _cupy_array(cp, streams[0])
    out = measure(
        lambda: tc.from_dlpack(a.__dlpack__(stream=-1, max_version=VERSIONED)),
        "torch.from_dlpack(a.__dlpack__(stream=-1, max_version=(1, 0)))",
    )
    assert out.data_ptr() == a.data.ptr


@pytest.mark.benchmark(group="gpu: cupy to torch, no stream hand-off")
def test_cupy_to_torch(measure, cp, tc, streams):
    a = _cupy_array(cp, streams[0])
    out = measure(
        lambda: tc.from_dlpack(gpu_dlpack.export(a, stream=-1, max_version=VERSIONED)),
        "torch.from_dlpack(gpu_dlpack.export(a, stream=-1, max_version=(1, 0)))",
        role="gpu_dlpack", peer="torch.from_dlpack(a.__dlpack__(stream=-1, max_version=(1, 0)))",
    )
    assert out.data_ptr() == a.data.ptr


@pytest.mark.benchmark(group="gpu: cupy to torch, stream hand-off")
def test_cupy_to_torch_handoff_peer(measure, cp, tc, streams, on_streams):
    producer, consumer = streams
    a = _cupy_array(cp, producer)
    on_streams(producer, consumer)  # CuPy records on producer, torch uses consumer
    out = measure(lambda: tc.from_dlpack(a), "torch.from_dlpack(a)")
    assert out.data_ptr() == a.data.ptr


@pytest.mark.benchmark(group="gpu: cupy to torch, stream hand-off")
def test_cupy_to_torch_handoff(measure, cp, tc, streams, on_streams):
    producer, consumer = streams
    a = _cupy_array(cp, producer)
    on_streams(producer, consumer)
    out = measure(
        lambda: tc.from_dlpack(gpu_dlpack.wrap(a)), "torch.from_dlpack(gpu_dlpack.wrap(a))",
        role="gpu_dlpack", peer="torch.from_dlpack(a)", target=1.0,
    )
    assert out.data_ptr() == a.data.ptr


# --- PyTorch to CuPy ------------------------------------------------------------

@pytest.mark.benchmark(group="gpu: torch to cupy, no stream hand-off")
def test_torch_to_cupy_peer(measure, cp, tc, streams):
    t = _torch_tensor(tc, streams[0])
    out = measure(
        lambda: cp.from_dlpack(t.__dlpack__(stream=-1, max_version=VERSIONED)),
        "cupy.from_dlpack(t.__dlpack__(stream=-1, max_version=(1, 0)))",
    )
    assert out.data.ptr == t.data_ptr()


@pytest.mark.benchmark(group="gpu: torch to cupy, no stream hand-off")
def test_torch_to_cupy(measure, cp, tc, streams):
    t = _torch_tensor(tc, streams[0])
    out = measure(
        lambda: gpu_dlpack.from_dlpack(t, stream=-1), "gpu_dlpack.from_dlpack(t, stream=-1)",
        role="gpu_dlpack", peer="cupy.from_dlpack(t.__dlpack__(stream=-1, max_version=(1, 0)))",
    )
    assert out.data.ptr == t.data_ptr()


@pytest.mark.benchmark(group="gpu: torch to cupy, stream hand-off")
def test_torch_to_cupy_handoff_peer(measure, cp, tc, streams, on_streams):
    producer, consumer = streams
    t = _torch_tensor(tc, producer)
    on_streams(consumer, producer)  # torch records on producer, CuPy uses consumer
    out = measure(lambda: cp.from_dlpack(t), "cupy.from_dlpack(t)")
    assert out.data.ptr == t.data_ptr()


@pytest.mark.benchmark(group="gpu: torch to cupy, stream hand-off")
def test_torch_to_cupy_handoff(measure, cp, tc, streams, on_streams):
    producer, consumer = streams
    t = _torch_tensor(tc, producer)
    on_streams(consumer, producer)
    out = measure(
        lambda: gpu_dlpack.from_dlpack(t, stream=consumer.ptr),
        "gpu_dlpack.from_dlpack(t, stream=consumer)",
        role="gpu_dlpack", peer="cupy.from_dlpack(t)",
    )
    assert out.data.ptr == t.data_ptr()


# --- JAX on the GPU: legacy capsules, adapted in C, with the consumer's stream ------
# JAX's capsules are legacy only; gpu_dlpack gives the versioned one torch
# asks for (the legacy struct inside, READ_ONLY) and lands JAX's memory in
# CuPy on the consumer's stream. Against each consumer's own from_dlpack(j).


@pytest.fixture(scope="module")
def jgpu():
    jax = pytest.importorskip("jax")
    import jax.numpy  # noqa: F401

    try:
        jax.devices("gpu")
    except RuntimeError:
        pytest.skip("JAX has no GPU backend here (JAX_PLATFORMS, or a CPU-only jaxlib)")
    return jax


def _jax_array(jgpu):
    j = jgpu.device_put(jgpu.numpy.arange(SMALL, dtype=jgpu.numpy.float32), jgpu.devices("gpu")[0])
    j.block_until_ready()
    return j


@pytest.mark.benchmark(group="gpu: jax to torch, stream hand-off")
def test_jax_to_torch_peer(measure, tc, jgpu, streams, on_streams, cp):
    j = _jax_array(jgpu)
    on_streams(streams[0], streams[1])  # torch asks JAX for its current stream, streams[1]
    out = measure(lambda: tc.from_dlpack(j), "torch.from_dlpack(j)")
    assert out.data_ptr() == j.unsafe_buffer_pointer()


@pytest.mark.benchmark(group="gpu: jax to torch, stream hand-off")
def test_jax_to_torch(measure, tc, jgpu, streams, on_streams, cp):
    j = _jax_array(jgpu)
    on_streams(streams[0], streams[1])
    out = measure(
        lambda: tc.from_dlpack(gpu_dlpack.wrap(j)), "torch.from_dlpack(gpu_dlpack.wrap(j))",
        role="gpu_dlpack", peer="torch.from_dlpack(j)", target=1.2,
    )
    assert out.data_ptr() == j.unsafe_buffer_pointer()


@pytest.mark.benchmark(group="gpu: jax to cupy, stream hand-off")
def test_jax_to_cupy_peer(measure, cp, jgpu, streams, cupy_current):
    j = _jax_array(jgpu)
    streams[1].use()  # CuPy passes its current stream to JAX
    out = measure(lambda: cp.from_dlpack(j), "cupy.from_dlpack(j)")
    assert out.data.ptr == j.unsafe_buffer_pointer()


@pytest.mark.benchmark(group="gpu: jax to cupy, stream hand-off")
def test_jax_to_cupy(measure, cp, jgpu, streams, cupy_current):
    j = _jax_array(jgpu)
    streams[1].use()
    out = measure(
        lambda: gpu_dlpack.from_dlpack(j), "gpu_dlpack.from_dlpack(j)",
        role="gpu_dlpack", peer="cupy.from_dlpack(j)", target=1.2,
    )
    assert out.data.ptr == j.unsafe_buffer_pointer()


# --- the stream hand-off alone -----------------------------------------------------

@pytest.mark.benchmark(group="gpu: stream hand-off alone")
def test_handoff_fresh_event_peer(measure, cp, streams):
    producer, consumer = streams

    def fresh_event():
        event = cp.cuda.Event(disable_timing=True)
        event.record(producer)
        consumer.wait_event(event)

    measure(fresh_event, "a fresh cupy.cuda.Event per call: record + wait_event")
    consumer.synchronize()


@pytest.mark.benchmark(group="gpu: stream hand-off alone")
def test_handoff_export_without(measure, cp, streams, cupy_current):
    producer, consumer = streams
    a = _cupy_array(cp, producer)
    producer.use()
    cap = measure(
        lambda: gpu_dlpack.export(a, stream=-1, max_version=VERSIONED),
        "gpu_dlpack.export(a, stream=-1, max_version=(1, 0))", role="other",
    )
    assert gpu_dlpack.inspect(cap).data == a.data.ptr


@pytest.mark.benchmark(group="gpu: stream hand-off alone")
def test_handoff_export_with(measure, cp, streams, cupy_current):
    producer, consumer = streams
    a = _cupy_array(cp, producer)
    producer.use()
    cap = measure(
        lambda: gpu_dlpack.export(a, stream=consumer.ptr, max_version=VERSIONED),
        "gpu_dlpack.export(a, stream=consumer, max_version=(1, 0))",
        role="gpu_dlpack", peer="a fresh cupy.cuda.Event per call: record + wait_event",
        minus="gpu_dlpack.export(a, stream=-1, max_version=(1, 0))",
    )
    assert gpu_dlpack.inspect(cap).data == a.data.ptr
    consumer.synchronize()


# --- copies: device to host ---------------------------------------------------------

def _d2h_setup(cp, nbytes):
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        a = cp.arange(nbytes // 4, dtype=cp.float32)
    stream.synchronize()
    return a, stream


def _copy_targets(nbytes, direction):
    """The copy targets a benchmark of ``nbytes`` records: no slower than
    the peer (``x.get()``, ``cupy.asarray(h)``) from 4 KiB to 1 MiB, and
    device to host at 90% of the pinned ceiling from 16 MiB."""
    targets = {}
    if nbytes <= SMALL_COPIES:
        targets["target"] = 1.0
    if direction == "device to host" and nbytes >= 16 * MIB:
        targets["ceiling_share"] = 0.9
    return targets


SMALL_COPIES = 1 * MIB
_D2H_CALLS = {
    "wrap": ("np.from_dlpack(gpu_dlpack.wrap(a), device='cpu')",
             lambda a: np.from_dlpack(gpu_dlpack.wrap(a), device="cpu")),
    "from_dlpack": ("gpu_dlpack.from_dlpack(a, device='cpu')", lambda a: gpu_dlpack.from_dlpack(a, device="cpu")),
}


@pytest.mark.parametrize("call", sorted(_D2H_CALLS))
@pytest.mark.parametrize("nbytes", SIZES, ids=_id)
def test_device_to_host_gpu_dlpack(measure, benchmark, cp, nbytes, call, cupy_current):
    benchmark.group = f"gpu: device to host {_size(nbytes)}"
    a, stream = _d2h_setup(cp, nbytes)
    # A CPU consumer names no stream: the copy is queued on CuPy's current
    # stream, the one a.get(stream=stream) uses.
    stream.use()
    label, fn = _D2H_CALLS[call]
    host = measure(
        lambda: fn(a), label, role="gpu_dlpack", peer="a.get()", rounds=_rounds(nbytes), bytes=nbytes,
        direction="device to host", **_copy_targets(nbytes, "device to host"),
    )
    assert host.shape == a.shape and host[-1] == a[-1].item() and host[0] == 0


@pytest.mark.parametrize("nbytes", SIZES, ids=_id)
def test_device_to_host_cupy_get(measure, benchmark, cp, nbytes):
    benchmark.group = f"gpu: device to host {_size(nbytes)}"
    a, stream = _d2h_setup(cp, nbytes)
    host = measure(
        lambda: a.get(stream=stream), "a.get()", rounds=_rounds(nbytes), bytes=nbytes,
        direction="device to host",
    )
    assert host.shape == a.shape and host[-1] == a[-1].item()


@pytest.mark.parametrize("nbytes", SIZES, ids=_id)
def test_device_to_host_pinned_ceiling(measure, benchmark, cp, nbytes):
    benchmark.group = f"gpu: device to host {_size(nbytes)}"
    a, stream = _d2h_setup(cp, nbytes)
    pinned = cp.cuda.alloc_pinned_memory(nbytes)

    def copy():
        cp.cuda.runtime.memcpyAsync(pinned.ptr, a.data.ptr, nbytes, DEVICE_TO_HOST, stream.ptr)
        stream.synchronize()

    measure(copy, "cudaMemcpyAsync into pinned memory", role="ceiling", rounds=_rounds(nbytes),
            bytes=nbytes, direction="device to host")
    host = np.frombuffer(pinned, dtype=np.float32, count=nbytes // 4)
    assert host[-1] == a[-1].item()


# --- copies: host to device ---------------------------------------------------------

def _h2d_setup(cp, nbytes):
    host = np.arange(nbytes // 4, dtype=np.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    return host, stream


@pytest.mark.parametrize("nbytes", SIZES, ids=_id)
def test_host_to_device_gpu_dlpack(measure, benchmark, cp, nbytes):
    benchmark.group = f"gpu: host to device {_size(nbytes)}"
    host, stream = _h2d_setup(cp, nbytes)

    def copy():
        with stream:  # the consumer's stream is CuPy's current one, as for cupy.asarray(h)
            out = gpu_dlpack.from_dlpack(host, device="cuda:0")
        stream.synchronize()
        return out

    out = measure(copy, "gpu_dlpack.from_dlpack(h, device='cuda:0')", role="gpu_dlpack",
                  peer="cupy.asarray(h)", rounds=_rounds(nbytes), bytes=nbytes,
                  direction="host to device", **_copy_targets(nbytes, "host to device"))
    assert out.shape == host.shape and out[-1].item() == host[-1]


@pytest.mark.parametrize("nbytes", SIZES, ids=_id)
def test_host_to_device_cupy_asarray(measure, benchmark, cp, nbytes):
    benchmark.group = f"gpu: host to device {_size(nbytes)}"
    host, stream = _h2d_setup(cp, nbytes)

    def copy():
        with stream:
            out = cp.asarray(host)
        stream.synchronize()
        return out

    out = measure(copy, "cupy.asarray(h)", rounds=_rounds(nbytes), bytes=nbytes,
                  direction="host to device")
    assert out[-1].item() == host[-1]


@pytest.mark.parametrize("nbytes", SIZES, ids=_id)
def test_host_to_device_pinned_ceiling(measure, benchmark, cp, nbytes):
    benchmark.group = f"gpu: host to device {_size(nbytes)}"
    host, stream = _h2d_setup(cp, nbytes)
    pinned = cp.cuda.alloc_pinned_memory(nbytes)
    np.frombuffer(pinned, dtype=np.float32, count=nbytes // 4)[:] = host
    with stream:
        out = cp.empty(nbytes // 4, dtype=cp.float32)

    def copy():
        cp.cuda.runtime.memcpyAsync(out.data.ptr, pinned.ptr, nbytes, HOST_TO_DEVICE, stream.ptr)
        stream.synchronize()

    measure(copy, "cudaMemcpyAsync from pinned memory", role="ceiling", rounds=_rounds(nbytes),
            bytes=nbytes, direction="host to device")
    assert out[-1].item() == host[-1]
