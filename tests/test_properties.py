"""Property tests: random arrays through every real peer, in both directions.

Arrays are 0-d to 8-d (zero-size included), in C or Fortran order, with
negative strides, steps, broadcast (zero) strides and transposes, of every
dtype each peer has (NumPy's own, and bfloat16, the float8 family and the
sub-byte types through ml_dtypes). Each is exchanged with every capsule kind
(``max_version`` None, (0, 8), (1, 0), (1, 5)) and every ``copy`` and
``dl_device`` choice. The rules checked, from SPEC §3-§4:

- the values survive bit for bit;
- the data pointer is the source's exactly when no copy was asked or needed;
- a versioned capsule says DLPack 1.2 and carries READ_ONLY for read-only
  data that was not copied, IS_COPIED for a copy, IS_SUBBYTE_TYPE_PADDED for
  a sub-byte dtype; an import is writeable exactly when the data may be
  written;
- what cannot be exchanged is refused with the standard's exception (and
  a peer's own refusal is its documented one), never a crash.

The expected outcome of each case is written out here from the rules, not
computed by gpu_dlpack. Example counts are moderate (``GPU_DLPACK_EXAMPLES``
scales them); the counts generated are printed when the module ends.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpu_dlpack
from gpu_dlpack import FLAG_IS_COPIED, FLAG_IS_SUBBYTE_TYPE_PADDED, FLAG_READ_ONLY

from .figures import counter_fixture

ml_dtypes = pytest.importorskip("ml_dtypes")  # the property tests cover its dtypes throughout

cases = counter_fixture("property cases generated")

SCALE = float(os.environ.get("GPU_DLPACK_EXAMPLES", "1"))


def examples(n):
    return settings(
        max_examples=max(1, int(n * SCALE)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# -- the dtype table, written out from dlpack.h -----------------------------

NUMPY_DTYPES = [np.dtype(t) for t in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
)]
_KIND_CODE = {"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}
ML_CODES = {
    "bfloat16": (4, 16), "float8_e3m4": (7, 8), "float8_e4m3": (8, 8),
    "float8_e4m3b11fnuz": (9, 8), "float8_e4m3fn": (10, 8), "float8_e4m3fnuz": (11, 8),
    "float8_e5m2": (12, 8), "float8_e5m2fnuz": (13, 8), "float8_e8m0fnu": (14, 8),
    "float6_e2m3fn": (15, 6), "float6_e3m2fn": (16, 6), "float4_e2m1fn": (17, 4),
    "int4": (0, 4), "uint4": (1, 4), "int2": (0, 2), "uint2": (1, 2),
}
ML_DTYPES = [np.dtype(getattr(ml_dtypes, name)) for name in ML_CODES]
ALL_DTYPES = NUMPY_DTYPES + ML_DTYPES
SUB_BYTE_INTS = {"int4", "uint4", "int2", "uint2"}

MAX_VERSIONS = [None, (0, 8), (1, 0), (1, 5)]
COPIES = [None, True, False]


def code_bits(dtype):
    if getattr(dtype.type, "__module__", "").startswith("ml_dtypes"):
        return ML_CODES[dtype.name]
    return _KIND_CODE[dtype.kind], dtype.itemsize * 8


def needed_version(code, bits):
    """The DLPack version that first describes a dtype (dlpack.h history)."""
    if bits < 8 or code >= 7:
        return (1, 1)  # float8/6/4 codes and IS_SUBBYTE_TYPE_PADDED
    return {6: (0, 8), 4: (0, 3), 5: (0, 4)}.get(code, (0, 0))


def export_refused(code, bits, readonly, max_version, copy):
    """Whether the rules refuse this export (BufferError), and why."""
    versioned = max_version is not None and max_version[0] >= 1
    # Within major 1 minor versions are compatible (a consumer checks dtype
    # codes itself); only a major-0 consumer is refused what it predates.
    if max_version is not None and max_version[0] == 0 and max_version < needed_version(code, bits):
        return "the consumer's version predates the dtype"
    if bits < 8 and (not versioned or max_version < (1, 1)):
        return "only a DLPack 1.1 consumer knows that sub-byte data is padded"
    if readonly and not versioned and copy is not True:
        return "a legacy capsule cannot say read-only"
    return None


def export_or_refuse(cases, label, x, code, bits, readonly, shape, max_version, copy, dl_device=None):
    """Export ``x`` as asked, or check that the rules refuse it. Returns the
    capsule and its record, with the header fields every export must have
    already checked; None when refused."""
    if export_refused(code, bits, readonly, max_version, copy):
        cases[f"{label} export: refused"] += 1
        with pytest.raises(BufferError):
            gpu_dlpack.export(x, max_version=max_version, copy=copy, dl_device=dl_device)
        return None
    cases[f"{label} export: exchanged"] += 1
    cap = gpu_dlpack.export(x, max_version=max_version, copy=copy, dl_device=dl_device)
    info = gpu_dlpack.inspect(cap)
    versioned = max_version is not None and max_version[0] >= 1
    assert info.versioned is versioned
    assert info.version == (gpu_dlpack.DLPACK_VERSION if versioned else None)
    assert info.dl_dtype == (code, bits, 1)
    assert info.shape == tuple(shape)
    return cap, info


# -- arrays ------------------------------------------------------------------

def values(rng, dtype, shape):
    n = int(np.prod(shape, dtype=np.int64))
    if dtype.kind == "b":
        v = rng.integers(0, 2, n).astype(bool)
    elif dtype.kind in "iu" and dtype in NUMPY_DTYPES:
        info = np.iinfo(dtype)
        v = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    elif dtype.name in SUB_BYTE_INTS:
        info = ml_dtypes.iinfo(dtype)
        v = rng.integers(int(info.min), int(info.max) + 1, n).astype(dtype)
    elif dtype.kind == "c":
        v = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    else:
        f = rng.standard_normal(n) * 8
        special = rng.random(n) < 0.1
        f[special] = rng.choice([np.nan, np.inf, -np.inf, -0.0], special.sum())
        with np.errstate(all="ignore"):
            v = f.astype(dtype)
    return v.reshape(shape)


@st.composite
def layouts(draw, max_dims=8, negative=True, broadcast=True):
    """(shape, steps, permutation, order, readonly): how to view a base array."""
    ndim = draw(st.integers(0, max_dims))
    side = 3 if ndim <= 4 else 2
    shape = draw(st.lists(st.integers(1, side), min_size=ndim, max_size=ndim))
    if ndim and draw(st.sampled_from([False] * 5 + [True])):
        shape[draw(st.integers(0, ndim - 1))] = 0
    step_choices = [1, 1, 1, 2] + ([-1, -2] if negative else []) + ([0] if broadcast else [])
    steps = draw(st.lists(st.sampled_from(step_choices), min_size=ndim, max_size=ndim))
    perm = draw(st.permutations(range(ndim)))
    order = draw(st.sampled_from("CF"))
    readonly = draw(st.sampled_from([False, False, True]))
    return tuple(shape), tuple(steps), tuple(perm), order, readonly


def build(rng, dtype, layout):
    shape, steps, perm, order, readonly = layout
    base_shape = [n * abs(s) if s else 1 for n, s in zip(shape, steps)]
    base = np.asarray(values(rng, dtype, base_shape), order=order)
    view = base[tuple(slice(None, None, s) if s else slice(None) for s in steps) + (Ellipsis,)]
    if 0 in steps:
        view = np.broadcast_to(view, shape)  # zero strides, read-only
    view = view.transpose(perm)
    if readonly and view.flags.writeable:
        view = view.view()
        view.flags.writeable = False
    return view


def _transposition(a) -> bool:
    """Whether ``a``'s layout is a transposition of a dense C-order buffer,
    the strides of its axes of length 1 aside (no element is reached
    through them: JAX 0.6.2 reads (2, 4, -4, 1) of shape (2, 2, 1, 2) in
    place as C order too, wrong where the data is aligned)."""
    a = a.squeeze()
    order = sorted(range(a.ndim), key=lambda i: -a.strides[i])
    return all(st > 0 for st in a.strides) and a.transpose(order).flags.c_contiguous


def bits_of(a):
    """The bytes of a NumPy array in C order (values compared bit for bit)."""
    return np.ascontiguousarray(a).tobytes()


def same_values(got, want):
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    assert bits_of(got) == bits_of(want)


def elem_strides(a):
    return tuple(s // a.itemsize for s in a.strides)


dtypes = st.sampled_from(NUMPY_DTYPES * 2 + ML_DTYPES)  # NumPy's own twice as often
seeds = st.integers(0, 2**32 - 1)


# -- NumPy -> gpu_dlpack.export -> inspect -> gpu_dlpack.from_dlpack ---------

@examples(500)
@given(
    dtype=dtypes, layout=layouts(), seed=seeds, max_version=st.sampled_from(MAX_VERSIONS),
    copy=st.sampled_from(COPIES), dl_device=st.sampled_from([None, (1, 0)]),
    import_copy=st.sampled_from(COPIES),
)
def test_numpy_export_then_import_keeps_values_pointers_and_flags(
    cases, dtype, layout, seed, max_version, copy, dl_device, import_copy
):
    x = build(np.random.default_rng(seed), dtype, layout)
    code, bits = code_bits(dtype)
    readonly = not x.flags.writeable
    done = export_or_refuse(cases, "numpy", x, code, bits, readonly, x.shape, max_version, copy, dl_device)
    if done is None:
        return
    cap, info = done
    versioned = info.versioned
    assert info.device == gpu_dlpack.Device("cpu")
    copied = copy is True
    if versioned:
        assert bool(info.flags & FLAG_READ_ONLY) is (readonly and not copied)
        assert bool(info.flags & FLAG_IS_COPIED) is copied
        assert bool(info.flags & FLAG_IS_SUBBYTE_TYPE_PADDED) is (bits < 8)
    if x.size:
        assert (info.data + info.byte_offset == x.ctypes.data) is not copied
        if not copied and x.ndim:  # 0-d tensors need no strides
            if info.strides is None:  # compact row-major, left out only where DLPack allows it
                assert not versioned and x.flags.c_contiguous
            else:
                assert info.strides == elem_strides(x)

    arr = gpu_dlpack.from_dlpack(cap, copy=import_copy)
    same_values(arr, x)
    if x.size:
        assert (arr.ctypes.data == x.ctypes.data) is (not copied and import_copy is not True)
    if import_copy is True:
        assert arr.flags.writeable
    elif not versioned:
        assert not arr.flags.writeable  # a legacy capsule cannot say it may be written
    else:
        assert arr.flags.writeable is not bool(info.flags & FLAG_READ_ONLY)
    with pytest.raises(gpu_dlpack.ConsumedCapsuleError):
        gpu_dlpack.from_dlpack(cap)


# -- NumPy -> wrap() -> each consumer -------------------------------------------

def _numpy_consumer(w, copy):
    return np.from_dlpack(w, copy=copy)


def _torch_consumer(w, copy):
    import torch

    return torch.from_dlpack(w, copy=copy)


def _jax_consumer(w, copy):
    import jax.numpy as jnp

    return jnp.from_dlpack(w, copy=copy)


def _xp_consumer(w, copy):
    import array_api_strict as xp

    return xp.from_dlpack(w, copy=copy)


def _gpu_dlpack_consumer(w, copy):
    return gpu_dlpack.from_dlpack(w, copy=copy)


CONSUMERS = {
    "numpy": _numpy_consumer,
    "torch": _torch_consumer,
    "jax": _jax_consumer,
    "array_api_strict": _xp_consumer,
    "gpu_dlpack": _gpu_dlpack_consumer,
}
# The consumers installed here (every peer is optional; NumPy and gpu_dlpack
# are always there): a random case never picks one that is missing.
INSTALLED_CONSUMERS = [c for c in CONSUMERS if c in ("numpy", "gpu_dlpack") or importlib.util.find_spec(c)]
# What each consumer asks for (SPEC §5): the capsule kind decides the rules.
def _jax_asks():
    """JAX asks for legacy capsules before 0.12, and for DLPack 1.3 from 0.12."""
    if importlib.util.find_spec("jax") is None:
        return None
    from gpu_dlpack import _peers

    return None if _peers.release(importlib.metadata.version("jax")) < (0, 12) else (1, 3)


#: Whether the installed JAX reads a transposed array as C order (before 0.8).
JAX_C_ORDER_ONLY = importlib.util.find_spec("jax") is not None and gpu_dlpack._peers.release(
    importlib.metadata.version("jax")) < (0, 8)

ASKS = {"numpy": (1, 0), "torch": (1, 0), "jax": _jax_asks(), "array_api_strict": (1, 0),
        "gpu_dlpack": gpu_dlpack.DLPACK_VERSION}


def _numpy_holds(dtype) -> bool:
    """Whether NumPy itself exchanges ``dtype`` through DLPack: its own types,
    and from NumPy 2.5 the ones ml_dtypes registers with it (bfloat16, float8)."""
    try:
        np.from_dlpack(np.zeros(1, dtype))
    except (BufferError, RuntimeError, TypeError):
        return False
    return True


def _jax_runtime_error() -> tuple:
    if importlib.util.find_spec("jax") is None:
        return ()
    import jax

    return (jax.errors.JaxRuntimeError,)


# Dtypes a consumer itself cannot hold, and the exceptions it then raises.
PEER_DTYPES = {
    "numpy": ({d for d in ALL_DTYPES if _numpy_holds(d)}, (BufferError, RuntimeError, TypeError)),
    # torch asks for 1.0 yet reads these codes of 1.1 (minor versions are compatible).
    "torch": (set(NUMPY_DTYPES) | {np.dtype(getattr(ml_dtypes, n)) for n in (
        "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
        "float8_e8m0fnu")}, (BufferError,)),
    # JAX 0.12, which asks for DLPack 1.3, is handed the sub-byte codes and
    # refuses them as XLA's UNIMPLEMENTED (JaxRuntimeError), no value read.
    "jax": (set(ALL_DTYPES) - {np.dtype(getattr(ml_dtypes, n)) for n in
                               ("int4", "uint4", "int2", "uint2", "float4_e2m1fn",
                                "float6_e2m3fn", "float6_e3m2fn")}, (BufferError, *_jax_runtime_error())),
    "array_api_strict": (set(NUMPY_DTYPES) - {np.dtype("float16")}, (BufferError, RuntimeError, TypeError)),
    "gpu_dlpack": (set(ALL_DTYPES), ()),
}


JAX_FLOAT4_BITS = "bits should be a multiple of 8"


def _jax_float4(cases, x, w, copy):
    """JAX 0.12 and float4_e2m1fn (older JAX asks for a version the layer
    refuses 4-bit dtypes under), as measured with 0.12.1: data aligned to
    64 bytes is imported in place (read as packed, two values a byte,
    whatever IS_SUBBYTE_TYPE_PADDED says: right for one element, wrong
    values for more, a fault of JAX's), a 0-d array anywhere; otherwise its
    alignment refusal for copy=False, else XLA's refusal of the code, by
    its strides ("bits should be a multiple of 8"), or of the layout."""
    try:
        y = _jax_consumer(w, copy)
    except Exception as exc:
        refusal = _jax_refusal(x, copy, exc) or (JAX_FLOAT4_BITS in str(exc) and "bits")
        assert refusal, exc
        cases[f"wrap -> jax: float4 refused by JAX ({refusal})"] += 1
        return
    assert y.shape == x.shape and y.dtype == x.dtype
    if x.size <= 1:
        same_values(np.asarray(y), x)
        cases["wrap -> jax: float4 exchanged"] += 1
    else:
        cases["wrap -> jax: float4 read as packed (a fault of JAX's; convert refuses)"] += 1
        with pytest.raises(gpu_dlpack.DtypeChangeError):
            gpu_dlpack.convert(x, "jax")


def _host_array(y, consumer):
    """A NumPy view of what a consumer returned, and its data pointer."""
    if consumer == "torch":
        import torch

        flat = np.frombuffer(_torch_bytes(torch, y), np.uint8)
        return flat, (y.data_ptr() if y.numel() else None)
    if consumer == "jax":
        return np.asarray(y), (y.unsafe_buffer_pointer() if y.size else None)
    if consumer == "array_api_strict":
        y = np.from_dlpack(y)  # NumPy's own zero-copy view of the strict array
    return y, (y.ctypes.data if y.size else None)


JAX_STRIDES = (
    "UNIMPLEMENTED: Only DLPack tensors with trivial (compact) striding are supported; i.e., "
    "tensors whose striding represents a transposition of the underlying buffer but not broadcasting."
)
JAX_ALIGNMENT = (
    "Specified input which requires a copy since the source data buffer is not aligned to 64 "
    "bytes.  However copy=False. Set copy=True or copy=None to perform the requested operation."
)


def _jax_compact(x):
    """JAX's layout rule: the strides are those of a dense buffer in some
    order of the axes (axes of length 1 aside); nothing broadcast, no gaps,
    no negative steps."""
    axes = sorted((s, n) for s, n in zip(x.strides, x.shape) if n != 1)
    step = x.itemsize
    for stride, n in axes:
        if stride != step:
            return False
        step *= n
    return True


def _jax_refusal(x, copy, exc, ptr=None):
    """Which documented refusal JAX raised for ``x`` (whose data is at
    ``ptr``, by default NumPy's pointer), or None when ``exc`` is not one of
    them or does not apply to ``x``."""
    text = str(exc)
    if isinstance(exc, RuntimeError) and text.startswith(JAX_STRIDES):
        return None if _jax_compact(x) else "strides"
    if type(exc) is ValueError and text == JAX_ALIGNMENT:
        ptr = x.ctypes.data if ptr is None else ptr
        return "alignment" if copy is False and ptr % 64 else None
    return None


@examples(600)
@given(
    dtype=dtypes, layout=layouts(), seed=seeds, consumer=st.sampled_from(INSTALLED_CONSUMERS),
    copy=st.sampled_from(COPIES), wrap_readonly=st.booleans(),
)
def test_numpy_through_wrap_reaches_each_consumer_intact(
    cases, dtype, layout, seed, consumer, copy, wrap_readonly
):
    x = build(np.random.default_rng(seed), dtype, layout)
    if consumer == "torch" and any(s < 0 for s in x.strides):
        # torch 2.13 aborts the process (an uncaught c10::Error) on negative
        # strides from any producer, NumPy's own included.
        cases["wrap -> torch: negative strides left out"] += 1
        return
    code, bits = code_bits(dtype)
    readonly = wrap_readonly or not x.flags.writeable
    peer_refuses = PEER_DTYPES[consumer][1]
    w = gpu_dlpack.wrap(x, readonly=wrap_readonly)
    copy_asked = copy if consumer != "jax" else None  # JAX never forwards copy
    refused = export_refused(code, bits, readonly, ASKS[consumer], copy_asked)
    compact = x.flags.c_contiguous or x.size <= 1
    if refused:
        cases[f"wrap -> {consumer}: refused by the rules"] += 1
        with pytest.raises(BufferError):
            CONSUMERS[consumer](w, copy)
        return
    if consumer == "jax" and x.dtype.name == "float4_e2m1fn":
        _jax_float4(cases, x, w, copy)
        return
    if x.dtype not in PEER_DTYPES[consumer][0]:
        cases[f"wrap -> {consumer}: dtype refused by the peer"] += 1
        with pytest.raises(peer_refuses):
            CONSUMERS[consumer](w, copy)
        return
    if consumer == "jax" and JAX_C_ORDER_ONLY and not compact and _transposition(x):
        # JAX before 0.8 reads a transposed array in place as C order (the
        # values in the wrong places): a consumer's fault that wrap, which
        # does not know its consumer, cannot correct; convert does.
        cases["wrap -> jax: c-order-only, through convert instead"] += 1
        y = gpu_dlpack.convert(x, "jax")
        same_values(np.asarray(y), x)
        return
    try:
        y = CONSUMERS[consumer](w, copy)
    except Exception as exc:
        # JAX imports only compact strides, and without a copy cannot
        # realign what XLA wants aligned: its two documented refusals, each
        # only where it applies.
        if consumer == "jax":
            refusal = _jax_refusal(x, copy, exc)
            if refusal:
                cases[f"wrap -> jax: refused by JAX ({refusal})"] += 1
                return
        raise
    cases[f"wrap -> {consumer}: exchanged"] += 1
    host, ptr = _host_array(y, consumer)
    if consumer == "torch":
        assert tuple(y.shape) == x.shape
        assert host.tobytes() == bits_of(x)
    else:
        same_values(host, x)
    if not x.size:
        return
    if consumer == "jax":
        if copy is not True and compact and x.ctypes.data % 64 == 0:
            assert ptr == x.ctypes.data
        return
    assert (ptr == x.ctypes.data) is (copy is not True)
    if consumer in ("numpy", "gpu_dlpack"):
        assert y.flags.writeable is (copy is True or not readonly)


# -- other peers' arrays -> wrap() -> each consumer ------------------------------------

PEER_DTYPE_NAMES = ["bool", "int8", "int32", "int64", "uint8", "float16", "float32", "float64",
                    "complex64", "complex128", "bfloat16", "float8_e4m3fn", "float8_e5m2"]


def _np_dtype(name):
    return np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else np.dtype(name)


@examples(300)
@given(
    source=st.sampled_from(["torch", "jax", "array_api_strict"]), name=st.sampled_from(PEER_DTYPE_NAMES),
    layout=layouts(max_dims=5, negative=False, broadcast=False), seed=seeds,
    consumer=st.sampled_from(list(CONSUMERS)), copy=st.sampled_from(COPIES),
)
def test_other_peers_through_wrap_reach_each_consumer_intact(
    cases, torch, jax, xp_strict, source, name, layout, seed, consumer, copy
):
    dtype = _np_dtype(name)
    if source == "array_api_strict" and dtype not in XP_DTYPES:
        return
    x = np.ascontiguousarray(build(np.random.default_rng(seed), dtype, layout))
    if source == "torch":
        exotic = dtype not in NUMPY_DTYPES  # bfloat16, float8: through their bits
        src = torch.from_numpy(x.copy().view(f"u{dtype.itemsize}") if exotic else x.copy())
        if exotic:
            src = src.view(getattr(torch, name))
        ptr, readonly = src.data_ptr(), False
    elif source == "jax":
        src = jax.numpy.asarray(x)
        ptr, readonly = src.unsafe_buffer_pointer(), True  # immutable: read-only data (rule 5)
    else:
        src = xp_strict.asarray(x)
        ptr, readonly = np.from_dlpack(src).ctypes.data, not x.flags.writeable
    code, bits = code_bits(dtype)
    asked = ASKS[consumer]
    copy_asked = copy if consumer != "jax" else None
    versioned = asked is not None and asked[0] >= 1
    # A legacy capsule of data whose producer cannot say read-only passes as it came.
    refused = export_refused(code, bits, bool(readonly) if versioned else readonly is True, asked, copy_asked)
    held, peer_refuses = PEER_DTYPES[consumer]
    w = gpu_dlpack.wrap(src)
    if refused:
        cases[f"{source} -> wrap -> {consumer}: refused by the rules"] += 1
        with pytest.raises(BufferError):
            CONSUMERS[consumer](w, copy)
        return
    if dtype not in held:
        cases[f"{source} -> wrap -> {consumer}: dtype refused by the peer"] += 1
        with pytest.raises(peer_refuses):
            CONSUMERS[consumer](w, copy)
        return
    try:
        y = CONSUMERS[consumer](w, copy)
    except Exception as exc:
        # JAX wants aligned data to share it.
        if consumer == "jax" and _jax_refusal(x, copy, exc, ptr) == "alignment":
            cases[f"{source} -> wrap -> jax: copy=False refused by JAX"] += 1
            return
        raise
    cases[f"{source} -> wrap -> {consumer}: exchanged"] += 1
    host, got = _host_array(y, consumer)
    if consumer == "torch":
        assert tuple(y.shape) == x.shape and host.tobytes() == bits_of(x)
    else:
        same_values(host, x)
    if not x.size or consumer == "jax":
        return
    assert (got == ptr) is (copy is not True)
    if consumer in ("numpy", "gpu_dlpack") and copy is not True:
        # JAX data arrives READ_ONLY in a versioned capsule; torch's is writeable.
        assert y.flags.writeable is (source == "torch" or (source == "array_api_strict" and not readonly))


# -- torch -> gpu_dlpack ----------------------------------------------------------

def _torch_dtypes():
    import torch

    table = {
        torch.bool: (6, 8), torch.uint8: (1, 8), torch.int8: (0, 8), torch.int16: (0, 16),
        torch.int32: (0, 32), torch.int64: (0, 64), torch.uint16: (1, 16),
        torch.uint32: (1, 32), torch.uint64: (1, 64), torch.float16: (2, 16),
        torch.bfloat16: (4, 16), torch.float32: (2, 32), torch.float64: (2, 64),
        torch.complex64: (5, 64), torch.complex128: (5, 128),
        torch.float8_e4m3fn: (10, 8), torch.float8_e5m2: (12, 8),
        torch.float8_e4m3fnuz: (11, 8), torch.float8_e5m2fnuz: (13, 8),
    }
    if hasattr(torch, "float8_e8m0fnu"):
        table[torch.float8_e8m0fnu] = (14, 8)
    return table


TORCH_DTYPE_NAMES = [
    "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
]


def _torch_tensor(torch, rng, name, layout):
    shape, steps, perm, _order, _ro = layout
    dtype = getattr(torch, name, None)
    if dtype is None or dtype not in _torch_dtypes():
        return None
    base_shape = [n * abs(s) if s else 1 for n, s in zip(shape, steps)]
    if name in ("bool",) or name.startswith(("int", "uint")):
        base = torch.from_numpy(values(rng, np.dtype(name), base_shape))
    elif name.startswith("complex"):
        base = torch.from_numpy(values(rng, np.dtype(name), base_shape))
    else:
        base = torch.from_numpy(values(rng, np.dtype("float32"), base_shape)).to(dtype)
    t = base[tuple(slice(None, None, s) if s else slice(None) for s in steps)]
    if 0 in steps:
        t = t.expand(*shape)  # zero strides
    return t.permute(*perm) if perm else t


def _torch_bytes(torch, t):
    if not t.numel():
        return b""
    fresh = torch.empty(t.numel(), dtype=t.dtype)  # standard strides, whatever t's
    fresh.copy_(t.detach().reshape(-1))
    return fresh.view(torch.uint8).numpy().tobytes()


@examples(400)
@given(
    name=st.sampled_from(TORCH_DTYPE_NAMES), layout=layouts(negative=False), seed=seeds,
    path=st.sampled_from(["from_dlpack", "export -> gpu_dlpack", "export -> torch"]),
    max_version=st.sampled_from(MAX_VERSIONS), copy=st.sampled_from(COPIES),
    import_copy=st.sampled_from(COPIES), refusal=st.sampled_from([None] * 8 + ["grad", "conj"]),
    dl_device=st.sampled_from([None, (1, 0)]),
)
def test_torch_tensors_through_gpu_dlpack_keep_values_pointers_and_flags(
    cases, torch, name, layout, seed, path, max_version, copy, import_copy, refusal, dl_device
):
    t = _torch_tensor(torch, np.random.default_rng(seed), name, layout)
    if t is None:
        cases["torch: dtype absent from this torch"] += 1
        return
    code, bits = _torch_dtypes()[t.dtype]
    if refusal == "grad" and t.is_floating_point():
        t = t.detach().requires_grad_(True)
    elif refusal == "conj" and t.is_complex():
        t = t.conj()
    else:
        refusal = None
    if refusal == "grad":
        # torch refuses to export these; the layer says so as a BufferError.
        cases["torch: refused (requires_grad)"] += 1
        with pytest.raises(BufferError):
            gpu_dlpack.from_dlpack(t)
        with pytest.raises(BufferError):
            gpu_dlpack.export(t, max_version=max_version)
        return
    if refusal == "conj":
        # torch refuses to export a conjugate view; the layer resolves it: a
        # copy holding the conjugated values, flagged IS_COPIED, and
        # copy=False is refused.
        cases["torch: conjugate bit resolved"] += 1
        want = t.resolve_conj().numpy()
        got = gpu_dlpack.from_dlpack(t)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
        if export_refused(code, bits, False, max_version, None):
            with pytest.raises(BufferError):
                gpu_dlpack.export(t, max_version=max_version)
            return
        with pytest.raises(gpu_dlpack.CopyRequiredError):
            gpu_dlpack.export(t, max_version=max_version, copy=False)
        cap = gpu_dlpack.export(t, max_version=max_version)
        info = gpu_dlpack.inspect(cap)
        if info.versioned:
            assert info.flags & FLAG_IS_COPIED and not info.flags & FLAG_READ_ONLY
        assert gpu_dlpack.from_dlpack(cap).tobytes() == want.tobytes()
        return
    want = _torch_bytes(torch, t)
    ptr = t.data_ptr() if t.numel() else None
    if path == "from_dlpack":
        cases["torch -> from_dlpack: exchanged"] += 1
        arr = gpu_dlpack.from_dlpack(t, copy=import_copy)
        assert arr.shape == tuple(t.shape)
        assert code_bits(arr.dtype) == (code, bits)
        assert bits_of(arr) == want
        if ptr:
            assert (arr.ctypes.data == ptr) is (import_copy is not True)
        assert arr.flags.writeable  # torch data may be written
        return
    done = export_or_refuse(cases, "torch", t, code, bits, False, t.shape, max_version, copy, dl_device)
    if done is None:
        return
    cap, info = done
    versioned = info.versioned
    if versioned:
        assert not info.flags & FLAG_READ_ONLY  # torch data is writeable
        assert bool(info.flags & FLAG_IS_COPIED) is (copy is True)
    if ptr:
        assert (info.data + info.byte_offset == ptr) is (copy is not True)
    if path == "export -> torch":
        back = torch.from_dlpack(cap)
        assert back.dtype == t.dtype and back.shape == t.shape
        assert _torch_bytes(torch, back) == want
        if ptr:
            assert (back.data_ptr() == ptr) is (copy is not True)
        return
    arr = gpu_dlpack.from_dlpack(cap, copy=import_copy)
    assert arr.shape == tuple(t.shape)
    assert bits_of(arr) == want
    if ptr:
        assert (arr.ctypes.data == ptr) is (copy is not True and import_copy is not True)


# -- JAX -> gpu_dlpack --------------------------------------------------------------

JAX_DTYPES = NUMPY_DTYPES + [np.dtype(getattr(ml_dtypes, n)) for n in (
    "bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
    "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
)]


@examples(300)
@given(
    dtype=st.sampled_from(JAX_DTYPES), layout=layouts(negative=False, broadcast=False), seed=seeds,
    path=st.sampled_from(["from_dlpack", "export"]), max_version=st.sampled_from(MAX_VERSIONS),
    copy=st.sampled_from(COPIES), import_copy=st.sampled_from(COPIES),
    dl_device=st.sampled_from([None, (1, 0)]),
)
def test_jax_arrays_through_gpu_dlpack_keep_values_pointers_and_flags(
    cases, jax, dtype, layout, seed, path, max_version, copy, import_copy, dl_device
):
    # JAX arrays are always compact and immutable: a legacy capsule from JAX
    # is adapted into a versioned one marked READ_ONLY.
    x = np.ascontiguousarray(build(np.random.default_rng(seed), dtype, layout))
    j = jax.numpy.asarray(x)
    want = bits_of(x)
    code, bits = code_bits(dtype)
    ptr = j.unsafe_buffer_pointer() if j.size else None
    if path == "from_dlpack":
        cases["jax -> from_dlpack: exchanged"] += 1
        arr = gpu_dlpack.from_dlpack(j, copy=import_copy)
        assert arr.dtype == dtype and arr.shape == x.shape
        assert bits_of(arr) == want
        if ptr:
            assert (arr.ctypes.data == ptr) is (import_copy is not True)
        assert arr.flags.writeable is (import_copy is True)
        return
    done = export_or_refuse(cases, "jax", j, code, bits, True, x.shape, max_version, copy, dl_device)
    if done is None:
        return
    cap, info = done
    versioned = info.versioned
    if versioned:
        assert bool(info.flags & FLAG_READ_ONLY) is (copy is not True)
        assert bool(info.flags & FLAG_IS_COPIED) is (copy is True)
    if ptr:
        assert (info.data + info.byte_offset == ptr) is (copy is not True)
    arr = gpu_dlpack.from_dlpack(cap, copy=import_copy)
    assert arr.dtype == dtype and arr.shape == x.shape
    assert bits_of(arr) == want
    if ptr:
        assert (arr.ctypes.data == ptr) is (copy is not True and import_copy is not True)
    if import_copy is not True and copy is not True:
        assert not arr.flags.writeable


# -- array_api_strict -> gpu_dlpack ---------------------------------------------------

XP_DTYPES = [d for d in NUMPY_DTYPES if d != np.dtype("float16")]


@examples(200)
@given(
    dtype=st.sampled_from(XP_DTYPES), layout=layouts(negative=False, broadcast=False), seed=seeds,
    transpose=st.booleans(), path=st.sampled_from(["from_dlpack", "export"]),
    max_version=st.sampled_from(MAX_VERSIONS), copy=st.sampled_from(COPIES),
)
def test_array_api_strict_arrays_through_gpu_dlpack_keep_values_and_pointers(
    cases, xp_strict, dtype, layout, seed, transpose, path, max_version, copy
):
    # A strict array over read-only NumPy data is read-only too.
    x = np.ascontiguousarray(build(np.random.default_rng(seed), dtype, layout))
    readonly = not x.flags.writeable
    s = xp_strict.asarray(x)
    if transpose and s.ndim >= 2:
        s = xp_strict.permute_dims(s, tuple(reversed(range(s.ndim))))
    want = np.from_dlpack(s)  # NumPy's own zero-copy view, for the pointer
    if path == "from_dlpack":
        cases["array_api_strict -> from_dlpack: exchanged"] += 1
        arr = gpu_dlpack.from_dlpack(s, copy=copy)
        same_values(arr, want)
        if want.size:
            assert (arr.ctypes.data == want.ctypes.data) is (copy is not True)
        assert arr.flags.writeable is (copy is True or not readonly)
        return
    code, bits = code_bits(dtype)
    done = export_or_refuse(cases, "array_api_strict", s, code, bits, readonly, want.shape, max_version, copy)
    if done is None:
        return
    cap, info = done
    if info.versioned:
        assert bool(info.flags & FLAG_READ_ONLY) is (readonly and copy is not True)
        assert bool(info.flags & FLAG_IS_COPIED) is (copy is True)
    arr = gpu_dlpack.from_dlpack(cap)
    same_values(arr, want)
    if want.size:
        assert (arr.ctypes.data == want.ctypes.data) is (copy is not True)


# -- the rules no draw may miss ---------------------------------------------------------

SUB_BYTE = ["int2", "uint2", "int4", "uint4", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"]


@pytest.mark.parametrize("name", SUB_BYTE)
@pytest.mark.parametrize("max_version", [None, (0, 8), (1, 0)])
def test_a_sub_byte_dtype_needs_a_consumer_of_dlpack_1_1(name, max_version):
    # IS_SUBBYTE_TYPE_PADDED appeared in DLPack 1.1: a 1.0 consumer would
    # read the padded bytes as packed data.
    x = np.zeros(4, getattr(ml_dtypes, name))
    with pytest.raises(BufferError, match=r"needs DLPack 1\.1"):
        gpu_dlpack.export(x, max_version=max_version)
    with pytest.raises(BufferError, match=r"needs DLPack 1\.1"):
        gpu_dlpack.wrap(x).__dlpack__(max_version=max_version)
    info = gpu_dlpack.inspect(gpu_dlpack.export(x, max_version=(1, 1)))
    assert info.flags & gpu_dlpack.FLAG_IS_SUBBYTE_TYPE_PADDED


@pytest.mark.parametrize("max_version", [None, (0, 8)])
def test_read_only_data_of_another_producer_exports_legacy_when_copied(xp_strict, max_version):
    # The rules allow a legacy capsule of read-only data when it is a copy;
    # a NumPy-based producer refuses a legacy capsule of read-only data, so
    # the layer must not ask it for one when it copies anyway.
    x = np.arange(6.0)
    x.flags.writeable = False
    s = xp_strict.asarray(x)
    with pytest.raises(BufferError):
        gpu_dlpack.export(s, max_version=max_version)
    cap = gpu_dlpack.export(s, max_version=max_version, copy=True)
    info = gpu_dlpack.inspect(cap)
    assert not info.versioned and info.data != x.ctypes.data
    arr = gpu_dlpack.from_dlpack(cap)
    assert arr.tolist() == x.tolist()


# -- the same on a GPU (public API only) -------------------------------------------------

@pytest.mark.gpu
@examples(120)
@given(
    dtype=st.sampled_from(NUMPY_DTYPES), layout=layouts(), seed=seeds,
    max_version=st.sampled_from([(1, 0), (1, 5)]), copy=st.sampled_from([None, True]),
)
def test_numpy_to_the_gpu_and_back_keeps_values(cases, dtype, layout, seed, max_version, copy):
    import cupy

    x = build(np.random.default_rng(seed), dtype, layout)
    cap = gpu_dlpack.export(x, max_version=max_version, dl_device=(2, 0), copy=copy)
    info = gpu_dlpack.inspect(cap)
    assert info.device == gpu_dlpack.Device("cuda:0")
    assert info.flags & FLAG_IS_COPIED  # host to device is always a copy
    assert not info.flags & FLAG_READ_ONLY  # a copy may be written
    d = gpu_dlpack.from_dlpack(cap)
    assert isinstance(d, cupy.ndarray)
    same_values(d.get(order="A"), x)  # as laid out (C or F): no kernel
    back = gpu_dlpack.export(d, max_version=(1, 0), dl_device=(1, 0))
    assert gpu_dlpack.inspect(back).flags & FLAG_IS_COPIED
    same_values(gpu_dlpack.from_dlpack(back), x)
    cases["gpu: numpy -> cuda -> numpy"] += 1


@pytest.mark.gpu
@examples(80)
@given(
    peer=st.sampled_from(["numpy", "torch", "jax"]), dtype=st.sampled_from(XP_DTYPES),
    layout=layouts(negative=False, broadcast=False), seed=seeds,
)
def test_host_arrays_of_each_peer_land_on_the_gpu_intact(cases, torch, jax, peer, dtype, layout, seed):
    import cupy

    x = np.ascontiguousarray(build(np.random.default_rng(seed), dtype, layout))
    src = {"numpy": lambda: x, "torch": lambda: torch.from_numpy(x.copy()),
           "jax": lambda: jax.numpy.asarray(x)}[peer]()
    d = gpu_dlpack.from_dlpack(src, device="cuda:0")
    assert isinstance(d, cupy.ndarray)
    same_values(cupy.asnumpy(d), x)
    cases[f"gpu: {peer} -> cuda"] += 1
