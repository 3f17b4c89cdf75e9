"""How to make an array of each peer for ``gpu_dlpack.testing``'s checks
(``make(shape, dtype, *, readonly=False)``) and where its importer is
(``CONSUMERS``), and, run as a script, the rules each library named on
the command line breaks as a producer (JSON: name -> [version, [rule
ids]]): TensorFlow and PaddlePaddle run apart, each in a process of its
own (PaddlePaddle imported after TensorFlow crashes). Importers are
checked in child processes of their own (``check_consumer`` of a name),
so none of them is imported by the process that checks them."""

import importlib
import importlib.metadata
import json
import sys

import numpy as np

from gpu_dlpack import testing


def _maker(library, build, *, immutable=False, lacks=lambda shape, dtype: None, made=None):
    """``make`` of a library: ``build(values)`` is its array of them;
    ``immutable``: every array of it is read-only (else it has none);
    ``lacks(shape, dtype)``: what of these it does not have, or None;
    ``made(array)``: the dtype name it made, where it may make another."""
    def make(shape, dtype, *, readonly=False):
        if readonly and not immutable:
            raise NotImplementedError(f"{library} has no read-only arrays")
        missing = lacks(shape, np.dtype(dtype))
        if missing:
            raise TypeError(f"{library} has no {missing}")
        x = build(testing.values(shape, dtype))
        if made is not None and made(x) != np.dtype(dtype).name:
            raise TypeError(f"{library} made {made(x)} of {dtype}")
        return x
    return make


def _numpy(m):
    def make(shape, dtype, *, readonly=False):
        a = testing.values(shape, dtype)
        a.flags.writeable = not readonly
        return a
    return make


def _tensorflow(m):
    def build(a):
        with m.device("CPU:0"):
            return m.constant(a)
    return _maker("tensorflow", build, immutable=True, made=lambda t: t.dtype.name)


def _no_x64(m):
    """What JAX lacks without x64: its 64-bit types."""
    return lambda shape, dtype: (f"{dtype} without x64" if not m.config.jax_enable_x64
                                 and dtype.itemsize > (8 if dtype.kind == "c" else 4) else None)


#: library -> (module, its distribution, make of the module)
PEERS = {
    "numpy": ("numpy", "numpy", _numpy),
    "torch": ("torch", "torch", lambda m: _maker("torch", m.from_numpy)),
    "jax": ("jax", "jax", lambda m: _maker("jax", m.numpy.asarray, immutable=True, lacks=_no_x64(m))),
    "array_api_strict": ("array_api_strict", "array-api-strict", lambda m: _maker(
        "array_api_strict", m.asarray, lacks=lambda shape, dtype: dtype.name if dtype == np.float16 else None)),
    "mlx": ("mlx.core", "mlx", lambda m: _maker(
        "MLX", m.array, lacks=lambda shape, dtype: dtype.name if dtype.name in ("float64", "complex128") else None)),
    # Its arrays have one dimension, and are all immutable.
    "pyarrow": ("pyarrow", "pyarrow", lambda m: _maker(
        "pyarrow", m.array, immutable=True,
        lacks=lambda shape, dtype: ("arrays of more dimensions than one" if len(shape) != 1
                                    else "complex type" if dtype.kind == "c" else None))),
    "tvm_ffi": ("tvm_ffi", "apache-tvm-ffi", lambda m: _maker("tvm-ffi", m.from_dlpack)),
    "tensorflow": ("tensorflow", "tensorflow-cpu", _tensorflow),
    "paddle": ("paddle", "paddlepaddle", lambda m: _maker(
        "paddle", lambda a: m.to_tensor(a, place=m.CPUPlace()), made=lambda t: str(t.dtype).rpartition(".")[2])),
}
APART = ("tensorflow", "paddle")

#: library -> its importer, as check_consumer takes it ("module:name").
CONSUMERS = {
    "numpy": "numpy:from_dlpack",
    "torch": "torch:from_dlpack",
    "jax": "jax.dlpack:from_dlpack",
    "array_api_strict": "array_api_strict:from_dlpack",
    "mlx": "mlx.core:from_dlpack",
    "tvm_ffi": "tvm_ffi:from_dlpack",
    "tensorflow": "tests.conformance_peers:tensorflow_from_dlpack",
    "paddle": "paddle:from_dlpack",
}


def tensorflow_from_dlpack(x):
    """TensorFlow's importer takes a capsule: the one ``x.__dlpack__()``
    gives (it reads legacy capsules only), as its users call it."""
    import tensorflow as tf

    return tf.experimental.dlpack.from_dlpack(x.__dlpack__())
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


def aborts_on_steps(x, **keywords):
    """An importer that kills its process on a step (``a[::2]``), as torch
    2.13 does on a negative stride; gpu_dlpack's otherwise."""
    import os

    import gpu_dlpack

    got = gpu_dlpack.from_dlpack(x, **keywords)
    if got.ndim == 1 and got.strides[0] > got.itemsize:
        os.abort()
    return got
