"""TensorFlow through the layer, both ways, with the real library (in a
process of its own: tests/test_peers_apart.py runs this file, since
TensorFlow and Paddle in one process have crashed).

- As a consumer it imports only legacy capsules, through
  ``tf.experimental.dlpack.from_dlpack(capsule)`` (an object with
  ``__dlpack__`` is a TypeError), and refuses every layout but C order
  ("Invalid strides array from DLPack"): ``convert`` hands it the legacy
  capsule, read-only data copied, other layouts made C order by a copy.
- As a producer its tensors give legacy capsules whatever ``max_version``
  asks, of immutable data.
"""

import os

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _peers

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")


def _shares(t, a) -> bool:
    return gpu_dlpack.view(t).ptr == a.ctypes.data


def test_its_importer_takes_a_legacy_capsule_only():
    a = np.arange(3.0)
    with pytest.raises(TypeError):
        tf.experimental.dlpack.from_dlpack(gpu_dlpack.wrap(a))
    assert tf.experimental.dlpack.from_dlpack(gpu_dlpack.export(a, max_version=None)).numpy().tolist() == [0, 1, 2]
    assert {"legacy-only", "non-compact-strides", "c-order-only"} <= _peers.active_faults(
        _peers.by_name("tensorflow"), tf.__version__)


@pytest.mark.parametrize("to", ["tensorflow", "tensorflow.experimental.dlpack"])
def test_convert_of_a_plain_array_shares_it(to):
    a = np.arange(6.0)
    t = gpu_dlpack.convert(a, to)
    assert isinstance(t, tf.Tensor) and t.numpy().tolist() == a.tolist()
    assert _shares(t, a)


@pytest.mark.parametrize("dtype", [
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
])
def test_every_dtype_keeps_its_values(dtype):
    a = (np.arange(5) % 2).astype(dtype) if dtype == "bool" else np.arange(5).astype(dtype)
    t = gpu_dlpack.convert(a, "tensorflow")
    assert t.dtype.as_numpy_dtype == a.dtype and t.numpy().tolist() == a.tolist()


@pytest.mark.parametrize("layout", ["negative", "stepped", "transposed"])
def test_a_layout_it_refuses_is_copied(layout):
    base = np.arange(12.0)
    a = {"negative": base[::-1], "stepped": base[::2], "transposed": base.reshape(3, 4).T}[layout]
    with pytest.raises(Exception, match="strides"):
        tf.experimental.dlpack.from_dlpack(gpu_dlpack.export(a, max_version=None))
    done = gpu_dlpack.convert(a, "tensorflow", report=True)
    assert done.array.numpy().tolist() == a.tolist() and done.copied
    with pytest.raises(gpu_dlpack.CopyRequiredError):
        gpu_dlpack.convert(a, "tensorflow", copy=False)


def test_read_only_data_is_copied_or_refused():
    r = np.arange(3.0)
    r.flags.writeable = False
    done = gpu_dlpack.convert(r, "tensorflow", report=True)
    assert done.array.numpy().tolist() == [0.0, 1.0, 2.0] and done.copied and not _shares(done.array, r)
    with pytest.raises(gpu_dlpack.ReadOnlyError):
        gpu_dlpack.convert(r, "tensorflow", on_readonly="refuse")


def test_zero_d_and_empty_arrays():
    assert gpu_dlpack.convert(np.array(2.5), "tensorflow").numpy() == 2.5
    assert gpu_dlpack.convert(np.zeros((0, 3)), "tensorflow").shape == (0, 3)


def test_its_tensors_give_legacy_capsules_of_immutable_data():
    t = tf.constant([1.0, 2.0])
    cap = t.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" not in repr(cap)
    a = gpu_dlpack.from_dlpack(t)
    assert a.tolist() == [1.0, 2.0] and not a.flags.writeable
    assert gpu_dlpack.inspect_capsule(gpu_dlpack.wrap(t).__dlpack__(max_version=(1, 0))).readonly


@pytest.mark.parametrize("to", ["numpy", "torch", "jax"])
def test_convert_of_a_tensor(to):
    pytest.importorskip(to)
    t = tf.constant([[1, 2], [3, 4]], dtype=tf.int32)
    got = gpu_dlpack.convert(t, to)
    assert np.asarray(gpu_dlpack.from_dlpack(got)).tolist() == [[1, 2], [3, 4]]


def test_a_legacy_export_of_a_tensor_is_refused_unless_copied():
    # Its tensors are immutable (immutable-unflagged): a legacy capsule,
    # which cannot say so, is refused (rule 5), and a copy is writeable.
    t = tf.constant([1.0, 2.0])
    with pytest.raises(gpu_dlpack.ReadOnlyError):
        gpu_dlpack.export(t, max_version=None)
    a = gpu_dlpack.from_dlpack(gpu_dlpack.export(t, max_version=None, copy=True))
    assert a.tolist() == [1.0, 2.0]
