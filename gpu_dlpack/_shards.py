"""Arrays spread over several devices (JAX's sharded and replicated arrays),
read through their own shard list (``addressable_shards``), since DLPack
describes memory on one device: whether an array is spread, its replica on
a device, the device it lands on by default, its pieces. The exchange does
the rest (docs/guide/multi-device.md).

Floor: what both directions share, under ``_exchange``; it reads shard lists
and imports no backend.
"""

from __future__ import annotations

from typing import NamedTuple

from . import _capsule, _errors
from ._devices import Device
from ._typing import Array


class Shard(NamedTuple):
    """One piece of an array spread over several devices, as `shards` gives it.

    A named tuple.

    Attributes
    ----------
    index : tuple of slice
        The slices of the whole array the piece holds (as in ``whole[index]``).
    device : Device
        Where its memory is.
    replica_id : int
        Which copy of that piece it is (0 for the first).
    data : numpy.ndarray or cupy.ndarray
        The piece, imported zero-copy: a NumPy array for host memory, a CuPy
        array on a GPU.

    Examples
    --------
    >>> import numpy as np, gpu_dlpack
    >>> (s,) = gpu_dlpack.shards(np.arange(4.0))
    >>> str(s.device), s.replica_id, s.data.tolist()
    ('cpu', 0, [0.0, 1.0, 2.0, 3.0])
    """

    index: tuple[slice, ...]
    device: Device
    replica_id: int
    data: Array


def spread(x) -> bool:
    """Whether ``x`` is an array spread over more than one device (JAX)."""
    sharding = getattr(x, "sharding", None)
    if sharding is None or not hasattr(x, "addressable_shards"):
        return False
    try:
        return len(sharding.device_set) > 1
    except Exception:
        return False


def check_addressable(x) -> None:
    if not getattr(x, "is_fully_addressable", True):
        raise _errors.spread_not_addressable(x)


def replica(x, device: Device | None = None):
    """The single-device replica of a fully replicated ``x``: the one on
    ``device`` when there is one, else the first addressable one. None when
    ``x`` is not fully replicated."""
    if not getattr(x, "is_fully_replicated", False):
        return None
    shards = x.addressable_shards
    if not shards:
        check_addressable(x)
        return None
    if device is not None:
        for shard in shards:
            if Device.of(shard.data) == device:
                return shard.data
    return shards[0].data


def home(x) -> Device:
    """The device an export of ``x`` lands on by default: the device of its
    first addressable shard (so a gather of a host-sharded array lands on the
    host)."""
    check_addressable(x)
    return Device.of(x.addressable_shards[0].data)


def pieces(x):
    """The shards holding each piece of ``x`` once (replica 0)."""
    check_addressable(x)
    return [s for s in x.addressable_shards if s.replica_id == 0]


def flag_copied(capsule) -> None:
    """Set IS_COPIED on a versioned capsule of a gathered array."""
    if _capsule.kind(capsule):
        _capsule.set_flags(capsule, _capsule.read(capsule).flags | _capsule.IS_COPIED)
