# The DLPack ABI (1.3, dlpack.h's structs laid out as C lays them out) and
# the core's shared declarations, declared once for every Cython file of the
# core: Cython writes the C of each struct from here.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from cpython.object cimport PyObject, PyTypeObject
from cpython.pycapsule cimport PyCapsule_Destructor

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

cdef extern from "Python.h":
    # The slots of PyTypeObject the core calls, sets or reads beyond Cython's.
    ctypedef struct TypeSlots "PyTypeObject":
        object (*tp_alloc)(PyTypeObject *type, Py_ssize_t nitems)
        object (*tp_new)(PyTypeObject *type, object args, PyObject *kwargs)
        PyObject *tp_dict
        PyObject *(*tp_descr_get)(PyObject *descr, PyObject *obj, PyObject *type)
    # The calls whose failure the caller checks (or clears, or hands on)
    # itself: NULL or -1 comes back as it is, Cython raises nothing.
    void *pointer_or_null "PyCapsule_GetPointer"(PyObject *capsule, const char *name) noexcept
    const char *name_or_null "PyCapsule_GetName"(PyObject *capsule) noexcept
    int rename "PyCapsule_SetName"(PyObject *capsule, const char *name) noexcept
    bint named "PyCapsule_IsValid"(PyObject *capsule, const char *name) noexcept
    PyObject *capsule_or_null "PyCapsule_New"(void *pointer, const char *name, PyCapsule_Destructor destructor) noexcept
    int set_context "PyCapsule_SetContext"(PyObject *capsule, void *context) noexcept
    void *get_context "PyCapsule_GetContext"(PyObject *capsule) noexcept
    long as_long "PyLong_AsLong"(object value) noexcept
    unsigned long long as_u64 "PyLong_AsUnsignedLongLong"(object value) noexcept
    unsigned long as_ulong "PyLong_AsUnsignedLong"(object value) noexcept
    PyObject *PyObject_Vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) noexcept
    PyObject *PyObject_VectorcallMethod(PyObject *name, PyObject *const *args, size_t nargsf, PyObject *kwnames) noexcept
    size_t PY_VECTORCALL_ARGUMENTS_OFFSET
    PyObject *raw_getattr "PyObject_GetAttr"(PyObject *o, PyObject *name) noexcept
    PyObject *raw_compare "PyObject_RichCompare"(PyObject *a, PyObject *b, int op) noexcept
    int raw_is_true "PyObject_IsTrue"(PyObject *o) noexcept
    int raw_set_traceback "PyException_SetTraceback"(PyObject *exc, PyObject *tb) noexcept

cdef extern from *:
    # The new reference a C call returned, from here Cython's (a cast: it
    # costs nothing); NULL: the error the call left set, raised on.
    object take "(PyObject *)"(PyObject *ref)
