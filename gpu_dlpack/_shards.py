"""Arrays spread over several devices (JAX's sharded and replicated arrays).

DLPack describes memory on one device, and JAX refuses ``__dlpack__`` and
``__dlpack_device__`` for any array whose sharding spans more than one. Here
such an array is taken apart by its own shard list (``addressable_shards``:
each shard is a single-device array with the slices of the whole it covers):

- a fully replicated array is the replica on the device asked for (or the
  first addressable one), zero-copy;
- a sharded array is gathered once onto one device, when a copy is allowed;
- ``shards`` hands out every shard, zero-copy, on its own device.

The rules (copy, device, READ_ONLY) are those of any exchange: a replica
or a gathered array goes through the usual export and import.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from . import _capsule, _errors
from ._devices import Device, DLDeviceType


class Shard(NamedTuple):
    """One piece of an array spread over several devices (``gpu_dlpack.shards``).

    ``index`` is the tuple of slices of the whole array it holds (as in
    ``whole[index]``), ``device`` where its memory is, ``replica_id`` which
    copy of that piece it is (0 for the first), and ``data`` the piece,
    imported zero-copy: a NumPy array for host memory, a CuPy array on a GPU.
    """

    index: tuple
    device: Device
    replica_id: int
    data: Any


def spread(x) -> bool:
    """Whether ``x`` is an array spread over more than one device (JAX)."""
    sharding = getattr(x, "sharding", None)
    if sharding is None or not hasattr(x, "addressable_shards"):
        return False
    try:
        return len(sharding.device_set) > 1
    except Exception:
        return False


def describe(x) -> str:
    """The sharding of ``x`` in words, for messages."""
    sharding = x.sharding
    spec = getattr(sharding, "spec", None)
    kind = type(sharding).__name__
    n = len(sharding.device_set)
    return f"{kind}{'' if spec is None else f'({spec})'} over {n} devices"


def _check_addressable(x) -> None:
    if not getattr(x, "is_fully_addressable", True):
        here = sorted(str(d) for d in x.sharding.addressable_devices)
        missing = len(x.sharding.device_set) - len(here)
        raise _errors.spread_not_addressable(describe(x), missing, here)


def _shard_device(shard) -> Device:
    return Device.of(shard.data)


def _replicated(x) -> bool:
    return bool(getattr(x, "is_fully_replicated", False))


def replica(x, device: Device | None = None):
    """The single-device replica of a fully replicated ``x``: the one on
    ``device`` when there is one, else the first addressable one. None when
    ``x`` is not fully replicated."""
    if not _replicated(x):
        return None
    shards = x.addressable_shards
    if not shards:
        _check_addressable(x)
        return None
    if device is not None:
        for shard in shards:
            if _shard_device(shard) == device:
                return shard.data
    return shards[0].data


def home(x) -> Device:
    """The device an export of ``x`` lands on by default: the device of its
    first addressable shard (so a gather of a host-sharded array lands on the
    host)."""
    _check_addressable(x)
    return _shard_device(x.addressable_shards[0])


def _pieces(x):
    """The shards holding each piece of ``x`` once (replica 0)."""
    _check_addressable(x)
    return [s for s in x.addressable_shards if s.replica_id == 0]


def gather(x, target: Device, copy, stream, import_):
    """A new array holding all of ``x``, each piece copied once into its
    place: a NumPy array for the CPU, a CuPy array for a GPU (the copies
    queued on the consumer's ``stream``). For other targets (pinned or
    managed memory) the host gather is returned, for the caller to move.
    ``import_`` is ``from_dlpack``, which reads each shard where it is (or
    moves it to the GPU)."""
    if copy is False:
        raise _errors.spread_needs_copy(describe(x), target)
    pieces = _pieces(x)
    if target.type in _GPU_TYPES:
        from ._backends import cupy as cupy_backend

        return cupy_backend.gather(x.shape, x.dtype, pieces, target, stream, import_)
    out = np.empty(x.shape, x.dtype)
    for shard in pieces:
        out[shard.index] = import_(shard.data, device="cpu")
    return out


_GPU_TYPES = frozenset({DLDeviceType.CUDA, DLDeviceType.ROCM})


def shards(x, *, replicas: bool = False) -> list:
    """Every addressable shard of ``x``, each imported zero-copy on its own
    device (a NumPy array on the host, a CuPy array on a GPU).

    ``x`` is an array spread over several devices (a JAX array with a
    ``NamedSharding``, ``PositionalSharding``, from ``shard_map`` or
    ``pmap``...); a single-device array gives one shard covering it all.
    Each piece of data is given once (``replica_id == 0``) unless
    ``replicas=True``.

    >>> import numpy as np, gpu_dlpack
    >>> [s.index for s in gpu_dlpack.shards(np.arange(4.0))]
    [(slice(None, None, None),)]

    To hand each shard of a JAX array to PyTorch without a gather::

        for s in gpu_dlpack.shards(j):
            t = torch.from_dlpack(gpu_dlpack.wrap(s.data))   # on s.device
    """
    from ._import import from_dlpack

    if not hasattr(x, "addressable_shards"):
        data = from_dlpack(x)
        whole = tuple(slice(None) for _ in range(max(np.ndim(data), 1)))
        return [Shard(whole, _where(data), 0, data)]
    _check_addressable(x)
    found = []
    for shard in x.addressable_shards:
        if shard.replica_id and not replicas:
            continue
        data = from_dlpack(shard.data)
        index = tuple(shard.index)
        found.append(Shard(index, _where(data), int(shard.replica_id), data))
    return found


def _where(data) -> Device:
    from ._backends import device_of

    return device_of(data)


def flag_copied(capsule) -> None:
    """Set IS_COPIED on a versioned capsule of a gathered array."""
    versioned, ptr = _capsule.kind_and_pointer(capsule)
    if versioned:
        head = _capsule.header(ptr, True)
        _capsule.set_flags(ptr, head.flags | _capsule.IS_COPIED)
