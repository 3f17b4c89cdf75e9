"""The rules for GPU memory (which moves are zero-copy, which copies exist,
read-only imports) and what happens with CuPy installed but no GPU. All of it
runs without a GPU; the exchanges themselves are in test_gpu.py."""

import numpy as np
import pytest

from gpu_dlpack import export, from_dlpack, inspect
from gpu_dlpack import _capsule


def _no_gpu():
    from gpu_dlpack._backends import cupy as cupy_backend

    return not cupy_backend.device_count()


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
    _capsule.set_device(_capsule.pointer(cap, True), True, 2, 0)  # as a CUDA producer labels it
    with pytest.raises(BufferError, match="cuda:0: gpu_dlpack needs CuPy and a working GPU"):
        from_dlpack(cap, device="cpu")


def test_an_export_to_gpu_memory_takes_the_consumers_gpu_stream():
    # The stream is the consumer's, for the memory it receives: a CUDA stream
    # handle is valid for dl_device=(CUDA, 0), whatever the source memory.
    try:
        cap = export(np.arange(3.0), max_version=(1, 0), dl_device=(2, 0), stream=0xBEEF)
    except BufferError as exc:  # no GPU here: the device is refused, not the stream
        assert _no_gpu() and "cuda:0" in str(exc)
    else:
        assert inspect(cap).is_copied
