"""The types the public API speaks of, for annotations.

Floor: the leaves, at the bottom: it imports nothing of the package (and of
CuPy, an optional peer, only what type checkers read).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Tuple, Union

import numpy as np

if TYPE_CHECKING:
    import cupy
    import numpy.typing as npt

#: A DLPack ``PyCapsule`` (``types.CapsuleType`` from Python 3.13 on).
Capsule = Any

#: A DLPack version, ``(major, minor)``.
Version = Tuple[int, int]

#: What ``Device`` reads: a ``Device``, a name (``"cpu"``, ``"cuda:1"``), a
#: ``(device_type, device_id)`` pair, a ``DLDeviceType`` or its value, a
#: torch or JAX device.
DeviceLike = Any

#: A GPU stream: an int handle, or a stream object (``cupy.cuda.Stream``,
#: ``torch.cuda.Stream``, anything with ``__cuda_stream__``...).
StreamLike = Union[int, Any]

#: What ``from_dlpack`` returns: a NumPy array for host memory, a CuPy array
#: on a GPU. (At run time CuPy may be missing: its half is Any there.)
if TYPE_CHECKING:
    Array = Union[npt.NDArray[Any], cupy.ndarray]
else:
    Array = Union[np.ndarray, Any]
