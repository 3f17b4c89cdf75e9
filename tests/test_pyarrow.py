"""pyarrow as a producer, with the real library: its arrays of values without
nulls export immutable host memory, flagged READ_ONLY in versioned capsules
only (``read-only-legacy-export`` in its row of ``_peers``), and take
``stream=None`` alone. pyarrow imports no DLPack: it is no consumer."""

import warnings

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _peers

pa = pytest.importorskip("pyarrow")


def _data(a) -> int:
    return a.buffers()[1].address + a.offset * a.type.bit_width // 8


def test_every_array_class_of_pyarrow_is_its_row():
    for a in (pa.array([1, 2], pa.int64()), pa.array([1.5], pa.float32()), pa.array([True])):
        assert _peers.of_array_type(type(a)).name == "pyarrow"
        assert _peers.export_facts(type(a)).read_only


def test_a_versioned_export_is_zero_copy_and_read_only():
    a = pa.array([1, 2, 3], pa.int64())
    info = gpu_dlpack.inspect(gpu_dlpack.export(a, max_version=(1, 0)))
    assert info.versioned and info.flags & gpu_dlpack.FLAG_READ_ONLY and info.data == _data(a)
    b = gpu_dlpack.from_dlpack(a)
    assert b.tolist() == [1, 2, 3] and b.ctypes.data == _data(a) and not b.flags.writeable


def test_a_legacy_export_of_its_immutable_data_is_refused_unless_copied():
    # pyarrow's own legacy capsule says nothing of READ_ONLY: a consumer
    # would write into Arrow's immutable buffers.
    a = pa.array([1, 2, 3], pa.int64())
    assert gpu_dlpack.inspect(a.__dlpack__()).flags == 0  # the fault, as pyarrow has it
    with pytest.raises(gpu_dlpack.ReadOnlyError, match="legacy"):
        gpu_dlpack.export(a)
    copied = gpu_dlpack.inspect(gpu_dlpack.export(a, copy=True))
    assert copied.data != _data(a)
    assert gpu_dlpack.from_dlpack(gpu_dlpack.export(a, copy=True)).tolist() == [1, 2, 3]


def test_a_slice_keeps_its_offset():
    a = pa.array(np.arange(10, dtype=np.int32)).slice(3, 4)
    b = gpu_dlpack.from_dlpack(a)
    assert b.tolist() == [3, 4, 5, 6] and b.ctypes.data == _data(a)


@pytest.mark.parametrize("to", ["numpy", "torch"])
def test_convert_holds_the_values_and_never_a_writeable_view(to):
    pytest.importorskip(to)
    a = pa.array([1.5, -2.0, 3.25], pa.float64())
    out = gpu_dlpack.convert(a, to)
    values = np.asarray(out)
    assert values.tolist() == [1.5, -2.0, 3.25] and values.dtype == np.float64
    if to == "numpy":
        assert values.ctypes.data == _data(a) and not values.flags.writeable
    else:  # torch writes through READ_ONLY: handed a copy
        assert values.ctypes.data != _data(a)


def test_an_array_with_nulls_is_pyarrows_own_refusal_passed_on():
    # pyarrow's error says all there is to say: passed on unchanged, as the
    # layer does where it has nothing to add (docs/api/errors.md).
    # (pyarrow 26 also warns that the legacy capsule asked again is deprecated.)
    a = pa.array([1, None], pa.int64())
    with warnings.catch_warnings(), pytest.raises(pa.ArrowTypeError, match="no nulls"):
        warnings.simplefilter("ignore", DeprecationWarning)
        gpu_dlpack.from_dlpack(a)


def test_a_subclass_of_a_peers_array_is_its_row():
    torch = pytest.importorskip("torch")
    assert _peers.of_array_type(torch.nn.Parameter).name == "torch"
    assert _peers.of_array_type(np.ndarray) is None  # NumPy's arrays are the layer's own


def test_pyarrow_is_no_convert_target():
    with pytest.raises(TypeError, match="a producer only"):
        gpu_dlpack.convert(np.arange(3), "pyarrow")
