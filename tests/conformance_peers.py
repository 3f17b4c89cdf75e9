"""How to make an array of each peer for ``gpu_dlpack.testing``'s checks
(``make(shape, dtype, *, readonly=False)``), and, run as a script, the
rules each library named on the command line breaks (JSON: name ->
[version, [rule ids]]): TensorFlow and PaddlePaddle run apart, each in a
process of its own (PaddlePaddle imported after TensorFlow crashes)."""

import importlib
import importlib.metadata
import json
import sys

import numpy as np

from gpu_dlpack import testing


def _no_read_only(library):
    def refuse():
        raise NotImplementedError(f"{library} has no read-only arrays")
    return refuse


def _numpy(m):
    def make(shape, dtype, *, readonly=False):
        a = testing.values(shape, dtype)
        a.flags.writeable = not readonly
        return a
    return make


def _torch(m):
    def make(shape, dtype, *, readonly=False):
        if readonly:
            _no_read_only("torch")()
        return m.from_numpy(testing.values(shape, dtype))
    return make


def _jax(m):
    # Its arrays are all immutable (readonly=True makes one like any
    # other); without x64 it has no 64-bit dtypes.
    def make(shape, dtype, *, readonly=False):
        if np.dtype(dtype).itemsize > (8 if np.dtype(dtype).kind == "c" else 4) and not m.config.jax_enable_x64:
            raise TypeError(f"{dtype} needs JAX's x64")
        return m.numpy.asarray(testing.values(shape, dtype))
    return make


def _array_api_strict(m):
    def make(shape, dtype, *, readonly=False):
        if readonly:
            _no_read_only("array_api_strict")()
        if dtype == "float16":
            raise TypeError("array_api_strict has no float16")
        return m.asarray(testing.values(shape, dtype))
    return make


def _mlx(m):
    def make(shape, dtype, *, readonly=False):
        if readonly:
            _no_read_only("MLX")()
        if dtype in ("float64", "complex128"):
            raise TypeError(f"MLX has no {dtype}")
        return m.array(testing.values(shape, dtype))
    return make


def _pyarrow(m):
    # Its arrays have one dimension and are all immutable.
    def make(shape, dtype, *, readonly=False):
        if len(shape) != 1:
            raise ValueError("pyarrow's arrays have one dimension")
        if np.dtype(dtype).kind == "c":
            raise TypeError("pyarrow has no complex type")
        return m.array(testing.values(shape, dtype))
    return make


def _tvm_ffi(m):
    def make(shape, dtype, *, readonly=False):
        if readonly:
            _no_read_only("tvm-ffi")()
        return m.from_dlpack(testing.values(shape, dtype))
    return make


def _tensorflow(m):
    # Its tensors are all immutable.
    def make(shape, dtype, *, readonly=False):
        with m.device("CPU:0"):
            t = m.constant(testing.values(shape, dtype))
        if t.dtype.name != np.dtype(dtype).name:
            raise TypeError(f"tensorflow made {t.dtype.name}")
        return t
    return make


def _paddle(m):
    def make(shape, dtype, *, readonly=False):
        if readonly:
            _no_read_only("paddle")()
        t = m.to_tensor(testing.values(shape, dtype), place=m.CPUPlace())
        if str(t.dtype).rpartition(".")[2] != np.dtype(dtype).name:
            raise TypeError(f"paddle made {t.dtype}")
        return t
    return make


#: library -> (module, its distribution, make of the module)
PEERS = {
    "numpy": ("numpy", "numpy", _numpy),
    "torch": ("torch", "torch", _torch),
    "jax": ("jax", "jax", _jax),
    "array_api_strict": ("array_api_strict", "array-api-strict", _array_api_strict),
    "mlx": ("mlx.core", "mlx", _mlx),
    "pyarrow": ("pyarrow", "pyarrow", _pyarrow),
    "tvm_ffi": ("tvm_ffi", "apache-tvm-ffi", _tvm_ffi),
    "tensorflow": ("tensorflow", "tensorflow-cpu", _tensorflow),
    "paddle": ("paddle", "paddlepaddle", _paddle),
}
APART = ("tensorflow", "paddle")
#: Libraries whose exports are NumPy's own: what they break depends on NumPy's version too.
OVER_NUMPY = ("array_api_strict",)


def version(library) -> str:
    """The installed version (``"2.6.1 on NumPy 2.2.6"`` for a library over NumPy)."""
    dist = PEERS[library][1]
    for name in (dist, dist.removesuffix("-cpu")):
        try:
            found = importlib.metadata.version(name).partition("+")[0]
        except importlib.metadata.PackageNotFoundError:
            continue
        return f"{found} on NumPy {np.__version__}" if library in OVER_NUMPY else found
    raise importlib.metadata.PackageNotFoundError(dist)


def make_of(library):
    """``make`` of an installed library (ImportError where it is not)."""
    module, _dist, make = PEERS[library]
    return make(importlib.import_module(module))


if __name__ == "__main__":
    out = {}
    for library in sys.argv[1:]:
        try:
            make = make_of(library)
        except ImportError:
            continue
        out[library] = [version(library), list(testing.check_producer(make).failed)]
    print(json.dumps(out))
