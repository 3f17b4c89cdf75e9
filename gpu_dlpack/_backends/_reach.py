"""What the installed backends reach, as the rules ask it: the copies they
can make, and the memory a GPU addresses in place.

Floor: the backends, under CuPy's exports and imports, over its ``gpus``.
"""

from __future__ import annotations

from .._devices import CPU, Device, DLDeviceType
from .cupy import gpus as cupy_gpus


def can_copy(source: Device, target: Device) -> bool:
    """Whether the installed backends can copy from ``source`` to ``target``
    (whether they may is ``_rules.COPY_MOVES``): NumPy copies host-readable
    memory to the CPU; every other end needs CuPy."""
    if target == CPU and source.is_host_accessible:
        return True
    return all(
        end.type == DLDeviceType.CPU or cupy_gpus.serves(end) for end in (source, target)
    )


def addressable(source: Device, target: Device) -> bool:
    """Whether GPU ``target`` addresses ``source`` memory in place (``_rules.MAPPED_MOVES``)."""
    return cupy_gpus.serves(target) and cupy_gpus.addressable(source, target)
