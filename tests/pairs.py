"""Every ordered pair of the installed libraries, through ``convert`` and
through ``consumer.from_dlpack(wrap(x))`` (tests/test_pairs.py runs the
pairs that share a process; tests/pairs_apart.py, in an interpreter of its
own, those of TensorFlow or PaddlePaddle, which must not share one).

A case is one producer's array (every dtype the library has: bool, signed
and unsigned ints, float16/32/64, bfloat16, complex; 0-d to 8-d, empty
included; negative, zero and stepped strides where the library has them;
read-only sources; torch tensors inside a subclass with a
``__torch_function__`` of its own that refuses all but DLPack, some holding
a negative or conjugate view) handed to one consumer with ``copy`` None,
True or False. The oracle, the same for every pair:

- a result holds the producer's values bit for bit, with the producer's
  dtype;
- ``copy=False`` shares the producer's memory, ``copy=True`` never does;
- no writeable result over a read-only source's memory;
- ``convert`` that cannot exchange raises one of the layer's errors
  (``GpuDlpackError``) whose message gives a remedy, never a peer's error;
  through ``wrap`` a consumer's own refusal is its own, and a fault the
  layer cannot correct without knowing its consumer (a peer's row in
  gpu_dlpack/_peers.py) is counted as that fault, convert's path covering
  it.

Example counts: ``GPU_DLPACK_PAIR_EXAMPLES`` per pair (default 60,
derandomized, sized for the test command); ``GPU_DLPACK_PAIRS_LONG=1`` is
the long form (200 per pair, random draws), run by hand.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
import re

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import gpu_dlpack
from gpu_dlpack import _peers, _rules

from .helpers import base_tensor, dlpack_only_type
from .test_properties import values

ml_dtypes = __import__("ml_dtypes")

LONG = os.environ.get("GPU_DLPACK_PAIRS_LONG") == "1"
PER_PAIR = int(os.environ.get("GPU_DLPACK_PAIR_EXAMPLES", "200" if LONG else "60"))


def pair_settings():
    return settings(
        max_examples=PER_PAIR, deadline=None, derandomize=not LONG, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.function_scoped_fixture],
    )


ALL = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
       "float16", "float32", "float64", "bfloat16", "complex64", "complex128"]
_NARROW = [n for n in ALL if n not in ("int64", "uint64", "float64", "complex128")]

#: The dtypes each library's arrays have (JAX without x64 has no 64-bit ones).
DTYPES = {
    "numpy": ALL, "dask": ALL, "torch": ALL, "torch_subclass": ALL, "jax_x64": ALL, "tensorflow": ALL,
    "jax": _NARROW,
    "array_api_strict": [n for n in ALL if n not in ("float16", "bfloat16")],
    "paddle": ALL,
    "mlx": [n for n in ALL if n not in ("float64", "complex128")],
    "pyarrow": [n for n in ALL if n not in ("bool", "bfloat16", "complex64", "complex128")],
}
#: Which layouts a producer's arrays can have: "any" (negative, zero and
#: stepped strides), "positive" (torch: no negative strides), "compact".
LAYOUTS = {"numpy": "any", "dask": "any", "array_api_strict": "any", "torch": "positive", "torch_subclass": "positive"}
IMPORTS = {"torch_subclass": "torch", "jax_x64": "jax", "tensorflow": "tensorflow", "paddle": "paddle",
           "mlx": "mlx.core", "array_api_strict": "array_api_strict", "dask": "dask.array", "pyarrow": "pyarrow"}
PRODUCERS = ["numpy", "torch", "torch_subclass", "jax", "jax_x64", "tensorflow", "paddle", "mlx", "array_api_strict",
             "pyarrow", "dask"]
CONSUMERS = ["numpy", "torch", "jax", "jax_x64", "tensorflow", "paddle", "mlx", "array_api_strict"]
APART = ("tensorflow", "paddle")


def installed(lib) -> bool:
    return importlib.util.find_spec(IMPORTS.get(lib, lib).split(".")[0]) is not None


def pairs(apart=None):
    """The ordered pairs of installed libraries: with ``apart`` None those
    of neither TensorFlow nor PaddlePaddle, else those of ``apart`` with
    every other library but the other one kept apart."""
    out = []
    for p in PRODUCERS:
        for c in CONSUMERS:
            if not (installed(p) and installed(c)):
                continue
            kept = {p, c} & set(APART)
            if (apart is None and not kept) or (apart is not None and kept == {apart}):
                out.append((p, c))
    return out


def _module(lib):
    return importlib.import_module(IMPORTS.get(lib, lib))


@contextlib.contextmanager
def x64(lib):
    """JAX with x64 for ``jax_x64``, as the library is otherwise."""
    if lib != "jax_x64":
        yield
        return
    import jax

    enable = getattr(jax, "enable_x64", None)
    if enable is None:  # before JAX 0.8
        from jax.experimental import enable_x64 as enable
    with enable(True):
        yield


@st.composite
def layouts(draw, kind):
    """(shape, steps, permutation, readonly) of a view of a base array."""
    ndim = draw(st.integers(0, 8 if kind != "compact" else 6))
    side = 3 if ndim <= 4 else 2
    shape = draw(st.lists(st.integers(1, side), min_size=ndim, max_size=ndim))
    if ndim and draw(st.sampled_from([False] * 4 + [True])):
        shape[draw(st.integers(0, ndim - 1))] = 0
    choices = {"any": [1, 1, 2, -1, -2, 0], "positive": [1, 1, 2, 0], "compact": [1]}[kind]
    steps = draw(st.lists(st.sampled_from(choices), min_size=ndim, max_size=ndim))
    perm = draw(st.permutations(range(ndim))) if kind != "compact" else tuple(range(ndim))
    readonly = draw(st.booleans())
    return tuple(shape), tuple(steps), tuple(perm), readonly


def np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _numpy_view(rng, name, layout):
    shape, steps, perm, readonly = layout
    base_shape = [n * abs(s) if s else 1 for n, s in zip(shape, steps)]
    base = values(rng, np_dtype(name), base_shape)
    view = base[tuple(slice(None, None, s) if s else slice(None) for s in steps) + (Ellipsis,)]
    if 0 in steps:
        view = np.broadcast_to(view, shape)
    view = view.transpose(perm)
    if readonly and view.flags.writeable:
        view = view.view()
        view.flags.writeable = False
    return view


def produce(lib, rng, name, layout):
    """(array of ``lib``, whether its memory is read-only, the NumPy array
    a dask array reads), or None when the library cannot hold these values
    as they are."""
    kind = LAYOUTS.get(lib, "compact")
    shape, steps, perm, readonly = layout
    if kind == "positive":
        steps = tuple(abs(s) for s in steps)
    x = _numpy_view(rng, name, (shape, steps, perm, readonly and lib in ("numpy", "array_api_strict", "dask")))
    if lib == "numpy":
        return x, not x.flags.writeable, None
    if lib == "array_api_strict":
        xp = _module(lib)
        return xp.asarray(x), not x.flags.writeable, None
    if lib == "dask":
        da = _module(lib)
        chunks = (max(1, (x.shape[0] + 1) // 2),) + x.shape[1:] if x.ndim else ()
        return da.from_array(x, chunks=chunks), not x.flags.writeable, x
    c = np.ascontiguousarray(x)
    if lib == "torch_subclass":
        return _in_subclass(rng, produce("torch", rng, name, layout)[0]), False, None
    if lib == "torch":
        torch = _module(lib)
        base_shape = [n * s if s else 1 for n, s in zip(shape, steps)]
        b = values(rng, np_dtype(name), base_shape)
        t = torch.from_numpy(b.view("u2") if name == "bfloat16" else b)
        if name == "bfloat16":
            t = t.view(torch.bfloat16)
        t = t[tuple(slice(None, None, s) if s else slice(None) for s in steps)]
        if 0 in steps:
            t = t.expand(*shape)
        return (t.permute(*perm) if perm else t), False, None
    if lib in ("jax", "jax_x64"):
        import jax.numpy as jnp

        with x64(lib):
            return jnp.asarray(c), True, None
    if lib == "tensorflow":
        tf = _module(lib)
        return tf.constant(c), True, None
    if lib == "paddle":
        paddle = _module(lib)
        if name == "bfloat16":
            return paddle.to_tensor(c.view("u2")).view(paddle.bfloat16), False, None
        if name in ("uint16", "uint32", "uint64"):  # to_tensor refuses these, or makes bfloat16 of uint16
            return paddle.from_dlpack(c.copy()), False, None
        return paddle.to_tensor(c), False, None
    if lib == "mlx":
        mx = _module(lib)
        if name == "bfloat16":
            return mx.array(c.view("u2")).view(mx.bfloat16), False, None
        return mx.array(c, dtype=getattr(mx, "bool_" if name == "bool" else name)), False, None
    if lib == "pyarrow":
        pa = _module(lib)
        return pa.array(c.reshape(-1)), True, None  # 1-d only, immutable
    raise AssertionError(lib)


def _in_subclass(rng, t):
    """``t`` inside a subclass whose __torch_function__ refuses all but
    DLPack, as torch 2.14's ReadOnlyTensorWrapper does: as it is, or (two
    draws of ``rng`` in three) as a view of the same layout with the
    negative bit (signed and floating types) or the conjugate bit (complex
    types) set, whose values are not its memory's."""
    torch = _module("torch")
    draw = int(rng.integers(3))
    if draw == 2 and t.is_complex():
        t = t.conj()
    elif draw and (t.is_floating_point() or t.is_complex() or t.dtype in (
            torch.int8, torch.int16, torch.int32, torch.int64)):
        t = torch._neg_view(t)
    return _subclass()(t)


@functools.cache
def _subclass():
    # The tests' own, whatever torch's version: its export is writeable, as
    # a tensor's (torch 2.14's wrapper is read-only: tests/test_convert.py).
    return dlpack_only_type(_module("torch"))


def readable(lib, a):
    """``(lib, a)``, where the test reads a subclassed tensor as the plain
    one over its memory (its subclass refuses every read but DLPack's)."""
    if lib == "torch_subclass":
        return "torch", base_tensor(_module("torch"), a)
    return lib, a


def dtype_of(lib, a) -> str:
    """The canonical name of an array's dtype."""
    lib, a = readable(lib, a)
    if lib in ("numpy", "jax", "jax_x64"):
        return np.dtype(a.dtype).name
    if lib == "array_api_strict":
        return a._array.dtype.name
    if lib == "tensorflow":
        return a.dtype.name
    if lib == "pyarrow":
        return a.to_numpy(zero_copy_only=False).dtype.name  # (to_pandas_dtype needs pandas before pyarrow 26)
    if lib == "dask":
        return a.dtype.name
    if lib == "paddle":  # str(paddle.uint16) says bfloat16: compare the dtypes themselves
        paddle = _module(lib)
        return next((n for n in ALL if getattr(paddle, n, None) == a.dtype), str(a.dtype))
    return str(a.dtype).rsplit(".", 1)[-1]  # torch.float32, mlx.core.float32


def host_bytes(lib, a) -> bytes:
    """An array's values, in C order, as bytes."""
    lib, a = readable(lib, a)
    if lib == "torch":
        torch = _module("torch")
        if not a.numel():
            return b""
        fresh = torch.empty(a.numel(), dtype=a.dtype)
        fresh.copy_(a.detach().reshape(-1))
        return fresh.view(torch.uint8).numpy().tobytes()
    if lib == "mlx":
        mx = _module("mlx")
        return np.array(a.view(mx.uint16) if a.dtype == mx.bfloat16 else a).tobytes()
    if lib == "paddle":
        paddle = _module("paddle")
        if a.dtype == paddle.bfloat16:
            return np.ascontiguousarray(a.view(paddle.uint16).numpy()).tobytes()
        return np.ascontiguousarray(a.numpy()).tobytes()
    if lib == "tensorflow":
        return np.ascontiguousarray(a.numpy()).tobytes()
    if lib == "array_api_strict":
        return np.ascontiguousarray(a._array).tobytes()
    if lib == "dask":
        return np.ascontiguousarray(a.compute()).tobytes()
    if lib == "pyarrow":
        return np.ascontiguousarray(a.to_numpy(zero_copy_only=False)).tobytes()
    return np.ascontiguousarray(np.asarray(a)).tobytes()


def shape_of(a):
    if not hasattr(a, "shape"):
        return (len(a),)  # a pyarrow array
    return tuple(int(n) for n in a.shape)


def writeable(lib, a) -> bool:
    """Whether the library lets its array ``a`` be written."""
    if lib == "numpy":
        return bool(a.flags.writeable)
    if lib == "array_api_strict":
        return bool(a._array.flags.writeable)
    return lib in ("torch", "paddle", "mlx")


def span(lib, a, numpy_source=None):
    """[first, last] byte address of an array's memory, or None when empty
    or unreadable."""
    if lib == "dask":
        a, lib = numpy_source, "numpy"
    v = _memory(lib, a)
    if v is None or not all(v[1]):
        return None
    ptr, shape, strides, item = v
    lo = ptr + sum(s * (n - 1) * item for s, n in zip(strides, shape) if s < 0)
    hi = ptr + sum(s * (n - 1) * item for s, n in zip(strides, shape) if s > 0) + item - 1
    return lo, hi


def start(lib, a):
    v = _memory(lib, a)
    return v[0] if v is not None and all(v[1]) else None


def _memory(lib, a):
    """(address, shape, strides in elements, item size) of an array's own
    memory, or None when unreadable. A subclassed tensor's is read through
    torch: ``gpu_dlpack.view`` describes the copy that resolves its negative
    or conjugate bit, freed at once."""
    if lib == "torch_subclass":
        t = base_tensor(_module("torch"), a)
        return t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.element_size()
    try:
        v = gpu_dlpack.view(a)
    except Exception:
        return None
    item = v.dtype.itemsize if v.dtype is not None else (v.dl_dtype[1] // 8)
    strides = v.strides if v.strides is not None else tuple(
        int(np.prod(v.shape[i + 1:], dtype=np.int64)) for i in range(len(v.shape)))
    return v.ptr, tuple(v.shape), tuple(strides), item


def convert_target(lib):
    return {"jax_x64": "jax", "mlx": "mlx.core"}.get(lib, lib)


def wrap_consume(lib, w, copy):
    """``consumer.from_dlpack(wrap(x), copy=copy)`` as each library spells it."""
    if lib == "tensorflow":
        return _module("tensorflow").experimental.dlpack.from_dlpack(w)
    if lib == "paddle":
        return _module("paddle").from_dlpack(w, copy=copy)
    if lib in ("jax", "jax_x64"):
        import jax.numpy as jnp

        return jnp.from_dlpack(w, copy=copy)
    return _module(lib).from_dlpack(w, copy=copy)


REMEDY = re.compile(r"(?i)\b(remedy|pass|use|ask|call|convert|install|set|give|make|upgrade|"
                    r"request|copy=|on_readonly|cast|astype|write)\b")


def _active(lib):
    peer = _peers.by_name("jax" if lib == "jax_x64" else lib)
    if peer is None:
        return frozenset()
    module = _module(peer.module)
    version = getattr(module, "__version__", None)
    if version is None:
        import importlib.metadata

        version = importlib.metadata.version(peer.module)
    with x64(lib):
        return _peers.active_faults(peer, version)


def paddle_import(producer, name) -> bool:
    """Whether ``produce`` made this Paddle tensor by ``paddle.from_dlpack``
    (the unsigned types ``to_tensor`` refuses): Paddle 3.3 deadlocks freeing
    a tensor it imported from such a tensor, once the source is freed first
    (the peers' row ``nested-import-deadlock``)."""
    return producer == "paddle" and name in ("uint16", "uint32", "uint64")


def check(cases, producer, consumer, path, name, layout, seed, copy):
    """One case: the oracle of the module docstring."""
    label = f"{producer} -> {consumer}"
    made = produce(producer, np.random.default_rng(seed), name, layout)
    if made is None or dtype_of(producer, made[0]) != name:
        cases[f"{label}: not a {name} array of {producer}"] += 1
        return
    src, readonly, numpy_source = made
    want, want_shape = host_bytes(producer, src), shape_of(readable(producer, src)[1])
    region = span(producer, src, numpy_source)
    first = start(producer if numpy_source is None else "numpy", src if numpy_source is None else numpy_source)
    try:
        with x64(consumer):
            if path == "convert":
                y = gpu_dlpack.convert(src, convert_target(consumer), copy=copy)
            else:
                w = gpu_dlpack.wrap(src)
                faults = _active(consumer)
                negative = any(s < 0 for s in (gpu_dlpack.view(src).strides or ()))
                if consumer == "paddle" and paddle_import(producer, name):
                    # Paddle would deadlock freeing its import of its own import:
                    # convert hands a Paddle tensor over without an exchange.
                    cases[f"{label} wrap: a re-import Paddle cannot free left to convert (peer fault)"] += 1
                    return
                if negative and "negative-strides" in faults:
                    # torch 2.12-2.13 abort the process: convert copies these.
                    cases[f"{label} wrap: negative strides left to convert (peer fault)"] += 1
                    return
                y = wrap_consume(consumer, w, copy)
    except gpu_dlpack.GpuDlpackError as exc:
        assert REMEDY.search(str(exc)), f"{label} {path}: no remedy in {exc!r}"
        cases[f"{label} {path}: refused by the layer ({type(exc).__name__})"] += 1
        return
    except Exception as exc:
        if path == "convert" and name not in DTYPES[consumer]:
            # A dtype the consumer's library does not have: its own refusal,
            # passed on (the layer has no table of every library's dtypes).
            cases[f"{label} convert: {name} refused by the consumer, which lacks it"] += 1
            return
        if path == "convert":
            raise AssertionError(f"{label} convert raised a peer's error, not the layer's: {exc!r}") from exc
        cases[f"{label} wrap: refused by the consumer ({type(exc).__name__})"] += 1
        return
    got_dtype = dtype_of(consumer, y)
    if path == "wrap":
        faults = _active(consumer)
        if got_dtype != name and ({"narrows-64-bit", "narrows-float64"} & faults):
            cases[f"{label} wrap: narrowed by the consumer (peer fault; convert refuses)"] += 1
            return
    assert got_dtype == name, f"{label} {path}: dtype {got_dtype} for {name}"
    assert shape_of(y) == want_shape, f"{label} {path}: shape {shape_of(y)} for {want_shape}"
    if path == "wrap" and host_bytes(consumer, y) != want and "c-order-only" in _active(consumer):
        # JAX before 0.8 reads a layout other than C order in place as if C
        # order where the data is aligned (it copies unaligned data right):
        # wrap does not know its consumer; convert makes a C-order copy.
        v = gpu_dlpack.view(src)
        assert not _rules.c_order(v.shape, v.strides), f"{label} wrap: values differ, in C order"
        cases[f"{label} wrap: read as C order by the consumer (peer fault; convert copies)"] += 1
        return
    assert host_bytes(consumer, y) == want, f"{label} {path}: values differ"
    at = start(consumer, y)
    if at is not None and region is not None:
        inside = region[0] <= at <= region[1]
        faults = _active(consumer) if path == "wrap" else frozenset()
        if copy is True and inside:
            if "copy-shares" in faults:
                cases[f"{label} wrap: copy=True shared by the consumer (peer fault; convert copies)"] += 1
                return
            raise AssertionError(f"{label} {path}: copy=True shares the source")
        if copy is False and first is not None and not inside and producer != "dask":
            # (a dask array has no memory of its own: copy=False applies to
            # the array it computes, or to each chunk)
            if "unaligned-copies" in faults:
                cases[f"{label} wrap: copy=False copied by the consumer (peer fault; convert refuses)"] += 1
                return
            raise AssertionError(f"{label} {path}: copy=False copied")
        if inside and readonly and writeable(consumer, y):
            if path == "wrap" and "read-only-ignored" in _active(consumer):
                cases[f"{label} wrap: read-only ignored by the consumer (peer fault; convert copies)"] += 1
                return
            raise AssertionError(f"{label} {path}: a writeable view of read-only data")
    cases[f"{label} {path}: exchanged"] += 1
