"""The CuPy backend: CUDA and ROCm memory.

Device exports and imports plug in here; until a GPU is usable this backend
serves no device, and the rules report the device as unreachable.
"""

from __future__ import annotations

import functools
import importlib.util

from .._devices import Device, DLDeviceType

GPU_TYPES = frozenset({DLDeviceType.CUDA, DLDeviceType.ROCM, DLDeviceType.CUDA_MANAGED,
                       DLDeviceType.CUDA_HOST, DLDeviceType.ROCM_HOST})


def owns(x) -> bool:
    import cupy

    return isinstance(x, cupy.ndarray)


@functools.lru_cache(maxsize=1)
def device_count() -> int:
    """GPUs CuPy can use; 0 without CuPy, without a driver, or without a GPU."""
    if importlib.util.find_spec("cupy") is None:
        return 0
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def serves(device: Device) -> bool:
    return device.type in GPU_TYPES and device_count() > 0 and device.index < max(device_count(), 1)
