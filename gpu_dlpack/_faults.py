"""What ``gpu_dlpack.convert`` does about what a consumer cannot honour.

The faults themselves are data (``_peers``: each library's ``faults`` by
version, ``FAULTS`` for what each id means). Given the faults of the
consumer's installed version, what the capsule holds and what the caller
asked (``copy``, ``on_readonly``), ``fix`` decides: hand the capsule over as
it is, copy what it holds (compact, writeable, aligned where the consumer
needs it), hand read-only data over writeable because the caller said so,
or refuse with the error that names the cause. Nothing is dropped
silently: every fault acted on is named in the decision.

Floor: policy, beside ``_rules``, over the leaves: it knows no backend, no
capsule and no peer library.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from . import _errors, _rules
from ._devices import DLDeviceType, types
from ._peers import ALIGNMENT, FAULTS

#: What ``convert(..., on_readonly=...)`` takes, the default first.
POLICIES = ("copy", "share", "refuse")

#: Faults for which a consumer cannot hold data read-only, in the order
#: their reason is given.
READ_ONLY = ("read-only-ignored", "always-writeable", "legacy-only", "read-only-unknown")
_READ_ONLY = frozenset(READ_ONLY)

#: What a consumer with "narrows-64-bit" makes of a DLPack (code, bits):
#: (the dtype, the narrower one it would hold).
NARROWED = {
    (0, 64): ("int64", "int32"), (1, 64): ("uint64", "uint32"), (2, 64): ("float64", "float32"),
    (5, 128): ("complex128", "complex64"),
}

#: ...and a consumer with "narrows-float64" (MLX, which has no float64).
NARROWED_FLOATS = {(2, 64): NARROWED[(2, 64)], (5, 128): NARROWED[(5, 128)]}


class Fix(NamedTuple):
    """What the layer does before a consumer imports a capsule."""

    copy: bool            # hand over a copy of what the capsule holds (compact, writeable)
    align: bool           # ... starting on an ALIGNMENT boundary
    share: bool           # read-only data handed over writeable, as the caller chose
    applied: tuple        # the fault ids acted on
    reasons: tuple        # what is done and why, a sentence each
    consumer_copies: str | None = None  # a copy the consumer will make itself, and why


PLAIN = Fix(False, False, False, (), ())

#: Faults judged before the consumer is called, on where the data is: it
#: reads the producer's device first, and would not live to raise.
BEFORE_CALL = frozenset({"gpu-import-crashes"})

#: The memory a consumer's row may say it cannot hold here (``_peers.Peer.holds_gpu``).
_GPU_MEMORY = types(gpu=True, host=False)


def before_call(consumer: str, version: str | None, faults: frozenset, device, holds_gpu=None) -> None:
    """Raises ``DeviceUnreachableError`` where the consumer (``faults``: its
    active ones) would crash the process on data on ``device`` rather than
    raise, or where its build cannot hold that memory here (``holds_gpu``:
    its row's probe, asked; None where the row has none): it would refuse
    with an error of its own, which says nothing of the layer's remedy."""
    if "gpu-import-crashes" in faults and device.type is not DLDeviceType.CPU:
        raise _errors.unreachable(device, consumer, f"{consumer} {version or ''} has no GPU, and it "
                                  "crashes the process on GPU data rather than raise")
    if holds_gpu is not None and device.type in _GPU_MEMORY and not holds_gpu():
        raise _errors.consumer_without_gpu(consumer, version, device)


def for_landing(faults: frozenset, lands: str | None) -> frozenset:
    """The faults that matter when gpu_dlpack lands the data itself
    (``lands`` not None): only those of the library's arrays, since its
    own ``from_dlpack`` is not called."""
    if lands is None:
        return faults
    return frozenset(f for f in faults if FAULTS[f][1] == "arrays")


def has_negative(shape, strides) -> bool:
    """A negative stride on an axis that is walked (more than one element),
    in an array that has elements."""
    if strides is None or 0 in shape:
        return False
    return any(s < 0 and n > 1 for n, s in zip(shape, strides))


def is_compact(shape, strides) -> bool:
    """Whether the layout is a transposition of a dense buffer: the strides
    (in elements) of the axes longer than one are, smallest first, 1 and the
    products of the lengths before them. None (C order) is compact."""
    if strides is None or 0 in shape:
        return True
    expect = 1
    for stride, n in sorted((s, n) for n, s in zip(shape, strides) if n != 1):
        if stride != expect:
            return False
        expect *= n
    return True


#: The layout faults, in the order they are acted on: (fault, whether a
#: layout of ``(shape, strides)`` has it, what its copy is called, whether
#: any compact copy, made for an earlier fault, already serves it).
_LAYOUT_FAULTS = (
    ("negative-strides", has_negative, "copied", False),
    ("negative-strides-anywhere", lambda shape, strides: strides is not None and min(strides, default=0) < 0,
     "copied", True),
    ("non-compact-strides", lambda shape, strides: not is_compact(shape, strides), "copied", False),
    ("c-order-only", lambda shape, strides: not _rules.c_order(shape, strides), "copied in C order", True),
)


def fix(consumer: str, faults: frozenset, *, read_only: bool, shape: tuple, strides, host: bool,
        address: int, copy, on_readonly: str, dtype: tuple = (), settings: dict | None = None) -> Fix:
    """What to do with a capsule of these facts for ``consumer`` (its name,
    for messages) with ``faults`` (those turned off by a setting left out:
    ``settings`` names the setting of each such fault); ``copy`` as the
    caller asked (a copy the layer made already holds writeable, compact
    data). Raises ``DtypeChangeError``, ``ReadOnlyError`` or
    ``CopyRequiredError`` where the caller's choices leave no correct
    exchange."""
    kind = tuple(dtype[:2])
    if "narrows-64-bit" in faults and kind in NARROWED:
        raise _errors.narrowing_refused(consumer, *NARROWED[kind], (settings or {}).get("narrows-64-bit", "x64"))
    if "narrows-float64" in faults and kind in NARROWED_FLOATS:
        raise _errors.float_narrowing_refused(consumer, *NARROWED_FLOATS[kind])
    if "reads-padded-subbyte-packed" in faults and kind and kind[1] < 8 and math.prod(shape) > 1:
        raise _errors.subbyte_misread_refused(consumer, kind)
    copies = share = False
    applied, reasons = [], []
    if read_only and faults & _READ_ONLY:
        fault = next(f for f in READ_ONLY if f in faults)
        why = FAULTS[fault][0]
        if on_readonly == "refuse":
            raise _errors.readonly_refused(consumer, why)
        if on_readonly == "share":
            share = True
            reasons.append(
                f"read-only data handed to {consumer} writeable, as on_readonly='share' asked ({consumer} {why})")
        elif copy is False:
            raise _errors.readonly_needs_copy(consumer, why)
        else:
            copies = True
            reasons.append(f"copied: the data is read-only and {consumer} {why}")
        applied.append(fault)
    for fault, has, done, fixed_by_any_copy in _LAYOUT_FAULTS:
        if fault in faults and not (fixed_by_any_copy and copies) and has(shape, strides):
            why = f"{consumer} {FAULTS[fault][0]}"
            if copy is False:
                raise _errors.layout_needs_copy(consumer, shape, strides, why)
            copies = True
            applied.append(fault)
            reasons.append(f"{done}: {why}")
    align = False
    consumer_copies = None
    if "unaligned-copies" in faults and host and copies:
        align = True  # the layer's copy starts aligned: the consumer takes it in place
    elif "unaligned-copies" in faults and host and address % ALIGNMENT:
        if copy is False:
            raise _errors.unaligned_needs_copy(consumer, address, ALIGNMENT)
        consumer_copies = f"{consumer} {FAULTS['unaligned-copies'][0]}"
    if not (copies or share or consumer_copies):
        return PLAIN
    return Fix(copies, align, share, tuple(applied), tuple(reasons), consumer_copies)
