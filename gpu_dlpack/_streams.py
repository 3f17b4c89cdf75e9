"""The stream rules of the DLPack ``__dlpack__(stream=...)`` argument, per
device type, as data (array API standard, ``__dlpack__``).

Floor: the leaves, over ``_devices``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import warnings
from typing import Iterator

from . import _devices, _errors
from ._devices import Device, DLDeviceType
from ._typing import DeviceLike, StreamLike

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

# By the runtime that serves the memory (``_devices.MEMORY``); host memory
# has no stream.
RULES = {t: {"cuda": CUDA_RULES, "rocm": ROCM_RULES}[m.stack] for t, m in _devices.MEMORY.items() if m.stack}

# CUDA 0 is ambiguous (legacy or per-thread default?). Older PyTorch sends
# it, so it is accepted as the legacy default stream, with a warning.
_CUDA_ZERO = _devices.types(stack="cuda")


def rules_for(device_type):
    return RULES.get(device_type, HOST_RULES)


def describe(device_type) -> str:
    """The valid values for a device type, for error messages."""
    parts = [
        f"{'an int > 2' if key == ABOVE_2 else repr(key)} ({meaning})" for key, meaning in rules_for(device_type).items()
    ]
    if device_type in _CUDA_ZERO:
        parts.append("0 (ambiguous; taken as the legacy default stream, with a StreamWarning)")
    return ", ".join(parts)


def check_stream(stream, device_type):
    """Validate a consumer's stream for memory of ``device_type``; returns it
    (CUDA ``0`` as ``1``, with a ``StreamWarning``)."""
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
            stacklevel=_caller_level(),
        )
        return 1
    raise _errors.bad_stream_value(stream, DLDeviceType(device_type).name, describe(device_type))


_PACKAGE = __name__.partition(".")[0]


def _caller_level():
    """The ``stacklevel`` of the first frame outside gpu_dlpack (the user's
    call), however many frames each path takes to reach ``check_stream``."""
    frame, level = sys._getframe(2), 2  # check_stream's caller
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == _PACKAGE:
        frame, level = frame.f_back, level + 1
    return level


# -- the handle each special value names --------------------------------------

#: The stream ``None`` names, as a handle a backend can queue work on: the
#: legacy default stream on CUDA (``cudaStreamLegacy``), the null stream on ROCm.
DEFAULT_HANDLE = {device_type: 1 if rules is CUDA_RULES else 0 for device_type, rules in RULES.items()}


def resolve(stream, device_type) -> int:
    """The handle a checked ``stream`` names for memory of ``device_type``:
    ``-1`` (no synchronization) or a stream to queue work on."""
    if stream is None:
        return DEFAULT_HANDLE[device_type]
    return stream


# -- copies the host may read at once -----------------------------------------

INDEXED_TYPES = _devices.types(indexed=True)
#: Pinned and managed memory: read by the host or by a GPU.
_HOST_READABLE = _devices.types(host=True, gpu=True)

#: Import targets whose results are NumPy arrays (host memory, read by the
#: host at once): a copy into them is complete when ``from_dlpack`` returns.
#: Other results are CuPy arrays, ordered on the consumer's stream.
HOST_RESULTS = _devices.types(array="numpy")


def finishes_before_return(target_type, stream, copied=True) -> bool:
    """Whether data for ``target_type`` (a copy, or memory exported in place)
    must be complete when the call returns: always on the CPU (its consumer
    has no stream); in pinned and managed memory, unless the consumer named
    a stream to queue on. ``-1`` names none for a copy (whose stream the
    consumer cannot know), but for memory exported in place it means the
    consumer synchronizes the producer itself. GPU memory: never."""
    if target_type == DLDeviceType.CPU:
        return True
    return target_type in _HOST_READABLE and (stream is None or (stream == -1 and copied))


# -- stream objects -------------------------------------------------------------

def handle_of(stream):
    """The int handle of a stream object (``__cuda_stream__()``, ``.ptr``,
    ``.cuda_stream`` or ``.handle``, in this order), or ``stream`` itself
    when it is none (``check_stream`` then judges it). A stream object's
    null handle is unambiguous: on CUDA, the legacy default stream (1),
    without the warning a bare ``0`` gets."""
    if stream is None or hasattr(stream, "__index__"):
        return stream  # an int or an integer type (numpy.int64...): check_stream takes it
    handle = _read_handle(stream)
    if handle is None:
        return stream
    if handle == 0:
        return 0 if _devices.cupy_is_rocm() else DEFAULT_HANDLE[DLDeviceType.CUDA]
    return handle


def _read_handle(stream):
    protocol = getattr(type(stream), "__cuda_stream__", None)
    if protocol is not None:
        try:
            version, handle = protocol(stream)
        except (TypeError, ValueError):
            raise _errors.bad_cuda_stream_protocol(stream) from None
        return int(handle)
    for attr in ("ptr", "cuda_stream"):
        value = getattr(stream, attr, None)
        if type(value) is int:
            return value
    handle = getattr(stream, "handle", None)
    if handle is None:
        return None
    value = getattr(handle, "value", handle)  # ctypes.c_void_p: .value, None for NULL
    if value is None:
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def device_index_of(stream):
    """The GPU index a stream object belongs to, when it says (CuPy
    ``.device_id``, PyTorch ``.device.index``); None when unknown."""
    index = getattr(stream, "device_id", None)
    if type(index) is int:
        return index if index >= 0 else None
    device = getattr(stream, "device", None)
    index = getattr(device, "index", None)
    return index if type(index) is int else None


# -- the exchange stream of a block -------------------------------------------

_local = threading.local()  # .stack: (handle, GPU index) of each block, innermost last


@contextlib.contextmanager
def use_stream(stream: StreamLike, device: DeviceLike | int | None = None) -> Iterator[StreamLike]:
    """Run a block of exchanges on one stream.

    Inside the block, `from_dlpack`, `convert`, `view` (and `export` of GPU
    memory) take ``stream`` as the consumer's stream whenever no ``stream=`` is
    given: an imported array is ready to use on it, any copy is queued on it,
    and the producer's pending work is made to wait for it, without blocking
    the host. Blocks nest and are per thread. CuPy's current stream is left
    alone: the producer's stream is always the one its work was queued on.

    Parameters
    ----------
    stream : int or stream object
        An int handle or a stream object (``cupy.cuda.Stream``,
        ``torch.cuda.Stream``, a Numba stream, anything with
        ``__cuda_stream__``, ``.ptr``, ``.cuda_stream`` or ``.handle``);
        ``-1`` asks for no synchronization.
    device : str, tuple, Device or int, optional
        The GPU the block is for (any form `Device` reads, or an index), when
        the stream object does not say which it belongs to.

    Yields
    ------
    int or stream object
        ``stream``, as given.

    Raises
    ------
    StreamTypeError
        ``stream`` is no stream (nor a stream object's handle).

    Examples
    --------
    >>> import gpu_dlpack
    >>> with gpu_dlpack.use_stream(-1):  # exchange without synchronization
    ...     pass

    On a GPU, every exchange of the block on PyTorch's stream ``s``::

        with gpu_dlpack.use_stream(s):
            d = gpu_dlpack.from_dlpack(t)   # a CuPy array, ready on s
    """
    handle = handle_of(stream)
    if type(handle) is not int:
        raise _errors.bad_stream_object(stream)
    if handle < -1:
        raise _errors.bad_stream_value(handle, "a GPU", describe(DLDeviceType.CUDA))
    index = device_index_of(stream)
    if device is not None:
        index = device if type(device) is int else Device(device).index
    stack = _local.__dict__.setdefault("stack", [])
    stack.append((handle, index))
    try:
        yield stream
    finally:
        stack.pop()


def in_block() -> bool:
    """Whether this thread is inside a ``use_stream`` block."""
    return bool(_local.__dict__.get("stack"))


def block_stream(device):
    """The stream of the innermost ``use_stream`` block that covers
    ``device`` (a ``Device`` whose type has GPU streams), or None."""
    if device.type not in RULES:
        return None
    stack = getattr(_local, "stack", None)
    if not stack:
        return None
    handle, index = stack[-1]
    if index is not None and index != device.index and device.type in INDEXED_TYPES:
        return None
    return handle

