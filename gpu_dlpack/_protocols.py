"""The array protocols besides DLPack, in and out.

In: an object that is no DLPack producer by its type is turned into one (a
forwarding type, a view of host memory, a producer over a CUDA Array
Interface's memory, a raw capsule's one use), so that every rule and path of
DLPack applies unchanged; which protocol wins, and what each becomes, is
docs/guide/protocols.md. Out: the interfaces ``wrap(x)`` offers besides DLPack.

Floor: what both directions share, under ``_exchange``, above the backends.
"""

from __future__ import annotations

import array
import functools
import math
import mmap

import numpy as np

from . import _capsule, _dtypes, _errors, _handoff, _peers, _rules, _streams
from ._producer import asking, marked
from ._backends import cupy_backend, numpy_backend
from ._devices import CPU, Device, DLDeviceType, cupy_is_rocm

_T = DLDeviceType


def producer(x):
    """A DLPack producer over ``x``, which has no DLPack methods on its type,
    or None when ``x`` speaks no array protocol known here."""
    view = BUFFER_VIEWS.get(type(x))
    if view is not None:
        return view(x)
    if isinstance(x, type):
        return None  # an array type, not an array: its methods are unbound
    if type(x) is _capsule.CapsuleType:
        return OneCapsule(x)
    dlpack = _has(x, "__dlpack__") and _has(x, "__dlpack_device__")
    if dlpack and not asking(x):
        return _forwarding_type(type(x))(x)
    return besides_dlpack(x, dlpack)


def besides_dlpack(x, speaks_dlpack=True):
    """A producer over what ``x`` speaks besides DLPack (None: nothing).

    For an ``x`` whose own ``__dlpack__`` is asking gpu_dlpack to export
    ``x`` (``export(self)`` or ``wrap(self)`` inside ``__dlpack__``), asking
    it again would never end: BufferError naming the recursion when it
    speaks no other protocol."""
    cai = _interface(x, "__cuda_array_interface__")
    if cai is not None:
        return CudaArray(x, cai)
    if _interface(x, "__array_interface__") is not None:
        return host_view(x)
    try:
        view = memoryview(x)
    except TypeError:
        if speaks_dlpack:
            raise _errors.exports_itself(x) from None
        return None
    except BufferError as exc:  # it claims the protocol, and its buffer cannot be read
        raise _errors.buffer_refused(x, exc) from exc
    return host_view(view)


def _has(x, name) -> bool:
    try:
        getattr(x, name)
    except Exception:  # a proxy's __getattr__ may raise anything
        return False
    return True


def _interface(x, name):
    try:
        value = getattr(x, name)
    except AttributeError:
        return None
    if not isinstance(value, dict):
        raise _errors.bad_interface(name, "it is not a dict", value)
    return value


# -- forwarded __dlpack__ -------------------------------------------------------

class Forwarded:
    """A producer whose DLPack methods are answered by the instance (its
    ``__getattr__``), seen through a type that has them, as the layer asks
    types. One class per forwarded type, so that what an old producer
    accepts is remembered per type."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __dlpack__(self, **kwargs):
        return marked(self.obj, lambda: self.obj.__dlpack__(**kwargs))  # as request marks it

    def __dlpack_device__(self):
        return self.obj.__dlpack_device__()


@functools.cache
def _forwarding_type(t):
    cls = type(f"Forwarded[{t.__module__}.{t.__qualname__}]", (Forwarded,), {"__slots__": ()})
    cls.__module__ = t.__module__  # the producer's name in messages is its own
    cls.__qualname__ = t.__qualname__
    return cls


# -- host memory: the array interface and the buffer protocol ----------------

def host_view(x) -> np.ndarray:
    """A NumPy view of an ``__array_interface__`` or buffer-protocol object's
    memory (read-only where the source is); the object stays alive as its base."""
    interface = _interface(x, "__array_interface__") if not isinstance(x, memoryview) else None
    if interface is not None and interface.get("mask") is not None:
        raise _errors.masked_array("__array_interface__")
    try:
        return np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise _errors.bad_interface(
            "__array_interface__" if interface is not None else "buffer", str(exc), None
        ) from None


def buffer_view(x) -> np.ndarray:
    """A NumPy view of a buffer-protocol object of the standard library."""
    arr = np.asarray(memoryview(x))
    if arr.dtype.isbuiltin != 1:
        _dtypes.from_numpy(arr.dtype)  # BufferError for what DLPack cannot describe
    return arr


#: The standard library's buffer types, read without asking for the other
#: protocols (none of them has any).
BUFFER_VIEWS = {t: buffer_view for t in (bytes, bytearray, memoryview, array.array, mmap.mmap)}


# -- the CUDA Array Interface -------------------------------------------------

def parse_cuda_interface(cai) -> dict:
    """The CUDA Array Interface dict checked: ``shape``, ``typestr``,
    ``data``, ``strides``, ``version``, ``stream``; BufferError or TypeError
    naming what is wrong."""
    name = "__cuda_array_interface__"
    for key in ("shape", "typestr", "data"):
        if key not in cai:
            raise _errors.bad_interface(name, f"it has no {key!r}", cai)
    version = cai.get("version", 0)
    if type(version) is not int or not 0 <= version <= 3:
        raise _errors.bad_interface(name, f"version {version!r} is not 0 to 3", cai)
    if cai.get("mask") is not None:
        raise _errors.masked_array(name)
    shape = cai["shape"]
    if not isinstance(shape, tuple) or not all(type(n) is int and n >= 0 for n in shape):
        raise _errors.bad_interface(name, f"shape {shape!r} is not a tuple of non-negative ints", cai)
    data = cai["data"]
    if not (isinstance(data, tuple) and len(data) == 2 and type(data[0]) is int and data[0] >= 0):
        raise _errors.bad_interface(name, f"data {data!r} is not a (pointer, read_only) tuple", cai)
    typestr = cai["typestr"]
    dtype = _DTYPES.get(typestr) if type(typestr) is str else None
    if dtype is None:
        try:
            dtype = np.dtype(typestr)
        except TypeError:
            raise _errors.bad_interface(name, f"typestr {typestr!r} is no NumPy type string", cai) from None
        if dtype.byteorder == (">" if np.little_endian else "<"):
            raise _errors.unsupported_numpy_dtype(dtype, "DLPack describes native byte order only")
        if type(typestr) is str:
            _DTYPES[typestr] = dtype
    strides = cai.get("strides")
    if strides is not None and not (
        isinstance(strides, tuple) and len(strides) == len(shape) and all(type(s) is int for s in strides)
    ):
        raise _errors.bad_interface(name, f"strides {strides!r} are not one int per dimension", cai)
    if strides is not None and any(s % dtype.itemsize for s in strides):
        raise _errors.bad_interface(
            name, f"strides {strides!r} are not multiples of the item size {dtype.itemsize}", cai
        )
    stream = cai.get("stream") if version >= 3 else None
    if stream is not None and (type(stream) is not int or stream < 0 and stream != -1):
        raise _errors.bad_interface(name, f"stream {stream!r} is not a stream handle", cai)
    if stream == 0:
        raise _errors.bad_interface(name, "stream 0 is disallowed by the interface (it is ambiguous)", cai)
    size = math.prod(shape)
    if data[0] == 0 and size:
        raise _errors.bad_interface(name, f"data is NULL but the shape {shape} has elements", cai)
    return {
        "shape": shape, "dtype": dtype, "ptr": data[0], "readonly": bool(data[1]),
        "strides": strides, "stream": stream, "size": size,
    }


_DTYPES: dict = {}  # typestr -> NumPy dtype, for the type strings seen


class Lent:
    """A DLPack producer over memory another object describes and owns: a
    pointer, shape, NumPy dtype and strides in bytes (``info``, as
    ``parse_cuda_interface`` gives it), on ``device``, kept alive by
    ``obj`` as long as anything made from it lives. Its capsules are made by
    NumPy's exporter over a view of that memory NumPy never reads, and
    labelled with the device. A consumer's stream waits for ``info``'s
    ``stream`` (the stream the data is ready on) with an event. It lends the
    memory only: copies and moves are the layer's."""

    __slots__ = ("obj", "info", "device", "_view")

    def __init__(self, obj, info, device):
        self.obj = obj
        self.info = info
        self.device = device
        self._view = None

    def __dlpack_device__(self):
        return self.device.dlpack

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        info = self.info
        if copy or (dl_device is not None and tuple(dl_device) != self.device.dlpack):
            # The layer's backends make copies; this producer only lends memory.
            raise _errors.interface_cannot_copy(self.device, dl_device, copy)
        waits_on = info["stream"]
        if stream is not None and stream != -1 and waits_on not in (None, -1):
            consumer = _streams.resolve(stream, self.device.type)
            _handoff.handoff(waits_on, consumer, self.device.index)
        versioned = max_version is not None and max_version[0] >= 1
        if info["readonly"] and not versioned:
            raise _errors.readonly_legacy(_peers.legacy_askers())
        view = self._view
        if view is None:
            view = self._view = host_array(info, self.obj)
        # NumPy's exporter describes the memory (and says READ_ONLY, and the
        # DLPack code of a type it carries); the layer stamps its version on
        # what it passes on.
        dtype = _dtypes.from_numpy(view.dtype)
        plan = _rules.Plan(versioned, False, CPU, CPU, info["readonly"])
        capsule = numpy_backend.export(view, plan, dtype)
        _capsule.set_device(capsule, *self.device.dlpack)
        return capsule


def host_array(info, owner) -> np.ndarray:
    """A NumPy array over described memory (``info`` as for ``Lent``),
    keeping ``owner`` alive as its base. For device memory it is only a
    description: NumPy never reads it."""
    dtype = info["dtype"]
    carrier = _dtypes.from_numpy(dtype).carrier  # NumPy describes its own types only
    base = dtype if carrier is None else carrier
    if not info["ptr"]:
        # No elements (a NULL pointer is allowed only then), which NumPy
        # before 2 cannot describe at NULL: an empty array stands for them.
        view = np.empty(info["shape"], base)
    else:
        interface = {
            "version": 3, "shape": info["shape"], "typestr": base.str, "descr": base.descr,
            "data": (info["ptr"], info["readonly"]),
        }
        if info["strides"] is not None:
            # Left out for C order: NumPy (2.4.6) leaks a reference to None for
            # each "strides": None it reads.
            interface["strides"] = info["strides"]
        view = np.asarray(_capsule.Held(interface, owner))
    if carrier is not None:
        view = view.view(dtype)
    if info["readonly"]:
        view.flags.writeable = False
    return view


class CudaArray(Lent):
    """``Lent`` over a CUDA Array Interface object's memory, on its GPU."""

    __slots__ = ()

    def __init__(self, obj, cai):
        info = parse_cuda_interface(cai)
        gpu = cupy_backend.gpu_of(info["ptr"])  # the current GPU for NULL
        super().__init__(obj, info, Device._make(_T.ROCM if cupy_is_rocm() else _T.CUDA, gpu))


# -- raw capsules ------------------------------------------------------------

class OneCapsule:
    """A raw DLPack capsule as a producer: it gives its capsule once, as it
    is (the layer corrects what the request needs)."""

    __slots__ = ("capsule", "device")

    def __init__(self, capsule):
        self.capsule = capsule
        info = _capsule.read(capsule)  # TypeError, BufferError or ConsumedCapsuleError
        self.device = info.device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        # The caller may share the capsule with other threads: it is claimed
        # in one step (ConsumedCapsuleError once it was used), and its tensor
        # handed on in a capsule only this request holds.
        return _capsule.handover(self.capsule)[1]

    def __dlpack_device__(self):
        return self.device.dlpack


# -- out: the interfaces offered by wrap() -------------------------------------

def cuda_interface(capsule, readonly: bool, stream) -> tuple:
    """``(dict, owner)``: the CUDA Array Interface (version 3) of a checked,
    unconsumed capsule of GPU memory, which is taken (``owner`` frees it when
    it dies). ``stream`` is the stream the data is ready on."""
    info = _capsule.read(capsule)
    dtype = _dtypes.to_numpy(*info.dl_dtype)
    if dtype.padded:
        raise _errors.unsupported_dtype(*info.dl_dtype, "the array interfaces have no padded sub-byte types")
    numpy_dtype = dtype.numpy
    interface = {
        "version": 3,
        "shape": tuple(info.shape),
        "typestr": numpy_dtype.str,
        # What NumPy's dtype.descr gives for a dtype without fields, written
        # here: out of memory, that getter returns a list with an exception
        # still set (an unchecked item), which surfaces later as a SystemError.
        "descr": numpy_dtype.descr if numpy_dtype.fields is not None else [("", numpy_dtype.str)],
        "data": (info.data + info.byte_offset, bool(readonly or info.readonly)),
        "strides": _capsule.byte_strides(info.strides, numpy_dtype.itemsize),
        "stream": stream,
    }
    return interface, _capsule.take(capsule)


def array_interface(capsule, readonly: bool) -> tuple:
    """The same for NumPy's array interface (version 3) of host memory."""
    out, owner = cuda_interface(capsule, readonly, None)
    del out["stream"]
    if out["strides"] is None:
        del out["strides"]  # C order, as NumPy reads it without a None it leaks (as in host_array)
    return out, owner
