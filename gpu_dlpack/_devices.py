"""Devices: the DLPack device types and a ``Device`` value that reads every
way users name a device (strings, tuples, and the device objects of torch,
CuPy and JAX, as their rows in ``_peers`` say).

Floor: the leaves, over ``_peers`` and ``_errors``.
"""

from __future__ import annotations

import enum
import functools
import operator
from typing import Any, NamedTuple

from . import _errors, _peers
from ._typing import DeviceLike


class _Codes(enum.EnumMeta):
    """``DLDeviceType(value)`` takes an integer only (an int, or what has
    ``__index__``: a NumPy integer), whichever codes were seen before: an
    enum finds a float or string equal to a member's value among its
    members, so 40.0 was refused until 40 had been made, and 2.0 was CUDA."""

    def __call__(cls, value, *args, **kwargs):
        if args or kwargs or type(value) is int or isinstance(value, cls):
            return super().__call__(value, *args, **kwargs)
        if isinstance(value, bool) or not hasattr(type(value), "__index__"):
            raise ValueError(f"{value!r} is not a valid {cls.__qualname__}")
        return super().__call__(operator.index(value))


class DLDeviceType(enum.IntEnum, metaclass=_Codes):
    """DLPack ``DLDeviceType`` codes, as ``dlpack.h`` numbers them.

    An ``enum.IntEnum``: each member is the int DLPack uses. DLPack adds
    device types without a new version (adding to an enum keeps its ABI),
    so every code from 1 to 2**31 - 1 is a device type: one ``dlpack.h``
    does not name yet is a member named by its number.

    Examples
    --------
    >>> from gpu_dlpack import DLDeviceType
    >>> DLDeviceType.CUDA == 2, DLDeviceType(13).name, DLDeviceType(19).name
    (True, 'CUDA_MANAGED', 'TPU')
    >>> DLDeviceType(40).name, DLDeviceType(40) == 40
    ('40', True)

    Only integers are codes (a float or a string equal to one is not), and
    a code no release names is made anew at each use, equal to the last
    one, not kept: a process that reads many codes holds none of them.
    """

    CPU = 1
    CUDA = 2
    CUDA_HOST = 3
    OPENCL = 4
    VULKAN = 7
    METAL = 8
    VPI = 9
    ROCM = 10
    ROCM_HOST = 11
    EXT_DEV = 12
    CUDA_MANAGED = 13
    ONEAPI = 14
    WEBGPU = 15
    HEXAGON = 16
    MAIA = 17
    TRN = 18
    TPU = 19
    TPU_HOST = 20
    ASCEND = 21

    @classmethod
    def _missing_(cls, value):
        if type(value) is not int or not 0 < value <= 2**31 - 1:
            return None
        member = int.__new__(cls, value)
        member._name_ = str(value)
        member._value_ = value
        return member


class Memory(NamedTuple):
    """What a kind of memory is, for every rule that asks: the one table of
    device kinds, from which each set of device types is derived
    (``types``)."""

    stack: str | None  # the GPU runtime that serves it: "cuda" or "rocm"; None: the host alone
    host: bool         # the host reads and writes it in place (no copy to a NumPy array)
    gpu: bool          # a GPU reads and writes it in place (cuda.core's is_device_accessible)
    indexed: bool      # one GPU's memory, named by its index (the others say 0: one address space)
    array: str         # what holds an import to it: "numpy" or "cupy" (CuPy arrays are always writeable)


_T = DLDeviceType

#: The memory gpu_dlpack moves, by device type; the others it names and reads
#: the capsules of, and refuses to import (``no_backend``).
MEMORY = {
    _T.CPU: Memory(None, host=True, gpu=False, indexed=False, array="numpy"),
    _T.CUDA: Memory("cuda", host=False, gpu=True, indexed=True, array="cupy"),
    _T.CUDA_HOST: Memory("cuda", host=True, gpu=True, indexed=False, array="numpy"),  # pinned
    _T.CUDA_MANAGED: Memory("cuda", host=True, gpu=True, indexed=False, array="cupy"),
    _T.ROCM: Memory("rocm", host=False, gpu=True, indexed=True, array="cupy"),
    _T.ROCM_HOST: Memory("rocm", host=True, gpu=True, indexed=False, array="numpy"),  # pinned
}


def types(**want) -> frozenset:
    """The device types whose ``Memory`` has each field as given:
    ``types(host=True)``, ``types(stack="cuda", array="cupy")``."""
    return frozenset(t for t, m in MEMORY.items() if all(getattr(m, k) == v for k, v in want.items()))


HOST_ACCESSIBLE = types(host=True)
DEVICE_ACCESSIBLE = types(gpu=True)

# Name -> (CUDA-build type, ROCm-build type): the names with a ROCm twin and
# the aliases; every type's own name (in lower case) maps to it on both builds.
_NAMES = {
    "cuda": (DLDeviceType.CUDA, DLDeviceType.ROCM),
    "gpu": (DLDeviceType.CUDA, DLDeviceType.ROCM),
    "cuda_host": (DLDeviceType.CUDA_HOST, DLDeviceType.ROCM_HOST),
    "pinned": (DLDeviceType.CUDA_HOST, DLDeviceType.ROCM_HOST),
    "managed": (DLDeviceType.CUDA_MANAGED, DLDeviceType.CUDA_MANAGED),
    "hip": (DLDeviceType.ROCM, DLDeviceType.ROCM),
}
for _t in DLDeviceType:
    _NAMES.setdefault(_t.name.lower(), (_t, _t))

_FORMS = (
    "'cpu', 'cuda', 'cuda:N', 'rocm:N', 'cuda_host', 'cuda_managed', 'rocm_host', "
    "any DLDeviceType name in lower case or number (with ':N'), a (device_type, device_id) "
    "tuple such as (2, 0), a DLDeviceType, a torch.device, a cupy.cuda.Device, "
    "a JAX device or an array-api-strict Device"
)


@functools.lru_cache(maxsize=1)
def cupy_is_rocm() -> bool:
    """True when the installed CuPy is a ROCm (HIP) build."""
    try:
        from cupy.cuda import runtime
    except Exception:  # no CuPy, or a broken one, is not a ROCm one
        return False
    return bool(getattr(runtime, "is_hip", False))


class Device:
    """A DLPack device: a device type and an index. Immutable and hashable.

    Parameters
    ----------
    spec : str, tuple, DLDeviceType, Device or device object
        A name (``"cpu"``, ``"cuda:1"``, ``"rocm:0"``, ``"cuda_host"`` or
        ``"pinned"``, ``"cuda_managed"``, any `DLDeviceType` name in lower
        case, with ``":N"``), a ``(device_type, device_id)`` pair, a
        `DLDeviceType`, or the device object of torch, CuPy, JAX or
        array-api-strict. On a ROCm build of CuPy, ``"cuda"`` reads as ROCm.
    index : int, optional
        The device's index, for a ``spec`` without one.

    Raises
    ------
    ValueError
        A name or pair that is no device.
    TypeError
        An object that names no device.

    Examples
    --------
    >>> from gpu_dlpack import Device, DLDeviceType
    >>> Device("cuda:1").dlpack
    (2, 1)
    >>> str(Device((1, 0)))
    'cpu'
    >>> Device("cpu") == Device(DLDeviceType.CPU)
    True
    >>> Device("cuda", 1) == Device("cuda:1")
    True
    """

    __slots__ = ("_type", "_index")
    _type: DLDeviceType
    _index: int

    def __new__(cls, spec: DeviceLike, index: int | None = None) -> Device:
        if index is None:
            if type(spec) is Device:
                return spec
            # (device_type, device_id) as __dlpack_device__ gives it: every
            # import and export reads one. Equal pairs of ints parse alike:
            # an int's subclass too (torch's DLDeviceType members), not a
            # bool (equal to 0 or 1), nor a float or string equal to a code.
            first = spec[0] if type(spec) is tuple and len(spec) == 2 else None
            if isinstance(first, int) and type(first) is not bool and type(spec[1]) is int:
                known = _BY_PAIR.get(spec)
                if known is not None:
                    return known
        dtype, idx = _parse(spec)
        if index is not None:
            idx = _check_index(index, spec)
        device = cls._make(dtype, idx)
        if len(_BY_PAIR) < 256:
            _BY_PAIR[(int(dtype), idx)] = device
        return device

    @classmethod
    def _make(cls, dtype, index):
        self = object.__new__(cls)
        object.__setattr__(self, "_type", dtype)
        object.__setattr__(self, "_index", index)
        return self

    @classmethod
    def of(cls, x: Any) -> Device:
        """The device of any object with ``__dlpack_device__``.

        Parameters
        ----------
        x : object
            A DLPack producer.

        Returns
        -------
        Device
            The device its ``__dlpack_device__`` reports.

        Raises
        ------
        NotDLPackError
            ``x`` has no ``__dlpack_device__``.
        BufferError
            The producer reports something that is no device, or refuses to
            name one (JAX on a TPU): the layer's refusal, which says how to
            get the data, with the producer's error as its cause.

        Examples
        --------
        >>> import numpy as np
        >>> from gpu_dlpack import Device
        >>> Device.of(np.zeros(3))
        Device('cpu')
        """
        try:
            method = type(x).__dlpack_device__
        except AttributeError:
            raise _errors.not_dlpack(x, _peers.chunks_of(type(x))) from None
        try:
            answer = method(x)
        except _errors.GpuDlpackError:
            raise
        except BufferError as exc:
            raise _errors.device_unnamed(x, exc) from exc
        try:
            if isinstance(answer, (str, bytes)):
                raise ValueError
            return cls(tuple(answer))
        except (TypeError, ValueError) as exc:
            if _cpu_without_id(x, answer):
                return CPU  # its row's "device-id-none": (kDLCPU, None) is the CPU
            producer = f"{type(x).__module__}.{type(x).__qualname__}"
            raise _errors.producer_bad_device(producer, answer, type(exc)) from None

    @property
    def type(self) -> DLDeviceType:
        """The device type (`DLDeviceType`)."""
        return self._type

    @property
    def index(self) -> int:
        """The device's index among those of its type (0 for host memory)."""
        return self._index

    @property
    def dlpack(self) -> tuple[int, int]:
        """The plain ``(device_type, device_id)`` tuple of ints DLPack uses."""
        return (int(self._type), self._index)

    @property
    def is_host_accessible(self) -> bool:
        """Whether the host reads and writes this memory directly (CPU,
        pinned and managed memory): an array here can become a NumPy array
        without a copy."""
        return self._type in HOST_ACCESSIBLE

    def __setattr__(self, name, value):
        raise AttributeError("Device is immutable")

    def __eq__(self, other: object) -> bool:
        if type(other) is not Device:
            return NotImplemented
        return self._type == other._type and self._index == other._index

    def __hash__(self) -> int:
        return hash((Device, int(self._type), self._index))

    def __str__(self) -> str:
        name = self._type.name.lower()
        if self._type in HOST_ACCESSIBLE and self._index == 0:
            return name
        return f"{name}:{self._index}"

    def __repr__(self) -> str:
        return f"Device({str(self)!r})"

    def __reduce__(self):
        return (Device, (self.dlpack,))


def _check_index(index, spec):
    if (type(index) is int or (hasattr(index, "__index__") and not isinstance(index, bool))) and int(index) >= 0:
        return int(index)
    raise _errors.bad_device(spec, _FORMS)


def _from_tuple(spec):
    if len(spec) != 2:
        raise _errors.bad_device(spec, _FORMS)
    try:
        dtype = DLDeviceType(spec[0])
    except (ValueError, TypeError):
        raise _errors.bad_device(spec, _FORMS) from None
    return dtype, _check_index(spec[1], spec)


def _from_string(spec):
    name, sep, rest = spec.strip().lower().partition(":")
    types = _NAMES.get(name)
    if types is None and name.isdigit() and name.isascii():
        try:  # a device type named by its number: '40:0'
            types = (DLDeviceType(int(name)),) * 2
        except ValueError:
            pass
    if types is None:
        raise _errors.bad_device(spec, _FORMS)
    dtype = types[1] if types[0] != types[1] and cupy_is_rocm() else types[0]
    if not sep:
        return dtype, 0
    if not rest.isdigit():
        raise _errors.bad_device(spec, _FORMS)
    # 'cpu:N' too: what str() prints of a pair of host memory with another
    # id (JAX numbers its CPU devices), refused where a device is asked for
    # by the rules, as the pair is (host memory has device id 0 only).
    return dtype, int(rest)


def _parse(spec):
    if isinstance(spec, DLDeviceType):
        return spec, 0
    if isinstance(spec, str):
        return _from_string(spec)
    if isinstance(spec, (tuple, list)):
        return _from_tuple(tuple(spec))
    if hasattr(type(spec), "__dlpack_device__"):
        raise _errors.array_not_device(spec)
    form = _peers.device_form(spec)
    if form is not None:
        return _from_peer(spec, form)
    raise _errors.bad_device_type(spec)


def _from_peer(dev, form):
    """A peer library's device object, read as its row in ``_peers`` says."""
    kind = None if form.kind is None else str(getattr(dev, form.kind)).lower()
    named = form.kinds.get(kind)
    if named == "cpu":
        return DLDeviceType.CPU, 0
    if named is None:
        raise _errors.bad_device(dev, _FORMS + f" ({form.says} {kind!r} has no DLPack type)")
    index = next((i for i in (getattr(dev, name, None) for name in form.index) if i is not None), 0)
    if named not in ("gpu", "rocm"):
        return DLDeviceType[named.upper()], int(index)
    rocm = named == "rocm" or (cupy_is_rocm() if form.rocm is None else form.rocm(dev))
    return (DLDeviceType.ROCM if rocm else DLDeviceType.CUDA), int(index)


_BY_PAIR: dict = {}  # (int type, id) -> Device, for the pairs seen
CPU = Device((1, 0))


def _cpu_without_id(x, answer) -> bool:
    """Whether ``answer`` is ``(kDLCPU, None)`` from a producer whose row
    says its ``__dlpack_device__`` gives no id for host memory (Paddle's
    ``"device-id-none"``): the CPU, device 0."""
    try:
        pair = tuple(answer)
        return len(pair) == 2 and pair[1] is None and type(pair[0]) is not bool and pair[0] == DLDeviceType.CPU and (
            _peers.export_facts(type(x)).device_id_none
        )
    except Exception:  # an answer that is no pair is no CPU either
        return False


_profiles = _peers._PROFILES  # type -> its Profile, once read (a lookup, no call)


def host_tested(x) -> bool:
    """True when ``x`` passes its library's host test (``_peers.HostTest``):
    memory of the CPU on one device, known without ``__dlpack_device__``.
    An export and a wrap of such an array read its device so, as its
    import does (``known_on_host``), and as the compiled core reads it on
    each of the three."""
    t = type(x)
    test = (_profiles.get(t) or _peers.profile(t)).cpu_test
    return test is not None and test(x) is True


def known_on_host(x) -> bool:
    """True when ``x`` is cheaply known to hold host memory (CPU, pinned or
    managed); False means unknown: ask ``__dlpack_device__``."""
    t = type(x)
    test = (_profiles.get(t) or _peers.profile(t)).host_test
    return test is not None and test(x) is True
