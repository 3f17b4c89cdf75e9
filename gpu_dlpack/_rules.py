"""The exchange rules: what must happen for a request, never how.

Given where the data is, whether it may be written, and what the consumer
asked for, these functions decide the capsule kind, whether a copy is made,
the target device, and the READ_ONLY flag, or raise the error the standard
names. The backends (``_backends``) then do it.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import _errors, _versions
from ._devices import CPU, Device, DLDeviceType, HOST_ACCESSIBLE

# Moves that need no copy: memory the host can address is CPU memory to a
# consumer that asks for the CPU (the standard's (kDLCPU, 0) requirement).
ZERO_COPY_MOVES = frozenset((src, DLDeviceType.CPU) for src in HOST_ACCESSIBLE)


@dataclass(frozen=True)
class Plan:
    """What an export will produce."""

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
    return copy


def target_device(source: Device, dl_device) -> Device:
    """The device a consumer asked for (``dl_device=None``: the source's)."""
    if dl_device is None:
        return source
    if type(dl_device) is Device:
        return _host_id_zero(dl_device, dl_device)
    if not isinstance(dl_device, (tuple, list)):
        raise TypeError(
            f"dl_device must be None or a (device_type, device_id) tuple such as "
            f"(1, 0) for the CPU; got {type(dl_device).__name__} {dl_device!r}."
        )
    try:
        target = Device(tuple(dl_device))
    except ValueError as exc:
        raise BufferError(f"dl_device={dl_device!r} names no DLPack device: {exc}") from None
    return _host_id_zero(target, dl_device)


def _host_id_zero(target: Device, asked) -> Device:
    # Host memory is one address space: a consumer may ask for device id 0
    # only (the standard's (kDLCPU, 0)), though a producer may number it.
    if target.index and target.type in HOST_ACCESSIBLE:
        raise _errors.host_device_id(asked, target)
    return target


def zero_copy(source: Device, target: Device) -> bool:
    return source == target or (source.type, target.type) in ZERO_COPY_MOVES


def plan_export(source, readonly, code, bits, max_version, dl_device, copy, can_copy_to) -> Plan:
    """Decide an export.

    ``readonly`` is True, False, or None when unknown (a legacy producer: its
    data is treated as read-only in a versioned capsule, and passed on as it
    came in a legacy one). ``code`` and ``bits`` are the DLPack dtype.
    ``can_copy_to(source, target)`` says whether a backend can copy there.
    """
    versioned = _versions.check_max_version(max_version)
    check_copy(copy)
    target = target_device(source, dl_device)
    needs_copy = copy is True
    if not zero_copy(source, target):
        if not can_copy_to(source, target):
            raise _errors.unreachable(source, target)
        if copy is False:
            raise _errors.copy_forbidden(source, target, "the data is not addressable there")
        needs_copy = True
    read_only = not needs_copy and readonly is not False
    if not versioned and not needs_copy and readonly is True:
        raise _errors.readonly_legacy()
    if max_version is not None:
        _versions.check_describable(max_version, code, target.type)
    if bits < 8 and (not versioned or max_version < _versions.SUBBYTE_PADDED_SINCE):
        # Only versioned capsules can say IS_SUBBYTE_TYPE_PADDED, and only a
        # consumer of 1.1 or later knows the flag: an older one would read
        # the padded bytes as packed data.
        raise _errors.needs_version(f"a {bits}-bit dtype", _versions.SUBBYTE_PADDED_SINCE, max_version)
    return Plan(versioned, needs_copy, source, target, read_only)


def import_target(source: Device, device) -> Device:
    """Where an import lands: ``device`` if given, else the CPU for memory the
    host can address, else the source device."""
    if device is not None:
        return _host_id_zero(Device(device), device)
    if source.type in HOST_ACCESSIBLE:
        return CPU
    return source


def import_needs_copy(source: Device, target: Device, copy) -> bool:
    """Whether an import copies; BufferError when ``copy=False`` forbids it."""
    check_copy(copy)
    if zero_copy(source, target):
        return copy is True
    if copy is False:
        raise _errors.copy_forbidden(source, target, "the data is not addressable there")
    return True
