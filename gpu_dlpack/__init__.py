"""gpu_dlpack: DLPack done right between CuPy, NumPy, PyTorch, JAX and any
other array library.

>>> import numpy as np, gpu_dlpack
>>> cap = gpu_dlpack.export(np.arange(3.0), max_version=(1, 0))
>>> gpu_dlpack.inspect(cap).version == gpu_dlpack.DLPACK_VERSION
True
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

from . import _capsule, _versions, _wiring
from ._capsule import CapsuleInfo
from ._devices import Device, DLDeviceType
from ._convert import Conversion, convert
from ._errors import (
    ConsumedCapsuleError, CopyRequiredError, DeviceUnreachableError, NotDLPackError, ReadOnlyError, StreamWarning,
)
from ._export import Exportable, export, wrap
from ._import import from_dlpack, shards
from ._shards import Shard
from ._streams import use_stream
from ._typing import Capsule, Version

if TYPE_CHECKING:
    from ._explain import Explanation
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


def explain(exc_or_message: BaseException | str, /) -> Explanation:
    """What a DLPack error means and how to fix it: the known errors found
    in an exception (its chain included) or a message, with their remedies.

    >>> import gpu_dlpack
    >>> found = gpu_dlpack.explain("BufferError: JAX does not support any version "
    ...     "below (0, 5) but version ((0, 4)) was requested.")
    >>> [m.id for m in found]
    ['jax-version-floor']

    The result is true when something matched; ``str()`` of it is what
    ``gpu-dlpack explain`` prints.
    """
    from . import _explain  # the knowledge file is read on first use

    return _explain.explain(exc_or_message)


def set_min_dlpack_version(version: Version | str) -> Version:
    """Set the version floor (``(0, 8)`` or ``"0.8"``); returns the old one.
    Same as assigning ``gpu_dlpack.MIN_DLPACK_VERSION``."""
    return _versions.set_min_version(version)


__all__ = [
    "DLPACK_VERSION",
    "MIN_DLPACK_VERSION",
    "CapsuleInfo",
    "ConsumedCapsuleError",
    "Conversion",
    "CopyRequiredError",
    "DeviceUnreachableError",
    "DLDeviceType",
    "Device",
    "Exportable",
    "FLAG_IS_COPIED",
    "FLAG_IS_SUBBYTE_TYPE_PADDED",
    "FLAG_READ_ONLY",
    "NotDLPackError",
    "ReadOnlyError",
    "Shard",
    "StreamWarning",
    "convert",
    "explain",
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
