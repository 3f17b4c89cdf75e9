"""The libraries the doctor probes, and how to make an array with each:
nothing here says how a library behaves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import _peers as _table
from .._backends import cupy_backend
from ._measure import VALUES, _aligned, _quiet, _readonly_numpy


def _jax_devices(m, platform_name):
    try:
        return m.devices(platform_name)
    except RuntimeError:  # no such backend
        return []


def _jax_to_cpu(m):
    """Where JAX cannot open the platforms it is set up for (another process
    holds the TPU; JAX_PLATFORMS names one this machine lacks), JAX set up
    for its CPU instead, and what it raised: (the error, the platforms it
    was set up for). None where it opens them, or where the CPU fails too
    (then JAX is left as it was)."""
    try:
        m.devices()
        return None
    # JAX 0.10 raises an AssertionError, without words, where JAX_PLATFORMS
    # names CUDA and no NVIDIA GPU is visible.
    except Exception as exc:
        error = exc
    platforms = getattr(m.config, "jax_platforms", None)
    # JAX opens its platforms at its first use, and opens them anew at each
    # use while one fails: set up for the CPU, its next use opens the CPU.
    m.config.update("jax_platforms", "cpu")
    try:
        m.devices("cpu")
    except Exception:
        m.config.update("jax_platforms", platforms)
        return None
    return error, platforms


def _tf_host(m, a):
    with m.device("CPU:0"):
        return m.constant(a)


@dataclass(frozen=True)
class Peer:
    """How the doctor makes arrays of one library. Where the library lives
    and where its ``from_dlpack`` is are its row's in gpu_dlpack's table
    (``gpu_dlpack._peers``, by name), which ``convert`` reads too; a library
    without a row (``generic_peer``) gives them in ``where``."""

    name: str
    host: Callable | None = None          # (module, ndarray) -> array in host memory
    readonly: Callable | None = None      # (module, ndarray) -> read-only host array (None: it has none)
    gpu: Callable | None = None           # (module, ndarray) -> array on the GPU
    gpu_usable: Callable | None = None    # module -> bool
    always: bool = True                   # a row even when not installed
    host_consumer: bool = True            # its from_dlpack of host data lands on the host
    flat: bool = False                    # its arrays have one dimension: made of VALUES.ravel()
    where: tuple | None = None            # (module, consumer, submodules) where no row says them
    # module -> (error, platforms) where it cannot open the accelerator it is
    # set up for, having set itself up for the CPU; None where it opens it.
    to_cpu: Callable | None = None

    def _where(self) -> tuple:
        if self.where is not None:
            return self.where
        row = _table.by_name(self.name)
        if row is None:
            raise LookupError(f"the doctor's peer {self.name!r} has no row in gpu_dlpack._peers")
        return row.module, row.consumer, row.submodules

    @property
    def module(self) -> str:
        """The module imported (the library's top-level one)."""
        return self._where()[0]

    @property
    def consumer(self) -> tuple:
        """Where its ``from_dlpack`` lives, relative to ``module``: the first found."""
        return self._where()[1]

    @property
    def submodules(self) -> tuple:
        """The modules imported with it, where its functions live."""
        return self._where()[2]

    @property
    def values(self):
        """The values its host arrays are made of, and must arrive as."""
        return VALUES.ravel() if self.flat else VALUES


def _torch_readonly(m, a):
    """Read-only data as torch makes it from 2.14 (its ``ReadOnlyTensorWrapper``,
    whose versioned capsules say READ_ONLY); None before, which has none."""
    wrapper = getattr(getattr(getattr(m, "utils", None), "dlpack", None), "ReadOnlyTensorWrapper", None)
    return None if wrapper is None else wrapper(m.from_numpy(_aligned(a)))


PEERS = (
    Peer("numpy", host=lambda m, a: _aligned(a), readonly=_readonly_numpy),
    Peer(
        "torch",
        host=lambda m, a: m.from_numpy(_aligned(a)),
        readonly=_torch_readonly,
        gpu=lambda m, a: m.as_tensor(a, device="cuda"),
        gpu_usable=lambda m: bool(m.cuda.is_available()),
    ),
    Peer(
        "jax",
        host=lambda m, a: m.device_put(a, _jax_devices(m, "cpu")[0]),
        gpu=lambda m, a: m.device_put(a, _jax_devices(m, "gpu")[0]),
        gpu_usable=lambda m: bool(_jax_devices(m, "gpu")),
        to_cpu=_jax_to_cpu,
    ),
    Peer(
        "cupy", gpu=lambda m, a: m.asarray(a), gpu_usable=lambda m: cupy_backend.device_count() > 0,
        host_consumer=False,
    ),
    Peer(
        "array_api_strict",
        host=lambda m, a: m.asarray(_aligned(a)),
        readonly=lambda m, a: m.asarray(_readonly_numpy(None, a)),
    ),
    # Numba's device arrays speak the CUDA Array Interface, in and out.
    Peer(
        "numba", gpu=lambda m, a: m.cuda.to_device(a), gpu_usable=lambda m: bool(m.cuda.is_available()),
        host_consumer=False,
    ),
    # Other DLPack speakers: probed only when installed.
    # Paddle before TensorFlow: Paddle 3.3.1 imported after TensorFlow 2.21
    # crashes the process (SIGSEGV); the other order works.
    Peer("paddle", host=lambda m, a: m.to_tensor(a, place=m.CPUPlace()), always=False),
    Peer("tensorflow", host=_tf_host, always=False),
    Peer("mlx", host=lambda m, a: m.core.array(a), always=False),
    Peer("tvm_ffi", host=lambda m, a: m.from_dlpack(_aligned(a)), always=False),
    # Producers only: pyarrow's arrays, and dask's lazy arrays (no DLPack of
    # their own: the table says how convert takes them).
    Peer("pyarrow", host=lambda m, a: m.array(a), always=False, flat=True),
    Peer("dask", host=lambda m, a: m.array.from_array(a), always=False),
    # SYCL libraries (oneAPI devices), in no row of the table: probed as any
    # library would be, since nothing here can measure them.
    Peer("dpnp", host=lambda m, a: m.asarray(a), always=False, host_consumer=False,
         where=("dpnp", ("from_dlpack",), ())),
    Peer("dpctl", host=lambda m, a: m.asarray(a), always=False, host_consumer=False,
         where=("dpctl.tensor", ("from_dlpack",), ())),
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
        module, host=_generic_host,
        where=(module, ("from_dlpack", "dlpack.from_dlpack", "utils.dlpack.from_dlpack"), ()),
    )


def _peer_gpu_usable(peer, module) -> bool:
    if peer.gpu_usable is None or module is None:
        return False
    try:
        with _quiet():
            return bool(peer.gpu_usable(module))
    except Exception:
        return False
