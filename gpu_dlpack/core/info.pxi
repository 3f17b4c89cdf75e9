# inspect(capsule) in one call: what _capsule.read returns, a CapsuleInfo of
# an unconsumed capsule, under the same snapshot rule (the struct, shape and
# strides copied while the GIL, or the capsule's critical section on a
# free-threaded build, is held and no Python code runs, so a consumer on
# another thread cannot free them halfway; consumed before: the Python read
# raises ConsumedCapsuleError). Every case it does not read (not an
# unconsumed DLPack capsule, another major version, a malformed header) is
# the Python read's, which words the error.

cimport cython
from cpython.object cimport PyObject, PyObject_GenericGetDict
from cpython.ref cimport Py_INCREF
from cpython.exc cimport PyErr_Clear
from cpython.long cimport PyLong_FromVoidPtr
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.dict cimport PyDict_SetItem
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcpy

from dlpack cimport (
    DLTensor, DLDataType, DLPackVersion, DLManagedTensor, DLManagedTensorVersioned, MAX_NDIM, PyBaseObject_Type,
    pointer_or_null,
)


cdef union CapsuleHead:
    DLManagedTensorVersioned v
    DLManagedTensor l


cdef inline object device_of(int32_t type, int32_t id):
    """The Device of (type, id), made by Python once per pair and kept (a
    Device is immutable); None when Python refuses it."""
    if type < 0 or type >= 64 or not ((state.device_types >> type) & 1) or id < 0:
        return None
    cdef PyObject **slot = &state.devices[type][id] if id < 16 else NULL
    if slot != NULL and slot[0] != NULL:
        return <object>slot[0]
    device = new_device(type, id)
    if slot != NULL and device is not None:
        Py_INCREF(device)
        slot[0] = <PyObject *>device
    return device


cdef object new_device(int32_t type, int32_t id):
    try:
        return (<object>state.device_class)((type, id))
    except BaseException:  # refused: the Python read says why
        return None


cdef inline object version_of(DLPackVersion version):
    """(major, minor), kept for the versions of major 1"""
    cdef PyObject **slot = &state.versions_seen[version.minor] if version.major == 1 and version.minor < 16 else NULL
    if slot != NULL and slot[0] != NULL:
        return <object>slot[0]
    v = (version.major, version.minor)
    if slot != NULL:
        Py_INCREF(v)
        slot[0] = <PyObject *>v
    return v


cdef inline object dtype_of(DLDataType dt):
    """(code, bits, lanes), kept for one lane of whole bytes"""
    cdef int nbytes = bit_index(dt.bits)
    cdef PyObject **slot = &state.dtypes_seen[dt.code][nbytes] if dt.lanes == 1 and dt.code < 32 and nbytes else NULL
    if slot != NULL and slot[0] != NULL:
        return <object>slot[0]
    v = (dt.code, dt.bits, dt.lanes)
    if slot != NULL:
        Py_INCREF(v)
        slot[0] = <PyObject *>v
    return v


cdef inline tuple int64s(const int64_t *values, int n):
    cdef tuple t = PyTuple_New(n)
    cdef int i
    cdef object v
    for i in range(n):
        v = values[i]
        Py_INCREF(v)
        PyTuple_SET_ITEM(t, i, v)
    return t


cdef inline object read_info(object capsule):
    if state.py_impl == NULL or state.info_type == NULL or state.device_class == NULL:
        return hand_back1(b"read", capsule)  # refused before set_python
    cdef CapsuleHead head
    cdef int64_t shape[MAX_NDIM]
    cdef int64_t strides[MAX_NDIM]
    cdef int versioned = -1
    cdef bint readable = False
    cdef void *ptr = NULL
    cdef DLTensor *t
    with cython.critical_section(capsule):
        versioned = kind_of(<PyObject *>capsule)
        if versioned >= 0:
            ptr = pointer_or_null(<PyObject *>capsule, VERSIONED if versioned else LEGACY)
        if ptr != NULL:
            memcpy(&head, ptr, sizeof(DLManagedTensorVersioned) if versioned else sizeof(DLManagedTensor))
            t = tensor_of(&head, versioned)
            readable = ((not versioned or head.v.version.major == 1) and 0 <= t.ndim <= MAX_NDIM and
                        (t.ndim == 0 or t.shape != NULL))
            if readable and t.ndim > 0:
                memcpy(shape, t.shape, sizeof(int64_t) * <size_t>t.ndim)
                if t.strides != NULL:
                    memcpy(strides, t.strides, sizeof(int64_t) * <size_t>t.ndim)
    if ptr == NULL:
        PyErr_Clear()
    if not readable:
        return hand_back1(b"read", capsule)  # raises what is wrong
    t = tensor_of(&head, versioned)
    device = device_of(t.device.device_type, t.device.device_id)
    if device is None:
        return hand_back1(b"read", capsule)
    name = <object>(state.str_versioned if versioned else state.str_legacy)
    if versioned:
        version = version_of(head.v.version)
        flags = head.v.flags
    else:
        version = None
        flags = 0
    dl_dtype = dtype_of(t.dtype)
    shape_ = int64s(shape, t.ndim)
    strides_ = None if t.strides == NULL else int64s(strides, t.ndim)
    byte_offset = t.byte_offset
    data = PyLong_FromVoidPtr(t.data)
    # What _capsule._capsule_info makes: object.__new__(CapsuleInfo), the
    # dataclass's fields in the new instance's dict, without its __init__.
    # The dict is the instance's own, asked of it (PyObject_GenericGetDict)
    # and filled in place: from CPython 3.13 a plain class keeps its
    # attributes in inline values, which a dict installed with
    # PyObject_GenericSetDict would bypass, so that lookups found none of the
    # fields there. object.__new__ rather than tp_alloc alone: on 3.11 it
    # gives the instance inline values too, so the dict asked of it shares
    # the class's keys and takes the ten fields without growing (read costs
    # 0.27 us instead of 0.32 us there; within 3% either way on 3.10, 3.12
    # and 3.13).
    info = PyBaseObject_Type.tp_new(state.info_type, (), NULL)
    fields = PyObject_GenericGetDict(info, NULL)
    PyDict_SetItem(fields, <object>state.info_keys[0], name)
    PyDict_SetItem(fields, <object>state.info_keys[1], versioned != 0)
    PyDict_SetItem(fields, <object>state.info_keys[2], version)
    PyDict_SetItem(fields, <object>state.info_keys[3], flags)
    PyDict_SetItem(fields, <object>state.info_keys[4], device)
    PyDict_SetItem(fields, <object>state.info_keys[5], dl_dtype)
    PyDict_SetItem(fields, <object>state.info_keys[6], shape_)
    PyDict_SetItem(fields, <object>state.info_keys[7], strides_)
    PyDict_SetItem(fields, <object>state.info_keys[8], byte_offset)
    PyDict_SetItem(fields, <object>state.info_keys[9], data)
    return info


@cython.embedsignature.format("clinic")
def read(capsule, /):
    """The CapsuleInfo of an unconsumed capsule (inspect), read in one step."""
    return read_info(capsule)

