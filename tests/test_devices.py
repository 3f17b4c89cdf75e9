"""The device abstraction: DLPack device types and the Device value."""

import importlib.util
import pickle

import numpy as np
import pytest

import gpu_dlpack
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
    # Equal, not the same object: an unnamed code is made at each use (kept,
    # every code ever read would stay in the enum for the process's life).
    assert DLDeviceType(code) == t and hash(DLDeviceType(code)) == hash(code) and repr(DLDeviceType(code)) == repr(t)
    d = Device((code, 2))
    assert d.type == t and type(d.type) is DLDeviceType and d.dlpack == (code, 2) and str(d) == f"{code}:2"
    assert Device(str(d)) == d and Device(f"{code}:2") == d
    assert pickle.loads(pickle.dumps(d)) == d
    assert not d.is_host_accessible
    assert t not in list(DLDeviceType)  # the named members stay the ones dlpack.h names


def test_device_type_codes_are_integers_whatever_was_seen_before():
    # A float or a string equal to a code was refused in a fresh process and
    # taken once that code had been made (the enum's own lookup by value), and
    # 2.0 was always CUDA.
    from .interpreter import run_python

    done = run_python(
        "from gpu_dlpack import DLDeviceType\n"
        "def read(v):\n"
        "    try:\n"
        "        return repr(DLDeviceType(v))\n"
        "    except ValueError:\n"
        "        return 'refused'\n"
        "print(read(40.0), read(2.0), read('2'), read(True))\n"
        "DLDeviceType(40)\n"
        "print(read(40.0), read(2.0), read('40'), read(False))\n"
        "import numpy as np\n"
        "print(read(np.int32(40)), read(np.int64(2)))\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "refused refused refused refused", "refused refused refused refused",
        "<DLDeviceType.40: 40> <DLDeviceType.CUDA: 2>",
    ]


def test_device_type_codes_read_are_not_kept():
    # Every code seen became a member for the life of the process (20,000
    # codes: about 7 MB).
    before = dict(DLDeviceType._value2member_map_)
    for code in range(100, 20100):
        assert DLDeviceType(code).name == str(code) and Device((code, 1)).dlpack == (code, 1)
    assert DLDeviceType._value2member_map_ == before and len(_devices._BY_PAIR) <= 256


@pytest.mark.parametrize("pair", [(1, 0), (1, 5), (3, 0), (3, 2), (13, 1), (2, 0), (2, 7), (10, 3), (19, 0), (40, 3)])
def test_a_device_prints_what_parses_back_to_it(pair):
    # Device((1, 5)) printed 'cpu:5', which Device() refused.
    d = Device(pair)
    assert Device(str(d)) == d and eval(repr(d), {"Device": Device}) == d and d.dlpack == pair


@pytest.mark.parametrize("pair", [(2.9, 0), ("40", 0), ("2", 0), (2.0, 0), (2, 0.0), (np.float64(2), 0)])
def test_a_pair_of_anything_but_integers_is_no_device(pair):
    # (2.9, 0) was read as cuda:0, ("40", 0) as 40:0.
    with pytest.raises(ValueError, match="cannot read a device"):
        Device(pair)


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
    "bad", ["xpu", "cuda:x", "cuda:-1", "cpu:x", "", (0, 0), (-1, 0), (2**31, 0), "0:0", "-3:0", (2,), (2, -1), (True, 0)]
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


def test_a_deleted_jax_array_is_refused_in_jaxs_own_words_on_every_entry(jax):
    # A deleted array keeps its one device, so it passes JAX's host test;
    # its __dlpack__ then says it is deleted (platform() of it would end the
    # process, and __dlpack_device__ fails on a len() of None).
    entries = [gpu_dlpack.from_dlpack, lambda x: gpu_dlpack.convert(x, "numpy"),
               lambda x: gpu_dlpack.export(x, max_version=(1, 0)), lambda x: gpu_dlpack.export(x),
               lambda x: np.from_dlpack(gpu_dlpack.wrap(x))]
    if importlib.util.find_spec("torch") is not None:
        entries.append(lambda x: gpu_dlpack.convert(x, "torch"))
    for call in entries:
        x = jax.numpy.arange(4.0)
        x.delete()
        with pytest.raises(BufferError, match=r"ArrayImpl\.__dlpack__ refused the export: RuntimeError: "
                                              r"Array has been deleted with shape=float\d+\[4\]\. That is"):
            call(x)


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


def test_serving_a_new_device_type_on_the_host_is_one_row_of_the_table(tmp_path):
    # Where the change goes (docs/internals/layout.md): one row of
    # _devices.MEMORY. Two copies of the package, one with TPU host memory
    # added there as host memory: it imports a TPU_HOST capsule zero-copy
    # as NumPy (from_dlpack, device="cpu", convert), which the other refuses.
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import gpu_dlpack

    row = '    _T.ROCM_HOST: Memory("rocm", host=True, gpu=True, indexed=False, array="numpy"),  # pinned\n'
    new = '    _T.TPU_HOST: Memory(None, host=True, gpu=False, indexed=False, array="numpy"),\n'
    script = """
import numpy as np
import gpu_dlpack
from tests import capsules

a = np.arange(6.0)
try:
    x = gpu_dlpack.from_dlpack(capsules.make(a, device=(20, 0))[0])
except BufferError as exc:
    print("refused:", exc)
    raise SystemExit(0)
assert type(x) is np.ndarray and x.ctypes.data == a.ctypes.data and x.tolist() == a.tolist()
p = capsules.Producer(capsules.make(a, device=(20, 0))[0], device=(20, 0))
assert gpu_dlpack.from_dlpack(p, device="cpu").ctypes.data == a.ctypes.data
assert gpu_dlpack.Device("tpu_host").is_host_accessible
c = gpu_dlpack.convert(capsules.Producer(capsules.make(a, device=(20, 0))[0], device=(20, 0)), "numpy")
assert c.ctypes.data == a.ctypes.data
print("served")
"""
    root = Path(__file__).resolve().parent.parent
    said = {}
    for served in (False, True):
        home = tmp_path / str(served)
        pkg = home / "gpu_dlpack"
        shutil.copytree(Path(gpu_dlpack.__file__).parent, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.c"))
        src = (pkg / "_devices.py").read_text()
        assert row in src
        if served:
            (pkg / "_devices.py").write_text(src.replace(row, row + new))
        env = {**os.environ, "PYTHONPATH": f"{home}{os.pathsep}{root}"}
        done = subprocess.run([sys.executable, "-c", script], cwd=home, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        said[served] = done.stdout.strip()
    assert said[True] == "served"
    assert said[False].startswith("refused: no backend can hold an array on tpu_host:0"), said[False]


def test_a_pair_whose_code_is_an_int_enum_is_read_as_the_int_pair():
    # torch's __dlpack_device__ answers (its DLDeviceType member, id): read
    # by the pairs' cache like (1, 0), not parsed again at each exchange
    # (2 us, where the cache takes 0.2); a float equal to a code is not.
    cpu = Device((1, 0))
    assert Device((DLDeviceType.CPU, 0)) is cpu
    torch = pytest.importorskip("torch")
    assert Device(torch.arange(2.0).__dlpack_device__()) is cpu
    with pytest.raises(ValueError):
        Device((1.0, 0))
