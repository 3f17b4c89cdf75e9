# The DLPack ABI (1.3) and the core's shared C declarations, declared once
# for every Cython file of the core: the structs are dlpack.h's.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from cpython.object cimport PyObject, PyTypeObject

cdef extern from "dlpack.h":
    ctypedef struct DLDevice:
        int32_t device_type
        int32_t device_id
    ctypedef struct DLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes
    ctypedef struct DLTensor:
        void *data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t *shape
        int64_t *strides
        uint64_t byte_offset
    ctypedef struct DLPackVersion:
        uint32_t major
        uint32_t minor
    ctypedef struct DLManagedTensor:
        DLTensor dl_tensor
        void *manager_ctx
        void (*deleter)(DLManagedTensor *) noexcept
    ctypedef struct DLManagedTensorVersioned:
        DLPackVersion version
        void *manager_ctx
        void (*deleter)(DLManagedTensorVersioned *) noexcept
        uint64_t flags
        DLTensor dl_tensor
    uint64_t FLAG_READ_ONLY

cdef extern from "state.h":
    ctypedef struct CoreState:
        PyObject *py_impl
        PyTypeObject *header_type
        uint64_t device_types
        uint64_t host_types
        uint64_t known_dtypes[32]
        uint32_t known_128
        PyObject *numpy_descr[32][17]
        PyTypeObject *ndarray_type
        void **numpy_api
        PyObject *versions_dict
        PyObject *under_floor
        PyObject *produced_version
        PyObject *produced_request
        uint64_t version_word
        int numpy_strides_after_shape
        int32_t cpu_type
        PyObject *learn_import
        PyObject *exportable_fallback
        PyTypeObject *exportable_class
        PyObject *cpu_device
        PyObject *cpu_dlpack
        PyObject *plain_dtypes
        PyObject *plain_list[32]
        int n_plain
        int numpy_maxdims
        int numpy_layout
        PyTypeObject *info_type
        PyObject *device_class
        PyObject *devices[64][16]
        PyObject *import_types
        PyObject *produced_floor
        PyObject *str_accepted
        PyObject *str_floor
        PyObject *str_under_floor
        PyObject *str_dlpack
        PyObject *str_max_version
        PyObject *str_view
        PyObject *kw_max_version
        PyObject *ask_versioned
    CoreState state
    int configured() except 0

cdef extern from "capsule.h":
    enum: MAX_NDIM  # a constant: it sizes arrays
    int bit_index(unsigned bits) noexcept

# --- capsule.pxi, info.pxi -------------------------------------------------

cdef extern from "state.h":
    # The Python implementation `name` called with the arguments: every case
    # the core does not run goes to it, unchanged.
    object delegate(const char *name, PyObject **args, Py_ssize_t nargs)
    # CoreState's fields only these files read, by their place in the one
    # struct (the declaration above lists the fields the module's face sets).
    PyObject *state_versions_seen "state.versions_seen"[16]
    PyObject *state_dtypes_seen "state.dtypes_seen"[32][17]
    PyObject *state_info_keys "state.info_keys"[10]
    PyObject *state_str_legacy "state.str_legacy"
    PyObject *state_str_versioned "state.str_versioned"
    # What consumer.pxi calls as C calls it: NULL with an error set, handed on.
    PyObject *delegate_raw "delegate"(const char *name, PyObject **args, Py_ssize_t nargs)

# --- consumer.pxi (and the C files above it): the exchange API table -------

cdef extern from "dlpack.h":
    cdef struct DLPackExchangeAPIHeader:
        DLPackVersion version
        DLPackExchangeAPIHeader *prev_api
    ctypedef struct DLPackExchangeAPI:
        DLPackExchangeAPIHeader header
        int (*managed_tensor_allocator)(DLTensor *, DLManagedTensorVersioned **, void *,
                                        void (*)(void *, const char *, const char *) noexcept) noexcept
        int (*managed_tensor_from_py_object_no_sync)(void *, DLManagedTensorVersioned **) noexcept
        int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned *, void **) noexcept
        int (*dltensor_from_py_object_no_sync)(void *, DLTensor *) noexcept
        int (*current_work_stream)(int32_t, int32_t, void **) noexcept

cdef extern from "capsule.h":
    const char *LEGACY
    const char *VERSIONED
    const char *USED_LEGACY
    const char *USED_VERSIONED
    int kind_of(PyObject *capsule) noexcept
    DLTensor *tensor_of(void *ptr, int versioned) noexcept
    bint well_formed(DLTensor *t) noexcept
    bint dtype_known(DLDataType dt) noexcept
    void run_deleter(void *ptr, int versioned) noexcept
    void release_tensor(void *ptr, int versioned) noexcept
    void drop_keeping_error(PyObject *o) noexcept
    const char *EXCHANGED
    const char *EXCHANGED_LEGACY
    const char *EXCHANGE_API_NAME "EXCHANGE_API"  # the module's EXCHANGE_API is a capsule
    enum:
        NDIM_LIMIT "MAX_NDIM"

cdef extern from "consumer.h":
    enum:
        GUARD_METHODS
    ctypedef struct ImportEntry:
        const DLPackExchangeAPI *api
        PyObject *api_owner
        PyObject *attrs
        PyObject *methods
        uint32_t method_codes[GUARD_METHODS]
        PyObject *host_method
        PyObject *host_pieces
        PyObject *host_answer
    int cleared() noexcept

cdef extern from "Python.h":
    # The slots of PyTypeObject called here.
    ctypedef struct TypeSlots "PyTypeObject":
        object (*tp_alloc)(PyTypeObject *type, Py_ssize_t nitems)
        object (*tp_new)(PyTypeObject *type, object args, PyObject *kwargs)
    TypeSlots PyBaseObject_Type  # object
    # The calls whose failure the caller checks (or clears) itself.
    void *pointer_or_null "PyCapsule_GetPointer"(PyObject *capsule, const char *name) noexcept
    const char *name_or_null "PyCapsule_GetName"(PyObject *capsule) noexcept
    int rename "PyCapsule_SetName"(PyObject *capsule, const char *name) noexcept
    bint named "PyCapsule_IsValid"(PyObject *capsule, const char *name) noexcept
    void *as_pointer "PyLong_AsVoidPtr"(object value) noexcept
    unsigned long long as_u64 "PyLong_AsUnsignedLongLong"(object value) noexcept
    unsigned long as_ulong "PyLong_AsUnsignedLong"(object value) noexcept
    int truth "PyObject_IsTrue"(object value) noexcept
