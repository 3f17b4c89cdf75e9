"""Asking any producer for a capsule, old or new.

A producer written before the 2023 standard revision takes only ``stream``
(or nothing) and raises ``TypeError`` on ``max_version``, ``dl_device`` and
``copy``. It is asked again without them, and the caller does what the
producer could not. What each producer type accepts is remembered, so an old
producer costs one failed call per type, not one per exchange.
"""

from __future__ import annotations

import datetime

from . import _errors

_CapsuleType = type(datetime.datetime_CAPI)

# type -> 1 (takes only stream) or 2 (takes nothing)
_old_producers: dict = {}

#: Producer types that answered a versioned request with a legacy capsule
#: (JAX always does). Their capsules are opened as legacy first: only a guess
#: that saves a ctypes call, since the capsule's name is always checked.
gave_legacy: set = set()


def producer_name(x) -> str:
    t = type(x)
    return f"{t.__module__}.{t.__qualname__}"


def request(x, stream=None, max_version=None, dl_device=None, copy=None):
    """``x.__dlpack__`` with what the producer accepts.

    Returns ``(capsule, full)``: ``full`` is False when the producer took none
    of ``max_version``/``dl_device``/``copy``. Exceptions other than
    ``BufferError``, ``TypeError`` and ``MemoryError`` become ``BufferError`` naming the
    producer (the standard's type for a refused export); an answer that is no
    capsule is a ``TypeError`` naming the producer.
    """
    answer = _ask(x, stream, max_version, dl_device, copy)
    if type(answer[0]) is not _CapsuleType:
        raise _errors.producer_not_a_capsule(producer_name(x), answer[0])
    return answer


def _ask(x, stream, max_version, dl_device, copy):
    method = type(x).__dlpack__
    level = _old_producers.get(type(x), 0)
    try:
        if level == 0 and stream is None and dl_device is None and copy is None:
            try:  # the common request, without building keywords
                return method(x, max_version=max_version), True
            except TypeError as first:
                return _retry(x, method, stream, first), False
        if level == 0:
            kwargs = {"max_version": max_version}
            if stream is not None:
                kwargs["stream"] = stream
            if dl_device is not None:
                kwargs["dl_device"] = dl_device
            if copy is not None:
                kwargs["copy"] = copy
            try:
                return method(x, **kwargs), True
            except TypeError as first:
                return _retry(x, method, stream, first), False
        if level == 1:
            return (method(x) if stream is None else method(x, stream=stream)), False
        return method(x), False
    except (BufferError, TypeError, MemoryError):
        raise  # out of memory is no refusal: a caller catching MemoryError sees it
    except Exception as exc:
        raise _errors.producer_refused(producer_name(x), exc) from exc


def _retry(x, method, stream, first):
    try:
        capsule = method(x) if stream is None else method(x, stream=stream)
        _old_producers[type(x)] = 1
        return capsule
    except TypeError:
        pass
    try:
        capsule = method(x)
    except TypeError:
        raise first from None
    _old_producers[type(x)] = 2
    return capsule
