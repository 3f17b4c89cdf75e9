"""Backends: one per array library that holds what gpu_dlpack exports or
imports. NumPy holds host memory; CuPy holds CUDA and ROCm memory.

A backend does what ``_rules`` decided; adding one touches no rule.
"""

from __future__ import annotations

import sys

from .. import _errors
from .._devices import Device, DLDeviceType, HOST_ACCESSIBLE
from . import cupy as cupy_backend
from . import numpy as numpy_backend


def for_array(x):
    """The backend that owns ``x``'s type, or None for a foreign producer."""
    if numpy_backend.owns(x):
        return numpy_backend
    if "cupy" in sys.modules and cupy_backend.owns(x):
        return cupy_backend
    return None


def for_device(device: Device):
    """The backend that holds arrays on ``device``; BufferError if none can.

    CPU arrays are NumPy arrays; every other target, pinned and managed
    memory included, needs the GPU backend to be made."""
    if device.type == DLDeviceType.CPU:
        return numpy_backend
    if cupy_backend.serves(device):
        return cupy_backend
    raise _errors.no_backend(device)


def can_copy(source: Device, target: Device) -> bool:
    """Whether some backend can copy data from ``source`` to ``target``."""
    if source.type in HOST_ACCESSIBLE and target.type in HOST_ACCESSIBLE:
        return target == Device("cpu") or cupy_backend.serves(target)
    return cupy_backend.serves(source) and cupy_backend.serves(target)
