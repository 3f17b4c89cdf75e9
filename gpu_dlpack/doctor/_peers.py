"""The libraries the doctor probes, and how to make an array with each:
nothing here says how a library behaves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .._backends import cupy_backend
from ._measure import VALUES, _aligned, _quiet, _readonly_numpy


def _jax_devices(m, platform_name):
    try:
        return m.devices(platform_name)
    except RuntimeError:  # no such backend
        return []


def _tf_host(m, a):
    with m.device("CPU:0"):
        return m.constant(a)


@dataclass(frozen=True)
class Peer:
    """How to reach one array library: nothing here says how it behaves."""

    name: str
    module: str
    consumer: tuple = ("from_dlpack",)   # where its from_dlpack lives, first found wins
    host: Callable | None = None          # (module, ndarray) -> array in host memory
    readonly: Callable | None = None      # (module, ndarray) -> read-only host array
    gpu: Callable | None = None           # (module, ndarray) -> array on the GPU
    gpu_usable: Callable | None = None    # module -> bool
    submodules: tuple = ()
    always: bool = True                   # a row even when not installed
    host_consumer: bool = True            # its from_dlpack of host data lands on the host
    flat: bool = False                    # its arrays have one dimension: made of VALUES.ravel()

    @property
    def values(self):
        """The values its host arrays are made of, and must arrive as."""
        return VALUES.ravel() if self.flat else VALUES


PEERS = (
    Peer("numpy", "numpy", host=lambda m, a: _aligned(a), readonly=_readonly_numpy),
    Peer(
        "torch", "torch",
        host=lambda m, a: m.from_numpy(_aligned(a)),
        gpu=lambda m, a: m.as_tensor(a, device="cuda"),
        gpu_usable=lambda m: bool(m.cuda.is_available()),
    ),
    Peer(
        "jax", "jax", consumer=("dlpack.from_dlpack",), submodules=("jax.dlpack", "jax.numpy"),
        host=lambda m, a: m.device_put(a, _jax_devices(m, "cpu")[0]),
        gpu=lambda m, a: m.device_put(a, _jax_devices(m, "gpu")[0]),
        gpu_usable=lambda m: bool(_jax_devices(m, "gpu")),
    ),
    Peer(
        "cupy", "cupy", gpu=lambda m, a: m.asarray(a), gpu_usable=lambda m: cupy_backend.device_count() > 0,
        host_consumer=False,
    ),
    Peer(
        "array_api_strict", "array_api_strict",
        host=lambda m, a: m.asarray(_aligned(a)),
        readonly=lambda m, a: m.asarray(_readonly_numpy(None, a)),
    ),
    Peer(
        # Numba's device arrays speak the CUDA Array Interface, in and out.
        "numba", "numba", consumer=("cuda.from_dlpack", "from_dlpack", "cuda.as_cuda_array"),
        submodules=("numba.cuda",),
        gpu=lambda m, a: m.cuda.to_device(a), gpu_usable=lambda m: bool(m.cuda.is_available()),
        host_consumer=False,
    ),
    # Other DLPack speakers: probed only when installed.
    # Paddle before TensorFlow: Paddle 3.3.1 imported after TensorFlow 2.21
    # crashes the process (SIGSEGV); the other order works.
    Peer(
        "paddle", "paddle", consumer=("utils.dlpack.from_dlpack", "from_dlpack"),
        host=lambda m, a: m.to_tensor(a, place=m.CPUPlace()), always=False,
    ),
    Peer(
        "tensorflow", "tensorflow", consumer=("experimental.dlpack.from_dlpack",), host=_tf_host,
        always=False,
    ),
    Peer("mlx", "mlx.core", host=lambda m, a: m.array(a), always=False),
    Peer("tvm_ffi", "tvm_ffi", host=lambda m, a: m.from_dlpack(_aligned(a)), always=False),
    # Producers only: pyarrow's arrays, and dask's lazy arrays (no DLPack of
    # their own: the table says how convert takes them).
    Peer("pyarrow", "pyarrow", consumer=(), host=lambda m, a: m.array(a), always=False, flat=True),
    Peer("dask", "dask.array", consumer=(), host=lambda m, a: m.from_array(a), always=False),
    Peer("dpnp", "dpnp", host=lambda m, a: m.asarray(a), always=False, host_consumer=False),
    Peer("dpctl", "dpctl.tensor", host=lambda m, a: m.asarray(a), always=False, host_consumer=False),
)


def _generic_host(m, a):
    for name in ("asarray", "array", "tensor"):
        make = getattr(m, name, None)
        if callable(make):
            return make(_aligned(a))
    raise AttributeError(f"{m.__name__} has no asarray, array or tensor")


def generic_peer(module: str) -> Peer:
    """A peer for any importable module (``gpu-dlpack doctor --library``)."""
    return Peer(
        module, module, consumer=("from_dlpack", "dlpack.from_dlpack", "utils.dlpack.from_dlpack"),
        host=_generic_host,
    )


def _peer_gpu_usable(peer, module) -> bool:
    if peer.gpu_usable is None or module is None:
        return False
    try:
        with _quiet():
            return bool(peer.gpu_usable(module))
    except Exception:
        return False
