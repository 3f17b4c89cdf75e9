"""The exchange rules: what must happen for a request, never how.

Given where the data is, whether it may be written, and what the consumer
asked for, these functions decide the capsule kind, whether a copy is made,
the target device, and the READ_ONLY flag, or raise the error the standard
names. The backends (``_backends``) then do it.

Floor: policy, over the mechanism and the leaves: it knows no backend and no
capsule.
"""

from __future__ import annotations

from typing import NamedTuple

from . import _errors, _peers, _versions
from ._devices import CPU, DEVICE_ACCESSIBLE, MEMORY, Device, DLDeviceType, HOST_ACCESSIBLE, types

_T = DLDeviceType

# Moves that need no copy: memory the host can address is CPU memory to a
# consumer that asks for the CPU (the standard's (kDLCPU, 0) requirement).
# Managed memory is read after the producer's stream is synchronized.
ZERO_COPY_MOVES = frozenset((src, _T.CPU) for src in HOST_ACCESSIBLE)

# Moves that need no copy where the target GPU can address the source memory,
# which the backend reports from the hardware: pinned host memory (mapped into
# every GPU under unified addressing), managed memory, and pageable host memory
# on systems whose GPUs use the host's page tables (ATS, as on Grace Hopper).
MAPPED_MOVES = frozenset(
    (src, dst) for dst in types(indexed=True) for src in HOST_ACCESSIBLE
    if MEMORY[src].stack in (None, MEMORY[dst].stack)
)

# Moves a copy can make, given a backend for each end: any host-readable
# memory to the CPU, and every move among the memory kinds of one GPU stack
# (host, device, pinned, managed): host-to-device, device-to-host, and
# device-to-device, including peer copies between two GPUs.
_STACKS = [types(stack=None) | types(stack=s) for s in ("cuda", "rocm")]
COPY_MOVES = ZERO_COPY_MOVES | frozenset((src, dst) for stack in _STACKS for src in stack for dst in stack)

# Device types whose arrays cannot be read-only (CuPy arrays are always
# writeable): a READ_ONLY capsule that lands there must be copied.
ALWAYS_WRITEABLE = types(array="cupy")


class Plan(NamedTuple):
    """What an export will produce. (A NamedTuple: made in 100 ns, where a
    frozen dataclass took 580 ns, on every export that is not NumPy's own.)"""

    versioned: bool
    copy: bool
    source: Device
    target: Device
    read_only: bool

    @property
    def moves(self) -> bool:
        return self.source != self.target


def check_copy(copy):
    if copy is not None and copy is not True and copy is not False:
        raise _errors.bad_copy(copy)


def target_device(source: Device, dl_device) -> Device:
    """The device a consumer asked for (``dl_device=None``: the source's)."""
    if dl_device is None:
        return source
    if type(dl_device) is Device:
        target = dl_device
    elif isinstance(dl_device, (tuple, list)):
        try:
            target = Device(tuple(dl_device))
        except ValueError as exc:
            raise _errors.bad_dl_device(dl_device, exc) from None
    else:
        # Any form Device reads ("cpu", "cuda:0", a torch device), as device=
        # takes it everywhere else; the keyword keeps the standard's name.
        try:
            target = Device(dl_device)
        except TypeError:
            raise _errors.bad_dl_device_type(dl_device) from None
    return _host_id_zero(target, dl_device)


def _host_id_zero(target: Device, asked) -> Device:
    # Host memory is one address space: a consumer may ask for device id 0
    # only (the standard's (kDLCPU, 0)), though a producer may number it.
    if target.index and target.type in HOST_ACCESSIBLE:
        raise _errors.host_device_id(asked, target)
    return target


def capsule_agrees(said: Device, device_type: int, device_id: int) -> bool:
    """Whether a capsule on ``(device_type, device_id)``, asked for the
    producer's own device, is where its ``__dlpack_device__`` said
    (``said``). The report is the contract a consumer acts on (the stream
    it hands over, the copy it asks for) and the capsule names the memory
    itself: a producer whose two answers differ is refused, never read by
    either one. Host memory is one address space, whatever id a producer
    numbers it by (JAX's CPU devices): its type alone must agree."""
    if device_type != said.type:
        return False
    memory = MEMORY.get(said.type)
    return (memory is not None and not memory.indexed) or device_id == said.index


def zero_copy(source: Device, target: Device, addressable=None) -> bool:
    """Whether data on ``source`` can be used on ``target`` without a copy.
    ``addressable(source, target)`` is the backend's word on the hardware for
    the ``MAPPED_MOVES``; without it those moves copy."""
    if source == target or (source.type, target.type) in ZERO_COPY_MOVES:
        return True
    return (
        addressable is not None
        and (source.type, target.type) in MAPPED_MOVES
        and addressable(source, target)
    )


def check_move(source: Device, target: Device) -> None:
    """BufferError unless a copy can move data from ``source`` to ``target``."""
    if source != target and (source.type, target.type) not in COPY_MOVES:
        raise _errors.unreachable(source, target)


def plan_export(
    source, readonly, code, bits, max_version, dl_device, copy, can_copy_to, addressable=None
) -> Plan:
    """Decide an export.

    ``readonly`` is True, False, or None when unknown (a legacy producer: its
    data is treated as read-only in a versioned capsule, and passed on as it
    came in a legacy one). ``code`` and ``bits`` are the DLPack dtype.
    ``can_copy_to(source, target)`` says whether the installed backends can
    make a copy the rules allow (``COPY_MOVES``); ``addressable`` is as for
    ``zero_copy``.
    """
    versioned = _versions.check_max_version(max_version)
    check_copy(copy)
    target = target_device(source, dl_device)
    needs_copy = copy is True
    if not zero_copy(source, target, addressable):
        check_move(source, target)
        if not can_copy_to(source, target):
            far = target if target.type != _T.CPU else source
            raise _errors.no_backend(far, far.type in DEVICE_ACCESSIBLE)
        if copy is False:
            raise _errors.copy_forbidden(source, target, "the data is not addressable there")
        needs_copy = True
    read_only = not needs_copy and readonly is not False
    if not versioned and not needs_copy and readonly is True:
        raise _errors.readonly_legacy(_peers.legacy_askers())
    if max_version is not None:
        _versions.check_describable(max_version, code, target.type)
    if bits < 8 and (not versioned or max_version < _versions.SUBBYTE_PADDED_SINCE):
        raise _errors.needs_version(f"a {bits}-bit dtype", _versions.SUBBYTE_PADDED_SINCE, max_version)
    return _new_plan(Plan, (versioned, needs_copy, source, target, read_only))


_new_plan = tuple.__new__  # Plan(...) goes through a Python-level __new__


def reported_device(source: Device, gpu: int | None) -> Device:
    """What ``__dlpack_device__`` of a wrapped array says. Managed memory is
    reported as the CUDA device ``gpu`` that allocated it: consumers that
    refuse the CUDA_MANAGED type (PyTorch) read it as that GPU's memory, which
    it is (a GPU addresses managed memory as its own)."""
    if source.type == _T.CUDA_MANAGED and gpu is not None:
        return Device._make(_T.CUDA, gpu)
    return source


def served_device(reported: Device, dl_device, stream):
    """The ``dl_device`` an export of wrapped memory whose reported device is
    not its own is made for. A consumer that names a device gets it. One that
    names none gets the reported device when it passes a stream (a GPU
    consumer, which read ``__dlpack_device__`` to choose that stream), and
    the memory's own label otherwise (a host consumer such as NumPy, which
    reads managed memory in place)."""
    if dl_device is None and stream is not None:
        return reported.dlpack
    return dl_device


def import_target(source: Device, device) -> Device:
    """Where an import lands: ``device`` if given, else the CPU for memory the
    host can address, else the source device."""
    if device is not None:
        return _host_id_zero(Device(device), device)
    if source.type in HOST_ACCESSIBLE:
        return CPU
    return source


def import_needs_copy(source: Device, target: Device, copy, addressable=None) -> bool:
    """Whether an import copies; BufferError when ``copy=False`` forbids it."""
    check_copy(copy)
    if zero_copy(source, target, addressable):
        return copy is True
    if copy is False:
        raise _errors.copy_forbidden(source, target, "the data is not addressable there")
    return True


def readonly_import_copies(target: Device, read_only: bool, copy) -> bool:
    """Whether a capsule's READ_ONLY data must be copied to land on ``target``
    (whose arrays may be always writeable); BufferError when ``copy=False``."""
    if not read_only or target.type not in ALWAYS_WRITEABLE:
        return False
    if copy is False:
        raise _errors.readonly_to_writeable(target)
    return True


# -- what a kernel asks of the data (require_alignment, require_contiguous) ----

def check_requirements(alignment, contiguous) -> None:
    """TypeError or ValueError unless ``alignment`` is a number of bytes (an
    int, 0 for none) and ``contiguous`` a bool."""
    if type(alignment) is not int or alignment < 0:
        raise _errors.bad_alignment(alignment)
    if contiguous is not True and contiguous is not False:
        raise _errors.bad_flag("require_contiguous", contiguous)


def c_order(shape, strides) -> bool:
    """Whether strides (in elements; None: C order) lay ``shape`` out in C
    order, as tvm-ffi and NumPy's ``c_contiguous`` read it: an empty array
    is, and an axis of length 1 may have any stride."""
    if strides is None or 0 in shape:
        return True
    step = 1
    for n, stride in zip(reversed(shape), reversed(strides)):
        if n != 1:
            if stride != step:
                return False
            step *= n
    return True


def unmet(address, shape, strides, alignment, contiguous) -> str | None:
    """Which requirement data at ``address`` laid out so does not meet:
    ``"alignment"``, ``"contiguous"``, or None. Only a copy meets it."""
    if alignment and address % alignment:
        return "alignment"
    if contiguous and not c_order(shape, strides):
        return "contiguous"
    return None
