"""DLPack versions: what gpu_dlpack produces, the floor it refuses below, and
which version first described each dtype and device type.

Floor: the leaves, over ``_devices`` and ``_dtypes``.
"""

from __future__ import annotations

import os
import threading

from . import _errors
from . import _compiled
from ._devices import DLDeviceType
from ._dtypes import describe_code

#: The newest DLPack version gpu_dlpack produces. Every versioned capsule it
#: hands out carries this version. 1.2 is the first version that requires
#: strides for ``ndim > 0``, which every capsule made here has; 1.1 added the
#: float8/6/4 codes.
DLPACK_VERSION = (1, 2)

#: Default floor: the lowest ``max_version`` a consumer may ask for. 0.5 is
#: where the CUDA names settled (kDLGPU became kDLCUDA).
DEFAULT_MIN_VERSION = (0, 5)

ENV_MIN_VERSION = "GPU_DLPACK_MIN_VERSION"

# The DLPack version that introduced each dtype code (dlpack NEWS.md and
# dlpack.h). Codes not listed here are unknown.
DTYPE_SINCE = {
    0: (0, 0),   # int
    1: (0, 0),   # uint
    2: (0, 0),   # float
    3: (0, 4),   # opaque handle
    4: (0, 3),   # bfloat
    5: (0, 4),   # complex
    6: (0, 8),   # bool
    **{code: (1, 1) for code in range(7, 18)},  # float8/6/4 family
}

# The DLPack version that introduced the IS_SUBBYTE_TYPE_PADDED flag, which
# every sub-byte dtype exported here carries (one element per byte).
SUBBYTE_PADDED_SINCE = (1, 1)

# The DLPack version that introduced each device type.
DEVICE_SINCE = {
    1: (0, 0), 2: (0, 0), 3: (0, 0), 4: (0, 0), 7: (0, 3), 8: (0, 2), 9: (0, 2),
    10: (0, 2), 11: (0, 6), 12: (0, 0), 13: (0, 6), 14: (0, 7), 15: (0, 7),
    16: (0, 7), 17: (1, 0), 18: (1, 2),
}


def parse_floor(value, source):
    """A floor from ``(0, 8)`` or ``"0.8"``; ValueError naming ``source`` else."""
    floor = value
    if isinstance(value, str):
        try:
            floor = tuple(int(p) for p in value.replace(",", ".").strip("() ").split("."))
        except ValueError:
            raise _errors.bad_floor(value, source) from None
    # Plain tests, no generator expression: CPython 3.12.1 and 3.13.0 crash
    # when one of its allocations fails (docs/internals/faults.md).
    if not isinstance(floor, tuple) or len(floor) != 2 or type(floor[0]) is not int or type(floor[1]) is not int:
        raise _errors.bad_floor(value, source)
    if not (0 <= floor[0] <= DLPACK_VERSION[0] and floor[1] >= 0):
        raise _errors.bad_floor(floor, source)
    return floor


class _CallFloor(threading.local):
    #: The floor of the call under way on this thread (export(min_version=),
    #: wrap(min_version=)), when it has one.
    floor = None


_local = _CallFloor()


def _floor_from_environment():
    """The floor in force at its first use: GPU_DLPACK_MIN_VERSION, read
    then (not at import), so that setting it after the import works and a
    bad value is an error of the exchange that needs the floor; else the
    default."""
    raw = os.environ.get(ENV_MIN_VERSION)
    return parse_floor(raw, ENV_MIN_VERSION) if raw else DEFAULT_MIN_VERSION


#: The version check and its state, in the compiled core (a ``_compiled.Verdict``,
#: whose docstrings say each piece): the rule is its ``check``, this module
#: the policy it reads.
VERDICT = _compiled.Verdict(DLPACK_VERSION, _floor_from_environment, _local)
#: The calls under way with a floor of their own (``under_floor``).
calls_with_own_floor: list = VERDICT.calls
#: ``check_max_version(max_version, floor=None)``: True for a versioned request.
check_max_version = VERDICT.check
#: The floor in force.
min_version = VERDICT.in_force


def set_min_version(value):
    """Set the floor; returns the previous one. Accepts (0, 8) or '0.8'."""
    floor = parse_floor(value, "MIN_DLPACK_VERSION")
    try:
        previous = min_version()
    except ValueError:  # the bad environment value never took effect
        previous = DEFAULT_MIN_VERSION
    VERDICT.floor = floor
    return previous


def under_floor(floor, call, *args):
    """``call(*args)`` with the exchanges it makes on this thread checking
    ``max_version`` against ``floor`` instead of the floor in force (a floor
    of one call or one wrapper). The thread's floor is put back on each way
    out, inside the try or its handler, so that an interrupt landing anywhere
    leaves no floor behind (not a ``with`` block or a finally: CPython runs
    their normal exit as code outside the try, which an interrupt landing
    after the call skips)."""
    outer = _local.floor
    mark = object()  # this call's entry (compared by identity)
    try:
        _local.floor = floor
        calls_with_own_floor.append(mark)
        answer = call(*args)
        _local.floor = outer
        calls_with_own_floor.remove(mark)
    except BaseException:
        _local.floor = outer
        if mark in calls_with_own_floor:
            calls_with_own_floor.remove(mark)
        raise
    return answer


def check_describable(max_version, dtype_code, device_type):
    """BufferError when a legacy consumer's version predates the dtype or device.

    Only major 0 is checked: within major 1 the consumer accepts any minor
    version by the standard, and checks dtype codes itself (PyTorch asks for
    1.0 yet reads the float8 codes of 1.1).
    """
    if max_version is None or max_version[0] >= 1:
        return
    need = DTYPE_SINCE.get(dtype_code, (0, 0))
    if max_version < need:
        raise _errors.needs_version(f"dtype {describe_code(dtype_code)}", need, max_version)
    need = DEVICE_SINCE.get(int(device_type), (0, 0))
    if max_version < need:
        raise _errors.needs_version(
            f"device type {DLDeviceType(device_type).name}", need, max_version
        )
