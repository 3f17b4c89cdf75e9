"""The CuPy backend as a producer: CuPy arrays, and host arrays bound for a
GPU-side target, as capsules under the rules' plan. CuPy's exporter makes
the zero-copy capsule, unsynchronized: the hand-off is made here, then the
capsule is corrected (version, flags, device label, dtype).

Floor: the backends, beside ``imports``, over ``copies`` and ``gpus``.
"""

from __future__ import annotations

import numpy as np

from ... import _capsule, _dtypes, _errors, _handoff, _rules, _streams, _versions
from ..._devices import CPU
from .. import _reach
from .. import numpy as numpy_backend
from .copies import _copy_from_gpu, _copy_from_host
from .gpus import _before_host_access, _stream_gpu, device_of

_ASK = (1, 0)  # what CuPy's exporter produces; relabelled DLPACK_VERSION


def export_array(x, readonly, stream, max_version, dl_device, copy):
    """A capsule for CuPy array ``x``, following the rules (``__dlpack__``'s
    arguments; ``stream`` is the consumer's, for the memory it receives)."""
    _handoff.collect()
    source = device_of(x)
    dtype = _dtypes.from_numpy(x.dtype)
    plan = _rules.plan_export(
        source, bool(readonly), dtype.code, dtype.bits, max_version, dl_device, copy,
        _reach.can_copy, _reach.addressable,
    )
    stream = _streams.check_stream(stream, plan.target.type)
    gpu = x.data.device_id
    producer = _handoff.current_stream(gpu)
    if plan.copy:
        host_done = _streams.finishes_before_return(plan.target.type, stream)
        out = _copy_from_gpu(x, gpu, producer, plan.target, stream, host_done)
        return _export_copied(out, plan, dtype)
    # Zero-copy: the same memory, ordered for the consumer, perhaps relabelled
    # (managed memory to the CPU, memory the target GPU addresses in place).
    if _streams.finishes_before_return(plan.target.type, stream, copied=False):
        _before_host_access(source, producer, gpu)
    elif stream != -1:
        consumer = _streams.resolve(stream, plan.target.type)
        _handoff.handoff(producer, consumer, gpu, _stream_gpu(plan.target, gpu))
    capsule = _capsule_of(x, dtype, plan.versioned)
    if plan.versioned:
        flags = _subbyte_flag(dtype) | (_capsule.READ_ONLY if plan.read_only else 0)
        _capsule.set_flags(capsule, flags)
    _capsule.set_device(capsule, *plan.target.dlpack)
    return capsule


def export_host(arr, plan, dtype, stream):
    """A capsule for host array ``arr`` (NumPy) on the GPU-side target of
    ``plan``: pinned memory, managed memory or a GPU. ``stream`` is checked
    for the target's device type."""
    _handoff.collect()
    target = plan.target
    if not plan.copy:
        # Memory the target addresses in place (or pinned memory relabelled).
        host_plan = _rules.Plan(plan.versioned, False, CPU, CPU, plan.read_only)
        capsule = numpy_backend.export(arr, host_plan, dtype)
        _capsule.set_device(capsule, *target.dlpack)
        return capsule
    host_done = _streams.finishes_before_return(target.type, stream)
    out = _copy_from_host(arr, dtype, target, stream, host_done)
    return _export_copied(out, plan, dtype)


def _capsule_of(arr, dtype, versioned):
    """CuPy's zero-copy capsule for ``arr`` (the hand-off already made),
    carrying DLPACK_VERSION and the real dtype."""
    view = arr if dtype.carrier is None or arr.dtype == dtype.carrier else arr.view(dtype.carrier)
    try:
        capsule = view.__dlpack__(stream=-1, max_version=_ASK if versioned else None)
    except TypeError:
        if versioned:
            raise _errors.old_cupy("export a versioned DLPack capsule") from None
        capsule = view.__dlpack__(stream=-1)
    except Exception as exc:  # CuPy raises ValueError where the standard says BufferError
        raise _errors.gpu_failed("export the array", exc) from exc
    if versioned:
        _capsule.set_version(capsule, _versions.DLPACK_VERSION)
    if dtype.carrier is not None:
        _capsule.set_dtype(capsule, dtype.code, dtype.bits)
    return capsule


def _subbyte_flag(dtype) -> int:
    return _capsule.IS_SUBBYTE_TYPE_PADDED if dtype.padded else 0


def _export_copied(out, plan, dtype):
    """The capsule of a fresh copy (a CuPy array, or a NumPy array over
    pinned memory), flagged IS_COPIED and labelled with the target."""
    if isinstance(out, np.ndarray):
        host_plan = _rules.Plan(plan.versioned, False, CPU, CPU, False)
        capsule = numpy_backend.export(out, host_plan, dtype)
    else:
        capsule = _capsule_of(out, dtype, plan.versioned)
    if plan.versioned:
        _capsule.set_flags(capsule, _capsule.IS_COPIED | _subbyte_flag(dtype))
    _capsule.set_device(capsule, *plan.target.dlpack)
    return capsule
