"""gpu_dlpack: DLPack done right between CuPy, NumPy, PyTorch, JAX and any
other array library.

>>> import numpy as np, gpu_dlpack
>>> cap = gpu_dlpack.export(np.arange(3.0), max_version=(1, 0))
>>> gpu_dlpack.inspect(cap).version == gpu_dlpack.DLPACK_VERSION
True
"""

from __future__ import annotations

import functools
import sys
import types

from . import _capsule, _fastpath, _versions, _wiring
from ._capsule import CapsuleInfo
from ._devices import Device, DLDeviceType
from ._errors import ConsumedCapsuleError, NotDLPackError, StreamWarning
from ._export import Exportable, export, wrap
from ._import import from_dlpack, shards
from ._shards import Shard
from ._streams import use_stream
from ._typing import Capsule, Version
from ._versions import DLPACK_VERSION

__version__ = "0.1.0"

_wiring.install(_capsule.PYTHON)

#: Flag bits of versioned capsules (``DLManagedTensorVersioned.flags``).
FLAG_READ_ONLY = _capsule.READ_ONLY
FLAG_IS_COPIED = _capsule.IS_COPIED
FLAG_IS_SUBBYTE_TYPE_PADDED = _capsule.IS_SUBBYTE_TYPE_PADDED


def inspect(capsule: Capsule) -> CapsuleInfo:
    """Read an unconsumed DLPack capsule without consuming it.

    >>> import numpy as np, gpu_dlpack
    >>> info = gpu_dlpack.inspect(np.zeros((2, 3), np.float32).__dlpack__())
    >>> info.name, info.shape, info.dtype
    ('dltensor', (2, 3), (2, 32, 1))

    A consumed capsule raises ``ValueError`` (``ConsumedCapsuleError``).
    """
    return _capsule.read(capsule)


if _fastpath.core is not None:
    # The core's read from the first call (no Python frame between); help()
    # and inspect see the function above.
    inspect = functools.update_wrapper(_fastpath.core.Exporter(inspect, 3), inspect)


def set_min_dlpack_version(version: Version | str) -> Version:
    """Set the version floor (``(0, 8)`` or ``"0.8"``); returns the old one.
    Same as assigning ``gpu_dlpack.MIN_DLPACK_VERSION``."""
    return _versions.set_min_version(version)


__all__ = [
    "DLPACK_VERSION",
    "MIN_DLPACK_VERSION",
    "CapsuleInfo",
    "ConsumedCapsuleError",
    "DLDeviceType",
    "Device",
    "Exportable",
    "FLAG_IS_COPIED",
    "FLAG_IS_SUBBYTE_TYPE_PADDED",
    "FLAG_READ_ONLY",
    "NotDLPackError",
    "Shard",
    "StreamWarning",
    "export",
    "from_dlpack",
    "inspect",
    "set_min_dlpack_version",
    "shards",
    "use_stream",
    "wrap",
]


class _Module(types.ModuleType):
    # MIN_DLPACK_VERSION reads and writes the floor in force, validated.
    @property
    def MIN_DLPACK_VERSION(self):
        return _versions.min_version()

    @MIN_DLPACK_VERSION.setter
    def MIN_DLPACK_VERSION(self, value):
        _versions.set_min_version(value)

    def __dir__(self):
        return sorted(set(super().__dir__()) | {"MIN_DLPACK_VERSION"})


sys.modules[__name__].__class__ = _Module
