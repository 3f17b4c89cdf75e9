# The DLPack ABI (1.3, dlpack.h's structs laid out as C lays them out) and
# the core's shared declarations, declared once for every Cython file of the
# core: Cython writes the C of each struct from here.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from cpython.object cimport PyObject, PyTypeObject

# --- DLPack 1.3 ---------------------------------------------------------------

cdef struct DLDevice:
    int32_t device_type
    int32_t device_id

cdef struct DLDataType:
    uint8_t code
    uint8_t bits
    uint16_t lanes

cdef struct DLTensor:
    void *data
    DLDevice device
    int32_t ndim
    DLDataType dtype
    int64_t *shape
    int64_t *strides
    uint64_t byte_offset

cdef struct DLPackVersion:
    uint32_t major
    uint32_t minor

cdef struct DLManagedTensor:
    DLTensor dl_tensor
    void *manager_ctx
    void (*deleter)(DLManagedTensor *) noexcept

cdef struct DLManagedTensorVersioned:
    DLPackVersion version
    void *manager_ctx
    void (*deleter)(DLManagedTensorVersioned *) noexcept
    uint64_t flags
    DLTensor dl_tensor

cdef enum:
    FLAG_READ_ONLY = 1
    kDLCPU = 1  # dlpack.h's device type of the CPU's memory
    MAX_NDIM = 64  # the most dimensions the core reads (a constant: it sizes arrays)

cdef struct DLPackExchangeAPIHeader:
    DLPackVersion version
    DLPackExchangeAPIHeader *prev_api

cdef struct DLPackExchangeAPI:
    DLPackExchangeAPIHeader header
    int (*managed_tensor_allocator)(DLTensor *, DLManagedTensorVersioned **, void *,
                                    void (*)(void *, const char *, const char *) noexcept) noexcept
    int (*managed_tensor_from_py_object_no_sync)(void *, DLManagedTensorVersioned **) noexcept
    int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned *, void **) noexcept
    int (*dltensor_from_py_object_no_sync)(void *, DLTensor *) noexcept
    int (*current_work_stream)(int32_t, int32_t, void **) noexcept

# --- the core's state (_core.pyx defines it: `state`) --------------------------

cdef struct CoreState:
    # what Python tells the core (the set_* setters of _core.pyx)
    PyObject *py_impl              # dict: name -> the Python implementation
    PyObject *errors               # vars(_errors): the layer's errors, each made by its factory
    PyTypeObject *header_type      # _capsule.Header (a tuple subclass)
    uint64_t host_types            # bit t (below 64): host-readable memory
    uint64_t known_dtypes[32]      # [code]: bit b-1 set when (code, b bits) is exchanged
    uint32_t known_128             # bit code: (code, 128 bits) is exchanged
    PyObject *numpy_descr[32][17]  # [code][bytes]: the NumPy dtype, or NULL
    int numpy_strides_after_shape  # NumPy leaves C-order strides out, after the shape
    int32_t cpu_type
    PyObject *learn_import         # Python: type -> (api capsule, attrs, methods) or None
    PyObject *exportable_fallback  # Python: the general path of Exportable.__dlpack__
    PyTypeObject *exportable_class # gpu_dlpack.Exportable
    PyObject *cpu_device           # the CPU as a Device ...
    PyObject *cpu_dlpack           # ... and as (1, 0)
    PyObject *plain_dtypes         # NumPy dtypes of PLAN_NUMPY (a tuple)
    PyObject *plain_list[32]       # the same, compared by identity
    int n_plain
    int numpy_maxdims              # the most dimensions the NumPy in use takes (32 before 2.0)
    int numpy_layout               # NumPy lays out imports and exports as the core does (2.4 and later)
    PyTypeObject *info_type        # _capsule.CapsuleInfo (inspect)
    PyObject *device_class         # _devices.Device
    PyObject *host_consumers       # frozenset: the names convert lands on the host with nothing to correct

    # what the core keeps of it
    PyObject *devices[64][16]      # [type][id]: the Device, made once by device_class
    PyObject *versions_seen[16]    # [minor]: (1, minor), made once
    PyObject *dtypes_seen[32][17]  # [code][bytes]: (code, bits, 1), made once
    PyObject *import_types         # dict: type -> ImportEntry capsule or None

    # names and arguments made once (module setup)
    PyObject *str_dlpack
    PyObject *str_max_version
    PyObject *str_view
    PyObject *kw_max_version       # ("max_version",)
    PyObject *ask_versioned        # (1, 0): what NumPy is asked
    PyObject *str_legacy           # "dltensor"
    PyObject *str_versioned        # "dltensor_versioned"
    int set_up                     # the above made (setup_once)

cdef extern from "Python.h":
    # The slots of PyTypeObject the core calls, sets or reads beyond Cython's.
    ctypedef struct TypeSlots "PyTypeObject":
        object (*tp_alloc)(PyTypeObject *type, Py_ssize_t nitems)
        object (*tp_new)(PyTypeObject *type, object args, PyObject *kwargs)
        PyObject *tp_dict
    # The calls whose failure the caller checks (or clears) itself.
    void *pointer_or_null "PyCapsule_GetPointer"(PyObject *capsule, const char *name) noexcept
    const char *name_or_null "PyCapsule_GetName"(PyObject *capsule) noexcept
    int rename "PyCapsule_SetName"(PyObject *capsule, const char *name) noexcept
    bint named "PyCapsule_IsValid"(PyObject *capsule, const char *name) noexcept
    void *as_pointer "PyLong_AsVoidPtr"(object value) noexcept
    unsigned long long as_u64 "PyLong_AsUnsignedLongLong"(object value) noexcept
    unsigned long as_ulong "PyLong_AsUnsignedLong"(object value) noexcept
    int truth "PyObject_IsTrue"(object value) noexcept
    PyObject *unicode_or_null "PyUnicode_FromString"(const char *u) noexcept
    PyObject *item_or_null "PyDict_GetItemWithError"(PyObject *d, PyObject *key) noexcept
    PyObject *call_or_null "PyObject_Vectorcall"(PyObject *callable, PyObject *const *args, size_t nargsf,
                                                 PyObject *kwnames) noexcept
    PyObject *format_error "PyErr_Format"(PyObject *exception, const char *format, ...) noexcept
