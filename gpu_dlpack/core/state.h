/* The core's state, one struct: what Python tells the core (configure), what
 * it keeps of that, the names and arguments module setup makes once, and the
 * CUDA runtime calls Python binds (bind_runtime); and the
 * hand-back to Python of every case the core does not run (state.c). */

#ifndef GPU_DLPACK_CORE_STATE_H
#define GPU_DLPACK_CORE_STATE_H

#include "dlpack.h"

/* The CUDA runtime calls, as CuPy's runtime module publishes them in its
 * __pyx_capi__ (Cython's C signatures: runtime.pxi checks each capsule's
 * name). Python binds them (bind_runtime); the tests bind stand-ins. */
typedef int (*get_device_t)(int);
typedef PyObject *(*set_device_t)(int, int);
typedef PyObject *(*event_record_t)(intptr_t, intptr_t, int);
typedef PyObject *(*stream_wait_t)(intptr_t, intptr_t, int, void *);
typedef PyObject *(*memcpy_async_t)(intptr_t, intptr_t, size_t, int, intptr_t, int);
typedef PyObject *(*stream_sync_t)(intptr_t, int);

enum { RT_GET_DEVICE, RT_SET_DEVICE, RT_EVENT_RECORD, RT_STREAM_WAIT, RT_MEMCPY_ASYNC, RT_STREAM_SYNC, RT_ENTRIES };

typedef struct {
    get_device_t get_device;
    set_device_t set_device;
    event_record_t event_record;
    stream_wait_t stream_wait;
    memcpy_async_t memcpy_async;
    stream_sync_t stream_sync;
} Runtime;

typedef struct {
    /* what Python tells the core (configure) */
    PyObject *py_impl;            /* dict: name -> the Python implementation */
    PyTypeObject *header_type;    /* _capsule.Header (a tuple subclass) */
    uint64_t device_types;        /* bit t: t is a DLPack device type */
    uint64_t host_types;          /* bit t: host-readable memory */
    uint64_t known_dtypes[32];    /* [code]: bit b-1 set when (code, b bits) is exchanged */
    uint32_t known_128;           /* bit code: (code, 128 bits) is exchanged */
    PyObject *numpy_descr[32][17];/* [code][bytes]: the NumPy dtype, or NULL */
    PyTypeObject *ndarray_type;
    void **numpy_api;
    PyObject *versions_dict;      /* _versions.__dict__ (its verdict cache) */
    PyObject *under_floor;        /* _versions._under_floor: the calls under way with a floor of their own */
    PyObject *produced_version;   /* DLPACK_VERSION, as Python has it */
    PyObject *produced_request;   /* (None, DLPACK_VERSION, None, None): last_request of the C exchange */
    uint64_t version_word;        /* DLPACK_VERSION as written in a capsule */
    int numpy_strides_after_shape;/* NumPy leaves C-order strides out, after the shape */
    int32_t cpu_type;
    PyObject *learn_import;       /* Python: type -> (api capsule, attrs, methods) or None */
    PyObject *exportable_fallback;/* Python: the general Exportable.__dlpack__ */
    PyTypeObject *exportable_class;  /* gpu_dlpack.Exportable */
    PyObject *cpu_device, *cpu_dlpack;  /* the CPU as a Device and as (1, 0) */
    PyObject *plain_dtypes;          /* NumPy dtypes of PLAN_NUMPY (a dict) */
    PyObject *plain_list[32];        /* the same, compared by identity */
    int n_plain;
    int numpy_maxdims;            /* the most dimensions the NumPy in use takes (32 before 2.0) */
    int numpy_layout;             /* NumPy lays out imports and exports as the core does (2.4 and later) */

    PyTypeObject *info_type;      /* _capsule.CapsuleInfo (inspect) */
    PyObject *device_class;       /* _devices.Device */

    /* what the core keeps of it */
    PyObject *devices[64][16];    /* [type][id]: the Device, made once by device_class */
    PyObject *versions_seen[16];  /* [minor]: (1, minor), made once */
    PyObject *dtypes_seen[32][17];/* [code][bytes]: (code, bits, 1), made once */
    PyObject *import_types;       /* dict: type -> ImportEntry capsule or None */
    PyObject *produced_floor;     /* the floor DLPACK_VERSION was accepted under */

    /* names and arguments made once (module setup) */
    PyObject *str_accepted, *str_floor, *str_under_floor, *str_dlpack, *str_dtype, *str_max_version, *str_view;
    PyObject *kw_max_version;     /* ("max_version",) */
    PyObject *ask_versioned;      /* (1, 0): what NumPy is asked */
    PyObject *info_keys[10];      /* CapsuleInfo's fields, in order */
    int set_up;                   /* the above made (setup_once) */
    PyObject *str_legacy, *str_versioned;  /* "dltensor", "dltensor_versioned" */

    /* the CUDA runtime calls (bind_runtime: all or none), and the capsules
     * they come from, held while bound (NULL: unbound) */
    Runtime rt;
    PyObject *rt_owner;
} CoreState;

extern CoreState state;

int configured(void);
PyObject *delegate(const char *name, PyObject *const *args, Py_ssize_t nargs);

#endif
