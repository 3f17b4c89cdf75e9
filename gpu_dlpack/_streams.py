"""The stream rules of the DLPack ``__dlpack__(stream=...)`` argument, per
device type, as data (array API standard, ``__dlpack__``)."""

from __future__ import annotations

import warnings

from . import _errors
from ._devices import DLDeviceType

# What each special value means. A value missing from a table is invalid for
# that device type; ABOVE_2 stands for every int > 2 (a stream handle).
NO_SYNC = "no synchronization"
LEGACY_DEFAULT = "the legacy default stream"
PER_THREAD = "the per-thread default stream"
DEFAULT = "the default stream"
HANDLE = "a stream handle"
ABOVE_2 = ">2"

CUDA_RULES = {None: LEGACY_DEFAULT, -1: NO_SYNC, 1: LEGACY_DEFAULT, 2: PER_THREAD, ABOVE_2: HANDLE}
ROCM_RULES = {None: DEFAULT, -1: NO_SYNC, 0: DEFAULT, ABOVE_2: HANDLE}
HOST_RULES = {None: "no stream (host memory)", -1: NO_SYNC}

RULES = {
    DLDeviceType.CUDA: CUDA_RULES,
    DLDeviceType.CUDA_HOST: CUDA_RULES,
    DLDeviceType.CUDA_MANAGED: CUDA_RULES,
    DLDeviceType.ROCM: ROCM_RULES,
    DLDeviceType.ROCM_HOST: ROCM_RULES,
}

# CUDA 0 is ambiguous (legacy or per-thread default?). Older PyTorch sends
# it, so it is accepted as the legacy default stream, with a warning.
_CUDA_ZERO = {DLDeviceType.CUDA, DLDeviceType.CUDA_HOST, DLDeviceType.CUDA_MANAGED}


def rules_for(device_type):
    return RULES.get(device_type, HOST_RULES)


def describe(device_type) -> str:
    """The valid values for a device type, for error messages."""
    parts = []
    for key, meaning in rules_for(device_type).items():
        label = "an int > 2" if key == ABOVE_2 else repr(key)
        parts.append(f"{label} ({meaning})")
    if device_type in _CUDA_ZERO:
        parts.append("0 (ambiguous; taken as the legacy default stream, with a StreamWarning)")
    return ", ".join(parts)


def check_stream(stream, device_type):
    """Validate a consumer's stream for memory of ``device_type``; returns it.

    CUDA ``0`` becomes ``1`` (legacy default stream) with a ``StreamWarning``.
    """
    if stream is None:
        return None
    if type(stream) is not int:
        if isinstance(stream, bool) or not hasattr(stream, "__index__"):
            name = DLDeviceType(device_type).name
            raise _errors.bad_stream_type(stream, name, describe(device_type))
        stream = int(stream)
    rules = rules_for(device_type)
    if stream in rules or (stream > 2 and ABOVE_2 in rules):
        return stream
    if stream == 0 and device_type in _CUDA_ZERO:
        warnings.warn(
            "stream=0 is ambiguous for CUDA (the standard disallows it); it is taken "
            "as the legacy default stream (1). Pass 1 or 2 explicitly.",
            _errors.StreamWarning,
            stacklevel=3,
        )
        return 1
    raise _errors.bad_stream_value(stream, DLDeviceType(device_type).name, describe(device_type))
