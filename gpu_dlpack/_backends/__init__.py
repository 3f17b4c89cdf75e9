"""Backends: one per array library that holds what gpu_dlpack exports or
imports (NumPy: host memory; CuPy: CUDA and ROCm memory, and every copy that
involves a GPU). A backend does what ``_rules`` decided; this face routes an
array or a device to its backend.
"""

from __future__ import annotations

from .. import _errors, _handoff
from .._devices import CPU, DEVICE_ACCESSIBLE, Device, DLDeviceType, host_tested
from . import cupy as cupy_backend
from . import numpy as numpy_backend
from ._reach import addressable, can_copy
from .cupy import gpus as cupy_gpus

__all__ = [
    "addressable", "can_copy", "cupy_backend", "device_of", "for_array", "for_device", "gpu_of", "numpy_backend",
]


def for_array(x):
    """The backend that owns ``x``'s type, or None for a foreign producer."""
    if numpy_backend.owns(x):
        return numpy_backend
    if cupy_backend.owns(x):
        return cupy_backend
    return None


def device_of(x) -> Device:
    """The device ``x`` reports through ``__dlpack_device__``, as its backend
    corrects it (CuPy: managed memory, ROCm builds), or its host test says
    (JAX: ``_devices.host_tested``)."""
    backend = for_array(x)
    if backend is numpy_backend:
        return CPU
    if backend is not None:
        return backend.device_of(x)
    if host_tested(x):  # a host test (JAX) stands for __dlpack_device__ where it passes
        return CPU
    return Device.of(x)


def gpu_of(x) -> int | None:
    """The GPU that allocated ``x``'s memory, where its backend knows it (CuPy
    arrays, managed memory included); None otherwise."""
    if cupy_backend.owns(x):
        return x.data.device_id
    return None


def for_device(device: Device):
    """The backend that holds arrays on ``device`` (every target but the CPU
    needs CuPy and a GPU, even a NumPy array over pinned memory); BufferError
    if none can."""
    if device.type == DLDeviceType.CPU:
        return numpy_backend
    _handoff.check_not_forked()  # a forked child of a GPU process: a clear refusal, not a hang
    if cupy_gpus.serves(device):
        return cupy_backend
    raise _errors.no_backend(device, device.type in DEVICE_ACCESSIBLE)
