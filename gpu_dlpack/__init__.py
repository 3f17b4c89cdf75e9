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

from . import _interpreter

_interpreter.check_main()  # before NumPy or the compiled core is loaded

from . import _capsule, _versions  # noqa: E402
from ._capsule import CapsuleInfo  # noqa: E402
from ._devices import Device, DLDeviceType  # noqa: E402
from ._errors import ConsumedCapsuleError, NotDLPackError, StreamWarning  # noqa: E402
from ._export import Exportable, export, wrap  # noqa: E402
from ._import import from_dlpack  # noqa: E402
from ._shards import Shard, shards  # noqa: E402
from ._streams import use_stream  # noqa: E402
from ._typing import Capsule, Version  # noqa: E402
from ._versions import DLPACK_VERSION  # noqa: E402

__version__ = "0.1.0"

from . import _fastpath  # noqa: E402

_fastpath.install(_capsule.PYTHON)

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
