"""Asking any producer for a capsule, old or new.

A producer written before the 2023 standard revision takes only ``stream``
(or nothing) and raises ``TypeError`` on ``max_version``, ``dl_device`` and
``copy``. It is asked again without them, and the caller does what the
producer could not. What each producer type accepts is remembered, so an old
producer costs one failed call per type, not one per exchange.

Floor: mechanism (the backends ask producers too), over the leaves.
"""

from __future__ import annotations

import datetime
import threading

from . import _errors, _peers

_CapsuleType = type(datetime.datetime_CAPI)

# type -> 1 (takes only stream) or 2 (takes nothing)
_old_producers: dict = {}



def request(x, stream=None, max_version=None, dl_device=None, copy=None):
    """``x.__dlpack__`` with what the producer accepts.

    Returns ``(capsule, full)``: ``full`` is False when the producer took none
    of ``max_version``/``dl_device``/``copy``. Only the keywords that ask for
    something are passed: a request of nothing is ``x.__dlpack__()``, which
    every producer serves (array-api-strict under API version 2022.12
    refuses even ``max_version=None``). Exceptions other than
    ``BufferError``, ``TypeError`` and ``MemoryError`` become ``BufferError`` naming the
    producer (the standard's type for a refused export); an answer that is no
    capsule is a ``TypeError`` naming the producer.
    """
    asks = asks_back(type(x))
    if asks:
        if id(x) in asked.ids:
            raise AskedAgain(x)
        answer = marked(x, _ask, x, stream, max_version, dl_device, copy)
    else:
        answer = _ask(x, stream, max_version, dl_device, copy)
    if type(answer[0]) is not _CapsuleType:
        raise _errors.producer_not_a_capsule(x, answer[0])
    return answer


class AskedAgain(Exception):
    """``request`` of a producer this thread is asking already: its own
    ``__dlpack__`` asks gpu_dlpack to export it. Never seen by users: the
    export or import of ``producer`` that made the request answers with
    the object's other protocols instead."""

    @property
    def producer(self):
        return self.args[0]


class _Asking(threading.local):
    """The producers this thread is asking for a capsule or a device, by id,
    innermost last: one that asks gpu_dlpack to export itself meanwhile is
    answered by its other protocols, not by asking it again."""

    def __init__(self):
        self.ids = []


asked = _Asking()

# type -> whether its DLPack methods may call back into gpu_dlpack: a type of
# a peer library (``_peers``) never does, and is asked without a mark.
ASKS_BACK: dict = {}


def asks_back(t) -> bool:
    """Whether producers of type ``t`` may ask gpu_dlpack back (``ASKS_BACK``)."""
    asks = ASKS_BACK.get(t)
    if asks is None:
        asks = ASKS_BACK[t] = not _peers.owns_type(t)
    return asks


def marked(x, call, *args):
    """``call(*args)`` with ``x`` marked as asked on this thread: ``request``
    asks a producer so, and ``wrap`` reads its device so (a
    ``__dlpack_device__`` that wraps the object itself recurses no more than
    a ``__dlpack__`` that does)."""
    ids = asked.ids
    depth = len(ids)
    # Made and cut back inside the try, as _versions.under_floor does its
    # floor: an interrupt landing anywhere leaves no stale mark behind.
    try:
        ids.append(id(x))
        answer = call(*args)
        del ids[depth:]
    except BaseException:
        del ids[depth:]
        raise
    return answer


def asking(x) -> bool:
    """Whether this thread is inside a request to ``x.__dlpack__`` (or a read
    of its device): an export of ``x`` now comes from ``x``'s own methods."""
    return id(x) in asked.ids


def _ask(x, stream, max_version, dl_device, copy):
    method = type(x).__dlpack__
    level = _old_producers.get(type(x), 0)
    try:
        if level == 2:
            return method(x), False
        if level == 1 or (max_version is None and dl_device is None and copy is None):
            # At most stream=, which every producer takes (no keyword at all for nothing).
            return (method(x) if stream is None else method(x, stream=stream)), level == 0
        try:
            if stream is None and dl_device is None and copy is None:
                return method(x, max_version=max_version), True  # the common request, without building keywords
            keywords = (("max_version", max_version), ("stream", stream), ("dl_device", dl_device), ("copy", copy))
            return method(x, **{k: v for k, v in keywords if v is not None}), True
        except TypeError as first:
            return _retry(x, method, stream, first), False
    except (BufferError, TypeError, MemoryError):
        raise  # out of memory is no refusal: a caller catching MemoryError sees it
    except Exception as exc:
        raise _errors.producer_refused(x, exc) from exc


def answer_after(x, error, max_version):
    """What ``request(x, max_version=max_version)`` answers when the
    producer's ``__dlpack__``, asked as ``request`` asks it first, raised
    ``error`` (the compiled core asks the producers it was told about
    itself): a ``TypeError`` of a versioned request is an old producer's,
    asked again without the keyword; any other error is raised as
    ``request`` raises it."""
    method = type(x).__dlpack__
    try:
        if max_version is not None and isinstance(error, TypeError):
            return _retry(x, method, None, error), False
        raise error
    except (BufferError, TypeError, MemoryError):
        raise
    except Exception as exc:
        raise _errors.producer_refused(x, exc) from exc


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
