"""``convert`` to MLX and of dask arrays, with the real libraries (each
test skipped where its library is not installed).

- MLX imports with ``mlx.core.from_dlpack``, always by a copy of its own;
  it raises on a negative stride (the layer copies) and holds float64 as
  float32 and complex128 as complex64 (the layer refuses: DtypeChangeError).
- tvm-ffi asks for legacy capsules and imports READ_ONLY ones writeable:
  read-only data goes over as a copy.
- A dask array converted to NumPy or CuPy stays a dask array, each chunk
  converted when computed; to any other library, the computed array.
"""

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _peers


def _values(x):
    return np.asarray(gpu_dlpack.from_dlpack(x)).tolist()


@pytest.mark.parametrize("to", ["mlx", "mlx.core"])
def test_convert_to_mlx(mx, to):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    done = gpu_dlpack.convert(a, to, report=True)
    assert isinstance(done.array, mx.array) and _values(done.array) == a.tolist()
    assert done.copied and done.copied_by == "mlx"


@pytest.mark.parametrize("dtype", [
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
    "complex64",
])
def test_every_dtype_mlx_has_keeps_its_values(mx, dtype):
    a = np.array([2**40, 3] if dtype in ("int64", "uint64") else [1, 0, 1]).astype(dtype)
    m = gpu_dlpack.convert(a, "mlx")
    assert np.array(m).dtype == a.dtype and np.array(m).tolist() == a.tolist()


@pytest.mark.parametrize("layout", ["negative", "stepped", "transposed"])
def test_every_layout_reaches_mlx(mx, layout):
    base = np.arange(12, dtype=np.float32)
    a = {"negative": base[::-1], "stepped": base[::2], "transposed": base.reshape(3, 4).T}[layout]
    assert np.array(gpu_dlpack.convert(a, "mlx")).tolist() == a.tolist()


@pytest.mark.parametrize("wide", ["float64", "complex128"])
def test_mlx_never_narrows_silently(mx, wide):
    a = np.array([1e300, 0.1]).astype(wide)
    assert "narrows-float64" in _peers.active_faults(_peers.by_name("mlx"), gpu_dlpack._convert.consumer_of("mlx").version)
    with pytest.raises(gpu_dlpack.DtypeChangeError, match="astype"):
        gpu_dlpack.convert(a, "mlx")
    with pytest.raises(gpu_dlpack.DtypeChangeError):
        gpu_dlpack.convert(a[::-1], "mlx")  # the general path, through MLX's TypeError
    narrow = "float32" if wide == "float64" else "complex64"
    assert np.array(gpu_dlpack.convert(np.array([0.5]).astype(narrow), "mlx")).dtype == narrow


def test_mlx_copies_always(mx):
    with pytest.raises(gpu_dlpack.CopyRequiredError):
        gpu_dlpack.convert(np.arange(3, dtype=np.float32), "mlx", copy=False)


def test_mlx_arrays_as_producers(mx):
    m = mx.array([[1, 2], [3, 4]], dtype=mx.int32)
    assert gpu_dlpack.from_dlpack(m).tolist() == [[1, 2], [3, 4]]


def test_convert_of_a_dask_array_to_numpy_is_lazy_and_zero_copy(da):
    a = np.arange(10.0)
    d = da.from_array(a, chunks=4)
    chunks, converted = [], []

    def recorder(into):
        def record(block):
            if block.size:  # dask calls it on an empty block for its meta
                into.append(block)
            return block
        return record

    out = gpu_dlpack.convert(d.map_blocks(recorder(chunks), dtype=d.dtype), "numpy")
    assert isinstance(out, type(d)) and out.chunks == d.chunks and chunks == []  # nothing computed yet
    assert out.map_blocks(recorder(converted), dtype=d.dtype).compute().tolist() == a.tolist()
    assert len(chunks) == len(converted) == 3
    assert all(any(np.shares_memory(c, o) for c in chunks) for o in converted)  # each chunk zero-copy


def test_convert_of_a_read_only_dask_array(da):
    a = np.arange(6.0)
    a.flags.writeable = False
    out = gpu_dlpack.convert(da.from_array(a, chunks=3), "numpy").compute()
    assert out.tolist() == a.tolist()


@pytest.mark.parametrize("to", ["torch", "jax", "array_api_strict", "mlx"])
def test_convert_of_a_dask_array_to_another_library_is_the_computed_array(da, to):
    pytest.importorskip(to.partition(".")[0])
    d = da.from_array(np.arange(8, dtype=np.float32).reshape(2, 4), chunks=(1, 2))[:, ::-1]
    done = gpu_dlpack.convert(d, to, report=True)
    assert _values(done.array) == d.compute().tolist()


def test_a_dask_array_with_report(da):
    done = gpu_dlpack.convert(da.from_array(np.arange(4.0), chunks=2), "numpy", report=True)
    assert done.library == "numpy" and done.array.compute().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_convert_to_tvm_ffi_copies_read_only_data_and_shares_the_rest():
    tvm_ffi = pytest.importorskip("tvm_ffi")
    a = np.arange(6.0)
    t = gpu_dlpack.convert(a, "tvm_ffi")
    assert type(t) is tvm_ffi.Tensor and np.from_dlpack(t).ctypes.data == a.ctypes.data
    a.flags.writeable = False
    with pytest.raises(BufferError):
        tvm_ffi.from_dlpack(a)  # it asks for a legacy capsule, which cannot say read-only
    # Through wrap's C exchange API it takes the versioned capsule, READ_ONLY,
    # and holds it writeable (its fault "read-only-ignored": convert copies).
    assert np.from_dlpack(tvm_ffi.from_dlpack(gpu_dlpack.wrap(a))).flags.writeable
    done = gpu_dlpack.convert(a, "tvm_ffi", report=True)
    got = np.from_dlpack(done.array)
    assert got.tolist() == a.tolist() and got.ctypes.data != a.ctypes.data and done.copied
    assert done.faults == ("read-only-ignored",)
    with pytest.raises(gpu_dlpack.ReadOnlyError):
        gpu_dlpack.convert(a, "tvm_ffi", copy=False)
    assert _values(done.array) == a.tolist()  # a tvm-ffi Tensor as a producer


@pytest.mark.parametrize("call", ["from_dlpack", "wrap", "export", "Device.of"])
def test_a_dask_array_handed_to_dlpack_is_told_to_compute_or_convert(da, call):
    # No DLPack of its own: the error names the two ways its values go over.
    d = da.from_array(np.arange(4.0), chunks=2)
    fn = {"from_dlpack": gpu_dlpack.from_dlpack, "wrap": gpu_dlpack.wrap, "export": gpu_dlpack.export,
          "Device.of": gpu_dlpack.Device.of}[call]
    with pytest.raises(gpu_dlpack.NotDLPackError, match=r"lazy array of chunks.*x\.compute\(\).*gpu_dlpack\.convert"):
        fn(d)


def test_the_dask_row_says_what_convert_maps_over(da):
    peer = _peers.of_array_type(type(da.from_array(np.arange(2.0))))
    assert peer is not None and peer.name == "dask" and peer.consumer == ()
    assert peer.chunks == _peers.Chunks("map_blocks", "compute", ("numpy", "cupy"))
