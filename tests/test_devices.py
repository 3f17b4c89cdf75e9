"""The device abstraction: DLPack device types and the Device value."""

import pickle

import numpy as np
import pytest

from gpu_dlpack import Device, DLDeviceType
from gpu_dlpack import _devices

SPEC_TYPES = {
    "CPU": 1, "CUDA": 2, "CUDA_HOST": 3, "OPENCL": 4, "VULKAN": 7, "METAL": 8, "VPI": 9,
    "ROCM": 10, "ROCM_HOST": 11, "EXT_DEV": 12, "CUDA_MANAGED": 13, "ONEAPI": 14,
    "WEBGPU": 15, "HEXAGON": 16, "MAIA": 17, "TRN": 18,
}


def test_device_type_enum_has_every_spec_type():
    assert {t.name: int(t) for t in DLDeviceType} == SPEC_TYPES


@pytest.mark.parametrize(
    "spec, dlpack, text",
    [
        ("cpu", (1, 0), "cpu"),
        ("cuda", (2, 0), "cuda:0"),
        ("cuda:1", (2, 1), "cuda:1"),
        ("CUDA:3", (2, 3), "cuda:3"),
        ("rocm:0", (10, 0), "rocm:0"),
        ("cuda_host", (3, 0), "cuda_host"),
        ("cuda_managed", (13, 0), "cuda_managed"),
        ("rocm_host", (11, 0), "rocm_host"),
        ((2, 1), (2, 1), "cuda:1"),
        ([1, 0], (1, 0), "cpu"),
        (DLDeviceType.CUDA_HOST, (3, 0), "cuda_host"),
        ("oneapi:2", (14, 2), "oneapi:2"),
    ],
)
def test_device_names_map_to_dlpack_types(spec, dlpack, text):
    d = Device(spec)
    assert d.dlpack == dlpack
    assert all(type(v) is int for v in d.dlpack)
    assert d.type == DLDeviceType(dlpack[0]) and isinstance(d.type, DLDeviceType)
    assert d.index == dlpack[1]
    assert str(d) == text
    assert Device(str(d)) == d
    assert repr(d) == f"Device({text!r})"


def test_device_is_immutable_hashable_and_picklable():
    d = Device("cuda:1")
    with pytest.raises(AttributeError):
        d.index = 2
    assert hash(d) == hash(Device((2, 1)))
    assert len({Device("cpu"), Device((1, 0)), Device(DLDeviceType.CPU)}) == 1
    assert pickle.loads(pickle.dumps(d)) == d
    assert Device(d) is d
    assert d != Device("cuda:0") and d != (2, 1)


@pytest.mark.parametrize("bad", ["tpu", "cuda:x", "cuda:-1", "cpu:1", "", (99, 0), (2,), (2, -1), (True, 0)])
def test_a_bad_device_is_a_value_error_listing_the_accepted_forms(bad):
    with pytest.raises(ValueError, match="Accepted forms: 'cpu', 'cuda', 'cuda:N'"):
        Device(bad)


@pytest.mark.parametrize("bad", [1.5, None, object()])
def test_a_device_of_the_wrong_type_is_a_type_error(bad):
    with pytest.raises(TypeError):
        Device(bad)


def test_an_array_is_not_a_device_but_device_of_reads_it():
    a = np.zeros(3)
    with pytest.raises(TypeError, match="Device.of"):
        Device(a)
    assert Device.of(a) == Device("cpu")


def test_device_from_torch(torch):
    assert Device(torch.device("cpu")) == Device("cpu")
    assert Device(torch.device("cuda", 1)) == Device("cuda:1")
    assert Device(torch.device("cuda")) == Device("cuda:0")
    assert Device.of(torch.zeros(2)) == Device("cpu")
    with pytest.raises(ValueError):
        Device(torch.device("meta"))


def test_device_from_jax(jax):
    dev = jax.devices("cpu")[0]
    assert Device(dev) == Device("cpu")
    assert Device.of(jax.numpy.zeros(2)) == Device("cpu")


def test_device_from_cupy():
    cupy = pytest.importorskip("cupy")
    expected = 10 if _devices.cupy_is_rocm() else 2
    assert Device(cupy.cuda.Device(1)).dlpack == (expected, 1)


def test_cuda_names_map_to_rocm_types_on_a_rocm_build(monkeypatch):
    monkeypatch.setattr(_devices, "cupy_is_rocm", lambda: True)
    assert Device("cuda:1").dlpack == (10, 1)
    assert Device("cuda_host").type == DLDeviceType.ROCM_HOST
    assert Device("cuda_managed").type == DLDeviceType.CUDA_MANAGED
    assert Device((2, 0)).type == DLDeviceType.CUDA  # an explicit type is kept


def test_device_of_an_object_without_dlpack_is_a_type_and_attribute_error():
    with pytest.raises(TypeError, match="does not support DLPack"):
        Device.of([1, 2, 3])
    with pytest.raises(AttributeError):
        Device.of(object())


def test_host_accessible_device_types():
    assert Device("cpu").is_host_accessible and Device("cuda_host").is_host_accessible
    assert Device("cuda_managed").is_host_accessible
    assert not Device("cuda:0").is_host_accessible and not Device("rocm:0").is_host_accessible
