"""``gpu_dlpack.convert``: one call to any library, the exchange done right
for each consumer, with the real consumers (NumPy, PyTorch, JAX,
array-api-strict; CuPy and Numba on a GPU).

Zero-copy is judged by pointers; the read-only default by writing through
the result and reading the source; copies by the ``report=True`` record.
torch's negative-stride case runs in a child process, since torch 2.12 and
2.13 abort on it directly.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _capsule, _convert, _faults, _peers
from gpu_dlpack._compiled import core

from .helpers import dlpack_only_subclass, gpu_arange, jax_x64


def readonly(a):
    a = a.copy()
    a.flags.writeable = False
    return a


def aligned(a, offset=0):
    """A copy of ``a`` starting ``offset`` bytes past a 64-byte boundary."""
    raw = np.empty(a.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def jax_pointer(j):
    return j.unsafe_buffer_pointer()


def run_child(code):
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


# -- torch ---------------------------------------------------------------------


def test_read_only_numpy_to_torch_is_copied_so_writes_never_reach_it(torch):
    # torch ignores READ_ONLY: torch.from_dlpack(wrap(r)) gives a tensor
    # whose writes change r. convert copies by default.
    r = readonly(np.arange(6.0))
    t = gpu_dlpack.convert(r, "torch")
    assert type(t) is torch.Tensor and t.tolist() == r.tolist()
    t[0] = 42
    assert r[0] == 0.0 and t[0] == 42
    assert t.data_ptr() != r.ctypes.data


def test_the_fault_convert_corrects_is_real(torch):
    r = readonly(np.arange(6.0))
    t = torch.from_dlpack(gpu_dlpack.wrap(r))
    t[0] = 42
    assert r[0] == 42  # what convert exists to prevent


def test_read_only_shared_knowingly_is_zero_copy(torch):
    r = readonly(np.arange(6.0))
    done = gpu_dlpack.convert(r, "torch", on_readonly="share", report=True)
    t = done.array
    assert t.data_ptr() == r.ctypes.data
    assert done.copied is False and done.shared_readonly and done.faults == ("read-only-ignored",)
    with pytest.warns(DeprecationWarning, match=r"^Conversion\.shared_read_only is deprecated: read "
                      r"Conversion\.shared_readonly"):
        assert done.shared_read_only is True
    t[0] = 42
    assert r[0] == 42  # the caller chose this


def test_read_only_refused_is_a_read_only_error(torch):
    r = readonly(np.arange(6.0))
    with pytest.raises(gpu_dlpack.ReadOnlyError, match="torch cannot hold it read-only") as info:
        gpu_dlpack.convert(r, "torch", on_readonly="refuse")
    assert isinstance(info.value, BufferError)
    assert "on_readonly='copy'" in str(info.value) and "on_readonly='share'" in str(info.value)


def test_read_only_with_copy_false_is_a_read_only_error(torch):
    with pytest.raises(gpu_dlpack.ReadOnlyError, match="copy=False, but the data is read-only"):
        gpu_dlpack.convert(readonly(np.arange(6.0)), "torch", copy=False)


def test_writeable_numpy_to_torch_is_zero_copy_and_shared(torch):
    a = np.arange(6.0)
    t = gpu_dlpack.convert(a, "torch")
    assert t.data_ptr() == a.ctypes.data
    t[0] = 42
    assert a[0] == 42
    done = gpu_dlpack.convert(a, "torch", report=True)
    assert done.copied is False and done.copied_by is None and done.faults == () and done.reasons == ()
    assert done.library == "torch" and done.version == torch.__version__


def test_a_plain_array_reaches_torch_as_the_capsule_torch_would_ask_a_wrapper_for(torch, floor, monkeypatch):
    # The plain case hands torch the rules' capsule itself: the version torch
    # asks for (a legacy capsule for a torch that asks for none) and the floor
    # in force, as through a wrapper.
    c = _convert.consumer_of("torch")
    assert c.capsules and c.asks == ((1, 0) if "legacy-only" not in c.faults else None)
    seen = []
    monkeypatch.setitem(_convert._consumers, "torch", c._replace(call=lambda obj: seen.append(obj) or obj))
    capsule = gpu_dlpack.convert(np.arange(3.0), "torch")
    assert seen == [capsule] and gpu_dlpack.inspect(capsule).versioned == (c.asks is not None)
    monkeypatch.setitem(_convert._consumers, "torch", c)
    gpu_dlpack.set_min_dlpack_version((1, 1))
    a = np.arange(3.0)
    with pytest.raises(gpu_dlpack.DLPackVersionError, match="below \\(1, 1\\)"):
        torch.from_dlpack(gpu_dlpack.wrap(a))
    with pytest.raises(gpu_dlpack.DLPackVersionError, match="below \\(1, 1\\)"):
        gpu_dlpack.convert(a, "torch")


def test_copy_true_is_made_by_the_layer_and_reported(torch):
    a = np.arange(6.0)
    done = gpu_dlpack.convert(a, "torch", copy=True, report=True)
    assert done.array.data_ptr() != a.ctypes.data and done.array.tolist() == a.tolist()
    assert done.copied is True and done.copied_by == "gpu_dlpack"
    assert any("copy=True" in r for r in done.reasons)


def test_a_copy_the_layer_makes_for_a_fault_is_flagged_is_copied(torch):
    # The capsule torch receives says IS_COPIED (torch does not read it);
    # the record says it too.
    r = readonly(np.arange(6.0))
    served = _convert.Served(r, _convert.consumer_of("torch"), None, None, None, "copy")
    cap = served.__dlpack__(max_version=(1, 0))
    info = _capsule.read(cap)
    assert info.is_copied and not info.readonly and info.data != r.ctypes.data
    assert served.record["copied"] and served.record["applied"] == ("read-only-ignored",)


@pytest.mark.parametrize("make", [
    lambda: np.arange(6.0), lambda: np.arange(12, dtype=np.int8).reshape(3, 4)[:, ::2],
    lambda: np.arange(12, dtype=np.uint16).reshape(3, 4).T, lambda: np.array(7, np.int64),
    lambda: np.zeros((0, 3), np.float32), lambda: np.array([True, False]), lambda: np.arange(4.0)[::-1],
], ids=["f8", "i1-strided", "u2-transposed", "0d", "empty", "bool", "reversed"])
def test_the_copy_of_read_only_data_is_the_general_paths_and_flagged_is_copied(torch, monkeypatch, make):
    # convert's plain case of read-only NumPy data (the copy made at once)
    # gives what the general path (report=True) gives: the values and dtype,
    # writeable, apart from the source, in a capsule flagged IS_COPIED.
    r = readonly(make())
    general = gpu_dlpack.convert(r, "torch", report=True).array
    seen = []
    c = _convert.consumer_of("torch")

    def spy(capsule):
        seen.append(_capsule.read(capsule))
        return c.call(capsule)

    monkeypatch.setitem(_convert._consumers, "torch", c._replace(call=spy))
    t = gpu_dlpack.convert(r, "torch")
    assert t.dtype == general.dtype and t.shape == general.shape
    assert np.array_equal(t.numpy(), r) and np.array_equal(general.numpy(), r) and t.numpy().dtype == r.dtype
    assert len(seen) == 1 and seen[0].is_copied and not seen[0].readonly and seen[0].versioned
    if r.size:
        assert t.data_ptr() != r.ctypes.data
        t.numpy().reshape(-1)[0] = 1 - t.numpy().reshape(-1)[0]  # writeable; the source keeps its values
        assert np.array_equal(general.numpy(), r) and not np.array_equal(t.numpy(), r)


def test_immutable_data_of_a_dtype_numpy_does_not_carry_goes_the_general_way(torch, jax):
    # bfloat16 reaches NumPy as ml_dtypes' type, not one of NumPy's own: the
    # copy made at once is not made of it, and torch gets bfloat16.
    j = jax.numpy.arange(4.0, dtype=jax.numpy.bfloat16)
    t = gpu_dlpack.convert(j, "torch")
    assert t.dtype == torch.bfloat16 and t.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_read_only_data_for_a_consumer_that_copies_unaligned_data_is_copied_aligned(torch, monkeypatch):
    # A consumer with both faults (none has both today) is handed the
    # general path's aligned copy, which it takes in place.
    c = _convert.consumer_of("torch")
    seen = []

    def spy(given):  # a capsule, or the general path's producer
        capsule = given if type(given).__name__ == "PyCapsule" else given.__dlpack__(max_version=c.asks)
        seen.append(_capsule.read(capsule))
        return c.call(capsule)

    monkeypatch.setitem(_convert._consumers, "torch", c._replace(call=spy, faults=c.faults | {"unaligned-copies"}))
    for n in range(1, 40):
        r = readonly(np.arange(n, dtype=np.int8))
        assert gpu_dlpack.convert(r, "torch").tolist() == r.tolist()
    assert all(info.data % _peers.ALIGNMENT == 0 and info.is_copied for info in seen)


def test_read_only_data_to_a_library_without_a_row_is_copied_without_a_report(library):
    r = readonly(np.arange(6.0))
    out = gpu_dlpack.convert(r, library)
    assert out.ctypes.data != r.ctypes.data and out.tolist() == r.tolist()
    out[0] = 42
    assert r[0] == 0.0


NEGATIVE = """
    import numpy as np, gpu_dlpack
    for a in (np.arange(6.0)[::-1], np.arange(12.0).reshape(3, 4)[:, ::-1], np.arange(12.0).reshape(3, 4)[::-1]):
        done = gpu_dlpack.convert(a, "torch", report=True)
        assert done.array.tolist() == a.tolist(), (done.array, a)
        assert done.copied and done.faults == ("negative-strides",), done
    try:
        gpu_dlpack.convert(np.arange(6.0)[::-1], "torch", copy=False)
    except gpu_dlpack.CopyRequiredError as exc:
        print("refused:", exc)
    # a negative stride on an axis of one element is never walked: zero-copy
    one = np.arange(6.0).reshape(1, 6)[::-1]
    assert gpu_dlpack.convert(one, "torch").data_ptr() == one.ctypes.data
    print("ok")
"""


def test_negative_strides_reach_torch_as_a_compact_copy_not_an_abort(torch):
    status, out, err = run_child(NEGATIVE)
    assert status == 0, err
    assert "refused: copy=False, but torch cannot import an array of shape (6,) with strides (-1,)" in out
    assert out.rstrip().endswith("ok")


def test_negative_strides_abort_torch_directly(torch):
    # The fault in the table, as torch 2.13 has it (pytorch/pytorch#188023):
    # here in a child process, which it kills.
    if _peers.release(torch.__version__) >= (2, 14):
        pytest.skip("a torch release after the fault was known")
    status, _out, err = run_child("""
        import numpy as np, torch, gpu_dlpack
        torch.from_dlpack(gpu_dlpack.wrap(np.arange(6.0)[::-1]))
    """)
    assert status in (-6, 134) and "Storage size calculation overflowed" in err


def test_a_torch_tensor_to_torch_is_zero_copy(torch):
    t = torch.arange(6.0)
    assert gpu_dlpack.convert(t, "torch").data_ptr() == t.data_ptr()
    assert gpu_dlpack.convert(t, torch).data_ptr() == t.data_ptr()  # the module itself


def test_a_jax_array_to_torch_is_copied_by_default_and_shared_on_request(torch, jax):
    # JAX arrays are immutable: the layer exports them READ_ONLY.
    j = jax.numpy.arange(6.0, dtype=jax.numpy.float32)
    t = gpu_dlpack.convert(j, "torch")
    assert t.data_ptr() != jax_pointer(j) and t.tolist() == j.tolist()
    t[0] = 42  # writeable, apart from the source
    assert float(j[0]) == 0.0
    shared = gpu_dlpack.convert(j, "torch", on_readonly="share")
    assert shared.data_ptr() == jax_pointer(j)


# -- JAX -----------------------------------------------------------------------


def test_jax_copy_true_is_a_real_copy(jax):
    a = aligned(np.arange(6, dtype=np.float32))
    # JAX's own copy=True shares from 0.9 (0.8.0 copied): the fault in the table.
    shares = "copy-shares" in _convert.consumer_of("jax").faults
    direct = jax.dlpack.from_dlpack(a, copy=True)
    assert (jax_pointer(direct) == a.ctypes.data) is shares
    done = gpu_dlpack.convert(a, "jax", copy=True, report=True)
    j = done.array
    assert jax_pointer(j) != a.ctypes.data
    a[0] = 99
    assert float(j[0]) == 0.0
    # The layer copies (it relies on no consumer's copy=True), aligned, so
    # that JAX takes its copy in place: one copy.
    assert done.copied is True and done.copied_by == "gpu_dlpack" and jax_pointer(j) % 64 == 0
    assert ("copy-shares" in done.faults) is shares


def test_aligned_writeable_data_reaches_jax_zero_copy(jax):
    a = aligned(np.arange(6, dtype=np.float32))
    j = gpu_dlpack.convert(a, "jax")
    assert jax_pointer(j) == a.ctypes.data
    assert gpu_dlpack.convert(a, "jax", copy=False).tolist() == a.tolist()


def test_read_only_data_reaches_jax_as_a_copy_or_shared_on_request(jax):
    r = aligned(np.arange(6, dtype=np.float32))
    r.flags.writeable = False
    if "legacy-only" not in _convert.consumer_of("jax").faults:
        # JAX 0.12 asks for versioned capsules, which say READ_ONLY, and its
        # arrays are immutable: it takes read-only data in place, every way.
        for j in (jax.dlpack.from_dlpack(gpu_dlpack.wrap(r)), gpu_dlpack.convert(r, "jax"),
                  gpu_dlpack.convert(r, "jax", on_readonly="refuse")):
            assert jax_pointer(j) == r.ctypes.data and j.tolist() == r.tolist()
        assert gpu_dlpack.convert(r, "jax", report=True).faults == ()
        return
    # directly, JAX (legacy capsules only) cannot be told READ_ONLY: refused
    with pytest.raises(BufferError):
        jax.dlpack.from_dlpack(gpu_dlpack.wrap(r))
    done = gpu_dlpack.convert(r, "jax", report=True)
    assert done.array.tolist() == r.tolist() and jax_pointer(done.array) != r.ctypes.data
    assert done.faults == ("legacy-only",) and done.copied_by == "gpu_dlpack"
    shared = gpu_dlpack.convert(r, "jax", on_readonly="share")
    assert jax_pointer(shared) == r.ctypes.data
    with pytest.raises(gpu_dlpack.ReadOnlyError):
        gpu_dlpack.convert(r, "jax", on_readonly="refuse")


def test_unaligned_data_is_copied_by_jax_and_reported(jax):
    a = aligned(np.arange(6, dtype=np.float32), offset=4)
    done = gpu_dlpack.convert(a, "jax", report=True)
    assert done.copied is True and done.copied_by == "jax"
    assert any("not aligned to 64 bytes" in r for r in done.reasons)
    # JAX would copy silently: copy=False is refused before it is called
    with pytest.raises(gpu_dlpack.CopyRequiredError, match="not aligned to 64 bytes"):
        gpu_dlpack.convert(a, "jax", copy=False)


def test_layouts_jax_cannot_import_are_made_compact(jax):
    for a in (np.arange(12, dtype=np.float32)[::2], np.arange(12, dtype=np.float32)[::-1],
              np.lib.stride_tricks.as_strided(np.arange(3, dtype=np.float32), (4, 3), (0, 4))):
        with pytest.raises(Exception, match="compact"):
            jax.dlpack.from_dlpack(a)  # JAX alone
        done = gpu_dlpack.convert(a, "jax", report=True)
        assert done.array.tolist() == a.tolist() and done.copied_by == "gpu_dlpack"
        assert "non-compact-strides" in done.faults
        with pytest.raises(gpu_dlpack.CopyRequiredError, match="jax cannot import an array of shape"):
            gpu_dlpack.convert(a, "jax", copy=False)
    # A transposition of a dense buffer is compact: JAX takes it in place,
    # and from 0.8 reads it in its own order. JAX 0.6 (the newest on CPython
    # 3.10) reads it as C order, the values in the wrong places: copied.
    t = aligned(np.arange(12, dtype=np.float32)).reshape(3, 4).T
    done = gpu_dlpack.convert(t, "jax", report=True)
    assert done.array.tolist() == t.tolist()
    # And through the shortcut a plain array takes without report (it once
    # let a transposition through to JAX 0.6 in place).
    assert gpu_dlpack.convert(t, "jax").tolist() == t.tolist()
    if "c-order-only" in _convert.consumer_of("jax").faults:
        assert done.copied_by == "gpu_dlpack" and done.faults == ("c-order-only",)
        try:
            assert jax.dlpack.from_dlpack(t).tolist() != t.tolist()  # JAX alone: wrong values (0.6, 0.7.0)
        except Exception as exc:  # or refused (0.7.2)
            assert "layout" in str(exc)
        with pytest.raises(gpu_dlpack.CopyRequiredError, match="the values in the wrong places"):
            gpu_dlpack.convert(t, "jax", copy=False)
    else:
        assert jax_pointer(done.array) == t.ctypes.data and not done.copied
        assert jax.dlpack.from_dlpack(t).tolist() == t.tolist()


def test_a_consumer_that_reads_every_layout_as_c_order_gets_a_c_order_copy():
    faults = frozenset({"c-order-only"})
    facts = dict(read_only=False, host=True, address=0, on_readonly="copy")
    for shape, strides in (((4, 3), (1, 4)), ((2, 3, 4), (1, 2, 6)), ((3, 4), (4, 1)), ((1, 4), (99, 1)),
                           ((4, 1), (1, 99)), ((0, 3), (1, 0)), ((5,), None)):
        fix = _faults.fix("lib", faults, shape=shape, strides=strides, copy=None, **facts)
        c_order = strides is None or 0 in shape or shape == (3, 4) or 1 in shape
        assert (fix is _faults.PLAIN) is c_order, (shape, strides)
        if not c_order:
            assert fix.copy and fix.applied == ("c-order-only",) and "C order" in fix.reasons[0]
            with pytest.raises(gpu_dlpack.CopyRequiredError):
                _faults.fix("lib", faults, shape=shape, strides=strides, copy=False, **facts)


WIDE = [("int64", "int32"), ("uint64", "uint32"), ("float64", "float32"), ("complex128", "complex64")]


@pytest.mark.parametrize("wide, narrow", WIDE, ids=[w for w, _ in WIDE])
def test_64_bit_data_to_jax_without_x64_is_refused_not_narrowed(jax, wide, narrow):
    # JAX's default (x64 off) imports int64 as int32 by a copy, silently:
    # 2**40 becomes 0. The layer refuses, naming the setting and the cast.
    a = aligned(np.array([2**40, 3]).astype(wide))
    with jax_x64(jax, False):
        assert jax.dlpack.from_dlpack(a).dtype == np.dtype(narrow)  # the fault the row corrects
        for kwargs in ({}, {"copy": False}, {"copy": True}, {"report": True}):
            with pytest.raises(gpu_dlpack.DtypeChangeError, match=f"jax would import {wide} as {narrow}") as info:
                gpu_dlpack.convert(a, "jax", **kwargs)
            assert "jax_enable_x64" in str(info.value) and f"astype('{narrow}')" in str(info.value)
        got = gpu_dlpack.convert(a.astype(narrow), "jax")  # asked for explicitly
        assert got.dtype == np.dtype(narrow)


def test_float4_data_to_jax_0_12_that_it_would_read_as_packed_is_refused(jax):
    # JAX 0.12 imports float4_e2m1fn data aligned to 64 bytes in place, as
    # packed (two values a byte), whatever IS_SUBBYTE_TYPE_PADDED says: every
    # element but the first reads wrong. The layer refuses more than one
    # element and hands one over (it reads right).
    if _peers.release(jax.__version__) < (0, 12):
        pytest.skip(f"JAX {jax.__version__} asks for a DLPack version without 4-bit dtypes")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = aligned(np.array([0.5, 1.5, -3.0, 6.0], ml_dtypes.float4_e2m1fn))
    wrong = jax.dlpack.from_dlpack(gpu_dlpack.wrap(a))  # the fault the row corrects
    assert np.asarray(wrong).view(np.uint8).tolist() != a.view(np.uint8).tolist()
    assert not _convert.consumer_of("jax").plain(a)
    for kwargs in ({}, {"copy": False}, {"copy": True}, {"report": True}):
        with pytest.raises(gpu_dlpack.DtypeChangeError, match="jax would read this 4-bit data") as info:
            gpu_dlpack.convert(a, "jax", **kwargs)
        assert "astype('float32')" in str(info.value)
    got = gpu_dlpack.convert(a.astype(np.float32), "jax").astype(a.dtype)  # the remedy it names
    assert np.asarray(got).view(np.uint8).tolist() == a.view(np.uint8).tolist()
    one = aligned(np.array([1.5], ml_dtypes.float4_e2m1fn))
    assert np.asarray(gpu_dlpack.convert(one, "jax")).view(np.uint8).tolist() == one.view(np.uint8).tolist()


def test_64_bit_data_of_any_producer_to_jax_without_x64_is_refused(torch, jax):
    with jax_x64(jax, False):
        with pytest.raises(gpu_dlpack.DtypeChangeError):
            gpu_dlpack.convert(torch.tensor([2**40, 3]), "jax")
        with pytest.raises(gpu_dlpack.DtypeChangeError):
            gpu_dlpack.convert(readonly(np.arange(3.0)), "jax")


def test_with_x64_jax_keeps_64_bit_data_zero_copy(jax):
    a = aligned(np.array([2**40, 3]))
    with jax_x64(jax, True):
        j = gpu_dlpack.convert(a, "jax", copy=False)
        assert j.dtype == np.int64 and j.tolist() == [2**40, 3] and jax_pointer(j) == a.ctypes.data


def test_copy_false_never_returns_a_copy_a_consumer_made(jax):
    # A consumer that copies on import, whatever it is asked (a module of the
    # caller's with a from_dlpack): copy=False raises instead.
    import types

    copying = types.ModuleType("copying_consumer")
    copying.from_dlpack = lambda x, **kw: np.from_dlpack(x).copy()
    a = np.arange(3.0)
    assert gpu_dlpack.convert(a, copying).tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(gpu_dlpack.CopyRequiredError, match="copying_consumer copied the data on import"):
        gpu_dlpack.convert(a, copying, copy=False)


def test_a_torch_tensor_reaches_jax_zero_copy(torch, jax):
    t = torch.arange(6.0, dtype=torch.float32)  # torch allocates 64-byte aligned
    j = gpu_dlpack.convert(t, "jax")
    assert jax_pointer(j) == t.data_ptr() and j.tolist() == t.tolist()
    assert jax_pointer(gpu_dlpack.convert(t, "jax.numpy")) == t.data_ptr()


# -- NumPy and array-api-strict --------------------------------------------------


def test_to_numpy_is_the_layers_own_import(torch, jax):
    t = torch.arange(6.0)
    n = gpu_dlpack.convert(t, "numpy")
    assert type(n) is np.ndarray and n.ctypes.data == t.data_ptr() and n.flags.writeable
    r = readonly(np.arange(3.0))
    v = gpu_dlpack.convert(r, "numpy")  # NumPy holds read-only data: no copy
    assert v.ctypes.data == r.ctypes.data and not v.flags.writeable
    j = jax.numpy.arange(3.0)
    done = gpu_dlpack.convert(j, "numpy", report=True)
    assert done.copied is False and not done.array.flags.writeable
    c = gpu_dlpack.convert(t, "numpy", copy=True, report=True)
    assert c.copied is True and c.array.ctypes.data != t.data_ptr()


def test_array_api_strict_honours_read_only_so_it_is_shared(xp_strict):
    a = np.arange(6.0)
    s = gpu_dlpack.convert(a, "array_api_strict")
    assert s._array.ctypes.data == a.ctypes.data
    r = readonly(np.arange(6.0))
    done = gpu_dlpack.convert(r, "array_api_strict", report=True)
    assert done.copied is False and done.faults == ()
    with pytest.raises(ValueError, match="read-only"):
        done.array[0] = 42
    assert r[0] == 0.0


# -- any module with a from_dlpack -----------------------------------------------


@pytest.fixture
def library(tmp_path, monkeypatch):
    """A library gpu_dlpack has no row for, whose from_dlpack is NumPy's
    own made writeable: it does not honour READ_ONLY."""
    (tmp_path / "convert_test_library.py").write_text(textwrap.dedent("""
        import ctypes
        import numpy as np

        _kept = []  # the imports, alive as long as the module

        def from_dlpack(x, device=None, copy=None):
            a = np.from_dlpack(x)
            _kept.append(a)
            memory = (ctypes.c_char * a.nbytes).from_address(a.ctypes.data)
            return np.frombuffer(memory, a.dtype).reshape(a.shape)  # always writeable
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "convert_test_library"
    sys.modules.pop("convert_test_library", None)
    _convert._consumers.pop("convert_test_library", None)


def test_a_library_without_a_row_gets_copies_of_read_only_data(library):
    a = np.arange(6.0)
    out = gpu_dlpack.convert(a, library)
    assert out.ctypes.data == a.ctypes.data  # writeable data: zero-copy
    r = readonly(np.arange(6.0))
    done = gpu_dlpack.convert(r, library, report=True)
    assert done.faults == ("read-only-unknown",) and done.copied_by == "gpu_dlpack"
    done.array[0] = 42
    assert r[0] == 0.0


@pytest.mark.parametrize("name", ["made_at_run_time", "made_at_run_time_pkg.sub"])
def test_a_module_object_sys_modules_does_not_hold_is_a_consumer(name):
    # Its version was looked up by importing its name: ModuleNotFoundError.
    import types

    module = types.ModuleType(name)
    module.from_dlpack = np.from_dlpack
    assert name not in sys.modules and name.partition(".")[0] not in sys.modules
    a = np.arange(3.0)
    done = gpu_dlpack.convert(a, module, report=True)
    assert done.array.tolist() == [0.0, 1.0, 2.0] and done.array.ctypes.data == a.ctypes.data
    assert done.library == name and done.version is None and done.faults == ()
    _convert._consumers.pop(module, None)


def test_the_consumer_forms(torch, jax):
    a = np.arange(3.0)
    assert type(gpu_dlpack.convert(a, torch)) is torch.Tensor
    assert isinstance(gpu_dlpack.convert(aligned(a.astype(np.float32)), jax.numpy), jax.Array)
    with pytest.raises(ModuleNotFoundError, match="no module named 'tourch' can be imported"):
        gpu_dlpack.convert(a, "tourch")
    with pytest.raises(TypeError, match="'to' must be an array library's module or its name"):
        gpu_dlpack.convert(a, torch.Tensor)
    with pytest.raises(TypeError, match="'to' must be"):
        gpu_dlpack.convert(a, ["torch"])  # unhashable
    with pytest.raises(TypeError, match="math has no from_dlpack"):
        gpu_dlpack.convert(a, "math")


def test_bad_arguments_are_the_standards_types(torch):
    a = np.arange(3.0)
    with pytest.raises(TypeError, match="copy must be True, False or None"):
        gpu_dlpack.convert(a, "torch", copy=1)
    with pytest.raises(ValueError, match="on_readonly must be one of 'copy', 'share', 'refuse'; got 'yes'"):
        gpu_dlpack.convert(a, "torch", on_readonly="yes")
    with pytest.raises(TypeError, match="on_readonly must be one of"):
        gpu_dlpack.convert(a, "torch", on_readonly=["copy"])  # not a str (unhashable too): the clear error
    with pytest.raises(TypeError):
        gpu_dlpack.convert(x=a, to="torch")  # x and to are positional-only
    with pytest.raises(gpu_dlpack.NotDLPackError):
        gpu_dlpack.convert([1, 2], "torch")


def test_streams_as_everywhere_else(torch):
    a = np.arange(3.0)
    # host memory takes no stream but -1 (no synchronization)
    assert gpu_dlpack.convert(a, "torch", stream=-1).data_ptr() == a.ctypes.data
    with pytest.raises(ValueError, match="stream=5 is not valid for"):
        gpu_dlpack.convert(a, "torch", stream=5)
    with gpu_dlpack.use_stream(-1):
        assert gpu_dlpack.convert(a, "torch").data_ptr() == a.ctypes.data


def test_device_is_where_the_layer_puts_the_data(torch):
    a = np.arange(3.0)
    assert gpu_dlpack.convert(a, "torch", device="cpu").data_ptr() == a.ctypes.data
    if gpu_dlpack._backends.cupy_backend.device_count():
        pytest.skip("a GPU is usable")
    with pytest.raises(BufferError, match="no backend can hold an array on cuda:0"):
        gpu_dlpack.convert(a, "torch", device="cuda:0")


# -- the GPU libraries (their logic on the CPU; the exchanges need a GPU) ---------


def _no_gpu():
    return gpu_dlpack._backends.cupy_backend.device_count() == 0


@pytest.mark.parametrize("library", ["cupy", "numba"])
def test_gpu_libraries_without_a_gpu_are_device_unreachable(library):
    pytest.importorskip(library)
    if not _no_gpu():
        pytest.skip("a GPU is usable")
    for x in (np.arange(3.0), readonly(np.arange(3.0))):  # read-only data too: a GPU library lands it
        with pytest.raises(gpu_dlpack.DeviceUnreachableError, match=f"{library} arrays live on a GPU") as info:
            gpu_dlpack.convert(x, library)
        assert isinstance(info.value, BufferError)


@pytest.mark.parametrize("library", ["cupy", "numba"])
def test_gpu_libraries_cannot_hold_read_only_data(library):
    c = _convert.consumer_of(pytest.importorskip(library).__name__)
    assert c.lands == "gpu" and c.faults == frozenset({"always-writeable"})
    facts = dict(shape=(3,), strides=(1,), host=False, address=0)
    fix = _faults.fix(library, c.faults, read_only=True, copy=None, on_readonly="copy", **facts)
    assert fix.copy and fix.applied == ("always-writeable",)
    fix = _faults.fix(library, c.faults, read_only=True, copy=None, on_readonly="share", **facts)
    assert fix.share and not fix.copy
    with pytest.raises(gpu_dlpack.ReadOnlyError, match=f"{library} cannot hold it read-only"):
        _faults.fix(library, c.faults, read_only=True, copy=None, on_readonly="refuse", **facts)
    with pytest.raises(gpu_dlpack.ReadOnlyError, match="copy=False"):
        _faults.fix(library, c.faults, read_only=True, copy=False, on_readonly="copy", **facts)
    assert _faults.fix(library, c.faults, read_only=False, copy=None, on_readonly="copy", **facts) is _faults.PLAIN


def test_numba_is_called_on_what_gpu_dlpack_lands_in_cupy():
    numba = pytest.importorskip("numba.cuda")
    c = _convert.consumer_of("numba")
    assert c.call is numba.as_cuda_array


@pytest.mark.gpu
def test_to_cupy_on_a_gpu(cp):
    a = np.arange(6.0)
    c = gpu_dlpack.convert(a, "cupy")
    assert type(c) is cp.ndarray and c.get().tolist() == a.tolist()
    d = gpu_arange(cp, 6.0)
    assert gpu_dlpack.convert(d, "cupy").data.ptr == d.data.ptr
    r = readonly(np.arange(6.0))
    assert gpu_dlpack.convert(r, "cupy").get().tolist() == r.tolist()  # a move copies anyway


@pytest.mark.gpu
def test_to_numba_on_a_gpu(cp):
    cuda = pytest.importorskip("numba.cuda")
    if not cuda.is_available():
        pytest.skip("Numba sees no GPU (its own CUDA driver binding)")
    d = gpu_arange(cp, 6.0)
    n = gpu_dlpack.convert(d, "numba")
    assert isinstance(n, cuda.devicearray.DeviceNDArray)
    assert n.__cuda_array_interface__["data"][0] == d.data.ptr
    assert n.copy_to_host().tolist() == d.get().tolist()


@pytest.mark.gpu
def test_cupy_to_torch_on_a_gpu_is_zero_copy_on_the_stream(cp, torch):
    if not torch.cuda.is_available():
        pytest.skip("a CUDA build of torch is needed")
    d = gpu_arange(cp, 6.0)
    s = torch.cuda.Stream()
    t = gpu_dlpack.convert(d, "torch", stream=s)
    assert t.data_ptr() == d.data.ptr and t.device.type == "cuda"
    h = gpu_dlpack.convert(d, "torch", device="cpu")
    assert h.tolist() == d.get().tolist()


# -- the table ---------------------------------------------------------------------


def test_the_table_by_version():
    row = _peers.by_name("torch")
    assert _peers.active_faults(row, "2.8.1") == {"legacy-only", "negative-strides"}
    assert _peers.active_faults(row, "2.13.0+cpu") == {"read-only-ignored", "negative-strides"}
    assert _peers.active_faults(_peers.by_name("numpy"), "1.26.4") == {"legacy-only"}
    assert _peers.active_faults(_peers.by_name("numpy"), "2.4.6") == frozenset()
    assert _peers.active_faults(None, "1.0") == {"read-only-unknown"}
    assert _peers.by_name("jax.numpy").name == "jax"
    assert _peers.release("2.13.0+cpu") == (2, 13, 0) and _peers.release("2.1.0rc1") == (2, 1, 0)
    assert _peers.release("") == () and _peers.release(None) == ()
    for peer in _peers.PEERS:
        assert all(f.id in _peers.FAULTS for f in peer.faults), peer.name


def test_the_landing_libraries_keep_only_the_faults_of_their_arrays():
    assert _faults.for_landing(frozenset({"legacy-only", "always-writeable"}), "gpu") == {"always-writeable"}
    assert _faults.for_landing(frozenset({"legacy-only"}), None) == {"legacy-only"}


def test_layout_tests():
    assert _faults.has_negative((6,), (-1,)) and not _faults.has_negative((1, 6), (-6, 1))
    assert not _faults.has_negative((0, 3), (-3, 1)) and not _faults.has_negative((3,), None)
    assert _faults.is_compact((3, 4), (4, 1)) and _faults.is_compact((4, 3), (1, 4))
    assert _faults.is_compact((1, 4), (32, 1)) and _faults.is_compact((2,), None)
    assert not _faults.is_compact((6,), (2,)) and not _faults.is_compact((6,), (-1,))
    assert not _faults.is_compact((4, 3), (0, 1))


def test_the_plain_case_goes_straight_through_and_gives_what_the_general_path_gives(torch):
    a = np.arange(6.0)
    fast = gpu_dlpack.convert(a, "torch")
    general = gpu_dlpack.convert(a, "torch", report=True).array
    assert fast.data_ptr() == general.data_ptr() == a.ctypes.data
    c = _convert.consumer_of("torch")
    assert c.plain(a) and not c.plain(readonly(a)) and not c.plain(a[::-1]) and c.plain(a[::2])
    assert not _convert.consumer_of("jax").plain(a[::2])


def test_the_guide_lists_every_fault_of_the_table():
    import os
    import re

    page = os.path.join(os.path.dirname(os.path.dirname(__file__)), "docs", "guide", "libraries.md")
    if not os.path.exists(page):
        pytest.skip("the suite runs from a copy of the tests without the docs (an installed wheel)")
    with open(page, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## One call to any library"):]
    section = section[:section.index("### What `wrap` cannot correct")]
    rows = set()
    for libs, fault in re.findall(r"^\| ([\w, ]+) \| `([\w-]+)`", section, re.M):
        rows |= {(lib.strip(), fault) for lib in libs.split(",")}
    table = {(p.name, f.id) for p in _peers.PEERS for f in p.faults}
    assert rows == table


# -- what a kernel requires --------------------------------------------------------

def _offset(a, alignment, past):
    raw = np.zeros(a.nbytes + 2 * alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment + past
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


@pytest.mark.parametrize("to", ["torch", "numpy", "array_api_strict", "jax"])
def test_a_requirement_the_data_does_not_meet_is_met_by_one_reported_copy(to, torch, jax, xp_strict):
    a = _offset(np.arange(8.0), 64, 8)
    done = gpu_dlpack.convert(a, to, require_alignment=64, report=True)
    got = gpu_dlpack.view(done.array)
    assert got.ptr % 64 == 0 and got.ptr != a.ctypes.data and done.copied and "gpu_dlpack" in done.copied_by
    assert done.reasons[0] == (
        "copied by gpu_dlpack: require_alignment=64, and the data started 8 bytes past a 64-byte boundary")
    t = np.arange(12.0).reshape(3, 4).T
    done = gpu_dlpack.convert(t, to, require_contiguous=True, report=True)
    assert np.asarray(gpu_dlpack.from_dlpack(done.array)).tolist() == t.tolist()
    assert any(r == "copied by gpu_dlpack: require_contiguous=True, and the strides (1, 4) of shape (4, 3) "
               "are not C order" for r in done.reasons), done.reasons
    with pytest.raises(gpu_dlpack.CopyRequiredError):
        gpu_dlpack.convert(a, to, require_alignment=64, copy=False)


def test_data_that_meets_the_requirement_is_handed_over_in_place(torch):
    a = _offset(np.arange(8.0), 64, 0)
    done = gpu_dlpack.convert(a, "torch", require_alignment=64, require_contiguous=True, report=True)
    assert done.array.data_ptr() == a.ctypes.data and done.copied is False and done.reasons == ()
    t = gpu_dlpack.convert(a, "torch", require_alignment=64, copy=False)
    assert t.data_ptr() == a.ctypes.data


def _page(*parts):
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), *parts)
    if not os.path.exists(path):
        pytest.skip("the suite runs from a copy of the tests without the docs (an installed wheel)")
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_the_first_exchange_a_reader_meets_is_the_one_that_protects_them():
    # The README's headline: its first exchange is convert, shown on data
    # (a negative stride) that the consumer's own from_dlpack over wrap
    # cannot take (torch 2.12 and 2.13 abort), and it points to what wrap
    # cannot correct.
    import re

    text = _page("README.md")
    block = re.search(r"## A first exchange.*?```python\n(.*?)```", text, re.S).group(1)
    calls = re.findall(r"gpu_dlpack\.(convert|wrap|from_dlpack|export)\(", block)
    assert calls[0] == "convert" and "wrap" not in calls
    assert re.search(r'convert\(\w+\[::-1\], "torch"\)', block)
    assert "what-wrap-cannot-correct" in text


def test_the_guide_says_which_faults_wrap_cannot_correct():
    import re

    text = _page("docs", "guide", "libraries.md")
    section = text[text.index("### What `wrap` cannot correct"):]
    section = section[:section.index("(what-producers-get-wrong)=")]
    listed = set(re.findall(r"^\| `([\w-]+)` \|", section, re.M))
    assert listed == set(_peers.FAULTS)


def test_the_guide_lists_every_producer_fault_of_the_table():
    import re

    text = _page("docs", "guide", "libraries.md")
    section = text[text.index("### What producers get wrong"):]
    rows = set()
    for libs, fault in re.findall(r"^\| ([\w, ]+) \| `([\w-]+)`", section, re.M):
        rows |= {(lib.strip(), fault) for lib in libs.split(",")}
    assert rows == {(p.name, f.id) for p in _peers.PEERS for f in p.export_faults}


def test_an_immutable_jax_array_converted_to_jax_is_returned_as_it_is(jax):
    j = jax.numpy.arange(4.0)
    assert gpu_dlpack.convert(j, "jax") is j
    done = gpu_dlpack.convert(j, "jax", report=True)
    assert done.array is j and done.copied is False and done.reasons == (
        "returned as it is: a jax array, and jax's arrays are immutable",)
    # What asks for a copy still gets one.
    copied = gpu_dlpack.convert(j, "jax", copy=True)
    assert copied is not j and copied.tolist() == j.tolist()
    # Another library's array is exchanged, as before.
    a = np.arange(4.0)
    assert gpu_dlpack.convert(a, "jax").tolist() == a.tolist()


# -- a torch subclass that answers DLPack alone -----------------------------------


def test_a_torch_subclass_that_answers_dlpack_alone_is_read_through_dlpack(torch):
    # Its attributes (is_cpu, dtype, requires_grad) raise: the torch row's
    # cheap reads do not apply to it, and each entry reads it as a producer.
    wrapper, read_only = dlpack_only_subclass(torch)
    assert _peers.of_array_type(wrapper) is None
    assert _peers.of_array_type(torch.nn.Parameter).name == _peers.of_array_type(torch.Tensor).name == "torch"
    t = torch.arange(6.0)
    w = wrapper(t)
    with pytest.raises(RuntimeError):
        w.is_cpu
    for a in (gpu_dlpack.from_dlpack(w), gpu_dlpack.from_dlpack(w, device="cpu"), gpu_dlpack.convert(w, "numpy"),
              np.from_dlpack(gpu_dlpack.wrap(w))):
        assert a.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and a.ctypes.data == t.data_ptr()
        assert a.flags.writeable is not read_only  # 2.14's wrapper exports READ_ONLY
    copied = gpu_dlpack.from_dlpack(w, copy=True)
    assert copied.flags.writeable and copied.ctypes.data != t.data_ptr()
    done = gpu_dlpack.convert(w, "torch", report=True)
    assert done.array.tolist() == t.tolist()
    if read_only:
        # torch (2.14.1) still imports READ_ONLY data writeable: a copy.
        assert done.copied_by == "gpu_dlpack" and done.array.data_ptr() != t.data_ptr()
        assert gpu_dlpack.inspect(gpu_dlpack.export(w, max_version=(1, 0))).flags & gpu_dlpack.FLAG_READ_ONLY
        with pytest.raises(gpu_dlpack.ReadOnlyError):
            gpu_dlpack.export(w)


@pytest.mark.parametrize("lib", ["numpy", "jax", "torch"])
def test_convert_to_numpy_of_a_plain_array_is_made_by_the_compiled_front(lib, request):
    # gpu_dlpack.convert(x, "numpy"), nothing else asked: what convert's
    # Python function gives (from_dlpack's view of a NumPy array, the import
    # of another library's CPU data), made in the core without entering it.
    if lib == "numpy":
        x = np.arange(6.0)
    else:
        mod = request.getfixturevalue(lib)
        x = mod.numpy.arange(6.0) if lib == "jax" else mod.arange(6.0)
    general = core.general("convert").__code__  # the Python functions the core calls
    importer = core.general("from_dlpack").__code__
    entered = []
    sys.setprofile(lambda frame, event, arg: event == "call" and entered.append(frame.f_code))
    try:
        gpu_dlpack.from_dlpack(x)
        core_imports = importer not in entered  # (not JAX's on NumPy before 2.4, whose layout differs)
        entered.clear()
        got = gpu_dlpack.convert(x, "numpy")
    finally:
        sys.setprofile(None)
    assert (general not in entered) is core_imports
    assert core_imports or lib == "jax"
    want = core.general("convert")(x, "numpy")  # the Python function itself
    assert type(got) is type(want) is np.ndarray and got.ctypes.data == want.ctypes.data
    assert (got.flags.writeable, got.dtype, got.shape, got.strides) == (
        want.flags.writeable, want.dtype, want.shape, want.strides)
    # Anything else asked: the Python function.
    entered.clear()
    sys.setprofile(lambda frame, event, arg: event == "call" and entered.append(frame.f_code))
    try:
        gpu_dlpack.convert(x, "numpy", copy=True)
    finally:
        sys.setprofile(None)
    assert general in entered


# -- consumers that cannot hold the data's memory ---------------------------------

def _holds_gpu(library) -> bool:
    """Whether ``library`` (imported) can hold GPU memory here, asked as a
    user would, apart from the row the layer reads."""
    if library.__name__ == "torch":
        return bool(library.cuda.is_available())
    try:
        return bool(library.devices("gpu"))
    except RuntimeError:
        return False


@pytest.mark.parametrize("library", ["torch", "jax"])
@pytest.mark.parametrize("versioned", [True, False])
def test_gpu_data_for_a_consumer_that_holds_no_gpu_memory_is_refused_before_it_is_called(library, versioned, request):
    module = request.getfixturevalue(library)
    if _holds_gpu(module):
        pytest.skip(f"{library} holds GPU memory here")
    from .capsules import DeviceProducer

    p = DeviceProducer(versioned=versioned)
    with pytest.raises(gpu_dlpack.DeviceUnreachableError, match=f"^convert\\(x, '{library}'\\): .*cuda:0") as err:
        gpu_dlpack.convert(p, library)
    assert not p.requests  # the consumer was not called: it would have asked the producer
    (m,) = gpu_dlpack.explain(err.value)
    assert m.id == "gpu_dlpack-consumer-no-gpu" and "device='cpu'" in m.remedies[0]


def test_what_a_consumer_holds_is_asked_of_its_row_before_the_call():
    # The row's probe decides, for GPU memory only: host data is never refused.
    cuda, cpu = gpu_dlpack.Device("cuda:0"), gpu_dlpack.Device("cpu")
    with pytest.raises(gpu_dlpack.DeviceUnreachableError, match="lib 1.0 cannot hold memory of cuda:0 here"):
        _faults.before_call("lib", "1.0", frozenset(), cuda, lambda: False)
    _faults.before_call("lib", "1.0", frozenset(), cuda, lambda: True)
    _faults.before_call("lib", "1.0", frozenset(), cpu, lambda: False)
    _faults.before_call("lib", "1.0", frozenset(), cuda, None)  # not known: the consumer is called


def test_the_rows_of_torch_and_jax_say_how_they_know_they_hold_gpu_memory():
    assert _peers.by_name("torch").holds_gpu is not None and _peers.by_name("jax").holds_gpu is not None


# -- a producer that contradicts itself ----------------------------------------------

def _disagreeing(said, gives):
    from .capsules import KeywordDeviceProducer

    return KeywordDeviceProducer(device=said, answers=gives)


_EVERY_PATH = {
    "from_dlpack": gpu_dlpack.from_dlpack,
    "copy=True": lambda p: gpu_dlpack.from_dlpack(p, copy=True),
    "wrap": lambda p: gpu_dlpack.wrap(p).__dlpack__(max_version=(1, 0)),
    "export": gpu_dlpack.export,
    "export legacy": lambda p: gpu_dlpack.export(p, max_version=None),
    "view": gpu_dlpack.view,
    "convert numpy": lambda p: gpu_dlpack.convert(p, "numpy"),
    "convert torch": lambda p: gpu_dlpack.convert(p, "torch"),
}


@pytest.mark.parametrize("path", sorted(_EVERY_PATH))
def test_a_producer_whose_device_and_capsule_disagree_is_refused_by_name_on_every_path(path, torch):
    # Said the CPU, gave a capsule of a GPU: every path asks it for its
    # capsule, and every one names the contradiction.
    p = _disagreeing((1, 0), (2, 0))
    with pytest.raises(BufferError, match=r"__dlpack_device__ says its array is on cpu, but its capsule holds "
                       r"memory on cuda:0") as err:
        _EVERY_PATH[path](p)
    assert isinstance(err.value, gpu_dlpack.GpuDlpackError)
    assert all(r.calls == 1 for r in p.records)  # each capsule refused is freed
    (m,) = gpu_dlpack.explain(err.value)
    assert m.id == "gpu_dlpack-device-mismatch"


@pytest.mark.parametrize("path", ["wrap", "export", "export legacy", "view"])
def test_a_producer_that_says_a_gpu_and_gives_host_memory_is_refused_by_name(path, torch):
    # Said cuda:0, gave a CPU capsule, asked for its own device: not the
    # "cannot move from cuda:0 to cuda:0" of a move nobody asked for.
    if not _no_gpu():
        pytest.skip("a GPU is usable: the import paths reach the capsule there")
    p = _disagreeing((2, 0), (1, 0))
    with pytest.raises(BufferError, match=r"__dlpack_device__ says its array is on cuda:0, but its capsule "
                       r"holds memory on cpu"):
        _EVERY_PATH[path](p)
    assert all(r.calls == 1 for r in p.records)


def test_a_change_to_the_rows_reaches_convert_s_compiled_front(monkeypatch):
    # The libraries whose plain cases the compiled front of convert makes
    # (NumPy's) were told to the core once, and the consumers convert read
    # were kept apart from the rows: a row changed afterwards was not seen,
    # whatever forget() was called, and the front went on making a view.
    from gpu_dlpack import _peers, _wiring

    src = np.arange(6.0)  # C-contiguous, plain: the front's own case
    assert np.shares_memory(gpu_dlpack.convert(src, "numpy"), src)
    assert not np.shares_memory(gpu_dlpack.convert(src, "numpy", copy=True), src)  # the Python function's
    numpy_row = next(p for p in _peers.PEERS if p.name == "numpy")
    # NumPy's row as a library whose own from_dlpack convert calls, with a
    # fault of that importer for convert to act on.
    changed = numpy_row._replace(lands=None, faults=(_peers.Fault("narrows-float64"),))
    monkeypatch.setattr(_peers, "PEERS", tuple(changed if p is numpy_row else p for p in _peers.PEERS))
    _wiring.forget()
    try:
        for kw in ({}, {"copy": True}):  # the front's case and the Python function's
            with pytest.raises(gpu_dlpack.DtypeChangeError):
                gpu_dlpack.convert(src, "numpy", **kw)
    finally:
        monkeypatch.undo()
        _wiring.forget()
    assert np.shares_memory(gpu_dlpack.convert(src, "numpy"), src)
