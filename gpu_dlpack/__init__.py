"""gpu_dlpack: DLPack done right between CuPy, NumPy, PyTorch, JAX and any
other array library.

>>> import numpy as np, gpu_dlpack
>>> cap = gpu_dlpack.export(np.arange(3.0), max_version=(1, 0))
>>> gpu_dlpack.inspect(cap).version == gpu_dlpack.DLPACK_VERSION
True
"""

from __future__ import annotations

import sys as _sys
import types as _types
from typing import TYPE_CHECKING

from . import _interpreter

_interpreter.check_main()  # before NumPy or the compiled core is loaded

from . import _capsule, _compiled, _versions, _wiring  # noqa: E402
from ._capsule import CapsuleInfo  # noqa: E402
from ._devices import Device, DLDeviceType  # noqa: E402
from ._convert import Conversion, convert  # noqa: E402
from ._errors import (  # noqa: E402
    CaptureError, ConsumedCapsuleError, CopyRequiredError, DeviceUnreachableError, DLPackVersionError, DtypeChangeError,
    GpuDlpackError, InvalidStreamError, NotDLPackError, ReadOnlyError, StreamError, StreamTypeError, StreamWarning,
)
from ._explain import Explanation  # noqa: E402  (the knowledge file is read at the first explain)
from ._export import Exportable, export, wrap  # noqa: E402
from ._import import from_dlpack, shards  # noqa: E402
from ._kit import Producer, from_pointer  # noqa: E402
from ._shards import Shard  # noqa: E402
from ._streams import use_stream  # noqa: E402
from ._typing import Capsule, Version  # noqa: E402
from ._view import ArrayView, args_viewable, view  # noqa: E402

__version__ = "0.1.0"

_wiring.install()

#: The newest DLPack version gpu_dlpack produces, ``(1, 2)``: every
#: versioned capsule it hands out carries it, and any 1.x consumer takes it.
DLPACK_VERSION = _versions.DLPACK_VERSION

# The flag bits of versioned capsules (``DLManagedTensorVersioned.flags``).
#: Flag bit 1: the consumer must not write the memory.
FLAG_READ_ONLY = _capsule.READ_ONLY
#: Flag bit 2: the memory is a copy, the consumer's own.
FLAG_IS_COPIED = _capsule.IS_COPIED
#: Flag bit 4: a sub-byte dtype is padded to one element per byte (DLPack 1.1).
FLAG_IS_SUBBYTE_TYPE_PADDED = _capsule.IS_SUBBYTE_TYPE_PADDED

if TYPE_CHECKING:
    #: The version floor in force: the lowest ``max_version`` a consumer may
    #: ask for, ``(0, 5)`` by default (before 0.5 CUDA devices had another
    #: name). Read and assigned at run time (validated, as
    #: `set_min_dlpack_version`); ``GPU_DLPACK_MIN_VERSION=0.8`` in the
    #: environment sets it, read at the first exchange that needs it.
    MIN_DLPACK_VERSION: Version


def inspect_capsule(capsule: Capsule) -> CapsuleInfo:
    """Read an unconsumed DLPack capsule without consuming it.

    The capsule's header is read in one step: a thread that consumes it
    through the layer meanwhile gives `ConsumedCapsuleError`, never fields of
    a freed tensor. The capsule stays as it was, for its consumer.

    ``gpu_dlpack.inspect`` is the same function under a shorter name, not in
    ``__all__``: ``from gpu_dlpack import *`` leaves the standard library's
    ``inspect`` alone.

    Parameters
    ----------
    capsule : PyCapsule
        A ``dltensor`` or ``dltensor_versioned`` capsule.

    Returns
    -------
    CapsuleInfo
        A frozen record of what the capsule holds.

    Raises
    ------
    ConsumedCapsuleError
        The capsule was consumed (a ``ValueError`` and a ``BufferError``).
    TypeError
        ``capsule`` is not a capsule.
    BufferError
        A capsule of another name, or a malformed one.

    See Also
    --------
    view : The memory of any producer, read the same way.

    Examples
    --------
    >>> import numpy as np, gpu_dlpack
    >>> info = gpu_dlpack.inspect_capsule(np.zeros((2, 3), np.float32).__dlpack__())
    >>> info.name, info.shape, info.dtype, info.dl_dtype
    ('dltensor', (2, 3), dtype('float32'), (2, 32, 1))
    >>> gpu_dlpack.inspect is gpu_dlpack.inspect_capsule
    True
    """
    return _capsule.read(capsule)


# The public inspect_capsule is the core's read from the first call (no
# Python frame between), with the docstring and annotations of the function
# above, which mypy reads.
if not TYPE_CHECKING:
    inspect_capsule = _compiled.front("inspect_capsule", inspect_capsule)

#: `inspect_capsule`, by its short name (an attribute, not in ``__all__``).
inspect = inspect_capsule


def explain(exc_or_message: BaseException | str, /) -> Explanation:
    """What a DLPack error means and how to fix it.

    The known errors found in an exception (with the exceptions it was raised
    from or during) or in a message, each with its meaning and remedies, from
    the catalogue the troubleshooting page lists.

    Parameters
    ----------
    exc_or_message : BaseException or str
        An exception, or an error message (a whole traceback works).

    Returns
    -------
    Explanation
        The matches, best first: true when something matched; ``str()`` of it
        is what ``gpu-dlpack explain`` prints.

    Raises
    ------
    TypeError
        Neither an exception nor a str.

    Examples
    --------
    >>> import gpu_dlpack
    >>> found = gpu_dlpack.explain("BufferError: JAX does not support any version "
    ...     "below (0, 5) but version ((0, 4)) was requested.")
    >>> [m.id for m in found]
    ['jax-version-floor']
    >>> found[0].avoid["call"]
    'consumer.from_dlpack(gpu_dlpack.wrap(gpu_dlpack.from_dlpack(j, copy=True), min_version=(0, 4)))'
    """
    from . import _explain  # the knowledge file is read on first use

    return _explain.explain(exc_or_message)


def set_min_dlpack_version(version: Version | str) -> Version:
    """Set the version floor for the whole process; return the old one.

    The same as assigning `MIN_DLPACK_VERSION`. For one consumer only,
    ``wrap(x, min_version=...)`` or ``export(x, min_version=...)``;
    ``GPU_DLPACK_MIN_VERSION=0.8`` in the environment sets it too, read at the
    first exchange that needs the floor.

    Parameters
    ----------
    version : tuple of int or str
        The new floor, ``(0, 8)`` or ``"0.8"``.

    Returns
    -------
    tuple of int
        The floor in force before.

    Raises
    ------
    ValueError
        ``version`` is no DLPack version.

    Examples
    --------
    >>> import gpu_dlpack
    >>> old = gpu_dlpack.set_min_dlpack_version("0.4")
    >>> gpu_dlpack.MIN_DLPACK_VERSION
    (0, 4)
    >>> gpu_dlpack.set_min_dlpack_version(old)
    (0, 4)
    """
    return _versions.set_min_version(version)


__all__ = [
    "DLPACK_VERSION", "MIN_DLPACK_VERSION", "ArrayView", "CapsuleInfo", "CaptureError", "ConsumedCapsuleError", "Conversion",
    "CopyRequiredError", "DLDeviceType", "DLPackVersionError", "Device", "DeviceUnreachableError",
    "DtypeChangeError", "Explanation", "Exportable", "FLAG_IS_COPIED", "FLAG_IS_SUBBYTE_TYPE_PADDED",
    "FLAG_READ_ONLY", "GpuDlpackError", "InvalidStreamError", "NotDLPackError", "Producer", "ReadOnlyError",
    "Shard", "StreamError", "StreamTypeError", "StreamWarning", "args_viewable", "convert", "explain", "export",
    "from_dlpack", "from_pointer", "inspect_capsule", "set_min_dlpack_version", "shards", "use_stream", "view",
    "wrap",
]

# dir() and help() show the public API: the names above, the version, and
# inspect_capsule's short name (kept out of __all__: a star import would
# shadow the standard library's inspect).
_PUBLIC = frozenset(__all__) | {"__version__", "inspect"}


class _Module(_types.ModuleType):
    # MIN_DLPACK_VERSION reads and writes the floor in force, validated. The
    # read is lazy (the environment's floor is read at its first use, and a
    # bad one raises there), which a plain module's attribute cannot be: any
    # lazy module attribute, a property or a module __getattr__ alike, takes
    # every gpu_dlpack.<name> off CPython's specialized read (about 13 ns a
    # read on 3.11); a hot loop binds the function (from gpu_dlpack import
    # export), as the benchmarks call it.
    @property
    def MIN_DLPACK_VERSION(self) -> Version:
        return _versions.min_version()

    @MIN_DLPACK_VERSION.setter
    def MIN_DLPACK_VERSION(self, value: Version | str) -> None:
        _versions.set_min_version(value)

    def __dir__(self) -> list[str]:
        return sorted(_PUBLIC)


_sys.modules[__name__].__class__ = _Module
del _Module, _sys, _types, TYPE_CHECKING, annotations
