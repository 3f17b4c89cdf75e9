"""The rules for GPU memory (which moves are zero-copy, which copies exist,
read-only imports) and what happens with CuPy installed but no GPU. All of it
runs without a GPU; the exchanges themselves are in test_gpu.py."""

import re
import subprocess
import sys
import weakref

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import Device, DLDeviceType, export, from_dlpack, inspect, wrap
from gpu_dlpack import _backends, _capsule, _rules

T = DLDeviceType


def _no_gpu():
    from gpu_dlpack._backends import cupy as cupy_backend

    return not cupy_backend.device_count()


yes = lambda source, target: True  # noqa: E731  (hardware that maps everything)
no = lambda source, target: False  # noqa: E731


# -- zero-copy moves -----------------------------------------------------------

@pytest.mark.parametrize("source", ["cpu", "cuda_host", "rocm_host", "cuda_managed"])
def test_host_readable_memory_reaches_the_cpu_without_a_copy(source):
    assert _rules.zero_copy(Device(source), Device("cpu"))


@pytest.mark.parametrize(
    "source, target",
    [("cuda_host", "cuda:0"), ("cuda_host", "cuda:1"), ("cuda_managed", "cuda:0"), ("cpu", "cuda:0"),
     ((11, 0), "rocm:0"), ("cpu", "rocm:1")],
)
def test_memory_the_gpu_addresses_is_zero_copy_only_where_the_hardware_says(source, target):
    source, target = Device(source), Device(target)
    assert (source.type, target.type) in _rules.MAPPED_MOVES
    asked = []
    assert _rules.zero_copy(source, target, lambda s, t: asked.append((s, t)) or True)
    assert asked == [(source, target)]  # the hardware is asked about this very move
    assert not _rules.zero_copy(source, target, no)
    assert not _rules.zero_copy(source, target)  # no backend to ask: a copy
    assert _rules.import_needs_copy(source, target, None, yes) is False
    assert _rules.import_needs_copy(source, target, None, no) is True
    with pytest.raises(BufferError) as refused:
        _rules.import_needs_copy(source, target, False, no)
    assert str(refused.value).startswith(
        f"copy=False, but exporting from {source} to {target} needs a copy (the data is not "
        "addressable there). Pass copy=None"
    )


@pytest.mark.parametrize("bad", ["yes", 1, 0])
def test_an_import_copy_of_the_wrong_type_is_a_type_error_naming_it(bad):
    with pytest.raises(TypeError, match=re.escape(f"copy must be True, False or None; got {bad!r}.")):
        _rules.import_needs_copy(Device("cpu"), Device("cpu"), bad)


@pytest.mark.parametrize("source, target", [("cuda:0", "cuda:1"), ("cuda:0", "cpu"), ("cuda:0", "cuda_host")])
def test_device_memory_elsewhere_is_always_a_copy(source, target):
    assert not _rules.zero_copy(Device(source), Device(target), yes)


# -- copies --------------------------------------------------------------------

@pytest.mark.parametrize(
    "source, target",
    [("cpu", "cuda:0"), ("cuda:0", "cpu"), ("cuda:0", "cuda:1"), ("cuda:1", "cuda_host"),
     ("cuda_host", "cuda:0"), ("cuda_managed", "cuda:2"), ("cuda:0", "cuda_managed"),
     ("cpu", (10, 0)), ((10, 0), "cpu"), ((10, 0), (10, 1)), ((10, 0), (11, 0))],
)
def test_a_copy_moves_data_within_one_gpu_stack(source, target):
    assert (Device(source).type, Device(target).type) in _rules.COPY_MOVES
    _rules.check_move(Device(source), Device(target))


@pytest.mark.parametrize("source, target", [((2, 0), (10, 0)), ((10, 0), (2, 0)), ((2, 0), (4, 0)), ((8, 0), (1, 0))])
def test_no_copy_crosses_gpu_stacks(source, target):
    with pytest.raises(BufferError, match="cannot move an array"):
        _rules.check_move(Device(source), Device(target))


def test_a_copy_the_rules_allow_but_no_gpu_can_make_names_the_missing_backend():
    with pytest.raises(BufferError, match="cuda:0: gpu_dlpack needs CuPy and a working GPU"):
        _rules.plan_export(Device("cpu"), False, 2, 64, (1, 0), (2, 0), None, no)
    # To the CPU, the backend missing is the one for the source's memory.
    with pytest.raises(BufferError, match="on cuda:1: gpu_dlpack needs CuPy and a working GPU"):
        _rules.plan_export(Device("cuda:1"), False, 2, 64, (1, 0), (1, 0), None, no)
    with pytest.raises(BufferError, match="cannot move an array from cpu to metal"):
        _rules.plan_export(Device("cpu"), False, 2, 64, (1, 0), (8, 0), None, yes)


def test_a_planned_gpu_copy_and_a_mapped_move():
    copy = _rules.plan_export(Device("cuda:0"), False, 2, 32, (1, 0), (2, 1), None, yes)
    assert copy.copy and copy.target == Device("cuda:1") and not copy.read_only
    mapped = _rules.plan_export(Device("cuda_host"), True, 2, 32, (1, 0), (2, 0), None, yes, yes)
    assert not mapped.copy and mapped.target == Device("cuda:0") and mapped.read_only
    with pytest.raises(BufferError) as refused:
        _rules.plan_export(Device("cuda:0"), False, 2, 32, (1, 0), (2, 1), False, yes)
    assert str(refused.value).startswith(
        "copy=False, but exporting from cuda:0 to cuda:1 needs a copy (the data is not "
        "addressable there). Pass copy=None"
    )


# -- read-only imports ---------------------------------------------------------

@pytest.mark.parametrize("target", ["cuda:0", "cuda_managed", (10, 1)])
def test_read_only_data_is_copied_for_always_writeable_arrays(target):
    target = Device(target)
    assert _rules.readonly_import_copies(target, True, None) is True
    assert _rules.readonly_import_copies(target, True, True) is True
    assert _rules.readonly_import_copies(target, False, None) is False
    with pytest.raises(BufferError, match=f"READ_ONLY and arrays on {target} are CuPy arrays, which are always writeable.*copy=None"):
        _rules.readonly_import_copies(target, True, False)


@pytest.mark.parametrize("target", ["cpu", "cuda_host"])
def test_read_only_data_lands_in_place_where_arrays_can_be_read_only(target):
    assert _rules.readonly_import_copies(Device(target), True, False) is False


# -- the capsule mechanism the GPU backend uses --------------------------------

def test_a_capsule_is_relabelled_pinned_and_still_imports_as_host_memory():
    a = np.arange(4.0)
    cap = a.__dlpack__(max_version=(1, 0))
    _capsule.set_device(cap, T.CUDA_HOST, 0)
    assert inspect(cap).device == Device("cuda_host")
    out = from_dlpack(cap)  # host-readable: NumPy takes pinned memory in place
    assert out.ctypes.data == a.ctypes.data and out.tolist() == [0, 1, 2, 3]


def test_a_taken_capsule_frees_its_tensor_once_when_its_owner_dies():
    a = np.arange(3.0)
    alive = weakref.ref(a)
    cap = a.__dlpack__(max_version=(1, 0))
    del a
    owner = _capsule.take(cap)
    with pytest.raises(gpu_dlpack.ConsumedCapsuleError):
        inspect(cap)
    del cap
    assert alive() is not None  # the owner holds the tensor
    owner.release()
    assert alive() is None
    owner.release()  # a second release calls nothing
    del owner


# -- targets that need the GPU backend -----------------------------------------

@pytest.mark.parametrize("device", ["cuda_host", "cuda_managed"])
def test_pinned_and_managed_targets_are_made_by_the_gpu_backend(device):
    if not _no_gpu():
        pytest.skip("a GPU is present")
    with pytest.raises(BufferError, match="CuPy and a working GPU"):
        from_dlpack(np.arange(3.0), device=device)


def test_a_capsule_of_device_memory_reaches_the_cpu_through_its_devices_backend():
    if not _no_gpu():
        pytest.skip("a GPU is present")
    cap = np.arange(3.0).__dlpack__(max_version=(1, 0))
    _capsule.set_device(cap, 2, 0)  # as a CUDA producer labels it
    with pytest.raises(BufferError, match="cuda:0: gpu_dlpack needs CuPy and a working GPU"):
        from_dlpack(cap, device="cpu")


def test_an_export_to_gpu_memory_takes_the_consumers_gpu_stream():
    # The stream is the consumer's, for the memory it receives: a CUDA stream
    # handle is valid for dl_device=(CUDA, 0), whatever the source memory.
    try:
        cap = export(np.arange(3.0), max_version=(1, 0), dl_device=(2, 0), stream=0xBEEF)
    except BufferError as exc:  # no GPU here: the device is refused, not the stream
        assert _no_gpu() and "CuPy and a working GPU" in str(exc)
    else:
        assert inspect(cap).is_copied


# -- CuPy installed, no GPU ----------------------------------------------------

def test_without_a_gpu_no_gpu_device_is_served():
    from gpu_dlpack._backends import cupy as cupy_backend

    if cupy_backend.device_count():
        pytest.skip("a GPU is present")
    for name in ("cuda:0", "cuda_host", "cuda_managed", "rocm:0"):
        assert not cupy_backend.serves(Device(name))
        assert not _backends.can_copy(Device("cpu"), Device(name))
        assert not _backends.addressable(Device("cpu"), Device(name))
    assert _backends.can_copy(Device("cuda_host"), Device("cpu"))  # NumPy copies host memory


@pytest.mark.parametrize("device", ["cuda:0", "cuda", "cuda_host", "cuda_managed", "gpu:1"])
def test_asking_for_a_gpu_target_without_a_gpu_is_a_clear_buffer_error(device, torch):
    from gpu_dlpack._backends import cupy as cupy_backend

    if cupy_backend.device_count():
        pytest.skip("a GPU is present")
    for x in (np.arange(3.0), torch.arange(3.0)):
        with pytest.raises(BufferError, match="CuPy and a working GPU.*pip install"):
            from_dlpack(x, device=device)
        with pytest.raises(BufferError, match="CuPy and a working GPU"):
            export(x, max_version=(1, 0), dl_device=Device(device).dlpack)
        with pytest.raises(BufferError, match="CuPy and a working GPU"):
            wrap(x).__dlpack__(max_version=(1, 0), dl_device=Device(device).dlpack)


def test_a_raw_capsule_for_a_gpu_target_without_a_gpu_is_refused_and_freed():
    import weakref

    from gpu_dlpack._backends import cupy as cupy_backend

    if cupy_backend.device_count():
        pytest.skip("a GPU is present")
    a = np.arange(3.0)
    ref = weakref.ref(a)
    cap = a.__dlpack__()
    del a
    with pytest.raises(BufferError, match="CuPy and a working GPU"):
        from_dlpack(cap, device="cuda:0")
    # Handed over, then refused: freed at once, not when the caller drops it.
    with pytest.raises(ValueError, match="already consumed"):
        inspect(cap)
    assert ref() is None


def test_host_paths_work_with_cupy_imported_and_no_gpu():
    pytest.importorskip("cupy")
    pytest.importorskip("torch")
    code = (
        "import cupy, numpy as np, torch, gpu_dlpack\n"
        "from gpu_dlpack import Device\n"
        "a = np.arange(6.0).reshape(2, 3)\n"
        "assert Device.of(gpu_dlpack.wrap(a)) == Device('cpu')\n"
        "t = torch.from_dlpack(gpu_dlpack.wrap(a))\n"
        "assert t.data_ptr() == a.ctypes.data\n"
        "assert gpu_dlpack.from_dlpack(torch.arange(3.0), stream=-1).tolist() == [0, 1, 2]\n"
        "info = gpu_dlpack.inspect(gpu_dlpack.export(a, max_version=(1, 0), copy=True))\n"
        "assert info.is_copied and info.device == Device('cpu')\n"
        "with gpu_dlpack.use_stream(cupy.cuda.Stream.null):\n"
        "    assert gpu_dlpack.from_dlpack(a).base is not None\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_importing_the_gpu_machinery_needs_no_gpu_and_imports_no_cupy():
    code = (
        "import sys, gpu_dlpack, gpu_dlpack._handoff as h\n"
        "assert 'cupy' not in sys.modules, 'CuPy imported eagerly'\n"
        "assert h.collect() == 0 and h.pool_size(0) == 0\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


# -- managed memory as consumers see it -------------------------------------------

def test_managed_memory_is_reported_as_the_gpu_that_allocated_it():
    managed = Device("cuda_managed")
    assert _rules.reported_device(managed, 3) == Device("cuda:3")
    assert _rules.reported_device(managed, None) == managed  # the GPU is unknown: its own label
    assert _rules.reported_device(Device("cuda:1"), 3) == Device("cuda:1")
    assert _rules.reported_device(Device("cpu"), 0) == Device("cpu")


def test_a_consumer_with_a_stream_and_no_device_is_served_the_reported_device():
    reported = Device("cuda:3")
    assert _rules.served_device(reported, None, 7) == (2, 3)  # a GPU consumer
    assert _rules.served_device(reported, None, None) is None  # a host consumer: the memory's label
    assert _rules.served_device(reported, (1, 0), 7) == (1, 0)  # a device named is the device served
    assert _rules.served_device(reported, (1, 0), None) == (1, 0)
