# cython: language_level=3, binding=False, embedsignature=True, embedsignature.format=clinic
"""The compiled hot path of gpu_dlpack."""

# The module's face: the policy Python puts in force, what the core
# forgets, and module setup. The concepts are one file
# each in core/, included below in floor order, lowest first
# (docs/internals/core.md).

# What the core uses of Python's C API, libc, NumPy and DLPack, for every file
# of core/ (each included into this one module).
cimport cython
cimport numpy as cnp
from cpython.dict cimport PyDict_GetItem, PyDict_GetItemWithError
from cpython.exc cimport (
    PyErr_Clear, PyErr_ExceptionMatches, PyErr_Fetch, PyErr_NoMemory, PyErr_NormalizeException, PyErr_Occurred,
    PyErr_Restore, PyErr_SetString,
)
from cpython.getargs cimport PyArg_ParseTuple
from cpython.list cimport PyList_GET_SIZE
from cpython.long cimport (
    PyLong_AsLong, PyLong_AsLongAndOverflow, PyLong_AsUnsignedLong, PyLong_AsUnsignedLongLong, PyLong_AsVoidPtr,
    PyLong_CheckExact, PyLong_FromVoidPtr,
)
from cpython.mem cimport PyMem_Calloc, PyMem_Free, PyMem_Malloc
from cpython.object cimport Py_EQ, Py_TYPE, PyObject, PyObject_IsTrue, PyObject_RichCompareBool, PyTypeObject
from cpython.pycapsule cimport (
    PyCapsule_CheckExact, PyCapsule_Destructor, PyCapsule_GetName, PyCapsule_GetPointer, PyCapsule_IsValid,
    PyCapsule_New,
)
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.ref cimport Py_CLEAR, Py_DECREF, Py_INCREF, Py_XDECREF, Py_XINCREF
from cpython.set cimport PySet_Contains
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from cpython.type cimport PyType_IsSubtype, PyType_Modified
from cpython.unicode cimport PyUnicode_CheckExact, PyUnicode_CompareWithASCIIString
from libc.stdint cimport (
    INT32_MAX, INT32_MIN, int32_t, int64_t, intptr_t, UINT32_MAX, uint32_t, uint64_t, uint8_t, uintptr_t,
)
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy, memset, strcmp
from dlpack cimport (
    as_long, as_u64, as_ulong, capsule_or_null, DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned,
    DLPackExchangeAPI, DLPackExchangeAPIHeader, DLPackVersion, DLTensor, FLAG_READ_ONLY, get_context, kDLCPU,
    MAX_NDIM, name_or_null, named, pointer_or_null, PY_VECTORCALL_ARGUMENTS_OFFSET, PyObject_Vectorcall,
    PyObject_VectorcallMethod, raw_compare, raw_getattr, raw_is_true, raw_set_traceback,
    rename, set_context, take, TypeSlots,
)

# NumPy's C API, through its own headers (cnp): its table is loaded here,
# once per load of the module. A NumPy that cannot be imported, or whose C
# API is older than the one the core was built for, is the core's
# ImportError.
cnp.import_array()


cdef const char *NOT_CONFIGURED = (b"gpu_dlpack._core is not configured: import gpu_dlpack, which configures it, "
                                   b"instead of calling the core directly")


@cython.final
cdef class Policy:
    """Policy(*, from_dlpack, host_capsule, host_export, current_stream, exportable_fallback, learn_import, errors, exportable_class, header_type, capsule_info, device_class, cpu_device, known, numpy_dtypes, plain, host_types, numpy_maxdims, numpy_layout, numpy_strides_after_shape, versions, host_consumers)
--

What the package decided that the core reads: one object, made once by
_wiring from the modules that own each fact and put in force by
configure(). Its attributes are read-only; a change of policy is a new
Policy.

from_dlpack, host_capsule, host_export, current_stream: the Python function
of each case the core hands back; exportable_fallback: the general
Exportable.__dlpack__; learn_import: a producer type's import plan (or
None); errors: the namespace of _errors, whose factories word every error
the core raises; exportable_class: gpu_dlpack.Exportable; header_type:
_capsule.Header; capsule_info: _capsule.CapsuleInfo; device_class: Device,
which makes the Device of a (type, id) pair; cpu_device: the CPU as a
Device; known: every (code, bits) pair exchanged; numpy_dtypes: {(code,
bits): dtype} of the pairs the core imports and adapts; plain: (dtype,
code, bits) of each NumPy dtype whose capsule the core makes as NumPy
makes it (compared by identity, at most 32); host_types: the device types
whose memory the core's NumPy imports take; numpy_maxdims, numpy_layout,
numpy_strides_after_shape: NumPy as the core uses it (the most dimensions
it takes, whether it lays capsules out as the core does, whether it leaves
C-order strides out after the shape); versions: the version check in force
(_versions.VERDICT); host_consumers: the libraries convert lands on the host
with nothing to correct, whose plain cases its front makes."""
    cdef readonly object from_dlpack, host_capsule, host_export, current_stream, exportable_fallback, learn_import
    cdef readonly dict errors
    cdef readonly type exportable_class, header_type, capsule_info, device_class
    cdef readonly object cpu_device, cpu_dlpack
    cdef readonly frozenset host_consumers
    cdef readonly tuple plain_dtypes
    cdef readonly object versions
    cdef readonly int numpy_maxdims
    cdef readonly bint numpy_layout, numpy_strides_after_shape
    cdef readonly bint made
    # The tables the core reads in C, made by __init__ from the above.
    cdef uint64_t host_types                 # bit t (below 64): host-readable memory
    cdef uint64_t known_dtypes[32]           # [code]: bit b-1 set when (code, b bits) is exchanged
    cdef uint32_t known_128                  # bit code: (code, 128 bits) is exchanged
    cdef dict numpy_dtypes                   # holds numpy_descr's dtypes
    cdef PyObject *numpy_descr[32][17]       # [code][bytes]: the NumPy dtype, or NULL
    cdef PyObject *plain_list[32]            # plain_dtypes, compared by identity...
    cdef DLDataType plain_pairs[32]          # ...each with its DLPack pair
    cdef int n_plain

    def __init__(self, *, from_dlpack, host_capsule, host_export, current_stream, exportable_fallback,
                 learn_import, dict errors not None, type exportable_class not None, type header_type not None,
                 type capsule_info not None, type device_class not None, cpu_device, known, numpy_dtypes, plain,
                 host_types, int numpy_maxdims, bint numpy_layout, bint numpy_strides_after_shape, versions,
                 frozenset host_consumers not None):
        cdef int code, bits, nbytes
        if self.made:
            raise TypeError("a Policy is made once: make a new one")
        if numpy_maxdims < 1 or numpy_maxdims > MAX_NDIM:
            raise ValueError(f"numpy_maxdims must be within [1, {MAX_NDIM}]")
        triples = tuple(plain)
        if len(triples) > 32:
            raise ValueError("at most 32 plain dtypes")
        for _, code, bits in triples:
            if not (0 <= code < 32 and bit_index(<unsigned>bits)):
                raise ValueError("a plain dtype's pair is a DLPack code under 32 and a whole number of bytes")
        self.numpy_dtypes = dict(numpy_dtypes)
        for code, bits in known:
            if 0 <= code < 32:
                if 1 <= bits <= 64:
                    self.known_dtypes[code] |= 1ULL << (bits - 1)
                elif bits == 128:
                    self.known_128 |= 1U << code
        for (code, bits), value in self.numpy_dtypes.items():
            nbytes = bit_index(<unsigned>bits)
            if 0 <= code < 32 and nbytes:
                self.numpy_descr[code][nbytes] = <PyObject *>value  # held by numpy_dtypes
        self.plain_dtypes = tuple(t[0] for t in triples)
        for dtype, code, bits in triples:
            self.plain_pairs[self.n_plain].code = code
            self.plain_pairs[self.n_plain].bits = bits
            self.plain_pairs[self.n_plain].lanes = 1
            self.plain_list[self.n_plain] = <PyObject *>dtype  # held by plain_dtypes
            self.n_plain += 1
        for code in host_types:
            if 0 <= code < 64:
                self.host_types |= 1ULL << code
        self.from_dlpack, self.host_capsule, self.host_export = from_dlpack, host_capsule, host_export
        self.current_stream, self.exportable_fallback, self.learn_import = current_stream, exportable_fallback, learn_import
        self.errors, self.exportable_class, self.header_type = errors, exportable_class, header_type
        self.capsule_info, self.device_class = capsule_info, device_class
        self.cpu_device, self.cpu_dlpack = cpu_device, cpu_device.dlpack
        self.numpy_maxdims, self.numpy_layout = numpy_maxdims, numpy_layout
        self.numpy_strides_after_shape = numpy_strides_after_shape
        self.versions, self.host_consumers = versions, host_consumers
        self.made = True


# The policy in force (configure()); until then an empty one, which every
# entry point refuses (configured()).
cdef Policy policy = Policy.__new__(Policy)


cdef int configured() except 0:
    """1 once Python has put its policy in force (configure()): every entry
    point refuses before then, since what it would read (the Python
    implementation, the tables) is not there yet."""
    if not policy.made:
        PyErr_SetString(RuntimeError, NOT_CONFIGURED)
        return 0
    return 1


# The hand-back to Python: every case the core does not run goes, unchanged,
# to the Python function the policy names.
cdef PyObject *hand_back(object fn, PyObject **args, Py_ssize_t nargs) noexcept:
    """fn (a function of the policy, held by the caller for the call) called
    with the arguments: a new reference, or NULL with the error set."""
    if fn is None:
        PyErr_SetString(RuntimeError, NOT_CONFIGURED)
        return NULL
    return PyObject_Vectorcall(<PyObject *>fn, args, nargs, NULL)


cdef object layer_error(str factory, tuple args):
    """The layer's error made by _errors' `factory` (its words), to raise;
    the core's refusal to run unconfigured where _errors was never given
    (the core loaded by its file, without the package)."""
    if policy.errors is None:
        return RuntimeError(NOT_CONFIGURED.decode())
    return policy.errors[factory](*args)


include "capsule.pxi"
include "info.pxi"
include "versions.pxi"
include "adapt.pxi"
include "runtime.pxi"
include "consumer.pxi"
include "numpy_export.pxi"
include "exportable.pxi"
include "exchange_api.pxi"
include "export.pxi"

def configure(Policy new not None, /):
    """Put a Policy in force: the core reads it from its next call, and
    forgets what it kept of the one before (the Devices it made, each
    producer type's import plan)."""
    global policy, verdict
    if not new.made:
        raise TypeError("configure takes a Policy made by Policy(...)")
    if not issubclass(new.exportable_class, ExportableBase):
        raise TypeError("exportable_class must subclass ExportableBase")
    if not issubclass(new.header_type, tuple):
        raise TypeError("header_type must be a tuple subclass")
    cdef Verdict versions = new.versions if isinstance(new.versions, Verdict) else None
    if versions is None or versions.produced is None or versions.first_floor is None or versions.thread is None:
        raise TypeError("versions must be a Verdict made with produced, first_floor and thread")
    old = policy  # dropped after the new one is in force (its finalizers may run Python)
    forget()
    forget_devices()
    verdict = versions
    policy = new


def forget():
    """Forget what Python said of each producer type."""
    import_types.clear()


set_up_exchange_api()
# The addresses of the core's owning capsule destructors, by kind.
OWNING_DESTRUCTORS = (PyLong_FromVoidPtr(<void *>legacy_capsule_destructor),
                      PyLong_FromVoidPtr(<void *>capsule_destructor))
