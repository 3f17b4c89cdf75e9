/* The core's state: what Python tells it (configure), and what the
 * producer side keeps; the hand-back to Python (state.c). */

#ifndef GPU_DLPACK_CORE_STATE_H
#define GPU_DLPACK_CORE_STATE_H

#include "dlpack.h"

/* --- what Python tells the core (configure) ------------------------------- */

extern PyObject *py_impl;            /* dict: name -> the Python implementation */
extern PyTypeObject *header_type;    /* _capsule.Header (a tuple subclass) */
extern uint64_t device_types;        /* bit t: t is a DLPack device type */
extern uint64_t host_types;          /* bit t: host-readable memory */
extern uint64_t known_dtypes[32];    /* [code]: bit b-1 set when (code, b bits) is exchanged */
extern uint32_t known_128;           /* bit code: (code, 128 bits) is exchanged */
extern PyObject *numpy_descr[32][17];/* [code][bytes]: the NumPy dtype, or NULL */
extern PyTypeObject *ndarray_type;
extern void **numpy_api;
extern PyObject *versions_dict;      /* _versions.__dict__ (its verdict cache) */
extern PyObject *str_accepted, *str_floor, *str_dlpack, *str_dtype, *str_max_version;
extern PyObject *kw_max_version;     /* ("max_version",) */
extern PyObject *ask_versioned;      /* (1, 0): what NumPy is asked */
extern PyObject *produced_version;   /* DLPACK_VERSION, as Python has it */
extern uint64_t version_word;        /* DLPACK_VERSION as written in a capsule */
extern int32_t cpu_type;
extern PyObject *import_types;       /* dict: type -> ImportEntry capsule or None */
extern PyObject *learn_import;       /* Python: type -> (api capsule, attrs, methods) or None */
extern PyObject *exportable_fallback;/* Python: the general Exportable.__dlpack__ */

extern PyTypeObject *exportable_class;  /* gpu_dlpack.Exportable */
extern PyObject *cpu_device, *cpu_dlpack;  /* the CPU as a Device and as (1, 0) */
extern PyObject *plain_dtypes;          /* NumPy dtypes of PLAN_NUMPY (a dict) */
extern PyObject *plain_list[32];        /* the same, compared by identity */
extern int n_plain;

int configured(void);
PyObject *delegate(const char *name, PyObject *const *args, Py_ssize_t nargs);

#endif
