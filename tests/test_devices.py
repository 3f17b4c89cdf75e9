"""The device abstraction: DLPack device types and the Device value."""

import pickle

import numpy as np
import pytest

from gpu_dlpack import Device, DLDeviceType
from gpu_dlpack import _devices

SPEC_TYPES = {
    "CPU": 1, "CUDA": 2, "CUDA_HOST": 3, "OPENCL": 4, "VULKAN": 7, "METAL": 8, "VPI": 9,
    "ROCM": 10, "ROCM_HOST": 11, "EXT_DEV": 12, "CUDA_MANAGED": 13, "ONEAPI": 14,
    "WEBGPU": 15, "HEXAGON": 16, "MAIA": 17, "TRN": 18, "TPU": 19, "TPU_HOST": 20, "ASCEND": 21,
}


def test_device_type_enum_has_every_spec_type():
    assert {t.name: int(t) for t in DLDeviceType} == SPEC_TYPES


@pytest.mark.parametrize("code", [5, 6, 22, 40, 2**31 - 1])
def test_a_device_type_dlpack_h_does_not_name_yet_is_a_device_named_by_its_number(code):
    # DLPack adds device types within a version (TPU, TPU_HOST and ASCEND
    # came with the minor version unchanged): each code from 1 up is one.
    t = DLDeviceType(code)
    assert isinstance(t, DLDeviceType) and t == code and t.name == str(code)
    assert DLDeviceType(code) is t
    d = Device((code, 2))
    assert d.type is t and d.dlpack == (code, 2) and str(d) == f"{code}:2"
    assert Device(str(d)) == d and Device(f"{code}:2") == d
    assert pickle.loads(pickle.dumps(d)) == d
    assert not d.is_host_accessible
    assert t not in list(DLDeviceType)  # the named members stay the ones dlpack.h names


def test_the_tpu_is_dlpacks_tpu_type():
    assert Device((19, 0)) == Device("tpu:0") == Device("tpu") and str(Device((19, 0))) == "tpu:0"
    assert Device((20, 0)).type is DLDeviceType.TPU_HOST and Device("ascend:1").dlpack == (21, 1)


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


@pytest.mark.parametrize(
    "bad", ["xpu", "cuda:x", "cuda:-1", "cpu:1", "", (0, 0), (-1, 0), (2**31, 0), "0:0", "-3:0", (2,), (2, -1), (True, 0)]
)
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
