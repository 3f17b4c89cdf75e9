"""DLPack capsules built by hand with ctypes, for the hardening tests.

This plays a C producer, the way any DLPack library writes one: a
``DLManagedTensor`` or ``DLManagedTensorVersioned`` struct (dlpack.h; SPEC §1)
in a PyCapsule whose destructor calls the deleter only while the capsule
still has its unconsumed name. The deleter counts its calls and frees the
struct's record, so a test can check that it ran exactly once, and a leak
test can check that nothing is left alive.

Every field can be set to anything, including what no valid producer would
write: that is the point.
"""

from __future__ import annotations

import ctypes
import itertools
import threading

import numpy as np

c_int64_p = ctypes.POINTER(ctypes.c_int64)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", c_int64_p),
        ("strides", c_int64_p),
        ("byte_offset", ctypes.c_uint64),
    ]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


assert ctypes.sizeof(DLTensor) == 48
assert ctypes.sizeof(DLManagedTensor) == 64
assert ctypes.sizeof(DLManagedTensorVersioned) == 80
assert DLManagedTensorVersioned.dl_tensor.offset == 32

# The C API, called without holding the GIL from the capsule destructor
# (these only read the capsule's fields), and with it elsewhere.
_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_GetNameRaw = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(("PyCapsule_GetName", ctypes.pythonapi))
_GetContextRaw = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(("PyCapsule_GetContext", ctypes.pythonapi))
_New = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, _DESTRUCTOR)(
    ("PyCapsule_New", ctypes.pythonapi)
)
_SetContext = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(
    ("PyCapsule_SetContext", ctypes.pythonapi)
)
_GetName = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))

# Capsule names must outlive their capsules: keep every one ever used.
_names: dict = {}


def _name_ptr(name):
    if name is None:
        return None
    buf = _names.get(name)
    if buf is None:
        buf = _names[name] = ctypes.create_string_buffer(name.encode())
    return ctypes.addressof(buf)


class Record:
    """One hand-made tensor: its struct, the arrays it points to, and how
    many times its deleter ran."""

    __slots__ = ("struct", "keep", "name", "calls", "__weakref__")

    def __init__(self, struct, keep, name):
        self.struct = struct
        self.keep = keep
        self.name = name
        self.calls = 0

    @property
    def address(self) -> int:
        return ctypes.addressof(self.struct)


# struct address -> Record, while its deleter has not run (what a C
# producer would still hold). Deleter calls for unknown addresses are
# double frees.
live: dict = {}
stray_calls = 0
total_calls = 0
_lock = threading.Lock()  # deleters run on any thread


def _deleter(ptr):
    global stray_calls, total_calls
    with _lock:
        total_calls += 1
        record = live.pop(ptr, None)
        if record is None:
            stray_calls += 1
            return
        record.calls += 1
        _poison(record.struct.dl_tensor)


def _poison(tensor):
    # What reuse of freed memory looks like: whoever reads a tensor after
    # its deleter ran finds it malformed (ndim out of range, no shape, no
    # device), never a plausible array.
    tensor.ndim = POISONED_NDIM
    tensor.shape = None
    tensor.strides = None
    tensor.device.device_type = 0


POISONED_NDIM = -77


def _destructor(capsule):
    # Like every C producer: free the tensor only if nobody consumed it.
    ptr = _GetContextRaw(capsule)
    with _lock:
        record = live.get(ptr)
    if record is None:
        return
    if _GetNameRaw(capsule) != (None if record.name is None else record.name.encode()):
        return
    deleter = record.struct.deleter
    if deleter:
        DELETER(deleter)(ptr)
    else:
        with _lock:
            live.pop(ptr, None)  # nothing to call: the producer frees it itself


_DELETER_FN = DELETER(_deleter)
_DELETER_ADDR = ctypes.cast(_DELETER_FN, ctypes.c_void_p).value
_DESTRUCTOR_FN = _DESTRUCTOR(_destructor)

_ids = itertools.count()


def make(
    array=None,
    *,
    versioned=True,
    name=None,
    version=(1, 0),
    flags=0,
    device=(1, 0),
    dtype=None,
    ndim=None,
    shape=None,
    strides=None,
    data=None,
    byte_offset=0,
    null_shape=False,
    null_strides=False,
    deleter=True,
):
    """A capsule over ``array`` (default: ``arange(6.0)``), with any field
    overridden. Returns ``(capsule, record)``; keep the record to read
    ``record.calls``.

    ``name`` defaults to the right name for ``versioned``; pass ``""`` or a
    string to use a wrong one, or ``False`` for a NULL name. ``dtype`` is a
    ``(code, bits, lanes)`` triple; ``data`` an address (0 for NULL).
    """
    if array is None:
        array = np.arange(6.0)
    array = np.asarray(array)
    if shape is None:
        shape = array.shape
    if strides is None:
        strides = tuple(s // array.itemsize for s in array.strides)
    if dtype is None:
        kind = {"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}[array.dtype.kind]
        dtype = (kind, array.itemsize * 8, 1)
    if ndim is None:
        ndim = len(shape)
    if name is None:
        name = "dltensor_versioned" if versioned else "dltensor"
    elif name is False:
        name = None
    shape_arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(len(strides), 1))(*strides)
    if versioned:
        struct = DLManagedTensorVersioned()
        struct.version.major, struct.version.minor = version
        struct.flags = flags
    else:
        struct = DLManagedTensor()
    t = struct.dl_tensor
    t.data = array.ctypes.data if data is None else (data or None)
    t.device.device_type, t.device.device_id = device
    t.ndim = ndim
    t.dtype.code, t.dtype.bits, t.dtype.lanes = dtype
    t.shape = None if null_shape else ctypes.cast(shape_arr, c_int64_p)
    t.strides = None if null_strides else ctypes.cast(strides_arr, c_int64_p)
    t.byte_offset = byte_offset
    struct.manager_ctx = next(_ids)
    struct.deleter = _DELETER_ADDR if deleter else None
    record = Record(struct, (array, shape_arr, strides_arr), name)
    addr = ctypes.addressof(struct)
    with _lock:
        live[addr] = record
    capsule = _New(addr, _name_ptr(name), _DESTRUCTOR_FN)
    _SetContext(capsule, addr)
    return capsule, record


def capsule_name(capsule):
    raw = _GetName(capsule)
    return None if raw is None else raw.decode()


class Producer:
    """An object whose ``__dlpack__`` returns a given capsule (once) and whose
    ``__dlpack_device__`` says what the test wants: the smallest producer
    there is, to feed hand-made capsules to the export paths."""

    def __init__(self, capsule, device=(1, 0)):
        self.capsule = capsule
        self.device = device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        capsule, self.capsule = self.capsule, None
        if capsule is None:
            raise BufferError("this test producer hands out its capsule once")
        return capsule

    def __dlpack_device__(self):
        return self.device


class DeviceProducer:
    """A producer of device memory that no backend of gpu_dlpack owns: each
    ``__dlpack__`` call builds a fresh capsule over ``array``'s memory (or the
    address ``data``) labelled ``device``, legacy (as JAX on a GPU gives for
    every request) or versioned, and records the keywords it was given and the
    record of each capsule."""

    def __init__(self, array=None, *, device=(2, 0), versioned=False, data=None, flags=0, dtype=None):
        self.array = np.arange(6.0) if array is None else array
        self.dtype = dtype
        self.device = device
        self.versioned = versioned
        self.data = data
        self.flags = flags
        self.requests = []
        self.records = []

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.requests.append({"stream": stream, "max_version": max_version, "dl_device": dl_device, "copy": copy})
        capsule, record = make(self.array, versioned=self.versioned, device=self.device, data=self.data,
                               flags=self.flags, dtype=self.dtype)
        self.records.append(record)
        return capsule

    def __dlpack_device__(self):
        return self.device


_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_SetName = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)


def consume_and_free(capsule):
    """What a C consumer does with a capsule it imports and later drops:
    rename it ``used_*``, then call the deleter once."""
    name = _GetName(capsule)
    address = _GetPointer(capsule, name)
    assert _SetName(capsule, _name_ptr("used_" + name.decode())) == 0
    struct = (DLManagedTensorVersioned if name == b"dltensor_versioned" else DLManagedTensor).from_address(address)
    if struct.deleter:
        DELETER(struct.deleter)(address)


class KeywordDeviceProducer:
    """A producer of device memory that no gpu_dlpack backend handles: its
    ``__dlpack_device__`` says ``device`` (CUDA by default) and each
    ``__dlpack__`` call hands out a fresh capsule on the device the consumer
    asked for, labelled as the producer chooses, over host memory that the
    layer never reads. It lets the export path for foreign device memory run
    on a machine without a GPU. ``requests`` keeps the keywords of each call,
    ``records`` the records of the capsules it made."""

    def __init__(self, device=(2, 0), flags=0, array=None, answers=None, legacy_only=False, **fields):
        self.device = device
        self.flags = flags
        self.array = np.arange(6.0) if array is None else array
        self.answers = answers  # the device every capsule says, whatever was asked
        self.legacy_only = legacy_only
        self.fields = fields  # more fields for capsules.make
        self.requests = []
        self.records = []

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.requests.append(dict(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy))
        versioned = max_version is not None and max_version[0] >= 1 and not self.legacy_only
        device = self.answers or (tuple(dl_device) if dl_device is not None else self.device)
        capsule, record = make(
            self.array, versioned=versioned, flags=self.flags if versioned else 0, device=device,
            **self.fields,
        )
        self.records.append(record)
        return capsule

    def __dlpack_device__(self):
        return self.device
