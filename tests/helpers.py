"""Small helpers shared by the tests."""

import gc
import sys
import sysconfig

import numpy as np

#: A build without the GIL (3.13t and later).
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def refcount(obj):
    """``sys.getrefcount(obj)`` where it is exact, to check that exchanges
    give back every reference they take; None on a free-threaded build, whose
    counts are split between threads and partly deferred, so that the same
    work can read different counts. Tests that compare counts also check,
    with ``released``, that the object dies once the test drops it: that holds
    on every build."""
    return None if FREE_THREADED else sys.getrefcount(obj) - 1


def released(ref) -> bool:
    """Whether the object behind weak reference ``ref`` is gone once every
    cycle is collected."""
    for _ in range(3):
        if ref() is None:
            return True
        gc.collect()
    return ref() is None


def pointer(x):
    """Address of the first element of a NumPy, PyTorch or JAX array."""
    if isinstance(x, np.ndarray):
        return x.ctypes.data
    if hasattr(x, "data_ptr"):
        return x.data_ptr()
    return x.unsafe_buffer_pointer()


class OldProducer:
    """A producer written before the 2023 revision of the standard: its
    ``__dlpack__`` takes only ``stream`` and gives a legacy capsule."""

    def __init__(self, array):
        self.array = array
        self.calls = []

    def __dlpack__(self, stream=None):
        self.calls.append({"stream": stream})
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class VersionedOnlyProducer:
    """A producer that answers every request with a versioned capsule, even a
    legacy consumer's (off-spec, seen in the wild)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self.array.__dlpack__(max_version=(1, 0))

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def simulated_cuda() -> bool:
    """Whether CuPy runs on the simulated CUDA (tests/simcuda): its streams
    run only when the host waits for them, and it runs no kernel."""
    return bool(getattr(sys.modules.get("cupy_backends.cuda.api.runtime"), "__simulated__", False))


def gpu_arange(cp, *args, **kwargs):
    """``cp.arange(*args, **kwargs)`` made without a kernel: NumPy's values
    copied to the GPU by ``cupy.asarray`` (one host-to-device copy), so that
    a test whose input it is also runs on the simulated CUDA (tests/simcuda),
    which runs no kernel."""
    return cp.asarray(np.arange(*args, **kwargs))


def gpu_full(cp, shape, value, dtype):
    """``cp.full(shape, value, dtype)`` made without a kernel (``gpu_arange``)."""
    return cp.asarray(np.full(shape, value, dtype))


def aligned(shape, dtype=np.float64, align=64):
    """A C-contiguous array whose data is ``align``-byte aligned (JAX imports
    only aligned host memory without a copy)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(n + align, np.uint8)
    start = (-raw.ctypes.data) % align
    out = raw[start : start + n].view(dtype).reshape(shape)
    out[...] = np.arange(out.size, dtype=dtype).reshape(shape) if out.size else out
    return out


# -- the DLPack structs, written out in tests/capsules.py independently of gpu_dlpack

import ctypes

from .capsules import DLManagedTensor, DLManagedTensorVersioned  # noqa: E402

_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_GetPointer.restype = ctypes.c_void_p
_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_GetName = ctypes.pythonapi.PyCapsule_GetName
_GetName.restype = ctypes.c_char_p
_GetName.argtypes = [ctypes.py_object]


def capsule_name(capsule):
    return _GetName(capsule).decode()


def managed(capsule):
    """The struct inside an unconsumed capsule, to read or alter in place."""
    name = _GetName(capsule)
    ptr = _GetPointer(capsule, name)
    if name == b"dltensor_versioned":
        return DLManagedTensorVersioned.from_address(ptr)
    return DLManagedTensor.from_address(ptr)


class Handing:
    """A host producer whose ``__dlpack__`` hands over one given capsule,
    whatever it is asked."""

    def __init__(self, cap):
        self.cap = cap

    def __dlpack__(self, **kwargs):
        return self.cap

    def __dlpack_device__(self):
        return (1, 0)


def load_toml(path):
    """A TOML file as a dict: tomllib (CPython 3.11+), or tomli, its
    backport, on 3.10 (pytest needs it there, so it is installed)."""
    try:
        import tomllib
    except ImportError:  # CPython 3.10
        import tomli as tomllib
    with open(path, "rb") as f:
        return tomllib.load(f)


def jax_x64(jax, on):
    """A block with JAX's x64 mode ``on`` or off: ``jax.enable_x64(on)``,
    which older JAX (0.6.2, the newest for CPython 3.10) has only as
    ``jax.experimental.enable_x64()`` and ``disable_x64()``."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(on)
    import jax.experimental

    return jax.experimental.enable_x64() if on else jax.experimental.disable_x64()


def without_peers(env=None) -> dict:
    """The environment of a child ``python -m gpu_dlpack`` that runs with
    NumPy alone: every other library of ``_peers`` hidden from import
    (tests/hide), for a test of what the command does with its output,
    which probing every peer (15 to 25 s a doctor) would only slow."""
    import os

    from gpu_dlpack import _peers

    env = dict(os.environ if env is None else env)
    hide = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hide")
    hidden = [n for n in env.get("GPU_DLPACK_TEST_HIDE", "").split(",") if n]
    hidden += [peer.module for peer in _peers.PEERS if peer.module != "numpy"]
    env["GPU_DLPACK_TEST_HIDE"] = ",".join(dict.fromkeys(hidden))
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(filter(None, [hide, *env.get("PYTHONPATH", "").split(os.pathsep)])))
    return env


# -- torch subclasses with a __torch_function__ of their own ------------------


def dlpack_only_subclass(torch):
    """``(type, read_only)``: torch 2.14's ReadOnlyTensorWrapper where torch
    has it; before, a subclass made as it is (``dlpack_only_type``: only its
    read-only export is 2.14's own)."""
    real = getattr(torch.utils.dlpack, "ReadOnlyTensorWrapper", None)
    if real is not None:
        return real, True
    return dlpack_only_type(torch), False


def dlpack_only_type(torch):
    """A subclass whose __torch_function__ refuses every operation but
    __dlpack__ and __dlpack_device__, as torch 2.14's ReadOnlyTensorWrapper
    does, and whose export is torch's own (writeable)."""

    class DLPackOnly(torch.Tensor):
        _ALLOWED = frozenset({torch.Tensor.__dlpack__, torch.Tensor.__dlpack_device__})

        @staticmethod
        def __new__(cls, tensor):
            return tensor.as_subclass(cls)

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func in cls._ALLOWED:
                with torch._C.DisableTorchFunctionSubclass():
                    return func(*args, **(kwargs or {}))
            raise RuntimeError(f"{cls.__name__} only supports DLPack export")

    return DLPackOnly


def counting_subclass(torch):
    """A subclass whose __torch_function__ runs every operation as torch's
    and keeps the name of each in ``calls``: code of its own, which the
    layer must not run but to ask for DLPack."""

    class Counting(torch.Tensor):
        calls: list = []

        @staticmethod
        def __new__(cls, tensor):
            return tensor.as_subclass(cls)

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            cls.calls.append(getattr(func, "__name__", repr(func)))
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))

    return Counting


def base_tensor(torch, t):
    """The plain tensor over a subclass's memory, made without running the
    subclass's code (its data pointer, its values, read by the test)."""
    with torch._C.DisableTorchFunctionSubclass():
        return torch.Tensor.as_subclass(t, torch.Tensor)
