"""Bad arguments everywhere in the public API: each gets a clear exception of
the standard's type (TypeError for a wrong type, ValueError for a wrong
value, BufferError for an exchange that cannot happen), and nothing leaks:
the source array is freed once the caller drops it, and no capsule is left
unfreed."""

import gc
import sys
import weakref

import numpy as np
import pytest

import gpu_dlpack


@pytest.mark.parametrize("dl_device", [(1, 1), (1, 7), (3, 1), (13, 2)])
def test_a_consumer_may_ask_for_host_memory_of_device_id_0_only(dl_device):
    x = np.arange(3.0)
    with pytest.raises(BufferError, match="device id 0 only"):
        gpu_dlpack.export(x, max_version=(1, 0), dl_device=dl_device)
    with pytest.raises(BufferError, match="device id 0 only"):
        gpu_dlpack.wrap(x).__dlpack__(max_version=(1, 0), dl_device=dl_device)
    with pytest.raises(BufferError, match="device id 0 only"):
        gpu_dlpack.from_dlpack(x, device=dl_device)
    cap = gpu_dlpack.export(x, max_version=(1, 0))
    with pytest.raises(BufferError, match="device id 0 only"):
        gpu_dlpack.from_dlpack(cap, device=dl_device)
    with pytest.raises(gpu_dlpack.ConsumedCapsuleError):
        gpu_dlpack.inspect(cap)  # refused, so freed at once


@pytest.mark.parametrize(
    "stream, error",
    [("0", TypeError), (1.5, TypeError), (True, TypeError), (0, ValueError), (1, ValueError),
     (2, ValueError), (5, ValueError), (-2, ValueError), (2**64, ValueError)],
)
def test_a_stream_is_refused_for_a_host_import_not_ignored(torch, stream, error):
    # Host memory has no stream: only None and -1 are valid (SPEC §3).
    x = np.arange(3.0)
    for source in (x, torch.arange(3.0), gpu_dlpack.wrap(x)):
        with pytest.raises(error, match="stream"):
            gpu_dlpack.from_dlpack(source, stream=stream)
    cap = gpu_dlpack.export(x, max_version=(1, 0))
    with pytest.raises(error, match="stream"):
        gpu_dlpack.from_dlpack(cap, stream=stream)
    with pytest.raises(gpu_dlpack.ConsumedCapsuleError):
        gpu_dlpack.inspect(cap)  # refused, so freed at once
    assert gpu_dlpack.from_dlpack(x, stream=-1).ctypes.data == x.ctypes.data


@pytest.mark.parametrize("copy", ["x", 1, np.True_])
def test_a_capsule_refused_for_its_copy_argument_is_freed_at_once(copy):
    a = np.arange(3.0)
    ref = weakref.ref(a)
    cap = gpu_dlpack.export(a, max_version=(1, 0))
    del a
    with pytest.raises(TypeError, match="copy"):
        gpu_dlpack.from_dlpack(cap, copy=copy)
    gc.collect()
    assert ref() is None
    with pytest.raises(gpu_dlpack.ConsumedCapsuleError):
        gpu_dlpack.from_dlpack(cap)
